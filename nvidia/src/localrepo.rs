//! NVIDIA's local repo packages: what their file names and package names say.
//!
//! NVIDIA ships the driver for air-gapped installs as RPMs that carry a whole dnf repository:
//! - the CUDA local repo, `cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm`
//!   (package `cuda-repo-rhel8-12-2-local`, version `<cuda>_<driver>`): it installs
//!   `/var/cuda-repo-rhel8-12-2-local/` and `/etc/yum.repos.d/cuda-rhel8-12-2-local.repo`
//!   (CUDA Installation Guide, RHEL);
//! - the driver-only local repo, `nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm`
//!   (package `nvidia-driver-local-repo-rhel9-570.124.06`, version `1.0`, release `1`): it
//!   installs `/var/nvidia-driver-local-repo-rhel9-570.124.06/` and the repo
//!   `nvidia-driver-local-rhel9-570.124.06` (NVIDIA Driver Installation Guide, "Local Repository
//!   Installation"; the names as users report them from `rpm -ivh` and `dnf repolist`). NVIDIA's
//!   download page also hands it out as `nvidia-driver-local-repo-rhel10-580.126.09.x86_64.rpm`,
//!   without the version-release; both file names are accepted.
//!
//! Both are pure parsers: no file is read.

use serde::Serialize;

/// Which of NVIDIA's two local repo packages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepoKind {
    /// `cuda-repo-rhel<N>-<M>-<m>-local`: the CUDA toolkit and the driver.
    Cuda,
    /// `nvidia-driver-local-repo-rhel<N>-<driver>`: the driver alone.
    DriverOnly,
}

/// What a local repo package's file name says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LocalRepoFile {
    pub kind: RepoKind,
    /// The rpm package name: `cuda-repo-rhel8-12-2-local`, `nvidia-driver-local-repo-rhel9-570.124.06`.
    pub package: String,
    /// The rpm version, when the file name carries it: `12.2.2_535.104.05`, `1.0`.
    pub version: Option<String>,
    pub release: Option<String>,
    pub arch: String,
    /// The driver version: `535.104.05`.
    pub driver: String,
    /// The CUDA version of a CUDA local repo: `12.2.2`.
    pub cuda: Option<String>,
    /// RHEL major release it is built for: 8 for `rhel8`.
    pub os_major: u32,
}

/// `535.104.05`: at least two dot-separated groups of digits.
fn is_dotted(s: &str) -> bool {
    s.split('.').count() >= 2
        && s.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// `rhel8…` → (8, rest after the digits).
fn rhel_major(s: &str) -> Option<(u32, &str)> {
    let rest = s.strip_prefix("rhel")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().ok()?;
    Some((major, &rest[digits.len()..]))
}

/// The example file names error messages show.
pub const EXPECTED_NAMES: &str = "cuda-repo-rhel<N>-<M>-<m>-local-<cuda>_<driver>-<rel>.<arch>.rpm or nvidia-driver-local-repo-rhel<N>-<driver>[-<ver>-<rel>].<arch>.rpm";

impl LocalRepoFile {
    /// What the file name of `driver.local_repo_rpm` says; a name NVIDIA does not give its local
    /// repo packages is invalid input (the driver version would be unknown).
    pub fn of_path(path: &std::path::Path) -> anyhow::Result<LocalRepoFile> {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        LocalRepoFile::parse(&file).ok_or_else(|| {
            gpuhost_host::invalid!(
                "driver.local_repo_rpm {}: `{file}` is not a name NVIDIA gives its local repo packages ({EXPECTED_NAMES}), so the driver version is unknown; use the file under the name NVIDIA gave it",
                path.display()
            )
        })
    }

    /// Parse a file name; `None` when it is not one of NVIDIA's local repo packages.
    pub fn parse(file_name: &str) -> Option<LocalRepoFile> {
        let stem = file_name.strip_suffix(".rpm")?;
        let (nvr, arch) = stem.rsplit_once('.')?;
        if arch.is_empty() || !arch.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        if let Some(rest) = nvr.strip_prefix("nvidia-driver-local-repo-") {
            let (os_major, after) = rhel_major(rest)?;
            let after = after.strip_prefix('-')?;
            // `<driver>` or `<driver>-<ver>-<rel>`
            let mut parts = after.splitn(3, '-');
            let driver = parts.next()?;
            if !is_dotted(driver) {
                return None;
            }
            let (version, release) = match (parts.next(), parts.next()) {
                (None, None) => (None, None),
                (Some(v), Some(r)) if !v.is_empty() && !r.is_empty() && !r.contains('-') => {
                    (Some(v.to_string()), Some(r.to_string()))
                }
                _ => return None,
            };
            return Some(LocalRepoFile {
                kind: RepoKind::DriverOnly,
                package: format!("nvidia-driver-local-repo-rhel{os_major}-{driver}"),
                version,
                release,
                arch: arch.to_string(),
                driver: driver.to_string(),
                cuda: None,
                os_major,
            });
        }
        let (nv, release) = nvr.rsplit_once('-')?;
        let (package, version) = nv.rsplit_once('-')?;
        let (cuda, driver) = version.split_once('_')?;
        let (os_major, after) = rhel_major(package.strip_prefix("cuda-repo-")?)?;
        if !package.ends_with("-local")
            || !after.starts_with('-')
            || !is_dotted(driver)
            || !is_dotted(cuda)
            || release.is_empty()
        {
            return None;
        }
        Some(LocalRepoFile {
            kind: RepoKind::Cuda,
            package: package.to_string(),
            version: Some(version.to_string()),
            release: Some(release.to_string()),
            arch: arch.to_string(),
            driver: driver.to_string(),
            cuda: Some(cuda.to_string()),
            os_major,
        })
    }

    /// The driver branch: 535 for 535.104.05.
    pub fn branch(&self) -> u32 {
        branch_of(&self.driver)
    }

    /// The repo directory the package installs: `/var/<package>`.
    pub fn repo_dir(&self) -> String {
        format!("/var/{}", self.package)
    }

    /// The dnf repo id (and `/etc/yum.repos.d/<id>.repo`) the package installs:
    /// `cuda-rhel8-12-2-local`, `nvidia-driver-local-rhel9-570.124.06`.
    pub fn repo_id(&self) -> String {
        match self.kind {
            RepoKind::Cuda => self.package.replacen("cuda-repo-", "cuda-", 1),
            RepoKind::DriverOnly => self.package.replacen("-local-repo-", "-local-", 1),
        }
    }
}

/// The branch of a driver version: 535 for 535.104.05 (0 when unreadable).
pub fn branch_of(driver: &str) -> u32 {
    driver
        .split('.')
        .next()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0)
}

/// An installed (rpm) local repo package of either kind, by name and version: the driver it
/// carries. `cuda-repo-rhel8-12-4-local` `12.4.1_550.54.15` → 550.54.15;
/// `nvidia-driver-local-repo-rhel9-570.124.06` `1.0` → 570.124.06. `None` for other packages.
pub fn installed_driver(name: &str, version: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix("nvidia-driver-local-repo-") {
        let (_, after) = rhel_major(rest)?;
        let driver = after.strip_prefix('-')?;
        return is_dotted(driver).then(|| driver.to_string());
    }
    let (_, after) = rhel_major(name.strip_prefix("cuda-repo-")?)?;
    if !name.ends_with("-local") || !after.starts_with('-') {
        return None;
    }
    let (_, driver) = version.split_once('_')?;
    is_dotted(driver).then(|| driver.to_string())
}

/// The package names of local repos present on a host, from the names of its repo files
/// (`/etc/yum.repos.d/*.repo`) and of the directories under `/var`, whether rpm knows them or not.
pub fn present_packages<'a>(
    repo_files: impl IntoIterator<Item = &'a str>,
    var_dirs: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in repo_files {
        let Some(id) = f.strip_suffix(".repo") else {
            continue;
        };
        if let Some(rest) = id.strip_prefix("cuda-") {
            if rest.starts_with("rhel") && rest.ends_with("-local") {
                out.push(format!("cuda-repo-{rest}"));
            }
        } else if let Some(rest) = id.strip_prefix("nvidia-driver-local-") {
            if rest.starts_with("rhel") {
                out.push(format!("nvidia-driver-local-repo-{rest}"));
            }
        }
    }
    for d in var_dirs {
        let cuda = d.starts_with("cuda-repo-rhel") && d.ends_with("-local");
        let driver = d.starts_with("nvidia-driver-local-repo-rhel");
        if cuda || driver {
            out.push(d.to_string());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// True for a package a driver change may move without asking: the driver family
/// ([`in_driver_family`]) and NVIDIA's local repo packages (`cuda-repo-…`,
/// `nvidia-driver-local-repo-…`).
pub fn in_driver_set(name: &str) -> bool {
    in_driver_family(name) || name.starts_with("cuda-repo-")
}

/// The CUDA toolkit's package names, as NVIDIA's CUDA repos name them (`cuda-toolkit-12-8`,
/// `cuda-nvcc-12-8`, `libcublas-12-8`, `libnpp-12-8`, `nsight-compute-2025.1.1`,
/// `gds-tools-12-8`): what a CUDA local repo package carries beside the driver, most of its GBs.
const TOOLKIT_PREFIXES: &[&str] = &[
    "cuda-",
    "libcublas",
    "libcudnn",
    "libcufft",
    "libcufile",
    "libcurand",
    "libcusolver",
    "libcusparse",
    "libnpp",
    "libnvfatbin",
    "libnvjitlink",
    "libnvjpeg",
    "libnvvm",
    "nsight-",
    "gds-tools",
];

/// True for a package of the CUDA toolkit (see [`TOOLKIT_PREFIXES`]), never one of the driver
/// set (`cuda-drivers`, `cuda-repo-…` are the driver's). A container host installs none: CUDA
/// runs in its containers.
pub fn is_toolkit(name: &str) -> bool {
    !in_driver_set(name) && TOOLKIT_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// True for a package of NVIDIA's driver family: what a driver change installs, replaces or
/// removes (`nvidia-*`, `libnvidia-*`, `kmod-nvidia*`, `cuda-drivers*`), as opposed to a site's
/// or the distribution's packages.
pub fn in_driver_family(name: &str) -> bool {
    name.starts_with("nvidia-")
        || name.starts_with("libnvidia-")
        || name.starts_with("kmod-nvidia")
        || name.starts_with("cuda-drivers")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("cuda-toolkit-12-8", true)]
    #[case("cuda-nvcc-13-0", true)]
    #[case("libcublas-12-8", true)]
    #[case("nsight-compute-2025.1.1", true)]
    #[case("cuda-drivers", false)]
    #[case("cuda-drivers-fabricmanager-580", false)]
    #[case("cuda-repo-rhel9-13-0-local", false)]
    #[case("nvidia-driver", false)]
    #[case("libnvidia-nscq", false)]
    #[case("nvlsm", false)]
    #[case("dkms", false)]
    fn the_toolkit_is_told_from_the_driver_set(#[case] name: &str, #[case] toolkit: bool) {
        assert_eq!(is_toolkit(name), toolkit);
    }

    #[rstest]
    #[case(
        "cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm",
        RepoKind::Cuda,
        "cuda-repo-rhel8-12-2-local",
        "535.104.05",
        8,
        "cuda-rhel8-12-2-local"
    )]
    #[case(
        "cuda-repo-rhel9-13-0-local-13.0.1_580.82.07-1.x86_64.rpm",
        RepoKind::Cuda,
        "cuda-repo-rhel9-13-0-local",
        "580.82.07",
        9,
        "cuda-rhel9-13-0-local"
    )]
    #[case(
        "cuda-repo-rhel9-12-4-local-12.4.1_550.54.15-1.aarch64.rpm",
        RepoKind::Cuda,
        "cuda-repo-rhel9-12-4-local",
        "550.54.15",
        9,
        "cuda-rhel9-12-4-local"
    )]
    #[case(
        "nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm",
        RepoKind::DriverOnly,
        "nvidia-driver-local-repo-rhel9-570.124.06",
        "570.124.06",
        9,
        "nvidia-driver-local-rhel9-570.124.06"
    )]
    #[case(
        "nvidia-driver-local-repo-rhel8-470.182.03-1.0-1.x86_64.rpm",
        RepoKind::DriverOnly,
        "nvidia-driver-local-repo-rhel8-470.182.03",
        "470.182.03",
        8,
        "nvidia-driver-local-rhel8-470.182.03"
    )]
    #[case(
        "nvidia-driver-local-repo-rhel10-580.126.09.x86_64.rpm",
        RepoKind::DriverOnly,
        "nvidia-driver-local-repo-rhel10-580.126.09",
        "580.126.09",
        10,
        "nvidia-driver-local-rhel10-580.126.09"
    )]
    fn local_repo_file_names(
        #[case] file: &str,
        #[case] kind: RepoKind,
        #[case] package: &str,
        #[case] driver: &str,
        #[case] major: u32,
        #[case] repo_id: &str,
    ) -> anyhow::Result<()> {
        let n = LocalRepoFile::parse(file).ok_or_else(|| anyhow::anyhow!("{file} not parsed"))?;
        assert_eq!(n.kind, kind);
        assert_eq!(n.package, package);
        assert_eq!(n.driver, driver);
        assert_eq!(n.os_major, major);
        assert_eq!(n.repo_id(), repo_id);
        assert_eq!(n.repo_dir(), format!("/var/{package}"));
        assert_eq!(n.branch(), branch_of(driver));
        Ok(())
    }

    #[test]
    fn versions_and_cuda() -> anyhow::Result<()> {
        let c = LocalRepoFile::parse("cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm")
            .ok_or_else(|| anyhow::anyhow!("cuda"))?;
        assert_eq!(c.version.as_deref(), Some("12.2.2_535.104.05"));
        assert_eq!(c.cuda.as_deref(), Some("12.2.2"));
        let d = LocalRepoFile::parse("nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm")
            .ok_or_else(|| anyhow::anyhow!("driver"))?;
        assert_eq!(
            (d.version.as_deref(), d.release.as_deref()),
            (Some("1.0"), Some("1"))
        );
        assert_eq!(d.cuda, None);
        Ok(())
    }

    #[rstest]
    #[case("cuda-repo-rhel8-12-2-local-12.2.2-1.x86_64.rpm")]
    #[case("nvidia-driver-535.104.05-1.x86_64.rpm")]
    #[case("cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64")]
    #[case("cuda-repo-rhel8-12-2-network-12.2.2_535.104.05-1.x86_64.rpm")]
    #[case("cuda-repo-rhel8-12-2-local-12.2.2_latest-1.x86_64.rpm")]
    #[case("nvidia-driver-local-repo-rhel9-latest-1.0-1.x86_64.rpm")]
    #[case("nvidia-driver-local-repo-ubuntu2404-570.124.06_1.0-1_amd64.deb")]
    #[case("nvidia-driver-local-repo-rhel9-570.124.06-1.0.x86_64.rpm")]
    #[case("download.rpm")]
    fn other_file_names_are_not_local_repos(#[case] file: &str) {
        assert_eq!(LocalRepoFile::parse(file), None);
    }

    #[rstest]
    #[case("cuda-repo-rhel8-12-4-local", "12.4.1_550.54.15", Some("550.54.15"))]
    #[case("nvidia-driver-local-repo-rhel9-570.124.06", "1.0", Some("570.124.06"))]
    #[case("cuda-repo-rhel8-12-4-local", "12.4.1", None)]
    #[case("cuda-toolkit-12-4", "12.4.1_550.54.15", None)]
    #[case("nvidia-driver", "3:535.104.05", None)]
    fn installed_local_repos(
        #[case] name: &str,
        #[case] version: &str,
        #[case] driver: Option<&str>,
    ) {
        assert_eq!(installed_driver(name, version).as_deref(), driver);
    }

    #[test]
    fn present_local_repos_from_repo_files_and_directories() {
        let got = present_packages(
            [
                "cuda-rhel8-12-2-local.repo",
                "nvidia-driver-local-rhel8-550.54.15.repo",
                "cuda-rhel8.repo",
                "docker-ce.repo",
            ],
            [
                "cuda-repo-rhel8-12-2-local",
                "nvidia-driver-local-repo-rhel8-550.54.15",
                "lib",
                "log",
            ],
        );
        assert_eq!(
            got,
            vec![
                "cuda-repo-rhel8-12-2-local",
                "nvidia-driver-local-repo-rhel8-550.54.15"
            ]
        );
    }
}
