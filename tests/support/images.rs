//! OCI layouts and `docker save` tarballs of images with the environment of NVIDIA's CUDA
//! images, built with the real umoci and skopeo (tests/compat.rs, and tests/docs.rs for the
//! examples of docs/compat.md).
//!
//! ```ignore
//! #[path = "support/images.rs"]
//! mod images;
//! ```
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// NVIDIA's `NVIDIA_REQUIRE_CUDA` for a CUDA release (first image of that version).
pub fn nvidia_require(cuda_version: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/compat/cuda-images.json"),
        )
        .unwrap(),
    )
    .unwrap();
    v["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["cuda_version"] == cuda_version)
        .map(|i| i["nvidia_require_cuda"].as_str().unwrap().to_string())
        .unwrap()
}

/// umoci (OCI layouts) and skopeo (docker save tarballs) are installed by scripts/deps.sh; CI
/// requires them (GPUHOST_REQUIRE_ALL_TOOLS).
pub fn image_tools() -> bool {
    let ok = ["umoci", "skopeo"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !ok && std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_some() {
        panic!("umoci and skopeo are needed (apt-get install -y umoci skopeo)");
    }
    if !ok {
        eprintln!("skipped: umoci or skopeo missing (scripts/deps.sh installs them)");
    }
    ok
}

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An OCI image layout made by umoci: images with no layers and the environment we give.
pub struct Layout {
    pub tmp: tempfile::TempDir,
}

impl Layout {
    pub fn new() -> Layout {
        let tmp = tempfile::tempdir().unwrap();
        run(Command::new("umoci")
            .args(["init", "--layout"])
            .arg(tmp.path().join("oci")));
        Layout { tmp }
    }

    pub fn path(&self) -> PathBuf {
        self.tmp.path().join("oci")
    }

    pub fn spec(&self, tag: &str) -> String {
        format!("{}:{tag}", self.path().display())
    }

    pub fn image(&self, tag: &str, arch: &str, env: &[String]) -> &Layout {
        run(Command::new("umoci").args(["new", "--image", &self.spec(tag)]));
        let mut cmd = Command::new("umoci");
        cmd.args([
            "config",
            "--image",
            &self.spec(tag),
            "--os",
            "linux",
            "--architecture",
            arch,
        ]);
        for e in env {
            cmd.arg("--config.env").arg(e);
        }
        run(&mut cmd);
        self
    }

    /// `skopeo copy oci:… docker-archive:…`: a `docker save` tarball of one image.
    pub fn docker_archive(&self, tag: &str, reference: &str) -> PathBuf {
        let out = self.tmp.path().join(format!("{tag}.tar"));
        run(Command::new("skopeo").args([
            "copy",
            "-q",
            &format!("oci:{}", self.spec(tag)),
            &format!("docker-archive:{}:{reference}", out.display()),
        ]));
        out
    }
}

/// The environment of NVIDIA's CUDA runtime image for `cuda` (rockylinux8, amd64 stage).
pub fn nvidia_env(cuda: &str) -> Vec<String> {
    vec![
        "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        "NVARCH=x86_64".into(),
        format!("NVIDIA_REQUIRE_CUDA={}", nvidia_require(cuda)),
        format!("NV_CUDA_CUDART_VERSION={cuda}-1"),
        format!("CUDA_VERSION={cuda}"),
        "NVIDIA_VISIBLE_DEVICES=all".into(),
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility".into(),
        "NV_LIBNCCL_PACKAGE_VERSION=2.21.5-1".into(),
        "NCCL_VERSION=2.21.5".into(),
    ]
}
