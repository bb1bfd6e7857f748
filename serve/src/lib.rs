//! `gpuhost serve`: node health over HTTP, for Prometheus and load balancers.
//!
//! - `GET /metrics`: Prometheus text exposition, the same series as `gpuhost status
//!   --textfile` writes;
//! - `GET /healthz`: 200 when the verdict is OK or WARNING, 503 otherwise, with one line that
//!   says why;
//! - `GET /status`: the JSON of `gpuhost status --format json`.
//!
//! Which part does what: tokio runs the server (a small multi-threaded runtime, signals,
//! timers), axum (on hyper) is the HTTP stack, and the sweep itself is the synchronous code of
//! `gpuhost status` run on tokio's blocking pool. NVML stays initialised between sweeps in a
//! long-lived probe child ([`gpuhost_health::CoProbe`]) that is killed and replaced when it
//! misses its deadline, so a hung driver makes the verdict CRITICAL "driver unresponsive"
//! while every endpoint keeps answering.
//!
//! When does a sweep run: every `--interval` seconds, and on demand when a request finds the
//! last one older than `--max-age` (the short cache; concurrent requests share one sweep).
//! Each answer is rendered once per sweep, so a scrape only copies bytes. A request waits for
//! a sweep at most the probe deadline plus one second, then answers from the last one.
//!
//! `gpuhost status` on the same node asks the server first, on a local socket
//! (`<run dir>/serve.sock`, mode 0666: see [`gpuhost_health::served`] for the protocol, who may
//! ask and why that is safe), and judges the snapshot it gets with its own options.

#![warn(unreachable_pub)]

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;

use gpuhost_health::snapshot::Snapshot;
use gpuhost_health::{
    judge, overall, render, render_json, render_prometheus, render_table, run_dir, served, CoProbe,
    Expect, Judgement, KernelLogFollower, Severity, StatusFormat,
};
use gpuhost_host::host::Host;

mod conns;

/// Default listen address: loopback only. Port 19400: the Prometheus exporter range
/// 9100–9999 is fully allocated (node_exporter 9100, dcgm-exporter 9400 among them), and the
/// Prometheus docs recommend ports outside it for exporters not in its registry.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:19400";

/// Exit codes of `gpuhost serve`.
pub mod exit {
    /// Stopped by SIGTERM or SIGINT.
    pub const OK: i32 = 0;
    /// Could not listen, or the server failed.
    pub const FAILED: i32 = 1;
    /// Bad arguments: nothing was started.
    pub const INVALID: i32 = 2;
}

/// What `gpuhost serve` is asked to do (the command line's `gpuhost serve` options, as the
/// agent parsed and checked them).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address and port to listen on.
    pub listen: SocketAddr,
    /// Sweep this often.
    pub interval: Duration,
    /// A request served from a sweep older than this starts a new one and waits for it.
    pub max_age: Duration,
    /// Deadline for each NVML sweep.
    pub timeout: Duration,
    /// GPUs this node must have (overrides the profile's `status.expect_gpus`).
    pub expect_gpus: Option<u32>,
    /// A profile (built-in name or .toml path) giving the expected GPU count and driver version.
    pub profile: Option<String>,
    /// Serve a snapshot saved by `gpuhost status --dump-snapshot` (tests, benchmarks).
    pub from_snapshot: Option<PathBuf>,
    /// Where `gpuhost status` is answered.
    pub socket: Socket,
    /// Read sysfs, /proc, /dev/kmsg and /etc under this root (tests).
    pub root: PathBuf,
    /// The long-lived NVML probe as a program (`gpuhost nvml-serve …`, the fixture of
    /// `from_snapshot` included).
    pub probe_program: Vec<OsString>,
}

/// Where `gpuhost status` is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Socket {
    /// `serve.sock` in the run directory (`/run/gpuhost` as root).
    InRunDir,
    /// This path (`--socket PATH`).
    At(PathBuf),
    /// Nowhere (`--no-socket`).
    Off,
}

/// Validated settings.
#[derive(Debug, Clone)]
struct Settings {
    listen: SocketAddr,
    interval: Duration,
    max_age: Duration,
    timeout: Duration,
    socket: Option<PathBuf>,
}

/// Run `gpuhost serve` until SIGTERM or SIGINT; returns the exit code.
pub fn run(a: &ServeOptions) -> i32 {
    // A run directory refused (another user's) is bad input too.
    let run_dir = match run_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("gpuhost serve: {e:#}");
            return exit::INVALID;
        }
    };
    let s = Settings {
        listen: a.listen,
        interval: a.interval,
        max_age: a.max_age,
        timeout: a.timeout,
        socket: match &a.socket {
            Socket::InRunDir => Some(run_dir.join(served::SOCKET)),
            Socket::At(p) => Some(p.clone()),
            Socket::Off => None,
        },
    };
    let expect = gpuhost_health::expectations_for(a.profile.as_deref(), a.expect_gpus);
    if let Some(err) = &expect.profile_error {
        eprintln!("gpuhost serve: --profile: {err}");
        return exit::INVALID;
    }
    let fixture = match a.from_snapshot.as_deref().map(load_snapshot).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("gpuhost serve: {e:#}");
            return exit::INVALID;
        }
    };
    let host = match Host::new(&a.root) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("gpuhost serve: {e:#}");
            return exit::INVALID;
        }
    };
    let sweeper = Sweeper {
        probe: CoProbe::new(a.probe_program.clone(), s.timeout, &run_dir),
        host,
        expect,
        fixture,
        kernel: KernelLogFollower::default(),
        max_age_s: s.max_age.as_secs_f64(),
        report_key: a
            .profile
            .as_deref()
            .is_none_or(served::simple_profile)
            .then(|| (a.profile.clone(), a.expect_gpus)),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .thread_name("gpuhost-serve")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gpuhost serve: cannot start the runtime: {e}");
            return exit::FAILED;
        }
    };
    let served = rt.block_on(serve(s, sweeper));
    // Tasks still running (a connection past the drain, a sweep) are not waited for.
    rt.shutdown_timeout(Duration::from_millis(500));
    match served {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("gpuhost serve: {e:#}");
            exit::FAILED
        }
    }
}

fn load_snapshot(path: &Path) -> Result<Snapshot> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Collects snapshots: the probe child for NVML, the status code for the rest.
struct Sweeper {
    probe: CoProbe,
    host: Host,
    expect: Expect,
    fixture: Option<Snapshot>,
    kernel: KernelLogFollower,
    max_age_s: f64,
    /// The profile name and GPU count this server judges with, when a client's
    /// [`served::Request::Report`] can name them (no profile, or a built-in name).
    report_key: Option<ReportKey>,
}

/// A `report` question's profile name and GPU count.
type ReportKey = (Option<String>, Option<u32>);

impl Sweeper {
    fn sweep(&mut self) -> Rendered {
        let started = Instant::now();
        let Sweeper {
            probe,
            host,
            expect,
            fixture,
            kernel,
            max_age_s,
            report_key: _,
        } = self;
        let mut snapshot = match fixture {
            Some(f) => {
                let mut s = f.clone();
                s.nvml = probe.sweep();
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or(0);
                s.collected_at = now_ms / 1000;
                s.collected_at_ms = now_ms;
                s
            }
            None => gpuhost_health::collect_around(host, expect, Some(kernel), || probe.sweep()),
        };
        // The last active checks' result that `gpuhost status --active` kept, with its age:
        // serve never runs GPU work itself (it would disturb the jobs).
        if let Some(a) = gpuhost_health::last_active() {
            snapshot.active = Some(a);
        }
        // The subprocess wrapper keeps a record of every command for apply's report; a server
        // must not let them pile up.
        drop(gpuhost_host::cmd::take_records());
        let collected = started.elapsed();
        let rendered = Rendered::new(snapshot, expect, started, host.root(), *max_age_s);
        tracing::debug!(
            "sweep: {} in {:.2} ms: collected in {:.2} ms (NVML probe {} ms round trip, its GPU sweep {} ms), rendered in {:.2} ms",
            rendered.health_line,
            started.elapsed().as_secs_f64() * 1e3,
            collected.as_secs_f64() * 1e3,
            rendered
                .snapshot
                .nvml
                .duration_ms
                .map_or_else(|| "-".to_string(), |v| format!("{v:.2}")),
            rendered
                .snapshot
                .nvml
                .sweep_wall_ms
                .map_or_else(|| "-".to_string(), |v| format!("{v:.2}")),
            (started.elapsed() - collected).as_secs_f64() * 1e3,
        );
        rendered
    }
}

/// One sweep's answers, rendered once (and what a socket client's report is rendered from).
struct Rendered {
    /// When the sweep started.
    at: Instant,
    healthy: bool,
    health_line: String,
    /// Shared by every answer of this sweep (a clone is a reference count, not a copy).
    metrics: Bytes,
    status_json: Bytes,
    /// The answer to a `snapshot` question on the socket: one line of JSON.
    served: Bytes,
    snapshot: Snapshot,
    expect: Expect,
    judged: Judgement,
    root: PathBuf,
    max_age_s: f64,
}

impl Rendered {
    fn new(s: Snapshot, expect: &Expect, at: Instant, root: &Path, max_age_s: f64) -> Rendered {
        let judged = judge(&s, expect);
        let worst = overall(&judged.checks);
        let table = render_table(&judged.checks);
        let health_line = table
            .lines()
            .next()
            .unwrap_or(worst.label())
            .trim()
            .to_string();
        Rendered {
            at,
            healthy: matches!(worst, Severity::Ok | Severity::Warning),
            health_line,
            metrics: Bytes::from(render_prometheus(&s, &judged)),
            status_json: Bytes::from(render_json(&s, expect, &judged.checks)),
            served: served_line(&s, root, max_age_s),
            snapshot: s,
            expect: expect.clone(),
            judged,
            root: root.to_path_buf(),
            max_age_s,
        }
    }

    /// The answer to a socket client's question `req`, asked on `socket`: a report rendered
    /// here when this server judges with the profile and GPU count the client names, else
    /// the snapshot line.
    fn answer(&self, req: &served::Request, key: Option<&ReportKey>, socket: &Path) -> Bytes {
        let served::Request::Report {
            format,
            profile,
            expect_gpus,
        } = req
        else {
            return self.served.clone();
        };
        if key != Some(&(profile.clone(), *expect_gpus)) {
            return self.served.clone();
        }
        let pid = std::process::id();
        let (code, text) = if *format == StatusFormat::Json {
            // The report says who answered and how old the sweep is now.
            let mut snap = self.snapshot.clone();
            snap.served_by = Some(served::served_by(socket, pid, self.max_age_s, &snap));
            render(*format, &snap, &self.expect, &self.judged)
        } else {
            render(*format, &self.snapshot, &self.expect, &self.judged)
        };
        let head = served::AnswerRef {
            pid,
            root: &self.root,
            max_age_s: self.max_age_s,
            snapshot: None,
            code: Some(code),
        };
        match serde_json::to_vec(&head) {
            Ok(mut v) => {
                v.push(b'\n');
                v.extend_from_slice(text.as_bytes());
                Bytes::from(v)
            }
            Err(_) => self.served.clone(),
        }
    }
}

/// The socket's answer: [`served::Answer`] as one line.
fn served_line(s: &Snapshot, root: &Path, max_age_s: f64) -> Bytes {
    let a = served::AnswerRef {
        pid: std::process::id(),
        root,
        max_age_s,
        snapshot: Some(s),
        code: None,
    };
    match serde_json::to_vec(&a) {
        Ok(mut v) => {
            v.push(b'\n');
            Bytes::from(v)
        }
        // An empty answer: the client probes itself.
        Err(e) => {
            tracing::error!("cannot serialise the snapshot for the socket: {e}");
            Bytes::new()
        }
    }
}

struct Shared {
    current: RwLock<Arc<Rendered>>,
    sweeper: Arc<Mutex<Sweeper>>,
    sweeping: AtomicBool,
    generation: watch::Sender<u64>,
    sweeps: AtomicU64,
    max_age: Duration,
    answer_within: Duration,
    report_key: Option<ReportKey>,
}

impl Shared {
    fn current(&self) -> Arc<Rendered> {
        match self.current.read() {
            Ok(c) => Arc::clone(&c),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// Start a sweep unless one is running.
    fn kick(self: &Arc<Self>) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let sweeper = Arc::clone(&me.sweeper);
            let done = tokio::task::spawn_blocking(move || match sweeper.lock() {
                Ok(mut s) => s.sweep(),
                Err(p) => p.into_inner().sweep(),
            })
            .await;
            // The way is opened for the next sweep *before* the waiters are woken: a waiter
            // that finds this sweep too old kicks the next one, and must not find this one
            // still marked running — it would then wait for a sweep nobody started, and with
            // it every request in flight, until the answer deadline (seen under load with a
            // short cache: requests stalled 6 s).
            match done {
                Ok(r) => {
                    let r = Arc::new(r);
                    match me.current.write() {
                        Ok(mut c) => *c = r,
                        Err(p) => *p.into_inner() = r,
                    }
                    let n = me.sweeps.fetch_add(1, Ordering::AcqRel) + 1;
                    me.sweeping.store(false, Ordering::Release);
                    me.generation.send_replace(n);
                }
                Err(e) => {
                    tracing::error!("a sweep failed: {e}");
                    me.sweeping.store(false, Ordering::Release);
                    // Wake the waiters all the same: they kick another sweep.
                    me.generation.send_modify(|_| {});
                }
            }
        });
    }

    /// The answers of a sweep no older than `--max-age`, or — when the sweep this starts does
    /// not finish within the answer deadline — the last ones.
    async fn fresh(self: &Arc<Self>) -> Arc<Rendered> {
        let cur = self.current();
        if cur.at.elapsed() <= self.max_age {
            return cur;
        }
        let asked = Instant::now();
        let mut rx = self.generation.subscribe();
        self.kick();
        let waited = tokio::time::timeout(self.answer_within, async {
            loop {
                if rx.changed().await.is_err() {
                    break;
                }
                let c = self.current();
                // A sweep that started before this request may still be recent enough.
                if c.at >= asked || c.at.elapsed() <= self.max_age {
                    break;
                }
                self.kick();
            }
        })
        .await;
        if waited.is_err() {
            tracing::warn!(
                "no sweep finished within {:.1} s: answering from the last one",
                self.answer_within.as_secs_f64()
            );
        }
        self.current()
    }
}

async fn serve(s: Settings, mut sweeper: Sweeper) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(s.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}; is another gpuhost serve running? choose another with --listen",
                s.listen
            )
        })?;
    let local = listener.local_addr().context("reading the bound address")?;
    // The first sweep before the first answer: the server never answers without one.
    let first = tokio::task::spawn_blocking(move || {
        let r = sweeper.sweep();
        (sweeper, r)
    })
    .await
    .context("the first sweep failed")?;
    let (sweeper, rendered) = first;
    let report_key = sweeper.report_key.clone();
    let (generation, _) = watch::channel(1);
    let shared = Arc::new(Shared {
        current: RwLock::new(Arc::new(rendered)),
        sweeper: Arc::new(Mutex::new(sweeper)),
        sweeping: AtomicBool::new(false),
        generation,
        sweeps: AtomicU64::new(1),
        max_age: s.max_age,
        answer_within: s.timeout + Duration::from_secs(1),
        report_key,
    });
    let ticker = {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(s.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                if shared.current().at.elapsed() >= s.interval / 2 {
                    shared.kick();
                }
            }
        })
    };
    let socket = match &s.socket {
        Some(path) => match bind_socket(path) {
            Ok(Some((l, ino))) => {
                tokio::spawn(serve_socket(
                    l,
                    Arc::clone(&shared),
                    Arc::from(path.as_path()),
                ));
                Some((path.clone(), ino))
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(
                    "cannot answer gpuhost status on {}: {e:#}; status probes by itself",
                    path.display()
                );
                None
            }
        },
        None => None,
    };
    let app = Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/status", get(status))
        .with_state(Arc::clone(&shared));
    eprintln!(
        "gpuhost serve: listening on http://{local} (/metrics, /healthz, /status){}; sweep every {:.0} s, cache {:.1} s, NVML deadline {:.1} s",
        socket
            .as_ref()
            .map(|(p, _)| format!(" and {} (gpuhost status)", p.display()))
            .unwrap_or_default(),
        s.interval.as_secs_f64(),
        s.max_age.as_secs_f64(),
        s.timeout.as_secs_f64()
    );
    let limits = conns::Limits::from_rlimit();
    tracing::info!(
        "at most {} HTTP connections at once (the oldest is closed for a newcomer); headers within {} s",
        limits.connections,
        conns::HEADER_READ_TIMEOUT.as_secs()
    );
    conns::serve(listener, app, limits, shutdown_signal())
        .await
        .context("serving HTTP")?;
    ticker.abort();
    if let Some((path, ino)) = socket {
        // Only our own: a server started after us may have taken the path over.
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.ino() == ino) {
            let _ = std::fs::remove_file(&path);
        }
    }
    // Dropping the sweeper closes the probe child's stdin; it exits (or is killed).
    drop(shared);
    eprintln!("gpuhost serve: stopped");
    Ok(())
}

/// Bind the socket for `gpuhost status` at `path`, mode 0666 (its inode, to remove only our
/// own at exit). None when another server answers there already (it keeps it). A socket left
/// by a server that is gone is replaced; anything else at that path is an error.
fn bind_socket(path: &Path) -> Result<Option<(tokio::net::UnixListener, u64)>> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            anyhow::bail!("{} exists and is not a socket", path.display());
        }
        if served::answering(path) {
            tracing::warn!(
                "another gpuhost serve answers on {}: leaving it that socket",
                path.display()
            );
            return Ok(None);
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("making {} mode 0666", path.display()))?;
    let ino = std::fs::symlink_metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .ino();
    Ok(Some((l, ino)))
}

/// Answer `gpuhost status` on the socket: at most [`served::MAX_CLIENTS`] at once (more are
/// closed at once), each bounded in time ([`answer_socket`]).
async fn serve_socket(listener: tokio::net::UnixListener, shared: Arc<Shared>, path: Arc<Path>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(served::MAX_CLIENTS));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of file descriptors, most likely: let some go before accepting again.
                tracing::warn!("the status socket cannot accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // The usual case answered here, without a task: the question is already there and
        // the last sweep is fresh (a hop to another worker costs a wake-up, dear in a VM).
        let Some((stream, line, rest)) = answer_at_once(stream, &shared, &path) else {
            continue;
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let shared = Arc::clone(&shared);
        let path = Arc::clone(&path);
        tokio::spawn(async move {
            answer_socket(stream, &shared, &path, line, rest).await;
            drop(slot);
        });
    }
}

/// Answer a client whose whole question has arrived from a fresh sweep, here and now (None:
/// done). Else the stream back, with what was read of the question and what is left to write
/// of the answer, for a task.
fn answer_at_once(
    stream: tokio::net::UnixStream,
    shared: &Arc<Shared>,
    socket: &Path,
) -> Option<(tokio::net::UnixStream, Vec<u8>, Option<Bytes>)> {
    use std::io::{Read, Write};
    // Non-blocking, as tokio left it.
    let s = stream.into_std().ok()?;
    let mut b = [0u8; served::MAX_REQUEST];
    let got = match (&s).read(&mut b) {
        Ok(n) => b[..n].to_vec(),
        Err(_) => Vec::new(),
    };
    let mut rest = None;
    if let Some(req) = got.strip_suffix(b"\n").and_then(served::Request::parse) {
        let cur = shared.current();
        if cur.at.elapsed() <= shared.max_age {
            let answer = cur.answer(&req, shared.report_key.as_ref(), socket);
            match (&s).write(&answer) {
                Ok(k) if k == answer.len() => return None,
                Ok(k) => rest = Some(answer.slice(k..)),
                Err(_) => rest = Some(answer),
            }
        }
    }
    let stream = tokio::net::UnixStream::from_std(s).ok()?;
    Some((stream, got, rest))
}

/// How long a socket client may take to ask, and to take the answer.
const SOCKET_IO_WITHIN: Duration = Duration::from_secs(1);

/// One socket client: a request line of at most [`served::MAX_REQUEST`] bytes within a second
/// (`line`: what was read of it already), then the answer from a sweep at most `--max-age` old
/// (`rest`: what is left of one begun), written within a second.
async fn answer_socket(
    mut stream: tokio::net::UnixStream,
    shared: &Arc<Shared>,
    socket: &Path,
    mut line: Vec<u8>,
    rest: Option<Bytes>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = match rest {
        Some(r) => r,
        None => {
            let read = tokio::time::timeout(SOCKET_IO_WITHIN, async {
                let mut b = [0u8; served::MAX_REQUEST];
                while !line.contains(&b'\n') && line.len() <= served::MAX_REQUEST {
                    match stream.read(&mut b).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => line.extend_from_slice(&b[..n]),
                    }
                }
                true
            })
            .await;
            if read != Ok(true) {
                return;
            }
            let asked = line.split(|c| *c == b'\n').next().unwrap_or_default();
            match served::Request::parse(asked) {
                Some(req) => shared
                    .fresh()
                    .await
                    .answer(&req, shared.report_key.as_ref(), socket),
                None => Bytes::from_static(b"error: unknown request\n"),
            }
        }
    };
    let _ = tokio::time::timeout(SOCKET_IO_WITHIN, async {
        let _ = stream.write_all(&body).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => eprintln!("gpuhost serve: SIGTERM, finishing the requests in flight (at most {} s)", conns::DRAIN.as_secs()),
                _ = i.recv() => eprintln!("gpuhost serve: SIGINT, finishing the requests in flight (at most {} s)", conns::DRAIN.as_secs()),
            }
        }
        _ => {
            tracing::error!("cannot listen for signals; stop the server with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

const TEXT: &str = "text/plain; charset=utf-8";
/// The Prometheus text exposition format's content type.
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

async fn index() -> Response {
    (
        [(header::CONTENT_TYPE, TEXT)],
        "gpuhost serve: GET /metrics (Prometheus), /healthz (200 OK or WARNING, 503 otherwise), /status (JSON)\n",
    )
        .into_response()
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    let r = s.fresh().await;
    ([(header::CONTENT_TYPE, PROMETHEUS)], r.metrics.clone()).into_response()
}

async fn healthz(State(s): State<Arc<Shared>>) -> Response {
    let r = s.fresh().await;
    let code = if r.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        [(header::CONTENT_TYPE, TEXT)],
        format!("{}\n", r.health_line),
    )
        .into_response()
}

async fn status(State(s): State<Arc<Shared>>) -> Response {
    let r = s.fresh().await;
    (
        [(header::CONTENT_TYPE, "application/json")],
        r.status_json.clone(),
    )
        .into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_default_port_is_neither_node_exporter_nor_dcgm_exporter() {
        let a: SocketAddr = DEFAULT_LISTEN.parse().unwrap();
        assert!(a.ip().is_loopback());
        assert!(![9100, 9400].contains(&a.port()));
        assert!(!(9100..=9999).contains(&a.port()));
    }
}
