//! Install roots are resolved inside the root, as if the root were `/`: a symlink in the root
//! (absolute, or `..` climbing above it) never leads `gpuhost apply --root R` to the build
//! host's files. Each case links a directory or file of the root to a directory *outside* it
//! (standing for the build host's tree), runs the real binary, and proves the outside tree is
//! byte-for-byte unchanged and none of its contents was copied into the root; where the link
//! means "inside the root" (an absolute target that exists in it), apply converges there.

// Test helpers fail the test by panicking, with the report in the message.
#![allow(clippy::panic)]

#[path = "world/mod.rs"]
mod world;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::Value;
use world::{code, report, stderr, step, Os, Root, UEK8_NEW};

/// The build host's tree outside the root: a daemon.json, a repo directory, state, /opt.
struct Outside {
    dir: tempfile::TempDir,
}

const HOST_SECRET: &str = "build-host-only-8c1f";

impl Outside {
    fn new() -> Outside {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let d = dir.path();
        for sub in ["docker", "repos.d", "state", "opt"] {
            std::fs::create_dir_all(d.join(sub)).unwrap_or_else(|e| panic!("{e}"));
        }
        let files = [
            (
                "docker/daemon.json",
                format!("{{\"{HOST_SECRET}\": true}}\n"),
            ),
            (
                "repos.d/host.repo",
                format!("[{HOST_SECRET}]\nbaseurl=file:///nowhere\n"),
            ),
            ("state/journal.json", "[]\n".to_string()),
            ("daemon.json", format!("{{\"{HOST_SECRET}\": 1}}\n")),
        ];
        for (f, text) in files {
            std::fs::write(d.join(f), text).unwrap_or_else(|e| panic!("{e}"));
        }
        Outside { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn snapshot(&self) -> String {
        Root::dir_snapshot(self.dir.path())
    }
}

/// The world's ol8-uek profile plus NCCL links under /opt (for the prefix-links step).
fn site() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("site.toml");
    let text = format!(
        "extends = {:?}\n\n[[prefix_links]]\npackages = [\"libnccl\", \"libnccl-devel\"]\nprefix = \"/opt/nvidia/nccl\"\n",
        world::profile("ol8-uek")
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    let shown = path.display().to_string();
    (dir, shown)
}

fn apply(root: &Root, only: &str) -> (i32, Value, String) {
    let (_dir, profile) = site();
    let o = root.gpuhost(&[
        "apply",
        "--format",
        "json",
        "--profile",
        &profile,
        "--only",
        only,
    ]);
    (code(&o), report(&o), stderr(&o))
}

fn replace_with_link(root: &Root, rel: &str, target: &Path) {
    let p = root.join(rel);
    if p.is_dir() {
        std::fs::remove_dir_all(&p).unwrap_or_else(|e| panic!("{e}"));
    } else if p.symlink_metadata().is_ok() {
        std::fs::remove_file(&p).unwrap_or_else(|e| panic!("{e}"));
    }
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
    }
    symlink(target, &p).unwrap_or_else(|e| panic!("{e}"));
}

/// Nothing under the root holds the build host's secret.
fn root_has_no_host_content(root: &Root) {
    let snap = root.tree_snapshot();
    for line in snap.lines().filter(|l| l.contains(" file ")) {
        let rel = line.split(' ').next().unwrap_or_default();
        let text = std::fs::read(root.join(rel)).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&text).contains(HOST_SECRET),
            "{rel} holds the build host's content"
        );
    }
}

fn failed_reason(r: &Value, id: &str) -> String {
    let s = step(r, id);
    assert_eq!(s["outcome"], "failed", "{s:#}");
    format!("{} {}", s["reason"], s["hint"])
}

#[test]
fn a_symlinked_etc_docker_never_reaches_the_build_host() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let out = Outside::new();
    replace_with_link(&root, "etc/docker", &out.path("docker"));
    let before = out.snapshot();
    let (c, r, err) = apply(&root, "docker,container-toolkit,daemon-json");
    assert_eq!(out.snapshot(), before, "the build host's tree changed");
    root_has_no_host_content(&root);
    // /etc/docker resolves inside the root, where its target does not exist: refused.
    assert_eq!(c, 1, "{err}\n{r:#}");
    let why = failed_reason(&r, "daemon-json");
    assert!(
        why.contains("etc/docker") && why.contains("does not exist"),
        "{why}"
    );
}

#[test]
fn an_absolute_link_that_means_inside_the_root_is_followed_there() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let out = Outside::new();
    // The same absolute path exists on the build host and inside the root.
    let target = out.path("docker");
    let inside = root.join(&target.display().to_string()[1..]);
    std::fs::create_dir_all(&inside).unwrap_or_else(|e| panic!("{e}"));
    replace_with_link(&root, "etc/docker", &target);
    let before = out.snapshot();
    let (c, r, err) = apply(&root, "docker,container-toolkit,daemon-json");
    assert_eq!(c, 0, "{err}\n{r:#}");
    assert_eq!(out.snapshot(), before, "the build host's tree changed");
    let written = std::fs::read_to_string(inside.join("daemon.json")).unwrap_or_default();
    assert!(written.contains("nvidia-container-runtime"), "{written}");
    root_has_no_host_content(&root);
    // and the second apply is unchanged
    let (c, r, _) = apply(&root, "docker,container-toolkit,daemon-json");
    assert_eq!(c, 0);
    assert_eq!(step(&r, "daemon-json")["outcome"], "unchanged", "{r:#}");
}

#[test]
fn a_symlinked_daemon_json_never_pulls_in_a_host_file() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let out = Outside::new();
    replace_with_link(&root, "etc/docker/daemon.json", &out.path("daemon.json"));
    let before = out.snapshot();
    let (c, r, err) = apply(&root, "docker,container-toolkit,daemon-json");
    assert_eq!(c, 0, "{err}\n{r:#}");
    assert_eq!(out.snapshot(), before, "the build host's tree changed");
    root_has_no_host_content(&root);
    // The dangling (inside the root) link was replaced by gpuhost's file.
    let p = root.join("etc/docker/daemon.json");
    assert!(p.symlink_metadata().is_ok_and(|m| m.is_file()));
}

#[test]
fn symlinked_repo_dirs_absolute_and_dotdot_stay_inside() {
    for target in ["ABS", "../../../../../../../../../../../OUT"] {
        let root = Root::new(Os::Ol8, &[UEK8_NEW]);
        let out = Outside::new();
        // The root's own repo files move out; /etc/yum.repos.d points at the outside copy.
        let repos = out.path("repos.d");
        for f in std::fs::read_dir(root.join("etc/yum.repos.d")).unwrap_or_else(|e| panic!("{e}")) {
            let f = f.unwrap_or_else(|e| panic!("{e}")).path();
            let name = f.file_name().map(PathBuf::from).unwrap_or_default();
            std::fs::copy(&f, repos.join(name)).unwrap_or_else(|e| panic!("{e}"));
        }
        let link = if target == "ABS" {
            repos.clone()
        } else {
            PathBuf::from(format!("{target}{}", repos.display()))
        };
        replace_with_link(&root, "etc/yum.repos.d", &link);
        let before = out.snapshot();
        let (c, r, err) = apply(&root, "docker");
        assert_eq!(
            out.snapshot(),
            before,
            "{target}: the build host's tree changed"
        );
        root_has_no_host_content(&root);
        assert_eq!(c, 1, "{target}: {err}\n{r:#}");
        let why = failed_reason(&r, "docker");
        assert!(
            why.contains("yum.repos.d") && why.contains("inside the root"),
            "{target}: {why}"
        );
    }
}

#[test]
fn a_repo_dir_linked_inside_the_root_is_what_dnf_reads() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    std::fs::rename(root.join("etc/yum.repos.d"), root.join("srv/yum.repos.d"))
        .unwrap_or_else(|e| panic!("{e}"));
    symlink("/srv/yum.repos.d", root.join("etc/yum.repos.d")).unwrap_or_else(|e| panic!("{e}"));
    let (c, r, err) = apply(&root, "docker,container-toolkit");
    assert_eq!(c, 0, "{err}\n{r:#}");
    assert!(root.join("srv/yum.repos.d/docker-ce.repo").is_file());
    assert!(root.installed("docker-ce").is_some());
    let (c, r, _) = apply(&root, "docker,container-toolkit");
    assert_eq!(c, 0);
    assert_eq!(step(&r, "docker")["outcome"], "unchanged", "{r:#}");
}

#[test]
fn symlinked_state_and_lock_are_refused_not_followed() {
    // /var/lib/gpuhost itself linked out of the root
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let out = Outside::new();
    replace_with_link(&root, "var/lib/gpuhost", &out.path("state"));
    let before = out.snapshot();
    let (c, _, err) = apply(&root, "kernel");
    assert_eq!(out.snapshot(), before, "the build host's tree changed");
    // Bad input found before any change (issue 53, item 5): exit 2, not 1.
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains("var/lib/gpuhost is a link") && err.contains("outside the install root"),
        "{err}"
    );

    // only the lock file linked out of the root
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let out = Outside::new();
    replace_with_link(&root, "var/lib/gpuhost/apply.lock", &out.path("lock"));
    let before = out.snapshot();
    let (c, _, err) = apply(&root, "kernel");
    assert_eq!(out.snapshot(), before, "the build host's tree changed");
    assert!(!out.path("lock").exists());
    assert_eq!(c, 1, "{err}");
    assert!(
        err.contains("apply.lock") && err.contains("symlink"),
        "{err}"
    );
}

/// Issue 53, item 5: gpuhost's driver cache folder that is a file, or a link out of the root,
/// is found before any change (exit 2), not after the driver was replaced.
#[test]
fn a_cache_folder_that_is_a_file_or_a_link_out_is_refused_before_any_change() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    std::fs::create_dir_all(root.join("var/lib/gpuhost")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("var/lib/gpuhost/driver-repo"), "x").unwrap_or_else(|e| panic!("{e}"));
    let rpmdb = root.rpmdb_snapshot();
    let (c, _, err) = apply(&root, "kernel");
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("driver-repo is not a folder"), "{err}");
    assert_eq!(root.rpmdb_snapshot(), rpmdb);
    std::fs::remove_file(root.join("var/lib/gpuhost/driver-repo"))
        .unwrap_or_else(|e| panic!("{e}"));
    let out = Outside::new();
    replace_with_link(&root, "var/lib/gpuhost/driver-repo", &out.path("cache"));
    let before = out.snapshot();
    let (c, _, err) = apply(&root, "kernel");
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("driver-repo is a link"), "{err}");
    assert_eq!(out.snapshot(), before);
}

#[test]
fn a_symlinked_opt_gets_no_links_on_the_build_host() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let out = Outside::new();
    replace_with_link(&root, "opt", &out.path("opt"));
    let before = out.snapshot();
    let (c, r, err) = apply(&root, "prefix-links");
    assert_eq!(out.snapshot(), before, "the build host's tree changed");
    assert_eq!(c, 1, "{err}\n{r:#}");
    let why = failed_reason(&r, "prefix-links");
    assert!(
        why.contains("/opt") && why.contains("does not exist"),
        "{why}"
    );
}

#[test]
fn link_loops_and_dangling_links_fail_cleanly() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let out = Outside::new();
    symlink("/etc/docker-b", root.join("etc/docker")).unwrap_or_else(|e| panic!("{e}"));
    symlink("/etc/docker", root.join("etc/docker-b")).unwrap_or_else(|e| panic!("{e}"));
    symlink("/no/such/dir", root.join("etc/dkms")).unwrap_or_else(|e| panic!("{e}"));
    let before = out.snapshot();
    let (c, r, err) = apply(&root, "docker,container-toolkit,daemon-json");
    assert_eq!(out.snapshot(), before);
    assert_eq!(c, 1, "{err}\n{r:#}");
    let why = failed_reason(&r, "daemon-json");
    assert!(why.contains("daemon.json"), "{why}");
    assert!(!root.join("no").exists());
}

/// The directories rpm, dnf, `systemctl --root` and the driver swap write in the root. They
/// resolve paths on the build host, not inside the root: each linked out of the root, absolute
/// or by `..`, is refused before anything changes (exit 2, naming it), and the build host's
/// tree is unchanged.
const TOOL_DIRS: &[&str] = &[
    "var/cache/dnf",
    "var/log",
    "var/lib/dnf",
    "var/lib/rpm",
    "etc/dnf/modules.d",
    "etc/systemd/system",
    "var/cache/gpuhost",
];

/// A snapshot without rpm's shared-memory file, which changes whenever the database is read.
fn without_shm(snapshot: &str) -> String {
    snapshot
        .lines()
        .filter(|l| !l.contains("rpmdb.sqlite-shm"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn package_tool_dirs_linked_out_of_the_root_are_refused_before_any_change() {
    let mut checked = 0;
    for dir in TOOL_DIRS {
        for kind in ["absolute", "dotdot"] {
            let root = Root::new(Os::Ol8, &[UEK8_NEW]);
            let out = Outside::new();
            let target = out.path("state");
            // What the root had there goes along, so that the tools would find it outside.
            let inside = root.join(dir);
            if inside.is_dir() {
                for f in std::fs::read_dir(&inside).unwrap_or_else(|e| panic!("{e}")) {
                    let f = f.unwrap_or_else(|e| panic!("{e}")).path();
                    if f.is_file() {
                        let name = f.file_name().map(PathBuf::from).unwrap_or_default();
                        std::fs::copy(&f, target.join(name)).unwrap_or_else(|e| panic!("{e}"));
                    }
                }
            }
            let link = if kind == "absolute" {
                target.clone()
            } else {
                PathBuf::from(format!(
                    "{}{}",
                    "../".repeat(30).trim_end_matches('/'),
                    target.display()
                ))
            };
            replace_with_link(&root, dir, &link);
            let before_out = without_shm(&out.snapshot());
            // (the tree snapshots hash the rpm database's files too)
            let tree = || without_shm(&root.tree_snapshot());
            let before_root = tree();
            let o = root.gpuhost(&[
                "apply",
                "--format",
                "json",
                "--profile",
                &world::profile("ol8-uek"),
                "--only",
                "docker,container-toolkit,services",
            ]);
            let err = stderr(&o);
            assert_eq!(
                without_shm(&out.snapshot()),
                before_out,
                "{dir} ({kind}): the build host's tree changed"
            );
            assert!(tree() == before_root, "{dir} ({kind}): the root changed");
            assert_eq!(code(&o), 2, "{dir} ({kind}): {err}");
            assert!(
                err.contains(&root.join(dir).display().to_string())
                    && err.contains("outside the install root"),
                "{dir} ({kind}): {err}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2 * TOOL_DIRS.len());
}

#[test]
fn a_package_tool_dir_linked_inside_the_root_is_fine() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    // /var/log → ../srv/log: a relative link that stays inside, the same from either side.
    std::fs::create_dir_all(root.join("srv/log")).unwrap_or_else(|e| panic!("{e}"));
    replace_with_link(&root, "var/log", Path::new("../srv/log"));
    let (c, r, err) = apply(&root, "docker,container-toolkit");
    assert_eq!(c, 0, "{err}\n{r:#}");
    assert!(root.installed("docker-ce").is_some());
    let logs = std::fs::read_dir(root.join("srv/log"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(logs > 0, "dnf's logs went elsewhere than srv/log");
}
