//! `gpuhost serve`'s command line: its options as clap parses them, and the typed
//! [`ServeOptions`] the serve crate runs with.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;

use gpuhost_serve::{ServeOptions, DEFAULT_LISTEN};

use crate::internal;

/// `gpuhost serve` options.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address and port to listen on (use 0.0.0.0:PORT or [::]:PORT to be scraped from other
    /// machines).
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// Sweep (NVML, sysfs, kernel log, services) every this many seconds.
    #[arg(long, value_name = "SECONDS", default_value = "10")]
    pub interval: f64,
    /// A request served from a sweep older than this starts a new one and waits for it.
    #[arg(long, value_name = "SECONDS", default_value = "1")]
    pub max_age: f64,
    /// Deadline for each NVML sweep; past it the driver is reported unresponsive and the
    /// probe replaced.
    #[arg(long, value_name = "SECONDS", default_value = "5")]
    pub timeout: f64,
    /// GPUs this node must have (overrides the profile's `status.expect_gpus`).
    #[arg(long, value_name = "N")]
    pub expect_gpus: Option<u32>,
    /// A profile (built-in name or .toml path) giving the expected GPU count and driver version.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Serve a snapshot saved by `gpuhost status --dump-snapshot`: its host part as saved,
    /// its NVML part answered by the probe child from the file (tests, benchmarks).
    #[arg(long, hide = true, value_name = "FILE")]
    pub from_snapshot: Option<PathBuf>,
    /// Answer `gpuhost status` on this local socket (default: `serve.sock` in the run
    /// directory, `/run/gpuhost` as root).
    #[arg(long, value_name = "PATH", conflicts_with = "no_socket")]
    pub socket: Option<PathBuf>,
    /// Do not answer `gpuhost status` on a local socket.
    #[arg(long)]
    pub no_socket: bool,
    /// Read sysfs, /proc, /dev/kmsg and /etc under this root (tests).
    #[arg(
        long,
        hide = true,
        value_name = "DIR",
        env = "GPUHOST_STATUS_ROOT",
        default_value = "/"
    )]
    pub root: PathBuf,
}

impl ServeArgs {
    /// The options the serve crate runs `gpuhost serve` with; `probe_program` is its NVML
    /// probe child (`gpuhost nvml-serve`).
    fn options(&self, probe_program: Vec<OsString>) -> ServeOptions {
        ServeOptions {
            listen: self.listen.clone(),
            interval: self.interval,
            max_age: self.max_age,
            timeout: self.timeout,
            expect_gpus: self.expect_gpus,
            profile: self.profile.clone(),
            from_snapshot: self.from_snapshot.clone(),
            socket: self.socket.clone(),
            no_socket: self.no_socket,
            root: self.root.clone(),
            probe_program,
        }
    }
}

/// Run `gpuhost serve`; its exit code.
pub fn run(a: &ServeArgs) -> i32 {
    let program = match internal::nvml_serve_argv(a.from_snapshot.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gpuhost serve: cannot find gpuhost's own executable: {e}");
            return gpuhost_serve::exit::FAILED;
        }
    };
    gpuhost_serve::run(&a.options(program))
}
