//! What `gpuhost status` collected, as plain data.
//!
//! Collection (sysfs, /proc, the kernel log, systemctl, NVML) fills a [`Snapshot`]; verdicts
//! (`judge`) are pure functions of it. The snapshot serialises to JSON, so a real
//! machine's answers can be captured (`gpuhost status --dump-snapshot`) and replayed in tests
//! (`--from-snapshot FILE`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the snapshot layout; bumped on incompatible changes.
pub(crate) const SNAPSHOT_SCHEMA: u32 = 1;

/// One NVML answer: a value, "not supported by this device" (n/a, never a failure), or an
/// error (NVML's error kind, e.g. `NoPermission`, `GpuLost`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading<T> {
    Value(T),
    NotSupported,
    Error(String),
}

impl<T> Reading<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }

    /// The value mapped by `f`; n/a and errors unchanged.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Reading::Value(v) => Reading::Value(f(v)),
            Reading::NotSupported => Reading::NotSupported,
            Reading::Error(e) => Reading::Error(e),
        }
    }
}

/// A reading absent from a snapshot taken before gpuhost read it: n/a.
pub(crate) fn not_read<T>() -> Reading<T> {
    Reading::NotSupported
}

/// Everything one run collected.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub schema: u32,
    /// Unix time of the collection.
    pub collected_at: u64,
    pub host: HostSnapshot,
    pub services: Services,
    pub kernel_log: KernelLog,
    pub nvml: NvmlProbe,
    /// Unix time of the collection in ms (rates need better than seconds); 0 in older
    /// snapshots.
    #[serde(default)]
    pub collected_at_ms: u64,
    /// The counters an earlier run kept (PCIe replays, NVLink errors per GPU), against which
    /// this run's are judged as rates. None on a first reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Baseline>,
    /// This snapshot is a running `gpuhost serve`'s last sweep, asked on its socket
    /// ([`crate::served`]); absent when this run collected it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<ServedBy>,
    /// The active checks (`gpuhost status --active`), or the last ones kept (`gpuhost serve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ActiveRun>,
}

/// One run of the active checks' child, as its parent saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ActiveRun {
    /// What the child reported; None when it gave no report.
    pub report: Option<gpuhost_active::ActiveReport>,
    /// Why there is no report (the child could not start, was killed past its time limit,
    /// printed something else).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The child's exit code (None: killed or not waited for).
    pub exit_code: Option<i32>,
    /// The parent's wall time for the child, ms.
    pub wall_ms: f64,
    /// Unix time the run ended.
    pub finished_at: u64,
    /// Age of a kept result when it was read (`gpuhost serve`); None: measured by this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_s: Option<u64>,
}

/// Which `gpuhost serve` answered, and how old its sweep was.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServedBy {
    /// The socket asked.
    pub socket: String,
    /// The server's pid.
    pub pid: u32,
    /// Age of the sweep when it arrived, ms.
    pub age_ms: u64,
    /// The server's `--max-age`, s.
    pub max_age_s: f64,
}

/// Driver-free facts from sysfs and /proc.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HostSnapshot {
    /// NVIDIA (vendor 0x10de) PCI functions that are GPUs or NVSwitches.
    pub pci: Vec<PciDevice>,
    /// Error reading the PCI bus, if it could not be listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_error: Option<String>,
    /// First line of /proc/driver/nvidia/version; None when absent (kernel module not loaded).
    pub proc_driver_version: Option<String>,
    /// The driver version parsed from it, e.g. `580.159.04`.
    pub kernel_module_version: Option<String>,
    /// /sys/module/nvidia exists.
    pub nvidia_module_loaded: bool,
    /// /sys/module/nouveau exists.
    pub nouveau_loaded: bool,
    /// Where libnvidia-ml.so.1 was found and the version its file name carries.
    pub nvml_library: Option<NvmlLibrary>,
    pub docker_daemon_json: DaemonJson,
    /// `/dev/nvidiactl`, `/dev/nvidia-uvm*`, `/dev/nvidia<N>`: what exists, with mode and owner
    /// (None in snapshots from before gpuhost looked).
    #[serde(default)]
    pub dev_nodes: Option<Vec<DevNode>>,
    /// Why /dev could not be listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_error: Option<String>,
    /// The user gpuhost runs as, for judging the device nodes' permissions.
    #[serde(default)]
    pub uid: u32,
    /// `/proc/sys/kernel/random/boot_id`: counters kept for rates belong to one boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// Docker's daemon binary (`/usr/bin/dockerd`) is there; None when not looked for (older
    /// snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_installed: Option<bool>,
    /// Memory, CPUs, uptime and free space (sysinfo); absent in snapshots saved before them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<gpuhost_host::hostinfo::HostInfo>,
    /// The kernel the next boot runs and the NVIDIA module modprobe would load for it (None in
    /// snapshots from before gpuhost looked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_boot: Option<NextBoot>,
    /// Secure Boot and who signed the NVIDIA modules of the next boot's kernel (None in
    /// snapshots from before gpuhost looked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<SecureBootState>,
}

/// Secure Boot, and the signatures of the NVIDIA modules modprobe would load for `kernel`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SecureBootState {
    /// The `SecureBoot` EFI variable says 1.
    pub enabled: bool,
    /// The kernel whose modules were read (the default boot kernel, else the running one);
    /// modules are read only with Secure Boot on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<ModuleSignature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One module file and its signature.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModuleSignature {
    /// Relative to `/lib/modules/<kernel>/`.
    pub path: String,
    /// Who signed it (`CN=…, O=… (serial …)`); None: unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// Where that key stands with the firmware.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<gpuhost_host::secureboot::Trust>,
    /// The file or its signature could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A kernel and the version of its `nvidia` module.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelModule {
    pub kernel: String,
    pub version: Option<String>,
}

/// The next boot: the default boot kernel (grubenv + BLS, as `grubby --default-kernel`) and
/// what `modprobe nvidia` would load for it; what the kernel guard recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NextBoot {
    /// None when the host has no EL boot layout (`/lib/modules/<kver>/vmlinuz`, BLS entries).
    pub kernel: Option<String>,
    /// The running kernel (live hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// modprobe would load a module for `kernel` (listed in its modules.dep).
    pub loadable: bool,
    /// That module's modinfo version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_version: Option<String>,
    /// One line: `extra/nvidia.ko.xz, version 580.82.07`, `no module`, ….
    pub module: String,
    /// The other installed kernels of the same flavour for which modprobe would load an
    /// `nvidia` module, newest first, with its version (fallbacks to make the default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others_with_module: Vec<KernelModule>,
    /// The other installed (bootable) kernels, of any flavour, for which modprobe would load no
    /// `nvidia` module: a boot of one from the menu, or a fallback, starts without the GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub without_module: Vec<String>,
    /// What could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `/var/lib/gpuhost/kernel-guard.json`: the default boot entry was held back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<gpuhost_host::guard_record::Record>,
}

/// One NVIDIA device node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DevNode {
    /// `/dev/nvidia0`
    pub path: String,
    /// A character device (not a plain file or a link left behind).
    pub char_device: bool,
    /// Permission bits (`0o666`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlLibrary {
    pub path: String,
    pub version: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PciKind {
    #[default]
    Gpu,
    NvSwitch,
}

/// One NVIDIA PCI function from /sys/bus/pci/devices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PciDevice {
    /// `0000:3b:00.0`
    pub address: String,
    pub kind: PciKind,
    /// `0x2335`
    pub device_id: String,
    /// `0x030200`
    pub class: String,
    /// Bound kernel driver (`nvidia`, `vfio-pci`, …), None when unbound.
    pub driver: Option<String>,
    /// First four bytes of config space as hex (`de103523`); `ffffffff` means the device
    /// fell off the bus. None when unreadable.
    pub config_head: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
    pub current_link_speed: Option<String>,
    pub max_link_speed: Option<String>,
    pub current_link_width: Option<u32>,
    pub max_link_width: Option<u32>,
    /// AER totals, where the kernel exposes them.
    pub aer: Option<AerCounters>,
}

impl PciDevice {
    pub fn fell_off(&self) -> bool {
        self.config_head.as_deref() == Some("ffffffff")
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AerCounters {
    pub correctable: u64,
    pub nonfatal: u64,
    pub fatal: u64,
}

/// /etc/docker/daemon.json as far as the NVIDIA runtime is concerned.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonJson {
    pub present: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `runtimes.nvidia` is defined.
    pub nvidia_runtime: bool,
    pub default_runtime: Option<String>,
}

/// systemd unit states from `systemctl is-active` (`active`, `inactive`, `failed`, …).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Services {
    /// Why states could not be read (systemctl missing, not checked under a fake root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// systemd is not PID 1 (no `/run/systemd/system`): a container, a chroot, another init.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_systemd: bool,
    pub docker: Option<String>,
    pub nvidia_persistenced: Option<String>,
    pub nvidia_fabricmanager: Option<String>,
    /// Installed Fabric Manager: `nvidia-fabricmanager 580.159.04` (package and version, from
    /// rpm), asked only when NVSwitches are on PCI. None when not asked or not installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabricmanager_version: Option<FabricManagerVersion>,
    /// `nvidia-imex` (multi-node NVLink memory export: GB200/GB300 NVL72 compute trays).
    /// Absent from older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_imex: Option<String>,
    /// The IMEX domain as `nvidia-imex-ctl -N` reports it, asked only while nvidia-imex runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imex_domain: Option<ImexDomain>,
}

/// `nvidia-imex-ctl -N` (NVIDIA IMEX guide, "IMEX Service Command Service"): every node of the
/// domain with its state (`READY`), and the domain's (`Domain State: UP`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImexDomain {
    /// `UP`, `DEGRADED`, `DOWN`: the `Domain State:` line; None when there was none.
    pub domain_state: Option<String>,
    pub nodes: Vec<ImexNode>,
    /// Why it could not be read (the command service is off: `IMEX_CMD_ENABLED=1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `Node #0   - 10.136.206.48   - READY`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImexNode {
    pub index: u32,
    pub address: String,
    pub state: String,
}

/// The Fabric Manager package found, and its version (`580.159.04`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FabricManagerVersion {
    /// `nvidia-fabricmanager` (580 on) or `nvidia-fabric-manager` (before 580); None when
    /// neither is installed.
    pub package: Option<String>,
    pub version: Option<String>,
    /// Why it could not be read (no rpm, rpm failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// XID events from the kernel log.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelLog {
    /// `kmsg`, `journal`, or None when neither could be read.
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub xids: Vec<XidEvent>,
    /// NVSwitch errors (`nvidia-nvswitchN: SXid (PCI:…): 20034, Fatal, …`).
    #[serde(default)]
    pub sxids: Vec<SxidEvent>,
    /// The driver's `NVRM: GPU at PCI:0000:3b:00: GPU-…` lines: printed once per
    /// initialisation of a GPU, before its first XID, so one after an earlier XID marks a
    /// reset (or a driver reload) since.
    #[serde(default)]
    pub gpu_inits: Vec<GpuInit>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct XidEvent {
    pub xid: u32,
    /// PCI address as the kernel printed it, normalised to `0000:3b:00` (domain:bus:device).
    pub pci: String,
    /// Seconds since boot, where known.
    pub uptime_s: Option<f64>,
    pub message: String,
    /// Position in the log (records in order), to order XIDs against GPU initialisations.
    #[serde(default)]
    pub order: u64,
}

/// One `NVRM: GPU at PCI:…: GPU-…` line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuInit {
    /// `0000:3b:00`
    pub pci: String,
    pub uuid: String,
    pub uptime_s: Option<f64>,
    pub order: u64,
}

/// One NVSwitch error from the kernel log.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SxidEvent {
    pub sxid: u32,
    /// The NVSwitch's PCI function as printed, `0000:c3:00.0`.
    pub pci: String,
    /// NVIDIA's split: `Fatal` or `Non-fatal` in the message; None when it says neither.
    pub fatal: Option<bool>,
    pub link: Option<u32>,
    pub uptime_s: Option<f64>,
    pub message: String,
}

/// How the NVML probe (a child process) ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// NVML initialised; devices were read.
    Ok,
    /// libnvidia-ml.so.1 could not be loaded.
    NoLibrary,
    /// NVML: driver not loaded.
    DriverNotLoaded,
    /// NVML: driver/library version mismatch.
    VersionMismatch,
    /// NVML: insufficient permissions.
    NoPermission,
    /// Another NVML init error.
    InitError,
    /// The probe did not answer within the deadline.
    Unresponsive,
    /// A probe from an earlier run is still stuck; no new one was started.
    StuckEarlier,
    /// The probe process failed (crashed, bad output).
    ProbeFailed,
    /// Not run (e.g. replay of a host-only snapshot).
    #[default]
    NotRun,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlProbe {
    pub status: ProbeStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the probe, ms (init + sweep, as seen by the parent).
    pub duration_ms: Option<f64>,
    /// Wall time of the per-GPU sweep, ms (GPUs are read concurrently, one thread each, so
    /// this is about the slowest GPU's `sweep_ms`, not their sum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_wall_ms: Option<f64>,
    /// Pid of a stuck probe left behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck_pid: Option<u32>,
    /// The probe process's peak resident memory (`VmHWM`), KiB, when its work was done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_kib: Option<u64>,
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    /// `nvmlSystemGetCudaDriverVersion`, e.g. 13000 for CUDA 13.0.
    pub cuda_driver_version: Option<i32>,
    pub device_count: Option<u32>,
    pub gpus: Vec<GpuSnapshot>,
    /// libcuda.so.1 loaded and `cuInit(0)` in the probe (DCGM level 1's CUDA check). None
    /// when the probe did not get that far, or in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<CudaCheck>,
}

/// The CUDA driver API, as the probe found it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CudaCheck {
    /// libcuda.so.1 could be loaded (and has `cuInit`).
    pub loaded: bool,
    /// `cuInit(0)`'s CUresult (0 success, 100 no device, 999 unknown, …).
    pub init_rc: Option<i32>,
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: Option<i32>,
    /// Time cuInit took, ms (0 when the answer came from the cache).
    pub init_ms: Option<f64>,
    /// The answer is a success recorded earlier for the same boot, driver and device nodes
    /// (`<run dir>/boot-cache.json`); failures are never cached.
    #[serde(default)]
    pub cached: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EccMode {
    pub current: bool,
    pub pending: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigMode {
    pub current: u32,
    pub pending: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvLink {
    pub link: u32,
    pub active: bool,
    pub replay_errors: Option<u64>,
    pub recovery_errors: Option<u64>,
    pub crc_flit_errors: Option<u64>,
    pub crc_data_errors: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fabric {
    /// 0 not supported, 1 not started, 2 in progress, 3 completed.
    pub state: u8,
    /// NVML return code of the registration (0 = success).
    pub status: u32,
    pub clique_id: u32,
    pub cluster_uuid: String,
    /// Raw health mask (degraded bandwidth, route recovery, route unhealthy, access timeout).
    pub health_mask: u32,
    /// Version 3's health summary: 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity
    /// (`NVML_GPU_FABRIC_HEALTH_SUMMARY_*`); None from a version-2 answer or an older snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_summary: Option<u8>,
}

/// NVLink-C2C, the chip-to-chip link between the Grace CPU and the GPU of a superchip (GH200,
/// GB200, GB300): `nvmlDeviceGetC2cModeInfoV` (enabled) and the field values
/// `NVML_FI_DEV_C2C_LINK_COUNT` (170), `…_GET_STATUS` (171, per link: 1 active) and
/// `…_GET_MAX_BW` (172, per link, MB/s). A GPU without C2C answers NOT_SUPPORTED (n/a).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct C2c {
    pub enabled: bool,
    /// The links the count field gave (empty when it was not answered).
    pub links: Vec<C2cLink>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct C2cLink {
    pub link: u32,
    pub active: bool,
    /// Its maximum bandwidth, MB/s (`nvidia-smi c2c -s` shows 44.712 GB/s a link on a GH200).
    pub max_bandwidth_mbps: Option<u64>,
}

fn not_collected<T>() -> Reading<T> {
    Reading::Error("not collected".into())
}

/// ECC error counts of one kind of memory (`None` where NVML does not count that one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EccCounts {
    pub volatile_corrected: Option<u64>,
    pub volatile_uncorrected: Option<u64>,
    pub aggregate_corrected: Option<u64>,
    pub aggregate_uncorrected: Option<u64>,
}

/// `nvmlDeviceGetSramEccErrorStatus`: SRAM ECC counts and NVIDIA's SRAM threshold flag.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SramEcc {
    pub volatile_corrected: u64,
    /// Parity plus SEC-DED uncorrectable.
    pub volatile_uncorrected: u64,
    pub aggregate_corrected: u64,
    pub aggregate_uncorrected: u64,
    /// The SRAM error threshold was exceeded (NVIDIA: run field diagnostics).
    pub threshold_exceeded: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InfoRom {
    /// `nvmlDeviceValidateInforom` succeeded (false: NVML_ERROR_CORRUPTED_INFOROM).
    pub valid: bool,
    pub image_version: Option<String>,
    /// Unix time of the validation.
    #[serde(default)]
    pub checked_at: Option<u64>,
    /// The validation is one an earlier run kept (`<run dir>/boot-cache.json`, for an hour).
    #[serde(default)]
    pub cached: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GspFirmware {
    pub enabled: bool,
    /// GSP firmware is on by default for this GPU and driver.
    pub default_enabled: bool,
    pub version: Option<String>,
}

/// One GPU as NVML sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSnapshot {
    pub index: u32,
    pub name: Reading<String>,
    pub uuid: Reading<String>,
    /// NVML form: `00000000:3B:00.0`.
    pub pci_bus_id: Reading<String>,
    /// `nvmlDeviceGetBrand` as NVML's number (`nvmlBrandType_t`, 14 = NVIDIA), and
    /// `nvmlDeviceGetCudaComputeCapability` as `major.minor`: what the container runtime's
    /// `brand` and `arch` requirements compare (`gpuhost compat`). Absent from older snapshots.
    #[serde(default = "not_collected")]
    pub brand: Reading<u32>,
    #[serde(default = "not_collected")]
    pub compute_capability: Reading<String>,
    pub ecc_mode: Reading<EccMode>,
    pub ecc_volatile_uncorrected: Reading<u64>,
    pub ecc_aggregate_uncorrected: Reading<u64>,
    pub ecc_volatile_corrected: Reading<u64>,
    pub retired_pages_pending: Reading<bool>,
    pub remapped_rows: Reading<RemappedRows>,
    /// 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset.
    pub recovery_action: Reading<u32>,
    pub temperature_c: Reading<u32>,
    pub temperature_slowdown_c: Reading<u32>,
    pub temperature_shutdown_c: Reading<u32>,
    /// Clock event (throttle) reasons bitmask, NVML's `nvmlClocksEventReason*` bits.
    pub clock_event_reasons: Reading<u64>,
    pub power_usage_mw: Reading<u32>,
    pub power_limit_enforced_mw: Reading<u32>,
    pub power_limit_default_mw: Reading<u32>,
    pub memory_total_bytes: Reading<u64>,
    pub memory_used_bytes: Reading<u64>,
    pub pcie_gen_current: Reading<u32>,
    pub pcie_gen_max: Reading<u32>,
    pub pcie_width_current: Reading<u32>,
    pub pcie_width_max: Reading<u32>,
    pub persistence_mode: Reading<bool>,
    pub mig_mode: Reading<MigMode>,
    /// Links that answered; NotSupported when link 0 is not supported.
    pub nvlinks: Reading<Vec<NvLink>>,
    pub fabric: Reading<Fabric>,
    /// The Grace CPU's chip-to-chip link (superchips); n/a elsewhere and in older snapshots.
    #[serde(default = "not_read")]
    pub c2c: Reading<C2c>,
    /// `nvmlDeviceGetArchitecture`: `Hopper`, `Ampere`, `Volta`, ….
    #[serde(default = "not_read")]
    pub architecture: Reading<String>,
    /// `/dev/nvidia<minor>` belongs to this GPU.
    #[serde(default = "not_read")]
    pub minor_number: Reading<u32>,
    /// PCIe replays since the driver loaded.
    #[serde(default = "not_read")]
    pub pcie_replay_counter: Reading<u32>,
    /// Corrected ECC errors over the GPU's life (all memory).
    #[serde(default = "not_read")]
    pub ecc_aggregate_corrected: Reading<u64>,
    /// Device memory (DRAM/HBM) ECC counts.
    #[serde(default = "not_read")]
    pub ecc_dram: Reading<EccCounts>,
    /// SRAM ECC counts and threshold flag.
    #[serde(default = "not_read")]
    pub ecc_sram: Reading<SramEcc>,
    #[serde(default = "not_read")]
    pub inforom: Reading<InfoRom>,
    #[serde(default = "not_read")]
    pub vbios_version: Reading<String>,
    #[serde(default = "not_read")]
    pub gsp_firmware: Reading<GspFirmware>,
    /// The fields that cannot change while NVML stays initialised (name, PCI bus id, VBIOS,
    /// GSP firmware, board limits: `nvml::GpuFixed`) are those the probe read at its
    /// first sweep (`gpuhost serve`'s long-lived probe) or found in the boot cache for this
    /// boot, driver and GPU UUID (`boot_cache`); false: read in this sweep.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed_kept: bool,
    /// Time to read this GPU, ms.
    pub sweep_ms: f64,
}

/// NVML's clock event reason bits that matter here.
pub mod reasons {
    pub(crate) const GPU_IDLE: u64 = 0x1;
    pub(crate) const SW_POWER_CAP: u64 = 0x4;
    pub(crate) const HW_SLOWDOWN: u64 = 0x8;
    pub(crate) const SW_THERMAL: u64 = 0x20;
    pub(crate) const HW_THERMAL: u64 = 0x40;
    pub(crate) const HW_POWER_BRAKE: u64 = 0x80;
}
/// The counters baseline `counters` keeps in the run dir (part of a snapshot: its
/// `previous`).
/// Counters of every GPU at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// `/proc/sys/kernel/random/boot_id` when it was taken.
    pub boot_id: Option<String>,
    /// Unix time, ms.
    pub at_ms: u64,
    /// By GPU UUID.
    pub gpus: BTreeMap<String, GpuCounters>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuCounters {
    pub pcie_replays: Option<u32>,
    /// By link number.
    pub nvlink: BTreeMap<u32, LinkCounters>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkCounters {
    pub replay: Option<u64>,
    pub recovery: Option<u64>,
    pub crc_flit: Option<u64>,
    pub crc_data: Option<u64>,
}
