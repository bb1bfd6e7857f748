//! The checks issue 15 added, on the real H200 snapshot and failures crafted from it: the Xid
//! catalog (buckets, NVLink5 sub-codes, XID 154, GPU resets), SXids, SRAM/DRAM ECC against
//! AzNHC's thresholds, PCIe replay and NVLink error rates, and DCGM level 1's software checks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpuhost_health::snapshot::{Baseline, GpuCounters};
use gpuhost_health::snapshot::{
    CudaCheck, DevNode, EccCounts, GspFirmware, InfoRom, PciDevice, PciKind, Reading, Snapshot,
    SramEcc,
};
use gpuhost_health::{judge, render_prometheus, Check, Expect, Severity, Thresholds};
use gpuhost_health::{normalise_pci, parse_kernel_log};
use gpuhost_health::{parse_nvlink5, XidGeneration as Generation};

fn h200() -> Snapshot {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/status/h200-snapshot.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn checks_of(s: &Snapshot) -> Vec<Check> {
    judge(s, &Expect::default()).checks
}

fn one<'a>(checks: &'a [Check], id: &str) -> &'a Check {
    let all: Vec<&Check> = checks.iter().filter(|c| c.id == id).collect();
    assert_eq!(all.len(), 1, "{id}: {all:#?}");
    all[0]
}

/// The H200's PCI key, as the kernel prints it.
fn pci_of(s: &Snapshot) -> String {
    normalise_pci(s.nvml.gpus[0].pci_bus_id.value().unwrap()).unwrap()
}

/// A snapshot whose kernel log is `lines` (kmsg records for the H200's address `{pci}`).
fn with_log(lines: &[&str]) -> Snapshot {
    let mut s = h200();
    let pci = pci_of(&s);
    let text: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            format!(
                "4,{},{},-;{}",
                100 + i,
                (i + 1) * 1_000_000,
                l.replace("{pci}", &pci)
            )
        })
        .collect();
    s.kernel_log = parse_kernel_log("kmsg", &text.join("\n"));
    s
}

#[test]
fn each_xid_is_named_and_judged_by_its_catalog_bucket() {
    for (xid, sev, label, immediate) in [
        (
            63,
            Severity::Ok,
            "XID 63 INFOROM_DRAM_RETIREMENT_EVENT",
            "IGNORE",
        ),
        (
            13,
            Severity::Warning,
            "XID 13 ROBUST_CHANNEL_GR_EXCEPTION",
            "RESTART_APP",
        ),
        (
            68,
            Severity::Warning,
            "XID 68 ROBUST_CHANNEL_NVDEC0_ERROR",
            "RESTART_APP",
        ),
        (
            79,
            Severity::Critical,
            "XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
            "RESTART_BM",
        ),
        (
            92,
            Severity::Ok,
            "XID 92 EXCESSIVE_SBE_INTERRUPTS",
            "IGNORE",
        ),
        (62, Severity::Critical, "XID 62 PMU_HALT_ERROR", "RESET_GPU"),
        (
            48,
            Severity::Critical,
            "XID 48 ROBUST_CHANNEL_GPU_ECC_DBE",
            "WORKFLOW_XID_48",
        ),
        (
            8,
            Severity::Warning,
            "XID 8 ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
            "RESTART_APP",
        ),
    ] {
        let s = with_log(&[&format!(
            "NVRM: Xid (PCI:{{pci}}): {xid}, pid=1, name=x, something"
        )]);
        let c = checks_of(&s)
            .into_iter()
            .find(|c| c.id == "gpu.xid")
            .unwrap();
        assert_eq!(c.severity, sev, "{xid}: {c:?}");
        assert!(
            c.value
                .starts_with(&format!("{label} (last at 1 s): {immediate}")),
            "{c:?}"
        );
        if sev > Severity::Ok {
            assert!(c.hint.as_deref().unwrap().starts_with(label), "{c:?}");
        }
    }
}

#[test]
fn an_xid_the_catalog_does_not_list_for_hopper_says_so() {
    // XID 93 applies to A100 only; XID 121 (C2C) to GB200 only.
    let s = with_log(&["NVRM: Xid (PCI:{pci}): 121, C2C link corrected error"]);
    let c = checks_of(&s)
        .into_iter()
        .find(|c| c.id == "gpu.xid")
        .unwrap();
    assert_eq!(c.severity, Severity::Ok, "{c:?}");
    let s = with_log(&["NVRM: Xid (PCI:{pci}): 64, Row remapper failure"]);
    let c = checks_of(&s)
        .into_iter()
        .find(|c| c.id == "gpu.xid")
        .unwrap();
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.hint.unwrap().contains("if it recurs: CONTACT_SUPPORT"));
    let mut s = with_log(&["NVRM: Xid (PCI:{pci}): 126, CE10"]);
    s.nvml.gpus[0].architecture = Reading::Value("Hopper".into());
    let c = checks_of(&s)
        .into_iter()
        .find(|c| c.id == "gpu.xid")
        .unwrap();
    assert!(
        c.hint.unwrap().contains("does not list it for H100"),
        "the H200 (Hopper) is the H100 column"
    );
}

#[test]
fn xid_154_follows_the_recovery_action_it_names() {
    for (to, sev) in [
        ("0x0 (None)", Severity::Ok),
        ("0x3 (Drain P2P)", Severity::Warning),
        ("0x2 (Node Reboot Required)", Severity::Critical),
    ] {
        let s = with_log(&[&format!(
            "NVRM: Xid (PCI:{{pci}}): 154, GPU recovery action changed from 0x0 (None) to {to}"
        )]);
        let c = checks_of(&s)
            .into_iter()
            .find(|c| c.id == "gpu.xid")
            .unwrap();
        assert_eq!(c.severity, sev, "{to}: {c:?}");
    }
}

#[test]
fn nvlink5_xids_are_decoded_with_the_catalogs_sub_code_table() {
    let f = parse_nvlink5(
        "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
    )
    .unwrap();
    assert_eq!(f.unit, "NETIR_LINK_EVT");
    assert_eq!(f.fatal, Some(true));
    assert_eq!(f.link, Some(9));
    assert_eq!(f.intr_info, 0x025525c6);
    assert_eq!(f.error_status, Some(0));
    // The H200 snapshot's driver is 580 (V2 masks); these lines are from drivers before R575
    // (V1), so the test snapshot says so.
    let judge = |line: &str, driver: &str| {
        let mut s = with_log(&[line]);
        s.nvml.driver_version = Some(driver.into());
        s.nvml.gpus[0].architecture = Reading::Value("Blackwell".into());
        checks_of(&s)
            .into_iter()
            .find(|c| c.id == "gpu.xid")
            .unwrap()
    };
    // Link down whose peer went down (reason 0b100101): RESET_GPU, investigate the peer.
    let c = judge(
        "NVRM: Xid (PCI:{pci}): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 0x00000000)",
        "570.124.06",
    );
    assert_eq!(c.severity, Severity::Critical, "{c:?}");
    assert!(
        c.value
            .contains("XID 149 NVLINK_NETIR_ERROR (last at 1 s): RESET_GPU"),
        "{c:?}"
    );
    assert!(c.hint.unwrap().contains("INVESTIGATE_PEER_DEVICE"));
    // A bit-error-rate event: IGNORE.
    let c = judge(
        "NVRM: Xid (PCI:{pci}): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 0x00000000)",
        "570.124.06",
    );
    assert_eq!(c.severity, Severity::Ok, "{c:?}");
    // R575 and newer: V2 masks (NETIR_INT is unit 0b0011000).
    let c = judge(
        "NVRM: Xid (PCI:{pci}): 149, NETIR/NETIR_INT Fatal XC0 i0 Link 00 (0x00000018 0x00000000 0x00000000 0x00000000)",
        "580.65.06",
    );
    assert_eq!(c.severity, Severity::Critical, "{c:?}");
    // RLW_RXPIPE, error status 1: IGNORE, promoted to RESET_GPU when bit 7 (V2) is set.
    let c = judge(
        "NVRM: Xid (PCI:{pci}): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 04 (0x00000006 0x00000001)",
        "580.65.06",
    );
    assert_eq!(c.severity, Severity::Ok, "{c:?}");
    let c = judge(
        "NVRM: Xid (PCI:{pci}): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 04 (0x00000086 0x00000001)",
        "580.65.06",
    );
    assert_eq!(c.severity, Severity::Critical, "{c:?}");
    // RLW_REMAP, status 1: XID_154_EVAL — restart the application unless an XID 154 came.
    let c = judge(
        "NVRM: Xid (PCI:{pci}): 145, RLW_REMAP Nonfatal XC1 i0 Link 04 (0x00000004 0x00000001)",
        "580.65.06",
    );
    assert_eq!(c.severity, Severity::Warning, "{c:?}");
}

#[test]
fn xids_from_before_the_last_gpu_reset_do_not_count_again() {
    let s = with_log(&[
        "NVRM: GPU at PCI:{pci}: GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27",
        "NVRM: Xid (PCI:{pci}): 79, pid=1, GPU has fallen off the bus.",
        "NVRM: GPU at PCI:{pci}: GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27",
        "NVRM: Xid (PCI:{pci}): 13, pid=2, Graphics Exception",
    ]);
    let c = checks_of(&s)
        .into_iter()
        .find(|c| c.id == "gpu.xid")
        .unwrap();
    assert_eq!(c.severity, Severity::Warning, "{c:?}");
    assert!(c.value.starts_with("XID 13 "), "{c:?}");
    assert!(
        c.value
            .ends_with("; 1 earlier XID(s) before the GPU's last reset not counted (XID 79)"),
        "{c:?}"
    );
    // Without the second initialisation both count.
    let s = with_log(&[
        "NVRM: GPU at PCI:{pci}: GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27",
        "NVRM: Xid (PCI:{pci}): 79, pid=1, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:{pci}): 13, pid=2, Graphics Exception",
    ]);
    let c = checks_of(&s)
        .into_iter()
        .find(|c| c.id == "gpu.xid")
        .unwrap();
    assert_eq!(c.severity, Severity::Critical);
}

/// The Prometheus text counts each GPU's XIDs since its last reset, in all and by the immediate
/// action each was judged to ask for (what an alert picks a GPU reset or a reboot by): not
/// those from before the reset, nor those of a GPU not on the bus now.
#[test]
fn the_metrics_count_a_gpus_xids_since_its_reset_by_their_action() {
    let s = with_log(&[
        "NVRM: Xid (PCI:{pci}): 48, pid=1, An uncorrectable double bit error (DBE) has been detected on GPU",
        "NVRM: GPU at PCI:{pci}: GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27",
        "NVRM: Xid (PCI:{pci}): 79, pid=2, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:{pci}): 13, pid=3, Graphics Exception",
        "NVRM: Xid (PCI:{pci}): 13, pid=4, Graphics Exception",
        "NVRM: Xid (PCI:{pci}): 119, pid=5, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=6, GPU has fallen off the bus.",
    ]);
    let text = render_prometheus(&s, &judge(&s, &Expect::default()));
    let xids: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gpuhost_gpu_xid") || l.starts_with("gpuhost_xid"))
        .collect();
    let gpu = r#"uuid="GPU-ff7f0840-faaa-e67b-b46c-ec5ed1d4af27",pci_bus_id="00000000:00:06.0""#;
    let action =
        |a: &str, n: u32| format!("gpuhost_gpu_xid_action_events{{{gpu},action=\"{a}\"}} {n}");
    assert_eq!(
        xids,
        [
            "gpuhost_xid_events 6".to_string(),
            format!("gpuhost_gpu_xid_events{{{gpu}}} 4"),
            action("RESET_GPU", 1),
            action("RESTART_APP", 2),
            action("RESTART_BM", 1),
        ],
        "{text}"
    );
}

#[test]
fn volta_and_older_use_the_older_page() {
    let mut s = with_log(&["NVRM: Xid (PCI:{pci}): 13, Graphics Exception"]);
    s.nvml.gpus[0].architecture = Reading::Value("Volta".into());
    let c = checks_of(&s)
        .into_iter()
        .find(|c| c.id == "gpu.xid")
        .unwrap();
    assert_eq!(c.severity, Severity::Ok, "{c:?}");
    assert!(c.value.contains("older GPU"), "{c:?}");
    assert_eq!(
        Generation::of(Some("Blackwell"), Some("NVIDIA GB200")),
        Generation::Gb200
    );
}

#[test]
fn sxids_map_to_their_nvswitch_with_nvidias_fatal_split() {
    let mut s = with_log(&[
        "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20034, Fatal, Link 28 LTSSM Fault Up",
        "nvidia-nvswitch1: SXid (PCI:0000:c4:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat Timeout Error (First)",
        "nvidia-nvswitch9: SXid (PCI:0000:f0:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
    ]);
    for b in ["c3", "c4"] {
        s.host.pci.push(PciDevice {
            address: format!("0000:{b}:00.0"),
            kind: PciKind::NvSwitch,
            device_id: "0x22a3".into(),
            class: "0x068000".into(),
            config_head: Some("de10a322".into()),
            ..PciDevice::default()
        });
    }
    let checks = checks_of(&s);
    let sw: Vec<&Check> = checks.iter().filter(|c| c.id == "nvswitch.sxid").collect();
    assert_eq!(sw.len(), 2);
    assert_eq!(sw[0].severity, Severity::Critical);
    assert_eq!(sw[0].gpu.as_ref().unwrap().pci_bus_id, "00000000:C3:00.0");
    assert!(sw[0].value.contains("SXid 20034 link 28"), "{:?}", sw[0]);
    assert!(sw[0].hint.as_deref().unwrap().contains("Fabric Manager"));
    assert_eq!(sw[1].severity, Severity::Ok);
    assert!(sw[1].value.contains("1 non-fatal"), "{:?}", sw[1]);
    let u = one(&checks, "sxid.unmapped");
    assert_eq!(u.severity, Severity::Ok);
}

#[test]
fn sram_and_dram_ecc_against_azure_thresholds_named_in_the_message() {
    let mut s = h200();
    s.nvml.gpus[0].ecc_sram = Reading::Value(SramEcc {
        volatile_corrected: 10_001,
        ..SramEcc::default()
    });
    s.nvml.gpus[0].ecc_dram = Reading::Value(EccCounts {
        volatile_corrected: Some(5),
        volatile_uncorrected: Some(0),
        aggregate_corrected: Some(9),
        aggregate_uncorrected: Some(0),
    });
    let checks = checks_of(&s);
    let c = one(&checks, "gpu.ecc.sram");
    assert_eq!(c.severity, Severity::Critical);
    assert!(
        c.value
            .contains("correctable above 10000 (status.ecc_sram_correctable_max)"),
        "{c:?}"
    );
    assert_eq!(one(&checks, "gpu.ecc.dram").severity, Severity::Ok);
    // A profile may raise it.
    let e = Expect {
        thresholds: Thresholds {
            ecc_sram_correctable_max: 20_000,
            ..Thresholds::default()
        },
        ..Expect::default()
    };
    assert_eq!(
        one(&judge(&s, &e).checks, "gpu.ecc.sram").severity,
        Severity::Ok
    );
    // Any SRAM uncorrectable error, and NVIDIA's threshold flag.
    s.nvml.gpus[0].ecc_sram = Reading::Value(SramEcc {
        aggregate_uncorrected: 1,
        ..SramEcc::default()
    });
    assert_eq!(
        one(&checks_of(&s), "gpu.ecc.sram").severity,
        Severity::Critical
    );
    s.nvml.gpus[0].ecc_sram = Reading::Value(SramEcc {
        threshold_exceeded: true,
        ..SramEcc::default()
    });
    let c = checks_of(&s);
    assert!(one(&c, "gpu.ecc.sram")
        .hint
        .as_deref()
        .unwrap()
        .contains("field diagnostics"));
    s.nvml.gpus[0].ecc_dram = Reading::Value(EccCounts {
        aggregate_corrected: Some(20_000_001),
        ..EccCounts::default()
    });
    let c = checks_of(&s);
    assert!(one(&c, "gpu.ecc.dram")
        .value
        .contains("above 20000000 (status.ecc_dram_max)"));
    // NOT_SUPPORTED stays n/a.
    s.nvml.gpus[0].ecc_dram = Reading::NotSupported;
    assert_eq!(
        one(&checks_of(&s), "gpu.ecc.dram").severity,
        Severity::NotApplicable
    );
}

fn baseline(s: &Snapshot, replays: u32, secs_ago: u64) -> Baseline {
    let mut gpus = BTreeMap::new();
    gpus.insert(
        s.nvml.gpus[0].uuid.value().unwrap().clone(),
        GpuCounters {
            pcie_replays: Some(replays),
            nvlink: BTreeMap::new(),
        },
    );
    Baseline {
        boot_id: None,
        at_ms: s.collected_at_ms - secs_ago * 1000,
        gpus,
    }
}

#[test]
fn pcie_replays_are_judged_as_a_rate_never_on_a_first_reading() {
    let mut s = h200();
    s.collected_at_ms = 2_000_000_000;
    s.nvml.gpus[0].pcie_replay_counter = Reading::Value(500);
    let c = checks_of(&s);
    let r = one(&c, "gpu.pcie_replay");
    assert_eq!(
        r.severity,
        Severity::Ok,
        "a first reading is never a warning"
    );
    assert!(r.value.contains("first reading"));
    s.previous = Some(baseline(&s, 480, 60));
    let c = checks_of(&s);
    let r = one(&c, "gpu.pcie_replay");
    assert_eq!(r.severity, Severity::Warning);
    assert!(
        r.value
            .starts_with("20.0 replays/min over 60 s (> 8, status.pcie_replays_per_minute_max)"),
        "{r:?}"
    );
    s.previous = Some(baseline(&s, 495, 60));
    assert_eq!(
        one(&checks_of(&s), "gpu.pcie_replay").severity,
        Severity::Ok
    );
    // The counter went down (driver reload): no rate.
    s.previous = Some(baseline(&s, 900, 60));
    assert_eq!(
        one(&checks_of(&s), "gpu.pcie_replay").severity,
        Severity::Ok
    );
}

#[test]
fn dcgm_level_1_software_checks() {
    let mut s = h200();
    let node = |p: &str, mode: u32| DevNode {
        path: p.into(),
        char_device: true,
        mode,
        uid: 0,
        gid: 0,
    };
    s.nvml.gpus[0].minor_number = Reading::Value(0);
    s.host.uid = 1000;
    s.host.dev_nodes = Some(vec![
        node("/dev/nvidia0", 0o666),
        node("/dev/nvidiactl", 0o666),
    ]);
    s.nvml.cuda = Some(CudaCheck {
        loaded: true,
        init_rc: Some(0),
        driver_version: Some(13000),
        init_ms: Some(41.0),
        ..CudaCheck::default()
    });
    s.nvml.gpus[0].inforom = Reading::Value(InfoRom {
        valid: true,
        image_version: Some("G520.0200.00.05".into()),
        checked_at: None,
        cached: false,
    });
    s.nvml.gpus[0].gsp_firmware = Reading::Value(GspFirmware {
        enabled: true,
        default_enabled: true,
        version: Some("580.159.04".into()),
    });
    s.nvml.gpus[0].vbios_version = Reading::Value("96.00.9F.00.01".into());
    let c = checks_of(&s);
    for id in [
        "driver.dev_nodes",
        "cuda.init",
        "gpu.inforom",
        "gpu.gsp",
        "gpu.consistency",
    ] {
        assert_eq!(one(&c, id).severity, Severity::Ok, "{:?}", one(&c, id));
    }
    assert!(one(&c, "cuda.init").value.contains("CUDA driver API 13.0"));
    // Missing node, closed permissions, failing cuInit, corrupt InfoROM, GSP off.
    s.host.dev_nodes = Some(vec![node("/dev/nvidiactl", 0o666)]);
    let c = checks_of(&s);
    let d = one(&c, "driver.dev_nodes");
    assert_eq!(d.severity, Severity::Critical);
    assert!(d.value.starts_with("missing: /dev/nvidia0"), "{d:?}");
    s.host.dev_nodes = Some(vec![
        node("/dev/nvidia0", 0o660),
        node("/dev/nvidiactl", 0o666),
    ]);
    let c = checks_of(&s);
    assert_eq!(one(&c, "driver.dev_nodes").severity, Severity::Warning);
    s.nvml.cuda = Some(CudaCheck {
        loaded: true,
        init_rc: Some(802),
        ..CudaCheck::default()
    });
    let c = checks_of(&s);
    let k = one(&c, "cuda.init");
    assert_eq!(k.severity, Severity::Critical);
    assert!(k.value.contains("802 CUDA_ERROR_SYSTEM_NOT_READY"), "{k:?}");
    assert!(k.hint.as_deref().unwrap().contains("fabricmanager"));
    s.nvml.cuda = Some(CudaCheck {
        error: Some("libcuda.so.1 not loadable: …".into()),
        ..CudaCheck::default()
    });
    assert_eq!(
        one(&checks_of(&s), "cuda.init").severity,
        Severity::Critical
    );
    s.nvml.gpus[0].inforom = Reading::Value(InfoRom {
        valid: false,
        image_version: None,
        checked_at: None,
        cached: false,
    });
    assert_eq!(
        one(&checks_of(&s), "gpu.inforom").severity,
        Severity::Critical
    );
    s.nvml.gpus[0].gsp_firmware = Reading::Value(GspFirmware {
        enabled: false,
        default_enabled: true,
        version: None,
    });
    assert_eq!(one(&checks_of(&s), "gpu.gsp").severity, Severity::Warning);
    // Two GPUs of one model with different VBIOS.
    let mut g1 = s.nvml.gpus[0].clone();
    g1.index = 1;
    g1.vbios_version = Reading::Value("96.00.9F.00.02".into());
    s.nvml.gpus.push(g1);
    let c = checks_of(&s);
    let k = one(&c, "gpu.consistency");
    assert_eq!(k.severity, Severity::Warning);
    assert!(
        k.value
            .contains("VBIOS differs: 96.00.9F.00.01 on GPU 0; 96.00.9F.00.02 on GPU 1"),
        "{k:?}"
    );
}

#[test]
fn the_real_h200_reads_every_new_check_ok() {
    // Captured by bench/health-checks-gpu-run.sh on the H200 (first run: nothing cached).
    let s = h200();
    let g = &s.nvml.gpus[0];
    assert_eq!(g.architecture, Reading::Value("Hopper".into()));
    assert_eq!(g.minor_number, Reading::Value(0));
    assert_eq!(g.pcie_replay_counter, Reading::Value(0));
    assert_eq!(g.vbios_version, Reading::Value("96.00.A5.00.1A".into()));
    let cuda = s.nvml.cuda.as_ref().unwrap();
    assert_eq!(
        (cuda.loaded, cuda.init_rc, cuda.cached),
        (true, Some(0), false)
    );
    let c = checks_of(&s);
    for (id, starts) in [
        (
            "driver.dev_nodes",
            "/dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia0, /dev/nvidiactl",
        ),
        (
            "cuda.init",
            "libcuda.so.1 loads, cuInit succeeded (CUDA driver API 13.0) in 262 ms",
        ),
        ("gpu.inforom", "InfoROM valid (image G520.0282.02.02)"),
        ("gpu.gsp", "GSP firmware 580.159.04 enabled"),
        (
            "gpu.ecc.sram",
            "SRAM correctable 0 volatile / 0 aggregate, uncorrectable 0 / 0",
        ),
        (
            "gpu.ecc.dram",
            "DRAM correctable 0 volatile / 0 aggregate, uncorrectable 0 / 0",
        ),
        (
            "gpu.pcie_replay",
            "0 replays since the driver loaded; first reading",
        ),
        ("gpu.consistency", "NVIDIA H200 ×1: VBIOS 96.00.A5.00.1A"),
    ] {
        let k = one(&c, id);
        assert_eq!(k.severity, Severity::Ok, "{k:?}");
        assert!(k.value.starts_with(starts), "{k:?}");
    }
}

#[test]
fn every_new_nvml_call_answered_on_the_h200() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/status/h200-nvml-calls.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_eq!(v["cuda"]["init_rc"], 0);
    let calls = v["gpus"][0]["calls"].as_array().unwrap();
    let rc = |name: &str| -> u64 {
        calls
            .iter()
            .find(|c| c["call"] == name)
            .unwrap_or_else(|| panic!("no {name}"))["rc"]
            .as_u64()
            .unwrap()
    };
    for name in [
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceValidateInforom",
        "nvmlDeviceGetInforomImageVersion",
        "nvmlDeviceGetVbiosVersion",
        "nvmlDeviceGetGspFirmwareMode",
        "nvmlDeviceGetGspFirmwareVersion",
        "nvmlDeviceGetSramEccErrorStatus(v1)",
        "nvmlDeviceGetMemoryErrorCounter(CORRECTED, VOLATILE, DEVICE_MEMORY)",
        "nvmlDeviceGetMemoryErrorCounter(UNCORRECTED, AGGREGATE, SRAM)",
    ] {
        assert_eq!(rc(name), 0, "{name}");
    }
    // Hopper counts ECC per DRAM and SRAM only: the older locations are NOT_SUPPORTED (n/a).
    assert_eq!(
        rc("nvmlDeviceGetMemoryErrorCounter(CORRECTED, VOLATILE, L1_CACHE)"),
        3
    );
    assert_eq!(rc("nvmlDeviceGetNvLinkState(link 0)"), 3);
}

#[test]
fn status_reads_an_install_root_inside_the_root() {
    // A daemon.json link to an absolute path: on the live system that is the file; in an
    // install root it names the root's own path, not the build host's file.
    let outside = tempfile::tempdir().unwrap();
    let real = outside.path().join("daemon.json");
    std::fs::write(&real, r#"{"runtimes":{"nvidia":{"path":"x"}}}"#).unwrap();
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc/docker")).unwrap();
    std::os::unix::fs::symlink(&real, root.path().join("etc/docker/daemon.json")).unwrap();
    let host = gpuhost_host::host::Host::new(root.path()).unwrap();
    let snap = gpuhost_health::collect_host(&host);
    assert!(
        !snap.docker_daemon_json.present,
        "{:?}",
        snap.docker_daemon_json
    );
    assert!(!snap.docker_daemon_json.nvidia_runtime);
    // /dev listed inside the root: no nodes there.
    std::fs::create_dir_all(root.path().join("dev")).unwrap();
    let snap = gpuhost_health::collect_host(&host);
    assert_eq!(snap.dev_nodes, Some(Vec::new()));
}
