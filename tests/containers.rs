//! The container steps (docker, container-toolkit, daemon-json, services, prefix-links,
//! container-smoke), end to end: the real `gpuhost` binary against install roots made from the
//! test world, with the real rpm, dnf (modularity included) and `systemctl --root`.
//!
//! Roots have no network: a site profile points the docker and toolkit repos at the world's
//! mirrors inside the root (`/srv/repos/…`), as an air-gapped site would.

// Test helpers fail the test by panicking, with the report in the message.
#![allow(clippy::panic)]

#[path = "world/mod.rs"]
mod world;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use rstest::rstest;
use serde_json::Value;
use world::{code, report, stderr, stdout, step, Os, Root, World, UEK10, UEK8_NEW, UEK9};

/// The container steps, for `--only`: the other steps have their own tests.
const MINE: &str = "docker,container-toolkit,daemon-json,services,prefix-links,container-smoke";

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// A site profile extending the built-in one for `os`: repos from the world's mirrors inside
/// the root, no gpgcheck (the world's packages are unsigned), plus `extra` TOML.
struct Site {
    _dir: tempfile::TempDir,
    path: String,
}

fn site(os: Os, extra: &str) -> Site {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let base = match os {
        Os::Ol9 => "ol9-uek",
        Os::Ol10 => "ol10-uek",
        _ => "ol8-uek",
    };
    // The world's profile already points Docker and the toolkit at the world's repos.
    let text = format!("extends = {:?}\n\n{extra}", world::profile(base));
    let path = dir.path().join("site.toml");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    Site {
        path: path.display().to_string(),
        _dir: dir,
    }
}

fn root_for(os: Os) -> Root {
    match os {
        Os::Ol9 => Root::new(Os::Ol9, &[UEK9]),
        Os::Ol10 => Root::new(Os::Ol10, &[UEK10]),
        _ => Root::new(Os::Ol8, &[UEK8_NEW]),
    }
}

fn run(root: &Root, cmd: &str, site: &Site, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![cmd, "--format", "json", "--profile", &site.path];
    if !extra.contains(&"--only") {
        args.extend_from_slice(&["--only", MINE]);
    }
    args.extend_from_slice(extra);
    let o = root.gpuhost(&args);
    (code(&o), report(&o))
}

/// The root's tree without gpuhost's own journal, lock and state (which every apply writes).
fn tree(root: &Root) -> String {
    root.tree_snapshot()
        .lines()
        .filter(|l| !l.starts_with("var/lib/gpuhost"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn owed(root: &Root) -> Value {
    let p = root.join("var/lib/gpuhost/state.json");
    match std::fs::read_to_string(p) {
        Ok(t) => serde_json::from_str::<Value>(&t).unwrap_or_default()["pending"].clone(),
        Err(_) => Value::Null,
    }
}

fn restart_owed(root: &Root) -> Option<String> {
    owed(root)["restart:docker.service"]
        .as_str()
        .map(str::to_string)
}

#[test]
fn podman_installed_with_the_default_policy_stops_before_any_change() {
    let root = root_for(Os::Ol8);
    root.dnf_ok(&["-y", "install", "podman"]);
    let s = site(Os::Ol8, "");
    let before = (root.rpmdb_snapshot(), tree(&root));

    let (rc, rep) = run(&root, "apply", &s, &[]);
    assert_eq!(rc, 1, "{rep:#}");
    let d = step(&rep, "docker");
    assert_eq!(d["outcome"], "failed");
    let reason = text(&d["reason"]);
    assert!(
        reason.contains("podman-") && reason.contains("runc-") && reason.contains("\"fail\""),
        "{reason}"
    );
    let hint = text(&d["hint"]);
    assert!(
        hint.contains("\"remove\"") && hint.contains("\"allowerasing\""),
        "{hint}"
    );
    for later in [
        "container-toolkit",
        "daemon-json",
        "services",
        "prefix-links",
    ] {
        assert_eq!(step(&rep, later)["outcome"], "skipped", "{later}");
    }
    assert_eq!(
        (root.rpmdb_snapshot(), tree(&root)),
        before,
        "the refused apply changed the root"
    );
    assert_eq!(restart_owed(&root), None);

    // The plan says the same, and the text report says what to do.
    let o = root.gpuhost(&["apply", "--profile", &s.path, "--only", "docker"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("what to do"), "{}", stdout(&o));
}

#[rstest]
#[case::remove("remove", false)]
#[case::allowerasing("allowerasing", true)]
fn podman_conflicts_are_settled_by_the_profiles_choice(
    #[case] policy: &str,
    #[case] podman_stays: bool,
) {
    let root = root_for(Os::Ol8);
    root.dnf_ok(&["-y", "install", "podman"]);
    let s = site(Os::Ol8, "");
    let set = format!("docker.conflicts={policy}");
    let (rc, rep) = run(&root, "apply", &s, &["--set", &set]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(step(&rep, "docker")["outcome"], "changed");
    for p in ["docker-ce", "docker-ce-cli", "containerd.io"] {
        assert!(root.installed(p).is_some(), "{p} not installed");
    }
    // containerd.io replaces runc either way; podman stays only with allowerasing (the real
    // dnf keeps it: containerd.io provides runc).
    assert_eq!(root.installed("runc"), None);
    assert_eq!(root.installed("podman").is_some(), podman_stays);
    let (rc, rep) = run(&root, "apply", &s, &["--set", &set]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(step(&rep, "docker")["outcome"], "unchanged");
}

#[rstest]
#[case::module_hotfixes("hotfixes")]
#[case::module_disabled("disable-module")]
fn containerd_filtered_out_by_container_tools_is_installed_anyway(#[case] how: &str) {
    let root = root_for(Os::Ol8);
    // The trap is real in this root: a plain install is refused by modular filtering.
    let plain = root.dnf(&["-y", "install", "docker-ce"]);
    assert!(!plain.status.success());
    assert!(
        String::from_utf8_lossy(&plain.stderr).contains("filtered out by modular filtering"),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );

    let s = site(Os::Ol8, "");
    let set = format!("docker.module_filtering={how}");
    let (rc, rep) = run(&root, "apply", &s, &["--set", &set]);
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("containerd.io").is_some());
    let repo = root.read("etc/yum.repos.d/docker-ce.repo");
    let module = std::fs::read_to_string(root.join("etc/dnf/modules.d/container-tools.module"))
        .unwrap_or_default();
    if how == "hotfixes" {
        assert!(repo.contains("module_hotfixes=true"), "{repo}");
        assert!(!module.contains("state=disabled"), "{module}");
    } else {
        assert!(!repo.contains("module_hotfixes"), "{repo}");
        assert!(module.contains("state=disabled"), "{module}");
    }
    // dnf (not only gpuhost) now sees the same packages as installed and nothing to do.
    root.dnf_ok(&["-y", "install", "docker-ce"]);
}

#[rstest]
#[case::ol8(Os::Ol8)]
#[case::ol9(Os::Ol9)]
#[case::ol10(Os::Ol10)]
fn a_converged_root_stays_unchanged_with_no_dnf_and_no_restart(#[case] os: Os) {
    let root = root_for(os);
    let s = site(
        os,
        "[[prefix_links]]\npackages = [\"libnccl\", \"libnccl-devel\"]\nprefix = \"/opt/nvidia/nccl\"\n",
    );
    let (rc, rep) = run(&root, "apply", &s, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    for id in [
        "docker",
        "container-toolkit",
        "daemon-json",
        "services",
        "prefix-links",
    ] {
        assert_eq!(step(&rep, id)["outcome"], "changed", "{id}: {rep:#}");
    }
    // In a root the restart cannot happen: it is reported, then handed to the first boot.
    let deferred = step(&rep, "services")["deferred"].to_string();
    assert!(
        deferred.contains("systemctl restart docker.service"),
        "{deferred}"
    );
    assert_eq!(restart_owed(&root), None);
    assert_eq!(
        root.installed("nvidia-container-toolkit").as_deref(),
        Some("1.17.8-1")
    );
    assert_eq!(
        link_of(
            &root,
            "etc/systemd/system/multi-user.target.wants/docker.service"
        )
        .as_deref(),
        Some("/usr/lib/systemd/system/docker.service")
    );
    let dj: Value = serde_json::from_str(&root.read("etc/docker/daemon.json")).unwrap_or_default();
    assert_eq!(
        dj["runtimes"]["nvidia"],
        serde_json::json!({"path": "nvidia-container-runtime", "args": []})
    );
    assert_eq!(dj["default-ulimits"]["memlock"]["Hard"], -1);
    assert_eq!(step(&rep, "container-smoke")["outcome"], "skipped");

    let before = (root.rpmdb_snapshot(), tree(&root));
    let start = Instant::now();
    let (o, execs) = root.gpuhost_traced(&[
        "apply",
        "--format",
        "json",
        "--profile",
        &s.path,
        "--only",
        MINE,
    ]);
    let traced = start.elapsed();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let rep = report(&o);
    for id in [
        "docker",
        "container-toolkit",
        "daemon-json",
        "services",
        "prefix-links",
    ] {
        let st = step(&rep, id);
        assert_eq!(st["outcome"], "unchanged", "{id}: {st:#}");
        assert_eq!(st["deferred"], serde_json::json!([]), "{id}");
    }
    if let Some(execs) = execs {
        assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
        let systemctls = execs.iter().filter(|p| *p == "systemctl").count();
        assert!(systemctls <= 1, "{execs:?}");
    }
    assert_eq!((root.rpmdb_snapshot(), tree(&root)), before);

    // How long a no-op apply takes (untraced), for the record.
    let start = Instant::now();
    let (rc, rep) = run(&root, "apply", &s, &[]);
    let wall = start.elapsed();
    assert_eq!(rc, 0, "{rep:#}");
    eprintln!(
        "no-op apply of the container steps ({os:?}): {} ms in gpuhost's report, {} ms wall ({} ms under strace)",
        rep["duration_ms"],
        wall.as_millis(),
        traced.as_millis()
    );
}

#[test]
fn the_users_daemon_json_keys_survive_and_formatting_alone_is_not_a_change() {
    let root = root_for(Os::Ol8);
    let user = r#"{
    "data-root": "/data/docker",
    "log-driver": "json-file",
    "log-opts": { "max-size": "100m", "max-file": "3" },
    "registry-mirrors": ["https://mirror.example.com"],
    "insecure-registries": ["registry.local:5000"],
    "runtimes": { "crun": { "path": "/usr/bin/crun" } },
    "default-ulimits": { "nofile": { "Name": "nofile", "Hard": 65536, "Soft": 65536 } }
}
"#;
    root.write("etc/docker/daemon.json", user);
    let s = site(
        Os::Ol8,
        "[docker.daemon]\ndefault_runtime_nvidia = true\ndefault_shm_size = \"1G\"\n",
    );
    let (rc, rep) = run(&root, "apply", &s, &["--only", "daemon-json"]);
    assert_eq!(rc, 0, "{rep:#}");
    let dj = step(&rep, "daemon-json");
    assert_eq!(dj["outcome"], "changed");
    assert!(text(&dj["reason"]).contains("runtimes.nvidia"), "{dj:#}");

    let before: Value = serde_json::from_str(user).unwrap_or_default();
    let after: Value =
        serde_json::from_str(&root.read("etc/docker/daemon.json")).unwrap_or_default();
    for k in [
        "data-root",
        "log-driver",
        "log-opts",
        "registry-mirrors",
        "insecure-registries",
    ] {
        assert_eq!(after[k], before[k], "{k}");
    }
    assert_eq!(after["runtimes"]["crun"], before["runtimes"]["crun"]);
    assert_eq!(
        after["default-ulimits"]["nofile"],
        before["default-ulimits"]["nofile"]
    );
    assert_eq!(
        after["runtimes"]["nvidia"]["path"],
        "nvidia-container-runtime"
    );
    assert_eq!(after["default-runtime"], "nvidia");
    assert_eq!(after["default-shm-size"], "1G");
    assert_eq!(after["default-ulimits"]["stack"]["Soft"], 67108864);
    assert!(restart_owed(&root).is_some_and(|r| r.contains("daemon.json changed")));

    // The same content, compacted by hand: not a change, and the file keeps its formatting.
    let compact = serde_json::to_string(&after).unwrap_or_default();
    root.write("etc/docker/daemon.json", &compact);
    let (rc, rep) = run(&root, "apply", &s, &["--only", "daemon-json"]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(step(&rep, "daemon-json")["outcome"], "unchanged");
    assert_eq!(root.read("etc/docker/daemon.json"), compact);
}

#[test]
fn invalid_daemon_json_is_refused_and_left_untouched() {
    let root = root_for(Os::Ol8);
    let broken = "{\n  \"data-root\": \"/data/docker\",\n  \"log-driver\": \"json-file\",\n}\n";
    root.write("etc/docker/daemon.json", broken);
    let s = site(Os::Ol8, "");
    let before = tree(&root);
    let (rc, rep) = run(&root, "apply", &s, &["--only", "daemon-json"]);
    assert_eq!(rc, 1, "{rep:#}");
    let dj = step(&rep, "daemon-json");
    assert_eq!(dj["outcome"], "failed");
    let reason = text(&dj["reason"]);
    assert!(
        reason.contains("daemon.json is not valid JSON") && reason.contains("line 4"),
        "{reason}"
    );
    assert!(!text(&dj["hint"]).is_empty());
    assert_eq!(root.read("etc/docker/daemon.json"), broken);
    assert_eq!(tree(&root), before);
    assert_eq!(restart_owed(&root), None, "nothing changed, nothing owed");
}

/// gpuhost killed right after writing daemon.json, before docker restarts (the failpoint
/// aborts the process there, as SIGKILL would stop it): the next run still owes the restart.
#[test]
fn a_crash_between_daemon_json_and_the_restart_still_restarts_next_run() {
    let root = root_for(Os::Ol8);
    let s = site(Os::Ol8, "");
    let (rc, rep) = run(&root, "apply", &s, &[]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(restart_owed(&root), None);

    let shm = "docker.daemon.default_shm_size=2G";
    let crashed = Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .env("HOME", World::get().home())
        .env("GPUHOST_FAILPOINT", "daemon-json:after-write")
        .args([
            "apply",
            "--format",
            "json",
            "--profile",
            &s.path,
            "--only",
            MINE,
        ])
        .args(["--set", shm, "--root"])
        .arg(root.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        crashed.status.code(),
        None,
        "not killed: {}",
        stderr(&crashed)
    );
    let dj: Value = serde_json::from_str(&root.read("etc/docker/daemon.json")).unwrap_or_default();
    assert_eq!(
        dj["default-shm-size"], "2G",
        "the crash came after the write"
    );
    assert!(
        restart_owed(&root).is_some_and(|r| r.contains("daemon.json changed")),
        "{}",
        owed(&root)
    );

    // The next plan shows the owed restart, though daemon.json is already as wanted.
    let (rc, plan) = run(&root, "plan", &s, &["--set", shm]);
    assert_eq!(rc, 0, "{plan:#}");
    assert_eq!(step(&plan, "daemon-json")["outcome"], "unchanged");
    let sv = step(&plan, "services");
    assert_eq!(sv["outcome"], "deferred", "{sv:#}");
    assert!(
        sv["deferred"]
            .to_string()
            .contains("restart docker.service (owed: /etc/docker/daemon.json changed"),
        "{sv:#}"
    );
    assert!(restart_owed(&root).is_some(), "a plan must not settle it");

    // The next apply reports it (deferred: a root has no running docker) and settles it.
    let (rc, rep) = run(&root, "apply", &s, &["--set", shm]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(step(&rep, "services")["outcome"], "deferred");
    assert_eq!(restart_owed(&root), None);
    let (rc, rep) = run(&root, "apply", &s, &["--set", shm]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(step(&rep, "services")["outcome"], "unchanged");
}

#[test]
fn toolkit_1_17_7_is_refused() {
    let root = root_for(Os::Ol8);
    let s = site(Os::Ol8, "");

    // Pinned in the profile: invalid input, nothing changed.
    let before = (root.rpmdb_snapshot(), root.tree_snapshot());
    let o = root.gpuhost(&[
        "apply",
        "--profile",
        &s.path,
        "--only",
        MINE,
        "--set",
        "container_toolkit.version=1.17.7",
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1.17.7") && stderr(&o).contains("enroot"),
        "{}",
        stderr(&o)
    );
    assert_eq!((root.rpmdb_snapshot(), root.tree_snapshot()), before);

    // Already installed and nothing pinned: the step fails, saying why and what to pin.
    let old = [
        "nvidia-container-toolkit-1.17.7",
        "nvidia-container-toolkit-base-1.17.7",
        "libnvidia-container-tools-1.17.7",
        "libnvidia-container1-1.17.7",
    ];
    let mut args = vec!["-y", "install"];
    args.extend_from_slice(&old);
    root.dnf_ok(&args);
    // `version = ""` unpins (the built-in profile pins 1.17.8).
    let o = root.gpuhost(&[
        "apply",
        "--format",
        "json",
        "--profile",
        &s.path,
        "--only",
        "container-toolkit",
        "--set",
        "container_toolkit.version=",
    ]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let rep = report(&o);
    let t = step(&rep, "container-toolkit");
    assert_eq!(t["outcome"], "failed");
    assert!(
        text(&t["reason"]).contains("1.17.7") && text(&t["reason"]).contains("enroot"),
        "{t:#}"
    );
    assert!(
        text(&t["hint"]).contains("container_toolkit.version"),
        "{t:#}"
    );

    // With a good pin, all four move to it in place.
    let (rc, rep) = run(&root, "apply", &s, &["--only", "container-toolkit"]);
    assert_eq!(rc, 0, "{rep:#}");
    for p in [
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
    ] {
        assert_eq!(root.installed(p).as_deref(), Some("1.17.8-1"), "{p}");
    }
}

fn link_of(root: &Root, rel: &str) -> Option<String> {
    std::fs::read_link(root.join(rel))
        .ok()
        .map(|p| p.display().to_string())
}

#[test]
fn nccl_files_are_linked_under_the_prefix_wrong_links_fixed_real_files_kept() {
    let root = root_for(Os::Ol8);
    let s = site(
        Os::Ol8,
        "[[prefix_links]]\npackages = [\"libnccl\", \"libnccl-devel\"]\nprefix = \"/opt/nvidia/nccl\"\n",
    );
    // A stale link from an older NCCL, and a real header someone copied in.
    std::fs::create_dir_all(root.join("opt/nvidia/nccl/lib")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(
        "/usr/lib64/libnccl.so.2.18.3",
        root.join("opt/nvidia/nccl/lib/libnccl.so.2"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    root.write("opt/nvidia/nccl/include/nccl.h", "/* my own copy */\n");

    let (rc, rep) = run(&root, "apply", &s, &["--only", "prefix-links"]);
    assert_eq!(rc, 1, "{rep:#}");
    let p = step(&rep, "prefix-links");
    assert_eq!(p["outcome"], "failed");
    assert!(
        text(&p["reason"]).contains("/opt/nvidia/nccl/include/nccl.h"),
        "{p:#}"
    );
    assert!(text(&p["hint"]).contains("move"), "{p:#}");
    assert!(
        root.installed("libnccl-devel").is_some(),
        "missing packages are installed"
    );
    assert_eq!(
        root.read("opt/nvidia/nccl/include/nccl.h"),
        "/* my own copy */\n"
    );
    for (rel, target) in [
        (
            "opt/nvidia/nccl/lib/libnccl.so.2",
            "/usr/lib64/libnccl.so.2",
        ),
        (
            "opt/nvidia/nccl/lib/libnccl.so.2.21.5",
            "/usr/lib64/libnccl.so.2.21.5",
        ),
        ("opt/nvidia/nccl/lib/libnccl.so", "/usr/lib64/libnccl.so"),
        (
            "opt/nvidia/nccl/lib/libnccl_static.a",
            "/usr/lib64/libnccl_static.a",
        ),
        (
            "opt/nvidia/nccl/include/nccl_net.h",
            "/usr/include/nccl_net.h",
        ),
    ] {
        assert_eq!(link_of(&root, rel).as_deref(), Some(target), "{rel}");
        assert!(root.join(target).exists(), "{target}");
    }
    // The links resolve inside the root (as they will on the booted host).
    assert_eq!(
        std::fs::read_to_string(root.join("usr/lib64/libnccl.so.2")).unwrap_or_default(),
        "synthetic libnccl 2.21.5\n"
    );

    // Once the real file is moved aside, the step converges, then stays put.
    std::fs::remove_file(root.join("opt/nvidia/nccl/include/nccl.h"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (rc, rep) = run(&root, "apply", &s, &["--only", "prefix-links"]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        link_of(&root, "opt/nvidia/nccl/include/nccl.h").as_deref(),
        Some("/usr/include/nccl.h")
    );
    let (rc, rep) = run(&root, "apply", &s, &["--only", "prefix-links"]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(step(&rep, "prefix-links")["outcome"], "unchanged");
    assert!(!Path::new(&root.join("opt/nvidia/nccl/lib64")).exists());
}

#[test]
fn the_smoke_test_is_deferred_in_an_install_root() {
    let root = root_for(Os::Ol8);
    let s = site(
        Os::Ol8,
        "[container_smoke]\nimage = \"nvcr.io/nvidia/cuda:12.2.2-base-ubi8\"\nimage_tarball = \"/srv/images/cuda.tar\"\n",
    );
    let (rc, rep) = run(&root, "plan", &s, &["--only", "container-smoke"]);
    assert_eq!(rc, 0, "{rep:#}");
    let sm = step(&rep, "container-smoke");
    assert_eq!(sm["outcome"], "deferred");
    let d = sm["deferred"].to_string();
    assert!(
        d.contains("docker run --rm --gpus all nvcr.io/nvidia/cuda:12.2.2-base-ubi8 nvidia-smi -L")
            && d.contains("docker load"),
        "{d}"
    );
}

/// The built-in profiles use the upstream repos; a root (or an air-gapped host) cannot reach
/// them, and the error says so and what to do instead of only dnf's words.
#[test]
fn an_unreachable_upstream_repo_says_to_use_a_local_mirror() {
    let root = root_for(Os::Ol8);
    let o = root.gpuhost(&[
        "apply",
        "--format",
        "json",
        "--profile",
        "ol8-uek",
        "--only",
        "docker",
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let rep = report(&o);
    let d = step(&rep, "docker");
    assert!(
        text(&d["reason"]).contains("docker-ce-stable repo (https://download.docker.com/"),
        "{d:#}"
    );
    assert!(text(&d["hint"]).contains("local mirror directory"), "{d:#}");
    assert!(root.installed("docker-ce").is_none());
}

/// Every step, for `--only` (the world's site profile, a fresh root): the driver steps, then
/// [`MINE`].
fn every_step() -> String {
    format!("kernel,kernel-headers,driver-repo,build-deps,driver,nouveau,kernel-module,fabric-manager,hgx-extras,persistenced,{MINE}")
}

/// A fresh OL8 root applied with every step, `site`'s profile and the world's 535 local repo
/// package, after `spoil` did something to the root: exit 1, and the ids of the failed steps.
fn fails_on(site: &Site, spoil: impl Fn(&Root)) -> (Root, Value, Vec<String>) {
    let root = root_for(Os::Ol8);
    spoil(&root);
    let rpm = World::get().cuda_local(world::CUDA_LOCAL_EL8_12_2);
    let set = format!("driver.local_repo_rpm={}", rpm.display());
    let (rc, rep) = run(
        &root,
        "apply",
        site,
        &["--only", &every_step(), "--set", &set],
    );
    assert_eq!(rc, 1, "{rep:#}");
    let failed = rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["outcome"] == "failed")
        .map(|s| text(&s["id"]))
        .collect();
    (root, rep, failed)
}

/// An unreachable `docker.repo` URL on a fresh node, every step selected: dnf cannot read it
/// in the first transaction (the local repo package's), which holds none of docker's packages.
/// The failure is docker's, naming the repo and its key with the mirror hint, not
/// `driver-repo`'s with dnf's raw text; driver-repo did not run (issue 34, item 8).
#[test]
fn an_unreachable_docker_repo_is_dockers_failure_with_the_mirror_hint() {
    let site = site(Os::Ol8, "[docker]\nrepo = \"http://127.0.0.1:9/docker\"\n");
    let (root, rep, failed) = fails_on(&site, |_| {});
    assert_eq!(failed, ["docker"], "{rep:#}");
    let d = step(&rep, "docker");
    assert!(
        text(&d["reason"]).contains(
            "docker-ce-stable repo (http://127.0.0.1:9/docker, from docker.repo) cannot be read"
        ),
        "{d:#}"
    );
    assert!(text(&d["hint"]).contains("local mirror directory"), "{d:#}");
    let r = step(&rep, "driver-repo");
    assert!(
        text(&r["reason"]).starts_with("not run: the package transaction failed on docker"),
        "{r:#}"
    );
    assert!(root.installed("cuda-repo-rhel8-12-2-local").is_none());
}

/// The batched transaction (the kernel headers, the driver and docker's packages) fails on
/// docker's (a package its mirror lists but no longer holds): docker fails; the steps the
/// transaction kept from running are "not run", not failed (before: kernel-module failed with a
/// DKMS hint, for want of the driver the transaction did not install) (issue 34, item 8).
#[test]
fn the_steps_a_failed_transaction_blocked_are_not_run() {
    let site = site(Os::Ol8, "");
    let (_root, rep, failed) = fails_on(&site, |root| {
        let mirror = root.join("srv/repos/docker-ce-stable/Packages");
        for e in std::fs::read_dir(mirror).into_iter().flatten().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with("docker-ce-cli-")
            {
                std::fs::remove_file(e.path()).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    });
    assert_eq!(failed, ["docker"], "{rep:#}");
    // persistenced's package was in the failed transaction itself.
    let p = step(&rep, "persistenced");
    assert!(
        p["outcome"] == "skipped"
            && text(&p["reason"]).starts_with("not run: the package transaction failed on docker"),
        "{p:#}"
    );
    for id in ["nouveau", "kernel-module", "daemon-json", "services"] {
        let s = step(&rep, id);
        assert!(
            s["outcome"] == "skipped"
                && text(&s["reason"]).starts_with("not run: step docker failed"),
            "{s:#}"
        );
    }
}
