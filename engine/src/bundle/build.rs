//! `gpuhost bundle`: resolve everything a profile installs on a clean target, and write it as a
//! verified offline repo (see the module above for the layout).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;

use super::kmods::{self, KmodPart};
use super::manifest::{self, DriverSet, Manifest, FORMAT, MANIFEST};
use super::modulemd::{self, Wanted};
use super::tempdir::TempDir;
use crate::runner::{self, Ctx, Install, Phase, Selection, Work};
use gpuhost_host::cmd::Cmd;
use gpuhost_host::error::hinted;
use gpuhost_host::facts::{Facts, KernelChoice, PciDevice};
use gpuhost_host::fsutil;
use gpuhost_host::host::{repo_entries, Host};
use gpuhost_host::invalid;
use gpuhost_host::kernel::Flavour;
use gpuhost_host::platform::Release;
use gpuhost_profile::Profile;
use gpuhost_steps;
use gpuhost_steps::containers::RepoSource;
use gpuhost_steps::run::DriverPlan;
use gpuhost_steps::transaction::cache;

/// How many times the plan is checked again against the scratch root before giving up (a
/// step's packages may depend on an earlier step's: the kernel's compiler is read from the
/// headers' `.config`).
const MAX_PASSES: usize = 6;

/// The target a bundle is made for.
#[derive(Clone, Debug)]
pub enum Target {
    /// A copy of the target (or the target itself): its OS release, repo files, dnf.conf, dnf
    /// variables, kernels and NVSwitches.
    Root(PathBuf),
    /// A clean Oracle Linux `major` for `arch` (else this machine's): Oracle's public repos, or
    /// the `.repo` files of `repos`.
    Os {
        major: u32,
        arch: Option<String>,
        repos: Option<PathBuf>,
    },
}

#[derive(Clone, Debug)]
pub struct BuildOptions {
    pub profile: String,
    pub sets: Vec<String>,
    pub target: Target,
    /// The kernel to serve (else the root's target kernel, or the newest in the repos).
    pub kernel_release: Option<String>,
    /// Plan for an NVSwitch system (`fm` module profile, Fabric Manager).
    pub fabric_manager: bool,
    /// The bundle directory to write (must not exist, or be empty).
    pub out: PathBuf,
    /// Also write `<out>.tar`.
    pub tar: bool,
    /// The kmod repo of `gpuhost kmod build` to carry (else the profile's `driver.kmod_repo`):
    /// nodes install its kmods instead of building the modules with DKMS.
    pub kmod_repo: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BuildReport {
    pub out: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tarball: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tar_bytes: Option<u64>,
    pub profile: String,
    pub os_major: u32,
    pub kernels: Vec<String>,
    pub fabric_manager: bool,
    pub packages: usize,
    /// Size of the bundle's files.
    pub bytes: u64,
    pub modules: Vec<String>,
    pub gpgcheck: bool,
    pub gpgkeys: Vec<String>,
    pub plan: BTreeMap<String, Vec<String>>,
    /// The prebuilt kmods the bundle carries, and the repo they were taken from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kmod_repo: Option<KmodPart>,
    /// The driver set it carries instead of NVIDIA's local repo package.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_set: Option<DriverSet>,
    pub manifest_sha256: String,
    pub duration_ms: u64,
}

/// `--out` with its parent directory and name, and `<out>.tar` when `--tar` asks for it.
struct Destination {
    out: PathBuf,
    parent: PathBuf,
    name: String,
    tarball: Option<PathBuf>,
}

/// Build a bundle. Invalid input (exit 2) leaves nothing behind; a failure leaves nothing at
/// `--out` either (the bundle is assembled next to it and renamed into place at the end).
pub fn build(opts: &BuildOptions) -> Result<BuildReport> {
    let start = Instant::now();
    let mut profile = Profile::resolve(&opts.profile, &opts.sets)?;
    if let Some(dir) = &opts.kmod_repo {
        profile.driver.kmod_repo = Some(dir.clone());
    }
    let dest = check_request(opts, &profile)?;
    let major = profile.os.major;
    // The scratch root and the bundle being assembled, next to --out (same filesystem).
    let work = TempDir::under(&dest.parent, &format!(".{}.gpuhost", dest.name))?;
    let staging = work.path().join(&dest.name);
    let scratch_dir = work.path().join("root");
    let (source, root_facts) = seed_scratch(opts, &profile, &scratch_dir)?;
    let scratch = scratch_host(opts, major, &scratch_dir)?;
    let dirs = profile_dirs(&profile);
    link_file_urls(&scratch, &source, &dirs)?;
    let facts = target_facts(opts, &scratch, &profile, root_facts)?;
    // The scratch root installs NVIDIA's package (without scriptlets) for the driver set to be
    // read out of it, whatever the profile keeps on the nodes: its own value is written back
    // into the bundle's profile below.
    let keep_local_repo = profile.driver.keep_local_repo;
    profile.driver.keep_local_repo = true;
    let driver = pin_driver(&mut profile, &facts)?;
    let kernels = facts.kernels_to_serve();
    let prebuilt = driver.as_ref().filter(|d| d.kmods.is_some());
    if let Some(d) = prebuilt {
        kmods::check_kernels(d)?;
        kmods::provide_kernels(&scratch, &kernels, work.path())?;
    }
    let pkgdir = staging.join("repo").join("Packages");
    std::fs::create_dir_all(&pkgdir).with_context(|| format!("creating {}", pkgdir.display()))?;

    let planned = settle(
        &scratch,
        &profile,
        &facts,
        driver.as_ref(),
        &source,
        &dirs,
        &pkgdir,
    )?;
    let driver_set = carry_driver_set(&scratch, &planned.local_files, &staging, &pkgdir)?;
    // `driver.keep_local_repo` stays the profile's: the bundle carries the set, never the
    // package, so a node without NVIDIA's package keeps the set in gpuhost's cache, and one
    // that holds the package keeps it or not as the profile says (`apply --bundle`).
    profile.driver.keep_local_repo = keep_local_repo;
    let kmod_repo = prebuilt
        .map(|d| kmods::carry(d, &kernels, &staging, &mut profile))
        .transpose()?;

    let nevras = nevras_of(&rpm_files(&pkgdir)?)?;
    let (repos, modules) =
        write_repodata(&scratch, &nevras, &planned.modules, work.path(), &staging)?;
    let (gpgcheck, gpgkeys) = signatures(&scratch, &repos, &nevras, &staging)?;

    let mut m = Manifest {
        format: FORMAT,
        gpuhost_version: env!("CARGO_PKG_VERSION").to_string(),
        created_at: fsutil::rfc3339(fsutil::unix_now()),
        profile: profile.name.clone(),
        os_major: major,
        arch: target_arch(&facts),
        flavour: profile.kernel.flavour,
        kernels,
        fabric_manager: !facts.nvswitches.is_empty(),
        driver_repo_rpm: None,
        driver_set,
        gpgcheck,
        gpgkeys,
        packages: nevras,
        modules,
        plan: planned.plan,
        kmod_repo: kmod_repo.as_ref().map(|k| k.carried.clone()),
        files: Vec::new(),
    };
    let manifest_sha256 = write_manifest(&staging, &profile, &mut m)?;
    let tar_bytes = publish(&dest, &staging)?;
    Ok(BuildReport {
        out: dest.out.display().to_string(),
        tarball: dest.tarball.map(|t| t.display().to_string()),
        tar_bytes,
        kmod_repo,
        manifest_sha256,
        duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        ..BuildReport::of(m)
    })
}

/// The target's machine architecture: `--arch`'s, else this machine's.
fn target_arch(facts: &Facts) -> String {
    facts
        .arch
        .clone()
        .unwrap_or_else(|| gpuhost_host::arch::machine().to_string())
}

impl BuildReport {
    /// What the manifest says (the rest is the caller's).
    fn of(m: Manifest) -> BuildReport {
        BuildReport {
            out: String::new(),
            tarball: None,
            tar_bytes: None,
            bytes: m.bytes(),
            packages: m.packages.len(),
            profile: m.profile,
            os_major: m.os_major,
            kernels: m.kernels,
            fabric_manager: m.fabric_manager,
            modules: m.modules,
            gpgcheck: m.gpgcheck,
            gpgkeys: m.gpgkeys,
            plan: m.plan,
            driver_set: m.driver_set,
            kmod_repo: None,
            manifest_sha256: String::new(),
            duration_ms: 0,
        }
    }
}

/// The kernel module flavour is chosen here, for the target's GPUs (none on a clean OS: the
/// open modules, or the profile's driver.flavour), and pinned in the bundle's profile: the
/// bundle carries that stream only (on EL10, which has no streams, that flavour's packages),
/// so a host whose GPUs it cannot drive is refused at apply (exit 2, naming the GPU), not
/// failed in the middle of a transaction.
fn pin_driver(profile: &mut Profile, facts: &Facts) -> Result<Option<DriverPlan>> {
    let driver = gpuhost_steps::driver::resolve(profile, facts)?;
    if let Some(d) = &driver {
        if d.modular() {
            profile.driver.stream = Some(d.choice.stream.clone());
        } else {
            profile.driver.flavour = d.choice.flavour.into();
        }
    }
    Ok(driver)
}

/// The bundle's `profile.toml` (the profile resolved, its stream pinned) and its manifest,
/// which lists every other file. Returns the manifest's SHA-256.
fn write_manifest(staging: &Path, profile: &Profile, m: &mut Manifest) -> Result<String> {
    let profile_toml = profile.to_toml()?;
    std::fs::write(staging.join("profile.toml"), profile_toml)?;
    let files = manifest::list_files(staging)?;
    m.files = manifest::entries(staging, &files)?;
    let text = serde_json::to_vec_pretty(&m)?;
    fsutil::write_atomic(&staging.join(MANIFEST), &text, 0o644)?;
    Ok(fsutil::sha256_hex(&text))
}

/// The request checked before anything is written: the kernel release, the driver package,
/// root, `--out` (a new or empty directory in an existing one), `--tar`'s file, and `--os`
/// against the profile's OS.
fn check_request(opts: &BuildOptions, profile: &Profile) -> Result<Destination> {
    if let Some(k) = &opts.kernel_release {
        crate::preflight::check_kernel_release(k)?;
    }
    let driver_steps = gpuhost_steps::steps_needing_package(&Selection::default());
    gpuhost_steps::driver::require_package(profile, &driver_steps)?;
    if let Some(dir) = &profile.driver.kmod_repo {
        kmods::check(dir)?;
    }
    if !crate::preflight::is_root() {
        return Err(invalid!(
            "gpuhost bundle resolves the packages with dnf in a scratch install root and must run as root"
        ));
    }
    let out = std::path::absolute(&opts.out)
        .with_context(|| format!("resolving {}", opts.out.display()))?;
    let (parent, name) = match (out.parent(), out.file_name()) {
        (Some(p), Some(n)) => (p.to_path_buf(), n.to_string_lossy().into_owned()),
        _ => return Err(invalid!("--out {}: not a directory path", out.display())),
    };
    if !parent.is_dir() {
        return Err(invalid!(
            "--out {}: {} does not exist; create it first",
            out.display(),
            parent.display()
        ));
    }
    if parent
        .to_string_lossy()
        .contains(|c: char| c.is_whitespace() || c == ',')
    {
        // The scratch root is made beside --out, and dnf splits `reposdir` on both.
        return Err(invalid!(
            "--out {}: dnf cannot build in a directory whose path has white space or a comma ({}); build under another directory, then copy the bundle or its .tar there (apply --bundle reads it from any path)",
            out.display(),
            parent.display()
        ));
    }
    if std::fs::symlink_metadata(&out).is_ok_and(|md| md.file_type().is_symlink()) {
        return Err(invalid!(
            "--out {} is a symbolic link; give the directory it points to, or a new path (a bundle is never written through a link)",
            out.display()
        ));
    }
    match std::fs::read_dir(&out) {
        Ok(entries) => {
            if entries.count() > 0 {
                return Err(invalid!(
                    "--out {} exists and is not empty; give a new directory (a bundle is never written over another)",
                    out.display()
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(invalid!("--out {}: {e}", out.display())),
    }
    let tarball = opts.tar.then(|| parent.join(format!("{name}.tar")));
    if let Some(t) = &tarball {
        if std::fs::symlink_metadata(t).is_ok() {
            return Err(invalid!(
                "{} exists; remove it or give another --out",
                t.display()
            ));
        }
    }
    if let Target::Os { major, arch, .. } = &opts.target {
        check_clean_target(
            profile,
            *major,
            arch.as_deref(),
            opts.kernel_release.as_deref(),
        )?;
    }
    Ok(Destination {
        out,
        parent,
        name,
        tarball,
    })
}

/// A clean target's architecture: `--arch`, else this machine's.
fn clean_arch(arch: Option<&str>) -> &str {
    arch.unwrap_or(gpuhost_host::arch::machine())
}

/// A clean target is the profile's release, for an architecture Oracle ships it for, with the
/// profile's kernel (no RHCK on aarch64), and the one `--kernel-release` is built for.
fn check_clean_target(
    profile: &Profile,
    os: u32,
    arch: Option<&str>,
    kernel: Option<&str>,
) -> Result<()> {
    let major = profile.os.major;
    if os != major {
        return Err(invalid!(
            "--os ol{os}: profile {} is for Oracle Linux {major}; use --os ol{major} or another profile",
            profile.name
        ));
    }
    let arch = clean_arch(arch);
    let release = gpuhost_host::platform::release(major);
    let arches = release.map(|r| r.arches.join(", ")).unwrap_or_default();
    if !release.is_some_and(|r| r.arches.contains(&arch)) {
        return Err(invalid!(
            "--arch {arch}: Oracle Linux {major} is shipped for {arches}"
        ));
    }
    if profile.kernel.flavour == Flavour::Rhck && !gpuhost_host::platform::has_rhck(major, arch) {
        return Err(invalid!(
            "--arch {arch}: Oracle Linux {major} ships no RHCK for {arch} (the UEK only); use --profile ol{major}-uek"
        ));
    }
    let built_for = kernel.and_then(gpuhost_host::arch::of_kernel);
    if let (Some(k), Some(a)) = (kernel, built_for.filter(|a| *a != arch)) {
        return Err(invalid!(
            "--kernel-release {k} is built for {a}, but the target is {arch}; give --arch {a} or a kernel built for {arch}"
        ));
    }
    Ok(())
}

/// The scratch root's host: dnf resolves for the profile's release, and for a clean target of
/// another architecture than this machine's with `--forcearch`; its rpm database made.
fn scratch_host(opts: &BuildOptions, major: u32, scratch_dir: &Path) -> Result<Host> {
    let mut scratch = Host::new(scratch_dir)?;
    scratch.set_releasever(major.to_string());
    if let Target::Os { arch, .. } = &opts.target {
        let arch = clean_arch(arch.as_deref());
        if arch != gpuhost_host::arch::machine() {
            scratch.set_forcearch(arch);
        }
    }
    scratch.rpm().arg("--initdb").run()?;
    Ok(scratch)
}

/// The scratch root's skeleton, seeded from the target: a copy of its root (whose facts are
/// gathered and preflighted here) or a clean OS. Returns the host the repo files' `file://`
/// paths are read on, and the root's facts.
fn seed_scratch(
    opts: &BuildOptions,
    profile: &Profile,
    scratch_dir: &Path,
) -> Result<(Host, Option<Facts>)> {
    for d in [
        "etc/yum.repos.d",
        "etc/dnf",
        "var/lib/rpm",
        "var/log",
        "var/cache",
        "tmp",
    ] {
        std::fs::create_dir_all(scratch_dir.join(d))
            .with_context(|| format!("creating {}", scratch_dir.join(d).display()))?;
    }
    match &opts.target {
        Target::Root(r) => {
            let source = Host::new(r)?;
            let facts = Facts::gather(
                &source,
                &KernelChoice {
                    release: opts.kernel_release.as_deref(),
                    flavour: Some(profile.kernel.flavour),
                },
            )?;
            crate::preflight::host_fits_profile(
                &source,
                profile,
                &facts,
                opts.kernel_release.is_some(),
            )?;
            seed_from_root(&source, scratch_dir)?;
            Ok((source, Some(facts)))
        }
        Target::Os { repos, .. } => {
            seed_clean(scratch_dir, profile.os.major, repos.as_deref())?;
            // The repo files of --repos name paths of this machine.
            Ok((Host::new(Path::new("/"))?, None))
        }
    }
}

/// The facts the plan is made for: the root's, or a clean target's; with an NVSwitch when
/// `--fabric-manager` asks for one the facts lack.
fn target_facts(
    opts: &BuildOptions,
    scratch: &Host,
    profile: &Profile,
    root_facts: Option<Facts>,
) -> Result<Facts> {
    let mut facts = match root_facts {
        Some(f) => f,
        None => {
            let (arch, repos) = match &opts.target {
                Target::Os { arch, repos, .. } => (arch.as_deref(), repos.as_deref()),
                Target::Root(_) => (None, None),
            };
            let clean = Clean {
                arch: clean_arch(arch),
                repos,
            };
            clean_facts(scratch, profile, opts.kernel_release.as_deref(), &clean)?
        }
    };
    if opts.fabric_manager && facts.nvswitches.is_empty() {
        facts.nvswitches.push(PciDevice {
            address: "(gpuhost bundle --fabric-manager)".to_string(),
            device_id: "22a3".to_string(),
            class: "068000".to_string(),
            kind: None,
        });
    }
    Ok(facts)
}

/// NVIDIA's local repo package: never carried. Its driver set is: the packages the node
/// installs are in the repo already (dnf took them out of the package's repo in the scratch
/// root); the package itself goes out of the repo, and its repo's metadata and keys as NVIDIA
/// ships them, read by the node's own reader (checked, never the toolkit's payload), go to
/// `driver/<package>-<version>/` with gpuhost's cache manifest naming the packages the bundle
/// carries. Nodes install the set from the bundle's repo and keep it in gpuhost's driver cache.
fn carry_driver_set(
    scratch: &Host,
    local_files: &[PathBuf],
    staging: &Path,
    pkgdir: &Path,
) -> Result<Option<DriverSet>> {
    let mut carried = None;
    for f in local_files {
        let file_name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("{} has no file name", f.display()))?;
        let _ = std::fs::remove_file(pkgdir.join(&file_name));
        let (repo, mut cached) = cache::read_for_bundle(scratch, f)?;
        // Of the packages NVIDIA's repo holds, those the bundle's repo carries.
        let files = cache::bundle_packages(pkgdir, &cached)?;
        cached.packages.retain(|n| {
            files
                .iter()
                .any(|f| cache::package_name(f).as_ref() == Some(n))
        });
        cached.bytes = files
            .iter()
            .map(|f| std::fs::metadata(pkgdir.join(f)).map_or(0, |m| m.len()))
            .sum();
        let rel = format!("driver/{}-{}", cached.package, cached.version);
        let out = staging.join(&rel);
        copy_metadata(&repo, &out)?;
        std::fs::write(
            out.join(cache::MANIFEST_FILE),
            serde_json::to_vec_pretty(&cached)?,
        )?;
        cache::bundle_scratch_done(scratch)?;
        carried = Some(DriverSet {
            path: rel,
            file: file_name,
            driver: cached.driver.clone(),
            packages: cached.packages.clone(),
            bytes: cached.bytes,
            package_bytes: std::fs::metadata(f).map_or(0, |m| m.len()),
        });
    }
    Ok(carried)
}

/// A repo folder's metadata and keys (everything but its packages) copied to `to`.
fn copy_metadata(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type()?;
        if kind.is_dir() && name == "repodata" {
            copy_metadata(&entry.path(), &to.join(&name))?;
        } else if kind.is_file() && !name.ends_with(".rpm") {
            std::fs::copy(entry.path(), to.join(&name))
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The bundle's repo metadata: `createrepo_c` over its packages, then the module metadata (the
/// source repos' documents, filtered to what the bundle carries). Every stream the plan
/// installs must be among them. Returns the scratch root's repo configuration, as the plan
/// left it, and the streams the bundle carries.
fn write_repodata(
    scratch: &Host,
    nevras: &[String],
    wanted: &Wanted,
    work: &Path,
    staging: &Path,
) -> Result<(RepoConfig, Vec<String>)> {
    Cmd::new("createrepo_c")
        .args(["--quiet", "--no-database"])
        .arg(staging.join("repo"))
        .run()
        .map_err(|e| tool_missing(e, "createrepo_c", "createrepo_c"))?;
    let repos = RepoConfig::read(scratch)?;
    let nevra_set: BTreeSet<String> = nevras.iter().cloned().collect();
    let docs = module_docs(scratch, &repos)?;
    let kept = modulemd::keep(&docs, &nevra_set, wanted);
    for (module, streams) in &wanted.streams {
        for s in streams {
            let found = kept.iter().any(|d| {
                d.kind == "modulemd" && &d.module == module && d.stream.as_deref() == Some(s)
            });
            if !found {
                return Err(anyhow!(
                    "the module metadata of {module}:{s} was not found in the repos the plan used; the bundle could not install it offline"
                ));
            }
        }
    }
    let modules = modulemd::streams_of(&kept);
    if !kept.is_empty() {
        let yaml: String = kept.iter().map(|d| d.text.as_str()).collect();
        let file = work.join("modules.yaml");
        std::fs::write(&file, yaml).with_context(|| format!("writing {}", file.display()))?;
        Cmd::new("modifyrepo_c")
            .arg("--mdtype=modules")
            .arg(&file)
            .arg(staging.join("repo").join("repodata"))
            .run()
            .map_err(|e| tool_missing(e, "modifyrepo_c", "createrepo_c"))?;
    }
    Ok((repos, modules))
}

/// Signatures: checked offline when every repo the packages came from checked them. Returns
/// whether they are, and the keys copied to `keys/`.
fn signatures(
    scratch: &Host,
    repos: &RepoConfig,
    nevras: &[String],
    staging: &Path,
) -> Result<(bool, Vec<String>)> {
    let origins = origins(scratch)?;
    let used: BTreeSet<&str> = nevras
        .iter()
        .filter_map(|n| origins.get(n).map(String::as_str))
        .collect();
    let gpgcheck = !used.is_empty()
        && used.iter().all(|id| {
            repos
                .get(id)
                .is_some_and(|r| r.gpgcheck && !r.gpgkeys.is_empty())
        });
    let gpgkeys = copy_keys(scratch, repos, &used, &staging.join("keys"))?;
    Ok((gpgcheck, gpgkeys))
}

/// The staged bundle renamed into place at `--out`, and `<out>.tar` written (through a
/// partial file) when asked for. Returns the tarball's size.
fn publish(dest: &Destination, staging: &Path) -> Result<Option<u64>> {
    let Destination {
        out,
        parent,
        name,
        tarball,
    } = dest;
    stop_if_interrupted()?;
    if out.exists() {
        std::fs::remove_dir(out).with_context(|| format!("replacing {}", out.display()))?;
    }
    std::fs::rename(staging, out)
        .with_context(|| format!("moving {} to {}", staging.display(), out.display()))?;
    let Some(t) = tarball else {
        return Ok(None);
    };
    // Created here, O_EXCL|O_NOFOLLOW under an unpredictable name, and handed to tar as its
    // stdout: a link planted beside --out is never written through.
    let (file, partial) = fsutil::create_new_beside(t, "partial", 0o644)?;
    let made = Cmd::new("tar")
        .args(["-cf", "-", "-C"])
        .arg(parent)
        .arg("--")
        .arg(name)
        .stdout_to(file)
        .run()
        .and_then(|_| {
            std::fs::rename(&partial, t)
                .with_context(|| format!("moving {} to {}", partial.display(), t.display()))
        });
    if let Err(e) = made {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    Ok(std::fs::metadata(t).ok().map(|md| md.len()))
}

/// After SIGTERM or SIGINT the build stops (its scratch root and staging are removed as the
/// error unwinds); the commands already refuse to start.
fn stop_if_interrupted() -> Result<()> {
    match gpuhost_host::interrupt::received() {
        Some(sig) => Err(anyhow::Error::new(gpuhost_host::interrupt::Interrupted(
            format!(
                "interrupted by {}: the bundle was not written",
                gpuhost_host::interrupt::name(sig)
            ),
        ))),
        None => Ok(()),
    }
}

fn tool_missing(e: anyhow::Error, tool: &str, package: &str) -> anyhow::Error {
    if gpuhost_host::cmd::spawn_failed(&e) {
        hinted(
            format!("{tool} is needed to write the bundle's repo metadata: {e:#}"),
            format!("install it: dnf install {package}"),
        )
    } else {
        e
    }
}

/// What settling the plan in the scratch root found.
struct Planned {
    /// Step id → the changes its checks asked for, over all passes.
    plan: BTreeMap<String, Vec<String>>,
    /// Package files installed by path (NVIDIA's local repo package).
    local_files: Vec<PathBuf>,
    modules: Wanted,
}

/// The package work one pass over the steps asked for.
#[derive(Default)]
struct PassWork {
    /// Work done before the installs (modules reset or disabled, repos prepared).
    prepare: Vec<Work>,
    /// The installs, with the step that asked for each.
    installs: Vec<(&'static str, Install)>,
}

/// Check every step against the scratch root, carry out the package work (downloading every
/// package first), and again, until no step wants a package. The caller has already copied in
/// the `file://` paths of the root's repo files; every change here that may add a repo file
/// (prepare work, an install) is followed by [`link_file_urls`] again.
fn settle(
    scratch: &Host,
    profile: &Profile,
    facts: &Facts,
    driver: Option<&DriverPlan>,
    source: &Host,
    dirs: &[PathBuf],
    pkgdir: &Path,
) -> Result<Planned> {
    let registry = gpuhost_steps::registry();
    let mut planned = Planned {
        plan: BTreeMap::new(),
        local_files: Vec::new(),
        modules: Wanted::default(),
    };
    for pass in 0..MAX_PASSES {
        stop_if_interrupted()?;
        let ctx = Ctx::new(scratch, profile, facts, driver.cloned())?;
        let work = pass_work(&ctx, &registry, &mut planned.plan)?;
        drop(ctx);
        if work.installs.is_empty() && work.prepare.is_empty() {
            return Ok(planned);
        }
        for w in &work.prepare {
            match w {
                Work::DisableModule(m) | Work::ResetModule(m) => {
                    planned.modules.whole.insert(m.clone());
                }
                _ => {}
            }
            gpuhost_steps::work::carry_out(scratch, w)?;
        }
        link_file_urls(scratch, source, dirs)?;
        for brings_repo in [true, false] {
            let parts: Vec<&(&'static str, Install)> = work
                .installs
                .iter()
                .filter(|(_, i)| i.brings_repo == brings_repo)
                .collect();
            if parts.is_empty() {
                continue;
            }
            note_installs(&mut planned, &parts, driver);
            download(scratch, profile, pass, &parts, pkgdir)?;
            link_file_urls(scratch, source, dirs)?;
        }
        if driver.is_some_and(|d| d.kmods.is_some()) {
            kmods::depmod(scratch, &facts.kernels_to_serve())?;
        }
    }
    Err(anyhow!(
        "the plan still installs packages after {MAX_PASSES} passes over a clean root; a step keeps asking for packages it has"
    ))
}

/// One pass of the steps' checks: the package work they ask for (files, units and builds are
/// the target's to do), each change said once into `plan` under its step.
fn pass_work(
    ctx: &Ctx,
    registry: &[&dyn gpuhost_steps::step::Step],
    plan: &mut BTreeMap<String, Vec<String>>,
) -> Result<PassWork> {
    let mut work = PassWork::default();
    for (id, r) in runner::checks(ctx, registry, &Selection::default()) {
        let check = match r {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => {
                return Err(e.context(format!(
                    "step {id} cannot be planned for a clean Oracle Linux {} target",
                    ctx.profile.os.major
                )))
            }
        };
        for c in &check.changes {
            // What the report and the manifest say of the step: the packages the bundle
            // carries for it (a target's files, units and builds are its own to do).
            let said = match &c.work {
                Work::Install(i) if i.brings_repo => {
                    let file = i
                        .specs
                        .iter()
                        .find(|s| gpuhost_steps::work::is_package_file(s))
                        .map(|s| s.rsplit('/').next().unwrap_or(s).to_string())
                        .unwrap_or_default();
                    Some(format!(
                        "the driver set of {file}: its packages in repo/, NVIDIA's metadata in driver/ (the package itself is not carried)"
                    ))
                }
                Work::Install(_) | Work::SwitchStream { .. } => Some(c.to_string()),
                _ => None,
            };
            match &c.work {
                Work::Install(i) => work.installs.push((id, i.clone())),
                Work::SwitchStream {
                    module, packages, ..
                } => work.installs.push((
                    id,
                    Install {
                        specs: packages.clone(),
                        module: Some(module.clone()),
                        ..Install::default()
                    },
                )),
                w if w.phase() == Phase::Prepare => work.prepare.push(w.clone()),
                // Files, units, builds: the target does them itself.
                _ => continue,
            }
            let Some(said) = said else { continue };
            let entry = plan.entry(id.to_string()).or_default();
            if !entry.contains(&said) {
                entry.push(said);
            }
        }
    }
    Ok(work)
}

/// What the installs bring into the bundle besides packages: their module streams, and the
/// package files they install by path (the prebuilt kmods' are carried in the kmod repo).
fn note_installs(
    planned: &mut Planned,
    parts: &[&(&'static str, Install)],
    driver: Option<&DriverPlan>,
) {
    for (_, i) in parts {
        if let Some(m) = &i.module {
            let (name, stream) = module_stream(m);
            planned
                .modules
                .streams
                .entry(name)
                .or_default()
                .insert(stream);
        }
        for s in &i.specs {
            let p = Path::new(s);
            let local = s.ends_with(".rpm") && p.is_file() && !kmods::is_kmod_file(driver, p);
            if local && !planned.local_files.iter().any(|f| f == p) {
                planned.local_files.push(p.to_path_buf());
            }
        }
    }
}

/// Download the packages of one transaction's installs into `pkgdir`, then install them in the
/// scratch root (without scriptlets) so that the next pass sees them. A resolution failure
/// names the steps whose packages it implicates.
fn download(
    scratch: &Host,
    profile: &Profile,
    pass: usize,
    parts: &[&(&'static str, Install)],
    pkgdir: &Path,
) -> Result<()> {
    let refs: Vec<&Install> = parts.iter().map(|(_, i)| i).collect();
    let mut ids: Vec<&str> = parts.iter().map(|(id, _)| *id).collect();
    ids.dedup();
    let label = format!("[pass {}] {}", pass + 1, ids.join(" + "));
    let what: Vec<String> = parts
        .iter()
        .map(|(_, i)| Work::Install(i.clone()).to_string())
        .collect();
    gpuhost_host::progress::step_changing(&label, &format!("download {}", what.join("; ")));
    let began = Instant::now();
    // keepcache: dnf otherwise lists what it downloaded from a remote repo (into the
    // --downloaddir too) as temporary, and deletes it after the next transaction.
    let keepcache = "--setopt=keepcache=True".to_string();
    let (download, out) = gpuhost_steps::work::scratch_transaction(
        scratch,
        &refs,
        &[
            "--downloadonly".to_string(),
            format!("--downloaddir={}", pkgdir.display()),
            keepcache.clone(),
        ],
    )?;
    if !out.success() {
        let text = format!("{}\n{}", out.stdout, out.stderr);
        let mut ids: Vec<&str> = parts
            .iter()
            .filter(|(_, i)| gpuhost_steps::work::implicated(&text, i))
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            ids = parts.iter().map(|(id, _)| *id).collect();
        }
        ids.dedup();
        return Err(hinted(
            format!(
                "the packages of {} cannot be resolved for a clean Oracle Linux {} target: {:#}",
                ids.join(", "),
                profile.os.major,
                download.failure(&out)
            ),
            "make the repos that carry them reachable from this machine (the same repos the target would use online)",
        ));
    }
    // (A remote repo's packages are downloaded again here: dnf reads --downloaddir
    // only with --downloadonly.)
    let (install, out) = gpuhost_steps::work::scratch_transaction(
        scratch,
        &refs,
        &["--setopt=tsflags=noscripts".to_string(), keepcache],
    )?;
    if !out.success() {
        return Err(install.failure(&out));
    }
    gpuhost_host::progress::step_done(&label, "downloaded", began.elapsed());
    Ok(())
}

/// `nvidia-driver:latest-dkms/default` → (`nvidia-driver`, `latest-dkms`).
fn module_stream(spec: &str) -> (String, String) {
    let spec = spec.split('/').next().unwrap_or(spec);
    match spec.split_once(':') {
        Some((n, s)) => (n.to_string(), s.to_string()),
        None => (spec.to_string(), String::new()),
    }
}

/// The absolute directories a profile names as repo sources (mirrors on the target).
fn profile_dirs(profile: &Profile) -> Vec<PathBuf> {
    [&profile.docker.repo, &profile.container_toolkit.repo]
        .iter()
        .filter_map(|s| match RepoSource::parse(s) {
            Some(RepoSource::Dir(d)) => Some(d.to_path_buf()),
            _ => None,
        })
        .collect()
}

/// The scratch root starts as the target's configuration: os-release, repo files (but not those
/// of a local repo package: the plan installs that itself), dnf.conf and dnf's variables, each
/// read inside the source root.
fn seed_from_root(source: &Host, scratch: &Path) -> Result<()> {
    let copy = |rel: &str| -> Result<()> {
        if let Some(data) = source.read_bytes_opt(rel)? {
            let to = scratch.join(rel.trim_start_matches('/'));
            if let Some(d) = to.parent() {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            }
            std::fs::write(&to, data).with_context(|| format!("writing {}", to.display()))?;
        }
        Ok(())
    };
    copy("/etc/os-release")?;
    copy("/etc/dnf/dnf.conf")?;
    for vars in ["/etc/dnf/vars", "/etc/yum/vars"] {
        for n in source.list_dir(vars)? {
            if source.kind(format!("{vars}/{n}")) == Some(gpuhost_host::rootfs::Kind::File) {
                copy(&format!("{vars}/{n}"))?;
            }
        }
    }
    for n in source.list_dir("/etc/yum.repos.d")? {
        let rel = format!("/etc/yum.repos.d/{n}");
        if !n.ends_with(".repo") || is_local_repo_package_file(source, &rel)? {
            continue;
        }
        copy(&rel)?;
    }
    Ok(())
}

/// True when the repo file and the `file://` directory it points at belong to one installed
/// package (NVIDIA's local repo packages ship both).
fn is_local_repo_package_file(source: &Host, rel: &str) -> Result<bool> {
    let text = source.read_opt(rel)?.unwrap_or_default();
    let dirs: Vec<&str> = repo_entries(&text)
        .into_iter()
        .filter(|(_, k, _)| *k == "baseurl")
        .flat_map(|(_, _, v)| v.split([' ', ',']))
        .filter_map(|u| u.strip_prefix("file://"))
        .collect();
    if dirs.is_empty() {
        return Ok(false);
    }
    let owner = |p: &str| -> Result<Option<String>> {
        let out = source
            .rpm()
            .args(["-qf", "--qf", "%{NAME}\\n"])
            .arg(p)
            .output()?;
        Ok(out
            .success()
            .then(|| out.stdout.lines().next().unwrap_or_default().to_string()))
    };
    let Some(file_owner) = owner(rel)? else {
        return Ok(false);
    };
    for d in dirs {
        if owner(d)?.as_deref() == Some(file_owner.as_str()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A clean Oracle Linux `major`: a minimal os-release (dnf reads its `PLATFORM_ID` for module
/// platform streams), dnf.conf, and the repo files of `repos` or Oracle's public repos.
fn seed_clean(scratch: &Path, major: u32, repos: Option<&Path>) -> Result<()> {
    let release = gpuhost_host::platform::release(major).ok_or_else(|| {
        invalid!(
            "Oracle Linux {major} is not a release gpuhost provisions; it supports {}",
            gpuhost_host::platform::supported_text()
        )
    })?;
    std::fs::write(
        scratch.join("etc/os-release"),
        format!(
            "NAME=\"Oracle Linux Server\"\nVERSION=\"{major}\"\nID=\"ol\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"{major}\"\nPLATFORM_ID=\"{}\"\nPRETTY_NAME=\"Oracle Linux Server {major}\"\n",
            release.platform_id
        ),
    )?;
    std::fs::write(
        scratch.join("etc/dnf/dnf.conf"),
        "[main]\ngpgcheck=1\ninstallonly_limit=3\nclean_requirements_on_remove=True\nbest=True\nskip_if_unavailable=False\n",
    )?;
    match repos {
        Some(dir) => {
            let files: Vec<PathBuf> = files_in(dir)?
                .into_iter()
                .filter(|f| f.extension().is_some_and(|x| x == "repo"))
                .collect();
            if files.is_empty() {
                return Err(invalid!(
                    "--repos {}: no .repo files there; give the directory of the repo files the target uses",
                    dir.display()
                ));
            }
            for f in files {
                copy_if_present(&f, &scratch.join("etc/yum.repos.d").join(file_name(&f)))?;
            }
        }
        None => std::fs::write(
            scratch.join(format!("etc/yum.repos.d/oracle-linux-ol{major}.repo")),
            oracle_repos(release),
        )?,
    }
    Ok(())
}

/// Oracle's public repos an Oracle Linux host has enabled for gpuhost's packages, as the
/// release table lists them for `release`: BaseOS, AppStream, its UEK repos and the developer
/// EPEL (DKMS), each by `$basearch`.
pub(crate) fn oracle_repos(release: &Release) -> String {
    let major = release.major;
    release
        .yum
        .all()
        .into_iter()
        .map(|r| {
            format!(
                "[{}]\nname=Oracle Linux {major} {} ($basearch)\nbaseurl={}\ngpgkey={}\ngpgcheck=1\nenabled=1\n\n",
                r.id,
                r.name,
                r.baseurl(),
                release.yum.gpgkey
            )
        })
        .collect()
}

/// What to do when a clean target's repos cannot be read: where the repo files come from, or
/// an install root instead.
fn unread_repos(repos: Option<&Path>) -> String {
    match repos {
        Some(dir) => format!(
            "the target's repos could not be read: check the .repo files in --repos {} (their baseurls must be reachable from here), or give --root ROOT, an install root",
            dir.display()
        ),
        None => "Oracle's public repos could not be read (offline?): give --repos DIR, the .repo files of a mirror this machine reaches, or --root ROOT, an install root whose repos it reaches".to_string(),
    }
}

/// A clean target: its architecture, and the directory of its repo files (else Oracle's
/// public repos).
struct Clean<'a> {
    arch: &'a str,
    repos: Option<&'a Path>,
}

/// Facts of a clean target: its OS release and architecture, the kernel (given, or the newest
/// of the profile's flavour in the repos), no devices.
fn clean_facts(
    scratch: &Host,
    profile: &Profile,
    release: Option<&str>,
    clean: &Clean<'_>,
) -> Result<Facts> {
    let repos = clean.repos;
    let flavour = profile.kernel.flavour;
    let kver = match release {
        Some(k) => k.to_string(),
        None => {
            let out = scratch
                .dnf()?
                .args([
                    "repoquery",
                    "--latest-limit=1",
                    "--qf",
                    "%{version}-%{release}.%{arch}",
                    flavour.kernel_package(),
                ])
                .run()
                .with_context(|| unread_repos(repos))?;
            out.stdout
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .max_by(|a, b| gpuhost_host::rpm::vercmp(a, b))
                .map(str::to_string)
                .ok_or_else(|| {
                    invalid!(
                        "no {} package is in the target's repos, so the kernel to serve is unknown; give --kernel-release KVER",
                        flavour.kernel_package()
                    )
                })?
        }
    };
    if Flavour::of(&kver) != flavour {
        return Err(invalid!(
            "--kernel-release {kver} is {}, but profile {} is for {flavour}",
            Flavour::of(&kver),
            profile.name
        ));
    }
    let mut facts = Facts::gather(
        scratch,
        &KernelChoice {
            release: Some(&kver),
            flavour: Some(flavour),
        },
    )?;
    facts.root = format!("(a clean Oracle Linux {})", profile.os.major);
    facts.arch = Some(clean.arch.to_string());
    facts.installed_kernels = vec![kver];
    Ok(facts)
}

/// `file://` paths the scratch root's repo files (and the profile's mirror directories) name
/// are the target's: each one missing from the scratch root is copied in from the source
/// (hard links where both are on one file system), as the source resolves it. Copies, not
/// symlinks: paths in a root resolve inside it, and a package installed in the scratch root
/// must never write through a link into the source.
fn link_file_urls(scratch: &Host, source: &Host, dirs: &[PathBuf]) -> Result<()> {
    let repos = RepoConfig::read(scratch)?;
    let urls = repos
        .repos
        .values()
        .flat_map(|r| r.baseurl.iter().chain(&r.gpgkeys));
    let mut paths: Vec<PathBuf> = dirs.to_vec();
    paths.extend(
        urls.filter_map(|u| u.strip_prefix("file://"))
            .map(PathBuf::from),
    );
    for p in paths {
        if scratch.kind_nofollow(&p).is_some() || !source.exists(&p) {
            // Already there, or nothing to copy (dnf then says which repo it cannot read).
            continue;
        }
        let from = source.real_path(&p)?;
        let at = scratch.path(&p);
        if let Some(parent) = p.parent() {
            scratch.create_dir_all(parent)?;
        }
        let linked = Cmd::new("cp").arg("-al").arg(&from).arg(&at).output()?;
        if !linked.success() {
            let _ = std::fs::remove_dir_all(&at);
            let _ = std::fs::remove_file(&at);
            Cmd::new("cp").arg("-a").arg(&from).arg(&at).run()?;
        }
    }
    Ok(())
}

fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = match std::fs::read_dir(dir) {
        Ok(e) => e
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    out.sort();
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn copy_if_present(from: &Path, to: &Path) -> Result<()> {
    if !from.is_file() {
        return Ok(());
    }
    if let Some(d) = to.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn rpm_files(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(files_in(dir)?
        .into_iter()
        .filter(|f| f.extension().is_some_and(|x| x == "rpm"))
        .collect())
}

/// `name-epoch:version-release.arch` of each package file (the form module artifacts use).
fn nevras_of(files: &[PathBuf]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for chunk in files.chunks(200) {
        let o = Cmd::new("rpm")
            .args([
                "-qp",
                "--noglob",
                "--nosignature",
                "--nodigest",
                "--qf",
                "%{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}\\n",
            ])
            .args(chunk)
            .run()?;
        out.extend(
            o.stdout
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
    }
    out.sort();
    Ok(out)
}

/// The repo each package installed in the scratch root came from, by NEVRA.
fn origins(scratch: &Host) -> Result<BTreeMap<String, String>> {
    let out = scratch
        .dnf()?
        .args([
            "repoquery",
            "--installed",
            "--qf",
            "%{name}-%{epoch}:%{version}-%{release}.%{arch}\t%{from_repo}",
        ])
        .run()?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(n, r)| (n.trim().to_string(), r.trim().to_string()))
        .collect())
}

/// One repo of the scratch root's configuration.
#[derive(Debug, Default)]
struct Repo {
    baseurl: Vec<String>,
    gpgkeys: Vec<String>,
    gpgcheck: bool,
    enabled: bool,
}

struct RepoConfig {
    repos: BTreeMap<String, Repo>,
}

impl RepoConfig {
    fn read(scratch: &Host) -> Result<RepoConfig> {
        let conf = scratch.read_opt("/etc/dnf/dnf.conf")?.unwrap_or_default();
        let main_gpgcheck = repo_entries(&conf)
            .into_iter()
            .filter(|(s, k, _)| *s == "main" && *k == "gpgcheck")
            .map(|(_, _, v)| truthy(v))
            .next_back()
            .unwrap_or(false);
        let mut repos: BTreeMap<String, Repo> = BTreeMap::new();
        for n in scratch.list_dir("/etc/yum.repos.d")? {
            if !n.ends_with(".repo") {
                continue;
            }
            let text = scratch
                .read_opt(format!("/etc/yum.repos.d/{n}"))?
                .unwrap_or_default();
            let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
            for (s, k, v) in repo_entries(&text) {
                sections
                    .entry(s.to_string())
                    .or_default()
                    .push((k.to_string(), v.to_string()));
            }
            for (id, kv) in sections {
                let get = |key: &str| {
                    kv.iter()
                        .rev()
                        .find(|(k, _)| k == key)
                        .map(|(_, v)| v.as_str())
                };
                let split = |v: Option<&str>| -> Vec<String> {
                    v.map(|v| {
                        v.split([' ', ','])
                            .filter(|u| !u.is_empty())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default()
                };
                repos.insert(
                    id,
                    Repo {
                        baseurl: split(get("baseurl")),
                        gpgkeys: split(get("gpgkey")),
                        gpgcheck: get("gpgcheck").map_or(main_gpgcheck, truthy),
                        enabled: get("enabled").is_none_or(truthy),
                    },
                );
            }
        }
        Ok(RepoConfig { repos })
    }

    fn get(&self, id: &str) -> Option<&Repo> {
        self.repos.get(id)
    }
}

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "yes" | "true" | "on"
    )
}

/// Every module document of the scratch root's enabled repos: read from the repo itself for a
/// `file://` repo, else from dnf's metadata cache in the root (dnf keeps each repo's metadata,
/// module metadata included, in `/var/cache/dnf/<id>-<hash>/repodata/`).
fn module_docs(scratch: &Host, repos: &RepoConfig) -> Result<Vec<modulemd::Doc>> {
    let mut docs = Vec::new();
    for (id, r) in &repos.repos {
        if !r.enabled {
            continue;
        }
        let local = r
            .baseurl
            .iter()
            .find_map(|u| u.strip_prefix("file://"))
            .map(|p| p.trim_end_matches('/').to_string());
        let base = match local {
            Some(d) if scratch.exists(format!("{d}/repodata/repomd.xml")) => Some(d),
            _ => cached_repo(scratch, id),
        };
        let Some(base) = base else { continue };
        let Some(repomd) = scratch.read_opt(format!("{base}/repodata/repomd.xml"))? else {
            continue;
        };
        let Some(href) = modulemd::modules_href(&repomd) else {
            continue;
        };
        let mut file = format!("{base}/{href}");
        if !scratch.exists(&file) {
            file = format!("{base}/repodata/{}", file_name(Path::new(&href)));
        }
        let text = decompress(&scratch.real_path(&file)?)
            .with_context(|| format!("reading the module metadata of {id}"))?;
        docs.extend(modulemd::split(&text));
    }
    Ok(docs)
}

/// dnf's cache directory of a repo in the root (`/var/cache/dnf/<id>-<16 hex>`), the last
/// written.
fn cached_repo(scratch: &Host, id: &str) -> Option<String> {
    let prefix = format!("{id}-");
    scratch
        .list_dir("/var/cache/dnf")
        .ok()?
        .into_iter()
        .filter(|n| {
            n.strip_prefix(&prefix)
                .is_some_and(|h| h.len() == 16 && h.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .map(|n| format!("/var/cache/dnf/{n}"))
        .filter(|d| scratch.exists(format!("{d}/repodata/repomd.xml")))
        .max_by_key(|d| {
            scratch
                .real_path(format!("{d}/repodata/repomd.xml"))
                .ok()
                .and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        })
}

/// A metadata file's text, decompressed by its extension.
fn decompress(file: &Path) -> Result<String> {
    let tool = match file.extension().and_then(|x| x.to_str()) {
        Some("gz") => Some("gzip"),
        Some("xz") => Some("xz"),
        Some("zst") => Some("zstd"),
        Some("bz2") => Some("bzip2"),
        _ => None,
    };
    match tool {
        Some(t) => Ok(Cmd::new(t).arg("-dc").arg(file).run()?.stdout),
        None => {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
        }
    }
}

/// The GPG keys of the repos the packages came from, into `dir`; their paths in the bundle.
fn copy_keys(
    scratch: &Host,
    repos: &RepoConfig,
    used: &BTreeSet<&str>,
    dir: &Path,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for id in used {
        let Some(r) = repos.get(id) else { continue };
        for (n, url) in r.gpgkeys.iter().enumerate() {
            let data = match url.strip_prefix("file://") {
                Some(p) => scratch
                    .read_bytes_opt(p)?
                    .ok_or_else(|| anyhow!("the GPG key {url} of repo {id} does not exist"))?,
                None => {
                    let tmp = dir.join(format!(".{id}.download"));
                    std::fs::create_dir_all(dir)?;
                    Cmd::new("curl")
                        .args(["-fsSL", "--retry", "3", "-o"])
                        .arg(&tmp)
                        .arg(url)
                        .run()
                        .with_context(|| format!("downloading the GPG key {url} of repo {id}"))?;
                    let d = std::fs::read(&tmp)?;
                    let _ = std::fs::remove_file(&tmp);
                    d
                }
            };
            if !seen.insert(fsutil::sha256_hex(&data)) {
                continue;
            }
            std::fs::create_dir_all(dir)?;
            let name = if n == 0 {
                format!("{id}.gpg")
            } else {
                format!("{id}-{}.gpg", n + 1)
            };
            std::fs::write(dir.join(&name), &data)?;
            out.push(format!("keys/{name}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_specs_split_into_name_and_stream() {
        assert_eq!(
            module_stream("nvidia-driver:latest-dkms/default"),
            ("nvidia-driver".to_string(), "latest-dkms".to_string())
        );
        assert_eq!(
            module_stream("nvidia-driver:535-open"),
            ("nvidia-driver".to_string(), "535-open".to_string())
        );
    }

    #[test]
    fn oracles_public_repos() {
        let text = gpuhost_host::platform::release(9)
            .map(oracle_repos)
            .unwrap_or_default();
        let entries = repo_entries(&text);
        let ids: BTreeSet<&str> = entries.iter().map(|(s, _, _)| *s).collect();
        assert_eq!(
            ids,
            [
                "ol9_UEKR7",
                "ol9_UEKR8",
                "ol9_appstream",
                "ol9_baseos_latest",
                "ol9_developer_EPEL"
            ]
            .into_iter()
            .collect()
        );
        assert!(text.contains(
            "baseurl=https://yum.oracle.com/repo/OracleLinux/OL9/baseos/latest/$basearch/"
        ));
        assert!(text.contains("gpgkey=https://yum.oracle.com/RPM-GPG-KEY-oracle-ol9"));
    }

    /// Each release gets its own UEK repos (UEK R7 for 8; R8 and R7 for 9; R8 for 10) and its
    /// own EPEL, under its own folder, never another release's; aarch64 by `$basearch`.
    #[test]
    fn each_release_gets_its_own_uek_repos() {
        let want: [(u32, &[&str], &str); 3] = [
            (8, &["ol8_UEKR7"], "OL8/developer/EPEL"),
            (9, &["ol9_UEKR8", "ol9_UEKR7"], "OL9/developer/EPEL"),
            (10, &["ol10_UEKR8"], "OL10/1/developer/EPEL"),
        ];
        assert_eq!(gpuhost_host::platform::RELEASES.len(), want.len());
        for (major, ueks, epel) in want {
            let release = gpuhost_host::platform::release(major);
            let text = release.map(oracle_repos).unwrap_or_default();
            let ids: Vec<&str> = repo_entries(&text)
                .into_iter()
                .filter(|(id, key, _)| *key == "baseurl" && id.contains("UEK"))
                .map(|(id, _, _)| id)
                .collect();
            assert_eq!(ids, ueks, "Oracle Linux {major}");
            for id in ueks {
                let path = id.replace(&format!("ol{major}_"), &format!("OL{major}/"));
                assert!(
                    text.contains(&format!(
                        "baseurl=https://yum.oracle.com/repo/OracleLinux/{path}/$basearch/"
                    )),
                    "{text}"
                );
            }
            assert!(
                text.contains(&format!(
                    "baseurl=https://yum.oracle.com/repo/OracleLinux/{epel}/$basearch/"
                )),
                "{text}"
            );
            assert!(
                text.contains(&format!(
                    "gpgkey=https://yum.oracle.com/RPM-GPG-KEY-oracle-ol{major}\n"
                )),
                "{text}"
            );
            let others = text
                .lines()
                .filter(|l| l.starts_with("baseurl="))
                .filter(|l| !l.contains(&format!("/OracleLinux/OL{major}/")))
                .count();
            assert_eq!(others, 0, "{text}");
        }
    }
}
