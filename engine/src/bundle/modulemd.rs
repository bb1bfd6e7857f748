//! Module metadata (`modules.yaml`) for a bundle's repo: the documents of the source repos,
//! split, classified and filtered, each kept word for word.
//!
//! A repo's module metadata is a stream of YAML documents (`---` … `...`): `modulemd` (one per
//! module stream and context: its profiles and the NEVRAs of its `artifacts`),
//! `modulemd-defaults` (a module's default stream and profiles), and the less common
//! `modulemd-obsoletes` and `modulemd-translations`. dnf hides the packages a module stream
//! lists as artifacts unless that stream is enabled or default, and installs
//! `@nvidia-driver:<stream>/<profile>` only when the stream's document is in an enabled repo —
//! so a bundle that carries the driver packages must carry their module documents too.
//!
//! Only the fields that decide what to keep are read (`document`, the module name, the stream,
//! `artifacts.rpms`), with a line reader that knows the block layout libmodulemd and NVIDIA's
//! `genmodules.py` write; the documents themselves are copied verbatim.

use std::collections::{BTreeMap, BTreeSet};

/// One YAML document of a modules.yaml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Doc {
    /// The document as it was, from `---` to `...`, ending in a newline.
    pub text: String,
    /// `modulemd`, `modulemd-defaults`, `modulemd-obsoletes`, `modulemd-translations`, …
    pub kind: String,
    /// The module's name (`data.name`, or `data.module` in the other kinds).
    pub module: String,
    /// `data.stream` (a `modulemd` document's stream; the default stream of a defaults one).
    pub stream: Option<String>,
    /// `data.artifacts.rpms`: `name-epoch:version-release.arch`.
    pub artifacts: Vec<String>,
}

/// Split a modules.yaml into its documents.
pub(crate) fn split(yaml: &str) -> Vec<Doc> {
    let mut docs = Vec::new();
    let mut body: Vec<&str> = Vec::new();
    let mut open = false;
    let flush = |body: &mut Vec<&str>, docs: &mut Vec<Doc>| {
        if body
            .iter()
            .any(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            docs.push(parse(body));
        }
        body.clear();
    };
    for line in yaml.lines() {
        if line.starts_with("---") {
            flush(&mut body, &mut docs);
            open = true;
            continue;
        }
        if line.starts_with("...") {
            flush(&mut body, &mut docs);
            open = false;
            continue;
        }
        if open || !line.trim().is_empty() {
            open = true;
            body.push(line);
        }
    }
    flush(&mut body, &mut docs);
    docs
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// A scalar as YAML writes it: quotes removed, a trailing comment dropped.
fn scalar(v: &str) -> String {
    let v = v.trim();
    if let Some(inner) = v
        .strip_prefix('"')
        .and_then(|r| r.split_once('"').map(|(a, _)| a))
    {
        return inner.to_string();
    }
    if let Some(inner) = v
        .strip_prefix('\'')
        .and_then(|r| r.split_once('\'').map(|(a, _)| a))
    {
        return inner.to_string();
    }
    v.split(" #").next().unwrap_or(v).trim().to_string()
}

/// `key: value` of a line, when the line is a mapping entry.
fn entry(line: &str) -> Option<(&str, &str)> {
    let t = line.trim_start();
    if t.starts_with('#') || t.starts_with('-') {
        return None;
    }
    let (k, v) = t.split_once(':')?;
    (!k.is_empty() && !k.contains(' ')).then_some((k, v))
}

/// One document, as YAML writes it standalone: between `---` and `...`.
fn doc_text(lines: &[&str]) -> String {
    let mut text = String::from("---\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    text.push_str("...\n");
    text
}

fn parse(lines: &[&str]) -> Doc {
    let mut kind = String::new();
    let mut module = String::new();
    let mut stream = None;
    let mut artifacts = Vec::new();
    // The indentation of `data`'s own keys, once seen.
    let mut data_indent: Option<usize> = None;
    let mut in_data = false;
    // Inside `artifacts:` (its indent), inside its `rpms:` (its indent).
    let mut artifacts_at: Option<usize> = None;
    let mut rpms_at: Option<usize> = None;
    for line in lines {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let ind = indent(line);
        if ind == 0 {
            in_data = false;
            artifacts_at = None;
            rpms_at = None;
            if let Some((k, v)) = entry(line) {
                match k {
                    "document" => kind = scalar(v),
                    "data" => in_data = true,
                    _ => {}
                }
            }
            continue;
        }
        if !in_data {
            continue;
        }
        if let Some(r) = rpms_at {
            let t = line.trim_start();
            if ind >= r && t.starts_with('-') {
                artifacts.push(scalar(t.trim_start_matches('-')));
                continue;
            }
            if ind > r {
                continue;
            }
            rpms_at = None;
        }
        if let Some(a) = artifacts_at {
            if ind > a {
                if let Some(("rpms", v)) = entry(line) {
                    let v = v.trim();
                    if let Some(flow) = v.strip_prefix('[').and_then(|f| f.strip_suffix(']')) {
                        artifacts.extend(flow.split(',').map(scalar).filter(|s| !s.is_empty()));
                    } else {
                        rpms_at = Some(ind);
                    }
                }
                continue;
            }
            artifacts_at = None;
        }
        let di = *data_indent.get_or_insert(ind);
        if ind != di {
            continue;
        }
        if let Some((k, v)) = entry(line) {
            match k {
                "name" | "module" => module = scalar(v),
                "stream" => stream = Some(scalar(v)),
                "artifacts" => artifacts_at = Some(ind),
                _ => {}
            }
        }
    }
    Doc {
        text: doc_text(lines),
        kind,
        module,
        stream,
        artifacts,
    }
}

/// What the plan asks of the module metadata.
#[derive(Clone, Debug, Default)]
pub(crate) struct Wanted {
    /// Modules the plan installs a stream of (`nvidia-driver` → `latest-dkms`): exactly those
    /// streams are kept of them.
    pub streams: BTreeMap<String, BTreeSet<String>>,
    /// Modules the plan disables or resets (`container-tools`): kept whole, so that dnf knows
    /// what it is asked to disable.
    pub whole: BTreeSet<String>,
}

/// The documents a bundle keeps, given the NEVRAs (`name-epoch:version-release.arch`) of its
/// packages:
/// - a stream of a module the plan installs: when it is the planned stream;
/// - a stream of a module the plan disables or resets: always;
/// - any other stream: when one of its artifacts is in the bundle (dnf would otherwise treat
///   the package differently offline than online);
/// - defaults, obsoletes and translations: of the modules some stream of which is kept.
///
/// Identical documents (the same stream in two repos) are kept once.
pub(crate) fn keep<'d>(
    docs: &'d [Doc],
    nevras: &BTreeSet<String>,
    wanted: &Wanted,
) -> Vec<&'d Doc> {
    let mut kept_modules: BTreeSet<&str> = BTreeSet::new();
    let mut keep_doc = vec![false; docs.len()];
    for (i, d) in docs.iter().enumerate() {
        if d.kind != "modulemd" {
            continue;
        }
        let keep = if wanted.whole.contains(&d.module) {
            true
        } else if let Some(streams) = wanted.streams.get(&d.module) {
            d.stream.as_ref().is_some_and(|s| streams.contains(s))
        } else {
            d.artifacts.iter().any(|a| nevras.contains(a))
        };
        if keep {
            keep_doc[i] = true;
            kept_modules.insert(&d.module);
        }
    }
    for (i, d) in docs.iter().enumerate() {
        if d.kind != "modulemd"
            && (kept_modules.contains(d.module.as_str()) || wanted.whole.contains(&d.module))
        {
            keep_doc[i] = true;
        }
    }
    let mut seen = BTreeSet::new();
    docs.iter()
        .zip(keep_doc)
        .filter(|(d, k)| *k && seen.insert(d.text.as_str()))
        .map(|(d, _)| d)
        .collect()
}

/// `name:stream` of the kept stream documents, sorted, for the manifest and messages.
pub(crate) fn streams_of(docs: &[&Doc]) -> Vec<String> {
    let mut out: Vec<String> = docs
        .iter()
        .filter(|d| d.kind == "modulemd")
        .map(|d| format!("{}:{}", d.module, d.stream.as_deref().unwrap_or("")))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The `href` of the `modules` metadata in a repo's `repomd.xml`.
pub(crate) fn modules_href(repomd: &str) -> Option<String> {
    let start = repomd
        .find("<data type=\"modules\">")
        .or_else(|| repomd.find("<data type='modules'>"))?;
    let rest = &repomd[start..];
    let end = rest.find("</data>").unwrap_or(rest.len());
    let data = &rest[..end];
    let at = data.find("<location")?;
    let loc = &data[at..];
    let h = loc.find("href=")?;
    let after = &loc[h + 5..];
    let quote = after.chars().next()?;
    if quote != '"' && quote != '\'' {
        return None;
    }
    let value = &after[1..];
    let close = value.find(quote)?;
    Some(value[..close].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout NVIDIA's genmodules.py writes (the test world's local repos copy it).
    const NVIDIA: &str = r#"---
document: modulemd
version: 2
data:
  name: nvidia-driver
  stream: "535"
  version: 20230815000000
  context: "be2793cd"
  arch: x86_64
  summary: Nvidia driver for 535 branch
  description: >-
    This package provides the most recent NVIDIA display driver.
  profiles:
    default:
      description: Default installation
      rpms:
      - nvidia-driver
      - nvidia-driver-cuda
  artifacts:
    rpms:
      - nvidia-driver-3:535.104.05-1.el8.x86_64
      - kmod-nvidia-535.104.05-4.18.0-553.16.1-3:535.104.05-3.el8_10.x86_64
...
---
document: modulemd
version: 2
data:
  name: nvidia-driver
  stream: "latest-dkms"
  version: 20230815000003
  context: "1481d0a0"
  arch: x86_64
  summary: Nvidia driver for latest-dkms branch
  profiles:
    default:
      rpms:
      - nvidia-driver
  artifacts:
    rpms:
      - nvidia-driver-3:535.104.05-1.el8.x86_64
      - kmod-nvidia-latest-dkms-3:535.104.05-1.el8.x86_64
...
---
document: modulemd-defaults
version: 1
data:
  module: nvidia-driver
  stream: "latest-dkms"
  profiles:
    "535": [default]
    "latest-dkms": [default]
...
"#;

    /// libmodulemd's layout (Oracle's appstream): artifacts at the data level, rpms listed at
    /// the key's own indentation, a defaults document for another module.
    const APPSTREAM: &str = "---\ndocument: modulemd\nversion: 2\ndata:\n    name: container-tools\n    stream: ol8\n    version: 8100020240101\n    context: 20125149\n    arch: x86_64\n    summary: Tools for containers\n    dependencies:\n    - buildrequires:\n        platform: [el8]\n    artifacts:\n        rpms:\n        - runc-1:1.1.12-4.module+el8.10.0+90370+a83d1e6b.x86_64\n        - podman-4:4.9.4-12.module+el8.10.0+90370+a83d1e6b.x86_64\n...\n---\ndocument: modulemd-defaults\nversion: 1\ndata:\n    module: container-tools\n    stream: ol8\n    profiles:\n        ol8: [common]\n...\n---\ndocument: modulemd\nversion: 2\ndata:\n    name: perl\n    stream: \"5.26\"\n    artifacts:\n        rpms: [perl-4:5.26.3-422.el8.x86_64, perl-libs-4:5.26.3-422.el8.x86_64]\n...\n";

    #[test]
    fn reads_nvidias_module_documents() {
        let docs = split(NVIDIA);
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[0].kind, "modulemd");
        assert_eq!(docs[0].module, "nvidia-driver");
        assert_eq!(docs[0].stream.as_deref(), Some("535"));
        assert_eq!(
            docs[1].artifacts,
            vec![
                "nvidia-driver-3:535.104.05-1.el8.x86_64",
                "kmod-nvidia-latest-dkms-3:535.104.05-1.el8.x86_64"
            ]
        );
        assert_eq!(docs[2].kind, "modulemd-defaults");
        assert_eq!(docs[2].module, "nvidia-driver");
        assert_eq!(docs[2].stream.as_deref(), Some("latest-dkms"));
        // Verbatim: the text of every document, joined, is the input.
        let joined: String = docs.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(joined, NVIDIA);
    }

    #[test]
    fn reads_libmodulemd_layout_and_flow_lists() {
        let docs = split(APPSTREAM);
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[0].module, "container-tools");
        assert_eq!(docs[0].stream.as_deref(), Some("ol8"));
        assert_eq!(docs[0].artifacts.len(), 2);
        assert!(docs[0].artifacts[0].starts_with("runc-1:1.1.12"));
        assert_eq!(docs[1].module, "container-tools");
        assert_eq!(docs[2].module, "perl");
        assert_eq!(docs[2].stream.as_deref(), Some("5.26"));
        assert_eq!(
            docs[2].artifacts,
            vec![
                "perl-4:5.26.3-422.el8.x86_64",
                "perl-libs-4:5.26.3-422.el8.x86_64"
            ]
        );
    }

    fn nevras(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keeps_the_planned_stream_and_its_defaults_only() {
        let docs = split(NVIDIA);
        let mut wanted = Wanted::default();
        wanted
            .streams
            .entry("nvidia-driver".into())
            .or_default()
            .insert("latest-dkms".into());
        // The 535 stream shares nvidia-driver with latest-dkms, but is not planned.
        let bundle = nevras(&[
            "nvidia-driver-3:535.104.05-1.el8.x86_64",
            "kmod-nvidia-latest-dkms-3:535.104.05-1.el8.x86_64",
        ]);
        let kept = keep(&docs, &bundle, &wanted);
        assert_eq!(streams_of(&kept), vec!["nvidia-driver:latest-dkms"]);
        assert!(kept.iter().any(|d| d.kind == "modulemd-defaults"));
    }

    #[test]
    fn keeps_other_modules_by_their_artifacts() {
        let docs = split(APPSTREAM);
        let wanted = Wanted::default();
        let none = keep(
            &docs,
            &nevras(&["docker-ce-3:27.3.1-1.el8.x86_64"]),
            &wanted,
        );
        assert!(none.is_empty(), "{none:?}");
        let perl = keep(
            &docs,
            &nevras(&["perl-libs-4:5.26.3-422.el8.x86_64"]),
            &wanted,
        );
        assert_eq!(streams_of(&perl), vec!["perl:5.26"]);
        let mut disable = Wanted::default();
        disable.whole.insert("container-tools".into());
        let ct = keep(&docs, &BTreeSet::new(), &disable);
        assert_eq!(ct.len(), 2, "the stream and its defaults");
    }

    #[test]
    fn the_same_document_in_two_repos_is_kept_once() {
        let twice = format!("{NVIDIA}{NVIDIA}");
        let docs = split(&twice);
        assert_eq!(docs.len(), 6);
        let mut wanted = Wanted::default();
        wanted
            .streams
            .entry("nvidia-driver".into())
            .or_default()
            .insert("535".into());
        assert_eq!(keep(&docs, &BTreeSet::new(), &wanted).len(), 2);
    }

    #[test]
    fn finds_the_modules_file_in_repomd() {
        let repomd = r#"<repomd><data type="primary"><location href="repodata/primary.xml.gz"/></data>
  <data type="modules">
    <checksum type="sha256">b8a3</checksum>
    <location href="repodata/modules-7c7f3e5d.yaml.gz"/>
  </data></repomd>"#;
        assert_eq!(
            modules_href(repomd).as_deref(),
            Some("repodata/modules-7c7f3e5d.yaml.gz")
        );
        assert_eq!(
            modules_href("<repomd><data type=\"primary\"></data></repomd>"),
            None
        );
    }
}
