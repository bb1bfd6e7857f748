//! Secure Boot (issue 11, item 4), end to end in install roots whose efivars say Secure Boot
//! is on: real DKMS 3.0.10 signs with the real `sign-file` from the kernel's devel package,
//! real `mokutil` reads the root's MokListRT/MokNew (EFIVARFS_PATH), keys come from openssl,
//! and the signature check reads the modules' appended signatures; Debian's `modinfo` (kmod,
//! which parses PKCS#7 signatures itself) is the independent witness of who signed them.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

#[path = "support/status.rs"]
mod support;
#[path = "world/mod.rs"]
mod world;

use rstest::rstest;
use serde_json::Value;
use support::check;
use world::{
    code, stderr, Os, Root, World, CUDA_LOCAL_EL8_12_2, DRIVER_LOCAL_EL10_580, RHCK8, UEK10,
    UEK8_NEW, UEK8_OLD,
};

const ONLY: &str = "kernel,kernel-headers,driver-repo,build-deps,driver,nouveau,kernel-module";
const KEY: &str = "/etc/pki/gpuhost/mok.priv";
const CERT: &str = "/etc/pki/gpuhost/mok.der";

fn apply(root: &Root, profile: &str, repo: &str, extra: &[&str]) -> (i32, Value, String) {
    let args = world::apply_args(profile, repo, ONLY, extra);
    let o = root.gpuhost(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let rep = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (code(&o), rep, stderr(&o))
}

const WITH_KEY: [&str; 4] = [
    "--set",
    "secure_boot.key=/etc/pki/gpuhost/mok.priv",
    "--set",
    "secure_boot.cert=/etc/pki/gpuhost/mok.der",
];

fn with_key(root: &Root, extra: &[&str]) -> (i32, Value, String) {
    let mut args = WITH_KEY.to_vec();
    args.extend_from_slice(extra);
    apply(root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &args)
}

/// A key pair (real `openssl req`) in the root's `dir`, named `name`.priv/.der, the key
/// private to root as gpuhost requires; returns the DER certificate.
fn make_key(root: &Root, dir: &str, name: &str, cn: &str) -> Vec<u8> {
    let (key, cert) = world::openssl_test_key(&root.join(dir), name, cn);
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::read(cert).unwrap()
}

/// Who signed a module, as Debian's kmod (`modinfo -F signer`) reads the PKCS#7 signature.
fn signer(root: &Root, file: &str) -> String {
    world::modinfo(&root.join(file), "signer").unwrap_or_default()
}

fn status(root: &Root) -> Value {
    let run = tempfile::tempdir().unwrap();
    let o = root
        .gpuhost_cmd(&["status", "--format", "json"])
        .env("GPUHOST_RUN_DIR", run.path())
        .env_remove("GPUHOST_STATUS_ROOT")
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn without_a_key_apply_stops_before_the_driver_and_says_how_to_make_one() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    root.secure_boot_on();
    let before = root.rpmdb_snapshot();
    let (rc, _, err) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("Secure Boot is on"), "{err}");
    assert!(
        err.contains("openssl req")
            && err.contains("mokutil --import")
            && err.contains("secure_boot.key"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(root.rpmdb_snapshot(), before, "nothing installed");
}

#[test]
fn an_unusable_key_stops_before_the_driver() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    root.secure_boot_on();
    let before = root.rpmdb_snapshot();
    // Not there at all.
    let (rc, _, err) = with_key(&root, &[]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains(KEY) && err.contains("no such file"), "{err}");
    // There, but neither enrolled nor pending.
    make_key(&root, "/etc/pki/gpuhost", "mok", "gpuhost test MOK");
    let (rc, _, err) = with_key(&root, &[]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("is not enrolled") && err.contains(&format!("mokutil --import {CERT}")),
        "{err}"
    );
    // Readable by others.
    std::fs::set_permissions(
        root.join(KEY),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let (rc, _, err) = with_key(&root, &[]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains(&format!("chmod 600 {KEY}")), "{err}");
    assert_eq!(root.rpmdb_snapshot(), before, "nothing installed");
}

/// On Oracle Linux 8 (modular, UEK7) and 10 (plain EL10 packages, UEK8 built with gcc 14).
#[rstest]
#[case::ol8(Os::Ol8, UEK8_OLD, "ol8-uek", CUDA_LOCAL_EL8_12_2)]
#[case::ol10(Os::Ol10, UEK10, "ol10-uek", DRIVER_LOCAL_EL10_580)]
fn dkms_signs_with_the_enrolled_profile_key_and_status_checks_the_signer(
    #[case] os: Os,
    #[case] kernel: &str,
    #[case] profile: &str,
    #[case] rpm: &str,
) {
    let root = Root::new(os, &[kernel]);
    root.secure_boot_on();
    let cert = make_key(&root, "/etc/pki/gpuhost", "mok", "gpuhost test MOK");
    root.efivar("MokListRT", &[&cert]);
    let with_key = |root: &Root, extra: &[&str]| {
        let mut args = WITH_KEY.to_vec();
        args.extend_from_slice(extra);
        apply(root, profile, rpm, &args)
    };
    let (rc, rep, err) = with_key(&root, &[]);
    assert_eq!(rc, 0, "{err}\n{rep:#}");
    assert!(root
        .read("/etc/dkms/framework.conf.d/gpuhost-secure-boot.conf")
        .contains(&format!("mok_signing_key=\"{KEY}\"")),);
    let modules = root.nvidia_module_files(kernel);
    assert!(modules.len() >= 4, "{modules:?}");
    for m in &modules {
        assert_eq!(signer(&root, m), "gpuhost test MOK", "{m}");
        // openssl itself verifies the signature against the certificate.
        assert!(
            world::openssl_verifies_module(&root.join(m), &root.join(CERT)),
            "{m}"
        );
    }
    let st = status(&root);
    let sb = check(&st, "driver.secure_boot");
    assert_eq!(sb["severity"], "OK", "{sb:#}");
    assert!(
        sb["value"]
            .as_str()
            .unwrap()
            .contains("CN=gpuhost test MOK (MokListRT)"),
        "{sb:#}"
    );

    // Converged: the second apply changes nothing.
    let (rc, rep, err) = with_key(&root, &[]);
    assert_eq!(rc, 0, "{err}");
    world::assert_converged(&rep);

    // The key leaves MokListRT (another one is enrolled): the next boot refuses the module.
    let other = make_key(&root, "/root", "other", "someone else");
    root.efivar("MokListRT", &[&other]);
    let st = status(&root);
    let sb = check(&st, "driver.secure_boot");
    assert_eq!(sb["severity"], "CRITICAL", "{sb:#}");
    assert!(
        sb["value"]
            .as_str()
            .unwrap()
            .contains("which is not enrolled"),
        "{sb:#}"
    );
    assert!(
        sb["hint"].as_str().unwrap().contains("mokutil --import"),
        "{sb:#}"
    );
    // Only pending (mokutil --import was run, nobody confirmed it at the console yet).
    root.efivar("MokNew", &[&cert]);
    let sb = check(&status(&root), "driver.secure_boot").clone();
    assert_eq!(sb["severity"], "CRITICAL", "{sb:#}");
    assert!(
        sb["value"].as_str().unwrap().contains("only pending"),
        "{sb:#}"
    );
}

#[test]
fn modules_built_before_the_key_are_rebuilt_and_signed_and_a_new_kernel_gets_signed_ones() {
    // Converged with Secure Boot off and no key: DKMS built the modules without our key.
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    let (rc, rep, err) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0, "{err}\n{rep:#}");
    let modules = root.nvidia_module_files(UEK8_OLD);
    assert!(!modules.is_empty());
    for m in &modules {
        // DKMS 3.x signed them with the key it made itself, which nobody enrolled.
        assert_eq!(signer(&root, m), world::DKMS_AUTO_KEY_CN, "{m}");
    }
    // Secure Boot turned on, a key enrolled and named in the profile.
    root.secure_boot_on();
    let cert = make_key(&root, "/etc/pki/gpuhost", "mok", "gpuhost test MOK");
    root.efivar("MokListRT", &[&cert]);
    let sb = check(&status(&root), "driver.secure_boot").clone();
    assert_eq!(sb["severity"], "CRITICAL", "before the rebuild: {sb:#}");
    let (rc, rep, err) = with_key(&root, &[]);
    assert_eq!(rc, 0, "{err}\n{rep:#}");
    let km = world::step(&rep, "kernel-module");
    assert!(
        km.to_string()
            .contains("Secure Boot would refuse the module"),
        "{km:#}"
    );
    for m in &root.nvidia_module_files(UEK8_OLD) {
        assert_eq!(signer(&root, m), "gpuhost test MOK", "{m}");
    }
    assert_eq!(
        check(&status(&root), "driver.secure_boot")["severity"],
        "OK"
    );

    // A newer kernel (what the kernel-added trigger's apply serves) gets signed modules too.
    root.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-{}", world::evr(UEK8_NEW)),
    ]);
    let (rc, rep, err) = with_key(&root, &["--kernel-release", UEK8_NEW]);
    assert_eq!(rc, 0, "{err}\n{rep:#}");
    let new = root.nvidia_module_files(UEK8_NEW);
    assert!(!new.is_empty(), "{rep:#}");
    for m in &new {
        assert_eq!(signer(&root, m), "gpuhost test MOK", "{m}");
    }
}

/// NVIDIA's precompiled kmods come signed by NVIDIA (the world signs its own with a stand-in for
/// NVIDIA2019-public_key.der, as NVIDIA's spec does), but NVIDIA builds them for RHEL's kernels
/// only, and the world's RHCK is Oracle's (`.0.1`): with Secure Boot on, `plan` and `apply`
/// refuse the stream before any change (exit 2), ahead of any Secure Boot check — not asking to
/// enroll NVIDIA's certificate for a module no Oracle kernel can take, and the same with it
/// enrolled. (What the signature of NVIDIA's package looks like is checked in
/// tests/world_selfcheck.rs; a module signed by an enrolled key is judged by the tests above.)
#[test]
fn a_precompiled_stream_is_refused_with_secure_boot_on_whatever_is_enrolled() {
    let root = Root::new(Os::Ol8, &[RHCK8]);
    root.secure_boot_on();
    let nvidia = std::fs::read(World::get().nvidia_test_cert()).unwrap();
    for enrolled in [false, true] {
        if enrolled {
            root.efivar("MokListRT", &[&nvidia]);
        }
        let (files, rpmdb) = (root.tree_snapshot(), root.rpmdb_snapshot());
        for cmd in ["plan", "apply"] {
            let mut args = world::apply_args(
                "ol8-rhck",
                CUDA_LOCAL_EL8_12_2,
                ONLY,
                &["--set", "driver.stream=latest"],
            );
            args[0] = cmd.to_string();
            let o = root.gpuhost(&args.iter().map(String::as_str).collect::<Vec<_>>());
            let err = stderr(&o);
            assert_eq!(
                code(&o),
                2,
                "{cmd} (NVIDIA's key enrolled: {enrolled}): {err}"
            );
            assert!(
                err.contains("\"latest\" is NVIDIA's precompiled stream")
                    && err.contains(&format!("kernel {RHCK8} is Oracle's RHCK build"))
                    && err.contains("\"open-dkms\""),
                "{cmd}: {err}"
            );
            assert!(
                !err.contains("NVIDIA2019-public_key.der") && !err.contains("mokutil"),
                "{cmd}: {err}"
            );
            assert_eq!(
                root.rpmdb_snapshot(),
                rpmdb,
                "{cmd}: the rpm database changed"
            );
            let now: Vec<String> = root
                .tree_snapshot()
                .lines()
                .filter(|l| !l.starts_with("var/lib/gpuhost") && !l.starts_with("var/lib/rpm/"))
                .map(str::to_string)
                .collect();
            let was: Vec<String> = files
                .lines()
                .filter(|l| !l.starts_with("var/lib/gpuhost") && !l.starts_with("var/lib/rpm/"))
                .map(str::to_string)
                .collect();
            assert_eq!(now, was, "{cmd}: the root's files changed");
        }
    }
}

/// A key whose enrollment is only pending (`mokutil --import` ran, nobody confirmed it at the
/// console yet) is accepted: the modules are signed with it, and the report warns that they
/// load only after MokManager's confirmation. The run asks mokutil once.
#[test]
fn a_pending_key_signs_and_warns_and_mokutil_is_asked_once() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    root.secure_boot_on();
    let cert = make_key(&root, "/etc/pki/gpuhost", "mok", "gpuhost test MOK");
    root.efivar("MokNew", &[&cert]);
    let args = world::apply_args("ol8-uek", CUDA_LOCAL_EL8_12_2, ONLY, &WITH_KEY);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (o, execs) = root.gpuhost_traced(&args);
    let rep = world::report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    let warnings = rep["warnings"].to_string();
    assert!(
        warnings.contains("is pending") && warnings.contains("MokManager"),
        "{warnings}"
    );
    for m in &root.nvidia_module_files(UEK8_OLD) {
        assert_eq!(signer(&root, m), "gpuhost test MOK", "{m}");
    }
    if let Some(execs) = execs {
        let asked = execs.iter().filter(|p| p.ends_with("mokutil")).count();
        assert_eq!(asked, 1, "{execs:?}");
    }
}
