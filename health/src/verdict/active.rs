//! The active checks' verdicts (`gpuhost status --active`): the figures the child measured
//! (`gpuhost_active::ActiveReport`) against the reference table (`gpuhost_nvidia::perf`).
//!
//! - `active.run`: the run itself. A child that could not use the driver, was stopped by the
//!   time limit or a signal, or had to be killed is UNKNOWN (the GPUs were not all judged).
//! - per GPU, `gpu.active.hbm_bandwidth`, `gpu.active.hbm_integrity`, `gpu.active.pcie`,
//!   `gpu.active.compute`: CRITICAL for any wrong answer (a word of HBM, a compute result) and
//!   for a figure below its floor; WARNING for a figure that cannot be judged (no reference for
//!   the model) and for a GPU left alone because compute processes run on it; n/a with MIG.
//! - `gpu.active.p2p`: each ordered pair of GPUs (the source GPU's check).
//!
//! What the judging computed beside the verdicts (each figure with its floor and reference) is
//! handed to the Prometheus renderer as [`ActiveFigure`]s, so nothing is judged twice.

use gpuhost_active::{ActiveReport, Compute, Conditions, GpuActive, PeerCopy, Skip};
use gpuhost_nvidia::perf::{self, Reference};

use super::model::{ActiveFigure, GpuRef, Severity};
use super::out::{advise, key, na, ok, Out, Verdict};
use crate::snapshot::{ActiveRun, Snapshot};

const GB: f64 = 1e9;
const TERA: f64 = 1e12;
const DRAIN: &str = "drain the node and take the GPU out of service: reset it (`nvidia-smi -r` once idle) and run `gpuhost status --active` again; if it repeats, run `dcgmi diag -r 3` and RMA it";

/// The active checks of a snapshot that has them.
pub(super) fn checks(
    out: &mut Out,
    s: &Snapshot,
    refs: &[GpuRef],
    figures: &mut Vec<ActiveFigure>,
) {
    let Some(a) = &s.active else { return };
    out.say("active.run", "active", None, run_verdict(a));
    let Some(r) = &a.report else { return };
    for g in &r.gpus {
        let gref = refs
            .iter()
            .find(|x| key(&x.pci_bus_id) == key(&g.pci_bus_id))
            .cloned()
            .unwrap_or_else(|| GpuRef {
                index: None,
                uuid: g.uuid.clone(),
                pci_bus_id: g.pci_bus_id.clone(),
            });
        gpu(out, s, a, g, &gref, figures);
    }
    for p in &r.p2p {
        let gref = refs
            .iter()
            .find(|x| key(&x.pci_bus_id) == key(&p.from))
            .cloned()
            .unwrap_or_else(|| GpuRef {
                index: None,
                uuid: None,
                pci_bus_id: p.from.clone(),
            });
        out.say(
            "gpu.active.p2p",
            "active",
            Some(&gref),
            p2p(s, r, p, &gref, figures),
        );
    }
}

/// How old a kept result is, for its values: "" when this run measured it.
fn age(a: &ActiveRun) -> String {
    match a.age_s {
        Some(s) if s >= 3600 => format!(" (measured {}h{:02}m ago)", s / 3600, s % 3600 / 60),
        Some(s) => format!(" (measured {}m{:02}s ago)", s / 60, s % 60),
        None => String::new(),
    }
}

fn run_verdict(a: &ActiveRun) -> Verdict {
    if let Some(e) = &a.error {
        return advise(
            Severity::Unknown,
            format!("the active checks gave no report: {e}"),
            "see the reason; a child killed past its time limit points at a hung GPU or driver: look at `journalctl -k` for XIDs",
        );
    }
    let Some(r) = &a.report else {
        return advise(
            Severity::Unknown,
            "the active checks gave no report",
            "run `gpuhost status --active` again",
        );
    };
    if let Some(e) = &r.error {
        return advise(
            Severity::Unknown,
            format!("the active checks could not run: {e}"),
            "gpuhost's checks need only NVIDIA's driver (libcuda.so.1, R535 or later): install or repair it (`gpuhost apply`)",
        );
    }
    let checked = r
        .gpus
        .iter()
        .filter(|g| g.skipped.is_none() && g.reason.is_none())
        .count();
    let value = format!(
        "{checked} of {} GPU(s) checked in {:.1} s (limit {} s), peak memory {} MiB, driver {}{}",
        r.gpus.len(),
        r.wall_ms / 1e3,
        r.limit_s,
        r.peak_rss_kib.unwrap_or(0) / 1024,
        r.driver_version.as_deref().unwrap_or("?"),
        age(a)
    );
    if let Some(why) = &r.stopped {
        return advise(
            Severity::Unknown,
            format!("stopped by {why} before every check finished: {value}; everything held was freed ({} left)", r.live_at_exit),
            "give the checks more time (--active-seconds), or run them when nothing stops them",
        );
    }
    if r.live_at_exit != 0 {
        return advise(
            Severity::Unknown,
            format!(
                "{value}; {} driver object(s) were still held at exit",
                r.live_at_exit
            ),
            "report this as a gpuhost bug; the driver frees them with the process",
        );
    }
    if let Some(f) = &r.injected {
        return advise(
            Severity::Warning,
            format!("{value}; a fault was injected ({f}): a test run"),
            "a test run: its figures are meant to fail",
        );
    }
    ok(value)
}

fn model(g: &GpuActive) -> Option<String> {
    g.pci_device_id.map(|d| format!("{d:#06x}"))
}

/// The figures one GPU's checks hand the renderers.
struct Figures<'a> {
    out: &'a mut Vec<ActiveFigure>,
    gpu: GpuRef,
    model: Option<String>,
}

impl Figures<'_> {
    fn add(
        &mut self,
        figure: &'static str,
        value: f64,
        floor: Option<f64>,
        reference: Option<f64>,
        c: &Conditions,
    ) {
        self.out.push(ActiveFigure {
            gpu: self.gpu.clone(),
            figure,
            value,
            floor,
            reference,
            peer: None,
            model: self.model.clone(),
            conditions: c.clone(),
        })
    }
}

/// A check that has no figures: why (the GPU's reason, or the stopped run).
fn not_done(g: &GpuActive) -> Verdict {
    let why = match (&g.reason, g.skipped) {
        (Some(r), _) => r.clone(),
        (None, Some(Skip::Stopped)) => "not finished: the run was stopped".into(),
        _ => "not run".into(),
    };
    advise(
        Severity::Unknown,
        why,
        "see active.run; run `gpuhost status --active` again",
    )
}

/// "no reference for this GPU" for a model the table does not have.
fn unjudged(g: &GpuActive) -> String {
    format!(
        "; no reference for this GPU ({} {}): measured, not judged",
        g.name,
        model(g).unwrap_or_else(|| "unknown device".into())
    )
}

fn gpu(
    out: &mut Out,
    s: &Snapshot,
    a: &ActiveRun,
    g: &GpuActive,
    gref: &GpuRef,
    figures: &mut Vec<ActiveFigure>,
) {
    let say = |out: &mut Out, id: &str, v: Verdict| out.say(id, "active", Some(gref), v);
    match g.skipped {
        Some(Skip::Mig) => {
            say(
                out,
                "gpu.active",
                na(g.reason
                    .clone()
                    .unwrap_or_else(|| "MIG mode is enabled".into())),
            );
            return;
        }
        Some(Skip::Busy) => {
            say(
                out,
                "gpu.active",
                advise(
                    Severity::Warning,
                    g.reason.clone().unwrap_or_else(|| "compute processes run on it: not touched".into()),
                    "run the checks when the GPU is idle (drain it first), or add --force to check it beside its work",
                ),
            );
            return;
        }
        _ => {}
    }
    let reference = g.pci_device_id.and_then(perf::reference);
    let mut fig = Figures {
        out: figures,
        gpu: gref.clone(),
        model: model(g),
    };
    let when = age(a);
    let v = match &g.hbm {
        None => not_done(g),
        Some(h) => hbm(g, h, reference, &mut fig, &when),
    };
    say(out, "gpu.active.hbm_bandwidth", v);
    let v = match g.compute.is_empty() {
        true => not_done(g),
        false => compute(g, reference, &mut fig, &when),
    };
    say(out, "gpu.active.compute", v);
    let v = match &g.integrity {
        None => not_done(g),
        Some(i) => integrity(i, &mut fig, &when),
    };
    say(out, "gpu.active.hbm_integrity", v);
    let v = match &g.pcie {
        None => not_done(g),
        Some(p) => pcie(s, g, gref, p, &mut fig, &when),
    };
    say(out, "gpu.active.pcie", v);
}

fn hbm(
    g: &GpuActive,
    h: &gpuhost_active::HbmBandwidth,
    reference: Option<&Reference>,
    fig: &mut Figures<'_>,
    when: &str,
) -> Verdict {
    let floor = reference.map(|r| r.hbm_gbps * GB * perf::HBM_FLOOR);
    fig.add(
        "hbm_copy",
        h.kernel_gbps * GB,
        floor,
        reference.map(|r| r.hbm_gbps * GB),
        &h.conditions,
    );
    fig.add(
        "hbm_memcpy",
        h.dtod_gbps * GB,
        None,
        reference.map(|r| r.hbm_gbps * GB),
        &h.conditions,
    );
    let value = format!(
        "copy kernel {:.0} GB/s, cuMemcpyDtoD {:.0} GB/s ({:.2}×), {} MiB buffers, best of {}",
        h.kernel_gbps,
        h.dtod_gbps,
        h.kernel_gbps / h.dtod_gbps.max(1e-9),
        h.buffer_bytes >> 20,
        h.iterations
    );
    let Some(r) = reference else {
        return advise(
            Severity::Warning,
            value + &unjudged(g) + when,
            "add the model to gpuhost_nvidia::perf with its datasheet figures",
        );
    };
    let value = value
        + &format!(
            "; {:.2}× the {} peak of {:.0} GB/s (floor {:.2}×){}{}",
            h.kernel_gbps / r.hbm_gbps,
            r.name,
            r.hbm_gbps,
            perf::HBM_FLOOR,
            conditions_text(&h.conditions),
            when
        );
    if h.kernel_gbps < r.hbm_gbps * perf::HBM_FLOOR {
        advise(
            Severity::Critical,
            format!("HBM slower than a healthy GPU: {value}"),
            DRAIN,
        )
    } else {
        ok(value)
    }
}

fn integrity(i: &gpuhost_active::HbmIntegrity, fig: &mut Figures<'_>, when: &str) -> Verdict {
    fig.add("hbm_integrity", i.gbps * GB, None, None, &i.conditions);
    let share = i.tested_bytes as f64 / (i.free_bytes.max(1)) as f64;
    let value = format!(
        "{:.1} GiB ({:.0}% of the free memory) written and read back with {} pattern(s) ({}): {} word(s) wrong{}",
        i.tested_bytes as f64 / f64::from(1u32 << 30),
        share * 100.0,
        i.patterns.len(),
        i.patterns.join(", "),
        i.errors,
        when
    );
    if i.errors > 0 {
        advise(
            Severity::Critical,
            format!(
                "{value}, the first at device address {:#x}",
                i.first_bad_address.unwrap_or(0)
            ),
            format!("{DRAIN}; look at its remapped rows (`nvidia-smi -q -d ROW_REMAPPER`)"),
        )
    } else if share < 0.75 {
        advise(
            Severity::Warning,
            value,
            "only part of the memory was free: run the checks when the GPU is idle",
        )
    } else {
        ok(value)
    }
}

fn conditions_text(c: &Conditions) -> String {
    let mut parts = Vec::new();
    if let Some(x) = c.sm_clock_mhz {
        parts.push(format!("SM {x} MHz"));
    }
    if let Some(x) = c.mem_clock_mhz {
        parts.push(format!("memory {x} MHz"));
    }
    if let Some(x) = c.temperature_c {
        parts.push(format!("{x} °C"));
    }
    if let Some(x) = c.power_mw {
        parts.push(format!("{} W", x / 1000));
    }
    let limiting = c
        .clock_event_reasons
        .map(limiting_reasons)
        .unwrap_or_default();
    if !limiting.is_empty() {
        parts.push(format!("clocks held by {}", limiting.join(", ")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" [{}]", parts.join(", "))
    }
}

/// The clock event reasons that lower clocks (idle and application-clock settings aside).
fn limiting_reasons(bits: u64) -> Vec<&'static str> {
    use crate::snapshot::reasons::*;
    [
        (SW_POWER_CAP, "the power cap"),
        (HW_SLOWDOWN, "hardware slowdown"),
        (SW_THERMAL, "software thermal slowdown"),
        (HW_THERMAL, "hardware thermal slowdown"),
        (HW_POWER_BRAKE, "the power brake"),
    ]
    .iter()
    .filter(|(b, _)| bits & b != 0)
    .map(|(_, n)| *n)
    .collect()
}

fn compute(
    g: &GpuActive,
    reference: Option<&Reference>,
    fig: &mut Figures<'_>,
    when: &str,
) -> Verdict {
    let wrong: Vec<&Compute> = g.compute.iter().filter(|c| c.mismatches > 0).collect();
    let results: u64 = g.compute.iter().map(|c| c.results).sum();
    let mut rates = Vec::new();
    let mut slow = Vec::new();
    for c in &g.compute {
        let Some(t) = c.tflops else { continue };
        let (name, peak) = match c.precision.as_str() {
            "fp32" => ("fp32", reference.map(|r| r.fp32_tflops)),
            _ => ("fp64", reference.map(|r| r.fp64_tflops)),
        };
        fig.add(
            name,
            t * TERA,
            peak.map(|p| p * TERA * perf::COMPUTE_FLOOR),
            peak.map(|p| p * TERA),
            &c.conditions,
        );
        match peak {
            Some(p) => {
                rates.push(format!(
                    "{} {t:.1} TFLOPS ({:.2}× peak {p})",
                    name.to_uppercase(),
                    t / p
                ));
                if t < p * perf::COMPUTE_FLOOR {
                    slow.push(format!(
                        "{} at {:.2}× peak{}",
                        name.to_uppercase(),
                        t / p,
                        conditions_text(&c.conditions)
                    ));
                }
            }
            None => rates.push(format!("{} {t:.1} TFLOPS", name.to_uppercase())),
        }
    }
    if let Some(first) = wrong.first() {
        let m = first.first_mismatch.clone().unwrap_or_default();
        return advise(
            Severity::Critical,
            format!(
                "silent data corruption: {} — {} of {} results of {} differ from the known answer (result #{}: expected {}, got {}){when}",
                wrong.iter().map(|c| c.kernel.as_str()).collect::<Vec<_>>().join(", "),
                first.mismatches,
                first.results,
                first.kernel,
                m.index,
                m.expected,
                m.got
            ),
            DRAIN,
        );
    }
    let value = format!(
        "{} results of {} kernels exact; {}{when}",
        results,
        g.compute.len(),
        rates.join(", ")
    );
    match reference {
        None => advise(
            Severity::Warning,
            format!("{value}; no reference for this GPU ({}): rates measured, not judged", g.name),
            "add the model to gpuhost_nvidia::perf with its datasheet figures",
        ),
        Some(_) if !slow.is_empty() => advise(
            Severity::Warning,
            format!("{value}; below {:.2}× of peak: {}", perf::COMPUTE_FLOOR, slow.join("; ")),
            "look at the clock event reasons: cooling, power delivery, or a power cap set on the node",
        ),
        Some(_) => ok(value),
    }
}

fn pcie(
    s: &Snapshot,
    g: &GpuActive,
    gref: &GpuRef,
    p: &gpuhost_active::Pcie,
    fig: &mut Figures<'_>,
    when: &str,
) -> Verdict {
    let nv = gref
        .index
        .and_then(|i| s.nvml.gpus.iter().find(|x| x.index == i));
    let gen_max = g
        .setting
        .pcie_gen_max
        .or_else(|| nv.and_then(|x| x.pcie_gen_max.value().copied()));
    let width_max = g
        .setting
        .pcie_width_max
        .or_else(|| nv.and_then(|x| x.pcie_width_max.value().copied()));
    let (gen_now, width_now) = (p.conditions.pcie_gen, p.conditions.pcie_width);
    let link = match (gen_max, width_max) {
        (Some(gm), Some(wm)) => perf::pcie_link_gbps(gm, wm),
        _ => None,
    };
    let floor = link.map(|l| l * perf::PCIE_FLOOR);
    fig.add(
        "pcie_h2d",
        p.h2d_gbps * GB,
        floor.map(|f| f * GB),
        link.map(|l| l * GB),
        &p.conditions,
    );
    fig.add(
        "pcie_d2h",
        p.d2h_gbps * GB,
        floor.map(|f| f * GB),
        link.map(|l| l * GB),
        &p.conditions,
    );
    let now = match (gen_now, width_now) {
        (Some(gn), Some(wn)) => format!("Gen{gn} x{wn}"),
        _ => "not read".into(),
    };
    let mut value = format!(
        "pinned host→GPU {:.1} GB/s, GPU→host {:.1} GB/s (median of {}, {} MiB); link during the copy {now}",
        p.h2d_gbps,
        p.d2h_gbps,
        p.h2d_samples.len(),
        p.bytes >> 20
    );
    let (Some(gm), Some(wm), Some(link), Some(floor)) = (gen_max, width_max, link, floor) else {
        return advise(
            Severity::Warning,
            format!("{value}; the link's generation and width are unknown: not judged{when}"),
            "NVML could not read the PCIe link: see pci.link",
        );
    };
    value += &format!(
        "; floor {floor:.1} GB/s ({:.2}× of Gen{gm} x{wm}'s {link:.1}){when}",
        perf::PCIE_FLOOR
    );
    let down = matches!((gen_now, width_now), (Some(gn), Some(wn)) if gn < gm || wn < wm);
    let slow = p.h2d_gbps.min(p.d2h_gbps) < floor;
    match (slow, down) {
        (true, true) => advise(
            Severity::Critical,
            format!("the link trained below what it supports ({now}, not Gen{gm} x{wm}): {value}"),
            "a down-trained link: reseat the GPU or its riser, check the slot and cable; `lspci -vv` shows LnkSta against LnkCap",
        ),
        (true, false) => advise(Severity::Critical, format!("PCIe copies below the floor: {value}"), "the link runs at full width and speed but moves too little: check the PCIe switch and the NUMA placement of the host memory, then the GPU"),
        (false, true) => advise(Severity::Warning, format!("the link runs at {now}, below Gen{gm} x{wm}: {value}"), "reseat the GPU or its riser; `lspci -vv` shows LnkSta against LnkCap"),
        (false, false) => ok(value),
    }
}

fn p2p(
    s: &Snapshot,
    r: &ActiveReport,
    p: &PeerCopy,
    gref: &GpuRef,
    figures: &mut Vec<ActiveFigure>,
) -> Verdict {
    if let Some(e) = &p.error {
        return advise(
            Severity::Unknown,
            format!("copy to {}: {e}", p.to),
            "see the reason",
        );
    }
    let from = r.gpus.iter().find(|g| g.pci_bus_id == p.from);
    let reference = from.and_then(|g| g.pci_device_id).and_then(perf::reference);
    if p.from == p.to {
        return na(format!(
            "GPU to itself through the peer-to-peer path (a test): {:.1} GB/s, not judged",
            p.gbps
        ));
    }
    let nv = gref
        .index
        .and_then(|i| s.nvml.gpus.iter().find(|x| x.index == i));
    let nvlink = nv
        .and_then(|g| g.nvlinks.value())
        .is_some_and(|links| links.iter().any(|l| l.active));
    let setting = from.map(|g| &g.setting);
    let link = setting
        .and_then(|st| st.pcie_gen_max.zip(st.pcie_width_max))
        .and_then(|(gm, wm)| perf::pcie_link_gbps(gm, wm));
    let (floor, over) = match (
        p.peer_access,
        nvlink,
        reference.and_then(|r| r.nvlink_gbps),
        link,
    ) {
        (true, true, Some(nl), _) => (
            Some(nl * perf::NVLINK_FLOOR),
            format!("NVLink ({nl:.0} GB/s per direction)"),
        ),
        (true, false, _, Some(l)) => (
            Some(l * perf::PCIE_P2P_FLOOR),
            format!("PCIe peer to peer ({l:.1} GB/s link)"),
        ),
        (false, _, _, _) => (None, "host memory (no peer access)".into()),
        _ => (None, "an unknown path".into()),
    };
    figures.push(ActiveFigure {
        gpu: gref.clone(),
        figure: "p2p",
        value: p.gbps * GB,
        floor: floor.map(|f| f * GB),
        reference: None,
        peer: Some(p.to.clone()),
        model: from.and_then(model),
        conditions: Conditions::default(),
    });
    let value = format!("to {}: {:.1} GB/s over {over}", p.to, p.gbps);
    match floor {
        Some(f) if p.gbps < f => advise(Severity::Critical, format!("{value}, below the floor of {f:.1} GB/s"), "check `nvidia-smi topo -m` and `nvidia-smi nvlink -s`; a link down or degraded slows every collective"),
        Some(f) => ok(format!("{value} (floor {f:.1} GB/s)")),
        None => ok(format!("{value}: not judged")),
    }
}
