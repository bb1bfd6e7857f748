//! DCGM level 1's CUDA check, in the probe child: `libcuda.so.1` loads and `cuInit(0)`
//! succeeds. A GPU that NVML reads can still be unusable for CUDA (a missing
//! `/dev/nvidia-uvm`, a user-space driver from another release, a broken install), and that
//! is what jobs see.
//!
//! cuInit costs far more than NVML's calls, so a success is kept with what it depends on — the
//! boot, the loaded driver (`/proc/driver/nvidia/version`) and the device nodes
//! `/dev/nvidiactl` and `/dev/nvidia-uvm` (inode and change time: recreated when the modules
//! reload) — in the boot cache (`<run dir>/boot-cache.json`, [`crate::boot_cache`]) and, in a
//! long-lived probe, in memory ([`Memo`]); later runs reuse it while those are the same. A
//! failure is never kept: the next run tries again.

use std::os::raw::c_int;
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::snapshot::CudaCheck;

/// What a kept success depends on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Key {
    pub(crate) boot_id: Option<String>,
    pub(crate) driver: Option<String>,
    /// (path, inode, change time) of each device node that exists.
    pub(crate) nodes: Vec<(String, u64, i64)>,
}

/// What the CUDA check depends on now.
pub(crate) fn key() -> Key {
    let first_line = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
    };
    Key {
        boot_id: crate::probe::boot_id(),
        driver: first_line("/proc/driver/nvidia/version"),
        nodes: ["/dev/nvidiactl", "/dev/nvidia-uvm"]
            .iter()
            .filter_map(|p| {
                std::fs::metadata(p)
                    .ok()
                    .map(|m| (p.to_string(), m.ino(), m.ctime()))
            })
            .collect(),
    }
}

/// A success kept in memory by a long-lived probe (`gpuhost serve`'s child), with what it
/// depends on: each sweep reads that again (two small /proc files, two stats) and reuses the
/// success while it is the same, without the file or a thread.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    kept: Option<(Key, CudaCheck)>,
}

impl Memo {
    /// The kept success when what it depends on has not changed; else what it depends on now
    /// (for [`Memo::remember`]), and the check is to be made ([`check`]).
    pub(crate) fn kept(&mut self) -> Result<CudaCheck, Key> {
        let now = key();
        match &self.kept {
            Some((k, c)) if *k == now => Ok(CudaCheck {
                cached: true,
                init_ms: Some(0.0),
                ..c.clone()
            }),
            _ => {
                self.kept = None;
                Err(now)
            }
        }
    }

    /// Keep `c` if it is a success, for the state `key` it was checked in.
    pub(crate) fn remember(&mut self, key: Key, c: &CudaCheck) {
        self.kept = (c.init_rc == Some(0)).then(|| (key, c.clone()));
    }
}

type CuInit = unsafe extern "C" fn(flags: u32) -> c_int;
type CuDriverGetVersion = unsafe extern "C" fn(version: *mut c_int) -> c_int;

/// Load libcuda.so.1 and call `cuInit(0)` and `cuDriverGetVersion`, uncached.
pub(crate) fn check() -> CudaCheck {
    // SAFETY: loading the NVIDIA user-space driver runs its initialisers, which is what any
    // CUDA program does; the library is never unloaded (see below).
    let lib = match unsafe { libloading::Library::new("libcuda.so.1") } {
        Ok(l) => l,
        Err(e) => {
            return CudaCheck {
                error: Some(format!("libcuda.so.1 not loadable: {e}")),
                ..CudaCheck::default()
            }
        }
    };
    let mut c = CudaCheck {
        loaded: true,
        ..CudaCheck::default()
    };
    // SAFETY: the symbols have these C signatures in every CUDA driver API (cuda.h).
    let (init, version) = unsafe {
        (
            lib.get::<CuInit>(b"cuInit\0").map(|s| *s),
            lib.get::<CuDriverGetVersion>(b"cuDriverGetVersion\0")
                .map(|s| *s),
        )
    };
    match init {
        Ok(init) => {
            let t = Instant::now();
            // SAFETY: cuInit takes flags (must be 0) and returns a CUresult.
            let rc = unsafe { init(0) };
            c.init_ms = Some((t.elapsed().as_secs_f64() * 1e5).round() / 100.0);
            c.init_rc = Some(rc);
            if rc != 0 {
                c.error = Some(format!("cuInit(0) returned {rc} ({})", cu_result(rc)));
            }
        }
        Err(e) => {
            c.loaded = false;
            c.error = Some(format!("libcuda.so.1 has no cuInit: {e}"));
        }
    }
    if let Ok(version) = version {
        let mut v: c_int = 0;
        // SAFETY: the out pointer points at a local.
        if unsafe { version(&mut v) } == 0 {
            c.driver_version = Some(v);
        }
    }
    // Unloading libcuda after cuInit can hang or crash in its destructors: keep it mapped
    // until the probe exits.
    std::mem::forget(lib);
    c
}

/// The CUresult names a health check meets (cuda.h).
pub(crate) fn cu_result(rc: c_int) -> &'static str {
    match rc {
        0 => "CUDA_SUCCESS",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        34 => "CUDA_ERROR_STUB_LIBRARY",
        46 => "CUDA_ERROR_DEVICES_UNAVAILABLE",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        304 => "CUDA_ERROR_OPERATING_SYSTEM",
        802 => "CUDA_ERROR_SYSTEM_NOT_READY",
        803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "see cuda.h",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn success() -> CudaCheck {
        CudaCheck {
            loaded: true,
            init_rc: Some(0),
            driver_version: Some(13000),
            init_ms: Some(250.0),
            ..CudaCheck::default()
        }
    }

    #[test]
    fn the_memo_keeps_a_success_not_a_failure() {
        let mut m = Memo::default();
        let Err(k) = m.kept() else {
            panic!("an empty memo has nothing kept")
        };
        m.remember(
            k,
            &CudaCheck {
                init_rc: Some(999),
                ..CudaCheck::default()
            },
        );
        let Err(k) = m.kept() else {
            panic!("a failure was kept")
        };
        m.remember(k, &success());
        let c = m.kept().unwrap();
        assert!(c.cached);
        assert_eq!((c.init_rc, c.init_ms), (Some(0), Some(0.0)));
    }
}
