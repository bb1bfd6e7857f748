//! Package transactions that carry more than one step's work, and how a package's payload is
//! read for them:
//! - [`Batch`]: one transaction or two, decided once for a run's package work;
//! - [`ahead`]: a first converge (NVIDIA's local repo package and packages besides) as one
//!   transaction;
//! - [`swap`]: a driver change from one local repo to another as one transaction;
//! - [`profile`]: a module profile installed less NVIDIA's DKMS kmod, which prebuilt kmods
//!   replace;
//! - [`payload`]: the one unpacking of a package's payload both of them use;
//! - [`ready`]: in an `apply`, that unpacking done once, before the first change;
//! - [`cache`]: the driver set those transactions read, kept by gpuhost instead of NVIDIA's
//!   package (`driver.keep_local_repo = false`).

pub mod ahead;
mod batch;
pub mod cache;
pub(crate) mod payload;
pub(crate) mod profile;
pub mod ready;
pub(crate) mod shell;
pub mod swap;

pub use batch::Batch;
pub use payload::{extract, extract_from_local_repo};

/// Before the first change, in an `apply`: the package file `work` installs by path and
/// brings a repo with (NVIDIA's local repo package of a first converge or of a driver swap) is
/// staged and read whole once ([`ready`]); nothing for any other work.
pub fn read_ahead(host: &gpuhost_host::host::Host, work: &crate::work::Work) -> anyhow::Result<()> {
    use crate::work::Work;
    match work {
        Work::Install(i) if i.brings_repo => i
            .specs
            .iter()
            .filter(|s| crate::work::is_package_file(s))
            .try_for_each(|spec| ready::read(host, std::path::Path::new(spec), ahead::SCRATCH)),
        Work::SwapDriver(s) => s.repo_rpm.as_ref().map_or(Ok(()), |rpm| {
            ready::read(host, std::path::Path::new(rpm), swap::SCRATCH)
        }),
        _ => Ok(()),
    }
}
