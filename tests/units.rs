//! gpuhost's systemd units under a real systemd: a Debian 12 container whose PID 1 is systemd
//! (mmdebstrap + systemd-nspawn --boot), with the gpuhost binary and the units of packaging/
//! installed. gpuhost-serve.service must start with all its hardening and answer; the resume and
//! gate units must run in order after a reboot of the container; `systemd-analyze security`
//! must rate the serve unit at most 2.0, the figure docs/status-and-serve.md reports.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const GPUHOST: &str = env!("CARGO_BIN_EXE_gpuhost");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Whether this machine can boot the container; without the tools or root the test is skipped,
/// except in CI (GPUHOST_REQUIRE_ALL_TOOLS), where that fails.
fn can_boot() -> bool {
    let missing: Vec<&str> = [
        "mmdebstrap",
        "systemd-nspawn",
        "nsenter",
        "mountpoint",
        "python3",
    ]
    .into_iter()
    .filter(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .map_or(true, |o| !o.status.success())
    })
    .collect();
    let root = text(&Command::new("id").arg("-u").output().unwrap().stdout).trim() == "0";
    if missing.is_empty() && root {
        return true;
    }
    let why = format!(
        "missing {missing:?}, root: {root} (apt-get install -y mmdebstrap systemd-container)"
    );
    assert!(
        std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_none(),
        "the systemd container cannot be made: {why}"
    );
    eprintln!("skipped: {why}");
    false
}

/// A Debian 12 root with systemd, made once per checkout (`target/nspawn/bookworm`), from
/// Debian's mirror (deb.debian.org).
fn base_root() -> PathBuf {
    let dir = workspace().join("target/nspawn");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.join("lock")).unwrap();
    lock.lock().unwrap();
    let base = dir.join("bookworm");
    if !base.join(".gpuhost-done").exists() {
        let tmp = dir.join("bookworm.tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        let t = Instant::now();
        let o = Command::new("mmdebstrap")
            .args([
                "--variant=minbase",
                "--include=systemd,systemd-sysv,dbus",
                "bookworm",
            ])
            .arg(&tmp)
            .output()
            .unwrap();
        assert!(o.status.success(), "mmdebstrap: {}", text(&o.stderr));
        eprintln!("mmdebstrap: {:?}", t.elapsed());
        let _ = std::fs::remove_dir_all(&base);
        std::fs::rename(&tmp, &base).unwrap();
        std::fs::write(base.join(".gpuhost-done"), "").unwrap();
    }
    base
}

/// A booted container; powered off (or killed) when dropped.
struct Container {
    root: PathBuf,
    log: PathBuf,
    nspawn: Option<Child>,
    pid: u32,
}

impl Container {
    fn boot(root: &Path, log: &Path) -> Container {
        // nspawn wants /run/systemd/nspawn on a file system of its own here.
        let run = Path::new("/run/systemd/nspawn");
        std::fs::create_dir_all(run).unwrap();
        if !Command::new("mountpoint")
            .arg("-q")
            .arg(run)
            .status()
            .unwrap()
            .success()
        {
            let o = Command::new("mount")
                .args(["-t", "tmpfs", "tmpfs"])
                .arg(run)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", text(&o.stderr));
        }
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let nspawn = Command::new("systemd-nspawn")
            .arg("-D")
            .arg(root)
            .args([
                "--boot",
                "--register=no",
                "--keep-unit",
                "--private-network",
            ])
            // nspawn drops CAP_SYSLOG from the container; a real host has it, and the serve unit
            // keeps exactly that one.
            .arg("--capability=CAP_SYSLOG")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .unwrap();
        let npid = nspawn.id();
        let until = Instant::now() + Duration::from_secs(30);
        let pid = loop {
            let children = std::fs::read_to_string(format!("/proc/{npid}/task/{npid}/children"))
                .unwrap_or_default();
            if let Some(p) = children.split_whitespace().find_map(|p| {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).ok()?;
                (comm.trim() == "systemd")
                    .then(|| p.parse::<u32>().ok())
                    .flatten()
            }) {
                break p;
            }
            assert!(
                Instant::now() < until,
                "no systemd in the container: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let c = Container {
            root: root.to_path_buf(),
            log: log.to_path_buf(),
            nspawn: Some(nspawn),
            pid,
        };
        // Up: systemd says running (or degraded: a failed unit is what some tests expect).
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let o = c.exec(&["systemctl", "is-system-running"]);
            let st = text(&o.stdout);
            if st.starts_with("running") || st.starts_with("degraded") {
                break;
            }
            assert!(
                Instant::now() < until,
                "container never finished booting: {st}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        c
    }

    /// Runs a command inside the container (all its namespaces).
    fn exec(&self, argv: &[&str]) -> Output {
        Command::new("nsenter")
            .arg("-t")
            .arg(self.pid.to_string())
            .arg("-a")
            .args(argv)
            .output()
            .unwrap()
    }

    /// A host program in the container's network namespace only.
    fn in_netns(&self, argv: &[&str]) -> Output {
        Command::new("nsenter")
            .arg("-t")
            .arg(self.pid.to_string())
            .arg("-n")
            .args(argv)
            .output()
            .unwrap()
    }

    fn show(&self, unit: &str, prop: &str) -> String {
        let o = self.exec(&["systemctl", "show", unit, "-p", prop, "--value"]);
        text(&o.stdout).trim().to_string()
    }

    /// `systemctl reboot` inside; nspawn exits 133 (what systemd-nspawn@.service restarts on);
    /// boots the same root again.
    fn reboot(mut self) -> Container {
        let _ = self.exec(&["systemctl", "reboot"]);
        let mut child = self.nspawn.take().unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < until, "the container did not reboot");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(
            status.code(),
            Some(133),
            "{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        Container::boot(&self.root, &self.log)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(mut c) = self.nspawn.take() {
            let _ = self.exec(&["systemctl", "poweroff", "--no-block"]);
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// HTTP GET inside the container's network namespace: (status, body).
fn get(c: &Container, path: &str) -> (u16, String) {
    let script = format!(
        "import urllib.request, urllib.error, sys\ntry:\n    r = urllib.request.urlopen('http://127.0.0.1:19400{path}', timeout=10)\n    print(r.status); sys.stdout.write(r.read().decode())\nexcept urllib.error.HTTPError as e:\n    print(e.code); sys.stdout.write(e.read().decode())\n"
    );
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let o = c.in_netns(&["python3", "-c", &script]);
        if o.status.success() {
            let out = text(&o.stdout);
            let (code, body) = out.split_once('\n').unwrap();
            return (code.parse().unwrap(), body.to_string());
        }
        assert!(Instant::now() < until, "GET {path}: {}", text(&o.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A fresh copy of the base root with gpuhost and its units installed.
fn node(dir: &Path) -> PathBuf {
    let base = base_root();
    let root = dir.join("root");
    let o = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(&base)
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::copy(GPUHOST, root.join("usr/bin/gpuhost")).unwrap();
    for unit in [
        "gpuhost-serve.service",
        "gpuhost-resume.service",
        "gpuhost-status.service",
        "gpuhost-status.timer",
        "gpuhost-kernel@.service",
    ] {
        std::fs::copy(
            workspace().join("packaging").join(unit),
            root.join("usr/lib/systemd/system").join(unit),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink(
        "/usr/lib/systemd/system/gpuhost-serve.service",
        root.join("etc/systemd/system/multi-user.target.wants/gpuhost-serve.service"),
    )
    .unwrap();
    root
}

/// The exposure `systemd-analyze security` gives a unit.
fn exposure(c: &Container, unit: &str) -> f64 {
    let o = c.exec(&["systemd-analyze", "security", unit, "--no-pager"]);
    let out = text(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("{out}{}", text(&o.stderr)));
    line.split(": ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn serve_runs_hardened_under_systemd_and_resume_then_gate_run_after_a_reboot() {
    if !can_boot() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = node(dir.path());
    let t = Instant::now();
    let c = Container::boot(&root, &dir.path().join("console.log"));
    eprintln!("boot: {:?}", t.elapsed());

    // gpuhost-serve.service started at boot, with its hardening in force.
    assert_eq!(c.show("gpuhost-serve.service", "ActiveState"), "active");
    for (prop, want) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("DevicePolicy", "closed"),
        ("UMask", "0077"),
        ("ProtectProc", "invisible"),
        ("CapabilityBoundingSet", "cap_syslog"),
        // errno 1: EPERM
        ("SystemCallErrorNumber", "1"),
    ] {
        assert_eq!(c.show("gpuhost-serve.service", prop), want, "{prop}");
    }
    let pid = c.show("gpuhost-serve.service", "MainPID");
    let st = text(&c.exec(&["cat", &format!("/proc/{pid}/status")]).stdout);
    let field = |k: &str| {
        st.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k} in {st}"))
            .trim()
            .to_string()
    };
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2", "a seccomp filter");
    assert_eq!(
        field("CapBnd:"),
        "0000000400000000",
        "CAP_SYSLOG only: {st}"
    );
    assert_eq!(field("CapEff:"), "0000000400000000");

    // It answers. No NVIDIA driver in the container: UNKNOWN, so /healthz says 503 and why.
    let (code, body) = get(&c, "/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with("gpuhost status UNKNOWN: "), "{body}");
    let (code, metrics) = get(&c, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("# TYPE gpuhost_status gauge\ngpuhost_status 3\n"),
        "{metrics}"
    );
    // The hardening hides nothing the checks read: the server's report is the one-shot one's.
    let (_, served) = get(&c, "/status");
    let served: serde_json::Value = serde_json::from_str(&served).unwrap();
    let oneshot = c.exec(&["gpuhost", "status", "--format", "json"]);
    let oneshot: serde_json::Value = serde_json::from_slice(&oneshot.stdout).unwrap();
    let checks = |v: &serde_json::Value| -> Vec<(String, String, String)> {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["id"].to_string(),
                    c["gpu"].to_string(),
                    c["severity"].to_string(),
                )
            })
            .collect()
    };
    assert_eq!(checks(&served), checks(&oneshot));
    assert!(checks(&served).len() >= 10);

    // systemd's own rating, as docs/status-and-serve.md reports it.
    let e = exposure(&c, "gpuhost-serve.service");
    eprintln!("systemd-analyze security gpuhost-serve.service: {e}");
    assert!(e <= 2.0, "exposure {e}");
    let readme = std::fs::read_to_string(workspace().join("docs/status-and-serve.md")).unwrap();
    assert!(
        readme.contains(&format!(
            "`systemd-analyze security gpuhost-serve.service`: {e:.1}"
        )),
        "docs/status-and-serve.md should report {e:.1}"
    );

    // An apply chain in progress (resume.json) and the provisioning gate that cloud-init writes
    // (here with a 3 s timeout): both enabled, then a reboot.
    let user_data = Command::new(GPUHOST)
        .args([
            "cloud-init",
            "--profile",
            "ol8-uek",
            "--set",
            "driver.manage=false",
            "--wait-healthy",
            "3",
        ])
        .output()
        .unwrap();
    assert!(user_data.status.success());
    let ud = dir.path().join("user-data");
    std::fs::write(&ud, &user_data.stdout).unwrap();
    let extract = "import sys, yaml\nfor f in yaml.safe_load(open(sys.argv[1]))['write_files']:\n    if f['path'].endswith('gpuhost-gate.service'):\n        open(sys.argv[2], 'w').write(f['content'])\n";
    let o = Command::new("python3")
        .args(["-c", extract])
        .arg(&ud)
        .arg(root.join("etc/systemd/system/gpuhost-gate.service"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::create_dir_all(root.join("var/lib/gpuhost")).unwrap();
    std::fs::write(
        root.join("var/lib/gpuhost/resume.json"),
        r#"{"args":{"profile":"ol8-uek","sets":["driver.manage=false"],"max_reboots":3},"reboots":1,"reasons":["nouveau: loaded"],"since":"2026-12-03T00:00:00Z"}"#,
    )
    .unwrap();
    let _ = c.exec(&["systemctl", "daemon-reload"]);
    let o = c.exec(&[
        "systemctl",
        "enable",
        "gpuhost-resume.service",
        "gpuhost-gate.service",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = Instant::now();
    let c = c.reboot();
    eprintln!("reboot: {:?}", t.elapsed());
    // Oneshots: wait until the gate has given its verdict.
    let until = Instant::now() + Duration::from_secs(60);
    while c.show("gpuhost-gate.service", "ExecMainExitTimestampMonotonic") == "0" {
        assert!(Instant::now() < until, "the gate never finished");
        std::thread::sleep(Duration::from_millis(200));
    }
    let n = |unit: &str, p: &str| -> u64 { c.show(unit, p).parse().unwrap() };
    let resume_start = n("gpuhost-resume.service", "ExecMainStartTimestampMonotonic");
    let resume_exit = n("gpuhost-resume.service", "ExecMainExitTimestampMonotonic");
    let gate_start = n("gpuhost-gate.service", "ExecMainStartTimestampMonotonic");
    assert!(
        resume_start > 0,
        "gpuhost resume did not run after the reboot"
    );
    assert!(
        gate_start >= resume_exit,
        "the gate started before resume ended: {gate_start} < {resume_exit}"
    );
    // What each said, from the journal of this boot: resume repeated the recorded apply (the
    // container is Debian, so apply refuses the host: exit 2), the gate found no NVML and gave up
    // after its timeout (exit 2), so the node is not marked as passed.
    let journal = |unit: &str| {
        text(
            &c.exec(&["journalctl", "-b", "-u", unit, "--no-pager", "-o", "cat"])
                .stdout,
        )
    };
    let resumed = journal("gpuhost-resume.service");
    assert!(
        resumed.contains("gpuhost: error: ") && resumed.contains("Oracle Linux"),
        "{resumed}"
    );
    assert_eq!(c.show("gpuhost-resume.service", "ExecMainStatus"), "2");
    let gated = journal("gpuhost-gate.service");
    assert!(
        gated.contains("gpuhost: waiting for a healthy node"),
        "{gated}"
    );
    assert_eq!(c.show("gpuhost-gate.service", "ExecMainStatus"), "2");
    assert!(!root.join("var/lib/gpuhost/gate.passed").exists());
    // serve came back too.
    assert_eq!(c.show("gpuhost-serve.service", "ActiveState"), "active");
}
