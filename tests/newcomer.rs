//! A new user's first hour, with the real binary: the README's quick start walked in order on a
//! fresh root, quiet converged runs whose summary counts what the report says in every format,
//! every profile key discoverable, hints that fit the host, and a profile that manages the
//! driver but names none stopped before any change.

// Test helpers fail the test by panicking, with what was printed in the message.
#![allow(clippy::panic, clippy::unwrap_used)]

#[path = "support/docs.rs"]
mod docs;
#[path = "support/status.rs"]
mod support;
#[path = "world/mod.rs"]
mod world;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use support::check;
use world::{code, report, stderr, stdout, step, Os, Root, World, UEK8_NEW, UEK8_OLD};

const GPUHOST: &str = env!("CARGO_BIN_EXE_gpuhost");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The commands of the README's quick start, in order, comments dropped (a command continued
/// with `\` on the next line is one).
fn quick_start() -> Vec<String> {
    docs::delegated(file!(), "README.md", "quick-start")
        .commands()
        .iter()
        .map(|l| {
            l.lines()
                .map(|p| p.split(" #").next().unwrap_or_default().trim())
                .map(|p| p.trim_end_matches('\\').trim())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The summary line of a text report: its last line starting with the verdict.
fn summary_line(text: &str, verdict: &str) -> String {
    text.lines()
        .rfind(|l| l.starts_with(verdict))
        .unwrap_or_else(|| panic!("no {verdict:?} line in:\n{text}"))
        .to_string()
}

/// The README's quick start, command by command, as a new user types it: `./demo.sh --keep`,
/// then `. env`, then gpuhost on the kept root. `target/demo` becomes a fresh directory; the
/// demo runs the binary under test instead of installing one (a `cargo install` inside
/// `cargo test` would wait on the build lock).
#[test]
fn the_readme_quick_start_walks_in_order_on_a_fresh_root() {
    let commands = quick_start();
    assert!(
        commands[0].starts_with("./demo.sh"),
        "the first command must be the demo (it installs gpuhost): {commands:?}"
    );
    // The README's first command is this walk's first, which it runs below.
    let demo = docs::delegated(file!(), "README.md", "demo").commands();
    assert_eq!(demo, [commands[0].clone()]);
    let demo = std::fs::read_to_string(repo().join("demo.sh")).unwrap();
    assert!(
        demo.contains("cargo install --quiet --locked --force --path \"$here/agent\""),
        "demo.sh must put gpuhost's release build on the PATH"
    );
    World::get(); // built (under its lock) before the demo looks for it
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let bin_dir = Path::new(GPUHOST).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut setup = String::new();
    // Which of the quick start's kinds of command were walked and checked.
    let mut walked: Vec<&str> = Vec::new();
    for line in &commands {
        let cmd = line.replace("target/demo", &dir.display().to_string());
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!("set -euo pipefail\n{setup}\n{cmd}"))
            .current_dir(repo())
            .env("PATH", &path)
            .env("GPUHOST_BIN", GPUHOST)
            .output()
            .unwrap();
        let (out, err) = (stdout(&o), stderr(&o));
        let ctx = format!("$ {cmd}\nexit {}\n{out}\n{err}", code(&o));
        assert_eq!(code(&o), 0, "{ctx}");
        if cmd.starts_with("./demo.sh --keep ") {
            assert!(dir.join("root/var/lib/rpm").is_dir(), "{ctx}");
            // Not a terminal: no escape codes in what a log keeps (issue 54).
            assert!(!out.contains('\x1b') && !err.contains('\x1b'), "{ctx}");
            assert!(dir.join("env").is_file() && dir.join("profile.toml").is_file());
            assert!(
                out.contains("$ gpuhost plan") && out.contains("would-change"),
                "{ctx}"
            );
            let first = out
                .lines()
                .find(|l| l.starts_with("converged — "))
                .unwrap_or_default();
            assert!(first.contains(" changed,"), "{ctx}");
            let last = summary_line(&out, "converged — ");
            assert!(
                !last.contains(" changed,"),
                "the second apply changed something: {ctx}"
            );
            assert!(out.contains(&format!(". {}/env", dir.display())), "{ctx}");
            walked.push("demo");
        } else if cmd.starts_with(". ") {
            assert!(out.is_empty() && err.is_empty(), "{ctx}");
            setup.push_str(&cmd);
            setup.push('\n');
            walked.push("env");
        } else if cmd.starts_with("gpuhost apply ") && cmd.contains("driver.local_repo_rpm=") {
            // The upgrade: one driver for another, the 12.4 local repo package for 12.2's.
            let last = summary_line(&out, "converged — ");
            assert!(last.contains(" changed,"), "{ctx}");
            let driver = installed_in(&dir.join("root"), "nvidia-driver");
            assert!(driver.starts_with("550.54.15"), "{driver}\n{ctx}");
            assert!(
                installed_in(&dir.join("root"), "cuda-repo-rhel8-12-4-local").starts_with("12.4.1"),
                "{ctx}"
            );
            walked.push("upgrade");
        } else if cmd.starts_with("gpuhost rollback ") {
            assert!(err.contains("driver 550.54.15 → 535.104.05"), "{ctx}");
            let last = summary_line(&out, "converged — ");
            assert!(last.contains(" changed,"), "{ctx}");
            let driver = installed_in(&dir.join("root"), "nvidia-driver");
            assert!(driver.starts_with("535.104.05"), "{driver}\n{ctx}");
            assert!(
                installed_in(&dir.join("root"), "cuda-repo-rhel8-12-4-local").is_empty(),
                "{ctx}"
            );
            walked.push("rollback");
        } else if cmd.starts_with("gpuhost apply ") {
            let last = summary_line(&out, "converged — ");
            assert!(!last.contains(" changed,"), "{ctx}");
            assert!(last.contains("; 0 deferred actions; 0 warnings"), "{ctx}");
            // converged: not one progress line
            assert!(err.is_empty(), "{ctx}");
            walked.push("apply");
        } else if cmd.starts_with("gpuhost facts ") {
            assert!(out.contains("Oracle Linux Server 8.10"), "{ctx}");
            assert!(out.contains(&format!("{UEK8_NEW} (UEK)")), "{ctx}");
            assert!(!out.contains("supported"), "{ctx}");
            walked.push("facts");
        } else if cmd == "gpuhost profiles show ol8-uek --all" {
            assert!(
                out.contains("# local_repo_rpm = <string>  (unset)"),
                "{ctx}"
            );
            walked.push("profiles");
        } else {
            panic!("the README's quick start gained a command this test does not check: {cmd}");
        }
    }
    // The block still holds, in order, what the quick start's text describes: the demo, its
    // env, a converged apply, facts, every profile key.
    assert_eq!(
        walked,
        ["demo", "env", "apply", "facts", "upgrade", "rollback", "profiles"],
        "{commands:?}"
    );
    // `./demo.sh --help` says how to use it, exit 0 (issue 54); a wrong argument is exit 2.
    let o = Command::new("bash")
        .arg("demo.sh")
        .arg("--help")
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("usage: ") && stdout(&o).contains("--keep DIR"));
    let o = Command::new("bash")
        .arg("demo.sh")
        .arg("--kept")
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stdout(&o));

    // The packages the README says the demo root gets are what its apply installed: the
    // root's rpm database against that of a fresh root made as demo.sh makes it.
    let names = |o: Output| -> BTreeSet<String> {
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).lines().map(str::to_string).collect()
    };
    let query = ["--dbpath", "/var/lib/rpm", "-qa", "--qf", "%{NAME}\n"];
    let demo_root = Command::new("rpm")
        .arg("--root")
        .arg(dir.join("root"))
        .args(query)
        .output()
        .unwrap();
    let fresh = Root::new(Os::Ol8, &[UEK8_OLD, UEK8_NEW]);
    let base = names(fresh.rpm(&query));
    let installed: BTreeSet<String> = names(demo_root).difference(&base).cloned().collect();
    let listed: BTreeSet<String> =
        docs::code_spans(&docs::checked(file!(), "README.md", "demo-packages"))
            .into_iter()
            .collect();
    assert_eq!(
        listed, installed,
        "README.md's list of the demo root's packages (left) is not what the demo installed (right)"
    );
    assert!(
        base.contains("kernel-uek") && base.contains("oraclelinux-release"),
        "{base:?}"
    );
}

/// VERSION-RELEASE of a package in an install root (empty when not installed).
fn installed_in(root: &Path, name: &str) -> String {
    let o = Command::new("rpm")
        .arg("--root")
        .arg(root)
        .args([
            "--dbpath",
            "/var/lib/rpm",
            "-q",
            "--qf",
            "%{VERSION}-%{RELEASE}",
            name,
        ])
        .output()
        .unwrap();
    if o.status.success() {
        stdout(&o)
    } else {
        String::new()
    }
}

/// A site profile file for world roots: the world's ol8-uek plus `extra` TOML.
fn site(dir: &Path, extra: &str) -> String {
    let p = dir.join("site.toml");
    std::fs::write(
        &p,
        format!("extends = {:?}\n{extra}", world::profile("ol8-uek")),
    )
    .unwrap();
    p.display().to_string()
}

fn last_journal_entry(root: &Root) -> Value {
    let j: Value = serde_json::from_str(&root.read("var/lib/gpuhost/journal.json")).unwrap();
    let runs = j
        .as_array()
        .or_else(|| j["runs"].as_array())
        .unwrap_or_else(|| panic!("journal: {j:#}"));
    runs.last().cloned().unwrap()
}

/// `driver.manage = false`: the apply says in its summary that it manages no driver; the
/// deferred docker restart is counted the same in the text summary, its `deferred` lines and
/// the JSON report (the journal keeps it); progress lines come only from steps that change;
/// and the converged second apply prints no progress line at all.
#[test]
fn converged_runs_are_quiet_and_the_summary_counts_what_the_steps_say() {
    let tmp = tempfile::tempdir().unwrap();
    let profile = site(tmp.path(), "[driver]\nmanage = false\n");
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let o = root.gpuhost(&["apply", "--profile", &profile]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(code(&o), 0, "{out}\n{err}");
    let line = summary_line(&out, "converged — ");
    assert!(
        line.contains(
            "; 1 deferred action; 0 warnings; NVIDIA driver not managed (driver.manage = false)"
        ),
        "{line}"
    );
    assert!(
        out.contains("\n  deferred  services: systemctl restart docker.service"),
        "{out}"
    );
    // every driver step says why it did nothing
    for id in ["driver-repo", "driver", "kernel-module", "persistenced"] {
        let l = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{id} ")))
            .unwrap_or_default();
        assert!(
            l.contains("skipped") && l.contains("driver.manage = false"),
            "{l}"
        );
    }
    let j = last_journal_entry(&root);
    assert_eq!(j["deferred"].as_array().map(Vec::len), Some(1), "{j:#}");
    assert_eq!(j["warnings"], serde_json::json!([]));
    assert_eq!(j["driver_managed"], false);
    let json_summary = j["summary"].as_str().unwrap_or_default();
    assert!(line.starts_with(json_summary), "{line}\n{json_summary}");
    // the step with a deferred action is counted by the summary, as its line says
    assert!(
        step(&j, "services")["deferred"][0]
            .as_str()
            .unwrap_or_default()
            .starts_with("systemctl restart docker.service"),
        "{j:#}"
    );
    // progress only from steps that changed: `kernel` changed nothing and says nothing
    assert!(
        err.contains("gpuhost: [2/16] kernel-headers: changed in "),
        "{err}"
    );
    assert!(!err.contains("] kernel: "), "{err}");
    assert!(!err.contains(": unchanged in "), "{err}");
    // Progress comes in step order: the repo files and the transaction that come before the
    // steps' own lines say so (`[prepare]`, `[dnf]`), and the numbered lines never go back.
    assert!(
        err.contains("gpuhost: [prepare] docker: write /etc/yum.repos.d/docker-ce.repo"),
        "{err}"
    );
    assert!(
        err.contains("gpuhost: [dnf] kernel-headers + docker + container-toolkit: install"),
        "{err}"
    );
    let numbers: Vec<u32> = err
        .lines()
        .filter_map(|l| l.strip_prefix("gpuhost: ["))
        .filter_map(|l| l.split('/').next()?.parse().ok())
        .collect();
    assert!(numbers.len() > 3, "{err}");
    assert!(
        numbers.windows(2).all(|w| w[0] <= w[1]),
        "out of step order: {err}"
    );

    let o = root.gpuhost(&["apply", "--profile", &profile]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(code(&o), 0, "{out}\n{err}");
    assert!(err.is_empty(), "a converged apply printed progress: {err}");
    let line = summary_line(&out, "converged — ");
    assert!(!line.contains(" changed,"), "{line}");
    let o = root.gpuhost(&["apply", "--profile", &profile, "--format", "json"]);
    let r = report(&o);
    // the same converged run, in JSON: the same summary as the text report's last line
    let text = line.rsplit_once(" in ").map(|(s, _)| s).unwrap_or_default();
    assert_eq!(r["summary"].as_str(), Some(text), "{r:#}");
    assert_eq!(r["deferred"], serde_json::json!([]));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));

    // A warning (a corrupt journal, moved aside) is counted and listed, in text and in JSON.
    root.write("var/lib/gpuhost/journal.json", "{ not json");
    let o = root.gpuhost(&["apply", "--profile", &profile]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}\n{}", stderr(&o));
    assert!(
        summary_line(&out, "converged — ").contains("; 1 warning;"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("  warning   ") && l.contains("journal.json is corrupt")),
        "{out}"
    );
    let j = last_journal_entry(&root);
    assert_eq!(j["warnings"].as_array().map(Vec::len), Some(1), "{j:#}");
    assert!(
        j["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("; 1 warning;"),
        "{j:#}"
    );
}

/// A profile that manages the driver (the default) but names no package: `apply` and `plan`
/// stop with exit 2 before any change, naming the key to set; selecting no driver step is fine.
#[test]
fn a_profile_that_manages_the_driver_but_names_none_stops_before_any_change() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let before = (root.rpmdb_snapshot(), root.tree_snapshot());
    let profile = world::profile("ol8-uek");
    for cmd in ["apply", "plan"] {
        let o = root.gpuhost(&[cmd, "--profile", &profile]);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{cmd}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("names no driver package: set driver.local_repo_rpm")
                && err.contains("driver.manage = false"),
            "{err}"
        );
        assert!(stdout(&o).is_empty());
    }
    assert_eq!(before, (root.rpmdb_snapshot(), root.tree_snapshot()));
    let o = root.gpuhost(&["plan", "--profile", &profile, "--only", "kernel,docker"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

fn gpuhost(args: &[&str]) -> Output {
    Command::new(GPUHOST).args(args).output().unwrap()
}

/// `profiles show --all` prints every key `profiles keys` lists, set ones with their value and
/// unset ones commented out, each after a line of meaning; the text is a profile that resolves
/// to the same thing as the built-in one.
#[test]
fn every_profile_key_is_discoverable_from_the_binary() {
    let o = gpuhost(&["profiles", "keys"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let keys: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    for k in [
        "driver.manage",
        "driver.local_repo_rpm",
        "driver.sha256",
        "status.expect_gpus",
        "docker.daemon.default_shm_size",
        "prefix_links",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} not in {keys:?}");
    }
    let o = gpuhost(&["profiles", "show", "ol8-uek", "--all"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let all = stdout(&o);
    let lines: Vec<&str> = all.lines().collect();
    let mut section = String::new();
    let mut seen = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let l = l.trim_start_matches("# ");
        if let Some(s) = l.strip_prefix("[[").and_then(|s| s.strip_suffix("]]")) {
            seen.push(s.to_string());
            section = s.to_string();
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.to_string();
            continue;
        }
        let Some((name, _)) = l.split_once(" = ") else {
            continue;
        };
        let key = if section.is_empty() {
            name.to_string()
        } else {
            format!("{section}.{name}")
        };
        // a key line follows its meaning (inside a commented [[table]], the meaning trails)
        if !lines[i].starts_with("# ") || lines[i].ends_with("(unset)") {
            let prev = lines[i - 1];
            let prev_is_key = prev
                .trim_start_matches("# ")
                .split_once(" = ")
                .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            assert!(
                prev.starts_with("# ") && !prev_is_key,
                "{key} has no line of meaning:\n{}\n{}",
                lines[i - 1],
                lines[i]
            );
        }
        seen.push(key);
    }
    for k in &keys {
        assert!(seen.contains(k), "--all does not show {k}:\n{all}");
    }
    for unset in ["local_repo_rpm", "sha256", "expect_gpus"] {
        assert!(
            all.contains(&format!("\n# {unset} = <")),
            "{unset} is not shown unset:\n{all}"
        );
    }
    // the text is itself a profile that resolves to the built-in one
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("all.toml");
    std::fs::write(&f, &all).unwrap();
    let again = gpuhost(&["profiles", "show", &f.display().to_string()]);
    let builtin = gpuhost(&["profiles", "show", "ol8-uek"]);
    let body = |o: &Output| {
        stdout(o)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(body(&again), body(&builtin));
    // plain `show` prints no empty tables and points at --all
    let shown = stdout(&builtin);
    assert!(
        shown.starts_with("# gpuhost profiles show ol8-uek --all"),
        "{shown}"
    );
    assert!(
        !shown.contains("[status]") && !shown.contains("[container_smoke]"),
        "{shown}"
    );
}

/// On an OS gpuhost does not provision, `facts` says so and what apply/plan would do, with no
/// kernel flavour made up; on this (non-Oracle) machine, plan points at --root for image builds.
#[test]
fn facts_and_plan_on_an_unsupported_os_say_so() {
    let root = Root::new(Os::Ubuntu, &[]);
    let o = root.gpuhost(&["facts"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        out.contains("supported            no: Ubuntu 24.04.1 LTS is not Oracle Linux")
            && out.contains("apply and plan stop here (exit 2) and change nothing"),
        "{out}"
    );
    let o = root.gpuhost(&["facts", "--format", "json"]);
    let f = report(&o);
    assert!(f["unsupported"].as_str().is_some(), "{f:#}");
    assert_eq!(f["target_flavour"], Value::Null);

    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    if os.lines().any(|l| l == "ID=ol" || l == "ID=\"ol\"") {
        return; // the live half needs a machine that is not Oracle Linux
    }
    let o = gpuhost(&["facts"]);
    let out = stdout(&o);
    assert!(out.contains("supported            no: "), "{out}");
    assert!(out.contains("--root DIR"), "{out}");
    assert!(out.contains("(not an Oracle Linux kernel)"), "{out}");
    assert!(!out.contains("(RHCK)"), "{out}");
    let o = gpuhost(&["plan", "--profile", "ol8-uek"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not Oracle Linux") && stderr(&o).contains("--root DIR"),
        "{}",
        stderr(&o)
    );
}

fn status_of_snapshot(snap: &Value) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("snap.json");
    std::fs::write(&f, serde_json::to_string(snap).unwrap()).unwrap();
    let o = support::gpuhost(tmp.path())
        .args(["status", "--format", "json", "--from-snapshot"])
        .arg(&f)
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)))
}

fn hints(v: &Value) -> String {
    v["checks"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|c| c["hint"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// `status` advice fits the host: without systemd as PID 1 it says that (not that systemctl
/// is needed); with no GPU on PCI there is no toolkit advice; with GPUs but no Docker the
/// advice is gpuhost apply, not nvidia-ctk.
#[test]
fn status_hints_fit_the_host() {
    let real: Value = serde_json::from_str(
        &std::fs::read_to_string(support::fixtures().join("h200-snapshot.json")).unwrap(),
    )
    .unwrap();
    // a machine like this one: no GPU, no driver, no Docker, systemd not PID 1
    let mut bare = real.clone();
    bare["host"]["pci"] = serde_json::json!([]);
    bare["host"]["docker_installed"] = false.into();
    bare["host"]["docker_daemon_json"] =
        serde_json::json!({"present": false, "nvidia_runtime": false, "default_runtime": null});
    bare["services"] = serde_json::json!({
        "error": "systemd is not PID 1 on this host (no /run/systemd/system: a container, a chroot or another init)",
        "no_systemd": true, "docker": null, "nvidia_persistenced": null, "nvidia_fabricmanager": null});
    let v = status_of_snapshot(&bare);
    let state = check(&v, "services.state");
    assert!(
        state["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("booted with systemd"),
        "{state:#}"
    );
    assert_eq!(check(&v, "services.nvidia_runtime")["severity"], "N/A");
    assert!(!hints(&v).contains("nvidia-ctk"), "{}", hints(&v));
    assert!(!hints(&v).contains("is needed"), "{}", hints(&v));

    // the real H200 (a GPU) without Docker: install it with gpuhost, no nvidia-ctk advice
    let mut gpu = real.clone();
    gpu["host"]["docker_installed"] = false.into();
    let v = status_of_snapshot(&gpu);
    let d = check(&v, "services.docker");
    assert_eq!(d["severity"], "WARNING", "{d:#}");
    assert!(
        d["hint"]
            .as_str()
            .unwrap_or_default()
            .starts_with("`gpuhost apply` installs Docker CE"),
        "{d:#}"
    );
    assert!(!hints(&v).contains("nvidia-ctk"), "{}", hints(&v));

    // and live, where this machine has no systemd as PID 1 and no GPU
    if Path::new("/run/systemd/system").is_dir() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let o = support::gpuhost(tmp.path())
        .args(["status", "--format", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        check(&v, "services.state")["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("booted with systemd"),
        "{v:#}"
    );
}

/// The `Exit codes (…)` headings of a help text.
fn exit_code_headings(args: &[&str]) -> Vec<String> {
    let o = gpuhost(args);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    stdout(&o)
        .lines()
        .filter(|l| l.starts_with("Exit codes ("))
        .map(|l| l[..=l.find(')').unwrap()].to_string())
        .collect()
}

/// Each command's `--help` lists its own exit codes, not every command's; `gpuhost --help`
/// lists them all.
#[test]
fn each_commands_help_lists_only_its_own_exit_codes() {
    let apply = "Exit codes (apply, plan, resume, rollback)";
    for cmd in ["apply", "plan", "resume", "rollback"] {
        assert_eq!(exit_code_headings(&[cmd, "--help"]), [apply], "{cmd}");
    }
    assert_eq!(
        exit_code_headings(&["kernel-added", "--help"]),
        [apply, "Exit codes (kernel-added)"]
    );
    for cmd in ["bundle", "status", "compat"] {
        assert_eq!(
            exit_code_headings(&[cmd, "--help"]),
            [format!("Exit codes ({cmd})")],
            "{cmd}"
        );
    }
    assert_eq!(
        exit_code_headings(&["--help"]),
        [
            apply,
            "Exit codes (kernel-added)",
            "Exit codes (bundle)",
            "Exit codes (status)"
        ]
    );
}

/// The completion scripts offer what `--help` shows: no hidden option (the NVML probe's
/// internals, the test-only snapshot replay and status's crafted root), while apply's `--root`
/// and status's own options stay; bash reads its script.
#[test]
fn completions_offer_no_hidden_option() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = gpuhost(&["generate", "completions", shell]);
        assert_eq!(code(&o), 0, "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for hidden in [
            "nvml-probe",
            "nvml-serve",
            "nvml-fixture",
            "nvml-calls",
            "sweep-profile",
            "dump-snapshot",
            "from-snapshot",
        ] {
            assert!(!script.contains(hidden), "{shell} offers --{hidden}");
        }
        assert!(
            script.contains("textfile") && script.contains("root"),
            "{shell}"
        );
    }
    let bash = stdout(&gpuhost(&["generate", "completions", "bash"]));
    let status = bash
        .lines()
        .find(|l| l.contains("opts=") && l.contains("--textfile"))
        .unwrap();
    assert!(!status.contains("--root"), "{status}");
    let o = Command::new("bash")
        .arg("-n")
        .arg("-c")
        .arg(&bash)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A plan line gives a reason once for the changes that share it: build-deps' four DKMS files
/// on UEK are one list with one reason, not four copies of it; the JSON keeps each change.
#[test]
fn a_reason_shared_by_several_changes_is_said_once() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let driver = format!(
        "driver.local_repo_rpm={}",
        World::get()
            .cuda_local(world::CUDA_LOCAL_EL8_12_2)
            .display()
    );
    let profile = world::profile("ol8-uek");
    let o = root.gpuhost(&["plan", "--profile", &profile, "--set", &driver]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    // The step's lines: its own and those under it (one per change, issue 54).
    let start = out
        .lines()
        .position(|l| l.trim_start().starts_with("build-deps "))
        .unwrap_or_else(|| panic!("{out}"));
    let line = out
        .lines()
        .skip(start)
        .enumerate()
        .take_while(|(i, l)| *i == 0 || l.starts_with("   "))
        .map(|(_, l)| l)
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        line.matches("DKMS builds every module for UEK").count(),
        1,
        "{line}"
    );
    assert!(
        line.contains("write /etc/dkms/framework.conf.d/gpuhost-uek-compiler.conf, write /etc/dkms/gpuhost-uek-compiler.sh, write /etc/dkms/nvidia.conf, write /etc/dkms/nvidia-open.conf"),
        "{line}"
    );
    let o = root.gpuhost(&[
        "plan",
        "--profile",
        &profile,
        "--set",
        &driver,
        "--format",
        "json",
    ]);
    let rep = report(&o);
    let changes = &step(&rep, "build-deps")["changes"];
    // The install, the record of what it installs (issue 41), and the four DKMS files.
    assert_eq!(changes.as_array().map(Vec::len), Some(6), "{changes:#}");
    assert!(
        changes
            .to_string()
            .contains("write /var/lib/gpuhost/built-by/build-deps"),
        "{changes:#}"
    );
}

/// Whitespace folded to single spaces (a help text's wrapped lines, a table row).
fn folded(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `apply --help` and docs/commands.md's exit code table say the same of 130 and 143 (issue 54:
/// they disagreed): a signal sent at any moment of the run, the checks before the first step
/// included; the running transaction let finish, the remaining steps not run; a second signal.
#[test]
fn apply_help_and_the_exit_code_table_agree_on_signals() {
    let o = gpuhost(&["apply", "--help"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let help = stdout(&o);
    let help = folded(help.split("130, 143").nth(1).unwrap_or_default());
    let table = std::fs::read_to_string(repo().join("docs/commands.md")).unwrap();
    let row = folded(
        table
            .lines()
            .find(|l| l.starts_with("| 130 / 143 |"))
            .unwrap_or_default(),
    );
    for said in [
        "stopped by SIGINT / SIGTERM, sent at any moment of the run",
        "the checks before the first step included",
        "a running package transaction is let finish and the remaining steps do not run",
        "a second signal stops the waiting (the transaction runs on and keeps the apply lock until it ends)",
    ] {
        assert!(help.contains(said), "apply --help: {said:?} not in {help:?}");
        assert!(row.contains(said), "docs/commands.md: {said:?} not in {row:?}");
    }
}

/// `gpuhost profiles list` (and `ls`) lists the built-in profiles, as `gpuhost profiles` alone
/// does (issue 54: `list` was an unrecognized subcommand).
#[test]
fn profiles_list_lists_the_built_in_profiles() {
    let alone = gpuhost(&["profiles"]);
    assert_eq!(code(&alone), 0, "{}", stderr(&alone));
    assert!(stdout(&alone).contains("ol10-uek"), "{}", stdout(&alone));
    for sub in ["list", "ls"] {
        let o = gpuhost(&["profiles", sub]);
        assert_eq!(code(&o), 0, "profiles {sub}: {}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&alone), "profiles {sub}");
    }
}

/// Every release the built-in profiles serve is named where a user reads which releases gpuhost
/// provisions: `gpuhost --help`, the gpuhost.1 man page, `profiles show --all`'s meaning of
/// `os.major` (issue 54: they said "Oracle Linux 8/9" after Oracle Linux 10 came).
#[test]
fn the_help_man_page_and_profile_keys_name_every_release() {
    let o = gpuhost(&["profiles"]);
    let mut majors: Vec<u32> = stdout(&o)
        .lines()
        .filter_map(|l| l.strip_prefix("ol"))
        .filter_map(|l| {
            l.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .collect();
    majors.sort_unstable();
    majors.dedup();
    assert!(majors.len() >= 3, "{majors:?}");
    let slashed = majors
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join("/");
    let (last, rest) = majors.split_last().unwrap();
    let listed = format!(
        "{} or {last}",
        rest.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let help = stdout(&gpuhost(&["--help"]));
    assert!(
        help.lines()
            .next()
            .unwrap_or_default()
            .contains(&format!("Oracle Linux {slashed} ")),
        "{help}"
    );
    let man = stdout(&gpuhost(&["generate", "man"]));
    assert!(man.contains(&format!("Oracle Linux {slashed} ")), "{man}");
    let all = stdout(&gpuhost(&["profiles", "show", "ol8-uek", "--all"]));
    assert!(
        all.contains(&format!("# Oracle Linux major version: {listed}.")),
        "{all}"
    );
}
