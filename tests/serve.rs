//! `gpuhost serve` integration tests (issue 14), on the real binary over real HTTP.
//!
//! The server is fed the real H200 capture and the HGX fixture derived from it
//! (`--from-snapshot`: the host part as saved, the NVML part answered by the long-lived probe
//! child from the file, through the same pipe and deadline as on a GPU node). A hung driver is
//! stood in for by `GPUHOST_PROBE_HANG_FILE`: while that file exists, the probe child hangs in
//! its sweep. `/metrics` is checked with the real `promtool`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "support/status.rs"]
mod support;
use support::{fixtures, gpuhost, hgx};

/// A running `gpuhost serve` on a free loopback port; killed when dropped.
struct Server {
    child: Child,
    addr: String,
    stderr: BufReader<std::process::ChildStderr>,
}

impl Server {
    fn start(run_dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Server {
        let mut c = gpuhost(run_dir);
        c.args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        Server {
            child,
            addr,
            stderr,
        }
    }

    /// A server replaying the snapshot file `snap` (its NVML part answered from the file by the
    /// probe child), answers cached for 50 ms.
    fn replaying(run_dir: &Path, snap: &Path) -> Server {
        Server::start(
            run_dir,
            &[
                "--from-snapshot",
                snap.to_str().unwrap(),
                "--max-age",
                "0.05",
            ],
            &[],
        )
    }

    /// GET `path`: status code and body.
    fn get(&self, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (code, body.to_string())
    }

    /// The server's child processes (the NVML probe).
    fn children(&self) -> Vec<u32> {
        let pid = self.child.id();
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            let f: Vec<&str> = after.split_whitespace().collect();
            if f[1].parse::<u32>() == Ok(pid) && f[0] != "Z" {
                out.push(p);
            }
        }
        out
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn promtool_check(text: &str) {
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) is needed: apt-get install -y prometheus");
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = p.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The series names (metric and labels, not values) of a Prometheus text.
fn series(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
        .collect();
    v.sort();
    v
}

/// The HGX H200 x8 fixture, which is OK in every check, with `edit` applied, in `dir`.
fn hgx_with(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let mut v = hgx();
    edit(&mut v);
    let f = dir.join("snapshot.json");
    std::fs::write(&f, serde_json::to_string(&v).unwrap()).unwrap();
    f
}

#[test]
fn serves_the_textfile_series_healthz_and_status_from_one_probe_child() {
    let run = tempfile::tempdir().unwrap();
    let snap = hgx_with(run.path(), |_| {});
    let srv = Server::replaying(run.path(), &snap);
    let (code, body) = srv.get("/healthz");
    assert_eq!((code, body.lines().count()), (200, 1), "{body}");
    assert!(body.starts_with("gpuhost status OK"), "{body}");

    let (code, metrics) = srv.get("/metrics");
    assert_eq!(code, 200);
    promtool_check(&metrics);
    assert!(metrics.contains("\ngpuhost_status 0\n"), "{metrics}");
    // The same series as `gpuhost status --textfile` writes for the same answers.
    let textfile = run.path().join("gpuhost.prom");
    let o = gpuhost(run.path())
        .args(["status", "--from-snapshot"])
        .arg(&snap)
        .arg("--textfile")
        .arg(&textfile)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let expected = std::fs::read_to_string(&textfile).unwrap();
    assert_eq!(series(&metrics), series(&expected));

    let (code, status) = srv.get("/status");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v["status"], "OK");
    assert_eq!(v["snapshot"]["nvml"]["gpus"].as_array().unwrap().len(), 8);

    // Sweeps on demand (the cache is 50 ms here) all go to the one probe child: NVML stays
    // initialised.
    let probe = srv.children();
    assert_eq!(probe.len(), 1, "{probe:?}");
    let mut collected = std::collections::BTreeSet::new();
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(120));
        let (_, s) = srv.get("/status");
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        collected.insert(v["snapshot"]["nvml"]["duration_ms"].to_string());
    }
    assert!(collected.len() > 1, "no new sweep: {collected:?}");
    assert_eq!(srv.children(), probe);
}

/// Write `v` over `f` atomically (the probe child may read it at any moment).
fn rewrite(f: &Path, v: &serde_json::Value) {
    let tmp = f.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string(v).unwrap()).unwrap();
    std::fs::rename(&tmp, f).unwrap();
}

/// GPU 0 of the /status JSON.
fn gpu0(srv: &Server) -> serde_json::Value {
    let (_, s) = srv.get("/status");
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    v["snapshot"]["nvml"]["gpus"][0].clone()
}

#[test]
fn fixed_fields_are_read_once_per_probe_child_and_the_rest_every_sweep() {
    let run = tempfile::tempdir().unwrap();
    let snap = hgx_with(run.path(), |_| {});
    let srv = Server::replaying(run.path(), &snap);
    assert_eq!(srv.get("/healthz").0, 200);
    let before = gpu0(&srv);
    assert_eq!(before["vbios_version"]["value"], "96.00.A5.00.1A");
    let probe = srv.children();
    assert_eq!(probe.len(), 1, "{probe:?}");

    // The "driver" now answers otherwise: what can change (temperature, an ECC counter) and
    // what cannot while NVML stays initialised (VBIOS, name, slowdown threshold).
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&snap).unwrap()).unwrap();
    let g = &mut v["nvml"]["gpus"][0];
    g["temperature_c"] = serde_json::json!({"value": 71});
    g["ecc_volatile_uncorrected"] = serde_json::json!({"value": 2});
    g["vbios_version"] = serde_json::json!({"value": "96.00.FF.00.01"});
    g["name"] = serde_json::json!({"value": "NVIDIA H200 (reflashed)"});
    g["temperature_slowdown_c"] = serde_json::json!({"value": 80});
    rewrite(&snap, &v);
    std::thread::sleep(Duration::from_millis(120));

    // Every sweep reads the changing fields: the new temperature, and the ECC error is
    // CRITICAL at once.
    let now = gpu0(&srv);
    assert_eq!(now["temperature_c"]["value"], 71, "{now}");
    let (code, body) = srv.get("/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("uncorrectable ECC"), "{body}");
    // The fixed ones are this probe child's first answer, and say so.
    assert_eq!(now["vbios_version"]["value"], "96.00.A5.00.1A", "{now}");
    assert_eq!(now["name"]["value"], "NVIDIA H200", "{now}");
    assert_eq!(now["temperature_slowdown_c"]["value"], 89, "{now}");
    assert_eq!(now["fixed_kept"], true, "{now}");
    assert_eq!(srv.children(), probe);

    // A new probe child (the old one killed: a driver reload needs one) reads them afresh.
    let k = Command::new("kill")
        .args(["-KILL", &probe[0].to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let until = Instant::now() + Duration::from_secs(10);
    let fresh = loop {
        std::thread::sleep(Duration::from_millis(100));
        let g = gpu0(&srv);
        if g["vbios_version"]["value"] == "96.00.FF.00.01" {
            break g;
        }
        assert!(Instant::now() < until, "still the old child's: {g}");
    };
    assert_eq!(fresh["name"]["value"], "NVIDIA H200 (reflashed)", "{fresh}");
    assert_eq!(fresh["temperature_slowdown_c"]["value"], 80, "{fresh}");
    let now = srv.children();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, probe);
}

#[test]
fn a_critical_node_is_503_with_the_reason() {
    let run = tempfile::tempdir().unwrap();
    let snap = hgx_with(run.path(), |v| {
        v["nvml"]["gpus"][3]["ecc_volatile_uncorrected"] = serde_json::json!({"value": 2});
    });
    let srv = Server::start(
        run.path(),
        &["--from-snapshot", snap.to_str().unwrap()],
        &[],
    );
    let (code, body) = srv.get("/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with("gpuhost status CRITICAL"), "{body}");
    assert!(body.contains("uncorrectable ECC"), "{body}");
    let (_, metrics) = srv.get("/metrics");
    promtool_check(&metrics);
    assert!(metrics.contains("\ngpuhost_status 2\n"));
}

#[test]
fn a_hung_driver_is_critical_while_every_endpoint_keeps_answering() {
    let run = tempfile::tempdir().unwrap();
    let snap = hgx_with(run.path(), |_| {});
    let hang = run.path().join("hang");
    let srv = Server::start(
        run.path(),
        &[
            "--from-snapshot",
            snap.to_str().unwrap(),
            "--timeout",
            "0.5",
            "--max-age",
            "0.1",
        ],
        &[("GPUHOST_PROBE_HANG_FILE", &hang)],
    );
    assert_eq!(srv.get("/healthz").0, 200);
    let first = srv.children();
    assert_eq!(first.len(), 1);
    std::fs::write(&hang, "").unwrap();
    std::thread::sleep(Duration::from_millis(150));
    // Deadline 0.5 s (+ 1 s the server allows a sweep before answering from the last one).
    for path in ["/healthz", "/metrics", "/status", "/healthz"] {
        let t = Instant::now();
        let (code, body) = srv.get(path);
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{path} took {:?}",
            t.elapsed()
        );
        match path {
            "/healthz" => {
                assert_eq!(code, 503, "{body}");
                assert!(body.contains("driver unresponsive"), "{body}");
            }
            "/metrics" => {
                promtool_check(&body);
                assert!(body.contains("\ngpuhost_status 2\n"), "{body}");
            }
            _ => assert!(body.contains("driver unresponsive"), "{body}"),
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    // The driver answers again: a new probe child replaces the killed one.
    std::fs::remove_file(&hang).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(150));
        let (code, body) = srv.get("/healthz");
        if code == 200 {
            break;
        }
        assert!(Instant::now() < until, "still {code}: {body}");
    }
    let now = srv.children();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, first);
}

#[test]
fn sigterm_stops_the_server_and_its_probe() {
    let run = tempfile::tempdir().unwrap();
    let snap = fixtures().join("h200-snapshot.json");
    let mut srv = Server::start(
        run.path(),
        &["--from-snapshot", snap.to_str().unwrap()],
        &[],
    );
    // The real H200 capture: that VM had no systemd, so UNKNOWN (503).
    assert_eq!(srv.get("/healthz").0, 503);
    let probe = srv.children();
    assert_eq!(probe.len(), 1);
    let t = Instant::now();
    let k = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let status = loop {
        if let Some(s) = srv.child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "still running");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    let mut rest = String::new();
    srv.stderr.read_to_string(&mut rest).unwrap();
    assert!(
        rest.contains("SIGTERM") && rest.contains("stopped"),
        "{rest}"
    );
    // The probe child saw its stdin close and exited.
    std::thread::sleep(Duration::from_millis(200));
    let state = std::fs::read_to_string(format!("/proc/{}/stat", probe[0])).unwrap_or_default();
    let gone = state.is_empty()
        || state[state.rfind(')').unwrap() + 1..]
            .trim()
            .starts_with('Z');
    assert!(gone, "probe {} still there: {state}", probe[0]);
}

#[test]
fn bad_arguments_exit_2_and_a_taken_port_exits_1() {
    let run = tempfile::tempdir().unwrap();
    let o = gpuhost(run.path())
        .args(["serve", "--listen", "localhost"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--listen localhost"), "{err}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let snap = fixtures().join("h200-snapshot.json");
    let o = gpuhost(run.path())
        .args(["serve", "--listen", &addr, "--from-snapshot"])
        .arg(&snap)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

#[test]
fn live_without_an_nvidia_library_says_so_on_healthz() {
    if Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let run = tempfile::tempdir().unwrap();
    let srv = Server::start(run.path(), &[], &[]);
    let (code, body) = srv.get("/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("no NVIDIA userspace library"), "{body}");
    let (_, metrics) = srv.get("/metrics");
    promtool_check(&metrics);
}
