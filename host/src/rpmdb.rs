//! Where an install root keeps its rpm database, and how rpm and dnf are told so.
//!
//! rpm and dnf take the database's path from the *build host's* `%_dbpath` macro, even with
//! `--root`/`--installroot`. Debian's and Ubuntu's rpm say `~/.rpmdb`: there, `rpm --root R`
//! and `dnf --installroot R` would read, and create, a second database at `R/root/.rpmdb` and
//! ignore the root's real one. So gpuhost finds the root's own database — an existing one at
//! `/var/lib/rpm` or `/usr/lib/sysimage/rpm`, else where the root's OS keeps it (Oracle Linux
//! 8 and 9: `/var/lib/rpm`; 10: `/usr/lib/sysimage/rpm`) — and says so on every call: `--dbpath` to rpm, and to dnf (which
//! has no such option, but reads rpm's macros) a private `HOME` of gpuhost's whose
//! `.rpmmacros` defines `%_dbpath`. When it cannot tell, the root is refused (exit 2) before
//! any change. On the live system rpm's own configuration is the system's: nothing is passed.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};

use crate::osrelease::OsRelease;

/// Where rpm databases live, in the order rpm's distributions have used them.
pub const LOCATIONS: [&str; 2] = ["/var/lib/rpm", "/usr/lib/sysimage/rpm"];

/// The files that make a directory an rpm database: sqlite (rpm ≥ 4.16 default, OL9),
/// Berkeley DB (OL8), ndb.
pub(crate) const DB_FILES: [&str; 3] = ["rpmdb.sqlite", "Packages", "Packages.db"];

/// The root's rpm database: its path inside the root, or why it cannot be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbPath {
    Known(String),
    Unknown(String),
}

/// Where an Enterprise Linux release keeps its rpm database (the platform table: 8 and 9 at
/// `/var/lib/rpm`, 10 at `/usr/lib/sysimage/rpm`).
fn where_it_keeps_it(os: &OsRelease) -> Option<&'static str> {
    if !["ol", "rhel", "centos", "rocky", "almalinux"].contains(&os.id.as_str()) {
        return None;
    }
    os.major()
        .and_then(crate::platform::release)
        .map(|r| r.rpmdb)
}

/// Where the root's database is, from the database directories found in it (as paths inside
/// the root, links resolved: one database may have two names) and its os-release.
pub(crate) fn decide(root: &Path, found: &[String], os: Option<&OsRelease>) -> DbPath {
    let root = root.display();
    match found {
        [one] => return DbPath::Known(one.clone()),
        [a, b, ..] => {
            return DbPath::Unknown(format!(
                "install root {root} has two rpm databases, {a} and {b}: gpuhost cannot tell which one its OS uses"
            ))
        }
        [] => {}
    }
    match os {
        Some(os) => match where_it_keeps_it(os) {
            Some(path) => DbPath::Known(path.to_string()),
            None => DbPath::Unknown(format!(
            "install root {root} has no rpm database ({} hold none) and runs {}, whose rpm database location gpuhost does not know",
            LOCATIONS.join(", "),
            os.pretty_name
        )),
        },
        None => DbPath::Unknown(format!(
            "install root {root} has no rpm database ({} hold none) and no /etc/os-release to tell where its OS keeps one",
            LOCATIONS.join(", ")
        )),
    }
}

/// What to do when the database's place is unknown.
pub(crate) fn unknown_hint(root: &Path) -> String {
    format!(
        "initialise the root's rpm database where its OS keeps it (Oracle Linux 8 and 9: rpm --root {} --dbpath /var/lib/rpm --initdb; 10: --dbpath /usr/lib/sysimage/rpm), or install the OS's release package into it first",
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
        let dir = crate::fsutil::private_temp_dir("gpuhost-rpm")?;
        let file = dir.join(".rpmmacros");
        crate::fsutil::write_atomic(&file, macros(dbpath).as_bytes(), 0o600)
            .with_context(|| format!("writing {} (rpm's macros for dnf)", file.display()))?;
        *made = Some(dir.clone());
        Ok(dir)
    }
}

impl Drop for MacroHome {
    fn drop(&mut self) {
        if let Ok(made) = self.0.get_mut() {
            if let Some(d) = made.take() {
                crate::fsutil::remove_temp_dir(&d);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Host;

    fn locate(h: &Host) -> DbPath {
        match h.rpm_dbpath() {
            Ok(p) => DbPath::Known(p.to_string()),
            Err(e) => DbPath::Unknown(format!("{e:#}")),
        }
    }

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
        let h = Host::new(t.path())?;
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
