//! `gpuhost compat`: will this CUDA version, this `NVIDIA_REQUIRE_*` expression, this image run
//! on this host — or on the host a profile builds — before anyone pulls or runs it.
//!
//! The rules live in `gpuhost_nvidia::compat`; this module gathers the facts (the driver from
//! `--driver`, the profile, NVML through the health crate's probe, `/proc/driver/nvidia/version`
//! or the rpm database, in that order), reads the image, and prints the answer.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use clap::ArgGroup;
use gpuhost_nvidia::packages;
use serde::Serialize;

use gpuhost_host::cmd::Cmd;
use gpuhost_host::host::Host;
use gpuhost_host::invalid;
use gpuhost_nvidia::compat::gpu::{self, Gpu};
use gpuhost_nvidia::compat::image::{self, ImageConfig};
use gpuhost_nvidia::compat::{
    self as rules, CompatLibs, CudaVersion, DriverHost, DriverSource, Verdict,
};
use gpuhost_nvidia::localrepo::LocalRepoFile;
use gpuhost_profile::Profile;

use crate::output::{self, Format};

pub(crate) const EXIT_CODES: &str = "\
Exit codes (compat):
  0  runs (natively, or through minor-version or forward compatibility: the answer says which)
  1  does not run, or runs only under a condition gpuhost cannot check (the answer says which)
  2  invalid input: a malformed version or expression, an unreadable image, no driver to judge";

/// `gpuhost compat` options.
#[derive(clap::Args, Debug)]
#[command(group(ArgGroup::new("question").required(true).args(["cuda", "require", "image"])))]
pub(crate) struct CompatArgs {
    /// A CUDA version (12.4 or 12.4.1): do applications built with it run on the driver?
    #[arg(long, value_name = "VERSION")]
    cuda: Option<String>,
    /// An NVIDIA_REQUIRE_* expression, judged as the container runtime judges it; repeat it for
    /// several variables (they are AND'ed), e.g.
    /// --require 'cuda>=12.4 brand=tesla,driver>=470,driver<471'
    #[arg(long, value_name = "EXPR")]
    require: Vec<String>,
    /// An image: a reference on this host (`docker image inspect`), a `docker save` tarball, or
    /// an OCI image layout directory (PATH[:TAG] when it holds several images).
    #[arg(long, value_name = "REF|PATH")]
    image: Option<String>,
    /// Judge against this driver version instead of the host's.
    #[arg(long, value_name = "VERSION")]
    driver: Option<String>,
    /// The GPUs' brand as the container runtime names it: tesla, unknown (A100, H100, H200 and
    /// other brand-NVIDIA GPUs), geforce, quadro, grid, nvs, titan. Default: NVML's answer.
    #[arg(long, value_name = "BRAND")]
    brand: Option<String>,
    /// Answer for the host this profile builds: its driver from driver.local_repo_rpm's file
    /// name, its [[prefix_links]] for what an image ships twice.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Override one profile key (repeatable), e.g. --set driver.local_repo_rpm=PATH
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "profile")]
    sets: Vec<String>,
    /// Look at an install root (its /proc/driver/nvidia/version, its rpm database, its container
    /// runtime config) instead of the running system; NVML is asked only on the running system.
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// Deadline for the NVML probe, in seconds.
    #[arg(long, value_name = "SECONDS", default_value = "10")]
    timeout: f64,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Internal: the NVML probe answers the `nvml` part of this saved `gpuhost status` snapshot
    /// instead of asking NVML (`gpuhost nvml-probe --nvml-fixture`): tests replay a real GPU's
    /// answers, e.g. the H200 capture behind the outputs in docs/compat.md.
    #[arg(long, hide = true, value_name = "FILE", value_parser = crate::args::fixture_file)]
    nvml_fixture: Option<PathBuf>,
}

/// What `--format json` prints.
#[derive(Serialize)]
struct Report<'a, A: Serialize> {
    question: Question,
    host: &'a DriverHost,
    #[serde(skip_serializing_if = "Option::is_none")]
    serves: Option<rules::Serves>,
    verdict: Verdict,
    summary: &'a str,
    answer: &'a A,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'a str>,
    exit_code: i32,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Question {
    Cuda(String),
    Require(Vec<String>),
    Image(String),
}

/// Run `gpuhost compat`; the exit code.
pub(crate) fn run(a: &CompatArgs) -> i32 {
    let json = a.format == Format::Json;
    match answer(a) {
        Ok(code) => code,
        Err(e) => output::error(json, &e),
    }
}

/// CUDA versions exist from 1.0; `0.0` (or `12.4.99999`) is a typo, not a question.
fn cuda_in_range(v: &CudaVersion) -> bool {
    (1..=99).contains(&v.major) && v.minor <= 99 && v.patch <= 999
}

/// NVIDIA driver versions: a branch from 1, at most four parts of at most four digits
/// (`535.104.05`). What is not a version at all is for the version parser to name.
fn driver_in_range(d: &str) -> bool {
    let Some(parts) = d
        .trim()
        .split('.')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()
    else {
        return true;
    };
    parts.len() <= 4 && parts.first().is_some_and(|b| *b >= 1) && parts.iter().all(|p| *p <= 9999)
}

fn answer(a: &CompatArgs) -> Result<i32> {
    let cuda = check_flags(a)?;
    let profile = a
        .profile
        .as_deref()
        .map(|p| Profile::resolve(p, &a.sets))
        .transpose()?;
    // Read the image before asking the host, so that a bad path fails fast.
    let img = a
        .image
        .as_deref()
        .map(|i| read_image(i, &a.root))
        .transpose()?;
    let host = gather_host(a, profile.as_ref())?;
    let serves = Some(rules::serves(host.version(), native_of(&host)));
    let links = profile
        .as_ref()
        .map(|p| p.prefix_links.clone())
        .unwrap_or_default();
    let json = a.format == Format::Json;
    let code = if let Some(c) = cuda {
        let ans = rules::cuda_answer(c, &host, CompatLibs::Host);
        emit(
            json,
            Question::Cuda(c.major_minor()),
            &host,
            serves,
            ans.verdict,
            &ans.summary,
            &ans.details,
            ans.hint.as_deref(),
            &ans,
            |_| {},
        )?
    } else if let Some(img) = img {
        let ans = rules::image_answer(&img, &host, &links);
        emit(
            json,
            Question::Image(img.reference.clone()),
            &host,
            serves,
            ans.verdict,
            &ans.summary,
            &ans.details,
            ans.hint.as_deref(),
            &ans,
            |out| image_text(out, &ans),
        )?
    } else {
        let ans = rules::require_answer(&a.require, &host);
        emit(
            json,
            Question::Require(a.require.clone()),
            &host,
            serves,
            ans.verdict,
            &ans.summary,
            &[],
            ans.hint.as_deref(),
            &ans,
            |out| runtime_text(out, &ans.runtime),
        )?
    };
    Ok(code)
}

/// The flags checked before anything is asked of the host: bad input changes nothing and asks
/// nothing. Returns `--cuda`'s version.
fn check_flags(a: &CompatArgs) -> Result<Option<CudaVersion>> {
    let cuda = a
        .cuda
        .as_deref()
        .map(|c| {
            CudaVersion::parse(c)
                .filter(cuda_in_range)
                .ok_or_else(|| {
                    invalid!("--cuda {c:?}: give a CUDA version like 12.4 or 12.4.1 (from 1.0, the first CUDA, to 99.99.999)")
                })
        })
        .transpose()?;
    if let Some(d) = &a.driver {
        if !driver_in_range(d) {
            return Err(invalid!(
                "--driver {d:?}: give an NVIDIA driver version like 535.104.05 (branch 1 to 9999, each part at most 9999)"
            ));
        }
    }
    if let Some(b) = &a.brand {
        if !gpu::LIBNVC_BRANDS.iter().any(|x| x.eq_ignore_ascii_case(b)) {
            return Err(invalid!(
                "--brand {b:?}: the container runtime knows the brands {} (A100/H100/H200 are unknown)",
                gpu::LIBNVC_BRANDS.join(", ").to_lowercase()
            ));
        }
    }
    if !(a.timeout.is_finite() && a.timeout > 0.0 && a.timeout <= 3600.0) {
        return Err(invalid!(
            "--timeout {}: give seconds between 0 and 3600",
            a.timeout
        ));
    }
    Ok(cuda)
}

fn native_of(h: &DriverHost) -> Option<(u32, u32)> {
    let (a, b) = h.cuda.as_deref()?.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[allow(clippy::too_many_arguments)]
fn emit<A: Serialize>(
    json: bool,
    question: Question,
    host: &DriverHost,
    serves: Option<rules::Serves>,
    verdict: Verdict,
    summary: &str,
    details: &[String],
    hint: Option<&str>,
    answer: &A,
    more: impl FnOnce(&mut Vec<String>),
) -> Result<i32> {
    let code = verdict.exit_code();
    if json {
        output::json(&Report {
            question,
            host,
            serves,
            verdict,
            summary,
            answer,
            hint,
            exit_code: code,
        })?;
        return Ok(code);
    }
    let mut out = vec![format!("{}: {summary}", verdict.word())];
    out.extend(details.iter().map(|d| format!("  {d}")));
    more(&mut out);
    out.push(format!("host: {}", host.describe()));
    if let Some(s) = &serves {
        out.push(format!("  {}", s.describe()));
    }
    if let Some(c) = &host.cuda_from {
        out.push(format!("  its CUDA version from {c}"));
    }
    for g in &host.gpus {
        out.push(format!(
            "  {}{}",
            g.label(),
            host.gpus_from
                .as_deref()
                .map(|f| format!(" — from {f}"))
                .unwrap_or_default()
        ));
    }
    for n in &host.notes {
        out.push(format!("  {n}"));
    }
    if let Some(h) = hint {
        out.push(format!("hint: {h}"));
    }
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = writeln!(std::io::stdout(), "{}", out.join("\n"));
    Ok(code)
}

fn runtime_text(out: &mut Vec<String>, r: &rules::RuntimeAnswer) {
    if let Some(d) = &r.requirements.disabled_by {
        out.push(format!("  requirements not checked: {d}"));
    }
    if !r.by_brand.is_empty() {
        // GPUs unknown: the requirements, then the runtime's result per brand, grouped.
        for c in &r.checks {
            out.push(format!("  {}: {}", c.source, short(&c.expression)));
        }
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for b in &r.by_brand {
            let what = if b.starts {
                "starts".to_string()
            } else {
                format!(
                    "refused: {}",
                    b.error.as_deref().unwrap_or("requirement error")
                )
            };
            match groups.iter_mut().find(|(w, _)| *w == what) {
                Some((_, brands)) => brands.push(b.brand),
                None => groups.push((what, vec![b.brand])),
            }
        }
        for (what, brands) in groups {
            out.push(format!("  GPU brand {}: {what}", brands.join(", ")));
        }
        return;
    }
    for c in &r.checks {
        let on = c.gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default();
        match &c.message {
            None => out.push(format!(
                "  {}: {} — {}",
                c.source,
                short(&c.expression),
                c.result
            )),
            Some(m) => out.push(format!(
                "  {}: {} — {}{on}: {m}",
                c.source,
                short(&c.expression),
                c.result
            )),
        }
    }
}

/// Long expressions (NVIDIA's images have 2,000-character ones) shortened for the terminal.
fn short(e: &str) -> String {
    let terms: Vec<&str> = e.split(' ').filter(|t| !t.is_empty()).collect();
    if terms.len() <= 3 {
        e.to_string()
    } else {
        format!(
            "{} {} … ({} more terms)",
            terms[0],
            terms[1],
            terms.len() - 2
        )
    }
}

fn image_text(out: &mut Vec<String>, a: &rules::ImageAnswer) {
    let im = &a.image;
    let mut line = format!("image: {} ({}", im.reference, im.source.describe());
    if let (Some(os), Some(arch)) = (&im.os, &im.architecture) {
        line.push_str(&format!(", {os}/{arch}"));
    }
    if let Some(c) = &im.cuda_version {
        line.push_str(&format!(", CUDA_VERSION={c}"));
    }
    line.push(')');
    out.push(line);
    runtime_text(out, &a.runtime);
    if let Some(c) = &a.cuda {
        for d in &c.details {
            out.push(format!("  {d}"));
        }
    }
    if !a.components.is_empty() {
        out.push(format!(
            "  ships: {}",
            a.components
                .iter()
                .map(|c| format!("{} {}", c.component, c.version))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// Read an image from where `spec` says it is.
fn read_image(spec: &str, root: &Path) -> Result<ImageConfig> {
    let p = Path::new(spec);
    let as_path = |path: &Path, tag: Option<&str>| -> Result<ImageConfig> {
        if path.is_dir() {
            image::read_oci_layout(path, tag)
        } else {
            image::read_docker_archive(path, tag)
        }
        .map_err(|e| invalid!("{e:#}"))
    };
    if p.exists() {
        return as_path(p, None);
    }
    // PATH:TAG, where the tag may itself hold colons (nvidia/cuda:12.4.1-base-ubuntu22.04).
    for (i, _) in spec.match_indices(':') {
        let (path, tag) = (&spec[..i], &spec[i + 1..]);
        if !path.is_empty() && !tag.is_empty() && Path::new(path).exists() {
            return as_path(Path::new(path), Some(tag));
        }
    }
    // A path, or a file name of an image archive (missing.tar), is not an image to pull.
    let untagged = spec.rsplit_once(':').map_or(spec, |(path, _)| path);
    let archive = [".tar", ".tar.gz", ".tgz"]
        .iter()
        .any(|x| spec.ends_with(x) || untagged.ends_with(x));
    if spec.starts_with('/') || spec.starts_with("./") || spec.starts_with("../") || archive {
        return Err(invalid!(
            "--image {spec}: no such file or directory (a docker save tarball or an OCI layout directory)"
        ));
    }
    let r = Host::new(root)?;
    if !r.is_live() {
        return Err(invalid!(
            "--image {spec}: an image reference needs the running system's docker; under --root give a docker save tarball or an OCI layout directory"
        ));
    }
    let cmd = Cmd::new("docker")
        .args(["image", "inspect", spec])
        .timeout(Duration::from_secs(60));
    let out = cmd.output().map_err(|e| {
        invalid!("--image {spec}: {e:#}; or give a docker save tarball or an OCI layout directory")
    })?;
    if !out.success() {
        return Err(invalid!(
            "--image {spec}: {}; {}",
            cmd.failure(&out),
            not_inspected_hint(spec, &out.stderr)
        ));
    }
    image::parse_docker_inspect(spec, &out.stdout).map_err(|e| invalid!("{e:#}"))
}

/// What to do when `docker image inspect` did not answer: with no Docker daemon to ask (the
/// client says "Cannot connect to the Docker daemon", as with dockerd stopped), pulling fails
/// the same way, so start it; an image docker does not have, pull it; either way a docker save
/// tarball or an OCI layout directory needs no daemon.
fn not_inspected_hint(spec: &str, stderr: &str) -> String {
    let alternative = "or give a docker save tarball or an OCI layout directory (no daemon needed)";
    if stderr.contains("Cannot connect to the Docker daemon")
        || stderr.contains("Is the docker daemon running")
    {
        format!("no Docker daemon answers: start it (systemctl start docker) and run again, {alternative}")
    } else {
        format!("pull it first (docker pull {spec}), {alternative}")
    }
}

/// The host's driver and GPUs, from the first source that answers.
fn gather_host(a: &CompatArgs, profile: Option<&Profile>) -> Result<DriverHost> {
    let mut host = if let Some(d) = &a.driver {
        let mut h = DriverHost::new(d, DriverSource::Flag, "--driver")?;
        // "What if this host ran driver D": its GPUs still come from NVML when it answers.
        if profile.is_none() && a.brand.is_none() && Host::new(&a.root)?.is_live() {
            match nvml(
                Duration::from_secs_f64(a.timeout),
                a.nvml_fixture.as_deref(),
            ) {
                Ok(n) => {
                    h.gpus = n.gpus;
                    h.gpus_from = n.gpus_from;
                }
                Err(why) => h.notes.push(format!("GPUs unknown: NVML: {why}")),
            }
        }
        h
    } else if let Some(p) = profile {
        let rpm = p.driver.local_repo_rpm.as_ref().ok_or_else(|| {
            invalid!(
                "profile {} names no driver.local_repo_rpm, so the driver its hosts run is unknown; set it (--set driver.local_repo_rpm=PATH) or give --driver",
                p.name
            )
        })?;
        let name =
            LocalRepoFile::of_path(rpm).map_err(|e| invalid!("profile {}: {e:#}", p.name))?;
        let file = rpm.file_name().unwrap_or_default().to_string_lossy();
        DriverHost::new(
            &name.driver,
            DriverSource::Profile,
            format!("profile {}: {file} — the host this profile builds", p.name),
        )?
    } else {
        detect(a)?
    };
    if profile.is_none() {
        let r = Host::new(&a.root)?;
        if let Some(text) = r.read_opt("/etc/nvidia-container-runtime/config.toml")? {
            host.disable_require = gpuhost_nvidia::compat::require::host_disable_require(&text);
        }
    }
    if let Some(b) = &a.brand {
        let canonical = gpu::LIBNVC_BRANDS
            .iter()
            .find(|x| x.eq_ignore_ascii_case(b))
            .copied()
            .unwrap_or("Unknown");
        if host.gpus.is_empty() {
            host.gpus.push(Gpu {
                index: 0,
                brand: Some(canonical.to_string()),
                ..Gpu::default()
            });
        }
        for g in &mut host.gpus {
            g.brand = Some(canonical.to_string());
            g.nvml_brand = None;
        }
        host.gpus_from = Some("--brand".into());
    }
    Ok(host)
}

/// NVML (running system only), then `/proc/driver/nvidia/version`, then the rpm database.
fn detect(a: &CompatArgs) -> Result<DriverHost> {
    let r = Host::new(&a.root)?;
    let mut notes = Vec::new();
    if r.is_live() {
        match nvml(
            Duration::from_secs_f64(a.timeout),
            a.nvml_fixture.as_deref(),
        ) {
            Ok(h) => return Ok(h),
            Err(why) => notes.push(format!("NVML: {why}")),
        }
    } else {
        notes.push(format!("NVML: not asked under --root {}", a.root.display()));
    }
    let proc = "/proc/driver/nvidia/version";
    match r.read_opt(proc)? {
        Some(text) => {
            match text
                .lines()
                .next()
                .and_then(gpuhost_health::parse_proc_version)
            {
                Some(v) => {
                    let mut h = DriverHost::new(
                        &v,
                        DriverSource::ProcVersion,
                        format!("{proc}: the loaded kernel module"),
                    )?;
                    h.notes = notes;
                    return Ok(h);
                }
                None => notes.push(format!("{proc}: no driver version in it")),
            }
        }
        None => notes.push(format!("{proc}: absent (no NVIDIA kernel module loaded)")),
    }
    match gpuhost_host::rpm::query(&r, &[packages::DRIVER]) {
        Ok(found) => {
            let newest = found
                .get(packages::DRIVER)
                .and_then(|v| {
                    v.iter()
                        .max_by(|x, y| gpuhost_host::rpm::vercmp(&x.version, &y.version))
                })
                .cloned();
            match newest {
                Some(p) => {
                    let mut h = DriverHost::new(
                        &p.version,
                        DriverSource::Rpm,
                        format!(
                            "the installed package {} (not loaded: reboot or load the module to use it)",
                            p.nevra()
                        ),
                    )?;
                    h.notes = notes;
                    return Ok(h);
                }
                None => notes.push(format!("{}: not installed", packages::DRIVER)),
            }
        }
        Err(e) => notes.push(format!("rpm: {e:#}")),
    }
    Err(invalid!(
        "no NVIDIA driver found on {} ({}); give --driver VERSION, or --profile NAME for the host a profile builds",
        r.root().display(),
        notes.join("; ")
    ))
}

/// The driver, its CUDA version and the GPUs from NVML, through the health crate's probe (a
/// child process under a deadline, as `gpuhost status` runs it). `Err`: why NVML gave nothing.
fn nvml(timeout: Duration, fixture: Option<&Path>) -> std::result::Result<DriverHost, String> {
    use gpuhost_health::snapshot::ProbeStatus;
    let argv = crate::internal::nvml_probe_argv(fixture, None);
    let p = gpuhost_health::probe_once(&argv, timeout).map_err(|e| format!("{e:#}"))?;
    if p.status == ProbeStatus::NoLibrary {
        // "NVML: library not found (libnvidia-ml.so.1: cannot open shared object file: …)"
        return Err(p
            .error
            .map(|e| e.trim_start_matches("NVML ").to_string())
            .unwrap_or_else(|| "library not found".to_string()));
    }
    if p.status != ProbeStatus::Ok {
        let status = serde_json::to_value(&p.status)
            .ok()
            .and_then(|v| v.as_str().map(|s| s.replace('_', " ")))
            .unwrap_or_else(|| format!("{:?}", p.status));
        return Err(format!(
            "{status}{}",
            p.error.map(|e| format!(" ({e})")).unwrap_or_default()
        ));
    }
    host_from_probe(&p)
}

/// The host NVML described (the probe's answer, `gpuhost nvml-probe`).
fn host_from_probe(
    p: &gpuhost_health::snapshot::NvmlProbe,
) -> std::result::Result<DriverHost, String> {
    use gpuhost_health::snapshot::Reading;
    let driver = p
        .driver_version
        .clone()
        .ok_or_else(|| "no driver version from NVML".to_string())?;
    let mut host =
        DriverHost::new(&driver, DriverSource::Nvml, "NVML").map_err(|e| format!("{e:#}"))?;
    if let Some(c) = p.cuda_driver_version {
        host = host.with_nvml_cuda(c);
    }
    host.gpus = p
        .gpus
        .iter()
        .map(|g| {
            Gpu::from_nvml(
                usize::try_from(g.index).unwrap_or(0),
                g.name.value().cloned(),
                match g.brand {
                    Reading::Value(b) => Some(b),
                    _ => None,
                },
                g.compute_capability.value().cloned(),
            )
        })
        .collect();
    host.gpus_from = Some("NVML".into());
    Ok(host)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_real_h200_probe_is_a_data_center_gpu_the_runtime_calls_unknown() {
        // `gpuhost nvml-probe` on a real H200 (driver 580.159.04).
        let text = include_str!("../../tests/fixtures/compat/h200-nvml-probe.json");
        let p: gpuhost_health::snapshot::NvmlProbe = serde_json::from_str(text).unwrap();
        let h = host_from_probe(&p).unwrap();
        assert_eq!(
            (h.driver.as_str(), h.cuda.as_deref()),
            ("580.159.04", Some("13.0"))
        );
        let g = &h.gpus[0];
        assert_eq!(g.name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(
            (g.nvml_brand, g.brand.as_deref()),
            (Some(14), Some("Unknown"))
        );
        assert_eq!(g.arch.as_deref(), Some("9.0"));
        assert_eq!(g.forward_compat(), gpu::ForwardCompat::Supported);
        // CUDA 13.0 through the image's compat libraries on 535 would run on it.
        let mut h535 = DriverHost::new("535.104.05", DriverSource::Flag, "--driver").unwrap();
        h535.gpus = h.gpus.clone();
        let a = rules::cuda_answer(CudaVersion::new(13, 0, 0), &h535, CompatLibs::InImage);
        assert_eq!(a.verdict, Verdict::Runs, "{}", a.summary);
    }

    #[test]
    fn long_expressions_are_shortened_for_the_terminal() {
        assert_eq!(short("cuda>=12.4"), "cuda>=12.4");
        assert_eq!(
            short("cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471"),
            "cuda>=12.4 brand=tesla,driver>=470,driver<471 … (2 more terms)"
        );
    }
}
