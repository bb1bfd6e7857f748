//! The machine architecture of the host gpuhost provisions: a fact of the host, never of the
//! build machine. On the live system it is the machine's own; in an install root it is what
//! the root's packages are built for: the arch its installed kernels carry in their release
//! (`….el10uek.aarch64`, as their packages installed them; no process needed, so a converged
//! run still makes one rpm query) and its shell's ELF header must agree; without kernels, the
//! rpm database's packages. An aarch64 image (a Grace node's) can so be built from an x86_64
//! machine, with `dnf --forcearch`.

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
pub fn family(arch: &str) -> Option<&'static str> {
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

/// The arch a kernel release carries: `x86_64` of `6.12.0-103.40.4.3.el10uek.x86_64`,
/// `aarch64` of `….el9uek.aarch64.64k` or RHEL's `….el9.aarch64+64k` (the 64k-page kernels).
pub fn of_kernel(kver: &str) -> Option<&'static str> {
    let k = kver
        .strip_suffix(".64k")
        .or_else(|| kver.strip_suffix("+64k"))
        .unwrap_or(kver);
    family(k.rsplit('.').next()?)
}

/// From the installed kernels: one arch, several (a mixed root), or none (no kernel).
pub fn of_kernels(kernels: &[String]) -> Arch {
    let mut seen: Vec<(String, String)> = Vec::new();
    for k in kernels {
        if let Some(a) = of_kernel(k) {
            if !seen.iter().any(|(s, _)| s == a) {
                seen.push((a.to_string(), format!("kernel {k}")));
            }
        }
    }
    match seen.len() {
        0 => Arch::Unknown,
        1 => Arch::One(seen.remove(0).0),
        _ => Arch::Mixed(seen),
    }
}

/// The host's architecture: the machine's on the live system; in a root its kernels' (which its
/// `/bin/sh` must agree with), else its rpm database's.
pub fn of_host(host: &Host, kernels: &[String]) -> Result<Arch> {
    if host.is_live() {
        return Ok(Arch::One(machine().to_string()));
    }
    let by_kernels = of_kernels(kernels);
    if let Arch::One(k) = &by_kernels {
        // The root's own shell is built for the machine its packages are for: kernels of
        // another (files copied in, a root mixed by hand) make a mixed root, refused at the door
        // rather than after the build dependencies went in. One read of an ELF header, no
        // process: a converged run still makes one rpm query.
        let head = host.read_head_opt("/bin/sh", 20).ok().flatten();
        if let Some(sh) = elf_machine(&head.unwrap_or_default()) {
            if sh != k {
                let kernel = kernels
                    .iter()
                    .find(|x| of_kernel(x) == Some(k.as_str()))
                    .cloned()
                    .unwrap_or_default();
                return Ok(Arch::Mixed(vec![
                    (k.clone(), format!("kernel {kernel}")),
                    (sh.to_string(), "/bin/sh".to_string()),
                ]));
            }
        }
    }
    if by_kernels != Arch::Unknown {
        return Ok(by_kernels);
    }
    // A root whose database cannot be told, or has none yet, is refused or made elsewhere:
    // rpm must not make one here.
    match host.rpm_dbpath() {
        Ok(db) if host.exists(db) => {}
        _ => return Ok(Arch::Unknown),
    }
    let out = host
        .rpm()
        .args(["-qa", "--qf", "%{NAME}\\t%{ARCH}\\n"])
        .run()?;
    Ok(of_rpm_list(&out.stdout))
}

/// The machine an ELF file is built for, from its header's `e_machine` (`None`: not ELF, or a
/// machine gpuhost does not tell).
fn elf_machine(head: &[u8]) -> Option<&'static str> {
    if head.len() < 20 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let machine = if head[5] == 2 {
        u16::from_be_bytes([head[18], head[19]])
    } else {
        u16::from_le_bytes([head[18], head[19]])
    };
    match machine {
        62 => Some("x86_64"),
        183 => Some("aarch64"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_elf_header_tells_its_machine() {
        let mut head = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        head.resize(20, 0);
        head[18] = 62;
        assert_eq!(elf_machine(&head), Some("x86_64"));
        head[18] = 183;
        assert_eq!(elf_machine(&head), Some("aarch64"));
        assert_eq!(elf_machine(b"#!/bin/sh\nexec busybox --help\n"), None);
        assert_eq!(elf_machine(&head[..10]), None);
    }

    #[test]
    fn kernels_carry_their_arch_64k_ones_too() {
        assert_eq!(
            of_kernel("6.12.0-103.40.4.3.el10uek.x86_64"),
            Some("x86_64")
        );
        assert_eq!(
            of_kernel("5.15.0-300.163.18.el9uek.aarch64.64k"),
            Some("aarch64")
        );
        assert_eq!(
            of_kernel("5.14.0-427.13.1.el9_4.aarch64+64k"),
            Some("aarch64")
        );
        let both = vec![
            "6.12.0-1.el10uek.x86_64".to_string(),
            "6.12.0-1.el10uek.aarch64".to_string(),
        ];
        assert!(matches!(of_kernels(&both), Arch::Mixed(_)));
        assert_eq!(of_kernels(&[]), Arch::Unknown);
    }

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
