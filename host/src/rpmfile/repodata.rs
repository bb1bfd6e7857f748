//! A repo's metadata as createrepo_c writes it, read for one purpose: the checksum each package
//! has in `primary.xml`, so a package extracted from a local repo package is checked against
//! its repo's own metadata before the transaction reads it. `repomd.xml` names `primary` (and
//! its checksum, checked too); `primary.xml` may be gzip, xz, zstd or plain.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use sha2::Digest;

/// `(checksum type, hex)` by the package's `location href` (relative to the repo).
pub type Checksums = HashMap<String, (String, String)>;

/// The checksums of every package the repo at `repo` (a folder on this machine) lists.
pub fn checksums(repo: &Path) -> Result<Checksums> {
    let repomd = std::fs::read_to_string(repo.join("repodata/repomd.xml"))
        .context("reading repodata/repomd.xml")?;
    let data = blocks(&repomd, "<data ")
        .into_iter()
        .find(|d| attr(d, "<data ", "type").as_deref() == Some("primary"))
        .context("repodata/repomd.xml names no primary metadata")?;
    let href = attr(data, "<location ", "href").context("the primary metadata has no location")?;
    if !plain_relative(&href) {
        bail!("repodata/repomd.xml names the primary metadata {href:?}, outside the repo");
    }
    let primary = repo.join(&href);
    let size = std::fs::metadata(&primary)
        .with_context(|| format!("reading {href}"))?
        .len();
    if size > MAX_PRIMARY {
        bail!(
            "{href} is {} MiB, beyond gpuhost's bound of {} MiB for a repo's metadata",
            size >> 20,
            MAX_PRIMARY >> 20
        );
    }
    let raw = std::fs::read(&primary).with_context(|| format!("reading {href}"))?;
    if let Some((ty, want)) = checksum(data) {
        if hex_digest(&ty, &raw)? != want {
            bail!("{href} does not match repodata/repomd.xml's {ty} checksum");
        }
    }
    let xml = decompressed(&href, &raw)?;
    let mut out = Checksums::new();
    for p in blocks(&xml, "<package ") {
        let (Some(href), Some(sum)) = (attr(p, "<location ", "href"), checksum(p)) else {
            continue;
        };
        out.insert(unescape(&href), sum);
    }
    Ok(out)
}

/// Check the packages extracted into the repo folder `repo` (`(href, header digest)`, SHA-256
/// when `digest_is_sha256`) against `sums`: a package the metadata lists with another checksum
/// is an error naming it. The digest of a file whose metadata uses another type is computed
/// from the file.
pub fn verify(repo: &Path, extracted: &[(String, String)], sums: &Checksums) -> Result<()> {
    for (href, digest) in extracted {
        let Some((ty, want)) = sums.get(href) else {
            continue;
        };
        // The header's digest, which the reader held the file's data to, when it is of the
        // metadata's type (told by its length); else the file, when it was extracted.
        let by_header = HEX_LEN
            .iter()
            .any(|&(t, len)| t == ty.as_str() && digest.len() == len);
        let file = repo.join(href);
        let got = if by_header {
            digest.clone()
        } else if !file.exists() {
            bail!("{href} is listed with a {ty} checksum, which its package header's digest cannot be held to (a repo gpuhost cannot check)");
        } else {
            let bytes = std::fs::read(&file).with_context(|| format!("reading {href}"))?;
            hex_digest(ty, &bytes)?
        };
        if &got != want {
            bail!("{href} does not match its repo metadata's {ty} checksum (a damaged or altered package)");
        }
    }
    Ok(())
}

/// The SHA-2 checksum types and the length of their hex digests.
const HEX_LEN: [(&str, usize); 4] = [
    ("sha224", 56),
    ("sha256", 64),
    ("sha384", 96),
    ("sha512", 128),
];

/// The most bytes of a repo's primary metadata read, compressed (64 MiB) and not (128 MiB):
/// a local repo's lists a few hundred packages in well under 1 MiB.
const MAX_PRIMARY: u64 = 64 << 20;
const MAX_PRIMARY_XML: u64 = 128 << 20;

fn hex_digest(ty: &str, data: &[u8]) -> Result<String> {
    Ok(match ty {
        "sha224" => crate::fsutil::hex(&sha2::Sha224::digest(data)),
        "sha256" => crate::fsutil::hex(&sha2::Sha256::digest(data)),
        "sha384" => crate::fsutil::hex(&sha2::Sha384::digest(data)),
        "sha512" => crate::fsutil::hex(&sha2::Sha512::digest(data)),
        other => bail!("a repo metadata checksum of type {other}, which gpuhost does not trust"),
    })
}

fn decompressed(href: &str, raw: &[u8]) -> Result<String> {
    let mut out = String::new();
    let r: Box<dyn Read + '_> = match super::by_suffix(href, raw)? {
        Some(r) => r,
        None if href.ends_with(".xml") => Box::new(raw),
        None => bail!("{href} is compressed in a way gpuhost does not read"),
    };
    r.take(MAX_PRIMARY_XML + 1)
        .read_to_string(&mut out)
        .with_context(|| format!("decompressing {href}"))?;
    if out.len() as u64 > MAX_PRIMARY_XML {
        bail!(
            "{href} decompresses to more than gpuhost's bound of {} MiB",
            MAX_PRIMARY_XML >> 20
        );
    }
    Ok(out)
}

/// The text of each element that starts with `open` (up to the next one).
fn blocks<'a>(xml: &'a str, open: &str) -> Vec<&'a str> {
    let starts: Vec<usize> = xml.match_indices(open).map(|(i, _)| i).collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, &s)| &xml[s..starts.get(k + 1).copied().unwrap_or(xml.len())])
        .collect()
}

/// The value of attribute `name` of the first element starting with `open` in `text`.
fn attr(text: &str, open: &str, name: &str) -> Option<String> {
    let start = text.find(open)?;
    let tag = &text[start..start + text[start..].find('>')?];
    let key = format!(" {name}=\"");
    let v = &tag[tag.find(&key)? + key.len()..];
    Some(v[..v.find('"')?].to_string())
}

/// `<checksum type="sha256" …>hex</checksum>`: its type and value.
fn checksum(text: &str) -> Option<(String, String)> {
    let ty = attr(text, "<checksum ", "type")?;
    let s = text.find("<checksum ")?;
    let body = &text[s + text[s..].find('>')? + 1..];
    let v = body[..body.find("</checksum>")?]
        .trim()
        .to_ascii_lowercase();
    Some((ty, v))
}

fn unescape(s: &str) -> String {
    s.replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
}

fn plain_relative(p: &str) -> bool {
    !p.starts_with('/') && p.split('/').all(|c| !matches!(c, "" | "." | ".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primary_entry_gives_its_location_and_checksum() {
        let xml = r#"<package type="rpm"><name>a</name><checksum type="sha256" pkgid="YES">ABCD</checksum><location href="a-1.rpm"/></package><package type="rpm"><checksum type="sha256" pkgid="YES">ef01</checksum><location href="b&amp;c.rpm"/></package>"#;
        let got: Vec<_> = blocks(xml, "<package ")
            .into_iter()
            .map(|p| {
                (
                    attr(p, "<location ", "href").map(|h| unescape(&h)),
                    checksum(p),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    Some("a-1.rpm".into()),
                    Some(("sha256".into(), "abcd".into()))
                ),
                (
                    Some("b&c.rpm".into()),
                    Some(("sha256".into(), "ef01".into()))
                ),
            ]
        );
    }
}
