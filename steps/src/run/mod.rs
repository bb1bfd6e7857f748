//! What a run knows once about the driver, as plain values that the step API and the driver
//! steps both read (and that import no step):
//! - [`driver`]: the run's driver, resolved once in apply's preparation ([`DriverPlan`]);
//! - [`kmods`]: the prebuilt kmods of `driver.kmod_repo`, checked once ([`PrebuiltKmods`]);
//! - [`transition`]: what happens to the driver in this run ([`Transition`]), decided once per
//!   look at the host and kept by [`crate::step::Ctx`].

pub mod driver;
pub mod kmod_rpm;
pub mod kmods;
pub mod transition;

pub use driver::{require_package, resolve, DriverPlan};
pub use kmods::{PrebuiltKmod, PrebuiltKmods};
pub use transition::{InstalledRepo, Transition};
