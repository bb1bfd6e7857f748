//! A bundle's manifest (`manifest.json`): what the bundle is for, and every file in it with its
//! size and SHA-256. `apply --bundle` verifies it before anything else: a file changed, missing
//! or not listed is refused (exit 2), naming the file.

pub use gpuhost_host::fsutil::kind_of;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use gpuhost_host::fsutil;
use gpuhost_host::invalid;
use gpuhost_host::kernel::Flavour;

/// The manifest's file name, at the top of the bundle.
pub(crate) const MANIFEST: &str = "manifest.json";
/// The format this gpuhost writes and reads.
pub(crate) const FORMAT: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `1`.
    pub format: u32,
    pub gpuhost_version: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// The profile the bundle was made for (its name); `profile.toml` holds it resolved.
    pub profile: String,
    /// Oracle Linux major version of the target.
    pub os_major: u32,
    /// Machine architecture (`x86_64`).
    pub arch: String,
    pub flavour: Flavour,
    /// The kernels the bundle carries headers (and builds) for.
    pub kernels: Vec<String>,
    /// Made for NVSwitch systems (the `fm` module profile and Fabric Manager).
    pub fabric_manager: bool,
    /// NVIDIA's local repo package, relative to the bundle (`driver/cuda-repo-….rpm`): bundles
    /// made before issue 42 carried it whole; nodes installed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_repo_rpm: Option<String>,
    /// The driver set the bundle carries instead: NVIDIA's repo metadata and keys of the local
    /// repo package (never the package, never the CUDA toolkit's payload) in a folder, the
    /// driver packages in `repo/`; nodes keep them in gpuhost's driver cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_set: Option<DriverSet>,
    /// Whether dnf checks the packages' signatures against `gpgkeys` (every repo they came
    /// from checked them).
    pub gpgcheck: bool,
    /// Key files, relative to the bundle.
    pub gpgkeys: Vec<String>,
    /// NEVRAs of the packages in `repo/`.
    pub packages: Vec<String>,
    /// `name:stream` of the module streams the repo's metadata carries.
    pub modules: Vec<String>,
    /// What the typed plan of a clean target installs, step by step, when the bundle was
    /// made: the packages the bundle carries for each step (NVIDIA's local repo package as the
    /// driver set read out of it).
    pub plan: BTreeMap<String, Vec<String>>,
    /// The prebuilt kmods the bundle carries (`gpuhost bundle --kmod-repo`, or the profile's
    /// `driver.kmod_repo`): nodes install them instead of building the modules with DKMS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kmod_repo: Option<BundledKmods>,
    /// Every file of the bundle but this manifest.
    pub files: Vec<FileEntry>,
}

/// The kmod repo a bundle carries: a kmod repo of its own (the RPMs of the bundle's driver
/// and flavour for the kernels it serves, the fleet certificate, repo metadata and a kmod
/// manifest, [`gpuhost_host::kmodrepo`]), which `apply --bundle` gives the run as
/// `driver.kmod_repo`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BundledKmods {
    /// The directory, relative to the bundle (`kmods`).
    pub path: String,
    pub driver: String,
    /// `open` or `proprietary`.
    pub flavour: String,
    /// The kernels it has a kmod for.
    pub kernels: Vec<String>,
    /// The kmods' package names.
    pub packages: Vec<String>,
    /// The SHA-256 of the fleet certificate the modules are signed for.
    pub cert_sha256: String,
    /// The size of its files.
    pub bytes: u64,
}

/// The driver set a bundle carries (see [`Manifest::driver_set`]).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DriverSet {
    /// The folder, relative to the bundle (`driver/cuda-repo-rhel9-13-0-local-13.0.1_580.82.07`),
    /// with gpuhost's cache manifest (`gpuhost-cache.json`).
    pub path: String,
    /// NVIDIA's local repo package it was read from (its file name).
    pub file: String,
    pub driver: String,
    /// The driver packages it gives the node (their names; the files are in `repo/`).
    pub packages: Vec<String>,
    /// Their bytes.
    pub bytes: u64,
    /// NVIDIA's local repo package's size, which the bundle does not carry.
    pub package_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative to the bundle, `/`-separated.
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

impl Manifest {
    /// Total size of the bundle's files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Every regular file under `dir` (relative, `/`-separated, sorted) but the manifest; anything
/// that is not a directory or a regular file is an error naming it.
pub(crate) fn list_files(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.retain(|p| p != MANIFEST);
    out.sort();
    Ok(out)
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("reading {}", dir.display()))?;
        let p = e.path();
        let rel = relative(base, &p);
        let ft = std::fs::symlink_metadata(&p)
            .with_context(|| format!("reading {}", p.display()))?
            .file_type();
        if ft.is_dir() {
            walk(base, &p, out)?;
        } else if ft.is_file() {
            out.push(rel);
        } else {
            return Err(invalid!(
                "bundle {}: {rel} is not a regular file ({}); a bundle holds only files: copy it again from where it was made",
                base.display(),
                kind_of(ft)
            ));
        }
    }
    Ok(())
}

fn relative(base: &Path, p: &Path) -> String {
    p.strip_prefix(base)
        .unwrap_or(p)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The entries of these files, hashed on every core.
pub fn entries(dir: &Path, files: &[String]) -> Result<Vec<FileEntry>> {
    let hashed = hash_all(dir, files)?;
    Ok(files
        .iter()
        .zip(hashed)
        .map(|(path, (size, sha256))| FileEntry {
            path: path.clone(),
            size,
            sha256,
        })
        .collect())
}

/// A file's size and SHA-256, or why it could not be read.
type Hashed = Result<(u64, String)>;

/// `(size, sha256)` of each file, in order, spread over the machine's cores.
fn hash_all(dir: &Path, files: &[String]) -> Result<Vec<(u64, String)>> {
    let workers = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .clamp(1, 8);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<Hashed>>> =
        std::sync::Mutex::new((0..files.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(rel) = files.get(i) else { break };
                let p = dir.join(rel);
                // Never through a link, never a FIFO: only the regular files listed.
                let r = fsutil::open_regular(&p)
                    .and_then(|f| Ok((f.metadata()?.len(), f)))
                    .with_context(|| format!("reading {}", p.display()))
                    .and_then(|(len, f)| Ok((len, fsutil::sha256_read(f, &p)?)));
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(r);
                }
            });
        }
    });
    let all = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("hashing the bundle's files failed"))?;
    all.into_iter()
        .zip(files)
        .map(|(r, f)| r.unwrap_or_else(|| Err(anyhow::anyhow!("{f} was not hashed"))))
        .collect()
}

/// A path from a manifest must stay inside the bundle: relative, normalised (`a/b`, never `a//b`,
/// `./a` or `a/../b`), `/`-separated.
fn safe(path: &str) -> bool {
    !path.is_empty()
        && !path.contains(['\\', '\0'])
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Read the manifest without following a link and without opening anything but a regular file:
/// a FIFO (or a device) in its place would block the read for ever.
fn read_manifest(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let md = std::fs::symlink_metadata(path)?;
    if !md.file_type().is_file() {
        return Err(std::io::Error::other(format!(
            "it is {}, not a regular file",
            kind_of(md.file_type())
        )));
    }
    let mut text = String::new();
    fsutil::open_regular(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Every path field of the manifest (`driver_repo_rpm`, `gpgkeys`, `kmod_repo`'s kmod
/// manifest) must name a file the manifest lists with its SHA-256: apply uses no byte the
/// manifest does not hash.
fn check_fields(shown: &str, m: &Manifest, listed: &BTreeMap<&str, &FileEntry>) -> Result<()> {
    let kmods = m
        .kmod_repo
        .iter()
        .map(|k| format!("{}/{}", k.path, gpuhost_host::kmodrepo::MANIFEST));
    let fields = m
        .driver_repo_rpm
        .iter()
        .cloned()
        .map(|p| ("driver_repo_rpm", p))
        .chain(m.gpgkeys.iter().cloned().map(|p| ("gpgkeys", p)))
        .chain(kmods.map(|p| ("kmod_repo", p)))
        .chain(m.driver_set.iter().map(|d| {
            (
                "driver_set",
                format!(
                    "{}/{}",
                    d.path,
                    gpuhost_steps::transaction::cache::MANIFEST_FILE
                ),
            )
        }));
    for (field, p) in fields {
        if !safe(&p) || !listed.contains_key(p.as_str()) {
            return Err(invalid!(
                "bundle {shown}: {MANIFEST} field {field} names `{p}`, which is not a file of the bundle listed with its SHA-256; the manifest was tampered with: copy the bundle again from where it was made"
            ));
        }
    }
    Ok(())
}

/// Read and verify the bundle at `dir`: the manifest is readable, every file it lists is there
/// with its size and SHA-256, and there is no other file. Errors are invalid input (exit 2)
/// naming the file. With the manifest, the SHA-256 of the `manifest.json` bytes it was read from.
pub fn verify(dir: &Path) -> Result<(Manifest, String)> {
    let shown = dir.display();
    let path = dir.join(MANIFEST);
    let text = match read_manifest(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(invalid!(
            "{shown} is not a gpuhost bundle: it has no {MANIFEST}; make one with gpuhost bundle"
        ))
        }
        Err(e) => return Err(invalid!("bundle {shown}: {MANIFEST} cannot be read: {e}")),
    };
    let m: Manifest = serde_json::from_str(&text).map_err(|e| {
        invalid!("bundle {shown}: {MANIFEST} is damaged ({e}); copy the bundle again from where it was made")
    })?;
    if m.format != FORMAT {
        return Err(invalid!(
            "bundle {shown}: format {} is not the one this gpuhost reads ({FORMAT}); use the gpuhost that made it, or make the bundle again",
            m.format
        ));
    }
    let mut listed: BTreeMap<&str, &FileEntry> = BTreeMap::new();
    for f in &m.files {
        if !safe(&f.path) || f.path == MANIFEST {
            return Err(invalid!(
                "bundle {shown}: {MANIFEST} names `{}`, which is not a file inside the bundle; the manifest was tampered with",
                f.path
            ));
        }
        listed.insert(f.path.as_str(), f);
    }
    check_fields(&shown.to_string(), &m, &listed)?;
    let present = list_files(dir)?;
    let again = "the bundle is damaged or was tampered with; copy it again from where it was made";
    if let Some(extra) = present.iter().find(|p| !listed.contains_key(p.as_str())) {
        return Err(invalid!(
            "bundle {shown}: {extra} is not in the manifest; {again}"
        ));
    }
    let present: std::collections::BTreeSet<&str> = present.iter().map(String::as_str).collect();
    if let Some(missing) = m.files.iter().find(|f| !present.contains(f.path.as_str())) {
        return Err(invalid!(
            "bundle {shown}: {} is missing; {again}",
            missing.path
        ));
    }
    for f in &m.files {
        let size = std::fs::metadata(dir.join(&f.path))
            .map(|md| md.len())
            .unwrap_or(u64::MAX);
        if size != f.size {
            return Err(invalid!(
                "bundle {shown}: {} has changed (size {size}, the manifest says {}); {again}",
                f.path,
                f.size
            ));
        }
    }
    let paths: Vec<String> = m.files.iter().map(|f| f.path.clone()).collect();
    for (f, (_, sha)) in m.files.iter().zip(hash_all(dir, &paths)?) {
        if sha != f.sha256 {
            return Err(invalid!(
                "bundle {shown}: {} has changed (SHA-256 {sha}, the manifest says {}); {again}",
                f.path,
                f.sha256
            ));
        }
    }
    Ok((m, gpuhost_host::fsutil::sha256_hex(text.as_bytes())))
}

/// `dir/rel` for a manifest path already verified to be safe.
pub fn join(dir: &Path, rel: &str) -> PathBuf {
    rel.split('/').fold(dir.to_path_buf(), |p, c| p.join(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhost_host::fsutil::sha256_file;

    fn sample(dir: &Path) -> Result<Manifest> {
        std::fs::create_dir_all(dir.join("repo/Packages"))?;
        std::fs::write(dir.join("repo/Packages/a-1-1.x86_64.rpm"), b"rpm a")?;
        std::fs::write(dir.join("profile.toml"), b"description = \"x\"\n")?;
        let files = list_files(dir)?;
        let m = Manifest {
            format: FORMAT,
            gpuhost_version: "0".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            profile: "ol8-uek".into(),
            os_major: 8,
            arch: "x86_64".into(),
            flavour: Flavour::Uek,
            kernels: vec![],
            fabric_manager: false,
            driver_repo_rpm: None,
            driver_set: None,
            kmod_repo: None,
            gpgcheck: false,
            gpgkeys: vec![],
            packages: vec![],
            modules: vec![],
            plan: BTreeMap::new(),
            files: entries(dir, &files)?,
        };
        std::fs::write(dir.join(MANIFEST), serde_json::to_vec(&m)?)?;
        Ok(m)
    }

    fn refused(dir: &Path, needle: &str) {
        let e = verify(dir).err();
        assert!(
            e.as_ref().is_some_and(gpuhost_host::error::is_invalid),
            "{e:?}"
        );
        let msg = format!("{:#}", e.unwrap_or_else(|| anyhow::anyhow!("")));
        assert!(msg.contains(needle), "{msg}");
    }

    #[test]
    fn a_bundle_verifies_as_made() -> Result<()> {
        let d = tempfile::tempdir()?;
        let m = sample(d.path())?;
        let (verified, sha) = verify(d.path())?;
        assert_eq!(verified, m);
        assert_eq!(sha, sha256_file(&d.path().join(MANIFEST))?);
        assert_eq!(m.files.len(), 2);
        assert_eq!(m.bytes(), 5 + 18);
        Ok(())
    }

    #[test]
    fn a_changed_file_is_named() -> Result<()> {
        let d = tempfile::tempdir()?;
        sample(d.path())?;
        // Same size, other bytes: only the hash can tell.
        std::fs::write(d.path().join("repo/Packages/a-1-1.x86_64.rpm"), b"rpm b")?;
        refused(
            d.path(),
            "repo/Packages/a-1-1.x86_64.rpm has changed (SHA-256",
        );
        Ok(())
    }

    #[test]
    fn a_missing_or_extra_file_is_named() -> Result<()> {
        let d = tempfile::tempdir()?;
        sample(d.path())?;
        std::fs::write(d.path().join("repo/Packages/evil-1-1.x86_64.rpm"), b"x")?;
        refused(
            d.path(),
            "repo/Packages/evil-1-1.x86_64.rpm is not in the manifest",
        );
        std::fs::remove_file(d.path().join("repo/Packages/evil-1-1.x86_64.rpm"))?;
        std::fs::remove_file(d.path().join("profile.toml"))?;
        refused(d.path(), "profile.toml is missing");
        Ok(())
    }

    #[test]
    fn links_and_unsafe_paths_are_refused() -> Result<()> {
        let d = tempfile::tempdir()?;
        let mut m = sample(d.path())?;
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("repo/passwd"))?;
        refused(d.path(), "repo/passwd is not a regular file");
        std::fs::remove_file(d.path().join("repo/passwd"))?;
        m.files[0].path = "../outside".into();
        std::fs::write(d.path().join(MANIFEST), serde_json::to_vec(&m)?)?;
        refused(d.path(), "`../outside`");
        Ok(())
    }

    /// Every path field names a file the manifest hashes: not one outside the bundle, not one
    /// inside it but unlisted, not one written un-normalised.
    #[test]
    fn path_fields_name_only_hashed_files() -> Result<()> {
        let outer = tempfile::tempdir()?;
        let d = outer.path().join("b");
        std::fs::create_dir_all(outer.path().join("evil"))?;
        std::fs::write(outer.path().join("evil/a-1-1.x86_64.rpm"), b"evil")?;
        let good = sample(&d)?;
        type Edit<'a> = &'a dyn Fn(&mut Manifest);
        let cases: [(&str, Edit<'_>); 6] = [
            ("driver_repo_rpm", &|m| {
                m.driver_repo_rpm = Some("../evil/a-1-1.x86_64.rpm".into())
            }),
            ("driver_repo_rpm", &|m| {
                m.driver_repo_rpm = Some("repo//Packages/a-1-1.x86_64.rpm".into())
            }),
            ("driver_repo_rpm", &|m| {
                m.driver_repo_rpm = Some("/etc/hostname".into())
            }),
            ("gpgkeys", &|m| {
                m.gpgkeys = vec!["../../../../etc/hostname".into()]
            }),
            ("gpgkeys", &|m| {
                m.gpgkeys = vec!["keys/not-listed.asc".into()]
            }),
            ("gpgkeys", &|m| m.gpgkeys = vec!["./profile.toml".into()]),
        ];
        for (field, tamper) in cases {
            let mut m = good.clone();
            tamper(&mut m);
            std::fs::write(d.join(MANIFEST), serde_json::to_vec(&m)?)?;
            refused(&d, &format!("field {field} names"));
        }
        // The kmod repo's manifest must be a listed file too.
        for path in ["../kmods", "repo", "kmods/"] {
            let mut m = good.clone();
            m.kmod_repo = Some(BundledKmods {
                path: path.into(),
                driver: "570.124.06".into(),
                flavour: "open".into(),
                kernels: vec![],
                packages: vec![],
                cert_sha256: String::new(),
                bytes: 0,
            });
            std::fs::write(d.join(MANIFEST), serde_json::to_vec(&m)?)?;
            refused(&d, "field kmod_repo names");
        }
        // A listed file is fine.
        let mut m = good.clone();
        m.driver_repo_rpm = Some("repo/Packages/a-1-1.x86_64.rpm".into());
        m.gpgkeys = vec!["profile.toml".into()];
        std::fs::write(d.join(MANIFEST), serde_json::to_vec(&m)?)?;
        verify(&d)?;
        Ok(())
    }

    fn mkfifo(p: &Path) -> Result<()> {
        let o = std::process::Command::new("mkfifo").arg(p).output()?;
        anyhow::ensure!(o.status.success(), "mkfifo {}", p.display());
        Ok(())
    }

    /// A FIFO, as the manifest or as a file of the bundle, is refused at once (a read would
    /// wait for a writer for ever).
    #[test]
    fn a_fifo_is_refused_without_being_read() -> Result<()> {
        let d = tempfile::tempdir()?;
        sample(d.path())?;
        let fifo = d.path().join("repo/fifo");
        mkfifo(&fifo)?;
        refused(d.path(), "repo/fifo is not a regular file (a FIFO)");
        std::fs::remove_file(&fifo)?;
        std::fs::remove_file(d.path().join(MANIFEST))?;
        mkfifo(&d.path().join(MANIFEST))?;
        refused(d.path(), "it is a FIFO, not a regular file");
        Ok(())
    }

    #[test]
    fn no_manifest_is_not_a_bundle() -> Result<()> {
        let d = tempfile::tempdir()?;
        refused(d.path(), "is not a gpuhost bundle");
        std::fs::write(d.path().join(MANIFEST), b"{")?;
        refused(d.path(), "is damaged");
        Ok(())
    }
}
