//! The fenced blocks of README.md and docs/*.md as the tests read them, so that what a test runs
//! is the text a reader sees (the rules are in tests/docs.rs).
//!
//! ```ignore
//! #[path = "support/docs.rs"]
//! mod docs;
//! let block = docs::delegated(file!(), "README.md", "quick-start");
//! for cmd in block.commands() { /* run it */ }
//! ```
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// Fence languages whose blocks hold commands to type. `console` blocks show each command after
/// `$ ` and its output below it (`[exit N]`: its exit code); the others hold only commands.
pub const SHELL: &[&str] = &["sh", "bash", "shell", "console"];

/// Fence languages that hold no command: synopses and sample output (`text`), files.
pub const NOT_SHELL: &[&str] = &["text", "toml", "json", "yaml", "ini"];

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// README.md, then every docs/*.md by name: the documents whose commands tests run.
pub fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(workspace().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_string());
    docs
}

pub fn read(doc: &str) -> String {
    std::fs::read_to_string(workspace().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"))
}

/// One fenced block.
#[derive(Clone, Debug)]
pub struct Block {
    /// The document, relative to the workspace (`docs/fleets.md`).
    pub doc: String,
    /// The line of its opening fence (1-based).
    pub line: usize,
    /// The fence's language (`sh`, `console`, `text`, …; empty when it names none).
    pub lang: String,
    /// The lines between the fences, the fence's indentation taken off, each ending in `\n`.
    pub text: String,
    /// The HTML comment on the nearest non-blank line above the fence, its inside trimmed.
    pub marker: Option<String>,
    /// The heading the block is under.
    pub heading: String,
}

/// The fenced blocks of `doc`, in order.
pub fn blocks(doc: &str) -> Vec<Block> {
    let text = read(doc);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let t = l.trim_start();
        if let Some(h) = l.strip_prefix('#').filter(|_| !l.starts_with("#!")) {
            if h.starts_with([' ', '#']) {
                heading = l.trim_start_matches('#').trim().to_string();
            }
        }
        let Some(lang) = t.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let indent = l.len() - t.len();
        let start = i;
        let mut body = String::new();
        i += 1;
        while i < lines.len() && lines[i].trim_start() != "```" {
            let b = lines[i];
            body.push_str(
                b.get(indent..)
                    .filter(|_| b.len() >= indent)
                    .unwrap_or(b.trim_start()),
            );
            body.push('\n');
            i += 1;
        }
        assert!(
            i < lines.len(),
            "{doc}:{}: the block is never closed",
            start + 1
        );
        let marker = lines[..start]
            .iter()
            .rev()
            .map(|l| l.trim())
            .find(|l| !l.is_empty())
            .and_then(|l| l.strip_prefix("<!--"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|m| m.trim().to_string());
        out.push(Block {
            doc: doc.to_string(),
            line: start + 1,
            lang: lang.trim().to_string(),
            text: body,
            marker,
            heading: heading.clone(),
        });
        i += 1;
    }
    out
}

/// `tests/newcomer.rs` from `file!()` (`agent/../tests/newcomer.rs` or `tests/newcomer.rs`).
pub fn test_file(file: &str) -> String {
    let i = file.rfind("tests/").unwrap_or(0);
    file[i..].to_string()
}

impl Block {
    pub fn is_shell(&self) -> bool {
        SHELL.contains(&self.lang.as_str())
    }

    /// `(tests/X.rs, KEY)` of a `<!-- run by tests/X.rs: KEY -->` marker.
    pub fn run_by(&self) -> Option<(String, String)> {
        let m = self.marker.as_deref()?.strip_prefix("run by ")?;
        let (test, key) = m.split_once(": ")?;
        Some((test.trim().to_string(), key.trim().to_string()))
    }

    /// The reason of a `<!-- not run by tests: REASON -->` marker.
    pub fn not_run(&self) -> Option<String> {
        let m = self.marker.as_deref()?.strip_prefix("not run by tests:")?;
        Some(m.trim().to_string())
    }

    /// Where the block is, for messages.
    pub fn place(&self) -> String {
        format!("{}:{} (under \"{}\")", self.doc, self.line, self.heading)
    }

    /// The commands, in order, as a shell reads them: a line ending in `\` continues on the
    /// next; blank lines and lines that are only a comment are left out (a trailing comment
    /// stays: bash drops it). In a `console` block, only the lines after `$ `.
    pub fn commands(&self) -> Vec<String> {
        self.console().into_iter().map(|(c, _)| c).collect()
    }

    /// Each command with the lines shown after it (a `console` block's output; empty in others).
    pub fn console(&self) -> Vec<(String, String)> {
        let console = self.lang == "console";
        let mut out: Vec<(String, String)> = Vec::new();
        let mut cont: Option<String> = None;
        for l in self.text.lines() {
            if let Some(mut c) = cont.take() {
                c.push('\n');
                c.push_str(l);
                if l.ends_with('\\') {
                    cont = Some(c);
                } else {
                    out.push((c, String::new()));
                }
                continue;
            }
            let cmd = if console {
                l.strip_prefix("$ ")
            } else {
                Some(l)
            };
            match cmd {
                Some(c) if c.trim().is_empty() || c.trim_start().starts_with('#') => {}
                Some(c) if c.ends_with('\\') => cont = Some(c.to_string()),
                Some(c) => out.push((c.to_string(), String::new())),
                None => {
                    let (_, output) = out
                        .last_mut()
                        .unwrap_or_else(|| panic!("{}: output before any command", self.place()));
                    output.push_str(l);
                    output.push('\n');
                }
            }
        }
        assert!(
            cont.is_none(),
            "{}: the last command continues past the block",
            self.place()
        );
        out
    }
}

/// The block of `doc` marked `<!-- run by CALLER: KEY -->`, for the test file `caller` (its
/// `file!()`) to run: what it runs is then the doc's text, and tests/docs.rs checks that each
/// such marker names a test that reads its block this way.
pub fn delegated(caller: &str, doc: &str, key: &str) -> Block {
    let me = test_file(caller);
    let found: Vec<Block> = blocks(doc)
        .into_iter()
        .filter(|b| b.run_by() == Some((me.clone(), key.to_string())))
        .collect();
    match found.as_slice() {
        [b] => b.clone(),
        [] => panic!("{doc} has no block marked <!-- run by {me}: {key} -->"),
        _ => panic!(
            "{doc} has {} blocks marked <!-- run by {me}: {key} -->",
            found.len()
        ),
    }
}

/// The text between `<!-- checked by CALLER: KEY -->` and the next `<!-- end -->` in `doc`: a
/// list that the test file `caller` compares with what the code does.
pub fn checked(caller: &str, doc: &str, key: &str) -> String {
    let me = test_file(caller);
    let marker = format!("<!-- checked by {me}: {key} -->");
    let text = read(doc);
    let at = text
        .find(&marker)
        .unwrap_or_else(|| panic!("{doc} has no {marker}"));
    assert_eq!(text.matches(&marker).count(), 1, "{doc}: {marker} twice");
    let rest = &text[at + marker.len()..];
    let end = rest
        .find("<!-- end -->")
        .unwrap_or_else(|| panic!("{doc}: no <!-- end --> after {marker}"));
    rest[..end].to_string()
}

/// The `code` spans of `text`, in order.
pub fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}
