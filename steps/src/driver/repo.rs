//! `driver-repo`: NVIDIA's local repo package named by the profile — a CUDA local repo
//! (`cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm`) or a driver-only local repo
//! (`nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm`; see [`gpuhost_nvidia::localrepo`]) —
//! verified (RPM, checksum, architecture, OS release, the driver version its inner repo really
//! carries) and installed with dnf. An installed local repo of either kind is recognised;
//! another one (another driver version) is replaced only when the profile says so.
//!
//! On a host where the package is already installed at that version the file is not read
//! again (it may be gigabytes, or deleted since): the inner repo directory is checked instead.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};

use super::change::plan_swap;
use super::context::{host_arch, NO_DRIVER};
use super::installed::{family_in_repo, present_local_repos, present_repo_dir, transition};
use crate::run::transition::{InstalledRepo, Transition};
use crate::step::{Change, Check, Ctx, Install, Step, Work};
use crate::transaction::cache;
use crate::work::RepoCache;
use gpuhost_host::error::{as_invalid, hinted};
use gpuhost_nvidia::localrepo::LocalRepoFile;
use gpuhost_nvidia::localrepo::{installed_driver, RepoKind};
use gpuhost_nvidia::packages::{self, DRIVER_FILE_PREFIX};

pub(crate) struct DriverRepo;

/// The first bytes of every RPM file (the lead).
const RPM_MAGIC: [u8; 4] = [0xed, 0xab, 0xee, 0xdb];

/// The driver of an installed local repo package (either kind), or its version.
fn driver_of(name: &str, version: &str) -> String {
    installed_driver(name, version).unwrap_or_else(|| version.to_string())
}

/// Versions of `nvidia-driver` in a list of file names (`nvidia-driver-535.104.05-1.el8.x86_64.rpm`).
fn nvidia_driver_versions(files: &[String]) -> Vec<String> {
    let mut v: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let base = f.rsplit('/').next().unwrap_or(f);
            let rest = base.strip_prefix(DRIVER_FILE_PREFIX)?;
            base.ends_with(".rpm").then_some(())?;
            let ver = rest.split('-').next()?;
            ver.starts_with(|c: char| c.is_ascii_digit())
                .then(|| ver.to_string())
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The file's SHA-256 is `want` (`driver.sha256`, cloud-init's `--sha256`).
fn sha256_matches(path: &Path, want: &str) -> Result<()> {
    let got = gpuhost_host::fsutil::sha256_file(path)?;
    if !got.eq_ignore_ascii_case(want) {
        return Err(hinted(
            format!(
                "{}: SHA-256 is {got}, but the profile expects {want}; nothing was installed",
                path.display()
            ),
            "download the file again (or fix driver.sha256) and compare with NVIDIA's published checksum",
        ));
    }
    Ok(())
}

/// Check the file itself before anything is installed from it.
/// Returns the package's file list (its payload: the inner repo's RPMs among them).
fn verify_file(
    ctx: &Ctx<'_>,
    path: &Path,
    name: &LocalRepoFile,
    sha256: Option<&str>,
) -> Result<Vec<String>> {
    let (host, arch) = (ctx.host, host_arch(ctx));
    let shown = path.display();
    // Its type first, from the name (a link followed): a FIFO or a device is refused without
    // being opened, so a FIFO with no writer never blocks the run.
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(hinted(
                format!("{shown} does not exist"),
                "copy NVIDIA's local repo package there, or point driver.local_repo_rpm at it",
            ))
        }
        Err(e) => return Err(e).with_context(|| format!("reading {shown}")),
        Ok(m) if !m.is_file() => {
            return Err(hinted(
                format!(
                    "{shown} is {}, not a package file; nothing was read",
                    gpuhost_host::fsutil::kind_of(m.file_type())
                ),
                "point driver.local_repo_rpm at NVIDIA's local repo package",
            ))
        }
        Ok(_) => {}
    }
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {shown}"))?;
    let mut lead = [0u8; 4];
    let is_rpm = f.read_exact(&mut lead).is_ok() && lead == RPM_MAGIC;
    if !is_rpm {
        return Err(hinted(
            format!("{shown} is not an RPM package (an interrupted or failed download?)"),
            "download NVIDIA's local repo package again",
        ));
    }
    if let Some(want) = sha256 {
        sha256_matches(path, want)?;
    }
    // An apply reads it whole once, before the first change (crate::transaction::ready);
    // a plan here.
    if !ctx.reads_ahead {
        intact(host, path)?;
    }
    // The root's rpm (its database, its keys), never the build host's `%_dbpath`: Debian's rpm
    // would make a database in the user's HOME just to read the file. `--noglob`: the path is
    // a path, not a pattern (a bundle directory may hold quotes or spaces).
    let out = host
        .rpm()
        .args([
            "-qp",
            "--noglob",
            "--qf",
            "%{NAME}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\n[%{FILENAMES}\\n]",
        ])
        .arg(path)
        .run()?;
    let mut lines = out.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
    let files: Vec<String> = lines.map(str::to_string).collect();
    let [h_name, h_version, _h_release, h_arch] = header.as_slice() else {
        return Err(anyhow::anyhow!(
            "{shown}: rpm printed no header: {}",
            out.stdout
        ));
    };
    if *h_arch != arch {
        return Err(hinted(
            format!("{shown} is built for {h_arch}, but this host is {arch}"),
            format!("use NVIDIA's {arch} local repo package"),
        ));
    }
    if *h_name != name.package
        || installed_driver(h_name, h_version).as_deref() != Some(name.driver.as_str())
    {
        return Err(hinted(
            format!(
                "{shown} is really {h_name} {h_version}, not what its file name says (driver {})",
                name.driver
            ),
            "use the file under the name NVIDIA gave it",
        ));
    }
    // Its repo's packages are for this machine too (x86_64 repos carry i686 libraries, any
    // repo noarch packages): an aarch64 package with an x86_64 repo inside is refused here,
    // before the build dependencies go in.
    if let Some(foreign) = files.iter().find(|f| foreign_package(f, &arch)) {
        return Err(as_invalid(hinted(
            format!(
                "{shown}: its repo holds packages built for another machine ({}), but this host is {arch}; nothing was installed",
                foreign.rsplit('/').next().unwrap_or(foreign)
            ),
            format!("use NVIDIA's {arch} local repo package as NVIDIA ships it"),
        )));
    }
    let carried = nvidia_driver_versions(&files);
    if !carried.contains(&name.driver) {
        let what = if carried.is_empty() {
            format!("no {} package", packages::DRIVER)
        } else {
            format!("{} {}", packages::DRIVER, carried.join(", "))
        };
        return Err(hinted(
            format!(
                "{shown}: the file name says driver {}, but its repo carries {what}",
                name.driver
            ),
            "use NVIDIA's local repo package of the driver you want",
        ));
    }
    Ok(files)
}

/// The file read whole by gpuhost's reader ([`crate::transaction::payload::verify_repos`]):
/// its header's and payload's SHA-256 digests, as `rpm -K` checks them, and every entry inside
/// the package's own folders. A file cut short or damaged (a download interrupted, a disk
/// error, a payload truncated behind an intact header), or one whose payload leaves its
/// folders, is refused before any change, naming what was found. A signed package (or one too
/// old for a payload digest) is also checked by `rpm -K`, against the root's keys.
fn intact(host: &gpuhost_host::host::Host, path: &Path) -> Result<()> {
    use crate::transaction::payload::{read_fault, signature_intact, verify_repos};
    let pkg = verify_repos(path).map_err(|e| read_fault(path, e))?;
    signature_intact(host, &pkg, path, path)
}

/// Whether a file of a local repo package is an RPM built for another machine than `arch`.
fn foreign_package(file: &str, arch: &str) -> bool {
    let Some(stem) = file.strip_suffix(".rpm") else {
        return false;
    };
    stem.rsplit('.')
        .next()
        .and_then(gpuhost_host::arch::family)
        .is_some_and(|f| f != arch)
}

/// gpuhost's cached driver set that dnf is given ([`cache::REPO_FILE`]) removed by hand: the
/// same driver's package puts it back (the step reads it again), but a swap to another driver
/// needs the installed set's manifest to know what it replaces, so it is refused before any
/// change (exit 2) with the way back (issue 53, item 5: before, every dnf run stopped at the
/// gone repo's metadata, a swap included).
fn cache_not_gone_under_a_swap(ctx: &Ctx<'_>, plan: &crate::run::DriverPlan) -> Result<()> {
    let Some(gone) = cache::gone(ctx.host) else {
        return Ok(());
    };
    if gone == cache::dir_of(&plan.repo.package, &plan.cache_version()) {
        return Ok(());
    }
    Err(gpuhost_host::error::as_invalid(gpuhost_host::error::hinted(
        format!("gpuhost's cached driver set {gone} (the installed driver's, named by {}) is gone: a swap to {} cannot tell what it replaces; nothing was changed", cache::REPO_FILE, plan.repo.package),
        "apply once with driver.local_repo_rpm set to the installed driver's local repo package (it puts the cached set back), then apply the new one",
    )))
}

/// With `driver.keep_local_repo = false` the driver set read out into `scratch` moves into
/// gpuhost's cache after the transaction: a rename on one filesystem, a copy of `bytes` where
/// the cache lies on another (a `/var/lib` mounted apart), which then needs that room before the
/// first change (issue 53, item 5: before, a full cache filesystem failed after the driver was
/// replaced, and the advised rerun failed the same way).
fn cache_need(ctx: &Ctx<'_>, scratch: &str, bytes: u64) -> Option<gpuhost_host::hostinfo::Need> {
    use gpuhost_host::hostinfo::{Mounts, Role};
    let mounts = Mounts::read();
    let on = |p: &str| {
        mounts
            .space(ctx.host, p, Role::Need(String::new()))
            .mount_point
    };
    let cache = gpuhost_host::host::DRIVER_CACHE;
    (on(cache) != on(scratch)).then(|| gpuhost_host::hostinfo::Need {
        path: cache.into(),
        bytes,
        what:
            "the driver set copied into gpuhost's cache (another filesystem than its scratch copy)"
                .into(),
    })
}

/// The size of the local repo package (a file on the build host, as `driver.local_repo_rpm`
/// names it), for the space check before an install; None when it cannot be read (the step
/// then reports why).
pub fn local_repo_size(path: &Path) -> Option<u64> {
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

impl Step for DriverRepo {
    fn id(&self) -> &'static str {
        "driver-repo"
    }

    fn summary(&self) -> &'static str {
        "install NVIDIA's local repo package named by the profile, verified"
    }

    fn rpm_names(&self, ctx: &Ctx<'_>) -> Vec<String> {
        let mut names = present_local_repos(ctx);
        if let Some(p) = &ctx.driver {
            names.push(p.repo.package.clone());
            names.extend(family_in_repo(ctx, p));
        }
        names
    }

    fn needs_driver_package(&self) -> bool {
        true
    }

    /// The local repo package's own size (measured), and on the live system the estimates for
    /// the driver packages it brings; in an install root (image builds, tests with synthetic
    /// packages) only the measured figure. The package is installed from a copy on the root's
    /// disk ([`gpuhost_host::stage::PACKAGES`]): its size again, unless the root's filesystem
    /// shares the bytes (a reflink or hard link, [`gpuhost_host::stage::copies`]). A first
    /// install, or a swap, reads the package's repo out of it into a scratch folder
    /// ([`crate::transaction::ahead::SCRATCH`], [`crate::transaction::swap::SCRATCH`]): the
    /// metadata and the driver packages, never the CUDA toolkit's, as the header sizes them
    /// ([`crate::transaction::payload::repos_size`]).
    fn space_needs(&self, ctx: &Ctx<'_>, check: &Check) -> Vec<gpuhost_host::hostinfo::Need> {
        let Some(plan) = &ctx.driver else {
            return gpuhost_host::hostinfo::driver_needs(None, ctx.host.is_live());
        };
        let rpm = local_repo_size(&plan.path);
        // With driver.keep_local_repo = false nothing of the package lands under /var: its
        // driver set is the scratch tree below, moved into gpuhost's cache.
        let installed = rpm.filter(|_| plan.keep_local_repo);
        let mut needs = gpuhost_host::hostinfo::driver_needs(installed, ctx.host.is_live());
        let installs = check.changes.iter().any(|c| {
            matches!(c.work, Work::SwapDriver(_))
                || matches!(&c.work, Work::Install(i) if i.brings_repo)
        });
        let copies = gpuhost_host::stage::copies(ctx.host, &plan.path);
        if let (Some(bytes), true, true) = (rpm, installs, copies) {
            // The package is installed from a copy on the root's disk (gpuhost_host::stage).
            needs.push(gpuhost_host::hostinfo::Need {
                path: gpuhost_host::stage::PACKAGES.into(),
                bytes,
                what: "the copy of the local repo package the transaction installs".into(),
            });
        }
        let first = check
            .changes
            .iter()
            .any(|c| matches!(&c.work, Work::Install(i) if i.brings_repo));
        let repos = crate::transaction::payload::repos_size(&plan.path).or(rpm);
        if let (Some(bytes), true) = (repos, first) {
            // A first converge reads the repo out of the copy (crate::transaction::ahead).
            needs.push(gpuhost_host::hostinfo::Need {
                path: crate::transaction::ahead::SCRATCH.into(),
                bytes,
                what: "the local repo's metadata and driver packages, read out for the one transaction".into(),
            });
        }
        // The check planned the swap: its scratch copy needs room too.
        let swaps = check
            .changes
            .iter()
            .any(|c| matches!(c.work, Work::SwapDriver(_)));
        if let (Some(bytes), true) = (repos, swaps) {
            needs.push(gpuhost_host::hostinfo::Need {
                path: crate::transaction::swap::SCRATCH.into(),
                bytes,
                what: "the new local repo's metadata and driver packages, read out for the driver swap".into(),
            });
        }
        let places = check
            .changes
            .iter()
            .any(|c| matches!(c.work, Work::Install(_) | Work::SwapDriver(_)));
        if let (Some(bytes), false, true) = (repos, plan.keep_local_repo, places) {
            let scratch = if swaps {
                crate::transaction::swap::SCRATCH
            } else {
                crate::transaction::ahead::SCRATCH
            };
            needs.extend(cache_need(ctx, scratch, bytes));
        }
        needs
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::context::not_applicable(ctx)
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let Some(plan) = &ctx.driver else {
            return Ok(Check::in_sync(NO_DRIVER));
        };
        cache_not_gone_under_a_swap(ctx, plan)?;
        let (path, name) = (&plan.path, &plan.repo);
        fits_host(path, name, ctx.profile.os.major, &host_arch(ctx))?;
        let transition = transition(ctx)?;
        // `apply --bundle` with a bundle that carries the driver set: the package file is not
        // on this node (the bundle's own name for it, or a rollback's to another bundle's
        // driver), and the set comes from the bundle or gpuhost's cache.
        let bundled = BundleSet::of(ctx, plan)?;
        if transition.repo_installed() {
            // Installed already: a checksum given is still the file's to match (a wrong one is
            // a mistake to report, not to pass over because nothing needs installing). A set in
            // gpuhost's cache was checked when it was cached: the file may be gone since
            // (driver.keep_local_repo = false needs it no more), and is checked when it is there;
            // a bundle's set was checked against the manifest the bundle was verified by.
            let cached = present_repo_dir(ctx, plan) != name.repo_dir();
            let gone = (cached || bundled.is_some()) && local_repo_size(path).is_none();
            if let (Some(want), false) = (ctx.profile.driver.sha256.as_deref(), gone) {
                sha256_matches(path, want).map_err(as_invalid)?;
            }
            return installed_check(ctx, plan, &transition, bundled.as_ref());
        }
        if let Some(b) = bundled.as_ref().filter(|b| b.serves(plan)) {
            return from_bundle(ctx, plan, &transition, b);
        }
        if let Some(check) = swap_from_cache(ctx, plan, &transition, bundled.is_some())? {
            return Ok(check);
        }
        if let Some(b) = &bundled {
            return Err(b.lacks(plan));
        }
        // The file is what the user gave: anything wrong with it is invalid input (exit 2),
        // found before any step changes anything.
        let files = verify_file(ctx, path, name, ctx.profile.driver.sha256.as_deref())
            .map_err(as_invalid)?;
        let verified = verified_text(ctx);
        let mut check = Check::default();
        match &transition {
            Transition::Swap { from, .. } => {
                let mut swap = plan_swap(ctx, plan, from, (&files, &name.repo_dir()))?;
                swap.cache = if !plan.keep_local_repo {
                    Some(placing(plan))
                } else if from.iter().any(|r| r.cached.is_some()) {
                    Some(RepoCache::Drop)
                } else {
                    None
                };
                check.changes.push(swap_change(plan, from, swap, &verified));
                return Ok(check);
            }
            Transition::Refused { others } => return Err(refused(plan, others)),
            _ => {}
        }
        let cache = (!plan.keep_local_repo).then(|| placing(plan));
        check.changes.push(Change::new(
            Work::Install(Install {
                specs: vec![path.display().to_string()],
                brings_repo: true,
                cache,
                ..Install::default()
            }),
            format!(
                "driver {} not installed{}; {verified}{}",
                name.driver,
                serves_text(&name.driver),
                kept_text(plan)
            ),
        ));
        Ok(check)
    }
}

/// The driver set a bundle carries instead of NVIDIA's package (`gpuhost bundle` since issue
/// 42), when the run's profile names no package file on this node: the bundle's driver folder
/// (NVIDIA's metadata and gpuhost's cache manifest, a path on this machine) and its packages
/// in the bundle's repo.
struct BundleSet {
    meta: std::path::PathBuf,
    packages: std::path::PathBuf,
    cached: cache::Cached,
}

impl BundleSet {
    /// The bundle's set, when the run uses a bundle that carries one and the profile's package
    /// file is not on this node (a `--set driver.local_repo_rpm` of a file that is there is
    /// installed as online).
    fn of(ctx: &Ctx<'_>, plan: &crate::run::DriverPlan) -> Result<Option<BundleSet>> {
        let Some(bundle) = ctx.host.bundle() else {
            return Ok(None);
        };
        let Some(meta) = &bundle.driver_meta else {
            return Ok(None);
        };
        match std::fs::metadata(&plan.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => return Ok(None),
        }
        Ok(Some(BundleSet {
            cached: cache::bundle_manifest(meta)?,
            meta: meta.clone(),
            packages: bundle.dir.join("Packages"),
        }))
    }

    /// The bundle's set is the profile's package's (not a rollback to another driver).
    fn serves(&self, plan: &crate::run::DriverPlan) -> bool {
        self.cached.package == plan.repo.package && self.cached.version == plan.cache_version()
    }

    /// How the set becomes gpuhost's cache once it is installed.
    fn settle(&self) -> RepoCache {
        RepoCache::Bundle {
            meta: self.meta.display().to_string(),
            packages: self.packages.display().to_string(),
        }
    }

    /// The bundle cannot serve the profile's driver: its package is not on this node, the
    /// bundle carries another driver's set and gpuhost's cache none of it (a rollback to a
    /// driver whose cached set is gone). What is missing, and what serves it.
    fn lacks(&self, plan: &crate::run::DriverPlan) -> anyhow::Error {
        as_invalid(hinted(
            format!(
                "driver {} needs its local repo package {} or its driver set: the package is not on this node, the bundle carries driver {}'s set ({} {}), and gpuhost's cache holds none of driver {}",
                plan.repo.driver,
                package_file(plan),
                self.cached.driver,
                self.cached.package,
                self.cached.version,
                plan.repo.driver
            ),
            format!(
                "apply a bundle of driver {} (gpuhost apply --bundle DIR|TARBALL), or give its package on this node: --set driver.local_repo_rpm=PATH/{}",
                plan.repo.driver,
                package_file(plan)
            ),
        ))
    }
}

/// The package file's name (what NVIDIA calls it), without the folder.
fn package_file(plan: &crate::run::DriverPlan) -> String {
    plan.path.file_name().map_or_else(
        || plan.path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// What the check says of the package's checksum.
fn verified_text(ctx: &Ctx<'_>) -> String {
    if ctx.profile.driver.sha256.is_some() {
        "SHA-256 verified".into()
    } else {
        "no driver.sha256 to verify".into()
    }
}

/// What `driver.keep_local_repo` makes of the package, for the plan.
fn kept_text(plan: &crate::run::DriverPlan) -> String {
    if plan.keep_local_repo {
        "; installed with its whole repo (driver.keep_local_repo = true)".to_string()
    } else {
        format!(
            "; read, not installed: its driver set kept in gpuhost's cache {}, no CUDA toolkit package on the node (driver.keep_local_repo = false)",
            cache::dir_of(&plan.repo.package, &plan.cache_version())
        )
    }
}

/// The cache placement of the profile's package (`driver.keep_local_repo = false`).
fn placing(plan: &crate::run::DriverPlan) -> RepoCache {
    RepoCache::Place {
        package: plan.repo.package.clone(),
        version: plan.cache_version(),
        driver: plan.repo.driver.clone(),
    }
}

/// `apply --bundle` with a bundle that carries the driver set, not NVIDIA's package
/// (`gpuhost bundle` since issue 42): the set is installed from the bundle's repo (a first
/// converge, or one swap from another driver), and once it is, the bundle's driver folder and
/// those packages become gpuhost's cache, checked against NVIDIA's metadata
/// ([`cache::place_from_bundle`]). A node that holds another driver's local repo package while
/// the profile keeps it (`driver.keep_local_repo = true`, a node set up online) is refused:
/// the bundle cannot bring the new package, and the swap would leave the node none.
fn from_bundle(
    ctx: &Ctx<'_>,
    plan: &crate::run::DriverPlan,
    transition: &Transition,
    bundle: &BundleSet,
) -> Result<Check> {
    let dir = cache::dir_of(&bundle.cached.package, &bundle.cached.version);
    let mut check = Check::default();
    match transition {
        Transition::Swap { from, .. } => {
            if plan.keep_local_repo {
                if let Some(kept) = from.iter().find(|r| r.cached.is_none()) {
                    return Err(keeps_package(plan, kept, &dir));
                }
            }
            let shown = bundle.meta.display().to_string();
            let files: Vec<String> = cache::bundle_packages(&bundle.packages, &bundle.cached)?
                .into_iter()
                .map(|f| format!("{shown}/{f}"))
                .collect();
            let mut swap = plan_swap(ctx, plan, from, (&files, &shown))?;
            swap.repo_rpm = None;
            swap.repo_id = gpuhost_host::host::BUNDLE_REPO_ID.to_string();
            swap.cache = Some(bundle.settle());
            let how = format!("from the bundle's repo, then kept in gpuhost's cache {dir}");
            check.changes.push(swap_change(plan, from, swap, &how));
        }
        Transition::Refused { others } => return Err(refused(plan, others)),
        _ => check.changes.push(Change::new(
            Work::Install(Install {
                brings_repo: true,
                cache: Some(bundle.settle()),
                ..Install::default()
            }),
            format!(
                "driver {} not installed{}; its packages come from the bundle's repo (the bundle carries the driver set and NVIDIA's metadata, not the local repo package) and are then kept in gpuhost's cache {dir}{}",
                plan.repo.driver,
                serves_text(&plan.repo.driver),
                if plan.keep_local_repo {
                    " (driver.keep_local_repo = true: no package to keep; apply online with it to install it)"
                } else {
                    ""
                }
            ),
        )),
    }
    Ok(check)
}

/// A node that holds NVIDIA's local repo package `kept` of another driver, a profile that keeps
/// it (`driver.keep_local_repo = true`) and a bundle that carries the new driver's set but not
/// its package: refused before any change, naming the package the bundle lacks, and the two
/// ways that work.
fn keeps_package(
    plan: &crate::run::DriverPlan,
    kept: &InstalledRepo,
    cache_dir: &str,
) -> anyhow::Error {
    as_invalid(hinted(
        format!(
            "this node keeps NVIDIA's local repo package {kept} (driver {}) and the profile keeps one (driver.keep_local_repo = true), but the bundle carries driver {}'s set without its package {}: the swap would leave the node no local repo package",
            driver_of(&kept.name, &kept.version),
            plan.repo.driver,
            package_file(plan)
        ),
        format!(
            "add --set driver.keep_local_repo=false to swap to the bundle's set, kept in gpuhost's cache {cache_dir} ({} goes, the CUDA toolkit's packages it holds with it), or give the package on this node: --set driver.local_repo_rpm=PATH/{}",
            kept.name,
            package_file(plan)
        ),
    ))
}

/// `driver.keep_local_repo = false` (or a bundle run without the package file, `no_file`), a
/// swap back to the set gpuhost's cache kept from before (a rollback): its packages come from
/// that folder, checked against NVIDIA's metadata when it was cached; the package file is not
/// read (it may be gone).
fn swap_from_cache(
    ctx: &Ctx<'_>,
    plan: &crate::run::DriverPlan,
    transition: &Transition,
    no_file: bool,
) -> Result<Option<Check>> {
    let Transition::Swap { from, .. } = transition else {
        return Ok(None);
    };
    // With the package kept (`true`) the file is installed, unless it is not on this node and
    // a bundle stands in for it: then the cached set is the only source.
    if plan.keep_local_repo && !no_file {
        return Ok(None);
    }
    let Some((dir, cached)) = cache::find(ctx.host, &plan.repo.package, &plan.cache_version())
    else {
        return Ok(None);
    };
    let files = super::change::repo_files(ctx, &dir);
    let mut swap = plan_swap(ctx, plan, from, (&files, &dir))?;
    swap.repo_rpm = None;
    swap.from_cache = Some(dir.clone());
    swap.cache = Some(placing(plan));
    let mut check = Check::default();
    let how = format!(
        "from gpuhost's cache {dir} (read from {} and checked when it was cached; the file is not read again)",
        cached.source
    );
    check.changes.push(swap_change(plan, from, swap, &how));
    Ok(Some(check))
}

/// The package must be for this host's release and architecture (invalid input otherwise).
fn fits_host(path: &Path, name: &LocalRepoFile, major: u32, arch: &str) -> Result<()> {
    let shown = path.display();
    if name.os_major != major {
        return Err(as_invalid(hinted(
            format!(
                "{shown} is for RHEL {} but this host runs Oracle Linux {major}",
                name.os_major
            ),
            match name.kind {
                RepoKind::Cuda => format!("use NVIDIA's cuda-repo-rhel{major}-…-local package"),
                RepoKind::DriverOnly => format!(
                    "use NVIDIA's nvidia-driver-local-repo-rhel{major}-{}… package",
                    name.driver
                ),
            },
        )));
    }
    if name.arch != arch {
        return Err(as_invalid(hinted(
            format!(
                "{shown} is built for {}, but this host is {arch}",
                name.arch
            ),
            format!("use NVIDIA's {arch} local repo package"),
        )));
    }
    Ok(())
}

/// The profile's local repo is on the node (its package installed, or its driver set in
/// gpuhost's cache): its repo must hold the driver, the older versions a killed driver change
/// left beside the new go, and the repo moves where `driver.keep_local_repo` says.
fn installed_check(
    ctx: &Ctx<'_>,
    plan: &crate::run::DriverPlan,
    transition: &Transition,
    bundled: Option<&BundleSet>,
) -> Result<Check> {
    let (path, name) = (&plan.path, &plan.repo);
    let dir = present_repo_dir(ctx, plan);
    let cached = dir != name.repo_dir();
    let found = ctx.host.files_with_prefix(&dir, DRIVER_FILE_PREFIX);
    if !nvidia_driver_versions(&found).contains(&name.driver) {
        let fix = if cached {
            format!(
                "remove {dir} and {} and run gpuhost again: the set is read from {} again",
                cache::REPO_FILE,
                if bundled.is_some() {
                    "the bundle".to_string()
                } else {
                    path.display().to_string()
                }
            )
        } else {
            format!("reinstall it: dnf reinstall {}", path.display())
        };
        return Err(hinted(
            format!(
                "{} is installed but {dir} holds no nvidia-driver {}",
                name.package, name.driver
            ),
            fix,
        ));
    }
    if let Transition::Repair { duplicates, behind } = transition {
        return repair(ctx, &name.driver, duplicates, behind);
    }
    // Cached while the profile keeps NVIDIA's package, or installed while it does not.
    let moves = cached == plan.keep_local_repo;
    match bundled {
        // A bundle cannot bring the package: the set stays in gpuhost's cache.
        Some(_) if moves && cached => {
            return Ok(Check::in_sync(format!(
                "{} in gpuhost's cache {dir}: driver {}{}; driver.keep_local_repo = true, but the bundle carries no local repo package (apply online with it to install it)",
                name.package,
                name.driver,
                serves_text(&name.driver)
            )))
        }
        Some(b) if moves => return moved_from_bundle(plan, b),
        None if moves => return moved(ctx, plan, cached),
        _ => {}
    }
    let held = if cached {
        format!("in gpuhost's cache {dir} (driver.keep_local_repo = false)")
    } else {
        "installed".to_string()
    };
    Ok(Check::in_sync(format!(
        "{} {held}: driver {}{}",
        name.package,
        name.driver,
        serves_text(&name.driver)
    )))
}

/// A transaction stopped part-way: the duplicates it left removed, the packages it left
/// behind brought to the driver's version.
fn repair(ctx: &Ctx<'_>, driver: &str, duplicates: &[String], behind: &[String]) -> Result<Check> {
    let mut check = Check::default();
    if !duplicates.is_empty() {
        check.changes.push(Change::new(
            Work::Remove(duplicates.to_vec()),
            format!(
                "an interrupted transaction left another version beside driver {}: {}",
                driver,
                duplicates.join(", ")
            ),
        ));
    }
    if !behind.is_empty() {
        check.changes.push(Change::new(
            Work::Install(Install {
                specs: behind.to_vec(),
                // gpuhost's own locks must not hide the driver's version from it.
                disable_excludes: super::locks::locked(ctx)?,
                ..Install::default()
            }),
            format!(
                "a transaction stopped part-way left these at another version than driver {}: {}",
                driver,
                behind.join(", ")
            ),
        ));
    }
    Ok(check)
}

/// The profile's repo is on the node, but not as `driver.keep_local_repo` says: into gpuhost's
/// cache (`false`: the package is read once more, its driver set cached and the package
/// removed, the toolkit's packages with it) or out of it (`true`: NVIDIA's package installed,
/// the cache removed). One transaction each; the driver set stays as it is.
fn moved(ctx: &Ctx<'_>, plan: &crate::run::DriverPlan, cached: bool) -> Result<Check> {
    let (path, name) = (&plan.path, &plan.repo);
    verify_file(ctx, path, name, ctx.profile.driver.sha256.as_deref()).map_err(as_invalid)?;
    let verified = verified_text(ctx);
    let (cache, remove, why) = if cached {
        (
            RepoCache::Drop,
            Vec::new(),
            format!(
                "driver.keep_local_repo = true: {} is installed with its whole repo and gpuhost's cache of its driver set is removed; {verified}",
                name.package
            ),
        )
    } else {
        (
            placing(plan),
            vec![name.package.clone()],
            format!(
                "driver.keep_local_repo = false: the driver set of {} moves into gpuhost's cache {} and the package is removed, the CUDA toolkit's packages with it; {verified}",
                name.package,
                cache::dir_of(&name.package, &plan.cache_version())
            ),
        )
    };
    let mut check = Check::default();
    check.changes.push(Change::new(
        Work::Install(Install {
            specs: vec![path.display().to_string()],
            brings_repo: true,
            cache: Some(cache),
            remove,
            ..Install::default()
        }),
        why,
    ));
    Ok(check)
}

/// `driver.keep_local_repo = false` on a node that holds the profile's package (set up online)
/// and a bundle of the same driver: the bundle's set becomes gpuhost's cache and the package
/// is removed, the toolkit's packages with it, in one transaction; the driver set stays. A
/// rollback's bundle run to another driver whose package is installed: the bundle has no set
/// of it to cache, so that is refused, naming what would serve.
fn moved_from_bundle(plan: &crate::run::DriverPlan, bundle: &BundleSet) -> Result<Check> {
    let name = &plan.repo;
    if !bundle.serves(plan) {
        return Err(as_invalid(hinted(
            format!(
                "driver.keep_local_repo = false: the driver set of {} would move into gpuhost's cache, but its package file is not on this node and the bundle carries driver {}'s set",
                name.package, bundle.cached.driver
            ),
            format!(
                "add --set driver.keep_local_repo=true to keep {} installed, or give its file: --set driver.local_repo_rpm=PATH/{}",
                name.package,
                package_file(plan)
            ),
        )));
    }
    let mut check = Check::default();
    check.changes.push(Change::new(
        Work::Install(Install {
            brings_repo: true,
            cache: Some(bundle.settle()),
            remove: vec![name.package.clone()],
            ..Install::default()
        }),
        format!(
            "driver.keep_local_repo = false: the driver set of {} is kept in gpuhost's cache {} from the bundle and the package is removed, the CUDA toolkit's packages with it",
            name.package,
            cache::dir_of(&name.package, &plan.cache_version())
        ),
    ));
    Ok(check)
}

/// The installed NVIDIA local repos, as the plan shows them.
fn listed(others: &[InstalledRepo]) -> String {
    others
        .iter()
        .map(|r| format!("{r} (driver {})", driver_of(&r.name, &r.version)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Another driver's local repo is installed and the profile does not allow replacing it.
fn refused(plan: &crate::run::DriverPlan, others: &[InstalledRepo]) -> anyhow::Error {
    hinted(
        format!(
            "another NVIDIA local repo is installed: {}; the profile asks for {} (driver {})",
            listed(others),
            plan.repo.package,
            plan.repo.driver
        ),
        "set driver.replace_local_repo = true to replace it, or point driver.local_repo_rpm at the installed one",
    )
}

/// Another driver's local repo is installed and the profile says to replace it: one
/// transaction replaces the driver (the old repo and set go, the new come).
fn swap_change(
    plan: &crate::run::DriverPlan,
    from: &[InstalledRepo],
    swap: crate::transaction::swap::DriverSwap,
    verified: &str,
) -> Change {
    let name = &plan.repo;
    Change::new(
        Work::SwapDriver(swap),
        format!(
            "driver {}{} replaces {} (driver.replace_local_repo); {verified}",
            name.driver,
            serves_text(&name.driver),
            listed(from)
        ),
    )
}

/// ` (serves CUDA ≤ 12.2 natively, …)`: which CUDA the driver runs, for the plan
/// (`gpuhost_nvidia::compat`).
fn serves_text(driver: &str) -> String {
    gpuhost_nvidia::compat::serves_str(driver)
        .map(|s| format!(" (serves {})", s.range()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repo_package_for_another_machine_is_told_by_its_arch() {
        let x86 = "/var/r/nvidia-driver-580.82.07-1.el9.x86_64.rpm";
        let i686 = "/var/r/nvidia-driver-libs-580.82.07-1.el9.i686.rpm";
        let arm = "/var/r/nvidia-driver-580.82.07-1.el9.aarch64.rpm";
        let noarch = "/var/r/kmod-nvidia-open-dkms-580.82.07-1.el9.noarch.rpm";
        assert!(foreign_package(x86, "aarch64") && foreign_package(i686, "aarch64"));
        assert!(!foreign_package(x86, "x86_64") && !foreign_package(i686, "x86_64"));
        assert!(foreign_package(arm, "x86_64") && !foreign_package(arm, "aarch64"));
        assert!(
            !foreign_package(noarch, "aarch64")
                && !foreign_package("/var/r/repodata/repomd.xml", "x86_64")
        );
    }

    #[test]
    fn reads_driver_versions_from_inner_repo_file_names() {
        let files = vec![
            "/var/cuda-repo-rhel8-12-2-local".to_string(),
            "/var/cuda-repo-rhel8-12-2-local/nvidia-driver-535.104.05-1.el8.x86_64.rpm".into(),
            "/var/cuda-repo-rhel8-12-2-local/nvidia-driver-cuda-535.104.05-1.el8.x86_64.rpm".into(),
            "/var/cuda-repo-rhel8-12-2-local/nvidia-driver-libs-535.104.05-1.el8.x86_64.rpm".into(),
        ];
        assert_eq!(nvidia_driver_versions(&files), vec!["535.104.05"]);
        assert_eq!(
            driver_of("cuda-repo-rhel8-12-4-local", "12.4.1_550.54.15"),
            "550.54.15"
        );
        assert_eq!(
            driver_of("nvidia-driver-local-repo-rhel9-570.124.06", "1.0"),
            "570.124.06"
        );
    }
}
