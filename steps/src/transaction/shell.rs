//! One transaction through `dnf shell`, for work `dnf install` cannot carry in one command:
//! package files together with module profiles or streams (dnf's install command resolves the
//! modules first, and then refuses the files: "Cannot add local packages, because transaction
//! job already exists"), or a first converge that reads a repo from a package file. The script
//! names the files first, on one line (dnf takes local packages only before other jobs), then
//! enables the streams, installs the rest, and runs once.
//!
//! `dnf shell` logs a command that errs and goes on with the next (an `install` of a package no
//! repo has, a `module enable` of a stream that does not exist — the packages then come from the
//! default stream), and exits 0; a request that conflicts prints dnf's `Problem` and runs what is
//! left. So the lines are checked before `run`: dnf resolves the same script first with
//! `--assumeno` (it prints what it would do and does nothing, module state included), and
//! any line of dnf's that says it would do less than asked ([`dnfout::dry_run_problems`]) stops
//! the transaction there, before anything runs, with dnf's words. The real run's `Error` and
//! problem lines make it a failure too.

use anyhow::Result;

use gpuhost_host::cmd::{Cmd, CmdOutput};
use gpuhost_host::dnfout;
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
    let script = injected(script);
    host.write_atomic(path, script.as_bytes(), 0o600)?;
    let file = host.real_path(path)?;
    let base = host.dnf()?.args(options).args(flags);
    // A script that asks for nothing but `run` (a transaction that only reads a driver set
    // into gpuhost's cache) has no line to check.
    let asks = script
        .lines()
        .map(str::trim)
        .any(|l| !l.is_empty() && l != "run");
    if asks {
        if let Some(refused) = check(&base, &file)? {
            return Ok(refused);
        }
    }
    let cmd = base.arg("shell").arg(&file);
    let mut out = cmd.output()?;
    let text = format!("{}\n{}", out.stdout, out.stderr);
    let failed = text.lines().any(|l| l.trim_start().starts_with("Error"))
        || !dnfout::problems(&text).is_empty();
    if failed && out.success() {
        out.code = Some(1);
    }
    Ok((cmd, out))
}

/// Test builds (`failpoints`): the line `GPUHOST_FAILPOINT_DNF_LINE` names, put into the middle
/// of the script (after its first line), as a line that errs would be; a release build never
/// reads the variable.
#[cfg(feature = "failpoints")]
pub(crate) fn injected(script: &str) -> String {
    match std::env::var("GPUHOST_FAILPOINT_DNF_LINE") {
        Ok(line) if !line.trim().is_empty() => {
            let mut lines: Vec<&str> = script.lines().collect();
            lines.insert(1.min(lines.len()), line.trim());
            format!("{}\n", lines.join("\n"))
        }
        _ => script.to_string(),
    }
}

#[cfg(not(feature = "failpoints"))]
pub(crate) fn injected(script: &str) -> String {
    script.to_string()
}

/// The script resolved and not run (`--assumeno`, dnf's whole output): `Some` (the command, and
/// an output holding only dnf's problem lines, exit 1) when dnf would do less than the script
/// asks; `None` when it would do all of it.
pub(crate) fn check(base: &Cmd, file: &std::path::Path) -> Result<Option<(Cmd, CmdOutput)>> {
    let dry = base
        .clone()
        .arg("--assumeno")
        .without_arg("--quiet")
        .arg("shell")
        .arg(file);
    let out = dry.output()?;
    let problems = dnfout::dry_run_problems(&format!("{}\n{}", out.stdout, out.stderr));
    if problems.is_empty() {
        return Ok(None);
    }
    Ok(Some((dry, refused(out, &problems))))
}

/// The output of a dry run that found `problems`: dnf's lines, and exit 1.
pub(crate) fn refused(out: CmdOutput, problems: &[String]) -> CmdOutput {
    CmdOutput {
        code: Some(1),
        stdout: String::new(),
        stderr: format!("{}\n", problems.join("\n")),
        ..out
    }
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
