//! gpuhost's steps and the API they are written against.
//!
//! - [`step`]: the API a step sees — [`step::Step`], [`step::Check`], [`step::Ctx`],
//!   [`step::Selection`] — with the typed work a check declares ([`work`]), owed actions
//!   ([`state`]) and the unit work ([`units`]);
//! - the steps, in the order of [`registry`]: [`kernel`], [`kernel_headers`], [`driver`],
//!   [`containers`].
//!
//! The engine (`gpuhost-engine`) drives these steps through the registry; nothing here knows
//! the engine.

#![warn(unreachable_pub)]

pub mod containers;
pub mod driver;
pub mod kernel;
pub mod kernel_headers;
pub mod run;
pub mod state;
pub mod step;
pub mod transaction;
pub mod units;
pub mod work;

mod registry;
pub use registry::{registry, steps_needing_package};

#[cfg(test)]
mod fuzz;
