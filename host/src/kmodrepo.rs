//! A kmod repo made by `gpuhost kmod build` on a build host: NVIDIA's kernel modules built once
//! per (driver, kernel), signed there, one RPM each, in a dnf repo (`repodata/`), with the
//! fleet's certificate (public) and a manifest, [`MANIFEST`], that lists every RPM with its
//! SHA-256. A node reads the manifest before anything changes and installs from the repo
//! without compiling; a build host adds kernels and drivers to it. The directory is a file of
//! the machine gpuhost runs on (like `driver.local_repo_rpm`), not of the root.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::hinted;
use crate::fsutil::sha256_file;

/// The manifest's file name in the repo directory.
pub const MANIFEST: &str = "gpuhost-kmods.json";
/// The fleet's certificate in the repo directory (DER, as `sign-file` and `mokutil` take it).
pub const CERT: &str = "fleet-signing-cert.der";
/// The format this gpuhost writes and reads.
const FORMAT: u32 = 1;

/// What a kmod repo holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KmodManifest {
    pub format: u32,
    /// The SHA-256 of [`CERT`]: every module of every RPM is signed by its key.
    pub cert_sha256: String,
    pub kmods: Vec<KmodEntry>,
}

/// One RPM: the modules of one driver and flavour for one kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KmodEntry {
    pub driver: String,
    /// The epoch of NVIDIA's packages of that driver (the kmod provides `nvidia-kmod` at it).
    pub epoch: u32,
    /// `open` or `proprietary`.
    pub flavour: String,
    /// The kernel release (`uname -r`) the modules are built for.
    pub kernel: String,
    pub arch: String,
    /// The package name (`kmod-nvidia-open-<kernel>`).
    pub package: String,
    /// The RPM, relative to the repo directory.
    pub file: String,
    pub sha256: String,
    /// The module files the RPM installs.
    pub modules: Vec<String>,
}

impl KmodManifest {
    pub fn new(cert_sha256: String) -> KmodManifest {
        KmodManifest {
            format: FORMAT,
            cert_sha256,
            kmods: Vec::new(),
        }
    }

    /// The manifest of the repo `dir`, every file it names checked against its SHA-256 (the
    /// certificate's too). Bad input (exit 2) naming the file when one is missing or differs,
    /// or when the manifest cannot be read.
    pub fn read_verified(dir: &Path) -> Result<KmodManifest> {
        let path = dir.join(MANIFEST);
        let text = read_manifest(&path).map_err(|e| {
            crate::error::as_invalid(hinted(
                format!(
                    "the kmod repo {} has no readable {MANIFEST} ({e}); nothing was changed",
                    dir.display()
                ),
                "give driver.kmod_repo the directory `gpuhost kmod build --out` wrote",
            ))
        })?;
        let m: KmodManifest = serde_json::from_str(&text).map_err(|e| {
            crate::invalid!(
                "{}: not a gpuhost kmod manifest ({e}); rebuild the repo with `gpuhost kmod build`",
                path.display()
            )
        })?;
        if m.format != FORMAT {
            return Err(crate::invalid!(
                "{}: format {} is not this gpuhost's ({FORMAT}); rebuild the repo with this gpuhost",
                path.display(),
                m.format
            ));
        }
        check_file(dir, CERT, &m.cert_sha256)?;
        for k in &m.kmods {
            check_file(dir, &k.file, &k.sha256)?;
        }
        Ok(m)
    }

    /// The RPM for a driver, flavour and kernel, if the repo has one.
    pub fn find(&self, driver: &str, flavour: &str, kernel: &str) -> Option<&KmodEntry> {
        self.kmods
            .iter()
            .find(|k| k.driver == driver && k.flavour == flavour && k.kernel == kernel)
    }

    /// Add (or replace: the same driver, flavour and kernel) an entry.
    pub fn put(&mut self, entry: KmodEntry) {
        self.kmods.retain(|k| {
            !(k.driver == entry.driver && k.flavour == entry.flavour && k.kernel == entry.kernel)
        });
        self.kmods.push(entry);
        self.kmods.sort_by(|a, b| {
            (&a.driver, &a.flavour, &a.kernel).cmp(&(&b.driver, &b.flavour, &b.kernel))
        });
    }

    /// The manifest as written: JSON, one entry per RPM.
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    /// The repo's certificate file.
    pub fn cert_path(dir: &Path) -> PathBuf {
        dir.join(CERT)
    }
}

/// The manifest's text: a regular file (a link followed: the repo is the user's) of at most
/// [`MAX_MANIFEST`] bytes. A FIFO or a device is refused by its type before it is opened (a
/// FIFO never hangs the run, `/dev/zero` is never read), and read through a descriptor that
/// does not block and is checked again.
fn read_manifest(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let ft = std::fs::metadata(path)?.file_type();
    if !ft.is_file() {
        return Err(std::io::Error::other(format!(
            "it is {}, not a regular file; it was not opened",
            crate::fsutil::kind_of(ft)
        )));
    }
    let f = crate::fsutil::open_named_file(path)?;
    let mut bytes = Vec::new();
    f.take(MAX_MANIFEST + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_MANIFEST {
        return Err(std::io::Error::other(format!(
            "it is larger than {} MiB, which no manifest gpuhost writes is",
            MAX_MANIFEST >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| std::io::Error::other("it is not UTF-8 text"))
}

/// The largest manifest read: 16 MiB (about 40,000 kmods; one is about 400 bytes).
const MAX_MANIFEST: u64 = 16 << 20;

/// `%post` of a kmod RPM gpuhost builds for `kernel` with `modules` (file names, `nvidia.ko`):
/// the same modules a DKMS build left compressed for the kernel (`extra/nvidia.ko.xz`, which
/// would shadow these) removed, then `depmod`. `engine::kmod::package` writes it into the spec;
/// a node compares the RPM's scriptlets with it ([`scripts_listing`]).
pub fn post_script(kernel: &str, modules: &[String]) -> String {
    let names: Vec<String> = modules
        .iter()
        .filter_map(|m| Path::new(m).file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let leftovers = if names.is_empty() {
        String::new()
    } else {
        format!(
            "for m in {}; do for z in xz zst gz; do rm -f /lib/modules/{kernel}/extra/$m.ko.$z; done; done\n",
            names.join(" ")
        )
    };
    format!("{leftovers}{}", postun_script(kernel))
}

/// `%postun` of a kmod RPM gpuhost builds for `kernel`.
pub fn postun_script(kernel: &str) -> String {
    format!("depmod -a {kernel} || :\n")
}

/// What `rpm -qp --scripts --triggers --filetriggers` prints of a kmod RPM gpuhost builds: its
/// `%post` and `%postun` through `/bin/sh`, and nothing else (no `%pre`, `%preun`, `%pretrans`,
/// `%posttrans`, trigger or file trigger, no other interpreter).
pub fn scripts_listing(kernel: &str, modules: &[String]) -> String {
    format!(
        "postinstall scriptlet (using /bin/sh):\n{}postuninstall scriptlet (using /bin/sh):\n{}",
        post_script(kernel, modules),
        postun_script(kernel)
    )
}

/// `rel` in `dir` is a regular file (no path out of the directory) whose SHA-256 is `want`.
fn check_file(dir: &Path, rel: &str, want: &str) -> Result<()> {
    let bad = |why: String| {
        crate::error::as_invalid(hinted(
            format!(
                "the kmod repo {} does not match its manifest: {rel} {why}; nothing was changed",
                dir.display()
            ),
            "copy the repo again from the build host (or rebuild it with `gpuhost kmod build`)",
        ))
    };
    if rel.split('/').any(|c| c == ".." || c.is_empty()) {
        return Err(bad("is not a file of the repo".to_string()));
    }
    let path = dir.join(rel);
    let meta =
        std::fs::symlink_metadata(&path).map_err(|e| bad(format!("cannot be read ({e})")))?;
    if !meta.is_file() {
        return Err(bad("is not a regular file".to_string()));
    }
    let got = sha256_file(&path).with_context(|| format!("reading {}", path.display()))?;
    if got != want {
        return Err(bad(format!("has SHA-256 {got}, the manifest says {want}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kernel: &str, file: &str, sha256: &str) -> KmodEntry {
        KmodEntry {
            driver: "580.82.07".into(),
            epoch: 3,
            flavour: "open".into(),
            kernel: kernel.into(),
            arch: "x86_64".into(),
            package: format!("kmod-nvidia-open-{kernel}"),
            file: file.into(),
            sha256: sha256.into(),
            modules: vec!["nvidia.ko".into()],
        }
    }

    #[test]
    fn a_repo_that_matches_its_manifest_is_read_and_one_that_does_not_is_bad_input() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join(CERT), b"cert")?;
        std::fs::create_dir_all(dir.path().join("x86_64"))?;
        std::fs::write(dir.path().join("x86_64/k.rpm"), b"rpm")?;
        let mut m = KmodManifest::new(crate::fsutil::sha256_hex(b"cert"));
        let k = "5.15.0-206.153.7.el9uek.x86_64";
        m.put(entry(k, "x86_64/k.rpm", &crate::fsutil::sha256_hex(b"rpm")));
        std::fs::write(dir.path().join(MANIFEST), m.to_json()?)?;
        let read = KmodManifest::read_verified(dir.path())?;
        assert_eq!(read, m);
        assert!(read.find("580.82.07", "open", k).is_some());
        assert!(read.find("580.82.07", "proprietary", k).is_none());
        // A file changed after the build.
        std::fs::write(dir.path().join("x86_64/k.rpm"), b"other")?;
        let e = KmodManifest::read_verified(dir.path()).err();
        assert!(e.as_ref().is_some_and(crate::error::is_invalid), "{e:?}");
        assert!(format!("{e:?}").contains("x86_64/k.rpm"), "{e:?}");
        // A manifest naming a file out of the repo.
        m.kmods[0].file = "../k.rpm".into();
        std::fs::write(dir.path().join(MANIFEST), m.to_json()?)?;
        let e = KmodManifest::read_verified(dir.path()).err();
        assert!(e.as_ref().is_some_and(crate::error::is_invalid), "{e:?}");
        // No manifest at all.
        let empty = tempfile::tempdir()?;
        let e = KmodManifest::read_verified(empty.path()).err();
        assert!(e.as_ref().is_some_and(crate::error::is_invalid), "{e:?}");
        Ok(())
    }

    #[test]
    fn put_replaces_the_same_driver_flavour_and_kernel() {
        let mut m = KmodManifest::new(String::new());
        m.put(entry("k1", "a.rpm", "1"));
        m.put(entry("k2", "b.rpm", "2"));
        m.put(entry("k1", "c.rpm", "3"));
        assert_eq!(m.kmods.len(), 2);
        assert_eq!(m.kmods[0].file, "c.rpm");
    }
}
