//! Render a report: the text `gpuhost status` prints in each format, and its exit code (the
//! one-shot run and `gpuhost serve`'s socket both render with [`render`]).

use crate::expect::Expect;
use crate::snapshot::Snapshot;
use crate::verdict::{self, Judgement, Severity};
use crate::{output, summary};

/// What `gpuhost status` prints on stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StatusFormat {
    /// One row per check, for people.
    #[default]
    Table,
    /// The whole report, for programs.
    Json,
    /// Prometheus text exposition (node_exporter's textfile collector).
    Prometheus,
    /// Kubernetes node-problem-detector's custom-plugin protocol.
    Npd,
}

/// The report in `format` as `gpuhost status` prints it, and its exit code (before
/// `--textfile` and `--slurm`): the one-shot run and `gpuhost serve`'s socket both render
/// with this, from what the judge found.
pub fn render(
    format: StatusFormat,
    snapshot: &Snapshot,
    expect: &Expect,
    judged: &Judgement,
) -> (i32, String) {
    let checks = &judged.checks;
    let code = verdict::overall(checks).exit_code();
    match format {
        StatusFormat::Json => (
            code,
            format!("{}\n", output::json(snapshot, expect, checks)),
        ),
        StatusFormat::Prometheus => (code, output::prometheus(snapshot, judged)),
        StatusFormat::Npd => {
            let (c, line) = summary::npd(checks);
            (c, format!("{line}\n"))
        }
        StatusFormat::Table => (code, output::table(checks)),
    }
}

/// A run that could not judge the node still answers UNKNOWN on stdout where a monitor reads
/// one line (the table's first line, node-problem-detector's line; a JSON or Prometheus
/// reader gets nothing rather than a broken document); the exit code of UNKNOWN in that format.
pub(crate) fn unknown_line(format: StatusFormat, error: &str) -> i32 {
    match format {
        StatusFormat::Table => {
            println!("gpuhost status UNKNOWN: {error}");
            Severity::Unknown.exit_code()
        }
        StatusFormat::Npd => {
            println!(
                "{}",
                summary::truncate(&format!("UNKNOWN {error}"), summary::NPD_MAX_OUTPUT)
            );
            2
        }
        StatusFormat::Json | StatusFormat::Prometheus => Severity::Unknown.exit_code(),
    }
}
