//! Every profile key, its meaning and its default, for `gpuhost profiles show NAME --all` and
//! `gpuhost profiles keys`.
//!
//! Nothing here is a second list of keys: the keys, their types, their defaults and their
//! meaning (the `///` comments) come from the same structs serde validates profiles with
//! ([`Profile`] and the sections it holds), through two views of them:
//! - their JSON Schema, derived by `schemars` from the struct definitions and their serde
//!   attributes (`default`, `rename_all`, `deny_unknown_fields`): types, defaults, doc comments;
//! - serde's own field lists (what `deserialize_struct` is handed, in declaration order), read by
//!   driving the derived `Deserialize` with a tracer: the order keys are shown in.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{anyhow, Result};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value as Json;

use crate::{one_line, Profile};

/// One key of a table.
#[derive(Clone, Debug)]
pub struct Key {
    pub name: String,
    /// One line: what the key means (its doc comment).
    pub meaning: String,
    /// The default serde fills in when the key is absent, if it has one.
    pub default: Option<toml::Value>,
    pub kind: Kind,
}

#[derive(Clone, Debug)]
pub enum Kind {
    /// A value: `string`, `integer`, `boolean`, `array of strings`, `one of: a, b`.
    Value(String),
    /// A table (`[driver]`).
    Table(Vec<Key>),
    /// An array of tables (`[[prefix_links]]`).
    Tables(Vec<Key>),
}

/// The keys of a profile, in the order the profile structs declare them.
pub fn tree() -> Result<Vec<Key>> {
    let schema = serde_json::to_value(schemars::schema_for!(Profile))?;
    let order = field_order();
    let defs = schema.get("$defs").cloned().unwrap_or(Json::Null);
    table(&schema, "Profile", &defs, &order)
}

/// Every key as a dotted path (`driver.local_repo_rpm`): what `--set` takes. An array of
/// tables is one key (`prefix_links`, set as a whole).
pub fn keys() -> Result<Vec<(String, Key)>> {
    fn walk(prefix: &str, keys: &[Key], out: &mut Vec<(String, Key)>) {
        for k in keys {
            let path = if prefix.is_empty() {
                k.name.clone()
            } else {
                format!("{prefix}.{}", k.name)
            };
            match &k.kind {
                Kind::Table(sub) => walk(&path, sub, out),
                Kind::Value(_) | Kind::Tables(_) => out.push((path, k.clone())),
            }
        }
    }
    let mut out = Vec::new();
    walk("", &tree()?, &mut out);
    Ok(out)
}

/// A resolved profile as TOML with every key: set keys with their values (and the default when
/// the value differs from it), unset ones commented out, each after one line of meaning. The
/// text parses back to the same profile.
pub fn render_all(profile: &Profile) -> Result<String> {
    let value = toml::Value::try_from(profile)?;
    let table = value
        .as_table()
        .ok_or_else(|| anyhow!("profile {} did not serialize to a table", profile.name))?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Profile {}, resolved, with every key: unset keys are commented out; each key follows\n\
         # a line saying what it means. A profile file may start with extends = \"NAME\" (a built-in\n\
         # profile or a path) and override any key; --set key.path=value overrides one.",
        profile.name
    );
    render_table(&mut out, "", &tree()?, table);
    Ok(out)
}

fn render_table(out: &mut String, path: &str, keys: &[Key], values: &toml::Table) {
    let join = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    for k in keys {
        let Kind::Value(kind) = &k.kind else { continue };
        if !k.meaning.is_empty() {
            let _ = writeln!(out, "# {}", k.meaning);
        }
        let choices = if kind.starts_with("one of") {
            format!("  # {kind}")
        } else {
            String::new()
        };
        match values.get(&k.name) {
            Some(v) => {
                let default = match &k.default {
                    Some(d) if d != v => format!("  # default: {d}"),
                    _ => String::new(),
                };
                let _ = writeln!(out, "{} = {v}{default}{choices}", k.name);
            }
            None => {
                let _ = writeln!(out, "# {} = <{kind}>  (unset)", k.name);
            }
        }
    }
    for k in keys {
        let full = join(&k.name);
        match &k.kind {
            Kind::Value(_) => {}
            Kind::Table(sub) => {
                out.push('\n');
                if !k.meaning.is_empty() {
                    let _ = writeln!(out, "# {}", k.meaning);
                }
                let _ = writeln!(out, "[{full}]");
                let empty = toml::Table::new();
                let v = values.get(&k.name).and_then(|v| v.as_table());
                render_table(out, &full, sub, v.unwrap_or(&empty));
            }
            Kind::Tables(sub) => {
                out.push('\n');
                let items: Vec<&toml::Table> = values
                    .get(&k.name)
                    .and_then(|v| v.as_array())
                    .map(|a| a.iter().filter_map(|t| t.as_table()).collect())
                    .unwrap_or_default();
                if !k.meaning.is_empty() {
                    let _ = writeln!(out, "# {}", k.meaning);
                }
                if items.is_empty() {
                    let _ = writeln!(out, "# (none set) e.g.:\n# [[{full}]]");
                    for f in sub {
                        if let Kind::Value(kind) = &f.kind {
                            let _ = writeln!(out, "# {} = <{kind}>  # {}", f.name, f.meaning);
                        }
                    }
                }
                for item in items {
                    let _ = writeln!(out, "[[{full}]]");
                    render_table(out, &full, sub, item);
                }
            }
        }
    }
}

/// The keys of one struct's schema (`def` is its schema object, `name` its Rust name).
fn table(
    def: &Json,
    name: &str,
    defs: &Json,
    order: &BTreeMap<&'static str, &'static [&'static str]>,
) -> Result<Vec<Key>> {
    let Some(props) = def.get("properties").and_then(Json::as_object) else {
        return Ok(Vec::new());
    };
    // serde's declaration order; anything else the schema has (there should be nothing) after.
    let declared: &[&str] = order.get(name).copied().unwrap_or(&[]);
    let mut names: Vec<&str> = declared
        .iter()
        .copied()
        .filter(|n| props.contains_key(*n))
        .collect();
    names.extend(
        props
            .keys()
            .map(String::as_str)
            .filter(|n| !declared.contains(n)),
    );
    let mut keys = Vec::new();
    for n in names {
        let p = &props[n];
        let target = referenced(p, defs);
        let meaning = one_line(
            p.get("description")
                .or_else(|| target.and_then(|(_, d)| d.get("description")))
                .and_then(Json::as_str)
                .unwrap_or_default(),
        );
        let default = p
            .get("default")
            .filter(|d| !d.is_null())
            .and_then(|d| toml::Value::try_from(d).ok());
        let kind = match target {
            Some((tn, d)) if d.get("type").and_then(Json::as_str) == Some("object") => {
                Kind::Table(table(d, tn, defs, order)?)
            }
            Some((_, d)) => Kind::Value(value_kind(d, defs)),
            None if type_of(p) == Some("array") => {
                match p.get("items").and_then(|i| referenced(i, defs)) {
                    Some((tn, d)) if d.get("type").and_then(Json::as_str) == Some("object") => {
                        Kind::Tables(table(d, tn, defs, order)?)
                    }
                    _ => Kind::Value(value_kind(p, defs)),
                }
            }
            None => Kind::Value(value_kind(p, defs)),
        };
        keys.push(Key {
            name: n.to_string(),
            meaning,
            default,
            kind,
        });
    }
    Ok(keys)
}

/// The definition a property refers to (`$ref`, or the non-null member of an `anyOf`).
fn referenced<'a>(p: &'a Json, defs: &'a Json) -> Option<(&'a str, &'a Json)> {
    let r = p.get("$ref").and_then(Json::as_str).or_else(|| {
        p.get("anyOf")?
            .as_array()?
            .iter()
            .find_map(|m| m.get("$ref").and_then(Json::as_str))
    })?;
    let name = r.strip_prefix("#/$defs/")?;
    Some((name, defs.get(name)?))
}

/// The JSON type of a schema, without `null` (an unset Option).
fn type_of(s: &Json) -> Option<&str> {
    match s.get("type")? {
        Json::String(t) => Some(t.as_str()),
        Json::Array(ts) => ts.iter().filter_map(Json::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

/// How a value's type reads in `--all`: `string`, `array of strings`, `one of: a, b`.
fn value_kind(s: &Json, defs: &Json) -> String {
    let consts: Vec<&str> = match (s.get("enum"), s.get("oneOf")) {
        (Some(Json::Array(e)), _) => e.iter().filter_map(Json::as_str).collect(),
        (_, Some(Json::Array(o))) => o
            .iter()
            .filter_map(|m| m.get("const").and_then(Json::as_str))
            .collect(),
        _ => Vec::new(),
    };
    if !consts.is_empty() {
        return format!("one of: {}", consts.join(", "));
    }
    match type_of(s) {
        Some("array") => {
            let item = s
                .get("items")
                .map(|i| match referenced(i, defs) {
                    Some((_, d)) => value_kind(d, defs),
                    None => value_kind(i, defs),
                })
                .unwrap_or_else(|| "value".to_string());
            format!("array of {item}s")
        }
        Some(t) => t.to_string(),
        None => "value".to_string(),
    }
}

/// serde's field lists of every struct in a profile, keyed by struct name, in declaration
/// order: the derived `Deserialize` hands them to `deserialize_struct`; the tracer records them
/// and feeds each field a placeholder so that nested structs are reached too.
fn field_order() -> BTreeMap<&'static str, &'static [&'static str]> {
    let seen = RefCell::new(BTreeMap::new());
    // The placeholder profile itself is of no use; only what the tracer saw is.
    let _ = Profile::deserialize(Tracer { seen: &seen });
    seen.into_inner()
}

type Seen = RefCell<BTreeMap<&'static str, &'static [&'static str]>>;

#[derive(Clone, Copy)]
struct Tracer<'s> {
    seen: &'s Seen,
}

type TraceError = de::value::Error;

impl<'de> de::Deserializer<'de> for Tracer<'_> {
    type Error = TraceError;

    fn deserialize_any<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, TraceError> {
        Err(de::Error::custom("the tracer reads only typed fields"))
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, TraceError> {
        self.seen.borrow_mut().insert(name, fields);
        v.visit_map(Fields {
            tracer: self,
            fields,
            next: 0,
        })
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_some(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_seq(One {
            tracer: self,
            done: false,
        })
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, TraceError> {
        let first = variants.first().copied().unwrap_or_default();
        v.visit_enum(first.into_deserializer())
    }
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_bool(false)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_i64(0)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_u32(0)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_u64(0)
    }
    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_str("")
    }
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_str("")
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        v.visit_str("")
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u16 u128 f32 f64 char bytes byte_buf unit unit_struct
        newtype_struct tuple tuple_struct map ignored_any
    }
}

/// A struct's fields, each once, each with a placeholder value.
struct Fields<'s> {
    tracer: Tracer<'s>,
    fields: &'static [&'static str],
    next: usize,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = TraceError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, TraceError> {
        let Some(field) = self.fields.get(self.next) else {
            return Ok(None);
        };
        seed.deserialize((*field).into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, TraceError> {
        self.next += 1;
        seed.deserialize(self.tracer)
    }
}

/// A sequence of one placeholder element (so that the element type is traced too).
struct One<'s> {
    tracer: Tracer<'s>,
    done: bool,
}

impl<'de> SeqAccess<'de> for One<'_> {
    type Error = TraceError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, TraceError> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(None);
        }
        seed.deserialize(self.tracer).map(Some)
    }
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed lookup fails the test
mod tests {
    use super::*;

    fn find<'a>(keys: &'a [(String, Key)], path: &str) -> &'a Key {
        keys.iter()
            .find(|(p, _)| p == path)
            .map(|(_, k)| k)
            .unwrap_or_else(|| panic!("no key {path}"))
    }

    #[test]
    fn keys_come_in_declaration_order_with_meaning_default_and_type() -> Result<()> {
        let keys = keys()?;
        let paths: Vec<&str> = keys.iter().map(|(p, _)| p.as_str()).collect();
        let pos = |p: &str| paths.iter().position(|x| *x == p).unwrap_or(usize::MAX);
        // the profile's sections in the order Profile declares them
        assert!(pos("description") < pos("os.major"));
        assert!(pos("os.major") < pos("kernel.flavour"));
        assert!(pos("kernel.flavour") < pos("driver.local_repo_rpm"));
        assert!(pos("driver.local_repo_rpm") < pos("driver.sha256"));
        assert!(pos("driver.stream") < pos("docker.repo"));
        assert!(pos("docker.daemon.ulimit_stack") < pos("container_toolkit.repo"));
        assert!(pos("prefix_links") < pos("status.expect_gpus"));
        let stream = find(&keys, "driver.stream");
        assert_eq!(stream.default, None, "unset: from the flavour");
        assert!(stream.meaning.contains("module stream"), "{stream:?}");
        let flavour = find(&keys, "driver.flavour");
        assert_eq!(flavour.default, Some(toml::Value::String("auto".into())));
        assert!(
            matches!(&flavour.kind, Kind::Value(k) if k == "one of: auto, open, proprietary"),
            "{flavour:?}"
        );
        assert!(
            matches!(&find(&keys, "driver.install").kind, Kind::Value(k) if k == "one of: module, full, compute-only"),
            "{:?}",
            find(&keys, "driver.install")
        );
        let conflicts = find(&keys, "docker.conflicts");
        assert!(
            matches!(&conflicts.kind, Kind::Value(k) if k == "one of: fail, remove, allowerasing"),
            "{conflicts:?}"
        );
        assert!(matches!(
            &find(&keys, "status.expect_gpus").kind,
            Kind::Value(k) if k == "integer"
        ));
        assert!(matches!(
            &find(&keys, "kernel.devel_packages").kind,
            Kind::Value(k) if k == "array of strings"
        ));
        assert!(matches!(&find(&keys, "prefix_links").kind, Kind::Tables(f) if f.len() == 2));
        // every key says what it means
        for (p, k) in &keys {
            assert!(!k.meaning.is_empty(), "{p} has no doc comment");
        }
        Ok(())
    }

    /// The listed keys are exactly the keys serde accepts: each listed key, set, is never an
    /// unknown field (a value of the wrong type is refused as that key's error, or taken as
    /// text by a string key), one letter more is; and the schema's tables hold exactly the
    /// fields the derived `Deserialize` knows.
    #[test]
    fn the_listed_keys_are_the_keys_validation_accepts() -> Result<()> {
        for (path, _) in keys()? {
            let e = Profile::resolve("ol8-uek", &[format!("{path}={{wrong = 1}}")])
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default();
            assert!(
                !e.contains("unknown field") && (e.is_empty() || e.contains(&path)),
                "{path}: {e}"
            );
            let e = Profile::resolve("ol8-uek", &[format!("{path}x=1")])
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default();
            assert!(e.contains("unknown field"), "{path}x: {e}");
        }
        // and the schema's tables hold exactly the fields serde's derive knows (the tracer's lists)
        let schema = serde_json::to_value(schemars::schema_for!(Profile))?;
        for (name, fields) in field_order() {
            let def = if name == "Profile" {
                &schema
            } else {
                &schema["$defs"][name]
            };
            let mut props: Vec<&str> = def["properties"]
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let mut fields = fields.to_vec();
            props.sort_unstable();
            fields.sort_unstable();
            assert_eq!(props, fields, "{name}");
        }
        Ok(())
    }

    /// What `profiles show --all` prints is for users: no Rust doc syntax (intra-doc links,
    /// paths into gpuhost's crates) in any key's meaning.
    #[test]
    fn key_meanings_carry_no_rust_doc_syntax() -> Result<()> {
        fn walk(keys: &[Key], bad: &mut Vec<String>) {
            for k in keys {
                if k.meaning.contains("[`")
                    || k.meaning.contains("`]")
                    || k.meaning.contains("crate::")
                    || k.meaning.contains("gpuhost_")
                {
                    bad.push(format!("{}: {}", k.name, k.meaning));
                }
                match &k.kind {
                    Kind::Table(sub) | Kind::Tables(sub) => walk(sub, bad),
                    Kind::Value(_) => {}
                }
            }
        }
        let mut bad = Vec::new();
        walk(&tree()?, &mut bad);
        assert!(bad.is_empty(), "{bad:#?}");
        Ok(())
    }

    #[test]
    fn render_all_parses_back_to_the_same_profile_and_comments_unset_keys() -> Result<()> {
        for (name, _) in crate::BUILTIN {
            let p = Profile::resolve(name, &[])?;
            let text = render_all(&p)?;
            let back: Profile = toml::from_str(&text)?;
            assert_eq!(toml::Value::try_from(&back)?, toml::Value::try_from(&p)?);
            for key in ["local_repo_rpm", "sha256", "expect_gpus", "image"] {
                assert!(
                    text.lines()
                        .any(|l| l.starts_with(&format!("# {key} = <")) && l.ends_with("(unset)")),
                    "{name}: {key} not shown unset:\n{text}"
                );
            }
            assert!(text.contains("# [[prefix_links]]"), "{text}");
        }
        let p = Profile::resolve(
            "ol8-uek",
            &[
                "driver.stream=535-dkms".into(),
                "status.expect_gpus=8".into(),
            ],
        )?;
        let text = render_all(&p)?;
        assert!(text.contains("\nstream = \"535-dkms\"\n"), "{text}");
        assert!(
            text.contains("\nflavour = \"auto\"  # one of: auto, open, proprietary\n"),
            "{text}"
        );
        assert!(text.contains("\nexpect_gpus = 8\n"), "{text}");
        Ok(())
    }
}
