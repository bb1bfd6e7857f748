//! The Ansible collection (`ansible_collections/gpuhost/node/`) driven by Debian's real
//! ansible-core: install roots from the test world are inventory hosts with
//! `ansible_connection=local`; the modules run the real gpuhost binary against them. The
//! rolling-upgrade playbook of docs/fleets.md runs through a real three-node Slurm.
//! `ansible-test sanity` and ansible-lint's production profile check the collection;
//! `ansible-galaxy` builds and installs it; the local recipe of docs/fleets.md runs on an install
//! root without Slurm.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

#[path = "world/mod.rs"]
mod world;

#[path = "support/docs.rs"]
mod docs;
#[path = "support/slurm.rs"]
mod slurm;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use serde_json::{json, Value};
use world::{Os, Root, World, CUDA_LOCAL_EL8_12_2, CUDA_LOCAL_EL8_12_4, CUDA_LOCAL_EL9_12_2};

const GPUHOST: &str = env!("CARGO_BIN_EXE_gpuhost");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Whether ansible-core is installed; without it the test is skipped, except in CI
/// (GPUHOST_REQUIRE_ALL_TOOLS), where that fails.
fn have_ansible() -> bool {
    let ok = ["ansible-playbook", "ansible-test", "ansible-doc"]
        .iter()
        .all(|t| Command::new(t).arg("--version").output().is_ok());
    if !ok {
        assert!(
            std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_none(),
            "ansible-core is needed (apt-get install -y ansible-core)"
        );
        eprintln!("skipped: ansible-core is not installed (apt-get install -y ansible-core)");
    }
    ok
}

/// A playbook run: ansible-playbook with the collection on its path, the json stdout callback,
/// the world's HOME (rpm's database path for the roots), temp files in `dir`.
fn playbook(dir: &Path, inventory: &Value, play: &str, extra: &[&str]) -> (Output, Value) {
    playbook_env(dir, inventory, play, extra, &[])
}

fn playbook_env(
    dir: &Path,
    inventory: &Value,
    play: &str,
    extra: &[&str],
    env: &[(&str, &Path)],
) -> (Output, Value) {
    playbook_text(
        dir,
        &serde_json::to_string_pretty(inventory).unwrap(),
        play,
        extra,
        env,
    )
}

/// A playbook run with the inventory as text (YAML or JSON).
fn playbook_text(
    dir: &Path,
    inventory: &str,
    play: &str,
    extra: &[&str],
    env: &[(&str, &Path)],
) -> (Output, Value) {
    let inv = dir.join("inventory.yml");
    std::fs::write(&inv, inventory).unwrap();
    let pb = dir.join("play.yml");
    std::fs::write(&pb, play).unwrap();
    let mut cmd = Command::new("ansible-playbook");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd
        .env("ANSIBLE_COLLECTIONS_PATH", workspace())
        .env("ANSIBLE_STDOUT_CALLBACK", "json")
        .env("ANSIBLE_LOCAL_TEMP", dir.join("tmp-local"))
        .env("ANSIBLE_REMOTE_TEMP", dir.join("tmp-remote"))
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_RETRY_FILES_ENABLED", "0")
        .env("HOME", World::get().home())
        .arg("-i")
        .arg(&inv)
        .arg(&pb)
        .args(extra)
        .output()
        .unwrap();
    let out = text(&o.stdout);
    let v: Value = serde_json::from_str(&out[out.find('{').unwrap_or(0)..]).unwrap_or_else(|e| {
        panic!(
            "ansible-playbook printed no JSON ({e}):\n{out}\n{}",
            text(&o.stderr)
        )
    });
    (o, v)
}

/// The result of `task` (by name) on `host` in a json-callback run.
fn result<'a>(run: &'a Value, task: &str, host: &str) -> &'a Value {
    for play in run["plays"].as_array().unwrap() {
        for t in play["tasks"].as_array().unwrap() {
            if t["task"]["name"] == task {
                if let Some(r) = t["hosts"].get(host) {
                    return r;
                }
            }
        }
    }
    panic!("no result of task {task:?} on {host}: {run:#}")
}

fn stats<'a>(run: &'a Value, host: &str) -> &'a Value {
    &run["stats"][host]
}

struct Node {
    name: &'static str,
    root: Root,
    profile: &'static str,
    driver: &'static str,
}

fn three_nodes() -> Vec<Node> {
    vec![
        Node {
            name: "ol8uek",
            root: Root::new(Os::Ol8, &[world::UEK8_OLD]),
            profile: "ol8-uek",
            driver: CUDA_LOCAL_EL8_12_2,
        },
        Node {
            name: "ol8rhck",
            root: Root::new(Os::Ol8, &[world::RHCK8]),
            profile: "ol8-rhck",
            driver: CUDA_LOCAL_EL8_12_2,
        },
        Node {
            name: "ol9uek",
            root: Root::new(Os::Ol9, &[world::UEK9]),
            profile: "ol9-uek",
            driver: CUDA_LOCAL_EL9_12_2,
        },
    ]
}

fn inventory(nodes: &[Node]) -> Value {
    let mut hosts = serde_json::Map::new();
    for n in nodes {
        hosts.insert(
            n.name.to_string(),
            json!({
                "node_root": n.root.path(),
                "node_profile": world::profile(n.profile),
                "node_driver": World::get().cuda_local(n.driver),
            }),
        );
    }
    json!({"all": {
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": "/usr/bin/python3",
            "gpuhost": GPUHOST,
        },
        "hosts": hosts,
    }})
}

const APPLY_PLAY: &str = r#"
- hosts: all
  gather_facts: false
  tasks:
    - name: apply
      gpuhost.node.apply:
        profile: "{{ node_profile }}"
        set: ["driver.local_repo_rpm={{ node_driver }}"]
        root: "{{ node_root }}"
        executable: "{{ gpuhost }}"
"#;

/// The root's tree, without the rpm database's SQLite shared-memory index (any `rpm -q` rewrites
/// it), and its rpm database.
fn files(root: &Root) -> String {
    let tree: Vec<&str> = Vec::new();
    let snap = root.tree_snapshot();
    let mut tree = tree;
    tree.extend(
        snap.lines()
            .filter(|l| !l.starts_with("var/lib/rpm/rpmdb.sqlite-shm ")),
    );
    format!("{}\n{}", tree.join("\n"), root.rpmdb_snapshot())
}

fn changed_steps(r: &Value) -> Vec<String> {
    r["changed_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn apply_module_on_three_roots_check_mode_predicts_first_run_changes_second_does_not() {
    if !have_ansible() {
        return;
    }
    let nodes = three_nodes();
    let inv = inventory(&nodes);
    let dir = tempfile::tempdir().unwrap();
    let before: Vec<String> = nodes.iter().map(|n| files(&n.root)).collect();

    // Check mode with --diff: every node would change, nothing changes.
    let t = Instant::now();
    let (o, check) = playbook(dir.path(), &inv, APPLY_PLAY, &["--check", "--diff"]);
    eprintln!("check mode: {:?}", t.elapsed());
    assert!(o.status.success(), "{check:#}\n{}", text(&o.stderr));
    let mut predicted = Vec::new();
    for (n, snap) in nodes.iter().zip(&before) {
        let r = result(&check, "apply", n.name);
        assert_eq!(r["changed"], true, "{}: {r:#}", n.name);
        assert_eq!(r["cmd"][1], "plan", "{r:#}");
        let steps = changed_steps(r);
        assert!(
            steps.contains(&"driver".to_string()) && steps.contains(&"kernel-headers".to_string()),
            "{steps:?}"
        );
        // --diff: the typed changes, per step.
        let diff = r["diff"]["prepared"].as_str().unwrap_or_default();
        assert!(
            diff.contains("kernel-headers (would-change):") && diff.contains("+ install "),
            "{}: {diff}",
            n.name
        );
        assert_eq!(&files(&n.root), snap, "check mode changed {}", n.name);
        predicted.push(steps);
    }

    // The real run: changed, exactly the steps check mode predicted.
    let t = Instant::now();
    let (o, first) = playbook(dir.path(), &inv, APPLY_PLAY, &[]);
    eprintln!("first run: {:?}", t.elapsed());
    assert!(o.status.success(), "{first:#}\n{}", text(&o.stderr));
    for (n, steps) in nodes.iter().zip(&predicted) {
        let r = result(&first, "apply", n.name);
        assert_eq!(r["changed"], true, "{r:#}");
        assert_eq!(&changed_steps(r), steps, "{}: prediction ≠ run", n.name);
        assert_eq!(r["reboot_required"], false);
        assert!(n.root.installed("nvidia-driver").is_some(), "{}", n.name);
        assert_eq!(stats(&first, n.name)["changed"], 1);
    }

    // The second run changes nothing.
    let t = Instant::now();
    let (o, second) = playbook(dir.path(), &inv, APPLY_PLAY, &[]);
    eprintln!("second run: {:?}", t.elapsed());
    assert!(o.status.success(), "{second:#}");
    for n in &nodes {
        let r = result(&second, "apply", n.name);
        assert_eq!(r["changed"], false, "{}: {r:#}", n.name);
        assert!(changed_steps(r).is_empty());
        assert!(r["summary"].as_str().unwrap().starts_with("converged"));
        assert_eq!(stats(&second, n.name)["changed"], 0);
    }
}

/// A copy of a driver file with one payload byte flipped: rpm's digest check fails.
fn corrupted(dir: &Path, name: &str) -> PathBuf {
    let bad = dir.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    let f = bad.join(name);
    let mut b = std::fs::read(World::get().cuda_local(name)).unwrap();
    let i = b.len() - 100;
    b[i] ^= 0xff;
    std::fs::write(&f, b).unwrap();
    f
}

#[test]
fn apply_module_failures_name_the_step_and_hint_and_exit_2_is_invalid_input() {
    if !have_ansible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = Root::new(Os::Ol8, &[world::UEK8_OLD]);
    let bad = corrupted(dir.path(), CUDA_LOCAL_EL8_12_2);
    let not_rpm = World::get().cuda_local(&format!("not-an-rpm/{CUDA_LOCAL_EL8_12_2}"));
    let inv = json!({"all": {"vars": {"ansible_connection": "local",
        "ansible_python_interpreter": "/usr/bin/python3", "gpuhost": GPUHOST,
        "node_root": root.path(), "node_profile": world::profile("ol8-uek")},
        "hosts": {"bad": {"node_driver": bad}, "notrpm": {"node_driver": not_rpm}}}});
    // Both hosts are the same root: one at a time.
    let rpmdb = root.rpmdb_snapshot();
    let (o, run) = playbook(dir.path(), &inv, APPLY_PLAY, &["--limit", "bad"]);
    assert!(!o.status.success());

    let r = result(&run, "apply", "bad");
    assert_eq!(r["failed"], true, "{r:#}");
    assert_eq!(r["failed_step"], "driver-repo", "{r:#}");
    // A damaged driver file is bad input, found by its digests before any change (issue 34).
    assert_eq!(r["invalid_input"], true, "{r:#}");
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("invalid input (gpuhost exit 2, nothing was changed): gpuhost apply: step driver-repo failed")
            && msg.contains("digest: BAD (the payload is damaged or cut short)"),
        "{msg}"
    );
    assert_eq!(r["exit_code"], 2);

    let (o, run) = playbook(dir.path(), &inv, APPLY_PLAY, &["--limit", "notrpm"]);
    assert!(!o.status.success());
    let r = result(&run, "apply", "notrpm");
    assert_eq!(r["exit_code"], 2, "{r:#}");
    assert_eq!(r["invalid_input"], true);
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("invalid input (gpuhost exit 2, nothing was changed): gpuhost apply: step driver-repo failed"),
        "{msg}"
    );
    assert!(
        r.get("hint").is_some() || msg.contains("not an RPM") || msg.contains("RPM"),
        "{r:#}"
    );
    assert_eq!(
        root.rpmdb_snapshot(),
        rpmdb,
        "exit 2 changed the rpm database"
    );
}

#[test]
fn status_and_compat_modules() {
    if !have_ansible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fixtures = workspace().join("tests/fixtures/status");
    let mut ecc: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures.join("hgx-h200x8-snapshot.json")).unwrap(),
    )
    .unwrap();
    ecc["nvml"]["gpus"][5]["ecc_volatile_uncorrected"] = json!({"value": 3});
    let ecc_file = dir.path().join("ecc.json");
    std::fs::write(&ecc_file, ecc.to_string()).unwrap();
    let inv = json!({"all": {"vars": {"ansible_connection": "local",
    "ansible_python_interpreter": "/usr/bin/python3", "gpuhost": GPUHOST},
    "hosts": {
        "healthy": {"snap": fixtures.join("hgx-h200x8-snapshot.json")},
        "broken": {"snap": ecc_file},
    }}});
    let play = r#"
- hosts: all
  gather_facts: false
  tasks:
    - name: collect
      gpuhost.node.status: {snapshot: "{{ snap }}", fail_on: [], executable: "{{ gpuhost }}"}
    - name: verdict fact
      ansible.builtin.debug: {msg: "{{ ansible_facts.gpuhost_status.status }}"}
    - name: compat
      gpuhost.node.compat: {cuda: "12.4", driver: 535.104.05, executable: "{{ gpuhost }}"}
    - name: compat too old
      gpuhost.node.compat: {cuda: "12.4", driver: 470.57.02, executable: "{{ gpuhost }}"}
      ignore_errors: true
    - name: gate
      gpuhost.node.status: {snapshot: "{{ snap }}", executable: "{{ gpuhost }}"}
"#;
    let (_, run) = playbook(dir.path(), &inv, play, &[]);
    assert_eq!(result(&run, "verdict fact", "healthy")["msg"], "OK");
    assert_eq!(result(&run, "verdict fact", "broken")["msg"], "CRITICAL");
    let c = result(&run, "collect", "broken");
    assert_eq!(c["failed"], json!(null), "fail_on: [] never fails: {c:#}");
    assert!(c["problems"][0]
        .as_str()
        .unwrap()
        .starts_with("CRITICAL gpu.ecc.volatile_uncorrected gpu5: "));
    let c = result(&run, "compat", "healthy");
    assert_eq!(c["runs"], true, "{c:#}");
    let c = result(&run, "compat too old", "healthy");
    assert_eq!(c["failed"], true, "{c:#}");
    assert_eq!(c["verdict"], "does-not-run", "{c:#}");
    assert!(
        c["msg"]
            .as_str()
            .unwrap()
            .starts_with("gpuhost compat: CUDA 12.4 needs cuda-compat-12-4"),
        "{c:#}"
    );
    let g = result(&run, "gate", "broken");
    assert_eq!(g["failed"], true);
    assert!(
        g["msg"]
            .as_str()
            .unwrap()
            .starts_with("gpuhost status CRITICAL: CRITICAL gpu.ecc.volatile_uncorrected gpu5"),
        "{g:#}"
    );
    assert_eq!(result(&run, "gate", "healthy")["failed"], json!(null));
}

/// The rolling-upgrade playbook from docs/fleets.md (its first ```yaml block after the Ansible
/// heading).
fn docs_playbook() -> String {
    let readme = std::fs::read_to_string(workspace().join("docs/fleets.md")).unwrap();
    let start = readme
        .find("## Fleets with Ansible")
        .expect("Ansible section in docs/fleets.md");
    let body = &readme[start..];
    let body = &body[body.find("```yaml\n").expect("a yaml block") + 8..];
    body[..body.find("```").unwrap()].to_string()
}

#[test]
fn docs_playbook_rolls_a_driver_upgrade_through_a_slurm_partition_in_batches() {
    if !have_ansible() {
        return;
    }
    let nodes = ["gpunode1", "gpunode2", "gpunode3"];
    let Some(slurm) = slurm::Slurm::start(&nodes) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let w = World::get();
    // Three nodes on driver 535, converged.
    let roots: Vec<Root> = nodes
        .iter()
        .map(|_| {
            let r = Root::new(Os::Ol8, &[world::UEK8_OLD]);
            let o = r.gpuhost(&[
                "apply",
                "--profile",
                &world::profile("ol8-uek"),
                "--set",
                &format!(
                    "driver.local_repo_rpm={}",
                    w.cuda_local(CUDA_LOCAL_EL8_12_2).display()
                ),
            ]);
            assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
            r
        })
        .collect();
    let before3 = files(&roots[2]);
    let bad = corrupted(dir.path(), CUDA_LOCAL_EL8_12_4);
    let snapshot = workspace().join("tests/fixtures/status/hgx-h200x8-snapshot.json");
    let mut hosts = serde_json::Map::new();
    for (n, r) in nodes.iter().zip(&roots) {
        hosts.insert(n.to_string(), json!({"gpuhost_root": r.path()}));
    }
    // gpunode3 (the second batch) gets a corrupted driver file.
    hosts["gpunode3"]["driver_rpm"] = json!(bad);
    let inv = json!({"all": {"vars": {
        "ansible_connection": "local",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_become": false,
        "gpuhost_executable": GPUHOST,
        "gpuhost_profile": world::profile("ol8-uek"),
        "driver_rpm": w.cuda_local(CUDA_LOCAL_EL8_12_4),
        "gpuhost_gate_snapshot": snapshot,
        "gpuhost_gate_timeout": 30,
        "gpuhost_gate_poll": 0.2,
        "gpuhost_jobs_poll": 1,
        "gpuhost_slurm_environment": {"SLURM_CONF": slurm.conf},
    }, "hosts": hosts}});
    // The commands of docs/fleets.md, in order: check mode first, then the real rollout (the
    // inventory and playbook files are this test's; the arguments after them are the doc's).
    let commands = docs::delegated(file!(), "docs/fleets.md", "rolling-upgrade").commands();
    let args: Vec<Vec<String>> = commands
        .iter()
        .map(|c| {
            let words = shlex::split(c.split(" #").next().unwrap()).unwrap();
            assert_eq!(
                words[..4],
                [
                    "ansible-playbook",
                    "-i",
                    "inventory.yml",
                    "rolling-driver-upgrade.yml"
                ],
                "{c}"
            );
            words[4..].to_vec()
        })
        .collect();
    assert_eq!(args.len(), 2, "{commands:?}");
    assert!(args[0].iter().any(|a| a == "--check") && !args[1].iter().any(|a| a == "--check"));
    let check_args: Vec<&str> = args[0].iter().map(String::as_str).collect();
    let before: Vec<String> = roots.iter().map(files).collect();
    let (_, check) = playbook_env(
        dir.path(),
        &inv,
        &docs_playbook(),
        &check_args,
        &[("SLURM_CONF", slurm.conf.as_path())],
    );
    // Check mode changes nothing and drains nothing, says that the first batch would change,
    // and already finds gpunode3's flipped payload byte (gpuhost plan verifies the file with
    // rpm -K before anything: exit 2).
    let after: Vec<String> = roots.iter().map(files).collect();
    assert!(before == after, "check mode changed a root: {check:#}");
    for n in nodes {
        assert_eq!(slurm.state(n), "IDLE", "{n}: {check:#}");
    }
    for n in ["gpunode1", "gpunode2"] {
        assert_eq!(stats(&check, n)["failures"], 0, "{n}: {check:#}");
        assert!(
            stats(&check, n)["changed"].as_u64() >= Some(1),
            "{n}: {check:#}"
        );
    }
    assert_eq!(stats(&check, "gpunode3")["failures"], 1, "{check:#}");

    // A job on gpunode2: its apply must wait until the job has ended.
    let job_end = dir.path().join("job.end");
    let o = slurm
        .cmd("sbatch")
        .args(["--nodelist", "gpunode2", "--output", "/dev/null", "--wrap"])
        .arg(format!("sleep 6; date +%s > {}", job_end.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    slurm.wait_state("gpunode2", |s| s.starts_with("ALLOCATED"), 20);

    let t = Instant::now();
    // sinfo on the controller (localhost) finds the partition's nodes through SLURM_CONF.
    let real_args: Vec<&str> = args[1].iter().map(String::as_str).collect();
    let (o, run) = playbook_env(
        dir.path(),
        &inv,
        &docs_playbook(),
        &real_args,
        &[("SLURM_CONF", slurm.conf.as_path())],
    );
    eprintln!("rollout: {:?}", t.elapsed());
    assert!(!o.status.success(), "the rollout must stop: {run:#}");

    // Batch 1 (gpunode1, gpunode2): both upgraded and resumed.
    assert_eq!(stats(&run, "gpunode1")["failures"], 0, "{run:#}");
    assert!(roots[0]
        .installed("nvidia-driver")
        .unwrap()
        .starts_with("550.54.15"));
    slurm.wait_state("gpunode1", |s| s == "IDLE", 10);
    // gpunode2: drained while its job ran, applied after the job ended, upgraded, resumed.
    assert_eq!(stats(&run, "gpunode2")["failures"], 0, "{run:#}");
    assert!(roots[1]
        .installed("nvidia-driver")
        .unwrap()
        .starts_with("550.54.15"));
    let ended: u64 = std::fs::read_to_string(&job_end)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let journal: Value =
        serde_json::from_str(&roots[1].read("/var/lib/gpuhost/journal.json")).unwrap();
    let last = journal.as_array().map_or(&journal, |a| a.last().unwrap());
    let started = last["started_at"]
        .as_str()
        .unwrap_or_else(|| panic!("{journal:#}"));
    let started = Command::new("date")
        .args(["-d", started, "+%s"])
        .output()
        .unwrap();
    let started: u64 = text(&started.stdout).trim().parse().unwrap();
    assert!(
        started >= ended,
        "apply started at {started}, the job ended at {ended}"
    );
    slurm.wait_state("gpunode2", |s| s == "IDLE", 10);
    assert!(slurm.reason("gpunode2").is_none());
    // Batch 2: gpunode3 failed at its plan — the damaged file is bad input found before any
    // change — so it was never drained and nothing of it changed; the rollout stops failed.
    assert_eq!(stats(&run, "gpunode3")["failures"], 1, "{run:#}");
    assert_eq!(files(&roots[2]), before3);
    assert_eq!(slurm.state("gpunode3"), "IDLE");
    assert!(slurm.reason("gpunode3").is_none());
}

#[test]
fn ansible_test_sanity_passes_on_the_collection() {
    if !have_ansible() {
        return;
    }
    let coll = workspace().join("ansible_collections/gpuhost/node");
    // ansible-test bootstraps pip into its venvs with a script from ci-files.testing.ansible.com;
    // where that host is unreachable, a stand-in takes pip from ensurepip and the rest from PyPI.
    let home = workspace().join("target/ansible-test-home");
    let cache = home.join(".ansible/test/cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::copy(
        workspace().join("tests/fixtures/ansible/get_pip_bootstrap.py"),
        cache.join("get_pip_21_3_1.py"),
    )
    .unwrap();
    // ansible-test and the venvs it makes write scratch files in $TMPDIR (ensurepip's wheels,
    // its pip bootstrap), and not all of them are removed again: a folder of the checkout's own.
    let tmp = scratch_tmp(&home);
    let t = Instant::now();
    let o = Command::new("ansible-test")
        .args(["sanity", "--local", "--python", "3.11", "--color", "no"])
        .current_dir(&coll)
        .env("HOME", &home)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    eprintln!("ansible-test sanity: {:?}", t.elapsed());
    let out = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}");
    assert!(out.matches("Running sanity test").count() >= 20, "{out}");
    // ansible-doc renders every module.
    for m in ["apply", "status", "compat"] {
        let o = Command::new("ansible-doc")
            .env("HOME", &home)
            .env("ANSIBLE_COLLECTIONS_PATH", workspace())
            .arg(format!("gpuhost.node.{m}"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
}

/// `home/tmp`, emptied: the `$TMPDIR` of a Python tool run by a test, inside target/ so that
/// what the tool leaves there stays out of the build host's /tmp.
fn scratch_tmp(home: &Path) -> PathBuf {
    let tmp = home.join("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// The `yaml` block of docs/fleets.md whose first line is `# NAME: …`.
fn docs_yaml(name: &str) -> String {
    let found: Vec<docs::Block> = docs::blocks("docs/fleets.md")
        .into_iter()
        .filter(|b| b.lang == "yaml" && b.text.starts_with(&format!("# {name}:")))
        .collect();
    assert_eq!(found.len(), 1, "docs/fleets.md: one yaml block `# {name}:`");
    found[0].text.clone()
}

/// The arguments after `ansible-playbook -i FILE PLAYBOOK` of each command of a docs/fleets.md
/// block.
fn docs_playbook_args(block: &docs::Block, inventory: &str, play: &str) -> Vec<Vec<String>> {
    block
        .commands()
        .iter()
        .map(|c| {
            let words = shlex::split(c.split(" #").next().unwrap()).unwrap();
            assert_eq!(
                words[..4],
                ["ansible-playbook", "-i", inventory, play],
                "{c}"
            );
            words[4..].to_vec()
        })
        .collect()
}

/// How ansible-playbook names the role's tasks.
const ROLE: &str = "gpuhost.node.rolling_upgrade";

/// The local recipe of docs/fleets.md, its two files as the page shows them (the demo's root and
/// profile made here as `./demo.sh` makes them): check mode changes nothing; the run converges
/// the root without Slurm (no `scontrol`) and skips the health gate, saying why, instead of
/// gating on the build machine for 900 s; a second run changes nothing.
#[test]
fn the_local_recipe_converges_an_install_root_without_slurm_and_says_the_gate_is_skipped() {
    if !have_ansible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = Root::new(Os::Ol8, &[world::UEK8_OLD, world::UEK8_NEW]);
    // The playbook's folder laid out as the checkout is after `./demo.sh --keep target/demo`:
    // the page's relative paths resolve against it (issue 54), whatever the shell's folder.
    let demo = dir.path().join("target/demo");
    std::fs::create_dir_all(&demo).unwrap();
    std::os::unix::fs::symlink(root.path(), demo.join("root")).unwrap();
    let profile = demo.join("profile.toml");
    std::fs::write(
        &profile,
        format!(
            "extends = \"{}\"\n\n[driver]\nlocal_repo_rpm = \"{}\"\n",
            world::profile("ol8-uek"),
            World::get().cuda_local(CUDA_LOCAL_EL8_12_2).display()
        ),
    )
    .unwrap();
    let inventory = docs_yaml("local-inventory.yml");
    assert!(
        inventory.contains("gpuhost_root: target/demo/root")
            && inventory.contains("gpuhost_profile: target/demo/profile.toml"),
        "{inventory}"
    );
    // The binary under test stands in for the gpuhost on the PATH.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(GPUHOST, bin.join("gpuhost")).unwrap();
    let path = std::ffi::OsString::from(format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap()
    ));
    let env = [("PATH", Path::new(&path))];
    let play = docs_yaml("local.yml");
    let args = docs_playbook_args(
        &docs::delegated(file!(), "docs/fleets.md", "local"),
        "local-inventory.yml",
        "local.yml",
    );
    assert_eq!(args.len(), 2, "{args:?}");
    assert!(args[0].iter().any(|a| a == "--check"));
    let before = files(&root);
    let check: Vec<&str> = args[0].iter().map(String::as_str).collect();
    let (o, run) = playbook_text(dir.path(), &inventory, &play, &check, &env);
    assert!(o.status.success(), "{run:#}\n{}", text(&o.stderr));
    assert!(
        before == files(&root),
        "check mode changed the root: {run:#}"
    );
    assert!(
        stats(&run, "demo")["changed"].as_u64() >= Some(1),
        "{run:#}"
    );

    let real: Vec<&str> = args[1].iter().map(String::as_str).collect();
    let t = Instant::now();
    let (o, run) = playbook_text(dir.path(), &inventory, &play, &real, &env);
    assert!(o.status.success(), "{run:#}\n{}", text(&o.stderr));
    assert!(t.elapsed().as_secs() < 300, "{:?}", t.elapsed());
    assert_eq!(stats(&run, "demo")["failures"], 0, "{run:#}");
    assert!(root.installed("nvidia-driver").is_some(), "{run:#}");
    assert_eq!(
        result(&run, &format!("{ROLE} : Is this a Slurm node?"), "demo")["skipped"],
        true
    );
    let said = &result(
        &run,
        &format!("{ROLE} : Health gate skipped (an install root is not the running host)"),
        "demo",
    )["msg"];
    assert!(
        said.as_str()
            .unwrap()
            .contains("health gate skipped: gpuhost_root is"),
        "{said}"
    );
    assert_eq!(
        result(
            &run,
            &format!("{ROLE} : Gate on health (gpuhost status --wait-healthy)"),
            "demo"
        )["skipped"],
        true
    );
    let (o, again) = playbook_text(dir.path(), &inventory, &play, &real, &env);
    assert!(o.status.success(), "{again:#}");
    assert_eq!(stats(&again, "demo")["changed"], 0, "{again:#}");
}

/// A kmod repo as a build host makes it (`gpuhost kmod build`, issue 41): the world's 570 driver's
/// open modules for `kernel`, built in a build root of the test world (the kernel and its devel
/// package, gcc, make) and signed with a fleet key made here. Its directory.
fn kmod_repo(dir: &Path, kernel: &str) -> PathBuf {
    let build = Root::new(Os::Ol9, &[kernel]);
    // kmod build's unprivileged user reaches the build root (a build host's is `/`).
    std::fs::set_permissions(
        build.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let base = kernel.rsplit_once('.').map_or(kernel, |(b, _)| b);
    let devel = format!("kernel-uek-devel-{base}");
    let o = build.dnf(&[
        "install",
        "-y",
        "bash",
        "gcc",
        "gcc-c++",
        "openssl-libs",
        "make",
        &devel,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (key, cert) = world::openssl_test_key(&dir.join("fleet"), "fleet", "gpuhost test fleet");
    let out = dir.join("kmods");
    let rpm = World::get().cuda_local(world::DRIVER_LOCAL_EL9_570);
    let o = build.gpuhost(&[
        "kmod",
        "build",
        "--local-repo-rpm",
        &rpm.display().to_string(),
        "--key",
        &key.display().to_string(),
        "--cert",
        &cert.display().to_string(),
        "--out",
        &out.display().to_string(),
    ]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    out
}

/// The role rolls out prebuilt kmods (issue 41), with the play and the commands of
/// docs/fleets.md: `gpuhost_kmod_repo`, the repo `gpuhost kmod build` wrote, is copied to the
/// node and given to the plan and the apply as `driver.kmod_repo`. Check mode plans the build
/// host's kmod and changes nothing in the root; the run installs it with no DKMS, compiler or
/// kernel headers; a second run changes nothing; with a bundle as well the role refuses before
/// anything.
#[test]
fn the_role_rolls_out_prebuilt_kmods_and_the_node_compiles_nothing() {
    if !have_ansible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let repo = kmod_repo(dir.path(), world::UEK9);
    let root = Root::new(Os::Ol9, &[world::UEK9]);
    let dest = dir.path().join("node/kmods");
    let rpm = World::get().cuda_local(world::DRIVER_LOCAL_EL9_570);
    let inventory = json!({"all": {
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_become": false,
        },
        "children": {"gpu_nodes": {"hosts": {"node": {
            "gpuhost_root": root.path(),
            "driver_rpm": rpm,
            "gpuhost_kmod_repo_dest": dest,
            "gpuhost_executable": GPUHOST,
            "gpuhost_slurm": "false",
        }}}},
    }});
    let play = docs_yaml("prebuilt-kmods.yml");
    let profile = format!("gpuhost_profile: {}", world::profile("ol9-uek"));
    let repo_line = format!("gpuhost_kmod_repo: {}", repo.display());
    assert!(
        play.contains("gpuhost_profile: ol9-uek")
            && play.contains("gpuhost_kmod_repo: /srv/gpuhost-kmods"),
        "{play}"
    );
    let play = play
        .replace("gpuhost_profile: ol9-uek", &profile)
        .replace("gpuhost_kmod_repo: /srv/gpuhost-kmods", &repo_line);
    let args = docs_playbook_args(
        &docs::delegated(file!(), "docs/fleets.md", "kmods"),
        "inventory.yml",
        "prebuilt-kmods.yml",
    );
    assert_eq!(args.len(), 2, "{args:?}");
    assert!(args[0].iter().any(|a| a == "--check"));
    let check: Vec<&str> = args[0].iter().map(String::as_str).collect();
    let real: Vec<&str> = args[1].iter().map(String::as_str).collect();
    let kmod = format!("kmod-nvidia-open-{}", world::UEK9);
    let before = files(&root);
    let (o, run) = playbook(dir.path(), &inventory, &play, &check);
    assert!(o.status.success(), "{run:#}\n{}", text(&o.stderr));
    assert!(
        before == files(&root),
        "check mode changed the root: {run:#}"
    );
    assert!(dest.join("gpuhost-kmods.json").is_file(), "{run:#}");
    let plan = result(&run, &format!("{ROLE} : Plan (changes nothing)"), "node");
    assert!(plan.to_string().contains(&kmod), "{plan:#}");

    let (o, run) = playbook(dir.path(), &inventory, &play, &real);
    assert!(o.status.success(), "{run:#}\n{}", text(&o.stderr));
    assert!(root.installed(&kmod).is_some(), "{run:#}");
    assert_eq!(
        root.nvidia_module_version(world::UEK9).as_deref(),
        Some("570.124.06")
    );
    for p in [
        "dkms",
        "gcc",
        "make",
        "kernel-uek-devel",
        "kmod-nvidia-open-dkms",
    ] {
        assert!(root.installed(p).is_none(), "{p} was installed: {run:#}");
    }
    let (o, again) = playbook(dir.path(), &inventory, &play, &real);
    assert!(o.status.success(), "{again:#}");
    assert_eq!(stats(&again, "node")["changed"], 0, "{again:#}");

    let before = files(&root);
    let mut with_bundle = real.clone();
    with_bundle.extend(["-e", "gpuhost_bundle=/srv/b.tar"]);
    let (o, run) = playbook(dir.path(), &inventory, &play, &with_bundle);
    assert!(!o.status.success(), "{run:#}");
    let failed = result(
        &run,
        &format!("{ROLE} : A bundle carries its own kmods"),
        "node",
    );
    assert!(
        failed["msg"]
            .as_str()
            .unwrap_or_default()
            .contains("both given"),
        "{failed:#}"
    );
    assert!(before == files(&root));
}

/// galaxy.yml names a README that is there; the commands of docs/fleets.md build the collection
/// in its folder and install it (into a HOME of this test's), and the installed collection is
/// what ansible-doc then reads, README and role included.
#[test]
fn the_collection_builds_and_installs_as_docs_fleets_md_says() {
    if !have_ansible() {
        return;
    }
    let coll = workspace().join("ansible_collections/gpuhost/node");
    let galaxy = std::fs::read_to_string(coll.join("galaxy.yml")).unwrap();
    let readme = galaxy
        .lines()
        .find_map(|l| l.strip_prefix("readme: "))
        .expect("galaxy.yml names its readme");
    assert!(coll.join(readme.trim()).is_file(), "{readme} is missing");
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut cwd = workspace();
    for c in docs::delegated(file!(), "docs/fleets.md", "galaxy").commands() {
        let c = c
            .split(" #")
            .next()
            .unwrap()
            .replace("/tmp", &out.path().display().to_string());
        let words = shlex::split(&c).unwrap();
        if words[0] == "cd" {
            cwd = cwd.join(&words[1]);
            continue;
        }
        let o = Command::new(&words[0])
            .args(&words[1..])
            .current_dir(&cwd)
            .env("HOME", home.path())
            .env_remove("ANSIBLE_COLLECTIONS_PATH")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{c}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    assert_eq!(cwd, coll);
    let installed = home
        .path()
        .join(".ansible/collections/ansible_collections/gpuhost/node");
    for f in [
        "README.md",
        "MANIFEST.json",
        "plugins/modules/apply.py",
        "roles/rolling_upgrade/tasks/main.yml",
    ] {
        assert!(installed.join(f).is_file(), "{f} not installed");
    }
}

/// ansible-lint, the PyPI package, with the production profile (the collection's
/// `.ansible-lint`): found on the PATH or in target/ansible-lint (where scripts/deps.sh puts it),
/// else installed there with pip; where PyPI cannot be reached the test is skipped, except in CI.
#[test]
fn ansible_lint_production_profile_is_clean() {
    if !have_ansible() {
        return;
    }
    let venv = workspace().join("target/ansible-lint");
    let lint = match Command::new("ansible-lint").arg("--version").output() {
        Ok(o) if o.status.success() => PathBuf::from("ansible-lint"),
        _ => venv.join("bin/ansible-lint"),
    };
    if !lint.exists() && lint == venv.join("bin/ansible-lint") {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--no-cache-dir", "ansible-lint"])
                .status()
                .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_none(),
                "ansible-lint could not be installed (pip install ansible-lint)"
            );
            eprintln!("skipped: ansible-lint could not be installed from PyPI");
            return;
        }
    }
    // ansible-lint's and ansible's caches (~/.ansible, ~/.cache/ansible-compat) in a HOME of
    // the checkout's own, kept between runs as the venv is.
    let home = workspace().join("target/ansible-lint-home");
    std::fs::create_dir_all(&home).unwrap();
    let o = Command::new(&lint)
        .args(["--nocolor", "-f", "pep8"])
        .current_dir(workspace().join("ansible_collections/gpuhost/node"))
        .env("HOME", &home)
        .env("TMPDIR", scratch_tmp(&home))
        .env("ANSIBLE_COLLECTIONS_PATH", workspace())
        .output()
        .unwrap();
    let out = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("Profile 'production' was required, and it passed"),
        "{out}"
    );
}
