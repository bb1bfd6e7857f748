//! The steps, in the order `apply` runs them.

pub mod containers;
pub mod driver;
mod kernel;
mod kernel_headers;

use crate::runner::Step;

/// The ordered registry. Ids are stable: `--only`, `--skip`, reports and logs use them.
pub fn registry() -> Vec<&'static dyn Step> {
    let mut steps: Vec<&'static dyn Step> = vec![&kernel::Kernel, &kernel_headers::KernelHeaders];
    steps.extend(driver::steps());
    steps.extend(containers::steps());
    steps
}
