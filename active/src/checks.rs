//! The checks on one GPU, in its own thread with its own context: HBM bandwidth, the
//! known-answer compute kernels, HBM integrity, and PCIe (one GPU at a time: GPUs behind one
//! PCIe switch share its uplink). Each check measures and records its figures and conditions;
//! judging is gpuhost-health's. Between steps a check looks at [`Run::go_on`]: past the time
//! limit or after SIGTERM it stops, and every buffer it held is freed on the way out (drop).

use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Result};

use crate::driver::{Context, Cuda, DeviceBuffer, Event, Function, Module, Param, Stream};
use crate::model::{Compute, HbmBandwidth, HbmIntegrity, Mismatch, Pcie};
use crate::sample::Sampler;
use crate::{Fault, Run};

/// The embedded kernels (hand-written PTX; compute.ptx is written by gen_compute.py).
pub const CHECKS_PTX: &str = include_str!("ptx/checks.ptx");
pub const COMPUTE_PTX: &str = include_str!("ptx/compute.ptx");

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const THREADS: u32 = 256;
/// The mix kernels' seeds (one per thread modulo this) and chain length.
const SEEDS: usize = 4096;
const MIX_ITERS: u32 = 1024;
/// How long each rate kernel should run, s: long enough for the clocks and a steady rate.
const RATE_SECONDS: f64 = 0.15;

/// One GPU's context, stream, timing events and kernels.
pub(crate) struct Gpu<'a> {
    pub(crate) cuda: &'a Cuda,
    pub(crate) run: &'a Run,
    pub(crate) bus: String,
    pub(crate) sms: u32,
    pub(crate) sampler: &'a Sampler,
    stream: Stream,
    start: Event,
    end: Event,
    _modules: (Module, Module),
    copy: Function,
    fill: Function,
    verify: Function,
    fma32: Function,
    fma64: Function,
    mix32: Function,
    mix64: Function,
    pub(crate) _ctx: &'a Context,
}

impl<'a> Gpu<'a> {
    pub(crate) fn new(
        cuda: &'a Cuda,
        run: &'a Run,
        ctx: &'a Context,
        bus: String,
        sms: u32,
        sampler: &'a Sampler,
    ) -> Result<Self> {
        let (checks, compute) = match &run.ptx_dir {
            // A benchmark's variants of the kernels (bench/active-gpu-run.sh).
            Some(dir) => {
                let read = |f: &str| {
                    std::fs::read_to_string(std::path::Path::new(dir).join(f))
                        .map_err(|e| anyhow::anyhow!("{dir}/{f}: {e}"))
                };
                (
                    cuda.module(&read("checks.ptx")?)?,
                    cuda.module(&read("compute.ptx")?)?,
                )
            }
            None => (cuda.module(CHECKS_PTX)?, cuda.module(COMPUTE_PTX)?),
        };
        Ok(Gpu {
            copy: cuda.function(&checks, "gpuhost_copy")?,
            fill: cuda.function(&checks, "gpuhost_fill")?,
            verify: cuda.function(&checks, "gpuhost_verify")?,
            fma32: cuda.function(&compute, "gpuhost_fma32")?,
            fma64: cuda.function(&compute, "gpuhost_fma64")?,
            mix32: cuda.function(&compute, "gpuhost_mix32")?,
            mix64: cuda.function(&compute, "gpuhost_mix64")?,
            _modules: (checks, compute),
            stream: cuda.stream()?,
            start: cuda.event()?,
            end: cuda.event()?,
            cuda,
            run,
            bus,
            sms,
            sampler,
            _ctx: ctx,
        })
    }

    /// Blocks to fill every SM with `f`.
    fn grid(&self, f: &Function) -> Result<u32> {
        Ok(self.sms * self.cuda.blocks_per_sm(f, THREADS)?)
    }

    /// Run `work` on the stream between the two events; its time on the GPU, ms.
    fn timed(&self, work: impl FnOnce() -> Result<()>) -> Result<f64> {
        self.cuda.record(&self.start, &self.stream)?;
        work()?;
        self.cuda.record(&self.end, &self.stream)?;
        self.cuda.elapsed_ms(&self.start, &self.end)
    }

    fn conditions(&self, from: Instant) -> crate::model::Conditions {
        self.sampler.window(&self.bus, from, Instant::now())
    }

    /// HBM bandwidth: the copy kernel and `cuMemcpyDtoD` over the same two buffers (up to
    /// 4 GiB each), best of 8 timed iterations of each after one untimed; bytes read and
    /// written both count.
    pub(crate) fn hbm_bandwidth(&self) -> Result<HbmBandwidth> {
        let began = Instant::now();
        let (free, _) = self.cuda.mem_info()?;
        let grid = self.grid(&self.copy)?;
        let quantum = 64 * u64::from(grid) * u64::from(THREADS);
        let want = (free / 4).min(4 * GIB);
        let bytes = want / quantum * quantum;
        if bytes == 0 {
            bail!(
                "too little free memory for the bandwidth check ({} MiB free)",
                free / MIB
            );
        }
        let src = self.cuda.alloc(bytes)?;
        let dst = self.cuda.alloc(bytes)?;
        self.cuda.memset_d32(&src, 0x5a5a_5a5a, &self.stream)?;
        let iterations = 8;
        let gbps = |ms: f64| (2 * bytes) as f64 / (ms / 1e3) / 1e9;
        let mut kernel = 0f64;
        let mut dtod = 0f64;
        for i in 0..=iterations {
            self.run.go_on()?;
            let k = self.timed(|| {
                self.cuda.launch(
                    &self.copy,
                    grid,
                    THREADS,
                    &self.stream,
                    &mut [
                        Param::U64(dst.ptr),
                        Param::U64(src.ptr),
                        Param::U64(bytes / 16),
                    ],
                )
            })?;
            let d = self.timed(|| self.cuda.dtod(&dst, &src, bytes, &self.stream))?;
            if i > 0 {
                kernel = kernel.max(gbps(k));
                dtod = dtod.max(gbps(d));
            }
        }
        Ok(HbmBandwidth {
            buffer_bytes: bytes,
            iterations,
            kernel_gbps: round(kernel),
            dtod_gbps: round(dtod),
            ms: ms_since(began),
            conditions: self.conditions(began),
        })
    }

    /// HBM integrity: allocate up to 90% of the free memory (in 1 GiB pieces, smaller ones at
    /// the end), write each word's own address into it and read it back, then the inverse.
    pub(crate) fn hbm_integrity(&self) -> Result<HbmIntegrity> {
        let began = Instant::now();
        let (free, _) = self.cuda.mem_info()?;
        let target = free / 10 * 9;
        let mut pieces: Vec<DeviceBuffer> = Vec::new();
        let mut tested = 0u64;
        let mut piece = GIB;
        while tested < target && piece >= 16 * MIB {
            self.run.go_on()?;
            let want = piece.min(target - tested) / (16 * MIB) * (16 * MIB);
            if want == 0 {
                break;
            }
            match self.cuda.alloc(want) {
                Ok(b) => {
                    tested += b.bytes;
                    pieces.push(b);
                }
                Err(_) => piece /= 2,
            }
        }
        let counters = self.cuda.alloc(16)?;
        let mut host = self.cuda.alloc_host(16)?;
        let grid_fill = self.grid(&self.fill)?;
        let grid_verify = self.grid(&self.verify)?;
        let mut errors = 0u64;
        let mut first: Option<u64> = None;
        let mut patterns = Vec::new();
        let mut gpu_ms = 0f64;
        for (name, pattern) in [("address", 0u64), ("inverse address", u64::MAX)] {
            patterns.push(name.to_string());
            // errors = 0, first = all ones
            let b = host.bytes_mut();
            b[..8].copy_from_slice(&0u64.to_ne_bytes());
            b[8..16].copy_from_slice(&u64::MAX.to_ne_bytes());
            self.cuda.htod(&counters, &host, 16, &self.stream)?;
            for (i, p) in pieces.iter().enumerate() {
                self.run.go_on()?;
                let fault = match (self.run.fault, i) {
                    (Some(Fault::Hbm), 0) => p.bytes / 16,
                    _ => u64::MAX,
                };
                gpu_ms += self.timed(|| {
                    self.cuda.launch(
                        &self.fill,
                        grid_fill,
                        THREADS,
                        &self.stream,
                        &mut [
                            Param::U64(p.ptr),
                            Param::U64(p.bytes / 16),
                            Param::U64(pattern),
                            Param::U64(fault),
                        ],
                    )
                })?;
            }
            for p in &pieces {
                self.run.go_on()?;
                gpu_ms += self.timed(|| {
                    self.cuda.launch(
                        &self.verify,
                        grid_verify,
                        THREADS,
                        &self.stream,
                        &mut [
                            Param::U64(p.ptr),
                            Param::U64(p.bytes / 16),
                            Param::U64(pattern),
                            Param::U64(counters.ptr),
                            Param::U64(counters.ptr + 8),
                        ],
                    )
                })?;
            }
            self.cuda.dtoh(&host, &counters, 16, &self.stream)?;
            self.cuda.sync(&self.stream)?;
            let b = host.bytes_mut();
            let n = u64::from_ne_bytes(word(b, 0));
            let f = u64::from_ne_bytes(word(b, 8));
            errors += n;
            if n > 0 {
                first = Some(first.map_or(f, |x| x.min(f)));
            }
        }
        drop(pieces);
        Ok(HbmIntegrity {
            free_bytes: free,
            tested_bytes: tested,
            patterns,
            errors,
            first_bad_address: first,
            gbps: round(4.0 * tested as f64 / (gpu_ms.max(1e-3) / 1e3) / 1e9),
            ms: ms_since(began),
            conditions: self.conditions(began),
        })
    }

    /// PCIe: pinned host memory ↔ device, 256 MiB each way, median of 7 after one untimed.
    pub(crate) fn pcie(&self, one_at_a_time: &Mutex<()>) -> Result<Pcie> {
        let _turn = one_at_a_time
            .lock()
            .map_err(|_| anyhow::anyhow!("PCIe turn lock poisoned"))?;
        self.run.go_on()?;
        let began = Instant::now();
        let bytes = 256 * MIB;
        let host = self.cuda.alloc_host(bytes)?;
        let dev = self.cuda.alloc(bytes)?;
        let gbps = |ms: f64| bytes as f64 / (ms / 1e3) / 1e9;
        let (mut h2d, mut d2h) = (Vec::new(), Vec::new());
        for i in 0..8 {
            self.run.go_on()?;
            let a = self.timed(|| self.cuda.htod(&dev, &host, bytes, &self.stream))?;
            let b = self.timed(|| self.cuda.dtoh(&host, &dev, bytes, &self.stream))?;
            if i > 0 {
                h2d.push(round(gbps(a)));
                d2h.push(round(gbps(b)));
            }
        }
        Ok(Pcie {
            bytes,
            h2d_gbps: median(&h2d),
            d2h_gbps: median(&d2h),
            h2d_samples: h2d,
            d2h_samples: d2h,
            ms: ms_since(began),
            conditions: self.conditions(began),
        })
    }

    /// A rate kernel: a short run to learn its speed, then one sized to [`RATE_SECONDS`]; every
    /// chain must end where it began.
    pub(crate) fn rate<T: Float>(&self) -> Result<Compute> {
        self.run.go_on()?;
        let began = Instant::now();
        let f = if T::BITS == 32 {
            &self.fma32
        } else {
            &self.fma64
        };
        let grid = self.grid(f)?;
        let threads = u64::from(grid) * u64::from(THREADS);
        let results = threads * 8;
        let out = self.cuda.alloc(results * T::SIZE)?;
        let fault = match self.run.fault {
            Some(x) if x == T::RATE_FAULT => (threads / 2) as u32,
            _ => u32::MAX,
        };
        let launch = |iters: u32| {
            self.timed(|| {
                self.cuda.launch(
                    f,
                    grid,
                    THREADS,
                    &self.stream,
                    &mut [
                        Param::U64(out.ptr),
                        T::param(T::P),
                        T::param(T::Q),
                        Param::U32(iters),
                        Param::U32(fault),
                    ],
                )
            })
        };
        let probe_iters = 256;
        let probe_ms = launch(probe_iters)?.max(1e-3);
        self.run.go_on()?;
        let iters = ((RATE_SECONDS * 1e3 / probe_ms) * f64::from(probe_iters))
            .clamp(256.0, 50_000_000.0) as u32;
        let ms = launch(iters)?;
        let got = read_back(self.cuda, &out, results, &self.stream)?;
        let expected = |i: u64| {
            let (chain, thread) = (i / threads, i % threads);
            T::from_u32(((thread * 8 + chain) & 4095) as u32).bits()
        };
        let (mismatches, first_mismatch) = compare::<T>(&got, expected);
        let flops = threads as f64 * f64::from(iters) * 64.0 * 2.0;
        Ok(Compute {
            kernel: format!("fma{}", T::BITS),
            precision: format!("fp{}", T::BITS),
            threads,
            iterations: iters,
            results,
            mismatches,
            first_mismatch,
            tflops: Some(round(flops / (ms / 1e3) / 1e12)),
            ms: ms_since(began),
            conditions: self.conditions(began),
        })
    }

    /// A rounding kernel: every thread's chain against the host's own fused multiply-adds.
    pub(crate) fn mix<T: Float>(&self) -> Result<Compute> {
        self.run.go_on()?;
        let began = Instant::now();
        let f = if T::BITS == 32 {
            &self.mix32
        } else {
            &self.mix64
        };
        let grid = self.grid(f)?;
        let threads = u64::from(grid) * u64::from(THREADS);
        let seeds = T::seeds();
        let mut host = self
            .cuda
            .alloc_host((SEEDS as u64 * T::SIZE).max(threads * T::SIZE))?;
        let seed_bytes: Vec<u8> = seeds.iter().flat_map(|s| s.to_bytes()).collect();
        host.bytes_mut()[..seed_bytes.len()].copy_from_slice(&seed_bytes);
        let dev_seeds = self.cuda.alloc(SEEDS as u64 * T::SIZE)?;
        self.cuda
            .htod(&dev_seeds, &host, SEEDS as u64 * T::SIZE, &self.stream)?;
        let out = self.cuda.alloc(threads * T::SIZE)?;
        let fault = match self.run.fault {
            Some(x) if x == T::MIX_FAULT => (threads / 3) as u32,
            _ => u32::MAX,
        };
        self.timed(|| {
            self.cuda.launch(
                f,
                grid,
                THREADS,
                &self.stream,
                &mut [
                    Param::U64(out.ptr),
                    Param::U64(dev_seeds.ptr),
                    T::param(T::A),
                    T::param(T::B),
                    Param::U32(MIX_ITERS),
                    Param::U32(fault),
                ],
            )
        })?;
        // The answers, on the host, while nothing else is asked of the GPU.
        let answers: Vec<u64> = seeds
            .iter()
            .map(|&s| (0..MIX_ITERS).fold(s, |x, _| x.fma(T::A, T::B)).bits())
            .collect();
        let got = read_back(self.cuda, &out, threads, &self.stream)?;
        let (mismatches, first_mismatch) =
            compare::<T>(&got, |i| answers[(i % SEEDS as u64) as usize]);
        Ok(Compute {
            kernel: format!("mix{}", T::BITS),
            precision: format!("fp{}", T::BITS),
            threads,
            iterations: MIX_ITERS,
            results: threads,
            mismatches,
            first_mismatch,
            tflops: None,
            ms: ms_since(began),
            conditions: self.conditions(began),
        })
    }
}

fn word(b: &[u8], at: usize) -> [u8; 8] {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    w
}

/// `n` results of `T::SIZE` bytes from the device, as bit patterns.
fn read_back(cuda: &Cuda, dev: &DeviceBuffer, n: u64, s: &Stream) -> Result<Vec<u64>> {
    let mut host = cuda.alloc_host(dev.bytes)?;
    cuda.dtoh(&host, dev, dev.bytes, s)?;
    cuda.sync(s)?;
    let per = (dev.bytes / n.max(1)) as usize;
    Ok(host
        .bytes_mut()
        .chunks_exact(per)
        .take(n as usize)
        .map(|c| match per {
            4 => u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
            _ => u64::from_ne_bytes(word(c, 0)),
        })
        .collect())
}

fn compare<T: Float>(got: &[u64], expected: impl Fn(u64) -> u64) -> (u64, Option<Mismatch>) {
    let mut n = 0u64;
    let mut first = None;
    for (i, &g) in got.iter().enumerate() {
        let e = expected(i as u64);
        if g != e {
            n += 1;
            first.get_or_insert_with(|| Mismatch {
                index: i as u64,
                expected: format!("{e:#0w$x}", w = T::HEX),
                got: format!("{g:#0w$x}", w = T::HEX),
            });
        }
    }
    (n, first)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(crate) fn ms_since(t: Instant) -> f64 {
    round(t.elapsed().as_secs_f64() * 1e3)
}

/// f32 and f64, for the kernels that come in both.
pub(crate) trait Float: Copy {
    const BITS: u32;
    const SIZE: u64;
    const HEX: usize;
    /// The rate kernels' factors (integers: every product and sum stays exact).
    const P: Self;
    const Q: Self;
    /// The mix kernels' factor and addend (full mantissas: every step rounds).
    const A: Self;
    const B: Self;
    const RATE_FAULT: Fault;
    const MIX_FAULT: Fault;
    fn param(v: Self) -> Param;
    fn from_u32(v: u32) -> Self;
    fn bits(self) -> u64;
    fn fma(self, a: Self, b: Self) -> Self;
    fn to_bytes(self) -> Vec<u8>;
    /// 4096 seeds in [1, 2) with full mantissas, from a fixed xorshift.
    fn seeds() -> Vec<Self>;
}

fn xorshift() -> impl Iterator<Item = u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

impl Float for f32 {
    const BITS: u32 = 32;
    const SIZE: u64 = 4;
    const HEX: usize = 10;
    // (2039 + k) * (2029 - k) + 4095 < 2^23
    const P: f32 = 2039.0;
    const Q: f32 = 2029.0;
    const A: f32 = 0.999_023_5;
    const B: f32 = 0.123_456_79;
    const RATE_FAULT: Fault = Fault::Fp32;
    const MIX_FAULT: Fault = Fault::Mix32;
    fn param(v: Self) -> Param {
        Param::F32(v)
    }
    fn from_u32(v: u32) -> Self {
        v as f32
    }
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
    fn fma(self, a: Self, b: Self) -> Self {
        self.mul_add(a, b)
    }
    fn to_bytes(self) -> Vec<u8> {
        self.to_ne_bytes().to_vec()
    }
    fn seeds() -> Vec<Self> {
        xorshift()
            .take(SEEDS)
            .map(|r| f32::from_bits(0x3F80_0000 | (r as u32 & 0x007F_FFFF)))
            .collect()
    }
}

impl Float for f64 {
    const BITS: u32 = 64;
    const SIZE: u64 = 8;
    const HEX: usize = 18;
    // (33554393 + k) * (33554383 - k) + 4095 < 2^51
    const P: f64 = 33_554_393.0;
    const Q: f64 = 33_554_383.0;
    const A: f64 = 0.999_023_437_512_345_6;
    const B: f64 = 0.123_456_789_012_345_68;
    const RATE_FAULT: Fault = Fault::Fp64;
    const MIX_FAULT: Fault = Fault::Mix64;
    fn param(v: Self) -> Param {
        Param::F64(v)
    }
    fn from_u32(v: u32) -> Self {
        f64::from(v)
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn fma(self, a: Self, b: Self) -> Self {
        self.mul_add(a, b)
    }
    fn to_bytes(self) -> Vec<u8> {
        self.to_ne_bytes().to_vec()
    }
    fn seeds() -> Vec<Self> {
        xorshift()
            .take(SEEDS)
            .map(|r| f64::from_bits(0x3FF0_0000_0000_0000 | (r & 0x000F_FFFF_FFFF_FFFF)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rate kernels' chains stay exact: the largest value on the way is representable.
    #[test]
    fn rate_chains_stay_exact() {
        for k in 0..8u32 {
            let p = f64::from(2039 + k);
            let q = f64::from(2029 - k);
            assert!(p * q + 4095.0 < f64::from(1u32 << 24));
            let p = 33_554_393f64 + f64::from(k);
            let q = 33_554_383f64 - f64::from(k);
            assert!(p * q + 4095.0 < 2f64.powi(53));
            // and exactly representable, so the GPU's fma and the host's agree on it
            assert_eq!((p * q + 4095.0) - p * q, 4095.0);
        }
    }

    /// The mix chains stay in normal numbers and keep full mantissas (every step rounds).
    #[test]
    fn mix_chains_stay_normal_and_round() {
        let seeds = f32::seeds();
        assert_eq!(seeds.len(), SEEDS);
        let ends: Vec<f32> = seeds
            .iter()
            .map(|&s| (0..MIX_ITERS).fold(s, |x, _| x.fma(f32::A, f32::B)))
            .collect();
        assert!(ends.iter().all(|x| x.is_normal() && *x > 1.0 && *x < 200.0));
        let distinct: std::collections::BTreeSet<u32> = ends.iter().map(|x| x.to_bits()).collect();
        assert!(distinct.len() > SEEDS / 2, "{}", distinct.len());
        // and the host's fma is fused: one rounding, not two
        let (a, b, c) = (1.0f32 + f32::EPSILON, 1.0f32 - f32::EPSILON, -1.0f32);
        assert_ne!(a.mul_add(b, c), a * b + c);
    }

    #[test]
    fn a_one_ulp_difference_is_a_mismatch_with_its_index() {
        let expected = |i: u64| f32::from_u32(i as u32).bits();
        let mut got: Vec<u64> = (0..100).map(expected).collect();
        assert_eq!(compare::<f32>(&got, expected).0, 0);
        got[37] ^= 1;
        let (n, first) = compare::<f32>(&got, expected);
        assert_eq!(n, 1);
        let first = first.unwrap_or_default();
        assert_eq!(
            (first.index, first.expected.as_str(), first.got.as_str()),
            (37, "0x42140000", "0x42140001")
        );
    }
}
