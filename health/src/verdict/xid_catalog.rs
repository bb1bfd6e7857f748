//! NVIDIA's Xid catalog, as data.
//!
//! Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
//! <https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html> (Ampere and newer,
//! PCIe form factors included), its "Xids" table (code, mnemonic, description, "Applies to"
//! A100 / H100 / B100 / GB200, resolution buckets for the immediate and the investigatory
//! action, trigger conditions) and its "XID 144-150 Decode" table (NVLink5 sub-codes: IntrInfo
//! masks for drivers before R575 (V1) and from R575 (V2), error status, immediate action,
//! action 2 for promotable errors, investigatory action, severity). Codes 1–172; the page as
//! stored on 2026-12-03 (retrieved that day through the session's search tool; the page itself
//! carries no date). The IntrInfo masks are 32 bits, most significant first, `-` for bits the
//! decode ignores: V1 keeps the unit in bits 9..5 and the Xid offset in 4..0, V2 the unit in
//! bits 6..0, both the link-down reason in bits 25..20.
//!
//! Volta and older: NVIDIA, "Xid Errors" (the older page,
//! <https://docs.nvidia.com/deploy/xid-errors/archive/index.html>), which names each Xid and
//! its possible causes but gives no resolution buckets; [`OLDER`] keeps its descriptions.

/// One row of the catalog's "Xids" table.
pub(crate) struct XidEntry {
    pub(crate) code: u32,
    pub(crate) mnemonic: &'static str,
    pub(crate) description: &'static str,
    /// "Applies to" A100, H100, B100, GB200.
    pub(crate) applies: [bool; 4],
    /// Resolution bucket, immediate action (`RESET_GPU`, …); empty where the catalog has none.
    pub(crate) immediate: &'static str,
    /// Resolution bucket, investigatory action.
    pub(crate) investigatory: &'static str,
    /// Trigger conditions, where the catalog gives guidance for a code without a bucket.
    pub(crate) note: &'static str,
}

/// One row of the catalog's "XID 144-150 Decode" table.
pub(crate) struct Nvlink5Rule {
    pub(crate) xid: u32,
    /// Sub-component as the message prints it (`V1/V2` where the name changed at R575).
    pub(crate) unit: &'static str,
    /// IntrInfo mask, drivers before R575.
    pub(crate) v1: &'static str,
    /// IntrInfo mask, R575 and newer.
    pub(crate) v2: &'static str,
    /// Error status (the second register); None: any (NETIR link events).
    pub(crate) status: Option<u32>,
    pub(crate) immediate: &'static str,
    /// Promotable errors: (V1 mask, V2 mask, action) when the promotion bit is set.
    pub(crate) action2: Option<(&'static str, &'static str, &'static str)>,
    pub(crate) investigatory: &'static str,
    pub(crate) severity: &'static str,
}

const Y: bool = true;
const N: bool = false;

#[allow(clippy::too_many_arguments)]
const fn e(
    code: u32,
    mnemonic: &'static str,
    description: &'static str,
    a100: bool,
    h100: bool,
    b100: bool,
    gb200: bool,
    immediate: &'static str,
    investigatory: &'static str,
    note: &'static str,
) -> XidEntry {
    XidEntry {
        code,
        mnemonic,
        description,
        applies: [a100, h100, b100, gb200],
        immediate,
        investigatory,
        note,
    }
}

#[allow(clippy::too_many_arguments)]
const fn r(
    xid: u32,
    unit: &'static str,
    v1: &'static str,
    v2: &'static str,
    status: Option<u32>,
    immediate: &'static str,
    action2: Option<(&'static str, &'static str, &'static str)>,
    investigatory: &'static str,
    severity: &'static str,
) -> Nvlink5Rule {
    Nvlink5Rule {
        xid,
        unit,
        v1,
        v2,
        status,
        immediate,
        action2,
        investigatory,
        severity,
    }
}

/// The "Xids" table, codes 1–172 in order.
#[rustfmt::skip]
pub(crate) const CATALOG: &[XidEntry] = &[
    e(1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", Y, Y, Y, Y, "RESTART_APP", "CHECK_APP/CUDA", ""),
    e(12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(13, "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "Graphics Engine Exception", Y, Y, Y, Y, "RESTART_APP", "WORKFLOW_XID_13", ""),
    e(14, "ROBUST_CHANNEL_FAKE_ERROR", "Unused", Y, Y, Y, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "Unused", N, N, N, N, "CONTACT_SUPPORT", "CONTACT_SUPPORT", ""),
    e(17, "ROBUST_CHANNEL_PARAMETER_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", Y, Y, Y, Y, "RESTART_APP", "CHECK_APP/CUDA", ""),
    e(26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(27, "ROBUST_CHANNEL_VP_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(28, "ROBUST_CHANNEL_VP2_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(29, "ROBUST_CHANNEL_BSP_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", Y, Y, Y, Y, "RESTART_APP", "WORKFLOW_XID_31", ""),
    e(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", Y, Y, Y, Y, "RESTART_APP", "CHECK_APP/CUDA", ""),
    e(33, "ROBUST_CHANNEL_SEC_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(34, "ROBUST_CHANNEL_MSVLD_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(35, "ROBUST_CHANNEL_MSPDEC_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(36, "ROBUST_CHANNEL_MSPPP_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", Y, Y, Y, Y, "IGNORE", "CHECK_APP/CUDA", ""),
    e(38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", Y, Y, Y, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(39, "ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(40, "ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(41, "ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(42, "ROBUST_CHANNEL_VIC_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", Y, Y, Y, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", Y, Y, Y, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda applications and hitting a DBE", Y, Y, Y, Y, "WORKFLOW_XID_45", "Solo: RESTART_FM; Not Solo: IGNORE (follow other Xid)", ""),
    e(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", Y, Y, Y, Y, "RESET_GPU", "CONTACT_SUPPORT", ""),
    e(47, "ROBUST_CHANNEL_NVENC0_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", Y, Y, Y, Y, "WORKFLOW_XID_48", "WORKFLOW_XID_48", ""),
    e(49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(51, "SILENT_RUNNING_STRESS_TEST_FAILURE", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board", Y, Y, Y, N, "CHECK_MECHANICALS", "CONTACT_SUPPORT", ""),
    e(55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(56, "DISPLAY_CHANNEL_EXCEPTION", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(57, "FB_LINK_TRAINING_FAILURE_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(58, "FB_MEMORY_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(59, "PMU_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", Y, Y, Y, Y, "RESTART_APP", "INVESTIGATE_SW", ""),
    e(61, "PMU_BREAKPOINT", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(62, "PMU_HALT_ERROR", "Internal micro-controller halt (newer drivers)", Y, Y, Y, Y, "RESET_GPU", "CONTACT_SUPPORT", ""),
    e(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", Y, Y, Y, Y, "IGNORE", "IGNORE", ""),
    e(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", Y, Y, Y, Y, "RESET_GPU", "CONTACT_SUPPORT", ""),
    e(65, "ROBUST_CHANNEL_NVENC1_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", Y, Y, Y, Y, "IGNORE", "INVESTIGATE_SW", ""),
    e(67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", Y, Y, Y, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", Y, Y, Y, Y, "RESTART_APP", "CHECK_APP/CUDA", ""),
    e(70, "ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(71, "ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(72, "ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(73, "ROBUST_CHANNEL_NVENC2_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(74, "NVLINK_ERROR", "NVLINK Error", Y, Y, N, N, "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT", ""),
    e(75, "ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(76, "ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(77, "ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(78, "VGPU_START_ERROR", "vGPU Start Error", Y, Y, Y, Y, "UPDATE_SWFW", "UPDATE_SWFW", ""),
    e(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", Y, Y, Y, Y, "RESTART_BM", "CONTACT_SUPPORT", ""),
    e(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", Y, Y, N, N, "RESTART_APP", "CHECK_APP/CUDA", ""),
    e(81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(82, "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(83, "ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(84, "ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(85, "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(86, "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(87, "NVTELEMETRY_DRIVER_REPORT", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(88, "ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(89, "ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", Y, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(90, "LTC_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(91, "RESERVED_XID", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", Y, Y, Y, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(93, "INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", Y, N, N, N, "IGNORE", "CONTACT_SUPPORT", ""),
    e(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", Y, Y, Y, Y, "RESTART_APP", "IGNORE (sympathetic)", ""),
    e(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", Y, Y, Y, Y, "RESET_GPU", "IGNORE (sympathetic)", ""),
    e(96, "ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(97, "ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(98, "ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(99, "ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(100, "ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(101, "ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(102, "ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(103, "ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(104, "ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(105, "ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", N, Y, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", Y, Y, Y, Y, "IGNORE", "IGNORE", ""),
    e(107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", Y, Y, Y, Y, "IGNORE", "IGNORE", ""),
    e(108, "NVLINK_REMOTE_TRANSLATION_ERROR", "Unused", Y, Y, Y, Y, "IGNORE", "XID_137_FLOW", ""),
    e(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", Y, Y, Y, Y, "RESET_GPU", "CONTACT_SUPPORT", ""),
    e(110, "SEC_FAULT_ERROR", "Security Fault Error", N, Y, Y, Y, "RESET_GPU", "INVESTIGATE_SW", ""),
    e(111, "BUNDLE_ERROR_EVENT", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(112, "DISP_SUPERVISOR_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(113, "DP_LT_FAILURE", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(114, "HEAD_RG_UNDERFLOW", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(115, "CORE_CHANNEL_REGS", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(116, "WINDOW_CHANNEL_REGS", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(117, "CURSOR_CHANNEL_REGS", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(118, "HEAD_REGS", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", Y, Y, Y, Y, "RESET_GPU", "INVESTIGATE_SW", ""),
    e(120, "GSP_ERROR", "GSP Error", Y, Y, Y, Y, "RESET_GPU", "INVESTIGATE_SW", ""),
    e(121, "C2C_ERROR", "C2C Error", N, N, N, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(122, "SPI_PMU_RPC_READ_FAIL", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(123, "SPI_PMU_RPC_WRITE_FAIL", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(124, "SPI_PMU_RPC_ERASE_FAIL", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(125, "INFOROM_FS_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(126, "ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(127, "ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(128, "ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(129, "ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(130, "ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(131, "ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(132, "ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(133, "ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(134, "ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(135, "ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(136, "ALI_TRAINING_FAIL", "Link Training Failed", N, Y, N, N, "RESET_GPU", "INVESTIGATE_LINK_SI", ""),
    e(137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", Y, Y, Y, Y, "IGNORE", "XID_137_FLOW", ""),
    e(138, "ROBUST_CHANNEL_DLA_ERROR", "Unused", N, N, N, N, "CONTACT_SUPPORT", "", ""),
    e(139, "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", N, N, Y, Y, "RESTART_APP", "CONTACT_SUPPORT", ""),
    e(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", Y, Y, Y, Y, "RESET_GPU", "CONTACT_SUPPORT", ""),
    e(141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", N, Y, Y, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(142, "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", N, N, N, Y, "CONTACT_SUPPORT", "", ""),
    e(143, "GPU_INIT_ERROR", "GPU Initialization Error", N, Y, Y, Y, "RESET_GPU", "CONTACT_SUPPORT", ""),
    e(144, "NVLINK_SAW_ERROR", "NVLINK: SAW Error", N, N, Y, Y, "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", ""),
    e(145, "NVLINK_RLW_ERROR", "NVLINK: RLW Error", N, N, Y, Y, "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", ""),
    e(146, "NVLINK_TLW_ERROR", "NVLINK: TLW Error", N, N, Y, Y, "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", ""),
    e(147, "NVLINK_TREX_ERROR", "NVLINK: TREX Error", N, N, Y, Y, "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", ""),
    e(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", N, N, Y, Y, "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", ""),
    e(149, "NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", N, N, Y, Y, "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", ""),
    e(150, "NVLINK_MSE_ERROR", "NVLINK: MSE Error", N, N, Y, Y, "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", ""),
    e(151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", N, Y, Y, Y, "RESTART_VM", "CONTACT_SUPPORT", ""),
    e(152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", N, N, N, N, "IGNORE", "CONTACT_SUPPORT", ""),
    e(153, "ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", N, N, N, N, "IGNORE", "CONTACT_SUPPORT", ""),
    e(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", Y, Y, Y, Y, "XID_154", "N/A Informational only regarding another Xid", ""),
    e(155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", N, N, Y, Y, "RESET_GPU", "INVESTIGATE_SW_USER", ""),
    e(156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", N, Y, Y, Y, "RESET_GPU", "IGNORE", ""),
    e(157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", N, Y, Y, Y, "IGNORE", "CONTACT_SUPPORT", ""),
    e(158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", Y, Y, Y, Y, "RESET_GPU", "CONTACT_SUPPORT", ""),
    e(159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI Non-Data Error", N, N, Y, Y, "CHECK_UVM", "SYMPATHETIC_REPORT_SOLO", ""),
    e(160, "CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", N, N, Y, Y, "IGNORE", "INVESTIGATE_SW", ""),
    e(161, "CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", N, N, Y, Y, "IGNORE", "INVESTIGATE_SW", ""),
    e(162, "PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", N, N, Y, Y, "", "", ""),
    e(163, "PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", N, N, Y, Y, "", "", "No GPU reset required. If power smoothing functionality is desired, resolve the thermal events; if disabled due to timeout, reload the driver or reset the GPU."),
    e(164, "PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", N, N, Y, Y, "", "", "Monitor power swings and expect to replace GPUs if power smoothing is desired; power smoothing will be disabled soon."),
    e(165, "PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", N, N, Y, Y, "", "", "Replace GPUs if power swings are not acceptable and power smoothing is desired; the driver disables power smoothing."),
    e(166, "NVLINK_SECURE_CRYPTO_ERR", "CC traffic seen prior to link properly being configured for encrypted traffic", N, N, Y, Y, "", "", "Applicable to CC (confidential computing) mode only."),
    e(167, "PCIE_FATAL_TIMEOUT", "PCIE_FATAL_TIMEOUT", N, Y, Y, Y, "", "", ""),
    e(168, "REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR (write protected region)", Y, Y, Y, Y, "", "", "Should only be seen when ECC is disabled: enable ECC (to enable row remapping) or re-attempt boot with shifted WPR."),
    e(169, "SEC2_HALT_ERROR", "Internal micro-controller halt", N, Y, Y, Y, "", "", ""),
    e(170, "NVLINK_SECURE_OTHER", "Interrupt seen in CC mode", N, N, Y, Y, "", "", "Applicable to CC (confidential computing) mode only."),
    e(171, "UNCORRECTABLE_DRAM_ERROR", "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", Y, Y, Y, Y, "", "", ""),
    e(172, "UNCORRECTABLE_SRAM_ERROR", "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", Y, Y, Y, Y, "", "", ""),
];

/// The "XID 144-150 Decode" table.
#[rustfmt::skip]
pub(crate) const NVLINK5_DECODE: &[Nvlink5Rule] = &[
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", Some(0x00000001), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", Some(0x00000002), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", Some(0x00000004), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", Some(0x00000008), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", Some(0x00000010), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(144, "SAW_MVB", "------000000----------0000100001", "------000000-------------0000001", Some(0x00000020), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_CTRL", "------000000----------0001100010", "------000000-------------0000011", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000001), "XID_154_EVAL", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000002), "XID_154_EVAL", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000004), "XID_154_EVAL", None, "CHECK_NVLINK_FAILURE_FLOW", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000008), "XID_154_EVAL", None, "CHECK_NVLINK_FAILURE_FLOW", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000010), "XID_154_EVAL", None, "CHECK_NVLINK_FAILURE_FLOW", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000020), "XID_154_EVAL", None, "CHECK_NVLINK_FAILURE_FLOW", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000040), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000080), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000100), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x00000200), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_REMAP", "------000000----------0010000010", "------000000-------------0000100", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(145, "RLW_RSPCOL", "------000000----------0010100010", "------000000-------------0000101", Some(0x00000001), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_RSPCOL", "------000000----------0010100010", "------000000-------------0000101", Some(0x00000002), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_RSPCOL", "------000000----------0010100010", "------000000-------------0000101", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(145, "RLW_RXPIPE", "------000000---------00011000010", "------000000------------00000110", Some(0x00000001), "IGNORE", Some(("------000000---------10011000010", "------000000------------10000110", "RESET_GPU")), "CONTACT_SUPPORT", "Non-fatal*"),
    r(145, "RLW_RXPIPE", "------000000---------00011000010", "------000000------------00000110", Some(0x00000002), "IGNORE", Some(("------000000---------10011000010", "------000000------------10000110", "RESET_GPU")), "CONTACT_SUPPORT", "Non-fatal*"),
    r(145, "RLW_RXPIPE", "------000000---------00011000010", "------000000------------00000110", Some(0x00000004), "IGNORE", Some(("------000000---------10011000010", "------000000------------10000110", "RESET_GPU")), "CONTACT_SUPPORT", "Non-fatal*"),
    r(145, "RLW_RXPIPE", "------000000----------0011000010", "------000000-------------0000110", Some(0x00000008), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(145, "RLW_RXPIPE", "------000000----------0011000010", "------000000-------------0000110", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", Some(0x00000001), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", Some(0x00000002), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", Some(0x00000004), "XID_154_EVAL", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", Some(0x00000008), "XID_154_EVAL", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", Some(0x00000010), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", Some(0x00000020), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_SRC_TRACK", "------000000----------0011100010", "------000000-------------0000111", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", Some(0x00000001), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", Some(0x00000002), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", Some(0x00010000), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", Some(0x00020000), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", Some(0x00100000), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(145, "RLW_TAGSTATE", "------000000----------0100000010", "------000000-------------0001000", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_CTRL", "------000000----------0100100011", "------000000-------------0001001", Some(0x00000001), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(146, "TLW_CTRL", "------000000----------0100100011", "------000000-------------0001001", Some(0x00000002), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_CTRL", "------000000----------0100100011", "------000000-------------0001001", Some(0x00000004), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(146, "TLW_CTRL", "------000000----------0100100011", "------000000-------------0001001", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE0", "------000000----------0101000011", "------000000-------------0001010", Some(0x00000001), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE0", "------000000----------0101000011", "------000000-------------0001010", Some(0x00000002), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE0", "------000000----------0101000011", "------000000-------------0001010", Some(0x00000004), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE0", "------000000----------0101000011", "------000000-------------0001010", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE1", "------000000----------0101000011", "------000000-------------0001011", Some(0x00000001), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE1", "------000000----------0101000011", "------000000-------------0001011", Some(0x00000002), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE1", "------000000----------0101000011", "------000000-------------0001011", Some(0x00000004), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(146, "TLW_RX/TLW_RX_PIPE1", "------000000----------0101000011", "------000000-------------0001011", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE0", "------000000----------0101100011", "------000000-------------0001100", Some(0x00000001), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE0", "------000000----------0101100011", "------000000-------------0001100", Some(0x00000002), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE0", "------000000----------0101100011", "------000000-------------0001100", Some(0x00000004), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE0", "------000000----------0101100011", "------000000-------------0001100", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE1", "------000000----------0101100011", "------000000-------------0001101", Some(0x00000001), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE1", "------000000----------0101100011", "------000000-------------0001101", Some(0x00000002), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE1", "------000000----------0101100011", "------000000-------------0001101", Some(0x00000004), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(146, "TLW_TX/TLW_TX_PIPE1", "------000000----------0101100011", "------000000-------------0001101", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(147, "TREX", "------000000----------0110000100", "------000000-------------0001110", Some(0x00000001), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(147, "TREX", "------000000----------0110000100", "------000000-------------0001110", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(148, "NVLPW_CTRL/NVLPW", "------000000----------0000000101", "------000000-------------0001111", Some(0x80000000), "IGNORE", None, "CONTACT_SUPPORT", "Non-fatal"),
    r(149, "NETIR/NETIR_INT", "------000000----------0000000110", "------000000-------------0011000", None, "RESET_GPU", None, "SYMPATHETIC_REPORT_SOLO", "Link Fatal"),
    r(149, "NETIR_BER_EVENT", "------000000----------1000100110", "------000000-------------0010011", Some(0x00000000), "IGNORE", None, "INVESTIGATE_LINK_SI_AND_CABLES", "Non-fatal"),
    r(149, "NETIR_BER_EVENT", "------000000----------1000100110", "------000000-------------0010011", Some(0x00000001), "IGNORE", None, "INVESTIGATE_LINK_SI_AND_CABLES", "Non-fatal"),
    r(149, "NETIR_BER_EVENT", "------000000----------1000100110", "------000000-------------0010011", Some(0x00000002), "IGNORE", None, "INVESTIGATE_LINK_SI_AND_CABLES", "Non-fatal"),
    r(149, "NETIR_BER_EVENT", "------000000----------1000100110", "------000000-------------0010011", Some(0x00000003), "IGNORE", None, "INVESTIGATE_LINK_SI_AND_CABLES", "Non-fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000000----------0111000110", "------000000-------------0010001", None, "RESET_GPU", None, "SYMPATHETIC_REPORT_SOLO", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000001----------0111000110", "------000001-------------0010001", None, "RESET_GPU", None, "REPORT_ISSUE (if seen >1 per day)", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000010----------0111000110", "------000010-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_LINK_SI", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000100----------0111000110", "------000100-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_LINK_SI", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------001010----------0111000110", "------001010-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_LINK_SI", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------001111----------0111000110", "------001111-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_SW_USER", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010000----------0111000110", "------010000-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_SW_USER_LINK_SI", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010001----------0111000110", "------010001-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_SW_USER", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010010----------0111000110", "------010010-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_SW_USER_LINK_SI", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010101----------0111000110", "------010101-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_PEER_DEVICE", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------010110----------0111000110", "------010110-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_SW_USER", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100000----------0111000110", "------100000-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_PEER_DEVICE", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100001----------0111000110", "------100001-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_PEER_DEVICE", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100010----------0111000110", "------100010-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_PEER_DEVICE", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100011----------0111000110", "------100011-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_PEER_DEVICE", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100100----------0111000110", "------100100-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_PEER_DEVICE", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100101----------0111000110", "------100101-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_PEER_DEVICE", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------100110----------0111000110", "------100110-------------0010001", None, "IGNORE", None, "INVESTIGATE_SW/USER", "Link Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------101000----------0111000110", "------101000-------------0010001", None, "IGNORE", None, "INVESTIGATE_HOST", "Fatal"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------101010----------0111000110", "------101010-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_LINK_SI_AND_CABLES", "Link Fatal?"),
    r(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------101011----------0111000110", "------101011-------------0010001", None, "RESET_GPU", None, "INVESTIGATE_LINK_SI_AND_CABLES", "Link Fatal?"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", Some(0x00000001), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal**"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", Some(0x00000003), "IGNORE", None, "IGNORE", "Non-fatal"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", Some(0x00000004), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal**"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", Some(0x00000005), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal**"),
    r(149, "NETIR_MFDE_EVENT", "------000000----------1001000110", "------000000-------------0010100", Some(0x00000007), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal**"),
    r(150, "MSE_WATCHDOG", "------000000----------0000000000", "------000000-------------0000000", Some(0x00000000), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
    r(150, "MSE Degraded", "------000000----------0000000000", "------000000-------------0000000", Some(0xffffffff), "RESET_GPU", None, "CONTACT_SUPPORT", "Fatal"),
];

/// The older page's descriptions (Volta and older GPUs), where it names the Xid.
#[rustfmt::skip]
pub(crate) const OLDER: &[(u32, &str)] = &[
    (1, "Invalid or corrupted push buffer stream"), (2, "Invalid or corrupted push buffer stream"),
    (3, "Invalid or corrupted push buffer stream"), (4, "Invalid or corrupted push buffer stream, or GPU semaphore timeout"),
    (6, "Invalid or corrupted push buffer stream"), (7, "Invalid or corrupted push buffer address"),
    (8, "GPU stopped processing"), (9, "Driver error programming GPU"),
    (11, "Invalid or corrupted push buffer stream"), (12, "Driver error handling GPU exception"),
    (13, "Graphics Engine Exception"), (16, "Display engine hung"),
    (18, "Bus mastering disabled in PCI Config Space"), (19, "Display Engine error"),
    (20, "Invalid or corrupted Mpeg push buffer"), (21, "Invalid or corrupted Motion Estimation push buffer"),
    (22, "Invalid or corrupted Video Processor push buffer"), (24, "GPU semaphore timeout"),
    (25, "Invalid or illegal push buffer stream"), (26, "Framebuffer timeout"),
    (27, "Video processor exception"), (28, "Video processor exception"), (29, "Video processor exception"),
    (30, "GPU semaphore access error"), (31, "GPU memory page fault"),
    (32, "Invalid or corrupted push buffer stream"), (33, "Internal micro-controller error"),
    (34, "Video processor exception"), (35, "Video processor exception"), (36, "Video processor exception"),
    (37, "Driver firmware error"), (38, "Driver firmware error"), (42, "Video processor exception"),
    (43, "GPU stopped processing"), (44, "Graphics Engine fault during context switch"),
    (45, "Preemptive cleanup, due to previous errors"), (46, "GPU stopped processing"),
    (47, "Video processor exception"), (48, "Double Bit ECC Error"),
    (54, "Auxiliary power is not connected to the GPU board"), (56, "Display Engine error"),
    (57, "Error programming video memory interface"), (58, "Unstable video memory interface detected"),
    (59, "Internal micro-controller error (older drivers)"), (60, "Video processor exception"),
    (61, "Internal micro-controller breakpoint/warning (newer drivers)"), (62, "Internal micro-controller halt (newer drivers)"),
    (63, "ECC page retirement or row remapping recording event"), (64, "ECC page retirement or row remapper recording failure"),
    (65, "Video processor exception"), (66, "Illegal access by driver"), (67, "Illegal access by driver"),
    (68, "NVDEC0 Exception"), (69, "Graphics Engine class error"), (70, "CE3: Unknown Error"),
    (71, "CE4: Unknown Error"), (72, "CE5: Unknown Error"), (73, "NVENC2 Error"), (74, "NVLINK Error"),
    (75, "CE6: Unknown Error"), (76, "CE7: Unknown Error"), (77, "CE8: Unknown Error"), (78, "vGPU Start Error"),
    (79, "GPU has fallen off the bus"), (80, "Corrupted data sent to GPU"), (81, "VGA Subsystem Error"),
    (92, "High single-bit ECC error rate"), (93, "Non-fatal violation of provisioned InfoROM wear limit"),
    (94, "Contained ECC error"), (95, "Uncontained ECC error"), (109, "Context Switch Timeout Error"),
    (110, "Security Fault Error"), (119, "GSP RPC Timeout"), (120, "GSP Error"), (121, "C2C Link Error"),
    (137, "NVLink FLA privilege error"), (140, "Unrecovered ECC Error"), (143, "GPU Initialization Failure"),
];

/// The catalog's row for `code`.
pub(crate) fn entry(code: u32) -> Option<&'static XidEntry> {
    CATALOG.iter().find(|e| e.code == code)
}

/// The older page's description of `code`.
pub(crate) fn older(code: u32) -> Option<&'static str> {
    OLDER.iter().find(|(c, _)| *c == code).map(|(_, d)| *d)
}

/// Whether `value`'s bits match a 32-character mask (`0`, `1`, `-` any), most significant
/// bit first.
pub(crate) fn mask_matches(mask: &str, value: u32) -> bool {
    mask.len() == 32
        && mask.chars().enumerate().all(|(i, c)| {
            let bit = (value >> (31 - i)) & 1;
            match c {
                '0' => bit == 0,
                '1' => bit == 1,
                _ => true,
            }
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_complete_and_ordered() {
        assert_eq!(CATALOG.len(), 172);
        for (i, e) in CATALOG.iter().enumerate() {
            assert_eq!(e.code as usize, i + 1);
        }
        let x79 = entry(79).unwrap();
        assert_eq!(x79.mnemonic, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS");
        assert_eq!(x79.immediate, "RESTART_BM");
        assert_eq!(entry(74).unwrap().applies, [true, true, false, false]);
        assert_eq!(entry(93).unwrap().applies, [true, false, false, false]);
    }

    #[test]
    fn every_decode_mask_is_32_bits() {
        for r in NVLINK5_DECODE {
            assert!(r.v1.len() == 32 && r.v2.len() == 32, "{}", r.unit);
            assert!((144..=150).contains(&r.xid));
        }
        // NETIR_LINK_EVT, reason 0b100101, as a pre-R575 driver logs it.
        assert!(mask_matches("------100101----------0111000110", 0x025525c6));
        assert!(!mask_matches(
            "------000000----------0111000110",
            0x025525c6
        ));
    }
}
