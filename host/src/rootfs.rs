//! File access inside the host's root: the one place gpuhost opens, lists, creates, renames,
//! links and removes files of the host it acts on.
//!
//! Every path is resolved *inside* the root, as if the root were `/`: an absolute symlink
//! (`/etc/docker -> /srv/docker`) or a `..` that would climb above the root stays inside it,
//! the way the kernel resolves paths for a process chrooted there. Image roots are full of
//! absolute symlinks that mean "inside the root"; followed on the build host they would make
//! gpuhost write the build host's files, or copy the build host's files into the image.
//!
//! Resolution is the kernel's: `openat2(2)` with `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`,
//! relative to a descriptor of the root opened once. Where the kernel has no `openat2`
//! (before Linux 5.6, e.g. Oracle Linux 8's RHCK 4.18) or a seccomp filter refuses it, the same
//! rules are applied component by component in user space (`openat` with `O_NOFOLLOW`, each
//! symlink read and resolved from the root again), as container runtimes do for a root being
//! built. The last component of a path that gpuhost creates, replaces or removes is never
//! followed: a symlink there is replaced (atomic writes) or refused (the lock file).
//!
//! On the live system the root is `/` and resolution is the ordinary one.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;

/// How many symlinks one resolution may follow (the kernel's limit is 40).
const MAX_LINKS: usize = 40;

/// What is at a path, without following a symlink there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// Which resolver a [`RootFs`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2(RESOLVE_IN_ROOT)`; falls back to [`Resolver::UserSpace`] when unavailable.
    Kernel,
    /// The same rules, component by component (kernels without `openat2`).
    UserSpace,
}

/// The root directory, held open, and the operations on paths inside it.
#[derive(Debug)]
pub struct RootFs {
    dir: OwnedFd,
    path: PathBuf,
    /// Set once `openat2` turned out to be missing or filtered.
    user_space: AtomicBool,
}

fn errno_io(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// A path's components inside the root: `RootDir` and `.` dropped, `..` kept.
fn components(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// `p` relative to the root (`/etc/x` → `etc/x`, `/` → `.`), for `openat2`.
fn relative(p: &Path) -> PathBuf {
    let rel: PathBuf = p
        .components()
        .filter(|c| !matches!(c, Component::RootDir | Component::Prefix(_)))
        .collect();
    if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel
    }
}

/// The parent directory and the last component of `p`, which must be a plain name.
fn split(p: &Path) -> io::Result<(PathBuf, OsString)> {
    let mut comps = components(p);
    match comps.pop_back() {
        Some(name) if name != ".." => Ok((comps.into_iter().collect(), name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not end in a file name", p.display()),
        )),
    }
}

fn kind_of(ft: FileType) -> Kind {
    match ft {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

impl RootFs {
    /// Open `root` (an existing directory) for resolution inside it.
    pub fn open(root: &Path, resolver: Resolver) -> io::Result<RootFs> {
        let dir = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno_io)?;
        Ok(RootFs {
            dir,
            path: root.to_path_buf(),
            user_space: AtomicBool::new(resolver == Resolver::UserSpace),
        })
    }

    /// The resolver in use now.
    pub fn resolver(&self) -> Resolver {
        if self.user_space.load(Ordering::Relaxed) {
            Resolver::UserSpace
        } else {
            Resolver::Kernel
        }
    }

    /// `p` under the root as the build host names it, for messages (not resolved).
    pub fn shown(&self, p: &Path) -> PathBuf {
        let mut out = self.path.clone();
        for c in p.components() {
            if let Component::Normal(s) = c {
                out.push(s);
            }
        }
        out
    }

    /// Open `p` (resolved inside the root, every symlink followed there) with `flags`.
    /// `flags` must not create: creation goes through a parent directory ([`Self::parent`]).
    fn open_in(&self, p: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        let flags = flags | OFlags::CLOEXEC;
        if !self.user_space.load(Ordering::Relaxed) {
            match rustix::fs::openat2(
                &self.dir,
                relative(p),
                flags,
                Mode::empty(),
                ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
            ) {
                // No openat2 (Linux < 5.6) or a seccomp filter that refuses it.
                Err(Errno::NOSYS) | Err(Errno::PERM) => {
                    tracing::debug!("openat2 is unavailable: resolving paths in user space");
                    self.user_space.store(true, Ordering::Relaxed);
                }
                other => return other.map_err(errno_io),
            }
        }
        let fd = self.walk(p)?;
        if flags.contains(OFlags::PATH) {
            return Ok(fd);
        }
        // Re-open the resolved object with the wanted flags, through its descriptor.
        let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        rustix::fs::openat(CWD, fd_path.as_str(), flags, Mode::empty()).map_err(errno_io)
    }

    /// User-space resolution inside the root: each component opened with `O_NOFOLLOW`, each
    /// symlink read and its target resolved again (absolute targets from the root), `..` never
    /// above the root. Returns an `O_PATH` descriptor.
    fn walk(&self, p: &Path) -> io::Result<OwnedFd> {
        let mut stack: Vec<OwnedFd> = Vec::new();
        let mut todo = components(p);
        let mut links = 0;
        while let Some(c) = todo.pop_front() {
            if c == ".." {
                stack.pop();
                continue;
            }
            let cur = stack.last().map_or(self.dir.as_fd(), |f| f.as_fd());
            let fd = rustix::fs::openat(
                cur,
                c.as_os_str(),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno_io)?;
            let st = rustix::fs::fstat(&fd).map_err(errno_io)?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                links += 1;
                if links > MAX_LINKS {
                    return Err(errno_io(Errno::LOOP));
                }
                let target =
                    rustix::fs::readlinkat(cur, c.as_os_str(), Vec::new()).map_err(errno_io)?;
                let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                if target.is_absolute() {
                    stack.clear();
                }
                for t in components(&target).into_iter().rev() {
                    todo.push_front(t);
                }
                continue;
            }
            if !todo.is_empty() && FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                return Err(errno_io(Errno::NOTDIR));
            }
            stack.push(fd);
        }
        match stack.pop() {
            Some(fd) => Ok(fd),
            None => rustix::fs::openat(
                &self.dir,
                ".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno_io),
        }
    }

    /// The directory that holds `p` (resolved inside the root) and `p`'s last component.
    fn parent(&self, p: &Path, create: bool) -> io::Result<(OwnedFd, OsString)> {
        let (dir, name) = split(p)?;
        let fd = if create {
            self.mkdir_all(&dir)?
        } else {
            self.open_in(&dir, OFlags::PATH | OFlags::DIRECTORY)?
        };
        Ok((fd, name))
    }

    /// Open the regular file at `p` for reading; `None` when nothing is there. Opened
    /// non-blocking and checked with `fstat` before any read: a FIFO, socket or device where a
    /// file is expected (`/etc/os-release` a FIFO) is refused (`InvalidInput`), never read — a
    /// FIFO without a writer would block the read forever. (`O_NONBLOCK` changes nothing for
    /// regular files, sysfs and procfs files included.)
    fn open_regular(&self, p: &Path) -> io::Result<Option<OwnedFd>> {
        let fd = match self.open_in(p, OFlags::RDONLY | OFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let st = rustix::fs::fstat(&fd).map_err(errno_io)?;
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft != FileType::RegularFile {
            let what = match ft {
                FileType::Fifo => "a FIFO",
                FileType::Socket => "a socket",
                FileType::CharacterDevice => "a character device",
                FileType::BlockDevice => "a block device",
                FileType::Directory => "a directory",
                _ => "not a regular file",
            };
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is {what}, not a regular file; gpuhost reads only regular files there",
                    self.shown(p).display()
                ),
            ));
        }
        Ok(Some(fd))
    }

    /// Read a file; `None` when it does not exist (a dangling symlink does not exist).
    pub fn read_opt(&self, p: &Path) -> io::Result<Option<Vec<u8>>> {
        let Some(fd) = self.open_regular(p)? else {
            return Ok(None);
        };
        let mut f = File::from(fd);
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(Some(buf))
    }

    /// At most the first `n` bytes of the file at `p` (fewer where it is shorter); `None`
    /// when it does not exist.
    pub fn read_head_opt(&self, p: &Path, n: usize) -> io::Result<Option<Vec<u8>>> {
        let Some(fd) = self.open_regular(p)? else {
            return Ok(None);
        };
        let mut f = File::from(fd);
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match f.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        buf.truncate(got);
        Ok(Some(buf))
    }

    /// What is at `p`, following symlinks inside the root; `None` when nothing is.
    pub fn kind(&self, p: &Path) -> Option<Kind> {
        let fd = self.open_in(p, OFlags::PATH).ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        Some(kind_of(FileType::from_raw_mode(st.st_mode)))
    }

    /// What is at `p` itself (a symlink is a symlink); `None` when nothing is.
    pub fn kind_nofollow(&self, p: &Path) -> Option<Kind> {
        if components(p).is_empty() {
            return Some(Kind::Dir);
        }
        let (dir, name) = self.parent(p, false).ok()?;
        let st = rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
        Some(kind_of(FileType::from_raw_mode(st.st_mode)))
    }

    /// Permission bits of what `p` resolves to.
    pub fn mode(&self, p: &Path) -> io::Result<u32> {
        let fd = self.open_in(p, OFlags::PATH)?;
        let st = rustix::fs::fstat(&fd).map_err(errno_io)?;
        Ok(st.st_mode & 0o7777)
    }

    /// Owner (uid) and permission bits of what `p` resolves to.
    pub fn owner_mode(&self, p: &Path) -> io::Result<(u32, u32)> {
        let fd = self.open_in(p, OFlags::PATH)?;
        let st = rustix::fs::fstat(&fd).map_err(errno_io)?;
        Ok((st.st_uid, st.st_mode & 0o7777))
    }

    /// Size, modification time (s, ns) and inode of what `p` resolves to: enough to tell that a
    /// file changed.
    pub fn stamp(&self, p: &Path) -> io::Result<(u64, i64, i64, u64)> {
        let fd = self.open_in(p, OFlags::PATH)?;
        let st = rustix::fs::fstat(&fd).map_err(errno_io)?;
        Ok((
            st.st_size as u64,
            st.st_mtime as i64,
            st.st_mtime_nsec as i64,
            st.st_ino as u64,
        ))
    }

    /// The target of the symlink at `p` (as written in the link, not resolved).
    pub fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
        let (dir, name) = self.parent(p, false)?;
        let t = rustix::fs::readlinkat(&dir, name.as_os_str(), Vec::new()).map_err(errno_io)?;
        Ok(PathBuf::from(OsStr::from_bytes(t.as_bytes())))
    }

    /// Names in the directory `p`, sorted; `None` when it does not exist.
    pub fn list_dir(&self, p: &Path) -> io::Result<Option<Vec<String>>> {
        let fd = match self.open_in(p, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut dir = rustix::fs::Dir::read_from(&fd).map_err(errno_io)?;
        let mut out = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(errno_io)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            out.push(String::from_utf8_lossy(name).into_owned());
        }
        out.sort();
        Ok(Some(out))
    }

    /// The host path `p` resolves to, every symlink followed inside the root: what an external
    /// command (dnf) must be given so that it reads the same file gpuhost does.
    pub fn real_path(&self, p: &Path) -> io::Result<PathBuf> {
        let fd = self.open_in(p, OFlags::PATH)?;
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        std::fs::read_link(link)
    }

    /// The first symlink on the way to `p` that an external command given [`Self::shown`]`(p)`
    /// would follow somewhere else than this root resolves it: rpm, dnf and `systemctl --root`
    /// resolve their paths on the build host, so an absolute link, or a `..` link that climbs
    /// out, leads them outside the root. Returns the link (inside the root), its target as
    /// written, and where the build host resolves it (`None`: nowhere). `Ok(None)` when every
    /// link on the way resolves to the same place both ways (a relative link that stays inside)
    /// or there is none; components that do not exist yet are created by the tool inside.
    pub fn escaping_link(
        &self,
        p: &Path,
    ) -> io::Result<Option<(PathBuf, PathBuf, Option<PathBuf>)>> {
        let mut prefix = PathBuf::from("/");
        for c in components(p) {
            if c == ".." {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: `..` in a directory rpm or dnf writes", p.display()),
                ));
            }
            prefix.push(&c);
            match self.kind_nofollow(&prefix) {
                None => return Ok(None),
                Some(Kind::Symlink) => {
                    let inside = self.real_path(&prefix).ok();
                    let on_host = std::fs::canonicalize(self.shown(&prefix)).ok();
                    if inside.is_none() || inside != on_host {
                        let target = self.read_link(&prefix)?;
                        return Ok(Some((prefix, target, on_host)));
                    }
                }
                Some(_) => {}
            }
        }
        Ok(None)
    }

    /// `mkdir -p` inside the root; returns the directory. A component that is a symlink is
    /// followed inside the root; a dangling one is an error (as `mkdir -p` on `/` would be).
    pub(crate) fn mkdir_all(&self, p: &Path) -> io::Result<OwnedFd> {
        let comps = components(p);
        if comps.iter().any(|c| c == "..") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: `..` in a directory gpuhost creates", p.display()),
            ));
        }
        let mut cur = self.open_in(Path::new("/"), OFlags::PATH | OFlags::DIRECTORY)?;
        let mut prefix = PathBuf::from("/");
        for c in comps {
            prefix.push(&c);
            cur = match self.open_in(&prefix, OFlags::PATH | OFlags::DIRECTORY) {
                Ok(fd) => fd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    match rustix::fs::mkdirat(&cur, c.as_os_str(), Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(errno_io(e)),
                    }
                    self.open_in(&prefix, OFlags::PATH | OFlags::DIRECTORY)
                        .map_err(|e| {
                            if e.kind() != io::ErrorKind::NotFound {
                                return e;
                            }
                            let target = rustix::fs::readlinkat(&cur, c.as_os_str(), Vec::new())
                                .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned())
                                .unwrap_or_default();
                            io::Error::new(
                                io::ErrorKind::NotFound,
                                format!(
                                    "{} is a symlink to {target}, which does not exist inside the root {}",
                                    self.shown(&prefix).display(),
                                    self.path.display()
                                ),
                            )
                        })?
                }
                Err(e) => return Err(e),
            };
        }
        Ok(cur)
    }

    /// Write `data` to `p` atomically: a temp file in the same directory, fsync, rename over
    /// `p`, fsync the directory. Parent directories are created. A symlink at `p` is replaced
    /// by the file, never written through.
    pub fn write_atomic(&self, p: &Path, data: &[u8], mode: u32) -> io::Result<()> {
        let (dir, name) = self.parent(p, true)?;
        let mut tmp_name = OsString::from(".");
        tmp_name.push(&name);
        tmp_name.push(format!(".gpuhost-tmp.{}", std::process::id()));
        let _ = rustix::fs::unlinkat(&dir, tmp_name.as_os_str(), AtFlags::empty());
        let fd = rustix::fs::openat(
            &dir,
            tmp_name.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(errno_io)?;
        let result = (|| -> io::Result<()> {
            // The umask may have taken bits away.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(errno_io)?;
            let mut f = File::from(fd);
            f.write_all(data)?;
            f.sync_all()?;
            rustix::fs::renameat(&dir, tmp_name.as_os_str(), &dir, name.as_os_str())
                .map_err(errno_io)?;
            let _ = rustix::fs::fsync(&dir);
            Ok(())
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&dir, tmp_name.as_os_str(), AtFlags::empty());
        }
        result
    }

    /// Point the symlink `p` at `target`, atomically (a temp link renamed over `p`).
    pub fn symlink_atomic(&self, target: &Path, p: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(p, true)?;
        let mut tmp_name = OsString::from(".");
        tmp_name.push(&name);
        tmp_name.push(format!(".gpuhost-tmp.{}", std::process::id()));
        let _ = rustix::fs::unlinkat(&dir, tmp_name.as_os_str(), AtFlags::empty());
        rustix::fs::symlinkat(target, &dir, tmp_name.as_os_str()).map_err(errno_io)?;
        rustix::fs::renameat(&dir, tmp_name.as_os_str(), &dir, name.as_os_str()).map_err(|e| {
            let _ = rustix::fs::unlinkat(&dir, tmp_name.as_os_str(), AtFlags::empty());
            errno_io(e)
        })
    }

    /// Rename `from` to `to` (a file or a directory; parents of `to` created), neither path's
    /// links followed out of the root. `EXDEV` when they lie on different filesystems.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (src_dir, src_name) = self.parent(from, false)?;
        let (dst_dir, dst_name) = self.parent(to, true)?;
        rustix::fs::renameat(
            &src_dir,
            src_name.as_os_str(),
            &dst_dir,
            dst_name.as_os_str(),
        )
        .map_err(errno_io)?;
        let _ = rustix::fs::fsync(&dst_dir);
        Ok(())
    }

    /// Remove the file (or symlink) `p`; `false` when there was none.
    pub fn remove_file(&self, p: &Path) -> io::Result<bool> {
        let (dir, name) = match self.parent(p, false) {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        match rustix::fs::unlinkat(&dir, name.as_os_str(), AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(errno_io(e)),
        }
    }

    /// Remove `p` and everything under it, never following a symlink (a link is removed, not
    /// its target); `false` when there was nothing.
    pub fn remove_tree(&self, p: &Path) -> io::Result<bool> {
        match self.kind_nofollow(p) {
            None => Ok(false),
            Some(Kind::Dir) => {
                for name in self.list_dir(p)?.unwrap_or_default() {
                    self.remove_tree(&p.join(name))?;
                }
                let (dir, name) = self.parent(p, false)?;
                rustix::fs::unlinkat(&dir, name.as_os_str(), AtFlags::REMOVEDIR)
                    .map_err(errno_io)?;
                Ok(true)
            }
            Some(_) => self.remove_file(p),
        }
    }

    /// Open (creating) the regular file `p` for reading and writing, for a lock. A symlink at
    /// `p` is refused (`ELOOP`), never followed.
    pub fn open_rw_create(&self, p: &Path, mode: u32) -> io::Result<File> {
        let (dir, name) = self.parent(p, true)?;
        let fd = rustix::fs::openat(
            &dir,
            name.as_os_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(errno_io)?;
        let st = rustix::fs::fstat(&fd).map_err(errno_io)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", self.shown(p).display()),
            ));
        }
        Ok(File::from(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::os::unix::fs::symlink;

    /// A root with the symlinks of every case, beside an "outside" directory standing for the
    /// build host's tree.
    struct Case {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    fn case() -> io::Result<Case> {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("etc"))?;
        std::fs::create_dir_all(root.join("srv/docker"))?;
        std::fs::create_dir_all(&outside)?;
        std::fs::write(outside.join("secret"), "build host secret\n")?;
        std::fs::write(root.join("srv/docker/secret"), "inside\n")?;
        Ok(Case {
            _tmp: tmp,
            root,
            outside,
        })
    }

    fn fs(c: &Case, r: Resolver) -> io::Result<RootFs> {
        RootFs::open(&c.root, r)
    }

    fn snapshot(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in walk_dir(dir) {
            out.push(e);
        }
        out.sort();
        out
    }

    fn walk_dir(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                let content = std::fs::read_to_string(&p).unwrap_or_default();
                out.push(format!("{} {content}", p.display()));
                if p.is_dir() && !p.is_symlink() {
                    out.extend(walk_dir(&p));
                }
            }
        }
        out
    }

    #[rstest]
    fn a_head_is_at_most_n_bytes_and_stays_inside_the_root(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        std::fs::write(
            c.root.join("etc/config"),
            [0xde, 0x10, 0x35, 0x23, 0x07, 0x04],
        )?;
        symlink(c.outside.join("secret"), c.root.join("etc/out"))?;
        let f = fs(&c, r)?;
        let p = Path::new("/etc/config");
        assert_eq!(f.read_head_opt(p, 4)?, Some(vec![0xde, 0x10, 0x35, 0x23]));
        assert_eq!(f.read_head_opt(p, 64)?.map(|b| b.len()), Some(6));
        assert_eq!(f.read_head_opt(Path::new("/etc/missing"), 4)?, None);
        // The absolute link's target does not exist inside the root.
        assert_eq!(f.read_head_opt(Path::new("/etc/out"), 4)?, None);
        Ok(())
    }

    #[rstest]
    fn an_absolute_symlinked_directory_is_followed_inside_the_root(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        // Outside the root, `outside` exists; inside, the same absolute path does not.
        symlink(&c.outside, c.root.join("etc/docker"))?;
        let before = snapshot(&c.outside);
        let f = fs(&c, r)?;
        assert_eq!(f.read_opt(Path::new("/etc/docker/secret"))?, None);
        let err = f
            .write_atomic(Path::new("/etc/docker/daemon.json"), b"{}\n", 0o644)
            .err();
        assert!(
            err.is_some(),
            "a dangling in-root target must not be written"
        );
        assert_eq!(snapshot(&c.outside), before);
        // Once the target exists inside the root, the write lands there.
        std::fs::create_dir_all(
            c.root
                .join(c.outside.strip_prefix("/").unwrap_or(&c.outside)),
        )?;
        f.write_atomic(Path::new("/etc/docker/daemon.json"), b"{}\n", 0o644)?;
        let inside = c
            .root
            .join(c.outside.strip_prefix("/").unwrap_or(&c.outside))
            .join("daemon.json");
        assert_eq!(std::fs::read_to_string(inside)?, "{}\n");
        assert_eq!(snapshot(&c.outside), before);
        Ok(())
    }

    #[rstest]
    fn dotdot_links_stop_at_the_root(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        // ../../../../.. from /etc/yum.repos.d climbs to the root, never above it.
        symlink(
            "../../../../../../../srv/docker",
            c.root.join("etc/yum.repos.d"),
        )?;
        let f = fs(&c, r)?;
        assert_eq!(
            f.read_opt(Path::new("/etc/yum.repos.d/secret"))?,
            Some(b"inside\n".to_vec())
        );
        f.write_atomic(
            Path::new("/etc/yum.repos.d/docker-ce.repo"),
            b"[x]\n",
            0o644,
        )?;
        assert!(c.root.join("srv/docker/docker-ce.repo").is_file());
        assert_eq!(
            f.real_path(Path::new("/etc/yum.repos.d"))?,
            c.root.join("srv/docker")
        );
        // `..` in the path itself cannot leave the root either.
        assert_eq!(
            f.read_opt(Path::new("/../../../srv/docker/secret"))?,
            Some(b"inside\n".to_vec())
        );
        Ok(())
    }

    #[rstest]
    fn a_symlinked_file_is_read_inside_the_root_and_replaced_on_write(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        std::fs::create_dir_all(c.root.join("etc/docker"))?;
        symlink(
            c.outside.join("secret"),
            c.root.join("etc/docker/daemon.json"),
        )?;
        let f = fs(&c, r)?;
        // The build host's file is never read through the link.
        assert_eq!(f.read_opt(Path::new("/etc/docker/daemon.json"))?, None);
        f.write_atomic(Path::new("/etc/docker/daemon.json"), b"{}\n", 0o600)?;
        assert_eq!(
            std::fs::read_to_string(c.outside.join("secret"))?,
            "build host secret\n"
        );
        let md = std::fs::symlink_metadata(c.root.join("etc/docker/daemon.json"))?;
        assert!(md.is_file());
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o7777,
            0o600
        );
        Ok(())
    }

    #[rstest]
    fn loops_and_dangling_links_are_errors_not_escapes(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        symlink("/etc/b", c.root.join("etc/a"))?;
        symlink("/etc/a", c.root.join("etc/b"))?;
        symlink("/nowhere/at/all", c.root.join("etc/dangling"))?;
        let f = fs(&c, r)?;
        let e = f.read_opt(Path::new("/etc/a/x")).err();
        assert_eq!(e.and_then(|e| e.raw_os_error()), Some(libc_eloop()));
        assert!(f.write_atomic(Path::new("/etc/a/x"), b"x", 0o644).is_err());
        assert_eq!(f.read_opt(Path::new("/etc/dangling"))?, None);
        assert_eq!(f.kind(Path::new("/etc/dangling")), None);
        assert_eq!(
            f.kind_nofollow(Path::new("/etc/dangling")),
            Some(Kind::Symlink)
        );
        assert!(f.mkdir_all(Path::new("/etc/dangling/sub")).is_err());
        assert!(!c.root.join("nowhere").exists());
        Ok(())
    }

    fn libc_eloop() -> i32 {
        Errno::LOOP.raw_os_error()
    }

    #[rstest]
    fn a_symlinked_lock_file_is_refused(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        std::fs::create_dir_all(c.root.join("var/lib/gpuhost"))?;
        symlink(
            c.outside.join("lock"),
            c.root.join("var/lib/gpuhost/apply.lock"),
        )?;
        let f = fs(&c, r)?;
        assert!(f
            .open_rw_create(Path::new("/var/lib/gpuhost/apply.lock"), 0o644)
            .is_err());
        assert!(!c.outside.join("lock").exists());
        Ok(())
    }

    #[rstest]
    fn listing_links_and_removing_stay_inside(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        symlink(&c.outside, c.root.join("opt"))?;
        let f = fs(&c, r)?;
        assert_eq!(f.list_dir(Path::new("/opt"))?, None);
        // A link under a symlinked /opt: /opt resolves inside the root, where it is missing.
        assert!(f
            .symlink_atomic(
                Path::new("/usr/lib64/libnccl.so"),
                Path::new("/opt/nvidia/nccl/lib/x")
            )
            .is_err());
        assert!(!f.remove_file(Path::new("/opt/secret"))?);
        assert!(c.outside.join("secret").exists());
        assert_eq!(
            f.list_dir(Path::new("/srv/docker"))?,
            Some(vec!["secret".to_string()])
        );
        f.symlink_atomic(Path::new("/srv/docker/secret"), Path::new("/usr/lib/x"))?;
        assert_eq!(
            f.read_link(Path::new("/usr/lib/x"))?,
            PathBuf::from("/srv/docker/secret")
        );
        assert_eq!(f.kind(Path::new("/usr/lib/x")), Some(Kind::File));
        assert!(f.remove_file(Path::new("/usr/lib/x"))?);
        Ok(())
    }

    #[rstest]
    fn special_files_are_refused_never_read(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        let fifo = c.root.join("etc/os-release");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o644), 0)
            .map_err(errno_io)?;
        let f = fs(&c, r)?;
        // Without the type check, this read would block forever (no writer).
        let e = f.read_opt(Path::new("/etc/os-release")).err();
        assert!(
            e.as_ref().is_some_and(
                |e| e.kind() == io::ErrorKind::InvalidInput && e.to_string().contains("a FIFO")
            ),
            "{e:?}"
        );
        let e = f.read_head_opt(Path::new("/etc/os-release"), 4).err();
        assert!(e.is_some_and(|e| e.kind() == io::ErrorKind::InvalidInput));
        assert!(f.read_opt(Path::new("/etc")).is_err());
        Ok(())
    }

    #[rstest]
    fn links_that_lead_tools_out_of_the_root_are_found(
        #[values(Resolver::Kernel, Resolver::UserSpace)] r: Resolver,
    ) -> io::Result<()> {
        let c = case()?;
        std::fs::create_dir_all(c.root.join("var/lib"))?;
        std::fs::create_dir_all(c.root.join("srv/log"))?;
        let f = fs(&c, r)?;
        assert_eq!(f.escaping_link(Path::new("/var/lib/rpm"))?, None);
        // A relative link that stays inside resolves the same both ways.
        symlink("../srv/log", c.root.join("var/log"))?;
        assert_eq!(f.escaping_link(Path::new("/var/log"))?, None);
        // Absolute, even when its target exists inside the root too: the build host's differs.
        symlink("/srv/docker", c.root.join("var/lib/rpm"))?;
        let found = f.escaping_link(Path::new("/var/lib/rpm"))?;
        assert_eq!(
            found.map(|(l, t, _)| (l, t)),
            Some((PathBuf::from("/var/lib/rpm"), PathBuf::from("/srv/docker")))
        );
        // `..` links climbing out, on a parent of the path.
        std::fs::remove_file(c.root.join("var/log"))?;
        symlink("../../outside", c.root.join("var/log"))?;
        let found = f.escaping_link(Path::new("/var/log/dnf"))?;
        assert_eq!(
            found.map(|(l, _, h)| (l, h)),
            Some((
                PathBuf::from("/var/log"),
                std::fs::canonicalize(&c.outside).ok()
            ))
        );
        Ok(())
    }

    /// Every file access of the host goes through this module: outside it, `std::fs` and
    /// path probes (`.exists()`, `.is_dir()`, `symlink_metadata`, `read_dir`) appear only
    /// where the file is the build host's own (profiles, the driver RPM, /proc, status output).
    #[test]
    fn no_file_access_of_the_host_bypasses_this_module() -> io::Result<()> {
        // (file, the code allowed there; "" = the whole file): the build host's own files.
        const ALLOWED: &[(&str, &str)] = &[
            ("fsutil.rs", ""),       // build-host files: `gpuhost status --textfile`
            ("fuzz.rs", ""),         // test-only (`#[cfg(test)] mod fuzz`)
            ("compat/image.rs", ""), // image tarballs and OCI layouts named on the command line
            ("lib.rs", "std::fs::read_to_string(&path)"), // profile files (profiles/src/lib.rs)
            ("driver/repo.rs", "File::open(path)"), // the driver RPM on the build host
            ("driver/repo.rs", "f.metadata()"),
            ("driver/repo.rs", "std::fs::metadata(&plan.path)"), // is the profile's driver RPM on the build host (a bundle serves it when not)
            // the same file, copied into the root before the transaction installs it
            ("stage.rs", "File::open(file)"),
            // whether the package and the root's package cache share a filesystem (the build
            // host's file, and the cache's real path as Host resolved it)
            ("stage.rs", "std::fs::metadata(file)"),
            ("stage.rs", "std::fs::metadata(p)"),
            ("stage.rs", "MetadataExt"),
            ("stage.rs", "OpenOptionsExt"),
            ("stage.rs", "std::fs::Metadata"),
            ("stage.rs", "std::fs::File"),
            // the staged name, created through Host first, replaced by a link to the opened
            // package, or a new empty file where no link can be made
            ("stage.rs", "std::fs::remove_file(real)"),
            ("stage.rs", "std::fs::OpenOptions::new()"),
            // gpuhost rollback: the earlier local repo package, a build-host file like any
            // driver.local_repo_rpm
            ("rollback.rs", "path.is_file()"),
            ("kernel.rs", "\"/proc/sys/kernel/osrelease\""),
            ("preflight.rs", "\"/proc/self/status\""), // is_root: the caller, not the root
            ("lock.rs", "use std::fs::{File, TryLockError};"),
            // the live process table, to name who holds the lock
            ("lock.rs", "\"/proc/\""),
            ("lock.rs", "join(\"fd\")"),
            ("lock.rs", "read_link(fd"),
            ("lock.rs", "join(\"comm\")"),
            ("host.rs", "std::fs::File"),
            ("host.rs", "canonical.is_dir()"), // --root itself, before it is opened
            // `gpuhost bundle`'s own files on the build host: the bundle directory and its
            // tarball (read like a profile, written like --out), a tarball's extraction, and the
            // scratch root it makes and removes; the target root is read through Host.
            ("bundle/mod.rs", ""),
            ("bundle/tempdir.rs", ""),
            ("bundle/manifest.rs", ""),
            ("bundle/build.rs", ""),
            ("bundle/kmods.rs", ""), // the kmod repo a bundle copies in (build-host files)
            // a kmod repo (`driver.kmod_repo`, `gpuhost kmod build --out`): a directory of the
            // machine gpuhost runs on, like the driver RPM; and the build host's own files of
            // `gpuhost kmod build` (the fleet key and certificate, the repo it writes)
            ("kmodrepo.rs", ""),
            // the certificate a kmod repo carries (Secure Boot's check of prebuilt kmods)
            ("driver/signing.rs", "std::fs::read(&path)"),
            // a kmod RPM's file entry type (not a file access)
            ("driver/signing.rs", "f.is_file()"),
            // gpuhost's RPM reader: a package file on the build host, read; its payload written
            // under a scratch tree the caller made, through its own walk that refuses a link it
            // did not make (O_NOFOLLOW, create_new, symlink_metadata before each mkdir)
            ("rpmfile/mod.rs", ""),
            // the same reader's uncompressed path: the package file read with pread by its
            // hashing threads, and the files it wrote (under the caller's scratch tree) removed
            // when the payload is read again whole
            ("rpmfile/pool.rs", ""),
            (
                "rpmfile/cpio.rs",
                "impl Cpio<std::io::BufReader<std::fs::File>>",
            ),
            // the repo metadata of a package just extracted by rpmfile (its scratch tree)
            ("rpmfile/repodata.rs", ""),
            (
                "transaction/payload.rs",
                "repo.join(\"repodata/repomd.xml\").is_file()",
            ),
            // the header's file entries' types (not a file access)
            ("transaction/payload.rs", "w.info.is_file()"),
            ("transaction/payload.rs", "f.is_file() && selected"),
            // a package header's file entries (no file of the host)
            ("transaction/payload.rs", "f.is_file() && !f.ghost"),
            ("run/kmod_rpm.rs", "rpmfile::FileInfo| f.is_file()"),
            ("run/kmod_rpm.rs", "f.ghost || !f.is_file()"),
            // gpuhost's driver cache, moved out of the scratch tree where /var/cache and
            // /var/lib are different filesystems: both paths resolved inside the root first
            // (Host::real_path), the source a regular file found by kind_nofollow
            ("transaction/cache.rs", "std::fs::copy(&s, &d)"),
            // a bundle's driver set (the build host's files, hashed by the bundle's manifest
            // before the run) read, and copied into the cache's `.incoming` folder, which gpuhost
            // has just made afresh inside the root (Host::create_dir_all, then real_path)
            ("transaction/cache.rs", "!from.is_file()"),
            ("transaction/cache.rs", "std::fs::create_dir_all(parent)"),
            ("transaction/cache.rs", "std::fs::copy(&from, &to)"),
            ("transaction/cache.rs", "std::fs::read_to_string(&path)"),
            ("transaction/cache.rs", "std::fs::read_dir(packages)"),
            ("transaction/cache.rs", "std::fs::read_dir(from)"),
            ("transaction/cache.rs", "kind.is_dir()"),
            ("transaction/cache.rs", "std::fs::create_dir_all(&dst)"),
            ("transaction/cache.rs", "kind.is_file()"),
            ("transaction/cache.rs", "std::fs::copy(entry.path(), &dst)"),
            // the driver RPM on the build host: a FIFO is refused by its metadata, unopened
            ("driver/repo.rs", "std::fs::metadata(path)"),
            ("driver/repo.rs", "m.is_file()"),
            // a module taken out of a kmod RPM into a private folder of the build host
            ("secureboot.rs", "std::fs::read(path)"),
            ("kmod/build.rs", ""),
            ("kmod/package.rs", ""),
            ("kmod/model.rs", ""),
            // the fleet key and certificate, --out, and the build folder's modules taken out
            // of it (opened link by link, no link followed) into root's signing folder
            ("kmod/inputs.rs", ""),
            ("kmod/signer.rs", ""),
            ("kmod/sandbox.rs", ""),
        ];
        // Every crate that acts on the root: this one and those built on it (paths in ALLOWED
        // are relative to each crate's src/).
        let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files: Vec<(std::path::PathBuf, std::path::PathBuf)> =
            ["host", "nvidia", "profiles", "steps", "engine"]
                .iter()
                .map(|c| (top.join(c).join("src"), top.join(c).join("src")))
                .collect();
        assert_eq!(
            files.iter().filter(|(s, _)| s.is_dir()).count(),
            5,
            "crate src/ folders moved"
        );
        let mut offenders = Vec::new();
        while let Some((src, p)) = files.pop() {
            if p.is_dir() {
                for e in std::fs::read_dir(&p)? {
                    files.push((src.clone(), e?.path()));
                }
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap_or(&p).display().to_string();
            if rel == "rootfs.rs" || !rel.ends_with(".rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p)?;
            let shipped = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in shipped.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                let probe = [
                    "std::fs",
                    "std::os::unix::fs",
                    ".exists()",
                    ".is_dir()",
                    ".is_file()",
                    "symlink_metadata",
                    "read_dir(",
                    "File::open",
                    "OpenOptions",
                ];
                if !probe.iter().any(|n| code.contains(n)) {
                    continue;
                }
                let ok = ALLOWED
                    .iter()
                    .any(|(f, what)| rel == *f && (what.is_empty() || code.contains(what)));
                if !ok {
                    offenders.push(format!("{rel}:{}: {code}", n + 1));
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "host files must be accessed through Host (rootfs):\n{}",
            offenders.join("\n")
        );
        Ok(())
    }
}
