//! What gpuhost installed to build NVIDIA's modules on a node (DKMS, the compiler, kernel
//! headers), recorded so that a node moving to prebuilt kmods (`driver.kmod_repo`) removes
//! those packages, and only those: a package the site installed itself, or one gpuhost found
//! installed, stays.
//!
//! Each step that installs build packages (`build-deps`, `kernel-headers`) records the names it
//! installs that had no version installed before, in `/var/lib/gpuhost/built-by/<step>`
//! (one name a line, written before the transaction: a name recorded for a transaction that
//! failed is dropped below, being not installed). When prebuilt kmods replace NVIDIA's DKMS
//! kmod, the same transaction removes the recorded names still installed that nothing else
//! needs once the DKMS kmod is gone (`rpm -e --test`: a package a site package requires stays);
//! dnf's `clean_requirements_on_remove` takes the dependencies they alone pulled in.

use anyhow::Result;

use crate::step::{Change, Ctx, FileWrite, Work};

/// Where the records are, in the root.
pub(crate) const DIR: &str = "/var/lib/gpuhost/built-by";

/// The names `step` recorded.
fn recorded(ctx: &Ctx<'_>, step: &str) -> Result<Vec<String>> {
    Ok(ctx
        .host
        .read_opt(format!("{DIR}/{step}"))?
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect())
}

/// The change that adds `installing` (names with no version installed now) to `step`'s record,
/// when any is not in it yet.
pub(crate) fn record(ctx: &Ctx<'_>, step: &str, installing: &[String]) -> Result<Option<Change>> {
    let mut names = recorded(ctx, step)?;
    let before = names.len();
    for n in installing {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    if names.len() == before {
        return Ok(None);
    }
    names.sort();
    let text = format!(
        "# Installed by gpuhost's {step} step to build NVIDIA's modules; removed when prebuilt kmods replace DKMS.\n{}\n",
        names.join("\n")
    );
    Ok(Some(Change::new(
        Work::Configure(FileWrite::new(format!("{DIR}/{step}"), text, 0o644)),
        format!(
            "record what gpuhost installs to build ({}), to remove it if prebuilt kmods replace DKMS",
            installing.join(", ")
        ),
    )))
}

/// The recorded build packages still installed that nothing needs once `replaced` (NVIDIA's
/// DKMS kmods) go: what the move to prebuilt kmods removes.
pub(crate) fn leftovers(ctx: &Ctx<'_>, replaced: &[String]) -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for step in ["build-deps", "kernel-headers"] {
        for n in recorded(ctx, step)? {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let installed = ctx.installed(&refs)?;
    names.retain(|n| installed.get(n).is_some_and(|v| !v.is_empty()));
    // Each round drops the packages that provide what a package staying needs.
    for _ in 0..=names.len() {
        if names.is_empty() {
            break;
        }
        let out = ctx
            .host
            .rpm()
            .args(["-e", "--test"])
            .args(replaced)
            .args(&names)
            .output()?;
        if out.success() {
            break;
        }
        let needed = needed_capabilities(&out.stderr);
        if needed.is_empty() {
            // rpm refused for another reason: remove nothing rather than guess.
            return Ok(Vec::new());
        }
        // A capability only the DKMS kmods provide (`nvidia-kmod`) is the prebuilt kmod's to
        // provide in the same transaction: not a reason to keep a build package.
        let mut keep = Vec::new();
        for cap in &needed {
            let by = providers(ctx, std::slice::from_ref(cap))?;
            if by.iter().any(|p| !replaced.contains(p)) {
                keep.extend(by);
            }
        }
        if keep.is_empty() {
            break;
        }
        let n = names.len();
        names.retain(|x| !keep.contains(x));
        if names.len() == n {
            return Ok(Vec::new());
        }
    }
    Ok(names)
}

/// What `plan` and the report say of [`leftovers`] going, when any do.
pub(crate) fn said(leftovers: &[String]) -> Option<String> {
    (!leftovers.is_empty()).then(|| {
        format!(
            "the build packages gpuhost installed for DKMS go with it ({})",
            leftovers.len()
        )
    })
}

/// The capabilities of `rpm -e --test`'s "X is needed by (installed) Y" lines.
fn needed_capabilities(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(" is needed by "))
        .filter_map(|l| l.trim().split(" is needed by ").next())
        .map(|c| c.trim().to_string())
        .collect()
}

/// The names of the installed packages that provide `caps`.
fn providers(ctx: &Ctx<'_>, caps: &[String]) -> Result<Vec<String>> {
    let out = ctx
        .host
        .rpm()
        .args(["-q", "--qf", "%{NAME}\\n", "--whatprovides"])
        .args(caps)
        .output()?;
    Ok(out
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("no package"))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_rpm_says_is_needed_is_read() {
        let stderr = "error: Failed dependencies:\n\tmake is needed by (installed) site-tool-1.0-1.noarch\n\t/usr/bin/gcc is needed by (installed) site-cc-1-1.noarch\n";
        assert_eq!(needed_capabilities(stderr), vec!["make", "/usr/bin/gcc"]);
    }
}
