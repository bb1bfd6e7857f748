//! Tests of the test world itself (tests/world): roots can be made, dnf resolves and installs
//! into them, module metadata is seen by dnf, scriptlets run in the root.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#[path = "world/mod.rs"]
mod world;

use std::process::Command;
use world::{
    Os, Root, World, RHCK8, RHCK9, UEK10_ARM, UEK10_ARM_64K, UEK8_NEW, UEK8_NO_DEVEL, UEK8_OLD,
    UEK9,
};

#[test]
fn world_builds_and_has_rpmmacros() {
    let w = World::get();
    let m = std::fs::read_to_string(w.home().join(".rpmmacros")).unwrap();
    assert!(m.contains("%_dbpath /var/lib/rpm"));
    assert!(w
        .repo(Os::Ol8, "ol8_UEKR7")
        .join("repodata/repomd.xml")
        .is_file());
    assert!(w.cuda_local(world::CUDA_LOCAL_EL8_12_2).is_file());
}

#[test]
fn ol8_root_has_release_kernels_and_boot_config() {
    let r = Root::new(Os::Ol8, &[UEK8_OLD, RHCK8]);
    let osr = r.read("/etc/os-release");
    assert!(
        osr.contains("ID=\"ol\"")
            && osr.contains("VERSION_ID=\"8.10\"")
            && osr.contains("PLATFORM_ID=\"platform:el8\"")
    );
    assert_eq!(
        r.installed("kernel-uek").as_deref(),
        Some(world::evr(UEK8_OLD))
    );
    assert_eq!(r.installed("kernel").as_deref(), Some(world::evr(RHCK8)));
    assert!(r
        .join(&format!("/lib/modules/{UEK8_OLD}/vmlinuz"))
        .is_file());
    let mid = r.read("/etc/machine-id").trim().to_string();
    // newest kernel given is the default
    assert!(r
        .read("/boot/grub2/grubenv")
        .contains(&format!("saved_entry={mid}-{UEK8_OLD}\n")));
    assert!(r
        .read("/etc/sysconfig/kernel")
        .contains("DEFAULTKERNEL=kernel-uek"));
    assert!(r
        .join(&format!("/boot/loader/entries/{mid}-{RHCK8}.conf"))
        .is_file());
    let r = r.with_default_kernel(RHCK8);
    let mid = r.read("/etc/machine-id").trim().to_string();
    assert!(r
        .read("/boot/grub2/grubenv")
        .contains(&format!("saved_entry={mid}-{RHCK8}\n")));
    assert!(r
        .read("/etc/sysconfig/kernel")
        .contains("DEFAULTKERNEL=kernel\n"));
    assert_eq!(r.read("/boot/grub2/grubenv").len(), 1024);
}

#[test]
fn ol9_and_ubuntu_roots() {
    let r = Root::new(Os::Ol9, &[UEK9, RHCK9]);
    assert!(r.read("/etc/os-release").contains("VERSION_ID=\"9.4\""));
    assert_eq!(r.installed("kernel-uek").as_deref(), Some(world::evr(UEK9)));
    let u = Root::new(Os::Ubuntu, &[]);
    assert!(u.read("/etc/os-release").contains("ID=ubuntu"));
    assert_eq!(u.rpmdb_snapshot(), "");
}

#[test]
fn dnf_installs_uek_headers_into_ol8_root() {
    let r = Root::new(Os::Ol8, &[UEK8_OLD, UEK8_NEW]);
    let before = r.rpmdb_snapshot();
    r.dnf_ok(&["-y", "install", &format!("kernel-uek-devel-{UEK8_OLD}")]);
    assert_eq!(
        r.installed("kernel-uek-devel").as_deref(),
        Some(world::evr(UEK8_OLD))
    );
    assert!(r
        .read(&format!("/usr/src/kernels/{UEK8_OLD}/.config"))
        .contains("CONFIG_GCC_VERSION=110201"));
    assert_ne!(before, r.rpmdb_snapshot());
    // both kernels stay installed (installonly)
    assert_eq!(r.installed_all("kernel-uek").len(), 2);
}

#[test]
fn header_package_missing_for_extra_kernel() {
    let r = Root::new(Os::Ol8, &[UEK8_NO_DEVEL]);
    assert_eq!(
        r.installed("kernel-uek").as_deref(),
        Some(world::evr(UEK8_NO_DEVEL))
    );
    let out = r.dnf(&[
        "-y",
        "install",
        &format!("kernel-uek-devel-{UEK8_NO_DEVEL}"),
    ]);
    assert!(!out.status.success());
}

#[test]
fn tree_snapshot_sees_changes() {
    let r = Root::new(Os::Ol8, &[UEK8_OLD]);
    let a = r.tree_snapshot();
    assert_eq!(a, r.tree_snapshot());
    r.add_pci_device("0000:18:00.0", 0x10de, 0x2335, 0x030200);
    assert_eq!(
        r.read("/sys/bus/pci/devices/0000:18:00.0/class"),
        "0x030200\n"
    );
    assert_ne!(a, r.tree_snapshot());
}

#[test]
fn rpmvercmp_orders_like_rpm() {
    use std::cmp::Ordering::*;
    assert_eq!(
        world::rpmvercmp("5.15.0-204.147.6.2.el8uek", "5.15.0-200.131.27.el8uek"),
        Greater
    );
    assert_eq!(world::rpmvercmp("1.0~rc1", "1.0"), Less);
    assert_eq!(world::rpmvercmp("1.0a", "1.0"), Greater);
    assert_eq!(world::rpmvercmp("2.0", "2.0"), Equal);
}

#[test]
fn cuda_local_repo_module_streams_via_dnf() {
    let r = Root::new(Os::Ol8, &[RHCK8]).with_extra_rpm("cuda-repo-rhel8-12-2-local");
    assert!(r
        .join("/etc/yum.repos.d/cuda-rhel8-12-2-local.repo")
        .is_file());
    let out = r.dnf_ok(&["module", "list", "nvidia-driver"]);
    for s in [
        "latest ",
        "latest-dkms [d]",
        "open-dkms",
        "535 ",
        "535-dkms",
        "535-open",
    ] {
        assert!(
            out.contains(&format!("nvidia-driver {s}")),
            "stream {s} missing in:\n{out}"
        );
    }
    assert!(out.contains("default [d], fm, ks, src"), "{out}");
}

/// The real upstream DKMS runs in roots: NVIDIA's `%post` (dkms add/build/install `|| :`) builds
/// for the running (host) kernel only and fails quietly; `dkms install -k` builds for a root
/// kernel through the world's kbuild; UEK7 (gcc 11) fails with the system gcc 8.5 until
/// `/etc/dkms/<module>.conf` names the toolset; the open flavour registers as `nvidia-open`.
#[test]
fn real_dkms_builds_per_kernel_and_fails_for_uek_with_system_gcc() {
    let r = Root::new(Os::Ol8, &[UEK8_OLD, RHCK8]).with_extra_rpm("cuda-repo-rhel8-12-2-local");
    r.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-devel-{UEK8_OLD}"),
        &format!("kernel-devel-{RHCK8}"),
        "gcc",
        "gcc-c++",
    ]);
    r.dnf_ok(&["-y", "module", "install", "nvidia-driver:535-open"]);
    assert!(r.installed("kmod-nvidia-open-dkms").is_some());
    let dkms = |k: &str| {
        Command::new("unshare")
            .args(["--fork", "--pid"])
            .arg(format!("--mount-proc={}", r.join("/proc").display()))
            .arg("chroot")
            .arg(r.path())
            .args([
                "dkms",
                "install",
                "-m",
                "nvidia-open",
                "-v",
                "535.104.05",
                "-k",
                k,
            ])
            .output()
            .unwrap()
    };
    dkms(RHCK8);
    let ko = r.join(&format!("/lib/modules/{RHCK8}/extra/nvidia.ko.xz"));
    assert!(ko.is_file());
    let v = Command::new("modinfo")
        .args(["-F", "version"])
        .arg(&ko)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), "535.104.05");
    assert!(r
        .read(&format!("/lib/modules/{RHCK8}/modules.dep"))
        .contains("extra/nvidia.ko.xz:"));
    assert!(r.join("/var/lib/dkms/nvidia-open/535.104.05").is_dir());
    dkms(UEK8_OLD);
    assert!(!r
        .join(&format!("/lib/modules/{UEK8_OLD}/extra/nvidia.ko.xz"))
        .exists());
    let log = r.read("/var/lib/dkms/nvidia-open/535.104.05/build/make.log");
    assert!(
        log.contains("unrecognized command line option '-ftrivial-auto-var-init=zero'"),
        "{log}"
    );
    r.dnf_ok(&["-y", "install", "gcc-toolset-11-gcc"]);
    r.write(
        "/etc/dkms/nvidia-open.conf",
        "case \"$kernelver\" in\n  5.15.0-*.el8uek.*) MAKE[0]=\"${MAKE[0]} CC=/opt/rh/gcc-toolset-11/root/usr/bin/gcc\" ;;\nesac\n",
    );
    dkms(UEK8_OLD);
    assert!(r
        .join(&format!("/lib/modules/{UEK8_OLD}/extra/nvidia.ko.xz"))
        .is_file());
}

#[test]
fn docker_ce_is_filtered_by_container_tools_module_on_ol8() {
    let r = Root::new(Os::Ol8, &[UEK8_OLD]);
    let out = r.dnf(&["-y", "install", "docker-ce"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is filtered out by modular filtering"),
        "{err}"
    );
    r.dnf_ok(&[
        "-y",
        "install",
        "docker-ce",
        "--setopt=docker-ce-stable.module_hotfixes=true",
    ]);
    assert_eq!(
        r.installed("containerd.io").as_deref(),
        Some("1.7.22-3.1.el8")
    );
}

#[test]
fn gpuhost_traced_lists_executed_programs() {
    let r = Root::new(Os::Ubuntu, &[]);
    let (_out, progs) = r.gpuhost_traced(&["--help"]);
    if let Some(progs) = progs {
        assert_eq!(
            progs.first().map(String::as_str),
            Some("gpuhost"),
            "{progs:?}"
        );
    }
}

#[test]
fn ol9_rhck_headers_via_kernel_devel_matched() {
    let r = Root::new(Os::Ol9, &[RHCK9]);
    r.dnf_ok(&["-y", "install", "kernel-devel-matched", "kernel-headers"]);
    assert_eq!(
        r.installed("kernel-devel").as_deref(),
        Some(world::evr(RHCK9))
    );
    assert_eq!(
        r.installed("kernel-headers").as_deref(),
        Some(world::evr(RHCK9))
    );
}

/// `scripts/deps.sh` wants a *static* busybox (the world's roots run it as /bin/sh): a dynamic
/// one (Debian's `busybox` package) is reported missing as busybox-static.
#[test]
fn deps_sh_wants_a_static_busybox() {
    let deps = world::src_dir().join("../../scripts/deps.sh");
    let check = |busybox: &str| {
        let o = std::process::Command::new("bash")
            .arg(&deps)
            .arg("--check")
            .env("GPUHOST_BUSYBOX", busybox)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    // /bin/ls is dynamically linked on every Debian.
    assert!(check("/bin/ls").contains("busybox-static"));
    assert!(check("/no/such/busybox").contains("busybox-static"));
    let static_busybox = ["/bin/busybox", "/usr/bin/busybox"].into_iter().find(|b| {
        std::process::Command::new("ldd")
            .arg(b)
            .output()
            .is_ok_and(|o| !o.status.success())
            && std::path::Path::new(b).exists()
    });
    if let Some(b) = static_busybox {
        assert!(!check(b).contains("busybox-static"), "{b}");
    }
}

/// An executable bash script at `path` running `body`.
fn bash_script(path: &std::path::Path, body: &str) {
    std::fs::write(path, format!("#!/bin/bash\n{body}")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `scripts/deps.sh demo|test` on a Debian machine that has none of the tools, with a stand-in
/// apt-get and systemctl that record what they are asked: `--no-install-recommends` in both
/// sets, no server in the demo set, a policy-rc.d answering 101 (no service starts) for the
/// whole install and removed after it, a progress line per package, and afterwards the daemons'
/// units the install enabled disabled, while one enabled before is left alone.
#[test]
fn deps_sh_installs_the_demo_or_the_test_set_without_recommends_or_running_services() {
    let deps = world::src_dir().join("../../scripts/deps.sh");
    let run = |set: &str| {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        // Only what deps.sh (and the stand-ins) run besides the tools it looks for.
        for t in [
            "id", "awk", "grep", "mktemp", "cp", "rm", "tee", "chmod", "cat", "touch", "mkdir",
        ] {
            let real = ["/usr/bin", "/bin"]
                .iter()
                .map(|d| std::path::Path::new(d).join(t))
                .find(|p| p.exists())
                .unwrap();
            std::os::unix::fs::symlink(real, bin.join(t)).unwrap();
        }
        let fake = |name: &str, body: &str| bash_script(&bin.join(name), body);
        fake("sudo", "exec \"$@\"\n");
        fake(
            "dpkg",
            "echo \"dpkg $*\" >> \"$STATE/log\"\n[ \"$1\" = --print-foreign-architectures ] || true\n",
        );
        fake(
            "apt-get",
            r#"echo "apt-get $*" >> "$STATE/log"
pkgs=(); for a in "$@"; do case $a in -*|install|update) ;; *) pkgs+=("$a") ;; esac; done
case " $* " in
  *" -s "*) for p in "${pkgs[@]}"; do echo "Inst $p (1.0 Debian:12)"; done ;;
  *" install "*)
    if [ -x "$GPUHOST_POLICY_RC_D" ]; then "$GPUHOST_POLICY_RC_D" docker.service start; echo "policy-rc.d: $?" >> "$STATE/log"; fi
    for p in "${pkgs[@]}"; do echo "Get:1 http://deb.debian.org/debian bookworm/main amd64 $p amd64 1.0 [1 kB]"; done
    for p in "${pkgs[@]}"; do echo "Setting up $p (1.0) ..."; done
    touch "$STATE/installed" ;;
esac
"#,
        );
        fake(
            "systemctl",
            r#"echo "systemctl $*" >> "$STATE/log"
unit=${@: -1}
case $1 in
  is-enabled) [ -e "$STATE/enabled-$unit" ] || { [ -e "$STATE/installed" ] && [ ! -e "$STATE/disabled-$unit" ]; } ;;
  disable) touch "$STATE/disabled-$unit" ;;
esac
"#,
        );
        // munge was enabled before (by its admin): deps.sh must leave it so.
        std::fs::write(dir.path().join("enabled-munge.service"), "").unwrap();
        let policy = dir.path().join("policy-rc.d");
        let o = Command::new("/bin/bash")
            .arg(&deps)
            .arg(set)
            .env_clear()
            .env("PATH", &bin)
            .env("STATE", dir.path())
            .env("GPUHOST_POLICY_RC_D", &policy)
            .env("GPUHOST_BUSYBOX", "/no/such/busybox")
            .env("GPUHOST_WORLD_ARM64_DEBS", dir.path().join("arm64"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "deps.sh {set}: {err}");
        assert!(!policy.exists(), "deps.sh {set} left its policy-rc.d");
        let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
        let install = log
            .lines()
            .find(|l| l.starts_with("apt-get install -y"))
            .unwrap_or_else(|| panic!("{log}"))
            .to_string();
        (install, log, err)
    };
    let (install, log, err) = run("demo");
    assert!(install.contains(" --no-install-recommends "), "{install}");
    // (libc6-dev: without it, and without gcc's recommendations, cargo cannot link gpuhost)
    for pkg in [
        "rpm",
        "dnf",
        "createrepo-c",
        "dkms",
        "busybox-static",
        "libc6-dev",
    ] {
        assert!(install.split(' ').any(|w| w == pkg), "{pkg}: {install}");
    }
    for server in [
        "docker.io",
        "munge",
        "slurmd",
        "slurmctld",
        "prometheus",
        "vagrant",
    ] {
        assert!(
            !install.split(' ').any(|w| w == server),
            "{server}: {install}"
        );
    }
    assert!(log.contains("policy-rc.d: 101"), "{log}");
    assert!(
        err.contains("deps.sh: [1/") && err.contains("] set up rpm"),
        "{err}"
    );
    assert!(!log.contains("apt-get download"), "{log}");

    let (install, log, err) = run("test");
    assert!(install.contains(" --no-install-recommends "), "{install}");
    for pkg in ["rpm", "docker.io", "munge", "slurmd", "prometheus"] {
        assert!(install.split(' ').any(|w| w == pkg), "{pkg}: {install}");
    }
    assert!(log.contains("policy-rc.d: 101"), "{log}");
    for unit in ["docker.service", "slurmd.service", "containerd.service"] {
        assert!(
            log.contains(&format!("systemctl disable --quiet {unit}")),
            "{unit}: {log}"
        );
    }
    assert!(!log.contains("disable --quiet munge.service"), "{log}");
    assert!(err.contains("left docker.service disabled"), "{err}");
    // The aarch64 roots' arm64 userspace: downloaded as .debs (never installed over this
    // machine's), after arm64 is added to dpkg's architectures.
    let download = log
        .lines()
        .find(|l| l.starts_with("apt-get download"))
        .unwrap_or_else(|| panic!("{log}"));
    for pkg in [
        "busybox-static:arm64",
        "bash:arm64",
        "linux-kbuild-6.1:arm64",
    ] {
        assert!(download.split(' ').any(|w| w == pkg), "{pkg}: {download}");
    }
    assert!(log.contains("dpkg --add-architecture arm64"), "{log}");
    assert!(!install.contains(":arm64"), "{install}");
}

/// `scripts/test.sh` ends with the sum of cargo's `test result:` lines, `N passed, N failed`,
/// and keeps cargo's exit status (run with a stand-in cargo, and a deps.sh that has nothing to
/// install).
#[test]
fn the_suite_ends_with_its_grand_total() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = dir.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::copy(
        world::src_dir().join("../../scripts/test.sh"),
        scripts.join("test.sh"),
    )
    .unwrap();
    bash_script(&scripts.join("deps.sh"), "exit 0\n");
    bash_script(
        &dir.path().join("cargo"),
        "echo 'test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.10s'\n\
         echo 'test result: FAILED. 30 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 3.00s'\n\
         echo 'error: test failed' >&2\nexit 101\n",
    );
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    let o = Command::new("bash")
        .arg(scripts.join("test.sh"))
        .env("PATH", path)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().last(), Some("42 passed, 2 failed"), "{out}");
    assert_eq!(o.status.code(), Some(101));
}

/// `scripts/test.sh` fails a passing suite that leaves something in HOME or the temp dir, and
/// names it (issue 54): a stand-in cargo that passes and leaves `~/.rpmdb` and a folder in
/// `$TMPDIR`; one that leaves nothing passes.
#[test]
fn the_suite_fails_when_it_leaves_something_in_home_or_tmp() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = dir.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::copy(
        world::src_dir().join("../../scripts/test.sh"),
        scripts.join("test.sh"),
    )
    .unwrap();
    bash_script(&scripts.join("deps.sh"), "exit 0\n");
    let (home, tmp) = (dir.path().join("home"), dir.path().join("tmp"));
    std::fs::create_dir_all(home.join(".cache")).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    let suite = |leaves: &str| {
        bash_script(
            &dir.path().join("cargo"),
            &format!(
                "{leaves}\necho 'test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s'\n"
            ),
        );
        Command::new("bash")
            .arg(scripts.join("test.sh"))
            .env("PATH", &path)
            .env("HOME", &home)
            .env("TMPDIR", &tmp)
            .output()
            .unwrap()
    };
    let o = suite("true");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = suite("mkdir -p \"$HOME/.rpmdb\" \"$HOME/.cache/zig\" \"$TMPDIR/gpuhost-bin-1\"");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert_eq!(out.lines().last(), Some("3 passed, 0 failed"), "{out}");
    for left in [".rpmdb", ".cache/zig", "tmp/gpuhost-bin-1"] {
        assert!(err.contains(left), "{left}: {err}");
    }
}

/// The suite's own /tmp (issue 54, item 3): run as root from a clone outside /tmp, what the
/// suite writes in /tmp (a killed dnf's scratch file, a tool's temp folder) lands in the
/// clone's target/test-tmp, is removed after the run and said, and the build host's /tmp is as
/// it was; the run passes.
#[test]
fn what_the_suite_leaves_in_tmp_stays_in_the_clones_target() {
    if !std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    }) {
        eprintln!("skipped: needs root (a private mount namespace)");
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let scripts = dir.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::copy(
        world::src_dir().join("../../scripts/test.sh"),
        scripts.join("test.sh"),
    )
    .unwrap();
    bash_script(&scripts.join("deps.sh"), "exit 0\n");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let leak = format!("gpuhost-suite-leak-{}", std::process::id());
    bash_script(
        &dir.path().join("cargo"),
        &format!("touch /tmp/{leak}\necho 'test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s'\n"),
    );
    let o = Command::new("bash")
        .arg(scripts.join("test.sh"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.path().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .env("HOME", &home)
        .env_remove("TMPDIR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!std::path::Path::new("/tmp").join(&leak).exists(), "{err}");
    assert!(
        err.contains("removing what the suite left in its own /tmp (1 entries"),
        "{err}"
    );
    assert!(!dir.path().join("target/test-tmp").exists(), "{err}");
}

/// kernel-devel ships the kernel's real `scripts/sign-file` (runnable inside the root: its
/// libcrypto comes with openssl-libs), reachable where DKMS 3.x looks on non-Debian systems
/// (`/lib/modules/<kver>/build/scripts/sign-file`); each kernel's `.config` names the signing
/// hash of the real kernels (RHCK el8 sha256, UEK sha512).
#[test]
fn kernel_devel_ships_sign_file_and_configs_name_the_signing_hash() {
    let r = Root::new(Os::Ol8, &[UEK8_OLD, RHCK8]);
    r.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-devel-{RHCK8}"),
        &format!("kernel-uek-devel-{UEK8_OLD}"),
        // on a real host openssl-libs is always there (kernel-devel does not require it)
        "openssl-libs",
    ]);
    let rel = format!("/usr/src/kernels/{RHCK8}/scripts/sign-file");
    let owner = r.rpm(&["-qf", "--qf", "%{NAME}", &rel]);
    assert_eq!(String::from_utf8_lossy(&owner.stdout), "kernel-devel");
    let build = std::fs::read_link(r.join(&format!("/lib/modules/{RHCK8}/build"))).unwrap();
    assert!(r
        .join(&format!("{}/scripts/sign-file", build.display()))
        .is_file());
    // run inside the root: usage (exit 2), no missing library
    let o = Command::new("chroot")
        .arg(r.path())
        .arg(&rel)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Usage: scripts/sign-file"));
    for (k, hash) in [(RHCK8, "sha256"), (UEK8_OLD, "sha512")] {
        for cfg in [
            format!("/usr/src/kernels/{k}/.config"),
            format!("/boot/config-{k}"),
        ] {
            let text = r.read(&cfg);
            assert!(
                text.contains(&format!("CONFIG_MODULE_SIG_HASH=\"{hash}\""))
                    && text.contains(&format!("CONFIG_MODULE_SIG_{}=y", hash.to_uppercase())),
                "{cfg}: {text}"
            );
        }
    }
}

/// NVIDIA's precompiled kmods are built for RHEL's kernels only, matched by the exact release
/// (NVIDIA/yum-packaging-precompiled-kmod#43), and the world's RHCK kernels are Oracle's, with
/// Oracle's `.0.1`: the world's kmod for `RHCK8` is named for and requires RHEL's
/// `4.18.0-553.16.1.el8_10`, and dnf installs no precompiled kmod on an Oracle root, as on a real
/// host. Installed without its kernel (`rpm --nodeps`), the package is NVIDIA's
/// (dnf-kmod-nvidia.spec): it ships its modules' signatures apart and `%post` appends them, so
/// the installed `.ko` carries a PKCS#7 signature made with the world's test NVIDIA key (sha256),
/// verifiable with its certificate and with no other; the modules are the package's (`%ghost`)
/// files, so removing it removes them.
#[test]
fn precompiled_modules_are_rhels_and_carry_the_test_nvidia_signature() {
    let w = World::get();
    let r = Root::new(Os::Ol8, &[RHCK8]).with_extra_rpm("cuda-repo-rhel8-12-2-local");
    r.dnf_ok(&["-y", "module", "enable", "nvidia-driver:latest"]);
    let pkg = "kmod-nvidia-535.104.05-4.18.0-553.16.1";
    // RHEL's release of the world's Oracle RHCK8: without Oracle's `.0.1`.
    let rhel = "4.18.0-553.16.1.el8_10.x86_64";
    assert_eq!(RHCK8.replace(".0.1.el", ".el"), rhel);
    let o = r.dnf(&["-y", "install", pkg]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "{said}");
    // NVIDIA's dnf-kmod-nvidia.spec: `Requires: (kernel = <RHEL's kernel> if kernel)`.
    let rhel_evr = rhel.trim_end_matches(".x86_64");
    assert!(said.contains(&format!("kernel = {rhel_evr}")), "{said}");
    // NVIDIA's name for the Oracle kernel (what gpuhost's naming rule gives) exists nowhere.
    let o = r.dnf(&[
        "list",
        "--available",
        "kmod-nvidia-535.104.05-4.18.0-553.16.1.0.1",
    ]);
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(r.installed(pkg).is_none());

    // What the package requires besides its kernel (kmod's depmod, a shell for %post).
    r.dnf_ok(&["-y", "install", "kmod", "bash"]);
    let inner = r.join("/var/cuda-repo-rhel8-12-2-local");
    let file = std::fs::read_dir(&inner)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{pkg}-535.104.05-")))
        })
        .unwrap_or_else(|| panic!("no {pkg} in {}", inner.display()));
    let o = r.rpm(&["-i", "--nodeps", &file.display().to_string()]);
    assert!(o.status.success(), "{o:?}");
    let dir = format!("/lib/modules/{rhel}/extra/drivers/video/nvidia");
    let ko = r.join(&format!("{dir}/nvidia.ko"));
    assert!(world::has_appended_signature(&ko));
    let bytes = world::module_bytes(&ko);
    assert_eq!(&bytes[bytes.len() - 28..], b"~Module signature appended~\n"); // tail -c 28
    assert_eq!(
        world::modinfo(&ko, "signer").as_deref(),
        Some(world::NVIDIA_TEST_KEY_CN)
    );
    assert_eq!(
        world::modinfo(&ko, "sig_hashalgo").as_deref(),
        Some("sha256")
    );
    assert_eq!(
        world::modinfo(&ko, "version").as_deref(),
        Some("535.104.05")
    );
    assert!(world::openssl_verifies_module(&ko, &w.nvidia_test_cert()));
    let (_k, other) = world::openssl_test_key(&r.join("/tmp/k"), "other", "other");
    assert!(!world::openssl_verifies_module(&ko, &other));
    for m in [
        "nvidia-modeset",
        "nvidia-drm",
        "nvidia-uvm",
        "nvidia-peermem",
    ] {
        assert!(world::has_appended_signature(
            &r.join(&format!("{dir}/{m}.ko"))
        ));
    }
    assert!(r
        .read(&format!("/lib/modules/{rhel}/modules.dep"))
        .contains("extra/drivers/video/nvidia/nvidia.ko:"));
    // Nothing of it reached the Oracle kernel's modules.
    assert!(!r
        .join(&format!("/lib/modules/{RHCK8}/extra/drivers/video/nvidia"))
        .exists());
    // (its files; its kernel is not there, by design)
    let o = r.rpm(&["-V", "--nodeps", pkg]);
    assert!(o.status.success(), "{o:?}");
    let o = r.rpm(&["-e", "--nodeps", pkg]);
    assert!(o.status.success(), "{o:?}");
    assert!(!ko.exists());
}

/// DKMS 3.x signs what it builds when the kernel has sign-file: with the key a
/// `framework.conf.d` drop-in names, else with the key pair it makes itself with openssl
/// (`/var/lib/dkms/mok.key`, `mok.pub`) — openssl comes in as dkms's weak dependency, as from
/// EPEL. The hash is the kernel's CONFIG_MODULE_SIG_HASH.
#[test]
fn dkms_signs_with_the_configured_key_or_its_own() {
    let r =
        Root::new(Os::Ol8, &[world::RHCK8_OLD, RHCK8]).with_extra_rpm("cuda-repo-rhel8-12-2-local");
    r.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-devel-{RHCK8}"),
        &format!("kernel-devel-{}", world::RHCK8_OLD),
        "gcc",
    ]);
    r.dnf_ok(&["-y", "module", "install", "nvidia-driver:latest-dkms"]);
    assert!(r.installed("openssl").is_some(), "dkms recommends openssl");
    let install = |k: &str| {
        let o = r.dkms(&["install", "-m", "nvidia", "-v", "535.104.05", "-k", k]);
        assert!(o.status.success(), "{o:?}");
        r.join(&format!("/lib/modules/{k}/extra/nvidia.ko.xz"))
    };
    // no key configured: DKMS's own
    let ko = install(RHCK8);
    assert!(world::has_appended_signature(&ko));
    assert_eq!(
        world::modinfo(&ko, "signer").as_deref(),
        Some(world::DKMS_AUTO_KEY_CN)
    );
    assert_eq!(
        world::modinfo(&ko, "sig_hashalgo").as_deref(),
        Some("sha256")
    );
    assert!(world::openssl_verifies_module(
        &ko,
        &r.join("/var/lib/dkms/mok.pub")
    ));
    // a drop-in names the machine owner key
    world::openssl_test_key(&r.join("/etc/pki/mok"), "gpuhost", "gpuhost test MOK");
    r.write(
        "/etc/dkms/framework.conf.d/gpuhost.conf",
        "mok_signing_key=/etc/pki/mok/gpuhost.priv\nmok_certificate=/etc/pki/mok/gpuhost.der\n",
    );
    let ko = install(world::RHCK8_OLD);
    assert_eq!(
        world::modinfo(&ko, "signer").as_deref(),
        Some("gpuhost test MOK")
    );
    assert!(world::openssl_verifies_module(
        &ko,
        &r.join("/etc/pki/mok/gpuhost.der")
    ));
    assert!(!world::openssl_verifies_module(
        &ko,
        &r.join("/var/lib/dkms/mok.pub")
    ));
}

/// The aarch64 releases: an OL10 aarch64 root's packages are built for aarch64 (its kernels,
/// 4k and 64k, carry `.aarch64` / `.aarch64.64k` releases), dnf installs into it only with
/// `--forcearch=aarch64`, and its programs are real aarch64 ones run through qemu-user-static
/// (a scriptlet's `/bin/sh`, bash, make), reporting `uname -m` aarch64.
#[test]
fn aarch64_roots_hold_and_run_aarch64_programs() {
    if !world::aarch64_ready() {
        return;
    }
    let root = Root::new(Os::Ol10Aarch64, &[UEK10_ARM, UEK10_ARM_64K]);
    for k in [UEK10_ARM, UEK10_ARM_64K] {
        assert!(
            root.join(&format!("/lib/modules/{k}/vmlinuz")).exists(),
            "{k}"
        );
    }
    let arches = root.rpm(&["-qa", "--qf", "%{ARCH}\\n"]);
    let arches = String::from_utf8_lossy(&arches.stdout).to_string();
    assert!(arches.lines().all(|a| a == "aarch64"), "{arches}");
    // Without --forcearch, dnf on x86_64 sees no package it could install.
    let plain = root.dnf(&["-y", "install", "make"]);
    assert!(
        !plain.status.success(),
        "dnf installed aarch64 packages without --forcearch"
    );
    root.dnf_ok(&[
        "--forcearch=aarch64",
        "-y",
        "install",
        "bash",
        "make",
        "kernel-uek64k-devel",
    ]);
    let ran = Command::new("chroot")
        .arg(root.path())
        .args([
            "/bin/bash",
            "-c",
            "echo $(uname -m) $(make --version | head -n1)",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).trim(),
        "aarch64 GNU Make 4.3",
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let sh = std::fs::read(root.join("/bin/busybox")).unwrap();
    assert_eq!(
        &sh[18..20],
        &[0xb7, 0x00],
        "/bin/busybox is not an aarch64 ELF"
    );
    assert!(root
        .join(&format!(
            "/usr/src/kernels/{UEK10_ARM_64K}/scripts/sign-file"
        ))
        .exists());
}

/// genmodules.py's package lists (NVIDIA/cuda-repo-management `genmodules.py` at
/// 2944b7a42b479a10390340d14dd3857c155a813a): the branch's packages (`BRANCH_PKGS`), listed in
/// a stream's profiles when the repo has them.
const GENMODULES_BRANCH_PKGS: &[&str] = &[
    "nvidia-driver",
    "nvidia-driver-libs",
    "nvidia-driver-devel",
    "nvidia-driver-NVML",
    "nvidia-driver-NvFBCOpenGL",
    "nvidia-driver-cuda",
    "nvidia-driver-cuda-libs",
    "nvidia-persistenced",
    "nvidia-modprobe",
    "nvidia-settings",
    "nvidia-libXNVCtrl",
    "nvidia-libXNVCtrl-devel",
    "nvidia-xconfig",
    "nvidia-kmod-common",
    "cuda-drivers",
];

/// `(name, version)` of every package file under `dir`.
fn repo_packages(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(repo_packages(&p));
            continue;
        }
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let Some(base) = name.strip_suffix(".rpm") else {
            continue;
        };
        let mut parts = base.rsplitn(3, '-');
        let (_rel, ver, n) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        out.push((n.to_string(), ver.to_string()));
    }
    out
}

/// `dnf module info --profile`'s answer: profile → package names (sorted, as dnf prints them).
fn profiles_of(text: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut current = String::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(" : ") else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k == "Name" || line.starts_with("Hint") {
            continue;
        }
        if !k.is_empty() {
            current = k.to_string();
        }
        out.entry(current.clone()).or_default().push(v.to_string());
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// Every modular local repo of the world carries NVIDIA's module metadata as NVIDIA's generator
/// writes it (NVIDIA/cuda-repo-management `genmodules.py` @2944b7a; tests/world/FIDELITY.md),
/// read back through dnf: the streams of the branch, each stream's profiles and their packages
/// (the DKMS kmods in the open and dkms streams' `default`, `fm` and `ks` profiles; the `src`
/// profiles), the kmod among the stream's artifacts, and the default stream.
#[test]
fn nvidia_module_metadata_follows_nvidias_genmodules() {
    let mut repos = vec![
        (Os::Ol8, RHCK8, world::CUDA_LOCAL_EL8_12_2),
        (Os::Ol8, RHCK8, world::CUDA_LOCAL_EL8_12_4),
        (Os::Ol8, RHCK8, world::CUDA_LOCAL_EL8_12_6),
        (Os::Ol8, RHCK8, world::DRIVER_LOCAL_EL8_570),
        (Os::Ol8, RHCK8, world::DRIVER_LOCAL_EL8_580),
        (Os::Ol9, RHCK9, world::CUDA_LOCAL_EL9_12_2),
        (Os::Ol9, RHCK9, world::CUDA_LOCAL_EL9_12_4),
        (Os::Ol9, RHCK9, world::DRIVER_LOCAL_EL9_570),
        (Os::Ol9, RHCK9, world::CUDA_LOCAL_EL9_13_0),
    ];
    if world::aarch64_ready() {
        repos.push((
            Os::Ol9Aarch64,
            world::UEK9_ARM,
            world::DRIVER_LOCAL_EL9_580_AARCH64,
        ));
    }
    for (os, kernel, rpm) in repos {
        let root = Root::new(os, &[kernel]).with_extra_rpm(rpm);
        let dir = std::fs::read_dir(root.join("/var"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let n = p.file_name().unwrap().to_string_lossy().to_string();
                n.starts_with("cuda-repo-") || n.starts_with("nvidia-driver-local-repo-")
            })
            .unwrap_or_else(|| panic!("{rpm}: no local repo folder under /var"));
        let pkgs = repo_packages(&dir);
        let driver = pkgs
            .iter()
            .find(|(n, _)| n == "nvidia-driver")
            .map(|(_, v)| v.clone())
            .unwrap();
        let major: u32 = driver.split('.').next().unwrap().parse().unwrap();
        let aarch64 = matches!(os, Os::Ol9Aarch64);
        // Packages of the branch: the name, and the branch's major version in its version.
        let has = |n: &str| {
            pkgs.iter()
                .any(|(p, v)| p == n && v.starts_with(&format!("{major}.")))
        };
        let mut existing: Vec<String> = GENMODULES_BRANCH_PKGS
            .iter()
            .filter(|p| has(p))
            .map(|p| p.to_string())
            .collect();
        existing.sort();
        // Streams: per branch <major>, <major>-dkms, <major>-open (above 510); latest,
        // latest-dkms and open-dkms (above 510) at the newest branch.
        let mut streams = vec![
            "latest".to_string(),
            "latest-dkms".to_string(),
            major.to_string(),
            format!("{major}-dkms"),
        ];
        if major > 510 {
            streams.push("open-dkms".to_string());
            streams.push(format!("{major}-open"));
        }
        let list = root.dnf_ok(&["-q", "module", "list", "nvidia-driver"]);
        let mut listed: Vec<String> = list
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("nvidia-driver")).then(|| w.next().map(str::to_string))?
            })
            .collect();
        listed.sort();
        let mut want = streams.clone();
        want.sort();
        assert_eq!(listed, want, "{rpm}: streams\n{list}");
        // The default stream: genmodules.py writes latest-dkms; NVIDIA's repos default to
        // open-dkms from R560 (FIDELITY.md).
        let default = if major >= 560 {
            "open-dkms"
        } else {
            "latest-dkms"
        };
        assert!(
            list.lines().any(|l| l.starts_with("nvidia-driver")
                && l.split_whitespace().nth(1) == Some(default)
                && l.contains("[d]")),
            "{rpm}: default stream {default}\n{list}"
        );
        for stream in &streams {
            let (open, dkms) = (stream.contains("open"), stream.contains("dkms"));
            let kmod: Vec<String> = if open {
                vec!["kmod-nvidia-open-dkms".into()]
            } else if dkms {
                vec!["kmod-nvidia-latest-dkms".into()]
            } else {
                vec![]
            };
            let mut default_p = existing.clone();
            default_p.extend(kmod.iter().cloned());
            default_p.sort();
            let mut ks: Vec<String> = default_p
                .iter()
                .filter(|p| !p.contains("cuda-drivers"))
                .cloned()
                .collect();
            ks.sort();
            let mut want: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            want.insert("default".into(), default_p.clone());
            want.insert("ks".into(), ks);
            if open {
                want.insert("src".into(), vec!["nvidia-kmod-source".into()]);
            } else if !dkms {
                want.insert("src".into(), vec!["nvidia-kmod-headers".into()]);
            }
            // fm: the branch's packages, the kmod, Fabric Manager and NSCQ (x86_64), Fabric
            // Manager alone (aarch64 above 470); the R580 names (genmodules.py predates them).
            let (fm, nscq) = if major >= 580 {
                (
                    "nvidia-fabricmanager".to_string(),
                    "libnvidia-nscq".to_string(),
                )
            } else {
                (
                    "nvidia-fabric-manager".to_string(),
                    format!("libnvidia-nscq-{major}"),
                )
            };
            let mut fm_p = default_p.clone();
            fm_p.push(fm);
            if !aarch64 {
                fm_p.push(nscq);
            }
            fm_p.sort();
            if !aarch64 || major > 470 {
                want.insert("fm".into(), fm_p);
            }
            let spec = format!("nvidia-driver:{stream}");
            let info = root.dnf_ok(&["-q", "module", "info", "--profile", &spec]);
            assert_eq!(profiles_of(&info), want, "{rpm}: {spec} profiles\n{info}");
            // Artifacts: the stream's DKMS kmod (none in a precompiled stream: genmodules.py's
            // rpm_is_kmod() is always false), and every package of the branch.
            let info = root.dnf_ok(&["-q", "module", "info", &spec]);
            let arts: Vec<&str> = info
                .lines()
                .skip_while(|l| !l.starts_with("Artifacts"))
                .take_while(|l| l.contains(" : "))
                .filter_map(|l| l.split_once(" : ").map(|(_, v)| v.trim()))
                .collect();
            for k in ["kmod-nvidia-open-dkms", "kmod-nvidia-latest-dkms"] {
                let listed = arts.iter().any(|a| a.starts_with(&format!("{k}-3:")));
                assert_eq!(
                    listed,
                    kmod.iter().any(|m| m == k),
                    "{rpm}: {spec} artifacts {arts:?}"
                );
            }
            assert!(
                !arts
                    .iter()
                    .any(|a| a.starts_with(&format!("kmod-nvidia-{major}."))),
                "{rpm}: {spec} lists a precompiled kmod: {arts:?}"
            );
            for p in &existing {
                assert!(
                    arts.iter().any(|a| a.starts_with(&format!("{p}-"))
                        && a[p.len() + 1..].contains(':')
                        && !a[p.len() + 1..].split(':').next().unwrap().contains('-')),
                    "{rpm}: {spec} artifacts lack {p}: {arts:?}"
                );
            }
        }
    }
}
