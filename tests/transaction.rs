//! Issue 34, item 1: every package of a transaction is on the root's own disk and checked before
//! the transaction's first write. A `file://` mirror (an NFS export, a synced directory, a USB
//! stick) is lost at each phase — before the downloads, during them (the metadata read, a package
//! gone), inside the rpm transaction (a scriptlet of the test world moves the mirrors away while
//! rpm installs) — on a first converge and on a driver swap. Before the first write: exit 1 and
//! the rpm database as it was. After it: the transaction completes. Then, with the mirror back,
//! the next apply converges.

#![allow(clippy::panic)] // a test fails by panicking

#[path = "world/mod.rs"]
mod world;

use rstest::rstest;
use serde_json::Value;
use world::{
    code, profile, report, step, Os, Root, World, CUDA_LOCAL_EL9_13_0, DRIVER_LOCAL_EL9_570, RHCK9,
};

/// Where a loss is injected.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// The mirror is gone when the run starts (its repo cannot be read at all).
    BeforeDownload,
    /// The mirror's metadata is there, a package the transaction needs is not.
    DuringDownload,
    /// The mirrors go away inside the rpm transaction (the world's `lose-mirror` scriptlets).
    DuringTransaction,
}

/// The mirror whose packages a first converge on OL9 takes (gcc, dkms's dependencies, headers).
const MIRROR: &str = "/srv/repos/ol9_appstream";

fn apply(root: &Root, rpm_path: &str) -> (i32, Value) {
    apply_with(root, rpm_path, None)
}

/// The `apply --format json` of the ol9-rhck profile with `rpm_path` as the local repo package.
fn apply_cmd(root: &Root, rpm_path: &str) -> std::process::Command {
    root.gpuhost_cmd(&[
        "apply",
        "--format",
        "json",
        "--profile",
        &profile("ol9-rhck"),
        "--set",
        &format!("driver.local_repo_rpm={rpm_path}"),
        "--set",
        "driver.replace_local_repo=true",
    ])
}

/// `apply`, with `path` first on PATH when given (a wrapper of a tool gpuhost runs).
fn apply_with(root: &Root, rpm_path: &str, path: Option<&std::path::Path>) -> (i32, Value) {
    let mut cmd = apply_cmd(root, rpm_path);
    if let Some(dir) = path {
        let old = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{old}", dir.display()));
    }
    let o = cmd.output().unwrap_or_else(|e| panic!("{e}"));
    (code(&o), report(&o))
}

/// A directory with an `rpm` that runs the real one, then, once it has read (`-qp`) a
/// package of `/srv/drivers`, moves that folder away: the mirror lost after gpuhost's check,
/// while the package is being fetched for the transaction.
fn rpm_that_loses_the_mirror(root: &Root) -> tempfile::TempDir {
    let d = root.join("/srv/drivers").display().to_string();
    world::wrap_tool("rpm", |real| {
        format!(
            "#!/bin/sh\n{real} \"$@\"; rc=$?\ncase \" $* \" in *\" -qp \"*{d}/*) mv {d} {d}.lost;; esac\nexit $rc\n"
        )
    })
}

/// The local repo package as a file of the root's own "mirror" folder `/srv/drivers` (which the
/// world's scriptlets move away with the repos); its path on this machine.
fn on_the_mirror(root: &Root, name: &str) -> String {
    let dir = root.join("/srv/drivers");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let to = dir.join(name);
    std::fs::copy(World::get().cuda_local(name), &to).unwrap_or_else(|e| panic!("{e}"));
    to.display().to_string()
}

fn lose(root: &Root, loss: Loss, swap: bool) {
    match loss {
        // A swap's only download is its local repo package: lost while gpuhost fetches it
        // (rpm_that_loses_the_mirror).
        Loss::DuringDownload if swap => {}
        Loss::BeforeDownload if swap => {
            std::fs::rename(root.join("/srv/drivers"), root.join("/srv/drivers.lost"))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        Loss::BeforeDownload => {
            std::fs::rename(root.join(MIRROR), root.join(&format!("{MIRROR}.lost")))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        Loss::DuringDownload => {
            // gcc comes from AppStream in every first converge (DKMS builds with it).
            let dir = root.join(&format!("{MIRROR}/Packages"));
            let gone: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{e}"))
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("gcc-1"))
                .collect();
            assert!(!gone.is_empty(), "no gcc package in {}", dir.display());
            for e in gone {
                std::fs::remove_file(e.path()).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        Loss::DuringTransaction => root.write("/etc/gpuhost-world/lose-mirror", ""),
    }
}

/// Undo the loss: the mirror is back (as a sync or a remount would bring it).
fn restore(root: &Root) {
    let _ = std::fs::remove_file(root.join("/etc/gpuhost-world/lose-mirror"));
    for d in ["/srv/repos", "/srv/drivers", MIRROR] {
        let lost = root.join(&format!("{d}.lost"));
        if lost.exists() {
            let _ = std::fs::remove_dir_all(root.join(d));
            std::fs::rename(&lost, root.join(d)).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // A package deleted from the mirror comes back with the mirror's next sync.
    let world = World::get().repo(Os::Ol9, "ol9_appstream");
    let status = std::process::Command::new("cp")
        .args(["-a", "--no-clobber"])
        .arg(world.join("Packages/."))
        .arg(root.join(&format!("{MIRROR}/Packages")))
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
}

/// Every step whose report says it failed or did not run mentions no change it did not make.
fn failed_steps(rep: &Value) -> Vec<String> {
    rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["outcome"] == "failed")
        .map(|s| format!("{}: {}", s["id"], s["reason"]))
        .collect()
}

/// `apply` with `driver.keep_local_repo` as given (false: the driver set from gpuhost's cache).
fn apply_kept(root: &Root, rpm_path: &str, keep: bool) -> (i32, Value) {
    let mut cmd = apply_cmd(root, rpm_path);
    cmd.args(["--set", &format!("driver.keep_local_repo={keep}")]);
    let o = cmd.output().unwrap_or_else(|e| panic!("{e}"));
    (code(&o), report(&o))
}

/// gpuhost's driver cache: its folder and its repo file, whether there.
fn cache_there(root: &Root) -> (bool, bool) {
    (
        root.join("/var/lib/gpuhost/driver-repo").exists(),
        root.join("/etc/yum.repos.d/gpuhost-driver-repo.repo")
            .exists(),
    )
}

#[rstest]
#[case::before_download(Loss::BeforeDownload, true)]
#[case::during_download(Loss::DuringDownload, true)]
#[case::during_the_rpm_transaction(Loss::DuringTransaction, true)]
#[case::before_download_cached(Loss::BeforeDownload, false)]
#[case::during_download_cached(Loss::DuringDownload, false)]
#[case::during_the_rpm_transaction_cached(Loss::DuringTransaction, false)]
fn a_first_converge_loses_its_mirror(#[case] loss: Loss, #[case] keep: bool) {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let rpm = on_the_mirror(&root, DRIVER_LOCAL_EL9_570);
    let before = root.rpmdb_snapshot();
    lose(&root, loss, false);
    let (rc, rep) = apply_kept(&root, &rpm, keep);
    match loss {
        Loss::BeforeDownload | Loss::DuringDownload => {
            assert_eq!(rc, 1, "{rep:#}");
            assert_eq!(
                root.rpmdb_snapshot(),
                before,
                "something was installed: {rep:#}"
            );
            // Nor was anything cached: the cache is written once dnf has installed the set.
            assert_eq!(cache_there(&root), (false, false), "{rep:#}");
            // The steps dnf names fail in its words (every step of the transaction when it
            // names a repo none of them is from); the others do not run.
            let failed = failed_steps(&rep);
            let want = match loss {
                Loss::BeforeDownload => "ol9_appstream",
                _ => "gcc-11",
            };
            assert!(!failed.is_empty(), "{rep:#}");
            assert!(failed.iter().all(|f| f.contains(want)), "{failed:#?}");
            if let Loss::DuringDownload = loss {
                assert_eq!(failed.len(), 1, "{failed:#?}");
            }
            for s in rep["steps"].as_array().into_iter().flatten() {
                assert!(
                    !["changed", "partial"].contains(&s["outcome"].as_str().unwrap_or_default()),
                    "{s:#}"
                );
            }
        }
        Loss::DuringTransaction => {
            assert_eq!(rc, 0, "{rep:#}");
            assert!(
                root.join("/srv/repos.lost").exists(),
                "the world's scriptlet did not take the mirrors away"
            );
            assert!(root.installed("kmod-nvidia-open-dkms").is_some(), "{rep:#}");
            assert!(root.installed("gcc").is_some(), "{rep:#}");
            assert!(root.installed("docker-ce").is_some(), "{rep:#}");
            // The set is installed from the package's repo read into gpuhost's scratch, so the
            // lost mirror changes nothing of it: cached with `false`, installed with `true`.
            assert_eq!(cache_there(&root), (!keep, !keep), "{rep:#}");
            assert_eq!(
                root.installed("nvidia-driver-local-repo-rhel9-570.124.06")
                    .is_some(),
                keep
            );
            // No copy is left behind.
            let left = root.join("/var/cache/gpuhost/packages");
            assert!(
                std::fs::read_dir(&left).map_or(true, |mut d| d.next().is_none()),
                "copies left in {}",
                left.display()
            );
        }
    }
    restore(&root);
    let (rc, rep) = apply_kept(&root, &rpm, keep);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("kmod-nvidia-open-dkms").is_some(), "{rep:#}");
    assert_eq!(cache_there(&root), (!keep, !keep), "{rep:#}");
    let (rc, rep) = apply_kept(&root, &rpm, keep);
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
}

#[rstest]
#[case::before_download(Loss::BeforeDownload)]
#[case::during_download(Loss::DuringDownload)]
#[case::during_the_rpm_transaction(Loss::DuringTransaction)]
fn a_driver_swap_loses_its_mirror(#[case] loss: Loss) {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let (rc, rep) = apply(
        &root,
        &World::get()
            .cuda_local(DRIVER_LOCAL_EL9_570)
            .display()
            .to_string(),
    );
    assert_eq!(rc, 0, "{rep:#}");
    let rpm = on_the_mirror(&root, CUDA_LOCAL_EL9_13_0);
    let before = root.rpmdb_snapshot();
    lose(&root, loss, true);
    let wrapper = rpm_that_loses_the_mirror(&root);
    let path = matches!(loss, Loss::DuringDownload).then(|| wrapper.path());
    let (rc, rep) = apply_with(&root, &rpm, path);
    match loss {
        Loss::DuringDownload => {
            // Checked, then gone before it was copied onto the root's disk: exit 1, nothing
            // changed.
            assert_eq!(rc, 1, "{rep:#}");
            assert!(root.join("/srv/drivers.lost").exists(), "{rep:#}");
            let after = root.rpmdb_snapshot();
            assert_eq!(after, before, "the swap changed something: {rep:#}");
            let why = step(&rep, "driver-repo")["reason"].to_string();
            assert!(
                why.contains("could not be copied onto the root's disk")
                    && why.contains("nothing was installed"),
                "{rep:#}"
            );
        }
        Loss::BeforeDownload => {
            // The swap's only download is the new local repo package: gone when the run
            // starts, it is a missing file (exit 2), found by the check.
            assert_eq!(rc, 2, "{rep:#}");
            let after = root.rpmdb_snapshot();
            assert_eq!(after, before, "the swap changed something: {rep:#}");
            let repo = step(&rep, "driver-repo");
            assert_eq!(repo["outcome"], "failed", "{repo:#}");
            assert!(
                repo["reason"].to_string().contains("does not exist"),
                "{repo:#}"
            );
        }
        _ => {
            assert_eq!(rc, 0, "{rep:#}");
            assert!(
                root.join("/srv/drivers.lost").exists(),
                "the world's scriptlet did not take the driver folder away"
            );
            assert!(
                root.installed("kmod-nvidia-open-dkms")
                    .is_some_and(|v| v.contains("580.82.07")),
                "{rep:#}"
            );
            assert_eq!(
                root.installed_all("kmod-nvidia-open-dkms").len(),
                1,
                "{rep:#}"
            );
        }
    }
    restore(&root);
    let (rc, rep) = apply(&root, &rpm);
    assert_eq!(rc, 0, "{rep:#}");
    let (rc, rep) = apply(&root, &rpm);
    assert_eq!(rc, 0, "{rep:#}");
    world::assert_converged(&rep);
    assert!(root
        .installed("kmod-nvidia-open-dkms")
        .is_some_and(|v| v.contains("580.82.07")));
}

/// The `.repo` file the package carries, its one section's `gpgkey=` set to `key`.
fn with_gpgkey(tree: &std::path::Path, key: &str) {
    let dir = tree.join("etc/yum.repos.d");
    for e in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap_or_else(|e| panic!("{e}"));
        // The world's packages have none (gpgcheck=0); NVIDIA's name their own key.
        let mut out: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with("gpgkey"))
            .map(str::to_string)
            .collect();
        out.push(format!("gpgkey={key}"));
        std::fs::write(e.path(), out.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A failure of the first converge's one transaction that is bad input keeps its kind to the
/// exit code (issue 40, item 5): the package's own `.repo` names a key outside its repo —
/// `..` out of it, a file of the build host, `http:` — which dnf would read from the build host
/// (issue 43, item 1). Exit 2, the step names the key, nothing installed, no key imported.
#[rstest]
#[case::dot_dot_out_of_the_repo(
    "file:///var/nvidia-driver-local-repo-rhel9-570.124.06/../../tmp/gpuhost-key.pub"
)]
#[case::a_file_of_the_host("file:///etc/pki/rpm-gpg/RPM-GPG-KEY-site")]
#[case::plain_http("http://mirror.example/key.pub")]
fn a_repo_key_outside_the_package_is_bad_input_even_inside_the_transaction(#[case] key: &str) {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rpm = world::repacked(DRIVER_LOCAL_EL9_570, dir.path(), |t| with_gpgkey(t, key));
    let before = root.rpmdb_snapshot();
    let (rc, rep) = apply(&root, &rpm);
    assert_eq!(rc, 2, "{rep:#}");
    assert_eq!(
        root.rpmdb_snapshot(),
        before,
        "something was installed: {rep:#}"
    );
    let failed = failed_steps(&rep);
    assert!(!failed.is_empty(), "{rep:#}");
    assert!(
        failed.iter().all(|f| f.contains(&format!("gpgkey={key}"))),
        "{failed:#?}"
    );
    for s in rep["steps"].as_array().into_iter().flatten() {
        assert_ne!(s["outcome"], "partial", "{s:#}");
    }
}

/// Issue 53, item 3: the `.repo`'s `gpgkey` through a link of the package (`zz-b -> .`):
/// `…/zz-b/../k.pub` reads lexically as the repo's own `k.pub`, and really as `/var/k.pub`.
/// Refused before any change, naming the key (before: passed the check, then the transaction
/// failed after changing the root).
#[test]
fn a_repo_key_through_a_link_of_the_package_is_refused_before_any_change() {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut key = String::new();
    let rpm = world::repacked(DRIVER_LOCAL_EL9_570, dir.path(), |t| {
        let repo = repo_folder(t);
        std::fs::write(repo.join("k.pub"), "not a key\n").unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(".", repo.join("zz-b")).unwrap_or_else(|e| panic!("{e}"));
        let inside = repo.strip_prefix(t).unwrap_or_else(|e| panic!("{e}"));
        key = format!("file:///{}/zz-b/../k.pub", inside.display());
        with_gpgkey(t, &key);
    });
    let before = root.rpmdb_snapshot();
    let (rc, rep) = apply(&root, &rpm);
    assert_eq!(rc, 2, "{rep:#}");
    assert_eq!(
        root.rpmdb_snapshot(),
        before,
        "something was installed: {rep:#}"
    );
    let failed = failed_steps(&rep);
    assert!(
        !failed.is_empty() && failed.iter().all(|f| f.contains("a link on the way")),
        "{failed:#?}"
    );
}

/// The local repo package's repo folder in the unpacked tree `t`.
fn repo_folder(t: &std::path::Path) -> std::path::PathBuf {
    let var = t.join("var");
    std::fs::read_dir(&var)
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no repo folder under {}", var.display()))
}

/// A local repo package whose payload holds what the package's own folders should not: a link
/// out of its repo (absolute, or `..` climbing out), a file outside its folders, or a package
/// its repo's metadata does not know (bytes changed after createrepo). Read by gpuhost's own
/// reader (issue 43, item 1; issue 42's bad input): exit 2 before any change, the entry named,
/// nothing written where the link points (the reader never creates such a link).
#[rstest]
#[case::an_absolute_link_out_of_the_repo("/tmp/gpuhost-payload-escape", "leaves /var/")]
#[case::a_relative_link_climbing_out("../../../tmp/gpuhost-payload-escape", "leaves /var/")]
#[case::a_file_outside_its_folders("", "outside the package's own folders")]
#[case::a_package_its_metadata_does_not_know(
    "",
    "does not match its repo metadata's sha256 checksum"
)]
fn a_payload_that_leaves_its_folders_is_refused_before_any_change(
    #[case] link: &str,
    #[case] said: &str,
) {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let escape = std::path::Path::new("/tmp/gpuhost-payload-escape");
    let _ = std::fs::remove_dir_all(escape);
    let metadata = said.contains("metadata");
    let rpm = world::repacked(DRIVER_LOCAL_EL9_570, dir.path(), |t| {
        let repo = repo_folder(t);
        if !link.is_empty() {
            std::os::unix::fs::symlink(link, repo.join("escape")).unwrap_or_else(|e| panic!("{e}"));
        } else if metadata {
            plant(t, "metadata");
        } else {
            std::fs::create_dir_all(t.join("etc/cron.d")).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(
                t.join("etc/cron.d/gpuhost-payload"),
                "* * * * * root true\n",
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
    });
    let before = root.rpmdb_snapshot();
    let (rc, rep) = apply(&root, &rpm);
    assert_eq!(rc, 2, "{rep:#}");
    assert_eq!(
        root.rpmdb_snapshot(),
        before,
        "something was installed: {rep:#}"
    );
    let failed = failed_steps(&rep);
    assert!(
        !failed.is_empty() && failed.iter().all(|f| f.contains(said)),
        "{failed:#?}"
    );
    assert!(!escape.exists(), "{} was made", escape.display());
    assert!(!root.join("etc/cron.d/gpuhost-payload").exists());
}

/// Issue 53, item 3: one local repo package, one answer from every command that reads it.
/// A link in the package's repo through another of its links (`zz-b -> .`), lexically inside
/// the repo, really climbing out of the unpacked tree onto the build host; a package its
/// repo's metadata does not know. `plan`, `apply --dry-run`, `apply` and `bundle` each exit 2
/// naming it (before: `plan` read the first from the build host and said 0, and passed the
/// second), nothing installed, no bundle written.
#[rstest]
#[case::a_link_through_a_link_out_of_the_tree("link", "which leaves")]
#[case::a_package_its_metadata_does_not_know("metadata", "does not match its repo metadata")]
fn one_package_gets_one_answer_from_plan_and_apply(#[case] defect: &str, #[case] said: &str) {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rpm = world::repacked(DRIVER_LOCAL_EL9_570, dir.path(), |t| plant(t, defect));
    let before = root.rpmdb_snapshot();
    for cmd in [&["plan"][..], &["apply", "--dry-run"], &["apply"]] {
        let profile = profile("ol9-rhck");
        let local = format!("driver.local_repo_rpm={rpm}");
        let mut args = cmd.to_vec();
        args.extend(["--format", "json", "--profile", &profile, "--set", &local]);
        args.extend(["--set", "driver.replace_local_repo=true"]);
        let o = root.gpuhost(&args);
        let rep = report(&o);
        assert_eq!(code(&o), 2, "{cmd:?}: {rep:#}");
        assert!(rep.to_string().contains(said), "{cmd:?}: {rep:#}");
        assert_eq!(root.rpmdb_snapshot(), before, "{cmd:?} installed something");
    }
    // `gpuhost bundle` reads the package by the same rules: refused, no bundle written.
    let out = dir.path().join("bundle");
    let o = root.gpuhost(&[
        "bundle",
        "--profile",
        &profile("ol9-rhck"),
        "--set",
        &format!("driver.local_repo_rpm={rpm}"),
        "--out",
        &out.display().to_string(),
        "--format",
        "json",
    ]);
    let said_all = format!("{}{}", world::stdout(&o), world::stderr(&o));
    assert_eq!(code(&o), 2, "bundle: {said_all}");
    assert!(said_all.contains(said), "bundle: {said_all}");
    assert!(!out.exists(), "bundle: {} was written", out.display());
}

/// The defect of [`one_package_gets_one_answer_from_plan_and_apply`] planted in the unpacked
/// tree `t` of a local repo package.
fn plant(t: &std::path::Path, defect: &str) {
    let repo = repo_folder(t);
    if defect == "link" {
        let link = |to: &str, at: &str| {
            std::os::unix::fs::symlink(to, repo.join(at)).unwrap_or_else(|e| panic!("{e}"))
        };
        link(".", "zz-b");
        link(
            &("zz-b/".repeat(8) + &"../".repeat(8) + "etc/hostname"),
            "zz-extra",
        );
        return;
    }
    let rpm = walk_rpms(&repo)
        .into_iter()
        .find(|p| p.to_string_lossy().contains("nvidia-settings"))
        .unwrap_or_else(|| panic!("no nvidia-settings in {}", repo.display()));
    let mut bytes = std::fs::read(&rpm).unwrap_or_else(|e| panic!("{e}"));
    bytes.extend(b"appended after createrepo");
    std::fs::write(&rpm, bytes).unwrap_or_else(|e| panic!("{e}"));
}

/// The `.rpm` files under `dir`, at any depth.
fn walk_rpms(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(
                std::fs::read_dir(&p)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .flatten()
                    .map(|e| e.path()),
            );
        } else if p.extension().is_some_and(|e| e == "rpm") {
            out.push(p);
        }
    }
    out
}

/// An aarch64 local repo package whose repo holds x86_64 packages (issue 43, item 6): refused
/// by the check of the package, before any change (before: the build dependencies went in, then
/// the transaction failed), naming a package and the machine.
#[test]
fn an_aarch64_package_with_an_x86_64_repo_inside_is_refused_before_any_change() {
    if !world::aarch64_ready() {
        return;
    }
    let root = Root::new(Os::Ol9Aarch64, &[world::UEK9_ARM]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rpm = world::repacked(world::DRIVER_LOCAL_EL9_580_AARCH64, dir.path(), |t| {
        for p in walk_rpms(&repo_folder(t)) {
            let name = p.to_string_lossy().to_string();
            if let Some(stem) = name.strip_suffix(".aarch64.rpm") {
                std::fs::rename(&p, format!("{stem}.x86_64.rpm")).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    });
    let before = root.rpmdb_snapshot();
    let o = root.gpuhost(&[
        "apply",
        "--format",
        "json",
        "--profile",
        &profile("ol9-uek"),
        "--set",
        &format!("driver.local_repo_rpm={rpm}"),
    ]);
    let rep = report(&o);
    assert_eq!(code(&o), 2, "{rep:#}");
    assert_eq!(root.rpmdb_snapshot(), before, "{rep:#}");
    let failed = failed_steps(&rep);
    assert!(
        !failed.is_empty()
            && failed.iter().all(|f| f
                .contains("its repo holds packages built for another machine (")
                && f.contains(".x86_64.rpm), but this host is aarch64")),
        "{failed:#?}"
    );
}

/// SIGTERM while gpuhost reads the local repo package (issue 43, item 4: SIGTERM stops every
/// phase): the reader stops between blocks, exit 143, nothing installed and nothing staged.
/// The package carries 512 MiB of zeros in its repo folder, so its payload takes seconds to
/// read; the signal goes once gpuhost's reader has it open: the copy staged on the root's disk
/// (a hard link here), which an apply reads once before the first change.
#[test]
fn sigterm_while_the_package_is_read_stops_before_any_change() {
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rpm = world::repacked(DRIVER_LOCAL_EL9_570, dir.path(), |t| {
        let f = std::fs::File::create(repo_folder(t).join("filler.bin"))
            .unwrap_or_else(|e| panic!("{e}"));
        f.set_len(512 << 20).unwrap_or_else(|e| panic!("{e}"));
    });
    let before = root.rpmdb_snapshot();
    let child = apply_cmd(&root, &rpm)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let fds = std::path::PathBuf::from(format!("/proc/{}/fd", child.id()));
    let staged = root.join("/var/cache/gpuhost/packages");
    let start = std::time::Instant::now();
    'open: loop {
        for e in std::fs::read_dir(&fds).into_iter().flatten().flatten() {
            if std::fs::read_link(e.path()).is_ok_and(|l| l.starts_with(&staged)) {
                break 'open;
            }
        }
        assert!(start.elapsed().as_secs() < 60, "gpuhost never read {rpm}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let k = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(k.success());
    let o = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let rep = report(&o);
    assert_eq!(code(&o), 143, "{rep:#}");
    assert!(
        rep.to_string()
            .contains("stopped by SIGTERM while reading a package, before any change"),
        "{rep:#}"
    );
    assert_eq!(root.rpmdb_snapshot(), before);
    let cache = root.join("/var/cache/gpuhost");
    let left: Vec<_> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left in {}: {left:?}", cache.display());
}
