//! `gpuhost status --active` (issue 52): the active checks' PTX as NVIDIA's assembler takes it,
//! and their verdicts on reports captured on a real H200 (tests/fixtures/active/), played back
//! through the same child process, pipe, time limit and signals as the real checks. No GPU is
//! needed: the real run is bench/active-gpu-run.sh's (bench/RESULTS-active.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "support/status.rs"]
mod support;
use support::{check, fixtures, gpuhost};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ptx(name: &str) -> PathBuf {
    workspace().join("active/src/ptx").join(name)
}

/// NVIDIA's ptxas: `$GPUHOST_PTXAS`, else the one scripts/deps.sh installs from PyPI
/// (nvidia-cuda-nvcc-cu12, in target/ptxas), else /usr/local/cuda's.
fn ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GPUHOST_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let venv = workspace().join("target/ptxas/lib");
    let found = std::fs::read_dir(&venv).ok().and_then(|d| {
        d.flatten()
            .map(|e| e.path().join("site-packages/nvidia/cuda_nvcc/bin/ptxas"))
            .find(|p| p.exists())
    });
    found.or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/ptxas")).filter(|p| p.exists()))
}

/// Every embedded PTX module is assembled by NVIDIA's ptxas for Ampere, Hopper and Blackwell:
/// a PTX no driver would load fails here.
#[test]
fn every_embedded_ptx_module_assembles_for_sm80_sm90_and_sm100() {
    let Some(ptxas) = ptxas() else {
        assert!(
            std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_none(),
            "NVIDIA's ptxas is needed: scripts/deps.sh test installs it (pip install nvidia-cuda-nvcc-cu12 into target/ptxas)"
        );
        eprintln!("skipped: no ptxas (scripts/deps.sh test installs it)");
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    // The wheel's ptxas may come without its execute bit.
    if let Ok(m) = std::fs::metadata(&ptxas) {
        if m.permissions().mode() & 0o100 == 0 {
            let _ = std::fs::set_permissions(&ptxas, std::fs::Permissions::from_mode(0o755));
        }
    }
    let out = tempfile::tempdir().unwrap();
    let mut kernels = 0;
    for module in ["checks.ptx", "compute.ptx"] {
        let text = std::fs::read_to_string(ptx(module)).unwrap();
        assert!(
            text.contains(".version 7.0"),
            "{module}: PTX ISA 7.0, which R535 loads"
        );
        for arch in ["sm_80", "sm_90", "sm_100"] {
            let o = Command::new(&ptxas)
                .args(["-arch", arch, "-v"])
                .arg(ptx(module))
                .arg("-o")
                .arg(out.path().join(format!("{module}.{arch}.cubin")))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "ptxas -arch {arch} {module}: {err}");
            kernels += err.matches("Function properties for gpuhost_").count();
        }
    }
    // copy, fill, verify; fma32, fma64, mix32, mix64: 7 kernels, 3 architectures
    assert_eq!(kernels, 7 * 3);
}

/// compute.ptx is what its generator writes (the repetition is generated, not hand-copied).
#[test]
fn compute_ptx_is_what_its_generator_writes() {
    let o = Command::new("python3")
        .arg(ptx("gen_compute.py"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let committed = std::fs::read_to_string(ptx("compute.ptx")).unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout) == committed,
        "active/src/ptx/compute.ptx is stale: python3 active/src/ptx/gen_compute.py > active/src/ptx/compute.ptx"
    );
}
