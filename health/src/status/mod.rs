//! The `gpuhost status` command: [`command`] composes the library's verbs (collect, judge,
//! render) and stands beside what a verdict may set off: Slurm's drain ([`slurm`]) and the
//! provisioning gate ([`gate`]).

mod command;
mod gate;
mod options;
mod slurm;

pub use command::{run, unknown};
pub use options::StatusOptions;
