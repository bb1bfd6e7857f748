//! Per-GPU checks: one table, [`GPU_CHECKS`], of small judges, each turning one NVML reading
//! (or a few) of a [`GpuSnapshot`] into a verdict. NOT_SUPPORTED is n/a; any other NVML error
//! on a reading is UNKNOWN, except `GpuLost`, which is CRITICAL.

use super::model::{GpuRef, Severity};
use super::out::{Out, Verdict};
use crate::counters::{rate, GpuCounters};
use crate::expect::Thresholds;
use crate::snapshot::{reasons, C2c, EccCounts, Fabric, GpuSnapshot, NvLink, Reading, SramEcc};

/// Rows past this many uncorrectable remaps mean the GPU should be replaced (Azure, OCI).
const MAX_UNCORRECTABLE_REMAPPED_ROWS: u32 = 512;

/// WARNING this many °C below the slowdown threshold.
const TEMP_MARGIN_C: u32 = 5;

/// What one judge made of a GPU's reading(s).
pub(crate) enum Judged {
    Verdict(Verdict),
    /// NVML's NOT_SUPPORTED: n/a.
    NotSupported,
    /// Another NVML error (`GpuLost`, `NoPermission`, …).
    Error(String),
}

/// Judge one reading with `f`; NOT_SUPPORTED and errors pass through.
fn on<T>(reading: &Reading<T>, f: impl FnOnce(&T) -> Verdict) -> Judged {
    match reading {
        Reading::Value(v) => Judged::Verdict(f(v)),
        Reading::NotSupported => Judged::NotSupported,
        Reading::Error(e) => Judged::Error(e.clone()),
    }
}

/// What a judge sees: the GPU, and what it needs to know about the node.
pub(crate) struct GpuCtx<'a> {
    pub(crate) g: &'a GpuSnapshot,
    /// NVSwitches are on PCI (HGX): every NVLink must be up.
    pub(crate) nvswitch: bool,
    pub(crate) t: &'a Thresholds,
    /// This GPU's counters from the kept baseline and the seconds since: None on a first
    /// reading.
    pub(crate) before: Option<(&'a GpuCounters, f64)>,
}

impl GpuCtx<'_> {
    /// The hint for "reset this GPU".
    fn reset(&self) -> String {
        let i = self.g.index;
        format!("drain GPU {i}, then reset it (`nvidia-smi -r -i {i}`) or reboot")
    }
}

/// One per-GPU check: its stable id, its table group, and its judge.
pub(crate) struct GpuCheck {
    pub(crate) id: &'static str,
    pub(crate) group: &'static str,
    pub(crate) judge: fn(&GpuCtx<'_>) -> Judged,
}

/// Every per-GPU check, in report order.
pub(crate) const GPU_CHECKS: &[GpuCheck] = &[
    GpuCheck {
        id: "gpu.ecc.mode",
        group: "ecc",
        judge: ecc_mode,
    },
    GpuCheck {
        id: "gpu.ecc.volatile_uncorrected",
        group: "ecc",
        judge: ecc_volatile_uncorrected,
    },
    GpuCheck {
        id: "gpu.ecc.aggregate_uncorrected",
        group: "ecc",
        judge: ecc_aggregate_uncorrected,
    },
    GpuCheck {
        id: "gpu.ecc.sram",
        group: "ecc",
        judge: ecc_sram,
    },
    GpuCheck {
        id: "gpu.ecc.dram",
        group: "ecc",
        judge: ecc_dram,
    },
    GpuCheck {
        id: "gpu.retired_pages",
        group: "memory",
        judge: retired_pages,
    },
    GpuCheck {
        id: "gpu.remap.failure",
        group: "memory",
        judge: remap_failure,
    },
    GpuCheck {
        id: "gpu.remap.pending",
        group: "memory",
        judge: remap_pending,
    },
    GpuCheck {
        id: "gpu.remap.uncorrectable",
        group: "memory",
        judge: remap_uncorrectable,
    },
    GpuCheck {
        id: "gpu.recovery_action",
        group: "recovery",
        judge: recovery_action,
    },
    GpuCheck {
        id: "gpu.temperature",
        group: "thermal",
        judge: temperature,
    },
    GpuCheck {
        id: "gpu.clock_events",
        group: "thermal",
        judge: clock_events,
    },
    GpuCheck {
        id: "gpu.power_limit",
        group: "power",
        judge: power_limit,
    },
    GpuCheck {
        id: "gpu.pcie",
        group: "pcie",
        judge: pcie,
    },
    GpuCheck {
        id: "gpu.pcie_replay",
        group: "pcie",
        judge: pcie_replay,
    },
    GpuCheck {
        id: "gpu.persistence",
        group: "config",
        judge: persistence,
    },
    GpuCheck {
        id: "gpu.mig",
        group: "config",
        judge: mig,
    },
    GpuCheck {
        id: "gpu.nvlink",
        group: "nvlink",
        judge: nvlink,
    },
    GpuCheck {
        id: "gpu.fabric",
        group: "fabric",
        judge: fabric,
    },
    GpuCheck {
        id: "gpu.c2c",
        group: "c2c",
        judge: c2c,
    },
    GpuCheck {
        id: "gpu.inforom",
        group: "software",
        judge: inforom,
    },
    GpuCheck {
        id: "gpu.gsp",
        group: "software",
        judge: gsp,
    },
];

/// Run every check of [`GPU_CHECKS`] on one GPU.
pub(super) fn gpu_checks(out: &mut Out, ctx: &GpuCtx<'_>, r: &GpuRef) {
    for c in GPU_CHECKS {
        match (c.judge)(ctx) {
            Judged::Verdict((sev, value, hint)) => {
                out.push(c.id, c.group, Some(r), sev, value, hint)
            }
            Judged::NotSupported => {
                out.push(c.id, c.group, Some(r), Severity::NotApplicable, "n/a", None)
            }
            Judged::Error(e) => reading_error(out, c.id, c.group, r, &e),
        }
    }
}

/// An NVML reading that failed: GpuLost is CRITICAL, anything else UNKNOWN.
pub(super) fn reading_error(out: &mut Out, id: &str, group: &str, r: &GpuRef, e: &str) {
    let (sev, value, hint) = match e {
        "GpuLost" => (
            Severity::Critical,
            "GPU lost (NVML: GPU is lost)".to_string(),
            "drain the node and reboot; look for XID 79",
        ),
        "NoPermission" => (
            Severity::Unknown,
            "NVML: no permission".to_string(),
            "run as root",
        ),
        _ => (
            Severity::Unknown,
            format!("NVML error: {e}"),
            "see `nvidia-smi -q` and the kernel log",
        ),
    };
    out.push(id, group, Some(r), sev, value, Some(hint.into()));
}

fn ecc_mode(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.ecc_mode, |m| match (m.current, m.pending) {
        (cur, pend) if cur != pend => (
            Severity::Warning,
            format!("ECC {} now, {} after reset", onoff(cur), onoff(pend)),
            Some(format!(
                "the ECC change takes effect after a reset: {}",
                c.reset()
            )),
        ),
        (false, _) => (
            Severity::Warning,
            "ECC disabled".into(),
            Some(format!(
                "enable it (`nvidia-smi -i {} -e 1`) and reset the GPU",
                c.g.index
            )),
        ),
        _ => (Severity::Ok, "ECC enabled".into(), None),
    })
}

fn ecc_volatile_uncorrected(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.ecc_volatile_uncorrected, |n| {
        if *n > 0 {
            (
                Severity::Critical,
                format!("{n} uncorrectable ECC error(s) since the driver loaded"),
                Some(format!("{}; RMA if they recur", c.reset())),
            )
        } else {
            (Severity::Ok, "0 volatile uncorrectable".into(), None)
        }
    })
}

fn ecc_aggregate_uncorrected(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.ecc_aggregate_uncorrected, |n| {
        if *n > 0 {
            (
                Severity::Warning,
                format!("{n} uncorrectable ECC error(s) over the GPU's life"),
                Some("watch row remapping; replace the GPU if the count keeps growing".into()),
            )
        } else {
            (Severity::Ok, "0 aggregate uncorrectable".into(), None)
        }
    })
}

/// SRAM ECC against AzNHC's thresholds, and NVIDIA's SRAM threshold flag.
fn ecc_sram(c: &GpuCtx<'_>) -> Judged {
    let t = c.t;
    on(&c.g.ecc_sram, |e: &SramEcc| {
        let v = format!(
            "SRAM correctable {} volatile / {} aggregate, uncorrectable {} / {}",
            e.volatile_corrected,
            e.aggregate_corrected,
            e.volatile_uncorrected,
            e.aggregate_uncorrected
        );
        let corr = e.volatile_corrected.max(e.aggregate_corrected);
        let unc = e.volatile_uncorrected.max(e.aggregate_uncorrected);
        if unc > t.ecc_sram_uncorrectable_max {
            (
                Severity::Critical,
                format!(
                    "{v}: uncorrectable above {} (status.ecc_sram_uncorrectable_max)",
                    t.ecc_sram_uncorrectable_max
                ),
                Some(format!(
                    "{}; run field diagnostics, RMA if they fail",
                    c.reset()
                )),
            )
        } else if corr > t.ecc_sram_correctable_max {
            (
                Severity::Critical,
                format!("{v}: correctable above {} (status.ecc_sram_correctable_max)", t.ecc_sram_correctable_max),
                Some("drain the GPU and run field diagnostics; RMA if they fail (AzNHC fails the node here)".into()),
            )
        } else if e.threshold_exceeded {
            (
                Severity::Critical,
                format!("{v}: NVIDIA's SRAM error threshold exceeded"),
                Some("NVIDIA: run field diagnostics (the Xid catalog's XID 48 workflow); RMA if they fail".into()),
            )
        } else {
            (Severity::Ok, v, None)
        }
    })
}

/// DRAM (HBM) ECC against AzNHC's threshold.
fn ecc_dram(c: &GpuCtx<'_>) -> Judged {
    let max = c.t.ecc_dram_max;
    on(&c.g.ecc_dram, |e: &EccCounts| {
        let n = |x: Option<u64>| x.map_or("n/a".to_string(), |x| x.to_string());
        let v = format!(
            "DRAM correctable {} volatile / {} aggregate, uncorrectable {} / {}",
            n(e.volatile_corrected),
            n(e.aggregate_corrected),
            n(e.volatile_uncorrected),
            n(e.aggregate_uncorrected)
        );
        let worst = [
            e.volatile_corrected,
            e.aggregate_corrected,
            e.volatile_uncorrected,
            e.aggregate_uncorrected,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
        if worst > max {
            (
                Severity::Critical,
                format!("{v}: above {max} (status.ecc_dram_max)"),
                Some(
                    "drain the GPU, check row remapping, run field diagnostics; RMA if they fail"
                        .into(),
                ),
            )
        } else {
            (Severity::Ok, v, None)
        }
    })
}

/// The PCIe replay counter as a rate against the kept baseline.
fn pcie_replay(c: &GpuCtx<'_>) -> Judged {
    let max = c.t.pcie_replays_per_minute_max;
    on(&c.g.pcie_replay_counter, |n| {
        let Some((before, secs)) = c.before else {
            return (
                Severity::Ok,
                format!(
                    "{n} replays since the driver loaded; first reading, a rate from the next run"
                ),
                None,
            );
        };
        match rate(before.pcie_replays.map(u64::from), Some(u64::from(*n)), secs) {
            Some(per_s) if per_s * 60.0 > max => (
                Severity::Warning,
                format!(
                    "{:.1} replays/min over {secs:.0} s (> {max}, status.pcie_replays_per_minute_max); {n} since the driver loaded",
                    per_s * 60.0
                ),
                Some("the PCIe link retries packets: reseat the card or riser, check the slot and retimers; compare AER counters".into()),
            ),
            Some(per_s) => (
                Severity::Ok,
                format!("{:.1} replays/min over {secs:.0} s; {n} since the driver loaded", per_s * 60.0),
                None,
            ),
            None => (
                Severity::Ok,
                format!("{n} replays since the driver loaded; counter reset since the last reading, a rate from the next run"),
                None,
            ),
        }
    })
}

/// `nvmlDeviceValidateInforom` (DCGM level 1).
fn inforom(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.inforom, |i| {
        let ver = i
            .image_version
            .as_deref()
            .map(|v| format!(" (image {v})"))
            .unwrap_or_default();
        if i.valid {
            let when = if i.cached {
                " (validated by an earlier run this hour)"
            } else {
                ""
            };
            (Severity::Ok, format!("InfoROM valid{ver}{when}"), None)
        } else {
            (
                Severity::Critical,
                format!("InfoROM corrupted{ver}"),
                Some("the GPU's ECC, page-retirement and row-remap records live there: drain the GPU and contact support (reflash or RMA)".into()),
            )
        }
    })
}

/// GSP firmware mode (and version), reported; off where it is on by default is a WARNING.
fn gsp(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.gsp_firmware, |f| {
        let ver = f
            .version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default();
        match (f.enabled, f.default_enabled) {
            (true, _) => (Severity::Ok, format!("GSP firmware{ver} enabled"), None),
            (false, true) => (
                Severity::Warning,
                "GSP firmware disabled, though on by default for this GPU".into(),
                Some("remove NVreg_EnableGpuFirmware=0 from the nvidia module options (open kernel modules need GSP) and reload the driver".into()),
            ),
            (false, false) => (Severity::Ok, "GSP firmware off (not the default here)".into(), None),
        }
    })
}

fn retired_pages(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.retired_pages_pending, |p| {
        if *p {
            (
                Severity::Warning,
                "page retirement pending".into(),
                Some(format!(
                    "retirement takes effect after a reset: {}",
                    c.reset()
                )),
            )
        } else {
            (Severity::Ok, "no page retirement pending".into(), None)
        }
    })
}

fn remap_failure(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.remapped_rows, |m| {
        if m.failure {
            (
                Severity::Critical,
                "row remapping failed".into(),
                Some("the GPU has no spare rows left: drain it and replace it (RMA)".into()),
            )
        } else {
            (Severity::Ok, "no remap failure".into(), None)
        }
    })
}

fn remap_pending(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.remapped_rows, |m| {
        if m.pending {
            (
                Severity::Warning,
                "row remap pending".into(),
                Some(format!(
                    "the remap takes effect after a reset: {}",
                    c.reset()
                )),
            )
        } else {
            (Severity::Ok, "no remap pending".into(), None)
        }
    })
}

fn remap_uncorrectable(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.remapped_rows, |m| {
        let v = format!(
            "{} uncorrectable, {} correctable rows remapped",
            m.uncorrectable, m.correctable
        );
        if m.uncorrectable > MAX_UNCORRECTABLE_REMAPPED_ROWS {
            (
                Severity::Critical,
                format!("{v} (> {MAX_UNCORRECTABLE_REMAPPED_ROWS})"),
                Some("past the replacement threshold: drain the GPU and RMA it".into()),
            )
        } else {
            (Severity::Ok, v, None)
        }
    })
}

fn recovery_action(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.recovery_action, |a| match a {
        0 => (Severity::Ok, "none".into(), None),
        1 => (
            Severity::Critical,
            "driver asks for a GPU reset".into(),
            Some(c.reset()),
        ),
        2 => (
            Severity::Critical,
            "driver asks for a node reboot".into(),
            Some("drain the node and reboot".into()),
        ),
        3 => (
            Severity::Warning,
            "driver asks to drain peer-to-peer traffic".into(),
            Some("stop P2P/NVLink jobs on this GPU, then reset it".into()),
        ),
        4 => (
            Severity::Critical,
            "driver asks to drain and reset".into(),
            Some(c.reset()),
        ),
        x => (
            Severity::Warning,
            format!("recovery action {x}"),
            Some("see NVIDIA's documentation for nvmlDeviceGpuRecoveryAction".into()),
        ),
    })
}

fn temperature(c: &GpuCtx<'_>) -> Judged {
    let slow = c.g.temperature_slowdown_c.value().copied();
    on(&c.g.temperature_c, |t| {
        let v = match slow {
            Some(s) => format!("{t} °C (slowdown {s} °C)"),
            None => format!("{t} °C"),
        };
        match slow {
            Some(s) if *t >= s => (
                Severity::Critical,
                v,
                Some(
                    "the GPU is throttling for heat: check fans, airflow, inlet temperature".into(),
                ),
            ),
            Some(s) if *t + TEMP_MARGIN_C >= s => (
                Severity::Warning,
                v,
                Some("close to thermal slowdown: check airflow".into()),
            ),
            _ => (Severity::Ok, v, None),
        }
    })
}

/// Clock event reasons that mean the clocks are held down by hardware or heat.
const CLOCKS_HELD_DOWN: &[(u64, &str)] = &[
    (reasons::HW_SLOWDOWN, "HW slowdown"),
    (reasons::HW_THERMAL, "HW thermal slowdown"),
    (reasons::HW_POWER_BRAKE, "HW power brake"),
    (reasons::SW_THERMAL, "SW thermal slowdown"),
];

fn clock_events(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.clock_event_reasons, |bits| {
        let bad: Vec<&str> = CLOCKS_HELD_DOWN
            .iter()
            .filter(|(bit, _)| bits & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        if bad.is_empty() {
            let state = if bits & reasons::GPU_IDLE != 0 {
                "idle"
            } else if bits & reasons::SW_POWER_CAP != 0 {
                "power capped (normal under load)"
            } else {
                "none"
            };
            (
                Severity::Ok,
                format!("clock events: {state} (0x{bits:x})"),
                None,
            )
        } else {
            (
                Severity::Warning,
                format!("clocks held down: {} (0x{bits:x})", bad.join(", ")),
                Some("check cooling, PSUs and the BMC's power-brake signal".into()),
            )
        }
    })
}

fn power_limit(c: &GpuCtx<'_>) -> Judged {
    let default = c.g.power_limit_default_mw.value().copied();
    on(&c.g.power_limit_enforced_mw, |enf| match default {
        Some(d) if *enf < d => (
            Severity::Warning,
            format!("enforced {} W below default {} W", enf / 1000, d / 1000),
            Some(format!(
                "if not intended: `nvidia-smi -i {} -pl {}`, and check the BMC's power capping",
                c.g.index,
                d / 1000
            )),
        ),
        Some(d) => (
            Severity::Ok,
            format!("enforced {} W (default {} W)", enf / 1000, d / 1000),
            None,
        ),
        None => (Severity::Ok, format!("enforced {} W", enf / 1000), None),
    })
}

/// PCIe link width and generation against their maximum; idle links downshift.
fn pcie(c: &GpuCtx<'_>) -> Judged {
    let g = c.g;
    let idle = g
        .clock_event_reasons
        .value()
        .is_some_and(|b| b & reasons::GPU_IDLE != 0);
    match (
        &g.pcie_gen_current,
        &g.pcie_gen_max,
        &g.pcie_width_current,
        &g.pcie_width_max,
    ) {
        (Reading::Value(cg), Reading::Value(mg), Reading::Value(cw), Reading::Value(mw)) => {
            let v = format!("Gen{cg} x{cw} (max Gen{mg} x{mw})");
            Judged::Verdict(if cw < mw {
                (
                    Severity::Warning,
                    format!("link narrower than it can: {v}"),
                    Some("reseat the card or riser; check the slot".into()),
                )
            } else if cg < mg && !idle {
                (
                    Severity::Warning,
                    format!("link below its generation under load: {v}"),
                    Some("check BIOS PCIe settings, risers, retimers".into()),
                )
            } else if cg < mg {
                (Severity::Ok, format!("{v}; idle links downshift"), None)
            } else {
                (Severity::Ok, v, None)
            })
        }
        (Reading::Error(e), ..) | (_, Reading::Error(e), ..) => Judged::Error(e.clone()),
        _ => Judged::NotSupported,
    }
}

fn persistence(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.persistence_mode, |p| {
        if *p {
            (Severity::Ok, "persistence mode on".into(), None)
        } else {
            (
                Severity::Warning,
                "persistence mode off".into(),
                Some("`systemctl enable --now nvidia-persistenced`".into()),
            )
        }
    })
}

fn mig(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.mig_mode, |m| {
        if m.current != m.pending {
            (
                Severity::Warning,
                format!(
                    "MIG {} now, {} after reset",
                    onoff(m.current != 0),
                    onoff(m.pending != 0)
                ),
                Some(format!(
                    "the MIG change takes effect after a reset: {}",
                    c.reset()
                )),
            )
        } else {
            (Severity::Ok, format!("MIG {}", onoff(m.current != 0)), None)
        }
    })
}

fn nvlink(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.nvlinks, |links| {
        nvlink_verdict(links, c.g.index, c.nvswitch, c.before, c.t)
    })
}

fn fabric(c: &GpuCtx<'_>) -> Judged {
    on(&c.g.fabric, |f| fabric_verdict_on(f, c.g.index, c.nvswitch))
}

fn c2c(c: &GpuCtx<'_>) -> Judged {
    let superchip =
        c.g.name
            .value()
            .is_some_and(|n| ["GH200", "GB200", "GB300"].iter().any(|s| n.contains(s)));
    on(&c.g.c2c, |x| c2c_verdict(x, c.g.index, superchip))
}

/// NVLink-C2C, the Grace CPU's coherent link to the GPU of a superchip: enabled, every link
/// active. A link down is CRITICAL (the GPU's memory coherence and its host bandwidth go over
/// it); C2C off is CRITICAL on a superchip (by its name: GH200, GB200, GB300), else n/a.
pub(crate) fn c2c_verdict(c: &C2c, index: u32, superchip: bool) -> Verdict {
    if !c.enabled {
        return if superchip {
            (
                Severity::Critical,
                "C2C disabled on a Grace superchip".into(),
                Some(format!(
                    "the Grace CPU–GPU link is off: `nvidia-smi c2c -s -i {index}`; check the driver's NVreg options and the firmware; drain and reboot; service if it stays off"
                )),
            )
        } else {
            (Severity::NotApplicable, "C2C not enabled".into(), None)
        };
    }
    let down: Vec<String> = c
        .links
        .iter()
        .filter(|l| !l.active)
        .map(|l| l.link.to_string())
        .collect();
    let active = c.links.len() - down.len();
    let mut v = if c.links.is_empty() {
        "C2C enabled (link count not reported)".to_string()
    } else {
        format!("C2C enabled, {active}/{} links active", c.links.len())
    };
    let mut bws: Vec<u64> = c
        .links
        .iter()
        .filter(|l| l.active)
        .filter_map(|l| l.max_bandwidth_mbps)
        .collect();
    bws.sort_unstable();
    bws.dedup();
    if let [bw] = bws.as_slice() {
        v.push_str(&format!(", {bw} MB/s each"));
    }
    if down.is_empty() {
        (Severity::Ok, v, None)
    } else {
        v.push_str(&format!("; down: link {}", down.join(",")));
        (
            Severity::Critical,
            v,
            Some(format!(
                "a C2C link is down: `nvidia-smi c2c -s -i {index}` and `nvidia-smi c2c -e -i {index}` (error counters); drain the node, reset the GPU or reboot; service if it stays down"
            )),
        )
    }
}

/// NVLink: every link up, error counters judged as rates. A link down is CRITICAL on an
/// NVSwitch (HGX) node, where every link must be up, else a WARNING. Replay and recovery
/// errors per minute and CRC errors per second on a link, since the kept baseline, above the
/// thresholds are a WARNING naming the links (DCGM's health watch); the totals since the
/// driver loaded are shown, never judged, and a first reading has no rate.
pub fn nvlink_verdict(
    links: &[NvLink],
    index: u32,
    nvswitch: bool,
    before: Option<(&GpuCounters, f64)>,
    t: &Thresholds,
) -> Verdict {
    if links.is_empty() {
        return (Severity::NotApplicable, "no NVLink".into(), None);
    }
    let inactive: Vec<String> = links
        .iter()
        .filter(|l| !l.active)
        .map(|l| l.link.to_string())
        .collect();
    let sum = |f: fn(&NvLink) -> Option<u64>| -> u64 { links.iter().filter_map(f).sum() };
    let mut v = format!(
        "{}/{} links active; errors since the driver loaded: replay {}, recovery {}, CRC flit {}, CRC data {}",
        links.len() - inactive.len(),
        links.len(),
        sum(|l| l.replay_errors),
        sum(|l| l.recovery_errors),
        sum(|l| l.crc_flit_errors),
        sum(|l| l.crc_data_errors)
    );
    if !inactive.is_empty() {
        v.push_str(&format!("; down: link {}", inactive.join(",")));
    }
    let mut fast: Vec<String> = Vec::new();
    match before {
        None => v.push_str("; first reading, rates from the next run"),
        Some((b, secs)) => {
            fast = fast_links(links, b, secs, t);
            if fast.is_empty() {
                v.push_str(&format!(
                    "; no error rate above its threshold over {secs:.0} s"
                ));
            } else {
                v.push_str(&format!("; over {secs:.0} s: {}", fast.join("; ")));
            }
        }
    }
    if !inactive.is_empty() {
        let (sev, hint) = if nvswitch {
            (
                Severity::Critical,
                format!(
                    "drain the node: on an NVSwitch system every link must be up, or the GPU loses NVLink bandwidth or drops out of the fabric; `nvidia-smi nvlink -s -i {index}`, then reset the GPU (`nvidia-smi -r -i {index}`) or reboot; if the link stays down, the baseboard or GPU needs service"
                ),
            )
        } else {
            (
                Severity::Warning,
                format!(
                    "check the NVLink bridge; `nvidia-smi nvlink -s -i {index}`; reset the GPU (`nvidia-smi -r -i {index}`)"
                ),
            )
        };
        (sev, v, Some(hint))
    } else if !fast.is_empty() {
        (
            Severity::Warning,
            v,
            Some(format!(
                "NVLink errors are growing: `nvidia-smi nvlink -e -i {index}`; run DCGM diagnostics and service the link if they keep rising"
            )),
        )
    } else {
        (Severity::Ok, v, None)
    }
}

/// The links whose replay+recovery errors per minute or CRC errors per second, since the
/// baseline `b` taken `secs` ago, are above the thresholds, each with its rates.
fn fast_links(links: &[NvLink], b: &GpuCounters, secs: f64, t: &Thresholds) -> Vec<String> {
    let mut fast = Vec::new();
    for l in links {
        let Some(o) = b.nvlink.get(&l.link) else {
            continue;
        };
        let add = |x: Option<u64>, y: Option<u64>| match (x, y) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        let rr = rate(
            add(o.replay, o.recovery),
            add(l.replay_errors, l.recovery_errors),
            secs,
        )
        .map(|r| r * 60.0);
        let crc = rate(
            add(o.crc_flit, o.crc_data),
            add(l.crc_flit_errors, l.crc_data_errors),
            secs,
        );
        let mut parts = Vec::new();
        if let Some(r) = rr.filter(|r| *r > t.nvlink_replay_recovery_per_minute_max) {
            parts.push(format!(
                "replay+recovery {r:.1}/min (> {}, status.nvlink_replay_recovery_per_minute_max)",
                t.nvlink_replay_recovery_per_minute_max
            ));
        }
        if let Some(r) = crc.filter(|r| *r > t.nvlink_crc_errors_per_second_max) {
            parts.push(format!(
                "CRC {r:.1}/s (> {}, status.nvlink_crc_errors_per_second_max)",
                t.nvlink_crc_errors_per_second_max
            ));
        }
        if !parts.is_empty() {
            fast.push(format!("link {} {}", l.link, parts.join(", ")));
        }
    }
    fast
}

/// One field of NVML's fabric health mask.
fn mask_field(mask: u32, shift: u32, width: u32) -> u32 {
    (mask >> shift) & width
}

/// NVML's fabric health mask, field by field.
struct FabricHealth {
    degraded: bool,
    route_recovery: bool,
    route_unhealthy: bool,
    timeout_recovery: bool,
    /// The incorrect configuration it names, if any.
    config: Option<&'static str>,
}

impl FabricHealth {
    fn of(mask: u32) -> FabricHealth {
        const TRUE: u32 = 1;
        FabricHealth {
            degraded: mask_field(mask, 0, 0x3) == TRUE,
            route_recovery: mask_field(mask, 2, 0x3) == TRUE,
            route_unhealthy: mask_field(mask, 4, 0x3) == TRUE,
            timeout_recovery: mask_field(mask, 6, 0x3) == TRUE,
            config: match mask_field(mask, 8, 0xf) {
                2 => Some("incorrect system GUID"),
                3 => Some("incorrect chassis serial number"),
                4 => Some("no partition"),
                5 => Some("insufficient NVLinks"),
                _ => None,
            },
        }
    }
}

/// Fabric registration (NVSwitch systems): state completed with status success is OK.
pub fn fabric_verdict(f: &Fabric, index: u32) -> (Severity, String, Option<String>) {
    fabric_verdict_on(f, index, true)
}

/// [`fabric_verdict`], its advice for where the fabric is managed: on a node with NVSwitches
/// on PCI (HGX) by its Fabric Manager; on a node without (a GB200/GB300 NVL72 compute tray,
/// whose NVSwitches are in the rack's NVLink switch trays) by the switch trays' NMX-Controller.
/// Version 3's health summary is judged too: unhealthy CRITICAL, limited capacity WARNING.
pub(crate) fn fabric_verdict_on(f: &Fabric, index: u32, nvswitch: bool) -> Verdict {
    let (sev, mut value, hint) = fabric_registration(f, index, nvswitch);
    if f.state != 3 || f.status != 0 {
        return (sev, value, hint);
    }
    match f.health_summary {
        Some(2) if sev < Severity::Critical => (
            Severity::Critical,
            format!("{value}; health summary unhealthy"),
            Some(fabric_where(nvswitch).into()),
        ),
        Some(3) if sev < Severity::Warning => (
            Severity::Warning,
            format!("{value}; health summary limited capacity"),
            Some(fabric_where(nvswitch).into()),
        ),
        _ => {
            if sev == Severity::Ok {
                value = fabric_ok_value(f);
            }
            (sev, value, hint)
        }
    }
}

/// What an OK registration shows: clique, cluster and health summary where NVML gave them.
fn fabric_ok_value(f: &Fabric) -> String {
    let mut v = format!(
        "fabric registered (state completed, status success, clique {}",
        f.clique_id
    );
    if !f.cluster_uuid.is_empty() && f.cluster_uuid.chars().any(|c| c != '0') {
        v.push_str(&format!(", cluster {}", f.cluster_uuid));
    }
    if f.health_summary == Some(1) {
        v.push_str(", health summary healthy");
    }
    v.push(')');
    v
}

/// Where the fabric is managed, to look when it is not healthy.
fn fabric_where(nvswitch: bool) -> &'static str {
    if nvswitch {
        "check nvidia-fabricmanager (`systemctl status nvidia-fabricmanager`, /var/log/fabricmanager.log): it must run at the driver's exact version"
    } else {
        "no NVSwitch is on this node's PCI (an NVL72 compute tray): the rack's NVLink switch trays manage the fabric; check their NMX-Controller and this tray's NVLink cabling (`nvidia-smi nvlink -s`), and IMEX (`nvidia-imex-ctl -N`)"
    }
}

/// The registration's state: completed (judged by [`fabric_completed`]), not started, in
/// progress.
fn fabric_registration(f: &Fabric, index: u32, nvswitch: bool) -> Verdict {
    let fm_log = fabric_where(nvswitch);
    let start = if nvswitch {
        "start it (`systemctl enable --now nvidia-fabricmanager`)"
    } else {
        "the switch trays must add this GPU to an NVLink partition"
    };
    match f.state {
        3 => fabric_completed(f, index, fm_log),
        1 => (
            Severity::Critical,
            "fabric registration not started".into(),
            Some(format!(
                "{fm_log}; {start}; CUDA fails on this GPU until the fabric registers"
            )),
        ),
        2 => (
            Severity::Warning,
            "fabric registration in progress".into(),
            Some(format!(
                "normal for a minute after boot or a fabric manager start; if it stays: {fm_log}"
            )),
        ),
        x => (Severity::Unknown, format!("fabric state {x}"), None),
    }
}

/// A completed registration: its status, then its health mask.
fn fabric_completed(f: &Fabric, index: u32, fm_log: &str) -> Verdict {
    let FabricHealth {
        degraded,
        route_recovery,
        route_unhealthy,
        timeout_recovery,
        config,
    } = FabricHealth::of(f.health_mask);
    if f.status != 0 {
        let name = match nvml_wrapper::error::nvml_try(f.status) {
            Ok(()) => String::new(),
            Err(e) => format!(": {}", error_name(&e)),
        };
        return (
            Severity::Critical,
            format!(
                "fabric registration completed with a failure (NVML status {}{name})",
                f.status
            ),
            Some(format!(
                "{fm_log}; restart it, then reset GPU {index} (`nvidia-smi -r -i {index}`) or reboot"
            )),
        );
    }
    if route_unhealthy || config.is_some() {
        return (
            Severity::Critical,
            format!(
                "fabric registered but {}",
                config.unwrap_or("its route is unhealthy")
            ),
            Some(format!(
                "{fm_log}; see the NVSwitch links; drain and reboot"
            )),
        );
    }
    let what: Vec<&str> = [
        (degraded, "bandwidth degraded"),
        (route_recovery, "route recovery in progress"),
        (timeout_recovery, "access-timeout recovery in progress"),
    ]
    .into_iter()
    .filter_map(|(on, w)| on.then_some(w))
    .collect();
    if !what.is_empty() {
        return (
            Severity::Warning,
            format!("fabric registered; {}", what.join(", ")),
            Some(format!("check the NVSwitch links; {fm_log}")),
        );
    }
    (
        Severity::Ok,
        format!(
            "fabric registered (state completed, status success, clique {})",
            f.clique_id
        ),
        None,
    )
}

/// NVML's error as a short name (`NotSupported`, `InsufficientResources`).
fn error_name(e: &nvml_wrapper::error::NvmlError) -> String {
    let dbg = format!("{e:?}");
    dbg.split('(').next().unwrap_or(&dbg).to_string()
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}
