//! What gpuhost installed to build NVIDIA's modules on a node (DKMS, the compiler, kernel
//! headers), recorded so that a node moving to prebuilt kmods (`driver.kmod_repo`) removes
//! those packages, and only those: a package the site installed itself, or one gpuhost found
//! installed, stays.
//!
//! Each step that installs build packages (`build-deps`, `kernel-headers`) records the names it
//! installs that had no version installed before, in `/var/lib/gpuhost/built-by/<step>`, one
//! `<name> since=<unix time>` a line, written before the transaction. Once the run's package
//! transactions have run, [`settle`] pins each such name to the transaction that installed it
//! (`<name> tid=<rpm's INSTALLTID>`, a transaction begun since the record was written, in this
//! run) and drops what is no longer installed: a record is pruned of what gpuhost no longer
//! installed, so a package the site installs after a move to prebuilt kmods is the site's.
//!
//! A record decides nothing on its own (issue 53, item 2). When prebuilt kmods replace NVIDIA's
//! DKMS kmod, a recorded name counts only when the rpm database agrees: every installed
//! package of that name was installed by the transaction the record pins (its `INSTALLTID`).
//! A name the record holds otherwise (edited in, the site's own install or update since, a line
//! of an older gpuhost without a transaction) stays installed. A record that is not root's, is
//! writable by others, is a link or not a plain file ([`gpuhost_host::trust`]) is ignored with
//! a warning: nothing it names is removed (the safe side of a record that only removes), and
//! the next record gpuhost writes replaces it. Of the names that count, the move's transaction
//! removes those that nothing else needs once the DKMS kmod is gone (`rpm -e --test`: a package
//! a site package requires stays); dnf's `clean_requirements_on_remove` takes the dependencies
//! they alone pulled in.

use std::collections::BTreeMap;

use anyhow::Result;

use gpuhost_host::host::Host;

use crate::step::{Change, Ctx, FileWrite, Work};

/// Where the records are, in the root.
pub(crate) const DIR: &str = "/var/lib/gpuhost/built-by";

/// The steps that record what they install.
const STEPS: [&str; 2] = ["build-deps", "kernel-headers"];

/// What a record line says of the transaction that installed its package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Written before the transaction, at this unix time; not yet settled.
    Since(u64),
    /// rpm's `INSTALLTID` of the transaction that installed it.
    Tid(u64),
}

/// One line of a record.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    name: String,
    mark: Mark,
}

/// A package name as rpm allows one: what a record line (or any name read back) must be.
pub(crate) fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 256
        && !n.starts_with(['-', '.'])
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._+".contains(c))
}

/// The lines of a record; a line that is not `<name> since=N` or `<name> tid=N` (an older
/// gpuhost's bare name, anything edited in) names nothing.
fn parse(text: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let mut w = line.split_whitespace();
        let (Some(name), Some(mark), None) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        let mark = match mark.split_once('=') {
            Some(("since", n)) => n.parse().ok().map(Mark::Since),
            Some(("tid", n)) => n.parse().ok().map(Mark::Tid),
            _ => None,
        };
        if let (Some(mark), true) = (mark, valid_name(name)) {
            if seen.insert(name) {
                out.push(Entry {
                    name: name.to_string(),
                    mark,
                });
            }
        }
    }
    out
}

/// A record's text.
fn render(step: &str, entries: &[Entry]) -> String {
    let mut text = format!(
        "# Installed by gpuhost's {step} step to build NVIDIA's modules; removed when prebuilt kmods replace DKMS.\n\
         # <name> tid=<rpm INSTALLTID of gpuhost's transaction> (since=<time>: before it ran)\n"
    );
    for e in entries {
        let mark = match e.mark {
            Mark::Since(t) => format!("since={t}"),
            Mark::Tid(t) => format!("tid={t}"),
        };
        text.push_str(&format!("{} {mark}\n", e.name));
    }
    text
}

/// The path of `step`'s record.
fn path(step: &str) -> String {
    format!("{DIR}/{step}")
}

/// `step`'s record, when gpuhost may trust it: root's plain file, writable by no one else, no
/// link on the way from `/var/lib/gpuhost`. Otherwise it is ignored, with a warning.
fn load(host: &Host, step: &str) -> Result<Vec<Entry>> {
    let p = path(step);
    if host.kind_nofollow(&p).is_none() {
        return Ok(Vec::new());
    }
    let why = gpuhost_host::trust::untrusted_under_state(host, &p).or_else(|| {
        (host.kind_nofollow(&p) != Some(gpuhost_host::rootfs::Kind::File))
            .then(|| format!("{p} is not a plain file"))
    });
    if let Some(why) = why {
        gpuhost_host::trust::warn_once(format!(
            "{why}: gpuhost ignores this record of what it installed to build (nothing it names is removed); move it aside"
        ));
        return Ok(Vec::new());
    }
    Ok(parse(&host.read_opt(&p)?.unwrap_or_default()))
}

/// The change that records `installing` (names with no version installed now) in `step`'s
/// record, each marked with the time now (before the transaction that installs them).
pub(crate) fn record(ctx: &Ctx<'_>, step: &str, installing: &[String]) -> Result<Option<Change>> {
    let names: Vec<&String> = installing.iter().filter(|n| valid_name(n)).collect();
    if names.is_empty() {
        return Ok(None);
    }
    let mut entries = load(ctx.host, step)?;
    entries.retain(|e| !names.contains(&&e.name));
    let now = gpuhost_host::fsutil::unix_now();
    entries.extend(names.iter().map(|n| Entry {
        name: (*n).clone(),
        mark: Mark::Since(now),
    }));
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let text = render(step, &entries);
    Ok(Some(Change::new(
        Work::Configure(FileWrite::new(path(step), text, 0o644)),
        format!(
            "record what gpuhost installs to build ({}), to remove it if prebuilt kmods replace DKMS",
            installing.join(", ")
        ),
    )))
}

/// Every installed package's name and rpm's `INSTALLTID`, in one query of the whole database
/// (no name on the command line: a record of any length fits).
fn install_tids(host: &Host) -> Result<BTreeMap<String, Vec<u64>>> {
    let cmd = host
        .rpm()
        .args(["-qa", "--qf", "%{NAME}\\t%{INSTALLTID}\\n"]);
    let out = cmd.output()?;
    if !out.success() {
        return Err(cmd.failure(&out));
    }
    let mut tids: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in out.stdout.lines() {
        if let Some((name, tid)) = line.split_once('\t') {
            let tid = tid.trim().parse().unwrap_or(0);
            tids.entry(name.to_string()).or_default().push(tid);
        }
    }
    Ok(tids)
}

/// Once the run's package transactions have run (`run_start`: the run's start, unix time):
/// each record's names installed by a transaction of this run since it was written are pinned
/// to that transaction; a name no longer installed by its transaction, or left unsettled by an
/// earlier run, is dropped. A record left empty is removed.
pub fn settle(host: &Host, run_start: u64) -> Result<()> {
    let mut records = Vec::new();
    for step in STEPS {
        let entries = load(host, step)?;
        if !entries.is_empty() {
            records.push((step, entries));
        }
    }
    if records.is_empty() {
        return Ok(());
    }
    let tids = install_tids(host)?;
    for (step, entries) in records {
        let kept = settled(&entries, &tids, run_start);
        if kept == entries {
            continue;
        }
        if kept.is_empty() {
            host.remove_file(path(step))?;
        } else {
            host.write_atomic(path(step), render(step, &kept).as_bytes(), 0o644)?;
        }
    }
    Ok(())
}

/// [`settle`]'s rule for one record, against the rpm database's `tids`.
fn settled(entries: &[Entry], tids: &BTreeMap<String, Vec<u64>>, run_start: u64) -> Vec<Entry> {
    let none = Vec::new();
    entries
        .iter()
        .filter_map(|e| {
            let have = tids.get(&e.name).unwrap_or(&none);
            let mark = match e.mark {
                Mark::Tid(t) => have.contains(&t).then_some(Mark::Tid(t)),
                Mark::Since(t) if t >= run_start => have
                    .iter()
                    .copied()
                    .filter(|x| *x >= t)
                    .max()
                    .map(Mark::Tid),
                Mark::Since(_) => None,
            };
            mark.map(|mark| Entry {
                name: e.name.clone(),
                mark,
            })
        })
        .collect()
}

/// The recorded names the rpm database agrees gpuhost installed: every installed package of
/// the name installed by the transaction its record pins.
fn counted(host: &Host) -> Result<Vec<String>> {
    let mut entries: Vec<Entry> = Vec::new();
    for step in STEPS {
        entries.extend(load(host, step)?);
    }
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let tids = install_tids(host)?;
    let mut names: Vec<String> = entries
        .into_iter()
        .filter_map(|e| match (e.mark, tids.get(&e.name)) {
            (Mark::Tid(t), Some(have)) if !have.is_empty() && have.iter().all(|x| *x == t) => {
                Some(e.name)
            }
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The recorded build packages still installed that nothing needs once `replaced` (NVIDIA's
/// DKMS kmods) go: what the move to prebuilt kmods removes.
pub(crate) fn leftovers(ctx: &Ctx<'_>, replaced: &[String]) -> Result<Vec<String>> {
    let mut names = counted(ctx.host)?;
    // Each round drops the packages that provide what a package staying needs.
    for _ in 0..=names.len() {
        if names.is_empty() {
            break;
        }
        let out = ctx
            .host
            .rpm()
            .args(["-e", "--test"])
            .args(replaced)
            .args(&names)
            .output()?;
        if out.success() {
            break;
        }
        let needed = needed_capabilities(&out.stderr);
        if needed.is_empty() {
            // rpm refused for another reason: remove nothing rather than guess.
            return Ok(Vec::new());
        }
        // A capability only the DKMS kmods provide (`nvidia-kmod`) is the prebuilt kmod's to
        // provide in the same transaction: not a reason to keep a build package.
        let mut keep = Vec::new();
        for cap in &needed {
            let by = providers(ctx, std::slice::from_ref(cap))?;
            if by.iter().any(|p| !replaced.contains(p)) {
                keep.extend(by);
            }
        }
        if keep.is_empty() {
            break;
        }
        let n = names.len();
        names.retain(|x| !keep.contains(x));
        if names.len() == n {
            return Ok(Vec::new());
        }
    }
    Ok(names)
}

/// What `plan` and the report say of [`leftovers`] going, when any do.
pub(crate) fn said(leftovers: &[String]) -> Option<String> {
    (!leftovers.is_empty()).then(|| {
        format!(
            "the build packages gpuhost installed for DKMS go with it ({})",
            leftovers.len()
        )
    })
}

/// The capabilities of `rpm -e --test`'s "X is needed by (installed) Y" lines.
fn needed_capabilities(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(" is needed by "))
        .filter_map(|l| l.trim().split(" is needed by ").next())
        .map(|c| c.trim().to_string())
        .collect()
}

/// The names of the installed packages that provide `caps`.
fn providers(ctx: &Ctx<'_>, caps: &[String]) -> Result<Vec<String>> {
    let out = ctx
        .host
        .rpm()
        .args(["-q", "--qf", "%{NAME}\\n", "--whatprovides"])
        .args(caps)
        .output()?;
    Ok(out
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("no package"))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_rpm_says_is_needed_is_read() {
        let stderr = "error: Failed dependencies:\n\tmake is needed by (installed) site-tool-1.0-1.noarch\n\t/usr/bin/gcc is needed by (installed) site-cc-1-1.noarch\n";
        assert_eq!(needed_capabilities(stderr), vec!["make", "/usr/bin/gcc"]);
    }

    fn entry(name: &str, mark: Mark) -> Entry {
        Entry {
            name: name.into(),
            mark,
        }
    }

    /// Only `<name> since=N` and `<name> tid=N` lines name anything: an older gpuhost's bare
    /// name, an option, a path or a second field name nothing.
    #[test]
    fn a_record_line_names_a_package_with_its_transaction_or_nothing() {
        let text = "# comment\ndkms tid=100\nmake since=90\nopenssh-server\n-e tid=1\n../x tid=1\ngcc tid=1 x\ngcc tid=abc\ndkms tid=7\n";
        assert_eq!(
            parse(text),
            vec![
                entry("dkms", Mark::Tid(100)),
                entry("make", Mark::Since(90))
            ]
        );
        let e = vec![
            entry("dkms", Mark::Tid(100)),
            entry("make", Mark::Since(90)),
        ];
        assert_eq!(parse(&render("build-deps", &e)), e);
        assert!(valid_name("gcc-toolset-13-gcc") && valid_name("libstdc++-devel"));
        assert!(!valid_name("a\nmirrorlist=x") && !valid_name("--nodeps") && !valid_name(""));
    }

    /// A name installed by a transaction of this run since it was recorded is pinned to it; a
    /// name gone, installed again by someone else, or left unsettled by an earlier run is
    /// dropped: the record is pruned of what gpuhost no longer installed.
    #[test]
    fn a_record_is_pinned_to_its_transaction_and_pruned_of_what_is_gone() {
        let tids: BTreeMap<String, Vec<u64>> = [
            ("dkms", vec![105]),
            ("make", vec![105]),
            ("gcc", vec![300]),
            ("elfutils", vec![50]),
            ("old", vec![60]),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect();
        let entries = vec![
            entry("dkms", Mark::Since(100)),
            entry("make", Mark::Tid(105)),
            entry("gcc", Mark::Tid(105)),
            entry("elfutils", Mark::Since(100)),
            entry("old", Mark::Since(40)),
            entry("gone", Mark::Tid(105)),
        ];
        assert_eq!(
            settled(&entries, &tids, 95),
            vec![entry("dkms", Mark::Tid(105)), entry("make", Mark::Tid(105))]
        );
    }
}
