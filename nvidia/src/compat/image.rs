//! An image's configuration — its environment above all — from wherever the image is: `docker
//! image inspect` on a live host, a `docker save` tarball, or an OCI image layout directory.
//!
//! Formats: a `docker save` tarball holds `manifest.json` (`[{"Config": …, "RepoTags": […],
//! "Layers": […]}]`) and the config JSON it names; Docker 25+ also writes an OCI layout in the
//! same tarball (`oci-layout`, `index.json`, `blobs/sha256/…`), which is read when there is no
//! `manifest.json`. An OCI image layout (image-spec `image-layout.md`) has `index.json`, whose
//! descriptors point at image manifests or image indexes (one manifest per platform) by digest;
//! a manifest's `config` descriptor points at the config blob, whose `config.Env` is the
//! environment. Every blob read is checked against its sha256 digest. Layers are never read.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

/// Where the image configuration came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `docker image inspect` on the live host.
    DockerInspect,
    /// A `docker save` tarball.
    DockerArchive,
    /// An OCI image layout directory.
    OciLayout,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::DockerInspect => "docker image inspect",
            Source::DockerArchive => "docker save tarball",
            Source::OciLayout => "OCI image layout",
        }
    }
}

/// What gpuhost needs of an image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageConfig {
    /// What was asked for: the reference, or the path.
    pub reference: String,
    pub source: Source,
    /// Tags or reference names the image carries.
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// The config's digest (`sha256:…`), the image ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,
    /// `KEY=value` entries.
    pub env: Vec<String>,
}

/// Small files kept from a tarball (manifests and configs are a few KiB; layers are skipped).
const KEEP_MAX: u64 = 4 << 20;
const KEPT_TOTAL_MAX: u64 = 64 << 20;

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// `docker image inspect REF` output (a JSON array of one image).
pub fn parse_docker_inspect(reference: &str, json: &str) -> Result<ImageConfig> {
    let v: Value = serde_json::from_str(json.trim())
        .with_context(|| format!("docker image inspect {reference}: the output is not JSON"))?;
    let img = v
        .as_array()
        .and_then(|a| a.first())
        .ok_or_else(|| anyhow!("docker image inspect {reference}: no image in the output"))?;
    Ok(ImageConfig {
        reference: reference.to_string(),
        source: Source::DockerInspect,
        tags: strings(img.get("RepoTags")),
        os: img.get("Os").and_then(Value::as_str).map(str::to_string),
        architecture: img
            .get("Architecture")
            .and_then(Value::as_str)
            .map(str::to_string),
        config_digest: img.get("Id").and_then(Value::as_str).map(str::to_string),
        env: strings(img.get("Config").and_then(|c| c.get("Env"))),
    })
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Where blobs and files come from: a directory or the small files of a tarball.
trait Store {
    fn read(&self, rel: &str) -> Result<Vec<u8>>;
    fn has(&self, rel: &str) -> bool;
    fn what(&self) -> String;
}

struct DirStore<'a>(&'a Path);

impl Store for DirStore<'_> {
    fn read(&self, rel: &str) -> Result<Vec<u8>> {
        let p = self.0.join(rel);
        std::fs::read(&p).with_context(|| format!("reading {}", p.display()))
    }
    fn has(&self, rel: &str) -> bool {
        self.0.join(rel).is_file()
    }
    fn what(&self) -> String {
        self.0.display().to_string()
    }
}

struct TarStore {
    path: String,
    files: HashMap<String, Vec<u8>>,
}

impl Store for TarStore {
    fn read(&self, rel: &str) -> Result<Vec<u8>> {
        self.files
            .get(rel)
            .cloned()
            .ok_or_else(|| anyhow!("{}: no {rel} in the archive", self.path))
    }
    fn has(&self, rel: &str) -> bool {
        self.files.contains_key(rel)
    }
    fn what(&self) -> String {
        self.path.clone()
    }
}

fn normalize(name: &str) -> String {
    name.trim_start_matches("./").to_string()
}

/// Read the small regular files of a tarball.
fn tar_store(path: &Path) -> Result<TarStore> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut archive = tar::Archive::new(file);
    let mut files = HashMap::new();
    let mut kept = 0u64;
    let entries = archive
        .entries()
        .with_context(|| format!("{}: not a tar archive", path.display()))?;
    for entry in entries {
        let mut entry =
            entry.with_context(|| format!("{}: not a readable tar archive", path.display()))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let size = entry.size();
        if size > KEEP_MAX {
            continue;
        }
        kept += size;
        if kept > KEPT_TOTAL_MAX {
            bail!(
                "{}: more than {} MiB of small files; not an image archive",
                path.display(),
                KEPT_TOTAL_MAX >> 20
            );
        }
        let name = normalize(&entry.path()?.to_string_lossy());
        let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        entry
            .read_to_end(&mut buf)
            .with_context(|| format!("{}: reading {name}", path.display()))?;
        files.insert(name, buf);
    }
    if files.is_empty() {
        bail!("{}: not a tar archive (no files in it)", path.display());
    }
    Ok(TarStore {
        path: path.display().to_string(),
        files,
    })
}

/// The blob path of a digest, after checking its form: `sha256:<64 hex>` → `blobs/sha256/<hex>`.
fn blob_path(digest: &str) -> Result<String> {
    let (alg, hex) = digest
        .split_once(':')
        .ok_or_else(|| anyhow!("malformed digest {digest:?}"))?;
    if alg != "sha256" {
        bail!("digest {digest}: only sha256 is supported");
    }
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("malformed digest {digest:?}");
    }
    Ok(format!("blobs/sha256/{hex}"))
}

/// Read a blob and check it against its digest.
fn read_blob(store: &dyn Store, digest: &str) -> Result<Vec<u8>> {
    let rel = blob_path(digest)?;
    let data = store.read(&rel)?;
    let got = gpuhost_host::fsutil::sha256_hex(&data);
    if !digest.ends_with(&got) {
        bail!(
            "{}: {rel} does not match its digest (sha256 {got}); the image is corrupt",
            store.what()
        );
    }
    Ok(data)
}

fn json(data: &[u8], what: &str) -> Result<Value> {
    serde_json::from_slice(data).with_context(|| format!("{what} is not JSON"))
}

/// The image config JSON (`{"architecture", "os", "config": {"Env": […]}}`).
fn from_config(
    reference: &str,
    source: Source,
    tags: Vec<String>,
    digest: Option<String>,
    config: &Value,
) -> ImageConfig {
    ImageConfig {
        reference: reference.to_string(),
        source,
        tags,
        os: config.get("os").and_then(Value::as_str).map(str::to_string),
        architecture: config
            .get("architecture")
            .and_then(Value::as_str)
            .map(str::to_string),
        config_digest: digest,
        env: strings(config.get("config").and_then(|c| c.get("Env"))),
    }
}

/// A `docker save` tarball; `tag` picks one image when the tarball holds several.
pub fn read_docker_archive(path: &Path, tag: Option<&str>) -> Result<ImageConfig> {
    let store = tar_store(path)?;
    let reference = path.display().to_string();
    if !store.has("manifest.json") {
        if store.has("index.json") {
            return read_oci(&store, &reference, tag, Source::DockerArchive);
        }
        bail!(
            "{}: neither manifest.json nor index.json in it; not a docker save tarball",
            path.display()
        );
    }
    let manifest = json(&store.read("manifest.json")?, "manifest.json")?;
    let images = manifest
        .as_array()
        .ok_or_else(|| anyhow!("{}: manifest.json is not a list", path.display()))?;
    let chosen: Vec<&Value> = match tag {
        Some(t) => images
            .iter()
            .filter(|i| strings(i.get("RepoTags")).iter().any(|r| tag_matches(r, t)))
            .collect(),
        None => images.iter().collect(),
    };
    let image = match chosen.as_slice() {
        [one] => *one,
        [] if tag.is_some() => bail!(
            "{}: no image tagged {} in it (tags: {})",
            path.display(),
            tag.unwrap_or_default(),
            all_tags(images)
        ),
        [] => bail!("{}: manifest.json lists no image", path.display()),
        _ => bail!(
            "{}: holds {} images (tags: {}); name one as {}:TAG",
            path.display(),
            chosen.len(),
            all_tags(images),
            path.display()
        ),
    };
    let config_path = image
        .get("Config")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("{}: manifest.json names no Config", path.display()))?;
    let config_path = normalize(config_path);
    let data = store.read(&config_path)?;
    // The config's file name is its digest (`<hex>.json` or `blobs/sha256/<hex>`): check it.
    let stem = config_path
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .trim_end_matches(".json");
    let digest = if stem.len() == 64 && stem.bytes().all(|b| b.is_ascii_hexdigit()) {
        let got = gpuhost_host::fsutil::sha256_hex(&data);
        if got != stem {
            bail!(
                "{}: {config_path} does not match its digest (sha256 {got}); the archive is corrupt",
                path.display()
            );
        }
        Some(format!("sha256:{stem}"))
    } else {
        None
    };
    let config = json(&data, &config_path)?;
    Ok(from_config(
        &reference,
        Source::DockerArchive,
        strings(image.get("RepoTags")),
        digest,
        &config,
    ))
}

fn all_tags(images: &[Value]) -> String {
    let t: Vec<String> = images
        .iter()
        .flat_map(|i| strings(i.get("RepoTags")))
        .collect();
    if t.is_empty() {
        "none".into()
    } else {
        t.join(", ")
    }
}

/// `docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04` matches itself, `nvidia/cuda:12.4.1-base-ubuntu22.04`
/// and `docker.io/library/x:t` matches `x:t`.
fn tag_matches(full: &str, want: &str) -> bool {
    full == want
        || full.strip_prefix("docker.io/") == Some(want)
        || full.strip_prefix("docker.io/library/") == Some(want)
}

/// An OCI image layout directory; `reference` picks a manifest by its
/// `org.opencontainers.image.ref.name` (or `io.containerd.image.name`) when there are several.
pub fn read_oci_layout(dir: &Path, reference: Option<&str>) -> Result<ImageConfig> {
    let store = DirStore(dir);
    if !store.has("index.json") {
        bail!(
            "{}: no index.json in it; not an OCI image layout",
            dir.display()
        );
    }
    read_oci(
        &store,
        &dir.display().to_string(),
        reference,
        Source::OciLayout,
    )
}

fn ref_names(d: &Value) -> Vec<String> {
    let ann = d.get("annotations");
    [
        "org.opencontainers.image.ref.name",
        "io.containerd.image.name",
    ]
    .iter()
    .filter_map(|k| ann.and_then(|a| a.get(*k)).and_then(Value::as_str))
    .map(str::to_string)
    .collect()
}

fn read_oci(
    store: &dyn Store,
    what: &str,
    reference: Option<&str>,
    source: Source,
) -> Result<ImageConfig> {
    let index = json(&store.read("index.json")?, "index.json")?;
    let desc = chosen_descriptor(&index, what, reference)?;
    let tags = ref_names(desc);
    let mut manifest = descriptor_target(store, desc, what)?;
    // An index (one manifest per platform): take this machine's platform.
    let mut depth = 0;
    while manifest.get("manifests").is_some() {
        depth += 1;
        if depth > 4 {
            bail!("{what}: image indexes nested too deep");
        }
        let pick = this_platform(&manifest, what)?;
        manifest = descriptor_target(store, &pick, what)?;
    }
    let config_digest = manifest
        .get("config")
        .and_then(|c| c.get("digest"))
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("{what}: the image manifest names no config"))?
        .to_string();
    let config = json(&read_blob(store, &config_digest)?, "the image config")?;
    Ok(from_config(
        what,
        source,
        tags,
        Some(config_digest),
        &config,
    ))
}

/// The one manifest of `index.json` that `reference` names (or the only one there is).
fn chosen_descriptor<'a>(
    index: &'a Value,
    what: &str,
    reference: Option<&str>,
) -> Result<&'a Value> {
    let descriptors = index
        .get("manifests")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("{what}: index.json lists no manifests"))?;
    let chosen: Vec<&Value> = match reference {
        Some(r) => descriptors
            .iter()
            .filter(|d| ref_names(d).iter().any(|n| n == r || tag_matches(n, r)))
            .collect(),
        None => descriptors.iter().collect(),
    };
    let names: Vec<String> = descriptors.iter().flat_map(ref_names).collect();
    match chosen.as_slice() {
        [one] => Ok(*one),
        [] => bail!(
            "{what}: no image {} in it (names: {})",
            reference.unwrap_or("at all"),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ),
        _ => bail!(
            "{what}: holds {} images (names: {}); name one as {what}:NAME",
            chosen.len(),
            names.join(", ")
        ),
    }
}

/// The entry of an image index (one manifest per platform) for this machine's platform.
fn this_platform(manifest: &Value, what: &str) -> Result<Value> {
    let want_arch = host_oci_arch();
    let entries = manifest
        .get("manifests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let platform = |d: &Value, k: &str| {
        d.get("platform")
            .and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let pick = entries.iter().find(|d| {
        platform(d, "os").as_deref() == Some("linux")
            && platform(d, "architecture").as_deref() == Some(want_arch)
    });
    let Some(pick) = pick else {
        let have: Vec<String> = entries
            .iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    platform(d, "os").unwrap_or_else(|| "?".into()),
                    platform(d, "architecture").unwrap_or_else(|| "?".into())
                )
            })
            .collect();
        bail!(
            "{what}: no linux/{want_arch} image in it (platforms: {})",
            have.join(", ")
        );
    };
    Ok(pick.clone())
}

fn descriptor_target(store: &dyn Store, desc: &Value, what: &str) -> Result<Value> {
    let digest = desc
        .get("digest")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("{what}: a descriptor without a digest"))?;
    let v = json(&read_blob(store, digest)?, digest)?;
    let media = desc.get("mediaType").and_then(Value::as_str).unwrap_or("");
    if (media == OCI_INDEX || media == DOCKER_LIST) && v.get("manifests").is_none() {
        bail!("{what}: {digest} claims to be an index but lists no manifests");
    }
    Ok(v)
}

/// This machine's architecture as OCI names it.
pub(crate) fn host_oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn docker_inspect_output() {
        let out = r#"[{"Id":"sha256:0123","RepoTags":["nvidia/cuda:12.4.1-base-ubuntu22.04"],"Architecture":"amd64","Os":"linux","Config":{"Env":["PATH=/usr/bin","CUDA_VERSION=12.4.1"]}}]"#;
        let c = parse_docker_inspect("nvidia/cuda:12.4.1-base-ubuntu22.04", out)
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(c.env, vec!["PATH=/usr/bin", "CUDA_VERSION=12.4.1"]);
        assert_eq!(c.architecture.as_deref(), Some("amd64"));
        assert!(parse_docker_inspect("x", "[]").is_err());
        assert!(parse_docker_inspect("x", "Error: No such image: x").is_err());
    }

    #[test]
    fn real_docker_image_inspect_output() {
        // Captured from `docker image inspect` (CLI 28.2.2, daemon 20.10.24) of an image built
        // with umoci and skopeo from NVIDIA's 12.4.1 rockylinux8 environment.
        let out = include_str!("../../../tests/fixtures/compat/docker-image-inspect.json");
        let c = parse_docker_inspect("nvidia/cuda:12.4.1-base-rockylinux8", out).unwrap();
        assert_eq!(c.tags, vec!["nvidia/cuda:12.4.1-base-rockylinux8"]);
        assert!(c.config_digest.unwrap().starts_with("sha256:03dcf7be"));
        assert!(c.env.contains(&"CUDA_VERSION=12.4.1".to_string()));
        assert!(c
            .env
            .iter()
            .any(|e| e.starts_with("NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470")));
    }

    #[test]
    fn digests_are_checked_for_form() {
        assert!(blob_path("sha512:00").is_err());
        assert!(blob_path("sha256:xyz").is_err());
        assert_eq!(
            blob_path(&format!("sha256:{}", "a".repeat(64))).unwrap_or_default(),
            format!("blobs/sha256/{}", "a".repeat(64))
        );
        assert!(tag_matches(
            "docker.io/nvidia/cuda:12.4.1",
            "nvidia/cuda:12.4.1"
        ));
        assert!(tag_matches(
            "docker.io/library/ubuntu:24.04",
            "ubuntu:24.04"
        ));
        assert!(!tag_matches("docker.io/nvidia/cuda:12.4.1", "cuda:12.4.1"));
    }
}
