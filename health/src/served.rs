//! `gpuhost status` answered by a running `gpuhost serve`, over a local socket.
//!
//! A node that runs `gpuhost serve` has a fresh sweep in memory (at most its `--max-age`
//! old). `gpuhost status` asks for it on the server's socket, `<run dir>/serve.sock`, before
//! starting an NVML probe of its own, and judges it with its own `--expect-gpus`, `--profile`
//! and format: the same report and exit code as a one-shot run, without NVML's init (12 ms)
//! and first sweep.
//!
//! The protocol is one line each way. The client writes its question:
//! - `snapshot`: the server answers one line of JSON (`Answer`: the last sweep's snapshot,
//!   its root and pid) and closes; the client judges it.
//! - `report FORMAT[ profile=NAME][ expect-gpus=N]` ([`Request::Report`]), asked when the
//!   client's options need nothing but the report (no `--textfile`, `--slurm`,
//!   `--wait-healthy`, and a built-in profile name if any): when the server judges with the
//!   same profile and GPU count, it answers a line of JSON with the exit code (`Answer`
//!   without its snapshot), then the report exactly as `gpuhost status` prints it, rendered
//!   by [`crate::render::render`] — the client copies bytes, parses and judges nothing. Otherwise it
//!   answers as to `snapshot`. A server that does not know the question (an older one)
//!   answers `error: …`, and the client asks again with `snapshot`.
//!
//! Who may ask, and why that is safe: the socket is mode 0666, so every local user's `status`
//! (Slurm's HealthCheckProgram as root, node-problem-detector, an operator at a shell) is
//! answered. The answer is the read-only report that the loopback `/status` endpoint already
//! gives any local user; a request carries no input but its one word. The server bounds what a
//! client can hold: a request line of at most [`MAX_REQUEST`] bytes within one second, the
//! answer written within one second, at most [`MAX_CLIENTS`] connections at once (more are
//! closed at once). The client trusts only a socket owned by root or by its own user (another
//! user cannot plant one in its run directory), and gives the whole exchange `ASK_WITHIN`:
//! a server that is busy, stalled or gone costs at most that, then `status` probes itself as
//! before. `--fresh` skips the server.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::render::StatusFormat;
use crate::snapshot::{ServedBy, Snapshot};

/// The socket's file name in the run directory.
pub const SOCKET: &str = "serve.sock";
/// Where a server running as root listens, whatever the client's own run directory.
pub(crate) const SYSTEM_SOCKET: &str = "/run/gpuhost/serve.sock";
/// The question.
pub(crate) const REQUEST: &str = "snapshot";
/// The question for a rendered report ([`Request::Report`]).
pub(crate) const REPORT: &str = "report";
/// The longest request line the server reads.
pub const MAX_REQUEST: usize = 160;
/// Connections the server serves at once; more are closed at once.
pub const MAX_CLIENTS: usize = 64;
/// How long `status` gives the server: connect, ask, read the answer.
pub(crate) const ASK_WITHIN: Duration = Duration::from_millis(100);

/// The server's answer (its first line).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Answer {
    /// The server's pid.
    pub(crate) pid: u32,
    /// The root the server reads (`/` on a node; tests serve others).
    pub(crate) root: PathBuf,
    /// Its `--max-age`, s.
    pub(crate) max_age_s: f64,
    /// The sweep, for the client to judge (`snapshot`, or a report the server does not
    /// render for these options).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) snapshot: Option<Snapshot>,
    /// A rendered report's exit code; the report follows this line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) code: Option<i32>,
}

/// The server's answer as it writes it (the same JSON as `Answer`).
#[derive(Debug, Serialize)]
pub struct AnswerRef<'a> {
    pub pid: u32,
    pub root: &'a Path,
    pub max_age_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<&'a Snapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
}

/// A client's question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The last sweep's snapshot.
    Snapshot,
    /// The report in `format`, judged with `profile` (a built-in name) and `expect_gpus`.
    Report {
        format: StatusFormat,
        profile: Option<String>,
        expect_gpus: Option<u32>,
    },
}

impl Request {
    /// The question as written on the socket (without its newline).
    pub(crate) fn line(&self) -> String {
        match self {
            Request::Snapshot => REQUEST.to_string(),
            Request::Report {
                format,
                profile,
                expect_gpus,
            } => {
                let mut l = format!("{REPORT} {}", format_name(*format));
                if let Some(p) = profile {
                    l.push_str(&format!(" profile={p}"));
                }
                if let Some(n) = expect_gpus {
                    l.push_str(&format!(" expect-gpus={n}"));
                }
                l
            }
        }
    }

    /// A question as read (without its newline); None when it is not one.
    pub fn parse(line: &[u8]) -> Option<Request> {
        let line = std::str::from_utf8(line).ok()?;
        if line == REQUEST {
            return Some(Request::Snapshot);
        }
        let mut words = line.split(' ');
        if words.next() != Some(REPORT) {
            return None;
        }
        let format = words.next().and_then(format_from_name)?;
        let (mut profile, mut expect_gpus) = (None, None);
        for w in words {
            match w.split_once('=') {
                Some(("profile", p)) if profile.is_none() && simple_profile(p) => {
                    profile = Some(p.to_string());
                }
                Some(("expect-gpus", n)) if expect_gpus.is_none() => {
                    expect_gpus = Some(n.parse().ok()?);
                }
                _ => return None,
            }
        }
        Some(Request::Report {
            format,
            profile,
            expect_gpus,
        })
    }
}

/// A profile given by a built-in name (letters, digits, `.`, `_`, `-`; not a `.toml` path),
/// which means the same to the server and the client.
pub fn simple_profile(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 64
        && !p.ends_with(".toml")
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn format_name(f: StatusFormat) -> &'static str {
    match f {
        StatusFormat::Table => "table",
        StatusFormat::Json => "json",
        StatusFormat::Prometheus => "prometheus",
        StatusFormat::Npd => "npd",
    }
}

fn format_from_name(n: &str) -> Option<StatusFormat> {
    [
        StatusFormat::Table,
        StatusFormat::Json,
        StatusFormat::Prometheus,
        StatusFormat::Npd,
    ]
    .into_iter()
    .find(|f| format_name(*f) == n)
}

/// What a server answered.
#[derive(Debug)]
pub(crate) enum Served {
    /// The report, rendered, and its exit code: print it as it is.
    Report { code: i32, text: Vec<u8> },
    /// The snapshot, to judge here.
    Snapshot(Box<Snapshot>),
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
pub(crate) fn sockets() -> Vec<PathBuf> {
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

/// Why a socket was not asked, or gave no answer to use: the client then probes by itself
/// (or, for [`AskError::Refused`] to a report question, asks for the snapshot).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskError {
    /// The socket file cannot be read.
    #[error("{0}")]
    Unreadable(std::io::Error),
    /// The path is no socket.
    #[error("not a socket")]
    NotASocket,
    /// The socket is owned by neither root nor this user: another user may have planted it.
    #[error("owned by uid {0}, neither root nor this user")]
    Untrusted(u32),
    /// The server's backlog is full (a non-blocking connect answered EAGAIN).
    #[error("its backlog is full")]
    BacklogFull,
    #[error("connect: {0}")]
    Connect(std::io::Error),
    /// The whole exchange took longer than [`ASK_WITHIN`] (`during`: what was left to do).
    #[error("no answer within {} ms{}", ASK_WITHIN.as_millis(), during.map(|w| format!(" ({w})")).unwrap_or_default())]
    Late { during: Option<&'static str> },
    /// Setting the socket's deadline failed.
    #[error("{0}")]
    Deadline(std::io::Error),
    #[error("writing: {0}")]
    Writing(std::io::Error),
    #[error("reading: {0}")]
    Reading(std::io::Error),
    /// The server answered `error: …`: it does not know the question (an older server asked
    /// for a report).
    #[error("it answered: {0}")]
    Refused(String),
    /// The answer's first line is not an [`Answer`].
    #[error("unreadable answer: {0}")]
    Garbled(serde_json::Error),
}

/// Whether a socket file may be asked: a socket owned by root or this user.
fn trusted(path: &Path) -> Result<(), AskError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::symlink_metadata(path).map_err(AskError::Unreadable)?;
    if !m.file_type().is_socket() {
        return Err(AskError::NotASocket);
    }
    let me = rustix::process::geteuid().as_raw();
    if m.uid() != 0 && m.uid() != me {
        return Err(AskError::Untrusted(m.uid()));
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

/// Ask one socket; the answer within `deadline`: its first line, and what follows it.
fn ask_one(
    path: &Path,
    request: &Request,
    deadline: Instant,
) -> Result<(Answer, Vec<u8>), AskError> {
    trusted(path)?;
    let mut s = connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => AskError::BacklogFull,
        _ => AskError::Connect(e),
    })?;
    let left = |what: &'static str| {
        let d = deadline.saturating_duration_since(Instant::now());
        if d.is_zero() {
            Err(AskError::Late { during: Some(what) })
        } else {
            Ok(d)
        }
    };
    s.set_write_timeout(Some(left("writing")?))
        .map_err(AskError::Deadline)?;
    s.write_all(format!("{}\n", request.line()).as_bytes())
        .map_err(AskError::Writing)?;
    // A report is about 18 KB: an 8 KiB chunk, not a large one whose fresh stack pages would
    // be most of what this short process touches here.
    let mut buf = Vec::with_capacity(32 * 1024);
    let mut chunk = [0u8; 8 * 1024];
    loop {
        s.set_read_timeout(Some(left("reading")?))
            .map_err(AskError::Deadline)?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                        AskError::Late { during: None }
                    }
                    _ => AskError::Reading(e),
                })
            }
        }
    }
    let (head, rest) = match buf.iter().position(|&b| b == b'\n') {
        Some(i) => (&buf[..i], buf[i + 1..].to_vec()),
        None => (&buf[..], Vec::new()),
    };
    if head.starts_with(b"error:") {
        return Err(AskError::Refused(
            String::from_utf8_lossy(head)
                .trim_start_matches("error:")
                .trim()
                .to_string(),
        ));
    }
    let a = serde_json::from_slice::<Answer>(head).map_err(AskError::Garbled)?;
    Ok((a, rest))
}

/// The answer of a `gpuhost serve` reading `root` (canonical) to `request`, from the first
/// socket that answers within [`ASK_WITHIN`] (a server that does not know a report question
/// is asked for the snapshot); None (with a debug message saying why) when none does.
pub(crate) fn ask(root: &Path, request: &Request) -> Option<Served> {
    let deadline = Instant::now() + ASK_WITHIN;
    for path in sockets() {
        if !path.exists() {
            continue;
        }
        let mut answer = ask_one(&path, request, deadline);
        if let (Err(why @ AskError::Refused(_)), Request::Report { .. }) = (&answer, request) {
            tracing::debug!(
                "gpuhost serve on {} renders no report ({why}): asking for the snapshot",
                path.display()
            );
            answer = ask_one(&path, &Request::Snapshot, deadline);
        }
        match answer {
            Ok((a, _)) if a.root != root => tracing::debug!(
                "gpuhost serve on {} reads {}, not {}: probing here",
                path.display(),
                a.root.display(),
                root.display()
            ),
            Ok((a, text)) => {
                tracing::debug!(
                    "answered by gpuhost serve (pid {}) on {}: {}",
                    a.pid,
                    path.display(),
                    if a.code.is_some() {
                        "the report, rendered there"
                    } else {
                        "its snapshot, judged here"
                    }
                );
                match (a.code, a.snapshot) {
                    (Some(code), _) => return Some(Served::Report { code, text }),
                    (None, Some(mut snap)) => {
                        snap.served_by = Some(served_by(&path, a.pid, a.max_age_s, &snap));
                        return Some(Served::Snapshot(Box::new(snap)));
                    }
                    (None, None) => tracing::debug!(
                        "gpuhost serve on {} answered neither a report nor a snapshot: probing here",
                        path.display()
                    ),
                }
            }
            Err(why) => tracing::debug!(
                "gpuhost serve on {} not asked: {why}; probing here",
                path.display()
            ),
        }
    }
    None
}

/// Which server answered on `socket`, and how old its sweep is now.
pub fn served_by(socket: &Path, pid: u32, max_age_s: f64, snap: &Snapshot) -> ServedBy {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    ServedBy {
        socket: socket.display().to_string(),
        pid,
        age_ms: now_ms.saturating_sub(snap.collected_at_ms),
        max_age_s,
    }
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
    fn questions_are_written_and_read_back_and_nothing_else_is_one() {
        let asked = [
            Request::Snapshot,
            Request::Report {
                format: StatusFormat::Json,
                profile: None,
                expect_gpus: None,
            },
            Request::Report {
                format: StatusFormat::Npd,
                profile: Some("ol8-uek-hgx".into()),
                expect_gpus: Some(8),
            },
        ];
        for r in asked {
            let line = r.line();
            assert!(line.len() <= MAX_REQUEST, "{line}");
            assert_eq!(Request::parse(line.as_bytes()), Some(r), "{line}");
        }
        assert_eq!(
            Request::Report {
                format: StatusFormat::Table,
                profile: Some("ol9-rhck".into()),
                expect_gpus: Some(4),
            }
            .line(),
            "report table profile=ol9-rhck expect-gpus=4"
        );
        for bad in [
            "",
            "snapshot ",
            "report",
            "report yaml",
            "report json profile=/etc/gpuhost/site.toml",
            "report json profile=site.toml",
            "report json profile=a profile=b",
            "report json expect-gpus=eight",
            "report json expect-gpus=-1",
            "report json root=/",
            "REPORT json",
        ] {
            assert_eq!(Request::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

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
        let e = ask_one(&path, &Request::Snapshot, Instant::now() + ASK_WITHIN).unwrap_err();
        assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
        assert!(matches!(e, AskError::BacklogFull), "{e}");
        assert_eq!(e.to_string(), "its backlog is full");
        assert!(answering(&path), "a full backlog is a server that is there");
    }

    #[test]
    fn a_server_that_accepts_and_never_answers_costs_the_deadline_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SOCKET);
        let _l = listener(&path);
        let t = Instant::now();
        let e = ask_one(&path, &Request::Snapshot, Instant::now() + ASK_WITHIN).unwrap_err();
        let took = t.elapsed();
        assert!(took >= ASK_WITHIN && took < ASK_WITHIN * 3, "{took:?}");
        assert!(matches!(e, AskError::Late { .. }), "{e}");
        assert!(e.to_string().contains("no answer within 100 ms"), "{e}");
    }
}
