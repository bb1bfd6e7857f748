//! The build: for each kernel, NVIDIA's modules compiled from the local repo package's own DKMS
//! source, against the build root (`--root`, `/` on a build host), with the compiler that kernel
//! was built with and `make -j<every CPU>`, as an unprivileged user confined to its build folder
//! ([`super::sandbox`]); then, once no process of the build is left, each `.ko` taken out of the
//! build folder and signed with the fleet's key by the kernel's own `sign-file`, checked against
//! the rpm database first ([`super::signer`]), which reads the key from its standard input: the
//! key is never a file of the build root, an RPM or the repo, and nothing the build ran can read
//! or change what gets it.
//!
//! Everything given is checked before anything is compiled ([`super::inputs`]); builds into one
//! `--out` (and from one build root) are serialised by locks held for the whole build.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use gpuhost_host::cmd::Cmd;
use gpuhost_host::error::{as_invalid, hinted};
use gpuhost_host::facts::{Facts, KernelChoice};
use gpuhost_host::host::Host;
use gpuhost_host::invalid;
use gpuhost_nvidia::localrepo::LocalRepoFile;
use gpuhost_nvidia::packages::{self, Kmod, ModuleFlavour};

use super::dkmsconf::DkmsConf;
use super::inputs::{self, FleetKey};
use super::model::{Built, BuiltKmod, Info};
use super::{package, sandbox, signer};

/// The build root's scratch folder (removed when the build ends, and at its start).
const SCRATCH: &str = "/var/cache/gpuhost/kmod-build";
/// How long one kernel's build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(3 * 3600);

/// What `gpuhost kmod build` runs, built by the agent.
#[derive(Clone, Debug)]
pub struct KmodBuildOptions {
    /// The build root: its kernels, their headers, its compilers (`/` on a build host).
    pub root: PathBuf,
    /// NVIDIA's local repo package whose DKMS source is built.
    pub local_repo_rpm: PathBuf,
    pub flavour: ModuleFlavour,
    /// The kernels to build for; empty: the root's target and default boot kernels.
    pub kernels: Vec<String>,
    /// The fleet's module-signing key (PEM) and certificate (DER or PEM).
    pub key: PathBuf,
    pub cert: PathBuf,
    /// The kmod repo to write (made, or added to).
    pub out: PathBuf,
    /// make's jobs; `None`: every CPU.
    pub jobs: Option<usize>,
}

/// What a build made.
#[derive(Clone, Debug, Serialize)]
pub struct KmodBuildReport {
    pub driver: String,
    pub flavour: ModuleFlavour,
    pub repo: String,
    pub jobs: usize,
    pub kmods: Vec<BuiltKmod>,
    pub duration_ms: u64,
}

/// Build, sign and package NVIDIA's modules for every kernel asked, into the repo `opts.out`.
pub fn build(opts: &KmodBuildOptions) -> Result<KmodBuildReport> {
    let start = Instant::now();
    let fleet = FleetKey::read(&opts.key, &opts.cert)?;
    for k in &opts.kernels {
        inputs::check_kernel_release(k)?;
    }
    inputs::check_out(&opts.out, &fleet.cert_sha256())?;
    let repo = LocalRepoFile::of_path(&opts.local_repo_rpm)?;
    if packages::kmod_row(Kmod::Built, opts.flavour, repo.branch()).is_none() {
        return Err(invalid!(
            "driver {} has no {} kernel modules (NVIDIA removed the proprietary modules in R620): build --flavour open",
            repo.driver,
            opts.flavour
        ));
    }
    let host = Host::new(&opts.root)?;
    let kernels = kernels(&host, &opts.kernels)?;
    build_root_ready(&host, &kernels)?;
    sandbox::ready(&host)?;
    let sign_files = kernels
        .iter()
        .map(|k| signer::verified_sign_file(&host, &source_dir(&host, k).unwrap_or_default(), k))
        .collect::<Result<Vec<_>>>()?;
    let jobs = opts.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let scratch = Scratch::new(&host)?;
    let dkms = dkms_package(&host, &opts.local_repo_rpm, &repo, opts.flavour)?;
    let mut sources: std::collections::BTreeMap<&str, Source> = std::collections::BTreeMap::new();
    for kver in &kernels {
        let arch = arch_of(kver);
        if !sources.contains_key(arch) {
            sources.insert(arch, Source::unpack(&host, &repo, &dkms, arch)?);
        }
    }
    let _out_lock = lock(&opts.out, inputs::LOCK)?;
    inputs::check_out(&opts.out, &fleet.cert_sha256())?;
    let mut built = Vec::new();
    let mut manifest_entries = Vec::new();
    for (kver, sign_file) in kernels.iter().zip(&sign_files) {
        let source = &sources[arch_of(kver)];
        let one = build_one(&host, source, kver, jobs, &fleet, sign_file)?;
        let (entry, report) = package::rpm(&source.package_info(kver), &one)?;
        manifest_entries.push((entry, one.rpm_dir.clone()));
        built.push(report);
    }
    let out = package::publish(&opts.out, &fleet.cert_der, manifest_entries)?;
    drop(scratch);
    Ok(KmodBuildReport {
        driver: repo.driver.clone(),
        flavour: opts.flavour,
        repo: out.display().to_string(),
        jobs,
        kmods: built,
        duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// An exclusive lock on `dir/name` (`dir` made if missing), held until dropped; a build that
/// finds it held says so and waits.
fn lock(dir: &Path, name: &str) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    // Never through a link: a lock planted as a link would have gpuhost create its target.
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .with_context(|| format!("opening the lock {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => return Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => eprintln!(
            "gpuhost: another gpuhost kmod build holds {}: waiting for it to end",
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
    f.lock()
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(f)
}

/// The kernels to build for: those asked, each installed in the build root with its headers;
/// none asked: the root's target and default boot kernels (what `apply` serves).
fn kernels(host: &Host, asked: &[String]) -> Result<Vec<String>> {
    let kernels = if asked.is_empty() {
        Facts::gather(host, &KernelChoice::default())?.kernels_to_serve()
    } else {
        asked.to_vec()
    };
    if kernels.is_empty() {
        return Err(invalid!(
            "the build root {} has no kernel: give --kernel-release, or a root with the fleet's kernels and their headers installed",
            host.root().display()
        ));
    }
    for k in &kernels {
        // `kernel-uname-r = <kver>` in the kmod's Requires: rpm takes one `-` (version-release),
        // as every Enterprise Linux kernel release has; refused before hours of building.
        inputs::check_kernel_release(k)?;
        if source_dir(host, k).is_none() {
            return Err(invalid!(
                "kernel {k} is not installed in the build root {} with its headers (no /usr/src/kernels/{k}): install {} there, or give --kernel-release of a kernel that is",
                host.root().display(),
                gpuhost_host::kernel::DevelPackage::for_kernel(
                    &format!(
                        "{}-devel-{{kver}}",
                        gpuhost_host::kernel::Flavour::of(k).kernel_package()
                    ),
                    k
                )
                .spec
            ));
        }
    }
    Ok(kernels)
}

/// What the build and `sign-file` need of the build root, each checked before anything is
/// compiled (a root without `/dev/fd` used to compile every module and only then fail at
/// `sign-file … /dev/fd/0`): one refusal naming everything missing, exit 2.
///
/// - `/dev/null`, a device: make, kbuild and the compiler write to it;
/// - `/dev/fd`, to `/proc/self/fd` (a link, as udev and image builders make it, or a
///   directory): `sign-file` reads the fleet's key from `/dev/fd/0`;
/// - `/proc`, a directory: gpuhost mounts a proc filesystem there for the build's processes
///   (`unshare --mount-proc`; on the build host itself, the host's);
/// - `/tmp`, a directory: the compiler's temporary files;
/// - `/bin/sh`, `make`, `gcc` (and the kernel's gcc-toolset where it was built by a newer gcc),
///   `strip` (binutils);
/// - each kernel's `scripts/sign-file` (its devel package whole).
pub(super) fn build_root_ready(host: &Host, kernels: &[String]) -> Result<()> {
    use gpuhost_host::rootfs::Kind;
    let mut missing: Vec<String> = Vec::new();
    if host.kind_nofollow("/dev/null") != Some(Kind::Other) {
        missing.push("/dev/null (a device: make and the compiler write to it)".to_string());
    }
    let fd = match host.kind_nofollow("/dev/fd") {
        Some(Kind::Dir) => true,
        Some(Kind::Symlink) => host
            .read_link("/dev/fd")
            .is_ok_and(|t| t.to_string_lossy().trim_end_matches('/') == "/proc/self/fd"),
        _ => false,
    };
    if !fd {
        missing.push(
            "/dev/fd (sign-file reads the fleet's key from /dev/fd/0: a link to /proc/self/fd)"
                .to_string(),
        );
    }
    if !host.is_dir("/proc") {
        missing.push(
            "/proc (a directory: the build's processes get a proc filesystem there)".to_string(),
        );
    }
    if !host.is_dir("/tmp") {
        missing.push("/tmp (a directory: the compiler's temporary files)".to_string());
    }
    let program = |names: &[&str]| {
        names.iter().any(|n| {
            ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
                .iter()
                .any(|d| host.exists(format!("{d}/{n}")))
        })
    };
    for (names, what) in [
        (&["sh"][..], "/bin/sh (make runs its recipes with it: bash)"),
        (&["make"][..], "make"),
        (&["gcc", "cc"][..], "gcc"),
        (&["strip"][..], "strip (binutils)"),
    ] {
        if !program(names) {
            missing.push(what.to_string());
        }
    }
    for k in kernels {
        let sysdir = source_dir(host, k).unwrap_or_default();
        if !host.exists(format!("{sysdir}/scripts/sign-file")) {
            missing.push(format!(
                "{sysdir}/scripts/sign-file ({k}'s devel package, installed whole)"
            ));
        }
        if let Err(e) = compiler_of(host, k) {
            missing.push(format!("{e:#}"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(as_invalid(hinted(
        format!(
            "the build root {} lacks what the build needs, so nothing was compiled: {}",
            host.root().display(),
            missing.join("; ")
        ),
        format!(
            "bind-mount the build host's /dev into the root (mount --bind /dev {root}/dev) and make {root}/proc a directory (gpuhost mounts proc there), install the packages named, then build again",
            root = host.root().display()
        ),
    )))
}

/// The kernel's build tree in the root (`SYSSRC`), as DKMS finds it.
fn source_dir(host: &Host, kver: &str) -> Option<String> {
    [
        format!("/usr/src/kernels/{kver}"),
        format!("/lib/modules/{kver}/build"),
    ]
    .into_iter()
    .find(|d| host.exists(format!("{d}/Makefile")))
}

/// The machine a kernel release is for (`….aarch64.64k` is aarch64).
pub(super) fn arch_of(kver: &str) -> &'static str {
    if kver.ends_with(".aarch64") || kver.contains(".aarch64.") {
        "aarch64"
    } else {
        "x86_64"
    }
}

/// NVIDIA's DKMS source of the driver, unpacked for one arch from the DKMS package the local
/// repo carries.
pub(super) struct Source {
    /// The source folder in the root (`…/usr/src/nvidia-open-580.82.07`).
    dir: String,
    conf: DkmsConf,
    driver: String,
    epoch: u32,
    flavour: ModuleFlavour,
    arch: &'static str,
}

/// NVIDIA's DKMS package of the flavour (its row of [`packages::KMODS`]), unpacked from the
/// local repo package alone: the repo's other packages (a CUDA local repo's toolkit, GBs)
/// are read past, never written.
struct DkmsPackage {
    row: &'static packages::KmodRow,
    flavour: ModuleFlavour,
}

fn dkms_package(
    host: &Host,
    local_repo_rpm: &Path,
    repo: &LocalRepoFile,
    flavour: ModuleFlavour,
) -> Result<DkmsPackage> {
    let row = packages::kmod_row(Kmod::Dkms, flavour, repo.branch()).ok_or_else(|| {
        invalid!(
            "driver {} has no DKMS package of the {flavour} modules",
            repo.driver
        )
    })?;
    let rpm = local_repo_rpm.display().to_string();
    let prefix = format!("{}/{}-{}-", repo.repo_dir(), row.name, repo.driver);
    gpuhost_steps::transaction::extract_from_local_repo(
        host,
        &rpm,
        &format!("{SCRATCH}/repo"),
        &[prefix.as_str()],
    )
    .map_err(|e| as_invalid(e.context(format!("reading the repo of {rpm}"))))?;
    Ok(DkmsPackage { row, flavour })
}

impl Source {
    fn unpack(
        host: &Host,
        repo: &LocalRepoFile,
        dkms: &DkmsPackage,
        arch: &'static str,
    ) -> Result<Source> {
        let (package, flavour) = (dkms.row.name, dkms.flavour);
        let name = dkms.row.dkms_name.unwrap_or(package);
        let drv = &repo.driver;
        let inner = format!("{SCRATCH}/repo{}", repo.repo_dir());
        let prefix = format!("{package}-{drv}-");
        let file = host
            .files_with_prefix(&inner, &prefix)
            .into_iter()
            .find(|f| f.ends_with(&format!(".{arch}.rpm")) || f.ends_with(".noarch.rpm"))
            .ok_or_else(|| {
                invalid!(
                    "the local repo package {} carries no {package} {drv} for {arch}: it holds the source the build host compiles",
                    repo.package
                )
            })?;
        let real = host.real_path(format!("{inner}/{file}"))?;
        let epoch = epoch_of(&real)?;
        let tree = format!("{SCRATCH}/src-{arch}");
        gpuhost_steps::transaction::extract(
            host,
            &real.display().to_string(),
            &tree,
            &["/usr/src/"],
        )?;
        let dir = format!("{tree}/usr/src/{name}-{drv}");
        let conf_path = format!("{dir}/dkms.conf");
        let text = host
            .read_opt(&conf_path)?
            .ok_or_else(|| invalid!("{file} has no {}", &conf_path[tree.len()..]))?;
        Ok(Source {
            dir,
            conf: DkmsConf::parse(&text, &file)?,
            driver: drv.clone(),
            epoch,
            flavour,
            arch,
        })
    }

    pub(super) fn package_info(&self, kver: &str) -> Info {
        Info {
            driver: self.driver.clone(),
            epoch: self.epoch,
            flavour: self.flavour,
            kernel: kver.to_string(),
            arch: self.arch,
        }
    }
}

/// The epoch of an RPM file (`(none)`: 0).
fn epoch_of(rpm: &Path) -> Result<u32> {
    let out = Cmd::new("rpm")
        .args(["-qp", "--nosignature", "--qf", "%{EPOCH}"])
        .arg(rpm)
        .run()?;
    Ok(out.stdout.trim().parse().unwrap_or(0))
}

fn build_one(
    host: &Host,
    source: &Source,
    kver: &str,
    jobs: usize,
    fleet: &FleetKey,
    sign_file: &str,
) -> Result<Built> {
    let work = format!("{SCRATCH}/build/{kver}");
    host.remove_tree(&work)?;
    host.create_dir_all(format!("{SCRATCH}/build"))?;
    Cmd::new("cp")
        .arg("-a")
        .arg(host.real_path(&source.dir)?)
        .arg(host.path(&work))
        .run()?;
    let work_real = host.real_path(&work)?;
    sandbox::give_to_build_user(&work_real)?;
    let sysdir = source_dir(host, kver).unwrap_or_default();
    let (cc, compiler) = compiler_of(host, kver)?;
    let argv = source.conf.make_for(kver, &sysdir, jobs, cc.as_deref());
    let cpu_before = children_cpu_seconds();
    let t = Instant::now();
    let out = sandbox::confined(host, &work, &argv, BUILD_TIMEOUT)?.output()?;
    if !out.success() {
        // make reports on both streams: the last lines of each.
        let log = format!(
            "{}\n{}",
            gpuhost_host::cmd::tail_lines(&out.stdout, 8),
            gpuhost_host::cmd::tail_lines(&out.stderr, 8)
        );
        return Err(anyhow::anyhow!(
            "building NVIDIA's {} modules for {kver} failed ({}, exit {:?}): {}",
            source.flavour,
            argv.join(" "),
            out.code,
            log.trim()
        ));
    }
    let seconds = t.elapsed().as_secs_f64();
    strip_debug(host, kver, &work, &source.conf.modules)?;
    let cpu_seconds = children_cpu_seconds() - cpu_before;
    // Every process of the build has ended (its namespace with it): the modules leave the build
    // folder for root's, and are signed there.
    let signed = format!("{SCRATCH}/sign/{kver}");
    host.remove_tree(&signed)?;
    host.create_dir_all(&signed)?;
    let signed_real = host.real_path(&signed)?;
    let modules = signer::take_modules(&work_real, &source.conf.modules, &signed_real, kver)?;
    let in_root: Vec<String> = modules
        .iter()
        .filter_map(|m| m.file_name())
        .map(|f| format!("{signed}/{}", f.to_string_lossy()))
        .collect();
    let cert = format!("{SCRATCH}/fleet-cert.der");
    host.write_atomic(&cert, &fleet.cert_der, 0o644)?;
    signer::sign(host, kver, sign_file, &cert, &in_root, fleet)?;
    Ok(Built {
        modules,
        compiler,
        seconds,
        cpu_seconds,
        rpm_dir: host.real_path(SCRATCH)?.join("rpmbuild").join(kver),
    })
}

/// The compiler the kernel was built with, when it is not the build root's system gcc: its
/// gcc-toolset's gcc (`CC=`), which must be installed there. `(CC, what the report says)`.
fn compiler_of(host: &Host, kver: &str) -> Result<(Option<String>, String)> {
    let config = gpuhost_host::kernel::config_of(host, kver).unwrap_or_default();
    let Some((text, Some(major))) = gpuhost_host::kernel::compiler(&config) else {
        return Ok((None, "gcc".to_string()));
    };
    let system = host
        .read_opt("/etc/os-release")?
        .map(|t| gpuhost_host::osrelease::OsRelease::parse(&t))
        .and_then(|o| o.major())
        .and_then(gpuhost_host::platform::release)
        .map(|r| r.system_gcc);
    if system.is_none_or(|s| major <= s) {
        return Ok((
            None,
            format!("gcc (the system's: {kver} was built by {text})"),
        ));
    }
    let cc = format!("/opt/rh/gcc-toolset-{major}/root/usr/bin/gcc");
    if !host.exists(&cc) {
        return Err(invalid!(
            "{kver} was built by {text}: install gcc-toolset-{major}-gcc in the build root {}, then build again",
            host.root().display()
        ));
    }
    Ok((
        Some(cc.clone()),
        format!("{cc} ({kver} was built by {text})"),
    ))
}

/// Strip each module's debug sections (`strip --strip-debug`, what DKMS does to what it builds,
/// `strip -g`, unless a dkms.conf says `STRIP[i]=no`, which NVIDIA's does not): NVIDIA's open
/// modules are 95 MB as built and 26 MB stripped, the bytes every node downloads and installs.
/// Before signing: stripping after would cut the appended signature off. In the build's
/// sandbox, as the build's user: strip reads what the build made. Each module must be a
/// regular file of the build folder, reached without a link.
fn strip_debug(host: &Host, kver: &str, work: &str, modules: &[(String, String)]) -> Result<()> {
    let work_real = host.real_path(work)?;
    let mut argv = vec!["strip".to_string(), "--strip-debug".to_string()];
    for (name, at) in modules {
        let rel = if at.is_empty() {
            format!("{name}.ko")
        } else {
            format!("{at}/{name}.ko")
        };
        signer::check_inside(&work_real, &rel).map_err(|e| {
            anyhow::anyhow!(
                "make built no {name}.ko for {kver} (looked for {rel} in the build folder: {e})"
            )
        })?;
        argv.push(rel);
    }
    let out = sandbox::confined(host, work, &argv, Duration::from_secs(600))?;
    out.run().with_context(|| {
        format!("stripping the modules for {kver} (strip, from binutils, in the build root)")
    })?;
    Ok(())
}

/// CPU seconds (user + system) of the children this process has waited for: `/proc/self/stat`'s
/// `cutime` and `cstime`, in clock ticks of 1/100 s (Linux's USER_HZ on x86_64 and aarch64).
fn children_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // After the command name (in parentheses, which may hold spaces): fields 3 onwards.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // cutime and cstime are fields 16 and 17 of the line, 14 and 15 of `rest`.
    let ticks: u64 = [13, 14]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

/// The build root's scratch folder: made empty, removed when dropped (the fleet key in it is
/// removed earlier, after each kernel's signing).
struct Scratch<'h> {
    host: &'h Host,
    /// The build root's lock: one build at a time uses its scratch folder.
    _lock: std::fs::File,
}

impl<'h> Scratch<'h> {
    fn new(host: &'h Host) -> Result<Scratch<'h>> {
        let parent = "/var/cache/gpuhost";
        host.create_dir_all(parent)?;
        let lock = lock(&host.real_path(parent)?, "kmod-build.lock")?;
        host.remove_tree(SCRATCH)?;
        host.create_dir_all(SCRATCH)?;
        // The build's user reaches its build folder (`build/<kver>`, its own) through these.
        for d in [parent, SCRATCH] {
            let real = host.real_path(d)?;
            let mode = host.mode(d).unwrap_or(0o700) & 0o7777;
            std::fs::set_permissions(
                &real,
                std::os::unix::fs::PermissionsExt::from_mode(mode | 0o011),
            )
            .with_context(|| format!("making {} searchable", real.display()))?;
        }
        Ok(Scratch { host, _lock: lock })
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.host.remove_tree(SCRATCH) {
            tracing::warn!("could not remove {SCRATCH}: {e:#}");
        }
    }
}
