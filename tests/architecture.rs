//! The house stays as `docs/ARCHITECTURE.md` draws it: each crate imports only the crates
//! below it, inside each crate the module graph has no circle but the back-edges listed in
//! [`BACK_EDGES`] (at most two), and no production function is long (over 120 lines none, over
//! 80 at most 12; the known exceptions listed).
//!
//! The module graph is read from the sources: a file's shipped code (up to its first
//! `#[cfg(test)]`) naming `crate::a::b…`, `super::…`, `self::…` or one of its own child modules
//! (`child::…`) is an edge to the deepest module that path names; a path to an item of the crate
//! root (`crate::Item`) is an edge to the root. So a parent that re-exports or calls into a
//! child has an edge to it, and a child that imports its parent has one back: a circle. Only
//! declaring a child (`mod child;`) is no edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The crates of the workspace and the gpuhost crates each may depend on (docs/ARCHITECTURE.md).
const LAYERS: &[(&str, &str, &[&str])] = &[
    ("host", "gpuhost-host", &[]),
    ("active", "gpuhost-active", &[]),
    ("nvidia", "gpuhost-nvidia", &["gpuhost-host"]),
    (
        "profiles",
        "gpuhost-profile",
        &["gpuhost-host", "gpuhost-nvidia"],
    ),
    (
        "steps",
        "gpuhost-steps",
        &["gpuhost-host", "gpuhost-nvidia", "gpuhost-profile"],
    ),
    (
        "engine",
        "gpuhost-engine",
        &[
            "gpuhost-host",
            "gpuhost-nvidia",
            "gpuhost-profile",
            "gpuhost-steps",
        ],
    ),
    (
        "health",
        "gpuhost-health",
        &[
            "gpuhost-host",
            "gpuhost-active",
            "gpuhost-nvidia",
            "gpuhost-profile",
        ],
    ),
    (
        "serve",
        "gpuhost-serve",
        &["gpuhost-host", "gpuhost-health"],
    ),
];

/// The gpuhost crates a Cargo.toml's `[dependencies]` names.
fn gpuhost_deps(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_deps = l == "[dependencies]";
            continue;
        }
        if in_deps && l.starts_with("gpuhost-") {
            if let Some(name) = l.split(['.', ' ', '=']).next() {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[test]
fn each_crate_depends_only_on_the_crates_below_it() {
    let root_manifest = std::fs::read_to_string(top().join("Cargo.toml")).unwrap_or_default();
    for (dir, name, allowed) in LAYERS {
        let manifest =
            std::fs::read_to_string(top().join(dir).join("Cargo.toml")).unwrap_or_default();
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "{dir}/Cargo.toml is not the crate {name}"
        );
        assert!(
            root_manifest.contains(&format!("\"{dir}\"")),
            "{dir} is not a workspace member"
        );
        let deps = gpuhost_deps(&manifest);
        let extra: Vec<&String> = deps
            .iter()
            .filter(|d| !allowed.contains(&d.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "{name} depends on {extra:?}, above or beside it (docs/ARCHITECTURE.md allows {allowed:?})"
        );
    }
}

/// A crate's modules: module path (`driver::fabric`) → its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                stack.push(e.path());
            }
            continue;
        }
        let Ok(rel) = p.strip_prefix(src) else {
            continue;
        };
        let rel = rel.with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        if parts
            .last()
            .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
        {
            parts.pop();
        }
        out.insert(parts.join("::"), p);
    }
    out
}

/// Expand `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e` (the text after `crate::`).
fn expand(prefix: &str, text: &str, out: &mut Vec<String>) {
    let text = text.trim();
    if let Some(open) = text.find('{') {
        let head = text[..open].trim_end_matches("::");
        let inner = &text[open + 1..text.rfind('}').unwrap_or(text.len())];
        let mut depth = 0;
        let mut start = 0;
        let base = join(prefix, head);
        for (i, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&base, &inner[start..], out);
    } else if !text.is_empty() {
        let item = text.split(" as ").next().unwrap_or(text).trim();
        out.push(join(prefix, if item == "self" { "" } else { item }));
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}::{b}"),
    }
}

/// The module paths one file's shipped code names, as absolute module paths: through
/// `crate::`, `super::`, `self::`, or the name of one of its `children` (`child::…`).
fn imports(module: &str, children: &[&str], text: &str) -> Vec<String> {
    let shipped = text.split("#[cfg(test)]").next().unwrap_or_default();
    let code: String = shipped
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let parent = module.rsplit_once("::").map(|(p, _)| p).unwrap_or("");
    let mut out = Vec::new();
    let mut anchors: Vec<(String, String)> = vec![
        ("crate::".into(), String::new()),
        ("super::".into(), parent.to_string()),
        ("self::".into(), module.to_string()),
    ];
    for c in children {
        anchors.push((format!("{c}::"), join(module, c)));
    }
    for (anchor, base) in &anchors {
        let (anchor, base) = (anchor.as_str(), base.as_str());
        let mut rest = code.as_str();
        while let Some(i) = rest.find(anchor) {
            let before = rest[..i].chars().last();
            rest = &rest[i + anchor.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            // The path: identifiers and `::`, or a brace group.
            let end = if rest.starts_with('{') || path_then_group(rest) {
                let mut depth = 0;
                let mut end = rest.len();
                for (j, ch) in rest.char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            } else {
                rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len())
            };
            expand(base, rest[..end].trim_end_matches(':'), &mut out);
        }
    }
    out
}

/// True when the text starts with `a::b::{`.
fn path_then_group(s: &str) -> bool {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(s.len());
    s[end..].starts_with('{') && s[..end].ends_with("::")
}

/// The deepest module of `mods` that `path` names; an item of the crate root names the root
/// (`""`).
fn resolve<'m>(mods: &'m BTreeMap<String, PathBuf>, path: &str) -> Option<&'m str> {
    let parts: Vec<&str> = path.split("::").collect();
    (0..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find_map(|p| mods.get_key_value(&p).map(|(k, _)| k.as_str()))
}

/// The direct children of module `m` (their last path segment).
fn children<'m>(mods: &'m BTreeMap<String, PathBuf>, m: &str) -> Vec<&'m str> {
    mods.keys()
        .filter_map(|k| match m {
            "" => Some(k.as_str()).filter(|k| !k.is_empty() && !k.contains("::")),
            _ => k
                .strip_prefix(m)
                .and_then(|r| r.strip_prefix("::"))
                .filter(|r| !r.contains("::")),
        })
        .collect()
}

/// The module graph of one crate: module → the modules it names (children included).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let edges = g.entry(m.clone()).or_default();
        for path in imports(m, &children(&mods, m), &text) {
            if let Some(to) = resolve(&mods, &path).filter(|to| to != m) {
                edges.insert(to.to_string());
            }
        }
    }
    g
}

/// The name a module has in messages: the crate root is `lib.rs`/`main.rs`, `(root)` here.
fn shown(m: &str) -> &str {
    if m.is_empty() {
        "(root)"
    } else {
        m
    }
}

/// The circles of a graph: its strongly connected components of more than one module.
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan, iterative enough for a few hundred modules.
    struct T<'g> {
        g: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl<'g> T<'g> {
        fn visit(&mut self, v: &'g str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(lw));
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// The crates' source folders.
const CRATES: &[&str] = &[
    "host", "nvidia", "profiles", "steps", "engine", "health", "serve", "agent",
];

/// The back-edges allowed across every crate (crate folder, from, to; `""` is the crate root),
/// at most two, each with why (docs/ARCHITECTURE.md, "Back-edges"). Every other edge of a
/// module graph points down: the graph without these has no circle.
const BACK_EDGES: &[(&str, &str, &str)] = &[];

/// The edges of `g` inside a circle, as `from → to` lines.
fn circle_edges(g: &BTreeMap<String, BTreeSet<String>>, circle: &[String]) -> Vec<String> {
    let inside: BTreeSet<&str> = circle.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for m in circle {
        for to in g.get(m).into_iter().flatten() {
            if inside.contains(to.as_str()) {
                out.push(format!("{} → {}", shown(m), shown(to)));
            }
        }
    }
    out
}

#[test]
fn no_crate_has_a_circle_but_the_listed_back_edges() {
    assert!(BACK_EDGES.len() <= 2, "at most two back-edges (issue 33)");
    let mut found = Vec::new();
    for dir in CRATES {
        let mut g = graph(&top().join(dir).join("src"));
        assert!(!g.is_empty(), "{dir}/src has no modules: moved?");
        for (_, from, to) in BACK_EDGES.iter().filter(|(d, _, _)| d == dir) {
            let had = g.get_mut(*from).is_some_and(|e| e.remove(*to));
            assert!(
                had,
                "{dir}: the listed back-edge {} → {} is gone: remove it from BACK_EDGES",
                shown(from),
                shown(to)
            );
        }
        for c in circles(&g) {
            let names: Vec<&str> = c.iter().map(|m| shown(m)).collect();
            found.push(format!(
                "{dir}: {}\n    {}",
                names.join(" ↔ "),
                circle_edges(&g, &c).join("\n    ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "module circles (docs/ARCHITECTURE.md, \"Back-edges\"):\n{}",
        found.join("\n")
    );
}

/// The step API of `steps` (what a step is written against, and what a run knows once and
/// carries for several steps) and the step modules, which the registry orders.
const STEP_API: &[&str] = &["step", "work", "state", "units", "run", "transaction"];
const STEP_MODULES: &[&str] = &["kernel", "kernel_headers", "driver", "containers"];

fn top_module(m: &str) -> &str {
    m.split("::").next().unwrap_or(m)
}

#[test]
fn the_step_api_knows_no_step() {
    let g = graph(&top().join("steps/src"));
    for api in STEP_API {
        assert!(
            g.keys().any(|m| top_module(m) == *api),
            "steps/src has no module {api}: moved? (update STEP_API and docs/ARCHITECTURE.md)"
        );
    }
    let mut found = Vec::new();
    for (from, edges) in g.iter().filter(|(m, _)| STEP_API.contains(&top_module(m))) {
        // What the API module reaches, through any chain of API modules or others.
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut stack: Vec<(&str, String)> =
            edges.iter().map(|e| (e.as_str(), e.clone())).collect();
        while let Some((m, via)) = stack.pop() {
            if !seen.insert(m) {
                continue;
            }
            if STEP_MODULES.contains(&top_module(m)) {
                found.push(format!("{from} → {via}"));
                continue;
            }
            for next in g.get(m).into_iter().flatten() {
                stack.push((next.as_str(), format!("{via} → {next}")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the step API imports a step module (docs/ARCHITECTURE.md, \"A step sees only the step \
         API\"): what a run knows of a step belongs in run/, what several steps' work shares in \
         transaction/ or work.rs:\n{}",
        found.join("\n")
    );
}

/// What names an NVIDIA package: a literal that starts with one of these, or is one of
/// [`NVIDIA_PACKAGES`]. Names that are also a systemd unit's (`nvidia-persistenced`,
/// `nvidia-fabricmanager`, `nvidia-imex`) or a program's (`nvidia-smi`) are not counted: a
/// unit or a program is not a package rule.
const NVIDIA_PACKAGE_PREFIXES: &[&str] = &[
    "kmod-nvidia",
    "nvidia-driver",
    "nvidia-kmod-common",
    "nvidia-fabric-manager",
    "libnvidia-nscq",
    "libnvidia-container",
    "nvidia-container-toolkit",
    "cuda-repo-",
];
const NVIDIA_PACKAGES: &[&str] = &["nvidia-open", "cuda-drivers", "nvlsm"];

/// Crates that may write NVIDIA's package names: `nvidia` (the table), and `host`, which is
/// below it and reads a root's local repo directory by its name (`host::local_repo_dir`:
/// `/var/nvidia-driver-local-repo-…`, `/var/cuda-repo-…-local`), each listed with its file.
const NAMES_NVIDIA_PACKAGES: &[&str] = &["nvidia"];
const HOST_NAMES: &[(&str, &str)] = &[
    ("host/src/host.rs", "nvidia-driver-local-repo-"),
    ("host/src/host.rs", "cuda-repo-"),
];

/// The string literals of a file's production code: its text before `#[cfg(test)]`, comment
/// lines left out.
fn production_literals(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut out = Vec::new();
    for line in without_comments(code).lines() {
        let mut rest = line;
        while let Some(start) = rest.find('"') {
            let after = &rest[start + 1..];
            let mut end = None;
            let mut escaped = false;
            for (i, c) in after.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '"' if !escaped => {
                        end = Some(i);
                        break;
                    }
                    _ => escaped = false,
                }
            }
            let Some(end) = end else { break };
            out.push(after[..end].to_string());
            rest = &after[end + 1..];
        }
    }
    out
}

fn names_an_nvidia_package(lit: &str) -> bool {
    NVIDIA_PACKAGE_PREFIXES.iter().any(|p| lit.starts_with(p)) || NVIDIA_PACKAGES.contains(&lit)
}

#[test]
fn only_the_nvidia_crate_writes_nvidia_package_names() {
    let mut found = Vec::new();
    let mut seen_host = Vec::new();
    for dir in CRATES.iter().filter(|d| !NAMES_NVIDIA_PACKAGES.contains(d)) {
        for (rel, p) in rust_files(dir) {
            if p.ends_with("fuzz.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for lit in production_literals(&text) {
                if !names_an_nvidia_package(&lit) {
                    continue;
                }
                if HOST_NAMES.iter().any(|(f, l)| *f == rel && *l == lit) {
                    seen_host.push((rel.clone(), lit));
                    continue;
                }
                found.push(format!("{rel}: \"{lit}\""));
            }
        }
    }
    assert!(
        found.is_empty(),
        "NVIDIA package names written outside the nvidia crate: ask nvidia/src/packages.rs \
         (or hgx.rs) for them instead:\n{}",
        found.join("\n")
    );
    for (f, l) in HOST_NAMES {
        assert!(
            seen_host.iter().any(|(sf, sl)| sf == f && sl == l),
            "{f} no longer writes \"{l}\": remove it from HOST_NAMES"
        );
    }
}

#[test]
fn the_package_name_check_reads_production_literals() {
    let text = "const A: &str = \"kmod-nvidia-open-dkms\";\n// \"cuda-drivers\"\nfn f() { g(\"a\\\"b\", \"nvidia-open\") }\n#[cfg(test)]\nmod tests { const B: &str = \"nvlsm\"; }\n";
    let lits = production_literals(text);
    assert_eq!(lits, ["kmod-nvidia-open-dkms", "a\\\"b", "nvidia-open"]);
    let flagged: Vec<&String> = lits.iter().filter(|l| names_an_nvidia_package(l)).collect();
    assert_eq!(flagged, ["kmod-nvidia-open-dkms", "nvidia-open"]);
    assert!(!names_an_nvidia_package("nvidia-persistenced"));
    assert!(!names_an_nvidia_package(
        "/etc/dnf/modules.d/nvidia-driver.module"
    ));
}

#[test]
fn every_crate_root_warns_unreachable_pub() {
    for dir in CRATES {
        let src = top().join(dir).join("src");
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.is_file());
        assert!(root.is_some(), "{dir}/src has no lib.rs or main.rs");
        let root = root.unwrap_or_default();
        let text = std::fs::read_to_string(&root).unwrap_or_default();
        assert!(
            text.lines()
                .any(|l| l.trim() == "#![warn(unreachable_pub)]"),
            "{} does not warn unreachable_pub (docs/ARCHITECTURE.md, \"A small public surface\")",
            root.display()
        );
    }
}

#[test]
fn the_analysis_finds_a_circle_and_resolves_groups() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circles(&g), vec![vec!["a", "b", "c"]]);
    let got = imports(
        "driver::fabric",
        &["pins"],
        "use crate::{cmd::{self, Cmd}, runner::Ctx as C};\nuse super::{branch_of, repo::X};\nfn f() { crate::units::state(); pins::hold(); x::pins::no(); }\npub use pins::Pin;\n#[cfg(test)]\nuse crate::hidden;",
    );
    assert_eq!(
        got,
        vec![
            "cmd",
            "cmd::Cmd",
            "runner::Ctx",
            "units::state",
            "driver::branch_of",
            "driver::repo::X",
            "driver::fabric::pins::hold",
            "driver::fabric::pins::Pin",
        ]
    );
    // A parent naming its child and the child importing the parent's item is a circle.
    let mods: BTreeMap<String, PathBuf> = ["", "a", "a::b", "c"]
        .iter()
        .map(|m| (m.to_string(), PathBuf::new()))
        .collect();
    assert_eq!(resolve(&mods, "a::b::f"), Some("a::b"));
    assert_eq!(resolve(&mods, "a::Item"), Some("a"));
    assert_eq!(resolve(&mods, "Item"), Some(""));
    assert_eq!(children(&mods, ""), vec!["a", "c"]);
    assert_eq!(children(&mods, "a"), vec!["b"]);
}

// ---------------------------------------------------------------------------------------------
// Function length (issue 22, "One house"): no production function over 120 lines, and at most
// 12 over 80. Measured as /work/tools/fnlen.py measures: each crate's src/, every file cut at
// its first `#[cfg(test)] mod`, a function from its `fn` line to the line of the brace that
// closes its body (braces in string and char literals and after `//` not counted).

/// Over this many lines a function is long; at most [`MAX_LONG`] may be.
const LONG: usize = 80;
/// No production function may be longer than this.
const MAX_LINES: usize = 120;
const MAX_LONG: usize = 12;

/// Known exceptions over [`MAX_LINES`]: none (issue 22: no production function over 120
/// lines). Kept so that a split that cannot be made at once is listed here, with why.
const KNOWN_OVER_MAX: &[(&str, &str)] = &[];

/// The functions over [`LONG`] (at most [`MAX_LONG`]), each one decision that reads best
/// whole: a step's check against the host, the runner's phase 3, apply's report, the driver
/// swap's plan, the server's start, an NVML sweep and the fixed fields, the driver file's
/// verification. A new one must be split or listed with why.
const KNOWN_LONG: &[(&str, &str)] = &[
    ("steps/src/driver/repo.rs", "verify_file"),
    ("engine/src/runner.rs", "finish"),
    ("health/src/nvml/mod.rs", "sweep"),
    ("health/src/nvml/mod.rs", "read_fixed"),
    ("serve/src/lib.rs", "serve"),
    // Grown past 80 by issue 54 (a bundle on a node set up online; plan in apply's order; the
    // report's one line per change), listed at the session's end rather than split in haste:
    // the next change to each splits it.
    ("engine/src/apply.rs", "apply"),
    ("engine/src/bundle/build.rs", "build"),
    ("agent/src/output.rs", "print_report"),
];

/// A line with its string and char literals emptied and its `//` comment cut.
fn code_of(line: &str) -> String {
    let c: Vec<char> = line.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < c.len() {
        if c[i] == '"' {
            let mut j = i + 1;
            let mut closed = None;
            while j < c.len() {
                if c[j] == '\\' {
                    j += 2;
                    continue;
                }
                if c[j] == '"' {
                    closed = Some(j);
                    break;
                }
                j += 1;
            }
            if let Some(j) = closed {
                out.push_str("\"\"");
                i = j + 1;
                continue;
            }
        }
        if c[i] == '\'' {
            let plain = i + 2 < c.len() && c[i + 1] != '\\' && c[i + 1] != '\'' && c[i + 2] == '\'';
            let escaped = i + 3 < c.len() && c[i + 1] == '\\' && c[i + 3] == '\'';
            if plain || escaped {
                out.push_str("''");
                i += if plain { 3 } else { 4 };
                continue;
            }
        }
        out.push(c[i]);
        i += 1;
    }
    match out.find("//") {
        Some(k) => out[..k].to_string(),
        None => out,
    }
}

/// The name of the function a line declares: `[pub[(…)]] [const] [async] [unsafe] fn NAME`.
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    if rest.starts_with("//") {
        return None;
    }
    if let Some(r) = rest.strip_prefix("pub") {
        let r = match r.strip_prefix('(') {
            Some(inner) => &inner[inner.find(')')? + 1..],
            None => r,
        };
        if !r.starts_with(char::is_whitespace) {
            return None;
        }
        rest = r.trim_start();
    }
    for kw in ["const", "async", "unsafe"] {
        if let Some(r) = rest.strip_prefix(kw) {
            if r.starts_with(char::is_whitespace) {
                rest = r.trim_start();
            }
        }
    }
    let r = rest.strip_prefix("fn")?;
    if !r.starts_with(char::is_whitespace) {
        return None;
    }
    let name: String = r
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Each function of a file's production code (the text before its first `#[cfg(test)] mod`):
/// (name, first line, lines).
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.split('\n').collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|n| n.trim_start().starts_with("mod "))
        })
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    let mut i = 0;
    while i < end {
        let Some(name) = fn_name(lines[i]) else {
            i += 1;
            continue;
        };
        let (mut depth, mut started, mut j) = (0i64, false, i);
        while j < end {
            let code = code_of(lines[j]);
            for ch in code.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        started = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if (started && depth == 0) || (!started && code.trim_end().ends_with(';')) {
                break;
            }
            j += 1;
        }
        if started {
            out.push((name, i + 1, j - i + 1));
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Every production function of the workspace: (`crate/src/file.rs`, name, first line, lines).
fn production_functions() -> Vec<(String, String, usize, usize)> {
    let mut out = Vec::new();
    for dir in CRATES {
        for (rel, p) in rust_files(dir) {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for (name, line, len) in function_lengths(&text) {
                out.push((rel.clone(), name, line, len));
            }
        }
    }
    out
}

/// The `.rs` files under a crate's `src/`: (`crate/src/file.rs`, path).
fn rust_files(dir: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![top().join(dir).join("src")];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                stack.push(e.path());
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p
                .strip_prefix(top())
                .unwrap_or(&p)
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, p));
        }
    }
    out
}

#[test]
fn production_functions_stay_short() {
    let fns = production_functions();
    assert!(
        fns.len() > 500,
        "only {} functions found: moved?",
        fns.len()
    );
    let known = |list: &[(&str, &str)], file: &str, name: &str| {
        list.iter().any(|(f, n)| *f == file && *n == name)
    };
    let mut too_long = Vec::new();
    let mut long = Vec::new();
    for (file, name, line, len) in &fns {
        let shown = format!("{file}:{line} {name} ({len} lines)");
        if *len > MAX_LINES && !known(KNOWN_OVER_MAX, file, name) {
            too_long.push(shown.clone());
        }
        if *len > LONG {
            if !known(KNOWN_OVER_MAX, file, name) && !known(KNOWN_LONG, file, name) {
                too_long.push(shown.clone());
            }
            long.push(shown);
        }
    }
    assert!(
        too_long.is_empty(),
        "functions over {LONG} lines that are not known exceptions (split them by the decisions they make), or known ones over {MAX_LINES}:\n{}",
        too_long.join("\n")
    );
    assert!(
        long.len() <= MAX_LONG,
        "{} functions over {LONG} lines, at most {MAX_LONG} allowed:\n{}",
        long.len(),
        long.join("\n")
    );
    let stale: Vec<String> = KNOWN_OVER_MAX
        .iter()
        .map(|e| (e, MAX_LINES))
        .chain(KNOWN_LONG.iter().map(|e| (e, LONG)))
        .filter(|((f, n), over)| {
            !fns.iter()
                .any(|(file, name, _, len)| file == f && name == n && len > over)
        })
        .map(|((f, n), over)| format!("{f} {n} (no longer over {over} lines)"))
        .collect();
    assert!(
        stale.is_empty(),
        "known exceptions that are no longer: remove them from the list in tests/architecture.rs:\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_measure_skips_literals_comments_and_tests() {
    let text = "pub(crate) fn a() {\n    let s = \"}}\"; // }\n    let c = '}';\n}\n\nfn decl();\n\nasync fn b<'x>(v: &'x str) {\n    if v.is_empty() {\n        return;\n    }\n}\n\n#[cfg(test)]\nmod tests {\n    fn hidden() {}\n}\n";
    assert_eq!(
        function_lengths(text),
        vec![("a".to_string(), 1, 4), ("b".to_string(), 8, 5)]
    );
    assert_eq!(fn_name("    pub fn x("), Some("x".to_string()));
    assert_eq!(fn_name("    // fn x("), None);
    assert_eq!(fn_name("    let fnord = 1;"), None);
}

// ---------------------------------------------------------------------------------------------
// Unused dependencies (issue 33, item 4): what `cargo machete` checks, without installing it.
// Every crate a Cargo.toml declares is named in the code that builds with it: a
// `[dependencies]` entry in the crate's src/, a `[dev-dependencies]` entry in its src/, tests/
// or benches/ (the agent's integration tests live in the top-level tests/). A dev-dependency
// that is also a dependency only turns features on (the failpoints of the tests' binary).

/// The dependency names of one `[section]` of a Cargo.toml.
fn declared(manifest: &str, section: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            inside = l == section;
            continue;
        }
        if inside && !l.is_empty() && !l.starts_with('#') {
            if let Some(name) = l.split(['.', ' ', '=']).next() {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// Rust source without its `//` comment lines (doc comments included): a crate a comment
/// names is not used.
fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Rust code under these folders, comment lines left out (files and folders that do not
/// exist are skipped).
fn rust_text(dirs: &[PathBuf]) -> String {
    let mut text = String::new();
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                stack.push(e.path());
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            text.push_str(&without_comments(
                &std::fs::read_to_string(&p).unwrap_or_default(),
            ));
            text.push('\n');
        }
    }
    text
}

/// True when the code names the crate `ident`: a path (`ident::`), a `use ident`, a macro
/// (`ident!`) or an `extern crate`, not as part of a longer name.
fn names_crate(text: &str, ident: &str) -> bool {
    text.match_indices(ident).any(|(i, _)| {
        let before = text[..i].chars().last();
        let after = &text[i + ident.len()..];
        let starts = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        starts
            && (after.starts_with("::")
                || after.starts_with('!')
                || after.starts_with(';')
                || text[..i].trim_end().ends_with("use")
                || text[..i].trim_end().ends_with("extern crate"))
    })
}

#[test]
fn every_declared_dependency_is_used() {
    let mut unused = Vec::new();
    for dir in CRATES {
        let root = top().join(dir);
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
        let deps = declared(&manifest, "[dependencies]");
        assert!(
            !deps.is_empty(),
            "{dir}/Cargo.toml declares no dependency: moved?"
        );
        let src = rust_text(&[root.join("src"), root.join("build.rs")]);
        let mut dev_dirs = vec![root.join("src"), root.join("tests"), root.join("benches")];
        if *dir == "agent" {
            dev_dirs.push(top().join("tests"));
        }
        let dev_src = rust_text(&dev_dirs);
        for name in &deps {
            if !names_crate(&src, &name.replace('-', "_")) {
                unused.push(format!("{dir}: [dependencies] {name}"));
            }
        }
        for name in declared(&manifest, "[dev-dependencies]") {
            if !deps.contains(&name) && !names_crate(&dev_src, &name.replace('-', "_")) {
                unused.push(format!("{dir}: [dev-dependencies] {name}"));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "declared but never named in the code (remove them from Cargo.toml):\n{}",
        unused.join("\n")
    );
}

#[test]
fn the_dependency_check_reads_names_not_parts() {
    assert!(names_crate("use serde::Serialize;", "serde"));
    assert!(names_crate("let v = serde_json::json!({});", "serde_json"));
    assert!(!names_crate("let v = serde_json::json!({});", "serde"));
    assert!(names_crate("tracing::info!(\"x\");", "tracing"));
    assert!(!names_crate("my_tracing::info!(\"x\");", "tracing"));
    assert!(!names_crate("gpuhost_host::cmd::Cmd", "host"));
    assert!(names_crate("use libc;", "libc"));
    let commented =
        without_comments("//! Built on [`tokio::spawn`].\n/// We use serde here.\nfn f() {}");
    assert!(!names_crate(&commented, "tokio") && !names_crate(&commented, "serde"));
    let manifest = "[dependencies]\nanyhow.workspace = true\n# note\nlibc = \"0.2\"\n\n[dev-dependencies]\nrstest.workspace = true\n";
    assert_eq!(declared(manifest, "[dependencies]"), vec!["anyhow", "libc"]);
    assert_eq!(declared(manifest, "[dev-dependencies]"), vec!["rstest"]);
}

// ---------------------------------------------------------------------------------------------
// docs/ARCHITECTURE.md matches the code (issue 33, item 5): its layer table says what each
// crate may import (as LAYERS, which the manifests are checked against), every import goes to
// a lower layer, the types it names are declared in the files it names, and its back-edges are
// BACK_EDGES.

fn architecture_md() -> String {
    std::fs::read_to_string(top().join("docs/ARCHITECTURE.md")).unwrap_or_default()
}

/// The cells of the markdown table rows whose first cell passes `first`.
fn table_rows(text: &str, first: impl Fn(&str) -> bool) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells.first().is_some_and(|c| first(c)))
        .collect()
}

/// `gpuhost-profile` → `profile`: how the table names a crate.
fn short(name: &str) -> &str {
    name.strip_prefix("gpuhost-").unwrap_or(name)
}

#[test]
fn the_architecture_page_draws_the_layers_the_manifests_have() {
    let text = architecture_md();
    let rows = table_rows(&text, |c| c.parse::<u32>().is_ok());
    let layer_of = |dir: &str| -> Option<u32> {
        rows.iter()
            .find(|r| r.get(1).is_some_and(|f| f == &format!("`{dir}/`")))
            .and_then(|r| r[0].parse().ok())
    };
    for (dir, name, allowed) in LAYERS {
        let row = rows
            .iter()
            .find(|r| r.get(1).is_some_and(|f| f == &format!("`{dir}/`")));
        assert!(row.is_some(), "docs/ARCHITECTURE.md has no row for {dir}/");
        let Some(row) = row else { continue };
        assert!(row[2].contains(&format!("`{name}`")), "{dir}: {row:?}");
        let said: BTreeSet<&str> = row[4]
            .split(", ")
            .filter(|s| *s != "nothing of gpuhost's")
            .collect();
        let is: BTreeSet<&str> = allowed.iter().map(|a| short(a)).collect();
        assert_eq!(said, is, "docs/ARCHITECTURE.md: what {dir} may import");
        let mine = layer_of(dir).unwrap_or_default();
        for dep in *allowed {
            let dep_dir = LAYERS
                .iter()
                .find(|(_, n, _)| n == dep)
                .map(|(d, _, _)| *d)
                .unwrap_or_default();
            let theirs = layer_of(dep_dir).unwrap_or(u32::MAX);
            assert!(
                theirs < mine,
                "docs/ARCHITECTURE.md: {dir} (layer {mine}) imports {dep_dir} (layer {theirs}), not below it"
            );
        }
    }
    let agent = layer_of("agent").unwrap_or_default();
    assert!(
        rows.iter()
            .filter_map(|r| r[0].parse::<u32>().ok())
            .all(|l| l <= agent),
        "agent is the top layer"
    );
}

#[test]
fn the_types_the_architecture_page_names_are_where_it_says() {
    let text = architecture_md();
    let rows = table_rows(&text, |c| c.starts_with('`') && c.ends_with('`'));
    let rows: Vec<&Vec<String>> = rows.iter().filter(|r| r[1].ends_with(".rs`")).collect();
    assert!(rows.len() >= 8, "the types table is gone: {rows:?}");
    for r in rows {
        let ty = r[0].trim_matches('`');
        let file = r[1].trim_matches('`');
        let src = std::fs::read_to_string(top().join(file)).unwrap_or_default();
        assert!(
            src.contains(&format!("pub struct {ty}"))
                || src.contains(&format!("pub enum {ty}"))
                || src.contains(&format!("enum {ty} "))
                || src.contains(&format!("struct {ty} ")),
            "docs/ARCHITECTURE.md says {ty} is declared in {file}; it is not"
        );
    }
}

#[test]
fn the_architecture_page_lists_the_allowed_back_edges() {
    let text = architecture_md();
    let section = text.split("## Back-edges").nth(1).unwrap_or_default();
    let listed: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .collect();
    let want: Vec<String> = if BACK_EDGES.is_empty() {
        vec!["(none)".to_string()]
    } else {
        BACK_EDGES
            .iter()
            .map(|(d, f, t)| format!("`{d}`: `{}` → `{}`", shown(f), shown(t)))
            .collect()
    };
    assert_eq!(
        listed
            .iter()
            .map(|l| l.split(" — ").next().unwrap_or_default())
            .collect::<Vec<_>>(),
        want,
        "docs/ARCHITECTURE.md's back-edges are BACK_EDGES"
    );
}

// ---------------------------------------------------------------------------------------------
// The one list of releases (issue 40, item 2): `RELEASES` in host/src/platform.rs. The page
// names the file with a recipe to add a release; every release is in `gpuhost bundle --os`, the
// built-in profiles and docs/support-matrix.md; no other production file decides by a release's
// number.

/// The file that holds the releases.
const RELEASES_FILE: &str = "host/src/platform.rs";

/// The section of docs/ARCHITECTURE.md under `heading`, up to the next `## `.
fn section<'t>(text: &'t str, heading: &str) -> &'t str {
    text.split(heading)
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap_or_default()
}

#[test]
fn the_architecture_page_names_the_one_list_of_releases_with_a_recipe() {
    let text = architecture_md();
    let releases = section(&text, "## The releases");
    assert!(
        releases.contains(&format!("`RELEASES` in `{RELEASES_FILE}`")),
        "docs/ARCHITECTURE.md has no section \"## The releases\" naming `RELEASES` in `{RELEASES_FILE}`"
    );
    let recipe = releases
        .split("To add a release")
        .nth(1)
        .unwrap_or_default();
    let steps: Vec<&str> = recipe
        .lines()
        .filter(|l| {
            l.split_once(". ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
        })
        .collect();
    assert!(
        steps.first().is_some_and(|s| s.contains(RELEASES_FILE)),
        "the recipe's first step adds the row to {RELEASES_FILE}: {steps:?}"
    );
    for named in [
        "profiles/src/lib.rs",
        "docs/support-matrix.md",
        "gpuhost generate support-matrix",
        "tests/world/",
    ] {
        assert!(recipe.contains(named), "the recipe does not name {named}");
    }
    for file in [
        RELEASES_FILE,
        "profiles/src/lib.rs",
        "tests/world/gen.py",
        "tests/world/mkroot.sh",
    ] {
        assert!(
            top().join(file).is_file(),
            "the recipe names {file}, which is gone"
        );
    }
    let platform = std::fs::read_to_string(top().join(RELEASES_FILE)).unwrap_or_default();
    assert!(
        platform.contains("pub const RELEASES") && platform.contains("pub struct MinorQuirk"),
        "{RELEASES_FILE} holds RELEASES and MinorQuirk"
    );
}

/// `[possible values: a, b]` of the `--{flag}` line of a `--help`.
fn possible_values(help: &str, flag: &str) -> Vec<String> {
    help.lines()
        .find(|l| l.trim_start().starts_with(&format!("--{flag} ")))
        .and_then(|l| l.split("[possible values: ").nth(1))
        .and_then(|v| v.split(']').next())
        .map(|v| v.split(", ").map(str::to_string).collect())
        .unwrap_or_default()
}

#[test]
fn every_release_is_in_bundle_os_the_profiles_and_the_support_matrix() {
    use gpuhost_host::platform::{self, RELEASES};
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_gpuhost"))
        .args(["bundle", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let names: Vec<String> = RELEASES.iter().map(platform::Release::name).collect();
    assert_eq!(possible_values(&help, "os"), names, "bundle --os: {help}");
    assert_eq!(
        possible_values(&help, "arch"),
        platform::arches(),
        "bundle --arch: {help}"
    );
    let profiles: Vec<&str> = gpuhost_profile::builtin_list()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let matrix = std::fs::read_to_string(top().join("docs/support-matrix.md")).unwrap_or_default();
    for r in &RELEASES {
        let name = r.name();
        assert!(
            profiles.contains(&format!("{name}-uek").as_str()),
            "no built-in profile {name}-uek"
        );
        assert_eq!(
            profiles.contains(&format!("{name}-rhck").as_str()),
            !r.rhck_arches.is_empty(),
            "built-in profile {name}-rhck"
        );
        for arch in r.arches {
            assert!(
                matrix.contains(&format!("| Oracle Linux {} | {arch} |", r.major)),
                "docs/support-matrix.md has no row for Oracle Linux {} {arch}",
                r.major
            );
        }
    }
    for p in &profiles {
        let release = p.split('-').next().unwrap_or_default();
        assert!(
            names.iter().any(|n| n == release),
            "built-in profile {p} is for {release}, which {RELEASES_FILE} does not list"
        );
    }
    for row in table_rows(&matrix, |c| c.starts_with("Oracle Linux ")) {
        let major = row[0].trim_start_matches("Oracle Linux ").parse().ok();
        assert!(
            major.is_some_and(|m| platform::release(m).is_some()),
            "docs/support-matrix.md has a row for {}, which {RELEASES_FILE} does not list",
            row[0]
        );
    }
}

/// The production text of a source file: up to its first `#[cfg(test)]`, each line's literals
/// emptied and its comment cut.
fn production_code(text: &str) -> Vec<String> {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .map(code_of)
        .collect()
}

/// Where a line compares a release's major to a number: `os.major == 8`, `os_major < 10`.
fn compares_a_major_to_a_number(line: &str) -> bool {
    ["os.major", "os_major"].iter().any(|field| {
        line.match_indices(field).any(|(i, _)| {
            let after = line[i + field.len()..].trim_start();
            let rest = ["==", "!=", "<=", ">=", "<", ">"]
                .iter()
                .find_map(|op| after.strip_prefix(op));
            rest.is_some_and(|r| r.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        })
    })
}

#[test]
fn no_production_file_but_the_table_decides_by_a_release_number() {
    assert!(compares_a_major_to_a_number(
        "if ctx.profile.os.major == 8 {"
    ));
    assert!(compares_a_major_to_a_number("m.os_major>=10"));
    assert!(!compares_a_major_to_a_number("name.os_major != major"));
    assert!(!compares_a_major_to_a_number("cuda.major > 11"));
    let mut found = Vec::new();
    for dir in CRATES {
        let mut stack = vec![top().join(dir).join("src")];
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(
                    std::fs::read_dir(&p)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path()),
                );
                continue;
            }
            let rel = p
                .strip_prefix(top())
                .unwrap_or(&p)
                .to_string_lossy()
                .replace('\\', "/");
            if p.extension().is_none_or(|e| e != "rs") || rel == RELEASES_FILE {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for (n, line) in production_code(&text).iter().enumerate() {
                if compares_a_major_to_a_number(line) {
                    found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a release's number decides outside {RELEASES_FILE} (make it a field of the release):\n{}",
        found.join("\n")
    );
}
