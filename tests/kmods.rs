//! Issue 41: a build host makes NVIDIA's kernel modules once per (driver, kernel) —
//! `gpuhost kmod build` against a build root of the test world (its kernels, their headers and
//! compilers), from the local repo package's own DKMS source — signs each module with the
//! fleet's key, and writes one RPM per kernel into a repo with a manifest. Checked with the real
//! rpm, createrepo_c's metadata, modinfo (signer, sig_key) and openssl.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

#[path = "support/docs.rs"]
mod docs;
#[path = "world/mod.rs"]
mod world;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rstest::rstest;
use serde_json::Value;
use world::{code, Os, Root, World, DRIVER_LOCAL_EL9_570, RHCK9, UEK9};

const FLEET_CN: &str = "gpuhost test fleet kmod key";

/// The devel package of a world kernel (`kernel-uek-devel-5.15.0-206.153.7.el9uek`).
fn devel(kver: &str) -> String {
    if let Some(base) = kver.strip_suffix(".aarch64.64k") {
        return format!("kernel-uek64k-devel-{base}");
    }
    let base = kver.rsplit_once('.').map_or(kver, |(b, _)| b);
    if kver.contains("uek") {
        format!("kernel-uek-devel-{base}")
    } else {
        format!("kernel-devel-{base}")
    }
}

/// A build root: the kernels, their headers, gcc and make.
fn build_root(kernels: &[&str]) -> Root {
    build_root_of(Os::Ol9, kernels)
}

fn build_root_of(os: Os, kernels: &[&str]) -> Root {
    let root = Root::new(os, kernels);
    // The build's unprivileged user reaches the build root (a build host's is `/`).
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut args = vec![
        "install".to_string(),
        "-y".to_string(),
        format!(
            "--forcearch={}",
            if kernels.iter().any(|k| k.contains(".aarch64")) {
                "aarch64"
            } else {
                "x86_64"
            }
        ),
        "bash".into(),
        "gcc".into(),
        "gcc-c++".into(),
        "openssl-libs".into(),
        "make".into(),
    ];
    args.extend(kernels.iter().map(|k| devel(k)));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    root.dnf_ok(&args);
    root
}

struct Fleet {
    _dir: tempfile::TempDir,
    key: PathBuf,
    cert: PathBuf,
    out: PathBuf,
}

fn fleet() -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let (key, cert) = world::openssl_test_key(dir.path(), "fleet", FLEET_CN);
    let out = dir.path().join("kmods");
    Fleet {
        _dir: dir,
        key,
        cert,
        out,
    }
}

/// A module's `sig_key` (modinfo), as hex digits without colons or leading zeros.
fn sig_key(module: &Path) -> String {
    let k = world::modinfo(module, "sig_key").unwrap_or_default();
    let hex: String = k.chars().filter(|c| *c != ':').collect();
    hex.trim_start_matches('0').to_uppercase()
}

/// The serial number of a certificate (the key id `sign-file` writes into a module's signature).
fn cert_serial(cert: &Path) -> String {
    let o = Command::new("openssl")
        .args(["x509", "-inform", "DER", "-noout", "-serial", "-in"])
        .arg(cert)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let serial = out.trim().trim_start_matches("serial=");
    assert!(!serial.is_empty());
    serial.trim_start_matches('0').to_uppercase()
}

/// Wait until the wall clock's second has changed (rpm's transaction ids are seconds).
fn next_second() {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let start = now();
    while now() == start {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A UEK9 build root and the fleet's repo `gpuhost kmod build` made from the world's 570 driver
/// in it (checked to have built).
fn fleet_repo() -> (Root, Fleet) {
    let build = build_root(&[UEK9]);
    let f = fleet();
    let (rc, _, text) = kmod_build(&build, &f, &[]);
    assert_eq!(rc, 0, "{text}");
    (build, f)
}

fn kmod_build(root: &Root, f: &Fleet, extra: &[&str]) -> (i32, Value, String) {
    kmod_build_of(root, f, DRIVER_LOCAL_EL9_570, extra)
}

/// `gpuhost kmod build` of the world's local repo package `local`.
fn kmod_build_of(root: &Root, f: &Fleet, local: &str, extra: &[&str]) -> (i32, Value, String) {
    kmod_build_rpm(root, f, &World::get().cuda_local(local), extra)
}

/// `gpuhost kmod build` of the local repo package file `rpm`.
fn kmod_build_rpm(root: &Root, f: &Fleet, rpm: &Path, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec![
        "kmod".to_string(),
        "build".into(),
        "--local-repo-rpm".into(),
        rpm.display().to_string(),
        "--key".into(),
        f.key.display().to_string(),
        "--cert".into(),
        f.cert.display().to_string(),
        "--out".into(),
        f.out.display().to_string(),
        "--format".into(),
        "json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = root.gpuhost(&args);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let v = serde_json::from_str(&out).unwrap_or(Value::Null);
    (
        code(&o),
        v,
        String::from_utf8_lossy(&o.stderr).to_string() + &out,
    )
}

fn rpm_q(rpm: &Path, what: &str) -> String {
    let o = world::host_rpm([
        std::ffi::OsStr::new("-qp"),
        "--nosignature".as_ref(),
        what.as_ref(),
        rpm.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// The RPM's payload unpacked into a new directory.
fn unpack(rpm: &Path) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg("rpm2cpio \"$1\" | cpio -idm --quiet")
        .arg("sh")
        .arg(rpm)
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    d
}

/// Whether an ELF file has debug sections (`readelf -S`: `.debug_*`).
fn has_debug_sections(elf: &Path) -> bool {
    let o = Command::new("readelf")
        .arg("-S")
        .arg("-W")
        .arg(elf)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).contains(" .debug_")
}

/// The regular files under `dir`, links not followed, the root's /proc, /sys and /dev left out.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            let skip = ["proc", "sys", "dev"].iter().any(|d| p == dir.join(d));
            if !skip {
                stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
            }
        } else if meta.is_file() {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_build_host_makes_one_signed_rpm_per_kernel_in_a_checked_repo() {
    let root = build_root(&[RHCK9, UEK9]);
    let f = fleet();
    let (rc, rep, text) = kmod_build(
        &root,
        &f,
        &[
            "--kernel-release",
            UEK9,
            "--kernel-release",
            RHCK9,
            "--jobs",
            "2",
        ],
    );
    assert_eq!(rc, 0, "{text}");
    assert_eq!(rep["driver"], "570.124.06", "{rep:#}");
    assert_eq!(rep["jobs"], 2, "{rep:#}");
    let key_text = std::fs::read(&f.key).unwrap();
    for kver in [UEK9, RHCK9] {
        let k = rep["kmods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kernel"] == kver)
            .unwrap_or_else(|| panic!("no kmod of {kver}: {rep:#}"));
        let rpm = f.out.join(k["file"].as_str().unwrap());
        assert_eq!(
            rpm_q(&rpm, "--qf=%{NAME}"),
            format!("kmod-nvidia-open-{kver}")
        );
        assert_eq!(rpm_q(&rpm, "--qf=%{EPOCH}:%{VERSION}"), "3:570.124.06");
        let requires = rpm_q(&rpm, "--requires");
        assert!(
            requires.contains(&format!("kernel-uname-r = {kver}")),
            "{requires}"
        );
        assert!(
            requires.contains("nvidia-kmod-common = 3:570.124.06"),
            "{requires}"
        );
        let provides = rpm_q(&rpm, "--provides");
        assert!(
            provides.contains("nvidia-kmod = 3:570.124.06"),
            "{provides}"
        );
        assert!(rpm_q(&rpm, "--scripts").contains(&format!("depmod -a {kver}")));
        let payload = unpack(&rpm);
        let modules = files_under(payload.path());
        assert_eq!(modules.len(), 5, "{modules:?}");
        for m in &modules {
            let rel = m.strip_prefix(payload.path()).unwrap();
            assert!(
                rel.starts_with(format!("lib/modules/{kver}/extra")),
                "{}",
                rel.display()
            );
            assert_eq!(
                world::modinfo(m, "signer").as_deref(),
                Some(FLEET_CN),
                "{}",
                m.display()
            );
            assert_eq!(sig_key(m), cert_serial(&f.cert), "{}", m.display());
            assert!(
                world::openssl_verifies_module(m, &f.cert),
                "{}",
                m.display()
            );
            assert!(
                !std::fs::read(m)
                    .unwrap()
                    .windows(64)
                    .any(|w| key_text.windows(64).any(|k| k == w)),
                "the private key is in {}",
                m.display()
            );
            // Stripped of debug sections, as DKMS strips what it builds (a real build's modules
            // are 95 MB as built, 26 MB stripped: bench/RESULTS.md).
            assert!(!has_debug_sections(m), "{} is not stripped", m.display());
        }
    }
    // The source's objects carry debug sections, as a real build's do: the strip is gpuhost's.
    let local = unpack(&World::get().cuda_local(DRIVER_LOCAL_EL9_570));
    let dkms = files_under(local.path())
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("kmod-nvidia-open-dkms-570"))
        })
        .unwrap();
    let source = unpack(&dkms);
    let object = files_under(source.path())
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "nvidia.o_binary"))
        .unwrap();
    assert!(has_debug_sections(&object), "{}", object.display());
    // The repo: dnf's metadata, the certificate, and a manifest whose SHA-256s match.
    assert!(f.out.join("repodata/repomd.xml").is_file());
    assert_eq!(
        std::fs::read(f.out.join("fleet-signing-cert.der")).unwrap(),
        std::fs::read(&f.cert).unwrap()
    );
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(f.out.join("gpuhost-kmods.json")).unwrap())
            .unwrap();
    assert_eq!(
        manifest["kmods"].as_array().map(Vec::len),
        Some(2),
        "{manifest:#}"
    );
    for k in manifest["kmods"].as_array().unwrap() {
        let o = Command::new("sha256sum")
            .arg(f.out.join(k["file"].as_str().unwrap()))
            .output()
            .unwrap();
        let sum = String::from_utf8_lossy(&o.stdout);
        assert!(sum.starts_with(k["sha256"].as_str().unwrap()), "{k:#}");
    }
    // Neither the repo nor the build root keeps the key; the scratch folder is gone.
    for file in files_under(&f.out) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !bytes
                .windows(key_text.len().min(64))
                .any(|w| w == &key_text[..key_text.len().min(64)]),
            "the private key is in {}",
            file.display()
        );
    }
    assert!(!root.join("/var/cache/gpuhost/kmod-build").exists());
}

#[test]
fn without_kernel_release_it_builds_for_the_kernels_a_node_boots() {
    let root = build_root(&[UEK9]);
    let f = fleet();
    let (rc, rep, text) = kmod_build(&root, &f, &[]);
    assert_eq!(rc, 0, "{text}");
    let kernels: Vec<&str> = rep["kmods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["kernel"].as_str())
        .collect();
    assert_eq!(kernels, [UEK9], "{rep:#}");
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let root = build_root(&[UEK9]);
    let f = fleet();
    // A kernel the build root does not have.
    let (rc, _, text) = kmod_build(
        &root,
        &f,
        &["--kernel-release", "5.15.0-999.1.1.el9uek.x86_64"],
    );
    assert_eq!(rc, 2, "{text}");
    assert!(
        text.contains("5.15.0-999.1.1.el9uek.x86_64") && text.contains("not installed"),
        "{text}"
    );
    // A kernel release that is not an Enterprise Linux one (Debian's): refused before building,
    // as its kmod could not be packaged.
    let (rc, _, text) = kmod_build(&root, &f, &["--kernel-release", "6.1.0-57-amd64"]);
    assert_eq!(rc, 2, "{text}");
    assert!(
        text.contains("6.1.0-57-amd64 is not an Enterprise Linux kernel release"),
        "{text}"
    );
    // A fleet key that cannot be read; a certificate that is not one.
    let missing = Fleet {
        key: f.key.with_extension("gone"),
        ..fleet()
    };
    let (rc, _, text) = kmod_build(&root, &missing, &[]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("fleet.gone"), "{text}");
    let bad = fleet();
    std::fs::write(&bad.cert, b"not a certificate").unwrap();
    let (rc, _, text) = kmod_build(&root, &bad, &[]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("certificate"), "{text}");
    for o in [&f.out, &missing.out, &bad.out] {
        assert!(!o.exists(), "{} was written", o.display());
    }
    // A repo built with another key is not added to.
    let (rc, _, text) = kmod_build(&root, &f, &[]);
    assert_eq!(rc, 0, "{text}");
    let other = Fleet {
        out: f.out.clone(),
        ..fleet()
    };
    let (rc, _, text) = kmod_build(&root, &other, &[]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("another key"), "{text}");
}

/// Issue 51, item 4: the build root is checked before anything is compiled. A root without
/// `/dev/fd` (no `/dev` bind-mounted) used to compile every module and then fail at `sign-file …
/// /dev/fd/0`, exit 1. Each thing the build and `sign-file` need, taken away in turn: exit 2
/// naming it and what to bind-mount, no compiler started (strace), nothing written; put back,
/// the same root builds.
#[test]
fn a_build_root_lacking_what_make_and_sign_file_need_is_refused_before_any_compile() {
    let root = build_root(&[UEK9]);
    let f = fleet();
    let rpm = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let args: Vec<String> = [
        "kmod",
        "build",
        "--local-repo-rpm",
        rpm.to_str().unwrap(),
        "--key",
        f.key.to_str().unwrap(),
        "--cert",
        f.cert.to_str().unwrap(),
        "--out",
        f.out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sign_file = format!("/usr/src/kernels/{UEK9}/scripts/sign-file");
    let hidden = |p: &str| format!("{p}.hidden-by-test");
    for (path, named) in [
        ("/dev/fd", "/dev/fd"),
        ("/dev/null", "/dev/null"),
        ("/proc", "/proc"),
        ("/usr/bin/strip", "strip (binutils)"),
        (sign_file.as_str(), "scripts/sign-file"),
    ] {
        std::fs::rename(root.join(path), root.join(&hidden(path))).unwrap();
        if path == "/dev/null" {
            // What an image build without /dev has at worst: a plain file where the device was.
            std::fs::write(root.join(path), b"").unwrap();
        }
        let (o, execs) = root.gpuhost_traced(&args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&o.stdout)
        );
        assert_eq!(code(&o), 2, "without {path}: {text}");
        assert!(
            text.contains(named) && text.contains("nothing was compiled"),
            "without {path}: {text}"
        );
        assert!(text.contains("mount --bind /dev"), "{text}");
        if let Some(execs) = execs {
            for p in ["make", "gcc", "cc1", "sign-file", "strip", "unshare"] {
                assert!(
                    !execs.iter().any(|e| e == p),
                    "without {path}, {p} ran: {execs:?}"
                );
            }
        }
        assert!(
            !f.out.exists(),
            "without {path}, {} was written",
            f.out.display()
        );
        assert!(!root.join("/var/cache/gpuhost/kmod-build").exists());
        if path == "/dev/null" {
            std::fs::remove_file(root.join(path)).unwrap();
        }
        std::fs::rename(root.join(&hidden(path)), root.join(path)).unwrap();
    }
    let (rc, _, text) = kmod_build(&root, &f, &[]);
    assert_eq!(rc, 0, "{text}");
}

/// A node's apply with `driver.kmod_repo`: the profile's driver from the local repo package,
/// the kernel module from the build host's repo.
fn node_apply(node: &Root, repo: &Path, cmd: &str) -> (i32, Value) {
    node_apply_of(node, repo, cmd, DRIVER_LOCAL_EL9_570, &[])
}

/// [`node_apply`] of the world's local repo package `local`, with more arguments.
fn node_apply_of(node: &Root, repo: &Path, cmd: &str, local: &str, extra: &[&str]) -> (i32, Value) {
    let rpm = World::get().cuda_local(local);
    let mut args = vec![
        cmd.to_string(),
        "--format".into(),
        "json".into(),
        "--profile".into(),
        world::profile("ol9-uek"),
        "--set".into(),
        format!("driver.local_repo_rpm={}", rpm.display()),
        "--set".into(),
        format!("driver.kmod_repo={}", repo.display()),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = node.gpuhost(&args);
    (code(&o), world::report(&o))
}

/// What a node that compiles nothing must not have (issue 41, item 2).
const BUILD_PACKAGES: &[&str] = &[
    "gcc",
    "gcc-c++",
    "make",
    "dkms",
    "kernel-devel",
    "kernel-uek-devel",
    "elfutils-libelf-devel",
    "kmod-nvidia-open-dkms",
];

#[test]
fn a_node_installs_the_prebuilt_kmod_and_compiles_nothing() {
    let (_build, f) = fleet_repo();
    let node = Root::new(Os::Ol9, &[UEK9]);
    // plan says which it will be, and why.
    let (rc, rep) = node_apply(&node, &f.out, "plan");
    assert_eq!(rc, 0, "{rep:#}");
    let km = world::step(&rep, "kernel-module");
    assert!(
        km.to_string().contains(&format!("kmod-nvidia-open-{UEK9}"))
            && km.to_string().contains("nothing is compiled here"),
        "{km:#}"
    );
    let deps = world::step(&rep, "build-deps");
    assert!(deps.to_string().contains("prebuilt kmods from"), "{deps:#}");
    // apply converges with the build host's module and no compiler.
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        node.nvidia_module_version(UEK9).as_deref(),
        Some("570.124.06"),
        "{rep:#}"
    );
    assert!(node
        .installed(&format!("kmod-nvidia-open-{UEK9}"))
        .is_some());
    for p in BUILD_PACKAGES {
        assert!(node.installed(p).is_none(), "{p} was installed: {rep:#}");
    }
    let toolsets = node.rpm(&["-qa", "gcc-toolset-*"]);
    assert!(String::from_utf8_lossy(&toolsets.stdout).trim().is_empty());
    assert!(!node.join("/var/lib/dkms/nvidia-open").exists());
    assert!(!node.join("/var/lib/dkms/nvidia").exists());
    // The module the node loads is the fleet's.
    for m in node.nvidia_module_files(UEK9) {
        let path = node.join(&m);
        assert_eq!(
            world::modinfo(&path, "signer").as_deref(),
            Some(FLEET_CN),
            "{m}"
        );
    }
    // A second apply changes nothing.
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
}

#[test]
fn a_served_kernel_without_a_kmod_in_the_repo_is_refused_before_any_change() {
    let (_build, f) = fleet_repo();
    // The node boots another kernel than the one the repo serves.
    let node = Root::new(Os::Ol9, &[world::UEK9_8]);
    let before = node.rpmdb_snapshot();
    for cmd in ["plan", "apply"] {
        let (rc, rep) = node_apply(&node, &f.out, cmd);
        assert_eq!(rc, 2, "{rep:#}");
        let text = rep.to_string();
        assert!(
            text.contains(world::UEK9_8) && text.contains("gpuhost kmod build"),
            "{rep:#}"
        );
    }
    assert_eq!(node.rpmdb_snapshot(), before);
    // A repo whose files no longer match its manifest: refused too, naming the file.
    let rpm = files_under(&f.out)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "rpm"))
        .unwrap();
    std::fs::write(&rpm, b"tampered").unwrap();
    let node = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 2, "{rep:#}");
    assert!(
        rep.to_string().contains("does not match its manifest"),
        "{rep:#}"
    );
}

/// A kmod built for another driver is refused before any change (issue 41, bad input): where
/// the repo says so (it has another driver's kmod for the kernel), and where its manifest says
/// otherwise (the RPM's own header is read: the package, its version, its arch).
#[test]
fn a_kmod_built_for_another_driver_is_refused_before_any_change() {
    let (_build, f) = fleet_repo();
    let node = Root::new(Os::Ol9, &[UEK9]);
    let before = node.rpmdb_snapshot();
    // The profile's driver is 580.82.07; the repo has 570.124.06's kmod for the kernel.
    let (rc, rep) = node_apply_of(&node, &f.out, "apply", world::CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 2, "{rep:#}");
    assert!(
        rep.to_string()
            .contains("(it has 570.124.06 open for that kernel)"),
        "{rep:#}"
    );
    assert_eq!(node.rpmdb_snapshot(), before);
    // The manifest edited to say that kmod is 580.82.07's: the RPM says otherwise.
    let manifest = f.out.join("gpuhost-kmods.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut m: Value = serde_json::from_str(&text).unwrap();
    for e in m["kmods"].as_array_mut().unwrap() {
        e["driver"] = "580.82.07".into();
    }
    std::fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let (rc, rep) = node_apply_of(&node, &f.out, "apply", world::CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 2, "{rep:#}");
    let text = rep.to_string();
    assert!(
        text.contains(&format!(
            "-570.124.06-1.x86_64, not NVIDIA 580.82.07's kmod kmod-nvidia-open-{UEK9}"
        )),
        "{rep:#}"
    );
    assert_eq!(node.rpmdb_snapshot(), before);
}

/// A node that built its modules with DKMS moves to the build host's kmods in one transaction
/// (issue 41, item 3): NVIDIA's DKMS kmod gives way, the fleet's module is what modprobe loads.
/// The modules DKMS left for the kernel go with it (the kmod's `%post`), and so do the build
/// packages gpuhost recorded installing, but one a site package needs.
#[test]
fn a_dkms_node_moves_to_the_prebuilt_kmods_in_one_transaction() {
    let (_build, f) = fleet_repo();
    let node = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = dkms_apply(&node);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node.installed("kmod-nvidia-open-dkms").is_some());
    assert!(node.installed("dkms").is_some());
    // What gpuhost installed to build is recorded; a site package that needs one of them
    // (make) keeps it when the rest goes.
    let recorded = node.read("/var/lib/gpuhost/built-by/build-deps");
    let built: Vec<&str> = recorded
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // Each pinned to the transaction that installed it (issue 53, item 2).
    assert!(
        recorded.lines().filter(|l| !l.starts_with('#')).all(|l| l
            .split_whitespace()
            .nth(1)
            .is_some_and(|m| m.starts_with("tid="))),
        "{recorded}"
    );
    assert!(
        built.contains(&"dkms") && built.contains(&"make"),
        "{recorded}"
    );
    let site = tempfile::tempdir().unwrap();
    let needs_make = site_package(site.path(), "site-needs-make", "make");
    let o = node.rpm(&["-i", needs_make.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (rc, rep) = node_apply(&node, &f.out, "plan");
    assert_eq!(rc, 0, "{rep:#}");
    let driver = world::step(&rep, "driver").to_string();
    assert!(
        driver.contains("kmod-nvidia-open-dkms gives way"),
        "{driver}"
    );
    // plan names the build packages that go (the driver's transaction removes them), and not
    // the one a site package needs.
    assert!(
        driver.contains("the build packages gpuhost installed for DKMS go with it"),
        "{driver}"
    );
    let removes: Vec<String> = world::step(&rep, "driver")["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|c| c.split("; remove ").nth(1))
        .flat_map(|r| {
            r.split(" --allowerasing")
                .next()
                .unwrap_or_default()
                .split(' ')
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(removes.iter().any(|n| n == "dkms"), "{driver}");
    assert!(!removes.iter().any(|n| n == "make"), "{driver}");
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    // One transaction: the driver step's, the DKMS kmod out, the build host's in.
    let dnf: Vec<String> = rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["commands"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| {
            c["argv"].as_array().map(|a| {
                a.iter()
                    .filter_map(|w| w.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        })
        // (dnf resolves the script with --assumeno first: the lines are checked before `run`)
        .filter(|c| {
            c.starts_with("dnf ")
                && (c.contains(" install") || c.contains(" shell"))
                && !c.contains("--assumeno")
        })
        .collect();
    assert_eq!(dnf.len(), 1, "{dnf:#?}");
    assert!(node.installed("kmod-nvidia-open-dkms").is_none(), "{rep:#}");
    // dnf's module state: the stream still enabled (dnf holds the branch), the DKMS install's
    // profile no longer marked installed (issue 51).
    assert_eq!(
        world::module_state(&node, "nvidia-driver"),
        (
            "open-dkms".to_string(),
            String::new(),
            "enabled".to_string()
        ),
        "{rep:#}"
    );
    // The same transaction removed the build packages gpuhost installed, but the one a site
    // package needs (issue 41, item 3).
    for n in built.iter().filter(|n| **n != "make") {
        assert!(
            node.installed(n).is_none(),
            "{n} is still installed: {rep:#}"
        );
    }
    assert!(node.installed("make").is_some());
    assert!(node.installed("site-needs-make").is_some());
    assert!(node
        .installed(&format!("kmod-nvidia-open-{UEK9}"))
        .is_some());
    assert_eq!(
        node.nvidia_module_version(UEK9).as_deref(),
        Some("570.124.06")
    );
    for m in node.nvidia_module_files(UEK9) {
        let path = node.join(&m);
        assert_eq!(
            world::modinfo(&path, "signer").as_deref(),
            Some(FLEET_CN),
            "{m}"
        );
    }
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
}

/// A driver change between branch streams with prebuilt kmods (issue 51): `570-open` to
/// `580-open` in the swap's one transaction; dnf's module state then moves to the new stream by
/// `dnf module reset` and `enable`, not `switch-to` (which would install the new stream's profile,
/// NVIDIA's DKMS kmod with it): the stream enabled, no profile marked, every package of the new
/// profile but the DKMS kmod, the build host's new kmod; a second apply changes nothing.
#[test]
fn a_driver_change_between_branch_streams_moves_the_module_state_without_the_dkms_kmod() {
    let build = build_root(&[UEK9]);
    let f = fleet();
    for local in [DRIVER_LOCAL_EL9_570, world::CUDA_LOCAL_EL9_13_0] {
        let (rc, _, text) = kmod_build_of(&build, &f, local, &[]);
        assert_eq!(rc, 0, "{text}");
    }
    let node = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = node_apply_of(
        &node,
        &f.out,
        "apply",
        DRIVER_LOCAL_EL9_570,
        &["--set", "driver.stream=570-open"],
    );
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        world::module_state(&node, "nvidia-driver"),
        ("570-open".to_string(), String::new(), "enabled".to_string())
    );
    let extra = [
        "--set",
        "driver.stream=580-open",
        "--set",
        "driver.replace_local_repo=true",
    ];
    let (rc, rep) = node_apply_of(&node, &f.out, "apply", world::CUDA_LOCAL_EL9_13_0, &extra);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(
        rep.to_string()
            .contains("dnf module reset and dnf module enable nvidia-driver:580-open"),
        "{rep:#}"
    );
    assert_eq!(
        world::module_state(&node, "nvidia-driver"),
        ("580-open".to_string(), String::new(), "enabled".to_string()),
        "{rep:#}"
    );
    assert_eq!(
        node.nvidia_module_version(UEK9).as_deref(),
        Some("580.82.07"),
        "{rep:#}"
    );
    for p in profile_of(&node, "580-open", "default")
        .iter()
        .filter(|p| *p != "kmod-nvidia-open-dkms")
    {
        assert!(
            node.installed(p)
                .is_some_and(|v| v.starts_with("580.82.07")),
            "{p}: {rep:#}"
        );
    }
    for p in BUILD_PACKAGES {
        assert!(node.installed(p).is_none(), "{p} was installed: {rep:#}");
    }
    let (rc, rep) = node_apply_of(&node, &f.out, "apply", world::CUDA_LOCAL_EL9_13_0, &extra);
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
}

/// The packages of `profile` of `nvidia-driver:<stream>` as dnf reads NVIDIA's metadata in the
/// root (`dnf module info --profile`).
fn profile_of(root: &Root, stream: &str, profile: &str) -> Vec<String> {
    let out = root.dnf_ok(&[
        "-q",
        "module",
        "info",
        "--profile",
        &format!("nvidia-driver:{stream}"),
    ]);
    let mut current = String::new();
    let mut pkgs = Vec::new();
    for line in out.lines() {
        let Some((k, v)) = line.split_once(" : ") else {
            continue;
        };
        if k.trim() == "Name" {
            continue;
        }
        if !k.trim().is_empty() {
            current = k.trim().to_string();
        }
        if current == profile {
            pkgs.push(v.trim().to_string());
        }
    }
    assert!(!pkgs.is_empty(), "no profile {profile} of {stream}: {out}");
    pkgs
}

/// Issue 51: `driver.kmod_repo` with every install set and stream a prebuilt kmod can serve, in
/// the world whose module metadata is NVIDIA's (genmodules.py: the DKMS kmod in the profiles).
/// For each: the build host has built the flavour's kmods for both kernels; a fresh node with no
/// compiler converges — the stream enabled, every package of the profile but NVIDIA's DKMS kmod
/// and the build host's kmod installed, no profile marked installed, no DKMS, no compiler; a
/// second apply changes nothing; a kernel update (dnf brings UEK 8, kernel-install makes it the
/// default) gets its kmod from the repo through the trigger, and the new kernel stays the
/// default.
#[test]
fn every_stream_profile_and_set_converges_with_prebuilt_kmods_and_takes_a_kernel_update() {
    let build = build_root(&[UEK9, world::UEK9_8]);
    build.dnf_ok(&["-y", "install", "gcc-toolset-14-gcc"]);
    let f = fleet();
    for flavour in ["open", "proprietary"] {
        let (rc, _, text) = kmod_build(
            &build,
            &f,
            &[
                "--flavour",
                flavour,
                "--kernel-release",
                UEK9,
                "--kernel-release",
                world::UEK9_8,
            ],
        );
        assert_eq!(rc, 0, "{flavour}: {text}");
    }
    // (driver.install, driver.stream, flavour, NVSwitch: the fm profile)
    let cells = [
        ("module", "open-dkms", "open", false),
        ("module", "570-open", "open", false),
        ("module", "latest-dkms", "proprietary", false),
        ("module", "570-dkms", "proprietary", false),
        ("module", "open-dkms", "open", true),
        ("module", "570-dkms", "proprietary", true),
        ("compute-only", "open-dkms", "open", false),
        ("compute-only", "570-dkms", "proprietary", false),
    ];
    for (install, stream, flavour, nvswitch) in cells {
        let cell = format!(
            "{install} {stream} ({flavour}{})",
            if nvswitch { ", fm" } else { "" }
        );
        let node = Root::new(Os::Ol9, &[UEK9]);
        if nvswitch {
            node.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
        }
        let extra = [
            "--set".to_string(),
            format!("driver.install={install}"),
            "--set".to_string(),
            format!("driver.stream={stream}"),
        ];
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (rc, rep) = node_apply_of(&node, &f.out, "apply", DRIVER_LOCAL_EL9_570, &extra);
        assert_eq!(rc, 0, "{cell}: {rep:#}");
        let kmod = format!("kmod-nvidia-{flavour}-{UEK9}");
        assert!(node.installed(&kmod).is_some(), "{cell}: {rep:#}");
        // dnf holds the branch: the stream enabled, no profile marked installed.
        assert_eq!(
            world::module_state(&node, "nvidia-driver"),
            (stream.to_string(), String::new(), "enabled".to_string()),
            "{cell}"
        );
        if install == "module" {
            let profile = if nvswitch { "fm" } else { "default" };
            let listed = profile_of(&node, stream, profile);
            let dkms = if flavour == "open" {
                "kmod-nvidia-open-dkms"
            } else {
                "kmod-nvidia-latest-dkms"
            };
            assert!(listed.iter().any(|p| p == dkms), "{cell}: {listed:?}");
            for p in listed.iter().filter(|p| *p != dkms) {
                assert!(
                    node.installed(p).is_some(),
                    "{cell}: {p} of profile {profile}: {rep:#}"
                );
            }
        } else {
            assert!(node.installed("nvidia-driver-cuda").is_some(), "{cell}");
            assert!(node.installed("nvidia-settings").is_none(), "{cell}");
        }
        for p in BUILD_PACKAGES.iter().chain(&["kmod-nvidia-latest-dkms"]) {
            assert!(
                node.installed(p).is_none(),
                "{cell}: {p} was installed: {rep:#}"
            );
        }
        assert!(!node.join("/var/lib/dkms").exists(), "{cell}");
        assert_eq!(
            node.nvidia_module_version(UEK9).as_deref(),
            Some("570.124.06"),
            "{cell}"
        );
        for m in node.nvidia_module_files(UEK9) {
            assert_eq!(
                world::modinfo(&node.join(&m), "signer").as_deref(),
                Some(FLEET_CN),
                "{cell}: {m}"
            );
        }
        let (rc, rep) = node_apply_of(&node, &f.out, "apply", DRIVER_LOCAL_EL9_570, &extra);
        assert_eq!(rc, 0, "{cell}: {rep:#}");
        world::assert_converged(&rep);
        // A kernel update: the trigger installs the new kernel's kmod, compiling nothing.
        node.dnf_ok(&[
            "-y",
            "install",
            &format!("kernel-uek-{}", world::evr(world::UEK9_8)),
        ]);
        node.kernel_install_add(world::UEK9_8);
        let o = node.gpuhost(&["kernel-added", world::UEK9_8, "--format", "json"]);
        let rep = world::report(&o);
        assert_eq!(code(&o), 0, "{cell}: {rep:#}");
        assert_eq!(
            node.nvidia_module_version(world::UEK9_8).as_deref(),
            Some("570.124.06"),
            "{cell}: {rep:#}"
        );
        assert!(
            node.installed(&format!("kmod-nvidia-{flavour}-{}", world::UEK9_8))
                .is_some(),
            "{cell}"
        );
        assert!(node.saved_entry().ends_with(world::UEK9_8), "{cell}");
        assert_eq!(
            world::module_state(&node, "nvidia-driver"),
            (stream.to_string(), String::new(), "enabled".to_string()),
            "{cell}"
        );
        for p in BUILD_PACKAGES.iter().chain(&["kmod-nvidia-latest-dkms"]) {
            assert!(
                node.installed(p).is_none(),
                "{cell}: {p} was installed: {rep:#}"
            );
        }
    }
}

/// The root's firmware: Secure Boot on, `certs` in the EFI variable `var`.
fn secure_boot(root: &Root, var: &str, certs: &[&[u8]]) {
    root.secure_boot_on();
    root.efivar(var, certs);
}

/// Secure Boot (issue 41, item 4): the node needs no key, only the fleet certificate enrolled
/// (or pending) before the first change; every module it then has is signed by it.
#[test]
fn under_secure_boot_the_fleet_certificate_must_be_enrolled_first() {
    let (_build, f) = fleet_repo();
    let fleet_der = std::fs::read(&f.cert).unwrap();
    // Another certificate is enrolled: refused before any change, naming the fleet's.
    let node = Root::new(Os::Ol9, &[UEK9]);
    let other = fleet();
    let other_der = std::fs::read(&other.cert).unwrap();
    secure_boot(&node, "MokListRT", &[&other_der]);
    let before = node.rpmdb_snapshot();
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 2, "{rep:#}");
    let text = rep.to_string();
    assert!(
        text.contains("fleet-signing-cert.der") && text.contains("not enrolled"),
        "{rep:#}"
    );
    assert_eq!(node.rpmdb_snapshot(), before);
    // Pending: applied, with the warning that it loads after MokManager's confirmation.
    secure_boot(&node, "MokNew", &[&fleet_der]);
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    assert!(rep["warnings"].to_string().contains("pending"), "{rep:#}");
    // Enrolled: converged; no key anywhere on the node, every module the fleet's.
    secure_boot(&node, "MokListRT", &[&fleet_der]);
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
    let files = node.nvidia_module_files(UEK9);
    assert_eq!(files.len(), 5, "{files:?}");
    for m in files {
        let path = node.join(&m);
        assert_eq!(
            world::modinfo(&path, "signer").as_deref(),
            Some(FLEET_CN),
            "{m}"
        );
        assert_eq!(sig_key(&path), cert_serial(&f.cert), "{m}");
        assert!(world::openssl_verifies_module(&path, &f.cert), "{m}");
    }
    let key = std::fs::read(&f.key).unwrap();
    for p in files_under(node.path()) {
        if let Ok(bytes) = std::fs::read(&p) {
            assert!(
                !bytes.windows(64).any(|w| w == &key[..64]),
                "the private key is on the node: {}",
                p.display()
            );
        }
    }
}

fn status_check(root: &Root, id: &str) -> Value {
    let run = tempfile::tempdir().unwrap();
    let o = root
        .gpuhost_cmd(&["status", "--format", "json"])
        .env("GPUHOST_RUN_DIR", run.path())
        .env_remove("GPUHOST_STATUS_ROOT")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no check {id}: {v:#}"))
}

/// A kernel update on a node with prebuilt kmods (issue 41, item 3): while the repo has no kmod
/// for the new kernel, status says the next boot has no module, the kernel guard keeps the
/// boot on the kernel that has one and its record says which kmod to build; once the build host
/// made it, the trigger installs it (nothing compiled) and the new kernel is the default again.
#[test]
fn a_kernel_update_gets_its_kmod_from_the_repo_or_the_guard_keeps_the_old_kernel() {
    let build = build_root(&[UEK9, world::UEK9_8]);
    build.dnf_ok(&["-y", "install", "gcc-toolset-14-gcc"]);
    let f = fleet();
    let (rc, _, text) = kmod_build(&build, &f, &["--kernel-release", UEK9]);
    assert_eq!(rc, 0, "{text}");
    let node = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    // dnf update brings UEK 8; kernel-install makes it the default.
    node.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-{}", world::evr(world::UEK9_8)),
    ]);
    node.kernel_install_add(world::UEK9_8);
    let nb = status_check(&node, "driver.next_boot");
    assert_eq!(nb["severity"], "CRITICAL", "{nb:#}");
    // The trigger (gpuhost-kernel@.service): the repo has no kmod for it yet.
    let o = node.gpuhost(&["kernel-added", world::UEK9_8, "--format", "json"]);
    let rep = world::report(&o);
    assert_eq!(code(&o), 1, "{rep:#}");
    assert_eq!(rep["kernel_guard"]["action"], "kept", "{rep:#}");
    assert!(node.saved_entry().ends_with(UEK9), "{}", node.saved_entry());
    let rec: Value =
        serde_json::from_str(&node.read("/var/lib/gpuhost/kernel-guard.json")).unwrap();
    let reason = rec["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("gpuhost kmod build") && reason.contains(world::UEK9_8),
        "{rec:#}"
    );
    assert!(node.installed("kernel-uek-devel").is_none(), "{rep:#}");
    assert!(node.installed("dkms").is_none(), "{rep:#}");
    // The build host adds the new kernel's kmod; the trigger installs it.
    let (rc, _, text) = kmod_build(&build, &f, &["--kernel-release", world::UEK9_8]);
    assert_eq!(rc, 0, "{text}");
    let o = node.gpuhost(&["kernel-added", world::UEK9_8, "--format", "json"]);
    let rep = world::report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    assert_eq!(
        node.nvidia_module_version(world::UEK9_8).as_deref(),
        Some("570.124.06"),
        "{rep:#}"
    );
    assert!(
        node.saved_entry().ends_with(world::UEK9_8),
        "{}",
        node.saved_entry()
    );
    assert!(!node.join("/var/lib/gpuhost/kernel-guard.json").exists());
    for p in BUILD_PACKAGES {
        assert!(node.installed(p).is_none(), "{p} was installed: {rep:#}");
    }
    assert_eq!(status_check(&node, "driver.next_boot")["severity"], "OK");
}

/// A driver change with prebuilt kmods (issue 41, item 3): the kmods of driver A give way to
/// those of driver B in the swap's one transaction (they are upgraded in place, by file), and
/// `rollback` goes back the same way; nothing is compiled.
#[test]
fn a_driver_swap_moves_the_prebuilt_kmods_in_one_transaction_and_rollback_goes_back() {
    let build = build_root(&[UEK9]);
    let f = fleet();
    for local in [DRIVER_LOCAL_EL9_570, world::CUDA_LOCAL_EL9_13_0] {
        let (rc, _, text) = kmod_build_of(&build, &f, local, &[]);
        assert_eq!(rc, 0, "{text}");
    }
    let node = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    let kmod = format!("kmod-nvidia-open-{UEK9}");
    let replace = ["--set", "driver.replace_local_repo=true"];
    let (rc, rep) = node_apply_of(&node, &f.out, "apply", world::CUDA_LOCAL_EL9_13_0, &replace);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        node.nvidia_module_version(UEK9).as_deref(),
        Some("580.82.07"),
        "{rep:#}"
    );
    assert_eq!(
        node.installed_all(&kmod).len(),
        1,
        "{:?}",
        node.installed_all(&kmod)
    );
    assert!(node
        .installed(&kmod)
        .is_some_and(|v| v.contains("580.82.07")));
    for p in BUILD_PACKAGES {
        assert!(node.installed(p).is_none(), "{p} was installed: {rep:#}");
    }
    let (rc, rep) = node_apply_of(&node, &f.out, "apply", world::CUDA_LOCAL_EL9_13_0, &replace);
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
    // rollback: back to driver 570 and its kmod.
    let o = node.gpuhost(&["rollback", "--format", "json"]);
    let rep = world::report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    assert_eq!(
        node.nvidia_module_version(UEK9).as_deref(),
        Some("570.124.06"),
        "{rep:#}"
    );
    assert!(node
        .installed(&kmod)
        .is_some_and(|v| v.contains("570.124.06")));
    for m in node.nvidia_module_files(UEK9) {
        assert_eq!(
            world::modinfo(&node.join(&m), "signer").as_deref(),
            Some(FLEET_CN),
            "{m}"
        );
    }
}

/// aarch64 (Grace): the kmods built on this x86_64 machine through an aarch64 build root (its
/// make, compiler and sign-file run under qemu-user, as the test world runs them), one aarch64
/// RPM per kernel, the 64k one included; an aarch64 node installs them and compiles nothing.
#[test]
fn aarch64_kmods_are_built_through_an_aarch64_root_and_installed_on_grace() {
    if !world::aarch64_ready() {
        return;
    }
    let (k4, k64) = (world::UEK9_ARM, world::UEK9_ARM_64K);
    let build = build_root_of(Os::Ol9Aarch64, &[k4, k64]);
    let f = fleet();
    let (rc, rep, text) = kmod_build_of(
        &build,
        &f,
        world::DRIVER_LOCAL_EL9_580_AARCH64,
        &["--kernel-release", k4, "--kernel-release", k64],
    );
    assert_eq!(rc, 0, "{text}");
    for k in rep["kmods"].as_array().unwrap() {
        let rpm = f.out.join(k["file"].as_str().unwrap());
        assert_eq!(rpm_q(&rpm, "--qf=%{ARCH}"), "aarch64", "{k:#}");
        let payload = unpack(&rpm);
        for m in files_under(payload.path()) {
            let elf = std::fs::read(&m).unwrap();
            assert_eq!(
                &elf[18..20],
                &[0xb7, 0x00],
                "e_machine EM_AARCH64: {}",
                m.display()
            );
            assert_eq!(world::modinfo(&m, "signer").as_deref(), Some(FLEET_CN));
        }
    }
    eprintln!(
        "aarch64 build through qemu-user: {}",
        rep["kmods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| format!(
                "{}: {} s, {} CPU-s",
                k["kernel"], k["build_seconds"], k["cpu_seconds"]
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let node = Root::new(Os::Ol9Aarch64, &[k4, k64]).with_default_kernel(k64);
    let (rc, rep) = node_apply_of(
        &node,
        &f.out,
        "apply",
        world::DRIVER_LOCAL_EL9_580_AARCH64,
        &[],
    );
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        node.nvidia_module_version(k64).as_deref(),
        Some("580.82.07"),
        "{rep:#}"
    );
    assert!(node.installed(&format!("kmod-nvidia-open-{k64}")).is_some());
    for p in BUILD_PACKAGES.iter().chain(&["kernel-uek64k-devel"]) {
        assert!(node.installed(p).is_none(), "{p} was installed: {rep:#}");
    }
}

/// The root's repos point at nothing reachable (the mirrors gone, every baseurl a directory
/// that does not exist): what it installs comes from the bundle or nowhere.
fn cut_off(root: &Root) {
    let _ = std::fs::remove_dir_all(root.join("srv/repos"));
    for e in std::fs::read_dir(root.join("etc/yum.repos.d")).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let cut: Vec<String> = text
            .lines()
            .map(|l| match l.strip_prefix("baseurl=") {
                Some(_) => "baseurl=file:///nonexistent/gpuhost-offline/".to_string(),
                None => l.to_string(),
            })
            .collect();
        std::fs::write(&p, cut.join("\n") + "\n").unwrap();
    }
    assert!(
        !root.dnf(&["makecache"]).status.success(),
        "dnf still reaches a repo"
    );
}

/// `gpuhost bundle --root SRC --profile ol9-uek` with the world's 570 local repo package and
/// `extra` (`--kmod-repo DIR`, `--format json`): exit code, stdout and stderr.
fn bundle_with(src: &Root, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let rpm = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let mut args = vec![
        "bundle".to_string(),
        "--profile".into(),
        world::profile("ol9-uek"),
        "--set".into(),
        format!("driver.local_repo_rpm={}", rpm.display()),
        "--out".into(),
        out.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = src.gpuhost(&args);
    (code(&o), world::stdout(&o), world::stderr(&o))
}

/// What a bundle with prebuilt kmods must not carry: the packages only a DKMS build needs.
fn is_build_package(nevra: &str) -> bool {
    let name = nevra.rsplitn(3, '-').nth(2).unwrap_or(nevra).to_string();
    name.starts_with("gcc-toolset-")
        || [
            "gcc",
            "gcc-c++",
            "make",
            "dkms",
            "kernel-devel",
            "kernel-uek-devel",
            "kernel-headers",
            "elfutils-libelf-devel",
            "kmod-nvidia-open-dkms",
            "kmod-nvidia-latest-dkms",
        ]
        .contains(&name.as_str())
}

/// Issue 41: the bundle carries the build host's kmod repo (`bundle --kmod-repo`), and a fresh
/// node converges from the bundle alone, cut off from every repo: the fleet-signed module, and
/// none of DKMS, a compiler or kernel headers, in the bundle or on the node.
#[test]
fn a_bundle_carries_the_kmod_repo_and_a_fresh_node_compiles_nothing() {
    let (_build, f) = fleet_repo();
    // The build host's repo holds another kernel's kmod too: the bundle carries its own only.
    let other = build_root(&[world::UEK9_8]);
    let (rc, _, text) = kmod_build(&other, &f, &[]);
    assert_eq!(rc, 0, "{text}");

    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bundle");
    let src = Root::new(Os::Ol9, &[UEK9]);
    let repo = f.out.display().to_string();
    let (rc, stdout, stderr) = bundle_with(&src, &out, &["--kmod-repo", &repo, "--tar"]);
    assert_eq!(rc, 0, "{stdout}\n{stderr}");
    // What bundle printed: the kmod repo's part, its kernels and size.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("prebuilt kmods:"))
        .unwrap_or_else(|| panic!("no kmod line in\n{stdout}"));
    assert!(
        line.contains("NVIDIA 570.124.06 open") && line.contains(UEK9) && line.contains(" KiB"),
        "{line}"
    );
    assert!(!line.contains(world::UEK9_8), "{line}");

    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let packages: Vec<&str> = manifest["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let build_packages: Vec<&&str> = packages.iter().filter(|p| is_build_package(p)).collect();
    assert!(
        build_packages.is_empty(),
        "{build_packages:?} in {packages:?}"
    );
    // Nor the kernel itself: the node has it (the scratch root stands for it).
    assert!(
        !packages.iter().any(|p| p.starts_with("kernel-uek")),
        "{packages:?}"
    );
    assert!(
        packages
            .iter()
            .any(|p| p.starts_with("nvidia-kmod-common-")),
        "{packages:?}"
    );
    let kmods = &manifest["kmod_repo"];
    assert_eq!(kmods["path"], "kmods", "{manifest:#}");
    assert_eq!(kmods["kernels"], serde_json::json!([UEK9]), "{manifest:#}");
    assert_eq!(
        kmods["packages"],
        serde_json::json!([format!("kmod-nvidia-open-{UEK9}")])
    );
    let files: Vec<(String, u64)> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["size"].as_u64().unwrap(),
            )
        })
        .collect();
    let kmod_bytes: u64 = files
        .iter()
        .filter(|(p, _)| p.starts_with("kmods/"))
        .map(|(_, s)| s)
        .sum();
    assert_eq!(kmods["bytes"].as_u64(), Some(kmod_bytes), "{manifest:#}");
    for want in [
        "kmods/fleet-signing-cert.der".to_string(),
        "kmods/gpuhost-kmods.json".to_string(),
        "kmods/repodata/repomd.xml".to_string(),
        format!("kmods/x86_64/kmod-nvidia-open-{UEK9}-570.124.06-1.x86_64.rpm"),
    ] {
        assert!(files.iter().any(|(p, _)| *p == want), "{want}: {files:?}");
    }
    assert!(
        !files.iter().any(|(p, _)| p.contains(world::UEK9_8)
            || (p.starts_with("driver/") && p.contains("kmod-nvidia"))
            || (p.starts_with("repo/") && p.contains("kmod-nvidia-open-"))),
        "{files:?}"
    );
    let profile = std::fs::read_to_string(out.join("profile.toml")).unwrap();
    assert!(profile.contains("kmod_repo = \"kmods\""), "{profile}");

    // A fresh node, cut off from every repo: the bundle alone.
    let node = Root::new(Os::Ol9, &[UEK9]);
    cut_off(&node);
    let b = out.display().to_string();
    let o = node.gpuhost(&["apply", "--bundle", &b, "--format", "json"]);
    let rep = world::report(&o);
    assert_eq!(code(&o), 0, "{rep:#}\n{}", world::stderr(&o));
    assert!(
        world::step(&rep, "kernel-module")
            .to_string()
            .contains(&format!("kmod-nvidia-open-{UEK9}")),
        "{rep:#}"
    );
    assert!(node
        .installed(&format!("kmod-nvidia-open-{UEK9}"))
        .is_some());
    assert_eq!(
        node.nvidia_module_version(UEK9).as_deref(),
        Some("570.124.06")
    );
    let modules = node.nvidia_module_files(UEK9);
    assert!(!modules.is_empty());
    for m in modules {
        assert_eq!(
            world::modinfo(&node.join(&m), "signer").as_deref(),
            Some(FLEET_CN),
            "{m}"
        );
    }
    for p in BUILD_PACKAGES {
        assert!(node.installed(p).is_none(), "{p} was installed: {rep:#}");
    }
    let toolsets = node.rpm(&["-qa", "gcc-toolset-*"]);
    assert!(String::from_utf8_lossy(&toolsets.stdout).trim().is_empty());
    assert!(!node.join("/var/lib/dkms/nvidia-open").exists());
    // Again, from the tarball (its kmod repo unpacked with it): nothing changes.
    let tar = format!("{b}.tar");
    let o = node.gpuhost(&["apply", "--bundle", &tar, "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", world::stderr(&o));
    world::assert_converged(&world::report(&o));
}

/// A kmod repo that does not match its manifest, or that lacks a served kernel's kmod, is
/// refused before the bundle is made (exit 2): nothing at --out, nothing beside it.
#[test]
fn a_bundle_refuses_a_tampered_kmod_repo_or_one_without_the_kernels_kmod() {
    let (_build, f) = fleet_repo();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bundle");
    let repo = f.out.display().to_string();

    // The source root serves a kernel the repo has no kmod for.
    let src = Root::new(Os::Ol9, &[world::UEK9_8]);
    let (rc, stdout, stderr) = bundle_with(&src, &out, &["--kmod-repo", &repo]);
    assert_eq!(rc, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains(world::UEK9_8) && stderr.contains("gpuhost kmod build"),
        "{stderr}"
    );
    assert!(!out.exists());

    // The repo's RPM changed after the build; through --kmod-repo and through the profile key.
    let rpm = files_under(&f.out)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "rpm"))
        .unwrap();
    std::fs::write(&rpm, b"tampered").unwrap();
    let src = Root::new(Os::Ol9, &[UEK9]);
    let by_key = format!("driver.kmod_repo={repo}");
    for extra in [["--kmod-repo", repo.as_str()], ["--set", by_key.as_str()]] {
        let (rc, stdout, stderr) = bundle_with(&src, &out, &extra);
        assert_eq!(rc, 2, "{stdout}\n{stderr}");
        assert!(
            stderr.contains("does not match its manifest") && stderr.contains(".rpm"),
            "{stderr}"
        );
        assert!(!out.exists(), "{} was written", out.display());
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

/// A document's commands run here: bash with `set -euo pipefail`, the gpuhost under test first on
/// the PATH, the world's HOME, and the additions this test makes to the text (each must apply
/// at least once: one that no longer matches fails).
struct DocShell {
    cwd: PathBuf,
    rewrites: Vec<(String, String, usize)>,
}

impl DocShell {
    fn new(cwd: &Path, rewrites: &[(&str, String)]) -> DocShell {
        DocShell {
            cwd: cwd.to_path_buf(),
            rewrites: rewrites
                .iter()
                .map(|(f, t)| (f.to_string(), t.clone(), 0))
                .collect(),
        }
    }

    /// Runs `cmd` as rewritten; wants exit 0; its stdout.
    fn ok(&mut self, cmd: &str) -> String {
        let mut eff = cmd.to_string();
        for (from, to, used) in &mut self.rewrites {
            *used += eff.matches(from.as_str()).count();
            eff = eff.replace(from.as_str(), to);
        }
        let bin = Path::new(env!("CARGO_BIN_EXE_gpuhost")).parent().unwrap();
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!("set -euo pipefail\n{eff}"))
            .current_dir(&self.cwd)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .env("HOME", World::get().home())
            .output()
            .unwrap();
        assert_eq!(
            code(&o),
            0,
            "$ {cmd}\n(run as: {eff})\n{}\n{}",
            world::stdout(&o),
            world::stderr(&o)
        );
        world::stdout(&o)
    }

    fn finish(&self) {
        for (from, to, used) in &self.rewrites {
            assert!(
                *used > 0,
                "the test replaces {from:?} with {to:?}, but no command of the block has it: update the test with the document"
            );
        }
    }
}

/// docs/kmods.md, in order: the fleet key made with openssl and the kmods built on a build root
/// of the test world (`--root` added: the document's build host is `/`); the bundle made with
/// them from a source root and applied on a fresh root; the repo given to plan and apply on
/// another fresh root. Paths under /srv, /media and /etc/pki are this test's.
#[test]
fn the_kmods_page_runs_in_order() {
    let w = World::get();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let build = build_root(&[UEK9]);
    let local = format!(
        "{}/nvidia-driver-local-repo-",
        w.dir().join("rpms/cuda-local").display()
    );
    let kmods = dir.join("gpuhost-kmods").display().to_string();
    let common = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut r = vec![
            ("/srv/nvidia-driver-local-repo-", local.clone()),
            ("/srv/gpuhost-kmods", kmods.clone()),
            (
                "--profile ol9-uek ",
                format!("--profile {} ", world::profile("ol9-uek")),
            ),
        ];
        r.extend(extra.iter().cloned());
        r
    };
    let mut sh = DocShell::new(
        dir,
        &[
            ("/etc/pki/gpuhost", dir.join("pki").display().to_string()),
            ("/srv/nvidia-driver-local-repo-", local.clone()),
            ("/srv/gpuhost-kmods", kmods.clone()),
            (
                "gpuhost kmod build ",
                format!("gpuhost kmod build --root {} ", build.path().display()),
            ),
        ],
    );
    let block = docs::delegated(file!(), "docs/kmods.md", "build-host");
    let cmds = block.commands();
    assert_eq!(cmds.len(), 3, "{cmds:?}");
    let mut printed = String::new();
    for c in &cmds {
        printed = sh.ok(c);
    }
    sh.finish();
    assert!(
        printed.contains(&format!(
            "  {UEK9}  x86_64/kmod-nvidia-open-{UEK9}-570.124.06-1.x86_64.rpm  (5 modules; "
        )) && printed.contains(&format!(
            "install on nodes with driver.kmod_repo = \"{kmods}\""
        )),
        "{printed}"
    );

    // The bundle, from a source root, applied on a fresh one with nothing else reachable.
    let src = Root::new(Os::Ol9, &[UEK9]);
    let node = Root::new(Os::Ol9, &[UEK9]);
    cut_off(&node);
    let carry = dir.join("carry");
    std::fs::create_dir(&carry).unwrap();
    let mut sh = DocShell::new(
        dir,
        &common(&[
            ("--root / ", format!("--root {} ", src.path().display())),
            (
                "/srv/gpuhost-bundle",
                format!("{}/gpuhost-bundle", carry.display()),
            ),
            (
                "/media/gpuhost-bundle",
                format!("{}/gpuhost-bundle", carry.display()),
            ),
            (
                "gpuhost apply ",
                format!("gpuhost apply --root {} ", node.path().display()),
            ),
        ]),
    );
    let cmds = docs::delegated(file!(), "docs/kmods.md", "bundle").commands();
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    let made = sh.ok(&cmds[0]);
    assert!(
        made.contains(&format!(
            "prebuilt kmods: NVIDIA 570.124.06 open for kernel(s) {UEK9}, "
        )),
        "{made}"
    );
    let applied = sh.ok(&cmds[1]);
    assert!(applied.contains("converged — "), "{applied}");
    sh.finish();
    assert!(node
        .installed(&format!("kmod-nvidia-open-{UEK9}"))
        .is_some());
    assert!(node.installed("dkms").is_none() && node.installed("gcc").is_none());

    // The repo named on a node's command line: plan changes nothing, apply installs the kmod.
    let node = Root::new(Os::Ol9, &[UEK9]);
    let r = node.path().display().to_string();
    let mut sh = DocShell::new(
        dir,
        &common(&[
            ("gpuhost plan ", format!("gpuhost plan --root {r} ")),
            ("gpuhost apply ", format!("gpuhost apply --root {r} ")),
        ]),
    );
    let cmds = docs::delegated(file!(), "docs/kmods.md", "node").commands();
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    let before = node.rpmdb_snapshot();
    let plan = sh.ok(&cmds[0]);
    assert!(
        plan.contains(&format!("kmod-nvidia-open-{UEK9}")) && plan.contains("nothing is compiled"),
        "{plan}"
    );
    assert_eq!(node.rpmdb_snapshot(), before, "plan changed the root");
    let applied = sh.ok(&cmds[1]);
    assert!(applied.contains("converged — "), "{applied}");
    sh.finish();
    assert!(node
        .installed(&format!("kmod-nvidia-open-{UEK9}"))
        .is_some());
    for p in BUILD_PACKAGES {
        assert!(node.installed(p).is_none(), "{p} was installed");
    }
}

/// A kmod repo whose modules are signed by another key than the certificate it carries (its
/// certificate and manifest rewritten to the fleet's, as a mistaken or hostile build host
/// would) is refused under Secure Boot before any change (issue 41, bad input): the modules
/// are read out of the kmod RPM and their signatures checked before the transaction, not after
/// it.
#[test]
fn a_kmod_signed_by_another_key_is_refused_before_the_install() {
    let build = build_root(&[UEK9]);
    let f = fleet();
    let other = fleet();
    let (rc, _, text) = kmod_build(&build, &other, &[]);
    assert_eq!(rc, 0, "{text}");
    // The repo now claims the fleet's certificate.
    let fleet_der = std::fs::read(&f.cert).unwrap();
    std::fs::write(other.out.join("fleet-signing-cert.der"), &fleet_der).unwrap();
    let manifest = other.out.join("gpuhost-kmods.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let sum = std::process::Command::new("sha256sum")
        .arg(&f.cert)
        .output()
        .unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    m["cert_sha256"] = Value::String(sum);
    std::fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let node = Root::new(Os::Ol9, &[UEK9]);
    secure_boot(&node, "MokListRT", &[&fleet_der]);
    let before = node.rpmdb_snapshot();
    let (rc, rep) = node_apply(&node, &other.out, "apply");
    assert_eq!(rc, 2, "{rep:#}");
    let text = rep.to_string();
    assert!(
        text.contains("not by the fleet certificate") && text.contains("nothing was installed"),
        "{rep:#}"
    );
    assert_eq!(node.rpmdb_snapshot(), before);
    assert!(node.nvidia_module_files(UEK9).is_empty());
}

/// Issue 53, item 3: `kmod build` reads the local repo package by the rules a node's `plan`
/// and `apply` read it by (`tests/transaction.rs one_package_gets_one_answer_from_plan_and_apply`):
/// a link of its repo that leaves the repo (before: taken, as its own folders were not the
/// rule), one through another of its links, a package its repo metadata does not know. Exit 2
/// naming it, before anything is compiled; nothing in `--out`.
#[rstest]
#[case::a_link_out_of_the_repo("plain-link", "which leaves")]
#[case::a_link_through_a_link("link", "which leaves")]
#[case::a_package_its_metadata_does_not_know("metadata", "does not match its repo metadata")]
fn kmod_build_refuses_what_apply_refuses_of_a_local_repo_package(
    #[case] defect: &str,
    #[case] said: &str,
) {
    let root = build_root(&[UEK9]);
    let f = fleet();
    let dir = tempfile::tempdir().unwrap();
    let rpm = world::repacked(DRIVER_LOCAL_EL9_570, dir.path(), |t| {
        let repo = std::fs::read_dir(t.join("var"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.is_dir())
            .unwrap();
        let link = |to: &str, at: &str| std::os::unix::fs::symlink(to, repo.join(at)).unwrap();
        match defect {
            "plain-link" => link("/etc/hostname", "zz-extra"),
            "link" => {
                link(".", "zz-b");
                link(
                    &("zz-b/".repeat(8) + &"../".repeat(8) + "etc/hostname"),
                    "zz-extra",
                );
            }
            _ => {
                let settings = std::fs::read_dir(&repo)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| p.to_string_lossy().contains("nvidia-settings"))
                    .unwrap();
                let mut bytes = std::fs::read(&settings).unwrap();
                bytes.extend(b"appended after createrepo");
                std::fs::write(&settings, bytes).unwrap();
            }
        }
    });
    let (rc, _, out) = kmod_build_rpm(&root, &f, Path::new(&rpm), &[]);
    assert_eq!(rc, 2, "{out}");
    assert!(out.contains(said), "{out}");
    let made = std::fs::read_dir(&f.out).map_or(0, |d| d.count());
    assert_eq!(made, 0, "kmod build wrote into --out: {out}");
}

/// A noarch site package `name` that requires `requires`, built with rpmbuild under `dir`.
fn site_package(dir: &Path, name: &str, requires: &str) -> PathBuf {
    let spec = dir.join(format!("{name}.spec"));
    std::fs::write(
        &spec,
        format!("Name: {name}\nVersion: 1.0\nRelease: 1\nSummary: a site package\nLicense: MIT\nBuildArch: noarch\nRequires: {requires}\n%description\nsite\n%files\n"),
    )
    .unwrap();
    let o = Command::new("rpmbuild")
        .args(["-bb", "--define"])
        .arg(format!("_topdir {}", dir.join("build").display()))
        .arg(&spec)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    dir.join(format!("build/RPMS/noarch/{name}-1.0-1.noarch.rpm"))
}

/// `plan`, then `apply`, on `node` with the same arguments: plan's steps and changes are apply's
/// (outcomes, and the work of every change), its text says no DKMS build and no Secure Boot
/// verdict on a root without Secure Boot, one line per change and none past 400 characters.
/// `path` names the kmod path in the messages. Apply's report.
fn plan_is_apply(node: &Root, path: &str, local: &str, repo: &Path, extra: &[&str]) -> Value {
    let (rc, plan) = node_apply_of(node, repo, "plan", local, extra);
    assert_eq!(rc, 0, "{path}: {plan:#}");
    let text = {
        let rpm = World::get().cuda_local(local);
        let mut args = vec![
            "plan".to_string(),
            "--profile".into(),
            world::profile("ol9-uek"),
            "--set".into(),
            format!("driver.local_repo_rpm={}", rpm.display()),
            "--set".into(),
            format!("driver.kmod_repo={}", repo.display()),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = node.gpuhost(&args);
        assert_eq!(code(&o), 0, "{path}: {}", world::stderr(&o));
        world::stdout(&o)
    };
    let (rc, apply) = node_apply_of(node, repo, "apply", local, extra);
    assert_eq!(rc, 0, "{path}: {apply:#}");
    assert_eq!(
        world::outcomes_and_work(&plan),
        world::outcomes_and_work(&apply),
        "{path}: plan said otherwise than apply did\nplan:\n{text}"
    );
    let planned: Vec<String> = world::outcomes_and_work(&plan)
        .into_iter()
        .flat_map(|(_, _, w)| w)
        .collect();
    assert!(
        !planned.iter().any(|w| w.starts_with("dkms ")),
        "{path}: {planned:?}"
    );
    assert!(!text.contains("Secure Boot"), "{path}: {text}");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 400,
            "{path}: a line of {} characters:\n{line}",
            line.chars().count()
        );
    }
    // One line per change: each step's lines (its own and those under it, but a long change's
    // reason on a line of its own) are as many as its runs of changes that share a reason.
    // A change's line starts where the step line's first change does; its reason ("why: …")
    // and what comes in a swap ("comes: …", wrapped) are indented further.
    let column = text
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("  ")?;
            let outcome = ["would-change", "unchanged", "skipped"]
                .iter()
                .find_map(|o| rest.find(&format!(" {o} ")).map(|i| i + o.len() + 2))?;
            let after = &rest[outcome..];
            Some(2 + outcome + after.len() - after.trim_start().len())
        })
        .unwrap_or(0);
    let mut shown: Vec<(String, usize)> = Vec::new();
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        match (line.strip_prefix("  "), shown.last_mut()) {
            (Some(rest), _) if !rest.starts_with(' ') => {
                let id = rest.split_whitespace().next().unwrap_or_default();
                shown.push((id.to_string(), 1));
            }
            (Some(_), Some((_, n))) if indent == column => *n += 1,
            _ => {}
        }
    }
    for s in plan["steps"].as_array().into_iter().flatten() {
        let reasons: Vec<String> = s["changes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|c| c[world::work_of(c).len()..].to_string())
            .collect();
        let mut runs = reasons.clone();
        runs.dedup();
        let id = s["id"].as_str().unwrap_or_default();
        if runs.is_empty() {
            continue;
        }
        let lines = shown.iter().find(|(i, _)| i == id).map_or(0, |(_, n)| *n);
        assert_eq!(lines, runs.len(), "{path}: {id}'s changes in\n{text}");
    }
    apply
}

/// Issue 54: `plan` with prebuilt kmods says exactly what `apply` then does, on every kmod
/// path — a fresh node, a node whose DKMS built its modules, a kernel update, a driver swap —
/// on roots without Secure Boot (`facts`: not-efi): no DKMS build, no Secure Boot verdict,
/// readable lines.
#[test]
fn plan_says_what_apply_does_on_every_kmod_path() {
    let build = build_root(&[UEK9, world::UEK9_8]);
    build.dnf_ok(&["-y", "install", "gcc-toolset-14-gcc"]);
    let f = fleet();
    let both = ["--kernel-release", UEK9, "--kernel-release", world::UEK9_8];
    for local in [DRIVER_LOCAL_EL9_570, world::CUDA_LOCAL_EL9_13_0] {
        let (rc, _, text) = kmod_build_of(&build, &f, local, &both);
        assert_eq!(rc, 0, "{text}");
    }

    // Fresh.
    let node = Root::new(Os::Ol9, &[UEK9]);
    let facts = node.gpuhost(&["facts"]);
    assert!(
        world::stdout(&facts).contains("not-efi"),
        "{}",
        world::stdout(&facts)
    );
    plan_is_apply(&node, "fresh", DRIVER_LOCAL_EL9_570, &f.out, &[]);
    world::assert_converged(&node_apply(&node, &f.out, "apply").1);

    // A kernel update: the new kernel's kmod from the repo.
    node.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-{}", world::evr(world::UEK9_8)),
    ]);
    node.kernel_install_add(world::UEK9_8);
    plan_is_apply(&node, "kernel update", DRIVER_LOCAL_EL9_570, &f.out, &[]);
    assert_eq!(
        node.nvidia_module_version(world::UEK9_8).as_deref(),
        Some("570.124.06")
    );

    // A driver swap: the new driver's kmods come in driver-repo's one transaction.
    let replace = ["--set", "driver.replace_local_repo=true"];
    let apply = plan_is_apply(&node, "swap", world::CUDA_LOCAL_EL9_13_0, &f.out, &replace);
    assert_eq!(
        node.nvidia_module_version(UEK9).as_deref(),
        Some("580.82.07"),
        "{apply:#}"
    );

    // DKMS → prebuilt: the modules DKMS built give way to the build host's kmods.
    let dkms = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = dkms_apply(&dkms);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(dkms.installed("kmod-nvidia-open-dkms").is_some());
    let apply = plan_is_apply(&dkms, "DKMS → prebuilt", DRIVER_LOCAL_EL9_570, &f.out, &[]);
    assert!(
        dkms.installed("kmod-nvidia-open-dkms").is_none(),
        "{apply:#}"
    );
    for m in dkms.nvidia_module_files(UEK9) {
        assert_eq!(
            world::modinfo(&dkms.join(&m), "signer").as_deref(),
            Some(FLEET_CN),
            "{m}"
        );
    }
}

/// A node converged on NVIDIA's DKMS kmod (no `driver.kmod_repo`) with the world's 570 driver.
fn dkms_apply(node: &Root) -> (i32, Value) {
    let rpm = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let o = node.gpuhost(&[
        "apply",
        "--format",
        "json",
        "--profile",
        &world::profile("ol9-uek"),
        "--set",
        &format!("driver.local_repo_rpm={}", rpm.display()),
    ]);
    (code(&o), world::report(&o))
}

/// The packages the driver step's changes remove (`…; remove a b --allowerasing`).
fn removed_by_driver(rep: &Value) -> Vec<String> {
    world::step(rep, "driver")["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|c| c.split("; remove ").nth(1))
        .flat_map(|r| {
            r.split(" --allowerasing")
                .next()
                .unwrap_or_default()
                .split(' ')
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `plan` of the move to prebuilt kmods: what the driver step would remove, and stderr.
fn move_plan(node: &Root, repo: &Path) -> (Vec<String>, String) {
    let rpm = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let o = node.gpuhost(&[
        "plan",
        "--format",
        "json",
        "--profile",
        &world::profile("ol9-uek"),
        "--set",
        &format!("driver.local_repo_rpm={}", rpm.display()),
        "--set",
        &format!("driver.kmod_repo={}", repo.display()),
    ]);
    let rep = world::report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    (
        removed_by_driver(&rep),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Issue 53, item 2: a built-by record decides nothing on its own. Edited to name
/// `openssh-server`, a site agent or the kernel (with the transaction id gpuhost's own lines
/// carry, or bare), those stay; a record writable by others, owned by another user, or a link to
/// a site file is not used at all (nothing removed, a warning naming it).
#[test]
fn a_built_by_record_removes_only_what_gpuhost_installed_and_rpm_agrees() {
    use std::os::unix::fs::PermissionsExt;
    let (_build, f) = fleet_repo();
    let node = Root::new(Os::Ol9, &[UEK9]);
    // rpm's transaction id (INSTALLTID) is the second the transaction began: the node's own
    // packages and the site's go in other seconds than gpuhost's transaction, as on a real node
    // (in this fast world they could share one, and a tid then names both: see docs/kmods.md).
    next_second();
    let (rc, rep) = dkms_apply(&node);
    assert_eq!(rc, 0, "{rep:#}");
    next_second();
    let site = tempfile::tempdir().unwrap();
    let agent = site_package(site.path(), "site-agent", "bash");
    let o = node.rpm(&["-i", agent.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rec = "/var/lib/gpuhost/built-by/build-deps";
    let ours = node.read(rec);
    let sshd = node.installed("openssh-server");
    let (removes, _) = move_plan(&node, &f.out);
    assert!(removes.iter().any(|n| n == "dkms"), "{removes:?}");
    // Edited: the site's packages named with gpuhost's own transaction id, and bare.
    let tid = ours
        .lines()
        .find_map(|l| l.strip_prefix("dkms tid="))
        .unwrap()
        .to_string();
    let mut edited = ours.clone();
    for n in ["openssh-server", "site-agent", "kernel-uek", "kernel"] {
        edited.push_str(&format!("{n} tid={tid}\n{n}\n"));
    }
    // And 300,000 names besides: no name of a record goes on a command line (E2BIG).
    let mut long = edited.clone();
    for i in 0..300_000 {
        long.push_str(&format!("site-pkg-{i} tid={tid}\n"));
    }
    node.write(rec, &long);
    let (removes, _) = move_plan(&node, &f.out);
    assert!(removes.iter().any(|n| n == "dkms"), "{removes:?}");
    assert!(
        !removes.iter().any(|n| n.starts_with("site-")),
        "{removes:?}"
    );
    node.write(rec, &edited);
    let (removes, _) = move_plan(&node, &f.out);
    assert!(removes.iter().any(|n| n == "dkms"), "{removes:?}");
    for n in ["openssh-server", "site-agent", "kernel-uek", "kernel"] {
        assert!(!removes.contains(&n.to_string()), "{n}: {removes:?}");
    }
    // Not root's own: writable by others, another user's, a link to a site file.
    let path = node.join(rec);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (removes, err) = move_plan(&node, &f.out);
    assert!(removes.is_empty(), "{removes:?}");
    assert!(
        err.contains("build-deps is writable by others (mode 666)"),
        "{err}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&path, Some(1000), Some(1000)).unwrap();
    let (removes, err) = move_plan(&node, &f.out);
    assert!(removes.is_empty(), "{removes:?}");
    assert!(err.contains("build-deps is owned by uid 1000"), "{err}");
    std::fs::remove_file(&path).unwrap();
    node.write("/etc/site-list", &ours);
    std::os::unix::fs::symlink("/etc/site-list", &path).unwrap();
    let (removes, err) = move_plan(&node, &f.out);
    assert!(removes.is_empty(), "{removes:?}");
    assert!(
        err.contains("build-deps is a link (/etc/site-list)"),
        "{err}"
    );
    // The edited record, root's: the move removes gpuhost's build packages, not the site's.
    std::fs::remove_file(&path).unwrap();
    node.write(rec, &edited);
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node.installed("dkms").is_none(), "{rep:#}");
    for n in ["site-agent", "kernel-uek"] {
        assert!(node.installed(n).is_some(), "{n}: {rep:#}");
    }
    assert_eq!(node.installed("openssh-server"), sshd, "{rep:#}");
    assert_eq!(node.read("/etc/site-list"), ours);
    // What the move removed is pruned from the record, and so is what it never installed.
    let left = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        !left.lines().any(|l| l.starts_with("dkms ")
            || l.starts_with("site-agent")
            || l.starts_with("openssh-server")),
        "{left}"
    );
}

/// Issue 53, item 2: records are pruned of what gpuhost no longer installed. DKMS, then
/// prebuilt kmods (gpuhost's gcc goes), then the site installs gcc itself and puts the node
/// back on NVIDIA's DKMS kmod by hand (gpuhost's own way back is issue 53 item 4, not done),
/// then prebuilt again: the site's gcc stays.
#[test]
fn a_package_the_site_installs_after_a_move_stays_the_sites() {
    let (_build, f) = fleet_repo();
    let node = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = dkms_apply(&node);
    assert_eq!(rc, 0, "{rep:#}");
    let rec = node.read("/var/lib/gpuhost/built-by/build-deps");
    assert!(rec.lines().any(|l| l.starts_with("gcc-c++ tid=")), "{rec}");
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node.installed("gcc-c++").is_none(), "{rep:#}");
    // The record is pruned of what the move removed.
    let left = std::fs::read_to_string(node.join("/var/lib/gpuhost/built-by/build-deps"))
        .unwrap_or_default();
    assert!(!left.contains("gcc-c++"), "{left}");
    // The site installs gcc-c++ itself, and goes back to DKMS by hand.
    let kmod = format!("kmod-nvidia-open-{UEK9}");
    node.dnf_ok(&["install", "-y", "gcc-c++"]);
    node.dnf_ok(&["swap", "-y", &kmod, "kmod-nvidia-open-dkms"]);
    assert!(node.installed("kmod-nvidia-open-dkms").is_some());
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node.installed("kmod-nvidia-open-dkms").is_none(), "{rep:#}");
    assert!(
        node.installed("gcc-c++").is_some(),
        "the site's gcc-c++ went: {rep:#}"
    );
}

/// How a forged kmod differs from what `gpuhost kmod build` makes ([`forge_kmod`]).
#[derive(Default)]
struct Forge<'a> {
    /// More files: (path in the root, content).
    files: &'a [(&'a str, &'a str)],
    /// More spec sections (`%pre\n…`, `%triggerin -- bash\n…`).
    scripts: &'a str,
    /// The modules' signatures stripped.
    unsigned: bool,
}

/// A module's appended signature removed (`~Module signature appended~\n` after a 12-byte
/// `struct module_signature` whose last 4 bytes are the signature's length, big-endian).
fn strip_signature(module: &Path) {
    const MAGIC: &[u8] = b"~Module signature appended~\n";
    let mut b = std::fs::read(module).unwrap();
    assert!(b.ends_with(MAGIC), "{} is not signed", module.display());
    let end = b.len() - MAGIC.len();
    let sig_len = u32::from_be_bytes(b[end - 4..end].try_into().unwrap()) as usize;
    b.truncate(end - 12 - sig_len);
    std::fs::write(module, b).unwrap();
}

/// The repo `out`'s first kmod rebuilt with rpmbuild as `engine::kmod::package` writes it, but
/// as `forge` says, put in its place, and its manifest entry's SHA-256 rewritten to match: an
/// RPM whose hash matches the manifest. Returns the RPM's path.
fn forge_kmod(out: &Path, forge: &Forge) -> PathBuf {
    let manifest = out.join("gpuhost-kmods.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let e = m["kmods"][0].clone();
    let s = |k: &str| e[k].as_str().unwrap().to_string();
    let (kernel, rpm) = (s("kernel"), out.join(s("file")));
    let tree = unpack(&rpm);
    let extra = format!("lib/modules/{kernel}/extra");
    let modules: Vec<String> = e["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    if forge.unsigned {
        for mo in &modules {
            strip_signature(&tree.path().join(&extra).join(mo));
        }
    }
    let top = tempfile::tempdir().unwrap();
    let mut install = format!("mkdir -p %{{buildroot}}/{extra}\n");
    let mut files = String::new();
    for mo in &modules {
        install += &format!(
            "install -m 0644 '{}' %{{buildroot}}/{extra}/\n",
            tree.path().join(&extra).join(mo).display()
        );
        files += &format!("/{extra}/{mo}\n");
    }
    for (i, (path, content)) in forge.files.iter().enumerate() {
        let src = top.path().join(format!("extra-{i}"));
        std::fs::write(&src, content).unwrap();
        let dir = Path::new(path).parent().unwrap().display().to_string();
        install += &format!(
            "mkdir -p %{{buildroot}}{dir}\ninstall -m 0644 '{}' %{{buildroot}}{path}\n",
            src.display()
        );
        files += &format!("{path}\n");
    }
    let stems: Vec<&str> = modules
        .iter()
        .map(|m| m.strip_suffix(".ko").unwrap())
        .collect();
    let (driver, epoch) = (s("driver"), e["epoch"].as_u64().unwrap());
    let spec = format!(
        "Name: {name}\nVersion: {driver}\nRelease: 1\nEpoch: {epoch}\nSummary: forged\nLicense: MIT\nAutoReqProv: no\n\
         Requires: kernel-uname-r = {kernel}\nRequires: nvidia-kmod-common = {epoch}:{driver}\n\
         Requires(post): kmod\nRequires(postun): kmod\nProvides: nvidia-kmod = {epoch}:{driver}\n\
         Conflicts: kmod-nvidia-open-dkms, kmod-nvidia-latest-dkms\n\
         %define _build_id_links none\n%global debug_package %{{nil}}\n%global __os_install_post %{{nil}}\n\
         %description\nforged\n%install\n{install}\
         %post\nfor m in {stems}; do for z in xz zst gz; do rm -f /lib/modules/{kernel}/extra/$m.ko.$z; done; done\ndepmod -a {kernel} || :\n\
         %postun\ndepmod -a {kernel} || :\n{scripts}%files\n{files}",
        name = s("package"),
        stems = stems.join(" "),
        scripts = forge.scripts,
    );
    let spec_path = top.path().join("k.spec");
    std::fs::write(&spec_path, spec).unwrap();
    let o = Command::new("rpmbuild")
        .args(["-bb", "--quiet", "--target", "x86_64", "--define"])
        .arg(format!("_topdir {}", top.path().display()))
        .arg(&spec_path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let built = files_under(&top.path().join("RPMS"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|x| x == "rpm"))
        .unwrap();
    std::fs::copy(&built, &rpm).unwrap();
    set_sha256(&mut m, &rpm);
    std::fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    rpm
}

/// The manifest's first entry's SHA-256 set to `rpm`'s.
fn set_sha256(m: &mut Value, rpm: &Path) {
    let o = Command::new("sha256sum").arg(rpm).output().unwrap();
    let sum = String::from_utf8_lossy(&o.stdout);
    m["kmods"][0]["sha256"] = sum.split_whitespace().next().unwrap().into();
}

/// A copy of the fleet's repo `from` in a new directory.
fn repo_copy(from: &Path) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let o = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    d
}

/// Issue 53, item 4: a kmod RPM whose SHA-256 matches its manifest entry, but that is not what
/// `gpuhost kmod build` makes, is refused before any change (exit 2, naming the RPM): a file
/// besides the modules (`/etc/modprobe.d/…`, `/usr/local/bin/…`, a site file under `/etc`),
/// scriptlets of its own (`%pre`, a trigger, another `%post`), a manifest entry whose arch
/// lies, an RPM cut short (before: rpm failed inside the transaction, exit 1), unsigned modules
/// without Secure Boot (before: installed, then "module for kernel , and DKMS left no
/// make.log"). The same RPM rebuilt as gpuhost builds it is taken.
#[test]
fn a_kmod_rpm_that_is_not_what_gpuhost_builds_is_refused_before_any_change() {
    let (_build, f) = fleet_repo();
    let node = Root::new(Os::Ol9, &[UEK9]);
    let before = node.rpmdb_snapshot();
    // The control: rebuilt as gpuhost builds it, the forged RPM passes every check.
    let same = repo_copy(&f.out);
    forge_kmod(same.path(), &Forge::default());
    let (rc, rep) = node_apply(&node, same.path(), "plan");
    assert_eq!(rc, 0, "{rep:#}");
    let cases: Vec<(&str, Forge, &str)> = vec![
        (
            "modprobe.d",
            Forge {
                files: &[("/etc/modprobe.d/zz-site.conf", "install nvidia /bin/true\n")],
                ..Forge::default()
            },
            "carries /etc/modprobe.d/zz-site.conf",
        ),
        (
            "usr-local",
            Forge {
                files: &[("/usr/local/bin/helper", "#!/bin/sh\n")],
                ..Forge::default()
            },
            "carries /usr/local/bin/helper",
        ),
        (
            "site file",
            Forge {
                files: &[("/etc/hosts", "10.0.0.1 mirror\n")],
                ..Forge::default()
            },
            "carries /etc/hosts",
        ),
        (
            "pre",
            Forge {
                scripts: "%pre\ntouch /etc/gpuhost-world/pwned\n",
                ..Forge::default()
            },
            "carries scriptlets gpuhost kmod build never writes",
        ),
        (
            "trigger",
            Forge {
                scripts: "%triggerin -- bash\ntouch /etc/gpuhost-world/pwned\n",
                ..Forge::default()
            },
            "carries scriptlets gpuhost kmod build never writes",
        ),
        (
            "unsigned",
            Forge {
                unsigned: true,
                ..Forge::default()
            },
            "carries no signature",
        ),
    ];
    for (what, forge, says) in cases {
        let repo = repo_copy(&f.out);
        let rpm = forge_kmod(repo.path(), &forge);
        for cmd in ["plan", "apply"] {
            let (rc, rep) = node_apply(&node, repo.path(), cmd);
            let text = rep.to_string();
            assert_eq!(rc, 2, "{what} {cmd}: {rep:#}");
            assert!(
                text.contains(says) && text.contains(&rpm.display().to_string()),
                "{what} {cmd}: {rep:#}"
            );
            assert!(!text.contains("DKMS left no make.log"), "{what}: {rep:#}");
        }
        assert_eq!(node.rpmdb_snapshot(), before, "{what}");
    }
    // A manifest entry whose arch lies (its SHA-256 still the file's).
    let repo = repo_copy(&f.out);
    let manifest = repo.path().join("gpuhost-kmods.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["kmods"][0]["arch"] = "aarch64".into();
    std::fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let (rc, rep) = node_apply(&node, repo.path(), "apply");
    assert_eq!(rc, 2, "{rep:#}");
    assert!(
        rep.to_string().contains("for arch \\\"aarch64\\\""),
        "{rep:#}"
    );
    // An RPM cut short, its manifest entry rewritten to match.
    let repo = repo_copy(&f.out);
    let rpm = repo.path().join(m["kmods"][0]["file"].as_str().unwrap());
    let bytes = std::fs::read(&rpm).unwrap();
    std::fs::write(&rpm, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let manifest = repo.path().join("gpuhost-kmods.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    set_sha256(&mut m, &rpm);
    std::fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let (rc, rep) = node_apply(&node, repo.path(), "apply");
    assert_eq!(rc, 2, "{rep:#}");
    assert!(
        rep.to_string().contains(&rpm.display().to_string()),
        "{rep:#}"
    );
    assert_eq!(node.rpmdb_snapshot(), before);
    assert!(node.nvidia_module_files(UEK9).is_empty());
}

/// Issue 53, item 4: a kmod repo whose manifest is a FIFO, a link to `/dev/zero` or a device is
/// refused before any change without being opened (exit 2, naming it), within seconds (before:
/// the FIFO hung the run until killed; `/dev/zero` grew to 1 GiB). A watchdog opens the FIFO's
/// other end after 60 s, so a gpuhost that waits on it ends, and the test fails instead of
/// hanging.
#[test]
fn a_fifo_or_device_as_the_kmod_manifest_is_refused_unopened() {
    let node = Root::new(Os::Ol9, &[UEK9]);
    let before = node.rpmdb_snapshot();
    let repo = tempfile::tempdir().unwrap();
    let manifest = repo.path().join("gpuhost-kmods.json");
    let made = Command::new("mkfifo")
        .arg(&manifest)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "mkfifo");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (d, fifo) = (done.clone(), manifest.clone());
    let watchdog = std::thread::spawn(move || {
        for _ in 0..600 {
            if d.load(std::sync::atomic::Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
        true
    });
    let (rc, rep) = node_apply(&node, repo.path(), "apply");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(!watchdog.join().unwrap(), "gpuhost waited on the FIFO");
    assert_eq!(rc, 2, "{rep:#}");
    assert!(
        rep.to_string().contains("a FIFO, not a regular file"),
        "{rep:#}"
    );
    for dev in ["/dev/zero", "/dev/null"] {
        std::fs::remove_file(&manifest).unwrap();
        std::os::unix::fs::symlink(dev, &manifest).unwrap();
        let t = std::time::Instant::now();
        let (rc, rep) = node_apply(&node, repo.path(), "apply");
        assert_eq!(rc, 2, "{dev}: {rep:#}");
        assert!(
            rep.to_string().contains("a device, not a regular file"),
            "{dev}: {rep:#}"
        );
        assert!(t.elapsed().as_secs() < 30, "{dev}: {:?}", t.elapsed());
    }
    assert_eq!(node.rpmdb_snapshot(), before);
}

/// Issue 53, item 4: a node on prebuilt kmods goes back to DKMS (the profile without
/// `driver.kmod_repo`) in one apply: the driver step's transaction erases the build host's kmod
/// and installs NVIDIA's DKMS kmod, and DKMS builds the module for the kernel (before: dnf's
/// conflict, exit 1; with the transaction alone, `dkms install` found the kernel's build left
/// from before the move to prebuilt, "already been built", exit 1 after the change). A second
/// apply changes nothing, and the node moves to prebuilt kmods again.
#[test]
fn a_node_on_prebuilt_kmods_goes_back_to_dkms_in_one_apply() {
    let (_build, f) = fleet_repo();
    let node = Root::new(Os::Ol9, &[UEK9]);
    // DKMS first, so that its state for the kernel is what the move to prebuilt left.
    let (rc, rep) = dkms_apply(&node);
    assert_eq!(rc, 0, "{rep:#}");
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    let kmod = format!("kmod-nvidia-open-{UEK9}");
    assert!(node.installed(&kmod).is_some(), "{rep:#}");
    let (rc, rep) = dkms_apply(&node);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node.installed(&kmod).is_none(), "{rep:#}");
    assert!(node.installed("kmod-nvidia-open-dkms").is_some(), "{rep:#}");
    assert_eq!(
        node.nvidia_module_version(UEK9).as_deref(),
        Some("570.124.06"),
        "{rep:#}"
    );
    let (rc, rep) = dkms_apply(&node);
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
    let (rc, rep) = node_apply(&node, &f.out, "apply");
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node.installed(&kmod).is_some(), "{rep:#}");
    assert!(node.installed("kmod-nvidia-open-dkms").is_none(), "{rep:#}");
}

// -------------------------------------------------------------------------------------------
// Issue 53, item 1: the fleet key is used only by code that nothing in the build can change.

/// `rpm` unpacked into `tree` (made).
fn unpack_into(rpm: &Path, tree: &Path) {
    std::fs::create_dir_all(tree).unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg("rpm2cpio \"$1\" | cpio -idm --quiet")
        .arg("sh")
        .arg(rpm)
        .current_dir(tree)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The package `tree` (its files, links kept) rebuilt by rpmbuild under the name, epoch,
/// version, release and arch of `like`, in `dir`: the new RPM's path.
fn rebuild_like(like: &Path, tree: &Path, dir: &Path) -> PathBuf {
    let o = world::host_rpm([
        std::ffi::OsStr::new("-qp"),
        "--qf".as_ref(),
        "%{NAME}\\n%{EPOCH}\\n%{VERSION}\\n%{RELEASE}\\n%{ARCH}\\n".as_ref(),
        like.as_os_str(),
    ]);
    let q = String::from_utf8_lossy(&o.stdout).to_string();
    let [n, e, v, r, a]: [&str; 5] = q.lines().collect::<Vec<_>>().try_into().unwrap();
    let epoch = if e == "(none)" {
        String::new()
    } else {
        format!("Epoch: {e}\n")
    };
    let files: Vec<String> = files_and_links(tree)
        .iter()
        .map(|p| format!("/{}", p.strip_prefix(tree).unwrap().display()))
        .collect();
    let spec = dir.join(format!("{n}.spec"));
    std::fs::write(
        &spec,
        format!(
            "Name: {n}\n{epoch}Version: {v}\nRelease: {r}\nSummary: rebuilt\nLicense: MIT\nAutoReqProv: no\n%define _build_id_links none\n%global __os_install_post %{{nil}}\n%global debug_package %{{nil}}\n%description\nrebuilt\n%install\ncp -a {}/. %{{buildroot}}/\n%files\n{}\n",
            tree.display(),
            files.join("\n")
        ),
    )
    .unwrap();
    let top = dir.join(format!("build-{n}"));
    let o = Command::new("rpmbuild")
        .args(["-bb", "--quiet", "--target", a, "--define"])
        .arg(format!("_topdir {}", top.display()))
        .arg(&spec)
        .env("HOME", World::get().home())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rpm = top.join("RPMS").join(a).join(like.file_name().unwrap());
    assert!(rpm.exists(), "rpmbuild made no {}", rpm.display());
    rpm
}

/// The regular files and links under `dir`.
fn files_and_links(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else {
            out.push(p);
        }
    }
    out
}

/// The world's R570 driver-only local repo package, its open DKMS source changed by `edit`
/// (given the source folder, `usr/src/nvidia-open-570.124.06`), the inner repo's metadata
/// made again (createrepo_c): a hostile source, packaged as NVIDIA's. Its path, in `dir`.
fn hostile_local(dir: &Path, edit: impl FnOnce(&Path)) -> PathBuf {
    let src = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let outer = dir.join("outer");
    unpack_into(&src, &outer);
    let repo = outer.join("var/nvidia-driver-local-repo-rhel9-570.124.06");
    let dkms = repo.join("kmod-nvidia-open-dkms-570.124.06-1.el9.x86_64.rpm");
    let tree = dir.join("dkms");
    unpack_into(&dkms, &tree);
    edit(&tree.join("usr/src/nvidia-open-570.124.06"));
    let rebuilt = rebuild_like(&dkms, &tree, dir);
    std::fs::copy(&rebuilt, &dkms).unwrap();
    let o = Command::new("createrepo_c")
        .args(["--quiet", "--update", "--keep-all-metadata"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    rebuild_like(&src, &outer, dir)
}

/// `gpuhost kmod build` of the local repo package at `local` (a path) into `f`.
fn kmod_build_file(root: &Root, f: &Fleet, local: &Path, extra: &[&str]) -> (i32, String) {
    let mut args: Vec<String> = [
        "kmod",
        "build",
        "--local-repo-rpm",
        local.to_str().unwrap(),
        "--key",
        f.key.to_str().unwrap(),
        "--cert",
        f.cert.to_str().unwrap(),
        "--out",
        f.out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = root.gpuhost(&args);
    (
        code(&o),
        String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout),
    )
}

/// A line appended to the DKMS source's Makefile recipe (`module modules:`), run by make
/// after the kernel's build of the modules.
fn add_to_recipe(src: &Path, lines: &[&str]) {
    let mk = src.join("Makefile");
    let text = std::fs::read_to_string(&mk).unwrap();
    let at = "\t$(MAKE) -C $(SYSSRC) M=$(CURDIR) modules\n";
    assert!(text.contains(at), "{text}");
    let extra: String = lines.iter().map(|l| format!("\t{l}\n")).collect();
    std::fs::write(&mk, text.replace(at, &format!("{at}{extra}"))).unwrap();
}

/// Whether any file under `dir` holds the first 64 bytes of the key's body.
fn holds_key(dir: &Path, key: &[u8]) -> Option<PathBuf> {
    let text = String::from_utf8_lossy(key);
    let body: String = text.lines().skip(1).take(2).collect();
    files_under(dir).into_iter().find(|p| {
        std::fs::read(p)
            .map(|b| String::from_utf8_lossy(&b).contains(&body[..64]))
            .unwrap_or(false)
    })
}

/// The root's tree, gpuhost's own scratch parent (`/var/cache/gpuhost`: the build's lock and
/// scratch folder) left out.
fn tree_but_scratch(root: &Root) -> Vec<String> {
    root.tree_snapshot()
        .lines()
        .filter(|l| !l.starts_with("var/cache/gpuhost"))
        .map(str::to_string)
        .collect()
}

/// Issue 53: a DKMS Makefile that replaces the kernel's `scripts/sign-file` with a script
/// keeping its standard input (the fleet key, before), and writes wherever it can. The build
/// runs as uid 65534 with the root read-only: nothing outside its build folder changes, the
/// real `sign-file` signs, and no file anywhere holds the key. A `sign-file` replaced before
/// the build (not the file its package installed) is refused, exit 2, and never run.
#[test]
fn a_dkms_makefile_cannot_replace_sign_file_or_write_outside_its_build_folder() {
    let root = build_root(&[UEK9]);
    let f = fleet();
    let key = std::fs::read(&f.key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let steal = "#!/bin/sh\ncat > /var/tmp/stolen-key\ncp /var/tmp/stolen-key /stolen-key\n";
    let local = hostile_local(dir.path(), |src| {
        std::fs::write(src.join("steal"), steal).unwrap();
        std::fs::set_permissions(src.join("steal"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        add_to_recipe(
            src,
            &[
                "-cp $(CURDIR)/steal $(SYSSRC)/scripts/sign-file",
                "-touch /escaped-by-make /var/tmp/escaped-by-make /tmp/escaped-by-make",
            ],
        );
    });
    let sign_file = root.join(&format!("/usr/src/kernels/{UEK9}/scripts/sign-file"));
    let before = tree_but_scratch(&root);
    let (rc, text) = kmod_build_file(&root, &f, &local, &["--kernel-release", UEK9]);
    assert_eq!(rc, 0, "{text}");
    assert_eq!(
        tree_but_scratch(&root),
        before,
        "the build changed the root"
    );
    for d in [root.path(), f.out.as_path()] {
        assert_eq!(holds_key(d, &key), None, "the key leaked");
    }
    let rpm = files_under(&f.out)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "rpm"))
        .unwrap();
    let payload = unpack(&rpm);
    for m in files_under(payload.path()) {
        assert!(
            world::openssl_verifies_module(&m, &f.cert),
            "{}",
            m.display()
        );
    }
    // The same script put in place of sign-file before the build: refused, never given the key.
    std::fs::write(&sign_file, steal).unwrap();
    let out2 = fleet();
    let (rc, _, text) = kmod_build(&root, &out2, &["--kernel-release", UEK9]);
    assert_eq!(rc, 2, "{text}");
    assert!(
        text.contains("scripts/sign-file") && text.contains("rpm database"),
        "{text}"
    );
    assert!(!root.join("/var/tmp/stolen-key").exists());
    assert!(!root.join("/stolen-key").exists());
    assert!(!out2.out.exists(), "{}", out2.out.display());
}

/// A static helper the source ships, run by its Makefile: it chroots into a subfolder, climbs
/// out with `chdir("..")` and `chroot(".")` (what takes root out of a chroot), and writes the
/// paths it is given. Under the sandbox neither the build root nor the build host gets them.
#[test]
fn a_static_helper_of_the_source_cannot_escape_to_the_build_host() {
    let root = build_root(&[UEK9]);
    let f = fleet();
    let dir = tempfile::tempdir().unwrap();
    let host_mark = std::env::temp_dir().join(format!(
        "gpuhost-kmod-escape-{}-{}",
        std::process::id(),
        dir.path().file_name().unwrap().to_string_lossy()
    ));
    let root_mark = root.path().join("escaped-by-helper");
    let c = dir.path().join("escape.c");
    std::fs::write(
        &c,
        "#define _GNU_SOURCE\n#include <fcntl.h>\n#include <sched.h>\n#include <sys/stat.h>\n#include <unistd.h>\n\
         int main(int c, char **v) {\n  unshare(CLONE_NEWUSER);\n  mkdir(\"jail\", 0755);\n  chroot(\"jail\");\n\
         for (int i = 0; i < 64; i++) chdir(\"..\");\n  chroot(\".\");\n\
         for (int i = 1; i < c; i++) { int fd = open(v[i], O_WRONLY | O_CREAT, 0644); if (fd >= 0) { write(fd, \"escaped\\n\", 8); close(fd); } }\n\
         return 0;\n}\n",
    )
    .unwrap();
    let helper = dir.path().join("escape");
    let o = Command::new("gcc")
        .args(["-static", "-O0", "-o"])
        .arg(&helper)
        .arg(&c)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Run it, or fail the build (the package's modes are not kept: chmod first).
    let line = format!(
        "chmod 755 ./escape && ./escape {} {}",
        host_mark.display(),
        root_mark.display()
    );
    let local = hostile_local(dir.path(), |src| {
        std::fs::copy(&helper, src.join("escape")).unwrap();
        add_to_recipe(src, &[line.as_str()]);
    });
    let before = tree_but_scratch(&root);
    let (rc, text) = kmod_build_file(&root, &f, &local, &["--kernel-release", UEK9]);
    let escaped = host_mark.exists();
    let _ = std::fs::remove_file(&host_mark);
    assert_eq!(rc, 0, "{text}");
    assert!(
        !escaped,
        "the helper wrote {} on the build host",
        host_mark.display()
    );
    assert!(
        !root_mark.exists(),
        "the helper wrote {}",
        root_mark.display()
    );
    assert_eq!(
        tree_but_scratch(&root),
        before,
        "the build changed the root"
    );
}

/// Values of dkms.conf that would reach the spec or a path outside the build: a module name
/// carrying an rpm macro that runs a command, a location climbing to a site file. Refused,
/// exit 2, before anything is compiled: nothing touched, no repo written.
#[test]
fn dkms_conf_names_and_locations_are_checked_before_compiling() {
    let root = build_root(&[UEK9]);
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("spec-ran");
    std::fs::create_dir_all(root.join("/opt/site")).unwrap();
    std::fs::write(root.join("/opt/site/nvidia.ko"), b"a site file\n").unwrap();
    let cases = [
        (
            format!("BUILT_MODULE_NAME[0]=\"nvidia%(touch {})\"", mark.display()),
            "BUILT_MODULE_NAME",
        ),
        (
            "BUILT_MODULE_LOCATION[0]=\"../../../../../../opt/site\"".to_string(),
            "BUILT_MODULE_LOCATION",
        ),
    ];
    for (i, (line, named)) in cases.iter().enumerate() {
        let f = fleet();
        let sub = dir.path().join(i.to_string());
        std::fs::create_dir_all(&sub).unwrap();
        let local = hostile_local(&sub, |src| {
            let conf = src.join("dkms.conf");
            let text = std::fs::read_to_string(&conf).unwrap();
            let text = if line.starts_with("BUILT_MODULE_NAME") {
                text.replace("BUILT_MODULE_NAME[0]=\"nvidia\"", line)
            } else {
                format!("{text}\n{line}\n")
            };
            std::fs::write(&conf, text).unwrap();
        });
        let before = tree_but_scratch(&root);
        let (rc, text) = kmod_build_file(&root, &f, &local, &["--kernel-release", UEK9]);
        assert_eq!(rc, 2, "{line}: {text}");
        assert!(
            text.contains(named) && text.contains("nothing was compiled"),
            "{text}"
        );
        assert!(!mark.exists(), "the spec ran a command");
        assert_eq!(tree_but_scratch(&root), before, "{line}: the root changed");
        assert!(!f.out.exists(), "{line}: {} was written", f.out.display());
    }
}

/// `gpuhost kmod build` with `args`, killed if it has not ended in 60 s (a hang): exit code
/// and output.
fn kmod_build_within(root: &Root, f: &Fleet, extra: &[&str]) -> (i32, String) {
    let rpm = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let mut args: Vec<String> = ["kmod", "build", "--local-repo-rpm"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(rpm.display().to_string());
    for (k, v) in [("--key", &f.key), ("--cert", &f.cert), ("--out", &f.out)] {
        args.push(k.into());
        args.push(v.display().to_string());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let inner = root.gpuhost_cmd(&args);
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "KILL", "60"])
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let o = cmd.output().unwrap();
    (
        code(&o),
        String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout),
    )
}

/// The inputs the round-5 review found taken as given, each refused before anything is
/// compiled, exit 2, one line naming it: a key readable by others, a FIFO or `/dev/zero` as
/// key or certificate (never opened: no hang, no memory), an empty kernel release, a
/// certificate of another key, an `--out` that is a site's dnf repo (left as it was).
#[test]
fn bad_keys_kernel_releases_and_outs_are_refused_before_compiling() {
    let root = build_root(&[UEK9]);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let zero = PathBuf::from("/dev/zero");
    let other = fleet();
    let readable = fleet();
    std::fs::set_permissions(&readable.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    // The build's own user (65534) owning the key, mode 600: it could read it.
    let nobodys = fleet();
    std::os::unix::fs::chown(&nobodys.key, Some(65534), Some(65534)).unwrap();
    let with = |key: &Path, cert: &Path| Fleet {
        key: key.to_path_buf(),
        cert: cert.to_path_buf(),
        ..fleet()
    };
    let f = fleet();
    let cases: Vec<(&str, Fleet, Vec<&str>, &str)> = vec![
        (
            "world-readable key",
            with(&readable.key, &readable.cert),
            vec![],
            "readable by others (mode 644)",
        ),
        (
            "a key of uid 65534",
            with(&nobodys.key, &nobodys.cert),
            vec![],
            "is owned by uid 65534, not by uid 0",
        ),
        (
            "FIFO key",
            with(&fifo, &f.cert),
            vec![],
            "a FIFO, not a regular file",
        ),
        (
            "FIFO cert",
            with(&f.key, &fifo),
            vec![],
            "a FIFO, not a regular file",
        ),
        (
            "/dev/zero key",
            with(&zero, &f.cert),
            vec![],
            "a device, not a regular file",
        ),
        (
            "/dev/zero cert",
            with(&f.key, &zero),
            vec![],
            "a device, not a regular file",
        ),
        (
            "another key's cert",
            with(&f.key, &other.cert),
            vec![],
            "is not the certificate of the signing key",
        ),
        (
            "empty kernel release",
            with(&f.key, &f.cert),
            vec!["--kernel-release", ""],
            "kernel release '' is not",
        ),
    ];
    for (what, fl, extra, needle) in &cases {
        let (rc, text) = kmod_build_within(&root, fl, extra);
        assert_eq!(rc, 2, "{what}: {text}");
        assert!(
            text.contains(needle) && text.contains("nothing was compiled"),
            "{what}: {text}"
        );
        assert_eq!(
            text.trim().lines().count(),
            1,
            "{what}: not one line: {text}"
        );
        assert!(!fl.out.exists(), "{what}: {} was written", fl.out.display());
    }
    // A site's dnf repo as --out: refused, left as it was.
    let site = fleet();
    std::fs::create_dir_all(site.out.join("Packages")).unwrap();
    std::fs::write(
        site.out.join("Packages/site-tool-1.0-1.x86_64.rpm"),
        b"site",
    )
    .unwrap();
    let o = Command::new("createrepo_c")
        .arg("--quiet")
        .arg(&site.out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = files_under(&site.out)
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect::<Vec<_>>();
    let (rc, text) = kmod_build_within(&root, &site, &[]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("not a kmod repo gpuhost wrote"), "{text}");
    let after = files_under(&site.out)
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect::<Vec<_>>();
    assert_eq!(after, before, "the site's repo changed");
}

/// Two builds into one `--out` at the same instant (two kernels): the second waits for the
/// first's lock; both exit 0 and the manifest lists both kernels, createrepo_c's metadata
/// whole (before: createrepo_c collided, or both exited 0 with one kernel in the manifest).
#[test]
fn two_builds_into_one_out_are_serialised() {
    let root = build_root(&[RHCK9, UEK9]);
    let f = fleet();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| kmod_build(&root, &f, &["--kernel-release", UEK9]));
        let b = s.spawn(|| kmod_build(&root, &f, &["--kernel-release", RHCK9]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(a.0, 0, "{}", a.2);
    assert_eq!(b.0, 0, "{}", b.2);
    assert!(
        format!("{}{}", a.2, b.2).contains("waiting for it to end"),
        "neither build waited: {}\n{}",
        a.2,
        b.2
    );
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(f.out.join("gpuhost-kmods.json")).unwrap())
            .unwrap();
    let mut kernels: Vec<&str> = manifest["kmods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["kernel"].as_str())
        .collect();
    kernels.sort_unstable();
    let mut want = [RHCK9, UEK9];
    want.sort_unstable();
    assert_eq!(kernels, want, "{manifest:#}");
    let primary = Command::new("sh")
        .arg("-c")
        .arg("zcat \"$1\"/repodata/*-primary.xml.gz | grep -c '<package '")
        .arg("sh")
        .arg(&f.out)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&primary.stdout).trim(), "2");
}

/// The pids of the processes whose command line holds `token`.
fn processes_with(token: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
        })
        .collect()
}

/// SIGTERM during a long make, and SIGTERM again: `kmod build` ends (143) and no process of the
/// build is left (before: gpuhost exited on the second and left the chrooted make running as
/// root, one for 48 minutes).
#[test]
fn sigterm_during_a_long_make_leaves_no_process_of_the_build() {
    let root = build_root(&[UEK9]);
    let f = fleet();
    let dir = tempfile::tempdir().unwrap();
    let token = format!(
        "gpuhost-kmod-long-make-{}",
        dir.path().file_name().unwrap().to_string_lossy()
    );
    let line = format!("sleep 300; echo {token}");
    let local = hostile_local(dir.path(), |src| add_to_recipe(src, &[line.as_str()]));
    let args: Vec<String> = [
        "kmod",
        "build",
        "--local-repo-rpm",
        local.to_str().unwrap(),
        "--key",
        f.key.to_str().unwrap(),
        "--cert",
        f.cert.to_str().unwrap(),
        "--out",
        f.out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = root
        .gpuhost_cmd(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while processes_with(&token).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the long make never started"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "kmod build ended early"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let pid = child.id().to_string();
    for _ in 0..2 {
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > until {
            let _ = child.kill();
            panic!("kmod build did not end after two SIGTERMs");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let gone = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut left = processes_with(&token);
    while !left.is_empty() && std::time::Instant::now() < gone {
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = processes_with(&token);
    }
    // What a failing run left is ended here by its process group (make, its shell, sleep).
    for p in &left {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let pgid = stat
            .rsplit_once(") ")
            .and_then(|(_, r)| r.split_whitespace().nth(2))
            .unwrap_or_default()
            .to_string();
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .status();
        let _ = Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .status();
    }
    assert!(left.is_empty(), "left running: {left:?}; {err}");
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        !root.join("/var/cache/gpuhost/kmod-build").exists(),
        "{err}"
    );
}
