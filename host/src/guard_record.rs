//! The kernel guard's record (`/var/lib/gpuhost/kernel-guard.json`): which new kernel was kept
//! from the default boot, and why. The guard (`gpuhost-engine`'s `bootguard`) writes it;
//! `gpuhost status` reads it.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::kmods;

pub const GUARD_PATH: &str = "/var/lib/gpuhost/kernel-guard.json";

/// Why the default boot entry was held back, as `gpuhost status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The new kernel that has no NVIDIA module (it would have been the default).
    pub kernel: String,
    /// The kernel the default boot entry was kept on (it has the module).
    pub kept: String,
    /// The driver version the module must have.
    pub driver: String,
    /// Why the new kernel has no module (the failing step's reason).
    pub reason: String,
    /// The command that builds the module for `kernel` and makes it the default again.
    pub fix: String,
    /// RFC 3339 time of the decision.
    pub at: String,
}

pub fn load(host: &Host) -> Result<Option<Record>> {
    host.read_json_opt(GUARD_PATH, "remove it and run gpuhost apply again")
}

pub fn save(host: &Host, r: &Record) -> Result<()> {
    host.write_json(GUARD_PATH, r, 0o644)
}

/// True when modprobe would load an `nvidia` module of one of the versions `drivers` for `kver`.
pub fn has_module(host: &Host, kver: &str, drivers: &[String]) -> bool {
    kmods::state(host, kver, "nvidia").is_ok_and(|s| drivers.iter().any(|d| s.is_version(d)))
}
