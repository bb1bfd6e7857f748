//! SIGTERM and SIGINT during `apply`: never kill a running package transaction.
//!
//! gpuhost's children run in their own process group, so a terminal's Ctrl-C reaches gpuhost
//! alone. On the first SIGTERM or SIGINT gpuhost lets the running command finish (a dnf
//! transaction killed half-way leaves the rpm database and the files out of step), then stops
//! at the next step boundary: the remaining steps are reported as not run, the journal records
//! "interrupted at step X", the report is printed, and the exit code is 128 + the signal (130
//! for SIGINT, 143 for SIGTERM). A second signal stops the waiting; the command runs on and,
//! holding the inherited lock descriptor, keeps the apply lock until it ends.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Once;

use signal_hook::consts::{SIGINT, SIGTERM};

static COUNT: AtomicUsize = AtomicUsize::new(0);
static FIRST: AtomicI32 = AtomicI32::new(0);
static INSTALL: Once = Once::new();

/// Catch SIGTERM and SIGINT from now on (a thread counts them). Idempotent.
pub fn install() {
    INSTALL.call_once(|| {
        let signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot catch SIGTERM/SIGINT: {e}");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let mut signals = signals;
                for sig in signals.forever() {
                    let _ = FIRST.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                    COUNT.fetch_add(1, Ordering::SeqCst);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot catch SIGTERM/SIGINT: {e}");
        }
    });
}

/// The first signal received, if any.
pub fn received() -> Option<i32> {
    match FIRST.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// How many SIGTERM/SIGINT arrived so far.
pub fn count() -> usize {
    COUNT.load(Ordering::SeqCst)
}

/// The error of a command that was not started, or no longer waited for, because of a signal.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// True when the error (or anything in its chain) is an [`Interrupted`].
pub fn is_interrupted(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<Interrupted>().is_some())
}

/// `SIGTERM`, `SIGINT`.
pub fn name(sig: i32) -> &'static str {
    match sig {
        SIGTERM => "SIGTERM",
        SIGINT => "SIGINT",
        _ => "a signal",
    }
}

/// The exit code after the signal: 128 + its number (130 for SIGINT, 143 for SIGTERM).
pub fn exit_code(sig: i32) -> i32 {
    128 + sig
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal() {
        assert_eq!(exit_code(SIGINT), 130);
        assert_eq!(exit_code(SIGTERM), 143);
        assert_eq!(name(SIGTERM), "SIGTERM");
    }
}
