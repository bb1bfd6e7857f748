//! `kernel-headers`: the exactly matching header packages for every kernel served — the target
//! kernel and the default boot kernel when the next boot runs another one.

use anyhow::Result;
use gpuhost_host::kernel::DevelPackage;

use crate::step::{package_name_of, Change, Check, Ctx, Step};

pub(crate) struct KernelHeaders;

/// The run's prebuilt kmods, when the profile names a kmod repo.
fn prebuilt<'c>(ctx: &'c Ctx<'_>) -> Option<&'c crate::run::PrebuiltKmods> {
    ctx.driver.as_ref()?.kmods.as_ref()
}

impl KernelHeaders {
    /// `(devel package, kver)` for every devel package of every served kernel (a UEK 64k
    /// kernel's are its own variant's: `kernel-uek64k-devel`).
    fn wanted(ctx: &Ctx<'_>) -> Vec<(DevelPackage, String)> {
        let mut out = Vec::new();
        // Prebuilt kmods (`driver.kmod_repo`): nothing is compiled here, no headers are needed.
        if prebuilt(ctx).is_some() {
            return out;
        }
        for kver in ctx.facts.kernels_to_serve() {
            for tmpl in &ctx.profile.kernel.devel_packages {
                let mut d = DevelPackage::for_kernel(tmpl, &kver);
                if !tmpl.ends_with("-{kver}") {
                    d.name = package_name_of(&d.spec).to_string();
                }
                out.push((d, kver.clone()));
            }
        }
        out
    }
}

impl Step for KernelHeaders {
    fn id(&self) -> &'static str {
        "kernel-headers"
    }

    fn summary(&self) -> &'static str {
        "install the header packages that exactly match each served kernel"
    }

    fn rpm_names(&self, ctx: &Ctx<'_>) -> Vec<String> {
        Self::wanted(ctx)
            .into_iter()
            .map(|(d, _)| d.name)
            .chain(ctx.profile.kernel.extra_packages.iter().cloned())
            .collect()
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let target = ctx.facts.target_kernel.clone();
        let mut have = Vec::new();
        for (d, kver) in Self::wanted(ctx) {
            let installed = ctx.installed_one(&d.name)?;
            if installed.iter().any(|p| p.matches_kver(&d.kver)) {
                have.push(d.spec);
                continue;
            }
            let role = if Some(&kver) == target.as_ref() {
                "target"
            } else {
                "default boot"
            };
            let found = if installed.is_empty() {
                "none installed".to_string()
            } else {
                let v: Vec<String> = installed.iter().map(|p| p.evr()).collect();
                format!("installed: {}", v.join(", "))
            };
            let record = if installed.is_empty() {
                crate::driver::built_by::record(
                    ctx,
                    "kernel-headers",
                    std::slice::from_ref(&d.name),
                )?
            } else {
                None
            };
            check.changes.push(Change::install(
                vec![d.spec],
                format!("headers for the {role} kernel {kver}; {found}"),
            ));
            check.changes.extend(record);
        }
        for name in &ctx.profile.kernel.extra_packages {
            if ctx.installed_one(name)?.is_empty() {
                check
                    .changes
                    .push(Change::install(vec![name.clone()], "not installed"));
            } else {
                have.push(name.clone());
            }
        }
        if let Some(k) = prebuilt(ctx) {
            check.notes.push(k.nothing_built());
        }
        if check.changes.is_empty() && !have.is_empty() {
            check.notes.push(format!("installed: {}", have.join(", ")));
        }
        Ok(check)
    }
}
