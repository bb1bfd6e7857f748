//! `gpuhost status`: node health through NVML, sysfs, the kernel log and services, with
//! Nagios exit codes (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN: the worst check wins, ranked
//! OK < WARNING < UNKNOWN < CRITICAL so that a CRITICAL finding is never hidden).
//!
//! Three verbs, and the command that composes them:
//! - **collect** → [`Snapshot`](snapshot::Snapshot): [`collect`] runs the NVML probe in a child
//!   process under a deadline (`probe`, `nvml`) while the driver-free facts are read (`host`,
//!   `kmsg`: sysfs, /proc, daemon.json, systemctl, the kernel log, relative to a root that tests
//!   point at a crafted tree); [`collect_around`] takes `gpuhost serve`'s long-lived probe;
//! - **judge** → a [`Judgement`]: [`judge`], pure functions from a snapshot and what the node
//!   should have ([`Expect`], from a profile: [`expectations_for`]) to [`Check`]s, and what
//!   the judging counted for the renderers (each GPU's XIDs, [`GpuXids`]) (`verdict`);
//! - **render** → text: [`render`] in a [`StatusFormat`] (`output`: table, JSON, Prometheus;
//!   node-problem-detector's line), reading the judgement, judging nothing again;
//! - [`run`]: the `gpuhost status` command ([`StatusOptions`]), with what a verdict may set off
//!   beside it: Slurm's drain and the provisioning gate (`status`).
//!
//! Public beyond these: the serialised models — [`snapshot`] (what was collected) and
//! [`served`] (the socket protocol between `gpuhost status` and `gpuhost serve`) — the pieces
//! `gpuhost serve` runs ([`CoProbe`], [`run_dir`]), the hidden subcommands' entries
//! (`run_nvml_*`, [`run_sweep_profile`], [`helper_main`]), and the few parsers and judges the
//! integration tests drive directly. Everything else is `pub(crate)`.
//!
//! The JSON report (`--format json`) is documented in `health/README.md`.

#![warn(unreachable_pub)]

mod active;
mod boot_cache;
mod collect;
mod coprobe;
mod counters;
mod cuda;
mod expect;
mod helper_log;
mod host;
mod kmsg;
mod nvml;
mod output;
mod probe;
mod probe_child;
mod render;
pub mod served;
pub mod snapshot;
mod status;
mod summary;
mod sweep_profile;
mod tools;
mod verdict;

// collect → Snapshot
pub use collect::{collect, collect_around, OneShot};
pub use host::{collect as collect_host, parse_proc_version};
pub use kmsg::{
    collect as collect_kernel_log, normalise_pci, parse_log as parse_kernel_log,
    Follower as KernelLogFollower,
};
// judge → checks
pub use active::{last_active, ActiveOptions};
pub use expect::{driver_version_from_rpm, expectations_for, Expect, MinFree, Thresholds};
pub use verdict::{
    fabric_verdict, judge, nvlink_verdict, overall, parse_nvlink5, ActiveFigure, Check, GpuRef,
    GpuXids, Judgement, Severity, XidGeneration,
};
// render → text
pub use output::{json as render_json, prometheus as render_prometheus, table as render_table};
pub use render::{render, StatusFormat};
// the status command
pub use status::{run, unknown, StatusOptions};
// the NVML probes: gpuhost serve's, gpuhost compat's, the hidden subcommands'
pub use coprobe::{serve_child as run_nvml_serve, CoProbe};
pub use probe::{installed_helper, probe_once, run_dir};
pub use probe_child::{helper_main, run_probe as run_nvml_probe};
pub use tools::{nvml_calls as run_nvml_calls, sweep_profile as run_sweep_profile};
