//! `container-toolkit`: NVIDIA's repo and its four packages at one version, never a version
//! on the deny-list; the CDI spec on request (live only).

use std::collections::BTreeMap;

use anyhow::Result;

use super::{
    explain_repo_failure, pin, repo_differs, repo_file, require_local_repo, toolkit_refused,
    version_matches,
};
use crate::step::{Change, Check, Ctx, DnfFailure, FileWrite, Install, Step, Work};
use gpuhost_host::error::hinted;
use gpuhost_host::rpm::Installed;
use gpuhost_nvidia::packages;

pub(crate) struct ContainerToolkit;

pub(crate) const REPO_PATH: &str = "/etc/yum.repos.d/nvidia-container-toolkit.repo";
const REPO_ID: &str = packages::CONTAINER_TOOLKIT_REPO;
/// The toolkit first: its version is the one the others must have when nothing is pinned.
pub(crate) const PACKAGES: &[&str] = packages::CONTAINER_TOOLKIT_PACKAGES;
pub(crate) const CDI_SPEC: &str = "/etc/cdi/nvidia.yaml";
const CDI_GENERATE: &str = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml";

fn toolkit_install(specs: Vec<String>) -> Work {
    Work::Install(Install {
        specs,
        repo: Some(REPO_ID),
        ..Install::default()
    })
}

impl ContainerToolkit {
    fn wanted_repo(ctx: &Ctx<'_>) -> Result<String> {
        let spec = &ctx.profile.container_toolkit;
        repo_file(
            REPO_ID,
            packages::CONTAINER_TOOLKIT,
            &spec.repo,
            &spec.gpgkey,
            &[],
        )
    }
}

/// The installed version of package `name` (its first, when several are).
fn version_of(installed: &BTreeMap<String, Vec<Installed>>, name: &str) -> Option<String> {
    installed
        .get(name)
        .and_then(|v| v.first())
        .map(|p| p.version.clone())
}

/// `nvidia-container-toolkit 1.17.8, …, libnvidia-container1 missing`; `none of the four` when
/// none is installed.
fn listed(installed: &BTreeMap<String, Vec<Installed>>) -> String {
    if PACKAGES.iter().all(|n| version_of(installed, n).is_none()) {
        return format!("none of the {}", PACKAGES.len());
    }
    PACKAGES
        .iter()
        .map(|n| {
            format!(
                "{n} {}",
                version_of(installed, n).unwrap_or_else(|| "missing".into())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The install the four packages need, if any: all at the pinned `version`; else all at one
/// version (the toolkit's), none of them refused under `min_version`.
fn package_change(
    installed: &BTreeMap<String, Vec<Installed>>,
    version: &Option<String>,
    min_version: &str,
) -> Result<Option<Change>> {
    if let Some(pin) = &pin(version) {
        let off = PACKAGES.iter().any(|n| {
            !installed
                .get(*n)
                .is_some_and(|v| v.iter().any(|p| version_matches(p, pin)))
        });
        if !off {
            return Ok(None);
        }
        let specs = PACKAGES.iter().map(|n| format!("{n}-{pin}")).collect();
        return Ok(Some(Change::new(
            toolkit_install(specs),
            format!("the profile pins {pin}; installed: {}", listed(installed)),
        )));
    }
    let versions: Vec<Option<String>> = PACKAGES.iter().map(|n| version_of(installed, n)).collect();
    if let Some(bad) = versions
        .iter()
        .flatten()
        .find_map(|v| toolkit_refused(v, min_version).map(|why| (v.clone(), why)))
    {
        return Err(hinted(
            format!("the NVIDIA Container Toolkit {} is installed and refused: {}", bad.0, bad.1),
            "pin another version in the profile: container_toolkit.version = \"1.17.8\" (gpuhost then installs it in place)",
        ));
    }
    let first = versions.first().cloned().flatten();
    if versions.iter().all(|v| v.is_some() && *v == first) {
        return Ok(None);
    }
    let specs = match &first {
        Some(v) => PACKAGES.iter().map(|n| format!("{n}-{v}")).collect(),
        None => PACKAGES.iter().map(|n| n.to_string()).collect(),
    };
    Ok(Some(Change::new(
        toolkit_install(specs),
        format!(
            "the four packages must be installed at one version; installed: {}",
            listed(installed)
        ),
    )))
}

impl Step for ContainerToolkit {
    fn id(&self) -> &'static str {
        "container-toolkit"
    }

    fn summary(&self) -> &'static str {
        "the NVIDIA Container Toolkit's four packages at one version, known-bad versions refused"
    }

    fn rpm_names(&self, _ctx: &Ctx<'_>) -> Vec<String> {
        PACKAGES.iter().map(|s| s.to_string()).collect()
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let spec = ctx.profile.container_toolkit.clone();
        if let Some(why) = repo_differs(ctx, REPO_PATH, &Self::wanted_repo(ctx)?)? {
            check.changes.push(Change::new(
                Work::Configure(FileWrite::new(REPO_PATH, Self::wanted_repo(ctx)?, 0o644)),
                why,
            ));
        }
        let installed = ctx.installed(PACKAGES)?;
        if let Some(change) = package_change(&installed, &spec.version, &spec.min_version)? {
            check.changes.push(change);
        }
        if check.installs() {
            require_local_repo(ctx, "container_toolkit.repo", &spec.repo)?;
        } else {
            check
                .notes
                .push(format!("installed: {}", listed(&installed)));
        }
        if spec.cdi && !ctx.host.exists(CDI_SPEC) {
            if ctx.host.is_live() {
                check.changes.push(Change::new(
                    Work::Run(CDI_GENERATE.split(' ').map(str::to_string).collect()),
                    format!("{CDI_SPEC} is missing"),
                ));
            } else {
                check.deferred.push(format!(
                    "{CDI_GENERATE} (the CDI spec describes the live GPUs)"
                ));
            }
        }
        Ok(check)
    }

    fn explain(&self, ctx: &Ctx<'_>, install: &Install, failure: &DnfFailure) -> anyhow::Error {
        let spec = &ctx.profile.container_toolkit;
        if let Some(e) =
            explain_repo_failure(failure, REPO_ID, "container_toolkit.repo", &spec.repo)
        {
            return e;
        }
        match failure.unmatched(&install.specs).first() {
            Some(s) => ctx.not_in_repos(s),
            None => failure.error(),
        }
    }
}
