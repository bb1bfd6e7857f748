//! `docker`: the Docker CE repo and `docker-ce docker-ce-cli containerd.io`.
//!
//! Two known traps on OL8 (the release table's `container_tools_module`), settled before dnf
//! runs rather than by retrying:
//! - `containerd.io` is filtered out by the `container-tools` module's modular filtering;
//!   `--allowerasing` does not help. The repo file carries `module_hotfixes=true` (default), or
//!   the module is disabled (`docker.module_filtering = "disable-module"`).
//! - podman, buildah and runc (container-tools) conflict with `containerd.io`: the profile
//!   decides (`docker.conflicts`); the default stops before any change.

use anyhow::Result;

use super::services::docker_restart;
use super::{
    explain_repo_failure, pin, repo_differs, repo_file, require_local_repo, version_matches,
    ConflictPolicy, ModuleFiltering,
};
use crate::step::{Change, Check, Ctx, DnfFailure, FileWrite, Install, Step, Work};
use gpuhost_host::error::hinted;

pub(crate) struct Docker;

pub(crate) const REPO_PATH: &str = "/etc/yum.repos.d/docker-ce.repo";
const REPO_ID: &str = "docker-ce-stable";
const PACKAGES: [&str; 3] = ["docker-ce", "docker-ce-cli", "containerd.io"];
/// What container-tools installs that `containerd.io` conflicts with (directly or through runc).
const CONFLICTING: [&str; 3] = ["podman", "buildah", "runc"];
const MODULE_FILE: &str = "/etc/dnf/modules.d/container-tools.module";
const CONTAINER_TOOLS: &str = "container-tools";

impl Docker {
    fn wanted_repo(ctx: &Ctx<'_>) -> Result<String> {
        let spec = &ctx.profile.docker;
        let extra: &[&str] = match spec.module_filtering {
            ModuleFiltering::Hotfixes => &["module_hotfixes=true"],
            ModuleFiltering::DisableModule => &[],
        };
        repo_file(
            REPO_ID,
            "Docker CE Stable - $basearch",
            &spec.repo,
            &spec.gpgkey,
            extra,
        )
    }

    /// `(name, pin)` for each package.
    fn pins(ctx: &Ctx<'_>) -> [(&'static str, Option<String>); 3] {
        let spec = &ctx.profile.docker;
        [
            ("docker-ce", pin(&spec.version)),
            ("docker-ce-cli", pin(&spec.version)),
            ("containerd.io", pin(&spec.containerd_version)),
        ]
    }
}

/// The `state=` of a dnf `modules.d/<name>.module` file.
pub(crate) fn module_state(text: &str) -> Option<&str> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("state="))
        .map(str::trim)
        .next_back()
}

/// Packages dnf reports as "filtered out by modular filtering".
pub(crate) fn filtered_out(dnf_output: &str) -> Vec<String> {
    let mut out: Vec<String> = dnf_output
        .lines()
        .filter(|l| l.contains("filtered out by modular filtering"))
        .filter_map(|l| {
            let l = l.trim().trim_start_matches('-').trim();
            l.strip_prefix("package ")?
                .split_whitespace()
                .next()
                .map(str::to_string)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Docker CE's packages against the profile's pins.
struct Wanted {
    /// What to install: `name` or `name-version`.
    specs: Vec<String>,
    /// Why, per package.
    why: Vec<String>,
    /// What is already as the profile wants it: `name-evr`.
    have: Vec<String>,
}

impl Docker {
    /// The packages missing or at a version other than the profile pins.
    fn wanted(ctx: &Ctx<'_>) -> Result<Wanted> {
        let installed = ctx.installed(&PACKAGES)?;
        let mut w = Wanted {
            specs: Vec::new(),
            why: Vec::new(),
            have: Vec::new(),
        };
        for (name, pin) in Self::pins(ctx) {
            let found = installed.get(name).cloned().unwrap_or_default();
            let spec = match &pin {
                Some(v) => format!("{name}-{v}"),
                None => name.to_string(),
            };
            match (found.first(), &pin) {
                (None, _) => {
                    w.why.push(format!("{name} not installed"));
                    w.specs.push(spec);
                }
                (Some(_), Some(v)) if !found.iter().any(|p| version_matches(p, v)) => {
                    let vs: Vec<String> = found.iter().map(|p| p.evr()).collect();
                    w.why.push(format!(
                        "{name} {} installed, the profile pins {v}",
                        vs.join(", ")
                    ));
                    w.specs.push(spec);
                }
                (Some(p), _) => w.have.push(format!("{name}-{}", p.evr())),
            }
        }
        Ok(w)
    }

    /// Packages that conflict with containerd.io, under `docker.conflicts`: refused, removed
    /// first, or erased by the install (said in `why`).
    fn conflicts(
        ctx: &Ctx<'_>,
        policy: &ConflictPolicy,
        check: &mut Check,
        why: &mut Vec<String>,
    ) -> Result<()> {
        let conflicts: Vec<String> = ctx
            .installed(&CONFLICTING)?
            .into_values()
            .flatten()
            .map(|p| format!("{}-{}", p.name, p.evr()))
            .collect();
        if conflicts.is_empty() {
            return Ok(());
        }
        match policy {
            ConflictPolicy::Fail => {
                return Err(hinted(
                    format!(
                        "{} installed: containerd.io (needed by docker-ce) replaces runc, which podman and buildah use; docker.conflicts is \"fail\", so nothing was changed",
                        conflicts.join(", ")
                    ),
                    "choose in the profile: docker.conflicts = \"remove\" (dnf removes podman, buildah and runc first) or \"allowerasing\" (dnf install --allowerasing: containerd.io replaces runc, and dnf erases what conflicts); or remove them yourself",
                ));
            }
            ConflictPolicy::Remove => {
                let names: Vec<String> = ctx
                    .installed(&CONFLICTING)?
                    .into_iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(n, _)| n)
                    .collect();
                check.changes.push(Change::new(
                    Work::Remove(names),
                    format!(
                        "{} conflict with containerd.io; docker.conflicts = \"remove\"",
                        conflicts.join(", ")
                    ),
                ));
            }
            ConflictPolicy::Allowerasing => why.push(format!(
                "with --allowerasing: {} conflict with containerd.io; docker.conflicts = \"allowerasing\"",
                conflicts.join(", ")
            )),
        }
        Ok(())
    }
}

impl Step for Docker {
    fn id(&self) -> &'static str {
        "docker"
    }

    fn summary(&self) -> &'static str {
        "Docker CE from its repo (docker-ce, docker-ce-cli, containerd.io), conflicts settled by the profile"
    }

    fn rpm_names(&self, _ctx: &Ctx<'_>) -> Vec<String> {
        PACKAGES
            .iter()
            .chain(CONFLICTING.iter())
            .map(|s| s.to_string())
            .collect()
    }

    /// On the live system: Docker CE's packages and a first image under its data-root.
    fn space_needs(&self, ctx: &Ctx<'_>, _check: &Check) -> Vec<gpuhost_host::hostinfo::Need> {
        if ctx.host.is_live() {
            gpuhost_host::hostinfo::docker_needs(ctx.host)
        } else {
            Vec::new()
        }
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let spec = ctx.profile.docker.clone();
        if let Some(why) = repo_differs(ctx, REPO_PATH, &Self::wanted_repo(ctx)?)? {
            check.changes.push(Change::new(
                Work::Configure(FileWrite::new(REPO_PATH, Self::wanted_repo(ctx)?, 0o644)),
                why,
            ));
        }
        if spec.module_filtering == ModuleFiltering::DisableModule
            && gpuhost_host::platform::release(ctx.profile.os.major)
                .is_some_and(|r| r.container_tools_module)
        {
            let text = ctx.host.read_opt(MODULE_FILE)?.unwrap_or_default();
            if module_state(&text) != Some("disabled") {
                check.changes.push(Change::new(
                    Work::DisableModule(CONTAINER_TOOLS.to_string()),
                    "the container-tools module filters out containerd.io (docker.module_filtering = \"disable-module\")",
                ));
            }
        }
        let Wanted {
            specs,
            mut why,
            have,
        } = Self::wanted(ctx)?;
        if !specs.is_empty() {
            Self::conflicts(ctx, &spec.conflicts, &mut check, &mut why)?;
            require_local_repo(ctx, "docker.repo", &spec.repo)?;
            check.changes.push(Change::new(
                Work::Install(Install {
                    specs,
                    allowerasing: spec.conflicts == ConflictPolicy::Allowerasing,
                    repo: Some(REPO_ID),
                    owes: Some(docker_restart("docker packages installed or changed")),
                    ..Install::default()
                }),
                why.join("; "),
            ));
        } else {
            check.notes.push(format!("installed: {}", have.join(", ")));
        }
        Ok(check)
    }

    fn explain(&self, ctx: &Ctx<'_>, install: &Install, failure: &DnfFailure) -> anyhow::Error {
        let filtered = filtered_out(&failure.text());
        if !filtered.is_empty() {
            return hinted(
                format!(
                    "{} filtered out by modular filtering (the container-tools module); --allowerasing does not help with that",
                    filtered.join(", ")
                ),
                format!("keep docker.module_filtering = \"hotfixes\" (module_hotfixes=true in {REPO_PATH}) or set it to \"disable-module\"; check that no other .repo file defines the docker packages without module_hotfixes"),
            );
        }
        let spec = &ctx.profile.docker;
        if let Some(e) = explain_repo_failure(failure, REPO_ID, "docker.repo", &spec.repo) {
            return e;
        }
        match failure.unmatched(&install.specs).first() {
            Some(s) => ctx.not_in_repos(s),
            None => failure.error(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the real dnf 4.14 printed in an OL8 root with the container-tools module enabled
    /// (tests/world/README.md, case d2).
    const FILTERED: &str = "Error: \n Problem: package docker-ce-3:27.3.1-1.el8.x86_64 requires containerd.io >= 1.6.24, but none of the providers can be installed\n  - package containerd.io-1.6.32-3.1.el8.x86_64 is filtered out by modular filtering\n  - package containerd.io-1.7.22-3.1.el8.x86_64 is filtered out by modular filtering\n(try to add '--skip-broken' to skip uninstallable packages or '--nobest' to use not only best candidate packages)\n";

    #[test]
    fn finds_the_packages_modular_filtering_hides() {
        assert_eq!(
            filtered_out(FILTERED),
            vec![
                "containerd.io-1.6.32-3.1.el8.x86_64".to_string(),
                "containerd.io-1.7.22-3.1.el8.x86_64".to_string()
            ]
        );
        assert!(filtered_out("Error: nothing provides foo").is_empty());
    }

    #[test]
    fn reads_the_module_state() {
        let t = "[container-tools]\nname=container-tools\nstream=\nprofiles=\nstate=disabled\n";
        assert_eq!(module_state(t), Some("disabled"));
        assert_eq!(module_state(""), None);
    }
}
