//! Host facts through sysinfo — memory, CPUs, uptime — and the free space of the paths an
//! install writes to; and the space check `apply` makes before it starts a driver or Docker
//! install.
//!
//! Free space is per filesystem: a path is matched to the mount it lives on (the longest
//! mount point that contains it, after resolving the path — inside an install root — as far
//! as it exists). sysinfo reads the mount table and `statvfs`es each mount; network
//! filesystems are left out (a hard NFS mount can hang `statvfs`), tmpfs mounts are kept.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::host::Host;

/// The paths whose free space gpuhost reports: the system, `/var`, Docker's data-root and
/// DKMS's build tree.
pub const ROOT: &str = "/";
pub(crate) const VAR: &str = "/var";
pub const DKMS: &str = "/var/lib/dkms";
pub(crate) const DOCKER_DEFAULT_DATA_ROOT: &str = "/var/lib/docker";

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// What sysinfo says about the machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    /// Logical CPUs.
    pub cpus: usize,
    /// `Intel(R) Xeon(R) Platinum 8480+`, as /proc/cpuinfo names it.
    pub cpu_model: Option<String>,
    pub uptime_s: u64,
    /// Free space of `/`, `/var`, Docker's data-root and `/var/lib/dkms`.
    pub space: Vec<PathSpace>,
    /// Why memory and CPUs could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a path whose free space gpuhost reads is for. Status judges the four it watches by
/// variant; an install's needs carry their own words. Written as the words (`docker
/// data-root`), the form the JSON has always had.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Role {
    /// `/`.
    #[default]
    System,
    /// `/var`.
    Var,
    /// Docker's data-root.
    DockerDataRoot,
    /// `/var/lib/dkms`, where DKMS builds.
    DkmsBuilds,
    /// What an install needs the space for (`the Docker CE packages`).
    Need(String),
}

impl Role {
    const WORDS: [(Role, &'static str); 4] = [
        (Role::System, "system"),
        (Role::Var, "var"),
        (Role::DockerDataRoot, "docker data-root"),
        (Role::DkmsBuilds, "dkms builds"),
    ];

    pub fn as_str(&self) -> &str {
        match self {
            Role::Need(what) => what,
            r => Self::WORDS
                .iter()
                .find(|(k, _)| k == r)
                .map_or("", |(_, w)| w),
        }
    }
}

impl From<String> for Role {
    fn from(s: String) -> Role {
        Self::WORDS
            .iter()
            .find(|(_, w)| *w == s)
            .map_or(Role::Need(s), |(r, _)| r.clone())
    }
}

impl From<Role> for String {
    fn from(r: Role) -> String {
        r.as_str().to_string()
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The free space of the filesystem a path lives on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathSpace {
    /// The path as asked (`/var/lib/docker`).
    pub path: String,
    /// What it is for (`docker data-root`).
    pub role: Role,
    /// The mount point it lives on; None when no mount was found.
    pub mount_point: Option<String>,
    pub available_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
}

/// The mounts sysinfo sees, longest mount point first.
pub struct Mounts(Vec<(PathBuf, u64, u64)>);

impl Mounts {
    pub fn read() -> Mounts {
        let disks = match sysinfo::Disks::new_with_refreshed_list() {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("cannot read the mounts: {e}");
                return Mounts(Vec::new());
            }
        };
        let mut v: Vec<(PathBuf, u64, u64)> = (&disks)
            .into_iter()
            .map(|d| {
                (
                    d.mount_point().to_path_buf(),
                    d.available_space(),
                    d.total_space(),
                )
            })
            .collect();
        v.sort_by_key(|(m, _, _)| std::cmp::Reverse(m.components().count()));
        Mounts(v)
    }

    /// The mount (point, available, total) that holds `p` (a path on the build host).
    pub fn of(&self, p: &Path) -> Option<&(PathBuf, u64, u64)> {
        self.0.iter().find(|(m, _, _)| p.starts_with(m))
    }

    /// The free space of `path` on `host` (inside its root).
    pub fn space(&self, host: &Host, path: &str, role: Role) -> PathSpace {
        // Resolved inside the root as far as it exists (a path that does not exist yet cannot
        // cross a mount point, so its prefix decides).
        let real = host.real_path(path).ok();
        let m = real.as_deref().and_then(|p| self.of(p));
        PathSpace {
            path: path.to_string(),
            role,
            mount_point: m.map(|(p, _, _)| p.display().to_string()),
            available_bytes: m.map(|(_, a, _)| *a),
            total_bytes: m.map(|(_, _, t)| *t),
        }
    }
}

/// Docker's data-root: `data-root` in /etc/docker/daemon.json, else /var/lib/docker.
pub(crate) fn docker_data_root(host: &Host) -> String {
    host.read_opt("/etc/docker/daemon.json")
        .ok()
        .flatten()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v.get("data-root")
                .and_then(|d| d.as_str())
                .map(String::from)
        })
        .filter(|d| d.starts_with('/'))
        .unwrap_or_else(|| DOCKER_DEFAULT_DATA_ROOT.to_string())
}

/// Memory, CPUs and uptime of the machine gpuhost runs on (in an install root: the build
/// host's), and the free space of the paths that matter, inside the root.
pub fn gather(host: &Host) -> HostInfo {
    use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};
    let sys = System::new_with_specifics(
        RefreshKind::nothing()
            .with_memory(MemoryRefreshKind::nothing().with_ram())
            .with_cpu(CpuRefreshKind::nothing()),
    );
    let (memory_total_bytes, memory_available_bytes, cpus, cpu_model, error) = match &sys {
        Ok(sys) => (
            sys.total_memory(),
            sys.available_memory(),
            sys.cpus().len(),
            sys.cpus()
                .first()
                .map(|c| c.brand().trim().to_string())
                .filter(|b| !b.is_empty()),
            None,
        ),
        Err(e) => (
            0,
            0,
            0,
            None,
            Some(format!("cannot read memory and CPUs: {e}")),
        ),
    };
    let mounts = Mounts::read();
    let docker = docker_data_root(host);
    HostInfo {
        memory_total_bytes,
        memory_available_bytes,
        cpus,
        cpu_model,
        error,
        uptime_s: System::uptime().unwrap_or(0),
        space: vec![
            mounts.space(host, ROOT, Role::System),
            mounts.space(host, VAR, Role::Var),
            mounts.space(host, &docker, Role::DockerDataRoot),
            mounts.space(host, DKMS, Role::DkmsBuilds),
        ],
    }
}

/// `1.5 GiB`, `320 MiB`, `1380 KiB` (under 10 MiB, where whole MiB would make 1.1 MiB free
/// and 1.4 MiB needed read alike).
pub fn human(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else if bytes >= 10 * MIB {
        format!("{} MiB", bytes.div_ceil(MIB))
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// Space an install needs on the filesystem of `path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub path: String,
    pub bytes: u64,
    /// What takes it: `the NVIDIA driver packages`.
    pub what: String,
}

/// What the NVIDIA driver install from a local repo package writes, and where (gpuhost's
/// rule, the figures stated in every refusal):
/// - the local repo package unpacks its RPMs under /var (`/var/cuda-repo-…`): its own size;
/// - the driver packages under /usr: 1.5 GiB (user-space libraries, CUDA driver libraries,
///   firmware, the kernel module sources);
/// - DKMS builds the modules under /var/lib/dkms for each served kernel: 1 GiB.
///
/// The last two are estimates for NVIDIA's real packages (`estimates`: the live system);
/// the first is measured.
pub fn driver_needs(repo_rpm_bytes: Option<u64>, estimates: bool) -> Vec<Need> {
    let mut v: Vec<Need> = repo_rpm_bytes.map(local_repo_need).into_iter().collect();
    if estimates {
        v.extend(driver_package_needs());
    }
    v
}

/// The local repo package's contents under /var: its own size (measured).
pub(crate) fn local_repo_need(repo_rpm_bytes: u64) -> Need {
    Need {
        path: VAR.into(),
        bytes: repo_rpm_bytes,
        what: "the NVIDIA local repo package's contents".into(),
    }
}

/// The driver packages under /usr and the DKMS builds (estimates for NVIDIA's real packages).
pub(crate) fn driver_package_needs() -> Vec<Need> {
    vec![
        Need {
            path: "/usr".into(),
            bytes: 3 * GIB / 2,
            what: "the NVIDIA driver packages".into(),
        },
        Need {
            path: DKMS.into(),
            bytes: GIB,
            what: "DKMS module builds".into(),
        },
    ]
}

/// What a Docker CE install writes: its packages under /usr (docker-ce, docker-ce-cli,
/// containerd.io, buildx and compose plugins: 512 MiB) and a first image under its data-root
/// (1 GiB: the container smoke test's CUDA base image).
pub fn docker_needs(host: &Host) -> Vec<Need> {
    vec![
        Need {
            path: "/usr".into(),
            bytes: 512 * MIB,
            what: "the Docker CE packages".into(),
        },
        Need {
            path: docker_data_root(host),
            bytes: GIB,
            what: "Docker's data-root (a first image)".into(),
        },
    ]
}

/// Refuse (exit 2, nothing changed) when a filesystem lacks the space the needs on it add up
/// to; the error states every figure.
pub fn require(host: &Host, mounts: &Mounts, needs: &[Need]) -> Result<()> {
    // Group the needs by the filesystem they fall on.
    let mut by_fs: Vec<(PathSpace, u64, Vec<&Need>)> = Vec::new();
    for n in needs {
        let s = mounts.space(host, &n.path, Role::Need(n.what.clone()));
        match by_fs
            .iter_mut()
            .find(|(fs, _, _)| fs.mount_point.is_some() && fs.mount_point == s.mount_point)
        {
            Some((_, total, list)) => {
                *total += n.bytes;
                list.push(n);
            }
            None => by_fs.push((s, n.bytes, vec![n])),
        }
    }
    let short: Vec<String> = by_fs
        .iter()
        .filter_map(|(fs, total, list)| {
            let avail = fs.available_bytes?;
            (avail < *total).then(|| {
                let parts: Vec<String> = list
                    .iter()
                    .map(|n| format!("{} {} in {}", human(n.bytes), n.what, n.path))
                    .collect();
                format!(
                    "{} (for {}) has {} free, needs {}: {}",
                    host.path(&list[0].path).display(),
                    fs.mount_point.as_deref().unwrap_or("?"),
                    human(avail),
                    human(*total),
                    parts.join(", ")
                )
            })
        })
        .collect();
    if short.is_empty() {
        return Ok(());
    }
    Err(crate::invalid!(
        "not enough free space to install: {}; free space or grow the filesystem, then run apply again",
        short.join("; ")
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_well() {
        assert_eq!(human(3 * GIB / 2), "1.5 GiB");
        assert_eq!(human(20 * MIB), "20 MiB");
        assert_eq!(human(1), "1 KiB");
        assert_eq!(human(1_400_000), "1368 KiB");
    }

    #[test]
    fn a_path_belongs_to_its_longest_mount() {
        let m = Mounts(vec![
            ("/var/lib/docker".into(), 5, 50),
            ("/var".into(), 2, 20),
            ("/".into(), 1, 10),
        ]);
        assert_eq!(m.of(Path::new("/var/lib/docker/overlay2")).unwrap().1, 5);
        assert_eq!(m.of(Path::new("/var/lib/dkms")).unwrap().1, 2);
        assert_eq!(m.of(Path::new("/variant")).unwrap().1, 1);
    }

    #[test]
    fn this_machine_has_memory_cpus_and_a_root_filesystem() {
        let host = Host::new(Path::new("/")).unwrap();
        let h = gather(&host);
        assert!(h.memory_total_bytes > 0 && h.memory_available_bytes <= h.memory_total_bytes);
        assert!(h.cpus >= 1);
        assert!(h.uptime_s > 0);
        let root = &h.space[0];
        assert_eq!(root.path, "/");
        assert!(root.available_bytes.unwrap() > 0, "{root:?}");
        assert_eq!(h.space.len(), 4);
    }

    /// Docker's data-root is daemon.json's `data-root` (an absolute path), else
    /// /var/lib/docker; the space check puts Docker's first image there.
    #[test]
    fn docker_needs_room_under_the_data_root_daemon_json_names() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path()).unwrap();
        assert_eq!(docker_data_root(&host), DOCKER_DEFAULT_DATA_ROOT);
        host.write_atomic(
            "/etc/docker/daemon.json",
            br#"{"data-root": "data"}"#,
            0o644,
        )
        .unwrap();
        assert_eq!(docker_data_root(&host), DOCKER_DEFAULT_DATA_ROOT);
        host.write_atomic(
            "/etc/docker/daemon.json",
            br#"{"data-root": "/data/docker"}"#,
            0o644,
        )
        .unwrap();
        assert_eq!(docker_data_root(&host), "/data/docker");
        std::fs::create_dir_all(dir.path().join("data/docker")).unwrap();
        let data = host.real_path("/data").unwrap();
        let m = Mounts(vec![
            (data, 512 * MIB, 100 * GIB),
            ("/".into(), 100 * GIB, 500 * GIB),
        ]);
        let e = require(&host, &m, &docker_needs(&host)).unwrap_err();
        assert!(crate::error::is_invalid(&e));
        let e = e.to_string();
        assert!(
            e.contains("has 512 MiB free, needs 1.0 GiB: 1.0 GiB Docker's data-root (a first image) in /data/docker"),
            "{e}"
        );
        assert!(!e.contains("Docker CE packages"), "{e}");
    }

    #[test]
    fn needs_on_one_filesystem_add_up() {
        let host = Host::new(Path::new("/")).unwrap();
        let m = Mounts(vec![("/".into(), 2 * GIB, 100 * GIB)]);
        // 1.5 GiB under /usr and 1 GiB under /var/lib/dkms: 2.5 GiB on the one filesystem.
        let e = require(&host, &m, &driver_needs(None, true)).unwrap_err();
        assert!(crate::error::is_invalid(&e));
        let e = e.to_string();
        assert!(e.contains("has 2.0 GiB free, needs 2.5 GiB"), "{e}");
        assert!(
            e.contains("1.5 GiB the NVIDIA driver packages in /usr"),
            "{e}"
        );
        let m = Mounts(vec![("/".into(), 3 * GIB, 100 * GIB)]);
        require(&host, &m, &driver_needs(None, true)).unwrap();
    }
}
