//! Counters judged as rates: PCIe replays and NVLink replay, recovery and CRC errors only grow
//! until the driver reloads, so their total says little; their rate says whether a link is
//! failing now. Each run compares its readings with a baseline an earlier run kept in
//! `<run dir>/counters.json` (the run directory is a tmpfs on a live host: a reboot, which
//! also resets the counters, clears it; the boot id guards the rest). A first reading has no
//! rate and is never a warning; a counter that went down (driver reload, GPU reset) starts a
//! new baseline. The baseline is replaced once it is [`BASELINE_MAX_AGE_MS`] old, so a rate
//! covers at least the time between two runs and at most about a minute more.

use std::collections::BTreeMap;
use std::path::Path;

use crate::snapshot::Snapshot;

/// The baseline file in the run directory.
pub(crate) const FILE: &str = "counters.json";
/// A baseline this old (ms) is replaced by the current reading.
pub(crate) const BASELINE_MAX_AGE_MS: u64 = 60_000;

pub(crate) use crate::snapshot::{Baseline, GpuCounters, LinkCounters};

/// This snapshot's counters.
pub(crate) fn of(s: &Snapshot, boot_id: Option<String>) -> Baseline {
    let mut b = Baseline {
        boot_id,
        at_ms: s.collected_at_ms,
        gpus: BTreeMap::new(),
    };
    for g in &s.nvml.gpus {
        let Some(uuid) = g.uuid.value() else { continue };
        let nvlink = g
            .nvlinks
            .value()
            .map(|ls| {
                ls.iter()
                    .map(|l| {
                        (
                            l.link,
                            LinkCounters {
                                replay: l.replay_errors,
                                recovery: l.recovery_errors,
                                crc_flit: l.crc_flit_errors,
                                crc_data: l.crc_data_errors,
                            },
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let c = GpuCounters {
            pcie_replays: g.pcie_replay_counter.value().copied(),
            nvlink,
        };
        if c.pcie_replays.is_some() || !c.nvlink.is_empty() {
            b.gpus.insert(uuid.clone(), c);
        }
    }
    b
}

/// The increase per second of a counter from `before` to `now` over `secs`; None without a
/// before, when it went down (a reset) or when no time passed.
pub(crate) fn rate(before: Option<u64>, now: Option<u64>, secs: f64) -> Option<f64> {
    let (b, n) = (before?, now?);
    (n >= b && secs > 0.0).then(|| (n - b) as f64 / secs)
}

/// The kept baseline, if it is from this boot and readable.
pub(crate) fn load(run_dir: &Path, boot_id: Option<&str>) -> Option<Baseline> {
    let b: Baseline = crate::probe::load_kept(run_dir, FILE)?;
    (b.boot_id.as_deref() == boot_id).then_some(b)
}

/// Whether `now` should replace `kept` as the baseline: none kept, kept too old, another
/// boot, or a counter went down (reset).
pub(crate) fn due(kept: Option<&Baseline>, now: &Baseline) -> bool {
    let Some(k) = kept else { return true };
    if k.boot_id != now.boot_id || now.at_ms.saturating_sub(k.at_ms) >= BASELINE_MAX_AGE_MS {
        return true;
    }
    let down = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if b < a);
    now.gpus.iter().any(|(uuid, n)| match k.gpus.get(uuid) {
        None => true,
        Some(o) => {
            down(o.pcie_replays.map(u64::from), n.pcie_replays.map(u64::from))
                || n.nvlink.iter().any(|(l, nl)| match o.nvlink.get(l) {
                    None => false,
                    Some(ol) => {
                        down(ol.replay, nl.replay)
                            || down(ol.recovery, nl.recovery)
                            || down(ol.crc_flit, nl.crc_flit)
                            || down(ol.crc_data, nl.crc_data)
                    }
                })
        }
    })
}

/// Keep `now` as the baseline when [`due`] (atomically; the directory is created).
pub(crate) fn store(run_dir: &Path, kept: Option<&Baseline>, now: &Baseline) -> anyhow::Result<()> {
    if now.gpus.is_empty() || !due(kept, now) {
        return Ok(());
    }
    crate::probe::store_kept(run_dir, FILE, now)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn base(at_ms: u64, replays: u32) -> Baseline {
        let mut gpus = BTreeMap::new();
        gpus.insert(
            "GPU-1".to_string(),
            GpuCounters {
                pcie_replays: Some(replays),
                nvlink: BTreeMap::new(),
            },
        );
        Baseline {
            boot_id: Some("b".into()),
            at_ms,
            gpus,
        }
    }

    #[test]
    fn rates_need_a_before_and_a_counter_that_did_not_go_down() {
        assert_eq!(rate(Some(10), Some(70), 60.0), Some(1.0));
        assert_eq!(rate(None, Some(70), 60.0), None);
        assert_eq!(rate(Some(70), Some(10), 60.0), None);
        assert_eq!(rate(Some(1), Some(2), 0.0), None);
    }

    #[test]
    fn baseline_is_replaced_when_old_reset_or_from_another_boot() {
        let kept = base(1_000, 5);
        assert!(!due(Some(&kept), &base(30_000, 6)));
        assert!(due(Some(&kept), &base(61_000, 6)));
        assert!(due(Some(&kept), &base(30_000, 1)), "counter went down");
        let mut other = base(30_000, 6);
        other.boot_id = Some("c".into());
        assert!(due(Some(&kept), &other));
        assert!(due(None, &kept));
    }

    #[test]
    fn store_and_load_round_trip_only_within_a_boot() {
        let dir = tempfile::tempdir().unwrap();
        let b = base(1_000, 5);
        store(dir.path(), None, &b).unwrap();
        assert_eq!(load(dir.path(), Some("b")), Some(b.clone()));
        assert_eq!(load(dir.path(), Some("other boot")), None);
        // Not due: the kept one stays.
        store(dir.path(), Some(&b), &base(2_000, 9)).unwrap();
        assert_eq!(load(dir.path(), Some("b")), Some(b));
    }
}
