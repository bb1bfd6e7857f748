//! Verdicts on the real H200 snapshot (captured with `gpuhost status --dump-snapshot`, see
//! bench/RESULTS-status.md) and on failures crafted from it: changed readings, fake sysfs
//! trees, kernel log samples.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use gpuhost_health::snapshot::{PciDevice, ProbeStatus, Reading, RemappedRows, Snapshot};
use gpuhost_health::{
    collect_host, collect_kernel_log, judge, overall, render_json, render_prometheus, render_table,
    Check, Expect, Severity,
};
use gpuhost_host::host::Host;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/status")
}

fn h200() -> Snapshot {
    let text = std::fs::read_to_string(fixtures().join("h200-snapshot.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn check<'a>(checks: &'a [Check], id: &str) -> &'a Check {
    checks
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no check {id} in {checks:#?}"))
}

fn no_expect() -> Expect {
    Expect::default()
}

/// Copy a fixture tree (files and links) into a temporary directory.
fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &dst).unwrap();
        } else if ft.is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

fn h200_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("h200-root"), dir.path());
    dir
}

const GPU0: &str = "sys/bus/pci/devices/0000:00:06.0";

#[test]
fn real_h200_gpu_checks_are_ok_or_na() {
    let s = h200();
    assert_eq!(s.nvml.status, ProbeStatus::Ok);
    let checks = judge(&s, &no_expect()).checks;
    for c in &checks {
        let host_service = c.id.starts_with("services.");
        if !host_service {
            assert!(
                matches!(c.severity, Severity::Ok | Severity::NotApplicable),
                "{c:?}"
            );
        }
    }
    // Hopper has no page retirement; a single-GPU VM has no NVLink and no fabric: n/a.
    for id in ["gpu.retired_pages", "gpu.nvlink", "gpu.fabric"] {
        let c = check(&checks, id);
        assert_eq!(c.severity, Severity::NotApplicable, "{c:?}");
        assert_eq!(c.value, "n/a");
        assert!(c.hint.is_none());
    }
    assert_eq!(check(&checks, "gpu.count").value, "NVML 1, PCI 1");
    assert_eq!(check(&checks, "gpu.ecc.mode").value, "ECC enabled");
    // That machine has no systemd and no Docker: said so, not hidden.
    assert_eq!(check(&checks, "services.state").severity, Severity::Unknown);
    assert_eq!(
        check(&checks, "services.nvidia_runtime").severity,
        Severity::Warning
    );
}

#[test]
fn not_supported_is_never_a_warning() {
    let mut s = h200();
    let g = &mut s.nvml.gpus[0];
    g.ecc_mode = Reading::NotSupported;
    g.ecc_volatile_uncorrected = Reading::NotSupported;
    g.ecc_aggregate_uncorrected = Reading::NotSupported;
    g.remapped_rows = Reading::NotSupported;
    g.recovery_action = Reading::NotSupported;
    g.temperature_c = Reading::NotSupported;
    g.clock_event_reasons = Reading::NotSupported;
    g.power_limit_enforced_mw = Reading::NotSupported;
    g.pcie_gen_current = Reading::NotSupported;
    g.persistence_mode = Reading::NotSupported;
    g.mig_mode = Reading::NotSupported;
    let judged = judge(&s, &no_expect());
    for c in judged.checks.iter().filter(|c| c.id.starts_with("gpu.")) {
        assert!(
            matches!(c.severity, Severity::Ok | Severity::NotApplicable),
            "{c:?}"
        );
    }
    // And n/a values are omitted from the metrics, not written as 0.
    let prom = render_prometheus(&s, &judged);
    for m in [
        "gpuhost_gpu_ecc_enabled",
        "gpuhost_gpu_remapped_rows",
        "gpuhost_gpu_temperature_celsius",
        "gpuhost_gpu_recovery_action",
        "gpuhost_gpu_persistence_mode",
        "gpuhost_gpu_mig_mode",
    ] {
        assert!(!prom.contains(m), "{m} written although not supported");
    }
}

#[test]
fn volatile_uncorrectable_ecc_is_critical() {
    let mut s = h200();
    s.nvml.gpus[0].ecc_volatile_uncorrected = Reading::Value(2);
    s.nvml.gpus[0].ecc_aggregate_uncorrected = Reading::Value(2);
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "gpu.ecc.volatile_uncorrected");
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.value.contains('2'));
    assert!(c.hint.as_deref().unwrap().contains("nvidia-smi -r -i 0"));
    assert_eq!(
        check(&checks, "gpu.ecc.aggregate_uncorrected").severity,
        Severity::Warning
    );
    assert_eq!(overall(&checks), Severity::Critical);
    assert_eq!(overall(&checks).exit_code(), 2);
}

fn remap(s: &mut Snapshot, unc: u32, pending: bool, failure: bool) {
    s.nvml.gpus[0].remapped_rows = Reading::Value(RemappedRows {
        correctable: 0,
        uncorrectable: unc,
        pending,
        failure,
    });
}

#[test]
fn pending_row_remap_wants_a_reset() {
    let mut s = h200();
    remap(&mut s, 1, true, false);
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "gpu.remap.pending");
    assert_eq!(c.severity, Severity::Warning);
    assert!(c.hint.as_deref().unwrap().contains("reset"));
    assert_eq!(check(&checks, "gpu.remap.failure").severity, Severity::Ok);
}

#[test]
fn row_remap_failure_is_critical() {
    let mut s = h200();
    remap(&mut s, 3, false, true);
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "gpu.remap.failure");
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.hint.as_deref().unwrap().contains("RMA"));
}

#[test]
fn more_than_512_uncorrectable_rows_is_critical() {
    let mut s = h200();
    remap(&mut s, 512, false, false);
    let checks = judge(&s, &no_expect()).checks;
    assert_eq!(
        check(&checks, "gpu.remap.uncorrectable").severity,
        Severity::Ok
    );
    remap(&mut s, 513, false, false);
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "gpu.remap.uncorrectable");
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.value.contains("513"), "{}", c.value);
}

#[test]
fn recovery_action_other_than_none_is_critical() {
    let mut s = h200();
    s.nvml.gpus[0].recovery_action = Reading::Value(2);
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "gpu.recovery_action");
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.value.contains("reboot"));
}

#[test]
fn driver_library_mismatch_shows_both_versions() {
    let mut s = h200();
    s.nvml = gpuhost_health::snapshot::NvmlProbe {
        status: ProbeStatus::VersionMismatch,
        error: Some("Driver/library version mismatch".into()),
        ..Default::default()
    };
    s.host.kernel_module_version = Some("580.159.04".into());
    s.host.nvml_library = Some(gpuhost_health::snapshot::NvmlLibrary {
        path: "/usr/lib64/libnvidia-ml.so.1".into(),
        version: Some("580.201.01".into()),
    });
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "nvml.init");
    assert_eq!(c.severity, Severity::Critical);
    assert!(
        c.value.contains("580.159.04") && c.value.contains("580.201.01"),
        "{}",
        c.value
    );
    let hint = c.hint.as_deref().unwrap();
    assert!(
        hint.contains("reboot") && hint.contains("modprobe"),
        "{hint}"
    );
    // The GPU is still on PCI, and NVML cannot count it: no per-GPU NVML checks are invented.
    assert!(checks.iter().all(|c| !c.id.starts_with("gpu.ecc")));
}

#[test]
fn fallen_off_gpu_in_sysfs_is_critical() {
    let root = h200_root();
    // Config space of a device that fell off the bus reads all-ones.
    let mut cfg = std::fs::read(root.path().join(GPU0).join("config")).unwrap();
    cfg[..4].copy_from_slice(&[0xff; 4]);
    std::fs::write(root.path().join(GPU0).join("config"), cfg).unwrap();
    let mut s = h200();
    s.host = collect_host(&Host::new(root.path()).unwrap());
    assert!(s.host.pci[0].fell_off());
    // …and NVML no longer counts it.
    s.nvml.device_count = Some(0);
    s.nvml.gpus.clear();
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "pci.config");
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.value.contains("fell off the bus"), "{}", c.value);
    assert_eq!(c.gpu.as_ref().unwrap().pci_bus_id, "00000000:00:06.0");
    assert_eq!(check(&checks, "gpu.count").severity, Severity::Critical);
    assert_eq!(overall(&checks).exit_code(), 2);
}

#[test]
fn captured_sysfs_tree_reads_like_the_live_machine() {
    let root = h200_root();
    let h = collect_host(&Host::new(root.path()).unwrap());
    let live = h200().host;
    assert_eq!(h.pci, live.pci);
    assert_eq!(h.kernel_module_version.as_deref(), Some("580.159.04"));
}

#[test]
fn pci_link_narrower_than_max_and_aer_counters() {
    let root = h200_root();
    let d = root.path().join(GPU0);
    std::fs::write(d.join("current_link_width"), "8\n").unwrap();
    std::fs::write(
        d.join("aer_dev_fatal"),
        "Undefined 0\nDLP 0\nTOTAL_ERR_FATAL 1\n",
    )
    .unwrap();
    std::fs::write(d.join("aer_dev_correctable"), "RxErr 3\nTOTAL_ERR_COR 3\n").unwrap();
    let mut s = h200();
    s.host = collect_host(&Host::new(root.path()).unwrap());
    let checks = judge(&s, &no_expect()).checks;
    assert_eq!(check(&checks, "pci.link").severity, Severity::Warning);
    let aer = check(&checks, "pci.aer");
    assert_eq!(aer.severity, Severity::Critical);
    assert!(aer.value.contains("fatal 1"), "{}", aer.value);
}

#[test]
fn gpu_count_below_pci_or_expected_is_critical() {
    // A second GPU on PCI that NVML does not see.
    let mut s = h200();
    let mut other: PciDevice = s.host.pci[0].clone();
    other.address = "0000:00:07.0".into();
    s.host.pci.push(other);
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "gpu.count");
    assert_eq!(c.severity, Severity::Critical);
    assert_eq!(c.value, "NVML 1, PCI 2; not seen by NVML: 00000000:00:07.0");

    // The profile says 8.
    let s = h200();
    let expect = Expect {
        gpus: Some(8),
        gpus_source: Some("profile hgx".into()),
        ..Expect::default()
    };
    let c = check(&judge(&s, &expect).checks, "gpu.count").clone();
    assert_eq!(c.severity, Severity::Critical);
    assert_eq!(c.value, "NVML 1, PCI 1, expected 8 (profile hgx)");

    let expect = Expect {
        gpus: Some(1),
        ..Expect::default()
    };
    assert_eq!(
        check(&judge(&s, &expect).checks, "gpu.count").severity,
        Severity::Ok
    );
}

#[test]
fn driver_version_against_the_profile() {
    assert_eq!(
        gpuhost_health::driver_version_from_rpm(
            "cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm"
        )
        .as_deref(),
        Some("535.104.05")
    );
    assert_eq!(
        gpuhost_health::driver_version_from_rpm(
            "nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm"
        )
        .as_deref(),
        Some("570.124.06")
    );
    assert_eq!(gpuhost_health::driver_version_from_rpm("driver.rpm"), None);
    let s = h200();
    let mut expect = Expect {
        driver_version: Some("535.104.05".into()),
        driver_source: Some("profile ol8-uek".into()),
        ..Expect::default()
    };
    let c = check(&judge(&s, &expect).checks, "driver.version").clone();
    assert_eq!(c.severity, Severity::Warning);
    assert!(c.value.contains("580.159.04") && c.value.contains("535.104.05"));
    expect.driver_version = Some("580.159.04".into());
    assert_eq!(
        check(&judge(&s, &expect).checks, "driver.version").severity,
        Severity::Ok
    );
    assert_eq!(
        check(&judge(&s, &expect).checks, "driver.cuda").value,
        "serves CUDA ≤ 13.0 natively, the rest of 13.x through minor-version compatibility"
    );
}

#[test]
fn xid_79_in_kmsg_is_mapped_to_its_gpu() {
    let root = h200_root();
    std::fs::create_dir_all(root.path().join("dev")).unwrap();
    std::fs::copy(
        fixtures().join("kmsg-xid.txt"),
        root.path().join("dev/kmsg"),
    )
    .unwrap();
    let mut s = h200();
    s.kernel_log = collect_kernel_log(&Host::new(root.path()).unwrap());
    assert_eq!(s.kernel_log.source.as_deref(), Some("kmsg"));
    assert_eq!(s.kernel_log.xids.len(), 3);
    let checks = judge(&s, &no_expect()).checks;
    let c = checks
        .iter()
        .find(|c| c.id == "gpu.xid" && c.gpu.as_ref().and_then(|g| g.index) == Some(0))
        .unwrap();
    // NVIDIA's catalog: XID 79 asks to restart the machine, XID 119 to reset the GPU.
    assert_eq!(c.severity, Severity::Critical);
    assert!(
        c.value.contains(
            "XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (last at 91235 s): RESTART_BM"
        ),
        "{}",
        c.value
    );
    assert!(c.value.contains("XID 119 GSP_RPC_TIMEOUT"), "{}", c.value);
    assert!(c.hint.as_deref().unwrap().contains("restart the machine"));
    // The XID 13 of a GPU not present now: the catalog says restart the application.
    let u = check(&checks, "xid.unmapped");
    assert_eq!(u.severity, Severity::Warning);
    assert!(u.value.contains("RESTART_APP"), "{}", u.value);
    assert!(u.value.contains("0000:3b:00"), "{}", u.value);
}

#[test]
fn unreadable_kernel_log_is_unknown_with_the_reason() {
    let root = tempfile::tempdir().unwrap();
    let mut s = h200();
    s.kernel_log = collect_kernel_log(&Host::new(root.path()).unwrap());
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "xid.log");
    assert_eq!(c.severity, Severity::Unknown);
    assert!(c.value.contains("dev/kmsg"), "{}", c.value);
}

#[test]
fn hung_driver_is_critical_driver_unresponsive() {
    let mut s = h200();
    s.nvml = gpuhost_health::snapshot::NvmlProbe {
        status: ProbeStatus::Unresponsive,
        error: Some("the NVML probe (pid 4242) did not answer within 10.0 s".into()),
        stuck_pid: Some(4242),
        ..Default::default()
    };
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "nvml.init");
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.value.starts_with("driver unresponsive"), "{}", c.value);
}

#[test]
fn no_library_without_gpus_is_unknown_with_gpus_critical() {
    let mut s = h200();
    s.nvml = gpuhost_health::snapshot::NvmlProbe {
        status: ProbeStatus::NoLibrary,
        error: Some("libnvidia-ml.so.1: cannot open shared object file".into()),
        ..Default::default()
    };
    let checks = judge(&s, &no_expect()).checks;
    assert_eq!(check(&checks, "nvml.init").severity, Severity::Critical);
    s.host.pci.clear();
    s.host.kernel_module_version = None;
    let checks = judge(&s, &no_expect()).checks;
    let c = check(&checks, "nvml.init");
    assert_eq!(c.severity, Severity::Unknown);
    assert!(c.value.contains("no NVIDIA userspace library"));
    assert_eq!(overall(&checks).exit_code(), 3);
}

#[test]
fn table_puts_problems_first() {
    let mut s = h200();
    s.nvml.gpus[0].ecc_volatile_uncorrected = Reading::Value(1);
    let checks = judge(&s, &no_expect()).checks;
    let t = render_table(&checks);
    let mut lines = t.lines();
    let head = lines.next().unwrap();
    assert!(
        head.starts_with("gpuhost status CRITICAL: 1 uncorrectable ECC error"),
        "{head}"
    );
    let first = lines.next().unwrap();
    assert!(first.starts_with("CRITICAL  gpu0 00:06.0  ecc"), "{first}");
    assert!(t.contains("-> drain GPU 0"));
    // One line per group per GPU.
    assert_eq!(t.lines().filter(|l| l.contains(" ecc ")).count(), 1);
}

/// A minimal Prometheus text-format parser: returns (name, labels, value) per sample and
/// fails on anything else.
/// (name, labels, value)
type Sample = (String, Vec<(String, String)>, f64);

fn parse_prom(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut typed = std::collections::BTreeSet::new();
    let mut helped = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(helped.insert(name.to_string()), "HELP twice for {name}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let name = it.next().unwrap();
            assert_eq!(it.next(), Some("gauge"), "{line}");
            assert!(typed.insert(name.to_string()), "TYPE twice for {name}");
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "stray line {line:?}"
        );
        let name_end = line.find(['{', ' ']).unwrap();
        let name = &line[..name_end];
        assert!(
            name.starts_with("gpuhost_")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{name}"
        );
        assert!(
            typed.contains(name) && helped.contains(name),
            "no HELP/TYPE before {name}"
        );
        let mut labels = Vec::new();
        let mut rest = &line[name_end..];
        if rest.starts_with('{') {
            let mut i = 1;
            let b = rest.as_bytes();
            loop {
                if b[i] == b'}' {
                    break;
                }
                let eq = rest[i..].find('=').unwrap() + i;
                let key = rest[i..eq].to_string();
                assert_eq!(b[eq + 1], b'"', "{line}");
                let mut j = eq + 2;
                let mut val = String::new();
                while b[j] != b'"' {
                    if b[j] == b'\\' {
                        j += 1;
                    }
                    val.push(b[j] as char);
                    j += 1;
                }
                labels.push((key, val));
                i = j + 1;
                if b[i] == b',' {
                    i += 1;
                }
            }
            rest = &rest[i + 1..];
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        assert_eq!(fields.len(), 1, "timestamp or junk after the value: {line}");
        let v: f64 = fields[0].parse().unwrap();
        samples.push((name.to_string(), labels, v));
    }
    samples
}

#[test]
fn prometheus_output_is_well_formed() {
    let s = h200();
    let text = render_prometheus(&s, &judge(&s, &no_expect()));
    let samples = parse_prom(&text);
    assert!(samples.len() > 30);
    for (name, labels, _) in &samples {
        if name.starts_with("gpuhost_gpu_") {
            let keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            assert!(
                keys.starts_with(&["uuid", "pci_bus_id"]),
                "{name} {labels:?}"
            );
        }
    }
    let get = |n: &str| samples.iter().find(|s| s.0 == n).map(|s| s.2);
    assert_eq!(get("gpuhost_gpu_temperature_celsius"), Some(36.0));
    assert_eq!(get("gpuhost_gpu_power_limit_enforced_watts"), Some(700.0));
    assert_eq!(get("gpuhost_nvml_up"), Some(1.0));
    // NOT_SUPPORTED on this H200: omitted, not zero.
    for n in [
        "gpuhost_gpu_retired_pages_pending",
        "gpuhost_gpu_nvlink_active",
        "gpuhost_gpu_fabric_state",
    ] {
        assert_eq!(get(n), None, "{n}");
    }
    // n/a checks are not exported as statuses either.
    assert!(!text.contains("check=\"gpu.nvlink\""));
    // The real capture parses too.
    let real = std::fs::read_to_string(fixtures().join("h200-prometheus.prom")).unwrap();
    assert!(!parse_prom(&real).is_empty());
}

#[test]
fn json_report_has_the_documented_fields() {
    let s = h200();
    let checks = judge(&s, &no_expect()).checks;
    let v: serde_json::Value =
        serde_json::from_str(&render_json(&s, &no_expect(), &checks)).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["status"], "UNKNOWN");
    assert_eq!(v["exit_code"], 3);
    for k in ["ok", "na", "warning", "critical", "unknown"] {
        assert!(v["summary"][k].is_u64(), "summary.{k}");
    }
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "gpu.temperature")
        .unwrap();
    assert_eq!(c["group"], "thermal");
    assert_eq!(c["severity"], "OK");
    assert_eq!(c["gpu"]["index"], 0);
    assert_eq!(c["gpu"]["uuid"], "GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27");
    assert_eq!(c["gpu"]["pci_bus_id"], "00000000:00:06.0");
    assert!(c["hint"].is_null());
    assert_eq!(
        v["snapshot"]["nvml"]["gpus"][0]["temperature_c"]["value"],
        36
    );
    assert_eq!(v["snapshot"]["nvml"]["gpus"][0]["nvlinks"], "not_supported");
}

#[test]
fn textfile_is_written_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuhost.prom");
    std::fs::write(&path, "old\n").unwrap();
    let args = gpuhost_health::StatusOptions {
        format: gpuhost_health::StatusFormat::Json,
        textfile: Some(path.clone()),
        expect_gpus: None,
        profile: None,
        timeout: std::time::Duration::from_secs(10),
        from_snapshot: Some(fixtures().join("h200-snapshot.json")),
        root: "/".into(),
        ..Default::default()
    };
    let code = gpuhost_health::run(&args);
    assert_eq!(code, 3);
    let s = h200();
    let want = render_prometheus(&s, &judge(&s, &no_expect()));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), want);
    // Only the final file is left: the temp file was renamed over it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(names, vec!["gpuhost.prom".to_string()]);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );
}

#[test]
fn nvlink_down_without_nvswitch_is_a_warning_and_fabric_mask_bits_decode() {
    use gpuhost_health::snapshot::{Fabric, NvLink};
    let links: Vec<NvLink> = (0..4)
        .map(|l| NvLink {
            link: l,
            active: l != 2,
            replay_errors: Some(0),
            recovery_errors: None,
            crc_flit_errors: Some(0),
            crc_data_errors: None,
        })
        .collect();
    let (sev, value, hint) =
        gpuhost_health::nvlink_verdict(&links, 1, false, None, &Default::default());
    assert_eq!(sev, Severity::Warning);
    assert!(value.contains("; down: link 2"), "{value}");
    assert!(hint.unwrap().contains("-i 1"));
    assert_eq!(
        gpuhost_health::nvlink_verdict(&links, 1, true, None, &Default::default()).0,
        Severity::Critical
    );
    assert_eq!(
        gpuhost_health::nvlink_verdict(&[], 1, true, None, &Default::default()).0,
        Severity::NotApplicable
    );

    let f = |health_mask: u32| Fabric {
        state: 3,
        status: 0,
        clique_id: 0,
        cluster_uuid: "00".repeat(16),
        health_mask,
        health_summary: None,
    };
    let healthy = 2 | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8);
    assert_eq!(
        gpuhost_health::fabric_verdict(&f(healthy), 0).0,
        Severity::Ok
    );
    assert_eq!(gpuhost_health::fabric_verdict(&f(0), 0).0, Severity::Ok);
    let (sev, value, _) = gpuhost_health::fabric_verdict(&f((healthy & !0x3) | 1), 0);
    assert_eq!(
        (sev, value.as_str()),
        (Severity::Warning, "fabric registered; bandwidth degraded")
    );
    let (sev, value, _) = gpuhost_health::fabric_verdict(&f((healthy & !(0x3 << 4)) | (1 << 4)), 0);
    assert_eq!(
        (sev, value.as_str()),
        (
            Severity::Critical,
            "fabric registered but its route is unhealthy"
        )
    );
    let (sev, value, _) = gpuhost_health::fabric_verdict(&f((healthy & !(0xf << 8)) | (5 << 8)), 0);
    assert_eq!(
        (sev, value.as_str()),
        (
            Severity::Critical,
            "fabric registered but insufficient NVLinks"
        )
    );
}
