//! The three renderings of a status report: a compact table, JSON, and Prometheus text
//! (node_exporter textfile form).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::expect::Expect;
use crate::snapshot::{GpuSnapshot, ProbeStatus, Reading, Snapshot};
use crate::verdict::{overall, Check, GpuRef, GpuXids, Judgement, Severity};

/// JSON report schema version (see the crate docs).
pub(crate) const REPORT_SCHEMA: u32 = 1;

#[derive(Debug, Serialize)]
pub(crate) struct Report<'a> {
    pub(crate) schema_version: u32,
    pub(crate) status: &'static str,
    pub(crate) exit_code: i32,
    pub(crate) summary: BTreeMap<&'static str, usize>,
    pub(crate) expect: &'a Expect,
    pub(crate) checks: &'a [Check],
    pub(crate) snapshot: &'a Snapshot,
}

pub(crate) fn report<'a>(
    snapshot: &'a Snapshot,
    expect: &'a Expect,
    checks: &'a [Check],
) -> Report<'a> {
    let worst = overall(checks);
    Report {
        schema_version: REPORT_SCHEMA,
        status: worst.label(),
        exit_code: worst.exit_code(),
        summary: summary(checks),
        expect,
        checks,
        snapshot,
    }
}

fn summary(checks: &[Check]) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for s in [
        Severity::Ok,
        Severity::NotApplicable,
        Severity::Warning,
        Severity::Critical,
        Severity::Unknown,
    ] {
        m.insert(key(s), checks.iter().filter(|c| c.severity == s).count());
    }
    m
}

fn key(s: Severity) -> &'static str {
    match s {
        Severity::NotApplicable => "na",
        Severity::Ok => "ok",
        Severity::Warning => "warning",
        Severity::Unknown => "unknown",
        Severity::Critical => "critical",
    }
}

pub fn json(snapshot: &Snapshot, expect: &Expect, checks: &[Check]) -> String {
    serde_json::to_string_pretty(&report(snapshot, expect, checks))
        .unwrap_or_else(|e| format!("{{\"error\":\"cannot serialise the report: {e}\"}}"))
}

fn who(g: &Option<GpuRef>) -> String {
    match g {
        None => "host".into(),
        Some(r) => {
            let id = r.pci_bus_id.to_lowercase();
            let short = match id.split_once(':') {
                Some((dom, rest)) if dom.chars().all(|c| c == '0') => rest.to_string(),
                _ => id.clone(),
            };
            match r.index {
                Some(i) => format!("gpu{i} {short}"),
                None => format!("pci {short}"),
            }
        }
    }
}

/// One line of the table: one check group of one GPU (or of the host).
struct TableLine {
    sev: Severity,
    who: String,
    group: String,
    values: Vec<(Severity, String)>,
    na: Vec<String>,
    hints: Vec<String>,
    order: usize,
}

/// The first line says the overall state (Nagios plugin output); then one line per check
/// group per GPU, problems first.
pub fn table(checks: &[Check]) -> String {
    let mut lines = table_lines(checks);
    lines.sort_by(|a, b| b.sev.cmp(&a.sev).then(a.order.cmp(&b.order)));
    let worst = overall(checks);
    let counts = summary(checks);
    let headline = checks
        .iter()
        .filter(|c| c.severity > Severity::Ok)
        .fold(None::<&Check>, |acc, c| match acc {
            Some(a) if a.severity >= c.severity => Some(a),
            _ => Some(c),
        })
        .map(|c| format!("{}; ", c.value))
        .unwrap_or_default();
    // The counts are of checks; the table below folds them into one row per GPU and group.
    let mut s = format!(
        "gpuhost status {}: {headline}checks: {} critical, {} warning, {} unknown, {} ok, {} n/a (in {} rows)\n",
        worst.label(),
        counts["critical"],
        counts["warning"],
        counts["unknown"],
        counts["ok"],
        counts["na"],
        lines.len(),
    );
    let w_who = lines.iter().map(|l| l.who.len()).max().unwrap_or(4);
    let w_group = lines.iter().map(|l| l.group.len()).max().unwrap_or(5);
    for l in &lines {
        let _ = write!(
            s,
            "{:<8}  {:<w_who$}  {:<w_group$}  {}",
            l.sev.label(),
            l.who,
            l.group,
            if l.values.is_empty() {
                l.na.join("; ")
            } else {
                l.values
                    .iter()
                    .map(|v| v.1.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        );
        for h in &l.hints {
            let _ = write!(s, "\n{:<8}  {:<w_who$}  {:<w_group$}    -> {h}", "", "", "");
        }
        s.push('\n');
    }
    s
}

/// The checks grouped into lines, in the order each line first appears: the worst severity,
/// problems before OK values, n/a values kept apart, hints once each.
fn table_lines(checks: &[Check]) -> Vec<TableLine> {
    let mut lines: Vec<TableLine> = Vec::new();
    for (i, c) in checks.iter().enumerate() {
        let who = who(&c.gpu);
        let line = match lines
            .iter_mut()
            .position(|l| l.who == who && l.group == c.group)
        {
            Some(p) => &mut lines[p],
            None => {
                lines.push(TableLine {
                    sev: Severity::NotApplicable,
                    who,
                    group: c.group.clone(),
                    values: Vec::new(),
                    na: Vec::new(),
                    hints: Vec::new(),
                    order: i,
                });
                let last = lines.len() - 1;
                &mut lines[last]
            }
        };
        line.sev = line.sev.max(c.severity);
        // Problems first within a line; n/a values only when nothing else is there.
        if c.severity == Severity::NotApplicable {
            line.na.push(c.value.clone());
        } else if c.severity > Severity::Ok {
            let at = line
                .values
                .iter()
                .take_while(|v| v.0 > Severity::Ok)
                .count();
            line.values.insert(
                at,
                (c.severity, format!("{}: {}", c.severity.label(), c.value)),
            );
        } else {
            line.values.push((c.severity, c.value.clone()));
        }
        if let Some(h) = &c.hint {
            if !line.hints.contains(h) {
                line.hints.push(h.clone());
            }
        }
    }
    lines
}

/// Prometheus exposition text.
struct Prom {
    families: BTreeMap<&'static str, (&'static str, &'static str, Vec<String>)>,
    order: Vec<&'static str>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(ls: &[(&str, String)]) -> String {
    if ls.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = ls
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

impl Prom {
    fn add(
        &mut self,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        ls: &[(&str, String)],
        v: f64,
    ) {
        if !v.is_finite() {
            return;
        }
        let e = self.families.entry(name).or_insert_with(|| {
            self.order.push(name);
            (kind, help, Vec::new())
        });
        e.2.push(format!("{name}{} {}", labels(ls), fmt_num(v)));
    }

    fn render(&self) -> String {
        let mut s = String::new();
        for name in &self.order {
            if let Some((kind, help, samples)) = self.families.get(name) {
                let _ = writeln!(s, "# HELP {name} {help}");
                let _ = writeln!(s, "# TYPE {name} {kind}");
                for l in samples {
                    let _ = writeln!(s, "{l}");
                }
            }
        }
        s
    }
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn num<T: Copy + Into<f64>>(r: &Reading<T>) -> Option<f64> {
    r.value().map(|v| (*v).into())
}

fn num64(r: &Reading<u64>) -> Option<f64> {
    r.value().map(|v| *v as f64)
}

/// node_exporter textfile text: `gpuhost_` metrics, GPUs labelled by `uuid` and
/// `pci_bus_id`, no timestamps, unsupported values omitted. The checks and each GPU's XID
/// counts are the judge's ([`Judgement`]), read here, not judged again.
pub fn prometheus(s: &Snapshot, judged: &Judgement) -> String {
    let mut p = Prom {
        families: BTreeMap::new(),
        order: Vec::new(),
    };
    check_metrics(&mut p, &judged.checks);
    probe_metrics(&mut p, s);
    seen_metrics(&mut p, s);
    kernel_log_metrics(&mut p, s);
    if let Some(c) = &s.nvml.cuda {
        p.add(
            "gpuhost_cuda_init_up",
            "gauge",
            "1 when libcuda.so.1 loads and cuInit succeeds.",
            &[],
            if c.init_rc == Some(0) { 1.0 } else { 0.0 },
        );
    }
    for g in &s.nvml.gpus {
        let xids = judged.xids.iter().find(|x| x.index == g.index);
        gpu_metrics(&mut p, g, xids);
    }
    active_metrics(&mut p, s, &judged.active);
    p.render()
}

/// The active checks: each figure in base units (bytes or FLOP per second) with the floor it
/// was judged against and figure/floor (below 1: below the floor; the alert rule's input), the
/// wrong answers, and the conditions it was measured under, labelled so that a fleet compares
/// like with like (`model`: the PCI device ID).
fn active_metrics(p: &mut Prom, s: &Snapshot, figures: &[crate::verdict::ActiveFigure]) {
    let Some(a) = &s.active else { return };
    if let Some(r) = &a.report {
        active_run_metrics(p, r);
    }
    if let Some(age) = a.age_s {
        p.add(
            "gpuhost_active_age_seconds",
            "gauge",
            "Age of the kept active result this report shows.",
            &[],
            age as f64,
        );
    }
    for f in figures {
        active_figure_metrics(p, f);
    }
}

/// The run's own series and each GPU's wrong answers and settings.
fn active_run_metrics(p: &mut Prom, r: &gpuhost_active::ActiveReport) {
    p.add(
        "gpuhost_active_run_seconds",
        "gauge",
        "Wall time of the active checks' child, all GPUs together.",
        &[],
        r.wall_ms / 1e3,
    );
    p.add(
        "gpuhost_active_last_run_timestamp_seconds",
        "gauge",
        "Unix time the active checks started.",
        &[],
        r.started_at as f64,
    );
    if let Some(kib) = r.peak_rss_kib {
        p.add(
            "gpuhost_active_peak_rss_bytes",
            "gauge",
            "Peak resident memory of the active checks' child.",
            &[],
            kib as f64 * 1024.0,
        );
    }
    for g in &r.gpus {
        let base = [
            ("uuid", g.uuid.clone().unwrap_or_default()),
            ("pci_bus_id", g.pci_bus_id.clone()),
        ];
        if let Some(i) = &g.integrity {
            p.add("gpuhost_active_hbm_errors", "gauge", "Words of HBM that read back wrong in the integrity check (any is silent corruption).", &base, i.errors as f64);
            p.add(
                "gpuhost_active_hbm_tested_bytes",
                "gauge",
                "Bytes of HBM written and read back by the integrity check.",
                &base,
                i.tested_bytes as f64,
            );
        }
        for c in &g.compute {
            let mut ls = base.to_vec();
            ls.push(("kernel", c.kernel.clone()));
            p.add("gpuhost_active_compute_mismatches", "gauge", "Results of a known-answer kernel that differ from the answer (any is silent data corruption).", &ls, c.mismatches as f64);
        }
        let st = &g.setting;
        if let Some(w) = st.power_limit_mw {
            p.add(
                "gpuhost_active_power_limit_watts",
                "gauge",
                "Enforced power limit while the active checks ran.",
                &base,
                f64::from(w) / 1e3,
            );
        }
        if let Some(e) = st.ecc_enabled {
            p.add(
                "gpuhost_active_ecc_enabled",
                "gauge",
                "1 when ECC was on while the active checks ran.",
                &base,
                flag(e),
            );
        }
    }
}

/// One figure: its value, floor, ratios and the conditions it was measured under.
fn active_figure_metrics(p: &mut Prom, f: &crate::verdict::ActiveFigure) {
    let mut ls = vec![
        ("uuid", f.gpu.uuid.clone().unwrap_or_default()),
        ("pci_bus_id", f.gpu.pci_bus_id.clone()),
        ("figure", f.figure.to_string()),
        ("model", f.model.clone().unwrap_or_default()),
    ];
    if let Some(peer) = &f.peer {
        ls.push(("peer", peer.clone()));
    }
    let (name, help) = match f.figure {
        "fp32" | "fp64" => (
            "gpuhost_active_flops",
            "Floating-point operations per second of a known-answer rate kernel.",
        ),
        _ => (
            "gpuhost_active_bandwidth_bytes_per_second",
            "Bytes per second an active check moved (HBM: read and written).",
        ),
    };
    p.add(name, "gauge", help, &ls, f.value);
    if let Some(floor) = f.floor.filter(|x| *x > 0.0) {
        p.add(
            "gpuhost_active_floor",
            "gauge",
            "The floor the figure was judged against, in its unit.",
            &ls,
            floor,
        );
        p.add(
            "gpuhost_active_floor_ratio",
            "gauge",
            "Figure over its floor: below 1 the GPU is below its floor.",
            &ls,
            f.value / floor,
        );
    }
    if let Some(r) = f.reference.filter(|x| *x > 0.0) {
        p.add(
            "gpuhost_active_reference_ratio",
            "gauge",
            "Figure over the model's peak (or the link's rate).",
            &ls,
            f.value / r,
        );
    }
    condition_metrics(p, &ls, &f.conditions);
}

/// The conditions a figure was measured under, labelled like the figure.
fn condition_metrics(p: &mut Prom, ls: &[(&str, String)], c: &gpuhost_active::Conditions) {
    let cond: [(&'static str, &'static str, Option<f64>); 7] = [
        (
            "gpuhost_active_condition_sm_clock_hertz",
            "SM clock (median) while the figure was measured.",
            c.sm_clock_mhz.map(|x| f64::from(x) * 1e6),
        ),
        (
            "gpuhost_active_condition_memory_clock_hertz",
            "Memory clock (median) while the figure was measured.",
            c.mem_clock_mhz.map(|x| f64::from(x) * 1e6),
        ),
        (
            "gpuhost_active_condition_temperature_celsius",
            "Highest GPU temperature while the figure was measured.",
            c.temperature_c.map(f64::from),
        ),
        (
            "gpuhost_active_condition_power_watts",
            "Highest power draw while the figure was measured.",
            c.power_mw.map(|x| f64::from(x) / 1e3),
        ),
        (
            "gpuhost_active_condition_clock_event_reasons",
            "NVML clock event reasons seen while the figure was measured (bitmask).",
            c.clock_event_reasons.map(|x| x as f64),
        ),
        (
            "gpuhost_active_condition_pcie_link_gen",
            "PCIe link generation (best) while the figure was measured.",
            c.pcie_gen.map(f64::from),
        ),
        (
            "gpuhost_active_condition_pcie_link_width",
            "PCIe link width (best) while the figure was measured.",
            c.pcie_width.map(f64::from),
        ),
    ];
    for (n, h, v) in cond {
        if let Some(v) = v {
            p.add(n, "gauge", h, ls, v);
        }
    }
}

/// The overall status and each check's (but the n/a ones), as Nagios codes.
fn check_metrics(p: &mut Prom, checks: &[Check]) {
    let worst = overall(checks);
    p.add(
        "gpuhost_status",
        "gauge",
        "Overall status as a Nagios code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.",
        &[],
        f64::from(worst.exit_code()),
    );
    for c in checks {
        let mut ls = vec![("check", c.id.clone())];
        if let Some(g) = &c.gpu {
            ls.push(("uuid", g.uuid.clone().unwrap_or_default()));
            ls.push(("pci_bus_id", g.pci_bus_id.clone()));
        }
        if c.severity == Severity::NotApplicable {
            continue;
        }
        p.add(
            "gpuhost_check_status",
            "gauge",
            "Each check's status as a Nagios code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.",
            &ls,
            f64::from(c.severity.exit_code()),
        );
    }
}

/// The probe itself: NVML up or hung, how long it took, when the answers were collected.
fn probe_metrics(p: &mut Prom, s: &Snapshot) {
    let up = if s.nvml.status == ProbeStatus::Ok {
        1.0
    } else {
        0.0
    };
    p.add(
        "gpuhost_nvml_up",
        "gauge",
        "1 when NVML initialised and answered within the deadline.",
        &[],
        up,
    );
    let hung = matches!(
        s.nvml.status,
        ProbeStatus::Unresponsive | ProbeStatus::StuckEarlier
    );
    p.add(
        "gpuhost_nvml_unresponsive",
        "gauge",
        "1 when the NVML probe did not answer within its deadline (a hung driver), or an earlier one is still stuck.",
        &[],
        flag(hung),
    );
    let at_ms = if s.collected_at_ms > 0 {
        s.collected_at_ms as f64
    } else {
        s.collected_at as f64 * 1000.0
    };
    p.add(
        "gpuhost_sweep_timestamp_seconds",
        "gauge",
        "Unix time at which these answers were collected (serve's sweep, status's run).",
        &[],
        at_ms / 1000.0,
    );
    if let Some(ms) = s.nvml.duration_ms {
        p.add(
            "gpuhost_nvml_probe_seconds",
            "gauge",
            "Wall time of the NVML probe.",
            &[],
            ms / 1000.0,
        );
    }
}

/// What the probe saw: the GPUs by source, the NVSwitches.
fn seen_metrics(p: &mut Prom, s: &Snapshot) {
    if let Some(n) = s.nvml.device_count {
        p.add(
            "gpuhost_gpus",
            "gauge",
            "GPUs seen, by source.",
            &[("source", "nvml".into())],
            f64::from(n),
        );
    }
    let pci_gpus = s
        .host
        .pci
        .iter()
        .filter(|d| d.kind == crate::snapshot::PciKind::Gpu)
        .count();
    if s.host.pci_error.is_none() {
        p.add(
            "gpuhost_gpus",
            "gauge",
            "GPUs seen, by source.",
            &[("source", "pci".into())],
            pci_gpus as f64,
        );
    }
    if s.host.pci_error.is_none() {
        p.add(
            "gpuhost_nvswitches",
            "gauge",
            "NVSwitches on PCI.",
            &[],
            s.host
                .pci
                .iter()
                .filter(|d| d.kind == crate::snapshot::PciKind::NvSwitch)
                .count() as f64,
        );
    }
}

/// XID and SXid events in the kernel log, when it was read.
fn kernel_log_metrics(p: &mut Prom, s: &Snapshot) {
    let xid_total = s.kernel_log.xids.len();
    if s.kernel_log.source.is_some() {
        p.add(
            "gpuhost_xid_events",
            "gauge",
            "XID events in the kernel log since boot, all GPUs.",
            &[],
            xid_total as f64,
        );
    }
    if s.kernel_log.source.is_some() {
        for (fatal, n) in [
            (
                "true",
                s.kernel_log
                    .sxids
                    .iter()
                    .filter(|e| e.fatal == Some(true))
                    .count(),
            ),
            (
                "false",
                s.kernel_log
                    .sxids
                    .iter()
                    .filter(|e| e.fatal != Some(true))
                    .count(),
            ),
        ] {
            p.add(
                "gpuhost_sxid_events",
                "gauge",
                "NVSwitch SXid events this boot, fatal or not.",
                &[("fatal", fatal.into())],
                n as f64,
            );
        }
    }
}

/// A per-GPU gauge with the GPU's labels only: name, help, and its value (None: omitted, as
/// node_exporter's convention wants for what a GPU does not support).
struct Gauge {
    name: &'static str,
    help: &'static str,
    value: fn(&GpuSnapshot) -> Option<f64>,
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

fn bool_reading(r: &Reading<bool>) -> Option<f64> {
    r.value().map(|v| flag(*v))
}

/// Every single-series per-GPU gauge, in output order.
const GPU_GAUGES: &[Gauge] = &[
    Gauge {
        name: "gpuhost_gpu_temperature_celsius",
        help: "GPU temperature.",
        value: |g| num(&g.temperature_c),
    },
    Gauge {
        name: "gpuhost_gpu_slowdown_temperature_celsius",
        help: "Temperature at which the GPU slows down.",
        value: |g| num(&g.temperature_slowdown_c),
    },
    Gauge {
        name: "gpuhost_gpu_shutdown_temperature_celsius",
        help: "Temperature at which the GPU shuts down.",
        value: |g| num(&g.temperature_shutdown_c),
    },
    Gauge {
        name: "gpuhost_gpu_ecc_enabled",
        help: "ECC mode now (1 on).",
        value: |g| g.ecc_mode.value().map(|m| flag(m.current)),
    },
    Gauge {
        name: "gpuhost_gpu_ecc_pending_enabled",
        help: "ECC mode after the next reset (1 on).",
        value: |g| g.ecc_mode.value().map(|m| flag(m.pending)),
    },
    Gauge {
        name: "gpuhost_gpu_ecc_uncorrected_volatile",
        help: "Uncorrectable ECC errors since the driver loaded.",
        value: |g| num64(&g.ecc_volatile_uncorrected),
    },
    Gauge {
        name: "gpuhost_gpu_ecc_uncorrected_aggregate",
        help: "Uncorrectable ECC errors over the GPU's life.",
        value: |g| num64(&g.ecc_aggregate_uncorrected),
    },
    Gauge {
        name: "gpuhost_gpu_ecc_corrected_volatile",
        help: "Corrected ECC errors since the driver loaded.",
        value: |g| num64(&g.ecc_volatile_corrected),
    },
    Gauge {
        name: "gpuhost_gpu_retired_pages_pending",
        help: "1 when page retirement waits for a reset.",
        value: |g| bool_reading(&g.retired_pages_pending),
    },
    Gauge {
        name: "gpuhost_gpu_row_remap_pending",
        help: "1 when a row remap waits for a reset.",
        value: |g| g.remapped_rows.value().map(|m| flag(m.pending)),
    },
    Gauge {
        name: "gpuhost_gpu_row_remap_failure",
        help: "1 when a row remap failed.",
        value: |g| g.remapped_rows.value().map(|m| flag(m.failure)),
    },
    Gauge {
        name: "gpuhost_gpu_recovery_action",
        help: "Driver's recovery action: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset.",
        value: |g| num(&g.recovery_action),
    },
    Gauge {
        name: "gpuhost_gpu_clock_event_reasons",
        help: "Clock event (throttle) reasons bitmask.",
        value: |g| num64(&g.clock_event_reasons),
    },
    Gauge {
        name: "gpuhost_gpu_power_usage_watts",
        help: "Power draw.",
        value: |g| num(&g.power_usage_mw).map(|v| v / 1000.0),
    },
    Gauge {
        name: "gpuhost_gpu_power_limit_enforced_watts",
        help: "Enforced power limit.",
        value: |g| num(&g.power_limit_enforced_mw).map(|v| v / 1000.0),
    },
    Gauge {
        name: "gpuhost_gpu_power_limit_default_watts",
        help: "Default power limit.",
        value: |g| num(&g.power_limit_default_mw).map(|v| v / 1000.0),
    },
    Gauge {
        name: "gpuhost_gpu_memory_total_bytes",
        help: "Framebuffer memory.",
        value: |g| num64(&g.memory_total_bytes),
    },
    Gauge {
        name: "gpuhost_gpu_memory_used_bytes",
        help: "Framebuffer memory in use.",
        value: |g| num64(&g.memory_used_bytes),
    },
    Gauge {
        name: "gpuhost_gpu_ecc_corrected_aggregate",
        help: "Corrected ECC errors over the GPU's life.",
        value: |g| num64(&g.ecc_aggregate_corrected),
    },
    Gauge {
        name: "gpuhost_gpu_sram_ecc_threshold_exceeded",
        help: "1 when NVIDIA's SRAM ECC error threshold is exceeded.",
        value: |g| g.ecc_sram.value().map(|e| flag(e.threshold_exceeded)),
    },
    Gauge {
        name: "gpuhost_gpu_pcie_replays",
        help: "PCIe replays since the driver loaded.",
        value: |g| num(&g.pcie_replay_counter),
    },
    Gauge {
        name: "gpuhost_gpu_inforom_valid",
        help: "1 when the InfoROM validates.",
        value: |g| g.inforom.value().map(|i| flag(i.valid)),
    },
    Gauge {
        name: "gpuhost_gpu_gsp_firmware_enabled",
        help: "1 when GSP firmware runs.",
        value: |g| g.gsp_firmware.value().map(|f| flag(f.enabled)),
    },
    Gauge {
        name: "gpuhost_gpu_persistence_mode",
        help: "1 when persistence mode is on.",
        value: |g| bool_reading(&g.persistence_mode),
    },
];

/// A per-GPU family with one more label: name, help, and its (label value, value) samples.
struct Family {
    name: &'static str,
    help: &'static str,
    label: &'static str,
    samples: fn(&GpuSnapshot) -> Vec<(String, f64)>,
}

/// ECC counts of one memory: `{kind="corrected"|"uncorrected", counter="volatile"|"aggregate"}`
/// folded into one label value (`corrected_volatile`, …).
fn ecc_samples(c: [(&'static str, Option<u64>); 4]) -> Vec<(String, f64)> {
    c.into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v as f64)))
        .collect()
}

const GPU_FAMILIES: &[Family] = &[
    Family {
        name: "gpuhost_gpu_sram_ecc_errors",
        help: "SRAM ECC errors, by kind and counter.",
        label: "error",
        samples: |g| {
            g.ecc_sram
                .value()
                .map(|e| {
                    ecc_samples([
                        ("corrected_volatile", Some(e.volatile_corrected)),
                        ("uncorrected_volatile", Some(e.volatile_uncorrected)),
                        ("corrected_aggregate", Some(e.aggregate_corrected)),
                        ("uncorrected_aggregate", Some(e.aggregate_uncorrected)),
                    ])
                })
                .unwrap_or_default()
        },
    },
    Family {
        name: "gpuhost_gpu_dram_ecc_errors",
        help: "DRAM (device memory) ECC errors, by kind and counter.",
        label: "error",
        samples: |g| {
            g.ecc_dram
                .value()
                .map(|e| {
                    ecc_samples([
                        ("corrected_volatile", e.volatile_corrected),
                        ("uncorrected_volatile", e.volatile_uncorrected),
                        ("corrected_aggregate", e.aggregate_corrected),
                        ("uncorrected_aggregate", e.aggregate_uncorrected),
                    ])
                })
                .unwrap_or_default()
        },
    },
    Family {
        name: "gpuhost_gpu_remapped_rows",
        help: "Remapped memory rows, by cause.",
        label: "cause",
        samples: |g| {
            g.remapped_rows
                .value()
                .map(|m| {
                    vec![
                        ("correctable".into(), f64::from(m.correctable)),
                        ("uncorrectable".into(), f64::from(m.uncorrectable)),
                    ]
                })
                .unwrap_or_default()
        },
    },
    Family {
        name: "gpuhost_gpu_pcie_link_gen",
        help: "PCIe link generation.",
        label: "link",
        samples: |g| {
            [("current", &g.pcie_gen_current), ("max", &g.pcie_gen_max)]
                .into_iter()
                .filter_map(|(k, r)| num(r).map(|v| (k.to_string(), v)))
                .collect()
        },
    },
    Family {
        name: "gpuhost_gpu_pcie_link_width",
        help: "PCIe link width (lanes).",
        label: "link",
        samples: |g| {
            [
                ("current", &g.pcie_width_current),
                ("max", &g.pcie_width_max),
            ]
            .into_iter()
            .filter_map(|(k, r)| num(r).map(|v| (k.to_string(), v)))
            .collect()
        },
    },
    Family {
        name: "gpuhost_gpu_mig_mode",
        help: "MIG mode (1 enabled), now and after reset.",
        label: "mode",
        samples: |g| {
            g.mig_mode
                .value()
                .map(|m| {
                    vec![
                        ("current".into(), f64::from(m.current)),
                        ("pending".into(), f64::from(m.pending)),
                    ]
                })
                .unwrap_or_default()
        },
    },
    Family {
        name: "gpuhost_gpu_nvlink_active",
        help: "1 when the NVLink link is active.",
        label: "link",
        samples: |g| {
            g.nvlinks
                .value()
                .map(|ls| {
                    ls.iter()
                        .map(|l| (l.link.to_string(), flag(l.active)))
                        .collect()
                })
                .unwrap_or_default()
        },
    },
];

/// NVLink error counters: `{link, error}` per link and kind.
fn nvlink_errors(p: &mut Prom, g: &GpuSnapshot, base: &[(&'static str, String)]) {
    for l in g.nvlinks.value().map(Vec::as_slice).unwrap_or_default() {
        for (kind, v) in [
            ("replay", l.replay_errors),
            ("recovery", l.recovery_errors),
            ("crc_flit", l.crc_flit_errors),
            ("crc_data", l.crc_data_errors),
        ] {
            if let Some(v) = v {
                let mut ls = base.to_vec();
                ls.push(("link", l.link.to_string()));
                ls.push(("error", kind.into()));
                p.add(
                    "gpuhost_gpu_nvlink_errors",
                    "gauge",
                    "NVLink error counters.",
                    &ls,
                    v as f64,
                );
            }
        }
    }
}

/// Fabric registration state, status and health mask (NVSwitch systems).
fn fabric_metrics(p: &mut Prom, g: &GpuSnapshot, base: &[(&'static str, String)]) {
    let Some(f) = g.fabric.value() else {
        return;
    };
    for (name, help, v) in [
        (
            "gpuhost_gpu_fabric_state",
            "Fabric registration: 1 not started, 2 in progress, 3 completed.",
            f64::from(f.state),
        ),
        (
            "gpuhost_gpu_fabric_status",
            "NVML return code of the fabric registration (0 success), meaningful once completed.",
            f64::from(f.status),
        ),
        (
            "gpuhost_gpu_fabric_health_mask",
            "Fabric health mask (raw).",
            f64::from(f.health_mask),
        ),
    ] {
        p.add(name, "gauge", help, base, v);
    }
}

/// XID events for this GPU since boot or its last reset, in all and by the action they ask
/// for, as the judge counted them (none when the kernel log was not read).
fn xid_metrics(p: &mut Prom, xids: &GpuXids, base: &[(&'static str, String)]) {
    p.add(
        "gpuhost_gpu_xid_events",
        "gauge",
        "XID events for this GPU since boot or its last reset.",
        base,
        xids.events as f64,
    );
    for (action, n) in &xids.actions {
        let mut ls = base.to_vec();
        ls.push(("action", action.clone()));
        p.add(
            "gpuhost_gpu_xid_action_events",
            "gauge",
            "XID events for this GPU since boot or its last reset, by the immediate action NVIDIA's Xid catalog gives them (RESET_GPU, RESTART_BM, …).",
            &ls,
            *n as f64,
        );
    }
}

/// One GPU's metrics: identity, then [`GPU_GAUGES`], [`GPU_FAMILIES`], NVLink errors, fabric
/// and XIDs, each labelled `uuid` and `pci_bus_id`.
fn gpu_metrics(p: &mut Prom, g: &GpuSnapshot, xids: Option<&GpuXids>) {
    let uuid = g.uuid.value().cloned().unwrap_or_default();
    let bus = g.pci_bus_id.value().cloned().unwrap_or_default();
    let base = vec![("uuid", uuid), ("pci_bus_id", bus)];
    let mut info = base.clone();
    info.push(("index", g.index.to_string()));
    info.push(("name", g.name.value().cloned().unwrap_or_default()));
    p.add(
        "gpuhost_gpu_info",
        "gauge",
        "GPU identity; always 1.",
        &info,
        1.0,
    );
    for m in GPU_GAUGES {
        if let Some(v) = (m.value)(g) {
            p.add(m.name, "gauge", m.help, &base, v);
        }
    }
    for f in GPU_FAMILIES {
        for (lv, v) in (f.samples)(g) {
            let mut ls = base.clone();
            ls.push((f.label, lv));
            p.add(f.name, "gauge", f.help, &ls, v);
        }
    }
    nvlink_errors(p, g, &base);
    fabric_metrics(p, g, &base);
    if let Some(x) = xids {
        xid_metrics(p, x, &base);
    }
}
