//! rpm database queries and rpm version ordering.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use anyhow::Result;

use crate::host::Host;

/// One installed package, as `rpm -q` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    pub epoch: u32,
    pub version: String,
    pub release: String,
    pub arch: String,
}

impl Installed {
    /// `version-release`
    pub fn evr(&self) -> String {
        format!("{}-{}", self.version, self.release)
    }

    /// `name-version-release.arch`
    pub fn nevra(&self) -> String {
        format!(
            "{}-{}-{}.{}",
            self.name, self.version, self.release, self.arch
        )
    }

    /// True when this package is the one for kernel release `kver`
    /// (`5.15.0-200.131.27.el8uek.x86_64` or without the arch).
    pub fn matches_kver(&self, kver: &str) -> bool {
        let vr = self.evr();
        kver == vr || kver == format!("{vr}.{}", self.arch)
    }
}

const QUERY_FORMAT: &str = "%{NAME}\\t%{EPOCHNUM}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\n";

/// Installed packages by name, for the given names, in one `rpm -q`.
pub fn query(host: &Host, names: &[&str]) -> Result<BTreeMap<String, Vec<Installed>>> {
    let mut found: BTreeMap<String, Vec<Installed>> =
        names.iter().map(|n| (n.to_string(), Vec::new())).collect();
    if names.is_empty() {
        return Ok(found);
    }
    let cmd = host.rpm().args(["-q", "--qf", QUERY_FORMAT]).args(names);
    let out = cmd.output()?;
    // rpm exits with the number of names not installed; anything on stderr is a real error.
    if !out.success() && !out.stderr.trim().is_empty() {
        return Err(cmd.failure(&out));
    }
    for p in parse_query(&out.stdout) {
        found.entry(p.name.clone()).or_default().push(p);
    }
    Ok(found)
}

/// Where dnf keeps its module state (one `<module>.module` file per module it has touched).
pub const MODULE_STATE_DIR: &str = "/etc/dnf/modules.d";

/// dnf's module state, file by file (`nvidia-driver` → the file's text): what a transaction
/// changes besides packages (dnf writes a stream enabled and a profile installed even when it
/// installs no package, issue 51), read with [`snapshot`] to say whether anything changed.
pub fn module_states(host: &Host) -> Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for name in host.files_with_prefix(MODULE_STATE_DIR, "") {
        let Some(module) = name.strip_suffix(".module") else {
            continue;
        };
        if let Some(text) = host.read_opt(format!("{MODULE_STATE_DIR}/{name}"))? {
            out.insert(module.to_string(), text);
        }
    }
    Ok(out)
}

/// The modules whose state differs between two [`module_states`], each as
/// `name (stream …, profiles …, state …)` after the change (`name (reset)` once gone).
pub fn modules_changed(
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| before.get(*n) != after.get(*n))
        .map(|n| match after.get(n) {
            Some(text) => {
                let field = |k: &str| {
                    text.lines()
                        .find_map(|l| l.split_once('=').filter(|(key, _)| key.trim() == k))
                        .map_or("", |(_, v)| v.trim())
                        .to_string()
                };
                format!(
                    "{n} (stream {}, profiles {}, state {})",
                    or_none(&field("stream")),
                    or_none(&field("profiles")),
                    or_none(&field("state"))
                )
            }
            None => format!("{n} (reset)"),
        })
        .collect()
}

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}

/// Every installed package, `name-epoch:version-release.arch`, in one `rpm -qa`: what a
/// transaction is judged by ([`Diff`]).
pub fn snapshot(host: &Host) -> Result<std::collections::BTreeSet<String>> {
    let out = host.rpm().args(["-qa", "--qf", QUERY_FORMAT]).run()?;
    Ok(parse_query(&out.stdout)
        .iter()
        .map(|p| {
            format!(
                "{}-{}:{}-{}.{}",
                p.name, p.epoch, p.version, p.release, p.arch
            )
        })
        .collect())
}

/// What a transaction changed in the rpm database: packages added, packages removed, and
/// package names now installed more than once where they were not (a transaction stopped
/// between installing the new versions and erasing the old).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub duplicated: Vec<String>,
}

impl Diff {
    /// The difference from `before` to `after` ([`snapshot`]s).
    pub fn of(
        before: &std::collections::BTreeSet<String>,
        after: &std::collections::BTreeSet<String>,
    ) -> Diff {
        let name = |nevra: &str| -> String {
            nevra
                .split_once(':')
                .and_then(|(ne, _)| ne.rsplit_once('-'))
                .map_or(nevra.to_string(), |(n, _)| n.to_string())
        };
        let count = |set: &std::collections::BTreeSet<String>, n: &str| {
            set.iter().filter(|p| name(p) == n).count()
        };
        let mut duplicated: Vec<String> = after
            .iter()
            .map(|p| name(p))
            .filter(|n| count(after, n) > 1 && count(before, n) <= 1)
            .collect();
        duplicated.dedup();
        Diff {
            added: after.difference(before).cloned().collect(),
            removed: before.difference(after).cloned().collect(),
            duplicated,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }

    /// One line: `added a, b; removed c; now installed twice: d`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.added.is_empty() {
            parts.push(format!("added {}", self.added.join(", ")));
        }
        if !self.removed.is_empty() {
            parts.push(format!("removed {}", self.removed.join(", ")));
        }
        if !self.duplicated.is_empty() {
            parts.push(format!(
                "now installed twice: {}",
                self.duplicated.join(", ")
            ));
        }
        parts.join("; ")
    }
}

/// A package transaction that stopped part-way: the rpm database holds some of its changes.
/// Not "nothing was changed" and not "changed": its own outcome, with what rpm shows and the
/// command that finishes or repairs it.
#[derive(Debug)]
pub struct Partial {
    /// What stopped it (dnf's own lines).
    pub cause: String,
    pub diff: Diff,
    /// The command that repairs it.
    pub repair: String,
}

impl std::fmt::Display for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the transaction stopped part-way ({}); the rpm database shows it: {}",
            self.cause,
            self.diff.describe()
        )
    }
}

impl std::error::Error for Partial {}

/// The partial transaction carried by the error, if any.
pub fn partial_of(err: &anyhow::Error) -> Option<&Partial> {
    err.chain().find_map(|e| e.downcast_ref::<Partial>())
}

/// Parse the output of `rpm -q --qf QUERY_FORMAT`; "package X is not installed" lines are skipped.
pub fn parse_query(stdout: &str) -> Vec<Installed> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            match f.as_slice() {
                [name, epoch, version, release, arch] if !name.is_empty() => Some(Installed {
                    name: name.to_string(),
                    epoch: epoch.parse().unwrap_or(0),
                    version: version.to_string(),
                    release: release.to_string(),
                    arch: arch.to_string(),
                }),
                _ => None,
            }
        })
        .collect()
}

/// rpm's version comparison (`rpmvercmp`), used to order kernel releases and package versions.
pub fn vercmp(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        // Skip separators, but `~` sorts before anything and `^` after the base.
        let skip = |s: &[u8]| -> usize {
            s.iter()
                .take_while(|c| !c.is_ascii_alphanumeric() && **c != b'~' && **c != b'^')
                .count()
        };
        a = &a[skip(a)..];
        b = &b[skip(b)..];
        match (a.first(), b.first()) {
            (Some(b'~'), Some(b'~')) => {
                a = &a[1..];
                b = &b[1..];
                continue;
            }
            (Some(b'~'), _) => return Ordering::Less,
            (_, Some(b'~')) => return Ordering::Greater,
            (Some(b'^'), Some(b'^')) => {
                a = &a[1..];
                b = &b[1..];
                continue;
            }
            (Some(b'^'), None) => return Ordering::Greater,
            (None, Some(b'^')) => return Ordering::Less,
            (Some(b'^'), _) => return Ordering::Less,
            (_, Some(b'^')) => return Ordering::Greater,
            (None, None) => return Ordering::Equal,
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            _ => {}
        }
        let numeric = a[0].is_ascii_digit();
        let seg = |s: &[u8]| -> usize {
            s.iter()
                .take_while(|c| {
                    if numeric {
                        c.is_ascii_digit()
                    } else {
                        c.is_ascii_alphabetic()
                    }
                })
                .count()
        };
        let (la, lb) = (seg(a), seg(b));
        if lb == 0 {
            // Different kinds of segment: a number is newer than letters.
            return if numeric {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
        let (sa, sb) = (&a[..la], &b[..lb]);
        let ord = if numeric {
            let ta = trim_zeros(sa);
            let tb = trim_zeros(sb);
            ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb))
        } else {
            sa.cmp(sb)
        };
        if ord != Ordering::Equal {
            return ord;
        }
        a = &a[la..];
        b = &b[lb..];
    }
}

fn trim_zeros(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|c| **c == b'0').count();
    &s[n..]
}

/// The package name of a spec like `kernel-uek-devel-5.15.0-200.131.27.el8uek.x86_64`: the spec
/// without its last two dash-separated fields when the one before last starts with a digit.
pub fn package_name_of(spec: &str) -> &str {
    let mut parts = spec.rsplitn(3, '-');
    let (Some(_rel), Some(ver), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return spec;
    };
    if ver.starts_with(|c: char| c.is_ascii_digit()) {
        name
    } else {
        spec
    }
}

/// What `rpm -Kv FILE` found wrong with a package file: each digest or signature that is not
/// OK, as `payload SHA256 digest: BAD`, or rpm's own error when it could not read the file at
/// all (a file cut inside its header). A signature whose key the root lacks (`NOKEY`) is not
/// a fault: the key is not configured, so nothing can be said about it. Empty when the file is
/// intact. `ok` is rpm's exit status.
pub fn checksig_faults(stdout: &str, stderr: &str, ok: bool) -> Vec<String> {
    let verdicts: Vec<(&str, &str)> = stdout
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (what, result) = l.trim().rsplit_once(": ")?;
            Some((what, result.split_whitespace().next().unwrap_or_default()))
        })
        .collect();
    let mut faults: Vec<String> = verdicts
        .iter()
        .filter(|&&(_, verdict)| verdict != "OK" && verdict != "NOKEY")
        .map(|&(what, verdict)| {
            // `Header SHA256 digest` → `header SHA256 digest`, as a sentence says it.
            let what = match what.split_once(' ') {
                Some((w @ ("Header" | "Payload"), rest)) => format!("{} {rest}", w.to_lowercase()),
                _ => what.to_string(),
            };
            format!("{what}: {verdict}")
        })
        .collect();
    if verdicts.is_empty() && !ok {
        let said = stderr
            .lines()
            .map(|l| l.trim().trim_start_matches("error: "))
            .find(|l| !l.is_empty())
            .unwrap_or("rpm could not read it");
        faults.push(said.to_string());
    }
    faults.dedup();
    faults
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn module_state_changes_are_named_with_what_dnf_wrote() {
        let before: std::collections::BTreeMap<String, String> = [(
            "container-tools".to_string(),
            "[container-tools]\nname=container-tools\nstream=\nprofiles=\nstate=disabled\n"
                .to_string(),
        )]
        .into();
        let mut after = before.clone();
        after.insert(
            "nvidia-driver".into(),
            "[nvidia-driver]\nname=nvidia-driver\nstream=open-dkms\nprofiles=default\nstate=enabled\n"
                .into(),
        );
        assert_eq!(
            modules_changed(&before, &after),
            vec!["nvidia-driver (stream open-dkms, profiles default, state enabled)"]
        );
        assert_eq!(
            modules_changed(&after, &before),
            vec!["nvidia-driver (reset)"]
        );
        assert!(modules_changed(&after, &after).is_empty());
    }

    /// `rpm -Kv` (rpm 4.18) of the test world's CUDA local repo package: intact, cut short
    /// (its last 300 bytes gone), cut inside its header, and signed by a key the root lacks.
    #[test]
    fn checksig_faults_name_each_bad_digest_and_accept_a_missing_key() {
        let intact = "/w/cuda.rpm:\n    Header SHA256 digest: OK\n    Header SHA1 digest: OK\n    Payload SHA256 ALT digest: OK\n    Payload SHA256 digest: OK\n    MD5 digest: OK\n";
        assert!(checksig_faults(intact, "", true).is_empty());
        let cut = "/w/cuda.rpm:\n    Header SHA256 digest: OK\n    Header SHA1 digest: OK\n    Payload SHA256 ALT digest: BAD (Expected 2c84 != 0f98)\n    Payload SHA256 digest: BAD (Expected 2c84 != 0f98)\n    MD5 digest: BAD (Expected 08a7 != 37e8)\n";
        assert_eq!(
            checksig_faults(cut, "", false),
            vec![
                "payload SHA256 ALT digest: BAD",
                "payload SHA256 digest: BAD",
                "MD5 digest: BAD"
            ]
        );
        let header = "error: /w/cuda.rpm: signature hdr blob(4388): BAD, read returned 0\n";
        assert_eq!(
            checksig_faults("/w/cuda.rpm:\n", header, false),
            vec!["/w/cuda.rpm: signature hdr blob(4388): BAD, read returned 0"]
        );
        let nokey = "/w/cuda.rpm:\n    Header V4 RSA/SHA256 Signature, key ID 7fa2af80: NOKEY\n    Header SHA256 digest: OK\n    V4 RSA/SHA256 Signature, key ID 7fa2af80: NOKEY\n    MD5 digest: OK\n";
        assert!(checksig_faults(nokey, "", false).is_empty());
        let forged = "/w/cuda.rpm:\n    Header V4 RSA/SHA256 Signature, key ID 7fa2af80: BAD\n    Header SHA256 digest: OK\n";
        assert_eq!(
            checksig_faults(forged, "", false),
            vec!["header V4 RSA/SHA256 Signature, key ID 7fa2af80: BAD"]
        );
    }

    #[rstest]
    #[case("1.0", "1.0", Ordering::Equal)]
    #[case("1.0", "1.1", Ordering::Less)]
    #[case(
        "5.15.0-204.147.6.2.el8uek",
        "5.15.0-200.131.27.el8uek",
        Ordering::Greater
    )]
    #[case("4.18.0-553.16.1.el8_10", "4.18.0-513.5.1.el8_9", Ordering::Greater)]
    #[case("1.0a", "1.0", Ordering::Greater)]
    #[case("1.0~rc1", "1.0", Ordering::Less)]
    #[case("1.0^git1", "1.0", Ordering::Greater)]
    #[case("010", "10", Ordering::Equal)]
    #[case("2.a", "2.1", Ordering::Less)]
    #[case("535.104.05", "535.104.12", Ordering::Less)]
    fn vercmp_orders_like_rpm(#[case] a: &str, #[case] b: &str, #[case] want: Ordering) {
        assert_eq!(vercmp(a, b), want, "{a} vs {b}");
        assert_eq!(vercmp(b, a), want.reverse(), "{b} vs {a}");
    }

    #[test]
    fn parses_installed_and_skips_missing() {
        let out = "kernel-uek-devel\t0\t5.15.0\t200.131.27.el8uek\tx86_64\npackage kernel-headers is not installed\n";
        let got = parse_query(out);
        assert_eq!(got.len(), 1);
        assert!(got[0].matches_kver("5.15.0-200.131.27.el8uek.x86_64"));
        assert!(got[0].matches_kver("5.15.0-200.131.27.el8uek"));
        assert!(!got[0].matches_kver("5.15.0-204.147.6.2.el8uek.x86_64"));
    }
}
