//! Where an install root keeps its rpm database, and how rpm and dnf are told so.
//!
//! rpm and dnf take the database's path from the *build host's* `%_dbpath` macro, even with
//! `--root`/`--installroot`. Debian's and Ubuntu's rpm say `~/.rpmdb`: there, `rpm --root R`
//! and `dnf --installroot R` would read, and create, a second database at `R/root/.rpmdb` and
//! ignore the root's real one. So gpuhost finds the root's own database — an existing one at
//! `/var/lib/rpm` or `/usr/lib/sysimage/rpm`, else where the root's OS keeps it (Oracle Linux
//! 8 and 9: `/var/lib/rpm`) — and says so on every call: `--dbpath` to rpm, and to dnf (which
//! has no such option, but reads rpm's macros) a private `HOME` of gpuhost's whose
//! `.rpmmacros` defines `%_dbpath`. When it cannot tell, the root is refused (exit 2) before
//! any change. On the live system rpm's own configuration is the system's: nothing is passed.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};

use crate::host::Host;
use crate::osrelease::OsRelease;
use crate::rootfs::Kind;

/// Where rpm databases live, in the order rpm's distributions have used them.
pub const LOCATIONS: [&str; 2] = ["/var/lib/rpm", "/usr/lib/sysimage/rpm"];

/// The files that make a directory an rpm database: sqlite (rpm ≥ 4.16 default, OL9),
/// Berkeley DB (OL8), ndb.
const DB_FILES: [&str; 3] = ["rpmdb.sqlite", "Packages", "Packages.db"];

/// The root's rpm database: its path inside the root, or why it cannot be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbPath {
    Known(String),
    Unknown(String),
}

/// OS ids whose release 8 and 9 keep the rpm database at `/var/lib/rpm`.
fn keeps_it_in_var_lib_rpm(os: &OsRelease) -> bool {
    ["ol", "rhel", "centos", "rocky", "almalinux"].contains(&os.id.as_str())
        && matches!(os.major(), Some(8 | 9))
}

/// Find the root's database (see the module's documentation).
pub(crate) fn locate(host: &Host) -> DbPath {
    let mut found: Vec<String> = Vec::new();
    for dir in LOCATIONS {
        let has_db = DB_FILES
            .iter()
            .any(|f| host.kind(format!("{dir}/{f}")) == Some(Kind::File));
        if !has_db {
            continue;
        }
        // `/var/lib/rpm` may be a link to `/usr/lib/sysimage/rpm` (one database, two names).
        let inside = host
            .real_path(dir)
            .ok()
            .and_then(|p| {
                p.strip_prefix(host.root())
                    .ok()
                    .map(|r| Path::new("/").join(r))
            })
            .map_or_else(|| dir.to_string(), |p| p.display().to_string());
        if !found.contains(&inside) {
            found.push(inside);
        }
    }
    let root = host.root().display();
    match found.as_slice() {
        [one] => return DbPath::Known(one.clone()),
        [a, b, ..] => {
            return DbPath::Unknown(format!(
                "install root {root} has two rpm databases, {a} and {b}: gpuhost cannot tell which one its OS uses"
            ))
        }
        [] => {}
    }
    let os = host
        .read_opt("/etc/os-release")
        .ok()
        .flatten()
        .map(|t| OsRelease::parse(&t));
    match os {
        Some(os) if keeps_it_in_var_lib_rpm(&os) => DbPath::Known(LOCATIONS[0].to_string()),
        Some(os) => DbPath::Unknown(format!(
            "install root {root} has no rpm database ({} hold none) and runs {}, whose rpm database location gpuhost does not know",
            LOCATIONS.join(", "),
            os.pretty_name
        )),
        None => DbPath::Unknown(format!(
            "install root {root} has no rpm database ({} hold none) and no /etc/os-release to tell where its OS keeps one",
            LOCATIONS.join(", ")
        )),
    }
}

/// What to do when the database's place is unknown.
pub(crate) fn unknown_hint(root: &Path) -> String {
    format!(
        "initialise the root's rpm database where its OS keeps it (Oracle Linux 8 and 9: rpm --root {} --dbpath /var/lib/rpm --initdb), or install the OS's release package into it first",
        root.display()
    )
}

/// A private `HOME` for dnf whose `.rpmmacros` says where the root's database is (dnf reads
/// rpm's macros, `~/.rpmmacros` last; it has no option of its own for the database). Made on
/// first use in the temporary directory, readable by its owner only, removed with the last
/// clone of the [`Host`].
#[derive(Debug, Default)]
pub(crate) struct MacroHome(Mutex<Option<PathBuf>>);

impl MacroHome {
    /// The directory, made on first use with `%_dbpath` = `dbpath`.
    pub(crate) fn dir(&self, dbpath: &str) -> Result<PathBuf> {
        let mut made = self
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("gpuhost's rpm macro directory is poisoned"))?;
        if let Some(d) = made.as_ref() {
            return Ok(d.clone());
        }
        let dir = make_private_dir()?;
        let file = dir.join(".rpmmacros");
        std::fs::write(&file, macros(dbpath))
            .with_context(|| format!("writing {} (rpm's macros for dnf)", file.display()))?;
        *made = Some(dir.clone());
        Ok(dir)
    }
}

impl Drop for MacroHome {
    fn drop(&mut self) {
        if let Ok(made) = self.0.get_mut() {
            if let Some(d) = made.take() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
}

/// The `.rpmmacros` text.
fn macros(dbpath: &str) -> String {
    format!(
        "# gpuhost: the install root's rpm database, for dnf --installroot\n%_dbpath {dbpath}\n"
    )
}

/// A new directory of the temporary directory, owner-only (never an existing one).
fn make_private_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let tmp = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let mut last = None;
    for _ in 0..16 {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = tmp.join(format!("gpuhost-rpm.{}.{nanos:x}.{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow::anyhow!(
        "cannot make a directory in {} for rpm's macros: {}; set TMPDIR to a writable directory",
        tmp.display(),
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(files: &[(&str, &str)]) -> Result<(tempfile::TempDir, Host)> {
        let t = tempfile::tempdir()?;
        for (p, text) in files {
            let f = t.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().context("parent")?)?;
            std::fs::write(f, text)?;
        }
        let host = Host::new(t.path())?;
        Ok((t, host))
    }

    const OL9: &str = "ID=\"ol\"\nVERSION_ID=\"9.4\"\nPRETTY_NAME=\"Oracle Linux Server 9.4\"\n";

    #[test]
    fn an_existing_database_is_used_where_it_is() -> Result<()> {
        let (_t, h) = root_with(&[
            ("/usr/lib/sysimage/rpm/rpmdb.sqlite", ""),
            ("/etc/os-release", OL9),
        ])?;
        assert_eq!(locate(&h), DbPath::Known("/usr/lib/sysimage/rpm".into()));
        let (_t, h) = root_with(&[("/var/lib/rpm/Packages", "")])?;
        assert_eq!(locate(&h), DbPath::Known("/var/lib/rpm".into()));
        Ok(())
    }

    #[test]
    fn without_a_database_the_os_says_where_and_an_unknown_os_is_refused() -> Result<()> {
        let (_t, h) = root_with(&[("/etc/os-release", OL9)])?;
        assert_eq!(locate(&h), DbPath::Known("/var/lib/rpm".into()));
        let (_t, h) = root_with(&[("/etc/os-release", "ID=debian\nVERSION_ID=12\n")])?;
        assert!(matches!(locate(&h), DbPath::Unknown(m) if m.contains("debian 12")));
        let (_t, h) = root_with(&[])?;
        assert!(matches!(locate(&h), DbPath::Unknown(m) if m.contains("no /etc/os-release")));
        Ok(())
    }

    #[test]
    fn two_databases_are_refused_and_a_link_between_them_is_one() -> Result<()> {
        let (t, h) = root_with(&[
            ("/var/lib/rpm/rpmdb.sqlite", ""),
            ("/usr/lib/sysimage/rpm/rpmdb.sqlite", ""),
        ])?;
        assert!(matches!(locate(&h), DbPath::Unknown(m) if m.contains("two rpm databases")));
        std::fs::remove_dir_all(t.path().join("var/lib/rpm"))?;
        std::os::unix::fs::symlink("../../usr/lib/sysimage/rpm", t.path().join("var/lib/rpm"))?;
        assert_eq!(locate(&h), DbPath::Known("/usr/lib/sysimage/rpm".into()));
        Ok(())
    }

    #[test]
    fn the_macro_home_says_where_and_goes_away() -> Result<()> {
        let home = MacroHome::default();
        let dir = home.dir("/var/lib/rpm")?;
        assert_eq!(home.dir("/var/lib/rpm")?, dir);
        let text = std::fs::read_to_string(dir.join(".rpmmacros"))?;
        assert!(text.contains("\n%_dbpath /var/lib/rpm\n"), "{text}");
        drop(home);
        assert!(!dir.exists());
        Ok(())
    }
}
