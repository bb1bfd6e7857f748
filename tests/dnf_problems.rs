//! Issue 51, item 3: dnf's own words are the reason. When a package transaction resolves to less
//! than was asked, the report quotes dnf's lines and says whether anything changed, and the exit
//! code follows where the fault lies (a request the repos cannot resolve, nothing changed: 2);
//! a `dnf shell` line that errs stops the transaction before anything runs. Each case runs the
//! real gpuhost against a root of the test world, with NVIDIA's module profiles as NVIDIA's
//! genmodules.py writes them, and checks the exit code, the reason, and that the rpm database
//! and dnf's module state are as they were.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

#[path = "world/mod.rs"]
mod world;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use world::{code, Os, Root, World, DRIVER_LOCAL_EL9_570, UEK9};

/// `gpuhost apply` of the ol9-uek profile with the world's R570 driver-only local repo, `env`
/// set for gpuhost, more `--set`s in `extra`.
fn apply(root: &Root, env: &[(&str, &str)], extra: &[&str]) -> (i32, Value) {
    let rpm = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let set = format!("driver.local_repo_rpm={}", rpm.display());
    let profile = world::profile("ol9-uek");
    let mut args = vec![
        "apply",
        "--format",
        "json",
        "--profile",
        profile.as_str(),
        "--set",
        set.as_str(),
    ];
    args.extend_from_slice(extra);
    let mut cmd = root.gpuhost_cmd(&args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    (code(&o), world::report(&o))
}

fn reason(rep: &Value, id: &str) -> String {
    world::step(rep, id)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Everything that says what the root has: the rpm database and dnf's module state.
fn state(root: &Root) -> (String, Vec<(String, String)>) {
    let dir = root.join("/etc/dnf/modules.d");
    let mut modules: Vec<(String, String)> = std::fs::read_dir(&dir)
        .map(|d| {
            d.map(|e| {
                let p = e.unwrap().path();
                (
                    p.file_name().unwrap().to_string_lossy().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect()
        })
        .unwrap_or_default();
    modules.sort();
    (root.rpmdb_snapshot(), modules)
}

/// A site package (noarch, no files) with one `Conflicts:`.
fn conflicting_package(dir: &Path, name: &str, conflicts: &str) -> PathBuf {
    let spec = dir.join(format!("{name}.spec"));
    std::fs::write(
        &spec,
        format!("Name: {name}\nVersion: 1.0\nRelease: 1\nSummary: a site package\nLicense: MIT\nBuildArch: noarch\nConflicts: {conflicts}\n%description\nsite\n%files\n"),
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

/// A line that errs, put into the middle of gpuhost's `dnf shell` script (a test build's
/// failure point): before, dnf logged it, ran the lines after it and exited 0. Now dnf resolves
/// the script first and the transaction stops there, before anything runs: a package no repo
/// has (`No match for argument`), a module stream that does not exist (dnf would have taken the
/// default stream's packages), another stream of the module the script enables (`Cannot enable
/// multiple streams`). Then the same apply, without the bad line, converges.
#[test]
fn an_erring_line_in_the_middle_of_the_dnf_shell_script_stops_it_before_anything_runs() {
    let root = Root::new(Os::Ol9, &[UEK9]);
    let before = state(&root);
    for (line, said) in [
        (
            "install no-such-package",
            "No match for argument: no-such-package",
        ),
        (
            "module enable nvidia-driver:999-open",
            "missing groups or modules: nvidia-driver:999-open",
        ),
        (
            "module enable nvidia-driver:570-dkms",
            "Cannot enable multiple streams for module 'nvidia-driver'",
        ),
    ] {
        let (rc, rep) = apply(&root, &[("GPUHOST_FAILPOINT_DNF_LINE", line)], &[]);
        assert_eq!(rc, 2, "{line}: {rep:#}");
        let why = reason(&rep, "driver");
        assert!(why.contains(said), "{line}: {why}");
        assert!(
            why.contains(
                "nothing was changed (the rpm database and dnf's module state are as they were)"
            ),
            "{line}: {why}"
        );
        assert_eq!(state(&root), before, "{line}: the root changed: {rep:#}");
        // The transaction served every step with packages; none is reported as done.
        assert!(
            !rep.to_string().contains("the host still differs"),
            "{line}: {rep:#}"
        );
    }
    let (rc, rep) = apply(&root, &[], &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("nvidia-driver").is_some());
    // The driver swap's one transaction (R570 → R580): the same line in its script, the same
    // stop before anything runs; the old driver stays as it was.
    let before = state(&root);
    let rpm = World::get().cuda_local(world::CUDA_LOCAL_EL9_13_0);
    let swap = [
        "--set".to_string(),
        format!("driver.local_repo_rpm={}", rpm.display()),
        "--set".to_string(),
        "driver.replace_local_repo=true".to_string(),
    ];
    let swap: Vec<&str> = swap.iter().map(String::as_str).collect();
    let (rc, rep) = apply(
        &root,
        &[("GPUHOST_FAILPOINT_DNF_LINE", "install no-such-package")],
        &swap,
    );
    assert_eq!(rc, 2, "{rep:#}");
    let why = reason(&rep, "driver-repo");
    assert!(
        why.contains("No match for argument: no-such-package")
            && why.contains("nothing was changed"),
        "{why}"
    );
    assert_eq!(state(&root), before, "{rep:#}");
    let (rc, rep) = apply(&root, &[], &swap);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        root.installed("nvidia-driver")
            .as_deref()
            .map(|v| v.starts_with("580.82.07")),
        Some(true)
    );
}

/// NVIDIA's `default` profile lists `cuda-drivers` (genmodules.py's branch packages): a site
/// package that conflicts with it makes the profile's request impossible. dnf says `Problem: …
/// conflicts with … conflicting requests`; gpuhost quotes it, exit 2, nothing changed — with
/// NVIDIA's DKMS kmod and with the build host's kmods alike.
#[test]
fn a_conflict_with_nvidias_profile_is_dnfs_problem_quoted_with_nothing_changed() {
    let site = tempfile::tempdir().unwrap();
    let pkg = conflicting_package(site.path(), "site-no-cuda-drivers", "cuda-drivers");
    let root = Root::new(Os::Ol9, &[UEK9]);
    let o = root.rpm(&["-i", pkg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = state(&root);
    let (rc, rep) = apply(&root, &[], &[]);
    assert_eq!(rc, 2, "{rep:#}");
    let why = reason(&rep, "driver");
    assert!(
        why.contains("Problem")
            && why.contains("site-no-cuda-drivers")
            && why.contains("cuda-drivers"),
        "{why}"
    );
    assert!(why.contains("nothing was changed"), "{why}");
    assert_eq!(state(&root), before, "{rep:#}");
    // The same with prebuilt kmods: the profile's packages by name, the same conflict.
    let build = Root::new(Os::Ol9, &[UEK9]);
    // kmod build's unprivileged user reaches the build root (a build host's is `/`).
    std::fs::set_permissions(
        build.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    build.dnf_ok(&[
        "install",
        "-y",
        "bash",
        "gcc",
        "gcc-c++",
        "openssl-libs",
        "make",
        &format!("kernel-uek-devel-{}", world::evr(UEK9)),
    ]);
    let keys = tempfile::tempdir().unwrap();
    let (key, cert) = world::openssl_test_key(keys.path(), "fleet", "dnf problems test fleet");
    let kmods = keys.path().join("kmods");
    let local = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let o = build.gpuhost(&[
        "kmod",
        "build",
        "--local-repo-rpm",
        local.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--cert",
        cert.to_str().unwrap(),
        "--out",
        kmods.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let set = format!("driver.kmod_repo={}", kmods.display());
    let (rc, rep) = apply(&root, &[], &["--set", &set]);
    assert_eq!(rc, 2, "{rep:#}");
    let why = reason(&rep, "driver");
    assert!(
        why.contains("Problem") && why.contains("site-no-cuda-drivers"),
        "{why}"
    );
    assert!(why.contains("nothing was changed"), "{why}");
    assert_eq!(state(&root), before, "{rep:#}");
}

/// A package of NVIDIA's profile that the host's dnf configuration hides (`excludepkgs` in
/// dnf.conf): dnf cannot install the profile whole. dnf's words (`filtered out by exclude
/// filtering`), nothing changed; the fault is the host's dnf configuration, not the profile's or
/// the repos': exit 1, as for a package dnf.conf protects.
#[test]
fn a_profile_package_dnf_cannot_find_is_named_in_its_words_with_nothing_changed() {
    let root = Root::new(Os::Ol9, &[UEK9]);
    let conf = root.join("/etc/dnf/dnf.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(
        &conf,
        text.replace("[main]\n", "[main]\nexcludepkgs=nvidia-persistenced\n"),
    )
    .unwrap();
    let before = state(&root);
    let (rc, rep) = apply(&root, &[], &[]);
    assert_eq!(rc, 1, "{rep:#}");
    let why = reason(&rep, "driver");
    assert!(
        why.contains("nvidia-persistenced") && why.contains("filtered out by exclude filtering"),
        "{why}"
    );
    assert!(why.contains("nothing was changed"), "{why}");
    assert_eq!(state(&root), before, "{rep:#}");
}
