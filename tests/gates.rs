//! Health in fleet shapes (issue 14): Kubernetes node-problem-detector's custom-plugin protocol,
//! the provisioning gate (`status --wait-healthy`), and Slurm's HealthCheckProgram convention
//! against a real Slurm: Debian's munged, slurmctld and slurmd, started here with a one-node
//! configuration on free loopback ports.
//!
//! Verdicts come from the HGX H200 x8 fixture (derived from the real H200 capture, OK in every
//! check) and from failures crafted on it, through the hidden `--from-snapshot`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/docs.rs"]
mod docs;
#[path = "support/slurm.rs"]
mod slurm;
#[path = "support/status.rs"]
mod support;
use slurm::{text, Slurm};
use support::{gpuhost, hgx};

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

/// The node of the one-node cluster ([`slurm::Slurm`]: munged, slurmctld and a slurmd, in a
/// temp dir, stopped when dropped).
const NODE: &str = "gpunode1";

/// gpuhost status --slurm on a snapshot, as slurmd's HealthCheckProgram would run it.
fn check(slurm: &Slurm, run: &Path, snap: &serde_json::Value) -> Output {
    let f = write(run, "slurm-snap.json", snap);
    gpuhost(run)
        .env("SLURM_CONF", &slurm.conf)
        .env("SLURMD_NODENAME", NODE)
        .args(["status", "--slurm", "--from-snapshot"])
        .arg(&f)
        .output()
        .unwrap()
}

#[test]
fn slurm_drains_on_critical_resumes_its_own_drain_and_leaves_an_admin_drain() {
    let Some(slurm) = Slurm::start(&[NODE]) else {
        return;
    };
    let run = tempfile::tempdir().unwrap();
    assert_eq!(slurm.state(NODE), "IDLE");

    // Healthy on an idle node: nothing to do.
    let o = check(&slurm, run.path(), &healthy());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("gpuhost slurm: gpunode1: nothing to do"));
    assert_eq!(slurm.state(NODE), "IDLE");

    // A crafted CRITICAL drains the node with a reason naming the check.
    let o = check(&slurm, run.path(), &ecc_errors());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stdout)
        .contains("gpuhost slurm: drained gpunode1: gpuhost: gpu.ecc.volatile_uncorrected gpu5: "));
    assert_eq!(slurm.state(NODE), "IDLE+DRAIN");
    let reason = slurm.reason(NODE).unwrap();
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
    let o = check(&slurm, run.path(), &ecc_errors());
    assert!(
        text(&o.stdout).contains("stays drained by gpuhost"),
        "{}",
        text(&o.stdout)
    );
    let o = check(&slurm, run.path(), &unknown());
    assert!(
        text(&o.stdout).contains("nothing to do"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(slurm.state(NODE), "IDLE+DRAIN");

    // Healthy again (a WARNING is healthy): resumed, since gpuhost drained it.
    let o = check(&slurm, run.path(), &warning());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stdout).contains("gpuhost slurm: resumed gpunode1"),
        "{}",
        text(&o.stdout)
    );
    let until = Instant::now() + Duration::from_secs(10);
    while slurm.state(NODE) != "IDLE" {
        assert!(Instant::now() < until, "state {}", slurm.state(NODE));
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
        let o = check(&slurm, run.path(), &snap);
        assert!(
            text(&o.stdout).contains("was drained by someone else (replacing a PSU); left alone"),
            "{}",
            text(&o.stdout)
        );
        assert_eq!(slurm.state(NODE), "IDLE+DRAIN");
        assert!(slurm.reason(NODE).unwrap().starts_with("replacing a PSU"));
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

/// A report of the active checks captured on a real H100 (tests/fixtures/active/).
fn active_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/active")
        .join(name)
}

/// The gate with `--active`: once the counters pass, the work runs once and decides: a
/// healthy GPU's report passes (exit 0), a wrong answer fails it (exit 2, the finding in the
/// last report).
#[test]
fn the_gate_runs_the_active_checks_once_the_counters_pass() {
    for (fixture, code) in [("h100.json", 0), ("h100-fault-mix32.json", 2)] {
        let run = tempfile::tempdir().unwrap();
        let f = write(run.path(), "snap.json", &healthy());
        let o = status(
            run.path(),
            &f,
            &[
                "--wait-healthy",
                "--timeout",
                "20",
                "--poll",
                "0.2",
                "--active",
                "--active-fixture",
                active_fixture(fixture).to_str().unwrap(),
            ],
        );
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(code), "{fixture}: {err}\n{out}");
        assert_eq!(
            err.matches("running the active checks").count(),
            1,
            "{fixture}: {err}"
        );
        if code == 2 {
            assert!(
                out.starts_with("gpuhost status CRITICAL")
                    && out.contains("silent data corruption"),
                "{out}"
            );
        }
    }
}

/// `status --slurm --active` drains a node whose GPU gives a wrong answer, the check and its
/// value as the reason.
#[test]
fn slurm_drains_a_node_that_fails_the_active_checks() {
    let Some(slurm) = Slurm::start(&[NODE]) else {
        return;
    };
    let run = tempfile::tempdir().unwrap();
    let f = write(run.path(), "slurm-snap.json", &healthy());
    let o = gpuhost(run.path())
        .env("SLURM_CONF", &slurm.conf)
        .env("SLURMD_NODENAME", NODE)
        .args(["status", "--slurm", "--from-snapshot"])
        .arg(&f)
        .args(["--active", "--active-fixture"])
        .arg(active_fixture("h100-fault-fp64.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(slurm.state(NODE), "IDLE+DRAIN");
    let reason = slurm.reason(NODE).unwrap();
    assert!(
        reason.starts_with("gpuhost: gpu.active.compute ")
            && reason.contains("silent data corruption"),
        "{reason}"
    );
}
