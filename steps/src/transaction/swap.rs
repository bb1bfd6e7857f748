//! The driver swap: one dnf transaction that replaces the NVIDIA driver set ([`DriverSwap`]),
//! all or nothing.
//!
//! dnf cannot install packages from a repo that does not exist yet, and the new local repo
//! appears only when its package is installed. So the new package's inner repo is read from
//! the package file itself, by gpuhost's own reader ([`gpuhost_host::rpmfile`]: the payload
//! streamed once, each entry checked against the header) into a scratch directory inside the
//! root (`/var/cache/gpuhost/driver-swap`, on the filesystem the repo lands on): the inner
//! repo's metadata, keys and driver packages (checked against the metadata's checksums) and its
//! `.repo` file, never the CUDA toolkit's packages. One `dnf shell` transaction then installs the new
//! local repo package and the new set from that scratch repo (`--repofrompath`, with
//! `module_hotfixes` so that the new stream's packages are not hidden by the old stream's
//! module state), and removes the old local repo package and the old names, with gpuhost's
//! locks lifted (`--disableexcludes=main`). The rpm transaction dnf runs is all or nothing.
//!
//! `dnf shell` reports an error in one of its commands and goes on, and exits 0 either way; so
//! every package is checked afterwards against rpm's database, and a swap that did not happen
//! is an error quoting what dnf said. The scratch directory is removed whatever happens.

use std::path::Path;

use anyhow::{Context, Result};

use gpuhost_host::cmd::Cmd;
use gpuhost_host::error::hinted;
use gpuhost_host::host::{repo_entries, Host};

use crate::transaction::payload::{self, Unpack};

/// The scratch directory inside the root.
pub const SCRATCH: &str = "/var/cache/gpuhost/driver-swap";
/// The repo id the new inner repo has during the swap.
pub const REPO_ID: &str = "gpuhost-next";

/// One package of a local repo, as its file name gives it
/// (`nvidia-driver-580.82.07-1.el9.x86_64.rpm`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RepoPackage {
    pub name: String,
    pub version: String,
    pub release: String,
    pub arch: String,
}

impl RepoPackage {
    /// From an RPM's file name (a path is fine); `None` for anything else (source RPMs too).
    pub fn from_file_name(f: &str) -> Option<RepoPackage> {
        let base = f.rsplit('/').next().unwrap_or(f).strip_suffix(".rpm")?;
        let (nvr, arch) = base.rsplit_once('.')?;
        if arch == "src" || arch.is_empty() {
            return None;
        }
        let mut parts = nvr.rsplitn(3, '-');
        let (release, version, name) = (parts.next()?, parts.next()?, parts.next()?);
        if name.is_empty() || !version.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        Some(RepoPackage {
            name: name.to_string(),
            version: version.to_string(),
            release: release.to_string(),
            arch: arch.to_string(),
        })
    }

    /// `name-version-release.arch`, as dnf takes it.
    pub fn spec(&self) -> String {
        format!(
            "{}-{}-{}.{}",
            self.name, self.version, self.release, self.arch
        )
    }
}

/// One dnf transaction that replaces the NVIDIA driver set: a branch upgrade or downgrade, a
/// flavour switch, a CUDA ↔ driver-only local repo. The new local repo package's inner repo is
/// read from the package file itself (its payload, extracted to a scratch directory) before
/// anything changes, so that one `dnf shell` transaction can remove the old local repo package
/// and the old names (Fabric Manager, NSCQ and IMEX are renamed at R580; the other flavour's
/// kmod) and install the new repo package and the new set together. dnf either does all of it
/// or nothing; gpuhost then checks every package ([`swap_driver`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverSwap {
    /// The new local repo package file (on the build host); `None` when the set changes within
    /// the installed local repo (a flavour switch): its packages come from that repo.
    pub repo_rpm: Option<String>,
    /// The installed local repo's id, whose packages come in unfiltered by dnf's module state
    /// when `repo_rpm` is `None`.
    pub repo_id: String,
    /// Its inner repo directory (`/var/cuda-repo-rhel9-13-0-local`).
    pub repo_dir: String,
    /// Package names that go: the old local repo package(s), and old names the new set does
    /// not carry.
    pub remove: Vec<String>,
    /// Packages that come (installed, upgraded or downgraded), from the new repo.
    pub install: Vec<RepoPackage>,
    /// Package files that come with them: the build host's kmods of the new driver
    /// (`driver.kmod_repo`), each copied onto the root's disk and checked first.
    pub files: Vec<String>,
    /// The module stream (and profile) the new set belongs to, when dnf's module state names
    /// another: switched once the packages are in (`dnf module switch-to`, which then changes
    /// no package: the new set is the stream's).
    pub module: Option<String>,
    /// `module` is set by `dnf module reset` and `dnf module enable` (no profile marked
    /// installed: a module profile with prebuilt kmods), not `switch-to`.
    pub module_reset: bool,
    /// Packages outside NVIDIA's set the swap may erase (`driver.allow_erase`): before the
    /// transaction, dnf resolves it without running it, and a swap that would erase any other
    /// package outside the set is refused ([`outside_the_set`]).
    pub allow_erase: Vec<String>,
    /// Packages outside the set that the swap will erase, as the check found them (each
    /// allowed by `driver.allow_erase`), with why: shown in `plan` and the report.
    pub erases: Vec<String>,
    /// NVIDIA's own packages, which the swap may move or erase: the driver set as the old and
    /// new local repos' file lists name it, the local repo packages and the kmods. Any other
    /// package is the site's, however it is named.
    pub nvidia: Vec<String>,
    /// gpuhost's driver cache once the swap is done (`driver.keep_local_repo`,
    /// [`super::cache`]): the new driver set cached and `repo_rpm` read, not installed; or the
    /// cache removed, NVIDIA's package installed.
    pub cache: Option<super::cache::RepoCache>,
    /// The cached folder the new set comes from, read in place (a rollback to the set kept
    /// from before, `driver.keep_local_repo = false`): no package file is read.
    pub from_cache: Option<String>,
}

/// Carry out the swap (see the module doc).
pub fn swap_driver(host: &Host, s: &DriverSwap) -> Result<()> {
    // Read ahead before the first change (super::ready): staged, checked, its repo unpacked
    // into SCRATCH already.
    let ready = s
        .repo_rpm
        .as_ref()
        .and_then(|f| super::ready::take(Path::new(f)));
    if ready.is_none() {
        // A scratch left by a killed run goes first; the new one is made inside the root.
        host.remove_tree(SCRATCH)?;
        host.create_dir_all(format!("{SCRATCH}/tree"))?;
    }
    let scratch = host.real_path(SCRATCH)?;
    let result = swap_in(host, s, &scratch, ready.map(|r| r.staged));
    // Removed whatever happened.
    if let Err(e) = host.remove_tree(SCRATCH) {
        tracing::warn!("could not remove {SCRATCH}: {e:#}");
    }
    result
}

/// Remove the scratch directory a swap killed mid-way (`kill -9`, a power cut) left behind:
/// the new package's payload and its extracted repo, gigabytes on a real node. Every apply
/// does, under its lock, whether or not it swaps.
pub fn remove_left_scratch(host: &Host) -> Result<()> {
    if host.remove_tree(SCRATCH)? {
        tracing::info!("removed {SCRATCH}, left by a driver swap that was killed");
    }
    Ok(())
}

/// The swap with its package files read from copies on the root's disk (the files can be on a
/// mirror that goes away while the transaction runs, [`gpuhost_host::stage`]): the swap, and
/// the copies (removed when dropped).
fn staged(
    host: &Host,
    s: &DriverSwap,
    ready: Option<gpuhost_host::stage::Staged>,
) -> Result<(DriverSwap, Vec<gpuhost_host::stage::Staged>)> {
    let copy = |f: &String| gpuhost_host::stage::copy_in(host, Path::new(f));
    let repo = match ready {
        Some(r) => Some(r),
        None => s.repo_rpm.as_ref().map(copy).transpose()?,
    };
    let files = s.files.iter().map(copy).collect::<Result<Vec<_>>>()?;
    let path = |c: &gpuhost_host::stage::Staged| c.path().display().to_string();
    let copied = DriverSwap {
        repo_rpm: repo.as_ref().map(path),
        files: files.iter().map(path).collect(),
        ..s.clone()
    };
    Ok((copied, repo.into_iter().chain(files).collect()))
}

fn swap_in(
    host: &Host,
    s: &DriverSwap,
    scratch: &Path,
    ready: Option<gpuhost_host::stage::Staged>,
) -> Result<()> {
    let unpacked = ready.is_some();
    let copied_from = s.repo_rpm.clone();
    let (copied, _staged) = staged(host, s, ready)?;
    let s = &copied;
    let script = scratch.join("swap.dnf");
    host.write_atomic(
        format!("{SCRATCH}/swap.dnf"),
        super::shell::injected(&shell_script(s)).as_bytes(),
        0o600,
    )?;
    let cmd = host
        .dnf()?
        .arg("--disableexcludes=main")
        .args(new_repo(host, s, scratch, unpacked)?);
    refuse_erasing(&cmd, &script, s)?;
    let cmd = cmd.arg("shell").arg(&script);
    // The rpm database before: what a stopped transaction is judged by.
    let before = gpuhost_host::rpm::snapshot(host)?;
    let out = cmd.output()?;
    let missing = not_swapped(host, s)?;
    if missing.is_empty() {
        settle_cache(host, s, &copied_from)?;
        if let Some(m) = &s.module {
            let context = || {
                format!("the driver was replaced, but dnf's module state still names another stream than {m}")
            };
            if s.module_reset {
                let module = m.split(':').next().unwrap_or(m);
                host.dnf()?
                    .args(["module", "reset", module])
                    .run()
                    .with_context(context)?;
                host.dnf()?
                    .args(["module", "enable", m.as_str()])
                    .run()
                    .with_context(context)?;
            } else {
                host.dnf()?
                    .args(["--disableexcludes=main", "module", "switch-to", m.as_str()])
                    .run()
                    .with_context(context)?;
            }
        }
        return Ok(());
    }
    let text = format!("{}\n{}", out.stdout, out.stderr);
    let reason: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with("Error")
                || l.starts_with("Problem")
                || l.starts_with("- ")
                || l.starts_with("file ")
        })
        .collect();
    let cause = if reason.is_empty() {
        gpuhost_host::cmd::tail_lines(&text, 5)
    } else {
        reason.join(" | ")
    };
    let diff = gpuhost_host::rpm::Diff::of(&before, &gpuhost_host::rpm::snapshot(host)?);
    if !diff.is_empty() {
        return Err(anyhow::Error::new(gpuhost_host::rpm::Partial {
            cause: format!("dnf did not replace the driver ({}): {cause}", missing.join(", ")),
            diff,
            repair: "run the same gpuhost apply again: it finishes the driver change and removes what the stopped transaction left beside the new driver".to_string(),
        }));
    }
    Err(anyhow::anyhow!(
        "dnf did not replace the driver, and the rpm database is as it was, so nothing was changed ({}): {cause}",
        missing.join(", ")
    ))
}

/// dnf's options for the repo the new set comes from: the new package's, read out into the
/// scratch folder (`unpacked`: read ahead already); a cached set's folder (a rollback,
/// `driver.keep_local_repo = false`); or the installed repo (a flavour switch).
fn new_repo(host: &Host, s: &DriverSwap, scratch: &Path, unpacked: bool) -> Result<Vec<String>> {
    let hotfixes = |id: &str| format!("--setopt={id}.module_hotfixes=true");
    if let Some(rpm) = &s.repo_rpm {
        let (repo, mut options) = extract(host, s, rpm, scratch, unpacked)?;
        options.insert(0, format!("--repofrompath={REPO_ID},{}", repo.display()));
        options.push(hotfixes(REPO_ID));
        return Ok(options);
    }
    let Some(dir) = s.from_cache.as_deref() else {
        return Ok(vec![hotfixes(&s.repo_id)]);
    };
    let cached = super::cache::read(host, dir).ok_or_else(|| {
        anyhow::anyhow!("{dir} is no longer a cached driver set; nothing was changed")
    })?;
    let mut options = super::cache::repo_options(host, REPO_ID, dir, &cached)?;
    options.push(hotfixes(REPO_ID));
    Ok(options)
}

/// Once the swap is done: gpuhost's driver cache as the swap asks ([`super::cache`]): the new
/// set read out into [`SCRATCH`] cached (`source`: the package file the profile gave), the
/// cached set it came from made the current one, or the cache removed.
fn settle_cache(host: &Host, s: &DriverSwap, source: &Option<String>) -> Result<()> {
    use super::cache::RepoCache;
    let done = match (&s.cache, &s.from_cache) {
        (Some(RepoCache::Place { .. }), Some(dir)) => super::cache::make_current(host, dir),
        (
            Some(RepoCache::Place {
                package,
                version,
                driver,
            }),
            None,
        ) => {
            let source = super::cache::Source {
                package,
                version,
                driver,
                file: source.as_deref().unwrap_or_default(),
            };
            super::cache::place(host, SCRATCH, &source).map(drop)
        }
        (Some(RepoCache::Drop), _) => super::cache::drop_all(host).map(drop),
        (Some(RepoCache::Bundle { meta, packages }), _) => {
            super::cache::place_from_bundle(host, Path::new(meta), Path::new(packages)).map(drop)
        }
        (None, _) => Ok(()),
    };
    done.context("the driver was replaced, but gpuhost's driver cache could not be written (run gpuhost again)")
}

/// dnf's own answer, before anything changes: the transaction resolved and not run
/// (`--assumeno`, its table read). Any line of the script that dnf would not carry out, or a
/// request it cannot resolve ([`gpuhost_host::dnfout::dry_run_problems`]), stops the swap here,
/// in dnf's words: a conflict the repos or the profile cause is invalid input (exit 2), the
/// host's dnf configuration refusing it (a protected package) a failure (exit 1); nothing was
/// changed either way. A package outside the set it would erase beyond what the swap names (a
/// site package that needs a file of the old local repo package goes with it, as a dependent)
/// and the profile does not allow is refused, nothing changed (exit 2).
fn refuse_erasing(cmd: &Cmd, script: &Path, s: &DriverSwap) -> Result<()> {
    use gpuhost_host::dnfout::{dry_run_problems, fault, quoted, Fault};
    let dry = cmd
        .clone()
        .arg("--assumeno")
        .arg("shell")
        .arg(script)
        .without_arg("--quiet")
        .output()?;
    let problems = dry_run_problems(&format!("{}\n{}", dry.stdout, dry.stderr));
    if !problems.is_empty() {
        let message = format!(
            "dnf would not replace the driver as asked: {}; nothing was changed (the rpm database and dnf's module state are as they were)",
            quoted(&problems, 8)
        );
        return Err(match fault(&problems) {
            Fault::Request => gpuhost_host::error::as_invalid(hinted(
                message,
                "change what the profile asks for (or the local repo package it names) so that dnf can resolve it: dnf's reason is quoted",
            )),
            Fault::Host => hinted(
                message,
                "the host's dnf configuration (dnf.conf) refuses it: change that setting, then apply again",
            ),
            Fault::Other => anyhow::anyhow!(message),
        });
    }
    let erased = outside_the_set(&removals(&dry.stdout), s);
    if erased.is_empty() {
        return Ok(());
    }
    Err(erase_refused(&erased, &erased))
}

/// The refusal of a driver change that would erase packages outside NVIDIA's set (invalid
/// input, nothing changed): `shown` as the message names them (with why, when known), `names`
/// as the hint's command takes them.
pub(crate) fn erase_refused(shown: &[String], names: &[String]) -> anyhow::Error {
    gpuhost_host::error::as_invalid(hinted(
        format!(
            "the driver change would also erase {}, which {} not NVIDIA's driver set; nothing was changed",
            shown.join(", "),
            if names.len() == 1 { "is" } else { "are" }
        ),
        format!(
            "remove {} first if it is no longer wanted, or name it in driver.allow_erase",
            names.join(" ")
        ),
    ))
}

/// The package names in the removal sections of dnf's transaction table (`Removing:`,
/// `Removing dependent packages:`, `Removing unused dependencies:`).
pub fn removals(table: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut removing = false;
    for line in table.lines() {
        if !line.starts_with(' ') {
            removing = line.trim_end().ends_with(':') && line.starts_with("Removing");
            continue;
        }
        // An entry starts one space in; a name too long for its column wraps the rest of the
        // entry onto the next line, indented further.
        if removing && !line.starts_with("  ") {
            if let Some(name) = line.split_whitespace().next() {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// The names of `removed` that are neither NVIDIA's (the swap's own removals, the packages the
/// local repos list, the local repo packages: [`DriverSwap::nvidia`]) nor allowed by the
/// profile.
pub fn outside_the_set(removed: &[String], s: &DriverSwap) -> Vec<String> {
    removed
        .iter()
        .filter(|n| !s.remove.contains(n) && !s.nvidia.contains(n) && !s.allow_erase.contains(n))
        .cloned()
        .collect()
}

/// The new package's inner repo and `.repo` file, extracted from its payload into the scratch
/// directory (`unpacked`: read ahead there already, [`super::ready`]): the repo's path and
/// dnf's options for it.
fn extract(
    host: &Host,
    s: &DriverSwap,
    rpm: &str,
    scratch: &Path,
    unpacked: bool,
) -> Result<(std::path::PathBuf, Vec<String>)> {
    let tree = scratch.join("tree");
    let unpack = || payload::unpack_repos(rpm, &tree).map(drop);
    (if unpacked { Ok(()) } else { unpack() }).map_err(|e| match e {
        Unpack::Unreadable(e) => e.context(format!("reading the payload of {rpm}")),
        Unpack::Bad(e) => gpuhost_host::error::as_invalid(hinted(
            format!("{e:#}; nothing was changed"),
            "use NVIDIA's local repo package as NVIDIA ships it (download it again and check its SHA-256)",
        )),
        Unpack::Unextracted(e) => e.context(format!("extracting {} from {rpm}", s.repo_dir)),
    })?;
    let inner = format!("{SCRATCH}/tree{}", s.repo_dir);
    let repo = tree.join(s.repo_dir.trim_start_matches('/'));
    if host.kind(format!("{inner}/repodata/repomd.xml")) != Some(gpuhost_host::rootfs::Kind::File) {
        return Err(anyhow::anyhow!(
            "{rpm} carries no repo under {} (no repodata/repomd.xml): nothing was changed",
            s.repo_dir
        ));
    }
    let options = repo_options(host, &tree, &s.repo_dir)?;
    Ok((repo, options))
}

/// The `dnf shell` script: the local package first (dnf takes it only before other jobs),
/// then the new set, then the removals, then one `run`. dnf splits each line as a POSIX shell
/// would (`shlex`), so the package's path is quoted: a folder named `GPU BUNDLE 'x'` is one
/// word.
pub fn shell_script(s: &DriverSwap) -> String {
    let specs: Vec<String> = s.install.iter().map(RepoPackage::spec).collect();
    let mut out = String::new();
    // Every file on one line: dnf takes local packages only before any other job.
    // A package whose driver set gpuhost caches is read, not installed.
    let caches = matches!(s.cache, Some(super::cache::RepoCache::Place { .. }));
    let files: Vec<String> = s
        .repo_rpm
        .iter()
        .filter(|_| !caches)
        .chain(s.files.iter())
        .map(|f| shell_quoted(f))
        .collect();
    if !files.is_empty() {
        out.push_str(&format!("install {}\n", files.join(" ")));
    }
    if !specs.is_empty() {
        out.push_str(&format!("install {}\n", specs.join(" ")));
    }
    if !s.remove.is_empty() {
        out.push_str(&format!("remove {}\n", s.remove.join(" ")));
    }
    out.push_str("run\n");
    out
}

/// `word` in single quotes, each `'` in it closed, escaped and reopened (`'\''`).
fn shell_quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `gpgcheck`/`gpgkey` for the scratch repo, as the new package's own `.repo` file says (its
/// `file:///var/…` keys read from the scratch tree).
fn repo_options(host: &Host, tree: &Path, repo_dir: &str) -> Result<Vec<String>> {
    let dir = format!("{SCRATCH}/tree/etc/yum.repos.d");
    let mut gpgcheck = "0".to_string();
    let mut keys = Vec::new();
    for name in host.list_dir(&dir)? {
        let Some(text) = host.read_opt(format!("{dir}/{name}"))? else {
            continue;
        };
        for (_id, key, value) in repo_entries(&text) {
            match key {
                "gpgcheck" => gpgcheck = value.trim().to_string(),
                "gpgkey" => {
                    for k in value.split([',', ' ']).filter(|k| !k.is_empty()) {
                        keys.push(payload::repo_key(
                            host,
                            k,
                            (tree, &format!("{SCRATCH}/tree")),
                            repo_dir,
                            &format!("/etc/yum.repos.d/{name}"),
                        )?);
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = vec![format!("--setopt={REPO_ID}.gpgcheck={gpgcheck}")];
    if !keys.is_empty() {
        out.push(format!("--setopt={REPO_ID}.gpgkey={}", keys.join(",")));
    }
    Ok(out)
}

/// What the swap should have done and did not: packages not installed at their version, names
/// still installed. Empty after a swap.
pub fn not_swapped(host: &Host, s: &DriverSwap) -> Result<Vec<String>> {
    let names: Vec<&str> = s
        .install
        .iter()
        .map(|p| p.name.as_str())
        .chain(s.remove.iter().map(String::as_str))
        .collect();
    let installed = gpuhost_host::rpm::query(host, &names)?;
    let mut out = Vec::new();
    for p in &s.install {
        let ok = installed.get(&p.name).is_some_and(|v| {
            v.iter()
                .any(|i| i.version == p.version && i.release == p.release)
        });
        if !ok {
            out.push(format!("{} not installed", p.spec()));
        }
    }
    for r in &s.remove {
        if installed.get(r).is_some_and(|v| !v.is_empty()) {
            out.push(format!("{r} still installed"));
        }
    }
    Ok(out)
}
