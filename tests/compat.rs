//! `gpuhost compat` and the rules under it (`gpuhost_nvidia::compat`).
//!
//! - The `NVIDIA_REQUIRE_*` evaluator against libnvidia-container's own decisions
//!   (`tests/fixtures/compat/libnvc-verdicts.tsv`, made by compiling its `src/cli/dsl.c`; see
//!   `tests/fixtures/compat/README.md`) on the real strings of NVIDIA's CUDA images 9.0–13.0.
//! - The real binary on images built with real tools (umoci builds an OCI layout, skopeo turns
//!   it into a `docker save` tarball), drivers from a profile, from `--driver`, from an install
//!   root's `/proc/driver/nvidia/version` and from its rpm database.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/images.rs"]
mod images;
#[path = "world/mod.rs"]
mod world;

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuhost_nvidia::compat::dsl::{self, DeviceFacts, DriverFacts, Outcome};
use images::{image_tools, nvidia_env, nvidia_require, Layout};

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

use world::{code, report, stderr, stdout, Os, Root, World, RHCK8};

fn gpuhost(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .arg("compat")
        .args(args)
        .env("GPUHOST_RUN_DIR", std::env::temp_dir())
        .env("HOME", World::get().home())
        .output()
        .unwrap()
}

/// `gpuhost compat ARGS --format json`, its exit code and report.
fn ask(args: &[&str]) -> (i32, serde_json::Value) {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    let o = gpuhost(&a);
    let c = code(&o);
    assert!(c == 0 || c == 1, "exit {c}: {}{}", stdout(&o), stderr(&o));
    let r = report(&o);
    assert_eq!(r["exit_code"], c, "{r:#}");
    (c, r)
}

/// Bad input: exit 2, one line on stderr naming `needle`, a JSON error on stdout.
fn refused(args: &[&str], needle: &str) {
    let o = gpuhost(args);
    assert_eq!(code(&o), 2, "{args:?}: {}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(needle), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn a_cuda_version_runs_natively_with_limits_with_compat_or_not() {
    let cases = [
        ("12.2", "535.104.05", 0, "native"),
        ("12.4", "535.104.05", 0, "minor-version"),
        ("12.4.1", "550.54.14", 0, "minor-version"),
        ("12.4.1", "550.54.15", 0, "native"),
        ("12.4", "470.256.02", 1, "forward-compat"),
        ("13.0", "535.104.05", 1, "forward-compat"),
        ("13.0", "560.35.05", 1, "unsupported"),
        ("11.8", "450.80.02", 0, "minor-version"),
        ("11.8", "450.51.06", 1, "unsupported"),
        ("13.0", "580.159.04", 0, "native"),
    ];
    for (cuda, driver, want, mode) in cases {
        let (c, r) = ask(&["--cuda", cuda, "--driver", driver]);
        assert_eq!(
            (c, r["answer"]["mode"].as_str()),
            (want, Some(mode)),
            "{cuda} on {driver}: {r:#}"
        );
        assert_eq!(r["host"]["driver_source"], "flag");
    }
    let (_, r) = ask(&["--cuda", "12.4", "--driver", "535.104.05"]);
    let a = &r["answer"];
    assert_eq!(a["native_minimum_driver"], "550.54.14");
    assert_eq!(a["minor_version_minimum_driver"], "525.60.13");
    assert_eq!(a["compat_package"], "cuda-compat-12-4");
    assert_eq!(a["compat_branches"], serde_json::json!([470, 525, 535]));
    assert_eq!(r["serves"]["native"], "12.2");
    assert_eq!(r["serves"]["forward_compat"], serde_json::json!(["13.0"]));
    // Forward compatibility needs data center GPUs.
    let (c, r) = ask(&[
        "--cuda",
        "13.0",
        "--driver",
        "535.104.05",
        "--brand",
        "geforce",
    ]);
    assert_eq!(c, 1);
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .contains("only on data center GPUs"),
        "{r:#}"
    );
    // Text output for people: the verdict first, then the host and what its driver serves.
    let o = gpuhost(&["--cuda", "12.4", "--driver", "535.104.05"]);
    let text = stdout(&o);
    assert!(
        text.starts_with("runs: CUDA 12.4 runs, with limits"),
        "{text}"
    );
    assert!(
        text.contains("driver 535.104.05 serves CUDA ≤ 12.2 natively"),
        "{text}"
    );
}

#[test]
fn requirements_are_judged_as_the_runtime_judges_them() {
    let req13 = nvidia_require("13.0.0");
    // An H100/H200 on the 535 branch: the runtime sees brand Unknown and lets it start.
    let (c, r) = ask(&[
        "--require",
        &req13,
        "--driver",
        "535.104.05",
        "--brand",
        "unknown",
    ]);
    assert_eq!(c, 0, "{r:#}");
    assert_eq!(r["answer"]["runtime"]["result"], "starts");
    // 560 is not a branch NVIDIA's CUDA 13.0 images accept.
    let (c, r) = ask(&[
        "--require",
        &req13,
        "--driver",
        "560.35.05",
        "--brand",
        "unknown",
    ]);
    assert_eq!(c, 1);
    assert_eq!(
        r["answer"]["runtime"]["error"],
        "requirement error: unsatisfied condition: cuda>=13.0, please update your driver to a newer version, or use an earlier cuda container"
    );
    // The 12.4 image's brand=tesla,driver>=470,driver<471 term, with the brand unknown: it
    // depends on the brand, and the answer lists which.
    let req124 = nvidia_require("12.4.1");
    let (c, r) = ask(&["--require", &req124, "--driver", "470.256.02"]);
    assert_eq!((c, r["verdict"].as_str()), (1, Some("depends")), "{r:#}");
    let starts: Vec<&str> = r["answer"]["runtime"]["by_brand"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["starts"] == true)
        .map(|b| b["brand"].as_str().unwrap())
        .collect();
    assert_eq!(
        starts,
        vec!["Quadro", "Tesla", "GeForce", "TITAN", "Unknown"]
    );
    // Several requirements are AND'ed; a malformed one is the runtime's "invalid expression".
    let (c, _) = ask(&[
        "--require",
        "cuda>=12.0",
        "--require",
        "driver>=540",
        "--driver",
        "535.104.05",
        "--brand",
        "tesla",
    ]);
    assert_eq!(c, 1);
    let (c, r) = ask(&[
        "--require",
        "cuda>=13.0 nonsense",
        "--driver",
        "535.104.05",
        "--brand",
        "tesla",
    ]);
    assert_eq!(c, 1);
    assert_eq!(r["answer"]["runtime"]["checks"][0]["result"], "invalid");
}

#[test]
fn bad_input_exits_2_and_names_the_thing() {
    refused(&["--cuda", "12", "--driver", "535.104.05"], "--cuda \"12\"");
    refused(
        &["--cuda", "12.4", "--driver", "latest"],
        "driver version \"latest\"",
    );
    refused(
        &[
            "--cuda",
            "12.4",
            "--driver",
            "535.104.05",
            "--brand",
            "nvidia",
        ],
        "--brand \"nvidia\"",
    );
    refused(
        &[
            "--image",
            "/nonexistent/image.tar",
            "--driver",
            "535.104.05",
        ],
        "/nonexistent/image.tar",
    );
    // A file name (a docker save tarball's) that is not there: not an image to pull.
    refused(
        &["--image", "missing.tar", "--driver", "535.104.05"],
        "--image missing.tar: no such file or directory",
    );
    assert!(!stderr(&gpuhost(&[
        "--image",
        "missing.tar",
        "--driver",
        "535.104.05"
    ]))
    .contains("docker pull"));
    let empty = tempfile::tempdir().unwrap();
    refused(
        &["--cuda", "12.4", "--root", empty.path().to_str().unwrap()],
        "no NVIDIA driver found",
    );
    refused(
        &[
            "--image",
            "nvidia/cuda:12.4.1-base-ubuntu22.04",
            "--root",
            empty.path().to_str().unwrap(),
        ],
        "needs the running system's docker",
    );
    let not_tar = empty.path().join("x.tar");
    std::fs::write(&not_tar, b"<html>404</html>").unwrap();
    refused(
        &[
            "--image",
            not_tar.to_str().unwrap(),
            "--driver",
            "535.104.05",
        ],
        "x.tar",
    );
    // Versions have ranges: CUDA from 1.0, a driver branch from 1.
    refused(
        &["--cuda", "0.0", "--driver", "535.104.05"],
        "--cuda \"0.0\"",
    );
    refused(
        &["--cuda", "100.1", "--driver", "535.104.05"],
        "--cuda \"100.1\"",
    );
    refused(&["--cuda", "12.4", "--driver", "0.0"], "--driver \"0.0\"");
    refused(
        &["--cuda", "12.4", "--driver", "99999.1"],
        "--driver \"99999.1\"",
    );
    refused(
        &["--require", "cuda>=12.4", "--driver", "0"],
        "--driver \"0\"",
    );
    // clap: one question is required.
    let o = gpuhost(&["--driver", "535.104.05"]);
    assert_eq!(code(&o), 2);
}

// ---- images built with real tools ----------------------------------------------------------

#[test]
fn an_image_from_a_docker_save_tarball_or_an_oci_layout() {
    if !image_tools() {
        return;
    }
    let l = Layout::new();
    l.image("12.4.1", "amd64", &nvidia_env("12.4.1"));
    let tar = l.docker_archive("12.4.1", "nvidia/cuda:12.4.1-runtime-rockylinux8");
    for (spec, source) in [
        (tar.display().to_string(), "docker-archive"),
        (l.spec("12.4.1"), "oci-layout"),
    ] {
        // 535 on an H100/H200 (brand Unknown to the runtime): the brand term for branch 535
        // lets it start; CUDA 12.4 runs through minor-version compatibility.
        let (c, r) = ask(&[
            "--image",
            &spec,
            "--driver",
            "535.104.05",
            "--brand",
            "unknown",
        ]);
        assert_eq!(c, 0, "{r:#}");
        let a = &r["answer"];
        assert_eq!(a["image"]["source"], source);
        assert_eq!(a["image"]["cuda_version"], "12.4.1");
        assert_eq!(a["image"]["nvidia_cuda_image"], true);
        assert!(a["image"]["config_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        assert_eq!(a["runtime"]["result"], "starts");
        assert_eq!(a["runtime"]["checks"][0]["source"], "NVIDIA_REQUIRE_CUDA");
        assert_eq!(a["cuda"]["mode"], "minor-version");
        // 545 is not a branch the image's terms name: the runtime refuses although CUDA 12.4
        // apps run on it; the hint says how to start it anyway.
        let (c, r) = ask(&[
            "--image",
            &spec,
            "--driver",
            "545.23.08",
            "--brand",
            "unknown",
        ]);
        assert_eq!(c, 1);
        assert_eq!(r["answer"]["runtime"]["result"], "refuses");
        assert!(
            r["hint"]
                .as_str()
                .unwrap()
                .contains("NVIDIA_DISABLE_REQUIRE=1"),
            "{r:#}"
        );
        // 470 with a GeForce: the runtime lets it start (brand=geforce,driver>=470,driver<471),
        // but forward compatibility does not work on GeForce.
        let (c, r) = ask(&[
            "--image",
            &spec,
            "--driver",
            "470.256.02",
            "--brand",
            "geforce",
        ]);
        assert_eq!(c, 1);
        assert_eq!(r["answer"]["runtime"]["result"], "starts");
        assert_eq!(r["answer"]["cuda"]["mode"], "forward-compat");
        assert!(
            r["summary"]
                .as_str()
                .unwrap()
                .starts_with("the container starts, but"),
            "{r:#}"
        );
        // The same on a Tesla: the image's cuda-compat libraries carry it.
        let (c, r) = ask(&[
            "--image",
            &spec,
            "--driver",
            "470.256.02",
            "--brand",
            "tesla",
        ]);
        assert_eq!(c, 0, "{r:#}");
        assert_eq!(r["answer"]["cuda"]["verdict"], "runs");
    }
    // A tag that is not in the tarball.
    refused(
        &[
            "--image",
            &format!("{}:nvidia/cuda:9.0", tar.display()),
            "--driver",
            "535.104.05",
        ],
        "no image tagged nvidia/cuda:9.0",
    );
}

#[test]
fn oci_layouts_with_several_images_platforms_and_a_corrupt_blob() {
    if !image_tools() {
        return;
    }
    let l = Layout::new();
    l.image("a", "amd64", &nvidia_env("12.4.1"))
        .image("b", "arm64", &nvidia_env("13.0.0"));
    let dir = l.path();
    refused(
        &["--image", dir.to_str().unwrap(), "--driver", "580.159.04"],
        "holds 2 images",
    );
    let (_, r) = ask(&["--image", &l.spec("b"), "--driver", "580.159.04"]);
    assert_eq!(r["answer"]["image"]["cuda_version"], "13.0.0");
    assert!(
        r["answer"]["details"].to_string().contains("linux/arm64"),
        "{r:#}"
    );
    // One multi-platform image: an image index over both manifests.
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("index.json")).unwrap()).unwrap();
    let mut platforms = Vec::new();
    for d in index["manifests"].as_array().unwrap() {
        let arch = if d["annotations"]["org.opencontainers.image.ref.name"] == "a" {
            "amd64"
        } else {
            "arm64"
        };
        let mut d = d.clone();
        d.as_object_mut().unwrap().remove("annotations");
        d["platform"] = serde_json::json!({"os": "linux", "architecture": arch});
        platforms.push(d);
    }
    platforms.reverse(); // arm64 first: the right one must be chosen, not the first.
    let blob = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": platforms,
    }))
    .unwrap();
    let hex = gpuhost_host::fsutil::sha256_hex(&blob);
    std::fs::write(dir.join("blobs/sha256").join(&hex), &blob).unwrap();
    let top = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": format!("sha256:{hex}"),
            "size": blob.len(),
            "annotations": {"org.opencontainers.image.ref.name": "multi"},
        }],
    });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
    let (_, r) = ask(&["--image", dir.to_str().unwrap(), "--driver", "580.159.04"]);
    let want = if std::env::consts::ARCH == "x86_64" {
        "12.4.1"
    } else {
        "13.0.0"
    };
    assert_eq!(r["answer"]["image"]["cuda_version"], want, "{r:#}");
    // A config blob that no longer matches its digest.
    let cfg = r["answer"]["image"]["config_digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let p = dir.join("blobs/sha256").join(cfg);
    let mut data = std::fs::read(&p).unwrap();
    data.push(b' ');
    std::fs::write(&p, data).unwrap();
    refused(
        &["--image", dir.to_str().unwrap(), "--driver", "580.159.04"],
        "does not match its digest",
    );
}

#[test]
fn legacy_images_and_switched_off_requirements() {
    if !image_tools() {
        return;
    }
    let l = Layout::new();
    l.image("legacy", "amd64", &["CUDA_VERSION=10.0.130".into()])
        .image(
            "off",
            "amd64",
            &[
                "NVIDIA_REQUIRE_CUDA=cuda>=99.0".into(),
                "NVIDIA_DISABLE_REQUIRE=1".into(),
            ],
        )
        .image(
            "on",
            "amd64",
            &[
                "NVIDIA_REQUIRE_CUDA=cuda>=99.0".into(),
                "NVIDIA_DISABLE_REQUIRE=yes".into(),
            ],
        );
    // No NVIDIA_REQUIRE_CUDA: the toolkit derives cuda>=10.0 from CUDA_VERSION.
    let (c, r) = ask(&[
        "--image",
        &l.spec("legacy"),
        "--driver",
        "418.39",
        "--brand",
        "tesla",
    ]);
    let check = &r["answer"]["runtime"]["checks"][0];
    assert_eq!(
        (check["source"].as_str(), check["expression"].as_str()),
        (Some("CUDA_VERSION"), Some("cuda>=10.0"))
    );
    assert_eq!(
        (c, check["result"].as_str()),
        (0, Some("satisfied")),
        "{r:#}"
    );
    let (c, _) = ask(&[
        "--image",
        &l.spec("legacy"),
        "--driver",
        "384.81",
        "--brand",
        "tesla",
    ]);
    assert_eq!(c, 1);
    // NVIDIA_DISABLE_REQUIRE=1 switches the check off; "yes" is not a Go bool, so it does not.
    let (c, r) = ask(&["--image", &l.spec("off"), "--driver", "535.104.05"]);
    assert_eq!(
        (c, r["answer"]["runtime"]["result"].as_str()),
        (0, Some("not-checked"))
    );
    let (c, r) = ask(&["--image", &l.spec("on"), "--driver", "535.104.05"]);
    assert_eq!(
        (c, r["answer"]["runtime"]["result"].as_str()),
        (1, Some("refuses"))
    );
    // So does disable-require = true in the host's /etc/nvidia-container-runtime/config.toml.
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("etc/nvidia-container-runtime");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        "disable-require = true\n\n[nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig\"\n",
    )
    .unwrap();
    let (c, r) = ask(&[
        "--image",
        &l.spec("on"),
        "--driver",
        "535.104.05",
        "--root",
        root.path().to_str().unwrap(),
    ]);
    assert_eq!(
        (c, r["answer"]["runtime"]["result"].as_str()),
        (0, Some("not-checked")),
        "{r:#}"
    );
}

// ---- where the driver comes from ---------------------------------------------------------

const PROC_VERSION: &str = "tests/fixtures/status/h200-root/proc/driver/nvidia/version";

fn with_proc_version(root: &Path) {
    let dir = root.join("proc/driver/nvidia");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(PROC_VERSION),
        dir.join("version"),
    )
    .unwrap();
}

#[test]
fn the_driver_comes_from_the_first_source_that_knows_it() {
    // The loaded module's version (a real H200's /proc/driver/nvidia/version).
    let t = tempfile::tempdir().unwrap();
    with_proc_version(t.path());
    let (_, r) = ask(&["--cuda", "13.0", "--root", t.path().to_str().unwrap()]);
    assert_eq!(
        (
            r["host"]["driver"].as_str(),
            r["host"]["driver_source"].as_str()
        ),
        (Some("580.159.04"), Some("proc-version")),
        "{r:#}"
    );
    assert_eq!(r["verdict"], "runs");
    // The installed nvidia-driver package of an Oracle Linux 8 root (not loaded).
    let root = Root::new(Os::Ol8, &[RHCK8]);
    let w = World::get();
    let local = w.cuda_local(world::CUDA_LOCAL_EL8_12_2);
    let o = root.rpm(&[
        "-i",
        "--nodeps",
        "--noscripts",
        "--force-debian",
        local.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let drv = root.join("var/cuda-repo-rhel8-12-2-local/nvidia-driver-535.104.05-1.el8.x86_64.rpm");
    let o = root.rpm(&[
        "-i",
        "--nodeps",
        "--noscripts",
        "--force-debian",
        drv.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rootp = root.path().to_str().unwrap().to_string();
    let (c, r) = ask(&["--cuda", "12.4", "--root", &rootp]);
    assert_eq!(
        (
            r["host"]["driver"].as_str(),
            r["host"]["driver_source"].as_str()
        ),
        (Some("535.104.05"), Some("rpm")),
        "{r:#}"
    );
    assert_eq!(
        (c, r["answer"]["mode"].as_str()),
        (0, Some("minor-version"))
    );
    assert!(
        r["host"]["notes"]
            .to_string()
            .contains("/proc/driver/nvidia/version: absent"),
        "{r:#}"
    );
    // A loaded module wins over the package.
    with_proc_version(root.path());
    let (_, r) = ask(&["--cuda", "12.4", "--root", &rootp]);
    assert_eq!(r["host"]["driver_source"], "proc-version");
    // A profile: the host it builds, from its local repo package's file name.
    let p = world::profile("ol8-uek");
    let set = "driver.local_repo_rpm=/srv/cuda-repo-rhel8-12-4-local-12.4.1_550.54.15-1.x86_64.rpm";
    let (c, r) = ask(&["--cuda", "12.4", "--profile", &p, "--set", set]);
    assert_eq!(
        (
            r["host"]["driver"].as_str(),
            r["host"]["driver_source"].as_str()
        ),
        (Some("550.54.15"), Some("profile")),
        "{r:#}"
    );
    assert!(r["host"]["driver_from"]
        .as_str()
        .unwrap()
        .contains("the host this profile builds"));
    assert_eq!(c, 0);
    // --driver wins over everything.
    let (_, r) = ask(&[
        "--cuda",
        "12.4",
        "--profile",
        &p,
        "--set",
        set,
        "--driver",
        "470.57.02",
    ]);
    assert_eq!(r["host"]["driver_source"], "flag");
    // A profile that names no driver cannot answer.
    refused(
        &["--cuda", "12.4", "--profile", &p],
        "names no driver.local_repo_rpm",
    );
}

#[test]
fn an_image_and_the_profile_both_providing_nccl_is_two_owners() {
    if !image_tools() {
        return;
    }
    let l = Layout::new();
    l.image("rt", "amd64", &nvidia_env("12.4.1"));
    let p = l.tmp.path().join("site.toml");
    std::fs::write(
        &p,
        format!(
            "extends = \"{}\"\n\n[driver]\nlocal_repo_rpm = \"/srv/cuda-repo-rhel8-12-4-local-12.4.1_550.54.15-1.x86_64.rpm\"\n\n[[prefix_links]]\npackages = [\"libnccl\", \"libnccl-devel\"]\nprefix = \"/opt/nvidia/nccl\"\n",
            world::profile("ol8-uek")
        ),
    )
    .unwrap();
    let (c, r) = ask(&[
        "--image",
        &l.spec("rt"),
        "--profile",
        p.to_str().unwrap(),
        "--brand",
        "unknown",
    ]);
    assert_eq!(c, 0, "{r:#}");
    let comps = r["answer"]["components"].as_array().unwrap();
    let nccl = comps.iter().find(|c| c["component"] == "NCCL").unwrap();
    assert_eq!(nccl["version"], "2.21.5");
    assert_eq!(nccl["host"]["prefix"], "/opt/nvidia/nccl");
    assert!(comps
        .iter()
        .find(|c| c["component"] == "CUDA runtime")
        .unwrap()
        .get("host")
        .is_none());
    assert!(
        r["answer"]["details"]
            .to_string()
            .contains("two owners of NCCL"),
        "{r:#}"
    );
    assert_eq!(r["answer"]["cuda"]["mode"], "native");
}

// ---- a live docker -------------------------------------------------------------------------

/// A private dockerd (vfs storage, no networking, its own socket under a temporary directory),
/// stopped with SIGTERM when dropped.
struct Dockerd {
    child: std::process::Child,
    tmp: tempfile::TempDir,
}

impl Dockerd {
    fn start() -> Option<Dockerd> {
        let have = ["dockerd", "docker"].iter().all(|t| {
            Command::new(t)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
        if !have {
            if std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_some() {
                panic!("dockerd and docker are needed (apt-get install -y docker.io)");
            }
            eprintln!("skipped: dockerd missing (scripts/deps.sh installs docker.io)");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let p = |s: &str| tmp.path().join(s).display().to_string();
        let log = std::fs::File::create(tmp.path().join("log")).unwrap();
        let child = Command::new("dockerd")
            .args(["--data-root", &p("data"), "--exec-root", &p("exec")])
            .args([
                "--pidfile",
                &p("pid"),
                "--host",
                &format!("unix://{}", p("sock")),
            ])
            .args([
                "--storage-driver",
                "vfs",
                "--iptables=false",
                "--bridge=none",
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let d = Dockerd { child, tmp };
        for _ in 0..120 {
            if d.docker(&["version"]).status.success() {
                return Some(d);
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        panic!(
            "dockerd did not come up: {}",
            std::fs::read_to_string(d.tmp.path().join("log")).unwrap_or_default()
        );
    }

    fn host(&self) -> String {
        format!("unix://{}", self.tmp.path().join("sock").display())
    }

    fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .args(args)
            .env("DOCKER_HOST", self.host())
            .output()
            .unwrap()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..80 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_image_on_the_live_hosts_docker() {
    if !image_tools() {
        return;
    }
    let Some(d) = Dockerd::start() else { return };
    let l = Layout::new();
    l.image("13.0.0", "amd64", &nvidia_env("13.0.0"));
    let tar = l.docker_archive("13.0.0", "nvidia/cuda:13.0.0-base-rockylinux8");
    let o = d.docker(&["load", "--input", tar.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let docker_host = d.host();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gpuhost"))
            .arg("compat")
            .args(args)
            .env("DOCKER_HOST", &docker_host)
            .env("GPUHOST_RUN_DIR", std::env::temp_dir())
            .output()
            .unwrap()
    };
    let image = "nvidia/cuda:13.0.0-base-rockylinux8";
    // 575 runs CUDA 13.0 only through the image's cuda-compat-13-0: on a Tesla, yes; on a GPU
    // the runtime calls Unknown (data center or not), it depends.
    let o = run(&[
        "--image",
        image,
        "--driver",
        "575.57.08",
        "--brand",
        "tesla",
        "--format",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let r = report(&o);
    assert_eq!(r["answer"]["image"]["source"], "docker-inspect");
    assert_eq!(r["answer"]["image"]["tags"][0], image);
    assert_eq!(r["answer"]["cuda"]["mode"], "forward-compat");
    let o = run(&[
        "--image",
        image,
        "--driver",
        "575.57.08",
        "--brand",
        "unknown",
        "--format",
        "json",
    ]);
    assert_eq!(
        (code(&o), report(&o)["verdict"].as_str()),
        (1, Some("depends"))
    );
    // Not pulled: bad input, and the answer says what to do.
    let o = run(&["--image", "nvidia/cuda:99.0-base", "--driver", "575.57.08"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("docker pull nvidia/cuda:99.0-base"),
        "{}",
        stderr(&o)
    );
    // dockerd stopped (issue 54): a pull would fail the same way, so the answer is to start it.
    drop(d);
    let o = run(&["--image", image, "--driver", "575.57.08"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{err}");
    assert!(
        err.contains("no Docker daemon answers: start it") && !err.contains("docker pull"),
        "{err}"
    );
}

#[test]
fn plan_says_which_cuda_the_profiles_driver_serves() {
    let root = Root::new(Os::Ol8, &[RHCK8]);
    let rpm = World::get().cuda_local(world::CUDA_LOCAL_EL8_12_2);
    let set = format!("driver.local_repo_rpm={}", rpm.display());
    let o = root.gpuhost(&[
        "plan",
        "--profile",
        &world::profile("ol8-rhck"),
        "--set",
        &set,
        "--only",
        "driver-repo",
        "--format",
        "json",
    ]);
    let r = report(&o);
    let reason = world::step(&r, "driver-repo")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("driver 535.104.05 not installed (serves CUDA ≤ 12.2 natively, the rest of 12.x through minor-version compatibility, 13.0 with cuda-compat on data center GPUs)"),
        "{reason}"
    );
}

#[test]
fn brand_unknown_the_answer_lists_where_an_image_runs() {
    if !image_tools() {
        return;
    }
    let l = Layout::new();
    l.image("13", "amd64", &nvidia_env("13.0.0"));
    // The host a 535 profile builds, GPUs unknown: the runtime takes CUDA 13.0 images on seven
    // brands' worth of terms, but forward compatibility needs a data center GPU.
    let (c, r) = ask(&["--image", &l.spec("13"), "--driver", "535.104.05"]);
    assert_eq!((c, r["verdict"].as_str()), (1, Some("depends")), "{r:#}");
    let s = r["summary"].as_str().unwrap();
    assert!(s.contains("runs on Tesla, GRID; runs on Unknown only if it is a data center GPU; does not run on Quadro, NVS, GeForce, TITAN"), "{s}");
}

/// On a machine without the NVIDIA driver (CI), `compat` says that the NVML library was not
/// found, in its own words: no library error noise ("a libloading error occurred").
#[test]
fn without_a_driver_compat_says_the_nvml_library_was_not_found() {
    if Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .args(["compat", "--cuda", "12.2"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("NVML: library not found (libnvidia-ml.so.1"),
        "{err}"
    );
    assert!(!err.contains("libloading"), "{err}");
}
