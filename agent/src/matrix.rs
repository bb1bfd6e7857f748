//! `gpuhost generate support-matrix`: docs/support-matrix.md, made from the code's own tables —
//! the releases ([`gpuhost_host::platform::RELEASES`]), the driver branches
//! ([`gpuhost_nvidia::branches::BRANCHES`]) and the rules that refuse (no RHCK on aarch64, no
//! proprietary modules from R620, which streams a profile accepts) — so the document cannot say
//! what the code does not. `tests/docs.rs` checks the committed file against it.

use std::fmt::Write as _;

use gpuhost_host::kernel::Flavour;
use gpuhost_host::platform::{self, Release};
use gpuhost_nvidia::branches::{self, BRANCHES};
use gpuhost_nvidia::flavour::ModuleFlavour;
use gpuhost_profile::Profile;

/// What gpuhost does with one combination.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Accepted, and the test world runs it.
    Supported,
    /// Accepted by the code, but no test world case runs it: why.
    Untested(&'static str),
    /// Refused before any change (exit 2): why.
    Refused(&'static str),
}

fn verdict(
    r: &Release,
    arch: &str,
    kernel: Flavour,
    modules: ModuleFlavour,
    branch: u32,
) -> Verdict {
    if kernel == Flavour::Rhck && !platform::has_rhck(r.major, arch) {
        return Verdict::Refused("Oracle ships no RHCK for aarch64 (UEK only)");
    }
    if modules == ModuleFlavour::Proprietary && !branches::has_proprietary(branch) {
        return Verdict::Refused("no proprietary kernel modules from R620");
    }
    if arch != "x86_64" {
        return match (modules, r.tested_aarch64.contains(&branch)) {
            (ModuleFlavour::Open, true) => Verdict::Supported,
            _ if r.tested_aarch64.is_empty() => {
                Verdict::Untested("accepted; no aarch64 test world for this release")
            }
            _ => Verdict::Untested("accepted; no aarch64 test world case"),
        };
    }
    if !r.tested_branches.contains(&branch) {
        return Verdict::Untested("accepted; no test world case");
    }
    Verdict::Supported
}

fn shown(v: &Verdict) -> String {
    match v {
        Verdict::Supported => "supported".to_string(),
        Verdict::Untested(why) => format!("untested ({why})"),
        Verdict::Refused(why) => format!("refused, exit 2 ({why})"),
    }
}

/// How a node gets the kernel modules of one (release, kernel, module flavour) it accepts:
/// prebuilt kmods (`gpuhost kmod build` on a build host, `driver.kmod_repo` on the node), DKMS
/// on the node, and, for the proprietary flavour (NVIDIA builds no open precompiled kmods),
/// whether NVIDIA's precompiled streams are accepted — asked of the built-in profile's checks
/// and of the rule `plan` applies ([`gpuhost_nvidia::flavour::refuse_precompiled`]), so the
/// column says what `plan` says.
fn kernel_modules(r: &Release, kernel: Flavour, modules: ModuleFlavour) -> String {
    let build = match modules {
        ModuleFlavour::Open => "`gpuhost kmod build`",
        ModuleFlavour::Proprietary => "`gpuhost kmod build --flavour proprietary`",
    };
    // NVIDIA's `nvidia-open` requires its DKMS kmod: with prebuilt kmods the open flavour takes
    // the module or compute-only package set, and a release without module streams has only
    // the latter (steps/src/run/driver.rs).
    let set = if modules == ModuleFlavour::Open && !r.modular() {
        ", driver.install = \"compute-only\""
    } else {
        ""
    };
    let mut s = format!("prebuilt ({build}{set}) or DKMS");
    if modules == ModuleFlavour::Proprietary {
        s.push_str(if precompiled_accepted(r, kernel) {
            "; NVIDIA precompiled: accepted"
        } else {
            "; NVIDIA precompiled: refused, exit 2"
        });
    }
    s
}

/// True when a precompiled stream (`driver.stream = "latest"`) passes the built-in profile of
/// the release and kernel (a release without module streams takes none) and the driver's
/// resolution (NVIDIA builds those kmods for RHEL's kernels only).
fn precompiled_accepted(r: &Release, kernel: Flavour) -> bool {
    let name = match kernel {
        Flavour::Uek => format!("{}-uek", r.name()),
        Flavour::Rhck => format!("{}-rhck", r.name()),
    };
    let stream = "latest";
    Profile::resolve(&name, &[format!("driver.stream={stream}")]).is_ok()
        && gpuhost_nvidia::flavour::refuse_precompiled(Some(stream), None).is_ok()
}

/// The active checks' column: the same PTX and driver calls on every accepted combination;
/// run on real x86_64 H100/H200 GPUs (driver R580, bench/RESULTS-active.md), never on Grace.
fn active_checks(v: &Verdict, arch: &str) -> &'static str {
    match (v, arch) {
        (Verdict::Refused(_), _) => "—",
        (_, "x86_64") => "yes (run on H100/H200, R580)",
        _ => "yes, untested (no Grace GPU at hand)",
    }
}

/// `R535–R580`, `R590`, or `R535, R550` for branches that are not neighbours in the table.
fn ranges(list: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let index = |b: u32| BRANCHES.iter().position(|r| r.branch == b);
    let mut start = 0;
    for i in 1..=list.len() {
        let next = i < list.len() && index(list[i]) == index(list[i - 1]).map(|x| x + 1);
        let ends = !next;
        if ends {
            out.push(if i - start == 1 {
                format!("R{}", list[start])
            } else {
                format!("R{}–R{}", list[start], list[i - 1])
            });
            start = i;
        }
    }
    out.join(", ")
}

/// The document, Markdown.
pub(crate) fn markdown() -> String {
    let mut s = String::from(
        "# Support matrix\n\n\
         Generated by `gpuhost generate support-matrix` from gpuhost's own tables (releases, driver\n\
         branches, the rules that refuse); `tests/docs.rs` checks this file against it.\n\n\
         - **supported**: gpuhost accepts it and the test world (real rpm, dnf, DKMS) runs it.\n\
         - **untested**: gpuhost accepts it; no test world case runs it yet.\n\
         - **refused**: stopped before any change, exit 2, with one line saying why.\n\
         - **kernel modules**: how a node gets NVIDIA's modules. Prebuilt: built and signed once per\n  \
           (driver, kernel) on a build host, installed from `driver.kmod_repo` or a bundle, nothing\n  \
           compiled on the node ([kmods.md](kmods.md)); DKMS: built on each node (no kmod repo set);\n  \
           NVIDIA precompiled: the precompiled streams' kmods. The verdict is the driver's, run\n  \
           with DKMS; the test world runs prebuilt kmods on Oracle Linux 9's UEK, x86_64 and\n  \
           aarch64 (`tests/kmods.rs`).\n\
         - **active checks**: `gpuhost status --active` ([active-checks.md](active-checks.md)):\n  \
           known-answer work through the driver's `libcuda.so.1` and PTX ISA 7.0, which every\n  \
           listed branch loads; where it has run on a real GPU, and where not.\n\n\
         | OS | arch | kernel | module flavour | kernel modules | driver branches | verdict | active checks |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in &platform::RELEASES {
        for arch in r.arches {
            for kernel in [Flavour::Uek, Flavour::Rhck] {
                for modules in [ModuleFlavour::Open, ModuleFlavour::Proprietary] {
                    rows(&mut s, r, arch, kernel, modules);
                }
            }
        }
    }
    let _ = write!(
        s,
        "\nNotes, from the same tables:\n\n\
         - Releases: {}; a new minor release of these is accepted, another major is refused.\n\
         - NVIDIA's packages are module streams on Oracle Linux 8 and 9, plain packages on 10\n  \
           (`dnf install nvidia-open`, the branch held with `dnf versionlock '*nvidia*<branch>*'`).\n\
         - Kernel modules: built on the node by DKMS (`open-dkms`, `<branch>-open`, `latest-dkms`,\n  \
           `<branch>-dkms`), or built once per kernel on a build host (`gpuhost kmod build`).\n  \
           NVIDIA's precompiled streams (`latest`, `<branch>`) are refused on every release, RHCK\n  \
           and UEK (exit 2, naming the kernel): NVIDIA builds them for RHEL's kernels only, matched\n  \
           exactly, and Oracle's RHCK releases carry Oracle's `.0.1` (UEK is Oracle's own); EL10 has\n  \
           none in NVIDIA's repos.\n\
         - aarch64 (Grace): the UEK in its 4k and 64k-page builds (`kernel-uek64k`, headers\n  \
           `kernel-uek64k-devel`); an image is built from an x86_64 machine with `--root` (dnf runs\n  \
           with `--forcearch=aarch64`); IMEX on by default on GB200/GB300 NVL72 compute trays, no\n  \
           Fabric Manager on Grace nodes; the RPM: `packaging/build-rpm.sh --target aarch64`.\n\
         - A branch newer than R{} is checked as R{} (open kernel modules only), with a warning.\n\
         - GPUs per branch (which branch drives which GPU, per flavour): `nvidia/src/support.rs`.\n",
        platform::supported_text(),
        branches::NEWEST,
        branches::NEWEST,
    );
    s
}

/// The rows of one (release, arch, kernel, module flavour): its branches grouped by verdict, in
/// branch order.
fn rows(s: &mut String, r: &Release, arch: &str, kernel: Flavour, modules: ModuleFlavour) {
    let mut groups: Vec<(Verdict, Vec<u32>)> = Vec::new();
    for b in BRANCHES {
        let v = verdict(r, arch, kernel, modules, b.branch);
        match groups.iter_mut().find(|(g, _)| *g == v) {
            Some((_, list)) => list.push(b.branch),
            None => groups.push((v, vec![b.branch])),
        }
    }
    for (v, list) in groups {
        let how = match v {
            Verdict::Refused(_) => "—".to_string(),
            _ => kernel_modules(r, kernel, modules),
        };
        let _ = writeln!(
            s,
            "| Oracle Linux {} | {arch} | {kernel} | {modules} | {how} | {} | {} | {} |",
            r.major,
            ranges(&list),
            shown(&v),
            active_checks(&v, arch)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_says_what_the_rules_say() {
        let m = markdown();
        assert!(
            m.contains("| Oracle Linux 10 | x86_64 | UEK | open | prebuilt (`gpuhost kmod build`, driver.install = \"compute-only\") or DKMS | R580–R590 | supported |"),
            "{m}"
        );
        assert!(m.contains("| Oracle Linux 9 | aarch64 | RHCK | open | — | R535–R620 | refused, exit 2 (Oracle ships no RHCK for aarch64 (UEK only)) |"), "{m}");
        assert!(
            m.contains("| Oracle Linux 10 | aarch64 | UEK | open | prebuilt (`gpuhost kmod build`, driver.install = \"compute-only\") or DKMS | R580 | supported |"),
            "{m}"
        );
        assert!(m.contains("| Oracle Linux 8 | aarch64 | UEK | open | prebuilt (`gpuhost kmod build`) or DKMS | R535–R620 | untested (accepted; no aarch64 test world for this release) |"), "{m}");
        assert!(m.contains("| Oracle Linux 8 | x86_64 | RHCK | proprietary | — | R620 | refused, exit 2 (no proprietary kernel modules from R620) |"), "{m}");
        // The kernel modules column: NVIDIA's precompiled streams as the profiles take them.
        assert!(m.contains("| Oracle Linux 9 | x86_64 | UEK | proprietary | prebuilt (`gpuhost kmod build --flavour proprietary`) or DKMS; NVIDIA precompiled: refused, exit 2 | R535–R550, R570, R580 | supported |"), "{m}");
        assert!(m.contains("| Oracle Linux 8 | x86_64 | RHCK | proprietary | prebuilt (`gpuhost kmod build --flavour proprietary`) or DKMS; NVIDIA precompiled: refused, exit 2 | R535–R560, R570, R580 | supported |"), "{m}");
        assert_eq!(ranges(&[535, 550, 560, 580]), "R535–R560, R580");
    }

    /// The column asks the code's own checks: NVIDIA's precompiled streams are refused on
    /// every Oracle Linux kernel, RHCK and UEK (built for RHEL's kernels only).
    #[test]
    fn precompiled_streams_are_refused_as_plan_refuses_them() {
        for r in &platform::RELEASES {
            for k in [Flavour::Uek, Flavour::Rhck] {
                assert!(!precompiled_accepted(r, k), "{} {k}", r.name());
            }
        }
    }
}
