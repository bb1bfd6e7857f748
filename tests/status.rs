//! `gpuhost status` integration tests (issue 5), on the real binary.
//!
//! CI machines (and the development machine) have no NVIDIA library: `status` must say so,
//! still run the driver-free checks and exit 3. The real H200's answers are replayed from
//! tests/fixtures/status/ with the hidden `--from-snapshot`; crafted sysfs trees go in through
//! `GPUHOST_STATUS_ROOT`; a hung driver is stood in for by `GPUHOST_PROBE_DELAY_MS`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "support/status.rs"]
mod support;
#[path = "world/mod.rs"]
mod world;
use support::{fixtures, gpuhost, hgx};
use world::stdout;

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
    // node_exporter's textfile directory exists; gpuhost does not create it.
    std::fs::create_dir_all(run.path().join("textfile")).unwrap();
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
    assert!(text.contains("gpuhost_gpu_temperature_celsius{uuid=\"GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27\",pci_bus_id=\"00000000:00:06.0\"} 36"));
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
fn sweep_profile_times_each_part_of_n_sweeps_as_json() {
    // An install root with one NVIDIA function: its config space is read whole and by its head.
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("sys/bus/pci/devices/0000:3b:00.0");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
    std::fs::write(dev.join("device"), "0x2335\n").unwrap();
    std::fs::write(dev.join("class"), "0x030200\n").unwrap();
    std::fs::write(dev.join("config"), [0xde, 0x10, 0x35, 0x23]).unwrap();
    let run = tempfile::tempdir().unwrap();
    let o = gpuhost(run.path())
        .args(["sweep-profile", "3"])
        .env("GPUHOST_STATUS_ROOT", root.path())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(p["sweeps"], 3, "{p:#}");
    assert_eq!(p["host"]["pci_functions"], 1, "{p:#}");
    for part in [
        "host_collect_ms",
        "pci_config_whole_ms",
        "pci_config_head_ms",
        "next_boot_ms",
        "system_ms",
        "kernel_log_ms",
        "kernel_log_follow_ms",
        "counters_load_ms",
    ] {
        assert_eq!(p["host"][part]["n"], 3, "host.{part}: {p:#}");
    }
    for part in ["evaluate_us", "table_us", "prometheus_us", "json_us"] {
        assert_eq!(p["render"][part]["n"], 3, "render.{part}: {p:#}");
    }
    // Where NVML answers, its sweeps are timed both ways; where it does not, the reason.
    if p["nvml"]["status"] == "Ok" {
        assert_eq!(p["nvml"]["sweep_kept_ms"]["n"], 3, "{p:#}");
        assert_eq!(p["nvml"]["sweep_every_field_ms"]["n"], 3, "{p:#}");
    } else {
        assert!(p["nvml"]["error"].is_string(), "{p:#}");
    }
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
    // Stands for an earlier run's probe stuck in the driver: a real probe, held 30 s by the
    // hung-driver drill.
    let mut stuck = gpuhost(run.path())
        .args(["nvml-probe"])
        .env("GPUHOST_PROBE_DELAY_MS", "30000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(
        run.path().join("nvml-probe.pid"),
        format!("{} {}\n", stuck.id(), start_time(stuck.id())),
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

/// The start time of process `pid` (clock ticks after boot, field 22 of /proc/PID/stat): what
/// a stuck-probe record holds beside the pid.
fn start_time(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string()
}

/// A stuck-probe record naming a live process that is no gpuhost probe (pid 1, with its true
/// start time) is stale: no "driver unresponsive", and the record goes (issue 34, item 6).
#[test]
fn a_probe_record_naming_another_program_is_not_a_stuck_probe() {
    let run = tempfile::tempdir().unwrap();
    let record = run.path().join("nvml-probe.pid");
    std::fs::write(&record, format!("1 {}\n", start_time(1))).unwrap();
    let o = gpuhost(run.path())
        .args(["status", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_ne!(v["snapshot"]["nvml"]["status"], "stuck_earlier", "{v:#}");
    assert!(!record.exists(), "the record naming pid 1 was kept");
}

/// FIFOs where the run directory's records are (`counters.json`, `nvml-probe.pid`,
/// `boot-cache.json`), as root's `/run/gpuhost` could hold them: each is opened without
/// blocking and passed over, and `status` answers at once (issue 34, item 6). (`counters.json`
/// as a link to `/dev/zero` is the unit test of `read_own_file`: reading it unbounded, as
/// before, would fill the memory of the machine that runs the test.)
#[test]
fn fifos_in_the_run_directory_are_not_read() {
    let run = tempfile::tempdir().unwrap();
    for f in ["counters.json", "nvml-probe.pid", "boot-cache.json"] {
        assert!(Command::new("mkfifo")
            .arg(run.path().join(f))
            .status()
            .unwrap()
            .success());
    }
    let mut c = gpuhost(run.path());
    c.args(["status", "--format", "json"]);
    let o = support::output_within(c, 20);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_ne!(v["snapshot"]["nvml"]["status"], "stuck_earlier", "{v:#}");
}

/// A non-root `status` without `$XDG_RUNTIME_DIR` keeps its records in `/tmp/gpuhost-<uid>`.
/// Another user who made that directory first, open to all, with a FIFO as `counters.json`
/// and a record naming pid 1, neither hangs the caller nor makes it CRITICAL: the directory is
/// refused at once (exit 3, one UNKNOWN line naming it). Once it is gone, the caller makes
/// its own, 0700 even under umask 000 (issue 34, item 6).
#[test]
fn a_run_directory_another_user_made_is_refused_and_ours_is_private() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    // A uid of no one else's (the test runs as root, which plays the other user).
    let uid = 61_034;
    let dir = PathBuf::from(format!("/tmp/gpuhost-{uid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(Command::new("mkfifo")
        .arg(dir.join("counters.json"))
        .status()
        .unwrap()
        .success());
    std::fs::write(dir.join("nvml-probe.pid"), format!("1 {}\n", start_time(1))).unwrap();
    let bin = support::gpuhost_for_others();
    let caller = || {
        let mut c = Command::new("sh");
        c.args(["-c", "umask 000; exec \"$0\" status"])
            .arg(bin.gpuhost())
            .env_remove("GPUHOST_RUN_DIR")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("GPUHOST_STATUS_ROOT")
            .env_remove("GPUHOST_PROBE_DELAY_MS")
            .current_dir("/")
            .uid(uid)
            .gid(uid);
        c
    };
    let o = support::output_within(caller(), 20);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with(&format!(
            "gpuhost status UNKNOWN: the run directory {} is owned by uid 0",
            dir.display()
        )),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let o = support::output_within(caller(), 20);
    let m = std::fs::symlink_metadata(&dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(m.is_dir(), "{o:?}");
    assert_eq!((m.uid(), m.mode() & 0o7777), (uid, 0o700), "{o:?}");
}

#[test]
fn bad_timeout_is_refused() {
    let run = tempfile::tempdir().unwrap();
    let o = gpuhost(run.path())
        .args(["status", "--timeout", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("--timeout") && err.contains("more than 0"),
        "{err}"
    );
}

#[test]
fn a_profile_typo_is_an_error_not_ignored() {
    let run = tempfile::tempdir().unwrap();
    let o = gpuhost(run.path())
        .args(["status", "--profile", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("--profile nosuch") && err.contains("unknown profile"),
        "{err}"
    );
}

#[test]
fn a_textfile_in_a_missing_directory_is_refused_and_nothing_is_created() {
    let run = tempfile::tempdir().unwrap();
    let missing = run.path().join("no/such/dir");
    let o = gpuhost(run.path())
        .args(["status", "--textfile"])
        .arg(missing.join("gpu.prom"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("does not exist"), "{err}");
    assert!(!run.path().join("no").exists(), "the directory was created");
    // A monitor reading stdout (Nagios, a cron mail) still gets its UNKNOWN line, and
    // node-problem-detector its one line of at most 80 bytes and its UNKNOWN code, 2.
    assert!(
        stdout(&o).starts_with("gpuhost status UNKNOWN: --textfile: the directory"),
        "{}",
        stdout(&o)
    );
    let o = gpuhost(run.path())
        .args(["status", "--format", "npd", "--textfile"])
        .arg(missing.join("gpu.prom"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let line = stdout(&o);
    assert!(
        line.starts_with("UNKNOWN --textfile: the directory"),
        "{line}"
    );
    assert!(line.trim_end().len() <= 80, "{line}");
}

/// `--textfile` naming a link (`/dev/stdout` is one, to `/proc/self/fd/1`) or a FIFO is refused
/// (exit 3, one UNKNOWN line) and the link or FIFO stays what it was: the text is written
/// beside the path and renamed over it, which would turn `/dev/stdout` into a regular file
/// for the whole host (issue 34, item 7).
#[test]
fn a_textfile_that_is_a_link_or_a_fifo_is_refused_and_left_as_it_was() {
    use std::os::unix::fs::FileTypeExt;
    let run = tempfile::tempdir().unwrap();
    let link = run.path().join("stdout");
    std::os::unix::fs::symlink("/proc/self/fd/1", &link).unwrap();
    let fifo = run.path().join("fifo.prom");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for (path, what) in [(&link, "a link"), (&fifo, "a FIFO")] {
        let o = gpuhost(run.path())
            .args(["status", "--textfile"])
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(3), "{o:?}");
        let out = stdout(&o);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.starts_with("gpuhost status UNKNOWN: --textfile") && out.contains(what),
            "{out}"
        );
    }
    let l = std::fs::symlink_metadata(&link).unwrap();
    assert!(l.file_type().is_symlink(), "the link became {l:?}");
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("/proc/self/fd/1")
    );
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}

// ---------------------------------------------------------------------------------------------
// Multi-GPU (issue 7): an 8-GPU HGX H200, crafted from the real single-H200 capture so every
// field keeps the shape the real driver gave, and failure variants crafted from that.

/// PCI buses of the 8 GPUs and the 4 NVSwitches (a DGX/HGX H100-style layout).
const HGX_GPU_BUSES: [&str; 8] = ["1b", "43", "52", "61", "9d", "c3", "d1", "df"];
const HGX_SWITCH_BUSES: [&str; 4] = ["05", "06", "07", "08"];
/// Healthy fabric health mask: degraded bandwidth false (2), route recovery false (2 << 2),
/// route unhealthy false (2 << 4), access-timeout recovery false (2 << 6), configuration
/// correct (1 << 8). To be confirmed by a real capture (bench/MULTI-GPU.md).
const HGX_HEALTH_MASK: u64 = 2 | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8);

/// The 8-GPU HGX H200 snapshot, derived from the real capture `real` (h200-snapshot.json):
/// GPU i is the real GPU with bus `HGX_GPU_BUSES[i]`, UUID's last byte + i (GPU 0 keeps the
/// real UUID), 18 active NVLinks with zero counters and a registered fabric; 4 NVSwitches
/// `10de:22a3` are the real GPU's PCI entry with the NVSwitch's ids (link attributes unknown:
/// null); systemd, Docker and Fabric Manager at the driver's version are present.
fn hgx_from_real(real: &serde_json::Value) -> serde_json::Value {
    use serde_json::json;
    let mut s = real.clone();
    let driver = real["nvml"]["driver_version"].as_str().unwrap().to_string();
    let pci0 = real["host"]["pci"][0].clone();
    let mut pci = Vec::new();
    for b in HGX_SWITCH_BUSES {
        let mut d = pci0.clone();
        d["address"] = json!(format!("0000:{b}:00.0"));
        d["kind"] = json!("nv_switch");
        d["device_id"] = json!("0x22a3");
        d["class"] = json!("0x068000");
        d["driver"] = json!("nvidia-nvswitch");
        d["config_head"] = json!("de10a322");
        for k in [
            "current_link_speed",
            "max_link_speed",
            "current_link_width",
            "max_link_width",
        ] {
            d[k] = serde_json::Value::Null;
        }
        pci.push(d);
    }
    for b in HGX_GPU_BUSES {
        let mut d = pci0.clone();
        d["address"] = json!(format!("0000:{b}:00.0"));
        pci.push(d);
    }
    s["host"]["pci"] = json!(pci);
    s["host"]["docker_daemon_json"] =
        json!({"present": true, "nvidia_runtime": true, "default_runtime": null});
    s["services"] = json!({
        "docker": "active",
        "nvidia_persistenced": "active",
        "nvidia_fabricmanager": "active",
        "fabricmanager_version": {"package": "nvidia-fabricmanager", "version": driver},
    });
    let g0 = real["nvml"]["gpus"][0].clone();
    let uuid0 = g0["uuid"]["value"].as_str().unwrap().to_string();
    let (stem, last) = uuid0.split_at(uuid0.len() - 2);
    let last = u8::from_str_radix(last, 16).unwrap();
    let links: Vec<serde_json::Value> = (0..18)
        .map(|l| {
            json!({"link": l, "active": true, "replay_errors": 0, "recovery_errors": 0,
                   "crc_flit_errors": 0, "crc_data_errors": 0})
        })
        .collect();
    let gpus: Vec<serde_json::Value> = HGX_GPU_BUSES
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut g = g0.clone();
            g["index"] = json!(i);
            g["uuid"] = json!({"value": format!("{stem}{:02x}", last.wrapping_add(i as u8))});
            g["pci_bus_id"] = json!({"value": format!("00000000:{}:00.0", b.to_uppercase())});
            g["nvlinks"] = json!({"value": links});
            g["fabric"] = json!({"value": {"state": 3, "status": 0, "clique_id": 0,
                "cluster_uuid": "00000000000000000000000000000000",
                "health_mask": HGX_HEALTH_MASK}});
            g["minor_number"] = json!({"value": i});
            g
        })
        .collect();
    s["nvml"]["device_count"] = json!(8);
    s["nvml"]["gpus"] = json!(gpus);
    // The real node's /dev entries, one /dev/nvidia<N> per GPU.
    let node0 = real["host"]["dev_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["path"] == "/dev/nvidia0")
        .unwrap()
        .clone();
    let mut nodes: Vec<serde_json::Value> = real["host"]["dev_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["path"] != "/dev/nvidia0")
        .cloned()
        .collect();
    for i in 0..HGX_GPU_BUSES.len() {
        let mut n = node0.clone();
        n["path"] = json!(format!("/dev/nvidia{i}"));
        nodes.push(n);
    }
    s["host"]["dev_nodes"] = json!(nodes);
    s
}

/// `gpuhost status --format json --from-snapshot` on `snap` (with `extra` args): exit code and
/// the report.
fn judge_snapshot(snap: &serde_json::Value, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let run = tempfile::tempdir().unwrap();
    let f = run.path().join("snap.json");
    std::fs::write(&f, serde_json::to_string_pretty(snap).unwrap()).unwrap();
    let o = gpuhost(run.path())
        .args(["status", "--format", "json", "--from-snapshot"])
        .arg(&f)
        .args(extra)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o2 = gpuhost(run.path())
        .args(["status", "--format", "prometheus", "--from-snapshot"])
        .arg(&f)
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), o2.status.code());
    (o.status.code().unwrap(), v, stdout(&o2))
}

fn only_problem<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    let all: Vec<&serde_json::Value> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["severity"] != "OK" && c["severity"] != "N/A")
        .collect();
    assert_eq!(all.len(), 1, "expected one problem ({id}), got {all:#?}");
    assert_eq!(all[0]["id"], id);
    all[0]
}

fn uuid_of(v: &serde_json::Value, i: usize) -> String {
    v["nvml"]["gpus"][i]["uuid"]["value"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn hgx_fixture_is_derived_from_the_real_h200_capture() {
    let real: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("h200-snapshot.json")).unwrap(),
    )
    .unwrap();
    let want = hgx_from_real(&real);
    let path = fixtures().join("hgx-h200x8-snapshot.json");
    if std::env::var_os("GPUHOST_UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&want).unwrap() + "\n").unwrap();
    }
    assert_eq!(
        hgx(),
        want,
        "regenerate with GPUHOST_UPDATE_FIXTURES=1 cargo test -p gpuhost --test status"
    );
    // Every field the real GPU had, with the same reading shapes.
    let g0 = &real["nvml"]["gpus"][0];
    for g in want["nvml"]["gpus"].as_array().unwrap() {
        let keys = |x: &serde_json::Value| {
            x.as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<Vec<String>>()
        };
        assert_eq!(keys(g), keys(g0));
    }
    assert_eq!(uuid_of(&want, 0), uuid_of(&real, 0));
    let mut uuids: Vec<String> = (0..8).map(|i| uuid_of(&want, i)).collect();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 8);
}

#[test]
fn hgx_h200x8_healthy_is_ok_in_every_check() {
    let (code, v, prom) = judge_snapshot(&hgx(), &["--expect-gpus", "8"]);
    let bad: Vec<&serde_json::Value> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["severity"] != "OK" && c["severity"] != "N/A")
        .collect();
    assert_eq!(code, 0, "{bad:#?}");
    let by = |id: &str| -> Vec<&serde_json::Value> {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["id"] == id)
            .collect()
    };
    assert_eq!(by("gpu.nvlink").len(), 8);
    for c in by("gpu.nvlink") {
        assert_eq!(c["severity"], "OK");
        assert_eq!(
            c["value"],
            "18/18 links active; errors since the driver loaded: replay 0, recovery 0, CRC flit 0, CRC data 0; first reading, rates from the next run"
        );
    }
    for c in by("gpu.fabric") {
        assert_eq!(c["severity"], "OK");
        assert!(c["value"]
            .as_str()
            .unwrap()
            .starts_with("fabric registered (state completed, status success"));
    }
    assert_eq!(
        by("gpu.count")[0]["value"],
        "NVML 8, PCI 8, expected 8 (--expect-gpus)"
    );
    assert_eq!(by("services.fabricmanager")[0]["severity"], "OK");
    assert_eq!(
        by("services.fabricmanager_version")[0]["value"],
        "nvidia-fabricmanager 580.159.04 = driver 580.159.04"
    );
    assert!(by("pci.devices")[0]["value"]
        .as_str()
        .unwrap()
        .contains("8 NVIDIA GPU(s), 4 NVSwitch(es)"));
    // Series: per GPU and link.
    let u7 = uuid_of(&hgx(), 7);
    for want in [
        format!("gpuhost_gpu_nvlink_active{{uuid=\"{u7}\",pci_bus_id=\"00000000:DF:00.0\",link=\"17\"}} 1"),
        format!("gpuhost_gpu_nvlink_errors{{uuid=\"{u7}\",pci_bus_id=\"00000000:DF:00.0\",link=\"17\",error=\"crc_flit\"}} 0"),
        format!("gpuhost_gpu_fabric_state{{uuid=\"{u7}\",pci_bus_id=\"00000000:DF:00.0\"}} 3"),
        format!("gpuhost_gpu_fabric_status{{uuid=\"{u7}\",pci_bus_id=\"00000000:DF:00.0\"}} 0"),
        format!("gpuhost_check_status{{check=\"gpu.nvlink\",uuid=\"{u7}\",pci_bus_id=\"00000000:DF:00.0\"}} 0"),
        "gpuhost_gpus{source=\"nvml\"} 8".to_string(),
        "gpuhost_gpus{source=\"pci\"} 8".to_string(),
        "gpuhost_nvswitches 4".to_string(),
        "gpuhost_status 0".to_string(),
    ] {
        assert!(prom.contains(&want), "no {want} in\n{prom}");
    }
    assert_eq!(prom.matches("gpuhost_gpu_nvlink_active{").count(), 8 * 18);
}

#[test]
fn hgx_one_nvlink_down_is_critical_for_that_gpu() {
    let mut s = hgx();
    s["nvml"]["gpus"][3]["nvlinks"]["value"][7]["active"] = false.into();
    let (code, v, prom) = judge_snapshot(&s, &[]);
    assert_eq!(code, 2);
    let c = only_problem(&v, "gpu.nvlink");
    assert_eq!(c["severity"], "CRITICAL");
    assert_eq!(c["gpu"]["index"], 3);
    assert_eq!(c["gpu"]["uuid"], uuid_of(&s, 3));
    assert_eq!(c["gpu"]["pci_bus_id"], "00000000:61:00.0");
    assert_eq!(
        c["value"],
        "17/18 links active; errors since the driver loaded: replay 0, recovery 0, CRC flit 0, CRC data 0; down: link 7; first reading, rates from the next run"
    );
    let hint = c["hint"].as_str().unwrap();
    assert!(hint.starts_with("drain the node"), "{hint}");
    assert!(hint.contains("nvidia-smi nvlink -s -i 3"), "{hint}");
    let u = uuid_of(&s, 3);
    assert!(prom.contains(&format!(
        "gpuhost_gpu_nvlink_active{{uuid=\"{u}\",pci_bus_id=\"00000000:61:00.0\",link=\"7\"}} 0"
    )));
    assert!(prom.contains(&format!(
        "gpuhost_check_status{{check=\"gpu.nvlink\",uuid=\"{u}\",pci_bus_id=\"00000000:61:00.0\"}} 2"
    )));
}

#[test]
fn hgx_nvlink_error_counters_are_a_warning_naming_the_link() {
    let mut s = hgx();
    let l = &mut s["nvml"]["gpus"][5]["nvlinks"]["value"][2];
    l["replay_errors"] = 12.into();
    l["recovery_errors"] = 1.into();
    l["crc_flit_errors"] = 3.into();
    // A first reading: the totals are shown, never judged.
    let (code, v, prom) = judge_snapshot(&s, &[]);
    assert_eq!(code, 0);
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "gpu.nvlink" && c["gpu"]["index"] == 5)
        .unwrap();
    assert_eq!(c["severity"], "OK");
    assert_eq!(
        c["value"],
        "18/18 links active; errors since the driver loaded: replay 12, recovery 1, CRC flit 3, CRC data 0; first reading, rates from the next run"
    );
    let u = uuid_of(&s, 5);
    for (err, n) in [
        ("replay", 12),
        ("recovery", 1),
        ("crc_flit", 3),
        ("crc_data", 0),
    ] {
        let want = format!("gpuhost_gpu_nvlink_errors{{uuid=\"{u}\",pci_bus_id=\"00000000:C3:00.0\",link=\"2\",error=\"{err}\"}} {n}");
        assert!(prom.contains(&want), "no {want}");
    }
    // A minute earlier link 2 had 10 replays and no recovery: 3 new ones in 60 s is a rate
    // above DCGM's (any new replay or recovery error), CRC 3 in 60 s is not.
    s["collected_at_ms"] = 1_000_060_000u64.into();
    s["previous"] = serde_json::json!({
        "boot_id": null, "at_ms": 1_000_000_000u64,
        "gpus": {u.clone(): {"pcie_replays": null, "nvlink": {"2": {
            "replay": 10, "recovery": 0, "crc_flit": 3, "crc_data": 0}}}}
    });
    let (code, v, _) = judge_snapshot(&s, &[]);
    assert_eq!(code, 1);
    let c = only_problem(&v, "gpu.nvlink");
    assert_eq!(c["severity"], "WARNING");
    assert_eq!(c["gpu"]["uuid"], u);
    assert_eq!(c["gpu"]["pci_bus_id"], "00000000:C3:00.0");
    assert!(c["value"].as_str().unwrap().ends_with(
        "; over 60 s: link 2 replay+recovery 3.0/min (> 0, status.nvlink_replay_recovery_per_minute_max)"
    ), "{}", c["value"]);
    assert!(c["hint"]
        .as_str()
        .unwrap()
        .contains("nvidia-smi nvlink -e -i 5"));
    // A profile may allow some.
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("p.toml");
    std::fs::write(
        &prof,
        "extends = \"ol8-uek\"\n[status]\nnvlink_replay_recovery_per_minute_max = 5.0\n",
    )
    .unwrap();
    let (code, _, _) = judge_snapshot(&s, &["--profile", prof.to_str().unwrap()]);
    assert_eq!(code, 0);
}

#[test]
fn hgx_fabric_not_yet_registered_on_one_gpu() {
    // In progress: a WARNING (normal for a minute after boot).
    let mut s = hgx();
    s["nvml"]["gpus"][6]["fabric"]["value"]["state"] = 2.into();
    let (code, v, prom) = judge_snapshot(&s, &[]);
    assert_eq!(code, 1);
    let c = only_problem(&v, "gpu.fabric");
    assert_eq!(c["severity"], "WARNING");
    assert_eq!(c["value"], "fabric registration in progress");
    assert_eq!(c["gpu"]["uuid"], uuid_of(&s, 6));
    assert_eq!(c["gpu"]["pci_bus_id"], "00000000:D1:00.0");
    assert!(c["hint"].as_str().unwrap().contains("nvidia-fabricmanager"));
    let u = uuid_of(&s, 6);
    assert!(prom.contains(&format!(
        "gpuhost_gpu_fabric_state{{uuid=\"{u}\",pci_bus_id=\"00000000:D1:00.0\"}} 2"
    )));
    // Not started: CRITICAL (CUDA fails on that GPU).
    s["nvml"]["gpus"][6]["fabric"]["value"]["state"] = 1.into();
    let (code, v, _) = judge_snapshot(&s, &[]);
    assert_eq!(code, 2);
    let c = only_problem(&v, "gpu.fabric");
    assert_eq!(c["severity"], "CRITICAL");
    assert_eq!(c["value"], "fabric registration not started");
    assert_eq!(c["gpu"]["pci_bus_id"], "00000000:D1:00.0");
    assert!(c["hint"]
        .as_str()
        .unwrap()
        .contains("systemctl enable --now nvidia-fabricmanager"));
}

#[test]
fn hgx_fabric_completed_with_a_failure_status_is_critical() {
    let mut s = hgx();
    s["nvml"]["gpus"][0]["fabric"]["value"]["status"] = 999.into();
    let (code, v, prom) = judge_snapshot(&s, &[]);
    assert_eq!(code, 2);
    let c = only_problem(&v, "gpu.fabric");
    assert_eq!(c["severity"], "CRITICAL");
    assert_eq!(
        c["value"],
        "fabric registration completed with a failure (NVML status 999: Unknown)"
    );
    assert_eq!(c["gpu"]["uuid"], uuid_of(&s, 0));
    assert_eq!(c["gpu"]["pci_bus_id"], "00000000:1B:00.0");
    assert!(c["hint"].as_str().unwrap().contains("nvidia-smi -r -i 0"));
    let u = uuid_of(&s, 0);
    assert!(prom.contains(&format!(
        "gpuhost_gpu_fabric_status{{uuid=\"{u}\",pci_bus_id=\"00000000:1B:00.0\"}} 999"
    )));
}

#[test]
fn hgx_nvml_sees_7_of_8_gpus_on_pci() {
    let mut s = hgx();
    s["nvml"]["gpus"].as_array_mut().unwrap().remove(4);
    s["nvml"]["device_count"] = 7.into();
    // NVML renumbers: the GPUs after the missing one move down.
    for (i, g) in s["nvml"]["gpus"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        g["index"] = i.into();
    }
    let (code, v, prom) = judge_snapshot(&s, &[]);
    assert_eq!(code, 2);
    let c = only_problem(&v, "gpu.count");
    assert_eq!(c["severity"], "CRITICAL");
    assert_eq!(
        c["value"],
        "NVML 7, PCI 8; not seen by NVML: 00000000:9D:00.0"
    );
    assert!(c["hint"]
        .as_str()
        .unwrap()
        .starts_with("a GPU on PCI is not visible to the driver"));
    assert!(prom.contains("gpuhost_gpus{source=\"nvml\"} 7"));
    assert!(prom.contains("gpuhost_gpus{source=\"pci\"} 8"));
    assert!(prom.contains("gpuhost_check_status{check=\"gpu.count\"} 2"));
}

#[test]
fn hgx_fabric_manager_inactive_or_at_another_version() {
    let mut s = hgx();
    s["services"]["nvidia_fabricmanager"] = "inactive".into();
    let (code, v, _) = judge_snapshot(&s, &[]);
    assert_eq!(code, 2);
    let c = only_problem(&v, "services.fabricmanager");
    assert_eq!(c["severity"], "CRITICAL");
    assert_eq!(
        c["value"],
        "nvidia-fabricmanager inactive on a node with 4 NVSwitch(es)"
    );
    assert!(c["hint"]
        .as_str()
        .unwrap()
        .starts_with("`systemctl enable --now nvidia-fabricmanager`"));

    let mut s = hgx();
    s["services"]["fabricmanager_version"]["version"] = "580.95.05".into();
    let (code, v, prom) = judge_snapshot(&s, &[]);
    assert_eq!(code, 2);
    let c = only_problem(&v, "services.fabricmanager_version");
    assert_eq!(c["severity"], "CRITICAL");
    assert_eq!(
        c["value"],
        "nvidia-fabricmanager 580.95.05, driver 580.159.04: Fabric Manager must be the driver's exact version"
    );
    assert!(c["hint"]
        .as_str()
        .unwrap()
        .starts_with("install nvidia-fabricmanager-580.159.04"));
    assert!(prom.contains("gpuhost_check_status{check=\"services.fabricmanager_version\"} 2"));

    // Not installed at all.
    let mut s = hgx();
    s["services"]["fabricmanager_version"] = serde_json::json!({"package": null, "version": null});
    let (code, v, _) = judge_snapshot(&s, &[]);
    assert_eq!(code, 2);
    assert_eq!(
        only_problem(&v, "services.fabricmanager_version")["value"],
        "Fabric Manager not installed (nvidia-fabricmanager not found)"
    );
}

/// A profile file extending a built-in one with a `[status]` section.
fn profile_with(dir: &Path, status: &str) -> PathBuf {
    let p = dir.join("hgx.toml");
    std::fs::write(&p, format!("extends = \"ol8-uek\"\n\n[status]\n{status}\n")).unwrap();
    p
}

#[test]
fn profile_status_keys_drive_the_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    // expect_driver_version overrides; another version than the node's is a WARNING.
    let p = profile_with(
        dir.path(),
        "expect_gpus = 8\nexpect_driver_version = \"580.95.05\"",
    );
    let (code, v, _) = judge_snapshot(&hgx(), &["--profile", p.to_str().unwrap()]);
    assert_eq!(code, 1);
    let c = only_problem(&v, "driver.version");
    assert_eq!(c["severity"], "WARNING");
    assert!(c["value"]
        .as_str()
        .unwrap()
        .starts_with("driver 580.159.04, profile "));
    assert!(c["value"]
        .as_str()
        .unwrap()
        .ends_with("(status.expect_driver_version) expects 580.95.05"));
    assert_eq!(v["expect"]["driver_version"], "580.95.05");
    assert_eq!(v["expect"]["gpus"], 8);

    // require_docker = false: Docker and its runtime are n/a, even when absent.
    let mut s = hgx();
    s["services"]["docker"] = "inactive".into();
    s["host"]["docker_daemon_json"] =
        serde_json::json!({"present": false, "nvidia_runtime": false, "default_runtime": null});
    let (code, _, _) = judge_snapshot(&s, &[]);
    assert_eq!(code, 1, "Docker is required by default");
    let p = profile_with(dir.path(), "require_docker = false");
    let (code, v, _) = judge_snapshot(&s, &["--profile", p.to_str().unwrap()]);
    assert_eq!(code, 0);
    for c in v["checks"].as_array().unwrap() {
        if c["id"] == "services.docker" || c["id"] == "services.nvidia_runtime" {
            assert_eq!(c["severity"], "N/A");
        }
    }

    // require_fabric_manager = false on an NVSwitch node: not judged.
    let mut s = hgx();
    s["services"]["nvidia_fabricmanager"] = "inactive".into();
    let p = profile_with(dir.path(), "require_fabric_manager = false");
    let (code, _, _) = judge_snapshot(&s, &["--profile", p.to_str().unwrap()]);
    assert_eq!(code, 0);
    // require_fabric_manager = true on the single-GPU H200 (no NVSwitch): judged; that VM had
    // no systemd, so only services.state speaks (UNKNOWN, exit 3 as before).
    let real: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("h200-snapshot.json")).unwrap(),
    )
    .unwrap();
    let mut s = real.clone();
    s["services"] = serde_json::json!({"docker": "active", "nvidia_persistenced": "active",
        "nvidia_fabricmanager": "inactive"});
    s["host"]["docker_daemon_json"] =
        serde_json::json!({"present": true, "nvidia_runtime": true, "default_runtime": null});
    let (code, _, _) = judge_snapshot(&s, &[]);
    assert_eq!(code, 0, "no NVSwitch: Fabric Manager not required");
    let p = profile_with(dir.path(), "require_fabric_manager = true");
    let (code, v, _) = judge_snapshot(&s, &["--profile", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_eq!(
        only_problem(&v, "services.fabricmanager")["value"],
        "nvidia-fabricmanager inactive required by the profile"
    );
}

#[test]
fn hgx_problem_lines_name_the_gpu_in_the_table() {
    let mut s = hgx();
    s["nvml"]["gpus"][3]["nvlinks"]["value"][7]["active"] = false.into();
    let run = tempfile::tempdir().unwrap();
    let f = run.path().join("snap.json");
    std::fs::write(&f, serde_json::to_string(&s).unwrap()).unwrap();
    let o = gpuhost(run.path())
        .args(["status", "--from-snapshot"])
        .arg(&f)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    let first = out.lines().next().unwrap();
    assert!(first.starts_with("gpuhost status CRITICAL: "), "{first}");
    assert!(first.contains("down: link 7"), "{first}");
    let line = out
        .lines()
        .find(|l| l.starts_with("CRITICAL") && l.contains("nvlink"))
        .unwrap();
    assert!(line.contains("gpu3 61:00.0"), "{line}");
    // The summary says what it counts (checks) and how many rows the table shows them in.
    let rows = out
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with(' ') && !l.is_empty())
        .count();
    assert!(
        first.contains(" checks: ") && first.ends_with(&format!(" (in {rows} rows)")),
        "{first}\n{out}"
    );
}

// Issue 27: what cannot change within a boot is kept in <run dir>/boot-cache.json, keyed by
// boot id, driver and GPU UUID. No GPU here: the one-shot probe answers from a saved snapshot
// (`--nvml-fixture`: the file stands for what NVML would answer if asked), through the same
// forked probe and boot cache, with the key read under a crafted root.

/// A root with a boot id, a loaded driver's version line and `/sys/module/nvidia`.
fn boot_root(boot: &str, driver: &str) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    set_boot(root.path(), boot, driver);
    std::fs::create_dir_all(root.path().join("sys/module/nvidia")).unwrap();
    root
}

fn set_boot(root: &Path, boot: &str, driver: &str) {
    let r = root.join("proc/sys/kernel/random");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::write(r.join("boot_id"), format!("{boot}\n")).unwrap();
    let d = root.join("proc/driver/nvidia");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("version"),
        format!(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build\n"
        ),
    )
    .unwrap();
}

/// The real H200's NVML answer with GPU 0's UUID, VBIOS and temperature set, its InfoROM
/// validated now, written to `f`.
fn nvml_answer(f: &Path, uuid: &str, vbios: &str, temp: u32) {
    let text = std::fs::read_to_string(fixtures().join("h200-snapshot.json")).unwrap();
    let mut s: serde_json::Value = serde_json::from_str(&text).unwrap();
    let g = &mut s["nvml"]["gpus"][0];
    g["uuid"] = serde_json::json!({ "value": uuid });
    g["vbios_version"] = serde_json::json!({ "value": vbios });
    g["temperature_c"] = serde_json::json!({ "value": temp });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    g["inforom"]["value"]["checked_at"] = now.into();
    let tmp = f.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string(&s).unwrap()).unwrap();
    std::fs::rename(&tmp, f).unwrap();
}

/// The real H200's NVML answer as captured (its UUID and VBIOS, 36 °C), in `run/nvml.json`.
fn h200_answer(run: &Path) -> PathBuf {
    let answer = run.join("nvml.json");
    nvml_answer(
        &answer,
        "GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27",
        "96.00.A5.00.1A",
        36,
    );
    answer
}

/// One-shot `status --format json` under `root`, NVML answered by `answer`: GPU 0 and stderr.
fn one_shot(run: &Path, root: &Path, answer: &Path) -> (serde_json::Value, String) {
    let o = gpuhost(run)
        .args(["status", "--format", "json", "--nvml-fixture"])
        .arg(answer)
        .env("GPUHOST_STATUS_ROOT", root)
        .env("GPUHOST_LOG", "gpuhost_health=debug")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert!(v["snapshot"].get("served_by").is_none(), "{v:#}");
    (
        v["snapshot"]["nvml"]["gpus"][0].clone(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The one-shot answers once the probe has answered: the probe's exit, where the driver
/// releases NVML's objects (about 5 ms on an H200), is not waited for — here stood in for by
/// a 3 s sleep after the answer — and the report carries the probe's own peak RSS.
#[test]
fn the_one_shot_answers_without_waiting_for_the_probes_exit() {
    let run = tempfile::tempdir().unwrap();
    let root = boot_root("boot-1", "580.159.04");
    let answer = h200_answer(run.path());
    let t = Instant::now();
    let o = gpuhost(run.path())
        .args(["status", "--format", "json", "--nvml-fixture"])
        .arg(&answer)
        .env("GPUHOST_STATUS_ROOT", root.path())
        .env("GPUHOST_PROBE_EXIT_DELAY_MS", "3000")
        .output()
        .unwrap();
    let took = t.elapsed();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert!(
        took < Duration::from_millis(2500),
        "waited for the probe's exit: {took:?}"
    );
    let nvml = &v["snapshot"]["nvml"];
    assert_eq!(nvml["status"], "ok", "{nvml:#}");
    assert_eq!(nvml["gpus"][0]["temperature_c"]["value"], 36, "{nvml:#}");
    let rss = nvml["peak_rss_kib"].as_u64().unwrap_or(0);
    assert!(rss > 100, "the probe's peak RSS: {nvml:#}");
}

/// `status --wait-healthy` looks again and again in one process; each look's probe answers and
/// is left leaving (not waited for), and is reaped at a later look: however many looks, the
/// waiting process never holds more than the last few exited probes as zombies (without the
/// reaping: one per look, 38 of 40 looks measured).
#[test]
fn a_long_wait_healthy_reaps_the_probes_it_left_leaving() {
    let run = tempfile::tempdir().unwrap();
    let root = boot_root("boot-1", "580.159.04");
    let answer = h200_answer(run.path());
    // The crafted root has no systemd and no Docker: never healthy, so it looks to the end.
    let mut child = gpuhost(run.path())
        .args([
            "status",
            "--wait-healthy",
            "--timeout",
            "4",
            "--poll",
            "0.1",
        ])
        .arg("--nvml-fixture")
        .arg(&answer)
        .env("GPUHOST_STATUS_ROOT", root.path())
        .env("GPUHOST_PROBE_EXIT_DELAY_MS", "150")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut most = 0;
    while child.try_wait().unwrap().is_none() {
        let zombies = support::children_of(child.id())
            .iter()
            .filter(|&&(_, state)| state == 'Z')
            .count();
        most = most.max(zombies);
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let looks: u32 = err
        .lines()
        .find_map(|l| {
            l.split_once(" look(s)")
                .and_then(|(a, _)| a.rsplit_once('('))
        })
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| panic!("no look count: {err}"));
    assert!(looks >= 8, "only {looks} looks: {err}");
    assert!(
        most <= 3,
        "{most} exited probes left unreaped during {looks} looks"
    );
}

/// The program of the process whose environment holds `GPUHOST_RUN_DIR=<run>` (a test's own
/// run directory): the probe a one-shot left leaving.
fn leaving_probe(run: &Path) -> Option<PathBuf> {
    let marker = format!("GPUHOST_RUN_DIR={}\0", run.display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        e.file_name().to_str()?.parse::<u32>().ok()?;
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        String::from_utf8_lossy(&environ)
            .contains(&marker)
            .then(|| std::fs::read_link(e.path().join("exe")).ok())?
    })
}

/// A one-shot (`fixture`: answered from that NVML answer; else NVML itself, absent on CI)
/// whose probe is left leaving for 3 s (`GPUHOST_PROBE_EXIT_DELAY_MS`), run by `command`:
/// its NVML part, and the program of that probe.
fn one_shot_probe(mut command: Command, run: &Path, fixture: bool) -> (serde_json::Value, PathBuf) {
    let root = boot_root("boot-1", "580.159.04");
    if fixture {
        command.arg("--nvml-fixture").arg(h200_answer(run));
    }
    let o = command
        .env("GPUHOST_RUN_DIR", run)
        .env("GPUHOST_STATUS_ROOT", root.path())
        .env("GPUHOST_PROBE_EXIT_DELAY_MS", "3000")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let nvml = v["snapshot"]["nvml"].clone();
    // On CI, without an NVIDIA library, the probe answers just that; on a GPU machine it reads
    // the GPUs. Either way it answered, with its own peak RSS.
    assert!(
        ["ok", "no_library"].contains(&nvml["status"].as_str().unwrap_or("")),
        "{nvml:#}"
    );
    assert!(nvml["peak_rss_kib"].as_u64().unwrap_or(0) > 100, "{nvml:#}");
    let probe = leaving_probe(run).expect("the probe, still leaving");
    (nvml, probe)
}

/// The one-shot's probe is the small program `gpuhost-nvml-probe` found beside `gpuhost`
/// (what keeps its peak RSS near NVML's own, bench/RESULTS-status.md); without it, or when it
/// cannot start, a forked copy of `gpuhost` answers. A saved NVML answer (tests) is answered
/// by a forked copy too: the helper's code is what a live probe runs, and no more.
#[rstest::rstest]
#[case::the_helper_beside_gpuhost(None, false, "gpuhost-nvml-probe")]
#[case::no_helper_then_a_forked_copy(Some(""), false, "gpuhost")]
#[case::a_helper_that_cannot_start_then_a_forked_copy(
    Some("/nonexistent/gpuhost-nvml-probe"),
    false,
    "gpuhost"
)]
#[case::a_saved_answer_by_a_forked_copy(None, true, "gpuhost")]
fn the_one_shot_probe_is_the_small_helper_else_a_forked_copy(
    #[case] helper: Option<&str>,
    #[case] fixture: bool,
    #[case] program: &str,
) {
    let run = tempfile::tempdir().unwrap();
    let mut c = gpuhost(run.path());
    c.args(["status", "--fresh", "--format", "json"]);
    if let Some(h) = helper {
        c.env("GPUHOST_NVML_PROBE", h);
    }
    let t = Instant::now();
    let (nvml, probe) = one_shot_probe(c, run.path(), fixture);
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "waited for the probe's exit"
    );
    assert_eq!(
        probe
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(" (deleted)"),
        program,
        "{probe:?}"
    );
    if fixture {
        assert_eq!(nvml["gpus"][0]["temperature_c"]["value"], 36, "{nvml:#}");
    }
}

/// Installed as the RPM lays it out: `/usr/bin/gpuhost` finds its probe in
/// `/usr/libexec/gpuhost/`. The helper takes no argument: one that is given is refused in one
/// line, exit 2.
#[test]
fn the_helper_is_found_in_libexec_as_the_rpm_installs_it() {
    let prefix = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let bin = prefix.path().join("usr/bin");
    let libexec = prefix.path().join("usr/libexec/gpuhost");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&libexec).unwrap();
    let place = |from: &str, to: &Path| {
        std::fs::hard_link(from, to)
            .or_else(|_| std::fs::copy(from, to).map(drop))
            .unwrap()
    };
    place(env!("CARGO_BIN_EXE_gpuhost"), &bin.join("gpuhost"));
    let helper = libexec.join("gpuhost-nvml-probe");
    place(env!("CARGO_BIN_EXE_gpuhost-nvml-probe"), &helper);
    let run = tempfile::tempdir().unwrap();
    let like = gpuhost(run.path());
    let mut c = Command::new(bin.join("gpuhost"));
    for (k, v) in like.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.args(["status", "--fresh", "--format", "json"]);
    let (_, probe) = one_shot_probe(c, run.path(), false);
    assert_eq!(probe, helper);

    let o = Command::new(&helper).arg("--bogus").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot take --bogus") && err.contains("gpuhost status"),
        "{err}"
    );
}

fn kept(g: &serde_json::Value) -> bool {
    g["fixed_kept"] == true
}

#[test]
fn the_boot_cache_keeps_fixed_fields_until_a_new_boot_driver_module_or_gpu() {
    let run = tempfile::tempdir().unwrap();
    let root = boot_root("boot-1", "580.159.04");
    let answer = run.path().join("nvml.json");
    let uuid = "GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27";

    // First run of the boot: everything read, the fixed fields kept.
    nvml_answer(&answer, uuid, "96.00.A5.00.1A", 36);
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(!kept(&g), "{g:#}");
    assert_eq!(g["inforom"]["value"]["cached"], false);
    assert!(run.path().join("boot-cache.json").exists());

    // Next run: what can change is read again (temperature 41), what cannot is not (the
    // VBIOS stays the kept one although "NVML" would now say otherwise), nor the InfoROM.
    nvml_answer(&answer, uuid, "99.99.99.99.99", 41);
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(kept(&g), "{g:#}");
    assert_eq!(g["temperature_c"]["value"], 41);
    assert_eq!(g["vbios_version"]["value"], "96.00.A5.00.1A");
    assert_eq!(g["inforom"]["value"]["cached"], true);

    // A new boot: read afresh.
    set_boot(root.path(), "boot-2", "580.159.04");
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(!kept(&g), "{g:#}");
    assert_eq!(g["vbios_version"]["value"], "99.99.99.99.99");
    assert_eq!(g["inforom"]["value"]["cached"], false);
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(kept(&g), "kept again for the new boot: {g:#}");

    // A new driver (same boot): read afresh.
    nvml_answer(&answer, uuid, "96.00.A5.00.1B", 41);
    set_boot(root.path(), "boot-2", "580.162.01");
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(!kept(&g), "{g:#}");
    assert_eq!(g["vbios_version"]["value"], "96.00.A5.00.1B");

    // The same driver reloaded (a new /sys/module/nvidia): read afresh.
    nvml_answer(&answer, uuid, "96.00.A5.00.1C", 41);
    let m = root.path().join("sys/module/nvidia");
    std::fs::remove_dir(&m).unwrap();
    std::fs::create_dir_all(root.path().join("sys/module/x")).unwrap();
    std::fs::create_dir(&m).unwrap();
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(!kept(&g), "{g:#}");
    assert_eq!(g["vbios_version"]["value"], "96.00.A5.00.1C");

    // A swapped GPU (another UUID at index 0): read afresh, its own fields.
    nvml_answer(
        &answer,
        "GPU-0000aaaa-0000-0000-0000-000000000001",
        "96.00.B0.00.01",
        41,
    );
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(!kept(&g), "{g:#}");
    assert_eq!(g["vbios_version"]["value"], "96.00.B0.00.01");
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(kept(&g), "{g:#}");
}

#[test]
fn a_corrupt_or_foreign_boot_cache_is_ignored_with_a_debug_message() {
    use std::os::unix::fs::PermissionsExt;
    let run = tempfile::tempdir().unwrap();
    let root = boot_root("boot-1", "580.159.04");
    let answer = run.path().join("nvml.json");
    let uuid = "GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27";
    nvml_answer(&answer, uuid, "96.00.A5.00.1A", 36);
    let cache = run.path().join("boot-cache.json");

    std::fs::write(&cache, "{\"schema\":1,\"key\":").unwrap();
    let (g, err) = one_shot(run.path(), root.path(), &answer);
    assert!(!kept(&g), "{g:#}");
    assert!(err.contains("boot-cache.json ignored: unreadable"), "{err}");
    // Replaced by a good one, which the next run uses.
    let (g, _) = one_shot(run.path(), root.path(), &answer);
    assert!(kept(&g), "{g:#}");

    // Writable by others: not trusted (and the VBIOS it claims never shows).
    let text = std::fs::read_to_string(&cache).unwrap();
    std::fs::write(&cache, text.replace("96.00.A5.00.1A", "66.66.66.66.66")).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (g, err) = one_shot(run.path(), root.path(), &answer);
    assert!(!kept(&g), "{g:#}");
    assert_eq!(g["vbios_version"]["value"], "96.00.A5.00.1A");
    assert!(err.contains("ignored: writable by others"), "{err}");

    // Owned by another user (needs root to make one).
    if rustix_euid_is_root() {
        std::fs::write(&cache, text.replace("96.00.A5.00.1A", "66.66.66.66.66")).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).unwrap();
        let (g, err) = one_shot(run.path(), root.path(), &answer);
        assert!(!kept(&g), "{g:#}");
        assert_eq!(g["vbios_version"]["value"], "96.00.A5.00.1A");
        assert!(err.contains("owned by uid 65534"), "{err}");
    } else {
        eprintln!("not root: the foreign-owner case is not tried");
    }
}

fn rustix_euid_is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// monitoring-plugins' `negate`, a real Nagios plugin wrapper (Debian's
/// monitoring-plugins-basic), where installed.
fn nagios_negate() -> Option<PathBuf> {
    let found = [
        "/usr/lib/nagios/plugins/negate",
        "/usr/lib64/nagios/plugins/negate",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_none(),
            "negate (monitoring-plugins-basic) is not installed: ./scripts/deps.sh"
        );
    }
    found
}

/// A bad argument is UNKNOWN (3), never CRITICAL (2): a monitor would page for a typo. Read as
/// Nagios reads a plugin — the exit code, the first line of output — both directly and through
/// monitoring-plugins' `negate`, told to map UNKNOWN to WARNING and leave CRITICAL as it is.
#[test]
fn a_bad_argument_is_unknown_to_nagios() {
    let run = tempfile::tempdir().unwrap();
    let bad: [&[&str]; 4] = [
        &["status", "--no-such-flag"],
        &["status", "--format", "csv"],
        &["status", "--expect-gpus", "eight"],
        &["--log-level", "info", "status", "--timeout"],
    ];
    for args in bad {
        let o = gpuhost(run.path()).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(3), "{args:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.lines().next().unwrap_or("").starts_with("error:"),
            "{err}"
        );
        let out = stdout(&o);
        assert!(
            out.starts_with("gpuhost status UNKNOWN: bad arguments: "),
            "{args:?}: {out}"
        );
    }
    // node-problem-detector's UNKNOWN is 2.
    let o = gpuhost(run.path())
        .args(["status", "--format", "npd", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // Other commands keep clap's 2 for a usage error.
    let o = gpuhost(run.path())
        .args(["facts", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");

    let Some(negate) = nagios_negate() else {
        eprintln!("skipped the negate part: monitoring-plugins-basic is not installed");
        return;
    };
    let o = Command::new(&negate)
        .args([
            "-s", "-t", "30", "-o", "OK", "-w", "WARNING", "-c", "CRITICAL", "-u", "WARNING",
        ])
        .arg(env!("CARGO_BIN_EXE_gpuhost"))
        .args(["status", "--no-such-flag"])
        .env("GPUHOST_RUN_DIR", run.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "UNKNOWN mapped to WARNING: {o:?}");
    assert!(
        stdout(&o).starts_with("gpuhost status WARNING: bad arguments: unexpected argument"),
        "negate substitutes the state it mapped to: {}",
        stdout(&o)
    );
    // And a real CRITICAL still reads as CRITICAL through it (the 8-GPU fixture, 16 expected).
    let snap = fixtures().join("hgx-h200x8-snapshot.json");
    let o = Command::new(&negate)
        .args([
            "-t", "30", "-o", "OK", "-w", "WARNING", "-c", "CRITICAL", "-u", "WARNING",
        ])
        .arg(env!("CARGO_BIN_EXE_gpuhost"))
        .args(["status", "--expect-gpus", "16", "--from-snapshot"])
        .arg(&snap)
        .env("GPUHOST_RUN_DIR", run.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stdout(&o).starts_with("gpuhost status CRITICAL"),
        "{}",
        stdout(&o)
    );
}

/// `gpuhost status …` is parsed by the status command's own arguments (no whole command-line
/// tree: most of a served answer's 2 ms is gpuhost's start). It answers as the whole parser
/// does: the same report and exit code with `--log-level` before or after `status`, and help,
/// a mistake or an option before `status` still get the whole parser's help and messages.
#[test]
fn status_alone_parses_as_the_whole_command_line_does() {
    let run = tempfile::tempdir().unwrap();
    let snap = fixtures().join("h200-snapshot.json");
    let snap = snap.to_str().unwrap();
    let after = gpuhost(run.path())
        .args(["status", "--log-level", "error", "--format", "json"])
        .args(["--from-snapshot", snap, "--expect-gpus", "2"])
        .output()
        .unwrap();
    let before = gpuhost(run.path())
        .args(["--log-level", "error", "status", "--format", "json"])
        .args(["--from-snapshot", snap, "--expect-gpus", "2"])
        .output()
        .unwrap();
    assert_eq!(after.status.code(), Some(2), "{}", stdout(&after));
    assert_eq!(after.status.code(), before.status.code());
    let strip = |o: &std::process::Output| {
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["snapshot"]["collected_at_ms"] = serde_json::Value::Null;
        v
    };
    assert_eq!(strip(&after), strip(&before));
    let help = gpuhost(run.path())
        .args(["status", "--help"])
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(
        stdout(&help).contains("Usage: gpuhost status [OPTIONS]"),
        "{}",
        stdout(&help)
    );
    let bad = gpuhost(run.path())
        .args(["status", "--expect-gpus", "many"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(3), "{}", stdout(&bad));
    assert!(
        stdout(&bad).starts_with("gpuhost status UNKNOWN: bad arguments"),
        "{}",
        stdout(&bad)
    );
}

// ---- Grace: GB200 NVL72 compute tray, GH200 ------------------------------------------------
// No Grace machine could be had: these snapshots are the real H200 capture with the fields a
// Grace node answers differently set to NVIDIA's documented outputs (tests/fixtures/status/
// README.md names each source). They show what gpuhost makes of such answers; they are not
// captures of a Grace node.

/// A GB200 NVL72 compute tray (4 GB200 GPUs, `10de:2941`, no NVSwitch on its PCI) or a GH200
/// (1 GPU, `10de:2342`), derived from the real capture `real`.
fn grace_from_real(real: &serde_json::Value, gb200: bool) -> serde_json::Value {
    use serde_json::json;
    let mut s = real.clone();
    let (n, device, name, arch) = if gb200 {
        (4, "0x2941", "NVIDIA GB200", "Blackwell")
    } else {
        (1, "0x2342", "NVIDIA GH200 480GB", "Hopper")
    };
    // (PCI addresses illustrative: Grace nodes put each GPU in its own PCI domain.)
    let buses: Vec<String> = (0..n).map(|i| format!("000{}:01:00.0", 8 + i)).collect();
    let pci0 = real["host"]["pci"][0].clone();
    s["host"]["pci"] = json!(buses
        .iter()
        .map(|b| {
            let mut d = pci0.clone();
            d["address"] = json!(b);
            d["device_id"] = json!(device);
            d["config_head"] = json!(format!("de10{}{}", &device[4..6], &device[2..4]));
            d
        })
        .collect::<Vec<_>>());
    s["host"]["docker_daemon_json"] =
        json!({"present": true, "nvidia_runtime": true, "default_runtime": null});
    // GB200: nvidia-imex runs (no Fabric Manager: the switch trays manage the fabric), and
    // `nvidia-imex-ctl -N` reports an 18-tray domain UP, every node READY (the guide's output
    // format; an NVL72 rack has 18 compute trays). GH200: no IMEX.
    s["services"] = if gb200 {
        let nodes: Vec<serde_json::Value> = (0..18)
            .map(|i| json!({"index": i, "address": format!("10.136.206.{}", 48 + i), "state": "READY"}))
            .collect();
        json!({"docker": "active", "nvidia_persistenced": "active",
               "nvidia_fabricmanager": "inactive", "nvidia_imex": "active",
               "imex_domain": {"domain_state": "UP", "nodes": nodes}})
    } else {
        json!({"docker": "active", "nvidia_persistenced": "active",
               "nvidia_fabricmanager": "inactive", "nvidia_imex": "inactive"})
    };
    let g0 = real["nvml"]["gpus"][0].clone();
    let uuid0 = g0["uuid"]["value"].as_str().unwrap().to_string();
    let (stem, last) = uuid0.split_at(uuid0.len() - 2);
    let last = u8::from_str_radix(last, 16).unwrap();
    // C2C: GH200 10 links × 44.712 GB/s (`nvidia-smi c2c -s`); GB200 5 links (a GB200 test
    // fixture's count, not NVIDIA's document) at the same speed.
    let c2c_links: Vec<serde_json::Value> = (0..if gb200 { 5 } else { 10 })
        .map(|l| json!({"link": l, "active": true, "max_bandwidth_mbps": 44712}))
        .collect();
    let nvlinks: Vec<serde_json::Value> = (0..18)
        .map(|l| {
            json!({"link": l, "active": true, "replay_errors": 0, "recovery_errors": 0,
                   "crc_flit_errors": 0, "crc_data_errors": 0})
        })
        .collect();
    let gpus: Vec<serde_json::Value> = buses
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut g = g0.clone();
            g["index"] = json!(i);
            g["name"] = json!({"value": name});
            g["architecture"] = json!({"value": arch});
            g["uuid"] = json!({"value": format!("{stem}{:02x}", last.wrapping_add(i as u8))});
            let (dom, rest) = b.split_at(4);
            g["pci_bus_id"] = json!({"value": format!("0000{dom}{}", rest.to_uppercase())});
            g["minor_number"] = json!({"value": i});
            g["c2c"] = json!({"value": {"enabled": true, "links": c2c_links}});
            if gb200 {
                // 18 NVLink 5 links to the switch trays; the fabric as `nvidia-smi -q` shows a
                // registered GB200: Completed, Success, CliqueId 32766, a ClusterUUID, Healthy.
                g["nvlinks"] = json!({"value": nvlinks});
                g["fabric"] = json!({"value": {"state": 3, "status": 0, "clique_id": 32766,
                    "cluster_uuid": "3482beb4a3cd48a49b6ca6ba43bc59a4",
                    "health_mask": HGX_HEALTH_MASK, "health_summary": 1}});
            }
            g
        })
        .collect();
    s["nvml"]["device_count"] = json!(n);
    s["nvml"]["gpus"] = json!(gpus);
    let node0 = real["host"]["dev_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == "/dev/nvidia0")
        .unwrap()
        .clone();
    let mut nodes: Vec<serde_json::Value> = real["host"]["dev_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["path"] != "/dev/nvidia0")
        .cloned()
        .collect();
    for i in 0..n {
        let mut d = node0.clone();
        d["path"] = json!(format!("/dev/nvidia{i}"));
        nodes.push(d);
    }
    s["host"]["dev_nodes"] = json!(nodes);
    s
}

fn grace(gb200: bool) -> serde_json::Value {
    let file = if gb200 {
        "gb200-nvl72-tray-snapshot.json"
    } else {
        "gh200-snapshot.json"
    };
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(file)).unwrap()).unwrap()
}

#[test]
fn grace_fixtures_are_derived_from_the_real_h200_capture() {
    let real: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("h200-snapshot.json")).unwrap(),
    )
    .unwrap();
    for (gb200, file) in [
        (true, "gb200-nvl72-tray-snapshot.json"),
        (false, "gh200-snapshot.json"),
    ] {
        let want = grace_from_real(&real, gb200);
        if std::env::var_os("GPUHOST_UPDATE_FIXTURES").is_some() {
            std::fs::write(
                fixtures().join(file),
                serde_json::to_string_pretty(&want).unwrap() + "\n",
            )
            .unwrap();
        }
        assert_eq!(
            grace(gb200),
            want,
            "regenerate with GPUHOST_UPDATE_FIXTURES=1 cargo test -p gpuhost --test status"
        );
    }
}

fn checks<'a>(v: &'a serde_json::Value, id: &str) -> Vec<&'a serde_json::Value> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id)
        .collect()
}

/// A healthy GB200 NVL72 compute tray: every check OK or n/a; C2C up on each GPU, the fabric
/// registered with its clique, cluster and health summary, IMEX running and its domain UP, and
/// Fabric Manager not asked for (no NVSwitch on the tray's PCI).
#[test]
fn a_healthy_gb200_tray_is_ok_with_c2c_fabric_and_imex() {
    let (code, v, prom) = judge_snapshot(&grace(true), &["--expect-gpus", "4"]);
    let bad: Vec<&serde_json::Value> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["severity"] != "OK" && c["severity"] != "N/A")
        .collect();
    assert_eq!(code, 0, "{bad:#?}");
    let c2c = checks(&v, "gpu.c2c");
    assert_eq!(c2c.len(), 4);
    for c in c2c {
        assert_eq!(c["severity"], "OK");
        assert_eq!(c["value"], "C2C enabled, 5/5 links active, 44712 MB/s each");
    }
    for c in checks(&v, "gpu.fabric") {
        assert_eq!(
            c["value"],
            "fabric registered (state completed, status success, clique 32766, cluster 3482beb4a3cd48a49b6ca6ba43bc59a4, health summary healthy)"
        );
    }
    assert_eq!(
        checks(&v, "services.imex")[0]["value"],
        "nvidia-imex active (GB200 (Grace Blackwell superchip) at 0008:01:00.0: an NVL72 compute tray)"
    );
    assert_eq!(
        checks(&v, "services.imex_domain")[0]["value"],
        "domain UP, 18/18 node(s) READY"
    );
    assert_eq!(checks(&v, "services.fabricmanager")[0]["severity"], "N/A");
    assert!(
        prom.contains("gpuhost_check_status{check=\"services.imex_domain\"} 0"),
        "{prom}"
    );
}

/// A GH200 (one node): C2C judged, the fabric and IMEX n/a.
#[test]
fn a_gh200_has_c2c_and_no_fabric_or_imex() {
    let (code, v, _) = judge_snapshot(&grace(false), &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        checks(&v, "gpu.c2c")[0]["value"],
        "C2C enabled, 10/10 links active, 44712 MB/s each"
    );
    for id in ["gpu.fabric", "gpu.nvlink", "services.imex"] {
        assert_eq!(checks(&v, id)[0]["severity"], "N/A", "{id}");
    }
    assert!(checks(&v, "services.imex_domain").is_empty());
}

/// A single H200 (the real capture): no C2C, n/a.
#[test]
fn an_h200_has_no_c2c() {
    let real: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("h200-snapshot.json")).unwrap(),
    )
    .unwrap();
    let (_, v, _) = judge_snapshot(&real, &[]);
    assert_eq!(checks(&v, "gpu.c2c")[0]["severity"], "N/A");
}

/// What a Grace tray can get wrong, one at a time, each the only problem: a C2C link down, C2C
/// off, the fabric's health summary unhealthy (advice pointing at the switch trays, not a Fabric
/// Manager the tray does not run), IMEX stopped, the IMEX domain down or not readable.
#[rstest::rstest]
#[case::c2c_link_down("/nvml/gpus/1/c2c/value/links/2/active", serde_json::json!(false), "gpu.c2c", "CRITICAL", "down: link 2")]
#[case::c2c_off("/nvml/gpus/1/c2c/value", serde_json::json!({"enabled": false, "links": []}), "gpu.c2c", "CRITICAL", "C2C disabled on a Grace superchip")]
#[case::fabric_unhealthy("/nvml/gpus/0/fabric/value/health_summary", serde_json::json!(2), "gpu.fabric", "CRITICAL", "health summary unhealthy")]
#[case::imex_stopped("/services/nvidia_imex", serde_json::json!("failed"), "services.imex", "CRITICAL", "nvidia-imex failed on GB200")]
#[case::domain_down("/services/imex_domain", serde_json::json!({"domain_state": "DOWN", "nodes": [{"index": 0, "address": "10.136.206.48", "state": "READY"}, {"index": 1, "address": "10.136.206.49", "state": "UNAVAILABLE"}]}), "services.imex_domain", "CRITICAL", "domain DOWN, 1/2 node(s) READY; not ready: #1 10.136.206.49 UNAVAILABLE")]
#[case::domain_unread("/services/imex_domain", serde_json::json!({"domain_state": null, "nodes": [], "error": "connection refused"}), "services.imex_domain", "UNKNOWN", "IMEX domain not read")]
fn a_gb200_tray_problem_is_the_one_problem(
    #[case] pointer: &str,
    #[case] value: serde_json::Value,
    #[case] id: &str,
    #[case] severity: &str,
    #[case] needle: &str,
) {
    let mut s = grace(true);
    *s.pointer_mut(pointer).unwrap() = value;
    let (code, v, _) = judge_snapshot(&s, &["--expect-gpus", "4"]);
    assert_ne!(code, 0);
    let c = only_problem(&v, id);
    assert_eq!(c["severity"], severity, "{c:#}");
    assert!(c["value"].as_str().unwrap().contains(needle), "{c:#}");
    let hint = c["hint"].as_str().unwrap_or_default();
    assert!(!hint.is_empty(), "{c:#}");
    assert!(
        !hint.contains("systemctl enable --now nvidia-fabricmanager"),
        "{hint}"
    );
}

/// `gpuhost sweep-profile --profile` reads its profile or refuses it (exit 2, the reason),
/// as `gpuhost status` does: a path that is not a profile is not silently ignored.
#[test]
fn sweep_profile_refuses_a_profile_it_cannot_read() {
    let run = tempfile::tempdir().unwrap();
    for bad in ["../../etc/passwd", "/nonexistent/site.toml"] {
        let o = gpuhost(run.path())
            .args(["sweep-profile", "1", "--profile", bad])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains(&format!("--profile {bad}: ")), "{err}");
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    let o = gpuhost(run.path())
        .args(["sweep-profile", "1", "--profile", "ol9-uek"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
