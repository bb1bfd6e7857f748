//! Docker CE, the NVIDIA Container Toolkit, `daemon.json`, services, prefix links and the
//! container smoke test — the steps that make a GPU host a GPU *container* host.
//!
//! Their profile sections (`[docker]`, `[container_toolkit]`, `[[prefix_links]]`,
//! `[container_smoke]`) are in the profile module.
//!
//! A docker restart is owed (in gpuhost's state, durably, *before* the change that makes it
//! owed) whenever the docker packages or `daemon.json` change; the `services` step pays it. A
//! crash in between leaves it owed, so the next run still restarts.

pub(crate) mod daemon_json;
pub(crate) mod docker;
pub(crate) mod prefix_links;
pub(crate) mod services;
pub(crate) mod smoke;
pub(crate) mod toolkit;

use anyhow::Result;

use crate::step::Ctx;
use gpuhost_host::invalid;
pub use gpuhost_profile::{
    toolkit_denied, toolkit_refused, ConflictPolicy, DaemonSpec, ModuleFiltering, RepoSource,
    TOOLKIT_CVES, TOOLKIT_DENY, TOOLKIT_FLOOR,
};

pub use daemon_json::{merge as merge_daemon_json, NVIDIA_RUNTIME_PATH};
pub use prefix_links::link_path;
pub use smoke::{parse_nvcc_release, parse_smi_header, parse_smi_list, SmiGpu};

/// The text of a `.repo` file with one repo; `extra` lines go last (e.g. `module_hotfixes=true`).
/// Every value must be one line of printable text: a newline would start a section or key of
/// its own, a line starting with whitespace would continue the previous value (the profile
/// loader refuses control characters already; this is the writer's own guard).
pub(crate) fn repo_file(
    id: &str,
    name: &str,
    source: &str,
    gpgkey: &str,
    extra: &[&str],
) -> Result<String> {
    let baseurl = RepoSource::parse(source)
        .map(|s| s.baseurl())
        .unwrap_or_else(|| source.to_string());
    for (key, value) in [
        ("id", id),
        ("name", name),
        ("baseurl", &baseurl),
        ("gpgkey", gpgkey),
    ]
    .into_iter()
    .chain(extra.iter().map(|l| ("extra line", *l)))
    {
        if let Some(c) = value.chars().find(|c| c.is_control()) {
            return Err(invalid!(
                "repo {id}: {key} {value:?} contains the control character {c:?}; a repo file value must be one line of printable text"
            ));
        }
        let bad_extra = key == "extra line"
            && value.split_once('=').is_none_or(|(k, _)| {
                ["name", "baseurl", "enabled", "gpgcheck", "gpgkey", ""].contains(&k.trim())
            });
        if value.trim() != value || (key == "id" && value.contains([']', '['])) || bad_extra {
            return Err(invalid!(
                "repo {id}: {key} {value:?} has leading or trailing blanks or brackets, or repeats a key; a repo file value must be one plain line"
            ));
        }
    }
    let mut out = format!(
        "# Written by gpuhost from the profile; edit the profile, not this file.\n[{id}]\nname={name}\nbaseurl={baseurl}\nenabled=1\n"
    );
    if gpgkey.is_empty() {
        out.push_str("gpgcheck=0\n");
    } else {
        out.push_str(&format!("gpgcheck=1\ngpgkey={gpgkey}\n"));
    }
    for l in extra {
        out.push_str(l);
        out.push('\n');
    }
    Ok(out)
}

/// Compare a repo file on the host with the wanted text; `Some(reason)` when it must be written.
fn repo_differs(ctx: &Ctx<'_>, path: &str, want: &str) -> Result<Option<String>> {
    Ok(match ctx.host.read_opt(path)? {
        None => Some(format!("{path} is missing")),
        Some(t) if t == want => None,
        Some(_) => Some(format!("{path} differs from the profile")),
    })
}

/// For a local-directory repo, fail early (and clearly) when it holds no repo metadata. With a
/// bundle the packages come from the bundle, not from the profile's repo.
fn require_local_repo(ctx: &Ctx<'_>, key: &str, source: &str) -> Result<()> {
    if ctx.host.bundle().is_some() {
        return Ok(());
    }
    check_repo(ctx.host, key, source)
}

/// Every repository the selected steps take packages from, as the profile names it, checked
/// before any change (`apply`, `plan`): a directory (or a `file://` URL, which dnf reads inside
/// the root) must hold a repo (`repodata/repomd.xml`), any other URL must be well formed.
/// Otherwise invalid input (exit 2) naming the key and the path. With a bundle the packages
/// come from the bundle's repo only: nothing to check.
pub fn check_repos(
    host: &gpuhost_host::host::Host,
    profile: &gpuhost_profile::Profile,
    selection: &crate::step::Selection,
) -> Result<()> {
    if host.bundle().is_some() {
        return Ok(());
    }
    for (step, key, source) in [
        ("docker", "docker.repo", &profile.docker.repo),
        (
            "container-toolkit",
            "container_toolkit.repo",
            &profile.container_toolkit.repo,
        ),
    ] {
        if selection.excludes(step).is_none() {
            check_repo(host, key, source)?;
        }
    }
    Ok(())
}

/// One repository source (see [`check_repos`]).
fn check_repo(host: &gpuhost_host::host::Host, key: &str, source: &str) -> Result<()> {
    let dir = match RepoSource::parse(source) {
        Some(RepoSource::Dir(d)) => d.to_path_buf(),
        Some(RepoSource::Url(u)) => match u.strip_prefix("file://") {
            Some(p) if p.starts_with('/') => std::path::PathBuf::from(p),
            _ if url_is_well_formed(u) => return Ok(()),
            _ => {
                return Err(invalid!(
                    "{key} {u:?} is not a well-formed repository URL; give http(s):// or ftp:// with a host name, file:// with an absolute path, or an absolute local directory"
                ))
            }
        },
        None => {
            return Err(invalid!(
                "{key} {source:?} is neither a URL nor an absolute directory"
            ))
        }
    };
    let shown = host.path(&dir);
    let why = if !host.is_dir(&dir) {
        "does not exist".to_string()
    } else if !host.exists(dir.join("repodata/repomd.xml")) {
        format!(
            "holds no repo ({} is missing)",
            shown.join("repodata/repomd.xml").display()
        )
    } else {
        return Ok(());
    };
    let inside = if host.is_live() {
        String::new()
    } else {
        format!(" (inside the install root {})", host.root().display())
    };
    Err(gpuhost_host::error::as_invalid(gpuhost_host::error::hinted(
        format!("{key}: the repository directory {}{inside} {why}; nothing was changed", dir.display()),
        format!("copy the mirror there (with its repodata/), run createrepo_c on it, or point {key} at the right directory or URL"),
    )))
}

/// `scheme://host/...` with a known scheme, a host name and no blanks (dnf's `$releasever`,
/// `$basearch` allowed).
fn url_is_well_formed(u: &str) -> bool {
    let Some((scheme, rest)) = u.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    ["http", "https", "ftp"].contains(&scheme)
        && !authority.is_empty()
        && !authority.starts_with(['.', '-', ':', '@'])
        && !u.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A dnf failure because the repo from the profile cannot be read becomes an error that says
/// so and what to do (an air-gapped site needs a local mirror).
fn explain_repo_failure(
    failure: &crate::step::DnfFailure,
    repo_id: &str,
    key: &str,
    source: &str,
) -> Option<anyhow::Error> {
    let text = failure.text();
    text.contains(&format!("Failed to download metadata for repo '{repo_id}'"))
        .then(|| {
            gpuhost_host::error::hinted(
                format!(
                    "the {repo_id} repo ({source}, from {key}) cannot be read: {:#}",
                    failure.error()
                ),
                format!("check the network or proxy, or point {key} at a local mirror directory (air-gapped sites)"),
            )
        })
}

/// A version pin; `""` means none (so that a profile can unpin what it extends).
fn pin(v: &Option<String>) -> Option<String> {
    v.as_ref().filter(|v| !v.is_empty()).cloned()
}

/// True when an installed package's version matches a pin (`27.3.1` or `27.3.1-1.el8`).
fn version_matches(p: &gpuhost_host::rpm::Installed, pin: &str) -> bool {
    p.version == pin || p.evr() == pin
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn a_local_directory_becomes_a_file_url_and_no_key_means_no_gpgcheck() -> Result<()> {
        let t = repo_file(
            "docker-ce-stable",
            "Docker CE Stable",
            "/srv/mirror/docker",
            "",
            &["module_hotfixes=true"],
        )?;
        assert!(t.contains("baseurl=file:///srv/mirror/docker\n"), "{t}");
        assert!(
            t.contains("gpgcheck=0\n") && t.ends_with("module_hotfixes=true\n"),
            "{t}"
        );
        let t = repo_file("x", "x", "https://e.com/r", "https://e.com/gpg", &[])?;
        assert!(t.contains("gpgcheck=1\ngpgkey=https://e.com/gpg\n"), "{t}");
        Ok(())
    }

    #[rstest]
    #[case(
        "https://download.docker.com/linux/rhel/$releasever/$basearch/stable",
        true
    )]
    #[case("http://mirror.local:8080/docker", true)]
    #[case("https:///docker", false)]
    #[case("htps//x", false)]
    #[case("gopher://x/y", false)]
    #[case("https://e .com/x", false)]
    fn repository_urls_must_be_well_formed(#[case] u: &str, #[case] ok: bool) {
        assert_eq!(url_is_well_formed(u), ok, "{u}");
    }

    #[test]
    fn a_mirror_directory_must_exist_and_hold_a_repo() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = gpuhost_host::host::Host::new(dir.path())?;
        let msg = |r: Result<()>| match r {
            Err(e) if gpuhost_host::error::is_invalid(&e) => format!("{e:#}"),
            other => format!("not invalid input: {other:?}"),
        };
        let m = msg(check_repo(
            &host,
            "docker.repo",
            "/srv/mirror/docker-ce-stable",
        ));
        assert!(m.contains("docker.repo: the repository directory /srv/mirror/docker-ce-stable (inside the install root"), "{m}");
        assert!(m.contains("does not exist"), "{m}");
        std::fs::create_dir_all(dir.path().join("srv/mirror/docker-ce-stable/repodata"))?;
        let m = msg(check_repo(
            &host,
            "docker.repo",
            "file:///srv/mirror/docker-ce-stable",
        ));
        assert!(m.contains("repodata/repomd.xml is missing"), "{m}");
        std::fs::write(
            dir.path()
                .join("srv/mirror/docker-ce-stable/repodata/repomd.xml"),
            "<repomd/>",
        )?;
        check_repo(&host, "docker.repo", "/srv/mirror/docker-ce-stable")?;
        check_repo(&host, "docker.repo", "file:///srv/mirror/docker-ce-stable")?;
        let m = msg(check_repo(&host, "container_toolkit.repo", "https:///x"));
        assert!(
            m.contains("container_toolkit.repo \"https:///x\" is not a well-formed"),
            "{m}"
        );
        Ok(())
    }

    #[rstest]
    #[case("https://e.com/gpg\n[evil]\nbaseurl=https://evil.example/")]
    #[case("https://e.com/gpg\r")]
    #[case(" https://e.com/gpg")]
    fn the_repo_writer_refuses_what_would_start_a_line(#[case] gpgkey: &str) {
        let r = repo_file("x", "x", "https://e.com/r", gpgkey, &[]);
        assert!(
            r.as_ref().is_err_and(gpuhost_host::error::is_invalid),
            "{r:?}"
        );
    }
}
