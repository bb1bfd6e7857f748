//! Every command shown in README.md and docs/*.md is run by a test, in the order shown, and the
//! lists the documents give (packages, JSON fields) are the code's.
//!
//! The rules, for whoever writes a document:
//! - Every fenced block names its language. `sh`, `bash`, `shell` and `console` blocks hold
//!   commands to type: in a `console` block the lines after `$ ` are the commands and the lines
//!   below each are its output (`[exit N]`: its exit code), compared as they are; in the others
//!   every line is a command (a line ending in `\` continues on the next; comment lines are
//!   notes). Synopses and sample output are `text`; files are `toml`, `json`, `yaml`, `ini`.
//!   Commands inside prose (`code` spans) are references, not something to type in order.
//! - Every shell block has an HTML comment on the line above it:
//!   - `<!-- run by tests/X.rs: KEY -->`: that test reads the block with
//!     `docs::delegated(file!(), "DOC", "KEY")` and runs its commands, in order, where they can
//!     run: against a test-world install root instead of the live system (`--root` added),
//!     with the world's copy of a file the document names under `/srv`, on a saved snapshot of a
//!     real GPU node (`--from-snapshot`, `--nvml-fixture`) instead of NVML. Each test says what it
//!     adds to the text, and fails when an addition no longer applies. This file checks that
//!     the named test does read its block (so a changed command is the command that runs).
//!   - `<!-- not run by tests: REASON -->`: nothing here can run it (a real GPU node, Secure
//!     Boot firmware); the reason says why, and which test comes closest.
//!
//!   A shell block with neither fails `every_shell_block_is_run_by_a_test_or_says_why_not`.
//! - A list the code decides (packages, JSON fields) sits between
//!   `<!-- checked by tests/X.rs: KEY -->` and `<!-- end -->`, and that test compares it with
//!   what the code does.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

#[path = "support/docs.rs"]
mod docs;
#[path = "support/images.rs"]
mod images;
#[path = "world/mod.rs"]
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;
use world::{code, stderr, stdout, Os, Root, World, CUDA_LOCAL_EL9_12_2, RHCK9, UEK8_NEW};

const GPUHOST: &str = env!("CARGO_BIN_EXE_gpuhost");

fn fixture(rel: &str) -> PathBuf {
    docs::workspace().join("tests/fixtures").join(rel)
}

/// A shell for a document's commands: bash with `set -euo pipefail`, the gpuhost under test
/// first on the PATH, its own working and run directories, and the additions this test makes to
/// the text (each must apply at least once: an addition that no longer matches fails).
struct Shell {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    rewrites: Vec<(String, String, usize)>,
}

impl Shell {
    fn new() -> Shell {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join(".run");
        std::fs::create_dir_all(&run).unwrap();
        let bin = Path::new(GPUHOST).parent().unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Shell {
            dir,
            env: vec![
                ("PATH".into(), path),
                ("GPUHOST_RUN_DIR".into(), run.display().to_string()),
            ],
            rewrites: Vec::new(),
        }
    }

    /// The working directory (relative paths in the commands land here).
    fn cwd(&self) -> &Path {
        self.dir.path()
    }

    fn env(mut self, k: &str, v: &str) -> Shell {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Replace `from` with `to` in every command before it runs.
    fn rewrite(mut self, from: &str, to: &str) -> Shell {
        self.rewrites.push((from.into(), to.into(), 0));
        self
    }

    /// The command as it runs here.
    fn effective(&mut self, cmd: &str) -> String {
        let mut c = cmd.to_string();
        for (from, to, used) in &mut self.rewrites {
            *used += c.matches(from.as_str()).count();
            c = c.replace(from.as_str(), to);
        }
        c
    }

    fn command(&mut self, cmd: &str) -> (String, Command) {
        let eff = self.effective(cmd);
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(format!("set -euo pipefail\n{eff}"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        (eff, c)
    }

    /// Runs `cmd` (a command of a document); the text it ran, and what it printed.
    fn run(&mut self, cmd: &str) -> (String, Output) {
        let (eff, mut c) = self.command(cmd);
        let o = c.output().unwrap();
        (eff, o)
    }

    /// Runs `cmd` and wants exit 0; its stdout.
    fn ok(&mut self, cmd: &str) -> String {
        let (eff, o) = self.run(cmd);
        assert_eq!(code(&o), 0, "{}", said(cmd, &eff, &o));
        stdout(&o)
    }

    /// Every addition applied at least once.
    fn finish(&self) {
        for (from, to, used) in &self.rewrites {
            assert!(
                *used > 0,
                "the test replaces {from:?} with {to:?}, but no command of the block has it: update the test with the document"
            );
        }
    }
}

fn said(cmd: &str, eff: &str, o: &Output) -> String {
    format!(
        "$ {cmd}\n(run as: {eff})\nexit {}\n--- stdout\n{}\n--- stderr\n{}",
        code(o),
        stdout(o),
        stderr(o)
    )
}

// ---- the rules ----------------------------------------------------------------------------

/// The whole source of a test file, white space taken out (rustfmt may break a call).
fn squeezed(test: &str) -> String {
    std::fs::read_to_string(docs::workspace().join(test))
        .unwrap_or_else(|e| panic!("{test}: {e}"))
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

#[test]
fn every_shell_block_is_run_by_a_test_or_says_why_not() {
    let mut run_by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut not_run = Vec::new();
    let mut problems = Vec::new();
    let mut keys = BTreeSet::new();
    for doc in docs::documents() {
        for b in docs::blocks(&doc) {
            let known = docs::SHELL.contains(&b.lang.as_str())
                || docs::NOT_SHELL.contains(&b.lang.as_str());
            if !known {
                problems.push(format!(
                    "{}: the fence names no language this test knows ({:?}): `sh`/`console` for commands, `text` for synopses and output",
                    b.place(),
                    b.lang
                ));
                continue;
            }
            if !b.is_shell() {
                continue;
            }
            if let Some((test, key)) = b.run_by() {
                let call = format!("docs::delegated(file!(),{doc:?},{key:?}");
                if !squeezed(&test).contains(&call) {
                    problems.push(format!(
                        "{}: marked as run by {test}, which does not read it with docs::delegated(file!(), {doc:?}, {key:?})",
                        b.place()
                    ));
                }
                if !keys.insert((test.clone(), key.clone())) {
                    problems.push(format!("{}: {test}: {key} marks two blocks", b.place()));
                }
                assert!(
                    !b.commands().is_empty(),
                    "{}: a shell block without a command",
                    b.place()
                );
                run_by.entry(test).or_default().push(b.place());
            } else if let Some(reason) = b.not_run() {
                if reason.split_whitespace().count() < 5 {
                    problems.push(format!("{}: say why no test can run it", b.place()));
                }
                // A block that names where it does run must be run there, as written.
                if reason.contains(".ci/run") {
                    let ci = std::fs::read_to_string(docs::workspace().join(".ci/run")).unwrap();
                    for c in b.commands() {
                        if !ci.lines().any(|l| l.trim() == c.trim()) {
                            problems.push(format!("{}: .ci/run does not run {c:?}", b.place()));
                        }
                    }
                }
                not_run.push(format!("{}: {reason}", b.place()));
            } else {
                problems.push(format!(
                    "{}: a shell block that no test runs: mark it <!-- run by tests/X.rs: KEY --> (and run it there) or <!-- not run by tests: REASON -->",
                    b.place()
                ));
            }
        }
    }
    for (test, blocks) in &run_by {
        eprintln!("run by {test}: {}", blocks.len());
        for b in blocks {
            eprintln!("  {b}");
        }
    }
    eprintln!("not run by tests: {}", not_run.len());
    for n in &not_run {
        eprintln!("  {n}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Honest and few: a mark is the exception.
    let run: usize = run_by.values().map(Vec::len).sum();
    assert!(not_run.len() * 4 <= run, "{not_run:#?}");
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(doc: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(doc).unwrap();
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && l.starts_with('#') {
            out.insert(slug(l.trim_start_matches('#').trim()));
        }
    }
    out
}

/// Every relative link of the documents names a file that exists, and a heading it has.
#[test]
fn links_between_the_documents_resolve() {
    let mut broken = Vec::new();
    for doc in docs::documents() {
        let path = docs::workspace().join(&doc);
        let dir = path.parent().unwrap().to_path_buf();
        let text = docs::read(&doc);
        for (i, l) in text.lines().enumerate() {
            for part in l.split("](").skip(1) {
                let Some(target) = part.split(')').next() else {
                    continue;
                };
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let file = if file.is_empty() {
                    path.clone()
                } else {
                    dir.join(file)
                };
                if !file.exists() {
                    broken.push(format!("{doc}:{}: {target}: no such file", i + 1));
                    continue;
                }
                if !anchor.is_empty() && !anchors(&file).contains(anchor) {
                    broken.push(format!("{doc}:{}: {target}: no such heading", i + 1));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

// ---- lists the code decides ---------------------------------------------------------------

/// The Debian packages README.md says `./demo.sh` and `./scripts/test.sh` install are the demo
/// and test sets of `scripts/deps.sh`.
#[test]
fn the_debian_packages_the_readme_lists_are_what_deps_sh_installs() {
    let deps = std::fs::read_to_string(docs::workspace().join("scripts/deps.sh")).unwrap();
    for (key, array) in [
        ("debian-packages", "demo_debs=("),
        ("debian-test-packages", "test_debs=("),
    ] {
        let listed: BTreeSet<String> = docs::code_spans(&docs::checked(file!(), "README.md", key))
            .into_iter()
            .collect();
        let start = deps.find(array).expect("deps.sh names its Debian packages") + array.len();
        let end = start + deps[start..].find(')').unwrap();
        let installed: BTreeSet<String> = deps[start..end]
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert!(installed.len() > 10, "{installed:?}");
        assert_eq!(listed, installed, "{key}");
    }
}

/// A table of fields (`| \`path\` | present | what |`): each path and whether it is always
/// there.
fn field_table(doc: &str, key: &str) -> BTreeMap<String, bool> {
    let text = docs::checked(file!(), doc, key);
    let mut out = BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = l.split(" | ").collect();
        let path = cells[0]
            .trim_start_matches("| ")
            .trim_matches('`')
            .to_string();
        let always = cells[1].trim() == "always";
        assert!(out.insert(path.clone(), always).is_none(), "{path} twice");
    }
    assert!(out.len() > 5, "{doc}: {key}: {text}");
    out
}

/// Checks a JSON value against a field table: every field it has is documented, and every
/// field documented as always there is there (in each object of a `[]` path). Objects are
/// looked into where the table documents their fields.
fn check_fields(
    table: &BTreeMap<String, bool>,
    prefix: &str,
    v: &Value,
    seen: &mut BTreeSet<String>,
) {
    let Some(obj) = v.as_object() else { return };
    for (k, sub) in obj {
        let path = format!("{prefix}{k}");
        assert!(
            table.contains_key(&path),
            "the JSON has `{path}`, which the table does not list:\n{v:#}"
        );
        seen.insert(path.clone());
        if sub.is_object() && table.keys().any(|p| p.starts_with(&format!("{path}."))) {
            check_fields(table, &format!("{path}."), sub, seen);
        }
        if let Some(items) = sub.as_array() {
            if table.keys().any(|p| p.starts_with(&format!("{path}[]."))) {
                for item in items {
                    check_fields(table, &format!("{path}[]."), item, seen);
                }
            }
        }
    }
    for (path, always) in table {
        let Some(name) = path.strip_prefix(prefix) else {
            continue;
        };
        if *always && !name.contains(['.', '[']) {
            assert!(
                obj.contains_key(name),
                "`{path}` is documented as always there, but this JSON has none:\n{v:#}"
            );
        }
    }
}

// ---- README.md ----------------------------------------------------------------------------

/// The `--flags` of a text: each `--name` (letters, digits and `-`).
fn flags(text: &str) -> BTreeSet<String> {
    text.split("--")
        .skip(1)
        .map(|s| {
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        })
        .filter(|f| f.starts_with(|c: char| c.is_ascii_lowercase()))
        .map(|f| format!("--{f}"))
        .collect()
}

/// The synopsis of the commands (docs/commands.md): every command `gpuhost --help` lists is
/// there, and every flag it shows for a command is one that command's `--help` lists.
#[test]
fn the_synopsis_shows_every_command_and_only_flags_they_take() {
    let b = docs::blocks("docs/commands.md")
        .into_iter()
        .find(|b| b.lang == "text" && b.heading == "Commands")
        .expect("a ```text synopsis under ## Commands");
    let mut shown: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut current: Vec<String> = Vec::new();
    for l in b.text.lines() {
        let code = l.split(" #").next().unwrap_or_default();
        if let Some(rest) = code.strip_prefix("gpuhost ") {
            current = rest
                .split_whitespace()
                .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .take_while(|w| !w.starts_with('-'))
                .map(str::to_string)
                .collect();
            assert!(!current.is_empty(), "{l}");
        }
        shown
            .entry(current.clone())
            .or_default()
            .extend(flags(code));
    }
    let help = |words: &[String]| -> String {
        let o = Command::new(GPUHOST)
            .args(words)
            .arg("--help")
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "gpuhost {words:?} --help: {}", stderr(&o));
        stdout(&o)
    };
    for (words, fl) in &shown {
        let takes = flags(&help(words));
        let unknown: Vec<&String> = fl.iter().filter(|f| !takes.contains(*f)).collect();
        assert!(
            unknown.is_empty(),
            "docs/commands.md shows `gpuhost {}` with {unknown:?}, which it does not take",
            words.join(" ")
        );
    }
    let top = help(&[]);
    let commands = top
        .split("Commands:\n")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or_default();
    for c in commands.lines().filter_map(|l| l.split_whitespace().next()) {
        assert!(
            c == "help" || shown.keys().any(|w| w[0] == c),
            "docs/commands.md's synopsis does not show `gpuhost {c}`"
        );
    }
}

/// docs/ARCHITECTURE.md's "Built with" names every crate the workspace depends on, and no other.
#[test]
fn the_architecture_names_every_crate_gpuhost_is_built_with() {
    let table = docs::checked(file!(), "docs/ARCHITECTURE.md", "crates");
    let named: BTreeSet<String> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| crate "))
        .filter_map(|l| l.split(" | ").next())
        .flat_map(|c| {
            c.trim_start_matches("| ")
                .split([',', '(', ')', '+', ' '])
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut deps = BTreeSet::new();
    let ws = docs::workspace();
    let members = [
        "host", "nvidia", "profiles", "steps", "engine", "health", "serve", "agent",
    ];
    for toml in std::iter::once(ws.join("Cargo.toml"))
        .chain(members.iter().map(|m| ws.join(m).join("Cargo.toml")))
    {
        let text = std::fs::read_to_string(&toml).unwrap();
        let mut in_deps = false;
        for l in text.lines() {
            if l.starts_with('[') {
                in_deps = l.ends_with("dependencies]");
                continue;
            }
            let name: String = l
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            if in_deps && !name.is_empty() && !name.starts_with("gpuhost") {
                deps.insert(name);
            }
        }
    }
    assert!(deps.contains("tokio") && deps.contains("duct"), "{deps:?}");
    assert_eq!(
        named, deps,
        "docs/ARCHITECTURE.md's Built with (left) against the Cargo.toml files (right)"
    );
}

/// A figure in a text: a number followed by a unit of time, size, ratio or a count of what a
/// run measures (`2 min 15 s`, `13.6 MiB`, `0.26×`, `970 passed`, `148 Debian packages`).
fn figures(text: &str) -> Vec<String> {
    const UNITS: [&str; 16] = [
        "ms",
        "s",
        "min",
        "h",
        "KiB",
        "MiB",
        "GiB",
        "MB",
        "GB",
        "×",
        "%",
        "CPU-s",
        "passed",
        "failed",
        "packages",
        "Debian packages",
    ];
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_alphanumeric());
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.' || chars[j] == ',') {
            j += 1;
        }
        let number: String = chars[i..j].iter().collect();
        let rest: String = chars[j..].iter().take(20).collect();
        let rest = rest.strip_prefix(' ').unwrap_or(&rest);
        let unit = UNITS.iter().find(|u| {
            rest.starts_with(**u) && !rest[u.len()..].starts_with(|c: char| c.is_alphanumeric())
        });
        if let Some(u) = unit {
            out.push(format!("{number} {u}"));
        }
        i = j.max(i + 1);
    }
    out
}

/// The README is a front door (issue 54): what gpuhost is, the two commands, a quick start and
/// links, in at most 300 lines; its table still links the active checks; and it quotes no
/// measured figure that a paragraph of its own does not date (`YYYY-MM-DD`) and call a
/// measurement — the figures live where they are generated or checked (bench/, docs/).
#[test]
fn the_readme_is_a_front_door_without_undated_figures() {
    let text = std::fs::read_to_string(docs::workspace().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines");
    assert!(
        text.lines()
            .any(|l| l.starts_with("| [") && l.contains("(docs/active-checks.md)")),
        "README.md's table no longer links docs/active-checks.md"
    );
    // Prose paragraphs: code blocks and HTML comments left out.
    let mut prose = String::new();
    let mut fenced = false;
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced && !l.trim_start().starts_with("<!--") {
            prose.push_str(l);
            prose.push('\n');
        }
    }
    let dated = |p: &str| {
        p.contains("measured")
            && p.as_bytes().windows(10).any(|w| {
                w.iter().enumerate().all(|(i, c)| match i {
                    4 | 7 => *c == b'-',
                    _ => c.is_ascii_digit(),
                })
            })
    };
    let undated: Vec<String> = prose
        .split("\n\n")
        .filter(|p| !dated(p))
        .flat_map(figures)
        .collect();
    assert!(
        undated.is_empty(),
        "README.md quotes figures no paragraph dates as a measurement (move them to bench/ or docs/benchmarks.md): {undated:?}"
    );
    // The figures the README quoted before issue 54 are found, so the scan would see them.
    assert_eq!(
        figures("took 2 min 15 s, 148 Debian packages, 0.26× `nvidia-smi -q`, 970 passed, 13.6 MiB; driver 535.104.05, CUDA 12.2"),
        ["2 min", "15 s", "148 Debian packages", "0.26 ×", "970 passed", "13.6 MiB"]
    );
}

/// `gpuhost steps`, as the README shows it.
#[test]
fn the_readme_shows_the_steps_gpuhost_prints() {
    let b = docs::delegated(file!(), "README.md", "steps");
    let console = b.console();
    assert_eq!(console.len(), 1, "{}", b.place());
    let (cmd, want) = &console[0];
    let mut sh = Shell::new();
    assert_eq!(&sh.ok(cmd), want, "{}", b.place());
    sh.finish();
}

/// "On a real Oracle Linux GPU node": the apply against a fresh OL8 root (the world's ol8-uek,
/// its copy of the driver package the README names under /srv), then status on the saved
/// snapshot of an HGX H200 node. And the JSON report of apply and plan on that root has the
/// fields docs/apply.md lists, no other.
#[test]
fn the_readme_real_node_commands_run_and_the_json_report_is_as_documented() {
    let b = docs::delegated(file!(), "README.md", "real-node");
    let w = World::get();
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let r = root.path().display().to_string();
    let mut sh = Shell::new()
        .rewrite(
            "--profile ol8-uek",
            &format!("--profile {}", world::profile("ol8-uek")),
        )
        .rewrite(
            "=/srv/",
            &format!("={}/", w.dir().join("rpms/cuda-local").display()),
        )
        .rewrite("gpuhost apply ", &format!("gpuhost apply --root {r} "))
        .rewrite(
            "gpuhost status",
            &format!(
                "gpuhost status --from-snapshot {}",
                fixture("status/hgx-h200x8-snapshot.json").display()
            ),
        );
    let cmds = b.commands();
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    let mut apply = String::new();
    for c in &cmds {
        let out = sh.ok(c);
        if c.starts_with("gpuhost apply ") {
            let last = out
                .lines()
                .rfind(|l| l.starts_with("converged — "))
                .unwrap_or_default();
            assert!(last.contains(" changed,"), "{out}");
            assert!(root.installed("nvidia-driver").is_some());
            apply = sh.effective(c);
        } else {
            assert!(out.starts_with("gpuhost status OK: "), "{out}");
        }
    }
    sh.finish();

    let table = field_table("docs/apply.md", "apply-json");
    let mut seen = BTreeSet::new();
    for run in [
        format!("{apply} --format json"),
        format!(
            "{} --format json",
            apply.replacen("gpuhost apply", "gpuhost plan", 1)
        ),
    ] {
        let (_, o) = Shell::new().run(&run);
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", said(&run, &run, &o)));
        check_fields(&table, "", &v, &mut seen);
        // `command` is what the table says it is for this command.
        let command = if run.contains("gpuhost plan") {
            "plan"
        } else {
            "apply"
        };
        assert_eq!(v["command"], command, "{run}");
        assert!(
            docs::checked(file!(), "docs/apply.md", "apply-json").contains(
                "| `command` | always | `plan` for `plan` and `apply --dry-run`; `apply` otherwise"
            )
        );
    }
    eprintln!("fields seen: {seen:?}");
    for f in [
        "driver.version",
        "kernel_guard.action",
        "steps[].commands[].argv",
    ] {
        assert!(seen.contains(f), "{f} never seen");
    }
}

// ---- docs/driver-packages.md ----------------------------------------------------------------

/// "Upgrading the driver", on an OL9 RHCK root converged on driver 535: `plan` lists what goes
/// and what comes and changes nothing; `apply` moves the root to 580 in one go.
#[test]
fn the_driver_upgrade_runs_in_order_on_a_converged_root() {
    let b = docs::delegated(file!(), "docs/driver-packages.md", "upgrade");
    let w = World::get();
    let root = Root::new(Os::Ol9, &[RHCK9]);
    let profile = world::profile("ol9-rhck");
    let o = root.gpuhost(&[
        "apply",
        "--profile",
        &profile,
        "--set",
        &format!(
            "driver.local_repo_rpm={}",
            w.cuda_local(CUDA_LOCAL_EL9_12_2).display()
        ),
    ]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let r = root.path().display().to_string();
    let mut sh = Shell::new()
        .rewrite("--profile ol9-rhck", &format!("--profile {profile}"))
        .rewrite(
            "=/srv/",
            &format!("={}/", w.dir().join("rpms/cuda-local").display()),
        )
        .rewrite("gpuhost plan ", &format!("gpuhost plan --root {r} "))
        .rewrite("gpuhost apply ", &format!("gpuhost apply --root {r} "));
    let cmds = b.commands();
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    let before = root.rpmdb_snapshot();
    let plan = sh.ok(&cmds[0]);
    assert!(
        plan.contains("one dnf transaction: remove cuda-repo-rhel9-12-2-local")
            && plan.contains("nvidia-driver-580.82.07"),
        "{plan}"
    );
    assert_eq!(root.rpmdb_snapshot(), before, "plan changed the root");
    sh.ok(&cmds[1]);
    sh.finish();
    assert!(
        root.installed("nvidia-driver")
            .unwrap_or_default()
            .starts_with("580.82.07"),
        "{:?}",
        root.installed("nvidia-driver")
    );
    assert_eq!(root.installed("cuda-repo-rhel9-12-2-local"), None);
}

/// "The local repo on the node, or only the driver set": a first converge with
/// `driver.keep_local_repo = false` on an OL9 UEK root installs the driver and no local repo
/// package; its driver set is in gpuhost's cache, the toolkit's packages nowhere.
#[test]
fn without_the_local_repo_the_node_holds_only_the_cached_driver_set() {
    let b = docs::delegated(file!(), "docs/driver-packages.md", "keep_local_repo");
    let w = World::get();
    let root = Root::new(Os::Ol9, &[world::UEK9]);
    let r = root.path().display().to_string();
    let mut sh = Shell::new()
        .rewrite(
            "--profile ol9-uek",
            &format!("--profile {}", world::profile("ol9-uek")),
        )
        .rewrite(
            "=/srv/",
            &format!("={}/", w.dir().join("rpms/cuda-local").display()),
        )
        .rewrite("gpuhost apply ", &format!("gpuhost apply --root {r} "));
    let cmds = b.commands();
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    sh.ok(&cmds[0]);
    sh.finish();
    assert!(
        root.installed("nvidia-driver")
            .unwrap_or_default()
            .starts_with("580.82.07"),
        "{:?}",
        root.installed("nvidia-driver")
    );
    assert_eq!(root.installed("cuda-repo-rhel9-13-0-local"), None);
    assert!(!root.join("/var/cuda-repo-rhel9-13-0-local").exists());
    let cached =
        root.join("/var/lib/gpuhost/driver-repo/cuda-repo-rhel9-13-0-local-13.0.1_580.82.07");
    let names: Vec<String> = std::fs::read_dir(&cached)
        .unwrap_or_else(|e| panic!("{}: {e}", cached.display()))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("nvidia-driver-580")),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("cuda-toolkit")),
        "{names:?}"
    );
}

// ---- docs/status-and-serve.md -------------------------------------------------------------

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `gpuhost serve` and the requests shown, the server on a free port (the document's is
/// 19400) replaying the snapshot of an HGX H200 node.
#[test]
fn the_serve_commands_answer_as_shown() {
    let b = docs::delegated(file!(), "docs/status-and-serve.md", "serve");
    let cmds = b.commands();
    assert!(cmds[0].starts_with("gpuhost serve "), "{cmds:?}");
    let mut sh = Shell::new().rewrite(
        "gpuhost serve ",
        &format!(
            "exec gpuhost serve --listen 127.0.0.1:0 --from-snapshot {} ",
            fixture("status/hgx-h200x8-snapshot.json").display()
        ),
    );
    let (_, mut c) = sh.command(&cmds[0]);
    let mut child = c
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Server(child);
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    sh = sh.rewrite("localhost:19400", &addr);
    for c in &cmds[1..] {
        let out = sh.ok(c);
        if c.contains("/healthz") {
            assert!(out.starts_with("gpuhost status OK: "), "{out}");
        } else if c.contains("jq .status") {
            assert_eq!(out, "\"OK\"\n");
        }
    }
    sh.finish();
}

/// The provisioning gate: status --wait-healthy on the snapshot of a healthy HGX H200 node, and
/// the cloud-init user-data with the gate, which cloud-init's own schema check accepts.
#[test]
fn the_gate_example_waits_for_a_healthy_node_and_its_user_data_is_valid() {
    let b = docs::delegated(file!(), "docs/status-and-serve.md", "gate");
    let mut sh = Shell::new().rewrite(
        "gpuhost status ",
        &format!(
            "gpuhost status --from-snapshot {} ",
            fixture("status/hgx-h200x8-snapshot.json").display()
        ),
    );
    let cmds = b.commands();
    assert_eq!(cmds.len(), 3, "{cmds:?}");
    let out = sh.ok(&cmds[0]);
    assert!(out.ends_with("fit for work\n"), "{out}");
    sh.ok(&cmds[1]);
    let ud = std::fs::read_to_string(sh.cwd().join("user-data.yaml")).unwrap();
    assert!(
        ud.starts_with("#cloud-config\n") && ud.contains("gpuhost-gate.service"),
        "{ud}"
    );
    let out = sh.ok(&cmds[2]);
    assert!(out.contains("Valid cloud-config"), "{out}");
    sh.finish();
}

// ---- docs/fleets.md -----------------------------------------------------------------------

/// Whether `line` matches `pattern`, where `…` in the pattern stands for any text.
fn matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    let mut rest = line;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            let Some(at) = rest.find(p) else {
                return false;
            };
            rest = &rest[at + p.len()..];
        }
    }
    rest.is_empty()
}

/// The cloud-init example: user-data written, accepted by cloud-init's schema check, and the
/// abridged print-out shown below it is what gpuhost prints (each line, in order; `…` stands
/// for what was left out).
#[test]
fn the_cloud_init_example_writes_valid_user_data_as_shown() {
    let b = docs::delegated(file!(), "docs/fleets.md", "cloud-init");
    let mut sh = Shell::new();
    let cmds = b.commands();
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    sh.ok(&cmds[0]);
    let out = sh.ok(&cmds[1]);
    assert!(out.contains("Valid cloud-config"), "{out}");
    sh.finish();
    let ud = std::fs::read_to_string(sh.cwd().join("user-data.yaml")).unwrap();
    let shown = docs::blocks("docs/fleets.md")
        .into_iter()
        .find(|x| x.line > b.line && x.lang == "yaml")
        .unwrap();
    let mut lines = ud.lines();
    for want in shown.text.lines() {
        assert!(
            lines.any(|l| matches(want, l)),
            "{}: gpuhost does not print {want:?} (in this order):\n{ud}",
            shown.place()
        );
    }
}

// ---- docs/compat.md -----------------------------------------------------------------------

/// The snapshot of the real H200 with the NVML answer `gpuhost compat` was run on there
/// (`tests/fixtures/compat/h200-nvml-probe.json`: brands and compute capability included).
fn h200_compat_snapshot(dir: &Path) -> PathBuf {
    let read = |p: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(fixture(p)).unwrap()).unwrap()
    };
    let mut snap = read("status/h200-snapshot.json");
    snap["nvml"] = read("compat/h200-nvml-probe.json");
    let f = dir.join("h200-compat-snapshot.json");
    std::fs::write(&f, serde_json::to_string(&snap).unwrap()).unwrap();
    f
}

/// The `docker save` tarball a command names (`--image cuda-13.0.0-runtime-rockylinux8.tar`),
/// made with umoci and skopeo from the environment of NVIDIA's image of that CUDA version.
fn make_image(cmd: &str, dir: &Path) {
    let Some(name) = cmd
        .split_whitespace()
        .skip_while(|w| *w != "--image")
        .nth(1)
    else {
        return;
    };
    let cuda = name
        .strip_prefix("cuda-")
        .and_then(|n| n.strip_suffix("-runtime-rockylinux8.tar"))
        .unwrap_or_else(|| panic!("{cmd}: an image this test cannot make"));
    let l = images::Layout::new();
    l.image(cuda, "amd64", &images::nvidia_env(cuda));
    let tar = l.docker_archive(cuda, &format!("nvidia/cuda:{cuda}-runtime-rockylinux8"));
    std::fs::copy(tar, dir.join(name)).unwrap();
}

/// The real outputs on an H200 shown in docs/compat.md, from the NVML answer captured there
/// (`--nvml-fixture`), with images made as they were made there: the same text, the same exit
/// code. And their `--format json` has the fields the table lists.
#[test]
fn the_compat_examples_print_what_the_h200_printed() {
    if !images::image_tools() {
        return;
    }
    let table = field_table("docs/compat.md", "compat-json");
    let mut seen = BTreeSet::new();
    for b in [
        docs::delegated(file!(), "docs/compat.md", "compat-cuda"),
        docs::delegated(file!(), "docs/compat.md", "compat-forward"),
        docs::delegated(file!(), "docs/compat.md", "compat-refused"),
    ] {
        let mut sh = Shell::new();
        let snap = h200_compat_snapshot(sh.cwd());
        sh = sh.rewrite(
            "gpuhost compat ",
            &format!("gpuhost compat --nvml-fixture {} ", snap.display()),
        );
        for (cmd, shown) in b.console() {
            make_image(&cmd, sh.cwd());
            let (eff, o) = sh.run(&cmd);
            let got = format!("{}[exit {}]\n", stdout(&o), code(&o));
            assert_eq!(got, shown, "{}\n{}", b.place(), said(&cmd, &eff, &o));
            let (eff, o) = sh.run(&format!("{cmd} --format json"));
            let v: Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", said(&cmd, &eff, &o)));
            check_fields(&table, "", &v, &mut seen);
        }
        sh.finish();
    }
    assert!(
        seen.contains("hint") && seen.contains("host.cuda"),
        "{seen:?}"
    );
}

// ---- docs/bundle.md -----------------------------------------------------------------------

/// The air-gapped example, in order: the bundle made for a clean OL8 from the world's repos
/// (`--repos`, in place of Oracle's public ones; the world's ol8-uek with its Docker and toolkit
/// mirrors given as directories, since a clean target has no `/srv/repos`),
/// its tarball carried from /srv to /media (one directory here), then plan and apply from it
/// on an OL8 root running the kernel it was made for; a second apply changes nothing.
#[test]
fn the_bundle_example_runs_in_order() {
    let b = docs::delegated(file!(), "docs/bundle.md", "bundle");
    let w = World::get();
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let mut sh = Shell::new().env("HOME", &w.home().display().to_string());
    let repos = sh.cwd().join("repos.d");
    std::fs::create_dir_all(&repos).unwrap();
    let mut site = String::new();
    for id in [
        "ol8_baseos_latest",
        "ol8_appstream",
        "ol8_UEKR7",
        "ol8_developer_EPEL",
    ] {
        site.push_str(&format!(
            "[{id}]\nname={id}\nbaseurl=file://{}\ngpgcheck=0\nenabled=1\n\n",
            w.repo(Os::Ol8, id).display()
        ));
    }
    std::fs::write(repos.join("site.repo"), site).unwrap();
    let carry = sh.cwd().join("carry");
    std::fs::create_dir_all(&carry).unwrap();
    let r = root.path().display().to_string();
    sh = sh
        .rewrite(
            "=/srv/cuda-repo-",
            &format!("={}/cuda-repo-", w.dir().join("rpms/cuda-local").display()),
        )
        .rewrite(
            "--profile ol8-uek ",
            &format!(
                "--profile {} --set docker.repo={} --set container_toolkit.repo={} ",
                world::profile("ol8-uek"),
                w.repo(Os::Ol8, "docker-ce-stable").display(),
                w.repo(Os::Ol8, "nvidia-container-toolkit").display()
            ),
        )
        .rewrite(
            "--os ol8 ",
            &format!("--os ol8 --repos {} ", repos.display()),
        )
        .rewrite(
            "/srv/gpuhost-bundle",
            &format!("{}/gpuhost-bundle", carry.display()),
        )
        .rewrite(
            "/media/gpuhost-bundle",
            &format!("{}/gpuhost-bundle", carry.display()),
        )
        .rewrite("gpuhost plan ", &format!("gpuhost plan --root {r} "))
        .rewrite("gpuhost apply ", &format!("gpuhost apply --root {r} "));
    let cmds = b.commands();
    assert_eq!(cmds.len(), 3, "{cmds:?}");
    let made = sh.ok(&cmds[0]);
    assert!(made.contains("manifest sha256 "), "{made}");
    assert!(carry.join("gpuhost-bundle.tar").is_file());
    let before = root.rpmdb_snapshot();
    let plan = sh.ok(&cmds[1]);
    assert!(plan.contains("would-change"), "{plan}");
    assert_eq!(
        root.rpmdb_snapshot(),
        before,
        "plan --bundle changed the root"
    );
    let first = sh.ok(&cmds[2]);
    assert!(
        first.contains("converged — steps: ") && first.contains(" changed,"),
        "{first}"
    );
    let again = sh.ok(&cmds[2]);
    let last = again
        .lines()
        .rfind(|l| l.starts_with("converged — "))
        .unwrap_or_default();
    assert!(!last.contains(" changed,"), "{again}");
    sh.finish();
}

/// The keys a JSON schema block documents: a quoted name that is not a value (not after `:` or
/// `|`), comments (`// …`) left out.
fn schema_keys(block: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for line in block.lines() {
        let line = line.split("//").next().unwrap_or_default();
        let mut rest = line;
        let mut before = String::new();
        while let Some(open) = rest.find('"') {
            before.push_str(&rest[..open]);
            let Some(len) = rest[open + 1..].find('"') else {
                break;
            };
            let word = &rest[open + 1..open + 1 + len];
            let prev = before.trim_end().chars().last();
            if !matches!(prev, Some(':') | Some('|')) {
                keys.insert(word.to_string());
            }
            before.push_str(&rest[open..open + len + 2]);
            rest = &rest[open + len + 2..];
        }
    }
    keys
}

/// Every object key of `v` (map keys that are data — GPU UUIDs, link numbers — left out).
fn json_keys(v: &Value, into: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let data = k.starts_with("GPU-") || k.chars().all(|c| c.is_ascii_digit());
                if !data {
                    into.insert(k.clone());
                }
                json_keys(x, into);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| json_keys(x, into)),
        _ => {}
    }
}

/// `health/README.md` documents `gpuhost status --format json` (schema_version 1): every key
/// the command prints — judged from the real H200's and the HGX snapshot, and collected by the
/// one-shot probe from the H200's NVML answer over its sysfs tree — is named there.
#[test]
fn the_status_json_schema_names_every_field_status_prints() {
    let doc = std::fs::read_to_string(docs::workspace().join("health/README.md")).unwrap();
    let section = doc
        .split("## JSON (`--format json`)")
        .nth(1)
        .expect("health/README.md has a JSON section");
    let block = section
        .split("```jsonc\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a ```jsonc block in the JSON section");
    let mut documented = schema_keys(block);
    // The readings and the fixed fields are named in the prose under the block (`name`, …).
    let prose = section.split("\n```\n").nth(1).unwrap_or_default();
    for part in prose.split('`').skip(1).step_by(2) {
        for word in part.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            documented.insert(word.to_string());
        }
    }
    let run = tempfile::tempdir().unwrap();
    let status = |args: &[&str]| -> Value {
        let o = Command::new(GPUHOST)
            .args(["status", "--format", "json"])
            .args(args)
            .env("GPUHOST_RUN_DIR", run.path())
            .env("GPUHOST_STATUS_ROOT", fixture("status/h200-root"))
            .output()
            .unwrap();
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)))
    };
    let mut printed = BTreeSet::new();
    for snap in [
        "status/h200-snapshot.json",
        "status/hgx-h200x8-snapshot.json",
    ] {
        let f = fixture(snap);
        json_keys(
            &status(&["--from-snapshot", f.to_str().unwrap()]),
            &mut printed,
        );
    }
    let f = fixture("status/h200-snapshot.json");
    let probed = status(&["--fresh", "--nvml-fixture", f.to_str().unwrap()]);
    assert_eq!(probed["snapshot"]["nvml"]["status"], "ok", "{probed:#}");
    json_keys(&probed, &mut printed);
    let missing: Vec<&String> = printed.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "gpuhost status --format json prints keys health/README.md does not document: {missing:?}"
    );
}

/// docs/support-matrix.md is what `gpuhost generate support-matrix` makes from the code's own
/// tables, and its "supported" rows are what the test world runs: the branches each release's
/// table says are tested are exactly the drivers of the world's local repo packages for it
/// (tests/world/gen.py, LOCAL_REPOS).
#[test]
fn the_support_matrix_is_generated_and_its_supported_rows_are_run() {
    let o = Command::new(GPUHOST)
        .args(["generate", "support-matrix"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let path = docs::workspace().join("docs/support-matrix.md");
    let committed = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        committed,
        stdout(&o),
        "docs/support-matrix.md is stale: gpuhost generate support-matrix > docs/support-matrix.md"
    );
    let gen = std::fs::read_to_string(world::src_dir().join("gen.py")).unwrap();
    let start = gen.find("LOCAL_REPOS = [").unwrap();
    let list = &gen[start..start + gen[start..].find("]\n").unwrap()];
    let mut world: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for line in list.lines().filter(|l| l.contains("(\"ol")) {
        let fields: Vec<&str> = line.split('"').collect();
        let major: u32 = fields[1].trim_start_matches("ol").parse().unwrap();
        let driver = fields.iter().rev().find(|f| f.contains('.')).unwrap();
        let branch: u32 = driver.split('.').next().unwrap().parse().unwrap();
        world.entry(major).or_default().insert(branch);
    }
    // The aarch64 releases' local repos (`LOCAL_REPOS += [("ol9-aarch64", …`).
    let start = gen.find("LOCAL_REPOS += [").unwrap();
    let list = &gen[start..start + gen[start..].find(")]\n").unwrap()];
    let mut arm: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for line in list.lines().filter(|l| l.contains("-aarch64\"")) {
        let fields: Vec<&str> = line.split('"').collect();
        let major: u32 = fields[1]
            .trim_start_matches("ol")
            .trim_end_matches("-aarch64")
            .parse()
            .unwrap();
        let driver = fields.iter().rev().find(|f| f.contains('.')).unwrap();
        let branch: u32 = driver.split('.').next().unwrap().parse().unwrap();
        arm.entry(major).or_default().insert(branch);
    }
    for r in gpuhost_host::platform::RELEASES {
        let claimed: BTreeSet<u32> = r.tested_branches.iter().copied().collect();
        assert_eq!(
            world.get(&r.major),
            Some(&claimed),
            "Oracle Linux {}: the branches the matrix calls supported are the world's",
            r.major
        );
        let claimed: BTreeSet<u32> = r.tested_aarch64.iter().copied().collect();
        assert_eq!(
            arm.get(&r.major).cloned().unwrap_or_default(),
            claimed,
            "Oracle Linux {} aarch64: the branches the matrix calls supported are the world's",
            r.major
        );
    }
}
