//! `nouveau`: nouveau must not claim the GPUs. `nvidia-kmod-common` ships a modprobe blacklist
//! and a dracut `omit_drivers`, but those reach the initramfs only when it is rebuilt.
//! `rd.driver.blacklist=nouveau modprobe.blacklist=nouveau` on the kernel command line is
//! effective in the initramfs and after it whatever the initramfs holds, so this step puts
//! them in the boot entry (BLS) of every served kernel — what NVIDIA's own packages do with
//! grubby. It edits the entry files itself: the same on a live host and in an install root,
//! and no child process. nouveau loaded now means a reboot is needed (exit 3), not a failure.

use anyhow::Result;

use crate::step::{Change, Check, Ctx, FileWrite, Step, Work};
use gpuhost_host::kernel::bls_kernel;

pub(crate) struct Nouveau;

const ARGS: &[&str] = &["rd.driver.blacklist=nouveau", "modprobe.blacklist=nouveau"];
const ENTRIES: &str = "/boot/loader/entries";
const MODPROBE_DIRS: &[&str] = &["/etc/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d"];

/// True when a kernel command line blacklists nouveau in the initramfs.
pub(crate) fn blacklists_nouveau(cmdline: &str) -> bool {
    cmdline.split_whitespace().any(|a| {
        a.strip_prefix("rd.driver.blacklist=")
            .is_some_and(|v| v.split(',').any(|m| m == "nouveau"))
    })
}

/// The command line of a BLS entry, with `$kernelopts` expanded from grubenv.
pub(crate) fn entry_cmdline(entry: &str, kernelopts: &str) -> String {
    entry
        .lines()
        .filter_map(|l| l.trim().strip_prefix("options"))
        .filter(|rest| rest.starts_with(char::is_whitespace))
        .map(|rest| rest.replace("$kernelopts", kernelopts))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The entry with the blacklist arguments appended to its `options` line (or a new one).
pub(crate) fn with_blacklist(entry: &str) -> String {
    let extra = ARGS.join(" ");
    let mut done = false;
    let mut out: Vec<String> = entry
        .lines()
        .map(|l| {
            let t = l.trim_start();
            if !done && t.starts_with("options") && t[7..].starts_with(char::is_whitespace) {
                done = true;
                format!("{} {extra}", l.trim_end())
            } else {
                l.to_string()
            }
        })
        .collect();
    if !done {
        out.push(format!("options {extra}"));
    }
    out.join("\n") + "\n"
}

/// `(entry path, text)` of the BLS entry that boots `kver`.
fn entry_of(ctx: &Ctx<'_>, kver: &str) -> Result<Option<(String, String)>> {
    let names: Vec<String> = match ctx.host.list_dir(ENTRIES) {
        Ok(e) => e.into_iter().filter(|n| n.ends_with(".conf")).collect(),
        Err(_) => return Ok(None),
    };
    for n in names {
        let rel = format!("{ENTRIES}/{n}");
        if let Some(text) = ctx.host.read_opt(&rel)? {
            if bls_kernel(&text).as_deref() == Some(kver) {
                return Ok(Some((rel, text)));
            }
        }
    }
    Ok(None)
}

fn kernelopts(ctx: &Ctx<'_>) -> Result<String> {
    Ok(ctx
        .host
        .read_opt("/boot/grub2/grubenv")?
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("kernelopts=").map(str::to_string))
        })
        .unwrap_or_default())
}

fn modprobe_blacklist(ctx: &Ctx<'_>) -> Option<String> {
    for d in MODPROBE_DIRS {
        let Ok(files) = ctx.host.list_dir(d) else {
            continue;
        };
        for name in files {
            let hit = ctx
                .host
                .read_opt(format!("{d}/{name}"))
                .ok()
                .flatten()
                .is_some_and(|t| {
                    t.lines().any(|l| {
                        l.split_whitespace().collect::<Vec<_>>() == ["blacklist", "nouveau"]
                    })
                });
            if hit {
                return Some(format!("{d}/{name}"));
            }
        }
    }
    None
}

impl Step for Nouveau {
    fn id(&self) -> &'static str {
        "nouveau"
    }

    fn summary(&self) -> &'static str {
        "blacklist nouveau on the kernel command line of every served kernel"
    }

    fn needs_driver_package(&self) -> bool {
        true
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::context::not_applicable(ctx)
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let opts = kernelopts(ctx)?;
        let mut ok = Vec::new();
        for kver in ctx.facts.kernels_to_serve() {
            match entry_of(ctx, &kver)? {
                Some((path, text)) => {
                    if blacklists_nouveau(&entry_cmdline(&text, &opts)) {
                        ok.push(kver);
                    } else {
                        check.changes.push(Change::new(
                            Work::Write {
                                file: FileWrite::new(path, with_blacklist(&text), 0o644),
                                owes: None,
                            },
                            format!(
                                "add {}: the boot entry of {kver} does not blacklist nouveau in the initramfs",
                                ARGS.join(" ")
                            ),
                        ));
                    }
                }
                None => check.notes.push(format!(
                    "no boot loader entry for {kver} under {ENTRIES}: add rd.driver.blacklist=nouveau to its command line by hand"
                )),
            }
        }
        if !ok.is_empty() {
            check.notes.push(format!(
                "blacklisted on the command line of {}",
                ok.join(", ")
            ));
        }
        match modprobe_blacklist(ctx) {
            Some(f) => check.notes.push(format!("modprobe blacklist in {f}")),
            None => check
                .notes
                .push("no modprobe.d blacklist yet (nvidia-kmod-common ships one)".to_string()),
        }
        if ctx.facts.nouveau_loaded {
            check.reboot = Some(
                "nouveau is loaded: the NVIDIA module can load only after a reboot".to_string(),
            );
        }
        Ok(check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("ro rd.driver.blacklist=nouveau", true)]
    #[case("ro rd.driver.blacklist=radeon,nouveau quiet", true)]
    #[case("ro modprobe.blacklist=nouveau", false)]
    #[case("ro rd.driver.blacklist=nouveaux", false)]
    fn cmdline_blacklist(#[case] cmdline: &str, #[case] want: bool) {
        assert_eq!(blacklists_nouveau(cmdline), want);
    }

    #[test]
    fn entry_options_expand_kernelopts_and_gain_the_blacklist() {
        let e =
            "title x\nversion 5.15.0\nlinux /vmlinuz-5.15.0\noptions $kernelopts $tuned_params\n";
        assert_eq!(
            entry_cmdline(e, "root=/dev/sda ro"),
            " root=/dev/sda ro $tuned_params"
        );
        let fixed = with_blacklist(e);
        assert!(fixed.contains(
            "options $kernelopts $tuned_params rd.driver.blacklist=nouveau modprobe.blacklist=nouveau\n"
        ));
        assert!(blacklists_nouveau(&entry_cmdline(&fixed, "")));
        assert!(with_blacklist("linux /vmlinuz-x\n")
            .ends_with("options rd.driver.blacklist=nouveau modprobe.blacklist=nouveau\n"));
    }
}
