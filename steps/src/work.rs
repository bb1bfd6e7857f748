//! Typed changes: what a step's `check` decided, in the few kinds of work gpuhost does.
//!
//! A check returns [`Change`]s; each holds one [`Work`] and the reason for it. The runner
//! carries the work out exactly as decided — nothing is parsed back from text or recomputed —
//! in three phases:
//! - [`Phase::Prepare`]: what the package transactions read or need out of the way (repo files,
//!   DKMS's compiler override, removals, module state);
//! - [`Phase::Packages`]: every step's [`Install`] merged into at most two dnf transactions
//!   (the one that brings a repo first, then everything else, module streams included);
//! - [`Phase::After`]: the rest (files, units, builds, links), step by step, after each step
//!   has been checked again against the host the transactions left.

use std::fmt;
use std::path::PathBuf;

use anyhow::Result;

use gpuhost_host::cmd::{Cmd, CmdOutput, Display as Argv};
use gpuhost_host::host::Host;
use gpuhost_host::rootfs::Kind;

/// A file and the exact content it must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileWrite {
    /// Path on the host (inside the root).
    pub path: String,
    pub content: String,
    pub mode: u32,
}

impl FileWrite {
    pub fn new(path: impl Into<String>, content: impl Into<String>, mode: u32) -> FileWrite {
        FileWrite {
            path: path.into(),
            content: content.into(),
            mode,
        }
    }
}

/// An action owed across runs (recorded durably before the work that makes it owed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owed {
    /// State key, e.g. `restart:docker.service`.
    pub key: &'static str,
    pub reason: String,
}

/// Packages to install; every step's are merged into the run's transactions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Install {
    /// Package specs for `dnf install`: names, `name-version`, NEVRAs or a local `.rpm` file.
    pub specs: Vec<String>,
    /// A module stream enabled and its profile installed in the same transaction
    /// (`nvidia-driver:latest-dkms/default`).
    pub module: Option<String>,
    /// A module stream enabled (`dnf module enable nvidia-driver:open-dkms`) right before the
    /// transaction, whose packages then come from it: NVIDIA's instructions from R560.
    pub enable: Option<String>,
    /// Packages of `module`'s profile that are not installed: NVIDIA's DKMS kmod, which the
    /// prebuilt kmods among `specs` replace (`driver.kmod_repo`). Then the stream is enabled
    /// and the profile's other packages are installed by name in the same transaction, and dnf
    /// marks no profile installed ([`crate::transaction::profile`]).
    pub leave_out: Vec<String>,
    /// The package brings a repo that other packages come from (NVIDIA's local repo package):
    /// it goes into the first transaction.
    pub brings_repo: bool,
    /// The profile lets dnf erase or replace conflicting packages.
    pub allowerasing: bool,
    /// dnf.conf's excludes (the Fabric Manager lock) must not hide these packages.
    pub disable_excludes: bool,
    /// The repo id these come from, so that a failure to read that repo is this step's.
    pub repo: Option<&'static str>,
    /// Owed before the transaction starts (a docker restart when docker's packages change).
    pub owes: Option<Owed>,
    /// Packages removed in the same transaction (the build packages gpuhost installed, when
    /// prebuilt kmods replace DKMS): the transaction then goes through `dnf shell`.
    pub remove: Vec<String>,
    /// gpuhost's driver cache (`driver.keep_local_repo`), once the transaction succeeded: the
    /// package file's driver set cached instead of the package installed, or the cache removed
    /// once NVIDIA's package is installed ([`crate::transaction::cache`]).
    pub cache: Option<RepoCache>,
}

pub use crate::transaction::cache::RepoCache;

impl Install {
    pub fn packages(specs: Vec<String>) -> Install {
        Install {
            specs,
            ..Install::default()
        }
    }
}

pub use crate::transaction::swap::{DriverSwap, RepoPackage};

/// When the runner carries a piece of work out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Prepare,
    Packages,
    After,
}

/// One piece of work. The variants are the kinds of work there are; a step cannot ask for
/// anything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    // Before the transactions.
    /// Write a file that dnf or a package scriptlet reads (a repo file, DKMS's override).
    Configure(FileWrite),
    /// Remove such a file (gpuhost's own DKMS override, no longer needed).
    Unconfigure(String),
    /// `dnf remove` (podman and runc in docker's way; another NVIDIA local repo).
    Remove(Vec<String>),
    /// Replace the NVIDIA driver set in one transaction (before the merged transactions).
    SwapDriver(DriverSwap),
    /// `dnf module disable NAME` (container-tools, whose filtering hides containerd.io).
    DisableModule(String),
    /// `dnf module reset NAME` (a disabled module whose stream is to be installed).
    ResetModule(String),
    /// `dnf module reset MODULE`, then `dnf module enable STREAM`: dnf's module state moved to
    /// the stream with no profile marked installed, no package changed (a module profile with
    /// prebuilt kmods, [`crate::transaction::profile`]).
    EnableStream {
        module: String,
        stream: String,
    },
    // The transactions.
    Install(Install),
    // After the transactions, step by step.
    /// Write a file (a boot entry, daemon.json, dnf.conf's lock).
    Write {
        file: FileWrite,
        /// Recorded before the write (daemon.json owes a docker restart).
        owes: Option<Owed>,
    },
    /// `systemctl enable` (with `--now` on a live host); the units come with `package`.
    EnableUnits {
        units: Vec<String>,
        package: String,
    },
    /// `systemctl start UNIT` (live only).
    StartUnit(String),
    /// `systemctl restart UNIT` (live only), settling the owed restart `settles`.
    RestartUnit {
        unit: String,
        settles: &'static str,
    },
    /// `dnf module switch-to MODULE --allowerasing`, then `dnf install --allowerasing PACKAGES`
    /// (switch-to keeps a package of the old stream that still satisfies).
    SwitchStream {
        module: String,
        packages: Vec<String>,
        disable_excludes: bool,
    },
    /// Build and install the DKMS module `module` (`nvidia`, `nvidia-open`) at `version` for
    /// each of `kernels`: `dkms install -m MODULE -v VERSION -k KVER --force`, as the kernel's
    /// own DKMS hook would (NVIDIA's `%post` builds for the running kernel only). `resign`:
    /// the built module lacks the right signature, so `dkms build --force` first (`install`
    /// reuses a module already built).
    Rebuild {
        module: String,
        version: String,
        kernels: Vec<String>,
        resign: bool,
    },
    /// Run a command (live only: `modprobe nvidia`, `nvidia-ctk cdi generate`).
    Run(Vec<String>),
    /// Create directories and symlinks (`link → target`), replacing gpuhost's own wrong links.
    Symlinks {
        prefixes: Vec<String>,
        dirs: Vec<PathBuf>,
        links: Vec<(PathBuf, String)>,
    },
}

impl Work {
    pub fn phase(&self) -> Phase {
        match self {
            Work::Configure(_)
            | Work::Unconfigure(_)
            | Work::Remove(_)
            | Work::SwapDriver(_)
            | Work::DisableModule(_)
            | Work::ResetModule(_)
            | Work::EnableStream { .. } => Phase::Prepare,
            Work::Install(_) => Phase::Packages,
            _ => Phase::After,
        }
    }
}

impl fmt::Display for Work {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Work::Configure(w) | Work::Write { file: w, .. } => write!(f, "write {}", w.path),
            Work::Unconfigure(p) => write!(f, "remove {p}"),
            Work::Remove(p) => write!(f, "dnf remove {}", p.join(" ")),
            Work::SwapDriver(s) => fmt_swap(f, s, false),
            Work::DisableModule(m) => write!(f, "dnf module disable {m}"),
            Work::ResetModule(m) => write!(f, "dnf module reset {m}"),
            Work::EnableStream { module, stream } => write!(
                f,
                "dnf module reset {module}, then dnf module enable {stream} (no package changes)"
            ),
            Work::Install(i) => fmt_install(f, i),
            Work::EnableUnits { units, .. } => write!(f, "systemctl enable {}", units.join(" ")),
            Work::StartUnit(u) => write!(f, "systemctl start {u}"),
            Work::RestartUnit { unit, .. } => write!(f, "systemctl restart {unit}"),
            Work::SwitchStream {
                module, packages, ..
            } => write!(
                f,
                "dnf module switch-to {module} --allowerasing, then install {} --allowerasing",
                packages.join(" ")
            ),
            Work::Rebuild {
                module,
                version,
                kernels,
                resign,
            } => write!(
                f,
                "dkms {} -m {module} -v {version} -k {}",
                if *resign {
                    "build and install"
                } else {
                    "install"
                },
                kernels.join(" -k ")
            ),
            Work::Run(argv) => write!(f, "{}", Argv(argv)),
            Work::Symlinks { prefixes, .. } => write!(f, "link under {}", prefixes.join(", ")),
        }
    }
}

impl Work {
    /// The work as the text report's line gives it: a driver swap by the size and version of
    /// the set that comes (its packages one by one are in the JSON report's `changes` and
    /// `reason`, the package file by its name); anything else as [`fmt::Display`] gives it.
    pub fn summary(&self) -> String {
        struct Short<'a>(&'a DriverSwap);
        impl fmt::Display for Short<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt_swap(f, self.0, true)
            }
        }
        match self {
            Work::SwapDriver(s) => Short(s).to_string(),
            other => other.to_string(),
        }
    }

    /// What the text report lists under the work's line: a driver swap's packages that come,
    /// each at its version, and the build host's kmods by file name (the summary gives only
    /// their number).
    pub fn details(&self) -> Option<String> {
        let Work::SwapDriver(s) = self else {
            return None;
        };
        let mut comes: Vec<String> = s
            .install
            .iter()
            .map(|p| format!("{}-{}", p.name, p.version))
            .collect();
        comes.extend(
            s.files
                .iter()
                .map(|f| f.rsplit('/').next().unwrap_or(f).to_string()),
        );
        (!comes.is_empty()).then(|| format!("comes: {}", comes.join(", ")))
    }
}

/// A [`DriverSwap`]: what goes, what comes (each package at its version, the build host's
/// kmods by file, erasures the profile allows) and dnf's module state after it; `short`: the
/// set by its size and version, files by name.
fn fmt_swap(f: &mut fmt::Formatter<'_>, s: &DriverSwap, short: bool) -> fmt::Result {
    let name = |p: &str| -> String {
        if short {
            p.rsplit('/').next().unwrap_or(p).to_string()
        } else {
            p.to_string()
        }
    };
    let mut versions: Vec<&str> = s.install.iter().map(|p| p.version.as_str()).collect();
    versions.sort_unstable();
    versions.dedup();
    let mut specs = vec![match (short, versions.as_slice()) {
        (true, [one]) => format!("the {} packages of driver {one}", s.install.len()),
        _ => s
            .install
            .iter()
            .map(RepoPackage::spec)
            .collect::<Vec<_>>()
            .join(" "),
    }];
    if !s.files.is_empty() {
        let n = s.files.len();
        specs.push(if short {
            format!(
                "and the build host's kmods for {n} kernel{}",
                if n == 1 { "" } else { "s" }
            )
        } else {
            format!("and the build host's kmods {}", s.files.join(" "))
        });
    }
    let rpm = s
        .repo_rpm
        .as_deref()
        .map(|r| format!("{} {}", name(r), if short { "and " } else { "" }))
        .unwrap_or_default();
    // From gpuhost's cache nothing of rpm's goes but the old set's packages, which the new
    // set's replace.
    let remove = if s.remove.is_empty() {
        String::new()
    } else {
        format!("remove {}; ", s.remove.join(" "))
    };
    write!(
        f,
        "one dnf transaction: {remove}install {rpm}{}",
        specs.join(" ")
    )?;
    if !s.erases.is_empty() {
        write!(f, "; erasing {} (driver.allow_erase)", s.erases.join(", "))?;
    }
    match &s.module {
        Some(m) if s.module_reset => write!(
            f,
            "; then dnf module reset and dnf module enable {m} (no profile marked installed)"
        ),
        Some(m) => write!(f, "; then dnf module switch-to {m}"),
        None => Ok(()),
    }
}

/// An [`Install`] as `plan` and the report show it.
fn fmt_install(f: &mut fmt::Formatter<'_>, i: &Install) -> fmt::Result {
    if let Some(m) = &i.enable {
        write!(f, "dnf module enable {m}, then ")?;
    }
    if let (Some(m), false) = (&i.module, i.leave_out.is_empty()) {
        let stream = m.split_once('/').map_or(m.as_str(), |(s, _)| s);
        // The left-out packages are NVIDIA's DKMS kmods (the only ones a profile leaves out).
        let but = if i
            .leave_out
            .iter()
            .all(|p| gpuhost_nvidia::packages::dkms_kmods().any(|k| k == p))
        {
            "NVIDIA's DKMS kmod".to_string()
        } else {
            i.leave_out.join(", ")
        };
        write!(
            f,
            "dnf module enable {stream}, then install the packages of profile {m} but {but}"
        )?;
        if !i.specs.is_empty() {
            write!(f, ", and {}", i.specs.join(" "))?;
        }
    } else {
        let mut words: Vec<String> = i.module.iter().map(|m| format!("@{m}")).collect();
        words.extend(i.specs.iter().cloned());
        if i.module.is_some() {
            write!(f, "dnf install {}", words.join(" "))?;
        } else if !words.is_empty() {
            write!(f, "install {}", words.join(" "))?;
        }
    }
    // Nothing installed by name: the part removes packages, or settles gpuhost's driver cache
    // (a bundle's driver set, installed by the driver step's packages).
    let named = i.module.is_some() || !i.specs.is_empty();
    if !i.remove.is_empty() {
        let sep = if named { "; " } else { "" };
        write!(f, "{sep}remove {}", i.remove.join(" "))?;
    }
    if let (Some(RepoCache::Bundle { .. }), false) = (&i.cache, named) {
        let sep = if i.remove.is_empty() { "" } else { "; " };
        write!(f, "{sep}keep the bundle's driver set in gpuhost's cache")?;
    }
    if i.allowerasing {
        f.write_str(" --allowerasing")?;
    }
    Ok(())
}

/// One difference between the host and the profile, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub work: Work,
    pub reason: String,
}

impl Change {
    pub fn new(work: Work, reason: impl Into<String>) -> Change {
        Change {
            work,
            reason: reason.into(),
        }
    }

    pub fn install(packages: Vec<String>, reason: impl Into<String>) -> Change {
        Change::new(Work::Install(Install::packages(packages)), reason)
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.work, self.reason)
    }
}

/// The dnf command of one merged transaction.
pub fn install_command(host: &Host, parts: &[&Install]) -> Result<Cmd> {
    let mut cmd = host.dnf()?.arg("install");
    if parts.iter().any(|i| i.allowerasing) {
        cmd = cmd.arg("--allowerasing");
    }
    if parts.iter().any(|i| i.disable_excludes) {
        cmd = cmd.arg("--disableexcludes=main");
    }
    let mut seen = std::collections::BTreeSet::new();
    // Package files first: dnf adds local packages only before any other job ("Cannot add
    // local packages, because transaction job already exists").
    let specs = || parts.iter().flat_map(|i| i.specs.iter());
    for s in specs().filter(|s| is_package_file(s)) {
        if seen.insert(s.clone()) {
            cmd = cmd.arg(s);
        }
    }
    for m in parts.iter().filter_map(|i| i.module.as_ref()) {
        if seen.insert(format!("@{m}")) {
            cmd = cmd.arg(format!("@{m}"));
        }
    }
    for s in specs() {
        if seen.insert(s.clone()) {
            cmd = cmd.arg(s);
        }
    }
    Ok(cmd)
}

/// The jobs of `parts` besides package files, for a `dnf shell` script: the module streams to
/// enable, and the words to install (`@module:stream/profile` first, then package specs).
pub(crate) fn shell_jobs(parts: &[&Install]) -> (Vec<String>, Vec<String>) {
    let mut streams: Vec<String> = parts.iter().filter_map(|i| i.enable.clone()).collect();
    streams.sort_unstable();
    streams.dedup();
    let mut words: Vec<String> = Vec::new();
    for m in parts.iter().filter_map(|i| i.module.as_ref()) {
        let w = format!("@{m}");
        if !words.contains(&w) {
            words.push(w);
        }
    }
    for s in parts.iter().flat_map(|i| i.specs.iter()) {
        // Package files are installed first, on a line of their own.
        if !words.contains(s) && !is_package_file(s) {
            words.push(s.clone());
        }
    }
    (streams, words)
}

/// The packages the parts remove in their transaction, each once.
pub(crate) fn removals(parts: &[&Install]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in parts.iter().flat_map(|i| i.remove.iter()) {
        if !out.contains(r) {
            out.push(r.clone());
        }
    }
    out
}

/// dnf's flags the parts ask for (`--allowerasing`, `--disableexcludes=main`).
pub(crate) fn dnf_flags(parts: &[&Install]) -> Vec<&'static str> {
    let mut out = Vec::new();
    if parts.iter().any(|i| i.allowerasing) {
        out.push("--allowerasing");
    }
    if parts.iter().any(|i| i.disable_excludes) {
        out.push("--disableexcludes=main");
    }
    out
}

/// `dnf module enable` of the streams the transaction's packages come from, if any.
pub(crate) fn enable_command(host: &Host, parts: &[&Install]) -> Result<Option<Cmd>> {
    let mut streams: Vec<&str> = parts.iter().filter_map(|i| i.enable.as_deref()).collect();
    streams.sort_unstable();
    streams.dedup();
    if streams.is_empty() {
        return Ok(None);
    }
    Ok(Some(host.dnf()?.args(["module", "enable"]).args(streams)))
}

/// One merged transaction: the module streams its packages come from enabled first (when any
/// part asks), then `dnf install`. The command and output of the first that failed, or of the
/// install.
///
/// Every package file the parts name by path (NVIDIA's local repo package) is copied onto the
/// root's disk and checked first ([`gpuhost_host::stage`]), and the transaction installs the
/// copy; packages from repos are copied and checked by dnf before its first write
/// ([`Host::dnf`]). A file that cannot be copied whole is an error before any change.
pub fn transaction(host: &Host, parts: &[&Install]) -> Result<(Cmd, CmdOutput)> {
    let expanded = expand_profiles(host, parts, &[])?;
    let parts: Vec<&Install> = expanded.iter().collect();
    let mut staged = Vec::new();
    let mut local: Vec<Install> = Vec::new();
    for part in &parts {
        let mut part = (*part).clone();
        for spec in &mut part.specs {
            if !is_package_file(spec) {
                continue;
            }
            // One staging per file, however many parts name it.
            let source = std::path::Path::new(spec.as_str()).to_path_buf();
            if let Some(c) = staged
                .iter()
                .find(|c: &&gpuhost_host::stage::Staged| c.source() == source)
            {
                *spec = c.path().display().to_string();
                continue;
            }
            let copy = match crate::transaction::ready::take(&source) {
                // Read ahead before the first change: staged and checked; its unpacked repos
                // are not needed by a transaction that installs the package on its own.
                Some(ready) => {
                    host.remove_tree(ready.scratch)?;
                    ready.staged
                }
                None => gpuhost_host::stage::copy_in(host, &source)?,
            };
            *spec = copy.path().display().to_string();
            staged.push(copy);
        }
        local.push(part);
    }
    let parts: Vec<&Install> = local.iter().collect();
    let files: Vec<String> = parts
        .iter()
        .flat_map(|i| i.specs.iter())
        .filter(|s| is_package_file(s))
        .cloned()
        .collect();
    let remove = removals(&parts);
    if (!files.is_empty()
        && parts
            .iter()
            .any(|i| i.module.is_some() || i.enable.is_some()))
        || !remove.is_empty()
    {
        // Files with module work, or removals: one `dnf shell` transaction (`dnf install`
        // would refuse the files, and removes nothing).
        let (streams, words) = shell_jobs(&parts);
        let script = crate::transaction::shell::script(&files, &streams, &words, &remove);
        let result =
            crate::transaction::shell::run(host, (SHELL_SCRIPT, &script), &[], &dnf_flags(&parts));
        if let Err(e) = host.remove_file(SHELL_SCRIPT) {
            tracing::warn!("could not remove {SHELL_SCRIPT}: {e:#}");
        }
        drop(staged);
        return result;
    }
    if let Some(enable) = enable_command(host, &parts)? {
        let out = enable.output()?;
        if !out.success() {
            return Ok((enable, out));
        }
    }
    let cmd = install_command(host, &parts)?;
    let mut out = cmd.output()?;
    drop(staged);
    // dnf can exit 0 having done less than asked (a conflict it reports as a `Problem`,
    // packages it skipped): its own lines make it a failure.
    if out.success()
        && !gpuhost_host::dnfout::problems(&format!("{}\n{}", out.stdout, out.stderr)).is_empty()
    {
        out.code = Some(1);
    }
    Ok((cmd, out))
}

/// `parts`, each module profile that leaves packages out ([`Install::leave_out`]) made into what
/// dnf carries in one transaction: its stream enabled and the profile's other packages by name
/// ([`crate::transaction::profile`]), before the part's own specs. dnf is asked with `options`
/// (the repos the transaction reads).
pub(crate) fn expand_profiles(
    host: &Host,
    parts: &[&Install],
    options: &[String],
) -> Result<Vec<Install>> {
    let mut out = Vec::new();
    for part in parts {
        let mut part = (*part).clone();
        if let (Some(spec), false) = (part.module.clone(), part.leave_out.is_empty()) {
            let names = crate::transaction::profile::packages(host.dnf()?.args(options), &spec)?;
            let mut specs: Vec<String> = names
                .into_iter()
                .filter(|p| !part.leave_out.contains(p))
                .collect();
            specs.append(&mut part.specs);
            part.specs = specs;
            part.enable = Some(
                spec.split_once('/')
                    .map_or(spec.as_str(), |(s, _)| s)
                    .to_string(),
            );
            part.module = None;
            part.leave_out.clear();
        }
        out.push(part);
    }
    Ok(out)
}

/// The `dnf shell` script of a transaction that installs package files with module work.
const SHELL_SCRIPT: &str = "/var/cache/gpuhost/transaction.dnf";

/// One transaction of `parts` in a bundle's scratch root, with dnf's `options` besides (the
/// bundle's `--downloadonly --downloaddir=…`, or `--setopt=tsflags=noscripts`): `dnf install`,
/// or one `dnf shell` transaction when package files go with module work (prebuilt kmods with
/// the driver's module profile, which `dnf install` would refuse). The files are read where
/// they are: the scratch root is the bundle's, not a host's.
pub fn scratch_transaction(
    host: &Host,
    parts: &[&Install],
    options: &[String],
) -> Result<(Cmd, CmdOutput)> {
    let expanded = expand_profiles(host, parts, options)?;
    let parts: &[&Install] = &expanded.iter().collect::<Vec<_>>();
    let mut files: Vec<String> = Vec::new();
    for s in parts.iter().flat_map(|i| i.specs.iter()) {
        if is_package_file(s) && !files.contains(s) {
            files.push(s.clone());
        }
    }
    let modules = parts
        .iter()
        .any(|i| i.module.is_some() || i.enable.is_some());
    let remove = removals(parts);
    if (files.is_empty() || !modules) && remove.is_empty() {
        let cmd = install_command(host, parts)?.args(options);
        let out = cmd.output()?;
        return Ok((cmd, out));
    }
    let (streams, words) = shell_jobs(parts);
    let script = crate::transaction::shell::script(&files, &streams, &words, &remove);
    let result =
        crate::transaction::shell::run(host, (SHELL_SCRIPT, &script), options, &dnf_flags(parts));
    if let Err(e) = host.remove_file(SHELL_SCRIPT) {
        tracing::warn!("could not remove {SHELL_SCRIPT}: {e:#}");
    }
    result
}

/// A spec that names a package file by its path (`/srv/cuda-repo-….rpm`), not a package.
pub fn is_package_file(spec: &str) -> bool {
    spec.starts_with('/') && spec.ends_with(".rpm")
}

/// True when a dnf failure's output names something of `install`: one of its specs or their
/// package names, its module, or its repo.
pub fn implicated(text: &str, install: &Install) -> bool {
    let names: Vec<&str> = install
        .specs
        .iter()
        .map(|s| gpuhost_host::rpm::package_name_of(s))
        .chain(install.specs.iter().map(String::as_str))
        .collect();
    let tokens = text
        .split(|c: char| c.is_whitespace() || "'\",;()[]".contains(c))
        .filter(|t| !t.is_empty());
    for t in tokens {
        let t = t.trim_end_matches([':', '.']);
        for n in &names {
            let file_name = n.rsplit('/').next().unwrap_or(n);
            if t == *n || t == file_name {
                return true;
            }
            // `docker-ce-3:27.3.1-1.el8.x86_64` names docker-ce (not docker-ce-cli).
            if let Some(rest) = t.strip_prefix(n).and_then(|r| r.strip_prefix('-')) {
                if rest.starts_with(|c: char| c.is_ascii_digit()) {
                    return true;
                }
            }
        }
        for m in install.module.iter().chain(install.enable.iter()) {
            let module_name = m.split(':').next().unwrap_or(m);
            if t == m || t.starts_with(&format!("{module_name}:")) {
                return true;
            }
        }
    }
    if let Some(repo) = install.repo {
        if text.contains(&format!("repo '{repo}'")) {
            return true;
        }
    }
    false
}

/// The dkms commands of [`Work::Rebuild`] for one kernel (chrooted in an install root):
/// `dkms install -m M -v V -k K --force`, after `dkms build … --force` when the module must be
/// built again (`install` reuses a module that is already built, unsigned or not).
pub(crate) fn dkms_rebuild(
    host: &Host,
    module: &str,
    version: &str,
    kver: &str,
    resign: bool,
) -> Vec<Cmd> {
    let verbs: &[&str] = if resign {
        &["build", "install"]
    } else {
        &["install"]
    };
    verbs
        .iter()
        .map(|verb| {
            host.in_root("dkms")
                .args([*verb, "-m", module, "-v", version, "-k", kver, "--force"])
        })
        .collect()
}

/// Before DKMS builds a module that modprobe does not find for `kver` (found: nothing is
/// done): DKMS's state for that
/// kernel (`/var/lib/dkms/M/V/K`, and its `kernel-K-<arch>` link) is stale, and removed. A node
/// that moved to prebuilt kmods keeps it (NVIDIA's `%preun` runs `dkms remove … || :`, which
/// finds nothing to remove once the prebuilt kmod's `%post` removed DKMS's modules); `dkms
/// status` then says only "added", `dkms remove -k K` skips it ("not built"), and `dkms
/// install` stops at "has already been built" (exit 3): the move back to DKMS failed after its
/// transaction (issue 53, item 4). Links are not followed; nothing outside DKMS's tree goes.
pub(crate) fn forget_stale_dkms_build(
    host: &Host,
    module: &str,
    version: &str,
    kver: &str,
) -> Result<()> {
    let found =
        gpuhost_host::kmods::state(host, kver, "nvidia").is_ok_and(|s| s.is_version(version));
    if found {
        return Ok(());
    }
    let tree = format!("/var/lib/dkms/{module}");
    if host.kind_nofollow(format!("{tree}/{version}/{kver}")) == Some(Kind::Dir) {
        tracing::info!("removing DKMS's stale state {tree}/{version}/{kver} before building");
        host.remove_tree(format!("{tree}/{version}/{kver}"))?;
    }
    for arch in ["x86_64", "aarch64"] {
        let link = format!("{tree}/kernel-{kver}-{arch}");
        if host.kind_nofollow(&link) == Some(Kind::Symlink) {
            host.remove_file(&link)?;
        }
    }
    Ok(())
}

/// Carry out one piece of work that is not a package transaction.
pub fn carry_out(host: &Host, work: &Work) -> Result<()> {
    match work {
        Work::Configure(w) | Work::Write { file: w, .. } => {
            host.write_atomic(&w.path, w.content.as_bytes(), w.mode)
        }
        Work::Unconfigure(p) => host.remove_file(p).map(drop),
        Work::Remove(pkgs) => host.dnf()?.arg("remove").args(pkgs).run().map(drop),
        Work::SwapDriver(s) => crate::transaction::swap::swap_driver(host, s),
        Work::DisableModule(m) => host
            .dnf()?
            .args(["module", "disable", m.as_str()])
            .run()
            .map(drop),
        Work::ResetModule(m) => host
            .dnf()?
            .args(["module", "reset", m.as_str()])
            .run()
            .map(drop),
        Work::EnableStream { module, stream } => {
            host.dnf()?
                .args(["module", "reset", module.as_str()])
                .run()?;
            host.dnf()?
                .args(["module", "enable", stream.as_str()])
                .run()
                .map(drop)
        }
        Work::Install(i) => {
            let (cmd, out) = transaction(host, &[i])?;
            if out.success() {
                Ok(())
            } else {
                Err(cmd.failure(&out))
            }
        }
        Work::EnableUnits { units, package } => enable_units(host, units, package),
        Work::StartUnit(u) => host.systemctl().args(["start", u.as_str()]).run().map(drop),
        Work::RestartUnit { unit, .. } => host
            .systemctl()
            .args(["restart", unit.as_str()])
            .run()
            .map(drop),
        Work::SwitchStream {
            module,
            packages,
            disable_excludes,
        } => switch_stream(host, module, packages, *disable_excludes),
        Work::Rebuild {
            module,
            version,
            kernels,
            resign,
        } => {
            for k in kernels {
                if !resign {
                    forget_stale_dkms_build(host, module, version, k)?;
                }
                for cmd in dkms_rebuild(host, module, version, k, *resign) {
                    cmd.run()?;
                }
            }
            Ok(())
        }
        Work::Run(argv) => {
            let Some((program, args)) = argv.split_first() else {
                return Ok(());
            };
            Cmd::new(program).args(args).run().map(drop)
        }
        Work::Symlinks { dirs, links, .. } => {
            for d in dirs {
                host.create_dir_all(d)?;
            }
            for (link, target) in links {
                host.symlink_atomic(target, link)?;
            }
            Ok(())
        }
    }
}

/// Enable `units` (and start them on the live host); a unit the host lacks is refused, naming
/// the package it comes with.
fn enable_units(host: &Host, units: &[String], package: &str) -> Result<()> {
    for u in units {
        if gpuhost_host::units::state(host, u)? == gpuhost_host::units::UnitState::Missing {
            return Err(gpuhost_host::error::hinted(
                format!("{u} is not on the host: {package} is not installed"),
                format!("{u} comes with {package}: check the step that installs it"),
            ));
        }
    }
    let mut cmd = host.systemctl().arg("enable");
    if host.is_live() {
        cmd = cmd.arg("--now");
    }
    cmd.args(units).run().map(drop)
}

/// Switch module `module` to its stream and install `packages` of it, both erasing what
/// conflicts (and past dnf's excludes when asked).
fn switch_stream(
    host: &Host,
    module: &str,
    packages: &[String],
    disable_excludes: bool,
) -> Result<()> {
    let mut switch = host
        .dnf()?
        .args(["module", "switch-to", module, "--allowerasing"]);
    let mut install = host
        .dnf()?
        .args(["install", "--allowerasing"])
        .args(packages);
    if disable_excludes {
        switch = switch.arg("--disableexcludes=main");
        install = install.arg("--disableexcludes=main");
    }
    switch.run()?;
    install.run().map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part that installs nothing by name says what it does instead: no `install  (` with no
    /// package (issue 54); the packages a part removes are named.
    #[test]
    fn an_install_without_names_says_what_it_does() {
        let bundle = RepoCache::Bundle {
            meta: "/b/driver/x".into(),
            packages: "/b/repo/Packages".into(),
        };
        let settles = Work::Install(Install {
            brings_repo: true,
            cache: Some(bundle.clone()),
            ..Install::default()
        });
        assert_eq!(
            settles.to_string(),
            "keep the bundle's driver set in gpuhost's cache"
        );
        let moves = Work::Install(Install {
            brings_repo: true,
            cache: Some(bundle),
            remove: vec!["cuda-repo-rhel8-12-2-local".into()],
            ..Install::default()
        });
        assert_eq!(
            moves.to_string(),
            "remove cuda-repo-rhel8-12-2-local; keep the bundle's driver set in gpuhost's cache"
        );
        let both = Work::Install(Install {
            specs: vec!["/r/kmod.rpm".into()],
            remove: vec!["dkms".into(), "gcc".into()],
            allowerasing: true,
            ..Install::default()
        });
        assert_eq!(
            both.to_string(),
            "install /r/kmod.rpm; remove dkms gcc --allowerasing"
        );
        for w in [settles, moves, both] {
            assert!(!w.to_string().contains("install  "), "{w}");
        }
    }

    #[test]
    fn a_dnf_problem_names_the_steps_whose_packages_it_mentions() {
        let docker = Install {
            specs: vec![
                "docker-ce".into(),
                "docker-ce-cli".into(),
                "containerd.io".into(),
            ],
            repo: Some("docker-ce-stable"),
            ..Install::default()
        };
        let cli_only = Install::packages(vec!["docker-ce-cli".into()]);
        let headers = Install::packages(vec![
            "kernel-uek-devel-5.15.0-206.153.7.el8uek.x86_64".into()
        ]);
        let driver = Install {
            module: Some("nvidia-driver:550-dkms/default".into()),
            specs: vec!["kmod-nvidia-latest-dkms".into()],
            ..Install::default()
        };
        let filtered = "Error: \n Problem: package docker-ce-3:27.3.1-1.el8.x86_64 requires containerd.io >= 1.6.24, but none of the providers can be installed\n  - package containerd.io-1.7.22-3.1.el8.x86_64 is filtered out by modular filtering\n";
        assert!(implicated(filtered, &docker));
        assert!(!implicated(
            "package docker-ce-3:27.3.1-1.el8.x86_64 is broken",
            &cli_only
        ));
        assert!(!implicated(filtered, &headers));
        let nomatch = "No match for argument: kernel-uek-devel-5.15.0-206.153.7.el8uek.x86_64\nError: Unable to find a match: kernel-uek-devel-5.15.0-206.153.7.el8uek.x86_64\n";
        assert!(implicated(nomatch, &headers));
        assert!(!implicated(nomatch, &docker));
        let module = "Error: Problems in request:\nmissing groups or modules: nvidia-driver:550-dkms/default\n";
        assert!(implicated(module, &driver));
        assert!(!implicated(module, &headers));
        let repo = "Error: Failed to download metadata for repo 'docker-ce-stable': Cannot download repomd.xml";
        assert!(implicated(repo, &docker));
        assert!(!implicated(repo, &driver));
    }
}
