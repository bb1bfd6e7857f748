//! `gpuhost kmod build`: the build host's command (see `gpuhost_engine::kmod`). A command of
//! its own rather than a `bundle` option: a fleet's kernels change more often than its driver
//! (each `dnf update` of the kernel needs that kernel's kmod, and nothing else), the kmods need
//! the fleet's private key, which a bundle build must never touch, and one repo serves many
//! bundles and mirrors. `bundle` and `apply` take the repo it writes (`driver.kmod_repo`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

use gpuhost_engine::kmod::{self, KmodBuildOptions, KmodBuildReport};
use gpuhost_nvidia::flavour::ModuleFlavour;

use crate::output::{self, Format};

pub(crate) const EXIT_CODES: &str = "\
Exit codes (kmod build): 0 built, 1 could not build or package it, 2 invalid input, nothing
  compiled (a local repo package without the DKMS source or whose dkms.conf names a module or
  location that is not a plain name inside the source, an empty or malformed --kernel-release or
  one not installed in the build root with its headers, a fleet key that is not root's alone, a
  key or certificate that is not a regular file (a FIFO, a device) or cannot be read, a
  certificate of another key, an --out that is not empty nor a kmod repo gpuhost wrote, a repo
  signed by another key, a build host that cannot confine the build: bubblewrap), 130/143
  interrupted by SIGINT/SIGTERM (the build's processes killed)";

#[derive(Subcommand, Debug)]
pub(crate) enum KmodCommand {
    /// Build NVIDIA's kernel modules from a local repo package's DKMS source for each kernel,
    /// with that kernel's compiler and every CPU, sign each module with the fleet's key, and
    /// write one RPM per kernel into a kmod repo (createrepo_c, with a SHA-256 manifest) that
    /// nodes install from without a compiler (`driver.kmod_repo`).
    #[command(after_help = EXIT_CODES)]
    Build(KmodBuildArgs),
}

#[derive(clap::Args, Debug)]
pub(crate) struct KmodBuildArgs {
    /// The build root: its kernels, their headers and compilers (`/` on a build host).
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// NVIDIA's local repo package (CUDA or driver-only) whose DKMS source is built.
    #[arg(long, value_name = "RPM")]
    local_repo_rpm: PathBuf,
    /// A kernel to build for (repeatable); default: the build root's target and default boot
    /// kernels.
    #[arg(long = "kernel-release", value_name = "KVER")]
    kernels: Vec<String>,
    /// The kernel module flavour: open (Turing and newer) or proprietary (Volta and older,
    /// through R580).
    #[arg(long, value_enum, default_value = "open")]
    flavour: FlavourArg,
    /// The fleet's module-signing private key (PEM). Read on this host only: it enters no RPM,
    /// no repo and no bundle.
    #[arg(long, value_name = "PEM")]
    key: PathBuf,
    /// The certificate of that key (DER or PEM): the repo carries it (public), Secure Boot nodes
    /// must have it enrolled.
    #[arg(long, value_name = "CERT")]
    cert: PathBuf,
    /// The kmod repo to write (made, or added to).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// make's parallel jobs (default: every CPU; NVIDIA's DKMS configuration pins 2).
    #[arg(long)]
    jobs: Option<usize>,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum FlavourArg {
    Open,
    Proprietary,
}

pub(crate) fn run(cmd: &KmodCommand) -> i32 {
    match cmd {
        KmodCommand::Build(a) => {
            gpuhost_host::interrupt::install();
            // Every process of a build ends with it: a signal kills whatever command runs.
            gpuhost_host::cmd::end_every_command_on_signal();
            let r = build(a);
            match r {
                Ok(()) => gpuhost_engine::apply::exit::OK,
                Err(e) => {
                    let code = output::error(a.format == Format::Json, &e);
                    // A signal ended the build (every process of it killed): 128 + its number.
                    match gpuhost_host::interrupt::received() {
                        Some(sig) if gpuhost_host::interrupt::is_interrupted(&e) => {
                            gpuhost_host::interrupt::exit_code(sig)
                        }
                        _ => code,
                    }
                }
            }
        }
    }
}

fn build(a: &KmodBuildArgs) -> Result<()> {
    let report = kmod::build(&KmodBuildOptions {
        root: a.root.clone(),
        local_repo_rpm: std::path::absolute(&a.local_repo_rpm)?,
        flavour: match a.flavour {
            FlavourArg::Open => ModuleFlavour::Open,
            FlavourArg::Proprietary => ModuleFlavour::Proprietary,
        },
        kernels: a.kernels.clone(),
        key: std::path::absolute(&a.key)?,
        cert: std::path::absolute(&a.cert)?,
        out: std::path::absolute(&a.out)?,
        jobs: a.jobs,
    })?;
    match a.format {
        Format::Json => output::json(&report),
        Format::Text => {
            print(&report);
            Ok(())
        }
    }
}

fn print(r: &KmodBuildReport) {
    println!(
        "kmod repo {}: NVIDIA {} {} modules, make -j{}",
        r.repo, r.driver, r.flavour, r.jobs
    );
    for k in &r.kmods {
        println!(
            "  {}  {}  ({} modules; {:.1} s, {:.1} CPU-s; {})",
            k.kernel,
            k.file,
            k.modules.len(),
            k.build_seconds,
            k.cpu_seconds,
            k.compiler
        );
    }
    println!("install on nodes with driver.kmod_repo = \"{}\"", r.repo);
}
