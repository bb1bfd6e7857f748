//! `gpuhost`: the command line. Parses arguments, sets up logging, calls the library, and turns
//! the result into output and an exit code.

#![warn(unreachable_pub)]

mod args;
mod cloud_init;
mod compat;
mod internal;
mod kmod;
mod matrix;
mod output;
mod serve;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use gpuhost_engine::apply::{self, exit, ApplyOptions};
use gpuhost_engine::reboot::{self, ResumeState};
use gpuhost_host::facts::{Facts, KernelChoice};
use gpuhost_host::host::Host;
use gpuhost_profile::Profile;
use gpuhost_steps::step::Selection;

use output::Format;

// Each command's --help lists its own exit codes; `gpuhost --help` lists them all.
macro_rules! apply_exit_codes {
    () => {
        "\
Exit codes (apply, plan, resume, rollback):
  0  converged
  1  a step failed: the report says which step, why, and what to do
     (also: another apply holds the lock; the kernel guard failed, or kept a new default
     kernel that a --bundle has no headers for from the next boot: see kernel_guard)
  2  invalid input or unsupported host: nothing was changed
     (also: a --bundle with a changed, missing or extra file, or made for another host)
  3  converged except that a reboot is required
  4  --reboot with reboot.via = slurm (or --reboot-via slurm): a reboot is required and Slurm
     was asked for it (scontrol reboot ASAP): it drains the node, waits for its jobs, reboots it
  130, 143  stopped by SIGINT / SIGTERM, sent at any moment of the run (the checks before the
     first step included): a running package transaction is let finish and the remaining
     steps do not run (the report says where it stopped); a second signal stops the waiting
     (the transaction runs on and keeps the apply lock until it ends)"
    };
}
macro_rules! kernel_added_exit_codes {
    () => {
        "\
Exit codes (kernel-added): those of the apply it repeats (--reboot is never repeated: no 4);
  0 also when no apply has converged on this host (nothing to do);
  1 also when the kernel guard kept the old kernel as the default boot because the new one
     cannot have the NVIDIA module (its headers in no repo, not in the bundle, the build
     failed; recorded in /var/lib/gpuhost/kernel-guard.json, fix command in the report),
     found nothing to fall back to, or could not set the default; and when an rpm
     transaction still holds /var/lib/rpm/.rpm.lock after --wait seconds;
  2 also for a corrupt /var/lib/gpuhost/last-apply.json, or a recorded --bundle that no longer
     verifies or has no kernel this host runs: nothing was changed"
    };
}
macro_rules! bundle_exit_codes {
    () => {
        "\
Exit codes (bundle): 0 written, 1 could not resolve or write it, 2 invalid input (also a
  --kmod-repo that does not match its manifest or has no kmod for a served kernel),
  130, 143 stopped by SIGINT / SIGTERM (nothing is left at --out, the scratch root is removed)"
    };
}
macro_rules! status_exit_codes {
    () => {
        "\
Exit codes (status): Nagios: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (also a bad argument,
  a run directory another user owns, a --textfile that is a link, device or FIFO);
  --format npd: 0 OK or WARNING, 1 CRITICAL, 2 UNKNOWN (node-problem-detector);
  --wait-healthy: 0 healthy, 2 not healthy within --timeout"
    };
}

/// Every command's exit codes, for `gpuhost --help`.
const EXIT_CODES: &str = concat!(
    apply_exit_codes!(),
    "\n\n",
    kernel_added_exit_codes!(),
    "\n\n",
    bundle_exit_codes!(),
    "\n\n",
    status_exit_codes!()
);
/// `kernel-added` repeats an apply: apply's codes and its own.
const KERNEL_ADDED_EXIT_CODES: &str =
    concat!(apply_exit_codes!(), "\n\n", kernel_added_exit_codes!());

/// Turns an Oracle Linux 8/9/10 machine with NVIDIA GPUs into a working GPU container host.
#[derive(Parser, Debug)]
#[command(name = "gpuhost", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(flatten)]
    logging: Logging,

    #[command(subcommand)]
    command: Command,
}

/// The option every command takes (the whole parser's and `gpuhost status`'s own).
#[derive(clap::Args, Debug)]
struct Logging {
    /// Log level for messages on stderr (error, warn, info, debug, trace).
    #[arg(long, global = true, default_value = "warn", env = "GPUHOST_LOG")]
    log_level: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Converge the host to a profile: check each step, change only what differs, check again.
    #[command(after_help = apply_exit_codes!())]
    Apply(ApplyArgs),
    /// Show what `apply` would change and why, changing nothing (same as `apply --dry-run`).
    #[command(after_help = apply_exit_codes!())]
    Plan(ApplyArgs),
    /// Repeat the apply that `apply --reboot` recorded before rebooting (run by
    /// gpuhost-resume.service after boot).
    #[command(after_help = apply_exit_codes!())]
    Resume(ResumeCommandArgs),
    /// Go back to the driver of the converged apply before the last one (from the journal):
    /// the last apply again, with that apply's local repo package replacing the installed one,
    /// in one all-or-nothing dnf transaction.
    #[command(after_help = apply_exit_codes!())]
    Rollback(RollbackArgs),
    /// Write every package a profile installs, with all dependencies resolved against a clean
    /// target, as one verified offline repo (for `apply --bundle` on air-gapped hosts).
    #[command(after_help = bundle_exit_codes!())]
    Bundle(BundleArgs),
    /// The build host's commands: NVIDIA's kernel modules built and signed once per kernel,
    /// for nodes that install them without a compiler.
    Kmod {
        #[command(subcommand)]
        action: kmod::KmodCommand,
    },
    /// Give a newly installed kernel headers and the NVIDIA module before its first boot: wait
    /// for the rpm transaction that installed it to end, then repeat the last converged apply
    /// (run by gpuhost-kernel@KVER.service, which the kernel-install plugin starts).
    #[command(after_help = KERNEL_ADDED_EXIT_CODES)]
    KernelAdded(KernelAddedArgs),
    /// Show what gpuhost sees: OS, kernels, NVIDIA devices on PCI, Secure Boot, nouveau,
    /// memory, CPUs, uptime and free space.
    Facts(FactsArgs),
    /// List the steps `apply` runs, in order, with what each makes true.
    Steps,
    /// List the built-in profiles, or show one fully resolved.
    Profiles {
        #[command(subcommand)]
        action: Option<ProfilesAction>,
    },
    /// Print #cloud-config user-data that provisions a node unattended: installs gpuhost,
    /// fetches and checks the driver package, runs `gpuhost apply --reboot`.
    CloudInit(cloud_init::CloudInitArgs),
    /// Generate the man pages or shell completions (packaging/build-rpm.sh ships them).
    Generate {
        #[command(subcommand)]
        what: Generate,
    },
    /// Will this CUDA version, NVIDIA_REQUIRE_* expression or image run on this host (or on the
    /// host a profile builds)? The container runtime's check and CUDA's compatibility rules.
    #[command(after_help = compat::EXIT_CODES)]
    Compat(compat::CompatArgs),
    /// Node health through NVML, sysfs, the kernel log and services (Nagios exit codes).
    #[command(after_help = status_exit_codes!())]
    Status(status::StatusArgs),
    /// Serve node health over HTTP: /metrics (Prometheus), /healthz, /status (JSON); NVML stays
    /// initialised between sweeps. Exit codes: 0 stopped by SIGTERM/SIGINT, 1 could not
    /// listen or failed, 2 bad arguments or a run directory another user owns.
    Serve(serve::ServeArgs),
    #[command(flatten)]
    Internal(internal::Internal),
}

#[derive(Subcommand, Debug)]
enum ProfilesAction {
    /// List the built-in profiles (what `gpuhost profiles` alone prints).
    #[command(visible_alias = "ls")]
    List,
    /// Print a profile with its `extends` chain and `--set` overrides resolved.
    Show {
        /// A built-in profile name or a path to a .toml file.
        name: String,
        /// Override one key (repeatable), e.g. --set driver.stream=535-dkms
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Every key: set ones with their values (and defaults), unset ones commented out,
        /// each after a line saying what it means.
        #[arg(long)]
        all: bool,
    },
    /// List every profile key as `--set` takes it (driver.local_repo_rpm, ...), one per line.
    Keys,
}

#[derive(Subcommand, Debug)]
enum Generate {
    /// The man page of gpuhost (roff) on stdout; with --dir, one page per command (gpuhost.1,
    /// gpuhost-apply.1, gpuhost-profiles-show.1, ...) written into DIR.
    Man {
        /// Write every command's page into this directory (made when missing).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Shell completions on stdout: commands and options; bash and zsh also complete --set
    /// with the profile keys and --profile with the built-in profiles.
    Completions { shell: clap_complete::Shell },
    /// The support matrix (docs/support-matrix.md) on stdout, from gpuhost's own tables:
    /// release × arch × kernel × module flavour × driver branch → supported, untested, refused.
    SupportMatrix,
}

#[derive(clap::Args, Debug)]
struct ApplyArgs {
    /// A built-in profile (ol8-uek, ol8-rhck, ol9-uek, ol9-rhck, ol10-uek, ol10-rhck) or a path to a .toml file
    /// (with --bundle: the bundle's own profile, which this may only name).
    #[arg(long, required_unless_present = "bundle")]
    profile: Option<String>,
    /// Take the profile and every package from this bundle (directory or .tar made by
    /// `gpuhost bundle`), verified first; dnf uses no other repo.
    #[arg(long, value_name = "DIR|TARBALL")]
    bundle: Option<PathBuf>,
    /// Act on an install root instead of the running system (image builds, tests).
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Provision for this kernel release instead of the running (or, in a root, newest) one.
    #[arg(long, value_name = "KVER")]
    kernel_release: Option<String>,
    /// Override one profile key (repeatable), e.g. --set driver.stream=535-dkms
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Run only these steps.
    #[arg(long, value_delimiter = ',', value_name = "STEP[,STEP]")]
    only: Vec<String>,
    /// Skip these steps.
    #[arg(long, value_delimiter = ',', value_name = "STEP[,STEP]")]
    skip: Vec<String>,
    /// Change nothing; say what would change and why.
    #[arg(long)]
    dry_run: bool,
    /// When a reboot is needed, reboot and resume after boot (gpuhost-resume.service) until
    /// converged; without it, apply exits 3 and leaves the reboot to you.
    #[arg(long, conflicts_with = "dry_run")]
    reboot: bool,
    /// With --reboot: who reboots, overriding the profile's `reboot.via`: `systemd` (at once) or
    /// `slurm` (Slurm drains the node and reboots it once its jobs have ended; exit 4).
    #[arg(long, value_enum, value_name = "WHO", requires = "reboot")]
    reboot_via: Option<RebootViaArg>,
    /// Loop guard for --reboot: give up after this many reboots in one resume chain.
    #[arg(long, default_value_t = gpuhost_engine::reboot::DEFAULT_MAX_REBOOTS, value_name = "N")]
    max_reboots: u32,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum RebootViaArg {
    Systemd,
    Slurm,
}

impl From<RebootViaArg> for gpuhost_profile::RebootVia {
    fn from(v: RebootViaArg) -> Self {
        match v {
            RebootViaArg::Systemd => Self::Systemd,
            RebootViaArg::Slurm => Self::Slurm,
        }
    }
}

// `gpuhost resume`'s options; the apply it repeats is `gpuhost_engine::reboot::ResumeArgs`.
#[derive(clap::Args, Debug)]
struct ResumeCommandArgs {
    /// The install root whose recorded apply to resume.
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(clap::Args, Debug)]
struct RollbackArgs {
    /// The install root to roll back.
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Show what the rollback would change, changing nothing.
    #[arg(long)]
    dry_run: bool,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(clap::Args, Debug)]
struct BundleArgs {
    /// A built-in profile (ol8-uek, ol8-rhck, ol9-uek, ol9-rhck, ol10-uek, ol10-rhck) or a path to a .toml file.
    #[arg(long)]
    profile: String,
    /// Override one profile key (repeatable), e.g. --set driver.stream=535-dkms
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// The target: an install root (or `/`) whose OS release, repo files, kernels and
    /// NVSwitches the bundle is made for.
    #[arg(long, conflicts_with = "os", required_unless_present = "os")]
    root: Option<PathBuf>,
    /// The target: a clean Oracle Linux release, with Oracle's public repos or --repos.
    #[arg(long, value_name = "RELEASE", value_parser = os_values())]
    os: Option<String>,
    /// With --os: the target's machine architecture (default: this machine's).
    #[arg(long, requires = "os", value_parser = arch_values())]
    arch: Option<String>,
    /// With --os: the .repo files the target uses (a directory), instead of Oracle's public repos.
    #[arg(long, requires = "os", value_name = "DIR")]
    repos: Option<PathBuf>,
    /// The kernel to serve (default: the root's target kernel; with --os, the newest of the
    /// profile's flavour in the repos).
    #[arg(long, value_name = "KVER")]
    kernel_release: Option<String>,
    /// Make it for NVSwitch systems: the `fm` module profile and Fabric Manager.
    #[arg(long)]
    fabric_manager: bool,
    /// The bundle directory to write (new or empty).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Also write DIR.tar, one file to carry.
    #[arg(long)]
    tar: bool,
    /// Carry the prebuilt kmods of this kmod repo (`gpuhost kmod build --out`), the bundle's
    /// driver's for the kernels it serves, checked against its manifest (default: the profile's
    /// driver.kmod_repo): nodes install them and compile nothing, and the bundle carries no
    /// DKMS, compiler or kernel headers.
    #[arg(long, value_name = "DIR")]
    kmod_repo: Option<PathBuf>,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(clap::Args, Debug)]
struct KernelAddedArgs {
    /// The kernel release kernel-install added (for the log; apply serves the default boot
    /// kernel, whichever it is).
    kernel: Option<String>,
    /// The install root whose last apply to repeat.
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Give up waiting for the rpm transaction after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value = "3600")]
    wait: u64,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(clap::Args, Debug)]
struct FactsArgs {
    /// Look at an install root instead of the running system.
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

fn main() -> ExitCode {
    // The one-shot NVML probe child (`gpuhost nvml-probe`, started by a `gpuhost status` that
    // can neither run the helper nor fork) goes straight to its work: no command-line tree to
    // build.
    if probe_child() {
        output::init_logging(std::env::var("GPUHOST_LOG").as_deref().unwrap_or("warn"));
        let code = gpuhost_health::run_nvml_probe(None, std::path::Path::new("/"));
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    if let Some(s) = status_only() {
        output::init_logging(&s.logging.log_level);
        let code = status::run(&s.status);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(usage_error(&e)),
    };
    output::init_logging(&cli.logging.log_level);
    let code = match &cli.command {
        Command::Apply(a) => run_apply(&apply_options(a, a.dry_run), a.format),
        Command::Plan(a) => run_apply(&apply_options(a, true), a.format),
        Command::Resume(r) => match resume_options(r) {
            Ok(opts) => run_apply(&opts, r.format),
            Err(e) => output::error(r.format == Format::Json, &e),
        },
        Command::Rollback(r) => match rollback_options(r) {
            Ok(opts) => run_apply(&opts, r.format),
            Err(e) => output::error(r.format == Format::Json, &e),
        },
        Command::Bundle(b) => {
            // A signal stops the build at the next command, and its scratch root is removed.
            gpuhost_host::interrupt::install();
            let code = report(b.format, run_bundle(b));
            match gpuhost_host::interrupt::received() {
                Some(sig) if code != exit::OK => 128 + sig,
                _ => code,
            }
        }
        Command::Kmod { action } => kmod::run(action),
        Command::KernelAdded(k) => match kernel_added_options(k) {
            Ok(Some(opts)) => run_apply(&opts, k.format),
            Ok(None) => exit::OK,
            Err(e) => output::error(k.format == Format::Json, &e),
        },
        Command::Facts(f) => report(f.format, run_facts(f)),
        Command::Steps => {
            for s in gpuhost_steps::registry() {
                println!("{:<18} {}", s.id(), s.summary());
            }
            exit::OK
        }
        Command::Profiles { action } => report(Format::Text, run_profiles(action.as_ref())),
        Command::CloudInit(c) => report(
            Format::Text,
            cloud_init::render(c).map(|text| print!("{text}")),
        ),
        Command::Generate { what } => report(Format::Text, generate(what)),
        Command::Status(s) => status::run(s),
        Command::Compat(c) => compat::run(c),
        Command::Serve(s) => serve::run(s),
        Command::Internal(i) => internal::run(i),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Print a command-line error (or the help it asked for); its exit code: clap's 2, but 3
/// (UNKNOWN) for `gpuhost status`, which monitors run as a Nagios plugin and would read 2 as
/// CRITICAL (with `--format npd`, node-problem-detector's UNKNOWN, 2), with the UNKNOWN line a
/// plugin owes on stdout.
fn usage_error(e: &clap::Error) -> u8 {
    let _ = e.print();
    if !e.use_stderr() {
        return 0; // --help, --version
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let subcommand = args.iter().find(|a| names.contains(a));
    let npd = args.windows(2).any(|w| w[0] == "--format" && w[1] == "npd")
        || args.iter().any(|a| a == "--format=npd");
    if subcommand.map(String::as_str) != Some("status") {
        return 2;
    }
    // A plugin's first line of stdout is what the monitor shows (Nagios reports "no data
    // returned" without one).
    let first = e.to_string();
    let first = first.lines().next().unwrap_or("bad arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    println!("gpuhost status UNKNOWN: bad arguments: {first}; see gpuhost status --help");
    if npd {
        2
    } else {
        3
    }
}

/// `gpuhost status …` with only its own options (and `--log-level`): what monitors run every
/// minute, and what a running `gpuhost serve` answers in about 2 ms, of which gpuhost's start
/// is most.
#[derive(Parser, Debug)]
#[command(
    name = "gpuhost status",
    disable_help_flag = true,
    disable_version_flag = true
)]
struct StatusOnly {
    #[command(flatten)]
    logging: Logging,
    #[command(flatten)]
    status: status::StatusArgs,
}

/// `gpuhost status …` parsed by the status command's own arguments alone, without building the
/// whole command-line tree; None for any other command, and for anything that parser does not
/// take (help, a mistake, an option before `status`), which the whole parser then handles with
/// its own messages and exit codes.
fn status_only() -> Option<StatusOnly> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != "status" {
        return None;
    }
    StatusOnly::try_parse_from(
        std::iter::once(std::ffi::OsString::from("gpuhost status")).chain(args),
    )
    .ok()
}

/// Exactly `gpuhost nvml-probe`: the probe child of a one-shot `gpuhost status`.
fn probe_child() -> bool {
    let mut a = std::env::args_os().skip(1);
    matches!((a.next(), a.next()), (Some(p), None) if p == "nvml-probe")
}

/// Print an error (one line) and map it to an exit code.
fn report(format: Format, r: Result<()>) -> i32 {
    match r {
        Ok(()) => exit::OK,
        Err(e) => output::error(format == Format::Json, &e),
    }
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn apply_options(a: &ApplyArgs, dry_run: bool) -> ApplyOptions {
    ApplyOptions {
        profile: absolute_profile(&a.profile.clone().unwrap_or_default()),
        root: a.root.clone(),
        kernel_release: a.kernel_release.clone(),
        sets: a.sets.iter().map(|s| absolute_set(s)).collect(),
        selection: Selection {
            only: a.only.clone(),
            skip: a.skip.clone(),
        },
        dry_run,
        reboot: a.reboot && !dry_run,
        max_reboots: a.max_reboots,
        command_line: command_line(),
        bundle: a.bundle.as_deref().map(absolute),
        reboot_via: a.reboot_via.map(Into::into),
        driver: None,
    }
}

/// The profile keys that name a file of the machine gpuhost runs on: made absolute when
/// recorded, so `kernel-added`, `resume` and `rollback` (run by systemd from `/`) find them.
const HOST_PATH_KEYS: &[&str] = &[
    "driver.local_repo_rpm",
    "driver.kmod_repo",
    "container_smoke.image_tarball",
];

/// `p` made absolute against the working directory (as typed, when it cannot be).
fn absolute(p: &std::path::Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A `--profile` that names a file (not a built-in name), made absolute.
fn absolute_profile(spec: &str) -> String {
    let builtin = gpuhost_profile::builtin_list()
        .iter()
        .any(|(name, _)| *name == spec);
    // A name that is no file (`ol7-uek`) stays as typed: the profile reader names it unknown.
    let file = spec.contains('/') || spec.ends_with(".toml");
    if spec.is_empty() || builtin || spec.starts_with('/') || !file {
        return spec.to_string();
    }
    absolute(std::path::Path::new(spec)).display().to_string()
}

/// A `--set KEY=VALUE` whose key names a file, with the path made absolute.
fn absolute_set(set: &str) -> String {
    let Some((key, value)) = set.split_once('=') else {
        return set.to_string();
    };
    // A value may be quoted as TOML (`"target/x.rpm"`).
    let (quote, inner) = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => ("\"", inner),
        None => ("", value),
    };
    if !HOST_PATH_KEYS.contains(&key.trim()) || inner.is_empty() || inner.starts_with('/') {
        return set.to_string();
    }
    let path = absolute(std::path::Path::new(inner));
    format!("{key}={quote}{}{quote}", path.display())
}

/// The last converged apply, once no rpm transaction runs; None (nothing to do) when no apply
/// has converged on this host.
fn kernel_added_options(k: &KernelAddedArgs) -> Result<Option<ApplyOptions>> {
    use gpuhost_engine::bootguard;
    let host = Host::new(&k.root)?;
    let Some(a) = bootguard::load_last_apply(&host)? else {
        eprintln!(
            "gpuhost kernel-added: no converged apply recorded in {}: nothing to do",
            host.path(bootguard::LAST_APPLY_PATH).display()
        );
        return Ok(None);
    };
    let waited = bootguard::wait_for_rpm(
        &host,
        std::time::Duration::from_secs(k.wait),
        std::time::Duration::from_millis(500),
    )?;
    tracing::info!(
        "kernel {} added; rpm transaction over after {} ms; repeating apply --profile {}",
        k.kernel.as_deref().unwrap_or("(unnamed)"),
        waited.as_millis(),
        a.profile
    );
    Ok(Some(recorded_options(a, k.root.clone(), false)))
}

/// The apply that rolls the driver back ([`gpuhost_engine::rollback`]).
fn rollback_options(r: &RollbackArgs) -> Result<ApplyOptions> {
    let host = Host::new(&r.root)?;
    let rb = gpuhost_engine::rollback::plan(&host)?;
    // A bundle's driver: the bundle's name for the package, not a file on the node.
    let source = match &rb.to.bundle {
        Some(b) => format!(
            "{} from bundle {b}",
            rb.to
                .local_repo_rpm
                .rsplit('/')
                .next()
                .unwrap_or(&rb.to.local_repo_rpm)
        ),
        None => rb.to.local_repo_rpm.clone(),
    };
    eprintln!(
        "gpuhost rollback: driver {} → {} ({source})",
        rb.from.version, rb.to.version
    );
    let mut opts = recorded_options(rb.args, r.root.clone(), false);
    opts.dry_run = r.dry_run;
    Ok(opts)
}

/// Apply options from a recorded apply (`last-apply.json`, `resume.json`): the same profile,
/// `--set`s, step selection and bundle, serving the default kernel again.
fn recorded_options(
    a: gpuhost_engine::reboot::ResumeArgs,
    root: PathBuf,
    reboot: bool,
) -> ApplyOptions {
    ApplyOptions {
        profile: a.profile,
        root,
        kernel_release: None,
        sets: a.sets,
        selection: Selection {
            only: a.only,
            skip: a.skip,
        },
        dry_run: false,
        reboot,
        max_reboots: a.max_reboots,
        command_line: command_line(),
        bundle: a.bundle.map(PathBuf::from),
        reboot_via: a.reboot_via,
        driver: a.driver,
    }
}

/// The options `apply --reboot` recorded before its reboot.
fn resume_options(r: &ResumeCommandArgs) -> Result<ApplyOptions> {
    let host = Host::new(&r.root)?;
    let Some(state) = ResumeState::load(&host)? else {
        return Err(gpuhost_host::invalid!(
            "nothing to resume: {} does not exist (gpuhost apply --reboot writes it before rebooting)",
            host.path(gpuhost_engine::reboot::RESUME_PATH).display()
        ));
    };
    Ok(recorded_options(state.args, r.root.clone(), true))
}

fn run_apply(opts: &ApplyOptions, format: Format) -> i32 {
    if !opts.dry_run {
        output::init_progress();
    }
    match apply::apply(opts) {
        Ok(rep) => {
            let printed = match format {
                Format::Json => output::json(&rep),
                Format::Text => {
                    output::print_report(&rep);
                    Ok(())
                }
            };
            if let Err(e) = printed {
                return output::error(false, &e);
            }
            if rep
                .reboot
                .as_ref()
                .is_some_and(|r| r.action == reboot::RebootAction::Rebooting)
            {
                let rebooted = Host::new(&opts.root).and_then(|h| reboot::reboot_now(&h));
                if let Err(e) = rebooted {
                    return output::error(format == Format::Json, &e);
                }
            }
            rep.exit_code
        }
        Err(e) => output::error(format == Format::Json, &e),
    }
}

fn generate(what: &Generate) -> Result<()> {
    let mut out = std::io::stdout();
    match what {
        Generate::Man { dir: None } => clap_mangen::Man::new(Cli::command())
            .source(man_source())
            .render(&mut out)?,
        Generate::Man { dir: Some(dir) } => {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", dir.display()))?;
            man_pages(dir).map_err(|e| {
                anyhow::anyhow!("cannot write the man pages into {}: {e}", dir.display())
            })?;
        }
        Generate::Completions { shell } => {
            let mut cmd = completion_command()?;
            clap_complete::generate(*shell, &mut cmd, "gpuhost", &mut out)
        }
        Generate::SupportMatrix => {
            use std::io::Write as _;
            out.write_all(matrix::markdown().as_bytes())?;
        }
    }
    Ok(())
}

/// The footer of every man page: gpuhost and its version (the subcommands' pages too).
fn man_source() -> String {
    format!("gpuhost {}", env!("CARGO_PKG_VERSION"))
}

/// One man page per command (`gpuhost.1`, `gpuhost-apply.1`, …; hidden commands have none), as
/// clap_mangen's `generate_to` writes them, but each footer naming gpuhost and its version
/// ([`man_source`]): clap_mangen's names the subcommand alone (`apply`), with no version.
fn man_pages(dir: &std::path::Path) -> std::io::Result<()> {
    fn each(cmd: clap::Command, dir: &std::path::Path, source: &str) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            each(sub, dir, source)?;
        }
        clap_mangen::Man::new(cmd)
            .source(source)
            .generate_to(dir)
            .map(drop)
    }
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    each(cmd, dir, &man_source())
}

/// The command line as the completion scripts know it: every `--set` offers the profile keys
/// (`driver.stream=`, ...), every `--profile` the built-in profiles. Only the scripts see these
/// values: parsing still takes any key (checked by the profile) and any profile file.
fn completion_command() -> Result<clap::Command> {
    let keys: Vec<String> = gpuhost_profile::doc::keys()?
        .into_iter()
        .map(|(k, _)| format!("{k}="))
        .collect();
    let profiles: Vec<String> = gpuhost_profile::builtin_list()
        .into_iter()
        .map(|(n, _)| n.to_string())
        .collect();
    Ok(with_completion_values(
        without_hidden(&Cli::command()),
        &keys,
        &profiles,
    ))
}

/// `cmd` as the completion scripts should know it: its name, version, about text, visible
/// arguments and visible subcommands (clap_complete offers hidden ones too). Argument groups
/// are left out: they only matter to parsing.
fn without_hidden(cmd: &clap::Command) -> clap::Command {
    let mut out = clap::Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(without_hidden),
        );
    if let Some(v) = cmd.get_version() {
        out = out.version(v.to_string());
    }
    if let Some(a) = cmd.get_about() {
        out = out.about(a.clone());
    }
    out
}

fn with_completion_values(
    mut cmd: clap::Command,
    keys: &[String],
    profiles: &[String],
) -> clap::Command {
    let args: Vec<(clap::Id, Vec<String>)> = cmd
        .get_arguments()
        .filter_map(|a| match a.get_long() {
            Some("set") => Some((a.get_id().clone(), keys.to_vec())),
            Some("profile") => Some((a.get_id().clone(), profiles.to_vec())),
            _ => None,
        })
        .collect();
    for (id, values) in args {
        cmd = cmd.mut_arg(id, move |a| {
            a.value_parser(clap::builder::PossibleValuesParser::new(values))
        });
    }
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subcommands {
        cmd = cmd.mut_subcommand(name, |s| with_completion_values(s, keys, profiles));
    }
    cmd
}

/// `gpuhost bundle --os`'s values: the releases of the release table (`ol8`, `ol9`, …).
fn os_values() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        gpuhost_host::platform::RELEASES
            .iter()
            .map(gpuhost_host::platform::Release::name),
    )
}

/// `gpuhost bundle --arch`'s values: the architectures of the release table.
fn arch_values() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(gpuhost_host::platform::arches())
}

fn run_bundle(b: &BundleArgs) -> Result<()> {
    use gpuhost_engine::bundle::{self, BuildOptions, Target};
    let release = b.os.as_deref().and_then(gpuhost_host::platform::by_name);
    let target = match (&b.root, release) {
        // clap lets a `requires = "os"` pass beside --root, which conflicts with --os.
        (Some(_), _) if b.arch.is_some() => {
            return Err(gpuhost_host::invalid!(
                "--arch goes with --os: with --root the architecture is the root's"
            ))
        }
        (Some(r), _) => Target::Root(r.clone()),
        (None, Some(release)) => Target::Os {
            major: release.major,
            arch: b.arch.clone(),
            repos: b.repos.clone(),
        },
        (None, None) => {
            let names: Vec<String> = gpuhost_host::platform::RELEASES
                .iter()
                .map(gpuhost_host::platform::Release::name)
                .collect();
            return Err(gpuhost_host::invalid!(
                "say what the bundle is for: --root DIR or --os {}",
                names.join("|")
            ));
        }
    };
    if b.format == Format::Text {
        output::init_progress();
    }
    let r = bundle::build(&BuildOptions {
        profile: b.profile.clone(),
        sets: b.sets.clone(),
        target,
        kernel_release: b.kernel_release.clone(),
        fabric_manager: b.fabric_manager,
        out: b.out.clone(),
        tar: b.tar,
        kmod_repo: b
            .kmod_repo
            .as_deref()
            .map(std::path::absolute)
            .transpose()?,
    })?;
    match b.format {
        Format::Json => output::json(&r),
        Format::Text => {
            output::print_bundle(&r);
            Ok(())
        }
    }
}

/// `gpuhost facts --format json`: the facts, and sysinfo's under `host`.
#[derive(serde::Serialize)]
struct FactsReport<'a> {
    #[serde(flatten)]
    facts: &'a Facts,
    host: gpuhost_host::hostinfo::HostInfo,
}

fn run_facts(f: &FactsArgs) -> Result<()> {
    let host = Host::new(&f.root)?;
    let facts = Facts::gather(&host, &KernelChoice::default())?;
    let info = gpuhost_host::hostinfo::gather(&host);
    match f.format {
        Format::Json => output::json(&FactsReport {
            facts: &facts,
            host: info,
        }),
        Format::Text => {
            output::print_facts(&facts);
            output::print_host_info(&info);
            Ok(())
        }
    }
}

fn run_profiles(action: Option<&ProfilesAction>) -> Result<()> {
    match action {
        None | Some(ProfilesAction::List) => {
            for (name, desc) in gpuhost_profile::builtin_list() {
                println!("{name:<10} {desc}");
            }
            Ok(())
        }
        Some(ProfilesAction::Show { name, sets, all }) => {
            let p = Profile::resolve(name, sets)?;
            if *all {
                print!("{}", gpuhost_profile::doc::render_all(&p)?);
            } else {
                println!(
                    "# gpuhost profiles show {name} --all: every key, with its meaning and default"
                );
                print!("{}", p.to_toml()?);
            }
            Ok(())
        }
        Some(ProfilesAction::Keys) => {
            for (key, _) in gpuhost_profile::doc::keys()? {
                println!("{key}");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn generate_is_listed_in_help() {
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("generate"), "{help}");
    }

    /// bash and zsh complete `--set` with the profile keys and `--profile` with the built-in
    /// profiles, on every command that takes them.
    #[test]
    fn completions_offer_profile_keys_and_builtin_profiles() -> Result<()> {
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh] {
            let mut cmd = completion_command()?;
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "gpuhost", &mut out);
            let script = String::from_utf8(out)?;
            for needle in [
                "driver.local_repo_rpm=",
                "docker.repo=",
                "ol8-uek",
                "ol9-rhck",
            ] {
                assert!(script.contains(needle), "{shell}: {needle} missing");
            }
        }
        let mut cmd = completion_command()?;
        let mut out = Vec::new();
        clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "gpuhost", &mut out);
        let script = String::from_utf8(out)?;
        // after `--set` on apply, the keys (not file names) are offered
        let apply = script
            .split("gpuhost__subcmd__apply)")
            .nth(1)
            .and_then(|s| s.split("\n        gpuhost__").next())
            .unwrap_or_default();
        let set = apply.split("--set)").nth(1).unwrap_or_default();
        let set = set.split(";;").next().unwrap_or_default();
        assert!(
            set.contains("compgen -W") && set.contains("driver.stream="),
            "{set}"
        );
        Ok(())
    }

    /// One man page per command, each documenting its options.
    #[test]
    fn man_pages_come_one_per_command() -> Result<()> {
        let dir = tempfile::tempdir()?;
        generate(&Generate::Man {
            dir: Some(dir.path().to_path_buf()),
        })?;
        for page in [
            "gpuhost.1",
            "gpuhost-apply.1",
            "gpuhost-status.1",
            "gpuhost-profiles-show.1",
            "gpuhost-generate.1",
        ] {
            assert!(dir.path().join(page).is_file(), "{page} missing");
        }
        let apply = std::fs::read_to_string(dir.path().join("gpuhost-apply.1"))?;
        assert!(
            apply.contains("\\-\\-root") && apply.contains("\\-\\-profile"),
            "{apply}"
        );
        // Every page's footer (the .TH line's source) is gpuhost's, with its version, the
        // subcommands' too (issue 54: they named the subcommand alone).
        let source = format!("\"gpuhost {}\"", env!("CARGO_PKG_VERSION"));
        let mut pages = 0;
        for e in std::fs::read_dir(dir.path())? {
            let page = std::fs::read_to_string(e?.path())?;
            let th = page
                .lines()
                .find(|l| l.starts_with(".TH "))
                .unwrap_or_default();
            assert!(th.contains(&source), "{th}");
            pages += 1;
        }
        assert!(pages > 10, "{pages} pages");
        Ok(())
    }

    /// The command lines that start a probe child, as the agent builds them, are the hidden
    /// subcommands, the only spelling (status has no probe flags); none is in the help.
    #[test]
    fn probe_programs_are_the_hidden_subcommands() -> Result<()> {
        use internal::{Internal, NvmlProbeArgs, NvmlServeArgs};
        let (f, r) = (std::path::Path::new("/f.json"), std::path::Path::new("/r"));
        let parsed = |argv: Vec<std::ffi::OsString>| -> Result<Command> {
            Ok(Cli::try_parse_from(argv)?.command)
        };
        let probe = Internal::NvmlProbe(NvmlProbeArgs {
            nvml_fixture: Some(f.into()),
            root: r.into(),
        });
        let serve = Internal::NvmlServe(NvmlServeArgs {
            nvml_fixture: Some(f.into()),
        });
        for (argv, want) in [
            (internal::nvml_probe_argv(Some(f), Some(r)), &probe),
            (internal::nvml_serve_argv(Some(f))?, &serve),
        ] {
            match parsed(argv)? {
                Command::Internal(got) => assert_eq!(&got, want),
                other => panic!("{other:?}"),
            }
        }
        for older in [
            "--nvml-probe",
            "--nvml-serve",
            "--nvml-calls",
            "--sweep-profile=3",
        ] {
            assert!(
                Cli::try_parse_from(["gpuhost", "status", older]).is_err(),
                "{older}: the probe modes are subcommands only"
            );
        }
        let help = Cli::command().render_long_help().to_string();
        for hidden in ["nvml-probe", "nvml-serve", "nvml-calls", "sweep-profile"] {
            assert!(!help.contains(hidden), "{hidden}: {help}");
        }
        Ok(())
    }

    #[test]
    fn relative_paths_are_made_absolute_when_recorded() {
        let cwd = std::env::current_dir().unwrap_or_default();
        assert_eq!(
            absolute_set("driver.local_repo_rpm=target/x.rpm"),
            format!(
                "driver.local_repo_rpm={}",
                cwd.join("target/x.rpm").display()
            )
        );
        assert_eq!(
            absolute_set("driver.kmod_repo=\"kmods\""),
            format!("driver.kmod_repo=\"{}\"", cwd.join("kmods").display())
        );
        assert_eq!(
            absolute_set("driver.local_repo_rpm=/srv/x.rpm"),
            "driver.local_repo_rpm=/srv/x.rpm"
        );
        assert_eq!(
            absolute_set("driver.stream=open-dkms"),
            "driver.stream=open-dkms"
        );
        assert_eq!(absolute_profile("ol9-uek"), "ol9-uek");
        assert_eq!(absolute_profile("ol7-uek"), "ol7-uek");
        assert_eq!(
            absolute_profile("site.toml"),
            cwd.join("site.toml").display().to_string()
        );
        assert_eq!(
            absolute_profile("site/p.toml"),
            cwd.join("site/p.toml").display().to_string()
        );
    }

    #[test]
    fn sweep_profile_takes_a_bounded_count() {
        for n in ["0", "10001", "18446744073709551615"] {
            assert!(
                Cli::try_parse_from(["gpuhost", "sweep-profile", n]).is_err(),
                "sweep-profile {n}"
            );
        }
        assert!(Cli::try_parse_from(["gpuhost", "sweep-profile", "10000"]).is_ok());
    }

    #[test]
    fn help_documents_exit_codes() {
        let help = Cli::command().render_long_help().to_string();
        for needle in ["0  converged", "2  invalid input", "3  converged except"] {
            assert!(help.contains(needle), "{needle}");
        }
    }
}
