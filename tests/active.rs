//! `gpuhost status --active` (issue 52): the active checks' PTX as NVIDIA's assembler takes it,
//! and their verdicts on reports captured on a real H100 (tests/fixtures/active/), played back
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

/// tests/fixtures/active: reports of `gpuhost-active-probe` captured on a real GPU
/// (bench/active-gpu-run.sh; the README there says which machine).
fn active_fixture(name: &str) -> PathBuf {
    workspace().join("tests/fixtures/active").join(name)
}

fn report(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(active_fixture(name)).unwrap()).unwrap()
}

/// `gpuhost status --active` with the child playing `fixture` back, judged beside the captured
/// H200 snapshot; its JSON report and exit code.
fn judged(run: &Path, fixture: &Path, extra: &[&str]) -> (serde_json::Value, Option<i32>) {
    let o = gpuhost(run)
        .args(["status", "--format", "json", "--from-snapshot"])
        .arg(fixtures().join("h200-snapshot.json"))
        .args(["--active", "--active-fixture"])
        .arg(fixture)
        .args(extra)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    (v, o.status.code())
}

/// An edited copy of a captured report, in `dir`.
fn edited(dir: &Path, name: &str, edit: &dyn Fn(&mut serde_json::Value)) -> PathBuf {
    let mut v = report(name);
    edit(&mut v);
    let p = dir.join(format!("edited-{name}"));
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    p
}

fn severity(v: &serde_json::Value, id: &str) -> String {
    check(v, id)["severity"].as_str().unwrap_or("").to_string()
}

fn value(v: &serde_json::Value, id: &str) -> String {
    check(v, id)["value"].as_str().unwrap_or("").to_string()
}

/// The captured GPU's reference row (the H100 80GB HBM3 the GPU machine lent).
fn reference() -> &'static gpuhost_nvidia::perf::Reference {
    let id = report("h100.json")["gpus"][0]["pci_device_id"]
        .as_u64()
        .unwrap() as u16;
    gpuhost_nvidia::perf::reference(id).unwrap()
}

/// The healthy capture: every active check OK, the figures in the values, the report's
/// conditions in the JSON, and the figures with their floors in the Prometheus text.
#[test]
fn a_healthy_gpus_figures_pass_in_every_format() {
    let run = tempfile::tempdir().unwrap();
    let r = report("h100.json");
    let g = &r["gpus"][0];
    let (v, code) = judged(run.path(), &active_fixture("h100.json"), &[]);
    for id in [
        "active.run",
        "gpu.active.hbm_bandwidth",
        "gpu.active.hbm_integrity",
        "gpu.active.pcie",
        "gpu.active.compute",
    ] {
        assert_eq!(severity(&v, id), "OK", "{id}: {}", value(&v, id));
    }
    // The captured H200 snapshot itself is UNKNOWN (no systemd in that VM): not the active part.
    assert_eq!(code, Some(3));
    let hbm = value(&v, "gpu.active.hbm_bandwidth");
    let kernel = g["hbm"]["kernel_gbps"].as_f64().unwrap();
    assert!(
        hbm.contains(&format!("copy kernel {kernel:.0} GB/s")),
        "{hbm}"
    );
    assert!(
        hbm.contains(&format!("peak of {:.0} GB/s", reference().hbm_gbps)),
        "{hbm}"
    );
    let pcie = value(&v, "gpu.active.pcie");
    assert!(
        pcie.contains("floor 47.3 GB/s") && pcie.contains("link during the copy Gen5 x16"),
        "{pcie}"
    );
    let integrity = value(&v, "gpu.active.hbm_integrity");
    assert!(
        integrity.contains("0 word(s) wrong") && integrity.contains("2 pattern(s)"),
        "{integrity}"
    );
    let compute = value(&v, "gpu.active.compute");
    assert!(
        compute.contains("exact") && compute.contains("FP32") && compute.contains("FP64"),
        "{compute}"
    );
    // the conditions ride along in the JSON
    let kept = &v["snapshot"]["active"]["report"]["gpus"][0]["hbm"]["conditions"];
    assert!(kept["sm_clock_mhz"].as_u64().unwrap() > 0, "{kept}");
    // Prometheus: the figures, their floors, ratios above 1, checked by promtool
    let o = gpuhost(run.path())
        .args(["status", "--format", "prometheus", "--from-snapshot"])
        .arg(fixtures().join("h200-snapshot.json"))
        .args(["--active", "--active-fixture"])
        .arg(active_fixture("h100.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let ratio = |figure: &str| -> f64 {
        text.lines()
            .find(|l| {
                l.starts_with("gpuhost_active_floor_ratio{")
                    && l.contains(&format!("figure=\"{figure}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("no floor ratio for {figure}:\n{text}"))
    };
    for f in ["hbm_copy", "pcie_h2d", "pcie_d2h", "fp32", "fp64"] {
        assert!(ratio(f) > 1.0, "{f}: {}", ratio(f));
    }
    assert!(
        text.contains(&format!("model=\"{:#06x}\"", reference().device_id)),
        "{text}"
    );
    assert!(
        text.contains("gpuhost_active_condition_sm_clock_hertz{"),
        "{text}"
    );
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus)");
    use std::io::Write;
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let p = promtool.wait_with_output().unwrap();
    assert!(
        p.status.success(),
        "{}{}",
        String::from_utf8_lossy(&p.stdout),
        String::from_utf8_lossy(&p.stderr)
    );
}

/// One wrong word of HBM, and one result one ulp off in each known-answer kernel, injected on
/// the real GPU: CRITICAL, with the count and where, exit 2.
#[test]
fn wrong_answers_captured_on_the_real_gpu_are_critical() {
    let run = tempfile::tempdir().unwrap();
    let (v, code) = judged(run.path(), &active_fixture("h100-fault-hbm.json"), &[]);
    assert_eq!(code, Some(2));
    assert_eq!(severity(&v, "gpu.active.hbm_integrity"), "CRITICAL");
    let s = value(&v, "gpu.active.hbm_integrity");
    assert!(
        s.contains("1 word(s) wrong") && s.contains("the first at device address 0x"),
        "{s}"
    );
    for (fixture, kernel) in [
        ("h100-fault-fp32.json", "fma32"),
        ("h100-fault-fp64.json", "fma64"),
        ("h100-fault-mix32.json", "mix32"),
        ("h100-fault-mix64.json", "mix64"),
    ] {
        let (v, code) = judged(run.path(), &active_fixture(fixture), &[]);
        assert_eq!(code, Some(2), "{fixture}");
        assert_eq!(severity(&v, "gpu.active.compute"), "CRITICAL", "{fixture}");
        let s = value(&v, "gpu.active.compute");
        assert!(
            s.starts_with("silent data corruption") && s.contains("1 of ") && s.contains(kernel),
            "{fixture}: {s}"
        );
        // the other checks of that run are still judged on their own
        assert_eq!(severity(&v, "gpu.active.hbm_integrity"), "OK", "{fixture}");
        assert_eq!(
            severity(&v, "active.run"),
            "WARNING",
            "{fixture}: a test run says so"
        );
    }
}

/// What the real GPU did not show, made from its report: a down-trained PCIe link, slow HBM,
/// low clocks, an unknown model, a busy GPU, a MIG GPU, memory mostly in use, a stopped run.
#[test]
fn derived_faults_are_judged_with_their_reason() {
    let run = tempfile::tempdir().unwrap();
    let dir = run.path();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, &str, &str, &str, i32)> = vec![
        (
            "link trained at Gen3 x16",
            Box::new(|v| {
                let p = &mut v["gpus"][0]["pcie"];
                p["h2d_gbps"] = 12.1.into();
                p["d2h_gbps"] = 12.2.into();
                p["conditions"]["pcie_gen"] = 3.into();
            }),
            "gpu.active.pcie",
            "CRITICAL",
            "the link trained below what it supports (Gen3 x16, not Gen5 x16)",
            2,
        ),
        (
            "HBM at 0.7x",
            Box::new(|v| v["gpus"][0]["hbm"]["kernel_gbps"] = (reference().hbm_gbps * 0.7).into()),
            "gpu.active.hbm_bandwidth",
            "CRITICAL",
            "HBM slower than a healthy GPU",
            2,
        ),
        (
            "FP64 at half rate, power capped",
            Box::new(|v| {
                for c in v["gpus"][0]["compute"].as_array_mut().unwrap() {
                    if c["kernel"] == "fma64" {
                        c["tflops"] = (reference().fp64_tflops * 0.44).into();
                        c["conditions"]["clock_event_reasons"] = 4.into();
                    }
                }
            }),
            "gpu.active.compute",
            "WARNING",
            "FP64 at 0.44× peak",
            1,
        ),
        (
            "a model with no reference",
            Box::new(|v| v["gpus"][0]["pci_device_id"] = 0x1234.into()),
            "gpu.active.hbm_bandwidth",
            "WARNING",
            "no reference for this GPU",
            1,
        ),
        (
            "a busy GPU",
            Box::new(|v| {
                let g = &mut v["gpus"][0];
                for k in ["hbm", "integrity", "pcie"] {
                    g[k] = serde_json::Value::Null;
                }
                g["compute"] = serde_json::json!([]);
                g["skipped"] = "busy".into();
                g["reason"] = "1 compute process(es) run on it (pid 4242): not touched; --force checks it anyway".into();
            }),
            "gpu.active",
            "WARNING",
            "pid 4242",
            1,
        ),
        (
            "a MIG GPU",
            Box::new(|v| {
                let g = &mut v["gpus"][0];
                for k in ["hbm", "integrity", "pcie"] {
                    g[k] = serde_json::Value::Null;
                }
                g["compute"] = serde_json::json!([]);
                g["skipped"] = "mig".into();
                g["reason"] = "MIG mode is enabled: the whole-GPU checks do not apply (n/a)".into();
            }),
            "gpu.active",
            "N/A",
            "MIG mode is enabled",
            0,
        ),
        (
            "most memory in use",
            Box::new(|v| {
                let i = &mut v["gpus"][0]["integrity"];
                let free = i["free_bytes"].as_u64().unwrap();
                i["tested_bytes"] = (free / 2).into();
            }),
            "gpu.active.hbm_integrity",
            "WARNING",
            "(50% of the free memory)",
            1,
        ),
        (
            "stopped by SIGTERM before PCIe",
            Box::new(|v| {
                v["stopped"] = "SIGTERM".into();
                v["gpus"][0]["pcie"] = serde_json::Value::Null;
                v["gpus"][0]["skipped"] = "stopped".into();
            }),
            "gpu.active.pcie",
            "UNKNOWN",
            "not finished: the run was stopped",
            3,
        ),
    ];
    for (name, edit, id, sev, text, worst) in cases {
        let f = edited(dir, "h100.json", &*edit);
        let (v, code) = judged(dir, &f, &[]);
        assert_eq!(severity(&v, id), sev, "{name}: {}", value(&v, id));
        assert!(value(&v, id).contains(text), "{name}: {}", value(&v, id));
        // the captured snapshot is UNKNOWN on its own; CRITICAL outranks it
        assert_eq!(code, Some(if worst == 2 { 2 } else { 3 }), "{name}");
    }
}

/// The child runs past its limit: it is sent SIGTERM 2 s after it (and answers what it
/// finished), or, stuck like a hung kernel, killed 3 s later; either way UNKNOWN, never a hang.
#[test]
fn a_child_past_its_limit_is_stopped_then_killed() {
    let run = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (v, code) = judged(
        run.path(),
        &active_fixture("h100.json"),
        &["--active-seconds", "1", "--active-fixture-sleep", "60"],
    );
    let took = t.elapsed();
    assert_eq!(code, Some(3));
    assert_eq!(severity(&v, "active.run"), "UNKNOWN");
    assert!(
        value(&v, "active.run").contains("stopped by SIGTERM"),
        "{}",
        value(&v, "active.run")
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(6),
        "{took:?}"
    );
    let t = Instant::now();
    let (v, code) = judged(
        run.path(),
        &active_fixture("h100.json"),
        &[
            "--active-seconds",
            "1",
            "--active-fixture-sleep",
            "60",
            "--active-fixture-hang",
        ],
    );
    let took = t.elapsed();
    assert_eq!(code, Some(3));
    let s = value(&v, "active.run");
    assert!(
        s.contains("gave no report") && s.contains("was killed"),
        "{s}"
    );
    assert!(
        took >= Duration::from_secs(6) && took < Duration::from_secs(9),
        "{took:?}"
    );
}

/// SIGTERM to `gpuhost status --active` itself reaches the child, which stops and reports; the
/// run is UNKNOWN (exit 3) at once, not at the child's limit.
#[test]
fn sigterm_stops_the_child_and_the_run_is_unknown() {
    let run = tempfile::tempdir().unwrap();
    let child = gpuhost(run.path())
        .args(["status", "--format", "json", "--from-snapshot"])
        .arg(fixtures().join("h200-snapshot.json"))
        .args(["--active", "--active-seconds", "60", "--active-fixture"])
        .arg(active_fixture("h100.json"))
        .args(["--active-fixture-sleep", "60"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let t = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        value(&v, "active.run").contains("stopped by SIGTERM"),
        "{}",
        value(&v, "active.run")
    );
}

/// No driver on this machine (CI): the real child says so in one line, UNKNOWN, exit 3; the
/// fallback `gpuhost active-probe` and the helper program answer alike.
#[test]
fn without_libcuda_the_active_checks_are_unknown_with_the_reason() {
    if Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists()
        || Path::new("/usr/lib64/libcuda.so.1").exists()
    {
        eprintln!("skipped: this machine has libcuda");
        return;
    }
    for helper in ["", env!("CARGO_BIN_EXE_gpuhost-active-probe")] {
        let run = tempfile::tempdir().unwrap();
        let o = gpuhost(run.path())
            .env("GPUHOST_ACTIVE_PROBE", helper)
            .args(["status", "--format", "json", "--from-snapshot"])
            .arg(fixtures().join("h200-snapshot.json"))
            .arg("--active")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(severity(&v, "active.run"), "UNKNOWN");
        let s = value(&v, "active.run");
        assert!(
            s.contains("libcuda.so.1 cannot be loaded"),
            "{helper:?}: {s}"
        );
    }
}
