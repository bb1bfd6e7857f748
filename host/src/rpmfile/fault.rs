//! Why a payload was not read or extracted.

use std::path::PathBuf;

/// Why a payload was not extracted.
#[derive(Debug)]
pub enum Fault {
    /// The package is not what its header says, or asks for what gpuhost refuses.
    Bad(String),
    /// The package file could not be read (to its end).
    Source(anyhow::Error),
    /// A file could not be written into the folder (disk full, a read-only filesystem).
    Write(PathBuf, std::io::Error),
    /// A signal arrived while reading.
    Interrupted(i32),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Bad(why) => write!(f, "{why}"),
            Fault::Source(e) => write!(f, "{e:#}"),
            Fault::Write(p, e) => write!(f, "could not write {}: {e}", p.display()),
            Fault::Interrupted(sig) => write!(f, "stopped by {}", crate::interrupt::name(*sig)),
        }
    }
}
