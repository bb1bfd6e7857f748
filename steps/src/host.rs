//! The host being acted on: the live system (`/`) or an install root.
//!
//! In an install root, rpm, dnf and systemctl are pointed at the root, files are read and
//! written under it, and dnf reads only the root's repo files and `dnf.conf`: `file://`
//! URLs in the root's repo files are rewritten to resolve inside the root.

use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

use crate::cmd::Cmd;

#[derive(Clone, Debug)]
pub struct Host {
    root: PathBuf,
    live: bool,
    /// `--releasever` for dnf in an install root (the OS major version).
    releasever: Option<String>,
}

impl Host {
    /// The live system.
    pub fn live() -> Self {
        Host {
            root: PathBuf::from("/"),
            live: true,
            releasever: None,
        }
    }

    /// `root` = `/` is the live system; anything else is an install root, which must exist.
    pub fn new(root: &Path) -> Result<Self> {
        let canonical = root.canonicalize().map_err(|e| {
            crate::invalid!(
                "install root {} cannot be used: {e}; create it or pass an existing directory to --root",
                root.display()
            )
        })?;
        if !canonical.is_dir() {
            return Err(crate::invalid!(
                "install root {} is not a directory; pass a directory to --root",
                root.display()
            ));
        }
        let live = canonical == Path::new("/");
        Ok(Host {
            root: canonical,
            live,
            releasever: None,
        })
    }

    pub fn set_releasever(&mut self, v: impl Into<String>) {
        self.releasever = Some(v.into());
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True for the running system; false for an install root, where live-only actions
    /// (restarts, module loading, reboots, NVML) are deferred.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// A path on the host: `/etc/os-release` → `<root>/etc/os-release`.
    pub fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        let mut out = self.root.clone();
        for c in p.as_ref().components() {
            if let Component::Normal(s) = c {
                out.push(s);
            }
        }
        out
    }

    /// Read a text file on the host; `Ok(None)` when it does not exist.
    pub fn read_opt(&self, p: impl AsRef<Path>) -> Result<Option<String>> {
        let path = self.path(p);
        match std::fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// `rpm`, acting on this host's rpm database.
    pub fn rpm(&self) -> Cmd {
        let cmd = Cmd::new("rpm");
        if self.live {
            cmd
        } else {
            cmd.arg("--root").arg(&self.root)
        }
    }

    /// `dnf -y`, acting on this host with only its own repositories.
    pub fn dnf(&self) -> Result<Cmd> {
        let mut cmd = Cmd::new("dnf").args(["-y", "--quiet"]);
        if self.live {
            return Ok(cmd);
        }
        cmd = cmd
            .arg(format!("--installroot={}", self.root.display()))
            .arg(format!(
                "--setopt=reposdir={}",
                self.path("/etc/yum.repos.d").display()
            ))
            .arg(format!(
                "--config={}",
                self.path("/etc/dnf/dnf.conf").display()
            ))
            .arg("--noplugins");
        if let Some(v) = &self.releasever {
            cmd = cmd.arg(format!("--releasever={v}"));
        }
        for (id, key, url) in self.file_urls()? {
            cmd = cmd.arg(format!("--setopt={id}.{key}={url}"));
        }
        Ok(cmd)
    }

    /// `systemctl`, offline against the root when not live.
    pub fn systemctl(&self) -> Cmd {
        let cmd = Cmd::new("systemctl");
        if self.live {
            cmd
        } else {
            cmd.arg(format!("--root={}", self.root.display()))
        }
    }

    /// `file://` URLs in the root's repo files, rewritten to point inside the root.
    fn file_urls(&self) -> Result<Vec<(String, &'static str, String)>> {
        let dir = self.path("/etc/yum.repos.d");
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "repo"))
            .collect();
        files.sort();
        for f in files {
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            for (id, key, value) in repo_entries(&text) {
                if key != "baseurl" && key != "gpgkey" {
                    continue;
                }
                let rewritten: Vec<String> = value
                    .split([' ', ','])
                    .filter(|u| !u.is_empty())
                    .map(|u| match u.strip_prefix("file://") {
                        Some(p) => format!("file://{}", self.path(p).display()),
                        None => u.to_string(),
                    })
                    .collect();
                if value.contains("file://") {
                    let k = if key == "baseurl" {
                        "baseurl"
                    } else {
                        "gpgkey"
                    };
                    out.push((id.to_string(), k, rewritten.join(",")));
                }
            }
        }
        Ok(out)
    }
}

/// `(section, key, value)` triples of an INI-style `.repo` file.
pub fn repo_entries(text: &str) -> Vec<(&str, &str, &str)> {
    let mut section = "";
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.trim();
        } else if let Some((k, v)) = line.split_once('=') {
            out.push((section, k.trim(), v.trim()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_root() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        assert!(!host.is_live());
        let p = host.path("/etc/../../os-release");
        assert!(p.starts_with(host.root()), "{}", p.display());
        Ok(())
    }

    #[test]
    fn dnf_reads_only_the_roots_repos_with_file_urls_inside_the_root() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("etc/yum.repos.d"))?;
        std::fs::write(
            dir.path().join("etc/yum.repos.d/ol8.repo"),
            "[ol8_baseos_latest]\nname=x\nbaseurl=file:///srv/repos/ol8_baseos_latest\n\n[web]\nbaseurl=https://yum.oracle.com/x\n",
        )?;
        let mut host = Host::new(dir.path())?;
        host.set_releasever("8");
        let argv = host.dnf()?.argv();
        let root = host.root().display().to_string();
        assert!(argv.contains(&format!("--installroot={root}")));
        assert!(argv.contains(&format!("--setopt=reposdir={root}/etc/yum.repos.d")));
        assert!(argv.contains(&"--releasever=8".to_string()));
        assert!(argv.contains(&format!(
            "--setopt=ol8_baseos_latest.baseurl=file://{root}/srv/repos/ol8_baseos_latest"
        )));
        assert!(!argv.iter().any(|a| a.contains("web.baseurl")));
        Ok(())
    }

    #[test]
    fn a_missing_root_is_invalid_input() {
        let err = Host::new(Path::new("/nonexistent/gpuhost-root")).err();
        assert!(
            err.as_ref().is_some_and(crate::error::is_invalid),
            "{err:?}"
        );
    }
}
