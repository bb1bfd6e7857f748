//! Package transactions that carry more than one step's work, and how a package's payload is
//! read for them:
//! - [`Batch`]: one transaction or two, decided once for a run's package work;
//! - [`ahead`]: a first converge (NVIDIA's local repo package and packages besides) as one
//!   transaction;
//! - [`swap`]: a driver change from one local repo to another as one transaction;
//! - [`payload`]: the one unpacking of a package's payload both of them use.

pub mod ahead;
mod batch;
pub(crate) mod payload;
pub(crate) mod shell;
pub mod swap;

pub use batch::Batch;
pub use payload::extract;
