//! The one-shot NVML probe's own side: what the helper `gpuhost-nvml-probe`, the hidden
//! `gpuhost nvml-probe` and a forked copy of `gpuhost status` run — NVML (or a saved
//! snapshot's NVML part), answered as one line of JSON.

use std::path::Path;
use std::time::Duration;

use gpuhost_host::host::Host;

use crate::snapshot::{NvmlProbe, ProbeStatus};
use crate::{boot_cache, coprobe, helper_log, nvml, probe};

/// The probe child: NVML (or, with `fixture`, a saved snapshot's NVML part, through the boot
/// cache of `root`) → JSON on stdout. `GPUHOST_PROBE_DELAY_MS` makes it sleep first, to stand
/// for a hung driver in tests and drills.
pub fn run_probe(fixture: Option<&Path>, root: &Path) -> i32 {
    let mut p = probe_answer(fixture.map(|f| (f, root)));
    p.peak_rss_kib = probe::peak_rss_kib();
    match serde_json::to_string(&p) {
        Ok(s) => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{s}").and_then(|()| out.flush()) {
                Ok(()) => 0,
                Err(_) => 1,
            }
        }
        Err(e) => {
            eprintln!("cannot serialise the NVML answer: {e}");
            1
        }
    }
}

/// The one-shot probe's work (after `GPUHOST_PROBE_DELAY_MS`, a hung-driver drill): NVML, or
/// a saved snapshot's NVML part through the boot cache of a root.
fn probe_answer(fixture: Option<(&Path, &Path)>) -> NvmlProbe {
    drill_delay();
    match fixture {
        Some((f, root)) => fixture_probe(f, root),
        None => nvml::probe(),
    }
}

/// `GPUHOST_PROBE_DELAY_MS`: the probe sleeps first, standing for a hung driver (tests, drills).
fn drill_delay() {
    if let Some(ms) = std::env::var("GPUHOST_PROBE_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// A one-shot probe answered from a saved snapshot's NVML part: each GPU's fixed fields and
/// InfoROM validation from the boot cache of `root` when it has them for that GPU's UUID
/// (what the NVML probe does not ask again), the rest from the file.
fn fixture_probe(path: &Path, root: &Path) -> NvmlProbe {
    let start = std::time::Instant::now();
    let mut p = match coprobe::load_fixture(path) {
        Ok(p) => p,
        Err(e) => {
            return NvmlProbe {
                status: ProbeStatus::ProbeFailed,
                error: Some(format!("{e:#}")),
                ..NvmlProbe::default()
            }
        }
    };
    let key = Host::new(root).ok().and_then(|h| boot_cache::Key::read(&h));
    let mut store = boot_cache::Store::load(probe::run_dir().ok().as_deref(), key);
    store.apply_or_keep(&mut p);
    p.duration_ms = Some((start.elapsed().as_secs_f64() * 1e5).round() / 100.0);
    p
}

/// The probe's answer as one line of JSON, its peak RSS in it (empty when it cannot be
/// serialised: the caller reports no readable answer).
pub(crate) fn probe_line(fixture: Option<(&Path, &Path)>) -> String {
    answer_line(probe_answer(fixture))
}

/// `p` as one line of JSON, with this process's peak RSS.
fn answer_line(mut p: NvmlProbe) -> String {
    p.peak_rss_kib = probe::peak_rss_kib();
    serde_json::to_string(&p).unwrap_or_default()
}

/// The NVML probe helper, `gpuhost-nvml-probe` (no arguments), run by `gpuhost status`
/// (`probe::exec`): its answer on stdout, then it leaves without waiting for NVML's
/// release. Exit 2 with a one-line error on any argument.
pub fn helper_main() -> i32 {
    probe::close_inherited(None);
    helper_log::init();
    if let Some(a) = std::env::args_os().nth(1) {
        eprintln!(
            "{}: cannot take {}: this helper takes no arguments; `gpuhost status` runs it",
            probe::HELPER,
            a.to_string_lossy()
        );
        return 2;
    }
    drill_delay();
    let out = answer_line(nvml::probe());
    // SAFETY: fd 1 is this process's stdout, owned by nothing else here; the File closes it.
    let stdout = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(1) };
    probe::answer_and_leave(&out, stdout)
}
