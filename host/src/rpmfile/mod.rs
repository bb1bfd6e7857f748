//! A package file read by gpuhost itself, once, as a stream: its headers ([`header`]), then its
//! payload, decompressed (gzip, xz, zstd, or none) and walked entry by entry ([`cpio`]). Only
//! the files a caller selects are written, into a fresh folder, each checked against the
//! header's digest as it is written; nothing passes through an intermediate archive, and files
//! of 4 GiB and more (rpm's stripped entries) are read as any other.
//!
//! Why not `rpm2cpio | cpio`: the pair writes the whole payload to disk before a byte of it is
//! used (a multi-GB CUDA local repo package, written once more), `rpm2cpio` refuses files over
//! 4 GiB, and `cpio` follows what the archive says (a symlink entry, then files under it, lands
//! outside the tree). `rpm2archive` has no uncompressed output on OL 8's rpm 4.14 (gzip of
//! GBs). The `rpm` crate reads the whole payload into memory. The format is small and rpm's
//! own; this reader checks what the archive says against the header before the first write:
//! - every entry is a file the header lists (not a `%ghost`), once, of the header's type and
//!   size; every file the header lists is in the payload (payload and header agree);
//! - every path is absolute, plain (no `.`, `..` or empty component) and inside the folders the
//!   caller allows; a symlink's target stays inside its folder, resolved component by
//!   component through the package's own links as the kernel resolves it in the unpacked tree;
//!   no file lies under a symlink; a FIFO, device or socket is refused;
//! - every file's data, written or not, matches the header's digest (SHA-2 only), whatever the
//!   compressor; a hard link's names without data share inode and digest with the name that
//!   carries it; a selected file that is a hard link is refused, by a check as by an extraction
//!   (one answer for one package, [`verify`] and [`extract`] judge the same files);
//! - one compressed stream is read, as rpm reads one;
//! - memory is bounded: at most 256 MiB whatever the header or the compressor asks for (the
//!   header's bounds in [`header`], measured in `host/tests/memory_bound.rs`; the
//!   decompressor's 128 MiB);
//! - the folder's filesystem has room for the selected files' sizes;
//! - each written file's SHA-256 family digest matches the header's;
//! - the whole payload is intact: its digest (`PAYLOADDIGEST`) as `rpm -K` checks it, or, for
//!   an uncompressed payload written as rpm writes it, every file's digest checked by one
//!   thread per core and every other byte of the archive against the header (see
//!   `read_plain`): 4 GiB in 1.2 s instead of 2.8 s on this 2-core machine.
//!
//! A refused package is [`Fault::Bad`] (bad input: the caller exits 2, nothing changed). A
//! source that cannot be read (an NFS export gone) is [`Fault::Source`]; a write that fails
//! (disk full) is [`Fault::Write`].

pub mod cpio;
mod decode;
mod digest;
mod fault;
pub mod header;
mod pool;
pub mod repodata;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use sha2::Digest;

pub use decode::by_suffix;
use decode::{compression, decompressor, is_source_error};
use digest::Hasher;
pub use fault::Fault;
pub use header::{Checked, FileInfo, Package};

/// What to extract: the folders the payload may hold anything in (every other entry refuses the
/// package), and which of its files to write.
pub struct Want<'a> {
    /// Absolute folders (`/var/cuda-repo-rhel9-13-0-local`, `/etc/yum.repos.d`); the folders
    /// above them may be listed as directories, nothing else.
    pub allowed: &'a [String],
    /// Which files (by header path) to write.
    pub select: &'a dyn Fn(&FileInfo) -> bool,
}

/// One file written: its header entry and where it is on this machine.
#[derive(Debug, Clone)]
pub struct Written {
    pub info: FileInfo,
    pub real: PathBuf,
}

/// Read `file`'s header (no payload).
pub fn package(file: &Path) -> Result<Package, Fault> {
    let f = open(file)?;
    header::read(&mut BufReader::new(f)).map_err(|e| bad(file, e))
}

/// Stream `file`'s payload once, writing the files `want` selects under `into` (a folder on
/// this machine, made if missing; the header's path `/a/b` lands at `into/a/b`). The package's
/// header, and what was written, in payload order. The payload's SHA-256 is checked against the
/// header's `PAYLOADDIGEST` on the way (and the header's against the signature header's), as
/// `rpm -K` checks them.
pub fn extract(file: &Path, want: &Want, into: &Path) -> Result<(Package, Vec<Written>), Fault> {
    stream(file, file, want, Some(into), &|_| true)
}

/// [`extract`] of `file`, a copy of `named` (a package staged onto the root's disk): what is
/// wrong with it is said of `named`, the file the user gave.
pub fn extract_named(
    file: &Path,
    named: &Path,
    want: &Want,
    into: &Path,
) -> Result<(Package, Vec<Written>), Fault> {
    stream(file, named, want, Some(into), &|_| true)
}

/// The same reading as [`extract`] with the same `want`, writing nothing: the package's
/// digests, every entry against its header and the folders it may hold files in, and the
/// selected files as [`extract`] would judge them (so a check and the change it precedes give
/// one answer). One read of the file.
pub fn verify(file: &Path, want: &Want) -> Result<Package, Fault> {
    stream(file, file, want, None, &|_| false).map(|(p, _)| p)
}

/// [`verify`], writing under `into` only those of the selected files that `only` also takes
/// (a repo's metadata, to check its packages against): the package judged as [`extract`] with
/// `want` judges it, a fraction of it written.
/// `file` is a copy of `named` (see [`extract_named`]).
pub fn verify_keeping(
    (file, named): (&Path, &Path),
    want: &Want,
    into: &Path,
    only: &dyn Fn(&FileInfo) -> bool,
) -> Result<(Package, Vec<Written>), Fault> {
    stream(file, named, want, Some(into), only)
}

fn stream(
    file: &Path,
    named: &Path,
    want: &Want,
    into: Option<&Path>,
    only: &dyn Fn(&FileInfo) -> bool,
) -> Result<(Package, Vec<Written>), Fault> {
    let mut f = open(file)?;
    let mut pkg = header::read(&mut BufReader::new(&f)).map_err(|e| bad(named, e))?;
    let shown = named.display().to_string();
    let judged = check(&pkg, want).map_err(|why| Fault::Bad(format!("{shown}: {why}")))?;
    let plan = Plan::new(&pkg, judged, into.is_some(), only);
    if let Some(into) = into {
        room(&pkg, &plan.write, into)?;
    }
    if plain_fits(&pkg, &f) {
        let named = |f: Fault| match f {
            Fault::Bad(why) => Fault::Bad(format!("{shown}: {why}")),
            f => f,
        };
        match read_plain(&f, &pkg, &plan, into, &shown).map_err(named)? {
            (written, true) => {
                pkg.payload_checked = Some(Checked::FileByFile);
                return Ok((pkg, written));
            }
            // Not as rpm writes it: the payload's digest decides, read whole.
            (written, false) => {
                tracing::info!(
                    "{shown}: its archive is not exactly as rpm writes it; its payload is checked whole"
                );
                undo(&written);
            }
        }
    }
    f.seek(SeekFrom::Start(pkg.payload_at))
        .map_err(|e| Fault::Source(anyhow!("{shown}: {e}")))?;
    let (payload, reading) = Payload::read(f);
    let stream = match decompressor(&pkg, payload) {
        Ok(s) => s,
        Err(e) => {
            reading.stop();
            return Err(bad(named, e));
        }
    };
    let mut cpio = cpio::Cpio::new(stream);
    let named = |f: Fault| match f {
        Fault::Bad(why) => Fault::Bad(format!("{shown}: {why}")),
        f => f,
    };
    let stop = || match crate::interrupt::received() {
        Some(sig) => Err(anyhow!(Interrupted(sig))),
        None => Ok(()),
    };
    // Every file's data against its header's digest, written or not: a payload digest
    // recomputed over altered data is not the header's files.
    let mut pass =
        |f: &FileInfo, size: u64, c: &mut cpio::Cpio<Box<dyn Read>>| hash_past(f, size, c, &stop);
    let written = match walk(&pkg, &plan, &mut cpio, into, &mut pass) {
        Ok(w) => w.written,
        Err(f) => {
            drop(cpio);
            return Err(payload_damaged(&pkg, reading, &shown).unwrap_or_else(|| named(f)));
        }
    };
    drop(cpio);
    // What follows the trailer (padding, the compressor's end) is the payload's too: the
    // reading thread hashes the file to its end.
    let got = reading
        .digest()
        .map_err(|e| Fault::Source(anyhow!("{shown}: {e}")))?;
    if pkg.payload_sha256.as_ref().is_some_and(|want| *want != got) {
        return Err(Fault::Bad(format!(
            "{shown}: payload SHA256 digest: BAD (the payload is damaged or cut short)"
        )));
    }
    // Without a payload digest in the header nothing here checked the payload whole.
    pkg.payload_checked = pkg.payload_sha256.is_some().then_some(Checked::Whole);
    Ok((pkg, written))
}

/// The walk of a package's payload found it wrong: when the header gives the payload's digest
/// and the payload does not match it, that is what is wrong (a damaged compressed stream
/// decodes to garbage that the walk may trip on first, in whatever way the damage falls), so
/// the reading thread hashes the file to its end and says so; `None` otherwise (the walk's
/// own fault stands). Any other stop ends the reading at once.
fn payload_damaged(pkg: &Package, reading: Reading, shown: &str) -> Option<Fault> {
    let Some(want) = &pkg.payload_sha256 else {
        reading.stop();
        return None;
    };
    if crate::interrupt::received().is_some() {
        reading.stop();
        return None;
    }
    let got = reading.digest().ok()?;
    (got != *want).then(|| {
        Fault::Bad(format!(
            "{shown}: payload SHA256 digest: BAD (the payload is damaged or cut short)"
        ))
    })
}

// An uncompressed payload (a CUDA local repo package's: gigabytes of RPMs that are compressed
// already) read without hashing it as one stream.
//
// The payload's SHA-256 (`PAYLOADDIGEST`) is one serial hash: 4 GiB cost 2.4 s of one core
// here before the first change, whatever the machine's cores. The header gives the same
// assurance file by file: each file's digest (`FILEDIGESTS`, SHA-2), and, for every other byte
// of the archive, what rpm's archive writer takes from the header (`rpmfilesStat`: name, mode,
// size, inode number, mtime; device numbers and checksum 0; zero padding; rpm's trailer; nothing
// after it). So the walk reads the entries' headers and skips their data; each file's data is
// read and hashed by one of a pool of threads, one per core, in parallel with the walk and
// each other, against the header's digest. Every byte is read once (the selected files by the
// walk, which writes and hashes them; the rest by the pool).
//
// An archive not exactly as rpm writes it (another packager's numbers, a damaged mtime) is not
// refused here: [`stream`] reads the payload whole and its digest decides, as for a compressed
// payload. A file whose data does not match its digest, a payload cut short, an entry the
// header does not list: refused as by the stream.

/// `pkg`'s payload (in `f`) is read this way: uncompressed, its header checked against the
/// signature header's digest, every file with data carrying a SHA-2 digest and the numbers
/// rpm writes into its entry.
fn plain_fits(pkg: &Package, f: &File) -> bool {
    let mut head = [0u8; 6];
    let read = f.read_at(&mut head, pkg.payload_at).unwrap_or(0);
    compression(pkg, &head[..read]) == "identity"
        && pkg.header_checked
        && matches!(pkg.digest_algo, 8..=11)
        && pkg
            .files
            .iter()
            .filter(|f| !f.ghost)
            .all(|f| f.archived.is_some() && (!f.is_file() || f.size == 0 || !f.digest.is_empty()))
}

/// Walk the payload, writing the files `plan` selects under `into`, every other file's data
/// hashed by the pool. What was written, and whether the archive is exactly as rpm writes it
/// (when not, nothing is refused for it: see the module doc).
fn read_plain(
    f: &File,
    pkg: &Package,
    plan: &Plan,
    into: Option<&Path>,
    shown: &str,
) -> Result<(Vec<Written>, bool), Fault> {
    let source = |e: std::io::Error| Fault::Source(anyhow!("{shown}: {e}"));
    let len = f.metadata().map_err(source)?.len();
    let payload = len.saturating_sub(pkg.payload_at);
    let mut r = BufReader::with_capacity(1 << 16, f.try_clone().map_err(source)?);
    r.seek(SeekFrom::Start(pkg.payload_at)).map_err(source)?;
    let mut cpio = cpio::Cpio::new(r);
    let pool = pool::Pool::start(f, shown).map_err(source)?;
    let at = pkg.payload_at;
    let mut pass = |file: &FileInfo, size: u64, c: &mut cpio::Cpio<BufReader<File>>| {
        if file.is_file() && size > 0 {
            pool.push(pool::Job {
                at: at + c.pos(),
                size,
                digest: file.digest.clone(),
                path: file.path.clone(),
            });
        }
        c.skip(size, payload)
    };
    let walked = walk(pkg, plan, &mut cpio, into, &mut pass);
    let walked = match walked {
        Ok(w) => w,
        Err(e) => {
            pool.stop();
            return Err(e);
        }
    };
    let after = cpio.nothing_after(payload);
    pool.finish()?;
    let exact = walked.exact && after.map_err(|e| Fault::Source(e.context(shown.to_string())))?;
    Ok((walked.written, exact))
}

/// The files [`read_plain`] wrote, removed (the payload is read again whole).
fn undo(written: &[Written]) {
    for w in written.iter().filter(|w| !w.info.is_dir()) {
        if let Err(e) = std::fs::remove_file(&w.real) {
            tracing::warn!("could not remove {}: {e}", w.real.display());
        }
    }
}

/// The package file from the payload on, read and hashed by a thread of its own while the
/// caller decompresses and walks what it has read (on two cores the digest then costs the walk
/// no time: 4 GiB hash in about 2.4 s here). Chunks of 1 MiB, at most 8 ahead.
struct Payload {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
}

/// The reading thread: its digest of everything from the payload on, or why it stopped.
struct Reading {
    thread: std::thread::JoinHandle<std::io::Result<String>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Payload {
    fn read(mut f: File) -> (Payload, Reading) {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut h = sha2::Sha256::new();
            loop {
                // Stopped by the walk (a bad package, a signal: the walk says which).
                if stopped.load(Ordering::Relaxed) {
                    return Err(std::io::Error::other(
                        "stopped before the end of the payload",
                    ));
                }
                let mut buf = vec![0u8; 1 << 20];
                let n = match read_full(&mut f, &mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        let kind = e.kind();
                        let text = e.to_string();
                        let _ = tx.send(Err(e));
                        return Err(std::io::Error::new(kind, text));
                    }
                };
                if n == 0 {
                    return Ok(crate::fsutil::hex(&h.finalize()));
                }
                buf.truncate(n);
                h.update(&buf);
                // The walk may be done before the file's end (what follows the trailer):
                // the rest is hashed all the same.
                let _ = tx.send(Ok(buf));
            }
        });
        let payload = Payload {
            rx,
            chunk: Vec::new(),
            at: 0,
        };
        (payload, Reading { thread, stop })
    }
}

/// `buf` filled from `f` as far as it goes: fewer bytes only at the file's end.
fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Read for Payload {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let have = self.fill_buf()?;
        let n = have.len().min(buf.len());
        buf[..n].copy_from_slice(&have[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Payload {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.at >= self.chunk.len() {
            match self.rx.recv() {
                Ok(Ok(c)) => {
                    self.chunk = c;
                    self.at = 0;
                }
                Ok(Err(e)) => return Err(decode::from_source(e)),
                // The thread is done: the file's end.
                Err(_) => return Ok(&[]),
            }
        }
        Ok(&self.chunk[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.chunk.len());
    }
}

impl Reading {
    /// The walk failed: the thread stops at its next chunk (it is not waited for).
    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The SHA-256 of everything from the payload on, once the thread has read to the end.
    fn digest(self) -> std::io::Result<String> {
        self.thread
            .join()
            .map_err(|_| std::io::Error::other("the reading thread panicked"))?
    }
}

fn open(file: &Path) -> Result<File, Fault> {
    crate::fsutil::open_named_file(file).map_err(|e| match e.kind() {
        std::io::ErrorKind::Other => Fault::Bad(format!("{}: {e}", file.display())),
        _ => Fault::Source(anyhow!("{}: {e}", file.display())),
    })
}

fn bad(file: &Path, e: anyhow::Error) -> Fault {
    // An I/O error other than a short read or a corrupt compressed stream is the source's, not
    // the package's.
    let io = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>());
    match io {
        Some(io) if is_source_error(io) => Fault::Source(e.context(file.display().to_string())),
        _ => Fault::Bad(format!("{}: {e:#}", file.display())),
    }
}

/// The header's files checked against `want` (see the module doc): for each file index, whether
/// it is written.
fn check(pkg: &Package, want: &Want) -> Result<Vec<bool>, String> {
    let links: Vec<&str> = pkg
        .files
        .iter()
        .filter(|f| f.is_link() && !f.ghost)
        .map(|f| f.path.as_str())
        .collect();
    let targets: HashMap<&str, &str> = pkg
        .files
        .iter()
        .filter(|f| f.is_link() && !f.ghost)
        .map(|f| (f.path.as_str(), f.link.as_str()))
        .collect();
    let mut plan = Vec::with_capacity(pkg.files.len());
    for f in &pkg.files {
        if f.ghost {
            plan.push(false);
            continue;
        }
        let p = &f.path;
        if !plain(p) {
            return Err(format!(
                "its payload names {p:?}, which is not a plain absolute path"
            ));
        }
        let inside = want.allowed.iter().find(|a| under(p, a));
        let above = want.allowed.iter().any(|a| under(a, p)) && f.is_dir();
        let Some(folder) = inside.or(if above { Some(p) } else { None }) else {
            return Err(format!(
                "its payload holds {p}, outside the package's own folders ({})",
                want.allowed.join(", ")
            ));
        };
        if !(f.is_file() || f.is_dir() || f.is_link()) {
            return Err(format!(
                "its payload holds {p}, which is a FIFO, device or socket"
            ));
        }
        if f.is_link() && !link_stays(p, &f.link, folder, &targets) {
            return Err(format!(
                "its payload holds the link {p} -> {}, which leaves {folder}",
                f.link
            ));
        }
        if let Some(l) = links.iter().find(|l| p.len() > l.len() && under(p, l)) {
            return Err(format!("its payload holds {p} under the link {l}"));
        }
        if f.is_file() && f.size > 0 && !matches!(pkg.digest_algo, 8..=11) {
            return Err(format!(
                "its file digests use rpm's hash algorithm {}, not SHA-2",
                pkg.digest_algo
            ));
        }
        if f.is_file() && f.size > 0 && f.digest.len() < 56 {
            return Err(format!("its header gives {p} no SHA-2 digest"));
        }
        plan.push((want.select)(f));
    }
    Ok(plan)
}

/// Absolute with no empty, `.` or `..` component.
fn plain(p: &str) -> bool {
    p.starts_with('/') && p.len() > 1 && p[1..].split('/').all(|c| !matches!(c, "" | "." | ".."))
}

/// `p` is `dir` or inside it.
fn under(p: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    p == dir || p.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// The most links one resolution follows (the kernel's `MAXSYMLINKS`).
const MAX_HOPS: usize = 40;

/// A link at `link` to `target` resolves inside `folder`, component by component through the
/// package's own links (`links`: path → target) as the kernel resolves it in the unpacked tree:
/// `a/../b` after a link `a -> x/y` is `x/b`, not `b`. Climbing above the tree's root (which,
/// unpacked on this machine, is a folder of the build host) or a loop is not inside.
fn link_stays(link: &str, target: &str, folder: &str, links: &HashMap<&str, &str>) -> bool {
    resolve(link, target, links).is_some_and(|r| under(&r, folder))
}

/// Where the link at `link` to `target` leads (see [`link_stays`]); `None` above the root or
/// after [`MAX_HOPS`] links.
fn resolve(link: &str, target: &str, links: &HashMap<&str, &str>) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if !target.starts_with('/') {
        let dir = link.rsplit_once('/').map_or("", |(d, _)| d);
        parts.extend(dir.split('/').filter(|c| !c.is_empty()).map(str::to_string));
    }
    let mut todo: std::collections::VecDeque<String> =
        target.split('/').map(str::to_string).collect();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        match c.as_str() {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => {
                parts.push(name.to_string());
                let here = format!("/{}", parts.join("/"));
                if let Some(next) = links.get(here.as_str()) {
                    hops += 1;
                    if hops > MAX_HOPS {
                        return None;
                    }
                    parts.pop();
                    if next.starts_with('/') {
                        parts.clear();
                    }
                    for c in next.split('/').rev() {
                        todo.push_front(c.to_string());
                    }
                }
            }
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// The folder's filesystem has room for the selected files (their header sizes), before the
/// first write.
fn room(pkg: &Package, plan: &[bool], into: &Path) -> Result<(), Fault> {
    let need: u64 = pkg
        .files
        .iter()
        .zip(plan)
        .filter(|(f, &w)| w && f.is_file())
        .map(|(f, _)| f.size)
        .sum();
    std::fs::create_dir_all(into).map_err(|e| Fault::Write(into.to_path_buf(), e))?;
    let st = rustix::fs::statvfs(into).map_err(|e| Fault::Write(into.to_path_buf(), e.into()))?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if need > free {
        return Err(Fault::Write(
            into.to_path_buf(),
            std::io::Error::other(format!(
                "the files to extract need {} MiB and its filesystem has {} MiB free",
                need.div_ceil(1 << 20),
                free >> 20
            )),
        ));
    }
    Ok(())
}

/// For each of a package's files: whether it is judged as a selected file (a hard link refused,
/// as [`write_entry`] would), and whether it is written.
struct Plan {
    judged: Vec<bool>,
    write: Vec<bool>,
}

impl Plan {
    /// The files `judged` as selected, those of them `only` takes written (when `writing`).
    fn new(
        pkg: &Package,
        judged: Vec<bool>,
        writing: bool,
        only: &dyn Fn(&FileInfo) -> bool,
    ) -> Plan {
        let write = (judged.iter().zip(&pkg.files))
            .map(|(&j, f)| j && writing && only(f))
            .collect();
        Plan { judged, write }
    }
}

/// Read `f`'s data (`size` bytes) past, a regular file's held to its header's digest.
fn hash_past<R: Read>(
    f: &FileInfo,
    size: u64,
    c: &mut cpio::Cpio<R>,
    stop: &dyn Fn() -> Result<()>,
) -> Result<()> {
    let mut hash = (f.is_file() && size > 0).then(|| Hasher::new(f.digest.len()));
    c.data(
        size,
        |b| {
            if let Some(h) = hash.as_mut() {
                h.update(b);
            }
            Ok(())
        },
        stop,
    )?;
    let Some(h) = hash else { return Ok(()) };
    let name = h.name();
    if h.hex() != f.digest {
        anyhow::bail!(
            "its payload's {}: {name} digest: BAD (the payload is damaged or altered)",
            f.path
        );
    }
    Ok(())
}

/// What [`walk`] does with a file's data it does not write: read it past (a stream), or skip
/// it and hand it to the hashing threads (an uncompressed payload).
type Pass<'a, R> = dyn FnMut(&FileInfo, u64, &mut cpio::Cpio<R>) -> Result<()> + 'a;

/// The entries in payload order, each checked against the header, the selected ones written.
fn walk<R: Read>(
    pkg: &Package,
    plan: &Plan,
    cpio: &mut cpio::Cpio<R>,
    into: Option<&Path>,
    pass: &mut Pass<R>,
) -> Result<Walked, Fault> {
    let by_path: HashMap<&str, usize> = pkg
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.as_str(), i))
        .collect();
    let mut seen = vec![false; pkg.files.len()];
    let mut links = HardLinks::default();
    let mut written = Vec::new();
    let mut exact = true;
    let stop = || match crate::interrupt::received() {
        Some(sig) => Err(anyhow!(Interrupted(sig))),
        None => Ok(()),
    };
    let read = fault_of;
    while let Some(entry) = cpio.next_entry().map_err(unwalkable)? {
        stop().map_err(read)?;
        let i = match &entry.named {
            cpio::Named::Path(p) => by_path.get(p.strip_prefix('.').unwrap_or(p)).copied(),
            cpio::Named::Index(i) => Some(*i).filter(|&i| i < pkg.files.len()),
        };
        let Some(i) = i.filter(|&i| !pkg.files[i].ghost) else {
            return Err(Fault::Bad(format!(
                "its payload holds {:?}, which its header does not list (payload and header disagree)",
                entry.named
            )));
        };
        let f = &pkg.files[i];
        if std::mem::replace(&mut seen[i], true) {
            return Err(Fault::Bad(format!("its payload holds {} twice", f.path)));
        }
        let size = data_size(f, &entry)?;
        links.note(i, f, size, plan.judged[i])?;
        exact &= as_rpm_writes(f, &entry);
        if let Some(out) = into.filter(|_| plan.write[i]) {
            let out = out.join(f.path.trim_start_matches('/'));
            write_entry(f, size, cpio, &out, &stop).map_err(read)?;
            written.push(Written {
                info: f.clone(),
                real: out,
            });
        } else {
            pass(f, size, cpio).map_err(read)?;
        }
    }
    if let Some(f) = pkg.files.iter().zip(&seen).find(|(f, s)| !**s && !f.ghost) {
        return Err(Fault::Bad(format!(
            "its header lists {}, which its payload does not hold (payload and header disagree, or the payload is truncated)",
            f.0.path
        )));
    }
    links.all_carried(&pkg.files)?;
    Ok(Walked {
        written,
        exact: exact && cpio.clean,
    })
}

/// What a failed step of the walk is: an interruption, a failed write, the source's read
/// error, or the package's fault.
fn fault_of(e: anyhow::Error) -> Fault {
    match e.downcast_ref::<Interrupted>() {
        Some(Interrupted(sig)) => Fault::Interrupted(*sig),
        None if e.chain().any(|c| c.is::<WriteFailed>()) => match e.downcast::<WriteFailed>() {
            Ok(WriteFailed(p, io)) => Fault::Write(p, io),
            Err(e) => Fault::Source(e),
        },
        None => match e.chain().find_map(|c| c.downcast_ref::<std::io::Error>()) {
            Some(io) if is_source_error(io) => Fault::Source(e),
            _ => Fault::Bad(format!("{e:#}")),
        },
    }
}

/// An archive that cannot be walked (a compressed payload decodes to garbage before its
/// decompressor's own check at the block's end) is a damaged payload, as that check says; a
/// read of the source that failed stays the source's.
fn unwalkable(e: anyhow::Error) -> Fault {
    let io = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>());
    match io {
        Some(io) if is_source_error(io) => fault_of(e),
        _ => fault_of(e.context("the payload is damaged: its archive")),
    }
}

/// A hard link's names in the archive: every name but one comes with no data (rpm writes the
/// data once, with the set's last name); each must share its header inode and digest with a
/// name that carries the data, or rpm finds the archive broken inside the transaction.
#[derive(Default)]
struct HardLinks {
    /// Files whose entry came without data.
    waiting: Vec<usize>,
    /// Header inode → the file whose entry carried the data.
    carried: HashMap<u64, usize>,
}

impl HardLinks {
    /// File `i`'s entry (`size` bytes of data; `selected` to be written) seen.
    fn note(&mut self, i: usize, f: &FileInfo, size: u64, selected: bool) -> Result<(), Fault> {
        if !f.is_file() || f.size == 0 {
            return Ok(());
        }
        let inode = f.archived.map(|a| a.inode);
        if size > 0 {
            if let Some(n) = inode {
                self.carried.entry(n).or_insert(i);
            }
            return Ok(());
        }
        if selected {
            return Err(Fault::Bad(format!(
                "its payload holds {} as a hard link, which gpuhost does not extract",
                f.path
            )));
        }
        if inode.is_none() {
            return Err(Fault::Bad(format!(
                "its payload holds {} as a hard link with no data, and its header gives no inode to find the data by",
                f.path
            )));
        }
        self.waiting.push(i);
        Ok(())
    }

    /// Every name without data shares its inode, size and digest with one that had it.
    fn all_carried(&self, files: &[FileInfo]) -> Result<(), Fault> {
        for &i in &self.waiting {
            let f = &files[i];
            let with = f
                .archived
                .and_then(|a| self.carried.get(&a.inode))
                .map(|&j| &files[j]);
            if !with.is_some_and(|c| c.size == f.size && c.digest == f.digest) {
                return Err(Fault::Bad(format!(
                    "its payload holds {} as a hard link whose data no entry of the same file carries (payload and header disagree)",
                    f.path
                )));
            }
        }
        Ok(())
    }
}

/// What [`walk`] wrote, and whether every entry, padding and the trailer are exactly what rpm
/// writes from the header (every byte of the archive other than the files' data accounted
/// for by the header).
struct Walked {
    written: Vec<Written>,
    exact: bool,
}

/// The entry's numbers are those rpm's archive writer takes from the header for `f`.
fn as_rpm_writes(f: &FileInfo, e: &cpio::Entry) -> bool {
    match (e.stat, f.archived) {
        (cpio::Stat::Stripped, _) => true,
        (cpio::Stat::Newc { ino, mtime, zeros }, Some(a)) => {
            zeros && a.rdev == 0 && ino == a.inode && mtime == a.mtime && e.mode == f.mode
        }
        _ => false,
    }
}

#[derive(Debug)]
struct Interrupted(i32);
impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "signal {}", self.0)
    }
}
impl std::error::Error for Interrupted {}

#[derive(Debug)]
struct WriteFailed(PathBuf, std::io::Error);
impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writing {}: {}", self.0.display(), self.1)
    }
}
impl std::error::Error for WriteFailed {}

/// How many bytes of data the entry carries, checked against the header: a regular file's
/// size (0 for a hard link's earlier names), a link's target, nothing for a directory; a
/// `newc` entry's type must be the header's.
fn data_size(f: &FileInfo, e: &cpio::Entry) -> Result<u64, Fault> {
    let disagree = |what: &str| {
        Fault::Bad(format!(
            "its payload's {} has another {what} than its header says (payload and header disagree)",
            f.path
        ))
    };
    let want = if f.is_file() {
        f.size
    } else if f.is_link() {
        f.link.len() as u64
    } else {
        0
    };
    match e.size {
        None => Ok(want),
        Some(_) if e.mode & 0o170000 != f.mode & 0o170000 => Err(disagree("type")),
        Some(0) if f.is_file() && e.nlink > 1 => Ok(0),
        Some(s) if s == want => Ok(s),
        Some(_) => Err(disagree("size")),
    }
}

/// Write one selected entry at `out`: a directory, a file (its digest checked), or a link
/// (checked to stay inside by [`check`]). Parents are made as plain directories; nothing on the
/// way is followed.
fn write_entry<R: Read>(
    f: &FileInfo,
    size: u64,
    cpio: &mut cpio::Cpio<R>,
    out: &Path,
    stop: &dyn Fn() -> Result<()>,
) -> Result<()> {
    let failed = |e: std::io::Error| anyhow!(WriteFailed(out.to_path_buf(), e));
    if let Some(parent) = out.parent() {
        dirs(parent).map_err(failed)?;
    }
    if f.is_dir() {
        dirs(out).map_err(failed)?;
        return cpio.data(size, |_| Ok(()), stop);
    }
    if f.is_link() {
        cpio.data(size, |_| Ok(()), stop)?;
        return std::os::unix::fs::symlink(&f.link, out).map_err(failed);
    }
    if size == 0 && f.size > 0 {
        anyhow::bail!("{} is a hard link, which gpuhost does not extract", f.path);
    }
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(out)
        .map_err(failed)?;
    let mut hash = Hasher::new(f.digest.len());
    cpio.data(
        size,
        |b| {
            hash.update(b);
            w.write_all(b).map_err(failed)
        },
        stop,
    )?;
    w.flush().map_err(failed)?;
    let name = hash.name();
    if hash.hex() != f.digest {
        anyhow::bail!(
            "its payload's {}: {name} digest: BAD (the payload is damaged or cut short)",
            f.path
        );
    }
    Ok(())
}

/// `dir` and the folders above it made as plain directories; an existing one must be a
/// directory, not a link.
fn dirs(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "{} is in the way (not a directory)",
                dir.display()
            )))
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    if let Some(p) = dir.parent() {
        dirs(p)?;
    }
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "../../tests/support/craft.rs"]
mod craft;

#[cfg(test)]
#[allow(clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_links_are_judged_lexically() {
        assert!(plain("/var/r/x.rpm"));
        for p in ["var/x", "/var/../etc", "/var//x", "/var/./x", "/"] {
            assert!(!plain(p), "{p}");
        }
        assert!(under("/var/r/x", "/var/r"));
        assert!(under("/var/r", "/var/r/"));
        assert!(!under("/var/rx", "/var/r"));
        let none = HashMap::new();
        assert!(link_stays("/var/r/a", "b/c", "/var/r", &none));
        assert!(link_stays("/var/r/d/a", "../b", "/var/r", &none));
        assert!(!link_stays(
            "/var/r/a",
            "../../../tmp/escape",
            "/var/r",
            &none
        ));
        assert!(!link_stays("/var/r/a", "/tmp/escape", "/var/r", &none));
        assert!(!link_stays("/var/r/a", "../s", "/var/r", &none));
    }

    /// Issue 53: a link through a link of the package (`zz-b -> .`) is resolved as the kernel
    /// resolves it in the unpacked tree, not lexically.
    #[test]
    fn links_are_resolved_through_the_packages_own_links() {
        let links: HashMap<&str, &str> = [("/var/r/zz-b", ".")].into_iter().collect();
        // Lexically /var/r/zz-b/x; really /var/x (zz-b is /var/r, its `..` is /var).
        assert!(!link_stays(
            "/var/r/repodata/repomd.xml",
            "../zz-b/zz-b/../x",
            "/var/r",
            &links
        ));
        assert!(link_stays(
            "/var/r/repodata/repomd.xml",
            "../zz-b/x",
            "/var/r",
            &links
        ));
        // Climbing above the tree's root: the build host's folders.
        let up = "../".repeat(12) + "etc/passwd";
        assert!(!link_stays("/var/r/a", &up, "/var/r", &links));
        // A loop.
        let looped: HashMap<&str, &str> =
            [("/var/r/a", "b"), ("/var/r/b", "a")].into_iter().collect();
        assert!(!link_stays("/var/r/c", "a", "/var/r", &looped));
        // A chain that ends outside.
        let out: HashMap<&str, &str> = [("/var/r/b", "../../etc")].into_iter().collect();
        assert!(!link_stays("/var/r/a", "b/passwd", "/var/r", &out));
    }

    use craft::{Craft, File};
    use rstest::rstest;

    /// A local repo's folder with two packages; `b` and `a` names of one file (a hard link).
    fn hard_linked(carried: bool) -> Vec<File> {
        let mut a = File::reg("/var/r/a.rpm", b"the package's bytes", 3);
        a.nlink = 2;
        a.carries = false;
        let mut b = a.clone();
        b.path = "/var/r/b.rpm".into();
        b.carries = carried;
        vec![
            File::dir("/var/r", 1),
            File::reg("/var/r/x.rpm", b"x", 2),
            a,
            b,
        ]
    }

    fn judged(c: &Craft, select_all: bool) -> Result<Package, Fault> {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("p.rpm");
        std::fs::write(&file, c.build()).expect("write");
        let allowed = ["/var/r".to_string()];
        let all = |_: &FileInfo| true;
        let none = |_: &FileInfo| false;
        let want = Want {
            allowed: &allowed,
            select: if select_all { &all } else { &none },
        };
        verify(&file, &want)
    }

    fn refused(r: Result<Package, Fault>) -> String {
        match r {
            Err(Fault::Bad(why)) => why,
            Err(f) => panic!("not refused as the package's fault: {f}"),
            Ok(_) => panic!("accepted"),
        }
    }

    /// Issue 53, item 3: a hard link's names without data are read when a name of the same
    /// file carries it (as rpm writes them), and refused when none does — with every
    /// compressor, whether the file is extracted or not.
    #[rstest]
    fn a_hard_link_without_its_data_is_refused(
        #[values("identity", "gzip", "xz", "zstd")] how: &'static str,
    ) {
        let mut c = Craft::new(hard_linked(true));
        c.compressor = how;
        judged(&c, false).unwrap_or_else(|e| panic!("{how}: {e}"));
        let mut c = Craft::new(hard_linked(false));
        c.compressor = how;
        let why = refused(judged(&c, false));
        assert!(
            why.contains("hard link whose data no entry"),
            "{how}: {why}"
        );
    }

    /// A file's data altered, the payload's digest recomputed over it: every file is held to
    /// its header's digest, extracted or not.
    #[rstest]
    fn altered_data_under_a_recomputed_payload_digest_is_refused(
        #[values("identity", "gzip", "xz", "zstd")] how: &'static str,
    ) {
        let mut files = hard_linked(true);
        files[1].altered = Some(b"y".to_vec());
        let mut c = Craft::new(files);
        c.compressor = how;
        let why = refused(judged(&c, false));
        assert!(
            why.contains("/var/r/x.rpm") && why.contains("digest: BAD"),
            "{how}: {why}"
        );
    }

    /// What `apply` refuses of the files it extracts, a check without writing refuses too:
    /// a selected hard link, file digests that are not SHA-2.
    #[test]
    fn a_check_judges_the_selected_files_as_the_extraction_does() {
        let c = Craft::new(hard_linked(true));
        let why = refused(judged(&c, true));
        assert!(why.contains("as a hard link"), "{why}");
        let mut c = Craft::new(vec![
            File::dir("/var/r", 1),
            File::reg("/var/r/x.rpm", b"x", 2),
        ]);
        c.digest_algo = 1;
        for all in [true, false] {
            let why = refused(judged(&c, all));
            assert!(why.contains("not SHA-2"), "{why}");
        }
    }

    /// rpm reads one compressed stream: an archive that runs on into a second is cut short.
    #[test]
    fn an_archive_split_over_two_xz_streams_is_refused() {
        let mut c = Craft::new(hard_linked(true));
        c.compressor = "xz";
        let archive = c.archive();
        let (one, two) = archive.split_at(archive.len() / 2);
        let mut payload = craft::compress("xz", one);
        payload.extend(craft::compress("xz", two));
        c.payload = Some(payload);
        let why = refused(judged(&c, false));
        assert!(why.contains("payload"), "{why}");
    }

    /// An archive that cannot be walked (here a `newc` header field that is not hex, as a
    /// damaged xz block decodes to before its check at the block's end) is said to be damaged,
    /// whatever byte the damage hit (found by CI: a flipped byte made "a cpio header field …
    /// that is not hex" alone, without the word a user and the test look for).
    #[test]
    fn an_archive_that_cannot_be_walked_is_a_damaged_payload() {
        let mut c = Craft::new(hard_linked(true));
        c.compressor = "xz";
        let mut archive = c.archive();
        archive[6 + 8 + 3] = b'z';
        c.payload = Some(craft::compress("xz", &archive));
        let why = refused(judged(&c, false));
        assert!(
            why.contains("the payload is damaged") && why.contains("not hex"),
            "{why}"
        );
    }

    /// A compressed payload damaged anywhere (one byte flipped at 9 places through it) is said
    /// to be damaged by its digest, however the damage decodes: a decompressor's error, or
    /// garbage the walk trips on first (a name the header does not list, a size, a field that is
    /// not hex). Before, the walk's own words came out, and CI's freshly made test world once
    /// flipped a byte that gave "a cpio header field … that is not hex" alone.
    #[rstest]
    fn a_damaged_compressed_payload_is_said_to_be_damaged_wherever_the_damage_falls(
        #[values("gzip", "xz", "zstd")] how: &'static str,
    ) {
        let mut files = hard_linked(true);
        let noise: Vec<u8> = (0..60_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        files.push(File::reg("/var/r/big.rpm", &noise, 9));
        let mut c = Craft::new(files);
        c.compressor = how;
        let bytes = c.build();
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("p.rpm");
        std::fs::write(&file, &bytes).expect("write");
        let at = package(&file).expect("header").payload_at as usize;
        let allowed = ["/var/r".to_string()];
        let none = |_: &FileInfo| false;
        let want = Want {
            allowed: &allowed,
            select: &none,
        };
        for k in 1..10 {
            let mut damaged = bytes.clone();
            let i = at + (bytes.len() - at) * k / 10;
            damaged[i] ^= 0x55;
            std::fs::write(&file, &damaged).expect("write");
            let why = refused(verify(&file, &want));
            assert!(
                why.contains("payload SHA256 digest: BAD"),
                "{how} at {k}/10: {why}"
            );
        }
    }

    /// A stream that asks its decompressor for 2 GiB is refused before the memory is given
    /// (`decode::MEMLIMIT`, 128 MiB).
    #[rstest]
    #[case::xz("xz")]
    #[case::lzma("lzma")]
    #[case::zstd("zstd")]
    fn a_stream_asking_for_more_memory_than_the_bound_is_refused(#[case] how: &'static str) {
        let mut c = Craft::new(hard_linked(true));
        c.compressor = how;
        let payload = match how {
            "xz" => {
                // xz -1's stream with its LZMA2 dictionary byte set to 2 GiB (38), the block
                // header's CRC32 made right again.
                let mut p = craft::compress("xz", &c.archive());
                let size = (usize::from(p[12]) + 1) * 4;
                p[16] = 38;
                let mut crc = flate2::Crc::new();
                crc.update(&p[12..12 + size - 4]);
                p[12 + size - 4..12 + size].copy_from_slice(&crc.sum().to_le_bytes());
                p
            }
            // The .lzma header: properties, a 2 GiB dictionary, size unknown.
            "lzma" => [&[0x5d, 0, 0, 0, 0x80][..], &[0xff; 8]].concat(),
            // A zstd frame whose window is 2^31 bytes, with one empty raw block.
            _ => vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 21 << 3, 0x01, 0x00, 0x00],
        };
        c.payload = Some(payload);
        let why = refused(judged(&c, false));
        assert!(why.contains("cannot be decompressed"), "{how}: {why}");
    }

    /// A header that asks for more than gpuhost's bounds is refused when read, before its
    /// strings are made: 131,073 empty directory names (each would cost a `String`), and a
    /// header of 33 MiB (beyond the 32 MiB bound; rpm's own allows 256 MiB).
    #[rstest]
    #[case(header::MAX_FILES + 1, 0, "strings, beyond gpuhost's bound")]
    #[case(0, 33 << 20, "beyond gpuhost's bounds")]
    fn a_header_beyond_the_bounds_is_refused_when_read(
        #[case] n: usize,
        #[case] filler: usize,
        #[case] said: &str,
    ) {
        let mut c = Craft::new(hard_linked(true));
        c.empty_strings = n;
        c.filler = filler;
        let why = refused(judged(&c, false));
        assert!(why.contains(said), "{why}");
    }

    /// A link of the payload through another (`zz-b -> .`) that lexically stays in the repo
    /// and really leaves it: refused, as by the check with no write.
    #[test]
    fn a_link_through_a_link_out_of_the_folder_is_refused() {
        let files = vec![
            File::dir("/var/r", 1),
            File::link("/var/r/zz-b", ".", 2),
            File::dir("/var/r/repodata", 3),
            File::link("/var/r/repodata/repomd.xml", "../zz-b/zz-b/../x", 4),
        ];
        for all in [true, false] {
            let why = refused(judged(&Craft::new(files.clone()), all));
            assert!(why.contains("leaves /var/r"), "{why}");
        }
    }
}
