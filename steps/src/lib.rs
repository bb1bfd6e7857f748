//! gpuhost's library: everything `apply`, `plan` and `facts` need.
//!
//! The binary in `agent/` is a thin command line over this crate. The pieces, from the bottom:
//! - [`cmd`]: the one subprocess wrapper every external command goes through;
//! - [`host`]: the host (or install root) being acted on, and its rpm/dnf/systemctl;
//! - [`rootfs`]: file access resolved inside the root (`openat2(RESOLVE_IN_ROOT)`);
//! - [`profile`]: TOML profiles, `extends`, `--set` overrides; [`profile_doc`]: every key,
//!   its meaning and default, from the same structs;
//! - [`facts`]: what gpuhost sees on the host (OS, kernels, PCI devices, Secure Boot);
//! - [`compat`]: will a CUDA version, a requirement, an image run on a driver (NVIDIA's rules);
//! - [`hostinfo`]: memory, CPUs, uptime and free space (sysinfo), and the space an install needs;
//! - [`runner`]: the step trait, the ordered registry, check → change → check again;
//! - [`steps`]: the steps themselves.

pub mod apply;
pub mod bootguard;
pub mod bundle;
pub mod cmd;
pub mod compat;
pub mod dkms_cc;
pub mod error;
pub mod facts;
pub mod flavour;
pub mod fsutil;
#[cfg(test)]
mod fuzz;
pub mod gpu;
pub mod hgx;
pub mod host;
pub mod hostinfo;
pub mod interrupt;
pub mod kernel;
pub mod kmods;
pub mod localrepo;
pub mod lock;
pub mod osrelease;
pub mod profile;
pub mod profile_doc;
pub mod progress;
pub mod reboot;
pub mod rootfs;
pub mod rpm;
pub mod runner;
pub mod secureboot;
pub mod state;
pub mod steps;
pub mod units;
pub mod work;

pub use error::{Hint, Invalid};
