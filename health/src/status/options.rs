//! What `gpuhost status` is asked to do.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::render::StatusFormat;

/// What `gpuhost status` is asked to do (the command line's `gpuhost status` options, as the
/// agent parsed them). `Default` is for code that builds them: it is not the command line's
/// defaults.
#[derive(Debug, Clone, Default)]
pub struct StatusOptions {
    /// Output format on stdout.
    pub format: StatusFormat,
    /// Also write the Prometheus text to this file, atomically.
    pub textfile: Option<PathBuf>,
    /// GPUs this node must have (overrides the profile's `status.expect_gpus`).
    pub expect_gpus: Option<u32>,
    /// A profile (built-in name or .toml path) giving the expected GPU count and driver version.
    pub profile: Option<String>,
    /// Deadline for the NVML probe; with `wait_healthy`, the whole wait.
    pub timeout: Duration,
    /// Look again and again, this long apart, until the node is healthy (OK or WARNING) or
    /// `timeout` has passed (`--wait-healthy --poll SECONDS`); None: look once.
    pub wait_healthy: Option<Duration>,
    /// Slurm HealthCheckProgram mode: drain on CRITICAL, resume what gpuhost drained.
    pub slurm: bool,
    /// With `slurm`: the Slurm node name.
    pub slurm_node: Option<String>,
    /// The NVML probe child answers the `nvml` part of this saved snapshot instead of asking
    /// NVML (tests, benchmarks).
    pub nvml_fixture: Option<PathBuf>,
    /// The one-shot NVML probe as a program (`gpuhost nvml-probe …`, the fixture included),
    /// run where neither the helper nor a fork can be.
    pub probe_program: Vec<OsString>,
    /// Probe here even when a `gpuhost serve` answers on this node's socket.
    pub fresh: bool,
    /// Print the collected snapshot as JSON instead of a report.
    pub dump_snapshot: bool,
    /// Judge a snapshot saved by `dump_snapshot` instead of collecting one.
    pub from_snapshot: Option<PathBuf>,
    /// Read sysfs, /proc, /dev/kmsg and /etc under this root (tests).
    pub root: PathBuf,
    /// Run the active checks too (`--active`): work with known answers on every GPU.
    pub active: Option<crate::active::ActiveOptions>,
}
