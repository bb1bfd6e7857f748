//! gpuhost's foundation: access to the host (or install root) being acted on, and what it is.
//!
//! Everything above — NVIDIA's rules, profiles, the steps, the engine, `gpuhost status` —
//! builds on this crate; it builds on nothing of gpuhost's. The pieces, from the bottom:
//! - [`error`]: the marker types ([`Invalid`], [`Hint`]) that decide exit codes through the
//!   error chain;
//! - [`interrupt`], [`progress`]: signals received, and progress lines on a terminal;
//! - [`cmd`]: the one subprocess wrapper every external command goes through;
//! - [`rootfs`], [`fsutil`]: file access resolved inside the root, atomic writes;
//! - [`host`]: the host (or install root) and its rpm/dnf/systemctl commands; [`rpmdb`]: where
//!   an install root's rpm database is, told to rpm and dnf on every call;
//! - [`osrelease`], [`rpm`], [`kernel`], [`kmods`], [`units`]: what the root has installed,
//!   which kernels boot, which modules modprobe would load, which units are enabled;
//! - [`facts`], [`gpu`], [`hostinfo`], [`secureboot`]: what gpuhost sees on the host (OS,
//!   kernels, PCI devices and GPU architectures, memory and space, Secure Boot keys);
//! - [`guard_record`]: the kernel guard's record, written by the engine and read by status;
//! - [`stage`]: package files copied onto the root's disk before a transaction installs them.
//! - [`dnfout`]: the lines of dnf's output that say it did less than it was asked.

#![warn(unreachable_pub)]

pub mod arch;
pub mod cmd;
pub mod dnfout;
pub mod error;
pub mod facts;
pub mod fsutil;
pub mod gpu;
pub mod guard_record;
pub mod host;
pub mod hostinfo;
pub mod interrupt;
pub mod kernel;
pub mod kmodrepo;
pub mod kmods;
pub mod osrelease;
pub mod platform;
pub mod progress;
pub mod rootfs;
pub mod rpm;
pub mod rpmdb;
pub mod rpmfile;
pub mod secureboot;
pub mod stage;
pub mod trust;
pub mod units;

pub use error::{Hint, Invalid};
