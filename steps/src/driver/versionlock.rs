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

/// The last line of gpuhost's block: everything outside the two marks is the site's, kept byte
/// for byte.
const END: &str = "# gpuhost: end of the NVIDIA driver branch lock";

/// The list in three parts: the site's text before gpuhost's block, the block's lock lines, the
/// site's text after it (each part as written, newlines included). A block written before the
/// end mark existed ends at its first blank, comment or non-NVIDIA line: a line a site appended
/// after it (`echo … >> versionlock.list`) stays the site's.
fn split(existing: &str) -> (String, Vec<String>, String) {
    let lines: Vec<&str> = existing.split_inclusive('\n').collect();
    let Some(start) = lines.iter().position(|l| l.trim().starts_with(MARK)) else {
        return (existing.to_string(), Vec::new(), String::new());
    };
    let body = &lines[start + 1..];
    let (ours, after) = match body.iter().position(|l| l.trim() == END) {
        Some(end) => (&body[..end], &body[end + 1..]),
        None => {
            let n = body
                .iter()
                .take_while(|l| {
                    let t = l.trim();
                    !t.is_empty() && !t.starts_with('#') && t.contains("nvidia")
                })
                .count();
            (&body[..n], &body[n..])
        }
    };
    // A second block of gpuhost's (a list edited by hand, or merged from two copies) is gpuhost's
    // too: its lines join the first's, and the list is rewritten with one block.
    let (rest_before, more, rest_after) = split(&after.concat());
    let mut ours: Vec<String> = ours.iter().map(|l| l.trim().to_string()).collect();
    ours.extend(more);
    (lines[..start].concat(), ours, rest_before + &rest_after)
}

/// The list with gpuhost's block set to `lines` (where it was, or at the end): every other line
/// is kept byte for byte.
pub fn with_lock(existing: &str, branch: u32, lines: &[String]) -> String {
    let (before, _, after) = split(existing);
    let mut out = before;
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!("{MARK} '{}'\n", pattern(branch)));
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(END);
    out.push('\n');
    out.push_str(&after);
    out
}

/// The lock lines gpuhost's block holds now (to compare with [`lines`]), sorted.
pub fn held(existing: &str) -> Vec<String> {
    let mut ours = split(existing).1;
    ours.sort();
    ours
}

/// Whether the list is written as this gpuhost writes it (both marks): an older block is
/// rewritten once, with the end mark.
pub fn current(existing: &str) -> bool {
    existing.lines().any(|l| l.trim() == END)
        && existing
            .lines()
            .filter(|l| l.trim().starts_with(MARK))
            .count()
            == 1
}

/// What the plugin's own configuration (`versionlock.conf`) says: whether it is on, and the lock
/// list it reads (`locklist`). Without the file (the plugin not installed yet): on, [`LIST`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginConf {
    pub enabled: bool,
    pub locklist: String,
}

/// The plugin's configuration file.
pub const CONF: &str = "/etc/dnf/plugins/versionlock.conf";

impl PluginConf {
    pub fn parse(text: Option<&str>) -> PluginConf {
        let mut conf = PluginConf {
            enabled: true,
            locklist: LIST.to_string(),
        };
        let Some(text) = text else {
            return conf;
        };
        let mut main = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                main = line == "[main]";
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            match (main, k.trim(), v.trim()) {
                (true, "enabled", v) => {
                    conf.enabled =
                        matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
                }
                (true, "locklist", v) if !v.is_empty() => conf.locklist = v.to_string(),
                _ => {}
            }
        }
        conf
    }
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
    fn two_gpuhost_blocks_become_one_and_the_sites_lines_stay() {
        let block = |v: &str| format!("{MARK} '*nvidia*580*'\nnvidia-open-3:{v}-1.el10.*\n{END}\n");
        let list = format!(
            "# site\nopenssh-server-0:9.9p1-1.el10.*\n{}site-agent-0:1.0-1.*\n{}# tail\n",
            block("580.126.09"),
            block("580.65.06")
        );
        assert!(!current(&list), "two blocks are rewritten");
        assert_eq!(
            held(&list),
            vec![
                "nvidia-open-3:580.126.09-1.el10.*",
                "nvidia-open-3:580.65.06-1.el10.*"
            ]
        );
        let lines = vec!["nvidia-open-3:580.126.09-1.el10.*".to_string()];
        let out = with_lock(&list, 580, &lines);
        assert_eq!(out.matches(MARK).count(), 1, "{out}");
        assert_eq!(out.matches(END).count(), 1, "{out}");
        assert!(!out.contains("580.65.06"), "{out}");
        for site in [
            "# site\n",
            "openssh-server-0:9.9p1-1.el10.*\n",
            "site-agent-0:1.0-1.*\n",
            "# tail\n",
        ] {
            assert!(out.contains(site), "{site}: {out}");
        }
        assert!(current(&out));
        assert_eq!(
            with_lock(&out, 580, &lines),
            out,
            "written once, then unchanged"
        );
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
    fn the_block_is_replaced_and_every_site_line_is_kept_byte_for_byte() {
        let site = "\n# Added lock on Mon Jan  5 10:00:00 2026\nfoo-0:1.0-1.el10.*\n!nvidia-open-3:570.1.1-1.el10.*\n";
        let first = with_lock(site, 580, &["nvidia-open-3:580.1-1.el10.*".into()]);
        assert!(first.starts_with(site), "{first}");
        assert_eq!(held(&first), vec!["nvidia-open-3:580.1-1.el10.*"]);
        // A site appends after gpuhost's block; the next lock keeps it, in place.
        let appended = format!("{first}bar-0:2.0-1.el10.*\nnvidia-site-pin-0:1-1.*\n");
        let second = with_lock(&appended, 590, &["nvidia-open-3:590.1-1.el10.*".into()]);
        assert_eq!(held(&second), vec!["nvidia-open-3:590.1-1.el10.*"]);
        assert!(second.starts_with(site), "{second}");
        assert!(
            second.ends_with(&format!(
                "{END}\nbar-0:2.0-1.el10.*\nnvidia-site-pin-0:1-1.*\n"
            )),
            "{second}"
        );
        assert_eq!(second.matches(MARK).count(), 1, "{second}");
        assert!(current(&second));
    }

    #[test]
    fn a_block_of_an_earlier_gpuhost_ends_at_the_first_line_not_its_own() {
        let old = format!(
            "foo-0:1-1.*\n{MARK} '*nvidia*580*'\nnvidia-open-3:580.1-1.el10.*\nbar-0:2-1.*\n"
        );
        assert_eq!(held(&old), vec!["nvidia-open-3:580.1-1.el10.*"]);
        assert!(!current(&old));
        let new = with_lock(&old, 580, &["nvidia-open-3:580.1-1.el10.*".into()]);
        assert!(
            new.starts_with("foo-0:1-1.*\n") && new.ends_with(&format!("{END}\nbar-0:2-1.*\n")),
            "{new}"
        );
    }

    #[test]
    fn the_plugins_configuration_says_whether_and_where_it_locks() {
        assert_eq!(
            PluginConf::parse(None),
            PluginConf {
                enabled: true,
                locklist: LIST.into()
            }
        );
        let c = PluginConf::parse(Some("[main]\nenabled = 0\nlocklist = /etc/site/locks\n"));
        assert_eq!(
            c,
            PluginConf {
                enabled: false,
                locklist: "/etc/site/locks".into()
            }
        );
        let c = PluginConf::parse(Some("[main]\nenabled=True\n[other]\nenabled = 0\n"));
        assert!(c.enabled && c.locklist == LIST);
    }
}
