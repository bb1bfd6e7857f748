//! The Oracle Linux releases gpuhost provisions: one table ([`RELEASES`]) that the facts, the
//! profiles, the install-root checks, the driver steps and the support matrix
//! (`docs/support-matrix.md`) all read. A release not in it is refused at the door (exit 2); a
//! new minor release of a major in it is accepted (the major decides), and what one minor
//! release does differently is a [`MinorQuirk`] of its row.

use crate::osrelease::OsRelease;

/// How NVIDIA packages the driver for a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverPackaging {
    /// `nvidia-driver` module streams (`dnf module install nvidia-driver:<stream>`): EL8, EL9.
    Modular,
    /// Plain packages (`dnf install nvidia-open`), a branch held with the versionlock plugin
    /// (`dnf versionlock '*nvidia*<branch>*'`): EL10 (NVIDIA Driver Installation Guide, releases
    /// 615 and 620, "Red Hat Enterprise Linux 10" / "Oracle Linux 10").
    Plain,
}

/// One repo of Oracle's yum server, as Oracle's release packages (`oraclelinux-release-el9`,
/// `oracle-epel-release-el9`, …) define it. Its baseurl ends in `$basearch/`: one row serves
/// x86_64 and aarch64 (Oracle keys its repos by architecture in the URL, not in the id:
/// Oracle Linux "Managing Software", "Available Yum Repositories").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YumRepo {
    /// The repo id: `ol9_UEKR8`.
    pub id: &'static str,
    /// What it holds, for its `name=` (`Oracle Linux 9 UEK Release 8 ($basearch)`).
    pub name: &'static str,
    /// Its folder under `https://yum.oracle.com/repo/OracleLinux/`: `OL9/UEKR8`.
    pub path: &'static str,
}

impl YumRepo {
    /// `https://yum.oracle.com/repo/OracleLinux/OL9/UEKR8/$basearch/`.
    pub fn baseurl(&self) -> String {
        format!(
            "https://yum.oracle.com/repo/OracleLinux/{}/$basearch/",
            self.path
        )
    }
}

/// The repos of Oracle's yum server that hold what gpuhost installs on a release: what a clean
/// target of it enables (`gpuhost bundle --os`, without `--repos`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YumRepos {
    pub baseos: YumRepo,
    pub appstream: YumRepo,
    /// Its UEK repos, newest first: the kernels and their headers.
    pub ueks: &'static [YumRepo],
    /// The developer EPEL: DKMS.
    pub epel: YumRepo,
    /// The key the packages of all of them are signed with.
    pub gpgkey: &'static str,
}

impl YumRepos {
    /// BaseOS, AppStream, the UEK repos, EPEL.
    pub fn all(&self) -> Vec<&YumRepo> {
        [&self.baseos, &self.appstream]
            .into_iter()
            .chain(self.ueks)
            .chain([&self.epel])
            .collect()
    }
}

/// Something true of one minor release only (Oracle Linux 9.7, 10.1) that gpuhost must know,
/// found in that release's notes (Oracle's, Red Hat's or NVIDIA's) and cited.
///
/// To add one: put a `MinorQuirk { minor: 7, warning: "…", source: "…" }` in the `minors` of
/// its release's row (9.7: the row of 9, `minor: 7`). Its `warning` is then said by every
/// `apply` and `plan` on a host of that minor ([`minor_warnings`], read by apply's preparation,
/// finds it by the host's os-release `VERSION_ID`). A quirk that must change what gpuhost does gets a
/// field of its own here, read through [`quirks_of`] where the release's own field is read,
/// so that no step asks the minor itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinorQuirk {
    /// The minor release: 7 of 9.7.
    pub minor: u32,
    /// One line: what is different on that minor release and what to do.
    pub warning: &'static str,
    /// Where it is documented.
    pub source: &'static str,
}

/// One Oracle Linux major release, as gpuhost provisions it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    pub major: u32,
    /// `PLATFORM_ID` in its os-release (dnf's module platform).
    pub platform_id: &'static str,
    pub packaging: DriverPackaging,
    /// Where its rpm database lives (EL10 moved it; `/var/lib/rpm` is a link there).
    pub rpmdb: &'static str,
    /// The UEK releases it serves, newest first (what `uname -r` starts with).
    pub ueks: &'static [&'static str],
    /// Its Red Hat Compatible Kernel's version.
    pub rhck: &'static str,
    /// The major version of its system gcc (DKMS builds with it unless a kernel needs a newer
    /// one: then a gcc-toolset).
    pub system_gcc: u32,
    /// The compiler its newest UEK is built with: the system gcc, or a gcc-toolset (read from
    /// the kernel's own config at run time; this is what the docs show).
    pub uek_compiler: &'static str,
    /// The machine architectures Oracle ships it for.
    pub arches: &'static [&'static str],
    /// The architectures Oracle ships its RHCK for: Oracle Linux on aarch64 ships the UEK only
    /// (Oracle Linux 8, 9 and 10 release notes: "ships with the UEK kernel only").
    pub rhck_arches: &'static [&'static str],
    /// The driver branches the test world runs on it (x86_64; tests/docs.rs checks them
    /// against the world's local repo packages): the support matrix's "supported".
    pub tested_branches: &'static [u32],
    /// The driver branches the test world runs on its aarch64 (Grace) build, open kernel
    /// modules, UEK and UEK 64k (tests/docs.rs checks them against the world's aarch64 local
    /// repo packages).
    pub tested_aarch64: &'static [u32],
    /// Its AppStream carries `container-tools` as a module, whose modular filtering hides
    /// Docker's `containerd.io` (`docker.module_filtering = "disable-module"` disables it): EL8
    /// only. EL9 ships `container-tools` as a plain meta-package ("Considerations in adopting
    /// RHEL 9", Containers: "The container-tools meta-package is now available … The stable
    /// streams are not available on RHEL 9"); EL10 keeps the package.
    pub container_tools_module: bool,
    /// Oracle's yum server repos of what gpuhost installs (with their sources in the row).
    pub yum: YumRepos,
    /// What is different on one of its minor releases ([`MinorQuirk`], which says how one is
    /// added); none is known yet.
    pub minors: &'static [MinorQuirk],
}

impl Release {
    /// True when NVIDIA's packages for it are modular.
    pub fn modular(&self) -> bool {
        self.packaging == DriverPackaging::Modular
    }

    /// How the command line names it: `ol9` (`gpuhost bundle --os`; the built-in profiles'
    /// prefix).
    pub fn name(&self) -> String {
        format!("ol{}", self.major)
    }
}

/// Every release gpuhost provisions, oldest first.
pub const RELEASES: [Release; 3] = [
    Release {
        major: 8,
        system_gcc: 8,
        platform_id: "platform:el8",
        packaging: DriverPackaging::Modular,
        rpmdb: "/var/lib/rpm",
        ueks: &["5.15.0 (UEK7)", "5.4.17 (UEK6)"],
        rhck: "4.18.0",
        uek_compiler: "gcc-toolset-11",
        arches: &["x86_64", "aarch64"],
        rhck_arches: &["x86_64"],
        tested_branches: &[535, 550, 560, 570, 580],
        tested_aarch64: &[],
        container_tools_module: true,
        // yum.oracle.com/oracle-linux-8.html: BaseOS Latest, AppStream, UEK Release 7, and
        // EPEL for Development (`oracle-epel-release-el8`: ol8_developer_EPEL). UEK R6
        // (ol8_UEKR6) is older than the UEK a clean target serves, so it is not enabled.
        yum: YumRepos {
            baseos: YumRepo {
                id: "ol8_baseos_latest",
                name: "BaseOS Latest",
                path: "OL8/baseos/latest",
            },
            appstream: YumRepo {
                id: "ol8_appstream",
                name: "Application Stream",
                path: "OL8/appstream",
            },
            ueks: &[YumRepo {
                id: "ol8_UEKR7",
                name: "UEK Release 7",
                path: "OL8/UEKR7",
            }],
            epel: YumRepo {
                id: "ol8_developer_EPEL",
                name: "EPEL Packages for Development",
                path: "OL8/developer/EPEL",
            },
            gpgkey: "https://yum.oracle.com/RPM-GPG-KEY-oracle-ol8",
        },
        minors: &[],
    },
    Release {
        major: 9,
        system_gcc: 11,
        platform_id: "platform:el9",
        packaging: DriverPackaging::Modular,
        rpmdb: "/var/lib/rpm",
        ueks: &["6.12.0 (UEK8)", "5.15.0 (UEK7)"],
        rhck: "5.14.0",
        uek_compiler: "gcc-toolset-14 (UEK8), system gcc 11 (UEK7)",
        arches: &["x86_64", "aarch64"],
        rhck_arches: &["x86_64"],
        tested_branches: &[535, 550, 570, 580],
        tested_aarch64: &[580],
        container_tools_module: false,
        // yum.oracle.com/oracle-linux-9.html. UEK 8 is in ol9_UEKR8 from Oracle Linux 9.5 and
        // the default kernel from 9.6 (Oracle UEK 8 docs, "UEK 8 Installation and
        // Availability"); UEK 7 stays in ol9_UEKR7. EPEL for Development
        // (`oracle-epel-release-el9`): ol9_developer_EPEL at OL9/developer/EPEL.
        yum: YumRepos {
            baseos: YumRepo {
                id: "ol9_baseos_latest",
                name: "BaseOS Latest",
                path: "OL9/baseos/latest",
            },
            appstream: YumRepo {
                id: "ol9_appstream",
                name: "Application Stream",
                path: "OL9/appstream",
            },
            ueks: &[
                YumRepo {
                    id: "ol9_UEKR8",
                    name: "UEK Release 8",
                    path: "OL9/UEKR8",
                },
                YumRepo {
                    id: "ol9_UEKR7",
                    name: "UEK Release 7",
                    path: "OL9/UEKR7",
                },
            ],
            epel: YumRepo {
                id: "ol9_developer_EPEL",
                name: "EPEL Packages for Development",
                path: "OL9/developer/EPEL",
            },
            gpgkey: "https://yum.oracle.com/RPM-GPG-KEY-oracle-ol9",
        },
        minors: &[],
    },
    Release {
        major: 10,
        system_gcc: 14,
        platform_id: "platform:el10",
        packaging: DriverPackaging::Plain,
        rpmdb: "/usr/lib/sysimage/rpm",
        ueks: &["6.12.0 (UEK8)"],
        rhck: "6.12.0",
        uek_compiler: "system gcc 14",
        arches: &["x86_64", "aarch64"],
        rhck_arches: &["x86_64"],
        tested_branches: &[580, 590],
        tested_aarch64: &[580],
        container_tools_module: false,
        // yum.oracle.com/oracle-linux-10.html: BaseOS Latest, AppStream, UEK Release 8 ("UEK 8
        // is the default kernel on Oracle Linux 10"; UEKnext, ol10_developer_UEKnext, is a
        // developer preview and not enabled). EPEL follows the update level from Oracle Linux
        // 10 on ("Main ULN Channels": "the EPEL channel is synchronized with the update level
        // of the release", e.g. ol10_u0_x86_64_developer_EPEL): ol10_u<N>_developer_EPEL at
        // OL10/<N>/developer/EPEL, and a clean target takes update 1's. Known from Oracle's docs
        // and public repo files only, not read from the server; a newer update changes this row.
        yum: YumRepos {
            baseos: YumRepo {
                id: "ol10_baseos_latest",
                name: "BaseOS Latest",
                path: "OL10/baseos/latest",
            },
            appstream: YumRepo {
                id: "ol10_appstream",
                name: "Application Stream",
                path: "OL10/appstream",
            },
            ueks: &[YumRepo {
                id: "ol10_UEKR8",
                name: "UEK Release 8",
                path: "OL10/UEKR8",
            }],
            epel: YumRepo {
                id: "ol10_u1_developer_EPEL",
                name: "EPEL Packages for Development (update 1)",
                path: "OL10/1/developer/EPEL",
            },
            gpgkey: "https://yum.oracle.com/RPM-GPG-KEY-oracle-ol10",
        },
        minors: &[],
    },
];

/// The release of a major version, if gpuhost provisions it.
pub fn release(major: u32) -> Option<&'static Release> {
    RELEASES.iter().find(|r| r.major == major)
}

/// The release the command line names (`ol9`), if gpuhost provisions it.
pub fn by_name(name: &str) -> Option<&'static Release> {
    RELEASES.iter().find(|r| r.name() == name)
}

/// Every architecture some release is shipped for, in the table's order.
pub fn arches() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for a in RELEASES.iter().flat_map(|r| r.arches.iter().copied()) {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// The quirks of the minor release `version_id` (os-release's `VERSION_ID`, `9.7`): those its
/// release's row lists for that minor; none for a bare major (`9`) or a release not in the
/// table.
pub fn quirks_of(version_id: &str) -> Vec<&'static MinorQuirk> {
    let mut parts = version_id.trim().split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => release(major)
            .map(|r| quirks_in(r.minors, minor))
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// What a run says of the host's minor release: its quirks' warnings, with their sources.
pub fn minor_warnings(os: Option<&OsRelease>) -> Vec<String> {
    let Some(os) = os else {
        return Vec::new();
    };
    quirks_of(&os.version_id)
        .iter()
        .map(|q| format!("{}: {} ({})", os.pretty_name, q.warning, q.source))
        .collect()
}

/// The quirks of `minors` for `minor`.
fn quirks_in(minors: &'static [MinorQuirk], minor: u32) -> Vec<&'static MinorQuirk> {
    minors.iter().filter(|q| q.minor == minor).collect()
}

/// True when Oracle ships its RHCK for `arch` on release `major`.
pub fn has_rhck(major: u32, arch: &str) -> bool {
    release(major).is_some_and(|r| r.rhck_arches.contains(&arch))
}

/// "Oracle Linux 8, 9 and 10": for messages.
pub fn supported_text() -> String {
    let majors: Vec<String> = RELEASES.iter().map(|r| r.major.to_string()).collect();
    match majors.split_last() {
        Some((last, rest)) if !rest.is_empty() => {
            format!("Oracle Linux {} and {last}", rest.join(", "))
        }
        _ => format!("Oracle Linux {}", majors.join("")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn el10_alone_is_not_modular_and_a_minor_release_does_not_matter() {
        assert!(release(8).is_some_and(Release::modular));
        assert!(release(9).is_some_and(Release::modular));
        assert!(release(10).is_some_and(|r| !r.modular()));
        assert_eq!(release(11), None);
        assert_eq!(release(7), None);
        assert_eq!(supported_text(), "Oracle Linux 8, 9 and 10");
        assert_eq!(by_name("ol10").map(|r| r.major), Some(10));
        assert_eq!(by_name("ol7"), None);
        assert_eq!(arches(), ["x86_64", "aarch64"]);
    }

    /// A quirk of one minor release is found by the host's `VERSION_ID`, and by that minor
    /// only; none is known yet, so no host of the table's releases has one.
    #[test]
    fn a_minor_release_quirk_is_found_for_that_minor_only() {
        const MINORS: &[MinorQuirk] = &[MinorQuirk {
            minor: 7,
            warning: "a quirk of 9.7",
            source: "its release notes",
        }];
        assert_eq!(quirks_in(MINORS, 7), [&MINORS[0]]);
        assert!(quirks_in(MINORS, 6).is_empty());
        for v in ["9", "9.7", "10.1", "8.10", "", "x.y", "11.0"] {
            assert!(quirks_of(v).is_empty(), "{v}");
        }
        assert!(RELEASES.iter().all(|r| r.minors.is_empty()));
        let os = OsRelease::parse("ID=ol\nVERSION_ID=\"9.7\"\n");
        assert!(minor_warnings(Some(&os)).is_empty());
        assert!(minor_warnings(None).is_empty());
    }

    /// Each release's yum repos are its own (ids `ol<major>_…`, folders `OL<major>/…`), by
    /// architecture in the URL, and its UEK repos hold its newest UEK (`6.12.0 (UEK8)` in
    /// `ol9_UEKR8`).
    #[test]
    fn each_release_has_its_own_repos_and_uek_repos() {
        for r in &RELEASES {
            for repo in r.yum.all() {
                assert!(repo.id.starts_with(&format!("ol{}_", r.major)), "{repo:?}");
                assert!(
                    repo.path.starts_with(&format!("OL{}/", r.major)),
                    "{repo:?}"
                );
                assert!(repo.baseurl().ends_with("/$basearch/"), "{repo:?}");
            }
            assert!(r.yum.gpgkey.ends_with(&format!("-ol{}", r.major)));
            let newest = r.ueks[0]
                .split("(UEK")
                .nth(1)
                .and_then(|n| n.strip_suffix(')'))
                .unwrap_or_default();
            assert_eq!(
                r.yum.ueks.first().map(|u| u.id.to_string()),
                Some(format!("ol{}_UEKR{newest}", r.major)),
                "Oracle Linux {}",
                r.major
            );
        }
        let ueks = |major| -> Vec<&str> {
            release(major)
                .map(|r| r.yum.ueks.iter().map(|u| u.id).collect())
                .unwrap_or_default()
        };
        assert_eq!(ueks(8), ["ol8_UEKR7"]);
        assert_eq!(ueks(9), ["ol9_UEKR8", "ol9_UEKR7"]);
        assert_eq!(ueks(10), ["ol10_UEKR8"]);
    }
}
