//! Arguments several commands share.

use std::path::PathBuf;

use clap::Args;

/// `--root` of the commands that read a node's health (`status`, `serve`, `sweep-profile`):
/// hidden, for tests, and read from `GPUHOST_STATUS_ROOT` too.
#[derive(Args, Debug, Clone, PartialEq)]
pub(crate) struct HealthRoot {
    /// Read sysfs, /proc, /dev/kmsg and /etc under this root (tests); systemctl and the journal
    /// are not asked then.
    #[arg(
        long = "root",
        hide = true,
        value_name = "DIR",
        env = "GPUHOST_STATUS_ROOT",
        default_value = "/"
    )]
    pub dir: PathBuf,
}
