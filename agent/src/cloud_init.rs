//! `gpuhost cloud-init`: `#cloud-config` user-data that provisions a node unattended —
//! installs gpuhost, fetches and checks the driver package, and runs `gpuhost apply --reboot`
//! in a transient systemd unit whose output goes to the console and the journal.
//!
//! Everything is validated here, before any user-data is printed: the profile and `--set`
//! overrides resolve, the sha256 is 64 hex digits, URLs are http(s), paths are absolute.
//! The user-data is emitted by a YAML serializer (`serde-saphyr`) from typed values, and the
//! provisioning script's shell words are quoted by `shlex`: neither is put together by hand.

use anyhow::Result;
use serde::Serialize;
use serde_saphyr::{FlowSeq, LitString};

use gpuhost_host::invalid;
use gpuhost_profile::Profile;

/// Where the node keeps what the user-data brings.
const DRIVER_DIR: &str = "/var/lib/gpuhost/driver";
const SCRIPT: &str = "/var/lib/gpuhost/provision.sh";
const PROFILE_FILE: &str = "/etc/gpuhost/profile.toml";
const UNIT: &str = "gpuhost-provision";

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CloudInitArgs {
    /// A built-in profile, or a profile file here (embedded, fully resolved, in the user-data).
    #[arg(long)]
    pub profile: String,
    /// Override one profile key (repeatable), e.g. --set driver.stream=535-dkms
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// NVIDIA's local full RPM repo package: an http(s) URL to fetch, or a path on the node.
    #[arg(long, value_name = "URL|PATH")]
    pub driver_rpm: Option<String>,
    /// SHA-256 of the driver package (64 hex digits); required with a URL.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// The gpuhost RPM to install: an http(s) URL or a path on the node (default: gpuhost must
    /// already be installed, e.g. baked into the image).
    #[arg(long, value_name = "URL|PATH")]
    pub gpuhost_rpm: Option<String>,
    /// Loop guard for the unattended reboots.
    #[arg(long, default_value_t = gpuhost_engine::reboot::DEFAULT_MAX_REBOOTS, value_name = "N")]
    pub max_reboots: u32,
    /// Gate: as the final step, wait up to this many seconds until `gpuhost status` says the
    /// node is healthy (OK or WARNING); cloud-init's result then says whether the node is fit.
    /// Runs from a unit (gpuhost-gate.service) so that it also runs after apply's reboots.
    #[arg(long, value_name = "SECONDS")]
    pub wait_healthy: Option<u32>,
    /// With --wait-healthy: once the node is healthy by its counters, the gate also runs work
    /// on every GPU (`gpuhost status --active`: HBM, PCIe, known-answer compute) and passes only
    /// if that is healthy too.
    #[arg(long, requires = "wait_healthy")]
    pub active: bool,
}

/// The gate's unit and the file that marks it passed.
const GATE_UNIT: &str = "gpuhost-gate.service";
const GATE_DONE: &str = "/var/lib/gpuhost/gate.passed";

/// Where a file comes from.
#[derive(Debug, PartialEq, Eq)]
enum Source {
    Url(String),
    Path(String),
}

fn source(flag: &str, v: &str) -> Result<Source> {
    if v.starts_with("https://") || v.starts_with("http://") {
        if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid!("--{flag} {v}: a URL cannot contain spaces"));
        }
        Ok(Source::Url(v.to_string()))
    } else if v.starts_with('/') {
        if v.chars().any(char::is_control) {
            return Err(invalid!("--{flag} {v}: not a usable path"));
        }
        Ok(Source::Path(v.to_string()))
    } else {
        Err(invalid!(
            "--{flag} {v}: give an http(s):// URL or an absolute path on the node"
        ))
    }
}

/// The file name at the end of a URL or path; must be a plain `*.rpm` name.
fn rpm_file_name(flag: &str, v: &str) -> Result<String> {
    let name = v
        .split(['?', '#'])
        .next()
        .unwrap_or(v)
        .rsplit('/')
        .next()
        .unwrap_or(v);
    let ok = name.ends_with(".rpm")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._+-~".contains(c));
    if ok {
        Ok(name.to_string())
    } else {
        Err(invalid!(
            "--{flag} {v}: expected a URL or path ending in a plain *.rpm file name"
        ))
    }
}

/// One shell command line from its words, each quoted as the shell needs.
fn sh(words: &[&str]) -> Result<String> {
    shlex::try_join(words.iter().copied())
        .map_err(|e| invalid!("cannot quote {words:?} for the shell: {e}"))
}

/// The driver package: where the node gets it and where it ends up.
struct DriverPackage {
    name: String,
    /// Fetched from this URL, else already on the node at `local`.
    url: Option<String>,
    local: String,
}

impl DriverPackage {
    fn from_args(a: &CloudInitArgs) -> Result<Option<DriverPackage>> {
        let Some(v) = &a.driver_rpm else {
            return Ok(None);
        };
        let name = rpm_file_name("driver-rpm", v)?;
        Ok(Some(match source("driver-rpm", v)? {
            Source::Url(u) => {
                if a.sha256.is_none() {
                    return Err(invalid!(
                        "--driver-rpm {u}: a driver package fetched over the network needs --sha256"
                    ));
                }
                DriverPackage {
                    local: format!("{DRIVER_DIR}/{name}"),
                    name,
                    url: Some(u),
                }
            }
            Source::Path(p) => DriverPackage {
                name,
                url: None,
                local: p,
            },
        }))
    }
}

/// The node's `apply` reads the driver version from the file name NVIDIA gave its local repo
/// package and refuses any other name, or one for the other RHEL release (exit 2): refused
/// here, before it is written into user-data that would fail at boot.
fn check_driver_name(name: &str, given: &str, profile: &Profile) -> Result<()> {
    use gpuhost_nvidia::localrepo::{LocalRepoFile, EXPECTED_NAMES};
    let Some(file) = LocalRepoFile::parse(name) else {
        return Err(invalid!(
            "--driver-rpm {given}: `{name}` is not a name NVIDIA gives its local repo packages ({EXPECTED_NAMES}); the node's apply would refuse it: give the file under the name NVIDIA gave it"
        ));
    };
    let major = profile.os.major;
    if file.os_major != major {
        return Err(invalid!(
            "--driver-rpm {given}: `{name}` is for RHEL {}, but profile {} is for Oracle Linux {major}; give NVIDIA's rhel{major} package",
            file.os_major,
            profile.name
        ));
    }
    Ok(())
}

/// The flags on their own, before anything is resolved.
fn check_args(a: &CloudInitArgs) -> Result<()> {
    if let Some(sum) = &a.sha256 {
        if sum.len() != 64 || !sum.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(invalid!("--sha256 {sum}: expected 64 hex digits"));
        }
    }
    if a.sha256.is_some() && a.driver_rpm.is_none() {
        return Err(invalid!(
            "--sha256 needs --driver-rpm: it is the driver package's checksum"
        ));
    }
    if a.max_reboots == 0 {
        return Err(invalid!("--max-reboots 0: allow at least one reboot"));
    }
    if let Some(t) = a.wait_healthy {
        if t == 0 || t > 3600 {
            return Err(invalid!(
                "--wait-healthy {t}: give seconds between 1 and 3600"
            ));
        }
    }
    Ok(())
}

/// The `gpuhost apply` the node runs.
fn apply_argv(a: &CloudInitArgs, embedded: bool, driver: Option<&DriverPackage>) -> Vec<String> {
    let mut argv: Vec<String> = vec!["gpuhost".into(), "apply".into(), "--profile".into()];
    if embedded {
        argv.push(PROFILE_FILE.into());
    } else {
        argv.push(a.profile.clone());
        for s in &a.sets {
            argv.extend(["--set".into(), s.clone()]);
        }
    }
    if let Some(d) = driver {
        if let Some(sum) = &a.sha256 {
            argv.extend(["--set".into(), format!("driver.sha256={sum}")]);
        }
        argv.extend(["--set".into(), format!("driver.local_repo_rpm={}", d.local)]);
    }
    argv.extend([
        "--reboot".into(),
        "--max-reboots".into(),
        a.max_reboots.to_string(),
    ]);
    argv
}

/// The script the node runs once: install gpuhost, fetch and check the driver, exec apply.
fn provision_script(
    a: &CloudInitArgs,
    embedded: bool,
    driver: Option<&DriverPackage>,
) -> Result<String> {
    let log = |msg: &str| sh(&["log", msg]);
    let mut lines = vec![
        "#!/bin/bash".to_string(),
        "# Written by `gpuhost cloud-init`; run once by cloud-init (runcmd).".to_string(),
        "set -euo pipefail".to_string(),
        "log() { echo \"gpuhost-provision: $*\"; }".to_string(),
    ];
    match a.gpuhost_rpm.as_deref() {
        Some(v) => {
            let (Source::Url(u) | Source::Path(u)) = source("gpuhost-rpm", v)?;
            rpm_file_name("gpuhost-rpm", &u)?;
            lines.push(log(&format!("installing gpuhost from {u}"))?);
            lines.push(sh(&["dnf", "install", "-y", &u])?);
        }
        None => lines.push(format!(
            "command -v gpuhost >/dev/null || {{ {}; exit 1; }}",
            log("gpuhost is not installed: bake it into the image or generate the user-data with --gpuhost-rpm")?
        )),
    }
    if let Some(d) = driver {
        if let Some(u) = &d.url {
            lines.push(sh(&["mkdir", "-p", DRIVER_DIR])?);
            lines.push(log(&format!("fetching {}", d.name))?);
            lines.push(sh(&[
                "curl",
                "-fsSL",
                "--retry",
                "5",
                "--retry-delay",
                "5",
                "-o",
                &d.local,
                u,
            ])?);
        }
        if let Some(sum) = &a.sha256 {
            lines.push(log(&format!("checking {}", d.name))?);
            lines.push(format!(
                "{} | {}",
                sh(&["echo", &format!("{sum}  {}", d.local)])?,
                sh(&["sha256sum", "-c", "-"])?
            ));
        }
    }
    lines.push(log(
        "running gpuhost apply (it reboots and resumes as needed)",
    )?);
    let argv = apply_argv(a, embedded, driver);
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    lines.push(format!("exec {}", sh(&words)?));
    Ok(lines.join("\n") + "\n")
}

/// The gate unit: `gpuhost status --wait-healthy` once the apply chain is done.
fn gate_unit(a: &CloudInitArgs, profile: &Profile, embedded: bool, timeout: u32) -> String {
    let mut gate: Vec<String> = vec![
        "/usr/bin/gpuhost".into(),
        "status".into(),
        "--wait-healthy".into(),
        "--timeout".into(),
        timeout.to_string(),
        "--profile".into(),
        if embedded {
            PROFILE_FILE.into()
        } else {
            a.profile.clone()
        },
    ];
    // --set overrides do not reach `status`; the GPU count they may set does.
    if let (false, Some(n)) = (embedded, profile.status.expect_gpus) {
        gate.extend(["--expect-gpus".into(), n.to_string()]);
    }
    if a.active {
        gate.push("--active".into());
    }
    [
        "[Unit]".to_string(),
        "Description=gpuhost: wait until this GPU node is healthy (provisioning gate)".into(),
        "After=gpuhost-resume.service network-online.target".into(),
        format!("ConditionPathExists=!{GATE_DONE}"),
        String::new(),
        "[Service]".into(),
        "Type=oneshot".into(),
        // Runs until healthy or the timeout (exit 2); passed once, never again.
        format!("ExecStart={}", gate.join(" ")),
        format!("ExecStartPost=/bin/touch {GATE_DONE}"),
        "StandardOutput=journal+console".into(),
        "StandardError=journal+console".into(),
        format!("TimeoutStartSec={}", u64::from(timeout) + 60),
        String::new(),
        "[Install]".into(),
        "WantedBy=multi-user.target".into(),
    ]
    .join("\n")
        + "\n"
}

/// A file cloud-init writes.
#[derive(Serialize)]
struct WriteFile {
    path: &'static str,
    owner: &'static str,
    permissions: &'static str,
    content: LitString,
}

/// The cloud-config keys gpuhost uses.
#[derive(Serialize)]
struct CloudConfig {
    write_files: Vec<WriteFile>,
    runcmd: Vec<FlowSeq<Vec<String>>>,
}

/// The user-data: the `#cloud-config` header, then the serialized document.
fn user_data(
    a: &CloudInitArgs,
    profile: &Profile,
    embedded: bool,
    script: String,
) -> Result<String> {
    let mut files = Vec::new();
    if embedded {
        files.push(WriteFile {
            path: PROFILE_FILE,
            owner: "root:root",
            permissions: "0644",
            content: LitString(format!(
                "# {} resolved by gpuhost cloud-init\n{}",
                profile.name,
                profile.to_toml()?
            )),
        });
    }
    files.push(WriteFile {
        path: SCRIPT,
        owner: "root:root",
        permissions: "0700",
        content: LitString(script),
    });
    let mut runcmd: Vec<FlowSeq<Vec<String>>> = Vec::new();
    let cmd = |words: &[&str]| FlowSeq(words.iter().map(|w| w.to_string()).collect());
    if let Some(t) = a.wait_healthy {
        files.push(WriteFile {
            path: "/etc/systemd/system/gpuhost-gate.service",
            owner: "root:root",
            permissions: "0644",
            content: LitString(gate_unit(a, profile, embedded, t)),
        });
        // Enabled before apply may reboot: after each boot it runs once gpuhost-resume is done.
        runcmd.push(cmd(&["systemctl", "daemon-reload"]));
        runcmd.push(cmd(&["systemctl", "enable", GATE_UNIT]));
    }
    let provision = [
        "systemd-run",
        &format!("--unit={UNIT}"),
        "--wait",
        "--collect",
        "--property=StandardOutput=journal+console",
        "--property=StandardError=journal+console",
        // A stop sends SIGTERM to gpuhost alone (the script execs it): it lets a running
        // package transaction finish, then stops at a step boundary.
        "--property=KillMode=mixed",
        "--property=TimeoutStopSec=30min",
        "/bin/bash",
        SCRIPT,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    runcmd.push(FlowSeq(provision));
    if a.wait_healthy.is_some() {
        // The final step: without a reboot, the gate runs here and its exit status is
        // cloud-init's result (`cloud-init status` reports an error when the node is unfit).
        runcmd.push(cmd(&["systemctl", "start", GATE_UNIT]));
    }
    let doc = CloudConfig {
        write_files: files,
        runcmd,
    };
    let header = format!(
        "#cloud-config\n# gpuhost {}: provision this node as a GPU container host (profile {}).\n# Progress: the console, and journalctl -u {UNIT} -u gpuhost-resume; afterwards: gpuhost status\n",
        env!("CARGO_PKG_VERSION"),
        profile.name
    );
    Ok(header + &serde_saphyr::to_string(&doc)?)
}

/// Build the user-data.
pub(crate) fn render(a: &CloudInitArgs) -> Result<String> {
    check_args(a)?;
    // The profile must resolve here, with the overrides, exactly as the node will see it.
    let profile = Profile::resolve(&a.profile, &a.sets)?;
    // The node's apply would stop (exit 2) on a profile that manages the driver but names no
    // package: say so now.
    if a.driver_rpm.is_none() {
        let driver_steps =
            gpuhost_steps::steps_needing_package(&gpuhost_steps::step::Selection::default());
        gpuhost_steps::driver::require_package(&profile, &driver_steps)
            .map_err(|e| invalid!("{e:#}; here: --driver-rpm URL|PATH"))?;
    }
    let embedded = a.profile.contains('/') || a.profile.ends_with(".toml");
    let driver = DriverPackage::from_args(a)?;
    if let Some(d) = &driver {
        check_driver_name(
            &d.name,
            a.driver_rpm.as_deref().unwrap_or_default(),
            &profile,
        )?;
    }
    let script = provision_script(a, embedded, driver.as_ref())?;
    user_data(a, &profile, embedded, script)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn args(profile: &str) -> CloudInitArgs {
        CloudInitArgs {
            profile: profile.into(),
            sets: vec![],
            driver_rpm: None,
            sha256: None,
            gpuhost_rpm: None,
            max_reboots: 3,
            wait_healthy: None,
            active: false,
        }
    }

    /// The words of the script line that starts with `first`, as the shell splits them.
    fn words_of(script: &str, first: &str) -> Vec<String> {
        script
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(first))
            .and_then(shlex::split)
            .unwrap_or_default()
    }

    #[test]
    fn words_reach_the_shell_as_they_were() {
        for w in ["a b", "it's", "$(reboot)", "x;y", "plain", "--set", "k=v w"] {
            let line = sh(&["echo", w]).unwrap_or_default();
            assert_eq!(
                shlex::split(&line),
                Some(vec!["echo".into(), w.into()]),
                "{line}"
            );
        }
    }

    #[rstest]
    #[case(
        "https://x/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm",
        true
    )]
    #[case("/srv/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm", true)]
    #[case("https://x/download?id=1", false)]
    #[case("/srv/evil name.rpm", false)]
    #[case("/srv/$(reboot).rpm", false)]
    fn rpm_names(#[case] v: &str, #[case] ok: bool) {
        assert_eq!(rpm_file_name("driver-rpm", v).is_ok(), ok, "{v}");
    }

    /// `--active` puts the active checks into the gate's `gpuhost status --wait-healthy`.
    #[test]
    fn the_gate_runs_the_active_checks_when_asked() -> Result<()> {
        let mut a = args("ol8-uek");
        a.driver_rpm =
            Some("/srv/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm".into());
        a.wait_healthy = Some(900);
        let plain = render(&a)?;
        let exec = |doc: &str| {
            doc.lines()
                .find(|l| {
                    l.trim_start()
                        .starts_with("ExecStart=/usr/bin/gpuhost status")
                })
                .map(str::to_string)
                .unwrap_or_default()
        };
        assert!(
            exec(&plain).contains("--wait-healthy --timeout 900"),
            "{plain}"
        );
        assert!(!exec(&plain).contains("--active"), "{plain}");
        a.active = true;
        let active = render(&a)?;
        assert!(exec(&active).ends_with(" --active"), "{}", exec(&active));
        Ok(())
    }

    #[test]
    fn a_fetched_driver_is_checked_and_passed_to_apply() -> Result<()> {
        let mut a = args("ol8-uek");
        a.driver_rpm = Some(
            "https://repo.example/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm".into(),
        );
        a.sha256 = Some("a".repeat(64));
        a.sets = vec!["status.expect_gpus=8".into()];
        let out = render(&a)?;
        assert!(out.starts_with("#cloud-config\n"));
        let local =
            "/var/lib/gpuhost/driver/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm";
        let check = words_of(&out, "echo ");
        assert_eq!(
            check,
            vec![
                "echo".to_string(),
                format!("{}  {local}", "a".repeat(64)),
                "|".into(),
                "sha256sum".into(),
                "-c".into(),
                "-".into()
            ]
        );
        let exec = words_of(&out, "exec ");
        let want: Vec<String> = [
            "exec",
            "gpuhost",
            "apply",
            "--profile",
            "ol8-uek",
            "--set",
            "status.expect_gpus=8",
            "--set",
            &format!("driver.sha256={}", "a".repeat(64)),
            "--set",
            &format!("driver.local_repo_rpm={local}"),
            "--reboot",
            "--max-reboots",
            "3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(exec, want);
        Ok(())
    }
}
