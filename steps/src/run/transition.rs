//! What happens to the driver in a run: one value, [`Transition`], decided once per look at
//! the host (by the driver steps' `installed::transition`, kept by [`crate::step::Ctx`] until
//! the host changes) and read by every driver step — none derives it again:
//! - `driver-repo` installs the profile's local repo package ([`Transition::Install`]), swaps
//!   the driver in one transaction ([`Transition::Swap`]), refuses another driver it may not
//!   replace ([`Transition::Refused`]) or removes what a killed transaction left
//!   ([`Transition::Repair`]);
//! - `driver` swaps the set for the other flavour's ([`Transition::FlavourSwitch`]) or
//!   converges the set from the installed repo;
//! - `driver`, `fabric-manager` and `hgx-extras` leave their packages to `driver-repo` while it
//!   swaps or repairs ([`Transition::driver_repo_first`]), and are checked again once it has run.
//!
//! The type holds only what the host has and what the profile asks: it is a plain value (no
//! host access), so the step context can keep it.

use std::fmt;

/// An NVIDIA local repo on the host: the package's name and version, installed by rpm or, with
/// `driver.keep_local_repo = false`, its driver set in gpuhost's cache (`cached`: the folder;
/// no package to remove).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstalledRepo {
    pub name: String,
    pub version: String,
    pub cached: Option<String>,
}

/// What happens to the driver in this run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The profile manages no driver (or names no local repo package).
    Unmanaged,
    /// No NVIDIA local repo is installed: the profile's is installed, then its set from it.
    Install,
    /// The profile's local repo is installed and alone: each driver step keeps its packages
    /// in sync with it (nothing to do on a converged node).
    InPlace,
    /// Another driver's local repo is installed and the profile allows replacing it
    /// (`driver.replace_local_repo`): one transaction swaps the whole set, from → to.
    Swap {
        from: Vec<InstalledRepo>,
        to: String,
    },
    /// Another driver's local repo is installed and the profile does not allow replacing it:
    /// `driver-repo` refuses the run before any change.
    Refused { others: Vec<InstalledRepo> },
    /// The installed set is another stream's (open ↔ proprietary, another branch stream):
    /// one transaction swaps it for the wanted stream's, when `driver.switch_stream` allows it
    /// (refused otherwise). `repo_installed`: whether the profile's local repo is installed.
    FlavourSwitch {
        from: String,
        to: String,
        allowed: bool,
        repo_installed: bool,
    },
    /// The profile's local repo is installed, but a killed or stopped transaction left other
    /// versions of the driver's packages beside it (`duplicates`,
    /// `name-version-release.arch`: they go) or instead of it (`behind`: package names the
    /// repo has at the driver's version, installed at another only: they move to it).
    Repair {
        duplicates: Vec<String>,
        behind: Vec<String>,
    },
}

impl Transition {
    /// True when `driver-repo` changes the driver first (a swap or a repair): the other driver
    /// steps leave their packages to it and are checked again once it has run.
    pub fn driver_repo_first(&self) -> bool {
        matches!(self, Transition::Swap { .. } | Transition::Repair { .. })
    }

    /// True when the profile's local repo package is installed already.
    pub fn repo_installed(&self) -> bool {
        match self {
            Transition::InPlace | Transition::Repair { .. } => true,
            Transition::FlavourSwitch { repo_installed, .. } => *repo_installed,
            Transition::Unmanaged
            | Transition::Install
            | Transition::Swap { .. }
            | Transition::Refused { .. } => false,
        }
    }

    /// What the other driver steps say while `driver-repo` goes first.
    pub fn deferred_reason(&self) -> &'static str {
        match self {
            Transition::Repair { .. } => {
                "driver-repo first removes what an interrupted transaction left; checked again once it has run"
            }
            _ => "the driver changes in driver-repo's one transaction; checked again once it has run",
        }
    }
}

impl fmt::Display for InstalledRepo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.version)?;
        if self.cached.is_some() {
            write!(f, " (gpuhost's cache)")?;
        }
        Ok(())
    }
}

impl fmt::Display for Transition {
    /// One line for `plan` and the logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |r: &[InstalledRepo]| {
            r.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Transition::Unmanaged => write!(f, "no driver managed"),
            Transition::Install => write!(f, "install"),
            Transition::InPlace => write!(f, "in place"),
            Transition::Swap { from, to } => write!(f, "swap {} → {to}", list(from)),
            Transition::Refused { others } => {
                write!(f, "refused: {} installed, not replaced", list(others))
            }
            Transition::FlavourSwitch {
                from, to, allowed, ..
            } => {
                let how = if *allowed {
                    ""
                } else {
                    " (refused: driver.switch_stream = false)"
                };
                write!(f, "flavour switch nvidia-driver:{from} → {to}{how}")
            }
            Transition::Repair { duplicates, behind } => write!(
                f,
                "repair: {}",
                duplicates
                    .iter()
                    .chain(behind)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_swap_or_a_repair_makes_the_other_steps_wait() {
        let from = vec![InstalledRepo {
            name: "cuda-repo-rhel8-12-4-local".into(),
            version: "12.4.1_550.54.15".into(),
            cached: None,
        }];
        let swap = Transition::Swap {
            from: from.clone(),
            to: "cuda-repo-rhel8-12-2-local".into(),
        };
        assert!(swap.driver_repo_first());
        assert!(Transition::Repair {
            duplicates: vec![],
            behind: vec![]
        }
        .driver_repo_first());
        for t in [
            Transition::Install,
            Transition::InPlace,
            Transition::Refused { others: from },
            Transition::FlavourSwitch {
                from: "latest-dkms".into(),
                to: "open-dkms".into(),
                allowed: true,
                repo_installed: true,
            },
        ] {
            assert!(!t.driver_repo_first(), "{t}");
        }
        assert_eq!(
            swap.to_string(),
            "swap cuda-repo-rhel8-12-4-local 12.4.1_550.54.15 → cuda-repo-rhel8-12-2-local"
        );
    }
}
