//! Health in fleet shapes (issue 14): Kubernetes node-problem-detector's custom-plugin protocol,
//! the provisioning gate (`status --wait-healthy`), and Slurm's HealthCheckProgram convention
//! against a real Slurm: Debian's munged, slurmctld and slurmd, started here with a one-node
//! configuration on free loopback ports.
//!
//! Verdicts come from the HGX H200 x8 fixture (derived from the real H200 capture, OK in every
//! check) and from failures crafted on it, through the hidden `--from-snapshot`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/docs.rs"]
mod docs;
#[path = "support/status.rs"]
mod support;
use support::{gpuhost, hgx};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn healthy() -> serde_json::Value {
    hgx()
}

/// GPU 5 with uncorrectable ECC errors: CRITICAL.
fn ecc_errors() -> serde_json::Value {
    let mut v = hgx();
    v["nvml"]["gpus"][5]["ecc_volatile_uncorrected"] = serde_json::json!({"value": 3});
    v
}

/// Docker without the nvidia runtime (no profile requires it): WARNING only.
fn warning() -> serde_json::Value {
    let mut v = hgx();
    v["host"]["docker_daemon_json"]["nvidia_runtime"] = serde_json::json!(false);
    v
}

/// Unit states that could not be read (no systemctl, as on the real H200 VM): UNKNOWN.
fn unknown() -> serde_json::Value {
    let mut v = hgx();
    v["services"] = serde_json::json!({"error": "cannot run `systemctl is-active docker`: No such file or directory",
        "docker": null, "nvidia_persistenced": null, "nvidia_fabricmanager": null});
    v
}

fn write(dir: &Path, name: &str, v: &serde_json::Value) -> PathBuf {
    let f = dir.join(name);
    std::fs::write(&f, serde_json::to_string(v).unwrap()).unwrap();
    f
}

fn status(run: &Path, snap: &Path, extra: &[&str]) -> Output {
    gpuhost(run)
        .args(["status", "--from-snapshot"])
        .arg(snap)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn npd_custom_plugin_protocol() {
    let run = tempfile::tempdir().unwrap();
    for (name, snap, code, starts) in [
        ("ok", healthy(), 0, "OK: "),
        ("warning", warning(), 0, "WARNING host "),
        (
            "critical",
            ecc_errors(),
            1,
            "CRITICAL gpu5 gpu.ecc.volatile_uncorrected: ",
        ),
        ("unknown", unknown(), 2, "UNKNOWN host services."),
    ] {
        let f = write(run.path(), &format!("{name}.json"), &snap);
        let o = status(run.path(), &f, &["--format", "npd"]);
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(code), "{name}: {out}");
        assert_eq!(out.lines().count(), 1, "{name}: {out}");
        let line = out.trim_end();
        assert!(line.starts_with(starts), "{name}: {line}");
        assert!(line.len() <= 80, "{name}: {} bytes: {line}", line.len());
    }
}

#[test]
fn the_npd_sample_config_in_the_docs_is_valid_json_calling_npd_format() {
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/status-and-serve.md"),
    )
    .unwrap();
    let start = readme
        .find("```json\n{\n  \"plugin\": \"custom\"")
        .expect("NPD sample in docs/status-and-serve.md");
    let body = &readme[start + 8..];
    let body = &body[..body.find("```").unwrap()];
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["plugin"], "custom");
    let rule = &v["rules"][0];
    assert_eq!(rule["path"], "/usr/bin/gpuhost");
    let args: Vec<&str> = rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["status", "--format", "npd"]);
    assert!(v["pluginConfig"]["max_output_length"].as_u64().unwrap() >= 80);
}

#[test]
fn wait_healthy_returns_once_the_node_is_fit() {
    let run = tempfile::tempdir().unwrap();
    let f = write(run.path(), "snap.json", &ecc_errors());
    let mut child = gpuhost(run.path())
        .args([
            "status",
            "--wait-healthy",
            "--timeout",
            "30",
            "--poll",
            "0.2",
        ])
        .arg("--from-snapshot")
        .arg(&f)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(child.try_wait().unwrap().is_none(), "gave up early");
    // The node becomes fit (a WARNING is fit).
    let t = Instant::now();
    write(run.path(), "snap.json", &warning());
    let o = child.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("gpuhost: waiting for a healthy node (")
            && err.contains("CRITICAL gpu5 gpu.ecc.volatile_uncorrected"),
        "{err}"
    );
    assert!(err.contains("gpuhost: healthy after"), "{err}");
    assert!(text(&o.stdout).starts_with("gpuhost status WARNING"));
}

#[test]
fn wait_healthy_gives_up_with_exit_2() {
    let run = tempfile::tempdir().unwrap();
    let f = write(run.path(), "snap.json", &unknown());
    let t = Instant::now();
    let o = status(
        run.path(),
        &f,
        &["--wait-healthy", "--timeout", "1.5", "--poll", "0.4"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(t.elapsed() >= Duration::from_millis(1400) && t.elapsed() < Duration::from_secs(6));
    let err = text(&o.stderr);
    assert!(
        err.contains("gpuhost: not healthy after 1 s")
            || err.contains("gpuhost: not healthy after 2 s"),
        "{err}"
    );
    assert!(
        err.matches("waiting for a healthy node").count() >= 2,
        "{err}"
    );
    // The last report is on stdout.
    assert!(text(&o.stdout).starts_with("gpuhost status UNKNOWN"));
}

/// A one-node Slurm cluster (munged, slurmctld, slurmd) in a temp dir; stopped when dropped.
struct Slurm {
    dir: tempfile::TempDir,
    procs: Vec<Child>,
    conf: PathBuf,
}

const NODE: &str = "gpunode1";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn have(tool: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).exists())
}

impl Slurm {
    /// None (the test is skipped) when the daemons are not installed or we are not root,
    /// unless GPUHOST_REQUIRE_ALL_TOOLS is set (CI), where that is a failure.
    fn start() -> Option<Slurm> {
        let missing: Vec<&str> = ["munged", "slurmctld", "slurmd", "scontrol"]
            .into_iter()
            .filter(|t| !have(t))
            .collect();
        let root = text(&Command::new("id").arg("-u").output().unwrap().stdout).trim() == "0";
        if !missing.is_empty() || !root {
            let why = format!("missing {missing:?}, root: {root} (apt-get install -y slurmctld slurmd slurm-client munge)");
            assert!(
                std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_none(),
                "Slurm test cannot run: {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("munge"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let key: Vec<u8> = (0..1024u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        std::fs::write(d.join("munge/munge.key"), key).unwrap();
        std::fs::set_permissions(
            d.join("munge/munge.key"),
            std::fs::Permissions::from_mode(0o400),
        )
        .unwrap();
        let sock = d.join("munge/sock");
        let munged = Command::new("munged")
            .arg("--foreground")
            .arg(format!(
                "--key-file={}",
                d.join("munge/munge.key").display()
            ))
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--pid-file={}", d.join("munge/pid").display()))
            .arg(format!("--log-file={}", d.join("munge/log").display()))
            .arg(format!("--seed-file={}", d.join("munge/seed").display()))
            .arg("--force")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let conf = d.join("slurm.conf");
        let (ctld_port, d_port) = (free_port(), free_port());
        std::fs::write(
            &conf,
            format!(
                "ClusterName=gpuhosttest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
ReturnToService=2
NodeName={NODE} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
",
                sock = sock.display(),
                d = d.display()
            ),
        )
        .unwrap();
        let mut s = Slurm {
            procs: vec![munged],
            conf,
            dir,
        };
        let wait_for = |p: &Path| {
            let until = Instant::now() + Duration::from_secs(10);
            while !p.exists() {
                assert!(Instant::now() < until, "{} never appeared", p.display());
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        wait_for(&sock);
        for argv in [
            vec!["slurmctld", "-D", "-i", "-f"],
            vec!["slurmd", "-D", "-N", NODE, "-f"],
        ] {
            let c = Command::new(argv[0])
                .args(&argv[1..])
                .arg(&s.conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            s.procs.push(c);
        }
        // Up when the node has registered: IDLE.
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let st = s.node();
            if st.contains("State=IDLE") && !st.contains("NOT_RESPONDING") {
                break;
            }
            assert!(
                Instant::now() < until,
                "slurm never came up: {st}\n{}",
                std::fs::read_to_string(s.dir.path().join("log/slurmctld.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(s)
    }

    fn scontrol(&self, args: &[&str]) -> Output {
        Command::new("scontrol")
            .env("SLURM_CONF", &self.conf)
            .args(args)
            .output()
            .unwrap()
    }

    fn node(&self) -> String {
        text(&self.scontrol(&["show", "node", NODE, "--oneliner"]).stdout)
    }

    fn state(&self) -> String {
        let n = self.node();
        n.split_whitespace()
            .find_map(|f| f.strip_prefix("State="))
            .unwrap_or("?")
            .to_string()
    }

    fn reason(&self) -> Option<String> {
        let n = self.node();
        n.find(" Reason=").map(|i| n[i + 8..].trim().to_string())
    }

    /// gpuhost status --slurm on a snapshot, as slurmd's HealthCheckProgram would run it.
    fn check(&self, run: &Path, snap: &serde_json::Value) -> Output {
        let f = write(run, "slurm-snap.json", snap);
        gpuhost(run)
            .env("SLURM_CONF", &self.conf)
            .env("SLURMD_NODENAME", NODE)
            .args(["status", "--slurm", "--from-snapshot"])
            .arg(&f)
            .output()
            .unwrap()
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().rev() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

#[test]
fn slurm_drains_on_critical_resumes_its_own_drain_and_leaves_an_admin_drain() {
    let Some(slurm) = Slurm::start() else { return };
    let run = tempfile::tempdir().unwrap();
    assert_eq!(slurm.state(), "IDLE");

    // Healthy on an idle node: nothing to do.
    let o = slurm.check(run.path(), &healthy());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("gpuhost slurm: gpunode1: nothing to do"));
    assert_eq!(slurm.state(), "IDLE");

    // A crafted CRITICAL drains the node with a reason naming the check.
    let o = slurm.check(run.path(), &ecc_errors());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stdout)
        .contains("gpuhost slurm: drained gpunode1: gpuhost: gpu.ecc.volatile_uncorrected gpu5: "));
    assert_eq!(slurm.state(), "IDLE+DRAIN");
    let reason = slurm.reason().unwrap();
    assert!(
        reason.starts_with("gpuhost: gpu.ecc.volatile_uncorrected gpu5: 3 uncorrectable ECC"),
        "{reason}"
    );
    // What docs/status-and-serve.md shows of such a node, as scontrol says it (but for the
    // time of the drain, in the reason's `[user@time]`).
    let shown = docs::delegated(file!(), "docs/status-and-serve.md", "scontrol").console();
    assert_eq!(shown.len(), 1, "{shown:?}");
    let (cmd, want) = &shown[0];
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{cmd}"))
        .env("SLURM_CONF", &slurm.conf)
        .output()
        .unwrap();
    let untimed = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| match l.rfind(" [") {
                Some(i) if l.ends_with(']') && l[i..].contains('@') => l[..i].to_string(),
                _ => l.to_string(),
            })
            .collect()
    };
    assert_eq!(
        untimed(&text(&o.stdout)),
        untimed(want),
        "$ {cmd}\n{}",
        text(&o.stderr)
    );

    // Still CRITICAL: stays drained, reason kept. UNKNOWN changes nothing either.
    let o = slurm.check(run.path(), &ecc_errors());
    assert!(
        text(&o.stdout).contains("stays drained by gpuhost"),
        "{}",
        text(&o.stdout)
    );
    let o = slurm.check(run.path(), &unknown());
    assert!(
        text(&o.stdout).contains("nothing to do"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(slurm.state(), "IDLE+DRAIN");

    // Healthy again (a WARNING is healthy): resumed, since gpuhost drained it.
    let o = slurm.check(run.path(), &warning());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stdout).contains("gpuhost slurm: resumed gpunode1"),
        "{}",
        text(&o.stdout)
    );
    let until = Instant::now() + Duration::from_secs(10);
    while slurm.state() != "IDLE" {
        assert!(Instant::now() < until, "state {}", slurm.state());
        std::thread::sleep(Duration::from_millis(100));
    }

    // An admin drains it: gpuhost leaves that drain and its reason alone, healthy or not.
    let a = slurm.scontrol(&[
        "update",
        "nodename=gpunode1",
        "state=drain",
        "reason=replacing a PSU",
    ]);
    assert!(a.status.success(), "{}", text(&a.stderr));
    for snap in [healthy(), ecc_errors()] {
        let o = slurm.check(run.path(), &snap);
        assert!(
            text(&o.stdout).contains("was drained by someone else (replacing a PSU); left alone"),
            "{}",
            text(&o.stdout)
        );
        assert_eq!(slurm.state(), "IDLE+DRAIN");
        assert!(slurm.reason().unwrap().starts_with("replacing a PSU"));
    }
}

#[test]
fn slurm_mode_without_slurm_is_unknown_and_says_why() {
    let run = tempfile::tempdir().unwrap();
    let f = write(run.path(), "s.json", &healthy());
    let o = gpuhost(run.path())
        .env("SLURM_CONF", run.path().join("no-such-slurm.conf"))
        .args([
            "status",
            "--slurm",
            "--slurm-node",
            "gpunode1",
            "--from-snapshot",
        ])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = text(&o.stderr);
    assert!(
        err.contains("gpuhost status --slurm: ") && err.contains("scontrol"),
        "{err}"
    );
}
