//! One transaction or two: how a run's package work is carried, decided once, here.

use crate::work::{is_package_file, Install};

/// One dnf transaction of a run's package work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    /// A first converge: NVIDIA's local repo package and every package besides, in one
    /// transaction ([`super::ahead`]).
    Merged,
    /// The packages that bring a repo (NVIDIA's local repo package), before the rest.
    BringsRepo,
    /// The packages besides, once the repo they come from is there.
    Rest,
    /// One step's own install, carried on its own (a step applied alone).
    Own,
}

impl Batch {
    /// The transactions of a run whose package work is `parts`, in order. A package file that
    /// brings a repo and packages besides are a first converge's two transactions' worth: one,
    /// merged; so is one whose repo gpuhost caches or uncaches (`driver.keep_local_repo`,
    /// [`super::cache`]), which only the merged transaction does. Otherwise the package that
    /// brings a repo goes first.
    pub fn plan(parts: &[&Install]) -> &'static [Batch] {
        let brings = parts.iter().any(|i| {
            i.brings_repo && (i.cache.is_some() || i.specs.iter().any(|s| is_package_file(s)))
        });
        let cache = parts.iter().any(|i| i.brings_repo && i.cache.is_some());
        if brings && (cache || parts.iter().any(|i| !i.brings_repo)) {
            &[Batch::Merged]
        } else {
            &[Batch::BringsRepo, Batch::Rest]
        }
    }

    /// Whether this batch takes the installs that bring a repo (`Some(true)`), those that do
    /// not (`Some(false)`), or all (`None`).
    pub fn brings_repo(self) -> Option<bool> {
        match self {
            Batch::Merged | Batch::Own => None,
            Batch::BringsRepo => Some(true),
            Batch::Rest => Some(false),
        }
    }
}
