//! `gpuhost compat` and the rules under it (`gpuhost_steps::compat`).
//!
//! - The `NVIDIA_REQUIRE_*` evaluator against libnvidia-container's own decisions
//!   (`tests/fixtures/compat/libnvc-verdicts.tsv`, made by compiling its `src/cli/dsl.c`; see
//!   `tests/fixtures/compat/README.md`) on the real strings of NVIDIA's CUDA images 9.0–13.0.
//! - The real binary on images built with real tools (umoci builds an OCI layout, skopeo turns
//!   it into a `docker save` tarball), drivers from a profile, from `--driver`, from an install
//!   root's `/proc/driver/nvidia/version` and from its rpm database.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "world/mod.rs"]
mod world;

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuhost_steps::compat::dsl::{self, DeviceFacts, DriverFacts, Outcome};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/compat")
}

/// The distinct `NVIDIA_REQUIRE_CUDA` strings of NVIDIA's images, in order of first appearance.
fn image_expressions() -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("cuda-images.json")).unwrap(),
    )
    .unwrap();
    let mut out: Vec<String> = Vec::new();
    for im in v["images"].as_array().unwrap() {
        let e = im["nvidia_require_cuda"].as_str().unwrap().to_string();
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

fn opt(s: &str) -> Option<String> {
    (s != "-" && s != "~").then(|| s.to_string())
}

#[test]
fn the_evaluator_decides_exactly_as_libnvidia_container_does() {
    let images = image_expressions();
    let edges: Vec<String> = std::fs::read_to_string(fixtures().join("dsl-edge-cases.txt"))
        .unwrap()
        .split('\n')
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let table = std::fs::read_to_string(fixtures().join("libnvc-verdicts.tsv")).unwrap();
    let (mut cases, mut mismatches) = (0, Vec::new());
    let mut results = std::collections::BTreeMap::<&str, usize>::new();
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 7, "{line}");
        let idx: usize = f[1].parse().unwrap();
        let expr = match f[0] {
            "image" => &images[idx],
            "edge" => &edges[idx],
            other => panic!("unknown set {other}"),
        };
        let drv = DriverFacts {
            nvrm_version: opt(f[2]),
            cuda_version: opt(f[3]),
        };
        let dev = (f[4] != "-").then(|| {
            let (b, a) = f[4].split_once('|').unwrap();
            DeviceFacts {
                brand: opt(b),
                arch: opt(a),
            }
        });
        let got = dsl::evaluate(expr, &drv, dev.as_ref());
        let want = match f[5] {
            "satisfied" => Outcome::Satisfied,
            "error" if f[6] == "invalid expression" => Outcome::Invalid,
            "error" => Outcome::Unsatisfied(f[6].to_string()),
            other => panic!("unknown result {other}"),
        };
        *results.entry(f[5]).or_default() += 1;
        if got != want {
            mismatches.push(format!(
                "{} {} on {}/{}/{}: got {got:?}, libnvidia-container {want:?}",
                f[0], idx, f[2], f[3], f[4]
            ));
        }
        cases += 1;
    }
    assert!(cases > 12_000, "only {cases} cases");
    assert!(
        results["satisfied"] > 1000 && results["error"] > 1000,
        "{results:?}"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {cases} differ:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(20)].join("\n")
    );
}

#[test]
fn the_fixture_holds_real_images_of_every_cuda_major() {
    let images = image_expressions();
    for (prefix, at_least) in [("cuda>=11.", 10), ("cuda>=12.", 10), ("cuda>=13.", 1)] {
        let n = images.iter().filter(|e| e.starts_with(prefix)).count();
        assert!(n >= at_least, "{prefix}: {n}");
    }
    assert!(images
        .iter()
        .any(|e| e.contains("brand=tesla,driver>=470,driver<471")));
    assert!(images
        .iter()
        .any(|e| e.contains("brand=unknown,driver>=535,driver<536")));
}

// ---- the binary ----------------------------------------------------------------------------

fn gpuhost(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .args(args)
        .env("GPUHOST_RUN_DIR", std::env::temp_dir())
        .output()
        .unwrap()
}
