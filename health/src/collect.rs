//! Collect a [`Snapshot`]: the NVML probe in a child process, while the driver-free facts
//! (sysfs, /proc, the kernel log, services) are read here.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use gpuhost_host::host::Host;

use crate::expect::Expect;
use crate::probe_child::probe_line;
use crate::snapshot::{
    self, FabricManagerVersion, NvmlProbe, PciKind, ProbeStatus, Services, Snapshot,
    SNAPSHOT_SCHEMA,
};
use crate::{counters, host, kmsg, probe};

/// How the one-shot NVML probe of [`collect`] runs.
#[derive(Debug, Clone, Copy)]
pub struct OneShot<'a> {
    /// Past this, the driver is reported unresponsive.
    pub timeout: Duration,
    /// The probe as a program (`gpuhost nvml-probe …`), run where neither the helper nor a
    /// fork can be.
    pub program: &'a [OsString],
    /// A saved snapshot whose NVML part the probe answers instead of asking NVML
    /// (`--nvml-fixture`: tests, benchmarks).
    pub fixture: Option<&'a Path>,
}

/// Collect a snapshot: the NVML probe runs in a child process while the driver-free reads
/// happen here. Fabric Manager's version is asked (rpm) only where NVSwitches are on PCI or
/// `expect` requires Fabric Manager, beside the `systemctl` call.
pub fn collect(host: &Host, expect: &Expect, probe: &OneShot) -> Snapshot {
    // Started first, while this process has one thread: the probe is a forked copy of it.
    let running = start_one_shot(
        probe.timeout,
        probe.fixture.map(|f| (f, host.root())),
        probe.program,
    );
    collect_around(host, expect, None, move || match running {
        Ok(r) => r.finish(),
        Err(p) => *p,
    })
}

/// Start the one-shot NVML probe: the helper `gpuhost-nvml-probe` ([`probe::exec`]), else a
/// forked copy of this process ([`probe::fork`]; `program`, `gpuhost nvml-probe`, where no
/// fork can be made), all under a deadline; with a fixture (and the root whose boot cache it
/// goes through), answered from that file.
fn start_one_shot(
    timeout: Duration,
    fixture: Option<(&Path, &Path)>,
    program: &[OsString],
) -> Result<probe::Running, Box<NvmlProbe>> {
    let run_dir = probe::run_dir().map_err(|e| {
        Box::new(NvmlProbe {
            status: ProbeStatus::ProbeFailed,
            error: Some(format!("{e:#}")),
            ..NvmlProbe::default()
        })
    })?;
    // The helper asks NVML only: a fixture is answered by a forked copy (the helper's code
    // stays what a live probe runs, and small).
    if let Some(helper) = probe::helper().filter(|_| fixture.is_none()) {
        match probe::exec(&helper, &[], timeout, &run_dir) {
            Err(p) if p.status != ProbeStatus::StuckEarlier => tracing::debug!(
                "the NVML probe helper {} did not start ({}): forking the probe instead",
                helper.display(),
                p.error.as_deref().unwrap_or("")
            ),
            started => return started,
        }
    }
    let fixture = fixture.map(|(f, r)| (f.to_path_buf(), r.to_path_buf()));
    let work = move || probe_line(fixture.as_ref().map(|(f, r)| (f.as_path(), r.as_path())));
    probe::fork(work, program, timeout, &run_dir)
}

/// Collect a snapshot whose NVML part comes from `nvml`, run on another thread while the
/// driver-free reads happen here (`gpuhost serve` passes its long-lived probe, and `kernel`:
/// the kernel log followed from one sweep to the next; None reads it whole).
pub fn collect_around<F>(
    host: &Host,
    expect: &Expect,
    kernel: Option<&mut kmsg::Follower>,
    nvml: F,
) -> Snapshot
where
    F: FnOnce() -> NvmlProbe + Send,
{
    std::thread::scope(|scope| {
        let probe = scope.spawn(nvml);
        let t = std::time::Instant::now();
        let (host_snap, services, kernel_log) = collect_host(host, expect, kernel);
        tracing::debug!(
            "driver-free reads (beside the NVML probe): {:.2} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        let nvml = probe.join().unwrap_or_else(|_| NvmlProbe {
            status: ProbeStatus::ProbeFailed,
            error: Some("the NVML probe thread panicked".into()),
            ..NvmlProbe::default()
        });
        let previous = probe::run_dir()
            .ok()
            .and_then(|d| counters::load(&d, host_snap.boot_id.as_deref()));
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let s = Snapshot {
            schema: SNAPSHOT_SCHEMA,
            collected_at: now_ms / 1000,
            host: host_snap,
            services,
            kernel_log,
            nvml,
            collected_at_ms: now_ms,
            previous,
            served_by: None,
            active: None,
        };
        keep_counters(&s);
        s
    })
}

/// Keep this run's counters as the next runs' baseline when due ([`counters::store`]); a
/// failure only costs the next run its rates.
pub(crate) fn keep_counters(s: &Snapshot) {
    let now = counters::of(s, s.host.boot_id.clone());
    let stored = probe::run_dir().and_then(|d| counters::store(&d, s.previous.as_ref(), &now));
    if let Err(e) = stored {
        tracing::warn!("cannot keep the counters for rates: {e:#}");
    }
}

/// The driver-free part: sysfs and /proc, the kernel log, and (on the live system) services.
fn collect_host(
    host: &Host,
    expect: &Expect,
    kernel: Option<&mut kmsg::Follower>,
) -> (snapshot::HostSnapshot, Services, snapshot::KernelLog) {
    let live = host.is_live();
    let mut host_snap = host::collect(host);
    host_snap.system = Some(gpuhost_host::hostinfo::gather(host));
    let kernel_log = match kernel {
        Some(f) => f.collect(host),
        None => kmsg::collect(host),
    };
    let want_fm = match expect.require_fabric_manager {
        Some(r) => r,
        None => host_snap.pci.iter().any(|d| d.kind == PciKind::NvSwitch),
    };
    let services = if live {
        std::thread::scope(|s| {
            let fm = want_fm.then(|| s.spawn(host::fabricmanager_version));
            let mut sv = host::services();
            if sv.nvidia_imex.as_deref() == Some("active") {
                sv.imex_domain = Some(host::imex_domain());
            }
            sv.fabricmanager_version = fm.map(|h| {
                h.join().unwrap_or_else(|_| FabricManagerVersion {
                    error: Some("the rpm query failed".into()),
                    ..FabricManagerVersion::default()
                })
            });
            sv
        })
    } else {
        Services {
            error: Some(format!(
                "not checked under --root {}",
                host.root().display()
            )),
            ..Services::default()
        }
    };
    (host_snap, services, kernel_log)
}
