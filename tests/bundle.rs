//! `gpuhost bundle` and `apply --bundle` (issue 17), end to end: bundles made from the test
//! world with the real dnf, createrepo_c and modifyrepo_c, applied to fresh install roots whose
//! repo files all point at nothing reachable.

#![allow(clippy::panic)] // a test fails by panicking

#[path = "world/mod.rs"]
mod world;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use world::{
    code, report, stderr, stdout, Os, Root, World, CUDA_LOCAL_EL8_12_2, CUDA_LOCAL_EL8_12_4,
    CUDA_LOCAL_EL9_12_2, DRIVER_LOCAL_EL8_580, DRIVER_LOCAL_EL9_570, RHCK8, RHCK9, UEK8_NEW,
    UEK8_NO_DEVEL, UEK8_OLD, UEK9,
};

/// The driver set's folder a bundle of the 12.2 local repo carries, and the cache folder nodes
/// keep it in.
const DRIVER_SET: &str = "cuda-repo-rhel8-12-2-local-12.2.2_535.104.05";

/// A site profile: the world's ol8-uek (Docker CE and the toolkit from the world's mirrors),
/// NVIDIA's local repo package, and NCCL linked under a prefix (packages from another repo).
fn site_profile(dir: &Path, base: &str, driver: &str) -> String {
    let p = dir.join(format!("site-{base}.toml"));
    fs::write(
        &p,
        format!(
            "extends = \"{}\"\n\n[driver]\nlocal_repo_rpm = \"{}\"\n\n[[prefix_links]]\npackages = [\"libnccl\", \"libnccl-devel\"]\nprefix = \"/opt/nvidia/nccl\"\n",
            world::profile(base),
            World::get().cuda_local(driver).display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    p.display().to_string()
}

/// `gpuhost bundle … --root SRC --out OUT --format json`: the report.
fn bundle(src: &Root, profile: &str, out: &Path, extra: &[&str]) -> Value {
    let out_s = out.display().to_string();
    let mut args = vec![
        "bundle",
        "--profile",
        profile,
        "--out",
        out_s.as_str(),
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let o = src.gpuhost(&args);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    report(&o)
}

/// The root's repos point at nothing reachable: the mirrors are gone and every baseurl names a
/// directory that does not exist.
fn cut_off(root: &Root) {
    let _ = fs::remove_dir_all(root.join("srv/repos"));
    for e in fs::read_dir(root.join("etc/yum.repos.d")).unwrap_or_else(|e| panic!("{e}")) {
        let p = e.unwrap_or_else(|e| panic!("{e}")).path();
        let text = fs::read_to_string(&p).unwrap_or_default();
        let cut: Vec<String> = text
            .lines()
            .map(|l| match l.strip_prefix("baseurl=") {
                Some(_) => "baseurl=file:///nonexistent/gpuhost-offline/".to_string(),
                None => l.to_string(),
            })
            .collect();
        fs::write(&p, cut.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
    }
    // Proof that dnf cannot reach any repo of this root.
    let o = root.dnf(&["makecache"]);
    assert!(!o.status.success(), "dnf still reaches a repo");
}

fn apply_bundle(root: &Root, cmd: &str, bundle: &Path) -> (i32, Value, String) {
    let b = bundle.display().to_string();
    let o = root.gpuhost(&[cmd, "--bundle", b.as_str(), "--format", "json"]);
    let text = stderr(&o);
    let r = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (code(&o), r, text)
}

fn outcomes(r: &Value) -> Vec<(String, String)> {
    r["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| {
                    (
                        s["id"].as_str().unwrap_or_default().to_string(),
                        s["outcome"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The root's tree, without rpm's sqlite shared-memory index (every reader rewrites it).
fn tree(root: &Root) -> String {
    root.tree_snapshot()
        .lines()
        .filter(|l| !l.starts_with("var/lib/rpm/rpmdb.sqlite-shm"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rpmdb(root: &Root) -> Vec<String> {
    root.rpmdb_snapshot()
        .lines()
        .filter(|l| !l.starts_with("gpg-pubkey"))
        .map(str::to_string)
        .collect()
}

/// A bundle's `manifest.json`.
fn manifest_of(bundle: &Path) -> Value {
    serde_json::from_str(
        &fs::read_to_string(bundle.join("manifest.json")).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The NEVRAs a manifest lists.
fn packages_of(manifest: &Value) -> Vec<&str> {
    manifest["packages"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// An apply report in which every step is unchanged or skipped: the root was converged.
fn assert_converged(r: &Value) {
    assert!(
        outcomes(r)
            .iter()
            .all(|(_, o)| o == "unchanged" || o == "skipped"),
        "{r:#}"
    );
}

/// The site profile's bundle, made from a fresh OL8 UEK root at `DIR/b`.
fn ol8_bundle(dir: &Path) -> PathBuf {
    let profile = site_profile(dir, "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let out = dir.join("b");
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    bundle(&src, &profile, &out, &[]);
    out
}

/// `apply --bundle` on `root`, cut off from its repos: refused as bad input (exit 2) with the
/// root left as it was. Its stderr.
fn refused_offline(root: &Root, bundle: &Path) -> String {
    cut_off(root);
    let before = tree(root);
    let (c, _, err) = apply_bundle(root, "apply", bundle);
    assert_eq!(c, 2, "{err}");
    assert_eq!(tree(root), before, "the root changed: {err}");
    err
}

fn copy_dir(from: &Path, to: &Path) {
    let o = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_bundle_converges_an_offline_root_exactly_like_the_online_repos() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let out = tmp.path().join("gpuhost-bundle");
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    let before = tree(&src);
    let made = bundle(&src, &profile, &out, &["--tar"]);
    assert_eq!(tree(&src), before, "making a bundle changed its root");
    assert_eq!(made["kernels"], serde_json::json!([UEK8_NEW]));
    assert_eq!(
        made["modules"],
        serde_json::json!(["nvidia-driver:open-dkms"])
    );
    let tar = PathBuf::from(made["tarball"].as_str().unwrap_or_default());
    assert!(tar.is_file(), "{made:#}");

    // Everything the profile installs is there, with its dependencies.
    let manifest = manifest_of(&out);
    let packages = packages_of(&manifest);
    for want in [
        "kernel-uek-devel-0:5.15.0-204.147.6.2.el8uek.x86_64",
        "gcc-toolset-11-gcc-",
        "dkms-",
        "bash-", // dkms's dependency: resolved against a clean root
        "kmod-nvidia-open-dkms-3:535.104.05",
        "nvidia-driver-3:535.104.05",
        "docker-ce-3:",
        "containerd.io-",
        "nvidia-container-toolkit-0:1.17.8",
        "libnvidia-container1-0:1.17.8",
        "libnccl-",
        "libnccl-devel-",
    ] {
        assert!(
            packages.iter().any(|p| p.starts_with(want)),
            "{want} not in {packages:?}"
        );
    }
    assert!(
        !packages
            .iter()
            .any(|p| p.starts_with("kmod-nvidia-latest-dkms")
                || p.starts_with("podman")
                || p.starts_with("nvidia-container-toolkit-0:1.18")),
        "{packages:?}"
    );
    // NVIDIA's local repo package is not carried (issue 42): its driver set is, the packages in
    // the repo and NVIDIA's metadata in driver/; the bundle is what the node installs.
    assert_eq!(manifest["driver_repo_rpm"], Value::Null);
    assert_eq!(
        manifest["driver_set"]["path"],
        format!("driver/{DRIVER_SET}")
    );
    assert_eq!(manifest["driver_set"]["file"], CUDA_LOCAL_EL8_12_2);
    let files: Vec<&str> = manifest["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(
        !files.iter().any(|f| f.ends_with(CUDA_LOCAL_EL8_12_2)
            || f.contains("cuda-toolkit")
            || f.contains("cuda-cudart")),
        "{files:?}"
    );
    assert!(
        !files
            .iter()
            .any(|f| f.starts_with("driver/") && f.ends_with(".rpm")),
        "{files:?}"
    );
    let set: Vec<&str> = manifest["driver_set"]["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        set.contains(&"nvidia-driver") && set.contains(&"kmod-nvidia-open-dkms"),
        "{set:?}"
    );
    assert!(
        made["driver_set"]["package_bytes"].as_u64().unwrap_or(0) > 0,
        "{made:#}"
    );

    // The same profile, online, on another fresh root.
    let online = Root::new(Os::Ol8, &[UEK8_NEW]);
    let o = online.gpuhost(&["apply", "--profile", &profile, "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));

    // A bundle made from the converged root holds the same packages: it is resolved against a
    // clean target, not against what the root already has (its NVIDIA local repo included).
    let again_out = tmp.path().join("from-converged");
    let before = tree(&online);
    let again = bundle(&online, &profile, &again_out, &[]);
    assert_eq!(tree(&online), before, "making a bundle changed its root");
    let again_manifest = manifest_of(&again_out);
    assert_eq!(
        again_manifest["packages"], manifest["packages"],
        "{again:#}"
    );
    assert_eq!(again["modules"], made["modules"]);

    // Offline: only the bundle.
    let off = Root::new(Os::Ol8, &[UEK8_NEW]);
    cut_off(&off);
    let (c, r, err) = apply_bundle(&off, "plan", &out);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert!(
        outcomes(&r).iter().any(|(_, o)| o == "would-change"),
        "{r:#}"
    );
    let (c, r, err) = apply_bundle(&off, "apply", &out);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert_eq!(
        r["bundle"]["packages"],
        manifest["packages"].as_array().map_or(0, Vec::len)
    );
    // The manifest's SHA-256 that apply reports is the one bundle printed.
    assert_eq!(
        r["bundle"]["manifest_sha256"], made["manifest_sha256"],
        "{r:#}"
    );
    assert_eq!(
        made["manifest_sha256"],
        gpuhost_host::fsutil::sha256_file(&out.join("manifest.json"))
            .unwrap_or_else(|e| panic!("{e}"))
    );
    for (id, outcome) in outcomes(&r) {
        assert!(
            ["changed", "unchanged", "skipped", "deferred"].contains(&outcome.as_str()),
            "{id}: {outcome}\n{r:#}"
        );
    }
    // The same packages, but NVIDIA's local repo package: the offline node keeps the driver
    // set in gpuhost's cache instead (checked against NVIDIA's metadata), no /var/cuda-repo-….
    let repo_pkg = "cuda-repo-rhel8-12-2-local";
    let online_pkgs: Vec<String> = rpmdb(&online)
        .into_iter()
        .filter(|p| !p.starts_with(repo_pkg))
        .collect();
    assert_eq!(rpmdb(&off), online_pkgs, "offline and online differ");
    assert!(!off.join(&format!("var/{repo_pkg}")).exists());
    let cached = off.join(&format!("var/lib/gpuhost/driver-repo/{DRIVER_SET}"));
    assert!(
        cached.join("repodata/repomd.xml").is_file(),
        "{}",
        cached.display()
    );
    let repo_file = fs::read_to_string(off.join("etc/yum.repos.d/gpuhost-driver-repo.repo"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        repo_file.contains(&format!("/var/lib/gpuhost/driver-repo/{DRIVER_SET}")),
        "{repo_file}"
    );
    assert!(off
        .join(&format!("lib/modules/{UEK8_NEW}/extra/nvidia.ko.xz"))
        .is_file());
    assert!(off
        .join("opt/nvidia/nccl/lib/libnccl.so.2")
        .symlink_metadata()
        .is_ok());

    // Again, from the tarball: nothing changes and no dnf starts.
    let b = tar.display().to_string();
    let (o, execs) = off.gpuhost_traced(&["apply", "--bundle", b.as_str(), "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let again = report(&o);
    for (id, outcome) in outcomes(&again) {
        assert!(
            ["unchanged", "skipped"].contains(&outcome.as_str()),
            "{id}: {outcome}\n{again:#}"
        );
    }
    if let Some(execs) = execs {
        assert!(!execs.iter().any(|e| e == "dnf"), "{execs:?}");
    }
    // The tarball is unpacked under $TMPDIR (created when missing) and removed afterwards.
    let (o, unpacked) = with_tmpdir(&off, tmp.path(), &["plan", "--bundle", b.as_str()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(unpacked, Some(vec![]), "the extraction was left behind");
}

/// `gpuhost ARGS` on `root` with `$TMPDIR` a directory under `dir` that does not exist yet; what
/// that directory holds afterwards (`None`: gpuhost never made it).
fn with_tmpdir(
    root: &Root,
    dir: &Path,
    args: &[&str],
) -> (std::process::Output, Option<Vec<String>>) {
    let tmpdir = dir.join("tmpdir");
    let o = root
        .gpuhost_cmd(args)
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    (o, names_in(&tmpdir))
}

/// The names of the entries of `dir`; `None` when it cannot be read (it does not exist).
fn names_in(dir: &Path) -> Option<Vec<String>> {
    let entries = fs::read_dir(dir).ok()?;
    Some(
        entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
    )
}

/// What a case does to a copy of the bundle.
type Tamper<'a> = &'a dyn Fn(&Path);

#[test]
fn a_changed_missing_or_extra_file_is_refused_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = ol8_bundle(tmp.path());
    let off = Root::new(Os::Ol8, &[UEK8_NEW]);
    cut_off(&off);
    let before = tree(&off);
    let rpm = names_in(&out.join("repo/Packages"))
        .unwrap_or_default()
        .into_iter()
        .find(|n| n.starts_with("docker-ce-cli"))
        .unwrap_or_else(|| panic!("no docker-ce-cli in the bundle"));
    let cases: [(&str, Tamper<'_>, String); 4] = [
        (
            "changed",
            &|b: &Path| {
                let p = b.join("repo/Packages").join(&rpm);
                let mut data = fs::read(&p).unwrap_or_default();
                let last = data.len() - 1;
                data[last] ^= 0xff;
                fs::write(&p, data).unwrap_or_else(|e| panic!("{e}"));
            },
            format!("repo/Packages/{rpm} has changed"),
        ),
        (
            "missing",
            &|b: &Path| {
                fs::remove_file(b.join(format!("driver/{DRIVER_SET}/repodata/repomd.xml")))
                    .unwrap_or_else(|e| panic!("{e}"))
            },
            format!("driver/{DRIVER_SET}/repodata/repomd.xml is missing"),
        ),
        (
            "extra",
            &|b: &Path| {
                fs::copy(
                    World::get().cuda_local(CUDA_LOCAL_EL8_12_2),
                    b.join("repo/Packages/extra.rpm"),
                )
                .unwrap_or_else(|e| panic!("{e}"));
            },
            "repo/Packages/extra.rpm is not in the manifest".to_string(),
        ),
        (
            "profile",
            &|b: &Path| {
                let p = b.join("profile.toml");
                let t = fs::read_to_string(&p).unwrap_or_default();
                fs::write(&p, t.replace("1.17.8", "1.17.7")).unwrap_or_else(|e| panic!("{e}"));
            },
            "profile.toml has changed".to_string(),
        ),
    ];
    for (what, tamper, needle) in cases {
        let b = tmp.path().join(format!("tampered-{what}"));
        copy_dir(&out, &b);
        tamper(&b);
        for cmd in ["plan", "apply"] {
            let (c, _, err) = apply_bundle(&off, cmd, &b);
            assert_eq!(c, 2, "{what} {cmd}: {err}");
            assert!(err.contains(&needle), "{what} {cmd}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        }
        assert_eq!(tree(&off), before, "{what}: the root changed");
    }
    // A tarball of a tampered bundle is refused the same way.
    let o = std::process::Command::new("tar")
        .arg("-cf")
        .arg(tmp.path().join("t.tar"))
        .arg("-C")
        .arg(tmp.path())
        .arg("tampered-extra")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success());
    let t = tmp.path().join("t.tar").display().to_string();
    let (o, unpacked) = with_tmpdir(&off, tmp.path(), &["apply", "--bundle", t.as_str()]);
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{err}");
    assert!(
        err.contains("repo/Packages/extra.rpm is not in the manifest"),
        "{err}"
    );
    assert_eq!(tree(&off), before);
    // Its extraction is removed on the refusal too.
    assert_eq!(unpacked, Some(vec![]), "the extraction was left behind");
}

/// Packages dnf cannot resolve: exit 1 naming the step, and nothing at --out (nor a tarball,
/// nor the scratch root beside it).
#[test]
fn a_bundle_whose_packages_cannot_be_resolved_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    let out = tmp.path().join("b").display().to_string();
    let o = src.gpuhost(&[
        "bundle",
        "--profile",
        &profile,
        "--set",
        "docker.version=99.9.9",
        "--out",
        &out,
        "--tar",
    ]);
    assert_eq!(code(&o), 1, "{}\n{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("cannot be resolved") && stderr(&o).contains("docker"),
        "{}",
        stderr(&o)
    );
    let left: Vec<String> = names_in(tmp.path())
        .unwrap_or_else(|| panic!("{} cannot be read", tmp.path().display()))
        .into_iter()
        .filter(|n| !n.ends_with(".toml"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_bundle_for_another_host_is_refused() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = ol8_bundle(tmp.path());

    // Oracle Linux 9.
    let err = refused_offline(&Root::new(Os::Ol9, &[UEK9]), &out);
    assert!(
        err.contains("was made for Oracle Linux 8") && err.contains("runs Oracle Linux Server 9"),
        "{err}"
    );

    // Not Oracle Linux (running its own kernel): the answer it gets without --bundle, not a
    // kernel the bundle lacks.
    let ubuntu = Root::new(Os::Ubuntu, &[]);
    let debian_kernel = ["--kernel-release", "6.1.0-28-amd64"];
    let mut args = vec!["apply", "--profile", "ol8-uek"];
    args.extend(debian_kernel);
    let without = ubuntu.gpuhost(&args);
    let before = tree(&ubuntu);
    let b = out.display().to_string();
    let mut args = vec!["apply", "--bundle", b.as_str()];
    args.extend(debian_kernel);
    let with = ubuntu.gpuhost(&args);
    let err = stderr(&with);
    assert_eq!((code(&with), code(&without)), (2, 2), "{err}");
    assert_eq!(tree(&ubuntu), before);
    assert!(
        err.contains("not Oracle Linux") && err.contains("Ubuntu") && !err.contains("headers"),
        "{err}"
    );
    assert_eq!(err, stderr(&without));

    // Another kernel: the bundle has no headers for it.
    let other = Root::new(Os::Ol8, &[UEK8_OLD]);
    let err = refused_offline(&other, &out);
    assert!(
        err.contains(&format!("carries headers for {UEK8_NEW} only"))
            && err.contains(&format!("--kernel-release {UEK8_OLD}")),
        "{err}"
    );

    // GPUs the bundle's kernel modules cannot drive: it was made without a GPU on PCI, so it
    // carries the open modules only, pinned in its profile; a Volta host is refused.
    let volta = Root::new(Os::Ol8, &[UEK8_NEW]);
    volta.add_pci_device("0000:19:00.0", 0x10de, 0x1db5, 0x030200);
    let err = refused_offline(&volta, &out);
    assert!(
        err.contains("Tesla V100 SXM2 32GB (Volta)") && err.contains("nvidia-driver:open-dkms"),
        "{err}"
    );

    // Another profile than the bundle's.
    let b = out.display().to_string();
    let o = other.gpuhost(&["apply", "--bundle", b.as_str(), "--profile", "ol8-rhck"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("was made for profile"),
        "{}",
        stderr(&o)
    );
}

/// Air-gapped (issue 24, item 5): after `apply --bundle` converged, a new UEK from a local
/// mirror became the default boot kernel, and the bundle carries no headers for it. The
/// trigger (`kernel-added`) serves the kernel the bundle carries and keeps it the default boot,
/// records and reports why, and exits 1, exactly as online without headers.
#[test]
fn a_new_default_kernel_the_bundle_has_no_headers_for_is_kept_from_the_next_boot() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = ol8_bundle(tmp.path());
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    cut_off(&root);
    let (c, r, err) = apply_bundle(&root, "apply", &out);
    assert_eq!(c, 0, "{r:#}\n{err}");
    let rpm = World::get().extra_rpm(&format!("kernel-uek-{UEK8_NO_DEVEL}.rpm"));
    let copy = root.join("/tmp/kernel-uek.rpm");
    fs::copy(rpm, &copy).unwrap_or_else(|e| panic!("{e}"));
    let copy = copy.display().to_string();
    root.dnf_ok(&["-y", "--disablerepo=*", "install", copy.as_str()]);
    root.kernel_install_add(UEK8_NO_DEVEL);

    // As on the host, where the running kernel is the target.
    let b = out.display().to_string();
    let o = root.gpuhost(&[
        "apply",
        "--bundle",
        b.as_str(),
        "--kernel-release",
        UEK8_NEW,
        "--format",
        "json",
    ]);
    let r = report(&o);
    assert_eq!(code(&o), 1, "{r:#}\n{}", stderr(&o));
    assert_eq!(r["kernel_guard"]["kept"], UEK8_NEW, "{r:#}");
    assert!(
        r["summary"]
            .as_str()
            .unwrap_or_default()
            .starts_with("failed: kernel guard"),
        "{r:#}"
    );
    // Again, as the trigger runs it in an install root (the newest kernel, no --kernel-release).
    root.kernel_install_add(UEK8_NO_DEVEL);
    fs::remove_file(root.join("/var/lib/gpuhost/kernel-guard.json"))
        .unwrap_or_else(|e| panic!("{e}"));

    let o = root.gpuhost(&["kernel-added", UEK8_NO_DEVEL, "--format", "json"]);
    let r = report(&o);
    assert_eq!(code(&o), 1, "{r:#}\n{}", stderr(&o));
    let g = &r["kernel_guard"];
    assert_eq!(g["action"], "kept", "{r:#}");
    assert_eq!(g["kernel"], UEK8_NO_DEVEL, "{r:#}");
    assert_eq!(g["kept"], UEK8_NEW, "{r:#}");
    let why = g["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!("carries headers for {UEK8_NEW} only")),
        "{r:#}"
    );
    // The kernel the bundle carries is served: nothing failed, nothing changed.
    assert_converged(&r);
    let grubenv = root.read("/boot/grub2/grubenv");
    assert!(
        grubenv
            .lines()
            .any(|l| l.starts_with("saved_entry=") && l.ends_with(UEK8_NEW)),
        "{grubenv}"
    );
    let rec: Value = serde_json::from_str(&root.read("/var/lib/gpuhost/kernel-guard.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rec["kernel"], UEK8_NO_DEVEL, "{rec:#}");
    assert_eq!(rec["reason"], g["reason"], "{rec:#}");
    assert!(
        rec["fix"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("--kernel-release {UEK8_NO_DEVEL}")),
        "{rec:#}"
    );
}

#[test]
fn bad_bundle_arguments_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    let busy = tmp.path().join("busy");
    fs::create_dir_all(&busy).unwrap_or_else(|e| panic!("{e}"));
    fs::write(busy.join("x"), "x").unwrap_or_else(|e| panic!("{e}"));
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--out".into(), busy.display().to_string()],
            "exists and is not empty",
        ),
        (
            vec![
                "--out".into(),
                tmp.path().join("no/such/parent/b").display().to_string(),
            ],
            "does not exist",
        ),
        (
            vec![
                "--out".into(),
                tmp.path().join("b").display().to_string(),
                "--set".into(),
                "driver.stream=latest".into(),
            ],
            "precompiled stream",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["bundle", "--profile", profile.as_str()];
        args.extend(extra.iter().map(String::as_str));
        let o = src.gpuhost(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    // A profile that manages the driver but names no driver package.
    let bare = world::profile("ol8-uek");
    let out = tmp.path().join("bare").display().to_string();
    let o = src.gpuhost(&["bundle", "--profile", &bare, "--out", &out]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("names no driver package"),
        "{}",
        stderr(&o)
    );
    // The profile is for OL8, the target root is OL9.
    let ol9 = Root::new(Os::Ol9, &[UEK9]);
    let out = tmp.path().join("b9").display().to_string();
    let o = ol9.gpuhost(&["bundle", "--profile", &profile, "--out", &out]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is for Oracle Linux 8"),
        "{}",
        stderr(&o)
    );
    // Nothing was left behind.
    let left: Vec<String> = names_in(tmp.path())
        .unwrap_or_else(|| panic!("{} cannot be read", tmp.path().display()))
        .into_iter()
        .filter(|n| !n.ends_with(".toml") && n != "busy")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// NVIDIA's precompiled kmods fit no Oracle Linux kernel (NVIDIA builds them for RHEL's
/// kernels only, matched exactly): `bundle` refuses a precompiled stream for an Oracle RHCK root,
/// OL8 and OL9, as for a UEK one, before anything is written (exit 2), naming the kernel and the
/// way out; the source root is left as it was (issue 41 item 5).
#[test]
fn a_precompiled_stream_is_refused_for_a_bundle_of_an_oracle_rhck_root() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let unchanged = |r: &Root| -> Vec<String> {
        r.tree_snapshot()
            .lines()
            .filter(|l| !l.starts_with("var/lib/rpm/"))
            .map(str::to_string)
            .collect()
    };
    for (os, kver, base, rpm, stream) in [
        (Os::Ol8, RHCK8, "ol8-rhck", CUDA_LOCAL_EL8_12_2, "latest"),
        (Os::Ol9, RHCK9, "ol9-rhck", CUDA_LOCAL_EL9_12_2, "535"),
    ] {
        let profile = site_profile(tmp.path(), base, rpm);
        let src = Root::new(os, &[kver]);
        let (files, rpmdb) = (unchanged(&src), src.rpmdb_snapshot());
        let out = tmp.path().join(format!("b-{base}"));
        let set = format!("driver.stream={stream}");
        let o = src.gpuhost(&[
            "bundle",
            "--profile",
            &profile,
            "--out",
            &out.display().to_string(),
            "--set",
            &set,
        ]);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{base}: {err}");
        assert!(
            err.contains(&format!("\"{stream}\" is NVIDIA's precompiled stream"))
                && err.contains(&format!("kernel {kver} is Oracle's RHCK build"))
                && err.contains("gpuhost kmod build"),
            "{base}: {err}"
        );
        assert!(!out.exists(), "{base}: {} was written", out.display());
        assert_eq!(src.rpmdb_snapshot(), rpmdb, "{base}");
        assert_eq!(unchanged(&src), files, "{base}");
    }
    // Nothing was left behind but the profiles.
    let left: Vec<String> = names_in(tmp.path())
        .unwrap_or_else(|| panic!("{} cannot be read", tmp.path().display()))
        .into_iter()
        .filter(|n| !n.ends_with(".toml"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `--os ol8` whose repos cannot be read (offline: here a proxy that refuses every connection;
/// or a --repos file naming a closed port): the error says what to give instead, --repos or
/// --root, and quotes dnf.
#[test]
fn a_bundle_for_a_clean_os_whose_repos_cannot_be_read_says_to_give_repos_or_root() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let repos = tmp.path().join("repos.d");
    fs::create_dir_all(&repos).unwrap_or_else(|e| panic!("{e}"));
    fs::write(
        repos.join("mirror.repo"),
        "[mirror]\nname=mirror\nbaseurl=http://127.0.0.1:9/ol8/\ngpgcheck=0\nenabled=1\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let repos_s = repos.display().to_string();
    for (extra, needle) in [
        (vec![], "give --repos DIR"),
        (
            vec!["--repos", repos_s.as_str()],
            "check the .repo files in --repos",
        ),
    ] {
        let out = tmp.path().join("b").display().to_string();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
            .env("HOME", World::get().home())
            .env("https_proxy", "http://127.0.0.1:9")
            .env("http_proxy", "http://127.0.0.1:9")
            .args([
                "bundle",
                "--profile",
                &profile,
                "--os",
                "ol8",
                "--out",
                &out,
            ])
            .args(&extra)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        let err = stderr(&o);
        assert_ne!(code(&o), 0, "{extra:?}: {err}");
        assert!(
            err.contains(needle) && err.contains("--root ROOT"),
            "{extra:?}: {err}"
        );
        assert!(err.contains("dnf"), "{extra:?}: {err}");
    }
}

/// `--os ol9` with the site's own repo files and an NVSwitch system: the bundle carries Fabric
/// Manager, and an OL9 root with an NVSwitch converges from it offline.
#[test]
fn a_bundle_for_a_clean_os_with_fabric_manager() {
    let w = World::get();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let repos = tmp.path().join("repos.d");
    fs::create_dir_all(&repos).unwrap_or_else(|e| panic!("{e}"));
    let mut text = String::new();
    for id in [
        "ol9_baseos_latest",
        "ol9_appstream",
        "ol9_UEKR7",
        "ol9_developer_EPEL",
        "cuda-rhel9-network",
    ] {
        text.push_str(&format!(
            "[{id}]\nname={id}\nbaseurl=file://{}\ngpgcheck=0\nenabled=1\n\n",
            w.repo(Os::Ol9, id).display()
        ));
    }
    fs::write(repos.join("site.repo"), text).unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(tmp.path(), "ol9-uek", CUDA_LOCAL_EL9_12_2);
    let out = tmp.path().join("b");
    let docker = format!(
        "docker.repo={}",
        w.repo(Os::Ol9, "docker-ce-stable").display()
    );
    let toolkit = format!(
        "container_toolkit.repo={}",
        w.repo(Os::Ol9, "nvidia-container-toolkit").display()
    );
    let out_s = out.display().to_string();
    let repos_s = repos.display().to_string();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .env("HOME", w.home())
        .args([
            "bundle",
            "--profile",
            &profile,
            "--set",
            &docker,
            "--set",
            &toolkit,
            "--os",
            "ol9",
            "--repos",
            &repos_s,
            "--fabric-manager",
            "--out",
            &out_s,
            "--format",
            "json",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let made = report(&o);
    // The newest UEK in the repos is the one served.
    assert_eq!(made["kernels"], serde_json::json!([UEK9]), "{made:#}");
    assert_eq!(made["fabric_manager"], true);
    let plan = made["plan"]["driver"].to_string();
    assert!(plan.contains("nvidia-driver:open-dkms/fm"), "{plan}");

    let off = Root::new(Os::Ol9, &[UEK9]);
    off.add_pci_device("0000:19:00.0", 0x10de, 0x2330, 0x030200);
    off.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
    cut_off(&off);
    // nouveau holds the GPUs until a reboot: apply --reboot records the bundle for the resume.
    fs::create_dir_all(off.join("sys/module/nouveau")).unwrap_or_else(|e| panic!("{e}"));
    let b = out.display().to_string();
    let o = off.gpuhost(&[
        "apply",
        "--bundle",
        b.as_str(),
        "--reboot",
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 3, "{}\n{}", stdout(&o), stderr(&o));
    let first = report(&o);
    let fm = first["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "fabric-manager"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(fm["outcome"], "changed", "{fm:#}");
    let state: Value = serde_json::from_str(&off.read("var/lib/gpuhost/resume.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(state["args"]["bundle"], b.as_str(), "{state:#}");
    // First boot: the resume unit's `gpuhost resume` verifies and uses the bundle again.
    fs::remove_dir(off.join("sys/module/nouveau")).unwrap_or_else(|e| panic!("{e}"));
    let o = off.gpuhost(&["resume", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let r = report(&o);
    assert_eq!(r["bundle"]["source"], b.as_str(), "{r:#}");
    assert_eq!(r["exit_code"], 0, "{r:#}");
    assert_eq!(
        off.installed("nvidia-fabric-manager").as_deref(),
        Some("535.104.05-1")
    );
    let (c, r, err) = apply_bundle(&off, "apply", &out);
    assert_eq!(c, 0, "{err}");
    assert_converged(&r);
}

/// A clean target's site profile: the world's `ol<major>-uek` with NVIDIA's local repo package
/// `driver` (a path); Docker CE and the toolkit come from `--set`.
fn clean_profile(dir: &Path, major: u32, driver: &Path) -> String {
    let p = dir.join(format!("clean-ol{major}.toml"));
    fs::write(
        &p,
        format!(
            "extends = \"{}\"\n\n[driver]\nlocal_repo_rpm = \"{}\"\n",
            world::profile(&format!("ol{major}-uek")),
            driver.display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    p.display().to_string()
}

/// NVIDIA's driver-only local repo package the world has for `major` on `arch`, if any.
fn world_driver(major: u32, arch: &str) -> Option<PathBuf> {
    let dir = World::get().cuda_local("");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n.starts_with(&format!("nvidia-driver-local-repo-rhel{major}-"))
                && n.ends_with(&format!(".{arch}.rpm"))
        })
        .collect();
    names.sort();
    names.first().map(|n| dir.join(n))
}

/// `gpuhost bundle --os --arch` takes every release and architecture of the release table
/// (host/src/platform.rs). Where the world has that release's repos for that architecture, a
/// clean target made from them (`--repos`; Docker CE and the toolkit by `--set`) is a bundle
/// whose manifest says that release and architecture, whose kernel is the release's UEK built
/// for it, and whose every package is built for it or noarch (dnf resolved with
/// `--forcearch` for another architecture than this machine's). Where the world has none (OL8
/// aarch64, or an aarch64 world that could not be built), the target is still taken: dnf
/// resolves for it (`--forcearch`, in the debug log) against repos that cannot be read, which
/// it says, naming --repos.
#[test]
fn a_clean_bundle_is_made_for_every_release_and_architecture_of_the_table() {
    let w = World::get();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for r in gpuhost_host::platform::RELEASES {
        for arch in r.arches {
            let os = r.name();
            let folder = match *arch {
                "x86_64" => os.clone(),
                other => format!("{os}-{other}"),
            };
            let world_repos = w.dir().join("repos").join(&folder);
            let here = tmp.path().join(&folder);
            fs::create_dir_all(here.join("repos.d")).unwrap_or_else(|e| panic!("{e}"));
            let driver = world_driver(r.major, arch);
            match (world_repos.is_dir(), driver) {
                (true, Some(driver)) => {
                    clean_bundle_from_the_world(&here, r.major, arch, &world_repos, &driver)
                }
                (have, driver) => {
                    assert_ne!(*arch, "x86_64", "the world has no {folder} to bundle from");
                    eprintln!("{folder}: no world repos ({have}) or driver ({driver:?}) for it; checking that --os {os} --arch {arch} is taken");
                    clean_target_taken(&here, r.major, arch);
                }
            }
        }
    }
}

/// A bundle for a clean `ol<major>` on `arch`, from the world's repos of it (`world_repos`).
fn clean_bundle_from_the_world(
    here: &Path,
    major: u32,
    arch: &str,
    world_repos: &Path,
    driver: &Path,
) {
    let mut text = String::new();
    for e in fs::read_dir(world_repos).unwrap_or_else(|e| panic!("{e}")) {
        let id = e
            .unwrap_or_else(|e| panic!("{e}"))
            .file_name()
            .to_string_lossy()
            .into_owned();
        if id.starts_with(&format!("ol{major}_")) {
            text.push_str(&format!(
                "[{id}]\nname={id}\nbaseurl=file://{}\ngpgcheck=0\nenabled=1\n\n",
                world_repos.join(&id).display()
            ));
        }
    }
    let repos = here.join("repos.d");
    fs::write(repos.join("site.repo"), text).unwrap_or_else(|e| panic!("{e}"));
    let profile = clean_profile(here, major, driver);
    let out = here.join("b");
    let docker = format!(
        "docker.repo={}",
        world_repos.join("docker-ce-stable").display()
    );
    let toolkit = format!(
        "container_toolkit.repo={}",
        world_repos.join("nvidia-container-toolkit").display()
    );
    let (os, out_s, repos_s) = (
        format!("ol{major}"),
        out.display().to_string(),
        repos.display().to_string(),
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .env("HOME", World::get().home())
        .args(["bundle", "--profile", &profile, "--set", &docker])
        .args(["--set", &toolkit, "--os", &os, "--arch", arch])
        .args(["--repos", &repos_s, "--out", &out_s, "--format", "json"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&o), 0, "{os} {arch}: {}\n{}", stdout(&o), stderr(&o));
    let made = report(&o);
    assert_eq!(made["os_major"], major, "{made:#}");
    let m = manifest_of(&out);
    assert_eq!(m["arch"], arch, "{os} {arch}");
    assert_eq!(m["os_major"], major, "{os} {arch}");
    let kernel = m["kernels"][0].as_str().unwrap_or_default().to_string();
    assert!(
        kernel.ends_with(&format!(".el{major}uek.{arch}")),
        "{os} {arch}: {kernel}"
    );
    let packages = packages_of(&m);
    assert!(
        packages.iter().any(|p| p.starts_with("kernel-uek-devel-")
            && p.ends_with(&format!("{}.{arch}", world::evr(&kernel)))),
        "{os} {arch}: the headers of {kernel}: {packages:?}"
    );
    let foreign: Vec<&&str> = packages
        .iter()
        .filter(|p| !p.ends_with(&format!(".{arch}")) && !p.ends_with(".noarch"))
        .collect();
    assert!(foreign.is_empty(), "{os} {arch}: {foreign:?}");
}

/// `--os ol<major> --arch <arch>` is taken: dnf runs for that architecture against the
/// target's repos (here a closed port), and the error is theirs, not the command line's.
fn clean_target_taken(here: &Path, major: u32, arch: &str) {
    let repos = here.join("repos.d");
    fs::write(
        repos.join("mirror.repo"),
        "[mirror]\nname=mirror\nbaseurl=http://127.0.0.1:9/$basearch/\ngpgcheck=0\nenabled=1\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let driver = world_driver(major, arch)
        .or_else(|| world_driver(major, "x86_64"))
        .unwrap_or_else(|| World::get().cuda_local(DRIVER_LOCAL_EL8_580));
    let profile = clean_profile(here, major, &driver);
    let (os, out_s, repos_s) = (
        format!("ol{major}"),
        here.join("b").display().to_string(),
        repos.display().to_string(),
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .env("HOME", World::get().home())
        .args(["bundle", "--profile", &profile, "--os", &os, "--arch", arch])
        .args(["--repos", &repos_s, "--out", &out_s, "--log-level", "debug"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = stderr(&o);
    assert!(![0, 2].contains(&code(&o)), "{os} {arch}: {err}");
    assert!(err.contains("check the .repo files in --repos"), "{err}");
    if arch != gpuhost_host::arch::machine() {
        assert!(err.contains(&format!("--forcearch={arch}")), "{err}");
    }
    assert!(names_in(here).is_some_and(|n| !n.contains(&"b".to_string())));
}

/// What a clean target cannot be is refused before anything is written (exit 2): a release
/// the table lacks (clap lists the table's), `--arch` without `--os`, an RHCK profile on
/// aarch64 (UEK only), a `--kernel-release` built for another architecture than `--arch`.
#[test]
fn a_clean_target_the_table_does_not_have_is_refused() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("b").display().to_string();
    let driver = World::get().cuda_local(DRIVER_LOCAL_EL9_570);
    let uek = clean_profile(tmp.path(), 9, &driver);
    let rhck = tmp.path().join("rhck.toml");
    fs::write(
        &rhck,
        format!(
            "extends = \"ol9-rhck\"\n\n[driver]\nlocal_repo_rpm = \"{}\"\n",
            driver.display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let rhck = rhck.display().to_string();
    let cases: [(&[&str], &str); 5] = [
        (&["--os", "ol7"], "[possible values: ol8, ol9, ol10]"),
        (
            &["--os", "ol9", "--arch", "s390x"],
            "[possible values: x86_64, aarch64]",
        ),
        (
            &["--root", "/", "--arch", "aarch64"],
            "--arch goes with --os",
        ),
        (
            &["--os", "ol9", "--arch", "aarch64", "--profile", &rhck],
            "ships no RHCK for aarch64",
        ),
        (
            &[
                "--os",
                "ol9",
                "--arch",
                "aarch64",
                "--kernel-release",
                "5.15.0-206.153.7.el9uek.x86_64",
            ],
            "is built for x86_64, but the target is aarch64",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["bundle", "--out", out.as_str()];
        if !extra.contains(&"--profile") {
            args.extend(["--profile", uek.as_str()]);
        }
        args.extend(extra);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
            .env("HOME", World::get().home())
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    let left: Vec<String> = names_in(tmp.path())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !n.ends_with(".toml"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn run_ok(cmd: &mut std::process::Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Repos signed with a throwaway key: the bundle carries the key and checks every package
/// against it offline (dnf imports it into the target's rpm database).
#[test]
fn signatures_are_checked_offline_with_the_keys_the_bundle_carries() {
    let w = World::get();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let gnupg = tmp.path().join("gnupg");
    fs::create_dir_all(&gnupg).unwrap_or_else(|e| panic!("{e}"));
    run_ok(std::process::Command::new("chmod").arg("700").arg(&gnupg));
    run_ok(
        std::process::Command::new("gpg")
            .args(["--batch", "--homedir"])
            .arg(&gnupg)
            .args([
                "--passphrase",
                "",
                "--quick-gen-key",
                "gpuhost test <test@gpuhost.invalid>",
                "rsa2048",
                "sign",
                "never",
            ]),
    );
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    let key = run_ok(
        std::process::Command::new("gpg")
            .arg("--homedir")
            .arg(&gnupg)
            .args(["--armor", "--export", "test@gpuhost.invalid"]),
    );
    src.write("/srv/keys/test.asc", &key);
    let signed = ["ol8_UEKR7", "docker-ce-stable", "nvidia-container-toolkit"];
    for id in signed {
        let dir = src.join(&format!("srv/repos/{id}"));
        fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        copy_dir(&w.repo(Os::Ol8, id), &dir);
        let rpms: Vec<PathBuf> = fs::read_dir(dir.join("Packages"))
            .unwrap_or_else(|e| panic!("{e}"))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        run_ok(
            std::process::Command::new("rpmsign")
                .env("HOME", w.home())
                .stdin(std::process::Stdio::null())
                .args(["--addsign", "--define", "__gpg /usr/bin/gpg"])
                .args(["--define", "_gpg_name gpuhost test"])
                .arg("--define")
                .arg(format!("_gpg_path {}", gnupg.display()))
                .args(&rpms),
        );
        run_ok(
            std::process::Command::new("createrepo_c")
                .arg("--quiet")
                .arg(&dir),
        );
    }
    let uek = src.read("/etc/yum.repos.d/uek-ol8.repo");
    src.write(
        "/etc/yum.repos.d/uek-ol8.repo",
        &uek.replace("gpgcheck=0", "gpgcheck=1\ngpgkey=file:///srv/keys/test.asc"),
    );
    // No driver: every package the profile installs comes from the signed repos.
    let profile = world::profile("ol8-uek");
    let keyset = [
        "--set",
        "driver.manage=false",
        "--set",
        "docker.gpgkey=file:///srv/keys/test.asc",
        "--set",
        "container_toolkit.gpgkey=file:///srv/keys/test.asc",
    ];
    let out = tmp.path().join("b");
    let made = bundle(&src, &profile, &out, &keyset);
    assert_eq!(made["gpgcheck"], true, "{made:#}");
    assert_eq!(
        made["gpgkeys"],
        serde_json::json!(["keys/docker-ce-stable.gpg"])
    );
    assert_eq!(
        fs::read_to_string(out.join("keys/docker-ce-stable.gpg")).unwrap_or_default(),
        key
    );

    let off = Root::new(Os::Ol8, &[UEK8_NEW]);
    cut_off(&off);
    assert!(off.installed("gpg-pubkey").is_none());
    let (c, r, err) = apply_bundle(&off, "apply", &out);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert!(off.installed("docker-ce").is_some());
    // dnf checked the signatures: it imported the bundle's key to do so.
    let imported = off.rpm(&["-q", "--qf", "%{SUMMARY}\\n", "gpg-pubkey"]);
    assert!(
        String::from_utf8_lossy(&imported.stdout).contains("gpuhost test"),
        "{}",
        String::from_utf8_lossy(&imported.stdout)
    );
}

/// An HTTP server for a directory, stopped when dropped.
struct Http {
    child: std::process::Child,
    port: u16,
}

impl Http {
    fn serve(dir: &Path) -> Http {
        use std::io::BufRead;
        let mut child = std::process::Command::new("python3")
            .args([
                "-u",
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "0",
                "--directory",
            ])
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("python3 -m http.server: {e}"));
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = std::io::BufReader::new(out).read_line(&mut line);
        }
        // "Serving HTTP on 127.0.0.1 port 35533 (http://127.0.0.1:35533/) ..."
        let port = line
            .split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Http { child, port }
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A repo served over HTTP, as Oracle's are: its packages are downloaded into the bundle (dnf
/// would otherwise delete them after the next transaction), its module metadata comes from
/// dnf's cache in the scratch root, its GPG key is downloaded; a profile that disables the
/// container-tools module (whose metadata only that repo has) converges offline.
#[test]
fn a_remote_repo_its_packages_modules_and_key_and_a_disabled_module_offline() {
    let w = World::get();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let www = tmp.path().join("www");
    fs::create_dir_all(&www).unwrap_or_else(|e| panic!("{e}"));
    copy_dir(
        &w.repo(Os::Ol8, "ol8_appstream"),
        &www.join("ol8_appstream"),
    );
    let key = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nstand-in key of the appstream repo\n-----END PGP PUBLIC KEY BLOCK-----\n";
    fs::write(www.join("RPM-GPG-KEY-test"), key).unwrap_or_else(|e| panic!("{e}"));
    let http = Http::serve(&www);
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    let repo = src.read("/etc/yum.repos.d/oracle-linux-ol8.repo");
    let url = format!("http://127.0.0.1:{}", http.port);
    src.write(
        "/etc/yum.repos.d/oracle-linux-ol8.repo",
        &repo.replace(
            "baseurl=file:///srv/repos/ol8_appstream",
            &format!("baseurl={url}/ol8_appstream/\ngpgkey={url}/RPM-GPG-KEY-test"),
        ),
    );
    let _ = fs::remove_dir_all(src.join("srv/repos/ol8_appstream"));
    let profile = site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let out = tmp.path().join("b");
    let made = bundle(
        &src,
        &profile,
        &out,
        &["--set", "docker.module_filtering=disable-module"],
    );
    drop(http);
    let manifest = manifest_of(&out);
    let packages = packages_of(&manifest);
    for want in ["gcc-0:8.5.0", "gcc-toolset-11-gcc-0:11.2.1"] {
        assert!(
            packages.iter().any(|p| p.starts_with(want)),
            "{want} (from the HTTP repo) not in {packages:?}"
        );
    }
    assert_eq!(
        made["modules"],
        serde_json::json!(["container-tools:ol8", "nvidia-driver:open-dkms"]),
        "{made:#}"
    );
    assert_eq!(
        made["gpgkeys"],
        serde_json::json!(["keys/ol8_appstream.gpg"])
    );
    assert_eq!(
        fs::read_to_string(out.join("keys/ol8_appstream.gpg")).unwrap_or_default(),
        key
    );
    assert_eq!(made["gpgcheck"], false);

    let off = Root::new(Os::Ol8, &[UEK8_NEW]);
    cut_off(&off);
    let (c, r, err) = apply_bundle(&off, "apply", &out);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert!(
        off.read("/etc/dnf/modules.d/container-tools.module")
            .contains("state=disabled"),
        "{}",
        off.read("/etc/dnf/modules.d/container-tools.module")
    );
    assert!(off.installed("docker-ce").is_some() && off.installed("gcc").is_some());
    let (c, r, err) = apply_bundle(&off, "apply", &out);
    assert_eq!(c, 0, "{err}");
    assert_converged(&r);
}

/// A manifest edited to name `value` in `field`, written back.
fn edit_manifest(bundle: &Path, field: &str, value: Value) {
    let mut m = manifest_of(bundle);
    m[field] = value;
    fs::write(
        bundle.join("manifest.json"),
        serde_json::to_vec_pretty(&m).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// `mkfifo PATH`.
fn mkfifo(p: &Path) {
    let o = std::process::Command::new("mkfifo")
        .arg(p)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `gpuhost ARGS` that must end within `secs` (a FIFO must not block it): its output.
fn within(root: &Root, args: &[&str], secs: u64) -> std::process::Output {
    let mut child = root
        .gpuhost_cmd(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let start = std::time::Instant::now();
    while child.try_wait().unwrap_or_else(|e| panic!("{e}")).is_none() {
        if start.elapsed().as_secs() >= secs {
            let _ = child.kill();
            panic!("gpuhost {args:?} still runs after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
}

/// Issue 24, item 2 and 3: a bundle uses only bytes its manifest hashes, and its outputs are
/// written without following links. Made on a USB stick whose label has a space, with a link
/// planted where the tarball's temp file used to be; applied from there with a `$TMPDIR` that
/// has a space too; then the manifest's path fields pointed outside the bundle, and FIFOs in
/// place of the manifest and the tarball.
#[test]
fn a_bundle_uses_only_hashed_bytes_and_writes_through_no_link() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let stick = tmp.path().join("GPU BUNDLE 'x'");
    fs::create_dir_all(&stick).unwrap_or_else(|e| panic!("{e}"));
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    // dnf cannot build there (it splits reposdir on white space): refused before anything.
    let s = stick.join("b").display().to_string();
    let o = src.gpuhost(&["bundle", "--profile", &profile, "--out", &s]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("white space"), "{}", stderr(&o));
    assert_eq!(names_in(&stick), Some(vec![]));

    let made = tmp.path().join("made");
    fs::create_dir_all(&made).unwrap_or_else(|e| panic!("{e}"));
    let victim = tmp.path().join("victim");
    fs::write(&victim, "precious").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&victim, made.join(".b.tar.partial"))
        .unwrap_or_else(|e| panic!("{e}"));
    let out = made.join("b");
    // An --out that is a link is refused before anything is written.
    let real = tmp.path().join("real");
    fs::create_dir_all(&real).unwrap_or_else(|e| panic!("{e}"));
    let link = made.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
    let l = link.display().to_string();
    let o = src.gpuhost(&["bundle", "--profile", &profile, "--out", &l, "--tar"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("is a symbolic link"), "{}", stderr(&o));
    assert_eq!(names_in(&real), Some(vec![]));
    fs::remove_file(&link).unwrap_or_else(|e| panic!("{e}"));

    let r = bundle(&src, &profile, &out, &["--tar"]);
    assert_eq!(r["tarball"], made.join("b.tar").display().to_string());
    assert_eq!(
        fs::read_to_string(&victim).unwrap_or_default(),
        "precious",
        "the build wrote through the planted link"
    );
    let mut left = names_in(&made).unwrap_or_default();
    left.sort();
    assert_eq!(left, [".b.tar.partial", "b", "b.tar"], "{left:?}");
    // Carried on the stick.
    copy_dir(&out, &stick.join("b"));
    fs::copy(made.join("b.tar"), stick.join("b.tar")).unwrap_or_else(|e| panic!("{e}"));
    let tarball = stick.join("b.tar");
    let out = stick.join("b");

    // Applied from the stick, unpacked into a $TMPDIR with a space: converges.
    let off = Root::new(Os::Ol8, &[UEK8_NEW]);
    cut_off(&off);
    let tmpdir = tmp.path().join("tmp dir");
    fs::create_dir_all(&tmpdir).unwrap_or_else(|e| panic!("{e}"));
    let t = tarball.display().to_string();
    let o = off
        .gpuhost_cmd(&["apply", "--bundle", &t, "--format", "json"])
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(names_in(&tmpdir), Some(vec![]), "the extraction was left");
    let (c, r, err) = apply_bundle(&off, "apply", &out);
    assert_eq!(c, 0, "{err}");
    assert_converged(&r);

    // The path fields name files outside the bundle, or inside it but in no hash.
    let fresh = Root::new(Os::Ol8, &[UEK8_NEW]);
    let evil = tmp.path().join("evil");
    fs::create_dir_all(&evil).unwrap_or_else(|e| panic!("{e}"));
    fs::copy(
        World::get().cuda_local(CUDA_LOCAL_EL8_12_2),
        evil.join(CUDA_LOCAL_EL8_12_2),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let cases: [(&str, Value); 4] = [
        (
            "driver_repo_rpm",
            Value::from(format!("../evil/{CUDA_LOCAL_EL8_12_2}")),
        ),
        (
            "driver_repo_rpm",
            Value::from(format!("driver/./{CUDA_LOCAL_EL8_12_2}")),
        ),
        ("gpgkeys", serde_json::json!(["../../../../etc/hostname"])),
        ("gpgkeys", serde_json::json!(["manifest.json"])),
    ];
    for (n, (field, value)) in cases.into_iter().enumerate() {
        let b = tmp.path().join(format!("tampered-{n}"));
        copy_dir(&out, &b);
        edit_manifest(&b, field, value.clone());
        let err = refused_offline(&fresh, &b);
        assert!(
            err.contains(&format!("field {field} names")),
            "{field} = {value}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }

    // A FIFO as the manifest, and as the tarball: refused at once, never opened.
    let b = tmp.path().join("fifo-manifest");
    copy_dir(&out, &b);
    fs::remove_file(b.join("manifest.json")).unwrap_or_else(|e| panic!("{e}"));
    mkfifo(&b.join("manifest.json"));
    let bs = b.display().to_string();
    let o = within(&fresh, &["plan", "--bundle", &bs], 20);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("a FIFO"), "{}", stderr(&o));
    let fifo = tmp.path().join("fifo.tar");
    mkfifo(&fifo);
    let fs_ = fifo.display().to_string();
    let o = within(&fresh, &["apply", "--bundle", &fs_], 20);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("is a FIFO"), "{}", stderr(&o));
}

/// SIGTERM and SIGINT during a build: it stops, exit 143/130, and leaves nothing beside
/// `--out` (no scratch root, no staging, no bundle).
#[test]
fn a_signal_during_a_build_removes_its_scratch() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    for (sig, code_) in [("TERM", 143), ("INT", 130)] {
        let parent = tmp.path().join(format!("sig{sig}"));
        fs::create_dir_all(&parent).unwrap_or_else(|e| panic!("{e}"));
        let out = parent.join("b").display().to_string();
        let child = src
            .gpuhost_cmd(&["bundle", "--profile", &profile, "--out", &out, "--tar"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        // Once the scratch root holds an rpm database, the build is under way.
        let start = std::time::Instant::now();
        loop {
            let scratch = names_in(&parent)
                .unwrap_or_default()
                .into_iter()
                .find(|n| n.starts_with(".b.gpuhost"));
            if let Some(s) = scratch {
                if names_in(&parent.join(s).join("root/var/lib/rpm")).is_some_and(|n| !n.is_empty())
                {
                    break;
                }
            }
            assert!(start.elapsed().as_secs() < 120, "the build never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let k = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(child.id().to_string())
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(k.success());
        let o = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(code(&o), code_, "SIG{sig}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("SIG{sig}")), "{}", stderr(&o));
        assert_eq!(names_in(&parent), Some(vec![]), "SIG{sig} left these");
    }
}

/// A bundle of another driver on a node converged from a bundle (issue 42): one swap from the
/// driver set in gpuhost's cache to the bundle's, offline; the set before stays cached (for a
/// rollback), and the next apply of the same bundle changes nothing.
#[test]
fn a_bundle_of_another_driver_swaps_the_node_from_its_cache() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let replace = ["--set", "driver.replace_local_repo=true"];
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    bundle(
        &src,
        &site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2),
        &a,
        &replace,
    );
    let p550 = tmp.path().join("550");
    fs::create_dir_all(&p550).unwrap_or_else(|e| panic!("{e}"));
    bundle(
        &src,
        &site_profile(&p550, "ol8-uek", CUDA_LOCAL_EL8_12_4),
        &b,
        &replace,
    );
    let off = Root::new(Os::Ol8, &[UEK8_NEW]);
    cut_off(&off);
    let (c, r, err) = apply_bundle(&off, "apply", &a);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert!(off
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("535.104.05")));
    let (c, r, err) = apply_bundle(&off, "apply", &b);
    assert_eq!(c, 0, "{r:#}\n{err}");
    let why = r["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["id"] == "driver-repo")
        .map(|s| s["reason"].to_string())
        .unwrap_or_default();
    assert!(why.contains("from the bundle's repo"), "{why}");
    assert_eq!(off.installed_all("nvidia-driver").len(), 1);
    assert!(off
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("550.54.15")));
    assert!(off
        .installed("kmod-nvidia-open-dkms")
        .is_some_and(|v| v.starts_with("550.54.15")));
    assert_eq!(
        off.nvidia_module_version(UEK8_NEW).as_deref(),
        Some("550.54.15")
    );
    let mut cached: Vec<String> = fs::read_dir(off.join("var/lib/gpuhost/driver-repo"))
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    cached.sort();
    assert_eq!(
        cached,
        vec![
            DRIVER_SET.to_string(),
            "cuda-repo-rhel8-12-4-local-12.4.1_550.54.15".to_string()
        ]
    );
    let repo_file = fs::read_to_string(off.join("etc/yum.repos.d/gpuhost-driver-repo.repo"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(repo_file.contains("12.4.1_550.54.15"), "{repo_file}");
    let (c, r, err) = apply_bundle(&off, "apply", &b);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert_converged(&r);
    // Back to the first bundle's driver, from gpuhost's cache: the journal's package is the
    // bundle's name for it (issue 54); then forward again.
    let o = off.gpuhost(&["rollback", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}\n{:#}", stderr(&o), report(&o));
    assert!(
        stderr(&o).contains(&format!("from bundle {}", a.display())),
        "{}",
        stderr(&o)
    );
    assert!(off
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("535.104.05")));
    let (c, r, err) = apply_bundle(&off, "apply", &b);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert!(off
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("550.54.15")));
    // The cache removed by hand, the set still installed: the next apply caches it again from
    // the bundle and installs nothing.
    let rpmdb_before = rpmdb(&off);
    fs::remove_dir_all(off.join("var/lib/gpuhost/driver-repo")).unwrap_or_else(|e| panic!("{e}"));
    fs::remove_file(off.join("etc/yum.repos.d/gpuhost-driver-repo.repo"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (c, r, err) = apply_bundle(&off, "apply", &b);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert_eq!(rpmdb(&off), rpmdb_before);
    assert!(off
        .join("var/lib/gpuhost/driver-repo/cuda-repo-rhel8-12-4-local-12.4.1_550.54.15/repodata/repomd.xml")
        .is_file());
    let (c, r, err) = apply_bundle(&off, "apply", &b);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert_converged(&r);

    // The first bundle's set is no longer cached (the cache was removed above): a rollback
    // names the bundle to apply again, not a scratch path, and changes nothing.
    let before = rpmdb(&off);
    let o = off.gpuhost(&["rollback"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("gpuhost apply --bundle {}", a.display())),
        "{}",
        stderr(&o)
    );
    assert_eq!(rpmdb(&off), before);
}

// A node converged online, then kept up to date from bundles (issue 54): the everyday day-2
// case of a node set up from a mirror and later updated air-gapped.

/// The world's mirrors of a node set up online are gone (its repo files, which gpuhost wrote,
/// stay as the profile says): dnf reaches no repo but gpuhost's driver cache in the root.
fn mirrors_gone(root: &Root) {
    fs::remove_dir_all(root.join("srv/repos")).unwrap_or_else(|e| panic!("{e}"));
    let o = root.dnf(&["makecache"]);
    assert!(!o.status.success(), "dnf still reaches a mirror");
}

/// The 12.4 local repo package's driver set as a bundle carries it and nodes cache it.
const DRIVER_SET_550: &str = "cuda-repo-rhel8-12-4-local-12.4.1_550.54.15";

/// `--set driver.keep_local_repo=KEEP`.
fn keeping(keep: bool) -> String {
    format!("driver.keep_local_repo={keep}")
}

/// A node converged online (from the world's mirrors) with the site profile of `driver` and
/// `driver.keep_local_repo = keep`: the local repo package installed (`true`) or its driver set
/// in gpuhost's cache (`false`).
fn online_node(profile: &str, keep: bool) -> Root {
    let node = Root::new(Os::Ol8, &[UEK8_NEW]);
    let k = keeping(keep);
    let o = node.gpuhost(&[
        "apply",
        "--profile",
        profile,
        "--set",
        &k,
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(local_repo_packages(&node).is_empty(), !keep);
    node
}

/// The NVIDIA local repo packages rpm has installed on `root`, by name.
fn local_repo_packages(root: &Root) -> Vec<String> {
    let o = root.rpm(&["-qa", "--qf", "%{NAME}\\n"]);
    let mut names: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|n| n.starts_with("cuda-repo-") || n.starts_with("nvidia-driver-local-repo-"))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// The driver sets gpuhost's cache holds on `root`, and the one its repo file gives dnf.
fn cached_sets(root: &Root) -> (Vec<String>, Option<String>) {
    let mut dirs = names_in(&root.join("var/lib/gpuhost/driver-repo")).unwrap_or_default();
    dirs.sort();
    let current = fs::read_to_string(root.join("etc/yum.repos.d/gpuhost-driver-repo.repo"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("baseurl=file:///var/lib/gpuhost/driver-repo/"))
                .map(|d| d.trim_end_matches('/').to_string())
        });
    (dirs, current)
}

/// A site profile's bundle as a tarball, made from a fresh OL8 UEK root with `extra`'s `--set`s:
/// the tarball's path.
fn tar_bundle(dir: &Path, driver: &str, name: &str, extra: &[&str]) -> (String, PathBuf) {
    let sub = dir.join(name);
    fs::create_dir_all(&sub).unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(&sub, "ol8-uek", driver);
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    let mut args = vec!["--tar"];
    args.extend_from_slice(extra);
    let made = bundle(&src, &profile, &sub.join("b"), &args);
    let tar = PathBuf::from(made["tarball"].as_str().unwrap_or_default());
    assert!(tar.is_file(), "{made:#}");
    (profile, tar)
}

/// The reason the report gives for step `id`.
fn reason_of(r: &Value, id: &str) -> String {
    r["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["id"] == id)
        .map(|s| {
            format!(
                "{} {}",
                s["reason"].as_str().unwrap_or_default(),
                s["hint"].as_str().unwrap_or_default()
            )
        })
        .unwrap_or_default()
}

/// `apply`/`plan --bundle TAR` with `extra` on `root`: (exit code, report, stderr).
fn apply_bundle_with(
    root: &Root,
    cmd: &str,
    bundle: &Path,
    extra: &[&str],
) -> (i32, Value, String) {
    let b = bundle.display().to_string();
    let mut args = vec![cmd, "--bundle", b.as_str(), "--format", "json"];
    args.extend_from_slice(extra);
    let o = root.gpuhost(&args);
    let r = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (code(&o), r, stderr(&o))
}

/// The node's rpm database and the driver it runs.
fn driver_on(root: &Root) -> String {
    root.installed("nvidia-driver").unwrap_or_default()
}

/// A node converged online takes a bundle of the same driver, made with the same profile:
/// `plan` and `apply` change nothing, with the local repo package kept (`true`) or the set in
/// gpuhost's cache (`false`), offline. The other way round by `--set`: the package moves into
/// gpuhost's cache from the bundle (nothing read but the bundle) and the next apply is
/// unchanged; the cache stays when the profile says `true` (the bundle carries no package).
#[rstest::rstest]
#[case::keeping_the_package(true)]
#[case::without_the_package(false)]
fn a_node_converged_online_takes_a_bundle_of_its_driver_unchanged(#[case] keep: bool) {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let k = keeping(keep);
    let (profile, tar) = tar_bundle(tmp.path(), CUDA_LOCAL_EL8_12_2, "a", &["--set", &k]);
    let node = online_node(&profile, keep);
    mirrors_gone(&node);
    let rpmdb_before = rpmdb(&node);
    for cmd in ["plan", "apply", "apply"] {
        let (c, r, err) = apply_bundle_with(&node, cmd, &tar, &[]);
        assert_eq!(c, 0, "{cmd}: {r:#}\n{err}");
        assert_converged(&r);
    }
    assert_eq!(rpmdb(&node), rpmdb_before);

    let other = keeping(!keep);
    let (c, r, err) = apply_bundle_with(&node, "apply", &tar, &["--set", &other]);
    assert_eq!(c, 0, "{r:#}\n{err}");
    let why = reason_of(&r, "driver-repo");
    // The bundle's set is the node's driver: the driver stays as it is either way.
    assert!(driver_on(&node).starts_with("535.104.05"));
    assert_eq!(
        cached_sets(&node),
        (vec![DRIVER_SET.to_string()], Some(DRIVER_SET.to_string()))
    );
    assert!(
        local_repo_packages(&node).is_empty(),
        "{:?}",
        local_repo_packages(&node)
    );
    if keep {
        assert!(
            why.contains("driver.keep_local_repo = false") && why.contains("from the bundle"),
            "{why}"
        );
        assert!(!node.join("var/cuda-repo-rhel8-12-2-local").exists());
    } else {
        assert!(
            why.contains("the bundle carries no local repo package"),
            "{why}"
        );
        assert_converged(&r);
    }
    let (c, r, err) = apply_bundle_with(&node, "apply", &tar, &["--set", &other]);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert_converged(&r);
}

/// A node converged online takes a bundle of another driver. With the local repo package kept
/// (`true`) the bundle cannot bring the new one: refused before any change, naming the package
/// it lacks and hints that work, none into a scratch folder; the package given by `--set`
/// makes it one swap that installs it (and `keep_local_repo=false` would take the set into the
/// cache). Without it (`false`) it is one swap into gpuhost's cache. Either way a second apply
/// changes nothing and `gpuhost rollback` goes back to the online driver: from its package file,
/// or, without the package, from gpuhost's cache with the file gone.
#[rstest::rstest]
#[case::keeping_the_package(true)]
#[case::without_the_package(false)]
fn a_node_converged_online_takes_a_bundle_of_another_driver_and_rolls_back(#[case] keep: bool) {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let k = keeping(keep);
    // The online driver's package, a copy that can go away (a rollback from the cache).
    let copy = tmp.path().join(CUDA_LOCAL_EL8_12_2);
    fs::copy(World::get().cuda_local(CUDA_LOCAL_EL8_12_2), &copy).unwrap_or_else(|e| panic!("{e}"));
    let site = tmp.path().join("site.toml");
    fs::write(
        &site,
        format!(
            "extends = \"{}\"\n\n[driver]\nlocal_repo_rpm = \"{}\"\n",
            world::profile("ol8-uek"),
            copy.display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let node = online_node(&site.display().to_string(), keep);
    let (_, tar) = tar_bundle(
        tmp.path(),
        CUDA_LOCAL_EL8_12_4,
        "b",
        &["--set", &k, "--set", "driver.replace_local_repo=true"],
    );
    mirrors_gone(&node);
    let rpmdb_before = rpmdb(&node);
    let tmpdir = tmp.path().join("tmpdir");
    fs::create_dir_all(&tmpdir).unwrap_or_else(|e| panic!("{e}"));

    if keep {
        // Refused, nothing changed; the reason names the package, the hints work.
        for cmd in ["plan", "apply"] {
            let o = node
                .gpuhost_cmd(&[
                    cmd,
                    "--bundle",
                    &tar.display().to_string(),
                    "--format",
                    "json",
                ])
                .env("TMPDIR", &tmpdir)
                .output()
                .unwrap_or_else(|e| panic!("{e}"));
            let r = report(&o);
            assert_eq!(code(&o), 2, "{r:#}\n{}", stderr(&o));
            let why = reason_of(&r, "driver-repo");
            assert!(
                why.contains(CUDA_LOCAL_EL8_12_4) && why.contains("driver.keep_local_repo = true"),
                "{why}"
            );
            assert!(
                why.contains("--set driver.keep_local_repo=false")
                    && why.contains("--set driver.local_repo_rpm="),
                "{why}"
            );
            assert!(
                !why.contains(&tmpdir.display().to_string()) && !why.contains("/var/tmp/"),
                "{why}"
            );
        }
        assert_eq!(rpmdb(&node), rpmdb_before);
        let (c, r, err) = apply_bundle_with(
            &node,
            "plan",
            &tar,
            &["--set", "driver.keep_local_repo=false"],
        );
        assert_eq!(c, 0, "{r:#}\n{err}");
        assert!(
            reason_of(&r, "driver-repo").contains(DRIVER_SET_550),
            "{r:#}"
        );
        // The package given on the node: installed in the one swap, the old one gone.
        let file = format!(
            "driver.local_repo_rpm={}",
            World::get().cuda_local(CUDA_LOCAL_EL8_12_4).display()
        );
        let (c, r, err) = apply_bundle_with(&node, "apply", &tar, &["--set", &file]);
        assert_eq!(c, 0, "{r:#}\n{err}");
        let (c, r, err) = apply_bundle_with(&node, "apply", &tar, &["--set", &file]);
        assert_eq!(c, 0, "{r:#}\n{err}");
        assert_converged(&r);
        assert_eq!(
            local_repo_packages(&node),
            vec!["cuda-repo-rhel8-12-4-local".to_string()]
        );
    } else {
        let (c, r, err) = apply_bundle_with(&node, "apply", &tar, &[]);
        assert_eq!(c, 0, "{r:#}\n{err}");
        assert!(
            reason_of(&r, "driver-repo").contains("from the bundle's repo"),
            "{r:#}"
        );
        let (c, r, err) = apply_bundle_with(&node, "apply", &tar, &[]);
        assert_eq!(c, 0, "{r:#}\n{err}");
        assert_converged(&r);
        assert!(local_repo_packages(&node).is_empty());
        assert_eq!(
            cached_sets(&node),
            (
                vec![DRIVER_SET.to_string(), DRIVER_SET_550.to_string()],
                Some(DRIVER_SET_550.to_string())
            )
        );
    }
    assert!(
        driver_on(&node).starts_with("550.54.15"),
        "{}",
        driver_on(&node)
    );
    assert_eq!(node.installed_all("nvidia-driver").len(), 1);
    assert_eq!(
        node.nvidia_module_version(UEK8_NEW).as_deref(),
        Some("550.54.15")
    );

    // Back to the online driver, offline: from its file, or from the cache with the file gone.
    if !keep {
        fs::remove_file(&copy).unwrap_or_else(|e| panic!("{e}"));
    }
    let o = node.gpuhost(&["rollback", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}\n{:#}", stderr(&o), report(&o));
    assert!(
        driver_on(&node).starts_with("535.104.05"),
        "{}",
        driver_on(&node)
    );
    assert_eq!(
        node.nvidia_module_version(UEK8_NEW).as_deref(),
        Some("535.104.05")
    );
    if keep {
        assert_eq!(
            local_repo_packages(&node),
            vec!["cuda-repo-rhel8-12-2-local".to_string()]
        );
    } else {
        assert!(local_repo_packages(&node).is_empty());
        assert_eq!(cached_sets(&node).1, Some(DRIVER_SET.to_string()));
    }
}

/// A node converged from a bundle goes online: the same driver with the profile's
/// `keep_local_repo` (`true`: NVIDIA's package installed, gpuhost's cache removed; `false`:
/// unchanged), then another driver online, one swap; each second apply unchanged.
#[rstest::rstest]
#[case::keeping_the_package(true)]
#[case::without_the_package(false)]
fn a_node_converged_from_a_bundle_goes_online(#[case] keep: bool) {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let k = keeping(keep);
    let (profile, tar) = tar_bundle(tmp.path(), CUDA_LOCAL_EL8_12_2, "a", &["--set", &k]);
    let node = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (c, r, err) = apply_bundle_with(&node, "apply", &tar, &[]);
    assert_eq!(c, 0, "{r:#}\n{err}");
    assert!(local_repo_packages(&node).is_empty());
    assert_eq!(cached_sets(&node).1, Some(DRIVER_SET.to_string()));

    let online = |extra: &[&str]| {
        let mut args = vec![
            "apply",
            "--profile",
            profile.as_str(),
            "--set",
            k.as_str(),
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let o = node.gpuhost(&args);
        assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
        report(&o)
    };
    let r = online(&[]);
    if keep {
        assert!(
            reason_of(&r, "driver-repo").contains("driver.keep_local_repo = true"),
            "{r:#}"
        );
        assert_eq!(
            local_repo_packages(&node),
            vec!["cuda-repo-rhel8-12-2-local".to_string()]
        );
        assert_eq!(cached_sets(&node), (vec![], None));
    } else {
        assert_converged(&r);
        assert!(local_repo_packages(&node).is_empty());
    }
    assert_converged(&online(&[]));
    assert!(driver_on(&node).starts_with("535.104.05"));

    let b = format!(
        "driver.local_repo_rpm={}",
        World::get().cuda_local(CUDA_LOCAL_EL8_12_4).display()
    );
    let swap = [
        "--set",
        b.as_str(),
        "--set",
        "driver.replace_local_repo=true",
    ];
    online(&swap);
    assert_converged(&online(&swap));
    assert!(
        driver_on(&node).starts_with("550.54.15"),
        "{}",
        driver_on(&node)
    );
    assert_eq!(node.installed_all("nvidia-driver").len(), 1);
    if keep {
        assert_eq!(
            local_repo_packages(&node),
            vec!["cuda-repo-rhel8-12-4-local".to_string()]
        );
    } else {
        assert!(local_repo_packages(&node).is_empty());
        assert_eq!(cached_sets(&node).1, Some(DRIVER_SET_550.to_string()));
    }
}

/// `gpuhost bundle`'s report says what the bundle carries, one line per change of readable
/// length (issue 54: build-deps was one line of 1,651 characters, and driver-repo said the
/// package is installed with its whole repo while the bundle does not carry it): each step's
/// packages, none of the files the target writes itself, the driver set and not the package.
#[test]
fn the_bundle_report_says_what_it_carries_in_readable_lines() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let profile = site_profile(tmp.path(), "ol8-uek", CUDA_LOCAL_EL8_12_2);
    let out = tmp.path().join("b");
    let src = Root::new(Os::Ol8, &[UEK8_NEW]);
    let o = src.gpuhost(&[
        "bundle",
        "--profile",
        &profile,
        "--out",
        &out.display().to_string(),
    ]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}\n{}", stderr(&o));
    for line in text.lines() {
        assert!(
            line.chars().count() <= 300,
            "a line of {} characters:\n{line}",
            line.chars().count()
        );
    }
    assert!(!text.contains("write /etc/dkms"), "{text}");
    assert!(!text.contains("installed with its whole repo"), "{text}");
    let driver_repo = text
        .lines()
        .find(|l| l.trim_start().starts_with("driver-repo "))
        .unwrap_or_default();
    assert!(
        driver_repo.contains(&format!("the driver set of {CUDA_LOCAL_EL8_12_2}"))
            && driver_repo.contains("the package itself is not carried"),
        "{text}"
    );
    // build-deps: its two installs (DKMS and the compiler; the kernel's toolset), a line each.
    let start = text
        .lines()
        .position(|l| l.trim_start().starts_with("build-deps "))
        .unwrap_or_else(|| panic!("{text}"));
    let lines: Vec<&str> = text.lines().skip(start).take(2).collect();
    assert!(
        lines[0].contains("install dkms")
            && lines[1]
                .trim_start()
                .starts_with("install gcc-toolset-11-gcc"),
        "{text}"
    );
}
