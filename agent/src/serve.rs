//! `gpuhost serve`'s command line: its options as clap parses them, and the typed
//! [`ServeOptions`] the serve crate runs with.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use gpuhost_serve::{ServeOptions, Socket, DEFAULT_LISTEN};

use crate::args::HealthRoot;
use crate::internal;

/// `gpuhost serve` options.
#[derive(Args, Debug, Clone)]
pub(crate) struct ServeArgs {
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
    #[arg(long, hide = true, value_name = "FILE", value_parser = crate::args::fixture_file)]
    pub from_snapshot: Option<PathBuf>,
    /// Answer `gpuhost status` on this local socket (default: `serve.sock` in the run
    /// directory, `/run/gpuhost` as root).
    #[arg(long, value_name = "PATH", conflicts_with = "no_socket")]
    pub socket: Option<PathBuf>,
    /// Do not answer `gpuhost status` on a local socket.
    #[arg(long)]
    pub no_socket: bool,
    #[command(flatten)]
    pub root: HealthRoot,
}

impl ServeArgs {
    /// The options the serve crate runs `gpuhost serve` with (`probe_program`: its NVML probe
    /// child, `gpuhost nvml-serve`); Err: why an argument is refused.
    fn options(&self, probe_program: Vec<OsString>) -> Result<ServeOptions, String> {
        let listen: SocketAddr = self.listen.parse().map_err(|_| {
            format!(
                "--listen {}: give an address and a port, e.g. 127.0.0.1:19400 or [::]:19400",
                self.listen
            )
        })?;
        Ok(ServeOptions {
            listen,
            interval: seconds("interval", self.interval, 86400.0)?,
            max_age: seconds("max-age", self.max_age, 86400.0)?,
            timeout: seconds("timeout", self.timeout, 60.0)?,
            expect_gpus: self.expect_gpus,
            profile: self.profile.clone(),
            from_snapshot: self.from_snapshot.clone(),
            socket: match (&self.socket, self.no_socket) {
                (_, true) => Socket::Off,
                (Some(p), false) => Socket::At(p.clone()),
                (None, false) => Socket::InRunDir,
            },
            root: self.root.dir.clone(),
            probe_program,
        })
    }
}

/// `--FLAG SECONDS` as a duration: above 0 and at most `max`.
fn seconds(flag: &str, v: f64, max: f64) -> Result<Duration, String> {
    if !(v.is_finite() && v > 0.0 && v <= max) {
        return Err(format!(
            "--{flag} {v}: give seconds above 0 and at most {max}"
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Run `gpuhost serve`; its exit code (2 for an argument refused).
pub(crate) fn run(a: &ServeArgs) -> i32 {
    let program = match internal::nvml_serve_argv(a.from_snapshot.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gpuhost serve: cannot find gpuhost's own executable: {e}");
            return gpuhost_serve::exit::FAILED;
        }
    };
    match a.options(program) {
        Ok(o) => gpuhost_serve::run(&o),
        Err(e) => {
            eprintln!("gpuhost serve: {e}");
            gpuhost_serve::exit::INVALID
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn args(listen: &str) -> ServeArgs {
        Cli::try_parse_from(["serve", "--listen", listen])
            .unwrap()
            .serve
    }

    #[test]
    fn listen_addresses_and_durations_are_checked() {
        assert!(args("127.0.0.1:19400").options(Vec::new()).is_ok());
        assert!(args("[::]:0").options(Vec::new()).is_ok());
        let e = args("localhost").options(Vec::new()).unwrap_err();
        assert!(e.contains("--listen localhost"), "{e}");
        let mut a = args("127.0.0.1:1");
        a.timeout = 0.0;
        let e = a.options(Vec::new()).unwrap_err();
        assert!(e.contains("--timeout 0"), "{e}");
    }

    #[test]
    fn the_socket_is_the_run_directory_s_unless_given_or_refused() {
        let sock = |extra: &[&str]| {
            let argv = ["serve"].iter().chain(extra);
            Cli::try_parse_from(argv)
                .unwrap()
                .serve
                .options(Vec::new())
                .unwrap()
                .socket
        };
        assert_eq!(sock(&[]), Socket::InRunDir);
        assert_eq!(sock(&["--socket", "/s"]), Socket::At("/s".into()));
        assert_eq!(sock(&["--no-socket"]), Socket::Off);
    }
}
