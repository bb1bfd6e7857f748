//! `reboot.via = "slurm"`: an apply that needs a reboot on a Slurm node asks Slurm for it
//! (`scontrol reboot ASAP nextstate=DOWN reason="gpuhost: …"`), against a real one-node Slurm
//! whose RebootProgram records the call. Slurm drains the node, waits for its job, then calls the
//! RebootProgram; the "boot" is slurmd starting again with a new boot time. After it, the resumed
//! apply converges and the health check decides: unhealthy keeps the node out with the failing
//! check as its reason, healthy resumes it.
//!
//! The node is an install root standing for the live node (`GPUHOST_TEST_ROOT_IS_SLURM_NODE`,
//! honoured by test builds only): nothing of this machine is rebooted.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

#[path = "world/mod.rs"]
mod world;

#[path = "support/slurm.rs"]
mod slurm;

use std::process::Output;
use std::time::{Duration, Instant};

use world::{Os, Root, World, CUDA_LOCAL_EL8_12_2};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const NODE: &str = "gpunode1";

#[test]
fn slurm_reboots_the_node_after_its_job_and_the_health_check_decides_the_resume() {
    let Some(mut slurm) = slurm::Slurm::start(&[NODE]) else {
        return;
    };
    let w = World::get();
    let root = Root::new(Os::Ol8, &[world::UEK8_OLD]);
    let apply_args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "apply",
            "--format",
            "json",
            "--profile",
            &world::profile("ol8-uek"),
            "--set",
            &format!(
                "driver.local_repo_rpm={}",
                w.cuda_local(CUDA_LOCAL_EL8_12_2).display()
            ),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |args: &[String]| -> Output {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        root.gpuhost_cmd(&args)
            .env("SLURM_CONF", &slurm.conf)
            .env("SLURMD_NODENAME", NODE)
            .env("GPUHOST_TEST_ROOT_IS_SLURM_NODE", "1")
            .output()
            .unwrap()
    };
    let o = run(&apply_args(&[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    // nouveau is loaded: the node needs a reboot.
    std::fs::create_dir_all(root.join("/sys/module/nouveau")).unwrap();

    // A job runs on the node.
    let dir = tempfile::tempdir().unwrap();
    let job_end = dir.path().join("job.end");
    let o = slurm
        .cmd("sbatch")
        .args(["--nodelist", NODE, "--output", "/dev/null", "--wrap"])
        .arg(format!("sleep 5; date +%s > {}", job_end.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    slurm.wait_state(NODE, |s| s.starts_with("ALLOCATED"), 20);

    // apply --reboot --reboot-via slurm: exit 4, Slurm asked, the resume unit enabled.
    let o = run(&apply_args(&["--reboot", "--reboot-via", "slurm"]));
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["reboot"]["action"], "slurm-scheduled", "{r:#}");
    assert!(r["summary"]
        .as_str()
        .unwrap()
        .starts_with("converged, but a reboot is required: Slurm reboots the node"));
    assert!(root.join("/var/lib/gpuhost/resume.json").exists());
    // (an absolute link, meaning inside the root)
    assert!(std::fs::symlink_metadata(
        root.join("/etc/systemd/system/multi-user.target.wants/gpuhost-resume.service")
    )
    .is_ok());
    // Drained at once with gpuhost's reason; never rebooted under the running job.
    let st = slurm.state(NODE);
    assert!(st.contains("DRAIN") && st.contains("REBOOT"), "{st}");
    let reason = slurm.reason(NODE).unwrap();
    assert!(
        reason.starts_with("gpuhost: reboot to finish nouveau: "),
        "{reason}"
    );
    assert!(slurm.reboots().is_empty(), "rebooted under a running job");
    let until = Instant::now() + Duration::from_secs(60);
    while slurm.reboots().is_empty() {
        assert!(
            Instant::now() < until,
            "Slurm never rebooted the node: {}",
            slurm.node(NODE)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let ended: u64 = std::fs::read_to_string(&job_end)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let rebooted: u64 = slurm.reboots()[0]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        rebooted >= ended,
        "reboot at {rebooted}, the job ended at {ended}"
    );
    assert_eq!(slurm.reboots().len(), 1);

    // The boot: nouveau gone, slurmd back with a new boot time. The node stays down.
    std::fs::remove_dir_all(root.join("/sys/module/nouveau")).unwrap();
    slurm.reboot_slurmd(NODE);
    slurm.wait_state(NODE, |s| s == "DOWN", 30);
    // gpuhost-resume.service's run converges and ends the chain.
    let o = root
        .gpuhost_cmd(&["resume", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    assert!(!root.join("/var/lib/gpuhost/resume.json").exists());

    // The health check decides. Unhealthy: it stays out, the reason now names the check.
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/status");
    let healthy: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures.join("hgx-h200x8-snapshot.json")).unwrap(),
    )
    .unwrap();
    let mut ecc = healthy.clone();
    ecc["nvml"]["gpus"][5]["ecc_volatile_uncorrected"] = serde_json::json!({"value": 3});
    let check = |snap: &serde_json::Value| -> String {
        let f = dir.path().join("snap.json");
        std::fs::write(&f, snap.to_string()).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
            .env("SLURM_CONF", &slurm.conf)
            .env("SLURMD_NODENAME", NODE)
            .env("GPUHOST_RUN_DIR", dir.path())
            .args(["status", "--slurm", "--from-snapshot"])
            .arg(&f)
            .output()
            .unwrap();
        text(&o.stdout)
    };
    let out = check(&ecc);
    assert!(
        out.contains("gpuhost slurm: drained gpunode1: gpuhost: gpu.ecc.volatile_uncorrected gpu5"),
        "{out}"
    );
    let st = slurm.state(NODE);
    assert!(st.starts_with("DOWN") && st.contains("DRAIN"), "{st}");
    assert!(slurm
        .reason(NODE)
        .unwrap()
        .starts_with("gpuhost: gpu.ecc.volatile_uncorrected gpu5: 3"));
    // Healthy: resumed, since gpuhost took it out.
    let out = check(&healthy);
    assert!(out.contains("gpuhost slurm: resumed gpunode1"), "{out}");
    slurm.wait_state(NODE, |s| s == "IDLE", 20);
    assert_eq!(slurm.reboots().len(), 1);
    let _ = &mut slurm;
}
