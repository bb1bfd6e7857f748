//! The host being acted on: the live system (`/`) or an install root.
//!
//! In an install root, rpm, dnf and systemctl are pointed at the root, and dnf reads only the
//! root's repo files and `dnf.conf`: `file://` URLs in the root's repo files are rewritten to
//! resolve inside the root. Every file gpuhost itself reads or writes on the host goes through
//! the methods here, which resolve paths inside the root ([`crate::rootfs`]): a symlink in
//! the root never leads gpuhost to a file of the build host.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::cmd::Cmd;
use crate::rootfs::{Kind, Resolver, RootFs};
use crate::rpmdb::{DbPath, MacroHome};

#[derive(Clone, Debug)]
pub struct Host {
    root: PathBuf,
    live: bool,
    /// `--releasever` for dnf in an install root (the OS major version).
    releasever: Option<String>,
    /// `--forcearch` for dnf in an install root of another architecture than this machine's.
    forcearch: Option<String>,
    fs: Arc<RootFs>,
    /// `apply --bundle`: every dnf command uses the bundle's repo and no other.
    bundle: Option<BundleRepo>,
    /// In an install root: where its rpm database is ([`crate::rpmdb`]).
    rpmdb: DbPath,
    /// dnf's `HOME` that tells it so, made on first use.
    macro_home: Arc<MacroHome>,
}

/// The repo of a verified bundle (`gpuhost apply --bundle`), the only repo dnf may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleRepo {
    /// The repo directory (with `repodata/`), a path on the machine gpuhost runs on (not
    /// inside the root: the bundle is the build host's own file, like a profile).
    pub dir: PathBuf,
    /// Check package signatures against `gpgkeys`.
    pub gpgcheck: bool,
    /// Key files carried in the bundle.
    pub gpgkeys: Vec<PathBuf>,
    /// The driver set's folder the bundle carries (NVIDIA's repo metadata and keys, gpuhost's
    /// cache manifest; its packages are in `dir`), when it carries one.
    pub driver_meta: Option<PathBuf>,
}

/// gpuhost's `$TMPDIR` (where `apply --bundle` unpacks a tarball) is a directory of the build
/// host: the scriptlets and DKMS that run chrooted in an install root would find it missing
/// there, so commands acting in a root do not inherit it.
const HOST_ONLY_ENV: &str = "TMPDIR";

/// The repo id dnf knows the bundle's repo by.
pub const BUNDLE_REPO_ID: &str = "gpuhost-bundle";

impl BundleRepo {
    /// dnf options that disable every configured repo and use only this one.
    pub(crate) fn dnf_options(&self) -> Vec<String> {
        let id = BUNDLE_REPO_ID;
        let mut out = vec![
            "--disablerepo=*".to_string(),
            format!("--repofrompath={id},{}", file_url(&self.dir)),
            format!("--enablerepo={id}"),
            format!("--setopt={id}.gpgcheck={}", u8::from(self.gpgcheck)),
            format!("--setopt={id}.repo_gpgcheck=0"),
            // A bundle rebuilt at the same path must not be read from dnf's cache.
            format!("--setopt={id}.metadata_expire=0"),
        ];
        if !self.gpgkeys.is_empty() {
            let keys: Vec<String> = self.gpgkeys.iter().map(|k| file_url(k)).collect();
            out.push(format!("--setopt={id}.gpgkey={}", keys.join(",")));
        }
        out
    }
}

/// A `file://` URL of a path, percent-encoded: dnf splits `baseurl` and `gpgkey` on commas and
/// white space, so a bundle on a USB stick labelled `GPU BUNDLE` needs `%20`.
pub fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Host {
    /// `root` = `/` is the live system; anything else is an install root, which must exist.
    pub fn new(root: &Path) -> Result<Self> {
        let canonical = root.canonicalize().map_err(|e| {
            crate::invalid!(
                "install root {} cannot be used: {e}; --root takes an existing Oracle Linux install root (a tree with etc/os-release and an rpm database, such as an image being built), not an empty directory to fill",
                root.display()
            )
        })?;
        if !canonical.is_dir() {
            return Err(crate::invalid!(
                "install root {} is not a directory; pass a directory to --root",
                root.display()
            ));
        }
        let live = canonical == Path::new("/");
        let fs = RootFs::open(&canonical, Resolver::Kernel).map_err(|e| {
            crate::invalid!(
                "install root {} cannot be opened: {e}; pass a directory you can read to --root",
                root.display()
            )
        })?;
        let mut host = Host {
            root: canonical,
            live,
            releasever: None,
            forcearch: None,
            fs: Arc::new(fs),
            bundle: None,
            rpmdb: DbPath::Known(crate::rpmdb::LOCATIONS[0].to_string()),
            macro_home: Arc::new(MacroHome::default()),
        };
        if !live {
            host.rpmdb = host.locate_rpmdb();
        }
        Ok(host)
    }

    /// Where the install root's rpm database is ([`crate::rpmdb`]): an existing one, else
    /// where its OS keeps it.
    fn locate_rpmdb(&self) -> DbPath {
        let mut found: Vec<String> = Vec::new();
        for dir in crate::rpmdb::LOCATIONS {
            let has_db = crate::rpmdb::DB_FILES
                .iter()
                .any(|f| self.kind(format!("{dir}/{f}")) == Some(Kind::File));
            if !has_db {
                continue;
            }
            // `/var/lib/rpm` may be a link to `/usr/lib/sysimage/rpm` (one database, two names).
            let inside = self
                .real_path(dir)
                .ok()
                .and_then(|p| {
                    p.strip_prefix(&self.root)
                        .ok()
                        .map(|r| Path::new("/").join(r))
                })
                .map_or_else(|| dir.to_string(), |p| p.display().to_string());
            if !found.contains(&inside) {
                found.push(inside);
            }
        }
        let os = self
            .read_opt("/etc/os-release")
            .ok()
            .flatten()
            .map(|t| crate::osrelease::OsRelease::parse(&t));
        crate::rpmdb::decide(&self.root, &found, os.as_ref())
    }

    /// In an install root, where its rpm database is, as a path inside the root (rpm's
    /// `--dbpath`); invalid input (exit 2) when gpuhost cannot tell. `apply` and `plan` ask
    /// before any change. The live system's is `/var/lib/rpm` (rpm is not told: its own
    /// configuration is the system's).
    pub fn rpm_dbpath(&self) -> Result<&str> {
        match &self.rpmdb {
            DbPath::Known(p) => Ok(p),
            DbPath::Unknown(why) => Err(crate::error::as_invalid(crate::error::hinted(
                why.clone(),
                crate::rpmdb::unknown_hint(&self.root),
            ))),
        }
    }

    pub fn set_releasever(&mut self, v: impl Into<String>) {
        self.releasever = Some(v.into());
    }

    /// dnf resolves for `arch` (an install root of another architecture: `--forcearch`).
    pub fn set_forcearch(&mut self, arch: impl Into<String>) {
        self.forcearch = Some(arch.into());
    }

    /// From now on dnf uses only the bundle's repo.
    pub fn set_bundle(&mut self, bundle: BundleRepo) {
        self.bundle = Some(bundle);
    }

    /// The bundle's repo, when packages come from a bundle.
    pub fn bundle(&self) -> Option<&BundleRepo> {
        self.bundle.as_ref()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True for the running system; false for an install root, where live-only actions
    /// (restarts, module loading, reboots, NVML) are deferred.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// A path on the host as the build host names it (`/etc/os-release` →
    /// `<root>/etc/os-release`), for messages and for the arguments of external commands that
    /// act on the root themselves (rpm, systemctl). Not resolved: never open it with
    /// `std::fs` — use the methods below, which resolve inside the root.
    pub fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        let mut out = self.root.clone();
        for c in p.as_ref().components() {
            if let Component::Normal(s) = c {
                out.push(s);
            }
        }
        out
    }

    /// The path resolution in use (`openat2`, or user space on kernels without it).
    pub fn resolver(&self) -> Resolver {
        self.fs.resolver()
    }

    /// Read a text file on the host; `Ok(None)` when it does not exist.
    pub fn read_opt(&self, p: impl AsRef<Path>) -> Result<Option<String>> {
        let p = p.as_ref();
        match self.read_bytes_opt(p)? {
            None => Ok(None),
            Some(b) => String::from_utf8(b)
                .map(Some)
                .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", self.path(p).display())),
        }
    }

    /// Read one of gpuhost's JSON record files (`/var/lib/gpuhost/*.json`); `Ok(None)` when it
    /// does not exist. A file that does not parse is an error naming it and `fix`, what to do.
    pub fn read_json_opt<T: serde::de::DeserializeOwned>(
        &self,
        p: impl AsRef<Path>,
        fix: &str,
    ) -> Result<Option<T>> {
        let p = p.as_ref();
        match self.read_bytes_opt(p)? {
            None => Ok(None),
            // Refused, never guessed at: exit 2, like every record file gpuhost cannot read.
            Some(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| crate::invalid!("{} is corrupt ({e}); {fix}", self.path(p).display())),
        }
    }

    /// Write a JSON record file atomically (pretty-printed, as people read them). A file that
    /// already holds exactly this, with this mode, is left alone: a converged apply rewrites nothing (no fsync).
    pub fn write_json<T: serde::Serialize>(
        &self,
        p: impl AsRef<Path>,
        value: &T,
        mode: u32,
    ) -> Result<()> {
        let p = p.as_ref();
        let data = serde_json::to_vec_pretty(value)?;
        if self.mode(p) == Some(mode) && self.read_bytes_opt(p)?.as_deref() == Some(data.as_slice())
        {
            return Ok(());
        }
        self.write_atomic(p, &data, mode)
    }

    /// Read a file on the host; `Ok(None)` when it does not exist.
    pub fn read_bytes_opt(&self, p: impl AsRef<Path>) -> Result<Option<Vec<u8>>> {
        let p = p.as_ref();
        self.fs.read_opt(p).map_err(|e| self.read_error(p, e))
    }

    /// A read error: a special file where a regular one is expected is invalid input (exit 2),
    /// anything else an error naming the file.
    fn read_error(&self, p: &Path, e: std::io::Error) -> anyhow::Error {
        if e.kind() == std::io::ErrorKind::InvalidInput {
            crate::invalid!("{e}; replace it with a regular file")
        } else {
            anyhow::Error::new(e).context(format!("reading {}", self.path(p).display()))
        }
    }

    /// At most the first `n` bytes of a file on the host; `Ok(None)` when it does not exist.
    /// For files whose every byte costs: a sysfs PCI `config` file is read from the device
    /// dword by dword, so reading all 4 KiB of it makes a thousand config-space accesses
    /// (milliseconds per device; tens under a hypervisor that traps each one).
    pub fn read_head_opt(&self, p: impl AsRef<Path>, n: usize) -> Result<Option<Vec<u8>>> {
        let p = p.as_ref();
        self.fs
            .read_head_opt(p, n)
            .map_err(|e| self.read_error(p, e))
    }

    /// True when something exists at `p` (symlinks followed inside the root).
    pub fn exists(&self, p: impl AsRef<Path>) -> bool {
        self.fs.kind(p.as_ref()).is_some()
    }

    /// True when `p` is a directory (symlinks followed inside the root).
    pub fn is_dir(&self, p: impl AsRef<Path>) -> bool {
        self.fs.kind(p.as_ref()) == Some(Kind::Dir)
    }

    /// What is at `p` itself, a symlink not followed; `None` when nothing is.
    pub fn kind_nofollow(&self, p: impl AsRef<Path>) -> Option<Kind> {
        self.fs.kind_nofollow(p.as_ref())
    }

    /// What `p` resolves to; `None` when nothing (or a dangling symlink) is there.
    pub fn kind(&self, p: impl AsRef<Path>) -> Option<Kind> {
        self.fs.kind(p.as_ref())
    }

    /// The first link on the way to `p` that leads out of the root, if any (see
    /// [`RootFs::escaping_link`]): the link, its target as written, and where the build host
    /// resolves it.
    pub fn escaping_link(
        &self,
        p: impl AsRef<Path>,
    ) -> Result<Option<(PathBuf, PathBuf, Option<PathBuf>)>> {
        Ok(self.fs.escaping_link(p.as_ref())?)
    }

    /// Owner (uid) and permission bits of `p` in the root; `None` when it is not there.
    pub fn owner_mode(&self, p: impl AsRef<Path>) -> Option<(u32, u32)> {
        self.fs.owner_mode(p.as_ref()).ok()
    }

    /// Permission bits of the file at `p`, if it exists.
    pub fn mode(&self, p: impl AsRef<Path>) -> Option<u32> {
        self.fs.mode(p.as_ref()).ok()
    }

    /// Size, mtime and inode of the file at `p` (see [`RootFs::stamp`]), if it exists.
    pub fn stamp(&self, p: impl AsRef<Path>) -> Option<(u64, i64, i64, u64)> {
        self.fs.stamp(p.as_ref()).ok()
    }

    /// The target written in the symlink `p`.
    pub fn read_link(&self, p: impl AsRef<Path>) -> Result<PathBuf> {
        let p = p.as_ref();
        self.fs
            .read_link(p)
            .with_context(|| format!("reading the link {}", self.path(p).display()))
    }

    /// Names in the directory `p`, sorted; empty when it does not exist.
    pub fn list_dir(&self, p: impl AsRef<Path>) -> Result<Vec<String>> {
        let p = p.as_ref();
        Ok(self
            .fs
            .list_dir(p)
            .with_context(|| format!("reading {}", self.path(p).display()))?
            .unwrap_or_default())
    }

    /// Names in `p` starting with `prefix`, sorted; empty when `p` cannot be read.
    pub fn files_with_prefix(&self, p: impl AsRef<Path>, prefix: &str) -> Vec<String> {
        self.fs
            .list_dir(p.as_ref())
            .ok()
            .flatten()
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with(prefix))
            .collect()
    }

    /// Write a file atomically (parents created; a symlink at `p` replaced, not followed).
    pub fn write_atomic(&self, p: impl AsRef<Path>, data: &[u8], mode: u32) -> Result<()> {
        let p = p.as_ref();
        self.fs
            .write_atomic(p, data, mode)
            .with_context(|| format!("writing {}", self.path(p).display()))
    }

    /// `mkdir -p`.
    pub fn create_dir_all(&self, p: impl AsRef<Path>) -> Result<()> {
        let p = p.as_ref();
        self.fs
            .mkdir_all(p)
            .map(drop)
            .with_context(|| format!("creating {}", self.path(p).display()))
    }

    /// Point the symlink `link` at `target`, atomically.
    pub fn symlink_atomic(&self, target: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        let link = link.as_ref();
        self.fs
            .symlink_atomic(target.as_ref(), link)
            .with_context(|| format!("creating the link {}", self.path(link).display()))
    }

    /// Rename a file or directory inside the root (parents of `to` made); an error on
    /// different filesystems (`EXDEV`, [`std::io::ErrorKind::CrossesDevices`]).
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let (from, to) = (from.as_ref(), to.as_ref());
        self.fs.rename(from, to).with_context(|| {
            format!(
                "renaming {} to {}",
                self.path(from).display(),
                self.path(to).display()
            )
        })
    }

    /// Remove a file or symlink; `false` when there was none.
    pub fn remove_file(&self, p: impl AsRef<Path>) -> Result<bool> {
        let p = p.as_ref();
        self.fs
            .remove_file(p)
            .with_context(|| format!("removing {}", self.path(p).display()))
    }

    /// Remove a directory tree inside the root, links not followed; `false` when absent.
    pub fn remove_tree(&self, p: impl AsRef<Path>) -> Result<bool> {
        let p = p.as_ref();
        self.fs
            .remove_tree(p)
            .with_context(|| format!("removing {}", self.path(p).display()))
    }

    /// Open (creating) a regular file for reading and writing; a symlink there is refused.
    pub fn open_rw_create(&self, p: impl AsRef<Path>, mode: u32) -> Result<std::fs::File> {
        let p = p.as_ref();
        self.fs.open_rw_create(p, mode).with_context(|| {
            format!(
                "opening {} (it must be a regular file, not a symlink)",
                self.path(p).display()
            )
        })
    }

    /// The build-host path `p` resolves to inside the root, for external commands (dnf) that
    /// resolve paths on the build host but must read what gpuhost reads. Where `p` does not
    /// exist yet, the deepest directory on the way that does, resolved, with the rest
    /// appended. A symlink on the way that leads nowhere inside the root is refused: dnf would
    /// follow it on the build host.
    pub fn real_path(&self, p: impl AsRef<Path>) -> Result<PathBuf> {
        let p = p.as_ref();
        if let Ok(r) = self.fs.real_path(p) {
            return Ok(r);
        }
        let comps: Vec<&std::ffi::OsStr> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s),
                _ => None,
            })
            .collect();
        let mut resolved = self.root.clone();
        let mut prefix = PathBuf::from("/");
        for (i, c) in comps.iter().enumerate() {
            prefix.push(c);
            match self.fs.real_path(&prefix) {
                Ok(r) => resolved = r,
                Err(_) => {
                    if self.kind_nofollow(&prefix) == Some(Kind::Symlink) {
                        let target = self.read_link(&prefix)?;
                        return Err(crate::error::hinted(
                            format!(
                                "{} is a symlink to {}, which does not exist inside the root {}",
                                self.path(&prefix).display(),
                                target.display(),
                                self.root.display()
                            ),
                            "symlinks in an install root resolve inside it: make the link point at a path inside the root, or copy (or bind-mount) the directory into the root",
                        ));
                    }
                    for rest in &comps[i..] {
                        resolved.push(rest);
                    }
                    return Ok(resolved);
                }
            }
        }
        Ok(resolved)
    }

    /// In an install root, refuse (exit 2) before any change when a directory that rpm, dnf,
    /// `systemctl --root`, depmod or the driver swap write in ([`TOOL_DIRS`]) leads them out of
    /// the root: they resolve symlinks on the build host, not inside the root. Links that
    /// resolve to the same place both ways (relative links that stay inside) are fine.
    pub fn check_tool_dirs(&self) -> Result<()> {
        if self.live {
            return Ok(());
        }
        for dir in TOOL_DIRS {
            let found = self.fs.escaping_link(Path::new(dir)).map_err(|e| {
                crate::invalid!(
                    "{} cannot be checked: {e}; rpm, dnf and systemctl write there, so it must resolve inside the root {}",
                    self.path(dir).display(),
                    self.root.display()
                )
            })?;
            if let Some((link, target, on_host)) = found {
                let lands = match on_host {
                    Some(h) => format!("to {}", h.display()),
                    None => "to nothing".to_string(),
                };
                return Err(crate::invalid!(
                    "{} is a symlink to {} that rpm, dnf and systemctl would follow on the build host, {lands}, outside the install root {} (they write {dir} there); make it a directory of the root, or a relative link that stays inside the root",
                    self.path(&link).display(),
                    target.display(),
                    self.root.display()
                ));
            }
        }
        Ok(())
    }

    /// `rpm`, acting on this host's rpm database: in an install root, the root's own
    /// (`--dbpath`, whatever the build host's rpm believes; `/var/lib/rpm` when it cannot be
    /// told, which `apply` refuses before any change).
    pub fn rpm(&self) -> Cmd {
        let cmd = Cmd::new("rpm");
        if self.live {
            return cmd;
        }
        let dbpath = match &self.rpmdb {
            DbPath::Known(p) => p.as_str(),
            DbPath::Unknown(_) => crate::rpmdb::LOCATIONS[0],
        };
        cmd.arg("--root")
            .arg(&self.root)
            .arg("--dbpath")
            .arg(dbpath)
            .env_remove(HOST_ONLY_ENV)
    }

    /// `program` run on the host: as is on the live system; in an install root chrooted into it,
    /// in a private mount namespace with the root's own `/proc` (`unshare --fork --pid
    /// --mount-proc=ROOT/proc chroot ROOT program`), which DKMS needs and which disappears with
    /// the command. The root needs `/dev` (image builders bind-mount it; test roots have
    /// `/dev/null` and `/dev/fd`).
    pub fn in_root(&self, program: &str) -> Cmd {
        if self.live {
            return Cmd::new(program);
        }
        Cmd::new("unshare")
            .env_remove(HOST_ONLY_ENV)
            .args(["--fork", "--pid"])
            .arg(format!("--mount-proc={}", self.path("/proc").display()))
            .arg("chroot")
            .arg(&self.root)
            .arg(program)
    }

    /// `dnf -y`, acting on this host with only its own repositories (only the bundle's, when
    /// packages come from a bundle).
    pub fn dnf(&self) -> Result<Cmd> {
        let mut cmd = Cmd::new("dnf").args(["-y", "--quiet"]);
        if self.live {
            // gpuhost's own transactions install exact versions and move the NVIDIA branch
            // lock themselves (EL10, `driver::versionlock`): the plugin must not hide them.
            cmd = cmd.arg("--disableplugin=versionlock");
            if let Some(b) = &self.bundle {
                return Ok(cmd.args(b.dnf_options()));
            }
            let texts = self.repo_texts()?;
            return Ok(cmd
                .args(self.gone_cache_repos(&texts))
                .args(self.mirror_options(&texts)?));
        }
        // dnf has no option for the rpm database; it reads rpm's macros, ~/.rpmmacros last.
        let home = self.macro_home.dir(self.rpm_dbpath()?)?;
        cmd = cmd
            .env_remove(HOST_ONLY_ENV)
            .env("HOME", home)
            .arg(format!("--installroot={}", self.root.display()))
            .arg(format!(
                "--setopt=reposdir={}",
                self.real_path("/etc/yum.repos.d")?.display()
            ))
            .arg(format!(
                "--config={}",
                self.real_path("/etc/dnf/dnf.conf")?.display()
            ))
            .arg("--noplugins");
        if let Some(v) = &self.releasever {
            cmd = cmd.arg(format!("--releasever={v}"));
        }
        if let Some(a) = &self.forcearch {
            cmd = cmd.arg(format!("--forcearch={a}"));
        }
        if let Some(b) = &self.bundle {
            // Every repo of the root is disabled: its file:// URLs are not resolved.
            return Ok(cmd.args(b.dnf_options()));
        }
        let texts = self.repo_texts()?;
        let mirrored = self.mirror_options(&texts)?;
        cmd = cmd.args(self.gone_cache_repos(&texts));
        for (id, key, url) in self.file_urls(&texts)? {
            let copied = format!("--setopt={id}.baseurl=");
            if key == "baseurl" && mirrored.contains(&copied) {
                continue;
            }
            cmd = cmd.arg(format!("--setopt={id}.{key}={url}"));
        }
        Ok(cmd.args(mirrored))
    }

    /// dnf's options that make it copy every package it installs from a `file://` mirror (an
    /// NFS export, a synced directory, a USB stick) into its cache in the root, checked against
    /// the repo's metadata, before the rpm transaction's first write — as it does for http
    /// mirrors. dnf reads a `file://` repo's packages in place, so a mirror that goes away
    /// inside the transaction (an NFS hiccup, an unmount, a sync that swaps the directory)
    /// stops it half-way; a repo given by a mirror list is not local to dnf, whatever the
    /// list's URLs are. So each such repo's `baseurl` becomes a mirror list of the same URLs,
    /// kept in [`MIRROR_LISTS`] in the root (a fixed path: dnf names its cache by it). Its
    /// metadata is then cached as an http mirror's is (`metadata_expire`), and refreshed
    /// before a package is called absent, as for any repo (`Ctx::refresh_metadata`).
    ///
    /// The repo of NVIDIA's local repo package ([`local_repo_dir`]) is already on the root's
    /// own disk, unpacked by that package: it is left as it is.
    fn mirror_options(&self, texts: &[String]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for text in texts {
            for (id, urls) in file_mirrors(text) {
                let urls = urls
                    .into_iter()
                    .map(|p| {
                        let p = if self.live {
                            PathBuf::from(p)
                        } else {
                            self.real_path(p)?
                        };
                        // dnf's variables (`$basearch`) stay for dnf to expand.
                        Ok(file_url(&p).replace("%24", "$"))
                    })
                    .collect::<Result<Vec<String>>>()?;
                let list = format!("{MIRROR_LISTS}/{id}.list");
                let content = format!("{}\n", urls.join("\n"));
                if self.read_opt(&list)?.as_deref() != Some(content.as_str()) {
                    self.write_atomic(&list, content.as_bytes(), 0o644)?;
                }
                out.push(format!("--setopt={id}.baseurl="));
                out.push(format!(
                    "--setopt={id}.mirrorlist={}",
                    file_url(&self.real_path(&list)?)
                ));
            }
        }
        Ok(out)
    }

    /// `systemctl`, offline against the root when not live.
    pub fn systemctl(&self) -> Cmd {
        let cmd = Cmd::new("systemctl");
        if self.live {
            cmd
        } else {
            cmd.arg(format!("--root={}", self.root.display()))
        }
    }

    /// The texts of the root's repo files (`/etc/yum.repos.d/*.repo`), in name order: read once
    /// per dnf command, for its `file://` rewrites and its mirror lists.
    fn repo_texts(&self) -> Result<Vec<String>> {
        let dir = Path::new("/etc/yum.repos.d");
        let mut names: Vec<String> = self
            .list_dir(dir)?
            .into_iter()
            .filter(|n| n.ends_with(".repo"))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            if let Some(text) = self.read_opt(dir.join(&name))? {
                out.push(text);
            }
        }
        Ok(out)
    }

    /// `file://` URLs in the root's repo files, rewritten to point inside the root.
    /// `--disablerepo` for each repo whose `baseurl` is a folder of gpuhost's own driver cache
    /// ([`DRIVER_CACHE`]) that holds no repo any more (removed by hand, a clean-up of
    /// /var/lib): dnf would stop every transaction at its metadata, while it can give nothing
    /// and the step that wrote it puts the set it needs back (issue 53, item 5).
    fn gone_cache_repos(&self, texts: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for text in texts {
            for (id, key, value) in repo_entries(text) {
                let Some(dir) = value
                    .strip_prefix("file://")
                    .map(|d| d.trim_end_matches('/'))
                else {
                    continue;
                };
                if key == "baseurl"
                    && in_driver_cache(dir)
                    && !self.exists(format!("{dir}/repodata/repomd.xml"))
                {
                    tracing::warn!("{dir} (gpuhost's cached driver set, repo {id}) is gone: dnf is not given that repo; the driver step puts a set back");
                    out.push(format!("--disablerepo={id}"));
                }
            }
        }
        out
    }

    fn file_urls(&self, texts: &[String]) -> Result<Vec<(String, &'static str, String)>> {
        let mut out = Vec::new();
        for text in texts {
            for (id, key, value) in repo_entries(text) {
                if key != "baseurl" && key != "gpgkey" {
                    continue;
                }
                let rewritten = value
                    .split([' ', ','])
                    .filter(|u| !u.is_empty())
                    .map(|u| match u.strip_prefix("file://") {
                        Some(p) => Ok(format!("file://{}", self.real_path(p)?.display())),
                        None => Ok(u.to_string()),
                    })
                    .collect::<Result<Vec<String>>>()?;
                if value.contains("file://") {
                    let k = if key == "baseurl" {
                        "baseurl"
                    } else {
                        "gpgkey"
                    };
                    out.push((id.to_string(), k, rewritten.join(",")));
                }
            }
        }
        Ok(out)
    }
}

/// The directories that the tools gpuhost runs against an install root write in: dnf's cache,
/// logs, history and module state, the rpm database, `systemctl --root`'s unit links, depmod's
/// module indexes, the driver swap's scratch directory (`gpuhost_steps::transaction::swap::SCRATCH`), the
/// first converge's (`gpuhost_steps::transaction::ahead::SCRATCH`), the mirror lists and the package copies.
pub const TOOL_DIRS: &[&str] = &[
    "/var/cache/dnf",
    "/var/log",
    "/var/lib/dnf",
    "/var/lib/rpm",
    "/etc/dnf/modules.d",
    "/etc/dnf/modules.defaults.d",
    "/etc/systemd/system",
    "/lib/modules",
    "/usr/lib/modules",
    "/var/cache/gpuhost/driver-swap",
    "/var/cache/gpuhost/download",
    MIRROR_LISTS,
    "/var/cache/gpuhost/packages",
];

/// Where the mirror lists of `file://` repos are kept, in the root ([`Host::dnf`]).
pub const MIRROR_LISTS: &str = "/var/cache/gpuhost/mirrors";

/// True for the directory NVIDIA's local repo package unpacks its repo into, on the root's own
/// disk: `/var/cuda-repo-rhel9-13-0-local`, `/var/nvidia-driver-local-repo-rhel10-580.126.09`
/// (the package's name; see `gpuhost_nvidia::localrepo`).
pub fn local_repo_dir(path: &str) -> bool {
    let Some(name) = path.trim_end_matches('/').strip_prefix("/var/") else {
        return false;
    };
    !name.contains('/')
        && (name.starts_with("nvidia-driver-local-repo-")
            || (name.starts_with("cuda-repo-") && name.contains("-local")))
}

/// gpuhost's cache of NVIDIA's driver set (`driver.keep_local_repo = false`), in the root: one
/// repo folder per local repo package it was read from (`gpuhost_steps::transaction::cache`).
pub const DRIVER_CACHE: &str = "/var/lib/gpuhost/driver-repo";

/// True for a repo folder of gpuhost's driver cache ([`DRIVER_CACHE`]): on the root's own
/// disk, written and checked by gpuhost, so dnf reads it in place as it does NVIDIA's local repo.
pub fn in_driver_cache(path: &str) -> bool {
    path.strip_prefix(DRIVER_CACHE)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| {
            let name = name.trim_end_matches('/');
            !name.is_empty() && !name.contains('/') && !name.starts_with('.')
        })
}

/// The repos of a `.repo` file whose packages dnf would read in place: enabled or not, a
/// `baseurl` of `file://` URLs only, no mirror list or metalink, not NVIDIA's local repo
/// ([`local_repo_dir`]) nor gpuhost's driver cache ([`in_driver_cache`]). Their ids and the URLs' paths.
fn file_mirrors(text: &str) -> Vec<(&str, Vec<&str>)> {
    let mut repos: Vec<(&str, Vec<&str>, bool)> = Vec::new();
    for (id, key, value) in repo_entries(text) {
        if repos.last().is_none_or(|r| r.0 != id) {
            repos.push((id, Vec::new(), false));
        }
        let Some(r) = repos.last_mut() else { continue };
        match key {
            "baseurl" => r.1 = value.split([' ', ',']).filter(|u| !u.is_empty()).collect(),
            "mirrorlist" | "metalink" if !value.is_empty() => r.2 = true,
            _ => {}
        }
    }
    repos
        .into_iter()
        .filter(|(_, urls, listed)| !listed && !urls.is_empty())
        .filter_map(|(id, urls, _)| {
            let paths: Option<Vec<&str>> = urls.iter().map(|u| u.strip_prefix("file://")).collect();
            let paths = paths?;
            (!paths
                .iter()
                .any(|p| local_repo_dir(p) || in_driver_cache(p)))
            .then_some((id, paths))
        })
        .collect()
}

/// `(section, key, value)` triples of an INI-style `.repo` file.
pub fn repo_entries(text: &str) -> Vec<(&str, &str, &str)> {
    let mut section = "";
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.trim();
        } else if let Some((k, v)) = line.split_once('=') {
            out.push((section, k.trim(), v.trim()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record written again with the same content and mode is not rewritten (same inode:
    /// write_atomic would rename a new file over it); other content or mode is.
    #[test]
    fn json_records_are_rewritten_only_when_they_change() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        let f = "/var/lib/gpuhost/x.json";
        let ino = || host.stamp(f).map(|s| s.3);
        host.write_json(f, &vec!["a"], 0o644)?;
        let first = ino();
        host.write_json(f, &vec!["a"], 0o644)?;
        assert_eq!(ino(), first, "same content: left alone");
        host.write_json(f, &vec!["a"], 0o600)?;
        assert_ne!(ino(), first, "another mode: rewritten");
        let second = ino();
        host.write_json(f, &vec!["b"], 0o600)?;
        assert_ne!(ino(), second, "other content: rewritten");
        let back: Option<Vec<String>> = host.read_json_opt(f, "remove it")?;
        assert_eq!(back, Some(vec!["b".to_string()]));
        std::fs::write(host.path(f), "{")?;
        let err = host
            .read_json_opt::<Vec<String>>(f, "remove it")
            .err()
            .map(|e| format!("{e:#}"));
        assert!(
            err.is_some_and(|e| e.contains("x.json is corrupt (") && e.ends_with("; remove it"))
        );
        let err = host.read_json_opt::<Vec<String>>(f, "remove it").err();
        assert!(
            err.as_ref().is_some_and(crate::error::is_invalid),
            "{err:?}"
        );
        Ok(())
    }

    #[test]
    fn paths_stay_inside_the_root() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        assert!(!host.is_live());
        let p = host.path("/etc/../../os-release");
        assert!(p.starts_with(host.root()), "{}", p.display());
        Ok(())
    }

    #[test]
    fn dnf_reads_only_the_roots_repos_with_file_urls_inside_the_root() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("etc/yum.repos.d"))?;
        std::fs::write(
            dir.path().join("etc/yum.repos.d/ol8.repo"),
            "[ol8_baseos_latest]\nname=x\nbaseurl=file:///srv/repos/ol8_baseos_latest\n\n[web]\nbaseurl=https://yum.oracle.com/x\n",
        )?;
        std::fs::write(
            dir.path().join("etc/os-release"),
            "ID=ol\nVERSION_ID=8.10\n",
        )?;
        let mut host = Host::new(dir.path())?;
        host.set_releasever("8");
        let argv = host.dnf()?.argv();
        let root = host.root().display().to_string();
        assert!(argv.contains(&format!("--installroot={root}")));
        assert!(argv.contains(&format!("--setopt=reposdir={root}/etc/yum.repos.d")));
        assert!(argv.contains(&"--releasever=8".to_string()));
        // A file:// mirror is read through a mirror list of the same URL, in the root: dnf
        // copies and checks its packages before the rpm transaction.
        let list = format!("{root}/var/cache/gpuhost/mirrors/ol8_baseos_latest.list");
        assert!(argv.contains(&"--setopt=ol8_baseos_latest.baseurl=".to_string()));
        assert!(argv.contains(&format!(
            "--setopt=ol8_baseos_latest.mirrorlist=file://{list}"
        )));
        assert_eq!(
            std::fs::read_to_string(&list)?,
            format!("file://{root}/srv/repos/ol8_baseos_latest\n")
        );
        assert!(!argv.iter().any(|a| a.contains("web.baseurl")));
        assert!(!argv.iter().any(|a| a.contains("web.mirrorlist")));
        // NVIDIA's local repo, unpacked on the root's disk by its package, stays as it is.
        std::fs::write(
            dir.path()
                .join("etc/yum.repos.d/cuda-rhel8-12-2-local.repo"),
            "[cuda-rhel8-12-2-local]\nbaseurl=file:///var/cuda-repo-rhel8-12-2-local\n",
        )?;
        let argv = host.dnf()?.argv();
        assert!(argv.contains(&format!(
            "--setopt=cuda-rhel8-12-2-local.baseurl=file://{root}/var/cuda-repo-rhel8-12-2-local"
        )));
        assert!(!argv
            .iter()
            .any(|a| a.contains("cuda-rhel8-12-2-local.mirrorlist")));
        Ok(())
    }

    #[test]
    fn file_mirrors_are_the_file_baseurls_without_a_list_and_not_nvidias_local_repo() {
        let text = "[a]\nbaseurl=file:///m/a\n[b]\nbaseurl=file:///m/b\nmirrorlist=http://x/list\n[c]\nbaseurl=https://x/c\n[d]\nbaseurl=file:///m/d1 file:///m/d2\n[e]\nbaseurl=file:///var/nvidia-driver-local-repo-rhel10-580.126.09\n[f]\nbaseurl=file:///m/f, https://x/f\n";
        assert_eq!(
            file_mirrors(text),
            vec![("a", vec!["/m/a"]), ("d", vec!["/m/d1", "/m/d2"])]
        );
        assert!(local_repo_dir("/var/cuda-repo-rhel9-13-0-local/"));
        assert!(!local_repo_dir("/var/cuda-repo-rhel9-13-0-local/sub"));
        assert!(!local_repo_dir("/srv/cuda-repo-rhel9-13-0-local"));
        assert!(!local_repo_dir("/var/cuda-repo-rhel9-13-0"));
    }

    /// rpm and dnf are told where the root's database is, whatever the build host's rpm
    /// believes (Debian's: `~/.rpmdb`); a root whose database cannot be placed refuses dnf.
    #[test]
    fn rpm_and_dnf_use_the_roots_own_rpm_database() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("etc/yum.repos.d"))?;
        std::fs::create_dir_all(dir.path().join("usr/lib/sysimage/rpm"))?;
        std::fs::write(dir.path().join("usr/lib/sysimage/rpm/rpmdb.sqlite"), "")?;
        let host = Host::new(dir.path())?;
        let argv = host.rpm().argv();
        assert!(
            argv.windows(2)
                .any(|w| w == ["--dbpath", "/usr/lib/sysimage/rpm"]),
            "{argv:?}"
        );
        let dnf = host.dnf()?;
        let home = dnf.env_value("HOME").map(PathBuf::from);
        let macros = home
            .map(|h| std::fs::read_to_string(h.join(".rpmmacros")))
            .transpose()?;
        assert!(
            macros
                .as_deref()
                .is_some_and(|m| m.contains("%_dbpath /usr/lib/sysimage/rpm\n")),
            "{macros:?}"
        );
        let bare = tempfile::tempdir()?;
        let host = Host::new(bare.path())?;
        let err = host.dnf().err();
        assert!(
            err.as_ref().is_some_and(crate::error::is_invalid),
            "{err:?}"
        );
        Ok(())
    }

    #[test]
    fn a_missing_root_is_invalid_input() {
        let err = Host::new(Path::new("/nonexistent/gpuhost-root")).err();
        assert!(
            err.as_ref().is_some_and(crate::error::is_invalid),
            "{err:?}"
        );
    }
}
