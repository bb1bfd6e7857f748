//! The benchmarks' reports, hidden subcommands of gpuhost: `gpuhost sweep-profile N` and
//! `gpuhost nvml-calls`, printed as pretty JSON.

use std::path::Path;

use gpuhost_host::host::Host;

use crate::expect::expectations_for;
use crate::{nvml, sweep_profile as profile};

/// `gpuhost sweep-profile N`: time `n` sweeps of the node under `root` part by part, judged
/// with `profile` and `expect_gpus`, and print that as pretty JSON; 0, or 3.
pub fn sweep_profile(
    root: &Path,
    profile: Option<&str>,
    expect_gpus: Option<u32>,
    n: usize,
) -> i32 {
    let host = match Host::new(root) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("gpuhost sweep-profile: {e:#}");
            return 3;
        }
    };
    let expect = expectations_for(profile, expect_gpus);
    // A profile that does not load is refused, as `gpuhost status` refuses it: the sweeps would
    // otherwise be judged against no profile at all, and say nothing of it.
    if let (Some(name), Some(err)) = (profile, &expect.profile_error) {
        eprintln!("gpuhost sweep-profile: --profile {name}: {err}");
        return 2;
    }
    print_pretty("the profile", &profile::run(&host, &expect, n))
}

/// `gpuhost nvml-calls`: every NVLink and fabric NVML call's raw return code, per GPU, as
/// pretty JSON; 0, or 3.
pub fn nvml_calls() -> i32 {
    print_pretty("the NVML calls", &nvml::calls::report())
}

/// An internal report (`sweep-profile`, `nvml-calls`) as pretty JSON on stdout: 0, or 3
/// when `what` cannot be serialised.
fn print_pretty(what: &str, v: &impl serde::Serialize) -> i32 {
    match serde_json::to_string_pretty(v) {
        Ok(s) => {
            println!("{s}");
            0
        }
        Err(e) => {
            eprintln!("cannot serialise {what}: {e}");
            3
        }
    }
}
