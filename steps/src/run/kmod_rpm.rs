//! A kmod RPM on a node is what `gpuhost kmod build` makes, or it is refused before any change
//! (issue 53, item 4). A manifest entry's SHA-256 only says the file is the one the manifest
//! names; the RPM itself is held against what `engine::kmod::package` writes:
//! - its package, version and arch, and the entry's arch, are the kernel's and the driver's;
//! - its files are the entry's modules under `/lib/modules/<kver>/extra/`, regular files,
//!   nothing else (no `/etc/modprobe.d/…`, no `/usr/local/bin/…`, no site file replaced);
//! - it is whole: every payload entry and the payload's digest read by gpuhost's reader
//!   ([`gpuhost_host::rpmfile::verify`]), so rpm finds no fault inside the transaction;
//! - its scriptlets are gpuhost's `%post` and `%postun` and nothing else
//!   ([`gpuhost_host::kmodrepo::scripts_listing`]; `rpm -qp --scripts --triggers
//!   --filetriggers`: the header reader has no scriptlet tags, and rpm lists every scriptlet
//!   and interpreter its version would run).
//!
//! Each refusal is bad input (exit 2), one line naming the RPM and what to do.

use anyhow::Result;

use super::kmods::PrebuiltKmod;
use gpuhost_host::error::{as_invalid, hinted};
use gpuhost_host::host::Host;
use gpuhost_host::rpmfile::{self, Fault, Package};

/// What to do about a kmod RPM that is not what gpuhost builds.
const REBUILD: &str =
    "rebuild the repo with gpuhost kmod build on the build host, and copy it whole";

impl PrebuiltKmod {
    /// The RPM is what gpuhost builds for the kernel and `driver`, as its manifest entry says
    /// (all but the scriptlets: [`PrebuiltKmod::scriptlets_are_gpuhosts`]).
    pub(super) fn is_what_gpuhost_builds(&self, driver: &str) -> Result<()> {
        let pkg = rpmfile::package(&self.file).map_err(|f| self.fault(f))?;
        self.identity(&pkg, driver)?;
        self.only_modules(&pkg)?;
        // Judged as the signature check's extraction judges it: every module a file to write.
        let allowed = [self.extra()];
        let module = |f: &rpmfile::FileInfo| f.is_file();
        let want = rpmfile::Want {
            allowed: &allowed,
            select: &module,
        };
        rpmfile::verify(&self.file, &want).map_err(|f| self.fault(f))?;
        Ok(())
    }

    /// The RPM's scriptlets are those gpuhost writes, and no others.
    pub(super) fn scriptlets_are_gpuhosts(&self, host: &Host) -> Result<()> {
        let out = host
            .rpm()
            .args(["-qp", "--noglob", "--nosignature", "--nodigest"])
            .args(["--scripts", "--triggers", "--filetriggers"])
            .arg(&self.file)
            .run()?;
        let want = gpuhost_host::kmodrepo::scripts_listing(&self.kernel, &self.modules);
        if out.stdout.trim_end() == want.trim_end() {
            return Ok(());
        }
        let first = out
            .stdout
            .lines()
            .zip(want.lines().chain(std::iter::repeat("")))
            .find(|(got, want)| got != want)
            .map(|(got, _)| got.trim().to_string())
            .unwrap_or_else(|| "none at all".to_string());
        Err(self.refused(&format!(
            "carries scriptlets gpuhost kmod build never writes (its %post and %postun run depmod only; this one has {first:?})"
        )))
    }

    /// `/lib/modules/<kver>/extra`: where a kmod's modules go, and nothing else.
    fn extra(&self) -> String {
        format!("/lib/modules/{}/extra", self.kernel)
    }

    fn identity(&self, pkg: &Package, driver: &str) -> Result<()> {
        let arch = gpuhost_host::arch::of_kernel(&self.kernel).unwrap_or("x86_64");
        if pkg.name != self.package || pkg.version != driver || pkg.arch != arch {
            return Err(self.refused(&format!(
                "is {}, not NVIDIA {driver}'s kmod {} for kernel {} ({arch}) as its manifest says",
                pkg.nevra(),
                self.package,
                self.kernel
            )));
        }
        if self.arch != arch {
            return Err(self.refused(&format!(
                "is listed in its manifest for arch {:?}, but kernel {} and the RPM are {arch}",
                self.arch, self.kernel
            )));
        }
        Ok(())
    }

    /// Every file the header lists is one of the entry's modules in `extra/`, a regular file,
    /// and every module is there.
    fn only_modules(&self, pkg: &Package) -> Result<()> {
        let extra = self.extra();
        fn module<'a>(p: &'a str, extra: &str, modules: &[String]) -> Option<&'a str> {
            p.strip_prefix(extra)
                .and_then(|r| r.strip_prefix('/'))
                .filter(|m| m.ends_with(".ko") && modules.iter().any(|w| w == m))
        }
        let module = |p| module(p, &extra, &self.modules);
        if let Some(f) = pkg
            .files
            .iter()
            .find(|f| f.ghost || !f.is_file() || module(&f.path).is_none())
        {
            return Err(self.refused(&format!(
                "carries {}, but a kmod gpuhost builds holds only its modules under {extra}/ ({})",
                f.path,
                self.modules.join(", ")
            )));
        }
        if let Some(m) = self.modules.iter().find(|m| {
            !pkg.files
                .iter()
                .any(|f| module(&f.path) == Some(m.as_str()))
        }) {
            return Err(self.refused(&format!("lacks {extra}/{m}, which its manifest lists")));
        }
        Ok(())
    }

    fn refused(&self, why: &str) -> anyhow::Error {
        as_invalid(hinted(
            format!(
                "the kmod repo's {} {why}; nothing was changed",
                self.file.display()
            ),
            REBUILD,
        ))
    }

    /// A package the reader refuses is bad input; one it cannot read (the source gone) is not.
    fn fault(&self, f: Fault) -> anyhow::Error {
        match f {
            Fault::Bad(why) => as_invalid(hinted(
                format!("the kmod {why}; nothing was changed"),
                REBUILD,
            )),
            f => anyhow::anyhow!("reading the kmod {}: {f}", self.file.display()),
        }
    }
}
