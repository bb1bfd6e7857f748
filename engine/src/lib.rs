//! gpuhost's engine: what `apply`, `plan`, `resume`, `kernel-added` and `bundle` do with the
//! steps of `gpuhost-steps`.
//!
//! - [`runner`]: every selected step checked, the work carried out as one plan (package work
//!   merged into as few dnf transactions as the repos allow), every changed step checked again;
//! - [`apply`]: the preparation (profile, facts, the driver plan resolved once, preflight), the
//!   run, the report;
//! - [`preflight`]: what a run checks before it touches anything (apply's and bundle's);
//! - [`lock`], [`journal`]: two applies never interleave; the last runs' reports;
//! - [`reboot`], [`bootguard`]: reboots as a state, and the kernel guard;
//! - [`rollback`]: back to the driver of the converged apply before the last one;
//! - [`bundle`]: offline bundles, built and verified.

#![warn(unreachable_pub)]

pub mod apply;
pub mod bootguard;
pub mod bundle;
pub mod journal;
pub mod kmod;
pub mod lock;
pub(crate) mod preflight;
pub mod reboot;
pub mod recorded;
pub mod report;
pub mod rollback;
pub mod runner;
