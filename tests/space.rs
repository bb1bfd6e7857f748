//! Host facts through sysinfo (issue 14): `apply` refuses to start a driver install on a
//! filesystem without the space it needs — a real tmpfs /var, nearly full, in a private mount
//! namespace (`unshare --mount`, root only) — and `status` warns under the profile's
//! free-space floors.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

#[path = "support/status.rs"]
mod support;
#[path = "world/mod.rs"]
mod world;

use std::path::Path;
use std::process::Command;

use support::{check, gpuhost, hgx};
use world::{code, stderr, Os, Root, World, CUDA_LOCAL_EL8_12_2, CUDA_LOCAL_EL8_12_4, UEK8_NEW};

fn is_root() -> bool {
    String::from_utf8_lossy(&Command::new("id").arg("-u").output().unwrap().stdout).trim() == "0"
}

#[test]
fn a_driver_install_without_room_for_the_repo_package_is_refused_with_the_figures() {
    if !can_mount() {
        return;
    }
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let var = root.join("var");
    let rpm = World::get().cuda_local(CUDA_LOCAL_EL8_12_2);
    let set = format!("driver.local_repo_rpm={}", rpm.display());
    // Less than the repo package, which unpacks under /var.
    let o = with_var_free(
        &root,
        64,
        &[
            "apply",
            "--profile",
            "ol8-uek",
            "--set",
            &set,
            "--only",
            "kernel,kernel-headers,driver-repo,build-deps,driver",
        ],
    );
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{err}");
    assert!(err.contains("not enough free space to install: "), "{err}");
    assert!(
        err.contains(&format!("{} (for {}) has ", var.display(), var.display()))
            && err.contains("the NVIDIA local repo package's contents in /var"),
        "{err}"
    );
    // The package is installed from a copy on the root's disk: counted too (issue 34, item 1).
    assert!(
        err.contains("the copy of the local repo package the transaction installs"),
        "{err}"
    );
    // In an install root only the measured figure applies (the fixed estimates for NVIDIA's
    // real packages are for the live system).
    assert!(!err.contains("DKMS"), "{err}");
    // Refused before the first change: the repo package is not installed.
    assert_eq!(root.installed("cuda-repo-rhel8-12-2-local"), None);
}

/// gpuhost `args` on `root`, in a private mount namespace where the root's /var is a tmpfs
/// holding a copy of what it held, filled to leave `free_kib` KiB.
fn with_var_free(root: &Root, free_kib: u64, args: &[&str]) -> std::process::Output {
    let keep = tempfile::tempdir().unwrap();
    let script = r#"var=$0; keep=$1; free=$2; shift 2
cp -a "$var/." "$keep" && mount -t tmpfs -o size=64m gpuhost-test "$var" && cp -a "$keep/." "$var" &&
avail=$(df -k --output=avail "$var" | tail -1) &&
dd if=/dev/zero of="$var/.fill" bs=1k count=$((avail - free)) status=none &&
exec "$@""#;
    let var = root.join("var");
    let (keep, free) = (keep.path().to_path_buf(), free_kib.to_string());
    unshared(
        root,
        script,
        &[var.as_os_str(), keep.as_os_str(), free.as_ref()],
        args,
    )
    .output()
    .unwrap()
}

/// gpuhost `args` on `root`, started by the shell `script` in a private mount namespace
/// (`unshare --mount`): `$0`… are `script_args`, then `"$@"` is gpuhost's command line.
fn unshared(root: &Root, script: &str, script_args: &[&std::ffi::OsStr], args: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
    ])
    .args(script_args)
    .arg(env!("CARGO_BIN_EXE_gpuhost"))
    .args(args)
    .arg("--root")
    .arg(root.path())
    .env("HOME", World::get().home());
    c
}

fn can_mount() -> bool {
    if is_root() && Path::new("/usr/bin/unshare").exists() {
        return true;
    }
    assert!(
        std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_none(),
        "needs root and unshare (util-linux)"
    );
    eprintln!("skipped: needs root and unshare");
    false
}

/// A driver upgrade swaps local repos in one transaction, after copying the new package's
/// payload and repo into a scratch directory under /var/cache: with room for the new repo but
/// not for that copy too, it is refused before anything changes, with the figures — the node
/// keeps its driver (before, the swap ran out of space half-way through its extraction).
#[test]
fn a_driver_swap_without_room_for_its_scratch_copy_is_refused_before_any_change() {
    if !can_mount() {
        return;
    }
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let only = "kernel,kernel-headers,driver-repo,build-deps,driver";
    let old = World::get().cuda_local(CUDA_LOCAL_EL8_12_2);
    let o = root.gpuhost(&[
        "apply",
        "--profile",
        "ol8-uek",
        "--set",
        &format!("driver.local_repo_rpm={}", old.display()),
        "--only",
        only,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let new = World::get().cuda_local(CUDA_LOCAL_EL8_12_4);
    let kib = std::fs::metadata(&new).unwrap().len() / 1024;
    // Room for the new repo (its size) and half as much again: not for the scratch copy too.
    let set = format!("driver.local_repo_rpm={}", new.display());
    let o = with_var_free(
        &root,
        kib * 3 / 2,
        &[
            "apply",
            "--profile",
            "ol8-uek",
            "--set",
            &set,
            "--set",
            "driver.replace_local_repo=true",
            "--only",
            only,
        ],
    );
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{err}");
    assert!(err.contains("not enough free space to install: "), "{err}");
    assert!(
        err.contains("the new local repo's metadata and driver packages, read out for the driver swap in /var/cache/gpuhost/driver-swap"),
        "{err}"
    );
    assert_eq!(
        root.installed("cuda-repo-rhel8-12-2-local").as_deref(),
        Some("12.2.2_535.104.05-1")
    );
    assert_eq!(root.installed("cuda-repo-rhel8-12-4-local"), None);
    assert!(root
        .installed("nvidia-driver")
        .is_some_and(|v| v.starts_with("535.")));
}

fn status_json(dir: &Path, snap: &serde_json::Value, extra: &[&str]) -> serde_json::Value {
    let f = dir.join("snap.json");
    std::fs::write(&f, serde_json::to_string(snap).unwrap()).unwrap();
    let o = gpuhost(dir)
        .args(["status", "--format", "json", "--from-snapshot"])
        .arg(&f)
        .args(extra)
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn status_warns_under_the_free_space_floors_the_profile_sets() {
    let dir = tempfile::tempdir().unwrap();
    let mut snap = hgx();
    let gib = 1u64 << 30;
    let space = |path: &str, role: &str, mount: &str, free: u64| {
        serde_json::json!({"path": path, "role": role, "mount_point": mount,
            "available_bytes": free, "total_bytes": 500 * gib})
    };
    snap["host"]["system"] = serde_json::json!({
        "memory_total_bytes": 2048 * gib, "memory_available_bytes": 1900 * gib, "cpus": 224,
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "uptime_s": 90061,
        "space": [space("/", "system", "/", 40 * gib), space("/var", "var", "/", 40 * gib),
                  space("/data/docker", "docker data-root", "/data", 3 * gib),
                  space("/var/lib/dkms", "dkms builds", "/", 40 * gib)]
    });
    let v = status_json(dir.path(), &snap, &[]);
    assert_eq!(v["status"], "WARNING", "{v}");
    let c = check(&v, "host.space.docker");
    assert_eq!(c["severity"], "WARNING");
    assert_eq!(
        c["value"],
        "/data/docker (docker data-root on /data): 3.0 GiB free, under the 10 GiB floor"
    );
    assert!(c["hint"]
        .as_str()
        .unwrap()
        .contains("status.min_free_docker_gib"));
    assert_eq!(check(&v, "host.space.root")["severity"], "OK");
    assert_eq!(
        check(&v, "host.system")["value"],
        "224 CPUs (Intel(R) Xeon(R) Platinum 8480+), 2048.0 GiB memory, 1900.0 GiB available, up 1d 1h"
    );

    // A profile that accepts 2 GiB for Docker: OK.
    let profile = dir.path().join("site.toml");
    std::fs::write(
        &profile,
        "extends = \"ol8-uek\"\n\n[status]\nmin_free_docker_gib = 2\n",
    )
    .unwrap();
    let v = status_json(dir.path(), &snap, &["--profile", profile.to_str().unwrap()]);
    assert_eq!(check(&v, "host.space.docker")["severity"], "OK", "{v}");
    assert_eq!(v["status"], "OK");

    // The other default floors (docs/apply.md): / and /var 2 GiB, /var/lib/dkms 1 GiB — each just
    // under and just over.
    let mib = 1u64 << 20;
    for (root, var, dkms, warned) in [
        (1900 * mib, 2100 * mib, 1100 * mib, "root"),
        (2100 * mib, 1900 * mib, 1100 * mib, "var"),
        (2100 * mib, 2100 * mib, 900 * mib, "dkms"),
    ] {
        snap["host"]["system"]["space"] = serde_json::json!([
            space("/", "system", "/", root),
            space("/var", "var", "/var", var),
            space("/var/lib/docker", "docker data-root", "/var", 20 * gib),
            space("/var/lib/dkms", "dkms builds", "/var", dkms),
        ]);
        let v = status_json(dir.path(), &snap, &[]);
        for key in ["root", "var", "dkms"] {
            let c = check(&v, &format!("host.space.{key}"));
            let floor = if key == "dkms" { 1 } else { 2 };
            if key == warned {
                assert_eq!(c["severity"], "WARNING", "{c:#}");
                let value = c["value"].as_str().unwrap();
                assert!(
                    value.ends_with(&format!("under the {floor} GiB floor")),
                    "{value}"
                );
            } else {
                assert_eq!(c["severity"], "OK", "{c:#}");
            }
        }
    }
}

/// Issue 42, item 5: NVIDIA's local repo package on the root's own filesystem is staged without
/// a copy (a hard link here; a reflink on XFS or Btrfs), and from another filesystem (a tmpfs,
/// as a USB stick or an NFS export is) it is copied; both converge, and a second apply changes
/// nothing.
#[test]
fn a_package_on_another_filesystem_is_copied_and_one_on_the_roots_is_shared() {
    if !can_mount() {
        return;
    }
    let only = "kernel,kernel-headers,driver-repo,build-deps,driver";
    let world_rpm = World::get().cuda_local(CUDA_LOCAL_EL8_12_2);
    for shared in [true, false] {
        let root = Root::new(Os::Ol8, &[UEK8_NEW]);
        // Shared: a copy of the package beside the root, on its filesystem. Copied: the same
        // file on a tmpfs mounted in a private mount namespace.
        let here = root.path().parent().unwrap().join(format!(
            "{}-pkg",
            root.path().file_name().unwrap().to_string_lossy()
        ));
        std::fs::create_dir_all(&here).unwrap();
        let rpm = here.join(world_rpm.file_name().unwrap());
        let script = if shared {
            r#"dir=$0; src=$1; shift; cp "$src" "$dir/" && exec "$@""#
        } else {
            r#"dir=$0; src=$1; shift; mount -t tmpfs -o size=256m gpuhost-test "$dir" && cp "$src" "$dir/" && exec "$@""#
        };
        let set = format!("driver.local_repo_rpm={}", rpm.display());
        let args = [
            "apply",
            "--profile",
            "ol8-uek",
            "--set",
            &set,
            "--only",
            only,
        ];
        let run = || {
            unshared(
                &root,
                script,
                &[here.as_os_str(), world_rpm.as_os_str()],
                &args,
            )
            // debug: every command gpuhost runs is logged, so that `rpm -K` would show.
            .env("GPUHOST_LOG", "debug")
            .output()
            .unwrap()
        };
        let o = run();
        let err = stderr(&o);
        assert_eq!(code(&o), 0, "{err}");
        if shared {
            assert!(
                err.contains("staged as a hard link, no copy")
                    || err.contains("staged as a reflink, no copy"),
                "{err}"
            );
        } else {
            assert!(!err.contains("no copy"), "{err}");
        }
        // Read once, by gpuhost's reader before the first change, never by `rpm -K` besides
        // (19 s of a 4 GiB package).
        // The world's packages are uncompressed, as rpm writes them: checked file by file, in
        // parallel, not by the payload's one serial digest.
        assert!(
            err.contains("read once: checked (file by file against the header)"),
            "{err}"
        );
        assert!(err.contains("running") && !err.contains("-Kv"), "{err}");
        assert_eq!(
            root.installed("cuda-repo-rhel8-12-2-local").as_deref(),
            Some("12.2.2_535.104.05-1")
        );
        let o = run();
        let err = stderr(&o);
        assert_eq!(code(&o), 0, "{err}");
        assert!(
            !err.contains("staged as"),
            "a converged root staged again: {err}"
        );
        let _ = std::fs::remove_dir_all(&here);
    }
}

/// Issue 53, item 5: with `driver.keep_local_repo = false` the driver set moves into gpuhost's
/// cache after the transaction; where the cache lies on a filesystem of its own (here a 64 KiB
/// tmpfs at the root's /var/lib/gpuhost) without room for the set, the first converge is
/// refused before any change, with the figures (before: the driver went in, then the move
/// failed, and the advised rerun failed the same way).
#[test]
fn a_cache_on_another_filesystem_without_room_is_refused_before_any_change() {
    if !can_mount() {
        return;
    }
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let state = root.join("var/lib/gpuhost");
    std::fs::create_dir_all(&state).unwrap();
    let rpm = World::get().cuda_local(CUDA_LOCAL_EL8_12_2);
    let set = format!("driver.local_repo_rpm={}", rpm.display());
    let script = r#"mount -t tmpfs -o size=64k,mode=755 gpuhost-test "$0" && exec "$@""#;
    let args = [
        "apply",
        "--profile",
        "ol8-uek",
        "--set",
        &set,
        "--set",
        "driver.keep_local_repo=false",
        "--only",
        "kernel,kernel-headers,driver-repo,build-deps,driver",
    ];
    let o = unshared(&root, script, &[state.as_os_str()], &args)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{err}");
    assert!(
        err.contains("not enough free space to install: ") && err.contains("gpuhost's cache"),
        "{err}"
    );
    assert_eq!(root.installed("nvidia-driver"), None);
    assert_eq!(root.installed("kernel-uek-devel"), None);
}
