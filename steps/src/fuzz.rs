//! Property tests (proptest) over everything that reads untrusted text or writes config files:
//! the profile loader, `--set`, the repo INI writer, the daemon.json writer, and the parsers of
//! rpm and dnf output. Properties: no panic; a profile that loads holds no control character;
//! whatever the writers produce parses back to exactly what was meant (one repo section with the
//! given values; the same JSON) — no injection.
//!
//! In the normal test run each property tries a few hundred cases. For a long run, give each
//! property a time budget in seconds:
//!
//! ```sh
//! GPUHOST_FUZZ_SECS=600 nice -n 19 cargo test --release -p gpuhost-steps --lib fuzz:: -- --test-threads=1 --nocapture
//! ```
//!
//! Each property then runs fresh randomly seeded batches until its budget is spent and prints
//! how many cases it tried; a finding fails the test with the shrunk input.

#![allow(clippy::panic)] // a finding fails the test

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use gpuhost_host::host::repo_entries;
use gpuhost_profile::Profile;

/// Run `test` over `strategy`: a few hundred cases, or for `GPUHOST_FUZZ_SECS` seconds.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let budget = std::env::var("GPUHOST_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let start = Instant::now();
    let mut cases: u64 = 0;
    loop {
        let batch: u32 = if budget.is_some() { 2000 } else { 300 };
        let mut runner = TestRunner::new(Config {
            cases: batch,
            failure_persistence: None,
            ..Config::default()
        });
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("fuzz {name}: finding after {cases} cases: {e}");
        }
        cases += u64::from(batch);
        match budget {
            Some(b) if start.elapsed() < b => continue,
            _ => break,
        }
    }
    eprintln!(
        "fuzz {name}: {cases} cases in {:.0} s, no finding",
        start.elapsed().as_secs_f64()
    );
}

/// Text with a bias towards what breaks config files: newlines, brackets, `=`, quotes, escapes,
/// control and non-ASCII characters.
fn nasty() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\n".to_string()),
        Just("\r".to_string()),
        Just("[evil]".to_string()),
        Just("baseurl=".to_string()),
        Just("=".to_string()),
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just(" ".to_string()),
        Just("\t".to_string()),
        Just("\u{0}".to_string()),
        Just("\u{1b}[2J".to_string()),
        Just("\u{85}".to_string()),
        Just("\u{2028}".to_string()),
        Just("https://e.com/r".to_string()),
        Just("/srv/mirror".to_string()),
        Just("file://".to_string()),
        "[a-z0-9./_-]{1,12}",
        any::<String>(),
    ];
    prop::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

/// Every string key of a profile (most end up in files or commands), from the same structs
/// the loader validates with: a key added later is fuzzed too.
fn string_keys() -> Vec<String> {
    gpuhost_profile::doc::keys()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, k)| matches!(&k.kind, gpuhost_profile::doc::Kind::Value(t) if t == "string"))
        .map(|(path, _)| path)
        .collect()
}

/// Every string (and key) in a resolved profile is printable, one line.
fn all_printable(p: &Profile) -> Result<(), TestCaseError> {
    let text = p
        .to_toml()
        .map_err(|e| TestCaseError::fail(format!("to_toml: {e}")))?;
    let v: toml::Table =
        toml::from_str(&text).map_err(|e| TestCaseError::fail(format!("reparse: {e}")))?;
    fn walk(v: &toml::Value) -> bool {
        match v {
            toml::Value::String(s) => !s.chars().any(char::is_control),
            toml::Value::Array(a) => a.iter().all(walk),
            toml::Value::Table(t) => t
                .iter()
                .all(|(k, v)| !k.chars().any(char::is_control) && walk(v)),
            _ => true,
        }
    }
    prop_assert!(walk(&toml::Value::Table(v)), "control character in {text}");
    Ok(())
}

/// The repo files a profile makes hold exactly one section each, with its values.
fn repo_files_are_one_section(p: &Profile) -> Result<(), TestCaseError> {
    for (id, source, key) in [
        ("docker-ce-stable", &p.docker.repo, &p.docker.gpgkey),
        (
            "nvidia-container-toolkit",
            &p.container_toolkit.repo,
            &p.container_toolkit.gpgkey,
        ),
    ] {
        let text = crate::containers::repo_file(id, "n", source, key, &[])
            .map_err(|e| TestCaseError::fail(format!("a loaded profile's repo file: {e:#}")))?;
        let sections: std::collections::BTreeSet<&str> =
            repo_entries(&text).iter().map(|(s, _, _)| *s).collect();
        prop_assert_eq!(sections.into_iter().collect::<Vec<_>>(), vec![id]);
    }
    Ok(())
}

#[test]
fn fuzz_set() {
    let keys = string_keys();
    assert!(keys.len() >= 13, "{keys:?}");
    let strategy = (prop::sample::select(keys), nasty(), any::<bool>());
    fuzz("--set", strategy, |(key, value, raw)| {
        // `raw`: the value as typed; else as a TOML string literal (escapes reach the value).
        let set = if raw {
            format!("{key}={value}")
        } else {
            format!("{key}={}", toml::Value::String(value.clone()))
        };
        match Profile::resolve("ol8-uek", &[set]) {
            Ok(p) => {
                all_printable(&p)?;
                repo_files_are_one_section(&p)?;
            }
            Err(e) => prop_assert!(gpuhost_host::error::is_invalid(&e), "not exit 2: {e:#}"),
        }
        Ok(())
    });
}

#[test]
fn fuzz_profile_loader() {
    let strategy = (nasty(), nasty(), nasty());
    fuzz("profile loader", strategy, |(a, b, c)| {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = dir.path().join("site.toml");
        // Both structured (valid TOML strings holding anything) and raw text.
        let text = format!(
            "extends = \"ol8-uek\"\n[docker]\ngpgkey = {}\nrepo = {}\n{c}\n",
            toml::Value::String(a),
            toml::Value::String(b)
        );
        std::fs::write(&path, text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        match Profile::resolve(&path.display().to_string(), &[]) {
            Ok(p) => {
                all_printable(&p)?;
                repo_files_are_one_section(&p)?;
            }
            Err(e) => prop_assert!(gpuhost_host::error::is_invalid(&e), "not exit 2: {e:#}"),
        }
        Ok(())
    });
}

#[test]
fn fuzz_repo_ini_writer() {
    let strategy = (nasty(), nasty(), prop::collection::vec(nasty(), 0..2));
    fuzz("repo INI writer", strategy, |(source, gpgkey, extra)| {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let Ok(text) = crate::containers::repo_file("r", "R", &source, &gpgkey, &extra) else {
            return Ok(());
        };
        let entries = repo_entries(&text);
        let sections: std::collections::BTreeSet<&str> =
            entries.iter().map(|(s, _, _)| *s).collect();
        prop_assert_eq!(
            sections.into_iter().collect::<Vec<_>>(),
            vec!["r"],
            "{}",
            text
        );
        let get = |k: &str| {
            entries
                .iter()
                .filter(|(_, key, _)| *key == k)
                .map(|(_, _, v)| *v)
                .collect::<Vec<_>>()
        };
        let want = crate::containers::RepoSource::parse(&source)
            .map(|s| s.baseurl())
            .unwrap_or_else(|| source.clone());
        prop_assert_eq!(get("baseurl"), vec![want.as_str()], "{}", text);
        if !gpgkey.is_empty() {
            prop_assert_eq!(get("gpgkey"), vec![gpgkey.as_str()], "{}", text);
        }
        // Every non-comment line is a section header or key=value: nothing continues a value.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            prop_assert!(
                !l.starts_with(char::is_whitespace) && (l.starts_with('[') || l.contains('=')),
                "{:?} in {}",
                l,
                text
            );
        }
        Ok(())
    });
}

/// Arbitrary JSON values, nested a little.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        nasty().prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("runtimes".to_string()),
                    Just("default-ulimits".to_string()),
                    Just("default-runtime".to_string()),
                    nasty()
                ],
                inner,
                0..4
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn fuzz_daemon_json_writer() {
    let spec = (
        any::<bool>(),
        prop::option::of(nasty()),
        prop::option::of(any::<i64>()),
    );
    fuzz(
        "daemon.json writer",
        (json_value(), spec),
        |(current, (def, shm, memlock))| {
            let spec = crate::containers::DaemonSpec {
                default_runtime_nvidia: def,
                default_shm_size: shm,
                ulimit_memlock: memlock,
                ulimit_stack: None,
            };
            let Ok(merged) = crate::containers::merge_daemon_json(&current, &spec) else {
                return Ok(());
            };
            let text = serde_json::to_string_pretty(&merged)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
            prop_assert_eq!(&back, &merged);
            prop_assert_eq!(
                &back["runtimes"]["nvidia"]["path"],
                &serde_json::json!(crate::containers::NVIDIA_RUNTIME_PATH)
            );
            // Every key of the user's file is kept.
            if let (Some(cur), Some(out)) = (current.as_object(), back.as_object()) {
                for k in cur.keys() {
                    prop_assert!(out.contains_key(k), "{} lost", k);
                }
            }
            Ok(())
        },
    );
}

/// Lines shaped like rpm/dnf output, and garbage.
fn tool_output() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just("package docker-ce is not installed".to_string()),
        Just("docker-ce\t3\t27.3.1\t1.el8\tx86_64".to_string()),
        Just("docker-ce\t(none)\t27.3.1\t1.el8\tx86_64".to_string()),
        Just(
            "nvidia-driver  latest-dkms [d][e]  default [d], fm, ks, src  Nvidia driver"
                .to_string()
        ),
        Just("Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled".to_string()),
        Just("libnccl\t/usr/lib64/libnccl.so.2".to_string()),
        Just("Error: Unable to find a match: kernel-uek-devel-1".to_string()),
        Just("NAME=\"Oracle Linux Server\"\nVERSION_ID=\"8.10\"\nID=\"ol\"".to_string()),
        "[ -~\t]{0,60}",
        nasty(),
    ];
    prop::collection::vec(line, 0..12).prop_map(|v| v.join("\n"))
}

#[test]
fn fuzz_rpm_and_dnf_output_parsers() {
    fuzz("rpm/dnf output parsers", tool_output(), |text| {
        for p in gpuhost_host::rpm::parse_query(&text) {
            prop_assert!(!p.name.is_empty(), "{:?}", p);
        }
        let _ = gpuhost_host::rpm::vercmp(&text, "1.0-1");
        let _ = crate::driver::module::ModuleState::parse(&text).enabled_stream();
        let _ = crate::driver::module::listed_streams("nvidia-driver", &text);
        let _ = crate::containers::prefix_links::parse_file_list(&text);
        let _ = gpuhost_host::osrelease::OsRelease::parse(&text);
        let _ = crate::containers::parse_smi_list(&text);
        let _ = crate::containers::parse_smi_header(&text);
        let _ = crate::containers::parse_nvcc_release(&text);
        let _ = crate::containers::smoke::parse_image_cuda(&text);
        for word in text.split_whitespace().take(4) {
            let _ = gpuhost_nvidia::localrepo::LocalRepoFile::parse(word);
            let _ = crate::step::package_name_of(word);
        }
        let install = crate::work::Install {
            specs: vec!["kernel-uek-devel-1".to_string()],
            ..crate::work::Install::default()
        };
        let _ = crate::work::implicated(&text, &install);
        Ok(())
    });
}
