//! NVIDIA's rules, as pure functions of what the host is: which kernel module flavour and
//! stream a host's GPUs need ([`flavour`]), what an HGX system needs beyond the driver and
//! under which package names ([`hgx`]), what a local repo package's file name says
//! ([`localrepo`]), every NVIDIA package name ([`packages`]), which driver branches drive which GPU ([`support`]), and what a driver
//! runs: CUDA versions, images, requirements ([`compat`]), and what a healthy GPU's work measures ([`perf`]).
//! Each rule cites the NVIDIA document or code it comes from.

#![warn(unreachable_pub)]

pub mod branches;
pub mod compat;
pub mod flavour;
pub mod hgx;
pub mod localrepo;
pub mod packages;
pub mod perf;
pub mod support;
