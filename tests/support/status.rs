//! What the `gpuhost status` tests share: the captured fixtures, the binary with a private run
//! directory and none of the test-only environment leaking in, and reading checks out of a
//! JSON report.
//!
//! ```ignore
//! #[path = "support/status.rs"]
//! mod support;
//! ```
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// tests/fixtures/status: the real H200 capture and the HGX H200 x8 fixture derived from it.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/status")
}

/// The HGX H200 x8 fixture (OK in every check).
pub fn hgx() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("hgx-h200x8-snapshot.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The gpuhost binary with its own run directory (probe records, counters) and without the
/// variables tests use to steer it (crafted roots, hung or slow probes, a Slurm node name).
pub fn gpuhost(run_dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuhost"));
    c.env("GPUHOST_RUN_DIR", run_dir)
        .env_remove("GPUHOST_STATUS_ROOT")
        .env_remove("GPUHOST_PROBE_DELAY_MS")
        .env_remove("GPUHOST_PROBE_HANG_FILE")
        .env_remove("GPUHOST_NVML_PROBE")
        .env_remove("SLURMD_NODENAME");
    c
}

/// The gpuhost binary as another user can run it (with the NVML probe helper it execs), in a
/// folder of the temp dir every user may enter: a clone under a folder of mode 700
/// (`/root/gpuhost`) keeps cargo's own target directory from them (issue 43: the suite passes
/// wherever root clones it). Hard links of the built binaries where the temp dir shares their
/// filesystem (copies otherwise); the folder goes when the value is dropped (issue 54: the suite
/// leaves nothing in /tmp).
pub struct ForOthers {
    dir: tempfile::TempDir,
}

impl ForOthers {
    /// The gpuhost binary in it.
    pub fn gpuhost(&self) -> PathBuf {
        self.dir.path().join("gpuhost")
    }
}

pub fn gpuhost_for_others() -> ForOthers {
    use std::os::unix::fs::PermissionsExt;
    let built = Path::new(env!("CARGO_BIN_EXE_gpuhost"));
    let dir = tempfile::Builder::new()
        .prefix("gpuhost-bin-")
        .tempdir()
        .expect("a folder for the binaries");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("mode 755");
    for name in ["gpuhost", "gpuhost-nvml-probe"] {
        let from = built.with_file_name(name);
        if from.exists() {
            let to = dir.path().join(name);
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to).expect("copy the binary");
            }
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
                .expect("mode 755");
        }
    }
    ForOthers { dir }
}

/// [`gpuhost`], run from [`gpuhost_for_others`]'s binary (for a test that runs it as another
/// user).
pub fn gpuhost_as_other(bin: &ForOthers, run_dir: &Path) -> Command {
    let mut c = Command::new(bin.gpuhost());
    c.env("GPUHOST_RUN_DIR", run_dir)
        .env_remove("GPUHOST_STATUS_ROOT")
        .env_remove("GPUHOST_PROBE_DELAY_MS")
        .env_remove("GPUHOST_PROBE_HANG_FILE")
        .env_remove("GPUHOST_NVML_PROBE")
        .env_remove("SLURMD_NODENAME");
    c
}

/// The check `id` of a `status --format json` report.
pub fn check<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    v["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no check {id} in {v:#}"))
}

/// The children of `pid`, each with its state letter from `/proc/PID/stat` (`Z`: exited, not
/// reaped yet).
pub fn children_of(pid: u32) -> Vec<(u32, char)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the
        // last ')'.
        let after = &stat[stat.rfind(')').unwrap() + 1..];
        let f: Vec<&str> = after.split_whitespace().collect();
        if f[1].parse::<u32>() == Ok(pid) {
            out.push((p, f[0].chars().next().unwrap_or('?')));
        }
    }
    out
}

/// Run `cmd` (stdout and stderr captured), killed and failed after `secs`: a command that
/// must not hang (a FIFO read, a lock).
pub fn output_within(mut cmd: Command, secs: u64) -> std::process::Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() >= secs {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still ran after {secs} s: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}
