//! The HTTP connections of `gpuhost serve`, bounded so that the server stays answerable: a
//! client that sends its request slowly, or opens connections and sends nothing, holds a file
//! descriptor and a task, and enough of them would starve `/healthz` or, past the file limit,
//! `accept` itself. So:
//!
//! - a request's headers must arrive within [`HEADER_READ_TIMEOUT`] of the connection being
//!   ready for one (hyper's timer: also an idle keep-alive connection is closed then); no
//!   handler reads a body, and a connection whose request body is left unread is closed after
//!   its answer;
//! - at most [`Limits::connections`] connections at once, below the file limit (`RLIMIT_NOFILE`
//!   less a reserve for the probe child, the socket, the kernel log); when they are all taken,
//!   one connection is asked to close — the oldest idle one (or still sending its headers),
//!   else the oldest, after the answer under way — and the new one takes its place, so a newcomer such as a load balancer's
//!   `/healthz` is answered whatever the others do; meanwhile (at most [`SHED_WAIT`]) further
//!   connections wait in the kernel's listen backlog, holding no descriptor of ours;
//! - on SIGTERM or SIGINT no connection is accepted any more, every open one is asked to close,
//!   and after [`DRAIN`] the server stops whatever the clients do.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Notify, Semaphore};

/// How long a client may take to send a request's headers (and an idle keep-alive connection
/// may wait for its next request).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a new connection waits for an old one to close when every slot is taken.
pub(crate) const SHED_WAIT: Duration = Duration::from_secs(2);
/// How long SIGTERM waits for the connections to close before the server stops anyway.
pub(crate) const DRAIN: Duration = Duration::from_secs(3);
/// File descriptors kept free of connections: the listener, the status socket and its
/// clients, the probe child's pipes, /dev/kmsg, sysfs and /proc reads of a sweep.
const RESERVE_FDS: u64 = 64 + served_clients();

const fn served_clients() -> u64 {
    gpuhost_health::served::MAX_CLIENTS as u64
}

/// The bounds of the HTTP side.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Connections served at once.
    pub connections: usize,
}

impl Limits {
    /// From the file limit: what it leaves after the reserve, at most 1024, at least 8.
    pub(crate) fn from_rlimit() -> Limits {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(1024);
        Limits::for_nofile(soft)
    }

    fn for_nofile(soft: u64) -> Limits {
        let left = soft.saturating_sub(RESERVE_FDS);
        Limits {
            connections: usize::try_from(left.clamp(8, 1024)).unwrap_or(8),
        }
    }
}

/// The open connections, oldest first: each with the bell that asks it to close, and the
/// number of its requests under way (0: idle, or still sending its headers).
#[derive(Default)]
struct Open {
    next: u64,
    conns: VecDeque<Entry>,
}

struct Entry {
    id: u64,
    bell: Arc<Notify>,
    busy: Arc<AtomicUsize>,
}

impl Open {
    fn add(&mut self) -> (u64, Arc<Notify>, Arc<AtomicUsize>) {
        self.next += 1;
        let bell = Arc::new(Notify::new());
        let busy = Arc::new(AtomicUsize::new(0));
        self.conns.push_back(Entry {
            id: self.next,
            bell: Arc::clone(&bell),
            busy: Arc::clone(&busy),
        });
        (self.next, bell, busy)
    }

    fn remove(&mut self, id: u64) {
        self.conns.retain(|e| e.id != id);
    }

    /// Ask one connection to close: the oldest idle one, else the oldest.
    fn shed_one(&mut self) {
        let idle = self
            .conns
            .iter()
            .position(|e| e.busy.load(Ordering::SeqCst) == 0)
            .unwrap_or(0);
        if let Some(e) = self.conns.remove(idle) {
            e.bell.notify_one();
        }
    }

    fn close_all(&mut self) {
        for e in self.conns.drain(..) {
            e.bell.notify_one();
        }
    }
}

/// A request under way on its connection, counted until its answer is produced (or dropped).
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn enter(n: &Arc<AtomicUsize>) -> Busy {
        n.fetch_add(1, Ordering::SeqCst);
        Busy(Arc::clone(n))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long a connection asked to close may take to finish the answer under way.
const FINISH_WITHIN: Duration = Duration::from_secs(15);

fn lock(open: &Mutex<Open>) -> std::sync::MutexGuard<'_, Open> {
    open.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serve `app` on `listener` until `shutdown` completes, within `limits`; then close every
/// connection, waiting at most [`DRAIN`].
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let slots = Arc::new(Semaphore::new(limits.connections));
    let open = Arc::new(Mutex::new(Open::default()));
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors, most likely: let some go before accepting again.
                    tracing::warn!("cannot accept an HTTP connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Every slot taken: one connection is asked to close (an idle one closes at once) and
        // this one takes its place. Meanwhile nothing else is accepted: newcomers wait in the
        // kernel's listen backlog, holding no descriptor of ours.
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                lock(&open).shed_one();
                let freed = tokio::select! {
                    () = &mut shutdown => break,
                    s = tokio::time::timeout(SHED_WAIT, Arc::clone(&slots).acquire_owned()) => s,
                };
                match freed {
                    Ok(Ok(slot)) => slot,
                    // Every connection busy with an answer: this one is closed.
                    _ => continue,
                }
            }
        };
        let (app, open) = (app.clone(), Arc::clone(&open));
        tokio::spawn(async move {
            connection(stream, app, &open).await;
            drop(slot);
        });
    }
    drop(listener);
    lock(&open).close_all();
    // Every slot back: every connection closed.
    let all = u32::try_from(limits.connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            "some HTTP clients did not finish within {} s; closing their connections",
            DRAIN.as_secs()
        );
    }
    Ok(())
}

/// True when a request announces a body (`Content-Length` above 0, or `Transfer-Encoding`).
fn carries_body(h: &hyper::HeaderMap) -> bool {
    let length = h
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    length.is_some_and(|n| n > 0) || h.contains_key(hyper::header::TRANSFER_ENCODING)
}

/// 413 with `Connection: close`: serve's endpoints take no request body.
fn no_body_taken() -> axum::response::Response {
    let mut r = axum::response::Response::new(axum::body::Body::from(
        "gpuhost serve takes no request body\n",
    ));
    *r.status_mut() = hyper::StatusCode::PAYLOAD_TOO_LARGE;
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

/// One connection: HTTP/1 with the header timeout, until it ends or is asked to close; then an
/// idle connection (or one still sending its headers) is closed at once, one with an answer
/// under way finishes it first.
async fn connection(stream: tokio::net::TcpStream, app: Router, open: &Mutex<Open>) {
    let (id, bell, busy) = lock(open).add();
    let inner = TowerToHyperService::new(app);
    let counted = Arc::clone(&busy);
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        // No endpoint takes a body: one announced is answered at once and the connection
        // closed, so a client trickling a body cannot hold it (the body read timeout).
        let with_body = carries_body(req.headers());
        let answer = (!with_body).then(|| hyper::service::Service::call(&inner, req));
        let busy = Busy::enter(&counted);
        async move {
            let r = match answer {
                Some(a) => a.await,
                None => Ok(no_body_taken()),
            };
            drop(busy);
            r
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let conn = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = bell.notified() => {
            if busy.load(Ordering::SeqCst) > 0 {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(FINISH_WITHIN, conn.as_mut()).await;
            }
        }
    }
    lock(open).remove(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_stay_below_the_file_limit() {
        // node_exporter's and systemd's usual limits, and a tight one.
        for nofile in [256u64, 1024, 4096, 524_288] {
            let l = Limits::for_nofile(nofile);
            assert!(
                l.connections as u64 + RESERVE_FDS <= nofile.max(RESERVE_FDS + 8),
                "{nofile}: {l:?}"
            );
            assert!(l.connections >= 8 && l.connections <= 1024, "{l:?}");
        }
        assert_eq!(Limits::for_nofile(256).connections, 128);
        assert_eq!(Limits::for_nofile(524_288).connections, 1024);
    }
}
