//! The machine architecture of the host gpuhost provisions: a fact of the host, never of the
//! build machine. On the live system it is the machine's own; in an install root it is read
//! from the root's rpm database (the architecture its packages are built for), so an aarch64
//! image (a Grace node's) can be built from an x86_64 machine, with `dnf --forcearch`.

use anyhow::Result;

use crate::host::Host;

/// What the host's architecture is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `x86_64`, `aarch64`.
    One(String),
    /// Packages of two machine architectures that cannot share a root (x86_64 and aarch64):
    /// the arches, and one package of each.
    Mixed(Vec<(String, String)>),
    /// An install root whose rpm database holds no architecture-specific package yet.
    Unknown,
}

/// The architecture of this machine (what gpuhost itself was built for).
pub fn machine() -> &'static str {
    std::env::consts::ARCH
}

/// The machine architecture a package arch belongs to (`i686` lives in x86_64 roots as
/// multilib; `noarch` in any).
fn family(arch: &str) -> Option<&'static str> {
    match arch {
        "x86_64" | "i686" | "i386" => Some("x86_64"),
        "aarch64" => Some("aarch64"),
        "ppc64le" => Some("ppc64le"),
        "s390x" => Some("s390x"),
        _ => None,
    }
}

/// From `rpm -qa --qf '%{NAME}\t%{ARCH}\n'` output.
pub fn of_rpm_list(text: &str) -> Arch {
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    for line in text.lines() {
        let Some((name, arch)) = line.split_once('\t') else {
            continue;
        };
        let Some(f) = family(arch.trim()) else {
            continue;
        };
        match counts.iter_mut().find(|(a, _)| *a == f) {
            Some((_, n)) => *n += 1,
            None => {
                counts.push((f, 1));
                seen.push((f.to_string(), format!("{name}.{}", arch.trim())));
            }
        }
    }
    match counts.as_slice() {
        [] => Arch::Unknown,
        [(one, _)] => Arch::One((*one).to_string()),
        _ => Arch::Mixed(seen),
    }
}

/// The host's architecture: the machine's on the live system, the rpm database's in a root.
pub fn of_host(host: &Host) -> Result<Arch> {
    if host.is_live() {
        return Ok(Arch::One(machine().to_string()));
    }
    let out = host
        .rpm()
        .args(["-qa", "--qf", "%{NAME}\\t%{ARCH}\\n"])
        .run()?;
    Ok(of_rpm_list(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multilib_is_x86_64_and_two_machines_are_mixed() {
        assert_eq!(
            of_rpm_list("glibc\tx86_64\nglibc\ti686\nbash\tx86_64\ntzdata\tnoarch\n"),
            Arch::One("x86_64".into())
        );
        assert_eq!(
            of_rpm_list("glibc\taarch64\ntzdata\tnoarch\n"),
            Arch::One("aarch64".into())
        );
        assert_eq!(of_rpm_list("tzdata\tnoarch\n"), Arch::Unknown);
        assert_eq!(
            of_rpm_list("glibc\taarch64\nbash\taarch64\nkernel-uek\tx86_64\n"),
            Arch::Mixed(vec![
                ("aarch64".into(), "glibc.aarch64".into()),
                ("x86_64".into(), "kernel-uek.x86_64".into())
            ])
        );
    }
}
