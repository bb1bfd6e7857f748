//! The conditions beside each figure: a thread that reads NVML for every GPU every 10 ms while
//! the checks run (clocks, temperature, power, clock event reasons, the PCIe link), and the
//! window of samples each figure was measured in. NVML is only read: nothing is set.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Nvml;

use crate::model::{Conditions, Setting};

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    sm: Option<u32>,
    mem: Option<u32>,
    temp: Option<u32>,
    power: Option<u32>,
    reasons: Option<u64>,
    gen: Option<u32>,
    width: Option<u32>,
}

/// The samples of every GPU (by PCI bus id), as they come.
pub(crate) struct Sampler {
    samples: Arc<Mutex<Vec<(Instant, usize, Sample)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    buses: Vec<String>,
}

impl Sampler {
    /// Start sampling the GPUs with these bus ids (NVML's form); without NVML, no samples.
    pub(crate) fn start(nvml: Option<Arc<Nvml>>, buses: Vec<String>) -> Sampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = nvml.map(|nvml| {
            let (samples, stop, buses) = (samples.clone(), stop.clone(), buses.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for (i, bus) in buses.iter().enumerate() {
                        let Ok(d) = nvml.device_by_pci_bus_id(bus.as_str()) else {
                            continue;
                        };
                        let s = Sample {
                            sm: d.clock_info(Clock::SM).ok(),
                            mem: d.clock_info(Clock::Memory).ok(),
                            temp: d.temperature(TemperatureSensor::Gpu).ok(),
                            power: d.power_usage().ok(),
                            reasons: d.current_throttle_reasons().ok().map(|r| r.bits()),
                            gen: d.current_pcie_link_gen().ok(),
                            width: d.current_pcie_link_width().ok(),
                        };
                        if let Ok(mut v) = samples.lock() {
                            v.push((Instant::now(), i, s));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        });
        Sampler {
            samples,
            stop,
            thread,
            buses,
        }
    }

    /// The conditions of GPU `bus` between `from` and `to`: medians of the clocks, highest
    /// temperature and power, every clock event reason, the best PCIe link. A window shorter
    /// than the sampling period takes the first sample after it.
    pub(crate) fn window(&self, bus: &str, from: Instant, to: Instant) -> Conditions {
        let Some(gpu) = self.buses.iter().position(|b| b == bus) else {
            return Conditions::default();
        };
        let Ok(all) = self.samples.lock() else {
            return Conditions::default();
        };
        let mine = || all.iter().filter(|(_, g, _)| *g == gpu);
        let mut inside: Vec<Sample> = mine()
            .filter(|(t, _, _)| *t >= from && *t <= to)
            .map(|(_, _, s)| *s)
            .collect();
        if inside.is_empty() {
            inside.extend(mine().find(|(t, _, _)| *t >= to).map(|(_, _, s)| *s));
        }
        conditions(&inside)
    }

    /// Stop the thread.
    pub(crate) fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn conditions(s: &[Sample]) -> Conditions {
    let median = |f: fn(&Sample) -> Option<u32>| {
        let mut v: Vec<u32> = s.iter().filter_map(f).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    };
    let max = |f: fn(&Sample) -> Option<u32>| s.iter().filter_map(f).max();
    let reasons: Vec<u64> = s.iter().filter_map(|x| x.reasons).collect();
    Conditions {
        samples: s.len() as u32,
        sm_clock_mhz: median(|x| x.sm),
        mem_clock_mhz: median(|x| x.mem),
        temperature_c: max(|x| x.temp),
        power_mw: max(|x| x.power),
        clock_event_reasons: (!reasons.is_empty()).then(|| reasons.iter().fold(0, |a, b| a | b)),
        pcie_gen: max(|x| x.gen),
        pcie_width: max(|x| x.width),
    }
}

/// The GPU's settings that matter to its figures (read, never changed).
pub(crate) fn setting(nvml: Option<&Nvml>, bus: &str) -> Setting {
    let Some(d) = nvml.and_then(|n| n.device_by_pci_bus_id(bus).ok()) else {
        return Setting::default();
    };
    Setting {
        ecc_enabled: d.is_ecc_enabled().ok().map(|e| e.currently_enabled),
        power_limit_mw: d.enforced_power_limit().ok(),
        pcie_gen_max: d.max_pcie_link_gen().ok(),
        pcie_width_max: d.max_pcie_link_width().ok(),
        persistence_mode: d.is_in_persistent_mode().ok(),
    }
}
