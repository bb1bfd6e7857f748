//! `prefix-links`: libraries installed by rpm exposed under a stable prefix, as NVIDIA's
//! container images do (`/opt/nvidia/nccl`, `/opt/nvidia/cudnn`). Every file and symlink the
//! profile's packages own (one batched `rpm -q`) gets a symlink under the prefix, with `/usr/`
//! stripped and `lib64` folded into `lib`; owned directories are created; anything else (a
//! path the package owns that is missing on disk, a device…) is skipped. Missing packages are
//! installed first, from the enabled repos. A wrong symlink is fixed; a real file or directory
//! where a link belongs is reported and never overwritten.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use anyhow::Result;

use crate::step::{Change, Check, Ctx, Step, Work};
use gpuhost_host::error::hinted;
use gpuhost_host::rootfs::Kind;

pub(crate) struct PrefixLinks;

/// Where an owned path goes under `prefix`: `/usr/lib64/libnccl.so.2` →
/// `<prefix>/lib/libnccl.so.2`, `/usr/include/nccl.h` → `<prefix>/include/nccl.h`; paths
/// outside `/usr` keep their full path under the prefix. `None` for `/`, `/usr` and paths
/// with `..`.
pub fn link_path(prefix: &Path, owned: &str) -> Option<PathBuf> {
    let p = Path::new(owned);
    if !p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return None;
    }
    let rel = owned
        .strip_prefix("/usr/")
        .or_else(|| owned.strip_prefix('/'))?
        .trim_matches('/');
    if rel.is_empty() || rel == "usr" {
        return None;
    }
    let folded = if rel == "lib64" {
        "lib".to_string()
    } else if let Some(r) = rel.strip_prefix("lib64/") {
        format!("lib/{r}")
    } else {
        rel.to_string()
    };
    Some(prefix.join(folded))
}

/// Parse `rpm -q --qf '[%{=NAME}\t%{FILENAMES}\n]'`: `(package, path)` pairs.
pub(crate) fn parse_file_list(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let (name, path) = l.split_once('\t')?;
            (path.starts_with('/')).then(|| (name.to_string(), path.to_string()))
        })
        .collect()
}

/// What the links under the prefixes need.
#[derive(Debug, Default)]
struct Plan {
    /// Directories to create (host paths, parents first).
    mkdirs: Vec<PathBuf>,
    /// `(link, target)` to create.
    create: Vec<(PathBuf, String)>,
    /// `(link, target, current target)` to fix.
    fix: Vec<(PathBuf, String, String)>,
    /// `(path, what it should be)` where something real is in the way.
    in_the_way: Vec<(PathBuf, String)>,
    ok: usize,
    skipped: usize,
}

impl Plan {
    fn work(&self) -> usize {
        self.mkdirs.len() + self.create.len() + self.fix.len()
    }
}

enum Want {
    Dir,
    Link(String),
}

impl PrefixLinks {
    fn packages(ctx: &Ctx<'_>) -> Vec<String> {
        let mut v: Vec<String> = ctx
            .profile
            .prefix_links
            .iter()
            .flat_map(|l| l.packages.iter().cloned())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    fn missing(ctx: &Ctx<'_>) -> Result<Vec<String>> {
        let pk = Self::packages(ctx);
        let refs: Vec<&str> = pk.iter().map(String::as_str).collect();
        Ok(ctx
            .installed(&refs)?
            .into_iter()
            .filter(|(_, v)| v.is_empty())
            .map(|(n, _)| n)
            .collect())
    }

    /// Compare what the installed packages own with what is under the prefixes.
    /// What the links' plan would change, in words.
    fn why(plan: &Plan) -> Vec<String> {
        let mut why = Vec::new();
        if !plan.mkdirs.is_empty() {
            why.push(format!("{} directories missing", plan.mkdirs.len()));
        }
        if !plan.create.is_empty() {
            why.push(format!(
                "{} links missing (e.g. {})",
                plan.create.len(),
                plan.create[0].0.display()
            ));
        }
        if let Some((l, t, cur)) = plan.fix.first() {
            why.push(format!(
                "{} links point elsewhere (e.g. {} -> {cur}, should be {t})",
                plan.fix.len(),
                l.display()
            ));
        }
        if !plan.in_the_way.is_empty() {
            why.push(format!(
                "{} real paths in the way will not be overwritten",
                plan.in_the_way.len()
            ));
        }
        why
    }

    fn plan(ctx: &Ctx<'_>) -> Result<Plan> {
        let missing = Self::missing(ctx)?;
        let present: Vec<String> = Self::packages(ctx)
            .into_iter()
            .filter(|p| !missing.contains(p))
            .collect();
        let mut plan = Plan::default();
        if present.is_empty() {
            return Ok(plan);
        }
        let cmd = ctx
            .host
            .rpm()
            .args(["-q", "--qf", "[%{=NAME}\\t%{FILENAMES}\\n]"])
            .args(&present);
        let files = parse_file_list(&cmd.run()?.stdout);
        // link (host path, without the root) -> what belongs there; first owner wins.
        let mut wanted: BTreeMap<PathBuf, Want> = BTreeMap::new();
        for entry in &ctx.profile.prefix_links {
            for (_, path) in files.iter().filter(|(p, _)| entry.packages.contains(p)) {
                let Some(link) = link_path(&entry.prefix, path) else {
                    plan.skipped += 1;
                    continue;
                };
                let want = match ctx.host.kind_nofollow(path) {
                    Some(Kind::Dir) => Want::Dir,
                    Some(Kind::File | Kind::Symlink) => Want::Link(path.clone()),
                    _ => {
                        plan.skipped += 1;
                        continue;
                    }
                };
                if wanted.contains_key(&link) {
                    plan.skipped += 1;
                    continue;
                }
                wanted.insert(link, want);
            }
        }
        for (link, want) in wanted {
            let meta = ctx.host.kind_nofollow(&link);
            match (want, meta) {
                (Want::Dir, None) => plan.mkdirs.push(link),
                (Want::Dir, Some(Kind::Dir)) => plan.ok += 1,
                // a symlink to a directory (inside the root)
                (Want::Dir, Some(_)) if ctx.host.is_dir(&link) => plan.ok += 1,
                (Want::Dir, Some(_)) => plan.in_the_way.push((link, "a directory".into())),
                (Want::Link(t), None) => plan.create.push((link, t)),
                (Want::Link(t), Some(Kind::Symlink)) => {
                    let cur = ctx.host.read_link(&link)?;
                    if cur == Path::new(&t) {
                        plan.ok += 1;
                    } else {
                        plan.fix.push((link, t, cur.display().to_string()));
                    }
                }
                (Want::Link(t), Some(m)) => plan.in_the_way.push((
                    link,
                    format!(
                        "a link to {t}, but a real {} is there",
                        if m == Kind::Dir { "directory" } else { "file" }
                    ),
                )),
            }
        }
        Ok(plan)
    }

    fn in_the_way_error(plan: &Plan) -> anyhow::Error {
        let shown: Vec<String> = plan
            .in_the_way
            .iter()
            .take(5)
            .map(|(p, what)| format!("{} (should be {what})", p.display()))
            .collect();
        let more = plan.in_the_way.len().saturating_sub(shown.len());
        hinted(
            format!(
                "{} in the way under the prefix, not overwritten: {}{}",
                if plan.in_the_way.len() == 1 {
                    "1 path is".to_string()
                } else {
                    format!("{} paths are", plan.in_the_way.len())
                },
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ),
            "move them aside (gpuhost only replaces its own symlinks) and run again, or change prefix_links in the profile",
        )
    }
}

impl Step for PrefixLinks {
    fn id(&self) -> &'static str {
        "prefix-links"
    }

    fn summary(&self) -> &'static str {
        "the files of rpm-installed libraries linked under stable prefixes (/opt/nvidia/nccl, …)"
    }

    fn rpm_names(&self, ctx: &Ctx<'_>) -> Vec<String> {
        Self::packages(ctx)
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        ctx.profile
            .prefix_links
            .is_empty()
            .then(|| "no prefix_links in the profile".to_string())
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let missing = Self::missing(ctx)?;
        if !missing.is_empty() {
            check.changes.push(Change::install(
                missing.clone(),
                "prefix_links needs them; their files are linked once installed",
            ));
        }
        let plan = Self::plan(ctx)?;
        if plan.work() > 0 {
            let why = Self::why(&plan);
            let prefixes: Vec<String> = ctx
                .profile
                .prefix_links
                .iter()
                .map(|l| l.prefix.display().to_string())
                .collect();
            let links = plan
                .create
                .iter()
                .cloned()
                .chain(plan.fix.iter().map(|(l, t, _)| (l.clone(), t.clone())))
                .collect();
            check.changes.push(Change::new(
                Work::Symlinks {
                    prefixes,
                    dirs: plan.mkdirs.clone(),
                    links,
                },
                why.join("; "),
            ));
        } else if !missing.is_empty() {
            // Once the packages are in, their files are linked: what apply then does (its
            // check after the transaction finds the links).
            check.changes.push(Change::new(
                Work::Symlinks {
                    prefixes: ctx
                        .profile
                        .prefix_links
                        .iter()
                        .map(|l| l.prefix.display().to_string())
                        .collect(),
                    dirs: Vec::new(),
                    links: Vec::new(),
                },
                "the files of the packages above, once installed",
            ));
        } else if !plan.in_the_way.is_empty() {
            return Err(Self::in_the_way_error(&plan));
        }
        if check.changes.is_empty() {
            check.notes.push(format!(
                "{} links and directories in place{}",
                plan.ok,
                if plan.skipped > 0 {
                    format!(", {} owned paths skipped", plan.skipped)
                } else {
                    String::new()
                }
            ));
        }
        Ok(check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("/usr/lib64/libnccl.so.2", Some("/opt/nvidia/nccl/lib/libnccl.so.2"))]
    #[case("/usr/lib64", Some("/opt/nvidia/nccl/lib"))]
    #[case("/usr/include/nccl.h", Some("/opt/nvidia/nccl/include/nccl.h"))]
    #[case("/usr/lib/libx.so", Some("/opt/nvidia/nccl/lib/libx.so"))]
    #[case(
        "/usr/share/doc/libnccl/LICENSE.txt",
        Some("/opt/nvidia/nccl/share/doc/libnccl/LICENSE.txt")
    )]
    #[case("/usr/lib64x/y", Some("/opt/nvidia/nccl/lib64x/y"))]
    #[case(
        "/etc/ld.so.conf.d/nccl.conf",
        Some("/opt/nvidia/nccl/etc/ld.so.conf.d/nccl.conf")
    )]
    #[case("/usr", None)]
    #[case("/", None)]
    #[case("/usr/../etc/passwd", None)]
    #[case("relative/path", None)]
    fn maps_owned_paths_under_the_prefix(#[case] owned: &str, #[case] want: Option<&str>) {
        assert_eq!(
            link_path(Path::new("/opt/nvidia/nccl"), owned),
            want.map(PathBuf::from),
            "{owned}"
        );
    }

    #[test]
    fn parses_the_batched_file_list() {
        let out = "libnccl\t/usr/lib64/libnccl.so.2\nlibnccl\t/usr/lib64/libnccl.so.2.21.5\npackage libcudnn8 is not installed\nlibnccl-devel\t(contains no files)\n";
        let got = parse_file_list(out);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[1],
            (
                "libnccl".to_string(),
                "/usr/lib64/libnccl.so.2.21.5".to_string()
            )
        );
    }
}
