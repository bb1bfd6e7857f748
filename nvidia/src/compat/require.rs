//! Which requirements a container has, as the NVIDIA Container Toolkit collects them, and the
//! runtime's verdict on them.
//!
//! From NVIDIA/nvidia-container-toolkit `internal/config/image/cuda_image.go` and `builder.go`
//! (v1.20) and `cmd/nvidia-container-runtime-hook/main.go`:
//! - the environment is split at the first `=`; an entry without one is an error (the hook
//!   fails); a later entry of the same name wins;
//! - `NVIDIA_DISABLE_REQUIRE` parsed as a Go bool (`1 t T TRUE true True` are true, anything
//!   unparsable is false) turns every check off, and so does `disable-require = true` in
//!   `/etc/nvidia-container-runtime/config.toml`;
//! - every variable named `NVIDIA_REQUIRE_*` is a requirement (several are AND'ed: each is its
//!   own `--require`), except those starting with `NVIDIA_REQUIRE_JETPACK`;
//! - a "legacy" image — `CUDA_VERSION` set and `NVIDIA_REQUIRE_CUDA` empty or unset — also gets
//!   `cuda>=<major>.<minor>` of its `CUDA_VERSION` (a version that does not parse fails the hook).
//!
//! Each requirement is then evaluated for each visible GPU by [`super::dsl::evaluate`]; the
//! first failure stops the container. The toolkit hands requirements over in Go map order
//! (random); gpuhost evaluates them in name order, so when several fail, the one it reports may
//! differ from the one a given `docker run` reports — the verdict does not.

use std::collections::BTreeMap;

use serde::Serialize;

use super::dsl::{self, DeviceFacts, DriverFacts, Outcome};

/// The prefix of requirement variables.
pub(crate) const PREFIX: &str = "NVIDIA_REQUIRE_";
const JETPACK: &str = "NVIDIA_REQUIRE_JETPACK";
const DISABLE: &str = "NVIDIA_DISABLE_REQUIRE";
const CUDA_VERSION: &str = "CUDA_VERSION";
const REQUIRE_CUDA: &str = "NVIDIA_REQUIRE_CUDA";

/// A container's environment, by name (the last entry of a name wins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env(pub BTreeMap<String, String>);

impl Env {
    /// From `KEY=value` entries (an image's `Config.Env`). An entry without `=` is the
    /// toolkit's "invalid environment variable" error.
    pub fn parse(entries: &[String]) -> Result<Env, String> {
        let mut map = BTreeMap::new();
        for e in entries {
            let Some((k, v)) = e.split_once('=') else {
                return Err(format!("invalid environment variable: {e}"));
            };
            map.insert(k.to_string(), v.to_string());
        }
        Ok(Env(map))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// Go's `strconv.ParseBool`; `None` when it does not parse.
pub(crate) fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// One requirement and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Requirement {
    /// The variable (`NVIDIA_REQUIRE_CUDA`), or `CUDA_VERSION` for a legacy image's implied one.
    pub source: String,
    pub expression: String,
}

/// What the toolkit would pass to `nvidia-container-cli`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Requirements {
    /// Why no requirement is checked (`NVIDIA_DISABLE_REQUIRE=true`, the host's
    /// `disable-require`); `None` when they are.
    pub disabled_by: Option<String>,
    pub list: Vec<Requirement>,
}

/// The requirements of a container with environment `env`. `host_disable_require`: the host's
/// `disable-require` setting. `Err`: the hook would fail (a legacy `CUDA_VERSION` that does
/// not parse).
pub fn collect(env: &Env, host_disable_require: bool) -> Result<Requirements, String> {
    if host_disable_require {
        return Ok(Requirements {
            disabled_by: Some(
                "disable-require = true in /etc/nvidia-container-runtime/config.toml".into(),
            ),
            list: Vec::new(),
        });
    }
    if let Some(v) = env.get(DISABLE) {
        if go_parse_bool(v) == Some(true) {
            return Ok(Requirements {
                disabled_by: Some(format!("{DISABLE}={v} in the image's environment")),
                list: Vec::new(),
            });
        }
    }
    let mut list: Vec<Requirement> = env
        .0
        .iter()
        .filter(|(k, _)| k.starts_with(PREFIX) && !k.starts_with(JETPACK))
        .map(|(k, v)| Requirement {
            source: k.clone(),
            expression: v.clone(),
        })
        .collect();
    let legacy = env.get(CUDA_VERSION).unwrap_or_default();
    if !legacy.is_empty() && env.get(REQUIRE_CUDA).unwrap_or_default().is_empty() {
        let (major, minor) = semver_major_minor(legacy)
            .ok_or_else(|| format!("failed to get version: invalid CUDA version {legacy}"))?;
        list.push(Requirement {
            source: CUDA_VERSION.into(),
            expression: format!("cuda>={major}.{minor}"),
        });
    }
    Ok(Requirements {
        disabled_by: None,
        list,
    })
}

/// `major.minor` of a version as Masterminds/semver's lenient `NewVersion` reads it: an
/// optional `v`, one to three dot-separated numbers, an optional `-prerelease` / `+build`.
pub(crate) fn semver_major_minor(s: &str) -> Option<(u64, u64)> {
    let s = s.strip_prefix('v').unwrap_or(s);
    let core = s.split(['-', '+']).next()?;
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let mut nums = Vec::with_capacity(3);
    for p in &parts {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        nums.push(p.parse::<u64>().ok()?);
    }
    Some((nums[0], nums.get(1).copied().unwrap_or(0)))
}

/// The verdict on one requirement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Checked {
    pub source: String,
    pub expression: String,
    /// `satisfied`, `unsatisfied` or `invalid`.
    pub result: &'static str,
    /// nvidia-container-cli's message (`unsatisfied condition: …`, `invalid expression`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The GPU it failed on (its index), when it failed on one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<usize>,
}

/// Evaluate every requirement for every device as `nvidia-container-cli configure` does
/// (no device: once, without one). The first failure is what stops the container; all are
/// reported.
pub fn check(reqs: &Requirements, drv: &DriverFacts, devices: &[DeviceFacts]) -> Vec<Checked> {
    reqs.list
        .iter()
        .map(|r| {
            let mut failed = None;
            if devices.is_empty() {
                let o = dsl::evaluate(&r.expression, drv, None);
                if o != Outcome::Satisfied {
                    failed = Some((o, None));
                }
            } else {
                for (i, d) in devices.iter().enumerate() {
                    let o = dsl::evaluate(&r.expression, drv, Some(d));
                    if o != Outcome::Satisfied {
                        failed = Some((o, Some(i)));
                        break;
                    }
                }
            }
            match failed {
                None => Checked {
                    source: r.source.clone(),
                    expression: r.expression.clone(),
                    result: "satisfied",
                    message: None,
                    gpu: None,
                },
                Some((o, gpu)) => Checked {
                    source: r.source.clone(),
                    expression: r.expression.clone(),
                    result: if o == Outcome::Invalid {
                        "invalid"
                    } else {
                        "unsatisfied"
                    },
                    message: o.message().map(str::to_string),
                    gpu,
                },
            }
        })
        .collect()
}

/// The host's `disable-require` from the container runtime's config.toml text (top-level key).
pub fn host_disable_require(config_toml: &str) -> bool {
    toml::from_str::<toml::Table>(config_toml)
        .ok()
        .and_then(|t| t.get("disable-require").and_then(toml::Value::as_bool))
        .unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn env(entries: &[&str]) -> Env {
        Env::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap_or_default()
    }

    #[test]
    fn every_require_variable_but_jetpack_and_the_legacy_one() {
        let e = env(&[
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
            "NVIDIA_REQUIRE_DRIVER=driver>=550",
            "NVIDIA_REQUIRE_JETPACK=csv-mounts=all",
            "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS=",
            "CUDA_VERSION=12.4.1",
        ]);
        let r = collect(&e, false).unwrap_or_default();
        assert_eq!(
            r.list
                .iter()
                .map(|r| (r.source.as_str(), r.expression.as_str()))
                .collect::<Vec<_>>(),
            vec![
                ("NVIDIA_REQUIRE_CUDA", "cuda>=12.4"),
                ("NVIDIA_REQUIRE_DRIVER", "driver>=550")
            ]
        );
        // Legacy image: CUDA_VERSION without NVIDIA_REQUIRE_CUDA.
        let r = collect(&env(&["CUDA_VERSION=10.0.130"]), false).unwrap_or_default();
        assert_eq!(r.list[0].expression, "cuda>=10.0");
        assert_eq!(r.list[0].source, "CUDA_VERSION");
        // An empty NVIDIA_REQUIRE_CUDA is both a (trivially true) requirement and legacy.
        let r = collect(
            &env(&["NVIDIA_REQUIRE_CUDA=", "CUDA_VERSION=11.8.0"]),
            false,
        )
        .unwrap_or_default();
        assert_eq!(r.list.len(), 2);
        assert!(collect(&env(&["CUDA_VERSION=11.x"]), false).is_err());
    }

    #[test]
    fn disabling_follows_go_bool_parsing() {
        for (v, off) in [
            ("true", true),
            ("1", true),
            ("True", true),
            ("yes", false),
            ("false", false),
            ("", false),
        ] {
            let e = env(&[
                "NVIDIA_REQUIRE_CUDA=cuda>=99.0",
                &format!("NVIDIA_DISABLE_REQUIRE={v}"),
            ]);
            let r = collect(&e, false).unwrap_or_default();
            assert_eq!(r.disabled_by.is_some(), off, "{v:?}");
            assert_eq!(r.list.is_empty(), off, "{v:?}");
        }
        let r = collect(&env(&["NVIDIA_REQUIRE_CUDA=cuda>=99.0"]), true).unwrap_or_default();
        assert!(r.list.is_empty());
        assert!(host_disable_require(
            "disable-require = true\n[nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig\"\n"
        ));
        assert!(!host_disable_require("#disable-require = true\n"));
        assert!(!host_disable_require("not toml ["));
    }

    #[test]
    fn environment_entries_need_an_equals_sign_and_the_last_one_wins() {
        let err = Env::parse(&["PATH=/bin".into(), "BROKEN".into()]);
        assert_eq!(err, Err("invalid environment variable: BROKEN".into()));
        let e = env(&["A=1", "A=2=3"]);
        assert_eq!(e.get("A"), Some("2=3"));
    }

    #[test]
    fn semver_leniency() {
        assert_eq!(semver_major_minor("12.4.1"), Some((12, 4)));
        assert_eq!(semver_major_minor("v11"), Some((11, 0)));
        assert_eq!(semver_major_minor("12.4.1-rc1+b2"), Some((12, 4)));
        assert_eq!(semver_major_minor("11.0.3.1"), None);
        assert_eq!(semver_major_minor("12..1"), None);
    }

    #[test]
    fn each_device_is_checked_and_the_failing_one_named() {
        let reqs = collect(
            &env(&["NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=535,driver<536"]),
            false,
        )
        .unwrap_or_default();
        let drv = DriverFacts {
            nvrm_version: Some("535.104.05".into()),
            cuda_version: Some("12.2".into()),
        };
        let tesla = DeviceFacts {
            brand: Some("Tesla".into()),
            arch: Some("7.0".into()),
        };
        let other = DeviceFacts {
            brand: Some("GeForce".into()),
            arch: Some("8.6".into()),
        };
        let c = check(&reqs, &drv, std::slice::from_ref(&tesla));
        assert_eq!(c[0].result, "satisfied");
        let c = check(&reqs, &drv, &[tesla, other]);
        assert_eq!(c[0].result, "unsatisfied");
        assert_eq!(c[0].gpu, Some(1));
    }
}
