//! Verdicts: pure functions from a [`Snapshot`] (and what the node should have) to checks,
//! each with a Nagios severity, the value seen, and — when not OK — what to do.
//!
//! NOT_SUPPORTED is "n/a", never a warning. Thresholds follow DCGM's health watches and the
//! clouds' GPU health checks: any volatile uncorrectable ECC error, a row-remap failure, more
//! than 512 uncorrectable remapped rows, a recovery action other than none and the critical
//! XIDs are CRITICAL; a pending row remap (a GPU reset applies it) is a WARNING.

mod active;
mod gpu;
mod judge;
mod model;
mod out;
mod software;
mod space;
mod xid;
pub(crate) mod xid_catalog;

pub use gpu::{fabric_verdict, nvlink_verdict};
pub use judge::judge;
pub use model::{overall, ActiveFigure, Check, GpuRef, GpuXids, Judgement, Severity};
pub use xid::{parse_nvlink5, Generation as XidGeneration};
