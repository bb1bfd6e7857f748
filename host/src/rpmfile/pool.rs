//! The threads that hash an uncompressed payload's files in parallel, each against its digest
//! in the header (see [`super`]'s `read_plain`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use anyhow::anyhow;

use super::digest::Hasher;
use super::fault::Fault;

/// One file's data in the package file: where, how long, and its digest in the header.
pub(super) struct Job {
    pub(super) at: u64,
    pub(super) size: u64,
    pub(super) digest: String,
    pub(super) path: String,
}

/// The threads that hash the files' data, one per core (at most 8), each reading its file
/// with `pread` on a handle of its own.
pub(super) struct Pool {
    jobs: mpsc::Sender<Job>,
    workers: Vec<std::thread::JoinHandle<()>>,
    shared: Arc<Shared>,
}

/// What the pool's threads share: stop (a fault found, or the walk failed) and the first fault.
struct Shared {
    stop: AtomicBool,
    fault: Mutex<Option<Fault>>,
}

impl Shared {
    fn fail(&self, f: Fault) {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(mut first) = self.fault.lock() {
            first.get_or_insert(f);
        }
    }
}

impl Pool {
    pub(super) fn start(f: &File, shown: &str) -> std::io::Result<Pool> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        let (jobs, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            fault: Mutex::new(None),
        });
        let mut workers = Vec::with_capacity(n);
        for _ in 0..n {
            let (file, rx, shared) = (f.try_clone()?, rx.clone(), shared.clone());
            let shown = shown.to_string();
            workers.push(std::thread::spawn(move || {
                work(&file, &rx, &shared, &shown)
            }));
        }
        Ok(Pool {
            jobs,
            workers,
            shared,
        })
    }

    pub(super) fn push(&self, job: Job) {
        // The threads outlive the sender: a send fails only if they all panicked (found by
        // `finish`).
        let _ = self.jobs.send(job);
    }

    /// The walk failed: the threads drop what is left and end (not waited for).
    pub(super) fn stop(self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// Every job done: the first fault found, if any.
    pub(super) fn finish(self) -> Result<(), Fault> {
        drop(self.jobs);
        let mut panicked = false;
        for w in self.workers {
            panicked |= w.join().is_err();
        }
        let fault = self.shared.fault.lock().ok().and_then(|mut f| f.take());
        match fault {
            Some(f) => Err(f),
            None if panicked => Err(Fault::Source(anyhow!("a hashing thread panicked"))),
            None => Ok(()),
        }
    }
}

fn work(file: &File, rx: &Mutex<mpsc::Receiver<Job>>, shared: &Shared, shown: &str) {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        if shared.stop.load(Ordering::Relaxed) {
            continue;
        }
        if let Err(f) = hash(file, &job, &mut buf, &shared.stop) {
            let f = match f {
                Fault::Source(e) => Fault::Source(e.context(shown.to_string())),
                f => f,
            };
            shared.fail(f);
        }
    }
}

/// The job's data read and hashed against its digest.
fn hash(file: &File, job: &Job, buf: &mut [u8], stop: &AtomicBool) -> Result<(), Fault> {
    let mut h = Hasher::new(job.digest.len());
    let (mut at, mut left) = (job.at, job.size);
    while left > 0 {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        if let Some(sig) = crate::interrupt::received() {
            return Err(Fault::Interrupted(sig));
        }
        let n = left.min(buf.len() as u64) as usize;
        let mut got = 0;
        while got < n {
            match file.read_at(&mut buf[got..n], at + got as u64) {
                Ok(0) => {
                    return Err(Fault::Bad(format!(
                        "the payload ends inside {}'s data (truncated)",
                        job.path
                    )))
                }
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Fault::Source(anyhow!(e))),
            }
        }
        h.update(&buf[..n]);
        at += n as u64;
        left -= n as u64;
    }
    let name = h.name();
    if h.hex() != job.digest {
        return Err(Fault::Bad(format!(
            "its payload's {}: {name} digest: BAD (the payload is damaged or cut short)",
            job.path
        )));
    }
    Ok(())
}
