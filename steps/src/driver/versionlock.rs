//! The branch hold on releases whose NVIDIA packages are not modular (EL10). NVIDIA's Driver
//! Installation Guide (615, 620; "Red Hat Enterprise Linux 10") holds a branch with the dnf
//! versionlock plugin: `dnf install python3-dnf-plugin-versionlock`, then
//! `dnf versionlock '*nvidia*<branch>*'`.
//!
//! gpuhost writes the lines that command writes, in the plugin's own list
//! (`/etc/dnf/plugins/versionlock.list`, the `locklist` of its `versionlock.conf`): for every
//! installed package whose NEVRA matches `*nvidia*<branch>*` (dnf-plugins-core
//! `versionlock.py`: `_write_locklist` asks the rpm database first, `pkgtup2spec` writes
//! `name-epoch:version-release.*`). It writes them itself — an install root's dnf runs without
//! plugins — atomically, as one block of its own; a site's other lines stay. NVIDIA lines of
//! another version (a branch swap left them) go: the plugin would otherwise exclude the
//! installed driver's versions.

use gpuhost_host::rpm::Installed;

/// The plugin's lock list.
pub const LIST: &str = "/etc/dnf/plugins/versionlock.list";

/// The plugin's package (EL10: part of dnf-plugins-core's Python plugins).
pub const PLUGIN: &str = "python3-dnf-plugin-versionlock";

/// The first line of gpuhost's block.
const MARK: &str = "# gpuhost: the NVIDIA driver branch, as dnf versionlock";

/// The pattern NVIDIA's guide locks a branch with.
pub fn pattern(branch: u32) -> String {
    format!("*nvidia*{branch}*")
}

/// The plugin's spec of an installed package (`pkgtup2spec`): the arch left out.
fn spec(p: &Installed) -> String {
    format!("{}-{}:{}-{}.*", p.name, p.epoch, p.version, p.release)
}

/// Whether the plugin's glob `*nvidia*<branch>*` matches the package: one of its NEVRA forms
/// holds `nvidia`, then the branch (every form is a part of `name-epoch:version-release.arch`
/// or `epoch:name-version-release.arch`, in that order).
fn matches(p: &Installed, branch: u32) -> bool {
    let full = format!(
        "{}-{}:{}-{}.{}",
        p.name, p.epoch, p.version, p.release, p.arch
    );
    full.find("nvidia")
        .is_some_and(|at| full[at + "nvidia".len()..].contains(&branch.to_string()))
}

/// The lines `dnf versionlock '*nvidia*<branch>*'` adds for these installed packages, sorted.
pub fn lines(installed: &[Installed], branch: u32) -> Vec<String> {
    let mut out: Vec<String> = installed
        .iter()
        .filter(|p| matches(p, branch))
        .map(spec)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The package name of a lock line (`name-epoch:version-release.*`), if it is one.
fn name_of(line: &str) -> Option<&str> {
    let (name_epoch, _) = line.split_once(':')?;
    name_epoch.rsplit_once('-').map(|(n, _)| n)
}

/// The list split in the lines of others and the lock lines of gpuhost's block (its mark, then
/// lock lines up to a blank or comment line).
fn split(existing: &str) -> (Vec<&str>, Vec<String>) {
    let (mut others, mut ours) = (Vec::new(), Vec::new());
    let mut in_ours = false;
    for line in existing.lines() {
        let t = line.trim();
        if t.starts_with(MARK) {
            in_ours = true;
            continue;
        }
        if in_ours && !t.is_empty() && !t.starts_with('#') {
            ours.push(t.to_string());
            continue;
        }
        in_ours = false;
        others.push(line);
    }
    (others, ours)
}

/// The list with gpuhost's block set to `lines`: the other lines kept, except locks on the
/// same packages (`names`) at other versions.
pub fn with_lock(existing: &str, names: &[String], branch: u32, lines: &[String]) -> String {
    let (others, _) = split(existing);
    let kept: Vec<&str> = others
        .into_iter()
        .filter(|l| {
            name_of(l.trim().trim_start_matches('!')).is_none_or(|n| !names.iter().any(|m| m == n))
        })
        .collect();
    let mut out = kept.join("\n").trim_end().to_string();
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(&format!("{MARK} '{}'\n", pattern(branch)));
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The lock lines gpuhost's block holds now (to compare with [`lines`]), sorted.
pub fn held(existing: &str) -> Vec<String> {
    let mut ours = split(existing).1;
    ours.sort();
    ours
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str, epoch: u32, version: &str) -> Installed {
        Installed {
            name: name.into(),
            epoch,
            version: version.into(),
            release: "1.el10".into(),
            arch: "x86_64".into(),
        }
    }

    #[test]
    fn the_branch_pattern_locks_what_the_plugin_would() {
        let installed = vec![
            p("nvidia-open", 3, "580.126.09"),
            p("kmod-nvidia-open-dkms", 3, "580.126.09"),
            p("libnvidia-nscq", 0, "580.126.09"),
            p("nvidia-container-toolkit", 0, "1.17.8"),
            p("dkms", 0, "3.1.8"),
            p("nvidia-driver", 3, "590.48.01"),
        ];
        assert_eq!(
            lines(&installed, 580),
            vec![
                "kmod-nvidia-open-dkms-3:580.126.09-1.el10.*",
                "libnvidia-nscq-0:580.126.09-1.el10.*",
                "nvidia-open-3:580.126.09-1.el10.*",
            ]
        );
    }

    #[test]
    fn the_block_is_replaced_and_site_lines_are_kept() {
        let names = vec!["nvidia-open".to_string(), "nvidia-driver".to_string()];
        let site = "\n# Added lock on Mon Jan  5 10:00:00 2026\nfoo-0:1.0-1.el10.*\nnvidia-open-3:570.1.1-1.el10.*\n";
        let first = with_lock(site, &names, 580, &["nvidia-open-3:580.1-1.el10.*".into()]);
        assert!(first.contains("foo-0:1.0-1.el10.*"), "{first}");
        assert!(!first.contains("570.1.1"), "{first}");
        assert_eq!(held(&first), vec!["nvidia-open-3:580.1-1.el10.*"]);
        let second = with_lock(
            &first,
            &names,
            590,
            &["nvidia-open-3:590.1-1.el10.*".into()],
        );
        assert_eq!(held(&second), vec!["nvidia-open-3:590.1-1.el10.*"]);
        assert_eq!(second.matches(MARK).count(), 1, "{second}");
        assert!(second.contains("foo-0:1.0-1.el10.*"), "{second}");
    }
}
