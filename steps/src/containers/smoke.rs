//! `container-smoke`: a GPU container really runs. `docker run --rm --gpus all <image>
//! nvidia-smi -L` must list the GPUs (as many as the host has on PCI). Then the container's
//! CUDA (from `nvcc --version` in the image when it has nvcc, else the image's `CUDA_VERSION`)
//! is reported next to the newest CUDA the host driver supports — `nvidia-smi`'s "CUDA
//! Version" is the driver's, not the container's. Live only; deferred in an install root.
//! Parsing is in pure functions, tested on output captured on a real H200.

use std::time::Duration;

use anyhow::Result;

use crate::step::{Check, Ctx, Step};
use gpuhost_host::cmd::{Cmd, CmdOutput};
use gpuhost_host::error::hinted;

pub(crate) struct ContainerSmoke;

/// Image pulls can be slow.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// One line of `nvidia-smi -L`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmiGpu {
    pub index: u32,
    pub name: String,
    pub uuid: String,
}

/// Parse `nvidia-smi -L`: `GPU 0: NVIDIA H200 (UUID: GPU-…)`. MIG lines are not GPUs.
pub fn parse_smi_list(stdout: &str) -> Vec<SmiGpu> {
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("GPU ")?;
            let (idx, rest) = rest.split_once(": ")?;
            let index = idx.trim().parse().ok()?;
            let (name, uuid) = rest.rsplit_once(" (UUID: ")?;
            Some(SmiGpu {
                index,
                name: name.trim().to_string(),
                uuid: uuid.trim_end().trim_end_matches(')').to_string(),
            })
        })
        .collect()
}

/// `(driver version, newest CUDA the driver supports)` from `nvidia-smi`'s header line
/// `| NVIDIA-SMI 580.159.04  Driver Version: 580.159.04  CUDA Version: 13.0 |`.
pub fn parse_smi_header(stdout: &str) -> Option<(String, String)> {
    let line = stdout.lines().find(|l| l.contains("Driver Version:"))?;
    let field = |key: &str| -> Option<String> {
        let after = line.split_once(key)?.1;
        after.split_whitespace().next().map(str::to_string)
    };
    Some((field("Driver Version:")?, field("CUDA Version:")?))
}

/// The CUDA release from `nvcc --version`: `Cuda compilation tools, release 13.0, V13.0.88` →
/// `13.0`.
pub fn parse_nvcc_release(stdout: &str) -> Option<String> {
    let line = stdout
        .lines()
        .find(|l| l.contains("Cuda compilation tools"))?;
    let rel = line.split_once("release ")?.1;
    let v = rel.split([',', ' ']).next()?.trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// `CUDA_VERSION` from `docker image inspect --format '{{json .Config.Env}}'` (a JSON array of
/// `KEY=value`), as `major.minor`.
pub(crate) fn parse_image_cuda(env_json: &str) -> Option<String> {
    let env: Vec<String> = serde_json::from_str(env_json.trim()).ok()?;
    let v = env.iter().find_map(|e| e.strip_prefix("CUDA_VERSION="))?;
    Some(major_minor(v))
}

fn major_minor(v: &str) -> String {
    v.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// How the container's CUDA `cuda` (major.minor) runs on driver `driver`, whose own CUDA is
/// `driver_cuda` (nvidia-smi's "CUDA Version"), by `gpuhost_nvidia::compat`'s rules; the image may carry
/// cuda-compat. `None` when a version does not parse.
pub(crate) fn container_cuda_answer(
    cuda: &str,
    driver: &str,
    driver_cuda: &str,
) -> Option<gpuhost_nvidia::compat::CudaAnswer> {
    use gpuhost_nvidia::compat::{cuda_answer, CompatLibs, CudaVersion, DriverHost, DriverSource};
    let c = CudaVersion::parse(cuda)?;
    let d = CudaVersion::parse(driver_cuda)?;
    let host = DriverHost::new(driver, DriverSource::Nvml, "nvidia-smi")
        .ok()?
        .with_nvml_cuda(i32::try_from(d.major * 1000 + d.minor * 10).ok()?);
    Some(cuda_answer(c, &host, CompatLibs::MaybeInImage))
}

impl ContainerSmoke {
    fn docker() -> Cmd {
        Cmd::new("docker").timeout(DOCKER_TIMEOUT)
    }

    fn command_line(image: &str) -> String {
        format!("docker run --rm --gpus all {image} nvidia-smi -L")
    }

    /// Run the smoke test on the live host; `Ok(note)` when it passes.
    fn run(ctx: &Ctx<'_>, image: &str) -> Result<String> {
        let spec = &ctx.profile.container_smoke;
        let present = Self::docker()
            .args([
                "image",
                "inspect",
                "--format",
                "{{json .Config.Env}}",
                image,
            ])
            .output()?;
        if !present.success() {
            if let Some(tar) = &spec.image_tarball {
                Self::docker()
                    .args(["load", "--input"])
                    .arg(ctx.host.path(tar))
                    .run()?;
            }
        }
        let run = Self::docker()
            .args(["run", "--rm", "--gpus", "all", image, "nvidia-smi", "-L"])
            .output()?;
        if !run.success() {
            let cmd =
                Self::docker().args(["run", "--rm", "--gpus", "all", image, "nvidia-smi", "-L"]);
            return Err(hinted(
                format!("the GPU container smoke test failed: {}", cmd.failure(&run)),
                "check `docker info` for the nvidia runtime, `nvidia-smi` on the host, and that the image's CUDA fits the driver",
            ));
        }
        let gpus = parse_smi_list(&run.stdout);
        let on_pci = ctx.facts.gpus.len();
        if gpus.is_empty() || (on_pci > 0 && gpus.len() != on_pci) {
            return Err(hinted(
                format!(
                    "the container sees {} GPUs, the host has {on_pci} on PCI ({})",
                    gpus.len(),
                    Self::command_line(image)
                ),
                "run `nvidia-smi -L` on the host: a GPU missing there is a driver or hardware problem, not a container one",
            ));
        }
        let mut note = format!(
            "{} GPUs in {image} ({})",
            gpus.len(),
            gpus.iter()
                .map(|g| format!("GPU {}: {}", g.index, g.name))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let host = Cmd::new("nvidia-smi").output().ok().filter(|o| o.success());
        let driver = host.as_ref().and_then(|o| parse_smi_header(&o.stdout));
        let container = Self::container_cuda(image, &present);
        note.push_str(&cuda_note(image, container, driver)?);
        Ok(note)
    }

    /// The container's CUDA and where it was read: `nvcc --version` in the image, else the
    /// image's `CUDA_VERSION` (from `present`, `docker image inspect`'s environment).
    fn container_cuda(image: &str, present: &CmdOutput) -> Option<(String, &'static str)> {
        let nvcc = Self::docker()
            .args([
                "run",
                "--rm",
                "--gpus",
                "all",
                "--entrypoint",
                "nvcc",
                image,
                "--version",
            ])
            .output()
            .ok()
            .filter(|o| o.success())
            .and_then(|o| parse_nvcc_release(&o.stdout));
        match nvcc {
            Some(v) => Some((v, "nvcc")),
            None => present
                .success()
                .then(|| parse_image_cuda(&present.stdout))
                .flatten()
                .map(|v| (v, "the image's CUDA_VERSION")),
        }
    }
}

/// The container's CUDA next to the host driver's (`driver`: its version and newest CUDA),
/// judged by the same rules as `gpuhost compat`: newer than the driver's CUDA is fine within
/// minor-version or forward compatibility; a CUDA that does not run is an error.
fn cuda_note(
    image: &str,
    container: Option<(String, &'static str)>,
    driver: Option<(String, String)>,
) -> Result<String> {
    let mut note = String::new();
    match (&container, &driver) {
        (Some((c, from)), Some((drv, max))) => {
            note.push_str(&format!(
                "; container CUDA {c} (from {from}); host driver {drv} supports CUDA up to {max} (nvidia-smi's \"CUDA Version\" is this, not the container's)"
            ));
            if let Some(a) = container_cuda_answer(c, drv, max) {
                if a.verdict == gpuhost_nvidia::compat::Verdict::DoesNotRun {
                    return Err(hinted(
                        format!("{image}: {}", a.summary),
                        a.hint.unwrap_or_else(|| {
                            "use an image built for CUDA ≤ the driver's, or install a newer driver".into()
                        }),
                    ));
                }
                if a.mode != gpuhost_nvidia::compat::Mode::Native {
                    note.push_str(&format!("; {}", a.summary));
                }
            }
        }
        (Some((c, from)), None) => {
            note.push_str(&format!("; container CUDA {c} (from {from})"));
        }
        (None, Some((drv, max))) => note.push_str(&format!(
            "; host driver {drv} supports CUDA up to {max}; the image has no nvcc and no CUDA_VERSION to compare"
        )),
        (None, None) => {}
    }
    Ok(note)
}

impl Step for ContainerSmoke {
    fn id(&self) -> &'static str {
        "container-smoke"
    }

    fn summary(&self) -> &'static str {
        "a GPU container runs nvidia-smi -L; its CUDA is compared with the driver's"
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        ctx.profile
            .container_smoke
            .image
            .is_none()
            .then(|| "no container_smoke.image in the profile".to_string())
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let Some(image) = ctx.profile.container_smoke.image.clone() else {
            return Ok(Check::in_sync("no container_smoke.image in the profile"));
        };
        let mut check = Check::default();
        if !ctx.host.is_live() {
            if let Some(tar) = &ctx.profile.container_smoke.image_tarball {
                check.deferred.push(format!(
                    "docker load --input {} (when {image} is not present)",
                    tar.display()
                ));
            }
            check.deferred.push(Self::command_line(&image));
            return Ok(check);
        }
        check
            .notes
            .push(format!("apply runs {}", Self::command_line(&image)));
        Ok(check)
    }

    /// The smoke test itself: live, and only in `apply` (a plan runs no container).
    fn probe(&self, ctx: &Ctx<'_>) -> Result<Vec<String>> {
        match &ctx.profile.container_smoke.image {
            Some(image) if ctx.host.is_live() => Ok(vec![Self::run(ctx, image)?]),
            _ => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const SMI_L: &str = include_str!("../../../tests/fixtures/h200-smoke/nvidia-smi-L.txt");
    const SMI: &str = include_str!("../../../tests/fixtures/h200-smoke/nvidia-smi.txt");
    const NVCC: &str = include_str!("../../../tests/fixtures/h200-smoke/nvcc-version.txt");

    #[test]
    fn lists_the_gpus_of_a_real_h200() {
        assert_eq!(
            parse_smi_list(SMI_L),
            vec![SmiGpu {
                index: 0,
                name: "NVIDIA H200".into(),
                uuid: "GPU-286b040d-ccab-9686-d03c-bf5bf2d75728".into()
            }]
        );
    }

    #[test]
    fn mig_devices_and_errors_are_not_gpus() {
        let out = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n  MIG 1g.10gb     Device  0: (UUID: MIG-bbbb)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-cccc)\n";
        let got = parse_smi_list(out);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].name, "NVIDIA H100 80GB HBM3");
        assert!(parse_smi_list(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        )
        .is_empty());
    }

    #[test]
    fn the_header_gives_the_drivers_cuda_not_the_containers() {
        assert_eq!(
            parse_smi_header(SMI),
            Some(("580.159.04".to_string(), "13.0".to_string()))
        );
        assert_eq!(parse_nvcc_release(NVCC).as_deref(), Some("13.0"));
        assert_eq!(
            parse_nvcc_release("Cuda compilation tools, release 10.2, V10.2.89\n").as_deref(),
            Some("10.2")
        );
        assert_eq!(parse_nvcc_release("bash: nvcc: command not found"), None);
    }

    #[test]
    fn image_cuda_from_its_environment() {
        let env = r#"["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/sbin:/usr/bin","NVARCH=x86_64","NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471","CUDA_VERSION=12.4.1"]"#;
        assert_eq!(parse_image_cuda(env).as_deref(), Some("12.4"));
        assert_eq!(parse_image_cuda(r#"["PATH=/bin"]"#), None);
        assert_eq!(parse_image_cuda("not json"), None);
    }

    #[rstest]
    #[case("12.4", "580.159.04", "13.0", true, "native")]
    #[case("12.4", "535.104.05", "12.2", true, "minor-version")]
    #[case("13.0", "560.35.05", "12.6", false, "unsupported")]
    #[case("11.8", "535.104.05", "12.2", true, "native")]
    fn container_cuda_against_the_driver(
        #[case] cuda: &str,
        #[case] driver: &str,
        #[case] driver_cuda: &str,
        #[case] ok: bool,
        #[case] mode: &str,
    ) {
        let Some(a) = container_cuda_answer(cuda, driver, driver_cuda) else {
            unreachable!("{cuda}, {driver_cuda}: versions")
        };
        assert_eq!(
            a.verdict != gpuhost_nvidia::compat::Verdict::DoesNotRun,
            ok,
            "{cuda} on {driver}: {}",
            a.summary
        );
        assert_eq!(serde_json::to_value(a.mode).unwrap_or_default(), mode);
    }
}
