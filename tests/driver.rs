//! The NVIDIA driver steps (issue 3), end to end: the real `gpuhost` binary against install
//! roots made from the test world, with the real rpm, dnf, module streams and the DKMS
//! scriptlets of the synthetic kmod packages.

#![allow(clippy::panic)] // a test fails by panicking

#[path = "world/mod.rs"]
mod world;

use rstest::rstest;
use serde_json::Value;
use world::{
    code, report, stderr, stdout, step, Os, Root, World, CUDA_LOCAL_EL8_12_2,
    CUDA_LOCAL_EL8_12_2_AARCH64, CUDA_LOCAL_EL8_12_4, CUDA_LOCAL_EL9_12_2, RHCK8, RHCK9, UEK8_NEW,
    UEK8_OLD, UEK9,
};

const DRIVER: &str = "535.104.05";
const DRIVER_STEPS: &[&str] = &[
    "driver-repo",
    "build-deps",
    "driver",
    "nouveau",
    "kernel-module",
    "fabric-manager",
    "persistenced",
];

/// The steps of this issue and the two before them: other issues' steps (containers) are not
/// selected, so these tests neither depend on them nor wait for them.
const ONLY: &str = "kernel,kernel-headers,driver-repo,build-deps,driver,nouveau,kernel-module,fabric-manager,persistenced";

fn reason(r: &Value, id: &str) -> String {
    step(r, id)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn local(name: &str) -> String {
    World::get().cuda_local(name).display().to_string()
}

fn repo_set(name: &str) -> String {
    format!("driver.local_repo_rpm={}", local(name))
}

/// `gpuhost <cmd> --format json --profile P --set driver.local_repo_rpm=… EXTRA`
fn run(root: &Root, cmd: &str, profile: &str, rpm: &str, extra: &[&str]) -> (i32, Value) {
    let set = repo_set(rpm);
    let mut args = vec![cmd, "--format", "json", "--profile", profile, "--set", &set];
    if !extra.contains(&"--only") {
        args.extend_from_slice(&["--only", ONLY]);
    }
    args.extend_from_slice(extra);
    let o = root.gpuhost(&args);
    (code(&o), report(&o))
}

fn apply(root: &Root, profile: &str, rpm: &str, extra: &[&str]) -> (i32, Value) {
    run(root, "apply", profile, rpm, extra)
}

/// The version of the `nvidia` module modprobe would load for `kver` (modules.dep as the real
/// depmod wrote it, modinfo of that file), if any.
fn loadable_version(root: &Root, kver: &str) -> Option<String> {
    let dep =
        std::fs::read_to_string(root.join(&format!("/lib/modules/{kver}/modules.dep"))).ok()?;
    let path = dep.lines().find_map(|l| {
        let p = l.split(':').next()?;
        let base = p.rsplit('/').next()?;
        (base == "nvidia.ko" || base.starts_with("nvidia.ko.")).then(|| p.to_string())
    })?;
    let out = std::process::Command::new("modinfo")
        .args(["-F", "version"])
        .arg(root.join(&format!("/lib/modules/{kver}/{path}")))
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn module_built(root: &Root, kver: &str) -> bool {
    loadable_version(root, kver).as_deref() == Some(DRIVER)
}

fn persistenced_enabled(root: &Root) -> bool {
    root.join("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")
        .symlink_metadata()
        .is_ok()
}

fn assert_all_unchanged(rep: &Value) {
    for s in rep["steps"].as_array().into_iter().flatten() {
        let id = s["id"].as_str().unwrap_or_default();
        // not applicable here: no NVSwitch, or a precompiled stream (nothing to build)
        if ["fabric-manager", "build-deps"].contains(&id) && s["outcome"] == "skipped" {
            continue;
        }
        if !DRIVER_STEPS.contains(&id) && !["kernel", "kernel-headers"].contains(&id) {
            continue; // other issues' steps
        }
        assert_eq!(s["outcome"], "unchanged", "{s:#}");
    }
}

#[test]
fn uek_root_converges_and_a_second_apply_starts_no_dnf() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    for id in [
        "driver-repo",
        "build-deps",
        "driver",
        "nouveau",
        "persistenced",
    ] {
        assert_eq!(step(&rep, id)["outcome"], "changed", "{id}: {rep:#}");
    }
    assert!(reason(&rep, "fabric-manager").contains("no NVSwitch"));
    assert_eq!(
        root.installed("cuda-repo-rhel8-12-2-local").as_deref(),
        Some("12.2.2_535.104.05-1")
    );
    assert_eq!(
        root.installed("nvidia-driver").as_deref(),
        Some("535.104.05-1.el8")
    );
    assert!(root.installed("kmod-nvidia-latest-dkms").is_some());
    let module = root.read("/etc/dnf/modules.d/nvidia-driver.module");
    assert!(
        module.contains("stream=latest-dkms") && module.contains("profiles=default"),
        "{module}"
    );
    assert!(module_built(&root, UEK8_NEW), "no module for {UEK8_NEW}");
    assert!(persistenced_enabled(&root));
    let mid = root.read("/etc/machine-id").trim().to_string();
    let entry = root.read(&format!("/boot/loader/entries/{mid}-{UEK8_NEW}.conf"));
    assert!(entry.contains("rd.driver.blacklist=nouveau"), "{entry}");

    // second apply: everything unchanged, no dnf process at all
    let set = repo_set(CUDA_LOCAL_EL8_12_2);
    let args = [
        "apply",
        "--format",
        "json",
        "--profile",
        "ol8-uek",
        "--set",
        &set,
        "--only",
        ONLY,
    ];
    let (o, execs) = root.gpuhost_traced(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let rep = report(&o);
    assert_all_unchanged(&rep);
    if let Some(execs) = execs {
        assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
        let rpms = execs.iter().filter(|p| *p == "rpm").count();
        assert!(rpms <= 1, "one batched rpm query expected: {execs:?}");
    }

    // plan on the converged root: every step unchanged
    let (rc, plan) = run(&root, "plan", "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0);
    assert_all_unchanged(&plan);
}

#[test]
fn uek_kernel_built_by_a_newer_gcc_gets_the_toolset_and_the_dkms_override() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let why = reason(&rep, "build-deps");
    assert!(
        why.contains("gcc-toolset-11-gcc") && why.contains("11.2.1"),
        "{why}"
    );
    assert!(root.installed("gcc-toolset-11-gcc").is_some());
    // Every DKMS module of UEK7 kernels gets the toolset, not only nvidia: per module for
    // dkms < 3.3 (the world's real dkms is 3.0.10), build_environment for dkms >= 3.3.
    for m in ["nvidia", "nvidia-open"] {
        let conf = root.read(&format!("/etc/dkms/{m}.conf"));
        assert!(
            conf.contains("5.15.0-*.el8uek.*) MAKE[0]=\"${MAKE[0]} CC=/opt/rh/gcc-toolset-11/root/usr/bin/gcc\""),
            "{conf}"
        );
    }
    assert!(root
        .read("/etc/dkms/framework.conf.d/gpuhost-uek-compiler.conf")
        .contains("build_environment=\"/etc/dkms/gpuhost-uek-compiler.sh\""));
    // The real DKMS build fails with the system gcc 8.5: a module proves the override.
    assert!(module_built(&root, UEK8_OLD), "{rep:#}");
}

#[test]
fn a_failed_dkms_build_fails_kernel_module_with_the_make_log() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    // Without build-deps, DKMS builds with the system gcc 8.5, which UEK7 rejects.
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &["--skip", "build-deps"],
    );
    assert_eq!(rc, 1, "{rep:#}");
    let km = step(&rep, "kernel-module");
    assert_eq!(km["outcome"], "failed", "{km:#}");
    let why = reason(&rep, "kernel-module");
    assert!(
        why.contains(UEK8_NEW) && why.contains("-ftrivial-auto-var-init=zero"),
        "{why}"
    );
    assert!(!why.contains('\n'), "{why}");
    assert!(km["hint"]
        .as_str()
        .is_some_and(|h| h.contains("build-deps")));
}

#[rstest]
#[case::ol8(Os::Ol8, "ol8-rhck", RHCK8, CUDA_LOCAL_EL8_12_2, "latest-dkms")]
#[case::ol8_precompiled(Os::Ol8, "ol8-rhck", RHCK8, CUDA_LOCAL_EL8_12_2, "latest")]
#[case::ol9(Os::Ol9, "ol9-rhck", RHCK9, CUDA_LOCAL_EL9_12_2, "latest-dkms")]
fn rhck_roots_converge(
    #[case] os: Os,
    #[case] profile: &str,
    #[case] kver: &str,
    #[case] rpm: &str,
    #[case] stream: &str,
) {
    let root = Root::new(os, &[kver]);
    let set_stream = format!("driver.stream={stream}");
    let (rc, rep) = apply(&root, profile, rpm, &["--set", &set_stream]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with(DRIVER)));
    assert!(module_built(&root, kver), "{rep:#}");
    // RHCK is built with the system gcc: no toolset, no override
    assert!(!root.join("/etc/dkms/nvidia.conf").exists());
    assert!(root.installed_all("gcc-toolset-11-gcc").is_empty());
    let (rc, rep) = apply(&root, profile, rpm, &["--set", &set_stream]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_all_unchanged(&rep);
}

#[test]
fn ol9_uek_root_converges() {
    let root = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = apply(&root, "ol9-uek", CUDA_LOCAL_EL9_12_2, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(module_built(&root, UEK9));
}

#[test]
fn the_default_boot_kernel_gets_the_module_too() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD, UEK8_NEW]).with_default_kernel(UEK8_NEW);
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &["--kernel-release", UEK8_OLD],
    );
    assert_eq!(rc, 0, "{rep:#}");
    assert!(module_built(&root, UEK8_OLD), "target kernel");
    assert!(module_built(&root, UEK8_NEW), "default boot kernel");
    let why = reason(&rep, "kernel-module");
    assert!(why.contains("default boot"), "{why}");
}

#[test]
fn nvswitches_add_fabric_manager_of_the_drivers_version_locked() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    root.add_pci_device("0000:19:00.0", 0x10de, 0x2335, 0x030200);
    root.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        root.installed("nvidia-fabric-manager").as_deref(),
        Some("535.104.05-1"),
        "the network repo's newer 550.90.07 must not be taken"
    );
    let module = root.read("/etc/dnf/modules.d/nvidia-driver.module");
    assert!(module.contains("fm"), "{module}");
    assert!(root
        .read("/etc/dnf/dnf.conf")
        .contains("excludepkgs=nvidia-fabric-manager"));
    assert!(root
        .join("/etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service")
        .symlink_metadata()
        .is_ok());
    // The lock holds: dnf cannot move Fabric Manager.
    let o = root.dnf(&["-y", "install", "nvidia-fabric-manager-550.90.07"]);
    assert!(!o.status.success());
    assert_eq!(
        root.installed("nvidia-fabric-manager").as_deref(),
        Some("535.104.05-1")
    );
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_all_unchanged(&rep);
}

#[test]
fn a_checksum_mismatch_installs_nothing() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &["--only", "kernel,kernel-headers"],
    );
    assert_eq!(rc, 0, "{rep:#}");
    let before = root.rpmdb_snapshot();
    let sums = std::fs::read_to_string(World::get().cuda_local("SHA256SUMS")).unwrap_or_default();
    let good = sums
        .lines()
        .find(|l| l.ends_with(CUDA_LOCAL_EL8_12_2))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    assert_eq!(good.len(), 64);
    let tampered = format!("tampered/{CUDA_LOCAL_EL8_12_2}");
    let sha = format!("driver.sha256={good}");
    let (rc, rep) = apply(&root, "ol8-uek", &tampered, &["--set", &sha]);
    // Invalid input found before any change: exit 2.
    assert_eq!(rc, 2, "{rep:#}");
    assert_eq!(step(&rep, "driver-repo")["outcome"], "failed");
    let why = reason(&rep, "driver-repo");
    assert!(why.contains("SHA-256") && why.contains(&good), "{why}");
    assert_eq!(step(&rep, "driver")["outcome"], "skipped");
    assert_eq!(root.rpmdb_snapshot(), before, "the rpmdb changed");
    // the good file with the same checksum installs
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &["--set", &sha]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(reason(&rep, "driver-repo").contains("SHA-256 verified"));
}

#[rstest]
#[case::missing(
    "no-such-dir/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm",
    "does not exist"
)]
#[case::not_an_rpm(
    "not-an-rpm/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm",
    "not an RPM"
)]
#[case::aarch64(CUDA_LOCAL_EL8_12_2_AARCH64, "aarch64")]
#[case::wrong_os(CUDA_LOCAL_EL9_12_2, "RHEL 9")]
fn bad_local_repo_files_are_one_line_errors(#[case] rpm: &str, #[case] needle: &str) {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (rc, rep) = apply(&root, "ol8-uek", rpm, &[]);
    // The driver file is the user's input, checked before any change: exit 2.
    assert_eq!(rc, 2, "{rep:#}");
    let s = step(&rep, "driver-repo");
    assert_eq!(s["outcome"], "failed", "{s:#}");
    let why = reason(&rep, "driver-repo");
    assert!(why.contains(needle) && !why.contains('\n'), "{why}");
    assert!(s["hint"].as_str().is_some_and(|h| !h.is_empty()), "{s:#}");
    assert!(root.installed("cuda-repo-rhel8-12-2-local").is_none());
    assert!(root.installed("cuda-repo-rhel9-12-2-local").is_none());
}

#[test]
fn a_precompiled_stream_on_uek_is_refused_before_anything_changes() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let before = root.rpmdb_snapshot();
    let set = repo_set(CUDA_LOCAL_EL8_12_2);
    let o = root.gpuhost(&[
        "apply",
        "--profile",
        "ol8-uek",
        "--set",
        &set,
        "--set",
        "driver.stream=latest",
    ]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("precompiled") && err.contains("UEK"), "{err}");
    assert_eq!(root.rpmdb_snapshot(), before);
}

#[test]
fn a_stream_the_repo_lacks_is_named_with_the_streams_it_has() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &["--set", "driver.stream=550-dkms"],
    );
    assert_eq!(rc, 1, "{rep:#}");
    assert_eq!(step(&rep, "driver")["outcome"], "failed");
    let why = reason(&rep, "driver");
    assert!(
        why.contains("550-dkms") && why.contains("535-dkms") && why.contains("latest-dkms"),
        "{why}"
    );
    assert!(root.installed("nvidia-driver").is_none());
}

/// A profile that manages the driver (the default) but names no package stops before any
/// change, naming the key; `driver.manage = false` skips every driver step and says why.
#[test]
fn without_a_local_repo_rpm_apply_stops_unless_the_profile_opts_out_of_the_driver() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let before = root.rpmdb_snapshot();
    let o = root.gpuhost(&["apply", "--profile", "ol8-uek", "--only", ONLY]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("set driver.local_repo_rpm")
            && stderr(&o).contains("driver.manage = false"),
        "{}",
        stderr(&o)
    );
    assert_eq!(before, root.rpmdb_snapshot());
    let o = root.gpuhost(&[
        "apply",
        "--format",
        "json",
        "--profile",
        "ol8-uek",
        "--set",
        "driver.manage=false",
        "--only",
        ONLY,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let rep = report(&o);
    assert_eq!(rep["driver_managed"], false);
    for id in DRIVER_STEPS {
        let s = step(&rep, id);
        assert_eq!(s["outcome"], "skipped", "{s:#}");
        assert!(reason(&rep, id).contains("driver.manage = false"));
    }
}

#[test]
fn a_fresh_plan_lists_each_change_with_its_reason_and_changes_nothing() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    root.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
    // rpm's own sqlite files change when rpm only reads; the rpmdb is compared by content.
    let tree = |r: &Root| -> String {
        r.tree_snapshot()
            .lines()
            .filter(|l| !l.starts_with("var/lib/rpm/"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let before = tree(&root);
    let rpmdb = root.rpmdb_snapshot();
    let (rc, plan) = run(&root, "plan", "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0, "{plan:#}");
    for id in DRIVER_STEPS {
        let s = step(&plan, id);
        assert_eq!(s["outcome"], "would-change", "{s:#}");
        let changes = s["changes"].as_array().cloned().unwrap_or_default();
        assert!(!changes.is_empty(), "{s:#}");
        for c in changes {
            let c = c.as_str().unwrap_or_default();
            assert!(
                c.contains('(') && c.ends_with(')'),
                "a change without reason: {c}"
            );
        }
    }
    assert!(reason(&plan, "driver").contains("nvidia-driver:latest-dkms/fm"));
    assert!(reason(&plan, "driver-repo").contains(CUDA_LOCAL_EL8_12_2));
    assert_eq!(tree(&root), before, "plan changed the root");
    assert_eq!(root.rpmdb_snapshot(), rpmdb, "plan changed the rpmdb");
}

#[test]
fn nouveau_loaded_means_reboot_required() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    root.write("/sys/module/nouveau/refcnt", "0\n");
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 3, "{rep:#}");
    let r = step(&rep, "nouveau")["reboot_required"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(r.contains("nouveau is loaded"), "{rep:#}");
    assert_ne!(step(&rep, "nouveau")["outcome"], "failed");
}

#[test]
fn another_stream_is_switched_only_when_the_profile_says_so() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &["--set", "driver.stream=535-open"],
    );
    assert_eq!(rc, 1, "{rep:#}");
    assert!(reason(&rep, "driver").contains("latest-dkms is installed"));
    assert!(root.installed("kmod-nvidia-latest-dkms").is_some());
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &[
            "--set",
            "driver.stream=535-open",
            "--set",
            "driver.switch_stream=true",
        ],
    );
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root
        .read("/etc/dnf/modules.d/nvidia-driver.module")
        .contains("stream=535-open"));
    assert!(root.installed("kmod-nvidia-open-dkms").is_some());
    assert!(root.installed("gcc-c++").is_some(), "open modules need g++");
    assert!(module_built(&root, UEK8_NEW));
}

#[test]
fn another_driver_version_is_replaced_only_when_the_profile_says_so() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_4, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("550.54.15")));
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 1, "{rep:#}");
    let why = reason(&rep, "driver-repo");
    assert!(
        why.contains("cuda-repo-rhel8-12-4-local") && why.contains("550.54.15"),
        "{why}"
    );
    assert!(step(&rep, "driver-repo")["hint"]
        .as_str()
        .is_some_and(|h| h.contains("replace_local_repo")));
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &["--set", "driver.replace_local_repo=true"],
    );
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("cuda-repo-rhel8-12-4-local").is_none());
    assert!(root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with(DRIVER)));
    assert!(module_built(&root, UEK8_NEW));
}

/// Open modules converge everywhere (issue 10, item 2): NVIDIA's kmod-nvidia-open-dkms registers
/// with DKMS as `nvidia-open`; the real DKMS builds it for every served kernel; a second apply
/// changes nothing and starts no dnf.
#[rstest]
#[case::ol8_uek_open_dkms(Os::Ol8, "ol8-uek", UEK8_NEW, CUDA_LOCAL_EL8_12_2, "open-dkms")]
#[case::ol8_uek_branch_open(Os::Ol8, "ol8-uek", UEK8_NEW, CUDA_LOCAL_EL8_12_2, "535-open")]
#[case::ol8_rhck_open_dkms(Os::Ol8, "ol8-rhck", RHCK8, CUDA_LOCAL_EL8_12_2, "open-dkms")]
#[case::ol8_rhck_branch_open(Os::Ol8, "ol8-rhck", RHCK8, CUDA_LOCAL_EL8_12_2, "535-open")]
#[case::ol9_uek_open_dkms(Os::Ol9, "ol9-uek", UEK9, CUDA_LOCAL_EL9_12_2, "open-dkms")]
#[case::ol9_uek_branch_open(Os::Ol9, "ol9-uek", UEK9, CUDA_LOCAL_EL9_12_2, "535-open")]
#[case::ol9_rhck_open_dkms(Os::Ol9, "ol9-rhck", RHCK9, CUDA_LOCAL_EL9_12_2, "open-dkms")]
#[case::ol9_rhck_branch_open(Os::Ol9, "ol9-rhck", RHCK9, CUDA_LOCAL_EL9_12_2, "535-open")]
fn open_modules_converge_and_stay_converged(
    #[case] os: Os,
    #[case] profile: &str,
    #[case] kver: &str,
    #[case] rpm: &str,
    #[case] stream: &str,
) {
    let root = Root::new(os, &[kver]);
    let set_stream = format!("driver.stream={stream}");
    let (rc, rep) = apply(&root, profile, rpm, &["--set", &set_stream]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("kmod-nvidia-open-dkms").is_some());
    assert!(module_built(&root, kver), "{rep:#}");
    assert!(root
        .join(&format!("/var/lib/dkms/nvidia-open/{DRIVER}"))
        .is_dir());
    let set = repo_set(rpm);
    let args = [
        "apply",
        "--format",
        "json",
        "--profile",
        profile,
        "--set",
        &set,
        "--set",
        &set_stream,
        "--only",
        ONLY,
    ];
    let (o, execs) = root.gpuhost_traced(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_all_unchanged(&report(&o));
    if let Some(execs) = execs {
        assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
    }
}

/// A failing open build names DKMS's `nvidia-open` make.log (UEK7 on OL8 with the system gcc
/// 8.5: the toolset is removed after the first apply, the module too).
#[test]
fn a_failing_open_build_shows_the_nvidia_open_make_log() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    let set = repo_set(CUDA_LOCAL_EL8_12_2);
    let args = [
        "apply",
        "--format",
        "json",
        "--profile",
        "ol8-uek",
        "--set",
        &set,
        "--set",
        "driver.stream=open-dkms",
        "--only",
        "kernel,kernel-headers,driver-repo,driver,nouveau,kernel-module",
    ];
    root.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-devel-{UEK8_OLD}"),
        "dkms",
        "gcc",
        "gcc-c++",
    ]);
    let o = root.gpuhost(&args);
    let rep = report(&o);
    assert_eq!(code(&o), 1, "{rep:#}");
    let why = reason(&rep, "kernel-module");
    assert!(
        why.contains("/var/lib/dkms/nvidia-open/535.104.05/build/make.log")
            && why.contains("-ftrivial-auto-var-init=zero"),
        "{why}"
    );
}
