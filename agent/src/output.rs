//! Output: reports and facts for people (text) and programs (JSON) on stdout; logs and errors
//! on stderr.

use std::io::IsTerminal;

use anyhow::Result;
use serde::Serialize;

use gpuhost_engine::apply::{exit, Report};
use gpuhost_engine::bootguard::Decision;
use gpuhost_engine::bundle::BuildReport;
use gpuhost_host::error::{hint_of, is_invalid};
use gpuhost_host::facts::Facts;

/// A report's format on stdout (`--format`): text for people, JSON for programs.
#[derive(Clone, Copy, Debug, clap::ValueEnum, PartialEq, Eq)]
pub(crate) enum Format {
    Text,
    Json,
}

/// Logs go to stderr. Under systemd (journald adds timestamps) they carry none of their own.
pub(crate) fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let under_systemd = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal());
    if under_systemd {
        builder.without_time().init();
    } else {
        builder.init();
    }
}

/// Progress lines on stderr while steps change the host: a live line on a terminal, plain
/// lines otherwise (cloud-init output, pipes) and under systemd.
pub(crate) fn init_progress() {
    use gpuhost_host::progress::{set_mode, Mode};
    let under_systemd = std::env::var_os("JOURNAL_STREAM").is_some();
    set_mode(if std::io::stderr().is_terminal() && !under_systemd {
        Mode::Terminal
    } else {
        Mode::Plain
    });
    // The terminal line's refresh interval (ms); the tests shorten it to see a refresh.
    if let Some(ms) = std::env::var("GPUHOST_PROGRESS_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        gpuhost_host::progress::set_terminal_every(std::time::Duration::from_millis(ms));
    }
}

pub(crate) fn json<T: Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Print an error that stopped a command before any step ran, and return its exit code.
pub(crate) fn error(as_json: bool, e: &anyhow::Error) -> i32 {
    let code = if is_invalid(e) {
        exit::INVALID
    } else {
        exit::FAILED
    };
    let hint = hint_of(e);
    eprintln!("gpuhost: error: {e:#}");
    if as_json {
        let v = serde_json::json!({ "error": format!("{e:#}"), "hint": hint, "exit_code": code });
        println!("{v:#}");
    }
    code
}

/// Bytes for people: `1.2 GiB`, `340.5 MiB`, `12.0 KiB`.
pub(crate) fn human_bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    // Precision loss is irrelevant for a size shown with one decimal.
    #[allow(clippy::cast_precision_loss)]
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

pub(crate) fn print_bundle(r: &BuildReport) {
    println!(
        "gpuhost bundle: profile {} for Oracle Linux {}, kernel(s) {}{}",
        r.profile,
        r.os_major,
        r.kernels.join(", "),
        if r.fabric_manager {
            ", NVSwitch systems"
        } else {
            ""
        }
    );
    // One line per change, as the apply report gives them (a long one's reason under it).
    for (step, changes) in &r.plan {
        for (i, change) in changes.iter().enumerate() {
            let id = if i == 0 { step.as_str() } else { "" };
            match split_reason(change) {
                (work, Some(why)) if 22 + change.chars().count() > LINE => {
                    println!("  {id:<18}  {work}");
                    println!("  {:<18}    why: {why}", "");
                }
                _ => println!("  {id:<18}  {change}"),
            }
        }
    }
    println!(
        "{} packages, {} in {}",
        r.packages,
        human_bytes(r.bytes),
        r.out
    );
    if let (Some(t), Some(b)) = (&r.tarball, r.tar_bytes) {
        println!("tarball {t} ({})", human_bytes(b));
    }
    if let Some(d) = &r.driver_set {
        println!(
            "driver set: NVIDIA {} from {}: {} packages, {} in repo/, NVIDIA's metadata in {}/; the package itself ({}, the CUDA toolkit with it) is not carried",
            d.driver,
            d.file,
            d.packages.len(),
            human_bytes(d.bytes),
            d.path,
            human_bytes(d.package_bytes)
        );
    }
    if !r.modules.is_empty() {
        println!("module streams: {}", r.modules.join(", "));
    }
    if let Some(k) = &r.kmod_repo {
        let c = &k.carried;
        println!(
            "prebuilt kmods: NVIDIA {} {} for kernel(s) {}, {} in {}/ (from {}; modules signed for the fleet certificate sha256 {}): nodes compile nothing",
            c.driver,
            c.flavour,
            c.kernels.join(", "),
            human_bytes(c.bytes),
            c.path,
            k.source,
            c.cert_sha256
        );
    }
    println!(
        "signatures: {}",
        if r.gpgcheck {
            format!("checked offline with {}", r.gpgkeys.join(", "))
        } else {
            "not checked (a repo the packages came from has gpgcheck off); the manifest's SHA-256s still are".to_string()
        }
    );
    println!("manifest sha256 {}", r.manifest_sha256);
    println!("made in {} ms", r.duration_ms);
}

/// The width past which a change's reason goes on a line of its own (a wide terminal's).
const LINE: usize = 200;

/// A change as a report gives it, `work (reason)`: the work and the reason (the last group in
/// parentheses, which the work may hold groups of its own before).
fn split_reason(change: &str) -> (&str, Option<&str>) {
    let Some(body) = change.strip_suffix(')') else {
        return (change, None);
    };
    let mut depth = 0usize;
    for (i, c) in body.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' if depth == 0 => return (change[..i].trim_end(), Some(&body[i + 1..])),
            '(' => depth -= 1,
            _ => {}
        }
    }
    (change, None)
}

/// `text` (words separated by `, `) in lines of at most `width` characters: the first after
/// `first`, the others after `rest`.
fn wrapped(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_inclusive(", ") {
        if !line.is_empty() && line.chars().count() + word.chars().count() > width {
            out.push(line.trim_end().to_string());
            line.clear();
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push(line.trim_end().to_string());
    }
    out.into_iter()
        .enumerate()
        .map(|(i, l)| format!("{}{l}", if i == 0 { first } else { rest }))
        .collect()
}

pub(crate) fn print_report(r: &Report) {
    let what = if r.dry_run { "plan" } else { "apply" };
    println!(
        "gpuhost {what}: profile {} on {}{}",
        r.profile,
        r.root,
        r.target_kernel
            .as_deref()
            .map(|k| format!(", kernel {k}"))
            .unwrap_or_default()
    );
    if let Some(b) = &r.bundle {
        println!(
            "bundle {} (verified: {} packages, {}, made {}; manifest sha256 {}); no other repo is used",
            b.source,
            b.packages,
            human_bytes(b.bytes),
            b.created_at,
            b.manifest_sha256
        );
    }
    let width = r.steps.iter().map(|s| s.id.len()).max().unwrap_or(8);
    let indent = format!("  {:<width$}  {:<12}  ", "", "");
    for s in &r.steps {
        // One line per change: the first beside the step, the others under it; a change too
        // long for one line has its reason on the next.
        let mut lines: Vec<String> = Vec::new();
        for l in &s.lines {
            let whole = l.text();
            if indent.len() + whole.chars().count() <= LINE || l.why.is_empty() {
                lines.push(whole);
            } else {
                lines.push(l.short.clone());
                lines.push(format!("  why: {}", l.why));
            }
            for d in &l.details {
                lines.extend(wrapped(
                    d,
                    LINE.saturating_sub(indent.len() + 2),
                    "  ",
                    "         ",
                ));
            }
        }
        if lines.is_empty() {
            lines.push(s.reason.clone());
        }
        let (first, more) = lines
            .split_first()
            .map_or(("", &[][..]), |(f, m)| (f.as_str(), m));
        println!(
            "  {:<width$}  {:<12}  {first}  ({} ms)",
            s.id,
            s.outcome.to_string(),
            s.duration_ms
        );
        for line in more {
            println!("{indent}{line}");
        }
        if let Some(h) = &s.hint {
            println!("  {:<width$}  {:<12}  what to do: {h}", "", "");
        }
    }
    println!(
        "{} in {} ms (exit {})",
        r.summary, r.duration_ms, r.exit_code
    );
    for d in &r.deferred {
        println!("  deferred  {d}");
    }
    for w in &r.warnings {
        println!("  warning   {w}");
    }
    if let Some(g) = &r.kernel_guard {
        print_kernel_guard(g);
    }
    match &r.reboot {
        Some(rb) => println!("reboot: {}", rb.message),
        None if r.exit_code == exit::REBOOT => println!(
            "what to do: reboot, then run the same command again (or add --reboot to let gpuhost reboot and resume until converged)"
        ),
        None => {}
    }
}

/// What the kernel guard did, as the JSON report's `kernel_guard` says it; nothing when the
/// default boot kernel has its module.
fn print_kernel_guard(g: &Decision) {
    match g {
        Decision::Fine => {}
        Decision::Kept {
            kernel,
            kept,
            reason,
            fix,
        } => {
            println!("kernel guard: kept {kept} as the default boot kernel instead of {kernel}: {reason}");
            println!("  fix: {fix}");
        }
        Decision::Restored { kernel } => println!(
            "kernel guard: {kernel} has its NVIDIA module again and is the default boot kernel again"
        ),
        Decision::NoFallback { kernel } => println!(
            "kernel guard: the default boot kernel {kernel} has no NVIDIA module and no installed kernel of its flavour has one: nothing to fall back to"
        ),
        Decision::Failed { error } => println!("kernel guard: failed: {error}"),
    }
}

pub(crate) fn print_facts(f: &Facts) {
    let none = || "none".to_string();
    let os =
        f.os.as_ref()
            .map(|o| format!("{} (id {}, version {})", o.pretty_name, o.id, o.version_id))
            .unwrap_or_else(|| "unknown (no /etc/os-release)".to_string());
    println!(
        "root                 {}{}",
        f.root,
        if f.live { " (live)" } else { " (install root)" }
    );
    println!("os                   {os}");
    if let Some(why) = &f.unsupported {
        println!("supported            no: {why}");
    }
    println!(
        "running kernel       {}",
        f.running_kernel
            .clone()
            .unwrap_or_else(|| "n/a (install root)".to_string())
    );
    println!(
        "target kernel        {}{}",
        f.target_kernel.clone().unwrap_or_else(none),
        match (f.target_flavour, &f.target_kernel) {
            (Some(x), _) => format!(" ({x})"),
            (None, Some(_)) => " (not an Oracle Linux kernel)".to_string(),
            (None, None) => String::new(),
        }
    );
    println!(
        "default boot kernel  {}",
        f.default_boot_kernel.clone().unwrap_or_else(none)
    );
    println!(
        "installed kernels    {}",
        if f.installed_kernels.is_empty() {
            none()
        } else {
            f.installed_kernels.join(", ")
        }
    );
    let devs = |d: &[gpuhost_host::facts::PciDevice]| {
        if d.is_empty() {
            "none".to_string()
        } else {
            d.iter()
                .map(|x| match &x.kind {
                    Some(k) => format!("{} [10de:{}] {}", x.address, x.device_id, k.describe()),
                    None => format!("{} [10de:{}]", x.address, x.device_id),
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    println!("nvidia gpus          {} {}", f.gpus.len(), devs(&f.gpus));
    println!(
        "nvswitches           {} {}",
        f.nvswitches.len(),
        devs(&f.nvswitches)
    );
    if !f.nvlink5_switch_ports.is_empty() {
        println!(
            "nvlink-5 switch ports {} {}",
            f.nvlink5_switch_ports.len(),
            f.nvlink5_switch_ports.join(", ")
        );
    }
    println!(
        "secure boot          {}",
        serde_json::to_value(f.secure_boot)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    );
    println!(
        "nouveau loaded       {}",
        if f.nouveau_loaded { "yes" } else { "no" }
    );
}

/// The sysinfo part of `gpuhost facts`: memory, CPUs, uptime, free space.
pub(crate) fn print_host_info(h: &gpuhost_host::hostinfo::HostInfo) {
    use gpuhost_host::hostinfo::human;
    if let Some(e) = &h.error {
        println!("memory, cpus         {e}");
    } else {
        println!(
            "cpus                 {} ({})",
            h.cpus,
            h.cpu_model.as_deref().unwrap_or("model unknown")
        );
        println!(
            "memory               {} ({} available)",
            human(h.memory_total_bytes),
            human(h.memory_available_bytes)
        );
    }
    println!(
        "uptime               {}d {}h {}m",
        h.uptime_s / 86400,
        (h.uptime_s % 86400) / 3600,
        (h.uptime_s % 3600) / 60
    );
    for p in &h.space {
        let free = match (p.available_bytes, &p.mount_point) {
            (Some(a), Some(m)) => format!("{} free on {m}", human(a)),
            _ => "no mounted filesystem found".into(),
        };
        println!("free space           {} ({}): {free}", p.path, p.role);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_change_splits_into_its_work_and_its_last_parenthesised_reason() {
        assert_eq!(
            super::split_reason(
                "dnf module reset m, then enable s (no package changes) (why (it is))"
            ),
            (
                "dnf module reset m, then enable s (no package changes)",
                Some("why (it is)")
            )
        );
        assert_eq!(super::split_reason("write /a"), ("write /a", None));
    }

    #[test]
    fn a_list_wraps_at_its_commas() {
        let lines = super::wrapped("comes: a-1, b-1, c-1, d-1", 12, "  ", "    ");
        assert_eq!(lines, ["  comes: a-1,", "    b-1, c-1,", "    d-1"]);
    }
}
