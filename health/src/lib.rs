//! `gpuhost status`: node health through NVML, sysfs, the kernel log and services.
//!
//! (Being written: see issue 5.)

use clap::Args;

/// `gpuhost status` options.
#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// Output format.
    #[arg(long, default_value = "table", value_parser = ["table", "json", "prometheus"])]
    pub format: String,
}

/// Run `gpuhost status`; returns the Nagios exit code (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).
pub fn run(_args: &StatusArgs) -> i32 {
    3
}
