//! `gpuhost status`'s command line: its options as clap parses them, and the typed
//! [`StatusOptions`] the health crate runs with.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use gpuhost_health::{StatusFormat, StatusOptions};

use crate::args::HealthRoot;
use crate::internal;

/// What `gpuhost status` prints on stdout (clap's names for [`StatusFormat`]).
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FormatArg {
    /// One row per check, for people.
    #[default]
    Table,
    /// The whole report, for programs.
    Json,
    /// Prometheus text exposition (node_exporter's textfile collector).
    Prometheus,
    /// Kubernetes node-problem-detector's custom-plugin protocol.
    Npd,
}

impl From<FormatArg> for StatusFormat {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Table => StatusFormat::Table,
            FormatArg::Json => StatusFormat::Json,
            FormatArg::Prometheus => StatusFormat::Prometheus,
            FormatArg::Npd => StatusFormat::Npd,
        }
    }
}

/// `gpuhost status` options.
#[derive(Args, Debug, Clone)]
pub(crate) struct StatusArgs {
    /// Output format on stdout. `npd`: Kubernetes node-problem-detector's custom-plugin
    /// protocol: one line of at most 80 bytes, exit 0 OK or WARNING, 1 CRITICAL, 2 UNKNOWN.
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,
    /// Also write the Prometheus text to this file, atomically (node_exporter's textfile
    /// collector: a `*.prom` file in its directory).
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
    /// GPUs this node must have (overrides the profile's `status.expect_gpus`).
    #[arg(long, value_name = "N")]
    pub expect_gpus: Option<u32>,
    /// A profile (built-in name or .toml path) giving the expected GPU count and driver version.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Deadline for the NVML probe, in seconds; past it the driver is reported unresponsive.
    /// With --wait-healthy: the whole wait.
    #[arg(long, value_name = "SECONDS", default_value = "10")]
    pub timeout: f64,
    /// Look again and again until the node is healthy (OK or WARNING): exit 0, or exit 2 when
    /// --timeout seconds pass first; progress on stderr, the last report on stdout (a gate for
    /// provisioning: `gpuhost cloud-init --wait-healthy`).
    #[arg(long, conflicts_with = "slurm")]
    pub wait_healthy: bool,
    /// With --wait-healthy: seconds between looks.
    #[arg(long, value_name = "SECONDS", default_value = "5")]
    pub poll: f64,
    /// Slurm HealthCheckProgram mode (as LBNL NHC): on CRITICAL drain this node with the reason
    /// "gpuhost: <check> …"; when healthy again resume it, but only if gpuhost drained it.
    #[arg(long)]
    pub slurm: bool,
    /// With --slurm: the Slurm node name (default: $SLURMD_NODENAME, else the short host name).
    #[arg(long, value_name = "NAME", requires = "slurm")]
    pub slurm_node: Option<String>,
    /// Internal: the NVML probe child (`gpuhost nvml-probe`, `nvml-serve`) answers the `nvml` part of
    /// this saved snapshot instead of asking NVML, through the same pipe, deadline and boot
    /// cache (tests, benchmarks).
    #[arg(long, hide = true, value_name = "FILE", value_parser = crate::args::fixture_file)]
    pub nvml_fixture: Option<PathBuf>,
    /// Probe here even when a `gpuhost serve` answers on this node's socket.
    #[arg(long)]
    pub fresh: bool,
    /// Also run work on every GPU and judge it against known answers and the model's
    /// reference figures: HBM bandwidth and integrity, PCIe, FP32/FP64 compute, peer copies
    /// (docs/active-checks.md). Needs only NVIDIA's driver; runs in a child process; changes
    /// no GPU setting. With --wait-healthy: once the passive checks pass.
    #[arg(long)]
    pub active: bool,
    /// With --active: the time limit of the GPU work, in seconds (the checks take about 3 to
    /// 10 s; past the limit what finished is judged and the rest is UNKNOWN).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = "30",
        requires = "active"
    )]
    pub active_seconds: f64,
    /// With --active: check GPUs that have compute processes on them too (they are left alone
    /// otherwise, and reported WARNING).
    #[arg(long, requires = "active")]
    pub force: bool,
    /// Internal: inject a fault into the active checks (hbm, fp32, fp64, mix32, mix64) to prove
    /// it is caught on a real GPU.
    #[arg(long, hide = true, value_name = "FAULT", requires = "active")]
    pub active_inject_fault: Option<gpuhost_active::Fault>,
    /// Internal: copy GPU 0 to itself through the peer-to-peer path (one-GPU machines).
    #[arg(long, hide = true, requires = "active")]
    pub active_p2p_self: bool,
    /// Internal: the active checks' child prints this saved report instead of running work
    /// (tests without a GPU).
    #[arg(long, hide = true, value_name = "FILE", requires = "active", value_parser = crate::args::fixture_file)]
    pub active_fixture: Option<PathBuf>,
    /// Internal: with --active-fixture, the child waits this long first (honouring SIGTERM).
    #[arg(long, hide = true, value_name = "SECONDS", requires = "active_fixture")]
    pub active_fixture_sleep: Option<f64>,
    /// Internal: with --active-fixture-sleep, the child ignores SIGTERM (a hung kernel).
    #[arg(long, hide = true, requires = "active_fixture_sleep")]
    pub active_fixture_hang: bool,
    /// Print the collected snapshot as JSON (for test fixtures) instead of a report.
    #[arg(long, hide = true)]
    pub dump_snapshot: bool,
    /// Judge a snapshot saved by --dump-snapshot instead of collecting one.
    #[arg(long, hide = true, value_name = "FILE", value_parser = crate::args::fixture_file)]
    pub from_snapshot: Option<PathBuf>,
    #[command(flatten)]
    pub root: HealthRoot,
}

impl StatusArgs {
    /// The options the health crate runs `gpuhost status` with; Err: why an argument is
    /// refused (`--timeout`, and `--poll` with `--wait-healthy`: seconds, more than 0 and at most
    /// an hour).
    fn options(&self) -> Result<StatusOptions, String> {
        let timeout = seconds("timeout", self.timeout)?;
        let wait_healthy = match self.wait_healthy {
            true => Some(seconds("poll", self.poll)?),
            false => None,
        };
        Ok(StatusOptions {
            format: self.format.into(),
            textfile: self.textfile.clone(),
            expect_gpus: self.expect_gpus,
            profile: self.profile.clone(),
            timeout,
            wait_healthy,
            slurm: self.slurm,
            slurm_node: self.slurm_node.clone(),
            nvml_fixture: self.nvml_fixture.clone(),
            probe_program: internal::nvml_probe_argv(
                self.nvml_fixture.as_deref(),
                Some(&self.root.dir),
            ),
            fresh: self.fresh,
            dump_snapshot: self.dump_snapshot,
            from_snapshot: self.from_snapshot.clone(),
            root: self.root.dir.clone(),
            active: match self.active {
                false => None,
                true => Some(gpuhost_health::ActiveOptions {
                    program: internal::active_probe_argv(
                        self.active_fixture.as_deref(),
                        self.active_fixture_sleep,
                        self.active_fixture_hang,
                    ),
                    seconds: seconds("active-seconds", self.active_seconds)?.as_secs_f64(),
                    force: self.force,
                    inject_fault: self.active_inject_fault.map(|f| f.to_string()),
                    p2p_self: self.active_p2p_self,
                }),
            },
        })
    }
}

/// `--FLAG SECONDS` as a duration: more than 0 and at most an hour.
fn seconds(flag: &str, secs: f64) -> Result<Duration, String> {
    if !(secs.is_finite() && secs > 0.0 && secs <= 3600.0) {
        return Err(format!(
            "--{flag} {secs}: give seconds, more than 0 and at most 3600"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Run `gpuhost status`; its exit code. An argument refused is UNKNOWN, as any run that cannot
/// judge the node.
pub(crate) fn run(a: &StatusArgs) -> i32 {
    match a.options() {
        Ok(o) => gpuhost_health::run(&o),
        Err(e) => gpuhost_health::unknown(a.format.into(), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_seconds_above_0_and_at_most_an_hour() {
        assert_eq!(seconds("poll", 0.5), Ok(Duration::from_millis(500)));
        assert_eq!(seconds("timeout", 3600.0), Ok(Duration::from_secs(3600)));
        for bad in [0.0, -1.0, 3600.5, f64::NAN, f64::INFINITY] {
            let e = seconds("timeout", bad).err().unwrap_or_default();
            assert!(
                e.starts_with(&format!("--timeout {bad}: give seconds, more than 0")),
                "{e}"
            );
        }
    }
}
