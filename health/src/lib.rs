//! `gpuhost status`: node health through NVML, sysfs, the kernel log and services, with
//! Nagios exit codes (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN: the worst check wins, ranked
//! OK < WARNING < UNKNOWN < CRITICAL so that a CRITICAL finding is never hidden).
//!
//! The pieces:
//! - [`host`], [`kmsg`]: driver-free collection (sysfs, /proc, daemon.json, systemctl, the
//!   kernel log), relative to a root that tests point at a crafted tree;
//! - [`nvml`]: the NVML probe, run in a child process by [`probe`] under a deadline;
//! - [`snapshot`]: what was collected, as serialisable data;
//! - [`verdict`]: pure functions from a snapshot to checks;
//! - [`output`]: table, JSON and Prometheus renderings;
//! - [`status`]: the `gpuhost status` command, which composes them.
//!
//! The JSON report (`--format json`) is documented in `health/README.md`.

pub mod boot_cache;
mod collect;
pub mod coprobe;
pub mod counters;
pub mod cuda;
mod expect;
mod helper_log;
pub mod host;
pub mod kmsg;
pub mod nvml;
pub mod output;
pub mod probe;
mod probe_child;
mod render;
pub mod served;
pub mod snapshot;
mod status;
mod summary;
pub mod sweep_profile;
mod tools;
pub mod verdict;

pub use collect::{collect, collect_around, keep_counters, OneShot};
pub use coprobe::serve_child as run_nvml_serve;
pub use expect::expectations_for;
pub use probe_child::{helper_main, run_probe as run_nvml_probe};
pub use render::{render, StatusFormat};
pub use status::{run, unknown, StatusOptions};
pub use tools::{nvml_calls as run_nvml_calls, sweep_profile as run_sweep_profile};
