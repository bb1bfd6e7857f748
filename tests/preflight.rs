//! Preflight: everything that can be checked without changing the host is checked before any
//! step changes anything. Bad flags, a wrong driver file, a missing mirror, a corrupt state
//! file: exit 2, and the root (rpm database and files) is exactly as it was. A corrupt journal
//! is moved aside with a warning, not fatal after the fact.

// Test helpers fail the test by panicking, with the report in the message.
#![allow(clippy::panic)]

#[path = "world/mod.rs"]
mod world;

use world::{code, stderr, Os, Root, World, CUDA_LOCAL_EL8_12_2, CUDA_LOCAL_EL8_12_4, UEK8_NEW};

/// The root without gpuhost's own lock (which every apply opens) and sqlite's shared-memory
/// and write-ahead files of the rpm database (any `rpm -q` touches them; the database's content
/// is compared with `rpm -qa`).
fn tree(root: &Root) -> String {
    root.tree_snapshot()
        .lines()
        .filter(|l| !l.starts_with("var/lib/gpuhost/apply.lock"))
        .filter(|l| !l.starts_with("var/lib/rpm/rpmdb.sqlite-"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn driver_set() -> String {
    format!(
        "driver.local_repo_rpm={}",
        World::get().cuda_local(CUDA_LOCAL_EL8_12_2).display()
    )
}

/// `apply` with `args` on a fresh root must exit 2 with `needle` in its error, changing nothing.
fn refused_changing_nothing(root: &Root, args: &[&str], needle: &str) {
    let before = tree(root);
    let rpmdb = root.rpmdb_snapshot();
    let o = root.gpuhost(args);
    let err = format!("{}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
    assert_eq!(code(&o), 2, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert_eq!(
        root.rpmdb_snapshot(),
        rpmdb,
        "{args:?}: the rpm database changed"
    );
    let after = tree(root);
    let changed: Vec<&str> = after
        .lines()
        .filter(|l| !before.lines().any(|b| b == *l))
        .filter(|l| !l.starts_with("var/lib/gpuhost"))
        .collect();
    assert!(changed.is_empty(), "{args:?}: changed {changed:?}");
}

#[test]
fn a_skip_that_leaves_nothing_of_only_is_invalid() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let profile = world::profile("ol8-uek");
    refused_changing_nothing(
        &root,
        &[
            "apply",
            "--profile",
            &profile,
            "--only",
            "docker",
            "--skip",
            "docker",
        ],
        "leaves nothing of --only",
    );
}

#[test]
fn a_kernel_release_must_look_like_uname_r() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let profile = world::profile("ol8-uek");
    for k in [
        "../../etc",
        &format!("{UEK8_NEW}/."),
        "/lib/modules",
        "",
        "5.15.0 x",
    ] {
        refused_changing_nothing(
            &root,
            &["apply", "--profile", &profile, "--kernel-release", k],
            "is not a kernel release",
        );
    }
}

/// A JSON `apply` of ol8-uek with the world's driver package and `--set set`, on a fresh root:
/// refused like [`refused_changing_nothing`]. The root, for more checks.
fn refused_with_the_driver_and(set: &str, needle: &str) -> Root {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let profile = world::profile("ol8-uek");
    let driver = driver_set();
    refused_changing_nothing(
        &root,
        &[
            "apply",
            "--format",
            "json",
            "--profile",
            &profile,
            "--set",
            &driver,
            "--set",
            set,
        ],
        needle,
    );
    root
}

#[test]
fn a_wrong_sha256_is_refused_before_the_headers_are_installed() {
    let sha = format!("driver.sha256={}", "0".repeat(64));
    let root = refused_with_the_driver_and(&sha, "SHA-256");
    assert!(root.installed("kernel-uek-devel").is_none());
}

/// `driver.sha256` (cloud-init's `--sha256`) is verified whenever it is given: also when the
/// package is installed already and nothing else would be done.
#[test]
fn a_wrong_sha256_is_refused_when_the_driver_is_installed_already() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let profile = world::profile("ol8-uek");
    let driver = driver_set();
    let args = ["apply", "--profile", &profile, "--set", &driver];
    let o = root.gpuhost(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let sha = format!("driver.sha256={}", "0".repeat(64));
    let mut wrong = args.to_vec();
    wrong.extend(["--set", &sha]);
    refused_changing_nothing(&root, &wrong, "SHA-256 is");
    // The right one passes.
    let right = World::get().cuda_local(CUDA_LOCAL_EL8_12_2);
    let sum = std::process::Command::new("sha256sum")
        .arg(&right)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let sum = String::from_utf8_lossy(&sum.stdout);
    let sha = format!(
        "driver.sha256={}",
        sum.split_whitespace().next().unwrap_or_default()
    );
    let mut good = args.to_vec();
    good.extend(["--set", &sha]);
    assert_eq!(code(&root.gpuhost(&good)), 0);
}

/// `--root` naming nothing: the hint says what a root must be, not "create it" (an empty
/// directory is then refused as not Oracle Linux).
#[test]
fn a_missing_root_is_refused_with_what_a_root_must_be() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let missing = dir.path().join("nonexistent");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .args(["plan", "--profile", "ol8-uek", "--root"])
        .arg(&missing)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("an existing Oracle Linux install root"),
        "{err}"
    );
    assert!(!err.contains("create it"), "{err}");
    assert!(!missing.exists());
}

#[test]
fn a_missing_mirror_directory_is_refused_before_anything_changes() {
    refused_with_the_driver_and(
        "docker.repo=/srv/no-such-mirror",
        "docker.repo: the repository directory /srv/no-such-mirror",
    );
}

#[test]
fn a_corrupt_state_file_is_refused_before_anything_changes() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let profile = world::profile("ol8-uek");
    std::fs::create_dir_all(root.join("var/lib/gpuhost")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        root.join("var/lib/gpuhost/state.json"),
        b"{\"pending\": \xff",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    refused_changing_nothing(
        &root,
        &["apply", "--profile", &profile, "--only", "docker"],
        "state.json",
    );
}

#[test]
fn a_corrupt_journal_is_moved_aside_with_a_warning() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let profile = world::profile("ol8-uek");
    std::fs::create_dir_all(root.join("var/lib/gpuhost")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("var/lib/gpuhost/journal.json"), b"[\xff\xfe")
        .unwrap_or_else(|e| panic!("{e}"));
    let o = root.gpuhost(&["apply", "--profile", &profile, "--only", "kernel"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is corrupt") && stderr(&o).contains("moved aside"),
        "{}",
        stderr(&o)
    );
    let names: Vec<String> = std::fs::read_dir(root.join("var/lib/gpuhost"))
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let aside = names
        .iter()
        .find(|n| n.starts_with("journal.json.corrupt-"))
        .unwrap_or_else(|| panic!("no journal moved aside: {names:?}"));
    assert_eq!(
        std::fs::read(root.join(&format!("var/lib/gpuhost/{aside}"))).unwrap_or_default(),
        b"[\xff\xfe"
    );
    let journal = std::fs::read_to_string(root.join("var/lib/gpuhost/journal.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    let runs: Vec<serde_json::Value> =
        serde_json::from_str(&journal).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(runs.len(), 1);
}

/// The root's files and rpm database, without gpuhost's own records (apply's journal records a
/// refused run too).
fn host_state(root: &Root) -> (Vec<String>, String) {
    let files = tree(root)
        .lines()
        .filter(|l| !l.starts_with("var/lib/gpuhost"))
        .map(str::to_string)
        .collect();
    (files, root.rpmdb_snapshot())
}

/// The first failed step's line of a text report, without its duration.
fn first_failure(out: &str) -> String {
    out.lines()
        .find(|l| l.split_whitespace().nth(1) == Some("failed"))
        .map(|l| l.rsplit_once("  (").map_or(l, |(a, _)| a).to_string())
        .unwrap_or_default()
}

/// One input, one answer: `plan`, `apply --dry-run` and `apply` give the same exit code (2:
/// invalid input) and the same first error for every wrong driver file, and change nothing;
/// on a converged root the refused apply says nothing of the kernel guard (its module is
/// there; the wrong file's driver is the input in question).
#[test]
fn plan_dry_run_and_apply_give_one_answer_for_each_input_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // (named as another driver than the converged root's: there, a file it has installed
    // already is not read at all)
    let not_rpm = dir.path().join(CUDA_LOCAL_EL8_12_4);
    std::fs::write(&not_rpm, "<html>503</html>").unwrap_or_else(|e| panic!("{e}"));
    let w = World::get();
    let el9 = w
        .cuda_local(world::CUDA_LOCAL_EL9_12_2)
        .display()
        .to_string();
    let missing = format!("/nonexistent/{CUDA_LOCAL_EL8_12_4}");
    let sha = format!("driver.sha256={}", "0".repeat(64));
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("missing", vec![format!("driver.local_repo_rpm={missing}")]),
        ("other OS", vec![format!("driver.local_repo_rpm={el9}")]),
        (
            "not an RPM",
            vec![format!("driver.local_repo_rpm={}", not_rpm.display())],
        ),
        ("wrong SHA-256", vec![driver_set(), sha]),
    ];
    let profile = world::profile("ol8-uek");
    let fresh = Root::new(Os::Ol8, &[UEK8_NEW]);
    let converged = Root::new(Os::Ol8, &[UEK8_NEW]);
    let o = converged.gpuhost(&["apply", "--profile", &profile, "--set", &driver_set()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for root in [&fresh, &converged] {
        for (case, sets) in &cases {
            let mut answers = Vec::new();
            for cmd in [&["plan"][..], &["apply", "--dry-run"], &["apply"]] {
                let mut args: Vec<&str> = cmd.to_vec();
                args.extend(["--profile", &profile]);
                for s in sets {
                    args.extend(["--set", s]);
                }
                let before = host_state(root);
                let o = root.gpuhost(&args);
                let out = String::from_utf8_lossy(&o.stdout).to_string();
                assert!(
                    before == host_state(root),
                    "{case}: {cmd:?} changed the root"
                );
                assert!(!out.contains("kernel guard"), "{case}: {cmd:?}: {out}");
                answers.push((code(&o), first_failure(&out)));
            }
            assert_eq!(answers[0].0, 2, "{case}: {answers:?}");
            assert!(!answers[0].1.is_empty(), "{case}: {answers:?}");
            assert!(
                answers.iter().all(|a| *a == answers[0]),
                "{case}: {answers:#?}"
            );
        }
    }
}
