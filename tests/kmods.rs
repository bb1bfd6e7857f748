//! Issue 41: a build host makes NVIDIA's kernel modules once per (driver, kernel) —
//! `gpuhost kmod build` against a build root of the test world (its kernels, their headers and
//! compilers), from the local repo package's own DKMS source — signs each module with the
//! fleet's key, and writes one RPM per kernel into a repo with a manifest. Checked with the real
//! rpm, createrepo_c's metadata, modinfo (signer, sig_key) and openssl.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

#[path = "world/mod.rs"]
mod world;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use world::{code, Os, Root, World, DRIVER_LOCAL_EL9_570, RHCK9, UEK9};

const FLEET_CN: &str = "gpuhost test fleet kmod key";

/// The devel package of a world kernel (`kernel-uek-devel-5.15.0-206.153.7.el9uek`).
fn devel(kver: &str) -> String {
    let base = kver.rsplit_once('.').map_or(kver, |(b, _)| b);
    if kver.contains("uek") {
        format!("kernel-uek-devel-{base}")
    } else {
        format!("kernel-devel-{base}")
    }
}

/// A build root: the kernels, their headers, gcc and make.
fn build_root(kernels: &[&str]) -> Root {
    let root = Root::new(Os::Ol9, kernels);
    let mut args = vec![
        "install".to_string(),
        "-y".to_string(),
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

fn kmod_build(root: &Root, f: &Fleet, extra: &[&str]) -> (i32, Value, String) {
    let rpm = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
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
    let o = Command::new("rpm")
        .args(["-qp", "--nosignature", what])
        .arg(rpm)
        .output()
        .unwrap();
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

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else {
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
            assert!(world::modinfo(m, "sig_key").is_some(), "{}", m.display());
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
        }
    }
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
