//! The driver survives the next kernel (issue 11), end to end in install roots: a converged
//! root gets a newer UEK with plain dnf, the kernel's own install actions make it the default
//! boot entry, and the trigger's apply runs the way the host runs it (target = the running,
//! older kernel). With headers in the repos the new kernel gets headers and module; without,
//! the default boot entry stays on the old kernel, the reason is recorded and `gpuhost status`
//! is CRITICAL with the fix command.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

#[path = "support/status.rs"]
mod support;
#[path = "world/mod.rs"]
mod world;

use rstest::rstest;
use serde_json::Value;
use support::check;
use world::{
    code, report, Os, Root, World, CUDA_LOCAL_EL8_12_2, CUDA_LOCAL_EL8_12_4, CUDA_LOCAL_EL9_12_2,
    CUDA_LOCAL_EL9_13_0, DRIVER_LOCAL_EL10_580, DRIVER_LOCAL_EL9_570, RHCK9, UEK10, UEK10_NO_DEVEL,
    UEK10_OLD, UEK8_NEW, UEK8_NO_DEVEL, UEK8_OLD,
};

const DRIVER: &str = "535.104.05";
const ONLY: &str = "kernel,kernel-headers,driver-repo,build-deps,driver,nouveau,kernel-module";

/// One release's kernels and driver for the guard: a converged node on `old`, a newer UEK
/// `new` whose headers the repos carry, and one (`no_devel`) whose headers no repo carries.
#[derive(Clone, Copy, Debug)]
struct Case {
    os: Os,
    profile: &'static str,
    rpm: &'static str,
    driver: &'static str,
    old: &'static str,
    new: &'static str,
    no_devel: &'static str,
    /// `driver.keep_local_repo`: false takes the driver set from gpuhost's cache (issue 42).
    keep: bool,
}

/// Oracle Linux 8, UEK7, a CUDA 12.2 local repo (modular).
const OL8: Case = Case {
    os: Os::Ol8,
    profile: "ol8-uek",
    rpm: CUDA_LOCAL_EL8_12_2,
    driver: DRIVER,
    old: UEK8_OLD,
    new: UEK8_NEW,
    no_devel: UEK8_NO_DEVEL,
    keep: true,
};

/// Oracle Linux 10, UEK8, NVIDIA's EL10 driver-only local repo (not modular).
const OL10: Case = Case {
    os: Os::Ol10,
    profile: "ol10-uek",
    rpm: DRIVER_LOCAL_EL10_580,
    driver: "580.126.09",
    old: UEK10_OLD,
    new: UEK10,
    no_devel: UEK10_NO_DEVEL,
    keep: true,
};

/// Oracle Linux 8 with `driver.keep_local_repo = false`: no local repo package on the node,
/// the driver set (DKMS kmod included) from gpuhost's cache.
const OL8_CACHED: Case = Case { keep: false, ..OL8 };

fn apply(root: &Root, extra: &[&str]) -> (i32, Value) {
    apply_case(&OL8, root, extra)
}

fn apply_case(c: &Case, root: &Root, extra: &[&str]) -> (i32, Value) {
    let mut extra = extra.to_vec();
    if !c.keep {
        extra.extend(["--set", "driver.keep_local_repo=false"]);
    }
    let args = world::apply_args(c.profile, c.rpm, ONLY, &extra);
    let o = root.gpuhost(&args.iter().map(String::as_str).collect::<Vec<_>>());
    (code(&o), report(&o))
}

/// `dnf install` of the UEK whose headers no repo carries, from its package files (as an admin
/// would; UEK8's meta package comes with its -core and -modules packages), and what the
/// kernel's scriptlets then do ([`kernel_install_add`]).
fn install_headerless_kernel(root: &Root) {
    install_headerless(&OL8, root);
}

fn install_headerless(c: &Case, root: &Root) {
    let evr = world::evr(c.no_devel);
    let mut files = Vec::new();
    for part in ["", "-core", "-modules-core", "-modules"] {
        let rpm = World::get().extra_rpm(&format!("kernel-uek{part}-{evr}.x86_64.rpm"));
        if rpm.exists() {
            let copy = root.join(&format!("/tmp/kernel-uek{part}.rpm"));
            std::fs::copy(rpm, &copy).unwrap();
            files.push(copy.display().to_string());
        }
    }
    assert!(!files.is_empty(), "no kernel-uek {evr} in rpms/extra");
    let mut args = vec!["-y", "install"];
    args.extend(files.iter().map(String::as_str));
    root.dnf_ok(&args);
    kernel_install_add(root, c.no_devel);
}

/// What the kernel's scriptlets do on a real host after `dnf install kernel-uek`
/// ([`world::Root::kernel_install_add`]).
fn kernel_install_add(root: &Root, kver: &str) {
    root.kernel_install_add(kver);
}

fn status(root: &Root) -> (i32, Value) {
    let run = tempfile::tempdir().unwrap();
    let o = root
        .gpuhost_cmd(&["status", "--format", "json"])
        .env("GPUHOST_RUN_DIR", run.path())
        .env_remove("GPUHOST_STATUS_ROOT")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    (code(&o), v)
}

fn converged(kernels: &[&str]) -> Root {
    converged_case(&OL8, kernels)
}

fn converged_case(c: &Case, kernels: &[&str]) -> Root {
    let root = Root::new(c.os, kernels);
    let (rc, rep) = apply_case(c, &root, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let cached = root.join("/var/lib/gpuhost/driver-repo").is_dir();
    assert_eq!(cached, !c.keep, "gpuhost's driver cache: {rep:#}");
    assert_eq!(root.nvidia_module_version(c.old).as_deref(), Some(c.driver));
    root
}

#[rstest]
#[case::ol8(OL8)]
#[case::ol8_cached(OL8_CACHED)]
#[case::ol10(OL10)]
fn a_newer_uek_from_plain_dnf_gets_headers_and_module_before_its_first_boot(#[case] c: Case) {
    let root = converged_case(&c, &[c.old]);
    root.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-{}", world::evr(c.new)),
    ]);
    kernel_install_add(&root, c.new);
    assert_eq!(
        root.installed("kernel-uek-devel").as_deref(),
        Some(world::evr(c.old))
    );
    // The next boot would lose the GPUs: status says so before the trigger runs.
    let (rc, st) = status(&root);
    assert_eq!(rc, 2, "{st:#}");
    let nb = check(&st, "driver.next_boot");
    assert_eq!(nb["severity"], "CRITICAL", "{nb:#}");
    assert!(
        nb["value"].as_str().unwrap_or_default().contains(c.new),
        "{nb:#}"
    );

    // The trigger: the same apply, with the running (old) kernel as the target.
    let (rc, rep) = apply_case(&c, &root, &["--kernel-release", c.old]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(
        root.installed_all("kernel-uek-devel")
            .iter()
            .any(|v| v == world::evr(c.new)),
        "headers for the new kernel"
    );
    assert_eq!(root.nvidia_module_version(c.new).as_deref(), Some(c.driver));
    assert!(
        root.saved_entry().ends_with(c.new),
        "the new kernel stays the default"
    );
    assert_eq!(rep["kernel_guard"]["action"], "fine", "{rep:#}");
    assert!(!root.join("/var/lib/gpuhost/kernel-guard.json").exists());
    let (_, st) = status(&root);
    let nb = check(&st, "driver.next_boot");
    assert_eq!(nb["severity"], "OK", "{nb:#}");
    // Both kernels have their module: any of them boots with the GPUs.
    let b = check(&st, "driver.bootable_kernels");
    assert_eq!(b["severity"], "OK", "{b:#}");
}

#[rstest]
#[case::ol8(OL8)]
#[case::ol10(OL10)]
fn without_headers_in_any_repo_the_default_stays_on_the_old_kernel_and_status_says_why(
    #[case] c: Case,
) {
    let root = converged_case(&c, &[c.old]);
    install_headerless(&c, &root);

    let (rc, rep) = apply_case(&c, &root, &["--kernel-release", c.old]);
    assert_eq!(rc, 1, "{rep:#}");
    assert_eq!(rep["kernel_guard"]["action"], "kept", "{rep:#}");
    assert!(
        root.saved_entry().ends_with(c.old),
        "{}",
        root.saved_entry()
    );
    let rec: Value =
        serde_json::from_str(&root.read("/var/lib/gpuhost/kernel-guard.json")).unwrap();
    assert_eq!(rec["kernel"], c.no_devel);
    assert_eq!(rec["kept"], c.old);
    assert!(
        rec["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("kernel-headers"),
        "{rec:#}"
    );
    assert!(
        rec["fix"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("--kernel-release {}", c.no_devel)),
        "{rec:#}"
    );
    // The report carries the record's reason and fix.
    assert_eq!(rep["kernel_guard"]["reason"], rec["reason"], "{rep:#}");
    assert_eq!(rep["kernel_guard"]["fix"], rec["fix"], "{rep:#}");

    let (rc, st) = status(&root);
    assert_eq!(rc, 2, "{st:#}");
    let g = check(&st, "driver.kernel_guard");
    assert_eq!(g["severity"], "CRITICAL");
    assert!(
        g["value"].as_str().unwrap_or_default().contains(c.no_devel),
        "{g:#}"
    );
    assert!(
        g["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("gpuhost apply"),
        "{g:#}"
    );
    // The next boot itself is safe again.
    assert_eq!(check(&st, "driver.next_boot")["severity"], "OK");
    // The kept-back kernel is still bootable from the menu, without the GPUs (issue 41, item 3).
    let b = check(&st, "driver.bootable_kernels");
    assert_eq!(b["severity"], "WARNING", "{b:#}");
    assert!(
        b["value"].as_str().unwrap_or_default().contains(c.no_devel),
        "{b:#}"
    );
    // Its Prometheus form, as node_exporter's textfile collector reads it: WARNING is 1.
    let run = tempfile::tempdir().unwrap();
    let o = root
        .gpuhost_cmd(&["status", "--format", "prometheus"])
        .env("GPUHOST_RUN_DIR", run.path())
        .env_remove("GPUHOST_STATUS_ROOT")
        .output()
        .unwrap();
    let prom = String::from_utf8_lossy(&o.stdout);
    assert!(
        prom.lines()
            .any(|l| l == "gpuhost_check_status{check=\"driver.bootable_kernels\"} 1"),
        "{prom}"
    );

    // A second apply changes nothing and keeps the record.
    let (_, rep) = apply_case(&c, &root, &["--kernel-release", c.old]);
    assert_eq!(rep["kernel_guard"]["action"], "fine", "{rep:#}");
    assert!(root.join("/var/lib/gpuhost/kernel-guard.json").exists());
}

#[test]
fn the_fix_command_builds_the_held_back_kernel_and_makes_it_the_default_again() {
    let root = converged(&[UEK8_OLD]);
    root.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-{}", world::evr(UEK8_NEW)),
    ]);
    kernel_install_add(&root, UEK8_NEW);
    // The UEK repo (with the new kernel's headers) is off for this run: no build.
    let repo = root.read("/etc/yum.repos.d/uek-ol8.repo");
    root.write(
        "/etc/yum.repos.d/uek-ol8.repo",
        &repo.replace("enabled=1", "enabled=0"),
    );
    // The text report says what the guard did, why, and the fix it recorded (issue 23, item 4).
    let args: Vec<String> = world::apply_args(
        "ol8-uek",
        CUDA_LOCAL_EL8_12_2,
        ONLY,
        &["--kernel-release", UEK8_OLD],
    )
    .into_iter()
    .filter(|a| a != "--format" && a != "json")
    .collect();
    let o = root.gpuhost(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_ne!(code(&o), 0, "{text}");
    assert!(root.saved_entry().ends_with(UEK8_OLD));
    root.write("/etc/yum.repos.d/uek-ol8.repo", &repo);
    // The recorded fix, word for word as a user would paste it into a shell: the same apply
    // (profile, --sets, step selection, root) for the held-back kernel.
    let rec: Value =
        serde_json::from_str(&root.read("/var/lib/gpuhost/kernel-guard.json")).unwrap();
    assert!(
        text.contains(&format!(
            "kernel guard: kept {UEK8_OLD} as the default boot kernel instead of {UEK8_NEW}: {}",
            rec["reason"].as_str().unwrap()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("  fix: {}", rec["fix"].as_str().unwrap())),
        "{text}"
    );
    let words = shlex::split(rec["fix"].as_str().unwrap()).unwrap();
    assert_eq!(words[0], "gpuhost", "{rec:#}");
    assert!(words.windows(2).any(|w| w == ["--only", ONLY]), "{words:?}");
    assert!(
        words
            .windows(2)
            .any(|w| w == ["--kernel-release", UEK8_NEW]),
        "{words:?}"
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .env("HOME", World::get().home())
        .args(&words[1..])
        .args(["--format", "json"])
        .output()
        .unwrap();
    let (rc, rep) = (code(&o), report(&o));
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(rep["kernel_guard"]["action"], "restored", "{rep:#}");
    assert!(root.saved_entry().ends_with(UEK8_NEW));
    assert_eq!(
        root.nvidia_module_version(UEK8_NEW).as_deref(),
        Some(DRIVER)
    );
    assert!(!root.join("/var/lib/gpuhost/kernel-guard.json").exists());
}

#[test]
fn kernel_guard_false_lets_the_new_kernel_boot_and_status_is_critical() {
    let root = converged(&[UEK8_OLD]);
    install_headerless_kernel(&root);
    let (rc, rep) = apply(
        &root,
        &["--kernel-release", UEK8_OLD, "--set", "kernel.guard=false"],
    );
    assert_eq!(rc, 1, "{rep:#}");
    assert!(rep.get("kernel_guard").is_none(), "{rep:#}");
    assert!(root.saved_entry().ends_with(UEK8_NO_DEVEL));
    let (rc, st) = status(&root);
    assert_eq!(rc, 2);
    let nb = check(&st, "driver.next_boot");
    assert_eq!(nb["severity"], "CRITICAL", "{nb:#}");
    assert!(
        nb["value"]
            .as_str()
            .unwrap_or_default()
            .contains("next reboot loses the GPUs"),
        "{nb:#}"
    );
    assert!(
        nb["hint"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("grubby --set-default /boot/vmlinuz-{UEK8_OLD}")),
        "{nb:#}"
    );
}

/// The trigger as the host runs it: kernel-install's plugin queued `gpuhost kernel-added KVER`
/// while the kernel's rpm transaction still held rpm's lock; it waits for the lock, then
/// repeats the last converged apply (recorded by that apply), which serves the new default.
#[rstest]
#[case::ol8(OL8)]
#[case::ol8_cached(OL8_CACHED)]
#[case::ol10(OL10)]
fn kernel_added_waits_for_the_rpm_transaction_then_repeats_the_last_apply(#[case] c: Case) {
    let root = converged_case(&c, &[c.old]);
    let last: Value = serde_json::from_str(&root.read("/var/lib/gpuhost/last-apply.json")).unwrap();
    assert_eq!(last["profile"], c.profile, "{last:#}");
    root.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-{}", world::evr(c.new)),
    ]);
    kernel_install_add(&root, c.new);
    // A transaction still running: a process holds rpm's write lock for 2 s.
    let lock = root.join("/var/lib/rpm/.rpm.lock");
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(2)",
        ])
        .arg(&lock)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = holder.stdout.take().unwrap();
    let mut buf = [0u8; 5];
    std::io::Read::read_exact(&mut out, &mut buf).unwrap();
    let start = std::time::Instant::now();
    let o = root.gpuhost(&["kernel-added", c.new, "--format", "json"]);
    let waited = start.elapsed();
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    assert!(
        waited.as_millis() >= 1500,
        "did not wait for rpm: {waited:?}"
    );
    assert!(
        root.installed_all("kernel-uek-devel")
            .iter()
            .any(|v| v == world::evr(c.new)),
        "headers for the new kernel"
    );
    assert_eq!(root.nvidia_module_version(c.new).as_deref(), Some(c.driver));
    assert!(root.saved_entry().ends_with(c.new));
    let _ = holder.wait();
}

#[test]
fn kernel_added_on_a_host_gpuhost_never_converged_does_nothing() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    let before = root.rpmdb_snapshot();
    let o = root.gpuhost(&["kernel-added", UEK8_OLD]);
    assert_eq!(code(&o), 0, "{}", world::stderr(&o));
    assert!(world::stderr(&o).contains("nothing to do"));
    assert_eq!(root.rpmdb_snapshot(), before);
}

fn journal_last(root: &Root) -> Value {
    let j: Value = serde_json::from_str(&root.read("/var/lib/gpuhost/journal.json")).unwrap();
    j.as_array().unwrap().last().unwrap().clone()
}

/// A root whose boot loader entries are not written yet (an image whose entries come at its
/// first boot): the default is the newest kernel of DEFAULTKERNEL, the headerless new UEK. The
/// trigger keeps the old kernel the default (grubenv's saved_entry, the id kernel-install will
/// give its entry), records and reports it, and exits 1, as with entries (issue 24, item 5).
#[test]
fn without_boot_loader_entries_kernel_added_keeps_the_old_kernel_records_and_exits_1() {
    let root = converged(&[UEK8_OLD]);
    install_headerless_kernel(&root);
    let _ = std::fs::remove_dir_all(root.join("/boot/loader/entries"));
    std::fs::create_dir_all(root.join("/boot/loader/entries")).unwrap();
    let env: String = root
        .read("/boot/grub2/grubenv")
        .lines()
        .filter(|l| !l.starts_with("saved_entry="))
        .map(|l| format!("{l}\n"))
        .collect();
    root.write("/boot/grub2/grubenv", &env);
    let (_, st) = status(&root);
    let nb = check(&st, "driver.next_boot");
    assert_eq!(nb["severity"], "CRITICAL", "{nb:#}");

    let o = root.gpuhost(&["kernel-added", UEK8_NO_DEVEL, "--format", "json"]);
    let rep = report(&o);
    assert_eq!(code(&o), 1, "{rep:#}\n{}", world::stderr(&o));
    assert_eq!(rep["kernel_guard"]["action"], "kept", "{rep:#}");
    assert_eq!(rep["kernel_guard"]["kept"], UEK8_OLD, "{rep:#}");
    let mid = root.read("/etc/machine-id").trim().to_string();
    assert_eq!(root.saved_entry(), format!("{mid}-{UEK8_OLD}"));
    assert_eq!(root.read("/boot/grub2/grubenv").len(), 1024);
    let rec: Value =
        serde_json::from_str(&root.read("/var/lib/gpuhost/kernel-guard.json")).unwrap();
    assert_eq!(rec["kernel"], UEK8_NO_DEVEL);
    assert_eq!(rec["kept"], UEK8_OLD);
    assert_eq!(journal_last(&root)["kernel_guard"]["action"], "kept");
    // gpuhost reads the default back as the old kernel: the next boot keeps the GPUs.
    let (_, st) = status(&root);
    assert_eq!(check(&st, "driver.next_boot")["severity"], "OK", "{st:#}");
}

/// The guard's own error (here: grubenv has no room for the new saved_entry) ends in the
/// report and the journal as a `failed` kernel guard, exit 1, not as a bare error (issue 24,
/// item 7).
#[test]
fn a_guard_that_cannot_set_the_default_is_reported_and_journaled() {
    let root = converged(&[UEK8_OLD]);
    install_headerless_kernel(&root);
    let head: String = root
        .read("/boot/grub2/grubenv")
        .lines()
        .filter(|l| !l.starts_with('#') || l.len() < 30)
        .map(|l| format!("{l}\n"))
        .collect();
    // A full block: the kept kernel's longer entry id does not fit.
    let fill = 1024 - head.len() - "kernelopts=\n".len();
    root.write(
        "/boot/grub2/grubenv",
        &format!("{head}kernelopts={}\n", "x".repeat(fill)),
    );
    assert_eq!(root.read("/boot/grub2/grubenv").len(), 1024);

    let (rc, rep) = apply(&root, &["--kernel-release", UEK8_OLD]);
    assert_eq!(rc, 1, "{rep:#}");
    assert_eq!(rep["kernel_guard"]["action"], "failed", "{rep:#}");
    let err = rep["kernel_guard"]["error"].as_str().unwrap_or_default();
    assert!(err.contains("exceed 1024 bytes"), "{rep:#}");
    assert!(
        rep["summary"].as_str().unwrap().starts_with("failed"),
        "{rep:#}"
    );
    let j = journal_last(&root);
    assert_eq!(j["kernel_guard"]["action"], "failed", "{j:#}");
    assert_eq!(j["exit_code"], 1, "{j:#}");
}

/// The guard judges the NVIDIA modules the host has, not the driver a refused run asked for
/// (issue 34, item 2): a node converged on 550 keeps its 550 module for the default kernel when
/// an apply with another driver's file is refused (another driver not to be replaced, exit 1;
/// a file for another OS or one that does not exist, exit 2). The guard says the next boot is
/// fine, not "no NVIDIA module … nothing to fall back to".
#[rstest]
#[case::another_driver_not_replaced(CUDA_LOCAL_EL8_12_2, 1)]
#[case::wrong_os(CUDA_LOCAL_EL9_12_2, 2)]
#[case::missing_file(
    "no-such-dir/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm",
    2
)]
fn after_a_refused_apply_the_guard_judges_the_installed_drivers_module(
    #[case] rpm: &'static str,
    #[case] exit: i32,
) {
    let c = Case {
        rpm: CUDA_LOCAL_EL8_12_4,
        driver: "550.54.15",
        ..OL8
    };
    let root = converged_case(&c, &[c.old]);
    let before = root.rpmdb_snapshot();
    let refused = Case { rpm, ..c };
    let args: Vec<String> = world::apply_args(c.profile, rpm, ONLY, &[])
        .into_iter()
        .filter(|a| a != "--format" && a != "json")
        .collect();
    let o = root.gpuhost(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), exit, "{text}");
    assert!(!text.contains("nothing to fall back to"), "{text}");
    let (rc, rep) = apply_case(&refused, &root, &[]);
    assert_eq!(rc, exit, "{rep:#}");
    // After invalid input (exit 2) the guard has nothing to say (nothing was changed); after a
    // failed run it judges the driver the host has: fine.
    let guard = &rep["kernel_guard"];
    assert!(
        (exit == 2 && guard.is_null()) || guard["action"] == "fine",
        "{rep:#}"
    );
    assert_eq!(
        root.rpmdb_snapshot(),
        before,
        "the refused runs changed the rpm database"
    );
    assert_eq!(root.nvidia_module_version(c.old).as_deref(), Some(c.driver));
    assert!(!root.join("/var/lib/gpuhost/kernel-guard.json").exists());
}

/// A driver swap that dnf refused (a site package holds a file of R580's NSCQ: the transaction
/// test fails, nothing changes) leaves the 570 driver and its module in place: the guard judges
/// that module, not the 580 one the run asked for.
#[test]
fn after_a_failed_driver_swap_the_guard_judges_the_driver_left_in_place() {
    let root = Root::new(Os::Ol9, &[RHCK9]).with_extra_rpm("site-nscq-copy");
    for i in 0..2 {
        root.add_pci_device(
            &format!("0000:{:02x}:00.0", 0x19 + i),
            0x10de,
            0x2330,
            0x030200,
        );
    }
    root.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
    let only = format!("{ONLY},fabric-manager,hgx-extras,persistenced");
    let run = |rpm: &str| {
        let args = world::apply_args(
            "ol9-rhck",
            rpm,
            &only,
            &["--set", "driver.replace_local_repo=true"],
        );
        let o = root.gpuhost(&args.iter().map(String::as_str).collect::<Vec<_>>());
        (code(&o), report(&o))
    };
    let (rc, rep) = run(DRIVER_LOCAL_EL9_570);
    assert_eq!(rc, 0, "{rep:#}");
    let before = root.rpmdb_snapshot();
    let (rc, rep) = run(CUDA_LOCAL_EL9_13_0);
    assert_eq!(rc, 1, "{rep:#}");
    assert_eq!(
        root.rpmdb_snapshot(),
        before,
        "the refused swap changed rpm"
    );
    assert_eq!(
        root.nvidia_module_version(RHCK9).as_deref(),
        Some("570.124.06")
    );
    assert_eq!(rep["kernel_guard"]["action"], "fine", "{rep:#}");
}

/// On a host with no NVIDIA driver, a refused apply (a file for another OS) changed nothing:
/// there is no module for the guard to keep, and it claims nothing about the next boot.
#[test]
fn on_a_host_without_a_driver_a_refused_apply_makes_the_guard_claim_nothing() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    let refused = Case {
        rpm: CUDA_LOCAL_EL9_12_2,
        ..OL8
    };
    let args: Vec<String> = world::apply_args(OL8.profile, refused.rpm, ONLY, &[])
        .into_iter()
        .filter(|a| a != "--format" && a != "json")
        .collect();
    let o = root.gpuhost(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 2, "{text}");
    assert!(!text.contains("kernel guard"), "{text}");
    let (rc, rep) = apply_case(&refused, &root, &[]);
    assert_eq!(rc, 2, "{rep:#}");
    assert!(rep.get("kernel_guard").is_none(), "{rep:#}");
    assert!(root.installed("nvidia-kmod-common").is_none());
}

/// The root's mirror of the UEK repo (`/srv/repos/ol8_UEKR7`, the same path throughout) with or
/// without the headers of [`UEK8_NEW`], as a mirror sync leaves it: the package file there or
/// not, the metadata made again by createrepo_c. dnf's cache in the root still holds what it
/// read before (dnf keeps a repo's metadata for 48 h).
fn mirror_has_new_headers(root: &Root, has: bool) {
    let repo = root.join("/srv/repos/ol8_UEKR7");
    let name = format!("kernel-uek-devel-{}.x86_64.rpm", world::evr(UEK8_NEW));
    let file = repo.join("Packages").join(&name);
    if has {
        let from = World::get()
            .repo(Os::Ol8, "ol8_UEKR7")
            .join("Packages")
            .join(&name);
        std::fs::copy(from, &file).unwrap();
    } else {
        std::fs::remove_file(&file).unwrap();
    }
    // The old metadata's files are links into the world: unlinked, never rewritten.
    std::fs::remove_dir_all(repo.join("repodata")).unwrap();
    let o = std::process::Command::new("createrepo_c")
        .arg("--quiet")
        .arg(&repo)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", world::stderr(&o));
}

/// How many commands of a report ran `dnf makecache`.
fn refreshes(rep: &Value) -> usize {
    rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["commands"].as_array().into_iter().flatten())
        .filter(|c| {
            c["argv"]
                .as_array()
                .is_some_and(|a| a.iter().any(|w| w == "makecache"))
        })
        .count()
}

/// Fresh metadata before "absent" (issue 34, item 3): a new kernel arrives before the mirror
/// has its headers, so the guard keeps the old default; the mirror then catches up at the same
/// path while dnf's cached metadata (younger than 48 h) still lacks the headers. The next run —
/// the trigger's apply, or the guard's fix command as printed — refreshes the metadata before it
/// would call the headers absent, installs them, builds the module and makes the new kernel the
/// default again. A converged run after that refreshes nothing.
#[rstest]
#[case::the_next_apply(false)]
#[case::the_guards_fix_command(true)]
fn once_the_mirror_catches_up_the_next_run_sees_the_headers_and_restores_the_new_kernel(
    #[case] fix: bool,
) {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    mirror_has_new_headers(&root, false);
    let (rc, rep) = apply(&root, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    root.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-{}", world::evr(UEK8_NEW)),
    ]);
    kernel_install_add(&root, UEK8_NEW);

    let (rc, rep) = apply(&root, &["--kernel-release", UEK8_OLD]);
    assert_eq!(rc, 1, "{rep:#}");
    assert_eq!(rep["kernel_guard"]["action"], "kept", "{rep:#}");
    let reason = rep["kernel_guard"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "kernel-uek-devel-{UEK8_NEW} is not in any enabled repo"
        )),
        "{rep:#}"
    );
    assert!(refreshes(&rep) >= 1, "absent without a refresh: {rep:#}");
    assert!(root.saved_entry().ends_with(UEK8_OLD));

    mirror_has_new_headers(&root, true);
    let (rc, rep) = if fix {
        let rec: Value =
            serde_json::from_str(&root.read("/var/lib/gpuhost/kernel-guard.json")).unwrap();
        let words = shlex::split(rec["fix"].as_str().unwrap()).unwrap();
        assert!(
            words
                .windows(2)
                .any(|w| w == ["--root", root.path().to_str().unwrap()]),
            "{words:?}"
        );
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"));
        cmd.env("HOME", World::get().home()).args(&words[1..]);
        if !words.iter().any(|w| w == "--format") {
            cmd.args(["--format", "json"]);
        }
        let o = cmd.output().unwrap();
        (code(&o), report(&o))
    } else {
        apply(&root, &["--kernel-release", UEK8_OLD])
    };
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(rep["kernel_guard"]["action"], "restored", "{rep:#}");
    if !fix {
        // The same apply as before: it served the held-back kernel because the guard holds it.
        let kernel = world::step(&rep, "kernel")["reason"]
            .as_str()
            .unwrap_or_default();
        assert!(
            kernel.contains(&format!(
                "{UEK8_NEW} held back from the default boot by the kernel guard"
            )),
            "{kernel}"
        );
    }
    assert!(
        root.installed_all("kernel-uek-devel")
            .iter()
            .any(|v| v == world::evr(UEK8_NEW)),
        "headers for the new kernel"
    );
    assert_eq!(
        root.nvidia_module_version(UEK8_NEW).as_deref(),
        Some(DRIVER)
    );
    assert!(root.saved_entry().ends_with(UEK8_NEW));
    assert!(!root.join("/var/lib/gpuhost/kernel-guard.json").exists());

    let (rc, rep) = apply(&root, &["--kernel-release", UEK8_OLD]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(refreshes(&rep), 0, "a converged run refreshed: {rep:#}");
}

/// A refresh that cannot be made (the mirror of another enabled repo is gone) is said: "not in
/// any enabled repo" is then dnf's cached answer, and the message (the guard's reason) says so.
#[test]
fn a_refresh_that_fails_is_named_where_a_package_is_called_absent() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    mirror_has_new_headers(&root, false);
    let (rc, rep) = apply(&root, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    root.dnf_ok(&[
        "-y",
        "install",
        &format!("kernel-uek-{}", world::evr(UEK8_NEW)),
    ]);
    kernel_install_add(&root, UEK8_NEW);
    std::fs::remove_dir_all(root.join("/srv/repos/cuda-rhel8-network")).unwrap();
    let (rc, rep) = apply(&root, &["--kernel-release", UEK8_OLD]);
    assert_eq!(rc, 1, "{rep:#}");
    assert_eq!(rep["kernel_guard"]["action"], "kept", "{rep:#}");
    let reason = rep["kernel_guard"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("not in any enabled repo")
            && reason.contains("the repos' metadata could not be refreshed")
            && reason.contains("cuda-rhel8-network"),
        "{rep:#}"
    );
}

/// Issue 43, item 9: an apply typed with relative paths (`--profile site.toml`, `--set
/// driver.local_repo_rpm=driver.rpm`, from the folder that holds them) records them absolute,
/// so the kernel trigger, run by systemd from `/`, repeats it exactly. (The driver file keeps
/// NVIDIA's name: gpuhost reads the driver version from it.)
#[test]
fn relative_paths_are_recorded_absolute_and_the_trigger_runs_from_slash() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD]);
    let here = tempfile::tempdir().unwrap();
    std::fs::copy(world::profile("ol8-uek"), here.path().join("site.toml")).unwrap();
    std::os::unix::fs::symlink(
        World::get().cuda_local(CUDA_LOCAL_EL8_12_2),
        here.path().join(CUDA_LOCAL_EL8_12_2),
    )
    .unwrap();
    let o = root
        .gpuhost_cmd(&[
            "apply",
            "--format",
            "json",
            "--profile",
            "site.toml",
            "--set",
            &format!("driver.local_repo_rpm={CUDA_LOCAL_EL8_12_2}"),
            "--only",
            ONLY,
        ])
        .current_dir(here.path())
        .output()
        .unwrap();
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    let rec: Value = serde_json::from_str(&root.read("/var/lib/gpuhost/last-apply.json")).unwrap();
    let text = rec.to_string();
    let abs = here.path().canonicalize().unwrap();
    assert!(
        text.contains(&format!("{}/site.toml", abs.display()))
            || text.contains(&format!("{}/site.toml", here.path().display())),
        "{rec:#}"
    );
    assert!(
        text.contains(&format!("/{CUDA_LOCAL_EL8_12_2}"))
            && !text.contains(&format!("\"driver.local_repo_rpm={CUDA_LOCAL_EL8_12_2}\"")),
        "{rec:#}"
    );
    let o = root
        .gpuhost_cmd(&["kernel-added", UEK8_OLD, "--format", "json"])
        .current_dir("/")
        .output()
        .unwrap();
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    world::assert_converged(&rep);
}
