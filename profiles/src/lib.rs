//! Profiles: what a host should look like, as TOML. The section types live here too (`driver.rs`,
//! `containers.rs`), so that the steps depend on the profile and never the reverse.
//!
//! Built-in profiles (`profiles/*.toml`) are compiled into the binary; a profile may also be a
//! file. A profile may say `extends = "ol8-uek"` (a built-in name or a path relative to the file)
//! and override any key; `--set key.path=value` overrides one key from the command line.
//! Unknown keys and wrong types are errors that name the key: a typo is never a silent default.

#![warn(unreachable_pub)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use gpuhost_host::invalid;
use gpuhost_host::kernel::Flavour;

mod containers;
pub mod doc;
mod driver;

pub use containers::{
    toolkit_denied, toolkit_refused, ConflictPolicy, DaemonSpec, DockerSpec, ModuleFiltering,
    PrefixLink, RepoSource, SmokeSpec, ToolkitSpec, TOOLKIT_CVES, TOOLKIT_DENY, TOOLKIT_FLOOR,
};
use driver::yes;
pub use driver::{DriverSpec, InstallSet, StreamKind, SPLIT_PACKAGES_SINCE};

/// The built-in profiles: (name, TOML text).
pub(crate) const BUILTIN: &[(&str, &str)] = &[
    ("ol8-uek", include_str!("../ol8-uek.toml")),
    ("ol8-rhck", include_str!("../ol8-rhck.toml")),
    ("ol9-uek", include_str!("../ol9-uek.toml")),
    ("ol9-rhck", include_str!("../ol9-rhck.toml")),
    ("ol10-uek", include_str!("../ol10-uek.toml")),
    ("ol10-rhck", include_str!("../ol10-rhck.toml")),
];

/// How deep `extends` may nest.
const MAX_EXTENDS: usize = 8;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Where the profile came from (a built-in name or a path); not a TOML key.
    #[serde(skip)]
    pub name: String,
    /// One line about the profile, shown by `gpuhost profiles`.
    pub description: String,
    /// The Oracle Linux release the host must run.
    pub os: OsSpec,
    /// The kernel flavour served and its header packages.
    pub kernel: KernelSpec,
    /// The NVIDIA driver, from NVIDIA's local repo package, CUDA or driver-only (steps
    /// driver-repo to persistenced).
    #[serde(default)]
    pub driver: DriverSpec,
    /// Docker CE, its conflicts, and what gpuhost puts into /etc/docker/daemon.json.
    #[serde(default)]
    pub docker: DockerSpec,
    /// The NVIDIA Container Toolkit.
    #[serde(default)]
    pub container_toolkit: ToolkitSpec,
    /// Libraries exposed under a stable prefix: every file the packages own is linked under
    /// `prefix` (`/usr/` stripped, `lib64` folded into `lib`); missing packages are installed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefix_links: Vec<PrefixLink>,
    /// The container smoke test a live apply runs (`docker run --gpus all IMAGE nvidia-smi -L`).
    #[serde(default)]
    pub container_smoke: SmokeSpec,
    /// What `gpuhost status --profile` expects of the node.
    #[serde(default)]
    pub status: StatusSpec,
    /// The Machine Owner Key DKMS signs the NVIDIA modules with, when Secure Boot is on.
    #[serde(default)]
    pub secure_boot: SecureBootSpec,
    /// How `apply --reboot` reboots the node when a change needs it.
    #[serde(default)]
    pub reboot: RebootSpec,
}

/// Who reboots the node (`apply --reboot`).
#[derive(
    Clone, Copy, Debug, Default, Serialize, Deserialize, schemars::JsonSchema, PartialEq, Eq,
)]
#[serde(rename_all = "kebab-case")]
pub enum RebootVia {
    /// gpuhost reboots the node itself, at once (`systemctl reboot`).
    #[default]
    Systemd,
    /// Slurm reboots the node once its jobs have ended (`scontrol reboot ASAP`); the node stays
    /// down after the boot until a healthy `gpuhost status --slurm` resumes it.
    Slurm,
}

/// How the node is rebooted when a change needs it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RebootSpec {
    /// `systemd` (gpuhost reboots at once) or `slurm` (Slurm drains the node, waits for its jobs,
    /// reboots it; `--reboot-via` overrides).
    #[serde(default)]
    pub via: RebootVia,
    /// The node's Slurm name (default: `$SLURMD_NODENAME`, else the Slurm node whose
    /// NodeHostname is this host's short name, else that name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_node: Option<String>,
}

/// Module signing for Secure Boot. With Secure Boot on, a DKMS stream needs both keys: apply
/// stops (exit 2) before installing the driver when they are unset, missing, or the
/// certificate is neither enrolled nor pending (`mokutil --test-key`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecureBootSpec {
    /// The private key DKMS signs with (PEM, mode 0600, owned by root), e.g.
    /// `/etc/pki/gpuhost/mok.key`; set with `cert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Its DER certificate, enrolled as a MOK (`mokutil --import`), e.g.
    /// `/etc/pki/gpuhost/mok.der`; set with `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
}

impl SecureBootSpec {
    /// (key, cert) when the profile names both.
    pub fn pair(&self) -> Option<(&str, &str)> {
        Some((self.key.as_deref()?, self.cert.as_deref()?))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OsSpec {
    /// Oracle Linux major version: 8, 9 or 10.
    pub major: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelSpec {
    /// The kernel flavour served: `uek` (Unbreakable Enterprise Kernel) or `rhck` (Red Hat
    /// Compatible Kernel); the next boot keeps it.
    pub flavour: Flavour,
    /// Header packages per served kernel; `{kver}` is replaced by the kernel release.
    pub devel_packages: Vec<String>,
    /// Packages needed once, whatever the kernel (e.g. `kernel-headers` on RHCK).
    #[serde(default)]
    pub extra_packages: Vec<String>,
    /// Keep the default boot entry on the last kernel with the NVIDIA module when a newer
    /// kernel cannot get one (the kernel guard); `false` lets the new kernel boot anyway.
    #[serde(default = "yes")]
    pub guard: bool,
}

/// serde's default for the keys that are on unless a profile turns them off.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusSpec {
    /// GPUs this node must have; `gpuhost status` is CRITICAL when fewer answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_gpus: Option<u32>,
    /// The driver version this node must run (`535.104.05`); overrides the one parsed from
    /// `driver.local_repo_rpm`'s file name. `gpuhost status` warns on another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_driver_version: Option<String>,
    /// Docker and its nvidia runtime are checked (unset: true); false makes them n/a.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_docker: Option<bool>,
    /// nvidia-fabricmanager must run at the driver's exact version (unset: when NVSwitches
    /// are on PCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_fabric_manager: Option<bool>,
    /// SRAM correctable ECC errors (volatile or aggregate) above this are CRITICAL (unset:
    /// 10000, Azure's AzNHC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_sram_correctable_max: Option<u64>,
    /// SRAM uncorrectable ECC errors above this are CRITICAL (unset: 0, AzNHC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_sram_uncorrectable_max: Option<u64>,
    /// DRAM ECC errors of any kind (correctable or not, volatile or aggregate) above this are
    /// CRITICAL (unset: 20000000, AzNHC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_dram_max: Option<u64>,
    /// PCIe replays per minute above this are a WARNING (unset: 8, DCGM's health watch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_replays_per_minute_max: Option<f64>,
    /// NVLink CRC (flit + data) errors per second on a link above this are a WARNING (unset:
    /// 100, DCGM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_crc_errors_per_second_max: Option<f64>,
    /// NVLink replay + recovery errors per minute on a link above this are a WARNING (unset:
    /// 0, DCGM: any new one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_replay_recovery_per_minute_max: Option<f64>,
    /// `gpuhost status` warns when `/` has less free space than this, in GiB (unset: 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_root_gib: Option<f64>,
    /// … when `/var` has less (unset: 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_var_gib: Option<f64>,
    /// … when Docker's data-root (daemon.json `data-root`, else /var/lib/docker) has less
    /// (unset: 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_docker_gib: Option<f64>,
    /// … when /var/lib/dkms (DKMS builds for a new kernel) has less (unset: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_dkms_gib: Option<f64>,
}

impl StatusSpec {
    /// Thresholds and floors are numbers a check can compare with: not negative, not NaN or
    /// infinite (TOML reads `nan` and `inf`), and not beyond what a node can have.
    fn check_ranges(&self, name: &str) -> Result<()> {
        let keys = [
            (
                "pcie_replays_per_minute_max",
                self.pcie_replays_per_minute_max,
                1e9,
            ),
            (
                "nvlink_crc_errors_per_second_max",
                self.nvlink_crc_errors_per_second_max,
                1e9,
            ),
            (
                "nvlink_replay_recovery_per_minute_max",
                self.nvlink_replay_recovery_per_minute_max,
                1e9,
            ),
            // GiB: a mebibyte-exabyte is no node's disk.
            ("min_free_root_gib", self.min_free_root_gib, 1e9),
            ("min_free_var_gib", self.min_free_var_gib, 1e9),
            ("min_free_docker_gib", self.min_free_docker_gib, 1e9),
            ("min_free_dkms_gib", self.min_free_dkms_gib, 1e9),
        ];
        for (key, value, max) in keys {
            if let Some(v) = value {
                if !v.is_finite() || !(0.0..=max).contains(&v) {
                    return Err(invalid!(
                        "profile {name}: key `status.{key}`: {v} is out of range; give a number from 0 to {max:e}"
                    ));
                }
            }
        }
        if self.expect_gpus.is_some_and(|n| n > 4096) {
            return Err(invalid!(
                "profile {name}: key `status.expect_gpus`: {} is out of range; give 0 to 4096",
                self.expect_gpus.unwrap_or_default()
            ));
        }
        Ok(())
    }
}

impl Profile {
    /// Resolve a profile by built-in name or path, apply `--set` overrides, check it.
    pub fn resolve(spec: &str, sets: &[String]) -> Result<Profile> {
        let mut seen = BTreeSet::new();
        let mut table = load_raw(spec, None, &mut seen)?;
        // `--set` values read as TOML (`8`, `true`) that a string key may want as text
        // (`--set driver.stream=535`): (key path, raw text).
        let mut as_text: Vec<(String, String)> = Vec::new();
        for set in sets {
            if let Some((key, raw)) = apply_set(&mut table, set)? {
                as_text.push((key, raw));
            }
        }
        loop {
            refuse_control_characters(spec, "", &table)?;
            match serde_path_to_error::deserialize::<_, Profile>(toml::Value::Table(table.clone()))
            {
                Ok(mut profile) => {
                    profile.name = spec.to_string();
                    // `driver.sha256 = ""` unpins what a profile it extends pins.
                    profile.driver.sha256 = profile.driver.sha256.take().filter(|s| !s.is_empty());
                    profile.validate()?;
                    return Ok(profile);
                }
                Err(e) => {
                    let path = e.path().to_string();
                    // A string key given a number or boolean by --set: take the text and retry.
                    if let Some(i) = as_text.iter().position(|(k, _)| *k == path) {
                        let (key, raw) = as_text.remove(i);
                        apply_set(&mut table, &format!("{key}={}", toml_string(&raw)))?;
                        continue;
                    }
                    let inner = one_line(&e.into_inner().to_string());
                    return Err(if path == "." || path.is_empty() {
                        invalid!("profile {spec}: {inner}")
                    } else {
                        invalid!("profile {spec}: key `{path}`: {inner}")
                    });
                }
            }
        }
    }

    /// Pin the driver to this local repo package, replacing the installed one, checked against
    /// `sha256` (or against none: `None` unpins what the profile pins): `gpuhost rollback`'s
    /// driver, over the profile's and the `--set`s'. Checked again as a resolved profile is.
    pub fn pin_driver(&mut self, local_repo_rpm: PathBuf, sha256: Option<String>) -> Result<()> {
        self.driver.local_repo_rpm = Some(local_repo_rpm);
        self.driver.replace_local_repo = true;
        self.driver.sha256 = sha256.filter(|s| !s.is_empty());
        self.validate()
    }

    /// Checks beyond types.
    fn validate(&self) -> Result<()> {
        let name = &self.name;
        if gpuhost_host::platform::release(self.os.major).is_none() {
            return Err(invalid!(
                "profile {name}: key `os.major`: {} is not a supported Oracle Linux release (gpuhost provisions {})",
                self.os.major,
                gpuhost_host::platform::supported_text()
            ));
        }
        self.status.check_ranges(name)?;
        if self.kernel.devel_packages.is_empty() {
            return Err(invalid!(
                "profile {name}: key `kernel.devel_packages` is empty; name the header package, e.g. \"kernel-uek-devel-{{kver}}\""
            ));
        }
        for p in &self.kernel.devel_packages {
            if !p.ends_with("-{kver}") {
                return Err(invalid!(
                    "profile {name}: key `kernel.devel_packages`: \"{p}\" must end in -{{kver}} (e.g. kernel-uek-devel-{{kver}}): headers must match the kernel exactly"
                ));
            }
        }
        for p in self
            .kernel
            .devel_packages
            .iter()
            .chain(&self.kernel.extra_packages)
        {
            if p.trim().is_empty() || p.chars().any(char::is_whitespace) {
                return Err(invalid!(
                    "profile {name}: key `kernel`: \"{p}\" is not a package name"
                ));
            }
        }
        self.driver.validate_for(name, self.os.major)?;
        let sb = &self.secure_boot;
        for (k, v) in [("key", &sb.key), ("cert", &sb.cert)] {
            if let Some(p) = v {
                if !p.starts_with('/') || p.chars().any(char::is_control) {
                    return Err(invalid!(
                        "profile {name}: key `secure_boot.{k}`: \"{p}\" is not an absolute path"
                    ));
                }
            }
        }
        if sb.key.is_some() != sb.cert.is_some() {
            return Err(invalid!(
                "profile {name}: `secure_boot` names only one of `key` and `cert`; DKMS needs both (the private key and its DER certificate)"
            ));
        }
        containers::validate(
            name,
            &self.docker,
            &self.container_toolkit,
            &self.prefix_links,
            &self.container_smoke,
        )?;
        Ok(())
    }

    /// The resolved profile as TOML.
    /// The resolved profile as TOML; sections with nothing set are left out (they hold only
    /// defaults, and `profiles show --all` lists their keys).
    pub fn to_toml(&self) -> Result<String> {
        let mut value = toml::Value::try_from(self)?;
        if let Some(t) = value.as_table_mut() {
            t.retain(|_, v| v.as_table().is_none_or(|t| !t.is_empty()));
        }
        Ok(toml::to_string_pretty(&value)?)
    }
}

/// Names of the built-in profiles with their descriptions.
pub fn builtin_list() -> Vec<(&'static str, String)> {
    BUILTIN
        .iter()
        .map(|(n, text)| {
            let desc = toml::from_str::<toml::Table>(text)
                .ok()
                .and_then(|t| t.get("description")?.as_str().map(str::to_string))
                .unwrap_or_default();
            (*n, desc)
        })
        .collect()
}

fn is_path(spec: &str) -> bool {
    spec.contains('/') || spec.ends_with(".toml")
}

/// Load a profile's table with its `extends` chain merged in.
fn load_raw(spec: &str, base: Option<&Path>, seen: &mut BTreeSet<String>) -> Result<toml::Table> {
    let (key, text, dir) = if is_path(spec) {
        let path = match base {
            Some(b) if Path::new(spec).is_relative() => b.join(spec),
            _ => PathBuf::from(spec),
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| invalid!("profile file {} cannot be read: {e}", path.display()))?;
        let dir = path.parent().map(Path::to_path_buf);
        (path.display().to_string(), text, dir)
    } else {
        let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == spec) else {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            return Err(invalid!(
                "unknown profile `{spec}`; built-in profiles are {}, or give a path to a .toml file",
                names.join(", ")
            ));
        };
        (spec.to_string(), (*text).to_string(), None)
    };
    if !seen.insert(key.clone()) {
        return Err(invalid!("profile {key}: `extends` forms a cycle"));
    }
    if seen.len() > MAX_EXTENDS {
        return Err(invalid!(
            "profile {key}: `extends` nests deeper than {MAX_EXTENDS}"
        ));
    }
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| {
        // Where and what, never the file's text: a file given as a profile by mistake (a key,
        // a password file) must not be echoed to a log (issue 43).
        let at = e.span().map_or(String::new(), |span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!(" at line {line}, column {column}")
        });
        invalid!(
            "profile {key} is not valid TOML{at}: {}",
            one_line(e.message())
        )
    })?;
    let Some(parent) = table.remove("extends") else {
        return Ok(table);
    };
    let Some(parent) = parent.as_str() else {
        return Err(invalid!(
            "profile {key}: key `extends` must be a string naming a profile"
        ));
    };
    let parent_spec = parent.to_string();
    let mut merged = load_raw(&parent_spec, dir.as_deref(), seen).map_err(|e| {
        if gpuhost_host::error::is_invalid(&e) {
            invalid!("profile {key}: key `extends`: {e}")
        } else {
            e
        }
    })?;
    merge(&mut merged, table);
    Ok(merged)
}

/// No key or string anywhere in the profile (files, `extends` chain and `--set` merged) may hold
/// a control character: every value ends up in a line-based config file (repo INI, dnf.conf,
/// dkms.conf, BLS entries, units) or in a command line, where a newline or a carriage return
/// would start a line — a section, a key — of its own. Checked over the whole value tree before
/// the typed sections see it, so every key, today's and tomorrow's, is covered.
fn refuse_control_characters(spec: &str, prefix: &str, table: &toml::Table) -> Result<()> {
    for (k, v) in table {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if let Some(c) = k.chars().find(|c| c.is_control()) {
            return Err(invalid!(
                "profile {spec}: key {path:?} contains the control character {c:?}; keys and values must be printable text on one line"
            ));
        }
        refuse_in_value(spec, &path, v)?;
    }
    Ok(())
}

fn refuse_in_value(spec: &str, path: &str, v: &toml::Value) -> Result<()> {
    match v {
        toml::Value::String(s) => match s.chars().find(|c| c.is_control()) {
            Some(c) => Err(invalid!(
                "profile {spec}: key `{path}`: the value contains the control character {c:?}; values must be printable text on one line (no newlines, tabs or escapes)"
            )),
            None => Ok(()),
        },
        toml::Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| refuse_in_value(spec, &format!("{path}[{i}]"), item)),
        toml::Value::Table(t) => refuse_control_characters(spec, path, t),
        _ => Ok(()),
    }
}

/// Deep-merge `over` into `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Apply one `--set key.path=value`.
/// Returns `(key path, raw text)` when the value was read as a non-string TOML value.
fn apply_set(table: &mut toml::Table, set: &str) -> Result<Option<(String, String)>> {
    let Some((key, raw)) = set.split_once('=') else {
        return Err(invalid!(
            "--set {set}: expected key.path=value, e.g. --set driver.stream=535-dkms"
        ));
    };
    let parts: Vec<&str> = key.trim().split('.').collect();
    if parts.iter().any(|p| {
        p.is_empty()
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }) {
        return Err(invalid!(
            "--set {set}: `{key}` is not a key path like driver.stream"
        ));
    }
    if parts == ["extends"] {
        return Err(invalid!(
            "--set {set}: `extends` cannot be set; use --profile"
        ));
    }
    let value = parse_value(raw);
    let typed = (!value.is_str()).then(|| (parts.join("."), raw.to_string()));
    let mut cur = table;
    let (last, parents) = parts
        .split_last()
        .ok_or_else(|| invalid!("--set {set}: empty key"))?;
    for (i, p) in parents.iter().enumerate() {
        let entry = cur
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(t) = entry else {
            return Err(invalid!(
                "--set {set}: `{}` is not a table",
                parts[..=i].join(".")
            ));
        };
        cur = t;
    }
    cur.insert(last.to_string(), value);
    Ok(typed)
}

/// A `--set` value: a TOML value when it parses as one (`true`, `8`, `["a", "b"]`, `"x"`),
/// else the text itself as a string (`/srv/file.rpm`, `535-dkms`).
fn parse_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// `raw` as a TOML basic string.
fn toml_string(raw: &str) -> String {
    toml::Value::String(raw.to_string()).to_string()
}

/// `s` with every run of whitespace (newlines included) made one space.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("ol8-uek", Flavour::Uek, 8)]
    #[case("ol8-rhck", Flavour::Rhck, 8)]
    #[case("ol9-uek", Flavour::Uek, 9)]
    #[case("ol9-rhck", Flavour::Rhck, 9)]
    #[case("ol10-uek", Flavour::Uek, 10)]
    #[case("ol10-rhck", Flavour::Rhck, 10)]
    fn every_builtin_profile_loads(
        #[case] name: &str,
        #[case] f: Flavour,
        #[case] major: u32,
    ) -> Result<()> {
        let p = Profile::resolve(name, &[])?;
        assert_eq!(p.kernel.flavour, f);
        assert_eq!(p.os.major, major);
        // and round-trips through `profiles show`
        let shown = p.to_toml()?;
        let back: Profile = toml::from_str(&shown)?;
        assert_eq!(back.kernel.devel_packages, p.kernel.devel_packages);
        Ok(())
    }

    #[test]
    fn set_overrides_one_key_with_the_right_type() -> Result<()> {
        let p = Profile::resolve(
            "ol8-uek",
            &[
                "driver.local_repo_rpm=/srv/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm".into(),
                "driver.stream=535-dkms".into(),
                "status.expect_gpus=8".into(),
            ],
        )?;
        assert_eq!(p.driver.stream.as_deref(), Some("535-dkms"));
        assert_eq!(p.status.expect_gpus, Some(8));
        assert!(p.driver.local_repo_rpm.is_some());
        Ok(())
    }

    fn err_of(spec: &str, sets: &[&str]) -> String {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        match Profile::resolve(spec, &sets) {
            Ok(_) => String::new(),
            Err(e) => {
                assert!(gpuhost_host::error::is_invalid(&e), "{e:#}");
                format!("{e:#}")
            }
        }
    }

    #[rstest]
    #[case(&["driver.strem=535-dkms"], "strem")]
    #[case(&["status.expect_gpus=eight"], "status.expect_gpus")]
    #[case(&["nosuch.key=1"], "nosuch")]
    #[case(&["driver.stream"], "key.path=value")]
    #[case(&["driver..stream=x"], "driver..stream")]
    #[case(&["driver.sha256=abc"], "driver.sha256")]
    #[case(&["kernel.flavour=debian"], "kernel.flavour")]
    #[case(&["os.major=7"], "os.major")]
    #[case(&["driver.stream.x=1"], "driver.stream")]
    fn bad_sets_name_the_key(#[case] sets: &[&str], #[case] needle: &str) {
        let e = err_of("ol8-uek", sets);
        assert!(e.contains(needle), "{e}");
    }

    /// Numeric keys have ranges: no negative, no NaN, no infinity (TOML reads `nan`, `inf`).
    #[rstest]
    #[case(&["status.min_free_root_gib=-1"], "status.min_free_root_gib")]
    #[case(&["status.min_free_root_gib=nan"], "status.min_free_root_gib")]
    #[case(&["status.min_free_var_gib=inf"], "status.min_free_var_gib")]
    #[case(&["status.min_free_docker_gib=-inf"], "status.min_free_docker_gib")]
    #[case(&["status.min_free_dkms_gib=1e300"], "status.min_free_dkms_gib")]
    #[case(&["status.pcie_replays_per_minute_max=-0.5"], "status.pcie_replays_per_minute_max")]
    #[case(&["status.nvlink_crc_errors_per_second_max=nan"], "status.nvlink_crc_errors_per_second_max")]
    #[case(&["status.nvlink_replay_recovery_per_minute_max=-1"], "status.nvlink_replay_recovery_per_minute_max")]
    #[case(&["status.expect_gpus=-1"], "status.expect_gpus")]
    #[case(&["status.expect_gpus=100000"], "status.expect_gpus")]
    #[case(&["status.ecc_dram_max=-5"], "status.ecc_dram_max")]
    fn numbers_out_of_range_are_refused_naming_the_key(#[case] sets: &[&str], #[case] key: &str) {
        let e = err_of("ol8-uek", sets);
        assert!(e.contains(key), "{sets:?}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
        // In range: accepted.
        assert_eq!(err_of("ol8-uek", &["status.min_free_root_gib=0.5"]), "");
    }

    #[rstest]
    #[case(&["docker.gpgkey=https://e.com/gpg\n[evil]\nbaseurl=https://evil.example/"], "docker.gpgkey")]
    #[case(&["docker.repo=/srv/mirror\r\n[evil]"], "docker.repo")]
    #[case(&["driver.stream=535\n"], "driver.stream")]
    #[case(&["container_toolkit.version=1.17.8\u{1b}[2J"], "container_toolkit.version")]
    #[case(&["kernel.extra_packages=[\"a\", \"b\\nc\"]"], "kernel.extra_packages[1]")]
    #[case(&["docker.gpgkey=\"x\\u0000y\""], "docker.gpgkey")]
    fn control_characters_are_refused_naming_the_key(#[case] sets: &[&str], #[case] key: &str) {
        let e = err_of("ol8-uek", sets);
        assert!(e.contains(key) && e.contains("control character"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    #[rstest]
    #[case(&["container_toolkit.version=1.17.3"], "CVE-2025-23359")]
    #[case(&["container_toolkit.version=1.16.1"], "CVE-2024-0132")]
    #[case(&["container_toolkit.version=1.17.0", "container_toolkit.min_version=1.16.2"], "--gpus all")]
    #[case(&["container_toolkit.min_version=newest"], "container_toolkit.min_version")]
    fn toolkit_versions_under_the_floor_or_denied_are_refused(
        #[case] sets: &[&str],
        #[case] needle: &str,
    ) {
        let e = err_of("ol8-uek", sets);
        assert!(e.contains(needle), "{e}");
    }

    #[test]
    fn control_characters_in_a_profile_file_are_refused_wherever_they_are() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let f = dir.path().join("site.toml");
        std::fs::write(
            &f,
            "extends = \"ol8-uek\"\n[[prefix_links]]\npackages = [\"libnccl\"]\nprefix = \"/opt/x\\ny\"\n",
        )?;
        let e = err_of(&f.display().to_string(), &[]);
        assert!(e.contains("prefix_links[0].prefix"), "{e}");
        std::fs::write(
            &f,
            "extends = \"ol8-uek\"\n[status]\n\"expect\\tgpus\" = 8\n",
        )?;
        let e = err_of(&f.display().to_string(), &[]);
        assert!(e.contains("control character"), "{e}");
        Ok(())
    }

    #[test]
    fn a_number_given_to_a_string_key_is_taken_as_text() -> Result<()> {
        let p = Profile::resolve("ol8-rhck", &["driver.stream=535".into()])?;
        assert_eq!(p.driver.stream.as_deref(), Some("535"));
        // but a number key still rejects text, naming the key on one line
        let e = err_of("ol8-uek", &["status.expect_gpus=eight"]);
        assert!(
            e.contains("key `status.expect_gpus`") && !e.contains('\n'),
            "{e}"
        );
        Ok(())
    }

    #[test]
    fn a_file_that_is_not_toml_is_named_and_never_echoed() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let f = dir.path().join("shadow");
        std::fs::write(
            &f,
            "root:$6$hunter2secret:19000:0:99999:7:::\nbin:*:19000::::::\n",
        )?;
        let e = Profile::resolve(&f.display().to_string(), &[]).err();
        let text = format!("{e:?}");
        assert!(
            e.as_ref().is_some_and(gpuhost_host::error::is_invalid),
            "{text}"
        );
        assert!(text.contains("not valid TOML at line 1"), "{text}");
        assert!(
            !text.contains("hunter2") && !text.contains("root:"),
            "{text}"
        );
        Ok(())
    }

    #[test]
    fn a_file_extends_a_builtin_and_overrides() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let f = dir.path().join("site.toml");
        std::fs::write(
            &f,
            "extends = \"ol8-uek\"\n[driver]\nstream = \"535-dkms\"\n",
        )?;
        let p = Profile::resolve(&f.display().to_string(), &[])?;
        assert_eq!(p.driver.stream.as_deref(), Some("535-dkms"));
        assert_eq!(p.kernel.flavour, Flavour::Uek);
        Ok(())
    }

    #[test]
    fn extends_cycles_and_unknown_parents_are_errors() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let a = dir.path().join("a.toml");
        std::fs::write(&a, "extends = \"./b.toml\"\n")?;
        std::fs::write(dir.path().join("b.toml"), "extends = \"./a.toml\"\n")?;
        assert!(err_of(&a.display().to_string(), &[]).contains("cycle"));
        let c = dir.path().join("c.toml");
        std::fs::write(&c, "extends = \"ol7-uek\"\n")?;
        assert!(err_of(&c.display().to_string(), &[]).contains("ol7-uek"));
        Ok(())
    }
}
