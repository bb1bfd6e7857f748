//! `gpuhost status` answered by a running `gpuhost serve`, over a local socket.
//!
//! A node that runs `gpuhost serve` has a fresh sweep in memory (at most its `--max-age`
//! old). `gpuhost status` asks for it on the server's socket, `<run dir>/serve.sock`, before
//! starting an NVML probe of its own, and judges it with its own `--expect-gpus`, `--profile`
//! and format: the same report and exit code as a one-shot run, without NVML's init (12 ms)
//! and first sweep.
//!
//! The protocol is one line each way: the client writes `snapshot`, the server answers one
//! line of JSON ([`Answer`]: the last sweep's snapshot, its root and pid) and closes.
//!
//! Who may ask, and why that is safe: the socket is mode 0666, so every local user's `status`
//! (Slurm's HealthCheckProgram as root, node-problem-detector, an operator at a shell) is
//! answered. The answer is the read-only report that the loopback `/status` endpoint already
//! gives any local user; a request carries no input but its one word. The server bounds what a
//! client can hold: a request line of at most [`MAX_REQUEST`] bytes within one second, the
//! answer written within one second, at most [`MAX_CLIENTS`] connections at once (more are
//! closed at once). The client trusts only a socket owned by root or by its own user (another
//! user cannot plant one in its run directory), and gives the whole exchange [`ASK_WITHIN`]:
//! a server that is busy, stalled or gone costs at most that, then `status` probes itself as
//! before. `--fresh` skips the server.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::snapshot::{ServedBy, Snapshot};

/// The socket's file name in the run directory.
pub const SOCKET: &str = "serve.sock";
/// Where a server running as root listens, whatever the client's own run directory.
pub const SYSTEM_SOCKET: &str = "/run/gpuhost/serve.sock";
/// The question.
pub const REQUEST: &str = "snapshot";
/// The longest request line the server reads.
pub const MAX_REQUEST: usize = 64;
/// Connections the server serves at once; more are closed at once.
pub const MAX_CLIENTS: usize = 64;
/// How long `status` gives the server: connect, ask, read the answer.
pub const ASK_WITHIN: Duration = Duration::from_millis(100);

/// The server's answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    /// The server's pid.
    pub pid: u32,
    /// The root the server reads (`/` on a node; tests serve others).
    pub root: PathBuf,
    /// Its `--max-age`, s.
    pub max_age_s: f64,
    pub snapshot: Snapshot,
}

/// The server's answer as it writes it (the same JSON as [`Answer`]).
#[derive(Debug, Serialize)]
pub struct AnswerRef<'a> {
    pub pid: u32,
    pub root: &'a Path,
    pub max_age_s: f64,
    pub snapshot: &'a Snapshot,
}

/// Whether a server answers connections on `path` (a non-blocking connect: a full backlog
/// counts as answering).
pub fn answering(path: &Path) -> bool {
    match connect(path) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}

/// The sockets to try, in order: with `$GPUHOST_RUN_DIR`, only the one there; else the system
/// server's (`/run/gpuhost`), then those of this user's run directories
/// (`$XDG_RUNTIME_DIR/gpuhost`, `/tmp/gpuhost-<uid>`).
/// (Without creating or writing in any run directory: asking must cost nothing when no server
/// runs.)
pub fn sockets() -> Vec<PathBuf> {
    if let Some(d) = std::env::var_os("GPUHOST_RUN_DIR") {
        return vec![PathBuf::from(d).join(SOCKET)];
    }
    let mut v = vec![PathBuf::from(SYSTEM_SOCKET)];
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        v.push(PathBuf::from(x).join("gpuhost").join(SOCKET));
    }
    let uid = rustix::process::geteuid().as_raw();
    v.push(PathBuf::from(format!("/tmp/gpuhost-{uid}")).join(SOCKET));
    v
}

/// Why a socket file is not to be asked.
fn trusted(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !m.file_type().is_socket() {
        return Err("not a socket".into());
    }
    let me = rustix::process::geteuid().as_raw();
    if m.uid() != 0 && m.uid() != me {
        return Err(format!(
            "owned by uid {}, neither root nor this user",
            m.uid()
        ));
    }
    Ok(())
}

/// Connect without blocking: a server whose backlog is full answers EAGAIN (`WouldBlock`)
/// at once instead of making the client wait.
fn connect(path: &Path) -> std::io::Result<UnixStream> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    let addr = SocketAddrUnix::new(path)?;
    rustix::net::connect(&fd, &addr)?;
    let s = UnixStream::from(fd);
    s.set_nonblocking(false)?;
    Ok(s)
}

/// Ask one socket; the answer within `deadline`.
fn ask_one(path: &Path, deadline: Instant) -> Result<Answer, String> {
    trusted(path)?;
    let mut s = connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => "its backlog is full".to_string(),
        _ => format!("connect: {e}"),
    })?;
    let left = |what: &str| {
        let d = deadline.saturating_duration_since(Instant::now());
        if d.is_zero() {
            Err(format!(
                "no answer within {} ms ({what})",
                ASK_WITHIN.as_millis()
            ))
        } else {
            Ok(d)
        }
    };
    s.set_write_timeout(Some(left("writing")?))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("{REQUEST}\n").as_bytes())
        .map_err(|e| format!("writing: {e}"))?;
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut chunk = [0u8; 64 * 1024];
    loop {
        s.set_read_timeout(Some(left("reading")?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                        format!("no answer within {} ms", ASK_WITHIN.as_millis())
                    }
                    _ => format!("reading: {e}"),
                })
            }
        }
    }
    serde_json::from_slice::<Answer>(&buf).map_err(|e| format!("unreadable answer: {e}"))
}

/// The snapshot of a `gpuhost serve` reading `root` (canonical), from the first socket that
/// answers within [`ASK_WITHIN`]; None (with a debug message saying why) when none does.
pub fn ask(root: &Path) -> Option<Snapshot> {
    let deadline = Instant::now() + ASK_WITHIN;
    for path in sockets() {
        if !path.exists() {
            continue;
        }
        match ask_one(&path, deadline) {
            Ok(a) if a.root == root => {
                let mut snap = a.snapshot;
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or(0);
                snap.served_by = Some(ServedBy {
                    socket: path.display().to_string(),
                    pid: a.pid,
                    age_ms: now_ms.saturating_sub(snap.collected_at_ms),
                    max_age_s: a.max_age_s,
                });
                tracing::debug!(
                    "answered by gpuhost serve (pid {}) on {}",
                    a.pid,
                    path.display()
                );
                return Some(snap);
            }
            Ok(a) => tracing::debug!(
                "gpuhost serve on {} reads {}, not {}: probing here",
                path.display(),
                a.root.display(),
                root.display()
            ),
            Err(why) => tracing::debug!(
                "gpuhost serve on {} not asked: {why}; probing here",
                path.display()
            ),
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

    /// A listener with a backlog of one that never accepts.
    fn listener(path: &Path) -> OwnedFd {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        rustix::net::bind(&fd, &SocketAddrUnix::new(path).unwrap()).unwrap();
        rustix::net::listen(&fd, 1).unwrap();
        fd
    }
    use std::os::fd::OwnedFd;

    #[test]
    fn a_server_with_a_full_backlog_costs_no_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SOCKET);
        let _l = listener(&path);
        // Fill the backlog with connections nobody accepts.
        let mut filler = Vec::new();
        loop {
            match connect(&path) {
                Ok(s) => filler.push(s),
                Err(e) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
                    break;
                }
            }
            assert!(filler.len() < 64, "the backlog never filled");
        }
        let t = Instant::now();
        let e = ask_one(&path, Instant::now() + ASK_WITHIN).unwrap_err();
        assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
        assert!(e.contains("backlog is full"), "{e}");
        assert!(answering(&path), "a full backlog is a server that is there");
    }

    #[test]
    fn a_server_that_accepts_and_never_answers_costs_the_deadline_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SOCKET);
        let _l = listener(&path);
        let t = Instant::now();
        let e = ask_one(&path, Instant::now() + ASK_WITHIN).unwrap_err();
        let took = t.elapsed();
        assert!(took >= ASK_WITHIN && took < ASK_WITHIN * 3, "{took:?}");
        assert!(e.contains("no answer within 100 ms"), "{e}");
    }
}
