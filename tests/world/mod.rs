//! The gpuhost test world: a synthetic Oracle Linux 8/9/10 package universe built with the real
//! rpmbuild/createrepo_c, and throwaway install roots made from it, for integration tests that
//! run the real `gpuhost` binary against real rpm and dnf.
//!
//! Use it from an integration test with
//! ```ignore
//! #[path = "world/mod.rs"]
//! mod world;
//! use world::{Os, Root, World, UEK8_OLD};
//! ```
//! See tests/world/README.md for what the world contains.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::Hasher;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Kernel releases in the world, as `uname -r` prints them. The package version-release is the
/// same string without `.x86_64` (see [`evr`]).
/// OL8 UEK7, older (ol8_UEKR7, with kernel-uek-devel).
pub const UEK8_OLD: &str = "5.15.0-200.131.27.el8uek.x86_64";
/// OL8 UEK7, newest in ol8_UEKR7 (with kernel-uek-devel).
pub const UEK8_NEW: &str = "5.15.0-204.147.6.2.el8uek.x86_64";
/// OL8 UEK7 whose kernel RPM exists only in `rpms/extra/` and whose kernel-uek-devel exists nowhere.
pub const UEK8_NO_DEVEL: &str = "5.15.0-206.153.7.el8uek.x86_64";
/// OL8 RHCK, newest (ol8_baseos_latest; kernel-devel and kernel-headers of this version). Oracle's
/// RHCK builds carry Oracle's `.0.1` (RHEL's is `4.18.0-553.16.1.el8_10`), as every RHCK here:
/// NVIDIA's precompiled kmods of the world are named and built for RHEL's (tests/world/FIDELITY.md).
pub const RHCK8: &str = "4.18.0-553.16.1.0.1.el8_10.x86_64";
/// OL8 RHCK, older (ol8_baseos_latest; kernel-devel).
pub const RHCK8_OLD: &str = "4.18.0-513.5.1.0.1.el8_9.x86_64";
/// OL9 UEK7 (ol9_UEKR7, with kernel-uek-devel).
pub const UEK9: &str = "5.15.0-206.153.7.el9uek.x86_64";
/// OL9 RHCK (ol9_baseos_latest; kernel-devel, kernel-devel-matched, kernel-headers).
pub const RHCK9: &str = "5.14.0-427.13.1.0.1.el9_4.x86_64";
/// OL9 UEK8 (6.12, ol9_UEKR8): built with gcc 14.2.1 (gcc-toolset-14, which kernel-uek-devel
/// requires); the kernel split into kernel-uek (meta), -core, -modules-core, -modules.
pub const UEK9_8: &str = "6.12.0-100.28.2.2.el9uek.x86_64";
/// OL10 UEK8 (6.12, ol10_UEKR8), older and newest: built with OL10's system gcc 14 (no
/// toolset); split like OL9's UEK8.
pub const UEK10_OLD: &str = "6.12.0-100.28.2.2.el10uek.x86_64";
pub const UEK10: &str = "6.12.0-103.40.4.3.el10uek.x86_64";
/// OL10 UEK8 whose kernel RPMs exist only in `rpms/extra/` and whose headers exist nowhere.
pub const UEK10_NO_DEVEL: &str = "6.12.0-105.51.5.el10uek.x86_64";
/// OL10 RHCK (ol10_baseos_latest; kernel-devel, kernel-devel-matched, kernel-headers).
pub const RHCK10: &str = "6.12.0-55.9.1.0.1.el10_0.x86_64";
/// aarch64 (Grace) roots ([`Os::Ol9Aarch64`], [`Os::Ol10Aarch64`]): the UEK only, in its 4k
/// build (`kernel-uek`) and its 64k-page build (`kernel-uek64k`, `uname -r` ending `.64k`), each
/// with its devel package (`kernel-uek-devel`, `kernel-uek64k-devel`). OL9: UEK R7U3 (ol9_UEKR7).
pub const UEK9_ARM: &str = "5.15.0-306.177.4.1.el9uek.aarch64";
pub const UEK9_ARM_64K: &str = "5.15.0-306.177.4.1.el9uek.aarch64.64k";
/// OL10 aarch64: UEK8 (ol10_UEKR8), split like the x86_64 one.
pub const UEK10_ARM: &str = "6.12.0-103.40.4.3.el10uek.aarch64";
pub const UEK10_ARM_64K: &str = "6.12.0-103.40.4.3.el10uek.aarch64.64k";

/// File names of the NVIDIA CUDA local repo packages in `rpms/cuda-local/`.
pub const CUDA_LOCAL_EL8_12_2: &str = "cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm";
pub const CUDA_LOCAL_EL8_12_4: &str = "cuda-repo-rhel8-12-4-local-12.4.1_550.54.15-1.x86_64.rpm";
pub const CUDA_LOCAL_EL9_12_2: &str = "cuda-repo-rhel9-12-2-local-12.2.2_535.104.05-1.x86_64.rpm";
/// CUDA 12.6 / driver 560 (el8), CUDA 13.0 / driver 580 (el9): default stream open-dkms.
pub const CUDA_LOCAL_EL8_12_6: &str = "cuda-repo-rhel8-12-6-local-12.6.3_560.35.05-1.x86_64.rpm";
pub const CUDA_LOCAL_EL9_13_0: &str = "cuda-repo-rhel9-13-0-local-13.0.1_580.82.07-1.x86_64.rpm";
/// NVIDIA's driver-only local repo packages (default stream open-dkms).
pub const DRIVER_LOCAL_EL9_570: &str = "nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm";
pub const DRIVER_LOCAL_EL8_580: &str = "nvidia-driver-local-repo-rhel8-580.82.07-1.0-1.x86_64.rpm";
/// The rest of the day-2 branch chain (issue 23): 550 on el9, 570 on el8.
pub const CUDA_LOCAL_EL9_12_4: &str = "cuda-repo-rhel9-12-4-local-12.4.1_550.54.15-1.x86_64.rpm";
pub const DRIVER_LOCAL_EL8_570: &str = "nvidia-driver-local-repo-rhel8-570.124.06-1.0-1.x86_64.rpm";
/// NVIDIA's EL10 driver-only local repos, under the names NVIDIA's download page gives them
/// (no version-release); not modular.
pub const DRIVER_LOCAL_EL10_580: &str = "nvidia-driver-local-repo-rhel10-580.126.09.x86_64.rpm";
pub const DRIVER_LOCAL_EL10_590: &str = "nvidia-driver-local-repo-rhel10-590.48.01.x86_64.rpm";
/// An aarch64 package holding the x86_64 inner repo (the wrong-arch case).
pub const CUDA_LOCAL_EL8_12_2_AARCH64: &str =
    "cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.aarch64.rpm";
/// NVIDIA's aarch64 local repo packages, inner packages built for aarch64 (R580).
pub const DRIVER_LOCAL_EL9_580_AARCH64: &str =
    "nvidia-driver-local-repo-rhel9-580.82.07-1.0-1.aarch64.rpm";
pub const CUDA_LOCAL_EL9_13_0_AARCH64: &str =
    "cuda-repo-rhel9-13-0-local-13.0.1_580.82.07-1.aarch64.rpm";
pub const DRIVER_LOCAL_EL10_580_AARCH64: &str =
    "nvidia-driver-local-repo-rhel10-580.126.09-1.0-1.aarch64.rpm";

/// The package version-release of a kernel release (`uname -r` without `.x86_64`, `.aarch64`,
/// `.aarch64.64k`).
pub fn evr(kver: &str) -> &str {
    let k = kver.strip_suffix(".64k").unwrap_or(kver);
    k.strip_suffix(".x86_64")
        .or_else(|| k.strip_suffix(".aarch64"))
        .unwrap_or(k)
}

/// Whether this machine can make and run the world's aarch64 roots: the world has its aarch64
/// releases (Debian's arm64 .debs were there at its build: `scripts/deps.sh test`) and the
/// kernel hands aarch64 programs to qemu-user-static (tests/world/binfmt.sh registers it).
/// When not, an aarch64 test is skipped with the reason, except in CI
/// (GPUHOST_REQUIRE_ALL_TOOLS), where it fails.
pub fn aarch64_ready() -> bool {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let ready = READY.get_or_init(|| {
        let world = World::get();
        if let Ok(why) = fs::read_to_string(world.dir().join("aarch64.missing")) {
            return Err(why.trim().to_string());
        }
        let out = Command::new("bash")
            .arg(src_dir().join("binfmt.sh"))
            .output()
            .map_err(|e| format!("binfmt.sh: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    });
    match ready {
        Ok(()) => true,
        Err(why) if std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_some() => {
            panic!("the aarch64 test world is needed: {why}")
        }
        Err(why) => {
            eprintln!("skipped: {why}");
            false
        }
    }
}

/// The source folder of the test world (tests/world).
pub fn src_dir() -> PathBuf {
    workspace().join("tests").join("world")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

/// The built package universe (`<workspace>/target/testworld`).
pub struct World {
    dir: PathBuf,
    home: PathBuf,
}

static WORLD: OnceLock<World> = OnceLock::new();

impl World {
    /// Builds the world once per test run (cached across runs by build-world.sh's stamp);
    /// safe to call from parallel threads and parallel test processes.
    pub fn get() -> &'static World {
        WORLD.get_or_init(|| {
            let target = workspace().join("target");
            fs::create_dir_all(&target).unwrap();
            let dir = target.join("testworld");
            let lock = fs::File::create(target.join("testworld.lock")).unwrap();
            lock.lock().unwrap();
            let out = Command::new("bash")
                .arg(src_dir().join("build-world.sh"))
                .arg(&dir)
                .output()
                .unwrap();
            drop(lock);
            if !out.status.success() {
                panic!(
                    "build-world.sh failed ({}):\n{}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            World {
                home: dir.join("home"),
                dir,
            }
        })
    }

    /// The world folder: `repos/<ol8|ol9>/<repoid>/`, `rpms/extra/`, `rpms/cuda-local/`, `home/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A HOME whose `.rpmmacros` sets `%_dbpath /var/lib/rpm` (use it for every rpm/dnf/gpuhost run).
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// A repo folder, e.g. `repo(Os::Ol8, "docker-ce-stable")`.
    pub fn repo(&self, os: Os, repoid: &str) -> PathBuf {
        self.dir.join("repos").join(os.name()).join(repoid)
    }

    /// A file in `rpms/cuda-local/` (e.g. [`CUDA_LOCAL_EL8_12_2`], `tampered/<name>`,
    /// `not-an-rpm/<name>`, `gzip/<name>`, `xz/<name>`, `zstd/<name>` (the 12.2 package with a
    /// compressed payload), `SHA256SUMS`).
    pub fn cuda_local(&self, name: &str) -> PathBuf {
        self.dir.join("rpms").join("cuda-local").join(name)
    }

    /// The SHA-256 of the local repo package `name` in `rpms/cuda-local/`, as its
    /// `SHA256SUMS` lists it (what NVIDIA publishes beside its packages).
    pub fn sha256(&self, name: &str) -> String {
        let sums = fs::read_to_string(self.cuda_local("SHA256SUMS")).unwrap_or_default();
        let sum = sums
            .lines()
            .find(|l| l.ends_with(name))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_default()
            .to_string();
        assert_eq!(sum.len(), 64, "no SHA-256 of {name} in SHA256SUMS");
        sum
    }

    /// A file in `rpms/extra/`, e.g. `kernel-uek-5.15.0-206.153.7.el8uek.x86_64.rpm`.
    pub fn extra_rpm(&self, name: &str) -> PathBuf {
        self.dir.join("rpms").join("extra").join(name)
    }

    /// The certificate (DER, self-signed, CN [`NVIDIA_TEST_KEY_CN`]) that stands in for NVIDIA's
    /// precompiled-kmod key `NVIDIA2019-public_key.der`: every precompiled `kmod-nvidia-*`
    /// module of the world carries a signature made with it (sign-file, sha256). Made with
    /// openssl at each world build (`keys/NVIDIA-test-public_key.der`).
    pub fn nvidia_test_cert(&self) -> PathBuf {
        self.dir.join("keys").join("NVIDIA-test-public_key.der")
    }

    /// The private key (PEM, unencrypted) of [`World::nvidia_test_cert`]
    /// (`keys/NVIDIA-test-private_key.priv`).
    pub fn nvidia_test_key(&self) -> PathBuf {
        self.dir.join("keys").join("NVIDIA-test-private_key.priv")
    }
}

/// Signer (certificate CN) of the world's precompiled NVIDIA modules ([`World::nvidia_test_cert`]).
pub const NVIDIA_TEST_KEY_CN: &str = "NVIDIA test precompiled-kmod key (gpuhost world)";

/// Signer of what DKMS 3.x builds when no key is configured: it makes `/var/lib/dkms/mok.key`
/// and `mok.pub` (DER) itself with `openssl req -subj "/CN=DKMS module signing key"`.
pub const DKMS_AUTO_KEY_CN: &str = "DKMS module signing key";

/// The firmware's Secure Boot and Setup Mode variables (efivarfs names).
pub const SECURE_BOOT_VAR: &str =
    "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";
pub const SETUP_MODE_VAR: &str =
    "/sys/firmware/efi/efivars/SetupMode-8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// The marker that ends a module with an appended signature (`tail -c 28`).
pub const MODULE_SIG_MAGIC: &[u8] = b"~Module signature appended~\n";

/// Makes a self-signed test key pair with the real openssl, as DKMS and the RHEL docs do:
/// `DIR/<name>.priv` (PEM key) and `DIR/<name>.der` (DER certificate, CN `cn`). Returns both.
pub fn openssl_test_key(dir: &Path, name: &str, cn: &str) -> (PathBuf, PathBuf) {
    fs::create_dir_all(dir).unwrap();
    let key = dir.join(format!("{name}.priv"));
    let cert = dir.join(format!("{name}.der"));
    let out = Command::new("openssl")
        .args(["req", "-new", "-x509", "-nodes", "-days", "36500"])
        .arg("-subj")
        .arg(format!("/CN={cn}"))
        .args(["-newkey", "rsa:2048", "-keyout"])
        .arg(&key)
        .args(["-outform", "DER", "-out"])
        .arg(&cert)
        .output()
        .expect("openssl (apt-get install -y openssl)");
    assert!(
        out.status.success(),
        "openssl req: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (key, cert)
}

/// The bytes of a module file, decompressed when it ends in `.xz` (the host's `xz -dc`).
pub fn module_bytes(path: &Path) -> Vec<u8> {
    if path.extension().is_some_and(|e| e == "xz") {
        let out = Command::new("xz").arg("-dc").arg(path).output().unwrap();
        assert!(out.status.success(), "xz -dc {}", path.display());
        out.stdout
    } else {
        fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

/// Whether a module file (`.ko` or `.ko.xz`) ends with [`MODULE_SIG_MAGIC`].
pub fn has_appended_signature(path: &Path) -> bool {
    module_bytes(path).ends_with(MODULE_SIG_MAGIC)
}

/// Whether the real openssl verifies a module's appended PKCS#7 signature against a certificate
/// (DER): the module is split like the kernel does (content, PKCS#7, 12-byte `module_signature`
/// whose last 4 bytes are the big-endian PKCS#7 length, magic) and checked with `openssl cms
/// -verify -binary -nointern -noverify` (the signature, not the certificate chain). An oracle
/// for tests; false when the module has no signature or another key made it.
pub fn openssl_verifies_module(module: &Path, cert_der: &Path) -> bool {
    let data = module_bytes(module);
    let Some(end) = data.len().checked_sub(MODULE_SIG_MAGIC.len()) else {
        return false;
    };
    if !data.ends_with(MODULE_SIG_MAGIC) || end < 12 {
        return false;
    }
    let info = &data[end - 12..end];
    let sig_len = u32::from_be_bytes([info[8], info[9], info[10], info[11]]) as usize;
    let Some(content_end) = (end - 12).checked_sub(sig_len) else {
        return false;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (p7, content, pem) = (
        tmp.path().join("sig.p7"),
        tmp.path().join("module"),
        tmp.path().join("cert.pem"),
    );
    fs::write(&p7, &data[content_end..end - 12]).unwrap();
    fs::write(&content, &data[..content_end]).unwrap();
    let conv = Command::new("openssl")
        .args(["x509", "-inform", "DER", "-in"])
        .arg(cert_der)
        .arg("-out")
        .arg(&pem)
        .output()
        .unwrap();
    assert!(
        conv.status.success(),
        "{}: not a DER certificate",
        cert_der.display()
    );
    Command::new("openssl")
        .args(["cms", "-verify", "-binary", "-inform", "DER", "-in"])
        .arg(&p7)
        .arg("-content")
        .arg(&content)
        .arg("-certfile")
        .arg(&pem)
        .args(["-nointern", "-noverify", "-out", "/dev/null"])
        .output()
        .unwrap()
        .status
        .success()
}

/// One field of the host's `modinfo -F FIELD FILE` (Debian's kmod 30 reads PKCS#7 module
/// signatures: `signer`, `sig_key`, `sig_hashalgo`, `sig_id`; also `version`). None when empty.
pub fn modinfo(path: &Path, field: &str) -> Option<String> {
    let out = Command::new("modinfo")
        .args(["-F", field])
        .arg(path)
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Os {
    Ol8,
    Ol9,
    Ol10,
    /// Oracle Linux 9 and 10 for aarch64 (Grace): packages built for aarch64, whose programs
    /// run through qemu-user-static; check [`aarch64_ready`] first.
    Ol9Aarch64,
    Ol10Aarch64,
    Ubuntu,
}

impl Os {
    /// `ol8`, `ol9`, `ol9-aarch64`, `ubuntu` (the mkroot.sh --os value and the folder under
    /// `repos/`).
    pub fn name(self) -> &'static str {
        match self {
            Os::Ol8 => "ol8",
            Os::Ol9 => "ol9",
            Os::Ol10 => "ol10",
            Os::Ol9Aarch64 => "ol9-aarch64",
            Os::Ol10Aarch64 => "ol10-aarch64",
            Os::Ubuntu => "ubuntu",
        }
    }
}

/// A throwaway install root (a temp folder, removed on drop) made by mkroot.sh.
pub struct Root {
    tmp: tempfile::TempDir,
    os: Os,
    kernels: Vec<String>,
    default_kernel: Option<String>,
    extra_rpms: Vec<String>,
}

impl Root {
    /// A fresh root for `os` with the given kernels (kernel releases, e.g. [`UEK8_OLD`]) installed
    /// with rpm, BLS entries, grubenv (default: the newest kernel given), /etc/sysconfig/kernel,
    /// the OS's repos enabled and dnf.conf.
    pub fn new(os: Os, kernels: &[&str]) -> Root {
        Root::make(
            os,
            kernels.iter().map(|k| k.to_string()).collect(),
            None,
            Vec::new(),
        )
    }

    fn make(
        os: Os,
        kernels: Vec<String>,
        default_kernel: Option<String>,
        extra_rpms: Vec<String>,
    ) -> Root {
        let world = World::get();
        let tmp = tempfile::Builder::new()
            .prefix("gpuhost-root-")
            .tempdir()
            .unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg(src_dir().join("mkroot.sh"))
            .arg(world.dir())
            .arg(tmp.path())
            .args(["--os", os.name()]);
        for k in &kernels {
            cmd.args(["--kernel", k]);
        }
        if let Some(d) = &default_kernel {
            cmd.args(["--default-kernel", d]);
        }
        for e in &extra_rpms {
            cmd.args(["--extra-rpm", e]);
        }
        let out = cmd.output().unwrap();
        if !out.status.success() {
            panic!(
                "mkroot.sh failed: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Root {
            tmp,
            os,
            kernels,
            default_kernel,
            extra_rpms,
        }
    }

    /// Remakes the root with `kver` as the default boot kernel (grubenv saved_entry and
    /// /etc/sysconfig/kernel DEFAULTKERNEL).
    pub fn with_default_kernel(self, kver: &str) -> Root {
        Root::make(
            self.os,
            self.kernels.clone(),
            Some(kver.to_string()),
            self.extra_rpms.clone(),
        )
    }

    /// Remakes the root with a non-repo RPM also installed with rpm: a package name or file name
    /// from `rpms/extra/` or `rpms/cuda-local/` (e.g. `cuda-repo-rhel8-12-2-local`).
    pub fn with_extra_rpm(self, name: &str) -> Root {
        let mut extra = self.extra_rpms.clone();
        extra.push(name.to_string());
        Root::make(
            self.os,
            self.kernels.clone(),
            self.default_kernel.clone(),
            extra,
        )
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub fn os(&self) -> Os {
        self.os
    }

    /// `ROOT/<rel>` (rel may start with `/`).
    pub fn join(&self, rel: &str) -> PathBuf {
        self.path().join(rel.trim_start_matches('/'))
    }

    /// What the kernel's scriptlets do on a real host after `dnf install kernel-uek`
    /// (`kernel-install add` → a BLS entry; `UPDATEDEFAULT=yes` → grubby makes it the default).
    /// The world's kernel packages are scriptlet-free, so the test does it.
    pub fn kernel_install_add(&self, kver: &str) {
        let mid = self.read("/etc/machine-id").trim().to_string();
        self.write(
            &format!("/boot/loader/entries/{mid}-{kver}.conf"),
            &format!(
                "title Oracle Linux Server ({kver}) 8.10\nversion {kver}\nlinux /vmlinuz-{kver}\ninitrd /initramfs-{kver}.img $tuned_initrd\noptions $kernelopts $tuned_params\nid ol-20240612000000-{kver}\ngrub_users $grub_users\ngrub_arg --unrestricted\ngrub_class kernel\n"
            ),
        );
        let env = self.read("/boot/grub2/grubenv");
        let mut text: String = env
            .lines()
            .map(|l| {
                if l.starts_with("saved_entry=") {
                    format!("saved_entry={mid}-{kver}\n")
                } else if l.starts_with('#') && l.len() > 30 {
                    String::new()
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        text.push_str(&"#".repeat(1024 - text.len()));
        self.write("/boot/grub2/grubenv", &text);
    }

    /// Reads `ROOT/<rel>` as text (panics when missing).
    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// Writes `ROOT/<rel>`, creating parent folders.
    pub fn write(&self, rel: &str, content: &str) {
        let p = self.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    /// Runs the root's upstream DKMS chrooted the way gpuhost does (`unshare --fork --pid
    /// --mount-proc=ROOT/proc chroot ROOT dkms ARGS`), e.g. `["install", "-m", "nvidia", "-v",
    /// "535.104.05", "-k", RHCK8]`. DKMS reads `/etc/dkms/framework.conf.d/*.conf` of the root.
    pub fn dkms(&self, args: &[&str]) -> Output {
        Command::new("unshare")
            .args(["--fork", "--pid"])
            .arg(format!("--mount-proc={}", self.join("/proc").display()))
            .arg("chroot")
            .arg(self.path())
            .arg("dkms")
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs rpm with `--root ROOT` and the world's HOME.
    pub fn rpm(&self, args: &[&str]) -> Output {
        Command::new("rpm")
            .env("HOME", World::get().home())
            .arg("--root")
            .arg(self.path())
            .args(args)
            .output()
            .unwrap()
    }

    /// The default boot entry grubenv names (`saved_entry=`).
    pub fn saved_entry(&self) -> String {
        self.read("/boot/grub2/grubenv")
            .lines()
            .find_map(|l| l.strip_prefix("saved_entry="))
            .unwrap_or_default()
            .to_string()
    }

    /// The firmware's answer: SecureBoot=1 (SetupMode=0, which mokutil --sb-state also reads).
    pub fn secure_boot_on(&self) {
        fs::create_dir_all(self.join("/sys/firmware/efi/efivars")).unwrap();
        fs::write(self.join(SECURE_BOOT_VAR), [6, 0, 0, 0, 1]).unwrap();
        fs::write(self.join(SETUP_MODE_VAR), [6, 0, 0, 0, 0]).unwrap();
    }

    /// Certificates in an EFI variable of the root (`MokListRT`: enrolled; `MokNew`: pending),
    /// as the real mokutil reads them.
    pub fn efivar(&self, name: &str, certs: &[&[u8]]) {
        let mut data = vec![6, 0, 0, 0];
        data.extend(gpuhost_host::secureboot::efi_signature_list(certs));
        fs::write(
            self.join(&gpuhost_host::secureboot::efivar_path(name)),
            data,
        )
        .unwrap();
    }

    /// Runs the real dnf against this root the way gpuhost must (tests/world/dnf.sh: the root's
    /// own repo files and dnf.conf, baseurls rewritten into the root, --noplugins). For setup
    /// and for cross-checking what gpuhost did.
    pub fn dnf(&self, args: &[&str]) -> Output {
        Command::new("bash")
            .arg(src_dir().join("dnf.sh"))
            .arg(World::get().dir())
            .arg(self.path())
            .args(args)
            .output()
            .unwrap()
    }

    /// Like [`Root::dnf`] but panics unless dnf succeeds.
    pub fn dnf_ok(&self, args: &[&str]) -> String {
        let out = self.dnf(args);
        if !out.status.success() {
            panic!(
                "dnf {args:?} failed: {}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sorted `rpm -qa` output (NAME-VERSION-RELEASE.ARCH lines).
    pub fn rpmdb_snapshot(&self) -> String {
        let out = self.rpm(&["-qa"]);
        assert!(
            out.status.success(),
            "rpm -qa: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines.join("\n")
    }

    /// VERSION-RELEASE of an installed package (the highest when several are installed, e.g.
    /// kernels); None when it is not installed.
    pub fn installed(&self, name: &str) -> Option<String> {
        self.installed_all(name)
            .into_iter()
            .max_by(|a, b| rpmvercmp(a, b))
    }

    /// VERSION-RELEASE of every installed instance of a package, sorted oldest first.
    pub fn installed_all(&self, name: &str) -> Vec<String> {
        let out = self.rpm(&["-q", "--qf", "%{VERSION}-%{RELEASE}\\n", name]);
        if !out.status.success() {
            return Vec::new();
        }
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        v.sort_by(|a, b| rpmvercmp(a, b));
        v
    }

    /// Every path under the root, sorted, with its type, mode, size and a content hash
    /// (symlinks with their target; not followed). Compare two snapshots to prove a run left
    /// the root untouched. The rpm database's sqlite sidecar files (`rpmdb.sqlite-shm`,
    /// `-wal`) are left out: any `rpm -q` touches them (gpuhost reads the root's architecture
    /// from its database); the database itself is compared by [`Root::rpmdb_snapshot`].
    pub fn tree_snapshot(&self) -> String {
        let mut lines = Vec::new();
        walk(self.path(), self.path(), &mut lines);
        lines.retain(|l| !l.contains("/rpmdb.sqlite-"));
        lines.sort();
        lines.join("\n")
    }

    /// Like [`Root::tree_snapshot`], of any directory: e.g. a stand-in for the build host's tree
    /// outside the root, to prove a run left it untouched.
    pub fn dir_snapshot(dir: &Path) -> String {
        let mut lines = Vec::new();
        walk(dir, dir, &mut lines);
        lines.sort();
        lines.join("\n")
    }

    /// The NVIDIA module files modprobe would load for `kver` (the `nvidia*` entries of the
    /// `modules.dep` the real depmod wrote), as root paths: `/lib/modules/<kver>/extra/…`.
    pub fn nvidia_module_files(&self, kver: &str) -> Vec<String> {
        let dep = fs::read_to_string(self.join(&format!("/lib/modules/{kver}/modules.dep")))
            .unwrap_or_default();
        dep.lines()
            .filter_map(|l| l.split(':').next())
            .filter(|p| {
                p.rsplit('/')
                    .next()
                    .is_some_and(|b| b.starts_with("nvidia"))
            })
            .map(|p| format!("/lib/modules/{kver}/{p}"))
            .collect()
    }

    /// The modinfo version (host kmod) of the `nvidia` module modprobe would load for `kver`.
    pub fn nvidia_module_version(&self, kver: &str) -> Option<String> {
        let file = self.nvidia_module_files(kver).into_iter().find(|f| {
            let base = f.rsplit('/').next().unwrap_or_default();
            base == "nvidia.ko" || base.starts_with("nvidia.ko.")
        })?;
        modinfo(&self.join(&file), "version")
    }

    /// Creates a fake sysfs PCI device `ROOT/sys/bus/pci/devices/<bdf>/{vendor,device,class}`,
    /// formatted like the kernel (`0x10de\n`, `0x2335\n`, `0x030200\n`).
    pub fn add_pci_device(&self, bdf: &str, vendor: u16, device: u16, class: u32) {
        let d = self.join(&format!("sys/bus/pci/devices/{bdf}"));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
        fs::write(d.join("device"), format!("0x{device:04x}\n")).unwrap();
        fs::write(d.join("class"), format!("0x{class:06x}\n")).unwrap();
    }

    pub fn gpuhost_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuhost"));
        cmd.env("HOME", World::get().home())
            .args(args)
            .arg("--root")
            .arg(self.path());
        cmd
    }

    /// Runs the gpuhost binary with `args` then `--root ROOT`, HOME = the world's home.
    pub fn gpuhost(&self, args: &[&str]) -> Output {
        self.gpuhost_cmd(args).output().unwrap()
    }

    /// Like [`Root::gpuhost`], under `strace -f -e trace=execve`; also returns the basenames of
    /// every program successfully exec'd (gpuhost itself first), or None when strace is not
    /// installed (`apt-get install -y strace`).
    pub fn gpuhost_traced(&self, args: &[&str]) -> (Output, Option<Vec<String>>) {
        let strace_ok = Command::new("strace")
            .arg("-V")
            .output()
            .map(|o| o.status.success());
        if !matches!(strace_ok, Ok(true)) {
            if std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_some() {
                panic!("strace is needed (apt-get install -y strace)");
            }
            return (self.gpuhost(args), None);
        }
        let log = tempfile::NamedTempFile::new().unwrap();
        let inner = self.gpuhost_cmd(args);
        let mut cmd = Command::new("strace");
        cmd.args(["-f", "-qq", "-e", "trace=execve", "-o"])
            .arg(log.path())
            .arg("--");
        cmd.arg(inner.get_program()).args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let out = cmd.output().unwrap();
        let text = fs::read_to_string(log.path()).unwrap();
        (out, Some(parse_execs(&text)))
    }
}

fn parse_execs(strace_log: &str) -> Vec<String> {
    let mut progs = Vec::new();
    for line in strace_log.lines() {
        let Some(i) = line.find("execve(\"") else {
            continue;
        };
        if line.contains("= -1 ") {
            continue;
        }
        let rest = &line[i + 8..];
        let Some(end) = rest.find('"') else { continue };
        let path = &rest[..end];
        progs.push(path.rsplit('/').next().unwrap_or(path).to_string());
    }
    progs
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let rel = p.strip_prefix(base).unwrap().display().to_string();
        let md = fs::symlink_metadata(&p).unwrap();
        let mode = md.permissions().mode() & 0o7777;
        if md.file_type().is_symlink() {
            let t = fs::read_link(&p).unwrap();
            out.push(format!("{rel} link {mode:o} -> {}", t.display()));
        } else if md.is_dir() {
            out.push(format!("{rel} dir {mode:o}"));
            walk(base, &p, out);
        } else if !md.is_file() {
            // A FIFO or a device: named, never opened (a FIFO would block the snapshot).
            out.push(format!("{rel} other {mode:o}"));
        } else {
            let mut h = DefaultHasher::new();
            let mut buf = Vec::new();
            fs::File::open(&p)
                .and_then(|mut f| f.read_to_end(&mut buf))
                .unwrap_or_default();
            h.write(&buf);
            out.push(format!(
                "{rel} file {mode:o} {} {:016x}",
                md.len(),
                h.finish()
            ));
        }
    }
}

/// rpm's version comparison (rpmvercmp) applied to whole VERSION-RELEASE strings: the agent's own.
pub use gpuhost_host::rpm::vercmp as rpmvercmp;

/// A directory holding a wrapper named `tool`, to put first on gpuhost's PATH: a `/bin/sh`
/// script that `script` writes, given the path of the real `tool` (which it usually runs).
pub fn wrap_tool(tool: &str, script: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let real = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    assert!(!real.is_empty(), "{tool} is not installed");
    let p = dir.path().join(tool);
    fs::write(&p, script(&real)).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A profile for world roots: the built-in `name` (e.g. `ol8-uek`) with Docker CE and the
/// NVIDIA Container Toolkit taken from the world's repos inside the root.
pub fn profile(name: &str) -> String {
    src_dir()
        .join("profiles")
        .join(format!("{name}.toml"))
        .display()
        .to_string()
}

/// The path of the world's local repo package `name` (a file name under `rpms/cuda-local/`),
/// as `--set driver.local_repo_rpm=` takes it.
pub fn local(name: &str) -> String {
    World::get().cuda_local(name).display().to_string()
}

/// A profile file `site.toml` holding `text`, in a folder of its own (removed when the
/// returned guard is dropped; more files may go beside it), and its path as `--profile` takes it.
pub fn site_toml(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("site.toml");
    fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let shown = path.display().to_string();
    (dir, shown)
}

/// `rpm ARGS` on this machine (a query of package files, `-qp`), with a database of its own
/// that goes with the call: Debian's rpm would otherwise make one in the caller's HOME
/// (`~/.rpmdb`, issue 54: the suite leaves nothing in HOME).
pub fn host_rpm<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let db = tempfile::tempdir().unwrap();
    Command::new("rpm")
        .arg("--dbpath")
        .arg(db.path())
        .args(args)
        .output()
        .unwrap()
}

/// The gpuhost binary run with `args` alone (no root, the caller's HOME).
pub fn gpuhost(args: &[&str]) -> Output {
    run(Command::new(env!("CARGO_BIN_EXE_gpuhost")).args(args))
}

/// `cmd`'s output; a command that cannot start fails the test, naming it.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

// What a gpuhost run printed, for assertions.

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn report(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// The arguments of a JSON `apply` of `profile` with one of the world's NVIDIA local repo
/// packages (`repo`, a file name under `rpms/cuda-local/`), restricted to the steps `only`,
/// then `extra`.
pub fn apply_args(profile: &str, repo: &str, only: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["apply", "--format", "json", "--profile", profile, "--set"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.push(format!(
        "driver.local_repo_rpm={}",
        World::get().cuda_local(repo).display()
    ));
    args.extend(["--only".to_string(), only.to_string()]);
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// A converged run's report: every step unchanged, skipped or deferred.
pub fn assert_converged(r: &serde_json::Value) {
    for s in r["steps"].as_array().into_iter().flatten() {
        let outcome = s["outcome"].as_str().unwrap_or_default();
        assert!(
            ["unchanged", "skipped", "deferred"].contains(&outcome),
            "{s:#}"
        );
    }
}

pub fn step<'a>(r: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    r["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id} in {r:#}"))
}

/// dnf's module state of `module` in the root (`/etc/dnf/modules.d/<module>.module`): (stream,
/// profiles, state), empty strings where unset or when dnf has no state for it.
pub fn module_state(root: &Root, module: &str) -> (String, String, String) {
    let text = fs::read_to_string(root.join(&format!("/etc/dnf/modules.d/{module}.module")))
        .unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.split_once('=').filter(|(key, _)| key.trim() == k))
            .map_or(String::new(), |(_, v)| v.trim().to_string())
    };
    (field("stream"), field("profiles"), field("state"))
}

/// A change as a report gives it (`work (reason)`) less its reason: the last parenthesised
/// group, which a work may hold groups of its own before.
pub fn work_of(change: &str) -> String {
    let mut depth = 0usize;
    for (i, c) in change.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return change[..i].trim_end().to_string();
                }
            }
            _ => {}
        }
    }
    change.to_string()
}

/// Each step of a report with its outcome as `apply` reports it (`plan`'s would-change is
/// apply's changed) and the work of each of its changes: what `plan` and `apply` of the same
/// arguments on the same root must agree on (issue 54).
pub fn outcomes_and_work(rep: &serde_json::Value) -> Vec<(String, String, Vec<String>)> {
    rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let outcome = match s["outcome"].as_str().unwrap_or_default() {
                "would-change" => "changed",
                o => o,
            };
            let works = s["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_str)
                .map(work_of)
                .collect();
            (
                s["id"].as_str().unwrap_or_default().to_string(),
                outcome.to_string(),
                works,
            )
        })
        .collect()
}

/// `gpuhost plan ARGS`, then `gpuhost apply ARGS` (each with `--format json`) on `root`: plan's
/// exit code is apply's, and its steps, outcomes and the work of every change are apply's.
/// Apply's exit code and report.
pub fn plan_is_apply(root: &Root, args: &[&str]) -> (i32, serde_json::Value) {
    let run = |cmd: &str| {
        let mut a = vec![cmd, "--format", "json"];
        a.extend_from_slice(args);
        let o = root.gpuhost(&a);
        (code(&o), report(&o), stderr(&o))
    };
    let (pc, plan, perr) = run("plan");
    let (ac, apply, aerr) = run("apply");
    assert_eq!(
        pc, ac,
        "plan exit {pc}, apply {ac}: {args:?}\n{plan:#}\n{perr}\n{apply:#}\n{aerr}"
    );
    let (p, a) = (outcomes_and_work(&plan), outcomes_and_work(&apply));
    let differ: Vec<String> = p
        .iter()
        .zip(&a)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| format!("plan:  {x:?}\napply: {y:?}"))
        .collect();
    assert!(
        differ.is_empty() && p.len() == a.len(),
        "plan said otherwise than apply did: {args:?}\n{}",
        differ.join("\n")
    );
    (ac, apply)
}

/// A copy of the world's local repo package `name` whose payload `edit` changed (it gets the
/// unpacked tree), rebuilt by rpmbuild under the same name, version, release and file name,
/// in `dir`: a package as a site might have altered it, digests intact.
pub fn repacked(name: &str, dir: &std::path::Path, edit: impl FnOnce(&std::path::Path)) -> String {
    let src = World::get().cuda_local(name);
    let tree = dir.join("tree");
    std::fs::create_dir_all(&tree).unwrap_or_else(|e| panic!("{e}"));
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("rpm2cpio \"$1\" | cpio -idm --quiet")
        .arg("sh")
        .arg(&src)
        .current_dir(&tree)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    edit(&tree);
    let o = host_rpm([
        std::ffi::OsStr::new("-qp"),
        "--qf".as_ref(),
        "%{NAME}\\n%{VERSION}\\n%{RELEASE}\\n%{ARCH}\\n".as_ref(),
        src.as_os_str(),
    ]);
    let q = String::from_utf8_lossy(&o.stdout).to_string();
    let [n, v, r, a]: [&str; 4] = q
        .lines()
        .collect::<Vec<_>>()
        .try_into()
        .unwrap_or_else(|l| panic!("rpm -qp: {l:?}"));
    let mut files = Vec::new();
    let mut stack = vec![tree.clone()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("{e}"));
        if meta.is_dir() {
            for e in std::fs::read_dir(&p)
                .unwrap_or_else(|e| panic!("{e}"))
                .flatten()
            {
                stack.push(e.path());
            }
        } else if let Ok(rel) = p.strip_prefix(&tree) {
            files.push(format!("/{}", rel.display()));
        }
    }
    let spec = dir.join("repacked.spec");
    std::fs::write(
        &spec,
        format!(
            "Name: {n}\nVersion: {v}\nRelease: {r}\nSummary: repacked\nLicense: MIT\nAutoReqProv: no\n%define _build_id_links none\n%global __os_install_post %{{nil}}\n%description\nrepacked\n%install\ncp -a {}/. %{{buildroot}}/\n%files\n{}\n",
            tree.display(),
            files.join("\n")
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = std::process::Command::new("rpmbuild")
        .args(["-bb", "--target", a, "--define"])
        .arg(format!("_topdir {}", dir.join("build").display()))
        .arg(&spec)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rpm = dir.join(format!("build/RPMS/{a}/{name}"));
    assert!(rpm.exists(), "rpmbuild made no {}", rpm.display());
    rpm.display().to_string()
}
