//! What an image ships that the host may also provide.
//!
//! NVIDIA's CUDA images record their libraries in their environment (gitlab.com/nvidia/
//! container-images/cuda `dist/*/runtime/Dockerfile`, `…/cudnn/Dockerfile`): `CUDA_VERSION`,
//! `NCCL_VERSION` (`NV_LIBNCCL_PACKAGE_VERSION`), `NV_CUDNN_VERSION` (older images:
//! `CUDNN_VERSION`), `NV_LIBCUBLAS_VERSION`, `NV_LIBNPP_VERSION`, `NV_LIBCUSPARSE_VERSION`; NGC
//! framework images add `TRT_VERSION`. A profile's `[[prefix_links]]` expose host packages of
//! the same libraries under a prefix (`/opt/nvidia/nccl`) that can be mounted into containers.
//! One owner per component: a library either comes with the image or is mounted from the host,
//! never both, or the loader picks whichever comes first on the library path.

use serde::{Deserialize, Serialize};

use super::require::Env;

/// `(component, image variables in order of preference, host package name prefixes)`.
const COMPONENTS: &[(&str, &[&str], &[&str])] = &[
    (
        "CUDA runtime",
        &["CUDA_VERSION"],
        &[
            "cuda-cudart",
            "cuda-runtime",
            "cuda-libraries",
            "cuda-toolkit",
        ],
    ),
    (
        "cuDNN",
        &["NV_CUDNN_VERSION", "CUDNN_VERSION"],
        &["libcudnn", "cudnn"],
    ),
    (
        "NCCL",
        &["NCCL_VERSION", "NV_LIBNCCL_PACKAGE_VERSION"],
        &["libnccl", "nccl"],
    ),
    ("cuBLAS", &["NV_LIBCUBLAS_VERSION"], &["libcublas"]),
    ("NPP", &["NV_LIBNPP_VERSION"], &["libnpp"]),
    ("cuSPARSE", &["NV_LIBCUSPARSE_VERSION"], &["libcusparse"]),
    (
        "TensorRT",
        &["TRT_VERSION", "TENSORRT_VERSION"],
        &["tensorrt", "libnvinfer"],
    ),
];

/// The host side of a component: the profile's prefix link that provides it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostOwner {
    pub prefix: String,
    pub packages: Vec<String>,
}

/// One component the image ships.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Shipped {
    pub component: &'static str,
    pub version: String,
    /// The variable that says so (`NCCL_VERSION`).
    pub variable: &'static str,
    /// The profile also provides it from the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostOwner>,
}

/// The components `env` declares, each with the profile link that also provides it.
pub fn shipped(env: &Env, links: &[PrefixLink]) -> Vec<Shipped> {
    COMPONENTS
        .iter()
        .filter_map(|(component, vars, prefixes)| {
            let (variable, version) = vars
                .iter()
                .find_map(|v| env.get(v).filter(|x| !x.is_empty()).map(|x| (*v, x)))?;
            let host = links.iter().find_map(|l| {
                let packages: Vec<String> = l
                    .packages
                    .iter()
                    .filter(|p| prefixes.iter().any(|pre| p.starts_with(pre)))
                    .cloned()
                    .collect();
                (!packages.is_empty()).then(|| HostOwner {
                    prefix: l.prefix.display().to_string(),
                    packages,
                })
            });
            Some(Shipped {
                component,
                version: version.to_string(),
                variable,
                host,
            })
        })
        .collect()
}

/// One `[[prefix_links]]` entry in a profile: every file the packages own is symlinked under
/// `prefix` (`/usr/` stripped, `lib64` folded into `lib`). Missing packages are installed.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrefixLink {
    /// Packages whose files are linked (installed from the enabled repos when missing).
    pub packages: Vec<String>,
    /// The directory the links go under, e.g. `/opt/nvidia/nccl`.
    pub prefix: std::path::PathBuf,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn nccl_from_the_image_and_the_host_is_two_owners() {
        // The environment of NVIDIA's 12.4.1 rockylinux8 runtime-cudnn image.
        let env = Env::parse(
            &[
                "CUDA_VERSION=12.4.1",
                "NV_LIBNCCL_PACKAGE_VERSION=2.21.5-1",
                "NCCL_VERSION=2.21.5",
                "NV_CUDNN_VERSION=9.1.0.70-1",
                "NV_LIBCUBLAS_VERSION=12.4.5.8-1",
            ]
            .map(String::from),
        )
        .unwrap();
        let links = vec![PrefixLink {
            packages: vec!["libnccl".into(), "libnccl-devel".into()],
            prefix: "/opt/nvidia/nccl".into(),
        }];
        let s = shipped(&env, &links);
        let names: Vec<&str> = s.iter().map(|c| c.component).collect();
        assert_eq!(names, vec!["CUDA runtime", "cuDNN", "NCCL", "cuBLAS"]);
        let nccl = &s[2];
        assert_eq!(
            (nccl.variable, nccl.version.as_str()),
            ("NCCL_VERSION", "2.21.5")
        );
        assert_eq!(
            nccl.host,
            Some(HostOwner {
                prefix: "/opt/nvidia/nccl".into(),
                packages: vec!["libnccl".into(), "libnccl-devel".into()]
            })
        );
        assert!(s[1].host.is_none());
    }
}
