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

/// A file the hidden fixture options read (`--nvml-fixture`, `--from-snapshot`): a regular file
/// (or none yet), refused at parse time otherwise — a FIFO would hang the probe and its caller,
/// a device or a folder reads as nothing useful (issue 43).
pub(crate) fn fixture_file(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(path),
        Ok(_) => Err(format!(
            "{s} is not a regular file (a FIFO, a device or a folder)"
        )),
        // Not there (yet): the reader says so in its own words.
        Err(_) => Ok(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_must_be_a_regular_file() {
        let dir = std::env::temp_dir().join(format!("gpuhost-fixture-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let e = fixture_file(&fifo.display().to_string());
            assert!(e.is_err_and(|e| e.contains("not a regular file")));
        }
        assert!(fixture_file(&dir.display().to_string()).is_err());
        assert!(fixture_file("/dev/null").is_err());
        let file = dir.join("snap.json");
        let _ = std::fs::write(&file, "{}");
        assert_eq!(fixture_file(&file.display().to_string()), Ok(file));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
