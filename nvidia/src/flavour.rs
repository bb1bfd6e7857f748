//! Which NVIDIA kernel module flavour (open or proprietary) a host gets, and the
//! `nvidia-driver` module stream that carries it.
//!
//! NVIDIA (Driver Installation Guide, "Kernel Modules"): open modules drive Turing and newer and
//! are the default from R560; the proprietary modules are needed for Maxwell, Pascal and Volta
//! and do not drive Blackwell or the Grace superchips; open modules exist from R515. The
//! `nvidia-driver` streams say the flavour: `open-dkms` and `<branch>-open` carry
//! `kmod-nvidia-open-dkms`; `latest-dkms`, `<branch>-dkms` (and the precompiled `latest`,
//! `<branch>`) the proprietary modules. NVIDIA's own GPU Operator offers the same three-way
//! choice (`KERNEL_MODULE_TYPE=auto|open|proprietary`, NVIDIA/gpu-driver-container).
//!
//! [`choose`] is pure: the profile's setting, its stream (if it names one), the GPUs on PCI and
//! the driver branch in, the flavour, stream and a one-line explanation out — or a refusal
//! (bad input, exit 2) that names the GPU and the stream to use, before anything changes.

use serde::{Deserialize, Serialize};

use crate::packages;
use gpuhost_host::gpu::{kind_of_hex, GpuKind};
use gpuhost_host::invalid;

/// `driver.flavour` in a profile.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum FlavourSetting {
    // From the GPUs: open for Turing and newer, proprietary for Maxwell, Pascal, Volta.
    #[default]
    Auto,
    Open,
    Proprietary,
}

pub use crate::packages::ModuleFlavour;

impl From<ModuleFlavour> for FlavourSetting {
    /// The setting that asks for this flavour (a bundle pins the flavour it chose so).
    fn from(f: ModuleFlavour) -> FlavourSetting {
        match f {
            ModuleFlavour::Open => FlavourSetting::Open,
            ModuleFlavour::Proprietary => FlavourSetting::Proprietary,
        }
    }
}

/// The flavour a stream carries.
pub(crate) fn flavour_of_stream(stream: &str) -> ModuleFlavour {
    if stream == "open-dkms" || stream.ends_with("-open") {
        ModuleFlavour::Open
    } else {
        ModuleFlavour::Proprietary
    }
}

/// The stream of the other flavour that corresponds to `stream`: `535-dkms` → `535-open`,
/// `latest-dkms` → `open-dkms`, and back.
pub(crate) fn stream_for(stream: &str, want: ModuleFlavour) -> String {
    if flavour_of_stream(stream) == want {
        return stream.to_string();
    }
    match want {
        ModuleFlavour::Open => match stream {
            "latest" | "latest-dkms" => "open-dkms".to_string(),
            s => format!("{}-open", s.strip_suffix("-dkms").unwrap_or(s)),
        },
        ModuleFlavour::Proprietary => match stream {
            "open-dkms" => "latest-dkms".to_string(),
            s => format!("{}-dkms", s.strip_suffix("-open").unwrap_or(s)),
        },
    }
}

/// The driver branch a stream names (`535-dkms`, `535-open`, precompiled `535`): None for the
/// branch-less ones (`latest`, `latest-dkms`, `open-dkms`).
fn stream_branch(stream: &str) -> Option<u32> {
    let head = stream.split('-').next().unwrap_or(stream);
    head.parse().ok()
}

/// NVIDIA's precompiled streams (`latest`, `<branch>`) on the Oracle Linux host gpuhost
/// provisions: refused (bad input, exit 2), in one line that says why and what to use. NVIDIA
/// builds those kmods on RHEL, for RHEL's kernels only, and its packages match the kernel release
/// exactly (NVIDIA/yum-packaging-precompiled-kmod#43: "only officially support RHEL kernels …
/// requires a exact match of the kernel version string"; #35): Oracle's RHCK is Oracle's build,
/// its releases carrying Oracle's `.0.1` before the dist tag (`4.18.0-553.16.1.0.1.el8_10`,
/// where RHEL's is `4.18.0-553.16.1.el8_10`), and the UEK is Oracle's own kernel. `kernel` is
/// the run's target kernel, named when known. The DKMS streams pass.
pub fn refuse_precompiled(stream: Option<&str>, kernel: Option<&str>) -> anyhow::Result<()> {
    let Some(stream) =
        stream.filter(|s| packages::StreamKind::of(s) == packages::StreamKind::Precompiled)
    else {
        return Ok(());
    };
    let why = match kernel {
        Some(k) if k.contains("uek") => {
            format!("kernel {k} is a UEK, Oracle's own kernel, for which NVIDIA builds none")
        }
        Some(k) => match rhel_release(k) {
            Some(rhel) => format!(
                "kernel {k} is Oracle's RHCK build, with Oracle's .0.1 (RHEL's is {rhel}), which no NVIDIA kmod matches"
            ),
            None => format!(
                "kernel {k} is Oracle's RHCK build, not RHEL's, which NVIDIA neither builds for nor tests"
            ),
        },
        None => "Oracle Linux's kernels are Oracle's builds (its RHCK releases carry Oracle's .0.1, e.g. 4.18.0-553.16.1.0.1.el8_10; the UEK is Oracle's own)".to_string(),
    };
    let open = match stream_for(stream, ModuleFlavour::Open) {
        open if open == "open-dkms" => "\"open-dkms\"".to_string(),
        open => format!("\"open-dkms\" (or \"{open}\")"),
    };
    // The proprietary modules' DKMS stream, where the branch still has them (not from R620).
    let dkms = match stream_branch(stream) {
        None => Some("latest-dkms".to_string()),
        Some(b) if crate::branches::has_proprietary(b) => Some(format!("{b}-dkms")),
        Some(_) => None,
    };
    let streams = match dkms {
        Some(d) => format!("{open} for the open modules or \"{d}\" for the proprietary ones"),
        None => format!("{open} (the branch has open modules only)"),
    };
    Err(invalid!(
        "driver.stream = \"{stream}\" is NVIDIA's precompiled stream, whose kmods NVIDIA builds for RHEL's kernels only, matching the kernel release exactly: {why}; use a DKMS stream, driver.stream = {streams}, or kmods gpuhost builds for the kernel (gpuhost kmod build on a build host, then driver.kmod_repo)"
    ))
}

/// RHEL's kernel release of an Oracle RHCK release that carries Oracle's `.0.<n>` before the
/// dist tag (`4.18.0-553.16.1.0.1.el8_10.x86_64` → `4.18.0-553.16.1.el8_10.x86_64`); `None`
/// for one without.
fn rhel_release(kver: &str) -> Option<String> {
    let (head, dist) = kver.split_once(".el")?;
    let (version, release) = head.split_once('-')?;
    let parts: Vec<&str> = release.split('.').collect();
    let n = parts.len();
    let last = parts.last().copied().unwrap_or_default();
    let oracle = n >= 3
        && parts[n - 2] == "0"
        && !last.is_empty()
        && last.chars().all(|c| c.is_ascii_digit());
    oracle.then(|| format!("{version}-{}.el{dist}", parts[..n - 2].join(".")))
}

/// The stream a flavour gets when the profile names none (the local repos' default streams).
pub(crate) fn default_stream(f: ModuleFlavour) -> &'static str {
    match f {
        ModuleFlavour::Open => "open-dkms",
        ModuleFlavour::Proprietary => "latest-dkms",
    }
}

/// First driver branch with open kernel modules.
pub(crate) const OPEN_SINCE_BRANCH: u32 = 515;

pub use gpuhost_host::gpu::PciGpu;

/// The outcome of [`choose`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Choice {
    pub flavour: ModuleFlavour,
    /// The `nvidia-driver` stream to install.
    pub stream: String,
    /// One line for `plan`: what was chosen and why.
    pub explanation: String,
}

fn count_kinds(known: &[(&PciGpu, GpuKind)]) -> String {
    let mut groups: Vec<(String, usize)> = Vec::new();
    for (_, k) in known {
        let d = k.describe();
        match groups.iter_mut().find(|(g, _)| *g == d) {
            Some((_, n)) => *n += 1,
            None => groups.push((d, 1)),
        }
    }
    groups
        .iter()
        .map(|(d, n)| format!("{n}× {d}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Choose the flavour and stream. `stream` is the profile's explicit `driver.stream`, if any;
/// `branch` the driver branch of the local repo (0 when unknown); `modular`: the release has
/// module streams (EL8, EL9), which the explanation names, or not (EL10: the kmod package).
pub fn choose(
    setting: FlavourSetting,
    stream: Option<&str>,
    gpus: &[PciGpu],
    branch: u32,
    modular: bool,
) -> anyhow::Result<Choice> {
    let known: Vec<(&PciGpu, GpuKind)> = gpus
        .iter()
        .filter_map(|g| kind_of_hex(&g.device_id).map(|k| (g, k)))
        .collect();
    let unknown: Vec<String> = gpus
        .iter()
        .filter(|g| kind_of_hex(&g.device_id).is_none())
        .map(|g| format!("{} (10de:{})", g.address, g.device_id))
        .collect();
    let needs_proprietary: Vec<&(&PciGpu, GpuKind)> =
        known.iter().filter(|(_, k)| !k.open_supported()).collect();
    let needs_open: Vec<&(&PciGpu, GpuKind)> = known
        .iter()
        .filter(|(_, k)| !k.proprietary_supported())
        .collect();

    let (flavour, why) = match explicit_choice(setting, stream)? {
        Some(said) => said,
        None => for_the_gpus(gpus, &known, &needs_proprietary, &needs_open)?,
    };

    // Refuse what cannot drive a GPU on PCI, naming it and the stream to use.
    let misfit = match flavour {
        ModuleFlavour::Open => needs_proprietary.first(),
        ModuleFlavour::Proprietary => needs_open.first(),
    };
    let chosen_stream = stream
        .map(str::to_string)
        .unwrap_or_else(|| default_stream(flavour).to_string());
    if let Some((g, k)) = misfit {
        return Err(misfit_error(flavour, g, k, &chosen_stream, &why));
    }
    if flavour == ModuleFlavour::Proprietary
        && branch > 0
        && !crate::branches::has_proprietary(branch)
    {
        return Err(no_proprietary(
            branch,
            needs_proprietary.first().copied(),
            &why,
        ));
    }
    if flavour == ModuleFlavour::Open && branch > 0 && branch < OPEN_SINCE_BRANCH {
        return Err(invalid!(
            "driver branch {branch} has no open kernel modules (they start with R{OPEN_SINCE_BRANCH}); use driver.stream = \"{}\" or a newer driver",
            stream_for(&chosen_stream, ModuleFlavour::Proprietary)
        ));
    }

    if let Some(named) = stream_branch(&chosen_stream).filter(|b| branch > 0 && *b != branch) {
        return Err(invalid!(
            "driver.stream = \"{chosen_stream}\" is a stream of driver branch {named}, but the local repo package carries driver branch {branch}, whose repo has no such stream; use driver.stream = \"{}\" (or \"{}\"), or a local repo package of branch {named}",
            stream_for(&format!("{branch}-dkms"), flavour),
            stream_for("latest-dkms", flavour)
        ));
    }
    let explanation = explain(
        flavour,
        &carrier(&chosen_stream, modular),
        &known,
        &why,
        &unknown,
    );
    Ok(Choice {
        flavour,
        stream: chosen_stream,
        explanation,
    })
}

/// The choice's one line: the flavour, what carries it, the GPUs it is for and why, and the
/// GPUs gpuhost's table does not know.
fn explain(
    flavour: ModuleFlavour,
    carrier: &str,
    known: &[(&PciGpu, GpuKind)],
    why: &str,
    unknown: &[String],
) -> String {
    let mut explanation = format!("{flavour} kernel modules ({carrier})");
    if !known.is_empty() {
        explanation.push_str(&format!(" for {}", count_kinds(known)));
    }
    explanation.push_str(&format!(": {why}"));
    if !unknown.is_empty() {
        explanation.push_str(&format!(
            "; not in gpuhost's GPU table: {}",
            unknown.join(", ")
        ));
    }
    explanation
}

/// What carries the modules of `stream`, as the explanation names it: the module stream
/// (`nvidia-driver:open-dkms`), or on a release without module streams (EL10) the kmod package
/// the stream names.
fn carrier(stream: &str, modular: bool) -> String {
    if modular {
        return packages::module_spec(stream, None);
    }
    let kmod = packages::StreamKind::of(stream)
        .dkms_package()
        .or_else(|| packages::StreamKind::Open.dkms_package())
        .unwrap_or_default();
    format!("{kmod}; EL10 has no module streams")
}

/// The proprietary flavour asked of a branch that has none (R620 and later): bad input, naming
/// the open flavour — or, when a GPU needs the proprietary modules, the last branch for it.
fn no_proprietary(branch: u32, gpu: Option<&(&PciGpu, GpuKind)>, why: &str) -> anyhow::Error {
    let removed = crate::branches::proprietary_removed_in();
    match gpu {
        Some((g, k)) => invalid!(
            "{} [10de:{}] {} needs the proprietary kernel modules, and driver branch R{branch} has none (NVIDIA removed them in R{removed}); R580 is the last branch for Maxwell, Pascal and Volta: use a local repo package of driver branch 580",
            g.address,
            g.device_id,
            k.describe()
        ),
        None => invalid!(
            "the proprietary kernel modules ({why}) are not in driver branch R{branch}: NVIDIA removed them in R{removed}; set driver.flavour = \"open\" (and no proprietary driver.stream), or use a local repo package of a branch before R{removed}"
        ),
    }
}

/// The profile's explicit choice (`driver.flavour`, or the flavour `driver.stream` carries),
/// with what said it; refused when the two ways of saying it disagree.
fn explicit_choice(
    setting: FlavourSetting,
    stream: Option<&str>,
) -> anyhow::Result<Option<(ModuleFlavour, String)>> {
    let stream_flavour = stream.map(flavour_of_stream);
    Ok(match (setting, stream_flavour) {
        (FlavourSetting::Auto, None) => None,
        (FlavourSetting::Auto, Some(f)) => {
            Some((f, format!("driver.stream = {}", stream.unwrap_or_default())))
        }
        (s, sf) => {
            let f = match s {
                FlavourSetting::Open => ModuleFlavour::Open,
                _ => ModuleFlavour::Proprietary,
            };
            if let (Some(sf), Some(st)) = (sf, stream) {
                if sf != f {
                    return Err(invalid!(
                        "driver.flavour = \"{f}\" but driver.stream = \"{st}\" carries the {sf} modules; set driver.stream = \"{}\" or driver.flavour = \"{sf}\"",
                        stream_for(st, f)
                    ));
                }
            }
            Some((f, format!("driver.flavour = \"{f}\"")))
        }
    })
}

/// No explicit choice: the flavour the GPUs on PCI need (refused when they need both), else
/// NVIDIA's default, with why.
fn for_the_gpus(
    gpus: &[PciGpu],
    known: &[(&PciGpu, GpuKind)],
    needs_proprietary: &[&(&PciGpu, GpuKind)],
    needs_open: &[&(&PciGpu, GpuKind)],
) -> anyhow::Result<(ModuleFlavour, String)> {
    if let (Some((pg, pk)), Some((og, ok))) = (needs_proprietary.first(), needs_open.first()) {
        return Err(invalid!(
            "no NVIDIA kernel module flavour drives both {} {} (proprietary only) and {} {} (open only); one host cannot serve both GPUs",
            pg.address,
            pk.describe(),
            og.address,
            ok.describe()
        ));
    }
    Ok(if !needs_proprietary.is_empty() {
        (
            ModuleFlavour::Proprietary,
            "open modules need Turing or newer".to_string(),
        )
    } else if !known.is_empty() {
        (
            ModuleFlavour::Open,
            "NVIDIA's recommendation from Turing on".to_string(),
        )
    } else if gpus.is_empty() {
        (
            ModuleFlavour::Open,
            "no NVIDIA GPU on PCI (an image build?): NVIDIA's default since R560; set driver.flavour to choose".to_string(),
        )
    } else {
        (
            ModuleFlavour::Open,
            "no GPU gpuhost knows: NVIDIA's default since R560; set driver.flavour to choose"
                .to_string(),
        )
    })
}

/// GPU `g` cannot be driven by `flavour`'s modules: the refusal, naming the stream to use.
fn misfit_error(
    flavour: ModuleFlavour,
    g: &PciGpu,
    k: &GpuKind,
    chosen_stream: &str,
    why: &str,
) -> anyhow::Error {
    let other = match flavour {
        ModuleFlavour::Open => ModuleFlavour::Proprietary,
        ModuleFlavour::Proprietary => ModuleFlavour::Open,
    };
    let cannot = match flavour {
        ModuleFlavour::Open => "the open modules drive Turing and newer only",
        ModuleFlavour::Proprietary => {
            "the proprietary modules do not drive Blackwell or Grace superchips"
        }
    };
    invalid!(
        "{} {} cannot be driven by the {flavour} kernel modules of nvidia-driver:{chosen_stream} ({why}): {cannot}; use driver.stream = \"{}\"",
        g.address,
        k.describe(),
        stream_for(chosen_stream, other)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `choose` on a release with module streams (EL8, EL9).
    fn choose_streams(
        setting: FlavourSetting,
        stream: Option<&str>,
        gpus: &[PciGpu],
        branch: u32,
    ) -> anyhow::Result<Choice> {
        choose(setting, stream, gpus, branch, true)
    }

    #[test]
    fn r620_refuses_the_proprietary_flavour_naming_the_open_one() {
        let err = choose_streams(FlavourSetting::Proprietary, None, &[], 620)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("R620") && err.contains("driver.flavour = \"open\""),
            "{err}"
        );
        // A proprietary stream says the same; R615 still has them; R630 follows R620.
        assert!(choose_streams(FlavourSetting::Auto, Some("620-dkms"), &[], 620).is_err());
        assert!(choose_streams(FlavourSetting::Proprietary, None, &[], 615).is_ok());
        assert!(choose_streams(FlavourSetting::Proprietary, None, &[], 630).is_err());
        assert!(choose_streams(FlavourSetting::Open, None, &[], 630).is_ok());
    }
    use gpuhost_host::error::is_invalid;
    use rstest::rstest;

    fn gpus(ids: &[&str]) -> Vec<PciGpu> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| PciGpu {
                address: format!("0000:{:02x}:00.0", 0x19 + i),
                device_id: id.to_string(),
            })
            .collect()
    }

    #[rstest]
    #[case("535-dkms", ModuleFlavour::Open, "535-open")]
    #[case("latest-dkms", ModuleFlavour::Open, "open-dkms")]
    #[case("latest", ModuleFlavour::Open, "open-dkms")]
    #[case("535", ModuleFlavour::Open, "535-open")]
    #[case("550-open", ModuleFlavour::Proprietary, "550-dkms")]
    #[case("open-dkms", ModuleFlavour::Proprietary, "latest-dkms")]
    #[case("open-dkms", ModuleFlavour::Open, "open-dkms")]
    fn streams_of_the_other_flavour(
        #[case] stream: &str,
        #[case] want: ModuleFlavour,
        #[case] out: &str,
    ) {
        assert_eq!(stream_for(stream, want), out);
    }

    #[test]
    fn auto_picks_open_for_hopper_and_says_why() -> anyhow::Result<()> {
        let c = choose_streams(FlavourSetting::Auto, None, &gpus(&["2335"; 8]), 580)?;
        assert_eq!(c.flavour, ModuleFlavour::Open);
        assert_eq!(c.stream, "open-dkms");
        assert_eq!(
            c.explanation,
            "open kernel modules (nvidia-driver:open-dkms) for 8× H200 SXM 141GB (Hopper): NVIDIA's recommendation from Turing on"
        );
        Ok(())
    }

    #[test]
    fn auto_picks_proprietary_for_volta() -> anyhow::Result<()> {
        let c = choose_streams(FlavourSetting::Auto, None, &gpus(&["1db5", "1db5"]), 535)?;
        assert_eq!(c.flavour, ModuleFlavour::Proprietary);
        assert_eq!(c.stream, "latest-dkms");
        assert!(c.explanation.contains("2× Tesla V100 SXM2 32GB (Volta)"));
        assert!(c.explanation.contains("open modules need Turing or newer"));
        Ok(())
    }

    #[test]
    fn auto_without_gpus_picks_open_and_says_so() -> anyhow::Result<()> {
        let c = choose_streams(FlavourSetting::Auto, None, &[], 550)?;
        assert_eq!(c.stream, "open-dkms");
        assert!(
            c.explanation.contains("no NVIDIA GPU on PCI"),
            "{}",
            c.explanation
        );
        Ok(())
    }

    #[test]
    fn an_explicit_stream_decides_under_auto() -> anyhow::Result<()> {
        let c = choose_streams(
            FlavourSetting::Auto,
            Some("535-dkms"),
            &gpus(&["2330"]),
            535,
        )?;
        assert_eq!(
            (c.flavour, c.stream.as_str()),
            (ModuleFlavour::Proprietary, "535-dkms")
        );
        assert!(
            c.explanation.ends_with("driver.stream = 535-dkms"),
            "{}",
            c.explanation
        );
        Ok(())
    }

    #[rstest]
    // proprietary on Blackwell: name the GPU and the open stream
    #[case(
        FlavourSetting::Auto,
        Some("550-dkms"),
        "2901",
        "0000:19:00.0 B200 (Blackwell)",
        "550-open"
    )]
    #[case(
        FlavourSetting::Proprietary,
        None,
        "2342",
        "GH200 480GB (Grace Hopper superchip)",
        "open-dkms"
    )]
    // open on Volta: name the GPU and the proprietary stream
    #[case(
        FlavourSetting::Auto,
        Some("535-open"),
        "1db5",
        "Tesla V100 SXM2 32GB (Volta)",
        "535-dkms"
    )]
    #[case(
        FlavourSetting::Open,
        None,
        "15f8",
        "Tesla P100 PCIe 16GB (Pascal)",
        "latest-dkms"
    )]
    fn a_flavour_that_cannot_drive_the_gpu_is_refused(
        #[case] setting: FlavourSetting,
        #[case] stream: Option<&str>,
        #[case] id: &str,
        #[case] gpu: &str,
        #[case] use_stream: &str,
    ) {
        let err = choose_streams(setting, stream, &gpus(&[id]), 550).err();
        let text = err.as_ref().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(err.as_ref().is_some_and(is_invalid), "{text}");
        assert!(text.contains(gpu), "{text}");
        assert!(
            text.contains(&format!("use driver.stream = \"{use_stream}\"")),
            "{text}"
        );
    }

    #[test]
    fn gpus_no_flavour_serves_together_are_refused() {
        let err = choose_streams(FlavourSetting::Auto, None, &gpus(&["1db5", "2901"]), 570).err();
        assert!(err
            .as_ref()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default()
            .contains("no NVIDIA kernel module flavour drives both"));
    }

    #[test]
    fn flavour_and_stream_must_agree() {
        let err = choose_streams(FlavourSetting::Open, Some("535-dkms"), &[], 535).err();
        let text = err.as_ref().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(err.as_ref().is_some_and(is_invalid), "{text}");
        assert!(text.contains("535-open"), "{text}");
    }

    #[test]
    fn unknown_ids_are_named_and_the_explicit_choice_stands() -> anyhow::Result<()> {
        let c = choose_streams(FlavourSetting::Proprietary, None, &gpus(&["abcd"]), 550)?;
        assert_eq!(c.stream, "latest-dkms");
        assert!(c
            .explanation
            .contains("not in gpuhost's GPU table: 0000:19:00.0 (10de:abcd)"));
        let c = choose_streams(FlavourSetting::Auto, None, &gpus(&["abcd"]), 550)?;
        assert_eq!(c.flavour, ModuleFlavour::Open);
        assert!(c.explanation.contains("set driver.flavour to choose"));
        Ok(())
    }

    #[test]
    fn no_open_modules_before_r515() {
        let err = choose_streams(FlavourSetting::Auto, None, &gpus(&["2330"]), 510).err();
        assert!(err
            .as_ref()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default()
            .contains("R515"));
    }

    /// The refusal of a precompiled stream, as `plan` and `apply` print it.
    fn refusal(stream: &str, kernel: Option<&str>) -> String {
        let err = refuse_precompiled(Some(stream), kernel).err();
        assert!(err.as_ref().is_some_and(is_invalid), "{err:?}");
        let text = err.map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(!text.contains('\n'), "{text}");
        text
    }

    #[test]
    fn precompiled_streams_are_refused_on_every_oracle_kernel_naming_it_and_the_way_out() {
        let t = refusal("570", Some("4.18.0-553.16.1.0.1.el8_10.x86_64"));
        assert!(
            t.contains("driver.stream = \"570\" is NVIDIA's precompiled stream"),
            "{t}"
        );
        assert!(t.contains("RHEL's kernels only"), "{t}");
        assert!(
            t.contains("kernel 4.18.0-553.16.1.0.1.el8_10.x86_64 is Oracle's RHCK build, with Oracle's .0.1 (RHEL's is 4.18.0-553.16.1.el8_10.x86_64)"),
            "{t}"
        );
        assert!(
            t.contains("\"open-dkms\" (or \"570-open\") for the open modules or \"570-dkms\" for the proprietary ones"),
            "{t}"
        );
        assert!(
            t.contains("gpuhost kmod build") && t.contains("driver.kmod_repo"),
            "{t}"
        );
        let t = refusal("latest", Some("5.14.0-570.12.1.0.1.el9_6.x86_64"));
        assert!(t.contains("RHEL's is 5.14.0-570.12.1.el9_6.x86_64"), "{t}");
        assert!(
            t.contains("driver.stream = \"open-dkms\" for the open modules or \"latest-dkms\""),
            "{t}"
        );
        // An Oracle RHCK build without the suffix is Oracle's all the same.
        let t = refusal("535", Some("5.14.0-503.11.1.el9_5.x86_64"));
        assert!(
            t.contains("kernel 5.14.0-503.11.1.el9_5.x86_64 is Oracle's RHCK build, not RHEL's"),
            "{t}"
        );
        let t = refusal("latest", Some("5.15.0-204.147.6.2.el8uek.x86_64"));
        assert!(
            t.contains("kernel 5.15.0-204.147.6.2.el8uek.x86_64 is a UEK"),
            "{t}"
        );
        let t = refusal("latest", None);
        assert!(
            t.contains("Oracle Linux's kernels are Oracle's builds"),
            "{t}"
        );
        // R620 has no proprietary modules: only the open stream is offered.
        let t = refusal("620", Some("5.14.0-570.12.1.0.1.el9_6.x86_64"));
        assert!(
            t.contains("(or \"620-open\") (the branch has open modules only)"),
            "{t}"
        );
        assert!(!t.contains("620-dkms"), "{t}");
    }

    #[test]
    fn dkms_streams_and_no_stream_pass_the_precompiled_check() {
        let k = Some("4.18.0-553.16.1.0.1.el8_10.x86_64");
        for s in ["open-dkms", "latest-dkms", "570-dkms", "570-open"] {
            assert!(refuse_precompiled(Some(s), k).is_ok(), "{s}");
        }
        assert!(refuse_precompiled(None, k).is_ok());
    }

    #[test]
    fn rhel_release_drops_oracles_suffix_only() {
        assert_eq!(
            rhel_release("4.18.0-553.16.1.0.1.el8_10.x86_64").as_deref(),
            Some("4.18.0-553.16.1.el8_10.x86_64")
        );
        assert_eq!(
            rhel_release("6.12.0-55.9.1.0.1.el10_0.x86_64").as_deref(),
            Some("6.12.0-55.9.1.el10_0.x86_64")
        );
        assert_eq!(rhel_release("4.18.0-553.16.1.el8_10.x86_64"), None);
        assert_eq!(rhel_release("5.15.0-204.147.6.2.el8uek.x86_64"), None);
    }
}
