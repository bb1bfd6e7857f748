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
    CUDA_LOCAL_EL8_12_2_AARCH64, CUDA_LOCAL_EL8_12_4, CUDA_LOCAL_EL8_12_6, CUDA_LOCAL_EL9_12_2,
    CUDA_LOCAL_EL9_13_0, DRIVER_LOCAL_EL8_580, DRIVER_LOCAL_EL9_570, RHCK8, RHCK9, UEK8_NEW,
    UEK8_OLD, UEK9, UEK9_8,
};

const DRIVER: &str = "535.104.05";
const DRIVER_STEPS: &[&str] = &[
    "driver-repo",
    "build-deps",
    "driver",
    "nouveau",
    "kernel-module",
    "fabric-manager",
    "hgx-extras",
    "persistenced",
];

/// The steps of this issue and the two before them: other issues' steps (containers) are not
/// selected, so these tests neither depend on them nor wait for them.
const ONLY: &str = "kernel,kernel-headers,driver-repo,build-deps,driver,nouveau,kernel-module,fabric-manager,hgx-extras,persistenced";

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
/// `CMD --format json --profile PROFILE --set SET`, `--only` the driver steps unless `extra`
/// names its own, then `extra`.
fn args<'a>(cmd: &'a str, profile: &'a str, set: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![cmd, "--format", "json", "--profile", profile, "--set", set];
    if !extra.contains(&"--only") {
        args.extend_from_slice(&["--only", ONLY]);
    }
    args.extend_from_slice(extra);
    args
}

fn run(root: &Root, cmd: &str, profile: &str, rpm: &str, extra: &[&str]) -> (i32, Value) {
    let set = repo_set(rpm);
    let o = root.gpuhost(&args(cmd, profile, &set, extra));
    (code(&o), report(&o))
}

fn apply(root: &Root, profile: &str, rpm: &str, extra: &[&str]) -> (i32, Value) {
    run(root, "apply", profile, rpm, extra)
}

/// The module modprobe would load for `kver` is the world's default driver's ([`module_of`]).
fn module_built(root: &Root, kver: &str) -> bool {
    module_of(root, kver, DRIVER)
}

fn persistenced_enabled(root: &Root) -> bool {
    root.join("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")
        .symlink_metadata()
        .is_ok()
}

fn assert_all_unchanged(rep: &Value) {
    for s in rep["steps"].as_array().into_iter().flatten() {
        let id = s["id"].as_str().unwrap_or_default();
        // not applicable here: no NVSwitch, or nothing to build
        if ["fabric-manager", "hgx-extras", "build-deps"].contains(&id) && s["outcome"] == "skipped"
        {
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
    // No GPU on PCI and flavour "auto": the open modules (NVIDIA's default since R560).
    assert!(root.installed("kmod-nvidia-open-dkms").is_some());
    let module = root.read("/etc/dnf/modules.d/nvidia-driver.module");
    assert!(
        module.contains("stream=open-dkms") && module.contains("profiles=default"),
        "{module}"
    );
    assert!(reason(&rep, "driver").contains("no NVIDIA GPU on PCI"));
    assert!(module_built(&root, UEK8_NEW), "no module for {UEK8_NEW}");
    assert!(persistenced_enabled(&root));
    let mid = root.read("/etc/machine-id").trim().to_string();
    let entry = root.read(&format!("/boot/loader/entries/{mid}-{UEK8_NEW}.conf"));
    assert!(entry.contains("rd.driver.blacklist=nouveau"), "{entry}");

    // second apply: everything unchanged, no dnf process at all
    let (rep, execs) = second_apply_changes_nothing(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_all_unchanged(&rep);
    if let Some(execs) = execs {
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
        &[
            "--skip",
            "build-deps",
            "--set",
            "driver.flavour=proprietary",
        ],
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

/// A root without `/proc` (an image builder that did not mount it): DKMS cannot run in it, and
/// the error says so (the failed mount), not "check the headers" (issue 24, item 7).
#[test]
fn dkms_that_cannot_run_in_the_root_names_the_failed_mount() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    std::fs::remove_dir(root.join("/proc")).unwrap_or_else(|e| panic!("{e}"));
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 1, "{rep:#}");
    let km = step(&rep, "kernel-module");
    assert_eq!(km["outcome"], "failed", "{km:#}");
    let why = reason(&rep, "kernel-module");
    assert!(
        why.contains("DKMS could not run in the root") && why.contains("unshare"),
        "{why}"
    );
    assert!(!why.contains("check that the kernel headers"), "{why}");
    assert!(km["hint"].as_str().is_some_and(|h| h.contains("/proc")));
}

#[rstest]
#[case::ol8(Os::Ol8, "ol8-rhck", RHCK8, CUDA_LOCAL_EL8_12_2, "latest-dkms")]
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
    // HGX H100: R535 drives it (an H200 needs R550, see `a_branch_that_cannot_drive_a_gpu_…`).
    root.add_pci_device("0000:19:00.0", 0x10de, 0x2330, 0x030200);
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
    let good = World::get().sha256(CUDA_LOCAL_EL8_12_2);
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
    refused_before_any_change(&root, rpm, &[], needle);
    assert!(root.installed("cuda-repo-rhel8-12-2-local").is_none());
    assert!(root.installed("cuda-repo-rhel9-12-2-local").is_none());
}

/// The root's files but gpuhost's own (its lock) and rpm's sqlite files (the rpmdb is compared
/// by content).
fn root_files(r: &Root) -> Vec<String> {
    r.tree_snapshot()
        .lines()
        .filter(|l| !l.starts_with("var/lib/rpm/") && !l.starts_with("var/lib/gpuhost"))
        .map(str::to_string)
        .collect()
}

/// An apply with `rpm` is refused as invalid input (exit 2) by `driver-repo`, with a one-line
/// reason holding `needle` and a hint, before any change: found before any change
/// (docs/reliability.md, "bad input found before any change"), not even the kernel headers
/// that come before driver-repo were installed, and no file of the root changed.
fn refused_before_any_change(root: &Root, rpm: &str, extra: &[&str], needle: &str) -> String {
    let (before, rpmdb) = (root_files(root), root.rpmdb_snapshot());
    let (rc, rep) = apply(root, "ol8-uek", rpm, extra);
    assert_eq!(rc, 2, "{rep:#}");
    let s = step(&rep, "driver-repo");
    assert_eq!(s["outcome"], "failed", "{s:#}");
    let why = reason(&rep, "driver-repo");
    assert!(why.contains(needle) && !why.contains('\n'), "{why}");
    assert!(s["hint"].as_str().is_some_and(|h| !h.is_empty()), "{s:#}");
    assert_eq!(root.rpmdb_snapshot(), rpmdb, "the rpm database changed");
    assert_eq!(root_files(root), before, "the root's files changed");
    why
}

/// A copy of the world's local repo package `name` under its own name in `dir`, with
/// `damage` done to its bytes (none: `|_| {}`).
fn damaged_copy(dir: &std::path::Path, name: &str, damage: fn(&mut Vec<u8>)) -> String {
    let mut bytes = std::fs::read(local(name)).unwrap_or_else(|e| panic!("{e}"));
    damage(&mut bytes);
    let copy = dir.join(name);
    std::fs::write(&copy, bytes).unwrap_or_else(|e| panic!("{e}"));
    copy.display().to_string()
}

/// A package in a folder whose name holds a quote and spaces (the documented bundle stick
/// `GPU BUNDLE 'x'`) is read by no tool as a pattern: installed, then swapped for another
/// driver's from there (issue 34, item 8).
#[test]
fn a_package_in_a_folder_named_with_a_quote_installs_and_swaps() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let stick = dir.path().join("GPU BUNDLE 'x'");
    std::fs::create_dir_all(&stick).unwrap_or_else(|e| panic!("{e}"));
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let only = ["--only", "driver-repo"];
    let first = damaged_copy(&stick, CUDA_LOCAL_EL8_12_4, |_| {});
    let (rc, rep) = apply(&root, "ol8-uek", &first, &only);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("cuda-repo-rhel8-12-4-local").is_some());
    let next = damaged_copy(&stick, CUDA_LOCAL_EL8_12_2, |_| {});
    let extra = [&only[..], &["--set", "driver.replace_local_repo=true"]].concat();
    let (rc, rep) = apply(&root, "ol8-uek", &next, &extra);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("cuda-repo-rhel8-12-4-local").is_none());
    assert!(root.installed("cuda-repo-rhel8-12-2-local").is_some());
}

/// A local repo package cut short (a download interrupted: the payload truncated behind an
/// intact header) or with bytes of its payload changed (a disk error) is bad input: exit 2,
/// naming the file and what gpuhost's reader found (the payload's SHA-256 digest, as `rpm -K`
/// checks it, or the payload cut short), before any change (issue 34, items 4 and 8).
#[rstest]
#[case::truncated(|b: &mut Vec<u8>| b.truncate(b.len() - 300), "truncated")]
#[case::corrupted(|b: &mut Vec<u8>| {
    let at = b.len() - 2000;
    b[at..at + 4].copy_from_slice(b"XXXX");
}, "payload SHA256 digest: BAD")]
#[case::toolkit_data(|b: &mut Vec<u8>| flip_in(b, "cuda-toolkit-12-2-"),
    "cuda-toolkit-12-2-12.2.2-1.x86_64.rpm: SHA256 digest: BAD")]
#[case::driver_data(|b: &mut Vec<u8>| flip_in(b, "nvidia-driver-535"),
    "nvidia-driver-535.104.05-1.el8.x86_64.rpm: SHA256 digest: BAD")]
#[case::trailer(|b: &mut Vec<u8>| {
    let at = b.windows(10).rposition(|w| w == b"TRAILER!!!").unwrap_or(0);
    // The trailer's mtime field (rpm writes 0).
    b[at - 110 + 6 + 5 * 8 + 7] = b'1';
}, "payload SHA256 digest: BAD")]
fn a_damaged_local_repo_package_is_bad_input_naming_the_damage(
    #[case] damage: fn(&mut Vec<u8>),
    #[case] found: &str,
    #[values("true", "false")] keep: &str,
) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let copy = damaged_copy(dir.path(), CUDA_LOCAL_EL8_12_2, damage);
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let keep = format!("driver.keep_local_repo={keep}");
    let why = refused_before_any_change(&root, &copy, &["--set", &keep], "payload");
    assert!(why.contains(&copy) && why.contains(found), "{why}");
}

/// A local repo package whose payload is compressed (rpm's gzip default, xz, zstd: the world's
/// `rpms/cuda-local/<compressor>/` copies of the 12.2 package) installs as the uncompressed one
/// does, kept or not: gpuhost's reader decompresses it in process and checks the payload's
/// digest over it whole (the log says so). The same package with a byte changed halfway
/// through its compressed payload is bad input, exit 2 before any change, naming the file as
/// damaged: not an unreadable source ("could not be read whole", check the mount), which a
/// decompressor's error passed for before.
#[rstest]
fn a_compressed_local_repo_package_installs_and_its_damage_is_bad_input(
    #[values("gzip", "xz", "zstd")] comp: &str,
    #[values("true", "false")] keep: &str,
) {
    let name = format!("{comp}/{CUDA_LOCAL_EL8_12_2}");
    let keep = format!("driver.keep_local_repo={keep}");
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut bytes = std::fs::read(local(&name)).unwrap_or_else(|e| panic!("{e}"));
    let payload = gpuhost_host::rpmfile::package(std::path::Path::new(&local(&name)))
        .unwrap_or_else(|e| panic!("{e:?}"))
        .payload_at as usize;
    let at = payload + (bytes.len() - payload) / 2;
    bytes[at] ^= 0x55;
    let copy = dir.path().join(CUDA_LOCAL_EL8_12_2);
    std::fs::write(&copy, &bytes).unwrap_or_else(|e| panic!("{e}"));
    let copy = copy.display().to_string();
    let why = refused_before_any_change(&root, &copy, &["--set", &keep], "payload");
    // The package's fault, not the source's ("could not be read whole").
    assert!(why.contains(&copy) && why.contains("damaged"), "{why}");

    let set = repo_set(&name);
    let o = root
        .gpuhost_cmd(&args("apply", "ol8-uek", &set, &["--set", &keep]))
        .env("GPUHOST_LOG", "info")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let (err, rep) = (stderr(&o), report(&o));
    assert_eq!(code(&o), 0, "{err}\n{rep:#}");
    assert!(
        err.contains("read once: checked (its payload's digest read whole)"),
        "{err}"
    );
    assert_eq!(
        root.installed("nvidia-driver").as_deref(),
        Some("535.104.05-1.el8")
    );
    let kept = keep.ends_with("true");
    assert_eq!(
        root.installed("cuda-repo-rhel8-12-2-local").is_some(),
        kept,
        "{rep:#}"
    );
    let (rc, rep) = apply(&root, "ol8-uek", &name, &["--set", &keep]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_all_unchanged(&rep);
}

/// One byte in the middle of the data of the payload's first file whose name starts with
/// `name` flipped (the package's cpio archive is uncompressed, as NVIDIA's local repos'
/// payloads of compressed RPMs are stored).
fn flip_in(b: &mut [u8], name: &str) {
    let payload = b.windows(6).position(|w| w == b"070701").unwrap_or(0);
    let at = payload
        + b[payload..]
            .windows(name.len())
            .position(|w| w == name.as_bytes())
            .unwrap_or_else(|| panic!("no {name} in the payload"));
    // The entry's header: `070701` and 13 fields of 8 hex digits before the name.
    let head = b[..at]
        .windows(6)
        .rposition(|w| w == b"070701")
        .unwrap_or(0);
    let field = |i: usize| {
        let s = std::str::from_utf8(&b[head + 6 + i * 8..head + 14 + i * 8]).unwrap_or("0");
        usize::from_str_radix(s, 16).unwrap_or(0)
    };
    let (size, namesize) = (field(6), field(11));
    let data = payload + (head - payload + 110 + namesize).div_ceil(4) * 4;
    b[data + size / 2] ^= 0x01;
}

/// The same damage in the package of a driver swap is found before the swap makes its scratch
/// copy under /var/cache/gpuhost (issue 34, item 8): exit 2, the installed driver as it was.
#[test]
fn a_truncated_package_for_a_driver_swap_is_refused_before_the_scratch_copy() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let only = ["--only", "driver-repo"];
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_4, &only);
    assert_eq!(rc, 0, "{rep:#}");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let copy = damaged_copy(dir.path(), CUDA_LOCAL_EL8_12_2, |b| {
        b.truncate(b.len() - 300)
    });
    let extra = [&only[..], &["--set", "driver.replace_local_repo=true"]].concat();
    let why = refused_before_any_change(&root, &copy, &extra, "payload");
    assert!(why.contains(&copy), "{why}");
    // No scratch copy was made (gpuhost's mirror lists may be there: they are not copies).
    for scratch in ["driver-swap", "packages", "download"] {
        assert!(!root.join(&format!("var/cache/gpuhost/{scratch}")).exists());
    }
    assert!(root.installed("cuda-repo-rhel8-12-4-local").is_some());
}

/// NVIDIA's precompiled streams (`latest`, `<branch>`) are built for RHEL's kernels only and
/// match the kernel release exactly (NVIDIA/yum-packaging-precompiled-kmod#43): none serves an
/// Oracle Linux kernel, Oracle's RHCK (its `.0.1`) or the UEK. `plan` and `apply` refuse one
/// before any change (exit 2), in one line naming the kernel, why, and the ways out (a DKMS
/// stream, kmods gpuhost builds) — on RHCK it used to fail at the transaction (exit 1) asking
/// for a repo with `kmod-nvidia-<driver>-<Oracle's kernel>`, which exists nowhere (issue 41
/// item 5, issue 43 item 7).
#[rstest]
#[case::ol8_rhck_latest(
    Os::Ol8,
    "ol8-rhck",
    RHCK8,
    CUDA_LOCAL_EL8_12_2,
    "latest",
    "is Oracle's RHCK build, with Oracle's .0.1 (RHEL's is 4.18.0-553.16.1.el8_10.x86_64)"
)]
#[case::ol8_rhck_branch(
    Os::Ol8,
    "ol8-rhck",
    RHCK8,
    CUDA_LOCAL_EL8_12_2,
    "535",
    "is Oracle's RHCK build, with Oracle's .0.1 (RHEL's is 4.18.0-553.16.1.el8_10.x86_64)"
)]
#[case::ol9_rhck_latest(
    Os::Ol9,
    "ol9-rhck",
    RHCK9,
    CUDA_LOCAL_EL9_12_2,
    "latest",
    "is Oracle's RHCK build, with Oracle's .0.1 (RHEL's is 5.14.0-427.13.1.el9_4.x86_64)"
)]
#[case::ol9_rhck_branch(
    Os::Ol9,
    "ol9-rhck",
    RHCK9,
    DRIVER_LOCAL_EL9_570,
    "570",
    "is Oracle's RHCK build, with Oracle's .0.1 (RHEL's is 5.14.0-427.13.1.el9_4.x86_64)"
)]
#[case::ol8_uek(
    Os::Ol8,
    "ol8-uek",
    UEK8_NEW,
    CUDA_LOCAL_EL8_12_2,
    "latest",
    "is a UEK, Oracle's own kernel"
)]
#[case::ol9_uek(
    Os::Ol9,
    "ol9-uek",
    UEK9,
    CUDA_LOCAL_EL9_12_2,
    "535",
    "is a UEK, Oracle's own kernel"
)]
fn a_precompiled_stream_is_refused_on_every_oracle_kernel_before_anything_changes(
    #[case] os: Os,
    #[case] profile: &str,
    #[case] kver: &str,
    #[case] rpm: &str,
    #[case] stream: &str,
    #[case] why: &str,
) {
    let root = Root::new(os, &[kver]);
    let (files, rpmdb) = (root_files(&root), root.rpmdb_snapshot());
    let set = repo_set(rpm);
    let stream_set = format!("driver.stream={stream}");
    let dkms = if stream == "latest" {
        "\"latest-dkms\" for the proprietary ones".to_string()
    } else {
        format!("\"{stream}-dkms\" for the proprietary ones")
    };
    for cmd in ["plan", "apply"] {
        let o = root.gpuhost(&[
            cmd,
            "--profile",
            profile,
            "--set",
            &set,
            "--set",
            &stream_set,
        ]);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{cmd}: {}{err}", stdout(&o));
        let line = err
            .lines()
            .find(|l| l.contains("precompiled"))
            .unwrap_or_else(|| panic!("{cmd}: {err}"));
        for needle in [
            format!("driver.stream = \"{stream}\" is NVIDIA's precompiled stream"),
            "NVIDIA builds for RHEL's kernels only, matching the kernel release exactly".into(),
            format!("kernel {kver} {why}"),
            "use a DKMS stream, driver.stream = \"open-dkms\"".into(),
            dkms.clone(),
            "gpuhost kmod build on a build host, then driver.kmod_repo".into(),
        ] {
            assert!(line.contains(&needle), "{cmd}: {needle:?} not in {line}");
        }
        assert_eq!(
            root.rpmdb_snapshot(),
            rpmdb,
            "{cmd}: the rpm database changed"
        );
        assert_eq!(root_files(&root), files, "{cmd}: the root's files changed");
    }
    // A DKMS stream of the same flavour is what the refusal points to: it plans.
    let dkms_stream = format!(
        "driver.stream={}",
        if stream == "latest" {
            "latest-dkms".to_string()
        } else {
            format!("{stream}-dkms")
        }
    );
    let (rc, rep) = plan(&root, profile, rpm, &["--set", &dkms_stream]);
    assert_eq!(rc, 0, "{rep:#}");
}

/// A stream of another branch than the driver package's is not in its repo: `plan` and `apply`
/// refuse it before any change (exit 2), naming the streams to use, in one round trip rather
/// than a failed dnf transaction after the headers are in.
#[test]
fn a_stream_the_repo_lacks_is_named_with_the_streams_it_has() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let before = root.rpmdb_snapshot();
    let driver = format!(
        "driver.local_repo_rpm={}",
        World::get().cuda_local(CUDA_LOCAL_EL8_12_2).display()
    );
    let profile = world::profile("ol8-uek");
    for cmd in ["plan", "apply"] {
        let o = root.gpuhost(&[
            cmd,
            "--profile",
            &profile,
            "--set",
            &driver,
            "--set",
            "driver.stream=550-dkms",
        ]);
        let why = stderr(&o);
        assert_eq!(code(&o), 2, "{cmd}: {why}");
        assert!(
            why.contains("driver.stream = \"550-dkms\" is a stream of driver branch 550")
                && why.contains("use driver.stream = \"535-dkms\" (or \"latest-dkms\")"),
            "{cmd}: {why}"
        );
    }
    assert_eq!(root.rpmdb_snapshot(), before);
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
    assert_eq!(rep["warnings"], serde_json::json!([]), "{rep:#}");
    // A driver package named anyway is not silently dropped: the run warns that it is ignored.
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &["--set", "driver.manage=false"],
    );
    assert_eq!(rc, 0, "{rep:#}");
    let warnings = rep["warnings"].as_array().cloned().unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{rep:#}");
    let w = warnings[0].as_str().unwrap_or_default();
    assert!(
        w.contains(&local(CUDA_LOCAL_EL8_12_2))
            && w.ends_with("is ignored: the profile says driver.manage = false"),
        "{w}"
    );
    assert!(root.installed("cuda-repo-rhel8-12-2-local").is_none());
}

#[test]
fn a_fresh_plan_lists_each_change_with_its_reason_and_changes_nothing() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    root.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
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
    assert!(reason(&plan, "driver").contains("nvidia-driver:open-dkms/fm"));
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
    let (rc, rep) = apply(
        &root,
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        &["--set", "driver.flavour=proprietary"],
    );
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
    let (rep, _) = second_apply_changes_nothing(&root, profile, rpm, &["--set", &set_stream]);
    assert_all_unchanged(&rep);
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

/// The version of the `nvidia` module modprobe would load for `kver` equals `drv`.
fn module_of(root: &Root, kver: &str, drv: &str) -> bool {
    root.nvidia_module_version(kver).as_deref() == Some(drv)
}

/// `gpuhost apply` (all driver steps and hgx-extras) a second time, traced: every driver step
/// unchanged (or only deferred), and no dnf process. The report, and the programs it ran
/// (None without strace).
fn second_apply_changes_nothing(
    root: &Root,
    profile: &str,
    rpm: &str,
    extra: &[&str],
) -> (Value, Option<Vec<String>>) {
    let set = repo_set(rpm);
    let (o, execs) = root.gpuhost_traced(&args("apply", profile, &set, extra));
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    world::assert_converged(&rep);
    if let Some(execs) = &execs {
        assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
    }
    (rep, execs)
}

/// The driver as NVIDIA ships it now (issue 10, item 6): CUDA 12.x and 13.x local repos and
/// driver-only local repos (R560–R580, default stream open-dkms), with each package set.
#[rstest]
#[case::cuda12_560_module(
    Os::Ol8,
    "ol8-uek",
    UEK8_NEW,
    CUDA_LOCAL_EL8_12_6,
    "560.35.05",
    "module"
)]
#[case::cuda13_580_full(Os::Ol9, "ol9-rhck", RHCK9, CUDA_LOCAL_EL9_13_0, "580.82.07", "full")]
#[case::driver_only_570_compute(
    Os::Ol9,
    "ol9-uek",
    UEK9,
    DRIVER_LOCAL_EL9_570,
    "570.124.06",
    "compute-only"
)]
#[case::driver_only_580_module(
    Os::Ol8,
    "ol8-rhck",
    RHCK8,
    DRIVER_LOCAL_EL8_580,
    "580.82.07",
    "module"
)]
#[case::driver_only_580_full(
    Os::Ol8,
    "ol8-uek",
    UEK8_NEW,
    DRIVER_LOCAL_EL8_580,
    "580.82.07",
    "full"
)]
fn local_repos_of_either_kind_converge_with_each_package_set(
    #[case] os: Os,
    #[case] profile: &str,
    #[case] kver: &str,
    #[case] rpm: &str,
    #[case] drv: &str,
    #[case] install: &str,
) {
    let root = Root::new(os, &[kver]);
    let set_install = format!("driver.install={install}");
    let (rc, rep) = apply(&root, profile, rpm, &["--set", &set_install]);
    assert_eq!(rc, 0, "{rep:#}");
    let package = rpm
        .split("-1.0-1.")
        .next()
        .filter(|p| p.starts_with("nvidia-driver-local-repo-"))
        .map(str::to_string)
        .unwrap_or_else(|| rpm.split("-local-").next().unwrap_or_default().to_string() + "-local");
    assert!(root.installed(&package).is_some(), "{package}: {rep:#}");
    // No GPU on PCI: auto picks the open modules, from the default stream, and says so.
    let module = root.read("/etc/dnf/modules.d/nvidia-driver.module");
    assert!(module.contains("stream=open-dkms"), "{module}");
    assert!(
        reason(&rep, "driver").contains("no NVIDIA GPU on PCI"),
        "{}",
        reason(&rep, "driver")
    );
    let evr = |n: &str| root.installed(n).unwrap_or_default();
    assert!(evr("kmod-nvidia-open-dkms").starts_with(drv), "{rep:#}");
    match install {
        "full" => assert!(evr("nvidia-open").starts_with(drv), "{rep:#}"),
        "compute-only" => {
            assert!(evr("nvidia-driver-cuda").starts_with(drv), "{rep:#}");
            for desktop in ["nvidia-driver", "nvidia-settings"] {
                assert!(root.installed(desktop).is_none(), "{desktop}: {rep:#}");
            }
        }
        _ => assert!(module.contains("profiles=default"), "{module}"),
    }
    assert!(module_of(&root, kver, drv), "{rep:#}");
    assert!(persistenced_enabled(&root));
    second_apply_changes_nothing(&root, profile, rpm, &["--set", &set_install]);
}

/// The root's files (the rpmdb compared by content: rpm's sqlite files change on reads).
fn tree(r: &Root) -> String {
    let files: Vec<String> = r
        .tree_snapshot()
        .lines()
        .filter(|l| !l.starts_with("var/lib/rpm/"))
        .map(str::to_string)
        .collect();
    files.join("\n") + &r.rpmdb_snapshot()
}

/// `gpuhost plan` of the driver steps: (exit code, report).
fn plan(root: &Root, profile: &str, rpm: &str, extra: &[&str]) -> (i32, Value) {
    run(root, "plan", profile, rpm, extra)
}

/// The flavour fits the GPUs (issue 10, item 5): `auto` picks open for Turing and newer and
/// proprietary for Volta, and `plan` says why in one line.
#[rstest]
#[case::no_gpu(&[], &[], "open-dkms", "no NVIDIA GPU on PCI")]
#[case::h100(&[0x2330, 0x2330], &[], "open-dkms", "2× H100 SXM5 80GB (Hopper): NVIDIA's recommendation from Turing on")]
#[case::v100(&[0x1db5], &[], "latest-dkms", "1× Tesla V100 SXM2 32GB (Volta): open modules need Turing or newer")]
#[case::v100_pinned(&[0x1db5], &["--set", "driver.stream=535-dkms"], "535-dkms", "driver.stream = 535-dkms")]
#[case::unknown_auto(&[0x3400], &[], "open-dkms", "not in gpuhost's GPU table: 0000:19:00.0 (10de:3400)")]
#[case::unknown_explicit(&[0x3400], &["--set", "driver.flavour=proprietary"], "latest-dkms", "driver.flavour = \"proprietary\"; not in gpuhost's GPU table: 0000:19:00.0 (10de:3400)")]
fn auto_flavour_follows_the_gpus_and_plan_says_why(
    #[case] gpus: &[u16],
    #[case] extra: &[&str],
    #[case] stream: &str,
    #[case] why: &str,
) {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    for (i, id) in gpus.iter().enumerate() {
        root.add_pci_device(
            &format!("0000:{:02x}:00.0", 0x19 + i),
            0x10de,
            *id,
            0x030200,
        );
    }
    let before = tree(&root);
    let (rc, rep) = plan(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, extra);
    assert_eq!(rc, 0, "{rep:#}");
    let r = reason(&rep, "driver");
    assert!(
        r.contains(&format!("nvidia-driver:{stream}/default")),
        "{r}"
    );
    assert!(r.contains(why), "{r}");
    assert!(!r.contains('\n'), "{r}");
    assert_eq!(tree(&root), before, "plan changed the root");
}

/// A Volta host converges on the proprietary modules without the profile naming a stream.
#[test]
fn volta_gets_the_proprietary_modules() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    root.add_pci_device("0000:19:00.0", 0x10de, 0x1db5, 0x030200);
    let (rc, rep) = apply(&root, "ol8-uek", CUDA_LOCAL_EL8_12_2, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("kmod-nvidia-latest-dkms").is_some());
    assert!(root.installed("kmod-nvidia-open-dkms").is_none());
    assert!(module_built(&root, UEK8_NEW));
    assert!(root
        .join(&format!("/var/lib/dkms/nvidia/{DRIVER}"))
        .is_dir());
}

/// Bad input is refused before anything changes (exit 2), in one line naming the thing and
/// what to do: a stream whose modules cannot drive a GPU on PCI, a package set or IMEX the
/// driver lacks.
#[rstest]
#[case::proprietary_on_blackwell(0x2901, CUDA_LOCAL_EL8_12_2, &["--set", "driver.stream=latest-dkms"], &["0000:19:00.0 B200 (Blackwell)", "use driver.stream = \"open-dkms\""])]
#[case::proprietary_on_grace_hopper(0x2342, CUDA_LOCAL_EL8_12_2, &["--set", "driver.flavour=proprietary"], &["GH200 480GB (Grace Hopper superchip)", "use driver.stream = \"open-dkms\""])]
#[case::open_on_volta(0x1db5, CUDA_LOCAL_EL8_12_2, &["--set", "driver.stream=535-open"], &["Tesla V100 SXM2 32GB (Volta)", "use driver.stream = \"535-dkms\""])]
#[case::open_on_pascal(0x15f8, CUDA_LOCAL_EL8_12_2, &["--set", "driver.flavour=open"], &["Tesla P100 PCIe 16GB (Pascal)", "use driver.stream = \"latest-dkms\""])]
#[case::flavour_and_stream_disagree(0x2330, CUDA_LOCAL_EL8_12_2, &["--set", "driver.flavour=open", "--set", "driver.stream=535-dkms"], &["driver.flavour = \"open\"", "535-open"])]
#[case::compute_only_before_r560(0x2330, CUDA_LOCAL_EL8_12_2, &["--set", "driver.install=compute-only"], &["driver.install = \"compute-only\"", "R560", "535.104.05"])]
#[case::imex_before_r550(0x2330, CUDA_LOCAL_EL8_12_2, &["--set", "driver.imex=true"], &["driver.imex", "R550"])]
fn what_cannot_work_is_refused_before_anything_changes(
    #[case] gpu: u16,
    #[case] rpm: &str,
    #[case] extra: &[&str],
    #[case] needles: &[&str],
) {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    root.add_pci_device("0000:19:00.0", 0x10de, gpu, 0x030200);
    let before = tree(&root);
    let set = repo_set(rpm);
    let mut args = vec!["apply", "--profile", "ol8-uek", "--set", &set];
    args.extend_from_slice(extra);
    let o = root.gpuhost(&args);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "{n} not in {err}");
    }
    assert_eq!(tree(&root), before, "the root changed");
}

/// A branch is accepted only if it drives every GPU on PCI (issue 23, item 2): `plan` and
/// `apply` refuse a local repo whose branch NVIDIA's lists do not give the GPU (open modules: the
/// "Compatible GPUs" table of open-gpu-kernel-modules' README per tag; Kepler ends at R470),
/// before anything changes, in one line naming the GPU, the branches that drive it and what to use.
#[rstest]
#[case::b200_with_r535(Os::Ol8, UEK8_NEW, "ol8-uek", 0x2901, CUDA_LOCAL_EL8_12_2, &["0000:19:00.0 [10de:2901] B200 (Blackwell)", "driver 535.104.05 of cuda-repo-rhel8-12-2-local", "(branch R535)", "R570 and newer", "open-gpu-kernel-modules README.md @570.86.15", "use a local repo of driver branch ≥ 570"])]
#[case::b200_with_r560(Os::Ol8, UEK8_NEW, "ol8-uek", 0x2901, CUDA_LOCAL_EL8_12_6, &["B200 (Blackwell)", "(branch R560)", "≥ 570"])]
#[case::h200_with_r535(Os::Ol9, RHCK9, "ol9-rhck", 0x2335, CUDA_LOCAL_EL9_12_2, &["0000:19:00.0 [10de:2335] H200 SXM 141GB (Hopper)", "(branch R535)", "R550 and newer", "@550.90.07", "≥ 550"])]
#[case::gb300_with_r570(Os::Ol9, RHCK9, "ol9-rhck", 0x31c2, DRIVER_LOCAL_EL9_570, &["[10de:31c2] GB300 (Grace Blackwell superchip)", "(branch R570)", "@580.82.07", "≥ 580"])]
#[case::k80_with_r570(Os::Ol9, RHCK9, "ol9-rhck", 0x102d, DRIVER_LOCAL_EL9_570, &["0000:19:00.0 [10de:102d] Tesla K80 (Kepler)", "proprietary kernel modules", "R470 and older", "use a local repo of driver branch ≤ 470"])]
#[case::k80_with_r580(Os::Ol8, UEK8_NEW, "ol8-uek", 0x102d, DRIVER_LOCAL_EL8_580, &["Tesla K80 (Kepler)", "(branch R580)", "≤ 470"])]
fn a_branch_that_cannot_drive_a_gpu_on_pci_is_refused_before_anything_changes(
    #[case] os: Os,
    #[case] kernel: &str,
    #[case] profile: &str,
    #[case] gpu: u16,
    #[case] rpm: &str,
    #[case] needles: &[&str],
) {
    let root = Root::new(os, &[kernel]);
    root.add_pci_device("0000:19:00.0", 0x10de, gpu, 0x030200);
    let before = tree(&root);
    let set = repo_set(rpm);
    for cmd in ["plan", "apply"] {
        let o = root.gpuhost(&[cmd, "--profile", profile, "--set", &set]);
        assert_eq!(code(&o), 2, "{cmd}: {}{}", stdout(&o), stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.trim().lines().count(), 1, "{cmd}: {err}");
        for n in needles {
            assert!(err.contains(n), "{cmd}: {n} not in {err}");
        }
        assert_eq!(tree(&root), before, "{cmd} changed the root");
    }
}

/// The branches NVIDIA's lists give a GPU are accepted: H100 from R525, H200 from R550, B200
/// from R570, and Volta up to R580, its last branch.
#[rstest]
#[case::h100_with_r535(Os::Ol8, UEK8_NEW, "ol8-uek", 0x2330, CUDA_LOCAL_EL8_12_2, "open-dkms")]
#[case::h200_with_r570(Os::Ol9, RHCK9, "ol9-rhck", 0x2335, DRIVER_LOCAL_EL9_570, "open-dkms")]
#[case::h200_with_r580(Os::Ol9, RHCK9, "ol9-rhck", 0x2335, CUDA_LOCAL_EL9_13_0, "open-dkms")]
#[case::h200_with_r580_el8(
    Os::Ol8,
    UEK8_NEW,
    "ol8-uek",
    0x2335,
    DRIVER_LOCAL_EL8_580,
    "open-dkms"
)]
#[case::b200_with_r580(Os::Ol9, RHCK9, "ol9-rhck", 0x2901, CUDA_LOCAL_EL9_13_0, "open-dkms")]
#[case::v100_with_r580(
    Os::Ol8,
    UEK8_NEW,
    "ol8-uek",
    0x1db5,
    DRIVER_LOCAL_EL8_580,
    "latest-dkms"
)]
fn a_branch_that_drives_every_gpu_is_accepted(
    #[case] os: Os,
    #[case] kernel: &str,
    #[case] profile: &str,
    #[case] gpu: u16,
    #[case] rpm: &str,
    #[case] stream: &str,
) {
    let root = Root::new(os, &[kernel]);
    root.add_pci_device("0000:19:00.0", 0x10de, gpu, 0x030200);
    let (rc, rep) = plan(&root, profile, rpm, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let r = reason(&rep, "driver");
    assert!(r.contains(&format!("nvidia-driver:{stream}/")), "{r}");
    assert_eq!(rep["warnings"], serde_json::json!([]), "{rep:#}");
}

/// A GPU whose device id gpuhost's table lacks is named in a warning (the branch was not
/// checked against it); the run goes on as before.
#[test]
fn an_unknown_gpu_is_a_warning_naming_its_id() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    root.add_pci_device("0000:19:00.0", 0x10de, 0x2335, 0x030200);
    root.add_pci_device("0000:1a:00.0", 0x10de, 0x3400, 0x030200);
    let before = tree(&root);
    let (rc, rep) = plan(&root, "ol8-uek", DRIVER_LOCAL_EL8_580, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let warnings = rep["warnings"].as_array().cloned().unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{rep:#}");
    let w = warnings[0].as_str().unwrap_or_default();
    assert!(w.contains("10de:3400 at 0000:1a:00.0"), "{w}");
    assert!(w.contains("R580"), "{w}");
    assert!(
        rep["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("1 warning"),
        "{rep:#}"
    );
    // The text report shows it too.
    let set = repo_set(DRIVER_LOCAL_EL8_580);
    let o = root.gpuhost(&[
        "plan",
        "--profile",
        "ol8-uek",
        "--set",
        &set,
        "--only",
        ONLY,
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("10de:3400 at 0000:1a:00.0"),
        "{}",
        stdout(&o)
    );
    assert_eq!(tree(&root), before, "plan changed the root");
}

/// A file NVIDIA did not name is refused before anything changes: its name is the only place
/// the driver version is read from without opening it.
#[test]
fn an_unrecognised_package_file_name_is_refused_before_anything_changes() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let renamed = root.join("/srv/driver.rpm");
    std::fs::copy(World::get().cuda_local(CUDA_LOCAL_EL8_12_2), &renamed).unwrap_or_default();
    let before = tree(&root);
    let set = format!("driver.local_repo_rpm={}", renamed.display());
    let o = root.gpuhost(&["apply", "--profile", "ol8-uek", "--set", &set]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for n in [
        "`driver.rpm`",
        "nvidia-driver-local-repo-rhel<N>-<driver>",
        "cuda-repo-rhel<N>",
        "use the file under the name NVIDIA gave it",
    ] {
        assert!(err.contains(n), "{n} not in {err}");
    }
    assert_eq!(tree(&root), before, "the root changed");
}

/// An installed local repo of the other kind is recognised, and replaced only when asked.
#[test]
fn an_installed_local_repo_of_the_other_kind_is_recognised() {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let only = ["--only", "driver-repo"];
    let (rc, rep) = apply(&root, "ol9-rhck", DRIVER_LOCAL_EL9_570, &only);
    assert_eq!(rc, 0, "{rep:#}");
    let (rc, rep) = apply(&root, "ol9-rhck", DRIVER_LOCAL_EL9_570, &only);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(step(&rep, "driver-repo")["outcome"], "unchanged", "{rep:#}");
    let (rc, rep) = apply(&root, "ol9-rhck", CUDA_LOCAL_EL9_13_0, &only);
    assert_eq!(rc, 1, "{rep:#}");
    let why = reason(&rep, "driver-repo");
    assert!(
        why.contains("nvidia-driver-local-repo-rhel9-570.124.06 1.0 (driver 570.124.06)"),
        "{why}"
    );
    let mut with = only.to_vec();
    with.extend_from_slice(&["--set", "driver.replace_local_repo=true"]);
    let (rc, rep) = apply(&root, "ol9-rhck", CUDA_LOCAL_EL9_13_0, &with);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root
        .installed("nvidia-driver-local-repo-rhel9-570.124.06")
        .is_none());
    assert!(root.installed("cuda-repo-rhel9-13-0-local").is_some());
}

/// dnf.conf's `[main]` excludes (gpuhost's locks).
fn excludes(root: &Root) -> Vec<String> {
    let conf = root.read("/etc/dnf/dnf.conf");
    conf.lines()
        .filter_map(|l| l.strip_prefix("excludepkgs="))
        .flat_map(|v| v.split(',').map(|x| x.trim().to_string()))
        .collect()
}

/// HGX H100/H200 (NVSwitches on PCI), R580: Fabric Manager under its R580 name and NSCQ, both
/// at the driver's version and locked (issue 10, item 7).
#[test]
fn nvswitch_systems_get_nscq_at_the_drivers_version_locked() {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    for i in 0..2 {
        root.add_pci_device(
            &format!("0000:{:02x}:00.0", 0x19 + i),
            0x10de,
            0x2335,
            0x030200,
        );
    }
    root.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
    let (rc, rep) = apply(&root, "ol9-rhck", CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        root.installed("nvidia-fabricmanager").as_deref(),
        Some("580.82.07-1")
    );
    assert_eq!(
        root.installed("libnvidia-nscq").as_deref(),
        Some("580.82.07-1")
    );
    let locks = excludes(&root);
    for pkg in ["nvidia-fabricmanager", "libnvidia-nscq"] {
        assert!(locks.contains(&pkg.to_string()), "{pkg}: {locks:?}");
    }
    // Not an NVLink-5 system, no IMEX asked: neither nvlsm nor IMEX, no modules-load.d file.
    assert!(root.installed("nvlsm").is_none());
    assert!(root.installed("nvidia-imex").is_none());
    assert!(!root
        .join("/etc/modules-load.d/gpuhost-nvlink5.conf")
        .exists());
    assert!(reason(&rep, "driver").contains("nvidia-driver:open-dkms/fm"));
    // The lock holds against the user's dnf.
    let o = root.dnf(&["-y", "remove", "libnvidia-nscq"]);
    let o2 = root.dnf(&["-y", "reinstall", "libnvidia-nscq"]);
    assert!(!o2.status.success() || !o.status.success());
    second_apply_changes_nothing(&root, "ol9-rhck", CUDA_LOCAL_EL9_13_0, &[]);
}

/// HGX B200 / GB200 (NVLink-5: the NVSwitches sit behind InfiniBand management ports, not on
/// PCI), with IMEX asked: Fabric Manager, NSCQ, nvlsm + infiniband-diags, IMEX, `ib_umad` at
/// boot; every NVIDIA package locked, infiniband-diags (Oracle Linux's) not.
#[test]
fn nvlink5_systems_get_the_subnet_manager_ib_umad_and_imex() {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    root.add_pci_device("0000:19:00.0", 0x10de, 0x2901, 0x030200);
    root.write(
        "/sys/class/infiniband/mlx5_0/device/vpd",
        "ConnectX-7 HCA\n",
    );
    root.write(
        "/sys/class/infiniband/mlx5_4/device/vpd",
        "\u{82}\u{10}NVIDIA SW_MNG port\u{90}\n",
    );
    let imex = ["--set", "driver.imex=true"];
    let (rc, rep) = apply(&root, "ol9-rhck", CUDA_LOCAL_EL9_13_0, &imex);
    assert_eq!(rc, 0, "{rep:#}");
    for pkg in [
        "nvidia-fabricmanager",
        "libnvidia-nscq",
        "nvidia-imex",
        "kmod-nvidia-open-dkms",
    ] {
        assert!(
            root.installed(pkg)
                .is_some_and(|v| v.starts_with("580.82.07")),
            "{pkg}: {rep:#}"
        );
    }
    assert!(root.installed("nvlsm").is_some(), "{rep:#}");
    assert!(root.installed("infiniband-diags").is_some(), "{rep:#}");
    let locks = excludes(&root);
    for pkg in [
        "nvidia-fabricmanager",
        "libnvidia-nscq",
        "nvlsm",
        "nvidia-imex",
    ] {
        assert!(locks.contains(&pkg.to_string()), "{pkg}: {locks:?}");
    }
    assert!(!locks.contains(&"infiniband-diags".to_string()));
    let load = root.read("/etc/modules-load.d/gpuhost-nvlink5.conf");
    assert!(load.lines().any(|l| l == "ib_umad"), "{load}");
    let extras = step(&rep, "hgx-extras");
    assert!(
        extras["deferred"]
            .as_array()
            .is_some_and(|d| d.iter().any(|x| x == "modprobe ib_umad")),
        "{extras:#}"
    );
    // Blackwell: auto picked the open modules; the fm module profile for the switches.
    let module = root.read("/etc/dnf/modules.d/nvidia-driver.module");
    assert!(
        module.contains("stream=open-dkms") && module.contains("fm"),
        "{module}"
    );
    second_apply_changes_nothing(&root, "ol9-rhck", CUDA_LOCAL_EL9_13_0, &imex);
}

/// Oracle Linux 9 with UEK8 (issue 10, item 8): 6.12 built by gcc 14 — kernel-uek-devel pulls
/// gcc-toolset-14 in, DKMS builds every module of UEK8 with it — converges and stays converged.
#[test]
fn ol9_uek8_converges() {
    let root = Root::new(Os::Ol9, &[UEK9_8]);
    let (rc, rep) = apply(&root, "ol9-uek", CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("kernel-uek-devel").is_some());
    assert!(root.installed("gcc-toolset-14-gcc").is_some());
    let why = reason(&rep, "build-deps");
    assert!(why.contains("14.2.1"), "{why}");
    let conf = root.read("/etc/dkms/nvidia-open.conf");
    assert!(
        conf.contains("6.12.0-*.el9uek.*)")
            && conf.contains("/opt/rh/gcc-toolset-14/root/usr/bin/gcc"),
        "{conf}"
    );
    assert!(module_of(&root, UEK9_8, "580.82.07"), "{rep:#}");
    second_apply_changes_nothing(&root, "ol9-uek", CUDA_LOCAL_EL9_13_0, &[]);
}

/// `ol9-uek` serves UEK8 and UEK7 together: the target UEK7 (system gcc 11) and the default
/// boot UEK8 (gcc-toolset-14) both get the module, each built by its own compiler.
#[test]
fn ol9_uek_serves_uek8_and_uek7_together() {
    let root = Root::new(Os::Ol9, &[UEK9, UEK9_8]).with_default_kernel(UEK9_8);
    let target = ["--kernel-release", UEK9];
    let (rc, rep) = apply(&root, "ol9-uek", CUDA_LOCAL_EL9_13_0, &target);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(module_of(&root, UEK9, "580.82.07"), "{rep:#}");
    assert!(module_of(&root, UEK9_8, "580.82.07"), "{rep:#}");
    assert!(root.installed("gcc-toolset-14-gcc").is_some());
    let conf = root.read("/etc/dkms/nvidia-open.conf");
    assert!(
        !conf.contains("5.15.0-"),
        "UEK7 keeps the system gcc: {conf}"
    );
    second_apply_changes_nothing(&root, "ol9-uek", CUDA_LOCAL_EL9_13_0, &target);
}

/// A FIFO named as the local repo package (issue 43, item 4) is refused without being read:
/// exit 2 before any change, naming it. A watchdog opens the FIFO's other end after 60 s, so a
/// gpuhost that waits on it ends, and the test fails instead of hanging.
#[test]
fn a_fifo_as_the_local_repo_package_is_refused_without_a_hang() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let fifo = dir
        .path()
        .join("cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "mkfifo");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (d, f) = (done.clone(), fifo.clone());
    let watchdog = std::thread::spawn(move || {
        for _ in 0..600 {
            if d.load(std::sync::atomic::Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // Unblock a reader that waits on the FIFO.
        let _ = std::fs::OpenOptions::new().write(true).open(&f);
        true
    });
    let why = refused_before_any_change(&root, &fifo.display().to_string(), &[], "FIFO");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        !watchdog.join().unwrap_or(true),
        "gpuhost waited on the FIFO: {why}"
    );
}
