//! `gpuhost status` integration tests (issue 5), on the real binary.
//!
//! CI machines (and the development machine) have no NVIDIA library: `status` must say so,
//! still run the driver-free checks and exit 3. The real H200's answers are replayed from
//! tests/fixtures/status/ with the hidden `--from-snapshot`; crafted sysfs trees go in through
//! `GPUHOST_STATUS_ROOT`; a hung driver is stood in for by `GPUHOST_PROBE_DELAY_MS`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/status")
}

fn gpuhost(run_dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuhost"));
    c.env("GPUHOST_RUN_DIR", run_dir)
        .env_remove("GPUHOST_STATUS_ROOT")
        .env_remove("GPUHOST_PROBE_DELAY_MS");
    c
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn has_nvml_library() -> bool {
    [
        "/usr/lib64/libnvidia-ml.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib/libnvidia-ml.so.1",
    ]
    .iter()
    .any(|p| Path::new(p).exists())
}

#[test]
fn without_nvidia_library_says_so_and_exits_3() {
    if has_nvml_library() {
        eprintln!("skipped: this machine has an NVIDIA library");
        return;
    }
    let run = tempfile::tempdir().unwrap();
    let o = gpuhost(run.path()).arg("status").output().unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("gpuhost status UNKNOWN: no NVIDIA userspace library"),
        "{first}"
    );
    // The driver-free checks still ran.
    for group in [" pci ", " driver ", " xid "] {
        assert!(out.contains(group), "no {group:?} line in\n{out}");
    }
    assert!(out.contains("NVIDIA GPU(s)"), "{out}");
    assert!(out.contains("nouveau"), "{out}");
}

#[test]
fn json_parses_and_has_the_documented_fields() {
    let run = tempfile::tempdir().unwrap();
    let o = gpuhost(run.path())
        .args(["status", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["exit_code"].as_i64(), o.status.code().map(i64::from));
    assert!(["OK", "WARNING", "CRITICAL", "UNKNOWN"].contains(&v["status"].as_str().unwrap()));
    for k in ["ok", "na", "warning", "critical", "unknown"] {
        assert!(v["summary"][k].is_u64());
    }
    let checks = v["checks"].as_array().unwrap();
    assert!(!checks.is_empty());
    for c in checks {
        for k in ["id", "group", "gpu", "severity", "value", "hint"] {
            assert!(c.get(k).is_some(), "check without {k}: {c}");
        }
    }
    for k in ["host", "services", "kernel_log", "nvml"] {
        assert!(v["snapshot"].get(k).is_some(), "snapshot.{k}");
    }
    if !has_nvml_library() {
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(v["snapshot"]["nvml"]["status"], "no_library");
        assert!(checks.iter().any(|c| c["id"] == "pci.devices"));
        assert!(checks.iter().any(|c| c["id"] == "xid.log"));
    }
}

#[test]
fn replays_the_real_h200_in_every_format() {
    let run = tempfile::tempdir().unwrap();
    let snap = fixtures().join("h200-snapshot.json");
    let prom = run.path().join("textfile/gpuhost.prom");
    let o = gpuhost(run.path())
        .args(["status", "--from-snapshot"])
        .arg(&snap)
        .arg("--textfile")
        .arg(&prom)
        .output()
        .unwrap();
    let out = stdout(&o);
    // That VM had no systemd (UNKNOWN) and no Docker (WARNING); every GPU check was OK/n/a.
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("OK        gpu0 00:06.0  ecc"), "{out}");
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(text.contains("gpuhost_gpu_temperature_celsius{uuid=\"GPU-a5c31759-a92f-8487-45c8-3f161cc02274\",pci_bus_id=\"00000000:00:06.0\"} 36"));
    let o = gpuhost(run.path())
        .args([
            "status",
            "--format",
            "prometheus",
            "--expect-gpus",
            "8",
            "--from-snapshot",
        ])
        .arg(&snap)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).contains("gpuhost_check_status{check=\"gpu.count\"} 2"));
}

#[test]
fn fallen_off_gpu_in_a_fake_sysfs_is_critical() {
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("sys/bus/pci/devices/0000:3b:00.0");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
    std::fs::write(dev.join("device"), "0x2335\n").unwrap();
    std::fs::write(dev.join("class"), "0x030200\n").unwrap();
    let mut config = vec![0xffu8; 4];
    config.extend([0u8; 60]);
    std::fs::write(dev.join("config"), config).unwrap();
    let run = tempfile::tempdir().unwrap();
    let o = gpuhost(run.path())
        .arg("status")
        .env("GPUHOST_STATUS_ROOT", root.path())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("fell off the bus"), "{out}");
}

#[test]
fn hung_probe_is_driver_unresponsive_and_not_piled_up() {
    let run = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let o = gpuhost(run.path())
        .args(["status", "--timeout", "0.5"])
        .env("GPUHOST_PROBE_DELAY_MS", "20000")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "waited for the stuck probe"
    );
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("driver unresponsive"), "{out}");
    let rec = std::fs::read_to_string(run.path().join("nvml-probe.pid")).unwrap();
    let pid: u32 = rec.split_whitespace().next().unwrap().parse().unwrap();
    // The probe was killed (a sleeping one dies; one stuck in the driver would stay): the
    // next run finds the record stale and probes again, answering at once.
    let o = gpuhost(run.path())
        .args(["status", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_ne!(v["snapshot"]["nvml"]["stuck_pid"], pid);
    assert_ne!(v["snapshot"]["nvml"]["status"], "stuck_earlier");
}

#[test]
fn a_probe_still_stuck_from_an_earlier_run_blocks_a_new_one() {
    let run = tempfile::tempdir().unwrap();
    // Stands for an earlier run's probe stuck in the driver.
    let mut stuck = Command::new("sleep").arg("30").spawn().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", stuck.id())).unwrap();
    let start = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    std::fs::write(
        run.path().join("nvml-probe.pid"),
        format!("{} {start}\n", stuck.id()),
    )
    .unwrap();
    let t = Instant::now();
    let o = gpuhost(run.path())
        .args(["status", "--format", "json"])
        .output()
        .unwrap();
    let took = t.elapsed();
    stuck.kill().unwrap();
    stuck.wait().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["snapshot"]["nvml"]["status"], "stuck_earlier");
    assert_eq!(v["snapshot"]["nvml"]["stuck_pid"], stuck.id());
    let init = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "nvml.init")
        .unwrap();
    assert!(init["value"]
        .as_str()
        .unwrap()
        .starts_with("driver unresponsive"));
    assert!(took < Duration::from_secs(5));
}

#[test]
fn bad_timeout_is_refused() {
    let run = tempfile::tempdir().unwrap();
    let o = gpuhost(run.path())
        .args(["status", "--timeout", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--timeout"));
}
