//! The Oracle Linux releases gpuhost provisions: one table ([`RELEASES`]) that the facts, the
//! profiles, the install-root checks, the driver steps and the support matrix
//! (`docs/support-matrix.md`) all read. A release not in it is refused at the door (exit 2); a
//! new minor release of a major in it is accepted (the major decides).

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
}

impl Release {
    /// True when NVIDIA's packages for it are modular.
    pub fn modular(&self) -> bool {
        self.packaging == DriverPackaging::Modular
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
    },
];

/// The release of a major version, if gpuhost provisions it.
pub fn release(major: u32) -> Option<&'static Release> {
    RELEASES.iter().find(|r| r.major == major)
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
    }
}
