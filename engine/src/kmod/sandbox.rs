//! Where the compile runs: as an unprivileged user in namespaces of its own, seeing the build
//! root read-only and nothing writable but its build folder, as akmods builds as the `akmods`
//! user. A chroot does not confine root (a static helper that chroots into a subfolder and
//! climbs out writes on the build host); an unprivileged user under `no_new_privs`, with no
//! capability, in a mount namespace whose every mount but the build folder and private
//! temporary folders is read-only, has no way out.
//!
//! - `setpriv --reuid --regid --clear-groups --no-new-privs --inh-caps=-all
//!   --bounding-set=-all`: the build user ([`BUILD_UID`]) before anything of the build runs;
//! - `bwrap --unshare-all` (user, mount, pid, ipc, uts, network and cgroup namespaces)
//!   `--ro-bind ROOT /`, `--bind` the build folder, private `/tmp`, `/var/tmp`, `/dev` and
//!   `/proc`, `--new-session`, `--die-with-parent`: every process of the build ends with it
//!   (the namespace's first process killed ends them all), on any signal to gpuhost, whose
//!   wait kills the sandbox's process group ([`Cmd::kill_group_on_signal`]).
//!
//! Nothing the build can reach holds key material: the fleet key is read by the signer only,
//! after the sandbox has ended ([`super::signer`]).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use gpuhost_host::cmd::Cmd;
use gpuhost_host::host::Host;
use gpuhost_host::invalid;

/// The build's user and group: `nobody` (65534), which owns nothing of the build host.
pub(super) const BUILD_UID: u32 = 65534;

/// The environment the build gets, and nothing of gpuhost's.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `argv` run in the build folder `work` (a path in the root, owned by [`BUILD_UID`]),
/// confined as this module says, within `timeout`.
pub(super) fn confined(host: &Host, work: &str, argv: &[String], timeout: Duration) -> Result<Cmd> {
    let root = host.root().display().to_string();
    let real_work = host.real_path(work)?;
    let id = BUILD_UID.to_string();
    let mut cmd = Cmd::new("setpriv")
        .arg(format!("--reuid={id}"))
        .arg(format!("--regid={id}"))
        .args([
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
            "bwrap",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--uid",
            &id,
            "--gid",
            &id,
            "--ro-bind",
            &root,
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]);
    if host.is_dir("/var/tmp") {
        cmd = cmd.args(["--tmpfs", "/var/tmp"]);
    }
    Ok(cmd
        .arg("--bind")
        .arg(real_work)
        .arg(work)
        .args(["--chdir", work, "--"])
        .args(argv)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", work)
        .env("TMPDIR", "/tmp")
        .env("LC_ALL", "C")
        .timeout(timeout)
        .kill_group_on_signal())
}

/// What the sandbox needs of the build host, checked before anything is compiled: `setpriv`
/// and `bwrap` (util-linux, bubblewrap), user namespaces the build user may make, and the
/// build root reachable by that user (every folder on its path searchable by others).
pub(super) fn ready(host: &Host) -> Result<()> {
    let probe = Cmd::new("setpriv")
        .arg(format!("--reuid={BUILD_UID}"))
        .arg(format!("--regid={BUILD_UID}"))
        .args(["--clear-groups", "--no-new-privs", "--", "bwrap"])
        .args(["--unshare-all", "--ro-bind"])
        .arg(host.root())
        .args(["/", "--", "/bin/sh", "-c", ":"])
        .timeout(Duration::from_secs(30))
        .output()
        .with_context(|| "starting the build's sandbox (setpriv, bwrap)".to_string());
    let why = match probe {
        Ok(o) if o.success() => return Ok(()),
        Ok(o) => gpuhost_host::cmd::tail_lines(&o.stderr, 3),
        Err(e) => format!("{e:#}"),
    };
    Err(invalid!(
        "the build cannot be confined on this build host ({why}), so nothing was compiled: gpuhost kmod build compiles as uid {BUILD_UID} under bubblewrap: install bubblewrap and util-linux (setpriv), allow user namespaces (sysctl user.max_user_namespaces > 0), and make every folder on the path of the build root {} searchable by others (chmod o+x)",
        host.root().display()
    ))
}

/// Make `dir` (a folder of the host, made by gpuhost) the build user's.
pub(super) fn give_to_build_user(dir: &Path) -> Result<()> {
    Cmd::new("chown")
        .args(["-R", "-h"])
        .arg(format!("{BUILD_UID}:{BUILD_UID}"))
        .arg(dir)
        .run()
        .map(drop)
        .with_context(|| format!("giving {} to the build's user", dir.display()))
}
