//! NVIDIA's local repo package read once in an `apply` (issue 42).
//!
//! `plan` reads the package whole to check it ([`crate::driver::repo`]: its header's and
//! payload's digests, every entry inside its own folders). An `apply` that installs it does the
//! same reading once, here, after every step was checked and the space check passed, and before
//! the first change: the package is staged onto the root's disk ([`gpuhost_host::stage::place`]:
//! a reflink or a hard link where the filesystem shares the bytes, a copy otherwise), and the
//! staged file is streamed once by gpuhost's reader, which checks the digests on the way and
//! writes the repo's metadata, keys and driver packages (never the CUDA toolkit's) into the
//! scratch tree of the transaction that installs it ([`super::ahead::SCRATCH`] for a first
//! converge, [`super::swap::SCRATCH`] for a swap), each checked against the repo metadata. What
//! is wrong with the package is bad input, said of the user's file, before any change, as the
//! check would have said it; a SIGTERM while reading stops the run with nothing changed. The
//! transaction then takes the staged copy and the tree ([`take`]) instead of reading again.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use anyhow::Result;

use gpuhost_host::error::as_invalid;
use gpuhost_host::host::Host;
use gpuhost_host::stage::Staged;

/// A package file read ahead: its staged copy, and the scratch folder its repos lie unpacked in
/// (`<scratch>/tree`).
pub struct Ready {
    pub staged: Staged,
    pub scratch: &'static str,
}

thread_local! {
    /// The package files read ahead in this run, by the path the profile gave.
    static READY: RefCell<Vec<(PathBuf, Ready)>> = const { RefCell::new(Vec::new()) };
}

/// Read the package file `file` ahead into `scratch` (the transaction's scratch folder; see
/// the module doc), once per run. An error (bad input: exit 2; an interruption) leaves nothing
/// behind.
pub fn read(host: &Host, file: &Path, scratch: &'static str) -> Result<()> {
    if READY.with(|r| r.borrow().iter().any(|(f, _)| f == file)) {
        return Ok(());
    }
    // gpuhost's cache folder, when this makes it, goes again if the package is refused: a
    // refused run leaves the root as it found it.
    let fresh = host.kind(CACHE).is_none();
    host.remove_tree(scratch)?;
    host.create_dir_all(format!("{scratch}/tree"))?;
    let result = unpack(host, file, scratch);
    match result {
        Ok(staged) => {
            READY.with(|r| {
                r.borrow_mut()
                    .push((file.to_path_buf(), Ready { staged, scratch }))
            });
            Ok(())
        }
        Err(e) => {
            if let Err(e) = host.remove_tree(scratch) {
                tracing::warn!("could not remove {scratch}: {e:#}");
            }
            if fresh && host.list_dir(CACHE).is_ok_and(|l| l.is_empty()) {
                let _ = host.remove_tree(CACHE);
            }
            Err(e)
        }
    }
}

/// The folder of gpuhost's scratch trees and staged copies, in the root.
const CACHE: &str = "/var/cache/gpuhost";

fn unpack(host: &Host, file: &Path, scratch: &str) -> Result<Staged> {
    let staged = gpuhost_host::stage::place(host, file)?;
    let tree = host.real_path(scratch)?.join("tree");
    let pkg = super::payload::unpack_repos_named(staged.path(), file, &tree).map_err(|e| {
        let e = super::payload::read_fault(file, e);
        if gpuhost_host::interrupt::is_interrupted(&e) {
            e
        } else {
            as_invalid(e)
        }
    })?;
    // Its signature against the root's keys (or, too old for a payload digest, rpm's own
    // digests), as the check does.
    super::payload::signature_intact(host, &pkg, staged.path(), file).map_err(as_invalid)?;
    tracing::info!(
        "{} read once: checked{}, its repos unpacked into {scratch}",
        file.display(),
        pkg.payload_checked
            .map_or_else(String::new, |how| format!(" ({how})"))
    );
    Ok(staged)
}

/// The package file `file` read ahead in this run, taken by the transaction that installs it:
/// its staged copy and the scratch folder its repos lie in.
pub fn take(file: &Path) -> Option<Ready> {
    READY.with(|r| {
        let mut r = r.borrow_mut();
        let at = r.iter().position(|(f, _)| f == file)?;
        Some(r.remove(at).1)
    })
}

/// What no transaction took (a run stopped before it): the staged copies and scratch trees
/// removed.
pub fn clear(host: &Host) {
    let left: Vec<(PathBuf, Ready)> = READY.with(|r| std::mem::take(&mut *r.borrow_mut()));
    for (_, ready) in left {
        if let Err(e) = host.remove_tree(ready.scratch) {
            tracing::warn!("could not remove {}: {e:#}", ready.scratch);
        }
        drop(ready.staged);
    }
}
