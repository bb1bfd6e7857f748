//! An install root from any build host (issue 25): gpuhost finds the root's rpm database itself
//! and tells rpm and dnf on every call — on this Debian machine, whose rpm keeps its database in
//! `~/.rpmdb`, with a HOME that has no `.rpmmacros` and no wrapper; and every repository a
//! profile names is checked before any change, with the `site.toml` of docs/profiles.md.

// Test helpers fail the test by panicking, with what was printed in the message.
#![allow(clippy::panic, clippy::unwrap_used)]

#[path = "world/mod.rs"]
mod world;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use world::{code, report, stderr, stdout, Os, Root, World, CUDA_LOCAL_EL8_12_2, UEK8_NEW};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// gpuhost on `root` with `home` as HOME: no world HOME, no wrapper. Also fails when the run
/// left its private rpm macro directory (`$TMPDIR/gpuhost-rpm.<pid>.*`) behind.
fn gpuhost(root: &Root, home: &Path, args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .env("HOME", home)
        .args(args)
        .arg("--root")
        .arg(root.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mine = format!("gpuhost-rpm.{}.", child.id());
    let o = child.wait_with_output().unwrap();
    let left: Vec<String> = listing(&std::env::temp_dir())
        .into_iter()
        .filter(|n| n.starts_with(&mine))
        .collect();
    assert!(
        left.is_empty(),
        "gpuhost left {left:?} in the temporary directory"
    );
    o
}

/// Files under `dir` (recursively) named like an rpm database's, as paths relative to `dir`.
fn rpm_databases(dir: &Path, rel: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let r = rel.join(&name);
        if ft.is_dir() {
            if name == ".rpmdb" {
                out.push(r.display().to_string());
            }
            rpm_databases(&e.path(), &r, out);
        } else if ft.is_file()
            && ["rpmdb.sqlite", "Packages", "Packages.db"].contains(&name.as_str())
        {
            out.push(r.display().to_string());
        }
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The demo's profile (the world's ol8-uek and its driver package), from a HOME without
/// `.rpmmacros`: the first apply converges into the root's own database at `/var/lib/rpm`, the
/// second changes nothing, and no other rpm database appears — not in the root (Debian's rpm
/// would have made `ROOT/root/.rpmdb`), not in HOME; gpuhost's private macro directory for dnf
/// is gone afterwards.
#[test]
fn an_install_root_converges_into_its_own_rpm_database_with_an_empty_home() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let home = tempfile::tempdir().unwrap();
    let driver = World::get().cuda_local(CUDA_LOCAL_EL8_12_2);
    let args = [
        "apply",
        "--format",
        "json",
        "--profile",
        &world::profile("ol8-uek"),
        "--set",
        &format!("driver.local_repo_rpm={}", driver.display()),
    ];
    let o = gpuhost(&root, home.path(), &args);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let r = report(&o);
    let changed = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["outcome"] == "changed")
        .count();
    assert!(changed >= 8, "{r:#}");
    // installed into the root's own database, where Oracle Linux keeps it
    assert!(root.installed("docker-ce").is_some());
    assert!(root.installed("kmod-nvidia-open-dkms").is_some());
    let again = gpuhost(&root, home.path(), &args);
    assert_eq!(code(&again), 0, "{}\n{}", stdout(&again), stderr(&again));
    let r = report(&again);
    for s in r["steps"].as_array().unwrap() {
        assert!(
            ["unchanged", "skipped"].contains(&s["outcome"].as_str().unwrap()),
            "the second apply changed something: {s:#}"
        );
    }
    let mut dbs = Vec::new();
    rpm_databases(root.path(), Path::new("/"), &mut dbs);
    assert_eq!(
        dbs,
        ["/var/lib/rpm/rpmdb.sqlite"],
        "rpm databases in the root"
    );
    assert!(
        listing(home.path()).is_empty(),
        "HOME gained {:?}",
        listing(home.path())
    );
}

/// A root with two rpm databases (`/var/lib/rpm` and `/usr/lib/sysimage/rpm`): gpuhost cannot
/// tell which one its OS uses, so `apply` stops with exit 2 naming both, before any change.
#[test]
fn a_root_whose_rpm_database_cannot_be_told_is_refused_before_any_change() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let second = root.join("usr/lib/sysimage/rpm");
    std::fs::create_dir_all(&second).unwrap();
    std::fs::copy(
        root.join("var/lib/rpm/rpmdb.sqlite"),
        second.join("rpmdb.sqlite"),
    )
    .unwrap();
    let before = root.tree_snapshot();
    let home = tempfile::tempdir().unwrap();
    let driver = World::get().cuda_local(CUDA_LOCAL_EL8_12_2);
    let o = gpuhost(
        &root,
        home.path(),
        &[
            "apply",
            "--profile",
            &world::profile("ol8-uek"),
            "--set",
            &format!("driver.local_repo_rpm={}", driver.display()),
        ],
    );
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{}\n{err}", stdout(&o));
    assert!(
        err.contains("has two rpm databases, /var/lib/rpm and /usr/lib/sysimage/rpm"),
        "{err}"
    );
    assert_eq!(root.tree_snapshot(), before, "the root changed");
}

/// The `site.toml` of docs/profiles.md, as printed there (its driver package and checksum swapped for the
/// world's, and the world's ol8-uek extended so that no network is needed): its Docker mirror
/// directory does not exist, so `plan` and `apply` stop with exit 2 naming `docker.repo` and the
/// path, and nothing is written; a mirror directory without `repodata/repomd.xml` is refused
/// the same way; with the mirror in place the check passes.
#[test]
fn the_readme_site_profile_with_a_missing_mirror_changes_nothing() {
    let text = readme_site_toml();
    assert!(
        text.contains("repo = \"/srv/mirror/docker-ce-stable\""),
        "{text}"
    );
    let driver = World::get().cuda_local(CUDA_LOCAL_EL8_12_2);
    let sum = Command::new("sha256sum").arg(&driver).output().unwrap();
    let sum = stdout(&sum);
    let sum = sum.split_whitespace().next().unwrap();
    let site: String = text
        .lines()
        .map(|l| {
            if l.starts_with("extends = ") {
                format!("extends = {:?}", world::profile("ol8-uek"))
            } else if l.starts_with("local_repo_rpm = ") {
                format!("local_repo_rpm = {:?}", driver.display().to_string())
            } else if l.starts_with("sha256 = ") {
                format!("sha256 = {sum:?}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("site.toml");
    std::fs::write(&profile, site).unwrap();
    let profile = profile.display().to_string();
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let before = root.tree_snapshot();
    for cmd in ["plan", "apply"] {
        let o = root.gpuhost(&[cmd, "--profile", &profile]);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{cmd}: {}\n{err}", stdout(&o));
        assert!(
            err.contains("docker.repo: the repository directory /srv/mirror/docker-ce-stable")
                && err.contains("does not exist; nothing was changed"),
            "{cmd}: {err}"
        );
        assert_eq!(root.tree_snapshot(), before, "{cmd} changed the root");
    }
    let mirror = root.join("srv/mirror/docker-ce-stable");
    std::fs::create_dir_all(&mirror).unwrap();
    let before = root.tree_snapshot();
    let o = root.gpuhost(&["apply", "--profile", &profile]);
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{err}");
    assert!(err.contains("repodata/repomd.xml is missing"), "{err}");
    assert_eq!(
        root.tree_snapshot(),
        before,
        "apply changed the root: {err}"
    );
    std::fs::remove_dir(&mirror).unwrap();
    let cp = Command::new("cp")
        .arg("-rL")
        .arg(World::get().repo(Os::Ol8, "docker-ce-stable"))
        .arg(&mirror)
        .status()
        .unwrap();
    assert!(cp.success());
    let o = root.gpuhost(&["plan", "--profile", &profile]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(!err.contains("docker.repo"), "{out}\n{err}");
    assert!(out.contains("docker "), "{out}\n{err}");
}

/// The `toml` block of the README's (or the profile document's) site profile.
fn readme_site_toml() -> String {
    for doc in ["README.md", "docs/profiles.md"] {
        let Ok(text) = std::fs::read_to_string(repo().join(doc)) else {
            continue;
        };
        if let Some(block) = text
            .split("```toml\n")
            .skip(1)
            .filter_map(|b| b.split("\n```").next())
            .find(|b| b.starts_with("# /etc/gpuhost/site.toml"))
        {
            return block.to_string();
        }
    }
    panic!("no ```toml block starting with `# /etc/gpuhost/site.toml` in README.md or docs/profiles.md");
}
