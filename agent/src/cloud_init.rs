//! `gpuhost cloud-init`: `#cloud-config` user-data that provisions a node unattended —
//! installs gpuhost, fetches and checks the driver package, and runs `gpuhost apply --reboot`
//! in a transient systemd unit whose output goes to the console and the journal.
//!
//! Everything is validated here, before any user-data is printed: the profile and `--set`
//! overrides resolve, the sha256 is 64 hex digits, URLs are http(s), paths are absolute.

use std::fmt::Write as _;

use anyhow::Result;

use gpuhost_steps::invalid;
use gpuhost_steps::profile::Profile;

/// Where the node keeps what the user-data brings.
const DRIVER_DIR: &str = "/var/lib/gpuhost/driver";
const SCRIPT: &str = "/var/lib/gpuhost/provision.sh";
const PROFILE_FILE: &str = "/etc/gpuhost/profile.toml";
const UNIT: &str = "gpuhost-provision";

#[derive(clap::Args, Debug, Clone)]
pub struct CloudInitArgs {
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
    #[arg(long, default_value_t = gpuhost_steps::reboot::DEFAULT_MAX_REBOOTS, value_name = "N")]
    pub max_reboots: u32,
    /// Gate: as the final step, wait up to this many seconds until `gpuhost status` says the
    /// node is healthy (OK or WARNING); cloud-init's result then says whether the node is fit.
    /// Runs from a unit (gpuhost-gate.service) so that it also runs after apply's reboots.
    #[arg(long, value_name = "SECONDS")]
    pub wait_healthy: Option<u32>,
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

/// Quote for a POSIX shell: always single quotes.
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn yq(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Build the user-data.
pub fn render(a: &CloudInitArgs) -> Result<String> {
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
    // The profile must resolve here, with the overrides, exactly as the node will see it.
    let profile = Profile::resolve(&a.profile, &a.sets)?;
    let embedded = a.profile.contains('/') || a.profile.ends_with(".toml");

    let mut script = String::new();
    let w = &mut script;
    writeln!(w, "#!/bin/bash")?;
    writeln!(
        w,
        "# Written by `gpuhost cloud-init`; run once by cloud-init (runcmd)."
    )?;
    writeln!(w, "set -euo pipefail")?;
    writeln!(w, "log() {{ echo \"gpuhost-provision: $*\"; }}")?;
    match a
        .gpuhost_rpm
        .as_deref()
        .map(|v| source("gpuhost-rpm", v))
        .transpose()?
    {
        Some(Source::Url(u)) | Some(Source::Path(u)) => {
            rpm_file_name("gpuhost-rpm", &u)?;
            writeln!(w, "log \"installing gpuhost from {}\"", u.replace('"', ""))?;
            writeln!(w, "dnf install -y {}", sh(&u))?;
        }
        None => {
            writeln!(
                w,
                "command -v gpuhost >/dev/null || {{ log \"gpuhost is not installed: bake it into the image or generate the user-data with --gpuhost-rpm\"; exit 1; }}"
            )?;
        }
    }
    let mut apply: Vec<String> = vec!["gpuhost".into(), "apply".into()];
    if embedded {
        apply.extend(["--profile".into(), PROFILE_FILE.into()]);
    } else {
        apply.extend(["--profile".into(), a.profile.clone()]);
        for s in &a.sets {
            apply.extend(["--set".into(), s.clone()]);
        }
    }
    if let Some(v) = &a.driver_rpm {
        let src = source("driver-rpm", v)?;
        let name = rpm_file_name("driver-rpm", v)?;
        let local = match &src {
            Source::Url(u) => {
                if a.sha256.is_none() {
                    return Err(invalid!(
                        "--driver-rpm {u}: a driver package fetched over the network needs --sha256"
                    ));
                }
                let local = format!("{DRIVER_DIR}/{name}");
                writeln!(w, "mkdir -p {DRIVER_DIR}")?;
                writeln!(w, "log \"fetching {name}\"")?;
                writeln!(
                    w,
                    "curl -fsSL --retry 5 --retry-delay 5 -o {} {}",
                    sh(&local),
                    sh(u)
                )?;
                local
            }
            Source::Path(p) => p.clone(),
        };
        if let Some(sum) = &a.sha256 {
            writeln!(w, "log \"checking {name}\"")?;
            writeln!(
                w,
                "echo {} | sha256sum -c -",
                sh(&format!("{sum}  {local}"))
            )?;
            apply.extend(["--set".into(), format!("driver.sha256={sum}")]);
        }
        apply.extend(["--set".into(), format!("driver.local_repo_rpm={local}")]);
    }
    apply.extend([
        "--reboot".into(),
        "--max-reboots".into(),
        a.max_reboots.to_string(),
    ]);
    writeln!(
        w,
        "log \"running gpuhost apply (it reboots and resumes as needed)\""
    )?;
    let argv: Vec<String> = apply.iter().map(|x| sh(x)).collect();
    writeln!(w, "exec {}", argv.join(" "))?;

    let mut out = String::new();
    let o = &mut out;
    writeln!(o, "#cloud-config")?;
    writeln!(
        o,
        "# gpuhost {}: provision this node as a GPU container host (profile {}).",
        env!("CARGO_PKG_VERSION"),
        profile.name
    )?;
    writeln!(
        o,
        "# Progress: the console, and journalctl -u {UNIT} -u gpuhost-resume; afterwards: gpuhost status"
    )?;
    writeln!(o, "write_files:")?;
    if embedded {
        writeln!(o, "  - path: {PROFILE_FILE}")?;
        writeln!(o, "    owner: root:root")?;
        writeln!(o, "    permissions: \"0644\"")?;
        writeln!(o, "    content: |")?;
        writeln!(o, "      # {} resolved by gpuhost cloud-init", profile.name)?;
        for line in profile.to_toml()?.lines() {
            writeln!(o, "      {line}")?;
        }
    }
    writeln!(o, "  - path: {SCRIPT}")?;
    writeln!(o, "    owner: root:root")?;
    writeln!(o, "    permissions: \"0700\"")?;
    writeln!(o, "    content: |")?;
    for line in script.lines() {
        writeln!(o, "      {line}")?;
    }
    if let Some(t) = a.wait_healthy {
        let mut gate: Vec<String> = vec![
            "/usr/bin/gpuhost".into(),
            "status".into(),
            "--wait-healthy".into(),
            "--timeout".into(),
            t.to_string(),
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
        writeln!(o, "  - path: /etc/systemd/system/{GATE_UNIT}")?;
        writeln!(o, "    owner: root:root")?;
        writeln!(o, "    permissions: \"0644\"")?;
        writeln!(o, "    content: |")?;
        for line in [
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
            format!("TimeoutStartSec={}", u64::from(t) + 60),
            String::new(),
            "[Install]".into(),
            "WantedBy=multi-user.target".into(),
        ] {
            if line.is_empty() {
                writeln!(o)?;
            } else {
                writeln!(o, "      {line}")?;
            }
        }
    }
    writeln!(o, "runcmd:")?;
    if a.wait_healthy.is_some() {
        // Enabled before apply may reboot: after each boot it runs once gpuhost-resume is done.
        writeln!(o, "  - [\"systemctl\", \"daemon-reload\"]")?;
        writeln!(o, "  - [\"systemctl\", \"enable\", {}]", yq(GATE_UNIT))?;
    }
    let runcmd = [
        "systemd-run",
        &format!("--unit={UNIT}"),
        "--wait",
        "--collect",
        "--property=StandardOutput=journal+console",
        "--property=StandardError=journal+console",
        "/bin/bash",
        SCRIPT,
    ];
    let items: Vec<String> = runcmd.iter().map(|x| yq(x)).collect();
    writeln!(o, "  - [{}]", items.join(", "))?;
    if a.wait_healthy.is_some() {
        // The final step: without a reboot, the gate runs here and its exit status is
        // cloud-init's result (`cloud-init status` reports an error when the node is unfit).
        writeln!(o, "  - [\"systemctl\", \"start\", {}]", yq(GATE_UNIT))?;
    }
    Ok(out)
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
        }
    }

    #[test]
    fn quotes_for_the_shell() {
        assert_eq!(sh("a b"), "'a b'");
        assert_eq!(sh("it's"), r"'it'\''s'");
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

    #[test]
    fn a_fetched_driver_is_checked_and_passed_to_apply() -> Result<()> {
        let mut a = args("ol8-uek");
        a.driver_rpm = Some(
            "https://repo.example/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm".into(),
        );
        a.sha256 = Some("a".repeat(64));
        let out = render(&a)?;
        assert!(out.starts_with("#cloud-config\n"));
        assert!(out.contains("sha256sum -c -"));
        assert!(out.contains("'driver.local_repo_rpm=/var/lib/gpuhost/driver/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm'"));
        assert!(out.contains("'--reboot'"));
        Ok(())
    }
}
