//! The walking skeleton, end to end: the real `gpuhost` binary against install roots made from
//! the test world, with the real rpm and dnf.

// Tests fail by panicking.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

#[path = "world/mod.rs"]
mod world;

use rstest::rstest;
use serde_json::Value;
use world::{
    code, evr, report, stderr, stdout, step, Os, Root, RHCK8, RHCK8_OLD, RHCK9, UEK8_NEW,
    UEK8_NO_DEVEL, UEK8_OLD, UEK9,
};

/// The skeleton's own steps; the driver and container steps have their own tests.
const KERNEL_STEPS: &str = "kernel,kernel-headers";

fn apply_json(root: &Root, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["apply", "--format", "json"];
    if !extra.contains(&"--only") && !extra.contains(&"--skip") {
        args.extend_from_slice(&["--only", KERNEL_STEPS]);
    }
    args.extend_from_slice(extra);
    let o = root.gpuhost(&args);
    (code(&o), report(&o))
}

#[test]
fn uek_root_gets_exactly_the_matching_headers_then_stays_unchanged() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD, UEK8_NEW]);

    // plan: says what would change and why, changes nothing
    let before = root.rpmdb_snapshot();
    let o = root.gpuhost(&[
        "plan",
        "--profile",
        "ol8-uek",
        "--only",
        KERNEL_STEPS,
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let plan = report(&o);
    let h = step(&plan, "kernel-headers");
    assert_eq!(h["outcome"], "would-change");
    let reason = h["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("kernel-uek-devel-{UEK8_NEW}"))
            && reason.contains("target kernel"),
        "{reason}"
    );
    assert_eq!(root.rpmdb_snapshot(), before, "plan changed the rpmdb");

    // apply: installs the header package of the newest UEK kernel, and only that one
    let (rc, rep) = apply_json(&root, &["--profile", "ol8-uek"]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(step(&rep, "kernel")["outcome"], "unchanged");
    let h = step(&rep, "kernel-headers");
    assert_eq!(h["outcome"], "changed");
    assert!(h["commands"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["argv"][0] == "dnf")));
    assert_eq!(
        root.installed_all("kernel-uek-devel"),
        vec![evr(UEK8_NEW).to_string()]
    );
    assert!(root
        .join(&format!("usr/src/kernels/{UEK8_NEW}/Makefile"))
        .exists());

    // second apply: unchanged, and no dnf process at all
    let (o, execs) = root.gpuhost_traced(&[
        "apply",
        "--profile",
        "ol8-uek",
        "--only",
        KERNEL_STEPS,
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let rep = report(&o);
    for s in rep["steps"].as_array().into_iter().flatten() {
        assert!(
            s["outcome"] == "unchanged" || s["outcome"] == "skipped",
            "{s:#}"
        );
    }
    let ran: Vec<String> = rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["commands"].as_array().cloned().unwrap_or_default())
        .map(|c| c["argv"][0].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(!ran.iter().any(|p| p == "dnf"), "{ran:?}");
    if let Some(execs) = execs {
        assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
    }

    // plan on the converged root: every step unchanged
    let o = root.gpuhost(&["plan", "--profile", "ol8-uek", "--only", KERNEL_STEPS]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("nothing to change"), "{}", stdout(&o));
}

#[rstest]
#[case::ol8(Os::Ol8, "ol8-rhck", &[RHCK8_OLD, RHCK8], RHCK8, &["kernel-devel", "kernel-headers"])]
#[case::ol9(Os::Ol9, "ol9-rhck", &[RHCK9], RHCK9, &["kernel-devel", "kernel-devel-matched", "kernel-headers"])]
fn rhck_root_gets_kernel_devel_and_kernel_headers(
    #[case] os: Os,
    #[case] profile: &str,
    #[case] kernels: &[&str],
    #[case] target: &str,
    #[case] packages: &[&str],
) {
    let root = Root::new(os, kernels);
    let (rc, rep) = apply_json(&root, &["--profile", profile]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(rep["target_kernel"], target);
    for p in packages {
        assert!(root.installed(p).is_some(), "{p} not installed");
    }
    assert_eq!(
        root.installed_all("kernel-devel"),
        vec![evr(target).to_string()]
    );
    let (rc, rep) = apply_json(&root, &["--profile", profile]);
    assert_eq!(rc, 0);
    assert_eq!(step(&rep, "kernel-headers")["outcome"], "unchanged");
}

#[test]
fn ol9_uek_root_converges() {
    let root = Root::new(Os::Ol9, &[UEK9]);
    let (rc, rep) = apply_json(&root, &["--profile", "ol9-uek"]);
    assert_eq!(rc, 0, "{rep:#}");
    assert_eq!(
        root.installed("kernel-uek-devel").as_deref(),
        Some(evr(UEK9))
    );
}

#[test]
fn default_boot_kernel_other_than_the_target_gets_headers_too() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD, UEK8_NEW]).with_default_kernel(UEK8_NEW);
    let (rc, rep) = apply_json(
        &root,
        &["--profile", "ol8-uek", "--kernel-release", UEK8_OLD],
    );
    assert_eq!(rc, 0, "{rep:#}");
    let reason = step(&rep, "kernel-headers")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.contains("default boot kernel"), "{reason}");
    assert_eq!(
        root.installed_all("kernel-uek-devel"),
        vec![evr(UEK8_OLD).to_string(), evr(UEK8_NEW).to_string()]
    );
}

#[test]
fn missing_header_package_fails_naming_it_and_the_available_versions() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD, UEK8_NO_DEVEL]);
    let before = root.rpmdb_snapshot();
    let (rc, rep) = apply_json(&root, &["--profile", "ol8-uek"]);
    assert_eq!(rc, 1, "{rep:#}");
    let h = step(&rep, "kernel-headers");
    assert_eq!(h["outcome"], "failed");
    let reason = h["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "kernel-uek-devel-{UEK8_NO_DEVEL} is not in any enabled repo"
        )),
        "{reason}"
    );
    assert!(
        reason.contains(evr(UEK8_OLD)) && reason.contains(evr(UEK8_NEW)),
        "{reason}"
    );
    assert!(h["hint"].as_str().is_some_and(|h| !h.is_empty()));
    assert_eq!(
        root.rpmdb_snapshot(),
        before,
        "a failed install changed the rpmdb"
    );

    // The text report says the same in one place, with what to do.
    let o = root.gpuhost(&["apply", "--profile", "ol8-uek", "--only", KERNEL_STEPS]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(
        out.contains("failed: kernel-headers") && out.contains("what to do"),
        "{out}"
    );
}

#[test]
fn an_ubuntu_root_is_refused_with_exit_2() {
    let root = Root::new(Os::Ubuntu, &[]);
    let before = root.tree_snapshot();
    let o = root.gpuhost(&["apply", "--profile", "ol8-uek", "--only", KERNEL_STEPS]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("not Oracle Linux") && err.contains("Ubuntu"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(root.tree_snapshot(), before);
}

#[rstest]
#[case::uek_profile_on_rhck(Os::Ol8, &[RHCK8], "ol8-uek", "ol8-rhck")]
#[case::rhck_profile_on_uek(Os::Ol8, &[UEK8_NEW], "ol8-rhck", "ol8-uek")]
#[case::ol8_profile_on_ol9(Os::Ol9, &[UEK9], "ol8-uek", "ol9-uek")]
fn a_profile_for_another_kernel_or_release_names_the_right_one(
    #[case] os: Os,
    #[case] kernels: &[&str],
    #[case] profile: &str,
    #[case] right: &str,
) {
    let root = Root::new(os, kernels);
    let before = (root.rpmdb_snapshot(), root.tree_snapshot());
    let o = root.gpuhost(&["apply", "--profile", profile]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("--profile {right}")),
        "{}",
        stderr(&o)
    );
    assert_eq!((root.rpmdb_snapshot(), root.tree_snapshot()), before);
}

/// Bad profiles and bad flags: exit 2, a message naming the problem, the root untouched.
#[test]
fn malformed_profiles_and_bad_flags_exit_2_and_change_nothing() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        p.display().to_string()
    };
    let typo = file(
        "typo.toml",
        "extends = \"ol8-uek\"\n[driver]\nstrem = \"535-dkms\"\n",
    );
    let wrong_type = file(
        "type.toml",
        "extends = \"ol8-uek\"\n[status]\nexpect_gpus = \"eight\"\n",
    );
    let bad_extends = file("ext.toml", "extends = \"ol7-uek\"\n");
    let not_toml = file("broken.toml", "extends = \"ol8-uek\n[driver\n");
    let unknown_section = file("section.toml", "extends = \"ol8-uek\"\n[gpus]\ncount = 8\n");
    let no_kver = file(
        "nokver.toml",
        "extends = \"ol8-uek\"\n[kernel]\ndevel_packages = [\"kernel-uek-devel\"]\n",
    );
    let bad_sha = file(
        "sha.toml",
        "extends = \"ol8-uek\"\n[driver]\nsha256 = \"xyz\"\n",
    );
    let extends_type = file("exttype.toml", "extends = 8\n");
    let missing_file = dir.path().join("nope.toml").display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--profile".into(), typo], "strem"),
        (vec!["--profile".into(), wrong_type], "status.expect_gpus"),
        (vec!["--profile".into(), bad_extends], "ol7-uek"),
        (vec!["--profile".into(), not_toml], "not valid TOML"),
        (vec!["--profile".into(), unknown_section], "gpus"),
        (vec!["--profile".into(), no_kver], "{kver}"),
        (vec!["--profile".into(), bad_sha], "driver.sha256"),
        (vec!["--profile".into(), extends_type], "extends"),
        (vec!["--profile".into(), missing_file], "nope.toml"),
        (
            vec!["--profile".into(), "ol7-uek".into()],
            "unknown profile `ol7-uek`",
        ),
        (
            vec![
                "--profile=ol8-uek".into(),
                "--set".into(),
                "driver.stream".into(),
            ],
            "key.path=value",
        ),
        (
            vec![
                "--profile=ol8-uek".into(),
                "--set".into(),
                "driver.nope=1".into(),
            ],
            "nope",
        ),
        (
            vec![
                "--profile=ol8-uek".into(),
                "--set".into(),
                "os.major=7".into(),
            ],
            "os.major",
        ),
        (
            vec![
                "--profile=ol8-uek".into(),
                "--set".into(),
                "kernel.flavour=xen".into(),
            ],
            "kernel.flavour",
        ),
        (
            vec!["--profile=ol8-uek".into(), "--only".into(), "kernal".into()],
            "unknown step `kernal`",
        ),
        (
            vec![
                "--profile=ol8-uek".into(),
                "--skip".into(),
                "driver-x".into(),
            ],
            "unknown step `driver-x`",
        ),
        (
            vec![
                "--profile=ol8-uek".into(),
                "--kernel-release".into(),
                "5.15.0-999.el8uek.x86_64".into(),
            ],
            "no such kernel",
        ),
        (
            vec!["--profile=ol8-uek".into(), "--format".into(), "yaml".into()],
            "yaml",
        ),
        (
            vec!["--profile=ol8-uek".into(), "--bogus-flag".into()],
            "--bogus-flag",
        ),
        (vec![], "--profile"),
    ];
    assert!(cases.len() >= 15);
    let before = (root.rpmdb_snapshot(), root.tree_snapshot());
    for (args, needle) in &cases {
        let mut argv = vec!["apply"];
        argv.extend(args.iter().map(String::as_str));
        let o = root.gpuhost(&argv);
        assert_eq!(code(&o), 2, "{argv:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(needle),
            "{argv:?}: {} lacks {needle}",
            stderr(&o)
        );
    }
    assert_eq!((root.rpmdb_snapshot(), root.tree_snapshot()), before);
    // a nonexistent root
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .args([
            "apply",
            "--profile",
            "ol8-uek",
            "--root",
            "/nonexistent/root",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("/nonexistent/root"));
}

#[test]
fn set_overrides_reach_the_run_and_profiles_show() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    // --set that empties the extra packages of an RHCK-like override is applied
    let (rc, rep) = apply_json(
        &root,
        &[
            "--profile",
            "ol8-uek",
            "--set",
            "kernel.extra_packages=[\"kernel-headers\"]",
        ],
    );
    assert_eq!(rc, 0, "{rep:#}");
    assert!(root.installed("kernel-headers").is_some());
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .args([
            "profiles",
            "show",
            "ol8-uek",
            "--set",
            "driver.stream=535-dkms",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&o), 0);
    assert!(
        stdout(&o).contains("stream = \"535-dkms\""),
        "{}",
        stdout(&o)
    );
}

#[test]
fn only_and_skip_select_steps() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (rc, rep) = apply_json(
        &root,
        &[
            "--profile",
            "ol8-uek",
            "--only",
            KERNEL_STEPS,
            "--skip",
            "kernel-headers",
        ],
    );
    assert_eq!(rc, 0);
    assert_eq!(step(&rep, "kernel-headers")["outcome"], "skipped");
    assert!(root.installed("kernel-uek-devel").is_none());
    let (rc, rep) = apply_json(&root, &["--profile", "ol8-uek", "--only", "kernel"]);
    assert_eq!(rc, 0);
    assert_eq!(step(&rep, "kernel")["outcome"], "unchanged");
    assert_eq!(step(&rep, "kernel-headers")["outcome"], "skipped");
}

#[test]
fn json_report_has_the_documented_fields_and_the_journal_records_runs() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (rc, rep) = apply_json(&root, &["--profile", "ol8-uek"]);
    assert_eq!(rc, 0);
    for key in [
        "profile",
        "root",
        "dry_run",
        "target_kernel",
        "exit_code",
        "duration_ms",
        "steps",
    ] {
        assert!(rep.get(key).is_some(), "no {key} in {rep:#}");
    }
    for s in rep["steps"].as_array().into_iter().flatten() {
        for key in ["id", "outcome", "reason", "commands", "duration_ms"] {
            assert!(s.get(key).is_some(), "no {key} in {s:#}");
        }
    }
    let journal: Value = serde_json::from_str(&root.read("var/lib/gpuhost/journal.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(journal.as_array().map(Vec::len), Some(1));
    assert_eq!(journal[0]["steps"][1]["outcome"], "changed");
    // a plan does not write the journal
    let o = root.gpuhost(&["plan", "--profile", "ol8-uek", "--only", KERNEL_STEPS]);
    assert_eq!(code(&o), 0);
    let journal: Value = serde_json::from_str(&root.read("var/lib/gpuhost/journal.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(journal.as_array().map(Vec::len), Some(1));
}

#[test]
fn a_second_apply_waits_for_no_one_and_says_who_holds_the_lock() {
    use std::io::Write;
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let path = root.join("var/lib/gpuhost/apply.lock");
    std::fs::create_dir_all(path.parent().unwrap_or(root.path())).unwrap_or_else(|e| panic!("{e}"));
    let mut f = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{e}"));
    f.lock().unwrap_or_else(|e| panic!("{e}"));
    writeln!(
        f,
        "pid 4242 since 2026-12-02T18:00:00Z (gpuhost apply --profile ol8-uek)"
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let before = root.rpmdb_snapshot();
    let o = root.gpuhost(&["apply", "--profile", "ol8-uek", "--only", KERNEL_STEPS]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("pid 4242"), "{}", stderr(&o));
    assert_eq!(root.rpmdb_snapshot(), before);
    drop(f);
    let o = root.gpuhost(&["apply", "--profile", "ol8-uek", "--only", KERNEL_STEPS]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn facts_reports_kernels_devices_and_boot_state() {
    let root = Root::new(Os::Ol8, &[RHCK8, UEK8_OLD, UEK8_NEW]).with_default_kernel(UEK8_OLD);
    root.add_pci_device("0000:19:00.0", 0x10de, 0x2335, 0x030200);
    root.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
    let o = root.gpuhost(&["facts", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let f = report(&o);
    assert_eq!(f["os"]["id"], "ol");
    assert_eq!(f["default_boot_kernel"], UEK8_OLD);
    assert_eq!(f["installed_kernels"].as_array().map(Vec::len), Some(3));
    assert_eq!(f["gpus"][0]["address"], "0000:19:00.0");
    assert_eq!(f["gpus"][0]["kind"]["arch"], "hopper");
    assert_eq!(f["gpus"][0]["kind"]["product"], "H200 SXM 141GB");
    assert_eq!(f["nvswitches"][0]["device_id"], "22a3");
    assert_eq!(f["nouveau_loaded"], false);
    let o = root.gpuhost(&["facts"]);
    assert!(
        stdout(&o).contains("nvswitches           1"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("0000:19:00.0 [10de:2335] H200 SXM 141GB (Hopper)"),
        "{}",
        stdout(&o)
    );
}

/// Every step together: a fresh OL8 UEK root with the driver's local repo package converges
/// (the world's Docker and toolkit repos stand in for the internet), and a second apply changes
/// nothing and starts no dnf.
#[test]
fn the_whole_registry_converges_and_then_stays_unchanged() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let rpm = world::World::get().cuda_local(world::CUDA_LOCAL_EL8_12_2);
    let set = format!("driver.local_repo_rpm={}", rpm.display());
    let profile = world::profile("ol8-uek");
    let args = [
        "apply",
        "--profile",
        &profile,
        "--set",
        &set,
        "--format",
        "json",
    ];
    // The plan on the fresh root: every step that has something to do says so; none fails.
    let mut plan = args;
    plan[0] = "plan";
    let o = root.gpuhost(&plan);
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    for s in rep["steps"].as_array().into_iter().flatten() {
        let outcome = s["outcome"].as_str().unwrap_or_default();
        assert!(
            ["would-change", "skipped", "unchanged"].contains(&outcome),
            "{s:#}"
        );
    }
    assert_eq!(step(&rep, "services")["outcome"], "would-change");
    let o = root.gpuhost(&args);
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    let ids: Vec<&str> = rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["id"].as_str())
        .collect();
    for id in [
        "kernel",
        "kernel-headers",
        "driver-repo",
        "driver",
        "kernel-module",
        "docker",
        "daemon-json",
        "services",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    assert!(root.installed("nvidia-driver").is_some());
    assert!(root.installed("docker-ce").is_some());
    let (o, execs) = root.gpuhost_traced(&args);
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    world::assert_converged(&rep);
    if let Some(execs) = execs {
        assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
    }
}

/// The distinct dnf commands the report lists (a transaction shared by several steps is listed
/// under each of them), as (subcommand, operands).
fn dnf_commands(rep: &Value) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for s in rep["steps"].as_array().into_iter().flatten() {
        for c in s["commands"].as_array().into_iter().flatten() {
            let argv: Vec<String> = c["argv"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            if argv.first().map(String::as_str) != Some("dnf") {
                continue;
            }
            let words: Vec<String> = argv[1..]
                .iter()
                .filter(|a| !a.starts_with('-'))
                .cloned()
                .collect();
            if !out.contains(&words) {
                out.push(words);
            }
        }
    }
    out
}

/// A fresh host: every step's package work goes into one dnf transaction — NVIDIA's local repo
/// package (its repo read from the package's checked copy) and everything else, the module
/// stream included — and the DKMS build in it already has the kernel's compiler and the
/// override (no rebuild, no second transaction).
#[test]
fn a_fresh_host_takes_one_dnf_transaction() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let rpm = world::World::get().cuda_local(world::CUDA_LOCAL_EL8_12_2);
    let set = format!("driver.local_repo_rpm={}", rpm.display());
    let profile = world::profile("ol8-uek");
    let args = [
        "apply",
        "--profile",
        &profile,
        "--set",
        &set,
        "--format",
        "json",
    ];
    let (o, execs) = root.gpuhost_traced(&args);
    let rep = report(&o);
    assert_eq!(code(&o), 0, "{rep:#}");
    // One transaction: the local repo package, from its checked copy on the root's disk, and
    // everything else (issue 34, item 1: all or nothing, every package on local disk first).
    let dnf = dnf_commands(&rep);
    assert_eq!(dnf.len(), 1, "{dnf:#?}");
    assert_eq!(
        dnf[0].first().map(String::as_str),
        Some("shell"),
        "{dnf:#?}"
    );
    let copy = root.join(&format!(
        "/var/cache/gpuhost/packages/{}",
        world::CUDA_LOCAL_EL8_12_2
    ));
    assert!(!copy.exists(), "the copy is removed after the transaction");
    // What it installed, as the steps' changes say it.
    let second: String = rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["reason"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join(" ");
    for needle in [
        "install",
        // no GPU on PCI, flavour "auto": the open modules
        "@nvidia-driver:open-dkms/default",
        &format!("kernel-uek-devel-{UEK8_NEW}"),
        "gcc-toolset-11-gcc",
        "kmod-nvidia-open-dkms",
        "gcc-c++",
        "docker-ce",
        "nvidia-container-toolkit-1.17.8",
    ] {
        assert!(second.contains(needle), "{needle} not in {second}");
    }
    // Two dnf processes: the script resolved with --assumeno (its lines checked before `run`,
    // issue 51), then the one transaction.
    if let Some(execs) = execs {
        let n = execs.iter().filter(|p| p.starts_with("dnf")).count();
        assert_eq!(n, 2, "dnf processes: {execs:?}");
    }
    let checked = rep["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["commands"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["argv"].to_string().contains("--assumeno"))
        .count();
    assert!(checked >= 1, "{rep:#}");
    // Outcomes per step as before: each step that had work says what it changed.
    for id in [
        "kernel-headers",
        "driver-repo",
        "build-deps",
        "driver",
        "nouveau",
        "persistenced",
        "docker",
        "container-toolkit",
        "daemon-json",
        "services",
    ] {
        assert_eq!(step(&rep, id)["outcome"], "changed", "{id}: {rep:#}");
    }
    // NVIDIA's %post builds for the running kernel only (in a root: the build host's, which
    // fails quietly), so kernel-module builds the root's kernel with `dkms install -k`, with
    // the toolset build-deps configured: no third dnf transaction.
    assert_eq!(step(&rep, "kernel-module")["outcome"], "changed", "{rep:#}");
    assert!(root
        .join(&format!("/lib/modules/{UEK8_NEW}/extra/nvidia.ko.xz"))
        .is_file());
    let (o, execs) = root.gpuhost_traced(&args);
    assert_eq!(code(&o), 0);
    assert!(dnf_commands(&report(&o)).is_empty());
    if let Some(execs) = execs {
        assert!(!execs.iter().any(|p| p.starts_with("dnf")), "{execs:?}");
    }
}

/// A merged transaction that fails names the step whose packages dnf could not resolve, with
/// that step's own message; the other steps of the transaction are not run, and nothing of
/// it is installed.
#[test]
fn a_failed_transaction_fails_the_step_it_could_not_resolve_and_runs_no_other() {
    let root = Root::new(Os::Ol8, &[UEK8_OLD, UEK8_NO_DEVEL]);
    let profile = world::profile("ol8-uek");
    let o = root.gpuhost(&[
        "apply",
        "--profile",
        &profile,
        "--set",
        "driver.manage=false",
        "--format",
        "json",
    ]);
    let rep = report(&o);
    assert_eq!(code(&o), 1, "{rep:#}");
    let h = step(&rep, "kernel-headers");
    assert_eq!(h["outcome"], "failed", "{h:#}");
    let reason = h["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "kernel-uek-devel-{UEK8_NO_DEVEL} is not in any enabled repo"
        )) && reason.contains(evr(UEK8_OLD)),
        "{reason}"
    );
    for id in ["docker", "container-toolkit"] {
        let s = step(&rep, id);
        assert_eq!(s["outcome"], "skipped", "{s:#}");
        let r = s["reason"].as_str().unwrap_or_default();
        assert!(
            r.contains("not run: the package transaction failed on kernel-headers"),
            "{r}"
        );
    }
    for later in ["daemon-json", "services"] {
        assert_eq!(step(&rep, later)["outcome"], "skipped", "{later}");
    }
    assert!(root.installed("docker-ce").is_none());
    assert!(root.installed("nvidia-container-toolkit").is_none());
}

#[test]
fn steps_lists_the_registry_in_the_order_apply_runs_it() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .arg("steps")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&o), 0);
    let ids: Vec<String> = stdout(&o)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert_eq!(
        ids,
        [
            "kernel",
            "kernel-headers",
            "driver-repo",
            "build-deps",
            "driver",
            "nouveau",
            "kernel-module",
            "fabric-manager",
            "hgx-extras",
            "persistenced",
            "docker",
            "container-toolkit",
            "daemon-json",
            "services",
            "prefix-links",
            "container-smoke",
        ]
    );
}
