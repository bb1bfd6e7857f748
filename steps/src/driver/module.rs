//! `driver`: the `nvidia-driver` module stream of the flavour that fits the GPUs (see
//! [`gpuhost_nvidia::flavour`]) and the driver's packages from the local repo, at the local repo's driver
//! version, as one of NVIDIA's package sets (`driver.install`):
//! - `module`: `dnf module install nvidia-driver:<stream>/<profile>` (`default`, or `fm` with
//!   NVSwitches) and the stream's kmod package;
//! - `full`: `dnf module enable nvidia-driver:<stream>`, then `dnf install nvidia-open` (open
//!   modules) or `cuda-drivers` (proprietary) and the kmod package — NVIDIA's Driver Installation
//!   Guide, "Kernel Modules", from R560;
//! - `compute-only`: `dnf module enable nvidia-driver:<stream>`, then `dnf install
//!   nvidia-driver-cuda` and the kmod package (the guide's "Compute-only and Desktop
//!   Installation", R560 and later: no X or desktop libraries).
//!
//! The module state is read from `/etc/dnf/modules.d/nvidia-driver.module` and the packages from
//! the runner's batched rpm query, so a converged host starts no dnf. Another stream already
//! installed is switched (`dnf module switch-to --allowerasing`) only when the profile says
//! `driver.switch_stream = true`.

use anyhow::Result;

use super::context::{module_profile, plan};
use super::set::{kmod_specs, SetStatus};
use crate::run::transition::Transition;
use crate::run::DriverPlan;
use crate::step::{Change, Check, Ctx, DnfFailure, Install, Step, Work};
use gpuhost_host::error::hinted;
use gpuhost_host::kernel::Flavour;
use gpuhost_nvidia::packages;
use gpuhost_profile::{InstallSet, StreamKind};

pub(crate) struct Driver;

use super::set::package_names;
pub(crate) use super::set::{
    kmod_packages, listed_streams, precompiled_kmod, set_packages, ModuleState,
};

/// The streams the enabled repos offer.
fn available_streams(ctx: &Ctx<'_>) -> Result<Vec<String>> {
    let out = ctx
        .host
        .dnf()?
        .args(["module", "list", packages::DRIVER])
        .output()?;
    Ok(listed_streams(packages::DRIVER, &out.stdout))
}

fn not_in_repo(stream: &str, available: &[String]) -> anyhow::Error {
    let listed = if available.is_empty() {
        "none: is the local repo installed?".to_string()
    } else {
        available.join(", ")
    };
    hinted(
        format!(
            "module stream nvidia-driver:{stream} is not in the enabled repos (streams: {listed})"
        ),
        "set driver.stream to one of those streams",
    )
}

/// How to get from the host's module state to the profile's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    /// `dnf install @nvidia-driver:S/P <kmods>`: enable and install (or add a profile).
    Install,
    /// Switch from another stream (or another driver version of this one).
    Switch,
    /// Swap the set for another stream's (a flavour switch) in one transaction.
    Swap,
}

/// Where the prebuilt kmods' module state is explained.
fn kmod_note() -> &'static str {
    "docs/kmods.md, \"dnf's module state\""
}

/// True when dnf's output says the module stream `stream` (or a profile of it) does not exist:
/// a line naming `nvidia-driver:<stream>` says so (another stream dnf could not find, named
/// by another part of the script, is dnf's problem, quoted as it is).
fn module_missing(text: &str, stream: &str) -> bool {
    let spec = packages::module_spec(stream, None);
    text.lines().any(|l| {
        let names = l
            .split(|c: char| c.is_whitespace() || "'\",".contains(c))
            .any(|w| w == spec || w.starts_with(&format!("{spec}/")));
        names
            && (l.contains("missing groups or modules")
                || (l.contains("Module or Group") && l.contains("is not available"))
                || l.contains("No such module"))
    })
}

/// What the `driver` step found: the plan's stream and set, dnf's module state, and which of
/// the set's packages are missing or at another version.
struct Found<'c> {
    plan: &'c DriverPlan,
    drv: String,
    stream: String,
    profile: &'static str,
    /// `nvidia-driver:<stream>/<profile>` (module set) or `nvidia-driver:<stream>`.
    spec: String,
    state: ModuleState,
    /// What dnf is given for the kmods: names, or the prebuilt RPMs' files.
    kmods: Vec<String>,
    /// What gives way in the same transaction: NVIDIA's DKMS kmods and gpuhost's build
    /// packages (a move to prebuilt kmods), or gpuhost's prebuilt kmods (back to DKMS).
    set: SetStatus,
    /// A module profile with prebuilt kmods (`driver.install = "module"` and
    /// `driver.kmod_repo`): the stream enabled and the profile's packages but NVIDIA's DKMS kmod,
    /// with no profile marked installed ([`crate::transaction::profile`]).
    prebuilt_profile: bool,
    names: Vec<String>,
    absent: Vec<String>,
    stale: Vec<String>,
}

impl<'c> Found<'c> {
    fn read(ctx: &'c Ctx<'_>) -> Result<Found<'c>> {
        let plan = plan(ctx)?;
        let drv = plan.repo.driver.clone();
        let stream = plan.stream().to_string();
        if plan.kind() == StreamKind::Precompiled && ctx.facts.target_flavour == Some(Flavour::Uek)
        {
            return Err(hinted(
                format!("{} is a precompiled stream: NVIDIA builds those for RHCK kernels only, never for UEK", packages::module_spec(&stream, None)),
                "use a DKMS stream (latest-dkms, <branch>-dkms, open-dkms)",
            ));
        }
        let profile = module_profile(ctx);
        // What is installed: a module profile (`module`), or packages from an enabled stream.
        let spec = match plan.install {
            InstallSet::Module => packages::module_spec(&stream, Some(profile)),
            _ => packages::module_spec(&stream, None),
        };
        let set = SetStatus::read(ctx, plan)?;
        let prebuilt_profile =
            plan.install == InstallSet::Module && super::set::prebuilt(ctx).is_some();
        Ok(Found {
            prebuilt_profile,
            plan,
            drv,
            stream,
            profile,
            spec,
            state: set.state.clone(),
            kmods: kmod_specs(ctx, &set.kmods, None),
            names: set.names.clone(),
            absent: set.absent.clone(),
            stale: set.stale.clone(),
            set,
        })
    }

    /// How to get from dnf's module state to the plan's (`None`: in sync), and why. A flavour
    /// switch is the run's [`Transition`], decided before; the rest is this step's own.
    fn verb(&self, transition: &Transition, why: &mut Vec<String>) -> Result<Option<Verb>> {
        let (stream, profile) = (&self.stream, self.profile);
        if let Transition::FlavourSwitch { from, allowed, .. } = transition {
            if !allowed {
                return Err(hinted(
                    format!("{} is installed, but this run wants {} ({})", packages::module_spec(from, None), packages::module_spec(stream, None), self.plan.choice.explanation),
                    format!("set driver.switch_stream = true to switch (dnf module switch-to {} --allowerasing), or set driver.stream = \"{from}\"", self.spec),
                ));
            }
            why.push(format!(
                "{} is installed (driver.switch_stream): one transaction swaps the set",
                packages::module_spec(from, None)
            ));
            return Ok(Some(Verb::Swap));
        }
        let set_ok = self.absent.is_empty() && self.stale.is_empty();
        if self.prebuilt_profile {
            // The stream's packages by name (dnf's module state moved first when it must:
            // [`Found::reenable`]); no profile is marked installed.
            if set_ok {
                return Ok(None);
            }
            if self.state.enabled_stream() != Some(stream.as_str()) && !self.reenable() {
                why.push(if self.state.state == "disabled" {
                    "the nvidia-driver module is disabled".to_string()
                } else {
                    "no nvidia-driver stream enabled".to_string()
                });
            }
            if !self.stale.is_empty() {
                why.push(format!("the local repo has {}", self.drv));
            }
            return Ok(Some(Verb::Install));
        }
        Ok(Some(match self.state.enabled_stream() {
            Some(s) if s == stream => {
                let has_profile = self.plan.install != InstallSet::Module
                    || self.state.profiles.iter().any(|p| p == profile);
                if has_profile && set_ok {
                    return Ok(None);
                }
                if !has_profile {
                    let fm = if profile == "fm" {
                        " (NVSwitches present)"
                    } else {
                        ""
                    };
                    why.push(format!("module profile {profile} not installed{fm}"));
                }
                if self.stale.is_empty() {
                    Verb::Install
                } else {
                    why.push(format!("the local repo has {}", self.drv));
                    Verb::Switch
                }
            }
            // The set is already the wanted stream's, at the driver's version (a driver change
            // was interrupted after its transaction): only dnf's module state moves. (With the
            // set incomplete this is a flavour switch, above.)
            Some(other) => {
                why.push(format!(
                    "{} is enabled, but the installed set is {stream}'s: dnf's module state follows",
                    packages::module_spec(other, None)
                ));
                Verb::Switch
            }
            None => {
                why.push(if self.state.state == "disabled" {
                    "the nvidia-driver module is disabled".to_string()
                } else {
                    "no nvidia-driver stream enabled".to_string()
                });
                Verb::Install
            }
        }))
    }

    /// With prebuilt kmods and a module profile: dnf's module state must be reset and the
    /// stream enabled before the packages (changing no package), and why: a profile marked
    /// installed (an earlier DKMS install's: the next `dnf module switch-to` would install the
    /// new stream's profile, NVIDIA's DKMS kmod included, and erase the prebuilt kmods), or
    /// another stream enabled.
    fn reenable(&self) -> bool {
        let complete = self.absent.is_empty() && self.stale.is_empty();
        self.prebuilt_profile
            && (!self.state.profiles.is_empty()
                || match self.state.enabled_stream() {
                    Some(s) => s != self.stream,
                    // The set installed and no stream enabled (reset or disabled since): only
                    // the module state moves. (Otherwise the install enables it.)
                    None => complete,
                })
    }

    fn reenable_why(&self) -> String {
        let current = self.state.enabled_stream().unwrap_or("none");
        if self.state.enabled_stream().is_none() {
            format!(
                "no nvidia-driver stream enabled ({}), the set installed: dnf's module state moves to {}, no package with it",
                if self.state.state.is_empty() { "reset" } else { self.state.state.as_str() },
                packages::module_spec(&self.stream, None)
            )
        } else if current != self.stream {
            format!(
                "{} is enabled, but the prebuilt kmods' set is {}'s: dnf's module state moves first, no package with it",
                packages::module_spec(current, None),
                packages::module_spec(&self.stream, None)
            )
        } else {
            format!(
                "dnf marks profile {} of {} installed: with prebuilt kmods none is, or the next stream switch would bring back NVIDIA's DKMS kmod",
                self.state.profiles.join(", "),
                packages::module_spec(&self.stream, None)
            )
        }
    }

    /// The work of `verb`: the packages named on dnf's command line are the kmods, and the
    /// set's packages except for a module profile (which installs them itself).
    fn work(&self, verb: Verb, disable_excludes: bool) -> Work {
        let mut packages: Vec<String> = match self.plan.install {
            InstallSet::Module => Vec::new(),
            // `nvidia-open` / `cuda-drivers` bring nvidia-driver.
            _ => set_packages(self.plan)
                .into_iter()
                .filter(|p| *p != packages::DRIVER)
                .map(str::to_string)
                .collect(),
        };
        packages.extend(self.kmods.iter().cloned());
        let spec = self.spec.clone();
        match (verb, self.plan.install) {
            (Verb::Install, InstallSet::Module) => Work::Install(Install {
                specs: packages,
                module: Some(spec),
                // With prebuilt kmods: the profile less NVIDIA's DKMS kmods (the profile lists
                // the stream's own, which the prebuilt kmods conflict with).
                leave_out: if self.prebuilt_profile {
                    gpuhost_nvidia::packages::dkms_kmods()
                        .map(str::to_string)
                        .collect()
                } else {
                    Vec::new()
                },
                disable_excludes,
                allowerasing: self.set.allowerasing(),
                remove: self.set.removes(),
                ..Install::default()
            }),
            (Verb::Install, _) => Work::Install(Install {
                specs: packages,
                enable: Some(spec),
                disable_excludes,
                allowerasing: self.set.allowerasing(),
                remove: self.set.removes(),
                ..Install::default()
            }),
            (Verb::Switch | Verb::Swap, _) => Work::SwitchStream {
                module: spec,
                packages,
                disable_excludes,
            },
        }
    }
}

impl Step for Driver {
    fn id(&self) -> &'static str {
        "driver"
    }

    fn summary(&self) -> &'static str {
        "install the nvidia-driver module stream and profile from the local repo"
    }

    fn rpm_names(&self, ctx: &Ctx<'_>) -> Vec<String> {
        let mut names = plan(ctx).map_or_else(
            |_| vec![],
            |p| package_names(p, &kmod_packages(ctx, &p.repo.driver)),
        );
        if super::set::prebuilt(ctx).is_none() {
            // A node going back to DKMS: which of gpuhost's prebuilt kmods give way.
            names.extend(super::set::prebuilt_candidates(ctx));
        }
        names
    }

    fn needs_driver_package(&self) -> bool {
        true
    }

    /// On the live system, the estimates for the driver packages and the DKMS builds.
    fn space_needs(&self, ctx: &Ctx<'_>, _check: &Check) -> Vec<gpuhost_host::hostinfo::Need> {
        gpuhost_host::hostinfo::driver_needs(None, ctx.host.is_live())
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::context::not_applicable(ctx)
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let transition = super::installed::transition(ctx)?;
        if transition.driver_repo_first() {
            if !plan(ctx)?.modular() {
                // Without module streams the new set's branch is held once it is in.
                return super::plain::after_swap(ctx, plan(ctx)?, &transition);
            }
            return Ok(Check::in_sync(transition.deferred_reason()));
        }
        if !plan(ctx)?.modular() {
            return super::plain::check(ctx, plan(ctx)?, &transition);
        }
        let f = Found::read(ctx)?;
        let mut why = Vec::new();
        let verb = f.verb(&transition, &mut why)?;
        let mut check = Check::default();
        if f.reenable() && !matches!(verb, Some(Verb::Swap)) {
            check.changes.push(Change::new(
                Work::EnableStream {
                    module: packages::DRIVER.to_string(),
                    stream: packages::module_spec(&f.stream, None),
                },
                f.reenable_why(),
            ));
        }
        let Some(verb) = verb else {
            if !check.changes.is_empty() {
                return Ok(check);
            }
            return Ok(Check::in_sync(in_sync_text(&f)));
        };
        why.extend(super::set::not_installed(&f.absent));
        why.extend(f.stale.iter().cloned());
        // Which driver and why this flavour, when the set comes in; or which kmods give way.
        why.extend(f.set.why(f.plan));
        if f.state.state == "disabled" && !f.reenable() {
            check.changes.push(Change::new(
                Work::ResetModule(packages::DRIVER.to_string()),
                "the nvidia-driver module is disabled; a stream can be installed once it is reset",
            ));
        }
        // gpuhost's locks (excludes: Fabric Manager, NSCQ, …) must not hide them from their module.
        let work = match verb {
            Verb::Swap => Work::SwapDriver(super::change::plan_flavour_swap(ctx, f.plan)?),
            _ => f.work(verb, super::locks::locked(ctx)?),
        };
        check.changes.push(Change::new(work, why.join("; ")));
        stream_offered(ctx, &f)?;
        Ok(check)
    }

    fn apply(&self, ctx: &mut Ctx<'_>, work: &Work) -> Result<()> {
        crate::work::carry_out(ctx.host, work).map_err(|e| {
            let missing = gpuhost_host::cmd::Failed::of(&e)
                .is_some_and(|f| module_missing(&f.output(), super::context::stream(ctx)));
            if missing {
                let available = available_streams(ctx).unwrap_or_default();
                not_in_repo(super::context::stream(ctx), &available)
            } else {
                e
            }
        })
    }

    fn explain(&self, ctx: &Ctx<'_>, install: &Install, failure: &DnfFailure) -> anyhow::Error {
        if module_missing(&failure.text(), super::context::stream(ctx)) {
            let available = available_streams(ctx).unwrap_or_default();
            return not_in_repo(super::context::stream(ctx), &available);
        }
        match failure.unmatched(&install.specs).first() {
            Some(spec) => ctx.not_in_repos(spec),
            None => failure.error(),
        }
    }
}

/// Say now, not in the middle of the transaction, when the stream does not exist in the
/// driver's repo.
fn stream_offered(ctx: &Ctx<'_>, f: &Found<'_>) -> Result<()> {
    if !ctx
        .host
        .is_dir(super::installed::present_repo_dir(ctx, f.plan))
    {
        return Ok(());
    }
    let mut available = available_streams(ctx)?;
    // Absent on the cached metadata: ask again on fresh metadata before saying so.
    if !available.contains(&f.stream) && ctx.refresh_metadata() {
        available = available_streams(ctx)?;
    }
    if !available.contains(&f.stream) {
        return Err(not_in_repo(&f.stream, &available));
    }
    Ok(())
}

/// What a converged module install says of itself.
fn in_sync_text(f: &Found<'_>) -> String {
    let set = match f.plan.install {
        InstallSet::Module if f.prebuilt_profile => format!(
            " but NVIDIA's DKMS kmod (prebuilt kmods instead; the stream enabled, no profile marked installed: {})",
            kmod_note()
        ),
        InstallSet::Module => String::new(),
        other => format!(" ({other})"),
    };
    format!(
        "{} installed{set}: {}; {}",
        f.spec,
        f.names.join(", "),
        f.plan.choice.explanation
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(
        "[nvidia-driver]\nname=nvidia-driver\nstream=latest-dkms\nprofiles=default, fm\nstate=enabled\n",
        Some("latest-dkms"),
        &["default", "fm"]
    )]
    #[case(
        "[nvidia-driver]\nname=nvidia-driver\nstream=535-dkms\nprofiles=\nstate=enabled\n",
        Some("535-dkms"),
        &[]
    )]
    #[case(
        "[nvidia-driver]\nname=nvidia-driver\nstream=\nprofiles=\nstate=disabled\n",
        None,
        &[]
    )]
    #[case("[nvidia-driver]\nname=nvidia-driver\nstream=latest\nprofiles=default\nstate=\n", None, &["default"])]
    fn module_state(#[case] text: &str, #[case] enabled: Option<&str>, #[case] profiles: &[&str]) {
        let m = ModuleState::parse(text);
        assert_eq!(m.enabled_stream(), enabled);
        assert_eq!(m.profiles, profiles);
    }

    #[rstest]
    #[case(
        "4.18.0-553.16.1.el8_10.x86_64",
        "kmod-nvidia-535.104.05-4.18.0-553.16.1"
    )]
    #[case(
        "4.18.0-477.27.1.el8_8.x86_64",
        "kmod-nvidia-535.104.05-4.18.0-477.27.1"
    )]
    #[case(
        "5.14.0-427.13.1.el9_4.x86_64",
        "kmod-nvidia-535.104.05-5.14.0-427.13.1"
    )]
    fn precompiled_kmod_names(#[case] kver: &str, #[case] name: &str) {
        assert_eq!(precompiled_kmod("535.104.05", kver), name);
    }

    #[test]
    fn streams_from_dnf_module_list() {
        let out = "cuda-rhel8-12-2-local\nName          Stream             Profiles                         Summary\nnvidia-driver latest             default [d], fm, ks, src         Nvidia driver for latest branch\nnvidia-driver latest-dkms [d][e] default [d] [i], fm [i], ks, src Nvidia driver\nnvidia-driver 535-open           default [d], fm, ks, src         x\n\nHint: [d]efault, [e]nabled, [x]disabled, [i]nstalled\n";
        assert_eq!(
            listed_streams("nvidia-driver", out),
            vec!["latest", "latest-dkms", "535-open"]
        );
    }
}
