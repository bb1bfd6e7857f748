//! `daemon-json`: `/etc/docker/daemon.json` gains the `nvidia` runtime (exactly as
//! `nvidia-ctk runtime configure --runtime=docker` writes it), optionally `default-runtime`,
//! `default-shm-size` and `default-ulimits` from the profile. Every other key stays as the user
//! has it. A file that is not valid JSON is refused and left untouched. The file is rewritten
//! (atomically) only when its parsed content differs, never for formatting alone.

use anyhow::Result;
use serde_json::{json, Map, Value};

use super::services::docker_restart;
use crate::step::{Change, Check, Ctx, FileWrite, Step, Work};
use gpuhost_host::error::hinted;
use gpuhost_profile::DaemonSpec;

pub(crate) struct DaemonJson;

pub(crate) const DAEMON_JSON: &str = "/etc/docker/daemon.json";
/// The runtime path `nvidia-ctk runtime configure` writes (found on PATH by dockerd).
pub const NVIDIA_RUNTIME_PATH: &str = "nvidia-container-runtime";

/// `current` (a JSON object: the user's daemon.json) with the profile's keys merged in.
/// Errors (as text) when a key gpuhost must merge into has the wrong type.
pub fn merge(current: &Value, spec: &DaemonSpec) -> std::result::Result<Value, String> {
    let Value::Object(cur) = current else {
        return Err("the top level is not a JSON object".to_string());
    };
    let mut out = cur.clone();
    let runtimes = object_at(&mut out, "runtimes")?;
    runtimes.insert(
        "nvidia".to_string(),
        json!({ "path": NVIDIA_RUNTIME_PATH, "args": [] }),
    );
    if spec.default_runtime_nvidia {
        out.insert("default-runtime".to_string(), json!("nvidia"));
    }
    if let Some(size) = &spec.default_shm_size {
        out.insert("default-shm-size".to_string(), json!(size));
    }
    for (name, value) in [
        ("memlock", spec.ulimit_memlock),
        ("stack", spec.ulimit_stack),
    ] {
        if let Some(v) = value {
            let ulimits = object_at(&mut out, "default-ulimits")?;
            ulimits.insert(
                name.to_string(),
                json!({ "Name": name, "Hard": v, "Soft": v }),
            );
        }
    }
    Ok(Value::Object(out))
}

/// The object under `key`, created when absent; an error when it is something else.
fn object_at<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> std::result::Result<&'a mut Map<String, Value>, String> {
    let v = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    match v {
        Value::Object(m) => Ok(m),
        other => Err(format!("`{key}` is {}, not an object", kind_of(other))),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What differs between two daemon.json objects, as `key` / `key.sub` paths (one level deep
/// under `runtimes` and `default-ulimits`).
pub(crate) fn differences(before: &Value, after: &Value) -> Vec<String> {
    let empty = Map::new();
    let (b, a) = (
        before.as_object().unwrap_or(&empty),
        after.as_object().unwrap_or(&empty),
    );
    let mut out = Vec::new();
    for (k, v) in a {
        if b.get(k) == Some(v) {
            continue;
        }
        match (b.get(k), v) {
            (Some(Value::Object(bo)), Value::Object(ao))
                if k == "runtimes" || k == "default-ulimits" =>
            {
                for (sk, sv) in ao {
                    if bo.get(sk) != Some(sv) {
                        out.push(format!("{k}.{sk}"));
                    }
                }
            }
            _ => out.push(k.clone()),
        }
    }
    out
}

/// The user's daemon.json parsed (an empty or missing file is `{}`); `None` when missing.
fn read_current(ctx: &Ctx<'_>) -> Result<Option<Value>> {
    let Some(text) = ctx.host.read_opt(DAEMON_JSON)? else {
        return Ok(None);
    };
    let shown = ctx.host.path(DAEMON_JSON).display().to_string();
    if text.trim().is_empty() {
        return Ok(Some(Value::Object(Map::new())));
    }
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        hinted(
            format!("{shown} is not valid JSON ({e}); gpuhost leaves it untouched"),
            format!("fix it (python3 -m json.tool {shown} shows where) or move it aside, then run again"),
        )
    })?;
    Ok(Some(v))
}

fn wanted(ctx: &Ctx<'_>, current: Option<&Value>) -> Result<Value> {
    let empty = Value::Object(Map::new());
    merge(current.unwrap_or(&empty), &ctx.profile.docker.daemon).map_err(|e| {
        hinted(
            format!(
                "{} cannot take the nvidia runtime: {e}; gpuhost leaves it untouched",
                ctx.host.path(DAEMON_JSON).display()
            ),
            "fix the key (see `man dockerd`, daemon configuration file) and run again",
        )
    })
}

impl Step for DaemonJson {
    fn id(&self) -> &'static str {
        "daemon-json"
    }

    fn summary(&self) -> &'static str {
        "the nvidia runtime (and the profile's container defaults) in /etc/docker/daemon.json, other keys kept"
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let current = read_current(ctx)?;
        let want = wanted(ctx, current.as_ref())?;
        let reason = match &current {
            Some(cur) if *cur == want => {
                return Ok(Check::in_sync(format!(
                    "{DAEMON_JSON} has the nvidia runtime{}",
                    if ctx.profile.docker.daemon.default_runtime_nvidia {
                        " (the default)"
                    } else {
                        ""
                    }
                )))
            }
            Some(cur) => format!(
                "sets {}; other keys kept",
                differences(cur, &want).join(", ")
            ),
            None => format!(
                "missing; sets {}",
                differences(&Value::Object(Map::new()), &want).join(", ")
            ),
        };
        let mode = ctx.host.mode(DAEMON_JSON).unwrap_or(0o644);
        let mut text = serde_json::to_string_pretty(&want)?;
        text.push('\n');
        // The restart is owed before the file changes: a crash right after the write still
        // leaves it owed for the next run.
        Ok(Check {
            changes: vec![Change::new(
                Work::Write {
                    file: FileWrite::new(DAEMON_JSON, text, mode),
                    owes: Some(docker_restart(&format!("{DAEMON_JSON} changed"))),
                },
                reason,
            )],
            ..Check::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn spec(
        default: bool,
        shm: Option<&str>,
        memlock: Option<i64>,
        stack: Option<i64>,
    ) -> DaemonSpec {
        DaemonSpec {
            default_runtime_nvidia: default,
            default_shm_size: shm.map(str::to_string),
            ulimit_memlock: memlock,
            ulimit_stack: stack,
        }
    }

    #[test]
    fn adds_the_runtime_exactly_as_nvidia_ctk_does_and_keeps_the_users_keys() -> anyhow::Result<()>
    {
        let user: Value = serde_json::from_str(
            r#"{"data-root": "/data/docker", "log-driver": "json-file",
                "log-opts": {"max-size": "10m"}, "registry-mirrors": ["https://m.example"],
                "runtimes": {"crun": {"path": "/usr/bin/crun"}},
                "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 65536, "Soft": 65536}}}"#,
        )?;
        let got = merge(&user, &spec(true, Some("1G"), Some(-1), Some(67108864)))
            .map_err(anyhow::Error::msg)?;
        assert_eq!(
            got["runtimes"]["nvidia"],
            json!({"path": "nvidia-container-runtime", "args": []})
        );
        assert_eq!(got["runtimes"]["crun"], user["runtimes"]["crun"]);
        assert_eq!(got["default-runtime"], "nvidia");
        assert_eq!(got["default-shm-size"], "1G");
        assert_eq!(
            got["default-ulimits"]["memlock"],
            json!({"Name": "memlock", "Hard": -1, "Soft": -1})
        );
        assert_eq!(got["default-ulimits"]["stack"]["Soft"], 67108864);
        assert_eq!(
            got["default-ulimits"]["nofile"],
            user["default-ulimits"]["nofile"]
        );
        for k in ["data-root", "log-driver", "log-opts", "registry-mirrors"] {
            assert_eq!(got[k], user[k], "{k}");
        }
        Ok(())
    }

    #[test]
    fn merging_twice_changes_nothing_and_formatting_does_not_count() -> anyhow::Result<()> {
        let s = spec(false, None, Some(-1), None);
        let once = merge(&json!({"debug": true}), &s).map_err(anyhow::Error::msg)?;
        let twice = merge(&once, &s).map_err(anyhow::Error::msg)?;
        assert_eq!(once, twice);
        // The same content written by hand, other order and spacing: equal as values.
        let by_hand: Value = serde_json::from_str(
            "{\"runtimes\":{\"nvidia\":{\"args\":[],\"path\":\"nvidia-container-runtime\"}},\n \"debug\" : true,\"default-ulimits\":{\"memlock\":{\"Soft\":-1,\"Name\":\"memlock\",\"Hard\":-1}}}",
        )?;
        assert_eq!(by_hand, once);
        assert!(differences(&by_hand, &once).is_empty());
        Ok(())
    }

    #[test]
    fn default_runtime_false_leaves_the_users_choice() -> anyhow::Result<()> {
        let got = merge(
            &json!({"default-runtime": "runc"}),
            &spec(false, None, None, None),
        )
        .map_err(anyhow::Error::msg)?;
        assert_eq!(got["default-runtime"], "runc");
        Ok(())
    }

    #[rstest]
    #[case(json!([]), "not a JSON object")]
    #[case(json!({"runtimes": "nvidia"}), "`runtimes` is a string")]
    #[case(json!({"default-ulimits": []}), "`default-ulimits` is an array")]
    fn wrong_shapes_are_refused(#[case] v: Value, #[case] needle: &str) {
        let e = merge(&v, &spec(false, None, Some(-1), None))
            .err()
            .unwrap_or_default();
        assert!(e.contains(needle), "{e}");
    }

    #[test]
    fn differences_name_the_keys() {
        let before = json!({"runtimes": {"crun": {}}, "debug": true});
        let after = json!({"runtimes": {"crun": {}, "nvidia": {}}, "debug": true, "default-runtime": "nvidia"});
        assert_eq!(
            differences(&before, &after),
            vec!["default-runtime".to_string(), "runtimes.nvidia".to_string()]
        );
    }
}
