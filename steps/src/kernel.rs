//! `kernel`: the kernel gpuhost provisions for, and that the next boot keeps its flavour.
//!
//! The flavour of the target kernel against the profile is settled before any step runs
//! (a wrong profile is invalid input, exit 2); this step reports what it found and fails
//! when the boot loader would start a kernel of the other flavour.

use anyhow::Result;

use crate::step::{Check, Ctx, Step};
use gpuhost_host::error::hinted;
use gpuhost_host::kernel::Flavour;

pub struct Kernel;

impl Step for Kernel {
    fn id(&self) -> &'static str {
        "kernel"
    }

    fn summary(&self) -> &'static str {
        "detect the kernel flavour (UEK or RHCK) and the kernels to serve"
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let f = ctx.facts;
        let want = ctx.profile.kernel.flavour;
        let target = f.target_kernel.as_deref().unwrap_or("none");
        let mut note = format!("target kernel {target} ({want})");
        if let Some(r) = &f.running_kernel {
            if r != target {
                note.push_str(&format!(", running {r}"));
            }
        }
        if let Some(d) = &f.default_boot_kernel {
            if Flavour::of(d) != want {
                let newest = gpuhost_host::kernel::newest_of(&f.installed_kernels, want);
                let fix = match newest {
                    Some(k) => format!(
                        "make a {want} kernel the default: grubby --set-default /boot/vmlinuz-{k}"
                    ),
                    None => format!("install a {want} kernel and make it the default"),
                };
                return Err(hinted(
                    format!(
                        "the default boot kernel {d} is {}, but profile {} is for {want}: the next boot would run the wrong kernel",
                        Flavour::of(d),
                        ctx.profile.name
                    ),
                    fix,
                ));
            }
            note.push_str(&format!(", default boot kernel {d}"));
        }
        if let Some(h) = &f.held_back_kernel {
            note.push_str(&format!(
                ", {h} held back from the default boot by the kernel guard (served too)"
            ));
        }
        Ok(Check::in_sync(note))
    }
}
