//! Day 2 (issue 23): driver changes on a converged node — branch upgrades and downgrades along
//! 535 → 550 → 570 → 580, flavour switches, CUDA ↔ driver-only local repos, with and without
//! NVSwitches (Fabric Manager and NSCQ renamed at R580), on UEK and RHCK — are one
//! all-or-nothing package transaction, with the real rpm, dnf, module streams and DKMS of the
//! test world. A failed transaction leaves the old driver working; a kill -9 inside it is
//! followed by an apply that converges.

#![allow(clippy::panic)] // a test fails by panicking

#[path = "world/mod.rs"]
mod world;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rstest::rstest;
use serde_json::Value;
use world::{
    code, report, stderr, step, Os, Root, World, CUDA_LOCAL_EL8_12_2, CUDA_LOCAL_EL8_12_4,
    CUDA_LOCAL_EL9_12_2, CUDA_LOCAL_EL9_12_4, CUDA_LOCAL_EL9_13_0, DRIVER_LOCAL_EL10_580,
    DRIVER_LOCAL_EL10_590, DRIVER_LOCAL_EL8_570, DRIVER_LOCAL_EL8_580, DRIVER_LOCAL_EL9_570,
    RHCK10, RHCK8, RHCK9, UEK10, UEK8_NEW, UEK9,
};

const ONLY: &str = "kernel,kernel-headers,driver-repo,build-deps,driver,nouveau,kernel-module,fabric-manager,hgx-extras,persistenced";

/// The branch chain of each release: 535 (CUDA 12.2), 550 (CUDA 12.4), 570 (driver-only),
/// 580 (driver-only on el8, CUDA 13.0 on el9): a CUDA ↔ driver-only change on the way. On
/// el10 (not modular), NVIDIA's driver-only local repos of 580 and 590.
fn chain(os: Os) -> Vec<&'static str> {
    match os {
        Os::Ol10 => vec![DRIVER_LOCAL_EL10_580, DRIVER_LOCAL_EL10_590],
        Os::Ol8 => vec![
            CUDA_LOCAL_EL8_12_2,
            CUDA_LOCAL_EL8_12_4,
            DRIVER_LOCAL_EL8_570,
            DRIVER_LOCAL_EL8_580,
        ],
        _ => vec![
            CUDA_LOCAL_EL9_12_2,
            CUDA_LOCAL_EL9_12_4,
            DRIVER_LOCAL_EL9_570,
            CUDA_LOCAL_EL9_13_0,
        ],
    }
}

/// The driver a local repo file carries.
fn driver_of(rpm: &str) -> &'static str {
    [
        "535.104.05",
        "550.54.15",
        "570.124.06",
        "580.82.07",
        "580.126.09",
        "590.48.01",
    ]
    .into_iter()
    .find(|d| rpm.contains(d))
    .unwrap_or_else(|| panic!("no driver in {rpm}"))
}

fn local(name: &str) -> String {
    World::get().cuda_local(name).display().to_string()
}

fn args(cmd: &str, profile: &str, rpm: &str, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        cmd,
        "--format",
        "json",
        "--profile",
        profile,
        "--only",
        ONLY,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push("--set".into());
    a.push(format!("driver.local_repo_rpm={}", local(rpm)));
    a.push("--set".into());
    a.push("driver.replace_local_repo=true".into());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn run(root: &Root, cmd: &str, profile: &str, rpm: &str, extra: &[&str]) -> (i32, Value) {
    let a = args(cmd, profile, rpm, extra);
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = root.gpuhost(&refs);
    (code(&o), report(&o))
}

/// A node: an install root with two H100 SXMs (the chain starts at R535, which drives the H100
/// but not the H200: NVIDIA lists the H200 from R550), and on HGX an NVSwitch on PCI.
struct Node {
    root: Root,
    os: Os,
    profile: &'static str,
    kernel: &'static str,
    hgx: bool,
}

impl Node {
    fn new(os: Os, profile: &'static str, kernel: &'static str, hgx: bool) -> Node {
        let root = Root::new(os, &[kernel]);
        for i in 0..2 {
            root.add_pci_device(
                &format!("0000:{:02x}:00.0", 0x19 + i),
                0x10de,
                0x2330,
                0x030200,
            );
        }
        if hgx {
            root.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
        }
        Node {
            root,
            os,
            profile,
            kernel,
            hgx,
        }
    }

    fn apply(&self, rpm: &str, extra: &[&str]) -> (i32, Value) {
        run(&self.root, "apply", self.profile, rpm, extra)
    }

    fn plan(&self, rpm: &str) -> (i32, Value) {
        run(&self.root, "plan", self.profile, rpm, &[])
    }

    /// dnf.conf's `[main]` excludes.
    fn locks(&self) -> Vec<String> {
        let conf = std::fs::read_to_string(self.root.join("/etc/dnf/dnf.conf")).unwrap_or_default();
        conf.lines()
            .filter_map(|l| l.trim().strip_prefix("excludepkgs="))
            .flat_map(|v| v.split(',').map(|x| x.trim().to_string()))
            .filter(|x| !x.is_empty())
            .collect()
    }

    /// The installed NVIDIA packages, `name-version-release`, sorted.
    fn nvidia_packages(&self) -> Vec<String> {
        let o = self
            .root
            .rpm(&["-qa", "--qf", "%{NAME}-%{VERSION}-%{RELEASE}\\n"]);
        let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("nvidia") || l.starts_with("cuda-"))
            .map(str::to_string)
            .collect();
        v.sort();
        v
    }

    /// The node runs `drv` and nothing of another driver: every NVIDIA driver package at
    /// `drv`, one local repo package, the module for the kernel, the locks naming exactly the
    /// installed packages they should.
    fn assert_on(&self, drv: &str, rpm: &str) {
        let r = &self.root;
        let versions = r.installed_all("nvidia-driver");
        assert_eq!(versions.len(), 1, "{versions:?}");
        assert!(versions[0].starts_with(drv), "{versions:?}");
        let pkgs = self.nvidia_packages();
        let repos: Vec<&String> = pkgs
            .iter()
            .filter(|p| p.starts_with("cuda-repo-") || p.starts_with("nvidia-driver-local-repo-"))
            .collect();
        assert_eq!(repos.len(), 1, "one local repo package: {repos:?}");
        let family_off: Vec<&String> = pkgs
            .iter()
            .filter(|p| {
                (p.starts_with("nvidia-")
                    || p.starts_with("libnvidia-")
                    || p.starts_with("kmod-nvidia"))
                    && !p.starts_with("nvidia-driver-local-repo-")
                    && !p.contains(drv)
            })
            .collect();
        assert!(
            family_off.is_empty(),
            "packages of another driver: {family_off:?}"
        );
        assert_eq!(
            r.nvidia_module_version(self.kernel).as_deref(),
            Some(drv),
            "the nvidia module modprobe would load for {}",
            self.kernel
        );
        self.assert_branch_held(drv);
        let locks = self.locks();
        for l in &locks {
            assert!(
                r.installed(l).is_some(),
                "the lock names {l}, which is not installed: {locks:?}"
            );
        }
        let branch: u32 = drv
            .split('.')
            .next()
            .and_then(|b| b.parse().ok())
            .unwrap_or(0);
        if self.hgx {
            let (fm, nscq) = if branch >= 580 {
                (
                    "nvidia-fabricmanager".to_string(),
                    "libnvidia-nscq".to_string(),
                )
            } else {
                (
                    "nvidia-fabric-manager".to_string(),
                    format!("libnvidia-nscq-{branch}"),
                )
            };
            for p in [&fm, &nscq] {
                assert!(
                    r.installed(p).is_some_and(|v| v.starts_with(drv)),
                    "{p} at {drv} ({rpm}): {pkgs:?}"
                );
                assert!(locks.contains(p), "{p} locked: {locks:?}");
            }
        } else {
            assert!(locks.is_empty(), "no NVSwitch, no locks: {locks:?}");
        }
    }

    /// On el10 (not modular), NVIDIA's branch hold: the versionlock list locks the installed
    /// driver's packages at `drv` and nothing of another version; elsewhere no list at all (and
    /// on every release no dnf module state written for a release without modules).
    fn assert_branch_held(&self, drv: &str) {
        let list = std::fs::read_to_string(self.root.join("/etc/dnf/plugins/versionlock.list"));
        if self.os != Os::Ol10 {
            assert!(list.is_err(), "a versionlock list on a modular release");
            return;
        }
        let modules = self.root.join("/etc/dnf/modules.d/nvidia-driver.module");
        assert!(!modules.exists(), "dnf module state written on el10");
        let list = list.unwrap_or_else(|e| panic!("no versionlock list on el10: {e}"));
        let held: Vec<&str> = list
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .collect();
        let kmod = if self.root.installed("kmod-nvidia-latest-dkms").is_some() {
            "kmod-nvidia-latest-dkms"
        } else {
            "kmod-nvidia-open-dkms"
        };
        for name in ["nvidia-driver", kmod, "nvidia-kmod-common"] {
            assert!(
                held.iter()
                    .any(|l| l.starts_with(&format!("{name}-3:{drv}-"))),
                "{name} not held at {drv}: {list}"
            );
        }
        let other: Vec<&&str> = held.iter().filter(|l| !l.contains(drv)).collect();
        assert!(other.is_empty(), "locks of another version: {other:?}");
    }

    /// With dnf told to protect the installed local repo package (an administrator's
    /// `protected_packages`), the change from `prev` to `rpm` is refused: exit 1 quoting dnf,
    /// the rpm database and dnf.conf (the locks) as they were, the old driver's module still
    /// there for the kernel. The protection is lifted afterwards.
    fn refused_keeps(&self, prev: &str, rpm: &str) {
        let conf_path = self.root.join("/etc/dnf/dnf.conf");
        let conf = std::fs::read_to_string(&conf_path).unwrap_or_default();
        let old_repo = self
            .nvidia_packages()
            .into_iter()
            .find(|p| p.starts_with("cuda-repo-") || p.starts_with("nvidia-driver-local-repo-"))
            .unwrap_or_else(|| panic!("no local repo package installed"));
        let name = old_repo
            .rsplitn(3, '-')
            .nth(2)
            .unwrap_or_else(|| panic!("{old_repo}"))
            .to_string();
        let protected = conf.replace("[main]\n", &format!("[main]\nprotected_packages={name}\n"));
        std::fs::write(&conf_path, &protected).unwrap_or_else(|e| panic!("{e}"));
        let rpmdb = self.root.rpmdb_snapshot();
        let (rc, rep) = self.apply(rpm, &[]);
        assert_eq!(rc, 1, "{prev} → {rpm} with {name} protected: {rep:#}");
        let why = reason(&rep, "driver-repo");
        assert!(
            why.contains("protected") && why.contains("nothing was changed"),
            "{why}"
        );
        assert_eq!(
            self.root.rpmdb_snapshot(),
            rpmdb,
            "{prev} → {rpm}: rpm database changed"
        );
        assert_eq!(
            std::fs::read_to_string(&conf_path).unwrap_or_default(),
            protected,
            "{prev} → {rpm}: the locks changed"
        );
        self.assert_on(driver_of(prev), prev);
        std::fs::write(&conf_path, conf).unwrap_or_else(|e| panic!("{e}"));
    }

    /// A second apply changes nothing and starts no dnf.
    fn assert_stays(&self, rpm: &str) {
        let a = args("apply", self.profile, rpm, &[]);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let (o, execs) = self.root.gpuhost_traced(&refs);
        let rep = report(&o);
        assert_eq!(code(&o), 0, "{rep:#}");
        world::assert_converged(&rep);
        if let Some(execs) = &execs {
            assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
        }
    }
}

fn reason(rep: &Value, id: &str) -> String {
    step(rep, id)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Up the chain and back down, one local repo after the other: each change first fails in the
/// middle (dnf refuses it) and leaves the old driver as it was, then converges; the second
/// apply is unchanged and starts no dnf; the locks name only installed packages.
#[rstest]
#[case::ol8_uek(Os::Ol8, "ol8-uek", UEK8_NEW, false)]
#[case::ol8_rhck_hgx(Os::Ol8, "ol8-rhck", RHCK8, true)]
#[case::ol9_uek_hgx(Os::Ol9, "ol9-uek", UEK9, true)]
#[case::ol9_rhck(Os::Ol9, "ol9-rhck", RHCK9, false)]
#[case::ol10_uek_hgx(Os::Ol10, "ol10-uek", UEK10, true)]
#[case::ol10_rhck(Os::Ol10, "ol10-rhck", RHCK10, false)]
fn the_branch_chain_up_and_down_converges_at_each_step(
    #[case] os: Os,
    #[case] profile: &'static str,
    #[case] kernel: &'static str,
    #[case] hgx: bool,
) {
    let node = Node::new(os, profile, kernel, hgx);
    let up = chain(os);
    let down: Vec<&str> = up.iter().rev().skip(1).copied().collect();
    let mut from: Option<&str> = None;
    for rpm in up.iter().copied().chain(down) {
        let drv = driver_of(rpm);
        if let Some(prev) = from {
            // First a failure in the middle of this change: dnf refuses to remove the old
            // local repo package (protected). Nothing changes, the old driver works, exit 1.
            node.refused_keeps(prev, rpm);
        }
        let (rc, rep) = node.apply(rpm, &[]);
        assert_eq!(rc, 0, "{:?} → {rpm}: {rep:#}", from);
        if from.is_some() {
            let r = reason(&rep, "driver-repo");
            assert!(r.contains(&format!("driver {drv}")), "{r}");
        }
        node.assert_on(drv, rpm);
        node.assert_stays(rpm);
        from = Some(rpm);
    }
}

/// HGX H100, 570 → 580: `plan` lists every package that goes and every package that comes and
/// changes nothing; `apply` changes the driver, Fabric Manager and NSCQ under their R580 names
/// and the locks in one go.
#[test]
fn plan_lists_what_goes_and_what_comes_and_changes_nothing() {
    let node = Node::new(Os::Ol9, "ol9-rhck", RHCK9, true);
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let before = node.root.rpmdb_snapshot();
    let tree = node.root.tree_snapshot();
    let (rc, rep) = node.plan(CUDA_LOCAL_EL9_13_0);
    assert_eq!(rc, 0, "{rep:#}");
    let changes = step(&rep, "driver-repo")["changes"].to_string();
    for goes in [
        "nvidia-driver-local-repo-rhel9-570.124.06",
        "nvidia-fabric-manager",
        "libnvidia-nscq-570",
    ] {
        assert!(changes.contains(goes), "{goes} goes: {changes}");
    }
    for comes in [
        "cuda-repo-rhel9-13-0-local-13.0.1_580.82.07",
        "nvidia-fabricmanager-580.82.07",
        "libnvidia-nscq-580.82.07",
        "nvidia-driver-580.82.07",
        "kmod-nvidia-open-dkms-580.82.07",
    ] {
        assert!(changes.contains(comes), "{comes} comes: {changes}");
    }
    assert_eq!(
        node.root.rpmdb_snapshot(),
        before,
        "plan changed the rpm database"
    );
    assert_eq!(node.root.tree_snapshot(), tree, "plan changed files");
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
    // One dnf transaction did the packages: the driver step left its packages to it.
    assert!(
        reason(&rep, "driver-repo").contains("replaces nvidia-driver-local-repo-rhel9-570.124.06")
    );
    node.assert_stays(CUDA_LOCAL_EL9_13_0);
}

/// dnf refuses the change (an administrator protected the old Fabric Manager): nothing has
/// changed — the old driver, its repo, its module for the boot kernel and its locks — and apply
/// exits 1 quoting dnf. Once the protection is lifted the same apply converges.
#[test]
fn a_refused_driver_change_leaves_the_old_driver_as_it_was() {
    let node = Node::new(Os::Ol9, "ol9-rhck", RHCK9, true);
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let conf_path = node.root.join("/etc/dnf/dnf.conf");
    let conf = std::fs::read_to_string(&conf_path).unwrap_or_default();
    let protected = conf.replace(
        "[main]\n",
        "[main]\nprotected_packages=nvidia-fabric-manager\n",
    );
    std::fs::write(&conf_path, &protected).unwrap_or_else(|e| panic!("{e}"));
    let rpmdb = node.root.rpmdb_snapshot();
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 1, "{rep:#}");
    let why = reason(&rep, "driver-repo");
    assert!(why.contains("protected"), "dnf's reason is quoted: {why}");
    assert!(why.contains("nothing was changed"), "{why}");
    assert_eq!(
        node.root.rpmdb_snapshot(),
        rpmdb,
        "the rpm database changed"
    );
    assert_eq!(
        std::fs::read_to_string(&conf_path).unwrap_or_default(),
        protected,
        "the locks changed"
    );
    node.assert_on("570.124.06", DRIVER_LOCAL_EL9_570);
    assert!(
        !node.root.join("/var/cache/gpuhost/driver-swap").exists(),
        "the scratch repo is left behind"
    );
    std::fs::write(&conf_path, conf).unwrap_or_else(|e| panic!("{e}"));
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
}

/// The open ↔ proprietary switch on a converged node, there and back: one transaction each way
/// (the new flavour's kmod in, the other's out, from the installed local repo), first refused in
/// the middle with nothing changed.
#[rstest]
#[case::ol8_rhck_hgx(Os::Ol8, "ol8-rhck", RHCK8, DRIVER_LOCAL_EL8_580)]
#[case::ol10_uek_hgx(Os::Ol10, "ol10-uek", UEK10, DRIVER_LOCAL_EL10_580)]
fn a_flavour_switch_there_and_back_converges(
    #[case] os: Os,
    #[case] profile: &'static str,
    #[case] kernel: &'static str,
    #[case] rpm: &'static str,
) {
    let drv = driver_of(rpm);
    let node = Node::new(os, profile, kernel, true);
    let (rc, rep) = node.apply(rpm, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node.root.installed("kmod-nvidia-open-dkms").is_some());
    for (flavour, kmod, other) in [
        (
            "proprietary",
            "kmod-nvidia-latest-dkms",
            "kmod-nvidia-open-dkms",
        ),
        ("open", "kmod-nvidia-open-dkms", "kmod-nvidia-latest-dkms"),
    ] {
        let set = format!("driver.flavour={flavour}");
        let extra = ["--set", set.as_str(), "--set", "driver.switch_stream=true"];
        // First refused in the middle (the installed kmod protected): nothing changes.
        let conf_path = node.root.join("/etc/dnf/dnf.conf");
        let conf = std::fs::read_to_string(&conf_path).unwrap_or_default();
        let protected = conf.replace("[main]\n", &format!("[main]\nprotected_packages={other}\n"));
        std::fs::write(&conf_path, &protected).unwrap_or_else(|e| panic!("{e}"));
        let rpmdb = node.root.rpmdb_snapshot();
        let (rc, rep) = node.apply(rpm, &extra);
        assert_eq!(rc, 1, "{flavour} with {other} protected: {rep:#}");
        assert!(
            reason(&rep, "driver").contains("nothing was changed"),
            "{rep:#}"
        );
        assert_eq!(
            node.root.rpmdb_snapshot(),
            rpmdb,
            "{flavour}: the rpm database changed"
        );
        assert!(
            node.root.installed(other).is_some(),
            "{other} is still the module's kmod"
        );
        std::fs::write(&conf_path, conf).unwrap_or_else(|e| panic!("{e}"));
        let (rc, rep) = node.apply(rpm, &extra);
        assert_eq!(rc, 0, "{flavour}: {rep:#}");
        let changes = step(&rep, "driver")["changes"].to_string();
        assert!(
            changes.contains("one dnf transaction")
                && changes
                    .split("; install")
                    .next()
                    .is_some_and(|removed| removed.contains(&format!(" {other}"))),
            "the flavour switch is one transaction: {changes}"
        );
        assert!(node
            .root
            .installed(kmod)
            .is_some_and(|v| v.starts_with(drv)));
        assert!(node.root.installed(other).is_none(), "{other} stays");
        node.assert_on(drv, rpm);
        let a = args("apply", node.profile, rpm, &extra);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let (o, execs) = node.root.gpuhost_traced(&refs);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        world::assert_converged(&report(&o));
        if let Some(execs) = &execs {
            assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
        }
    }
}

/// Processes whose parent chain leads to `pid`.
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut procs = Vec::new();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cpid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
        let Some((head, after)) = stat.rsplit_once(") ") else {
            continue;
        };
        let comm = head
            .split_once(" (")
            .map(|(_, c)| c.to_string())
            .unwrap_or_default();
        let ppid: u32 = after
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        procs.push((cpid, ppid, comm));
    }
    let mut out: Vec<(u32, String)> = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for (c, pp, comm) in &procs {
            if *pp == parent && !out.iter().any(|(p, _)| p == c) {
                out.push((*c, comm.clone()));
                frontier.push(*c);
            }
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(") ").is_some_and(|(_, a)| a.starts_with('Z')))
}

/// kill -9 of the dnf that runs the driver change, while the rpm transaction is inside it
/// (DKMS builds the new module in a scriptlet), and of gpuhost with it: the next apply
/// converges on the new driver.
#[test]
fn kill_9_inside_the_driver_change_then_apply_converges() {
    let node = Node::new(Os::Ol9, "ol9-rhck", RHCK9, true);
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let a = args("apply", node.profile, CUDA_LOCAL_EL9_13_0, &[]);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuhost"));
    cmd.env("HOME", World::get().home())
        .args(&a)
        .arg("--root")
        .arg(node.root.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child: Child = cmd.spawn().unwrap_or_else(|e| panic!("{e}"));
    // Wait for a DKMS build under the dnf shell transaction.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut dnf = None;
    while Instant::now() < deadline && dnf.is_none() {
        let d = descendants(child.id());
        let shell = d.iter().find(|(pid, comm)| {
            comm == "dnf"
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("shell"))
        });
        if let Some((pid, _)) = shell {
            if descendants(*pid)
                .iter()
                .any(|(_, c)| c == "dkms" || c == "make" || c.starts_with("sh"))
            {
                dnf = Some(*pid);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let dnf = dnf.unwrap_or_else(|| panic!("no driver-change transaction seen"));
    let gpuhost = child.id();
    let _ = Command::new("kill")
        .args(["-KILL", &dnf.to_string()])
        .status();
    let _ = child.kill();
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(60);
    while alive(dnf) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Whatever the transaction had done, the next apply finishes the change.
    if std::env::var("UPGRADE_DEBUG").is_ok() {
        eprintln!("AFTER KILL:\n{}", node.nvidia_packages().join("\n"));
    }
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    if std::env::var("UPGRADE_DEBUG").is_ok() {
        eprintln!(
            "AFTER APPLY:\n{}\n{}",
            node.nvidia_packages().join("\n"),
            step(&rep, "driver-repo")
        );
    }
    assert!(rc == 0, "after kill -9: {rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
    // Nothing the killed run made is left once the next run has ended (issue 34, item 5): not
    // the swap's scratch copy (gigabytes on a real node), not its private dnf HOME in /tmp.
    let scratch = node.root.join("var/cache/gpuhost/driver-swap");
    assert!(!scratch.exists());
    let homes: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(&format!("gpuhost-rpm.{gpuhost}.")))
        .collect();
    assert!(homes.is_empty(), "left by the killed gpuhost: {homes:?}");
    // Here the next apply swapped again, which starts by clearing the scratch. A kill that
    // lands after the rpm transaction leaves a converged node whose next apply swaps nothing:
    // that apply (no dnf at all) removes the scratch all the same.
    let repo = scratch.join("tree/var/nvidia-driver-local-repo-rhel9-580.82.07/repodata");
    std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(scratch.join("payload.cpio"), b"left by kill -9")
        .unwrap_or_else(|e| panic!("{e}"));
    node.assert_stays(CUDA_LOCAL_EL9_13_0);
    assert!(!scratch.exists(), "the scratch of a killed swap was left");
}

/// `gpuhost rollback` goes back to the driver of the converged apply before the last one, in
/// the same one transaction; with nothing to go back to, or the earlier package file gone, it
/// refuses before anything changes (exit 2).
#[test]
fn rollback_returns_to_the_previous_converged_driver() {
    let node = Node::new(Os::Ol9, "ol9-uek", UEK9, true);
    let rollback = |extra: &[&str]| {
        let mut a = vec!["rollback", "--format", "json"];
        a.extend_from_slice(extra);
        let o = node.root.gpuhost(&a);
        (code(&o), report(&o), stderr(&o))
    };
    // A copy of the 570 package that can be taken away later.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let copy = dir.path().join(DRIVER_LOCAL_EL9_570);
    std::fs::copy(local(DRIVER_LOCAL_EL9_570), &copy).unwrap_or_else(|e| panic!("{e}"));
    let set570 = format!("driver.local_repo_rpm={}", copy.display());
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &["--set", &set570]);
    assert_eq!(rc, 0, "{rep:#}");
    let (rc, _, err) = rollback(&[]);
    assert_eq!(rc, 2, "one driver only: nothing to roll back to: {err}");
    assert!(err.contains("nothing to roll back to"), "{err}");
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
    // --dry-run: the plan of the rollback, nothing changed.
    let rpmdb = node.root.rpmdb_snapshot();
    let (rc, rep, err) = rollback(&["--dry-run"]);
    assert_eq!(rc, 0, "{err}\n{rep:#}");
    assert!(err.contains("580.82.07 → 570.124.06"), "{err}");
    assert!(
        step(&rep, "driver-repo")["changes"]
            .to_string()
            .contains("nvidia-fabric-manager-570.124.06"),
        "{rep:#}"
    );
    assert_eq!(
        node.root.rpmdb_snapshot(),
        rpmdb,
        "a dry run changed the rpm database"
    );
    let (rc, rep, err) = rollback(&[]);
    assert_eq!(rc, 0, "{err}\n{rep:#}");
    node.assert_on("570.124.06", DRIVER_LOCAL_EL9_570);
    // What the kernel trigger repeats stays on the driver rolled back to (typed, not --sets).
    let last: Value = serde_json::from_str(&node.root.read("/var/lib/gpuhost/last-apply.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(last["driver"]["version"], "570.124.06", "{last:#}");
    assert_eq!(last_run(&node.root)["driver"]["version"], "570.124.06");
    // Back again (the journal's last two drivers), then the earlier file is gone: refused.
    let (rc, rep, err) = rollback(&[]);
    assert_eq!(rc, 0, "{err}\n{rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
    // The journal's file is now another version's package under the 570 name: refused before
    // any change (issue 34, item 5), not "580 → 570" keeping 580.
    let rpmdb = node.root.rpmdb_snapshot();
    std::fs::copy(local(CUDA_LOCAL_EL9_13_0), &copy).unwrap_or_else(|e| panic!("{e}"));
    let (rc, _, err) = rollback(&[]);
    assert_eq!(rc, 2, "{err}");
    assert_eq!(node.root.rpmdb_snapshot(), rpmdb);
    std::fs::remove_file(&copy).unwrap_or_else(|e| panic!("{e}"));
    let (rc, _, err) = rollback(&[]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("no longer there") && err.contains(&copy.display().to_string()),
        "{err}"
    );
    assert_eq!(node.root.rpmdb_snapshot(), rpmdb);
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
}

/// The last run in the root's journal.
fn last_run(root: &Root) -> Value {
    let text = std::fs::read_to_string(root.join("var/lib/gpuhost/journal.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    let runs: Vec<Value> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    runs.last()
        .cloned()
        .unwrap_or_else(|| panic!("an empty journal"))
}

/// Rollback that cannot lie (issue 34, item 5): both applies pinned `driver.sha256` (as
/// cloud-init always does), and the last apply was limited with `--skip driver-repo`. That
/// apply records no driver; the rollback still acts on the driver, checks the older file
/// against its own checksum, and the node is on the older driver after it, as the journal
/// then says.
#[test]
fn rollback_after_a_step_limited_apply_with_pinned_checksums_changes_the_driver() {
    let node = Node::new(Os::Ol9, "ol9-uek", UEK9, false);
    let pin = |rpm: &str| format!("driver.sha256={}", World::get().sha256(rpm));
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &["--set", &pin(DRIVER_LOCAL_EL9_570)]);
    assert_eq!(rc, 0, "{rep:#}");
    let sum580 = pin(CUDA_LOCAL_EL9_13_0);
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &["--set", &sum580]);
    assert_eq!(rc, 0, "{rep:#}");
    let limited = ["--set", &sum580, "--skip", "driver-repo"];
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &limited);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(
        last_run(&node.root).get("driver").is_none(),
        "a step-limited apply recorded a driver"
    );
    let o = node.root.gpuhost(&["rollback", "--format", "json"]);
    let (rc, rep, err) = (code(&o), report(&o), stderr(&o));
    assert_eq!(rc, 0, "{err}\n{rep:#}");
    assert!(err.contains("580.82.07 → 570.124.06"), "{err}");
    node.assert_on("570.124.06", DRIVER_LOCAL_EL9_570);
    assert_eq!(last_run(&node.root)["driver"]["version"], "570.124.06");
}

/// Docker CE and the Container Toolkit upgraded together on a converged node: both change in
/// one run, and docker is restarted exactly once (in an install root the restart is handed to
/// the first boot: it is listed once among the deferred actions); the next apply changes
/// nothing and starts no dnf.
#[rstest]
#[case::ol8(Os::Ol8, UEK8_NEW)]
#[case::ol9(Os::Ol9, UEK9)]
fn toolkit_and_docker_upgrades_restart_docker_once(#[case] os: Os, #[case] kernel: &str) {
    let root = Root::new(os, &[kernel]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let base = if os == Os::Ol8 { "ol8-uek" } else { "ol9-uek" };
    let profile = dir.path().join("site.toml");
    std::fs::write(&profile, format!("extends = {:?}\n", world::profile(base)))
        .unwrap_or_else(|e| panic!("{e}"));
    let profile = profile.display().to_string();
    let only = "docker,container-toolkit,daemon-json,services";
    let apply = |docker: &str, toolkit: &str| {
        let d = format!("docker.version={docker}");
        let t = format!("container_toolkit.version={toolkit}");
        let a = [
            "apply",
            "--format",
            "json",
            "--profile",
            &profile,
            "--only",
            only,
            "--set",
            &d,
            "--set",
            &t,
        ];
        root.gpuhost_traced(&a)
    };
    let (o, _) = apply("26.1.3", "1.17.8");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (o, _) = apply("27.3.1", "1.18.0");
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    for id in ["docker", "container-toolkit"] {
        assert_eq!(step(&rep, id)["outcome"], "changed", "{id}: {rep:#}");
    }
    assert!(root
        .installed("docker-ce")
        .is_some_and(|v| v.starts_with("27.3.1")));
    assert!(root
        .installed("nvidia-container-toolkit")
        .is_some_and(|v| v.starts_with("1.18.0")));
    let restarts: usize = rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["deferred"].as_array().into_iter().flatten())
        .filter(|d| {
            d.as_str()
                .is_some_and(|d| d.contains("restart docker.service"))
        })
        .count();
    assert_eq!(restarts, 1, "docker restarted exactly once: {rep:#}");
    let (o, execs) = apply("27.3.1", "1.18.0");
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    world::assert_converged(&rep);
    if let Some(execs) = &execs {
        assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
    }
}

/// dnf's transaction test fails on a conflicting file (a site package ships its own copy of
/// R580's NSCQ library): nothing has changed — rpm database, locks, the 570 driver and its
/// module — and apply exits 1 quoting rpm's conflict. Once the site package is gone the same
/// apply converges.
#[test]
fn a_conflicting_file_leaves_the_old_driver_as_it_was() {
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
    let node = Node {
        root,
        os: Os::Ol9,
        profile: "ol9-rhck",
        kernel: RHCK9,
        hgx: true,
    };
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let conf = node.root.read("/etc/dnf/dnf.conf");
    let rpmdb = node.root.rpmdb_snapshot();
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 1, "{rep:#}");
    let why = reason(&rep, "driver-repo");
    assert!(
        why.contains("conflicts")
            && why.contains("site-nscq-copy")
            && why.contains("nothing was changed"),
        "rpm's conflict is quoted: {why}"
    );
    assert_eq!(
        node.root.rpmdb_snapshot(),
        rpmdb,
        "the rpm database changed"
    );
    assert_eq!(
        node.root.read("/etc/dnf/dnf.conf"),
        conf,
        "the locks changed"
    );
    node.assert_on("570.124.06", DRIVER_LOCAL_EL9_570);
    let o = node.root.rpm(&["-e", "--nodeps", "site-nscq-copy"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
}

/// A driver change that stops part-way — the new `nvidia-persistenced`'s `%pre` fails (world
/// marker), so rpm installs the rest of the transaction — is reported as the rpm database shows
/// it: outcome `partial`, every package added and removed (each really is), the command that
/// repairs it, never "nothing was changed". The next apply finishes the change.
#[test]
fn a_driver_change_stopped_part_way_is_reported_as_rpm_shows_it_and_the_next_apply_finishes_it() {
    let node = Node::new(Os::Ol9, "ol9-rhck", RHCK9, false);
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    node.root.write("/etc/gpuhost-world/fail-pre", "");
    let before = node.root.rpmdb_snapshot();
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 1, "{rep:#}");
    let s = step(&rep, "driver-repo");
    assert_eq!(s["outcome"], "partial", "{s:#}");
    let why = s["reason"].as_str().unwrap_or_default();
    assert!(!why.contains("nothing was changed"), "{why}");
    assert!(
        s["hint"]
            .as_str()
            .is_some_and(|h| h.contains("gpuhost apply")),
        "{s:#}"
    );
    let after = node.root.rpmdb_snapshot();
    assert_ne!(after, before, "the transaction changed nothing after all");
    // The report claims neither more nor less than rpm shows.
    let listed: Vec<String> = s["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect();
    let plain = |nevra: &str| -> String {
        // name-epoch:version-release.arch → name-version-release.arch (rpm -qa's form)
        match nevra.split_once(':') {
            Some((ne, vra)) => format!("{}-{vra}", ne.rsplit_once('-').map_or(ne, |(n, _)| n)),
            None => nevra.to_string(),
        }
    };
    let added: Vec<String> = after
        .lines()
        .filter(|l| !before.lines().any(|b| b == *l))
        .map(str::to_string)
        .collect();
    let removed: Vec<String> = before
        .lines()
        .filter(|l| !after.lines().any(|a| a == *l))
        .map(str::to_string)
        .collect();
    let mut said_added: Vec<String> = listed
        .iter()
        .filter_map(|c| c.strip_prefix("added ").map(plain))
        .collect();
    let mut said_removed: Vec<String> = listed
        .iter()
        .filter_map(|c| c.strip_prefix("removed ").map(plain))
        .collect();
    said_added.sort();
    said_removed.sort();
    assert_eq!(said_added, added, "{s:#}");
    assert_eq!(said_removed, removed, "{s:#}");
    assert!(!added.is_empty(), "{s:#}");
    std::fs::remove_file(node.root.join("/etc/gpuhost-world/fail-pre"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
}

/// The first converge stopped part-way (the same `%pre` failure): the steps of the failed
/// transaction say what the rpm database shows (`partial`, what was added), not that nothing
/// changed; the next apply converges.
#[test]
fn a_first_converge_stopped_part_way_is_reported_as_rpm_shows_it_and_the_next_apply_finishes_it() {
    let node = Node::new(Os::Ol9, "ol9-rhck", RHCK9, false);
    node.root.write("/etc/gpuhost-world/fail-pre", "");
    let before = node.root.rpmdb_snapshot();
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 1, "{rep:#}");
    let partial: Vec<&Value> = rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["outcome"] == "partial")
        .collect();
    assert!(!partial.is_empty(), "{rep:#}");
    for s in &partial {
        let why = s["reason"].as_str().unwrap_or_default();
        assert!(!why.contains("nothing was changed"), "{why}");
        assert!(
            s["changes"]
                .to_string()
                .contains("added kmod-nvidia-open-dkms"),
            "{s:#}"
        );
    }
    assert!(node.root.installed("kmod-nvidia-open-dkms").is_some());
    assert_ne!(node.root.rpmdb_snapshot(), before);
    std::fs::remove_file(node.root.join("/etc/gpuhost-world/fail-pre"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    node.assert_on("570.124.06", DRIVER_LOCAL_EL9_570);
}

/// A site package built for the test, installed with rpm: `site-keep-r570-<tag>` (or `tag`
/// itself when it is named like NVIDIA's, `nvidia-…`), requiring `requires` (a package that pins
/// the node to R570, as a site's "keep R570" package does).
fn site_package(root: &Root, tag: &str, requires: &str) -> String {
    let name = if tag.starts_with("nvidia-") {
        tag.to_string()
    } else {
        format!("site-keep-r570-{tag}")
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let spec = dir.path().join("site.spec");
    std::fs::write(
        &spec,
        format!("Name: {name}\nVersion: 1\nRelease: 1\nSummary: keeps R570\nLicense: MIT\nBuildArch: noarch\nRequires: {requires}\n%description\nA site's pin.\n%files\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = Command::new("rpmbuild")
        .arg("-bb")
        .arg("--define")
        .arg(format!("_topdir {}", dir.path().display()))
        .arg(&spec)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rpm = dir
        .path()
        .join(format!("RPMS/noarch/{name}-1-1.noarch.rpm"));
    let o = root.rpm(&["-i", "--nodeps", &rpm.display().to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(root.installed(&name).is_some());
    name
}

/// A swap removes only what it names (issue 34, item 2): a site package that needs the old
/// driver — by name, by its arch-qualified name, or by a file of the old local repo package,
/// which only dnf's own resolution sees — would go with it as a dependent. `plan` names it
/// (exit 2) or `apply` refuses it before the transaction; nothing changes; named in
/// `driver.allow_erase`, plan lists it and the swap erases it and converges. A site package
/// named like NVIDIA's (`nvidia-site-pin`) is the site's too: NVIDIA's set is what the local
/// repos list (issue 43, item 2).
#[rstest]
#[case::by_name("name", "nvidia-driver = 3:570.124.06", true)]
#[case::named_like_nvidias("nvidia-site-pin", "nvidia-driver = 3:570.124.06", true)]
#[case::by_arch_name("arch", "nvidia-driver(x86-64) = 3:570.124.06", true)]
#[case::by_a_file_of_the_old_repo(
    "file",
    "/var/nvidia-driver-local-repo-rhel9-570.124.06/repodata/repomd.xml",
    false
)]
fn a_swap_erases_no_package_outside_the_set_unless_the_profile_allows_it(
    #[case] tag: &str,
    #[case] requires: &str,
    #[case] plan_sees_it: bool,
) {
    let node = Node::new(Os::Ol9, "ol9-rhck", RHCK9, false);
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let site = site_package(&node.root, tag, requires);
    let before = node.root.rpmdb_snapshot();
    let (rc, rep) = node.plan(CUDA_LOCAL_EL9_13_0);
    if plan_sees_it {
        assert_eq!(rc, 2, "{rep:#}");
        assert!(reason(&rep, "driver-repo").contains(&site), "{rep:#}");
    }
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 2, "{rep:#}");
    let why = reason(&rep, "driver-repo");
    assert!(
        why.contains(&format!("would also erase {site}")) && why.contains("nothing was changed"),
        "{why}"
    );
    assert_eq!(node.root.rpmdb_snapshot(), before, "{rep:#}");
    let allow = format!("driver.allow_erase=[\"{site}\"]");
    let extra = ["--set", allow.as_str()];
    if plan_sees_it {
        let (rc, rep) = run(
            &node.root,
            "plan",
            node.profile,
            CUDA_LOCAL_EL9_13_0,
            &extra,
        );
        assert_eq!(rc, 0, "{rep:#}");
        assert!(
            reason(&rep, "driver-repo").contains(&format!("erasing {site}")),
            "{rep:#}"
        );
    }
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &extra);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node.root.installed(&site).is_none(), "{rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
}

/// Issue 43, item 5: rollback trusts the host, not the file. "From" is what rpm says is
/// installed, whatever the journal claims; a journal or state folder another user owns or may
/// write, or a state folder linked elsewhere, is refused (exit 2, naming the path and why),
/// nothing changed.
#[test]
fn rollback_trusts_the_rpm_database_and_only_roots_journal() {
    use std::os::unix::fs::PermissionsExt;
    let node = Node::new(Os::Ol9, "ol9-uek", UEK9, false);
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let rollback = || {
        let o = node
            .root
            .gpuhost(&["rollback", "--dry-run", "--format", "json"]);
        (code(&o), stderr(&o) + &String::from_utf8_lossy(&o.stdout))
    };
    // The journal claims another driver is installed: "from" is rpm's.
    let journal = node.root.join("/var/lib/gpuhost/journal.json");
    let text = std::fs::read_to_string(&journal).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&journal, text.replace("\"580.82.07\"", "\"999.1.1\""))
        .unwrap_or_else(|e| panic!("{e}"));
    let (rc, out) = rollback();
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("580.82.07 → 570.124.06"), "{out}");
    std::fs::write(&journal, &text).unwrap_or_else(|e| panic!("{e}"));
    let rpmdb = node.root.rpmdb_snapshot();
    // Writable by others.
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o666))
        .unwrap_or_else(|e| panic!("{e}"));
    let (rc, out) = rollback();
    assert_eq!(rc, 2, "{out}");
    assert!(out.contains("journal.json") && out.contains("666"), "{out}");
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o644))
        .unwrap_or_else(|e| panic!("{e}"));
    // Owned by another user.
    std::os::unix::fs::chown(&journal, Some(1000), Some(1000)).unwrap_or_else(|e| panic!("{e}"));
    let (rc, out) = rollback();
    assert_eq!(rc, 2, "{out}");
    assert!(
        out.contains("journal.json") && out.contains("uid 1000"),
        "{out}"
    );
    std::os::unix::fs::chown(&journal, Some(0), Some(0)).unwrap_or_else(|e| panic!("{e}"));
    // The state folder linked out of the root.
    let state = node.root.join("/var/lib/gpuhost");
    let elsewhere = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let moved = elsewhere.path().join("gpuhost");
    std::fs::rename(&state, &moved).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&moved, &state).unwrap_or_else(|e| panic!("{e}"));
    let (rc, out) = rollback();
    assert_eq!(rc, 2, "{out}");
    assert!(out.contains("/var/lib/gpuhost is a link"), "{out}");
    assert_eq!(node.root.rpmdb_snapshot(), rpmdb);
}

/// The names in a folder of the root, sorted (none when it is not there).
fn names_in(root: &Root, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// gpuhost's driver cache on the node (`driver.keep_local_repo = false`, issue 42 item 2): the
/// cached folders by name, and the folder gpuhost's repo file gives dnf.
fn cache_state(root: &Root) -> (Vec<String>, Option<String>) {
    let dirs = names_in(root, "/var/lib/gpuhost/driver-repo");
    let current = std::fs::read_to_string(root.join("/etc/yum.repos.d/gpuhost-driver-repo.repo"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("baseurl=file:///var/lib/gpuhost/driver-repo/"))
                .map(str::to_string)
        });
    (dirs, current)
}

/// The NVIDIA local repo packages rpm has installed.
fn repo_packages(node: &Node) -> Vec<String> {
    node.nvidia_packages()
        .into_iter()
        .filter(|p| p.starts_with("cuda-repo-") || p.starts_with("nvidia-driver-local-repo-"))
        .collect()
}

/// The `/var/<local repo>` folders NVIDIA's packages leave.
fn var_repos(root: &Root) -> Vec<String> {
    names_in(root, "/var")
        .into_iter()
        .filter(|n| n.starts_with("cuda-repo-") || n.starts_with("nvidia-driver-local-repo-"))
        .collect()
}

/// `driver.keep_local_repo = false` (issue 42, item 2), on an HGX node: the first converge, a
/// branch swap (CUDA 13.0's repo, R580's renamed Fabric Manager), a rollback after the earlier
/// package file is gone, and the moves to `true` and back. The node never holds a local repo
/// package or its `/var` folder while the key is false; the driver set comes from gpuhost's
/// cache, which keeps the current set and the one before only; every second apply is converged
/// with no dnf.
#[test]
fn without_the_local_repo_the_node_swaps_rolls_back_and_moves_from_the_cache() {
    let node = Node::new(Os::Ol9, "ol9-uek", UEK9, true);
    let off = ["--set", "driver.keep_local_repo=false"];
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let copy = dir.path().join(DRIVER_LOCAL_EL9_570);
    std::fs::copy(local(DRIVER_LOCAL_EL9_570), &copy).unwrap_or_else(|e| panic!("{e}"));
    let set570 = format!("driver.local_repo_rpm={}", copy.display());
    let cached570 = "nvidia-driver-local-repo-rhel9-570.124.06-1.0".to_string();
    let cached580 = "cuda-repo-rhel9-13-0-local-13.0.1_580.82.07".to_string();
    let stays = |rpm: &str, extra: &[&str]| {
        let a = args("apply", node.profile, rpm, extra);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let (o, execs) = node.root.gpuhost_traced(&refs);
        let rep = report(&o);
        assert_eq!(code(&o), 0, "{rep:#}");
        world::assert_converged(&rep);
        if let Some(execs) = &execs {
            assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
        }
    };

    // plan says which applies; the first converge caches the set and installs no package.
    let (rc, rep) = run(
        &node.root,
        "plan",
        node.profile,
        DRIVER_LOCAL_EL9_570,
        &["--set", &set570, off[0], off[1]],
    );
    assert_eq!(rc, 0, "{rep:#}");
    let why = reason(&rep, "driver-repo");
    assert!(
        why.contains("driver.keep_local_repo = false") && why.contains(&cached570),
        "{why}"
    );
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &["--set", &set570, off[0], off[1]]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(
        repo_packages(&node).is_empty(),
        "{:?}",
        repo_packages(&node)
    );
    assert!(
        var_repos(&node.root).is_empty(),
        "{:?}",
        var_repos(&node.root)
    );
    assert_eq!(
        cache_state(&node.root),
        (vec![cached570.clone()], Some(cached570.clone()))
    );
    assert!(node
        .root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("570.124.06")));
    assert!(node
        .root
        .installed("nvidia-fabric-manager")
        .is_some_and(|v| v.starts_with("570.124.06")));
    stays(DRIVER_LOCAL_EL9_570, &["--set", &set570, off[0], off[1]]);

    // The swap to R580 reads CUDA 13.0's package and keeps the 570 set for a rollback.
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &off);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(repo_packages(&node).is_empty() && var_repos(&node.root).is_empty());
    assert_eq!(
        cache_state(&node.root),
        (
            vec![cached580.clone(), cached570.clone()],
            Some(cached580.clone())
        )
    );
    assert_eq!(node.root.installed_all("nvidia-driver").len(), 1);
    assert!(node
        .root
        .installed("nvidia-fabricmanager")
        .is_some_and(|v| v.starts_with("580.82.07")));
    assert!(node.root.installed("nvidia-fabric-manager").is_none());
    assert!(
        node.locks().contains(&"nvidia-fabricmanager".to_string()),
        "{:?}",
        node.locks()
    );
    stays(CUDA_LOCAL_EL9_13_0, &off);

    // The 570 file is gone: the rollback takes the cached set, and keeps the 580 one.
    std::fs::remove_file(&copy).unwrap_or_else(|e| panic!("{e}"));
    let o = node.root.gpuhost(&["rollback", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}\n{:#}", stderr(&o), report(&o));
    assert!(node
        .root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("570.124.06")));
    assert!(node
        .root
        .installed("nvidia-fabric-manager")
        .is_some_and(|v| v.starts_with("570.124.06")));
    assert!(node.root.installed("nvidia-fabricmanager").is_none());
    assert_eq!(
        cache_state(&node.root),
        (
            vec![cached580.clone(), cached570.clone()],
            Some(cached570.clone())
        )
    );
    assert!(repo_packages(&node).is_empty());
    // The file is gone and the node needs it no more: a converged apply (as the kernel guard
    // repeats it, the checksum pinned) reads the cache, not the file.
    let sum = format!(
        "driver.sha256={}",
        World::get().sha256(DRIVER_LOCAL_EL9_570)
    );
    stays(
        DRIVER_LOCAL_EL9_570,
        &["--set", &set570, off[0], off[1], "--set", &sum],
    );

    // keep_local_repo = true: NVIDIA's package is installed, the cache goes, the set stays.
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    let why = reason(&rep, "driver-repo");
    assert!(why.contains("driver.keep_local_repo = true"), "{why}");
    node.assert_on("570.124.06", DRIVER_LOCAL_EL9_570);
    assert_eq!(cache_state(&node.root), (vec![], None));
    node.assert_stays(DRIVER_LOCAL_EL9_570);

    // NVIDIA's procedure: with the CUDA local repo installed, its toolkit installs on the node.
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    node.assert_on("580.82.07", CUDA_LOCAL_EL9_13_0);
    node.root.dnf_ok(&["install", "-y", "cuda-toolkit-13-0"]);
    assert!(node.root.installed("cuda-cudart-13-0").is_some());

    // And back to false: the set moves into the cache, the package goes with the toolkit's
    // packages it holds; dnf offers no toolkit package from the cache.
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &off);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(repo_packages(&node).is_empty() && var_repos(&node.root).is_empty());
    assert_eq!(
        cache_state(&node.root),
        (vec![cached580.clone()], Some(cached580.clone()))
    );
    let held = names_in(
        &node.root,
        &format!("/var/lib/gpuhost/driver-repo/{cached580}"),
    );
    assert!(
        held.iter().any(|f| f.starts_with("nvidia-driver-")),
        "{held:?}"
    );
    assert!(
        !held
            .iter()
            .any(|f| f.starts_with("cuda-toolkit") || f.starts_with("cuda-cudart")),
        "{held:?}"
    );
    let offered = node.root.dnf(&["list", "--available", "cuda-toolkit-13-0"]);
    assert!(
        !offered.status.success(),
        "{}",
        String::from_utf8_lossy(&offered.stdout)
    );
    assert!(node
        .root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("580.82.07")));
    stays(CUDA_LOCAL_EL9_13_0, &off);

    // From the cache to NVIDIA's package of another driver: one swap, the cache gone.
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(cache_state(&node.root), (vec![], None));
    assert_eq!(repo_packages(&node).len(), 1, "{:?}", repo_packages(&node));
    assert!(node
        .root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("570.124.06")));
    node.assert_stays(DRIVER_LOCAL_EL9_570);
}

/// Issue 53, item 2: the driver-set cache's manifest decides nothing on its own, and rollback
/// never follows a link out of the root. On a node with the 570 set kept for a rollback and the
/// package file gone: the current set's manifest listing a site package (named like NVIDIA's)
/// gets it no erasure; a kept set whose manifest's `repo_id` carries a newline, whose package is
/// a link to a file of the build host, or a FIFO, is no cache: the rollback exits 2 at once,
/// nothing changed, no `mirrorlist=` in gpuhost's repo file, the FIFO never opened.
#[test]
fn rollback_takes_a_cached_set_only_as_gpuhost_wrote_it() {
    let node = Node::new(Os::Ol9, "ol9-uek", UEK9, false);
    let off = ["--set", "driver.keep_local_repo=false"];
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let copy = dir.path().join(DRIVER_LOCAL_EL9_570);
    std::fs::copy(local(DRIVER_LOCAL_EL9_570), &copy).unwrap_or_else(|e| panic!("{e}"));
    let set570 = format!("driver.local_repo_rpm={}", copy.display());
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &["--set", &set570, off[0], off[1]]);
    assert_eq!(rc, 0, "{rep:#}");
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &off);
    assert_eq!(rc, 0, "{rep:#}");
    std::fs::remove_file(&copy).unwrap_or_else(|e| panic!("{e}"));
    let cache = "/var/lib/gpuhost/driver-repo";
    let kept = format!("{cache}/nvidia-driver-local-repo-rhel9-570.124.06-1.0");
    let current = format!("{cache}/cuda-repo-rhel9-13-0-local-13.0.1_580.82.07");
    let rollback = |dry: bool| {
        let mut a = vec!["rollback", "--format", "json"];
        if dry {
            a.push("--dry-run");
        }
        let o = node.root.gpuhost(&a);
        (code(&o), stderr(&o) + &String::from_utf8_lossy(&o.stdout))
    };
    // The current set's manifest lists a site package named like NVIDIA's.
    let site = site_package(&node.root, "nvidia-site-tool", "bash");
    let manifest = format!("{current}/gpuhost-cache.json");
    let text = node.root.read(&manifest);
    let mut m: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    if let Some(p) = m["packages"].as_array_mut() {
        p.push(Value::from(site.clone()));
    }
    node.root.write(&manifest, &m.to_string());
    let (rc, out) = rollback(true);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("580.82.07 → 570.124.06"), "{out}");
    assert!(!out.contains(&site), "{out}");
    node.root.write(&manifest, &text);
    let rpmdb = node.root.rpmdb_snapshot();
    let repo_file = node.root.read("/etc/yum.repos.d/gpuhost-driver-repo.repo");
    // A kept manifest whose repo_id carries a line of its own.
    let kept_manifest = format!("{kept}/gpuhost-cache.json");
    let text = node.root.read(&kept_manifest);
    let mut m: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    m["repo_id"] = Value::from("nvidia-driver-local\nmirrorlist=file:///etc/shadow");
    node.root.write(&kept_manifest, &m.to_string());
    let (rc, out) = rollback(false);
    assert_eq!(rc, 2, "{out}");
    assert!(out.contains("repo_id"), "{out}");
    node.root.write(&kept_manifest, &text);
    // A kept package that is a link out of the root, then a FIFO.
    let mut dirs = vec![node.root.join(&kept)];
    let mut found = None;
    while let (Some(d), None) = (dirs.pop(), &found) {
        for e in std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                dirs.push(e.path());
            } else if name.starts_with("nvidia-driver-570") && name.ends_with(".rpm") {
                found = Some(e.path());
            }
        }
    }
    let pkg = found.unwrap_or_else(|| panic!("no nvidia-driver package under {kept}"));
    let aside = dir.path().join("aside.rpm");
    std::fs::rename(&pkg, &aside).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&aside, &pkg).unwrap_or_else(|e| panic!("{e}"));
    let (rc, out) = rollback(false);
    assert_eq!(rc, 2, "{out}");
    assert!(out.contains("is a link"), "{out}");
    std::fs::remove_file(&pkg).unwrap_or_else(|e| panic!("{e}"));
    let o = Command::new("mkfifo")
        .arg(&pkg)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success());
    let (rc, out) = rollback(false);
    assert_eq!(rc, 2, "{out}");
    assert!(out.contains("FIFO"), "{out}");
    std::fs::remove_file(&pkg).unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(&aside, &pkg).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(node.root.rpmdb_snapshot(), rpmdb);
    assert_eq!(
        node.root.read("/etc/yum.repos.d/gpuhost-driver-repo.repo"),
        repo_file
    );
    // As gpuhost wrote it, the cache is taken: the rollback converges on 570.
    let (rc, out) = rollback(false);
    assert_eq!(rc, 0, "{out}");
    assert!(node
        .root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("570.124.06")));
    assert!(node.root.installed(&site).is_some());
}

/// Issue 53, item 5: with `driver.keep_local_repo = false`, the current set's cache folder
/// removed by hand (a clean-up of /var/lib). A swap to another driver is refused before any
/// change, exit 2, with the way back (before: dnf stopped at the gone repo's metadata, exit 1,
/// and so did every later transaction, the container steps' too); the installed driver's
/// package puts the set back; then the swap converges, and the next apply is converged.
#[test]
fn a_swap_after_the_current_cache_folder_was_removed_by_hand_is_refused_then_converges() {
    let node = Node::new(Os::Ol9, "ol9-uek", UEK9, true);
    let off = ["--set", "driver.keep_local_repo=false"];
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &off);
    assert_eq!(rc, 0, "{rep:#}");
    let cached570 = "nvidia-driver-local-repo-rhel9-570.124.06-1.0";
    assert_eq!(cache_state(&node.root).1.as_deref(), Some(cached570));
    let folder = node
        .root
        .join(&format!("/var/lib/gpuhost/driver-repo/{cached570}"));
    std::fs::remove_dir_all(folder).unwrap_or_else(|e| panic!("{e}"));
    let before = node.root.rpmdb_snapshot();
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &off);
    assert_eq!(rc, 2, "{rep:#}");
    let text = rep.to_string();
    assert!(
        text.contains("is gone") && text.contains("puts the cached set back"),
        "{rep:#}"
    );
    assert_eq!(
        node.root.rpmdb_snapshot(),
        before,
        "the refused swap changed packages"
    );
    // The installed driver's package puts the set back; then the swap goes through.
    let (rc, rep) = node.apply(DRIVER_LOCAL_EL9_570, &off);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(cache_state(&node.root).1.as_deref(), Some(cached570));
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &off);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(node
        .root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("580.82.07")));
    let (rc, rep) = node.apply(CUDA_LOCAL_EL9_13_0, &off);
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
}
