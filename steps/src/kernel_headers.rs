//! `kernel-headers`: the exactly matching header packages for every kernel served — the target
//! kernel and the default boot kernel when the next boot runs another one.

use anyhow::Result;

use crate::step::{package_name_of, Change, Check, Ctx, Step};

pub(crate) struct KernelHeaders;

impl KernelHeaders {
    /// `(package name, spec, kver)` for every devel package of every served kernel.
    fn wanted(ctx: &Ctx<'_>) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for kver in ctx.facts.kernels_to_serve() {
            for tmpl in &ctx.profile.kernel.devel_packages {
                let spec = tmpl.replace("{kver}", &kver);
                let name = tmpl
                    .strip_suffix("-{kver}")
                    .map(str::to_string)
                    .unwrap_or_else(|| package_name_of(&spec).to_string());
                out.push((name, spec, kver.clone()));
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
            .map(|(name, _, _)| name)
            .chain(ctx.profile.kernel.extra_packages.iter().cloned())
            .collect()
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let target = ctx.facts.target_kernel.clone();
        let mut have = Vec::new();
        for (name, spec, kver) in Self::wanted(ctx) {
            let installed = ctx.installed_one(&name)?;
            if installed.iter().any(|p| p.matches_kver(&kver)) {
                have.push(spec);
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
            check.changes.push(Change::install(
                vec![spec],
                format!("headers for the {role} kernel {kver}; {found}"),
            ));
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
        if check.changes.is_empty() {
            check.notes.push(format!("installed: {}", have.join(", ")));
        }
        Ok(check)
    }
}
