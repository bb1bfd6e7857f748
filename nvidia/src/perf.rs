//! What a healthy GPU's work should measure: the reference figures the active checks
//! (`gpuhost status --active`) judge against, one row per PCI device ID, each figure with its
//! source. A GPU without a row gets its figures measured and shown, never judged against a
//! guess ("no reference for this GPU").
//!
//! Floors, and where they come from:
//! - **HBM copy**: the copy kernel must reach [`HBM_FLOOR`] of the model's peak memory
//!   bandwidth, counting bytes read and written. The driver's own `cuMemcpyDtoD` reaches 0.91×
//!   on an H100 80GB HBM3 (DOMAIN.md; 3039–3044 GB/s here) and gpuhost's kernel 0.87× (2906–2913
//!   GB/s, bench/RESULTS-active.md); DCGM scales NVIDIA's lab figures by 0.75
//!   (`nvvs/diag-skus.yaml.in`). 0.80 sits between the two: a GPU at 0.80× peak has lost more
//!   than a tenth of what healthy ones show.
//! - **PCIe**: pinned copies each way must reach [`PCIE_FLOOR`] of the link's raw rate after
//!   encoding ([`pcie_link_gbps`]) at the generation and width the GPU supports. For Gen5 x16
//!   that is 47.3 GB/s: Azure's health checks require 48 GB/s of nvbandwidth on ND H100 v5
//!   (azurehpc-health-checks, `conf/nd96isr_h100_v5.conf`), DCGM's 0.75 again, and a healthy H100
//!   measures 55.3–55.5 GB/s (0.88×; DOMAIN.md), fleets 52–55.
//! - **Compute**: the rate kernels must reach [`COMPUTE_FLOOR`] of the datasheet's peak FP32
//!   and FP64 (boost clock, no tensor cores). A GPU held to lower clocks by power or heat falls
//!   below it, and the report names the clock event reasons seen while it ran. The answers
//!   themselves must be exact: any difference is silent data corruption, whatever the rate.
//! - **Peer to peer**: NVLink pairs must reach [`NVLINK_FLOOR`] of the model's NVLink
//!   bandwidth per direction; PCIe peers [`PCIE_P2P_FLOOR`] of the link. Untested on NVLink:
//!   no multi-GPU machine was at hand (docs/active-checks.md).

/// One model's reference figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reference {
    /// PCI device ID.
    pub device_id: u16,
    pub name: &'static str,
    /// Peak memory bandwidth, GB/s (10^9 bytes).
    pub hbm_gbps: f64,
    /// Peak FP32 and FP64 (non-tensor), TFLOPS.
    pub fp32_tflops: f64,
    pub fp64_tflops: f64,
    /// NVLink bandwidth per direction to one peer, GB/s; None: no NVLink.
    pub nvlink_gbps: Option<f64>,
    /// Where the figures come from.
    pub source: &'static str,
}

/// The copy kernel's floor, as a fraction of the peak memory bandwidth.
pub const HBM_FLOOR: f64 = 0.80;
/// Pinned copies' floor, as a fraction of the link's rate.
pub const PCIE_FLOOR: f64 = 0.75;
/// The rate kernels' floor, as a fraction of the datasheet peak.
pub const COMPUTE_FLOOR: f64 = 0.60;
/// Peer copies' floor over NVLink, as a fraction of the NVLink bandwidth per direction.
pub const NVLINK_FLOOR: f64 = 0.70;
/// Peer copies' floor over PCIe, as a fraction of the link's rate.
pub const PCIE_P2P_FLOOR: f64 = 0.50;

const A100_DS: &str = "NVIDIA A100 Tensor Core GPU datasheet (2021): FP64 9.7, FP32 19.5 TFLOPS; NVLink 600 GB/s (300 per direction)";
const H100_DS: &str = "NVIDIA H100 Tensor Core GPU datasheet (2023)";
const H200_DS: &str = "NVIDIA H200 Tensor Core GPU datasheet (2024)";
const B200_DS: &str =
    "NVIDIA GB200 NVL72 / HGX B200 specifications, individual Blackwell GPU (nvidia.com, 2025)";

/// The table. Device IDs: NVIDIA's driver README (supported GPUs) and pci.ids.
pub const REFERENCES: &[Reference] = &[
    Reference {
        device_id: 0x20b0,
        name: "NVIDIA A100-SXM4-40GB",
        hbm_gbps: 1555.0,
        fp32_tflops: 19.5,
        fp64_tflops: 9.7,
        nvlink_gbps: Some(300.0),
        source: A100_DS,
    },
    Reference {
        device_id: 0x20b2,
        name: "NVIDIA A100-SXM4-80GB",
        hbm_gbps: 2039.0,
        fp32_tflops: 19.5,
        fp64_tflops: 9.7,
        nvlink_gbps: Some(300.0),
        source: A100_DS,
    },
    Reference {
        device_id: 0x20f1,
        name: "NVIDIA A100-PCIE-40GB",
        hbm_gbps: 1555.0,
        fp32_tflops: 19.5,
        fp64_tflops: 9.7,
        nvlink_gbps: Some(300.0),
        source: A100_DS,
    },
    Reference {
        device_id: 0x20b5,
        name: "NVIDIA A100 80GB PCIe",
        hbm_gbps: 1935.0,
        fp32_tflops: 19.5,
        fp64_tflops: 9.7,
        nvlink_gbps: Some(300.0),
        source: A100_DS,
    },
    Reference {
        device_id: 0x2330,
        name: "NVIDIA H100 80GB HBM3 (SXM5)",
        hbm_gbps: 3350.0,
        fp32_tflops: 67.0,
        fp64_tflops: 34.0,
        nvlink_gbps: Some(450.0),
        source: H100_DS,
    },
    Reference {
        device_id: 0x2331,
        name: "NVIDIA H100 PCIe",
        hbm_gbps: 2000.0,
        fp32_tflops: 51.0,
        fp64_tflops: 26.0,
        nvlink_gbps: Some(300.0),
        source: H100_DS,
    },
    Reference {
        device_id: 0x2321,
        name: "NVIDIA H100 NVL",
        hbm_gbps: 3900.0,
        fp32_tflops: 60.0,
        fp64_tflops: 30.0,
        nvlink_gbps: Some(300.0),
        source: H100_DS,
    },
    Reference {
        device_id: 0x2335,
        name: "NVIDIA H200 (SXM)",
        hbm_gbps: 4800.0,
        fp32_tflops: 67.0,
        fp64_tflops: 34.0,
        nvlink_gbps: Some(450.0),
        source: H200_DS,
    },
    Reference {
        device_id: 0x233b,
        name: "NVIDIA H200 NVL",
        hbm_gbps: 4800.0,
        fp32_tflops: 60.0,
        fp64_tflops: 30.0,
        nvlink_gbps: Some(450.0),
        source: H200_DS,
    },
    Reference {
        device_id: 0x2901,
        name: "NVIDIA B200",
        hbm_gbps: 7700.0,
        fp32_tflops: 75.0,
        fp64_tflops: 37.0,
        nvlink_gbps: Some(900.0),
        source: B200_DS,
    },
    Reference {
        device_id: 0x2941,
        name: "NVIDIA GB200",
        hbm_gbps: 8000.0,
        fp32_tflops: 80.0,
        fp64_tflops: 40.0,
        nvlink_gbps: Some(900.0),
        source: B200_DS,
    },
    Reference {
        device_id: 0x26b9,
        name: "NVIDIA L40S",
        hbm_gbps: 864.0,
        fp32_tflops: 91.6,
        // FP64 runs at 1/64 of FP32 on AD102 (the datasheet gives no FP64 figure).
        fp64_tflops: 1.4,
        nvlink_gbps: None,
        source: "NVIDIA L40S datasheet (2023): GDDR6 864 GB/s, FP32 91.6 TFLOPS; FP64 1/64 of FP32 (Ada tuning guide)",
    },
];

/// The reference of a PCI device ID, if the table has one.
pub fn reference(device_id: u16) -> Option<&'static Reference> {
    REFERENCES.iter().find(|r| r.device_id == device_id)
}

/// A PCIe link's rate per direction after line encoding, GB/s: 8b/10b for Gen1–2, 128b/130b
/// for Gen3–5 (PCI-SIG base specifications), FLIT for Gen6 (64 GT/s × 242/256).
pub fn pcie_link_gbps(gen: u32, width: u32) -> Option<f64> {
    let lane = match gen {
        1 => 0.25,
        2 => 0.5,
        3 => 8.0 * 128.0 / 130.0 / 8.0,
        4 => 16.0 * 128.0 / 130.0 / 8.0,
        5 => 32.0 * 128.0 / 130.0 / 8.0,
        6 => 64.0 * 242.0 / 256.0 / 8.0,
        _ => return None,
    };
    (width > 0).then(|| lane * f64::from(width))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_unique_and_sourced() {
        for (i, r) in REFERENCES.iter().enumerate() {
            assert!(!r.source.is_empty(), "{}", r.name);
            assert!(
                r.hbm_gbps > 0.0 && r.fp32_tflops > r.fp64_tflops,
                "{}",
                r.name
            );
            assert!(
                REFERENCES[i + 1..]
                    .iter()
                    .all(|o| o.device_id != r.device_id),
                "{:#x}",
                r.device_id
            );
        }
        // The models the issue names: A100, H100 SXM/PCIe/NVL, H200, B200/GB200, L40S.
        for id in [
            0x20b2, 0x2330, 0x2331, 0x2321, 0x2335, 0x2901, 0x2941, 0x26b9,
        ] {
            assert!(reference(id).is_some(), "{id:#x}");
        }
    }

    #[test]
    fn gen5_x16_floor_is_azures() {
        let link = pcie_link_gbps(5, 16).unwrap_or(0.0);
        assert!((link - 63.015).abs() < 0.01, "{link}");
        let floor = link * PCIE_FLOOR;
        assert!((47.0..48.5).contains(&floor), "{floor}");
        assert_eq!(pcie_link_gbps(7, 16), None);
        assert_eq!(pcie_link_gbps(4, 0), None);
    }
}
