//! One transaction through `dnf shell`, for work `dnf install` cannot carry in one command:
//! package files together with module profiles or streams (dnf's install command resolves the
//! modules first, and then refuses the files: "Cannot add local packages, because transaction
//! job already exists"), or a first converge that reads a repo from a package file. The script
//! names the files first, on one line (dnf takes local packages only before other jobs), then
//! enables the streams, installs the rest, and runs once. `dnf shell` reports an error in a
//! command and exits 0: its `Error` lines make it a failure.

use anyhow::Result;

use gpuhost_host::cmd::{Cmd, CmdOutput};
use gpuhost_host::host::Host;

/// The script: `files` (paths, quoted: dnf splits lines as a shell does), the module
/// `streams` to enable, the `words` to install (`@module:stream/profile`, package specs), the
/// packages to `remove` in the same transaction.
pub(crate) fn script(
    files: &[String],
    streams: &[String],
    words: &[String],
    remove: &[String],
) -> String {
    let mut out = String::new();
    if !files.is_empty() {
        let quoted: Vec<String> = files
            .iter()
            .map(|f| format!("'{}'", f.replace('\'', r"'\''")))
            .collect();
        out.push_str(&format!("install {}\n", quoted.join(" ")));
    }
    for s in streams {
        out.push_str(&format!("module enable {s}\n"));
    }
    if !words.is_empty() {
        out.push_str(&format!("install {}\n", words.join(" ")));
    }
    if !remove.is_empty() {
        out.push_str(&format!("remove {}\n", remove.join(" ")));
    }
    out.push_str("run\n");
    out
}

/// Run `script`, written to `path` (a file of the root), with dnf's `options` and `flags`.
pub(crate) fn run(
    host: &Host,
    (path, script): (&str, &str),
    options: &[String],
    flags: &[&str],
) -> Result<(Cmd, CmdOutput)> {
    host.write_atomic(path, script.as_bytes(), 0o600)?;
    let cmd = host
        .dnf()?
        .args(options)
        .args(flags)
        .arg("shell")
        .arg(host.real_path(path)?);
    let mut out = cmd.output()?;
    let failed = out
        .stderr
        .lines()
        .chain(out.stdout.lines())
        .any(|l| l.trim_start().starts_with("Error"));
    if failed && out.success() {
        out.code = Some(1);
    }
    Ok((cmd, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_come_first_on_one_line_then_streams_then_the_rest() {
        let s = script(
            &["/r/a.rpm".into(), "/r/it's.rpm".into()],
            &["nvidia-driver:open-dkms".into()],
            &["@nvidia-driver:open-dkms/default".into(), "gcc".into()],
            &["dkms".into()],
        );
        assert_eq!(
            s,
            "install '/r/a.rpm' '/r/it'\\''s.rpm'\nmodule enable nvidia-driver:open-dkms\ninstall @nvidia-driver:open-dkms/default gcc\nremove dkms\nrun\n"
        );
    }
}
