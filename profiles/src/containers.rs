//! The container sections of a profile: `[docker]` (with `[docker.daemon]` for what goes into
//! `/etc/docker/daemon.json`), `[container_toolkit]`, `[[prefix_links]]`, `[container_smoke]`.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use gpuhost_host::invalid;

/// Toolkit versions that must not be installed, with why.
pub const TOOLKIT_DENY: &[(&str, &str)] = &[
    (
        "1.17.0",
        "1.17.0 broke `docker run --gpus all` (fixed in 1.17.1)",
    ),
    (
        "1.17.7",
        "1.17.7 broke enroot (GCP cluster-toolkit pins it away)",
    ),
];

/// The default security floor of the NVIDIA Container Toolkit (`container_toolkit.min_version`).
pub const TOOLKIT_FLOOR: &str = "1.17.8";

/// Security fixes of the NVIDIA Container Toolkit: (fixed in, CVE, what). A version below the
/// floor is refused naming every CVE it still has (NVIDIA security bulletins).
pub const TOOLKIT_CVES: &[(&str, &str, &str)] = &[
    ("1.16.2", "CVE-2024-0132", "container escape (TOCTOU)"),
    (
        "1.17.4",
        "CVE-2025-23359",
        "container escape (bypass of the CVE-2024-0132 fix)",
    ),
    (
        "1.17.8",
        "CVE-2025-23266",
        "container escape (createContainer hook, LD_PRELOAD)",
    ),
];

/// `[docker]` in a profile.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DockerSpec {
    /// Where Docker CE comes from: a URL (`https://…`, `file://…`) or an absolute local
    /// directory holding a repo (air-gapped mirror). Written to `/etc/yum.repos.d/docker-ce.repo`.
    #[serde(default = "default_docker_repo")]
    pub repo: String,
    /// GPG key URL (or `file://` path) of the repo; `""` turns gpgcheck off (a mirror you trust).
    #[serde(default = "default_docker_gpgkey")]
    pub gpgkey: String,
    /// Pin `docker-ce` and `docker-ce-cli` to this version (e.g. `27.3.1`); unset or `""`: the newest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Pin `containerd.io` to this version (e.g. `1.7.22`); unset or `""`: the newest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd_version: Option<String>,
    /// What to do when podman, buildah or runc are installed: `fail` (default: stop, change
    /// nothing), `remove` (remove them first), `allowerasing` (let dnf replace or erase them).
    #[serde(default)]
    pub conflicts: ConflictPolicy,
    /// How `containerd.io` escapes modular filtering by `container-tools` on OL8: `hotfixes`
    /// (`module_hotfixes=true` on the docker repo, the default) or `disable-module`
    /// (`dnf module disable container-tools`).
    #[serde(default)]
    pub module_filtering: ModuleFiltering,
    /// What gpuhost puts into `/etc/docker/daemon.json`.
    #[serde(default)]
    pub daemon: DaemonSpec,
}

impl Default for DockerSpec {
    fn default() -> Self {
        DockerSpec {
            repo: default_docker_repo(),
            gpgkey: default_docker_gpgkey(),
            version: None,
            containerd_version: None,
            conflicts: ConflictPolicy::default(),
            module_filtering: ModuleFiltering::default(),
            daemon: DaemonSpec::default(),
        }
    }
}

fn default_docker_repo() -> String {
    "https://download.docker.com/linux/rhel/$releasever/$basearch/stable".to_string()
}

fn default_docker_gpgkey() -> String {
    "https://download.docker.com/linux/rhel/gpg".to_string()
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ConflictPolicy {
    #[default]
    Fail,
    Remove,
    Allowerasing,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ModuleFiltering {
    #[default]
    Hotfixes,
    DisableModule,
}

/// `[docker.daemon]`: the keys gpuhost manages in `/etc/docker/daemon.json`. The `nvidia`
/// runtime is always added; every key not named here is left as the user has it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DaemonSpec {
    /// `"default-runtime": "nvidia"` (like `nvidia-ctk runtime configure --set-as-default`).
    /// `false` leaves `default-runtime` as it is.
    #[serde(default)]
    pub default_runtime_nvidia: bool,
    /// `default-shm-size` for containers, e.g. `"1G"` (NCCL needs more than the 64M default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_shm_size: Option<String>,
    /// `default-ulimits.memlock` (soft = hard); `-1` is unlimited, as NVIDIA recommends for NCCL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ulimit_memlock: Option<i64>,
    /// `default-ulimits.stack` in bytes (soft = hard); NVIDIA recommends 67108864.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ulimit_stack: Option<i64>,
}

/// `[container_toolkit]` in a profile.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolkitSpec {
    /// Where the toolkit comes from: a URL or an absolute local directory; written to
    /// `/etc/yum.repos.d/nvidia-container-toolkit.repo`.
    #[serde(default = "default_toolkit_repo")]
    pub repo: String,
    /// GPG key of the repo; `""` turns gpgcheck off.
    #[serde(default = "default_toolkit_gpgkey")]
    pub gpgkey: String,
    /// The one version of all four toolkit packages (e.g. `1.17.8`); unset or `""`: the newest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Generate the CDI spec (`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`) when it
    /// is missing; live only.
    #[serde(default)]
    pub cdi: bool,
    /// The security floor: an older toolkit, pinned or installed, is refused naming the CVEs
    /// it still has. Known-bad versions (the deny list) are refused whatever the floor.
    #[serde(default = "default_toolkit_floor")]
    pub min_version: String,
}

fn default_toolkit_floor() -> String {
    TOOLKIT_FLOOR.to_string()
}

impl Default for ToolkitSpec {
    fn default() -> Self {
        ToolkitSpec {
            repo: default_toolkit_repo(),
            gpgkey: default_toolkit_gpgkey(),
            version: None,
            cdi: false,
            min_version: default_toolkit_floor(),
        }
    }
}

fn default_toolkit_repo() -> String {
    "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch".to_string()
}

fn default_toolkit_gpgkey() -> String {
    "https://nvidia.github.io/libnvidia-container/gpgkey".to_string()
}

pub use gpuhost_nvidia::compat::PrefixLink;

/// `[container_smoke]` in a profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SmokeSpec {
    /// The image to run `nvidia-smi -L` in, e.g. `nvcr.io/nvidia/cuda:12.2.2-base-ubi8`; unset:
    /// no smoke test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A `docker save` tarball to `docker load` first when the image is not present
    /// (air-gapped sites).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tarball: Option<PathBuf>,
}

/// Checks beyond types for the container sections; `profile` names the profile in messages.
pub(crate) fn validate(
    profile: &str,
    docker: &DockerSpec,
    toolkit: &ToolkitSpec,
    links: &[PrefixLink],
    smoke: &SmokeSpec,
) -> Result<()> {
    validate_packages(profile, docker, toolkit)?;
    validate_daemon(profile, docker)?;
    validate_links(profile, links)?;
    validate_smoke(profile, smoke)
}

/// Where Docker and the toolkit come from, their keys and versions, and the toolkit's floor.
fn validate_packages(profile: &str, docker: &DockerSpec, toolkit: &ToolkitSpec) -> Result<()> {
    check_source(profile, "docker.repo", &docker.repo)?;
    check_source(profile, "container_toolkit.repo", &toolkit.repo)?;
    for (key, k) in [
        ("docker.gpgkey", &docker.gpgkey),
        ("container_toolkit.gpgkey", &toolkit.gpgkey),
    ] {
        if !k.is_empty() && (!k.contains("://") || k.chars().any(char::is_whitespace)) {
            return Err(invalid!(
                "profile {profile}: key `{key}`: \"{k}\" is not a key URL (https://…, file://…); \"\" turns gpgcheck off"
            ));
        }
    }
    for (key, v) in [
        ("docker.version", &docker.version),
        ("docker.containerd_version", &docker.containerd_version),
        ("container_toolkit.version", &toolkit.version),
    ] {
        if let Some(v) = v {
            if !v.is_empty() && !is_version(v) {
                return Err(invalid!(
                    "profile {profile}: key `{key}`: \"{v}\" is not a package version (e.g. 27.3.1)"
                ));
            }
        }
    }
    if !is_version(&toolkit.min_version) {
        return Err(invalid!(
            "profile {profile}: key `container_toolkit.min_version`: \"{}\" is not a package version (e.g. {TOOLKIT_FLOOR})",
            toolkit.min_version
        ));
    }
    if let Some(v) = toolkit.version.as_deref().filter(|v| !v.is_empty()) {
        if let Some(why) = toolkit_refused(v, &toolkit.min_version) {
            return Err(invalid!(
                "profile {profile}: key `container_toolkit.version`: {v} is refused: {why}; pin another version (e.g. {TOOLKIT_FLOOR})"
            ));
        }
    }
    Ok(())
}

/// `docker.daemon`: the shared memory size and the ulimits.
fn validate_daemon(profile: &str, docker: &DockerSpec) -> Result<()> {
    if let Some(s) = &docker.daemon.default_shm_size {
        if !is_size(s) {
            return Err(invalid!(
                "profile {profile}: key `docker.daemon.default_shm_size`: \"{s}\" is not a size like 64M or 1G"
            ));
        }
    }
    for (key, v) in [
        ("docker.daemon.ulimit_memlock", docker.daemon.ulimit_memlock),
        ("docker.daemon.ulimit_stack", docker.daemon.ulimit_stack),
    ] {
        if v.is_some_and(|v| v < -1) {
            return Err(invalid!(
                "profile {profile}: key `{key}`: must be -1 (unlimited) or a number of bytes"
            ));
        }
    }
    Ok(())
}

/// `prefix_links`: each a directory outside /usr with packages named.
fn validate_links(profile: &str, links: &[PrefixLink]) -> Result<()> {
    for (i, l) in links.iter().enumerate() {
        let key = format!("prefix_links[{i}]");
        let p = &l.prefix;
        let bad_prefix = !p.is_absolute()
            || p.components().count() < 2
            || p.starts_with("/usr")
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir));
        if bad_prefix {
            return Err(invalid!(
                "profile {profile}: key `{key}.prefix`: \"{}\" must be an absolute directory outside /usr, e.g. /opt/nvidia/nccl",
                p.display()
            ));
        }
        if l.packages.is_empty() {
            return Err(invalid!(
                "profile {profile}: key `{key}.packages` is empty; name the packages whose files go under {}",
                p.display()
            ));
        }
        for pkg in &l.packages {
            if pkg.trim().is_empty() || pkg.chars().any(char::is_whitespace) {
                return Err(invalid!(
                    "profile {profile}: key `{key}.packages`: \"{pkg}\" is not a package name"
                ));
            }
        }
    }
    Ok(())
}

/// `container_smoke`: an image reference, and a tarball only with its image.
fn validate_smoke(profile: &str, smoke: &SmokeSpec) -> Result<()> {
    if let Some(img) = &smoke.image {
        if img.trim().is_empty() || img.chars().any(char::is_whitespace) || img.starts_with('-') {
            return Err(invalid!(
                "profile {profile}: key `container_smoke.image`: \"{img}\" is not an image reference"
            ));
        }
    }
    if smoke.image_tarball.is_some() && smoke.image.is_none() {
        return Err(invalid!(
            "profile {profile}: key `container_smoke.image_tarball` needs `container_smoke.image` (the image the tarball holds)"
        ));
    }
    Ok(())
}

/// Why a toolkit version is refused, if it is.
/// Why a toolkit version is refused under the floor `min_version`, if it is: a known-bad
/// version (the deny list), or one below the floor, naming the CVEs it still has.
pub fn toolkit_refused(version: &str, min_version: &str) -> Option<String> {
    if let Some(why) = toolkit_denied(version) {
        return Some(why.to_string());
    }
    let v = version.split('-').next().unwrap_or(version);
    if gpuhost_host::rpm::vercmp(v, min_version) != std::cmp::Ordering::Less {
        return None;
    }
    let open: Vec<String> = TOOLKIT_CVES
        .iter()
        .filter(|(fixed, _, _)| gpuhost_host::rpm::vercmp(v, fixed) == std::cmp::Ordering::Less)
        .map(|(fixed, cve, what)| format!("{cve} ({what}, fixed in {fixed})"))
        .collect();
    Some(if open.is_empty() {
        format!("it is below the floor container_toolkit.min_version = {min_version}")
    } else {
        format!(
            "it is below the security floor {min_version} and has {}",
            open.join(", ")
        )
    })
}

/// Why a toolkit version is on the deny list, if it is.
pub fn toolkit_denied(version: &str) -> Option<&'static str> {
    TOOLKIT_DENY
        .iter()
        .find(|(v, _)| version == *v || version.strip_prefix(v).is_some_and(|r| r.starts_with('-')))
        .map(|(_, why)| *why)
}

fn check_source(profile: &str, key: &str, src: &str) -> Result<()> {
    let ok = match RepoSource::parse(src) {
        Some(RepoSource::Dir(d)) => {
            d.components()
                .all(|c| !matches!(c, std::path::Component::ParentDir))
                && !src.chars().any(char::is_whitespace)
        }
        Some(RepoSource::Url(u)) => !u.chars().any(char::is_whitespace),
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(invalid!(
            "profile {profile}: key `{key}`: \"{src}\" is neither a URL (https://…, file://…) nor an absolute directory"
        ))
    }
}

fn is_version(v: &str) -> bool {
    !v.is_empty()
        && v.starts_with(|c: char| c.is_ascii_digit())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_~+^".contains(c))
}

fn is_size(s: &str) -> bool {
    let digits = s.trim_end_matches(|c: char| "bkmgBKMG".contains(c));
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) && s.len() - digits.len() <= 1
}

/// Where a repo comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepoSource<'a> {
    Url(&'a str),
    Dir(&'a Path),
}

impl<'a> RepoSource<'a> {
    pub fn parse(s: &'a str) -> Option<RepoSource<'a>> {
        if s.starts_with('/') {
            Some(RepoSource::Dir(Path::new(s)))
        } else if s.contains("://") {
            Some(RepoSource::Url(s))
        } else {
            None
        }
    }

    pub fn baseurl(&self) -> String {
        match self {
            RepoSource::Url(u) => (*u).to_string(),
            RepoSource::Dir(d) => format!("file://{}", d.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(
        "https://download.docker.com/linux/rhel/$releasever/$basearch/stable",
        true
    )]
    #[case("/srv/mirror/docker-ce", true)]
    #[case("file:///srv/mirror", true)]
    #[case("srv/mirror", false)]
    #[case("/srv/../etc", false)]
    fn repo_sources(#[case] src: &str, #[case] ok: bool) {
        assert_eq!(check_source("p", "docker.repo", src).is_ok(), ok, "{src}");
    }

    #[rstest]
    #[case("1.17.7", true)]
    #[case("1.17.7-1", true)]
    #[case("1.17.8", false)]
    #[case("1.17.70", false)]
    fn the_deny_list(#[case] v: &str, #[case] denied: bool) {
        assert_eq!(toolkit_denied(v).is_some(), denied, "{v}");
    }

    #[rstest]
    #[case("1.17.8", TOOLKIT_FLOOR, None)]
    #[case("1.18.0", TOOLKIT_FLOOR, None)]
    #[case("1.17.7", TOOLKIT_FLOOR, Some("enroot"))]
    #[case("1.17.7", "1.16.2", Some("enroot"))]
    #[case("1.17.0", "1.16.2", Some("--gpus all"))]
    #[case("1.17.5", TOOLKIT_FLOOR, Some("CVE-2025-23266"))]
    #[case("1.17.3-1", TOOLKIT_FLOOR, Some("CVE-2025-23359"))]
    #[case("1.16.1", TOOLKIT_FLOOR, Some("CVE-2024-0132"))]
    #[case("1.17.5", "1.17.4", None)]
    #[case("1.17.5", "1.17.6", Some("CVE-2025-23266"))]
    #[case(
        "1.17.9",
        "1.18.0",
        Some("below the floor container_toolkit.min_version = 1.18.0")
    )]
    fn the_toolkit_floor_names_the_cve_or_the_breakage(
        #[case] v: &str,
        #[case] floor: &str,
        #[case] why: Option<&str>,
    ) {
        let got = toolkit_refused(v, floor);
        match why {
            None => assert_eq!(got, None, "{v}"),
            Some(w) => assert!(
                got.as_deref().is_some_and(|g| g.contains(w)),
                "{v}: {got:?}"
            ),
        }
    }

    #[rstest]
    #[case("1G", true)]
    #[case("512m", true)]
    #[case("67108864", true)]
    #[case("1GB", false)]
    #[case("big", false)]
    fn sizes(#[case] s: &str, #[case] ok: bool) {
        assert_eq!(is_size(s), ok, "{s}");
    }
}
