//! `gpuhost sweep-profile N`: where a sweep's time goes on this machine, as JSON —
//! each NVML call of the probe (per GPU, median over N sweeps), with the fixed fields kept
//! (as `gpuhost serve`'s probe child does) and with every field read at every sweep (a new
//! [`nvml::Session`] per sweep, as that child did before it kept them); the answer's JSON
//! across the pipe; each driver-free part (sysfs and /proc, next boot, sysinfo, the kernel
//! log, systemctl, the kept counters); and the rendering. A benchmark's instrument
//! (`bench/serve-gpu-run.sh`), not a health check.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use gpuhost_host::host::Host;

use crate::expect::Expect;
use crate::snapshot::{NvmlProbe, Snapshot};
use crate::{counters, host, kmsg, nvml, output, probe, verdict};

/// Median, smallest and largest of some timings.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Stats {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) n: usize,
}

fn stats(v: &[f64]) -> Stats {
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return Stats::default();
    }
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Stats {
        median: round(median),
        min: round(s[0]),
        max: round(s[n - 1]),
        n,
    }
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn since_ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn since_us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Run `f`, adding its wall time in ms to `into`.
fn time_ms<T>(into: &mut Vec<f64>, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let v = f();
    into.push(since_ms(t));
    v
}

/// Run `f`, adding its wall time in µs to `into`.
fn time_us<T>(into: &mut Vec<f64>, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let v = f();
    into.push(since_us(t));
    v
}

/// The NVML probe's part.
#[derive(Debug, Default, Serialize)]
pub(crate) struct NvmlProfile {
    pub(crate) status: String,
    pub(crate) error: Option<String>,
    pub(crate) init_ms: f64,
    /// Of which loading libnvidia-ml.so.1 (dlopen alone; init resolves its symbols after).
    pub(crate) lib_load_ms: f64,
    pub(crate) gpus: u32,
    /// The first sweep took the fixed fields from the boot cache (`<run dir>/boot-cache.json`;
    /// `GPUHOST_PROBE_REREAD=1` leaves it out).
    pub(crate) first_sweep_boot_cache: bool,
    /// Per call in the first sweep of this process, µs (NVML's first answers, as a one-shot
    /// probe meets them).
    pub(crate) calls_first_us: BTreeMap<String, f64>,
    /// How much each call of the first sweep raised the process's peak RSS, KiB (calls that
    /// raised it only).
    pub(crate) calls_first_peak_rss_kib: BTreeMap<String, u64>,
    /// The process's peak RSS, KiB: before the library is loaded, after `nvmlInit`, after the
    /// first sweep (this process is the whole of gpuhost, not the one-shot's forked probe).
    pub(crate) peak_rss_kib: BTreeMap<String, u64>,
    /// `nvmlShutdown` at the end, ms.
    pub(crate) shutdown_ms: f64,
    /// The first sweep of a session: every field read, the CUDA check and InfoROM validation
    /// as kept in the run dir.
    pub(crate) first_sweep_ms: f64,
    /// Later sweeps of one session (fixed fields kept), ms.
    pub(crate) sweep_kept_ms: Stats,
    /// A new session per sweep (every field read each time), ms.
    pub(crate) sweep_every_field_ms: Stats,
    /// Per call (summed over GPUs within a sweep), µs, with the fixed fields kept.
    pub(crate) calls_kept_us: BTreeMap<String, Stats>,
    /// The same with every field read.
    pub(crate) calls_every_field_us: BTreeMap<String, Stats>,
    /// The answer as the child writes it to the pipe.
    pub(crate) answer_bytes: usize,
    pub(crate) json_encode_us: Stats,
    pub(crate) json_decode_us: Stats,
}

/// The driver-free part (run beside the NVML probe in a real sweep), ms.
#[derive(Debug, Default, Serialize)]
pub(crate) struct HostProfile {
    /// [`host::collect`]: sysfs PCI functions, /proc, device nodes, daemon.json, next boot.
    pub(crate) host_collect_ms: Stats,
    /// Reading every NVIDIA function's sysfs `config` whole (4 KiB each: what status did
    /// before it read only the first 4 bytes), and its first 4 bytes.
    pub(crate) pci_config_whole_ms: Stats,
    pub(crate) pci_config_head_ms: Stats,
    pub(crate) pci_functions: usize,
    /// Of which [`host::next_boot`] alone.
    pub(crate) next_boot_ms: Stats,
    /// sysinfo: memory, CPUs, uptime, free space.
    pub(crate) system_ms: Stats,
    /// The kernel log (XIDs, SXids, GPU initialisations).
    pub(crate) kernel_log_ms: Stats,
    pub(crate) kernel_log_source: Option<String>,
    /// The kernel log followed from sweep to sweep (`gpuhost serve`): new records only.
    pub(crate) kernel_log_follow_ms: Stats,
    /// Records (lines) in the kernel log read whole.
    pub(crate) kernel_log_lines: u64,
    /// `systemctl is-active …` (live hosts only).
    pub(crate) services_ms: Stats,
    /// The kept counters (rates) loaded.
    pub(crate) counters_load_ms: Stats,
}

/// Rendering one sweep's answers, µs.
#[derive(Debug, Default, Serialize)]
pub(crate) struct RenderProfile {
    pub(crate) evaluate_us: Stats,
    pub(crate) table_us: Stats,
    pub(crate) prometheus_us: Stats,
    pub(crate) json_us: Stats,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Profile {
    pub(crate) sweeps: usize,
    pub(crate) nvml: NvmlProfile,
    pub(crate) host: HostProfile,
    pub(crate) render: RenderProfile,
}

/// Each call's wall time summed over the GPUs of one sweep.
fn per_sweep(timings: &[nvml::Timings], into: &mut BTreeMap<String, Vec<f64>>) {
    let mut sum: BTreeMap<&str, f64> = BTreeMap::new();
    for t in timings {
        for (name, us) in &t.calls {
            *sum.entry(name).or_default() += us;
        }
    }
    for (name, us) in sum {
        into.entry(name.to_string()).or_default().push(us);
    }
}

/// Each call of the first sweep: its wall time and how much it raised the peak RSS, summed
/// over the GPUs.
fn first_calls(p: &mut NvmlProfile, timings: &[nvml::Timings]) {
    for tm in timings {
        for (name, us) in &tm.calls {
            *p.calls_first_us.entry(name.to_string()).or_default() += us;
        }
        for (name, kib) in &tm.peak_rss_growth {
            *p.calls_first_peak_rss_kib
                .entry(name.to_string())
                .or_default() += kib;
        }
    }
}

fn nvml_profile(n: usize) -> (NvmlProfile, NvmlProbe) {
    let mut p = NvmlProfile::default();
    p.peak_rss_kib.insert(
        "0-before-library".into(),
        crate::probe::peak_rss_kib().unwrap_or(0),
    );
    let t = Instant::now();
    // SAFETY: loading the NVIDIA management library, as NVML's init does just after.
    let loaded = unsafe { libloading::Library::new("libnvidia-ml.so.1") };
    p.lib_load_ms = round(since_ms(t));
    let lib = match nvml::init(t) {
        Ok(lib) => lib,
        Err(failed) => {
            p.status = format!("{:?}", failed.status);
            p.error = failed.error.clone();
            return (p, *failed);
        }
    };
    p.init_ms = round(since_ms(t));
    p.peak_rss_kib.insert(
        "1-after-init".into(),
        crate::probe::peak_rss_kib().unwrap_or(0),
    );
    p.status = "Ok".into();
    let mut session = nvml::Session::new(lib);
    session.profile = true;
    let t = Instant::now();
    let mut last = session.sweep(t);
    p.first_sweep_ms = round(since_ms(t));
    p.peak_rss_kib.insert(
        "2-after-first-sweep".into(),
        crate::probe::peak_rss_kib().unwrap_or(0),
    );
    drop(loaded);
    p.gpus = last.device_count.unwrap_or(0);
    p.first_sweep_boot_cache = last.gpus.iter().any(|g| g.fixed_kept);
    first_calls(&mut p, session.timings());
    let (mut kept_ms, mut kept_calls) = (Vec::new(), BTreeMap::new());
    let (mut enc, mut dec) = (Vec::new(), Vec::new());
    for _ in 0..n {
        last = time_ms(&mut kept_ms, || session.sweep(Instant::now()));
        per_sweep(session.timings(), &mut kept_calls);
        let text = time_us(&mut enc, || {
            serde_json::to_string(&last).unwrap_or_default()
        });
        p.answer_bytes = text.len();
        time_us(&mut dec, || serde_json::from_str::<NvmlProbe>(&text).ok());
    }
    // Every field at every sweep: a new session each time over the same NVML, as the child
    // did before it kept the fixed fields (the kept InfoROM validation and CUDA answer read
    // from the run dir each time, as then).
    let mut lib = session.into_nvml();
    let (mut every_ms, mut every_calls) = (Vec::new(), BTreeMap::new());
    for _ in 0..n {
        let mut s = nvml::Session::new(lib);
        s.profile = true;
        time_ms(&mut every_ms, || s.sweep(Instant::now()));
        per_sweep(s.timings(), &mut every_calls);
        lib = s.into_nvml();
    }
    let t = Instant::now();
    drop(lib);
    p.shutdown_ms = round(since_ms(t));
    p.sweep_kept_ms = stats(&kept_ms);
    p.sweep_every_field_ms = stats(&every_ms);
    p.calls_kept_us = kept_calls
        .iter()
        .map(|(k, v)| (k.clone(), stats(v)))
        .collect();
    p.calls_every_field_us = every_calls
        .iter()
        .map(|(k, v)| (k.clone(), stats(v)))
        .collect();
    p.json_encode_us = stats(&enc);
    p.json_decode_us = stats(&dec);
    (p, last)
}

/// Profile `n` sweeps on `h` (the live system or a root); the JSON report.
pub(crate) fn run(h: &Host, expect: &Expect, n: usize) -> Profile {
    let n = n.max(1);
    let (nvml, last) = nvml_profile(n);
    let mut hp = HostProfile::default();
    let (mut hc, mut nb, mut sys, mut kl, mut kf, mut sv, mut cl) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut follower = kmsg::Follower::default();
    let configs: Vec<std::path::PathBuf> = gpuhost_host::facts::nvidia_functions(h)
        .unwrap_or_default()
        .iter()
        .map(|f| {
            std::path::Path::new("/sys/bus/pci/devices")
                .join(&f.address)
                .join("config")
        })
        .collect();
    let (mut whole, mut head) = (vec![], vec![]);
    let _ = follower.collect(h);
    let mut snap = Snapshot {
        schema: crate::snapshot::SNAPSHOT_SCHEMA,
        nvml: last,
        ..Snapshot::default()
    };
    for _ in 0..n {
        snap.host = time_ms(&mut hc, || host::collect(h));
        time_ms(&mut whole, || {
            for c in &configs {
                let _ = h.read_bytes_opt(c);
            }
        });
        time_ms(&mut head, || {
            for c in &configs {
                let _ = h.read_head_opt(c, 4);
            }
        });
        time_ms(&mut nb, || host::next_boot(h));
        snap.host.system = Some(time_ms(&mut sys, || gpuhost_host::hostinfo::gather(h)));
        snap.kernel_log = time_ms(&mut kl, || kmsg::collect(h));
        time_ms(&mut kf, || follower.collect(h));
        if h.is_live() {
            snap.services = time_ms(&mut sv, host::services);
        }
        snap.previous = time_ms(&mut cl, || {
            probe::run_dir()
                .ok()
                .and_then(|d| counters::load(&d, snap.host.boot_id.as_deref()))
        });
    }
    hp.host_collect_ms = stats(&hc);
    hp.next_boot_ms = stats(&nb);
    hp.pci_config_whole_ms = stats(&whole);
    hp.pci_config_head_ms = stats(&head);
    hp.pci_functions = configs.len();
    hp.system_ms = stats(&sys);
    hp.kernel_log_ms = stats(&kl);
    hp.kernel_log_source = snap.kernel_log.source.clone();
    hp.kernel_log_follow_ms = stats(&kf);
    hp.kernel_log_lines = follower.lines();
    hp.services_ms = stats(&sv);
    hp.counters_load_ms = stats(&cl);
    let mut r = RenderProfile::default();
    let (mut ev, mut tb, mut pr, mut js) = (vec![], vec![], vec![], vec![]);
    for _ in 0..n {
        let judged = time_us(&mut ev, || verdict::judge(&snap, expect));
        time_us(&mut tb, || output::table(&judged.checks));
        time_us(&mut pr, || output::prometheus(&snap, &judged));
        time_us(&mut js, || output::json(&snap, expect, &judged.checks));
    }
    r.evaluate_us = stats(&ev);
    r.table_us = stats(&tb);
    r.prometheus_us = stats(&pr);
    r.json_us = stats(&js);
    Profile {
        sweeps: n,
        nvml,
        host: hp,
        render: r,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_median_min_max() {
        let s = stats(&[3.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 10.0, 4));
        assert_eq!(stats(&[]).n, 0);
    }
}
