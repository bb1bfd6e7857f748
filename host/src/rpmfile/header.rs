//! An RPM file's lead and headers, read by gpuhost itself: the package's identity, the files it
//! carries (path, size, mode, digest, link target) and how its payload is stored. The layout is
//! rpm's own (`lib/header.c`, the "RPM file format" of rpm.org): a 96-byte lead; the signature
//! header, padded to 8 bytes; the main header; then the payload. A header is an index of
//! 16-byte entries (tag, type, offset, count, big-endian) over a data store. Every offset and
//! count is checked against the store before it is read: a crafted file is an error, never a
//! panic or an out-of-bounds read.

use std::io::Read;

use anyhow::{bail, Context, Result};

const LEAD: usize = 96;
const LEAD_MAGIC: [u8; 4] = [0xed, 0xab, 0xee, 0xdb];
const HEADER_MAGIC: [u8; 8] = [0x8e, 0xad, 0xe8, 0x01, 0, 0, 0, 0];
/// rpm's own bound on a header's tags (`hdrchkTags`): 65,535.
const MAX_TAGS: u32 = 0xffff;
/// gpuhost's bound on a header's data: 32 MiB (rpm's `hdrchkData` allows 256 MiB). With the
/// bounds below and the decompressor's (128 MiB, `decode::MEMLIMIT`), reading one package takes
/// at most 256 MiB whatever its header asks for; a header this large lists far more files than
/// a package gpuhost reads (NVIDIA's local repo, driver, toolkit and kmod packages) carries.
pub const MAX_DATA: u32 = 32 << 20;
/// The most values a header's array may hold (files, their directories): 131,072.
pub const MAX_FILES: usize = 1 << 17;
/// The most bytes the paths of a header's files may take together: 16 MiB.
pub const MAX_PATH_BYTES: usize = 16 << 20;

const NAME: u32 = 1000;
const VERSION: u32 = 1001;
const RELEASE: u32 = 1002;
const ARCH: u32 = 1022;
const FILESIZES: u32 = 1028;
const FILEMODES: u32 = 1030;
const FILERDEVS: u32 = 1033;
const FILEMTIMES: u32 = 1034;
const FILEDIGESTS: u32 = 1035;
const FILELINKTOS: u32 = 1036;
const FILEFLAGS: u32 = 1037;
const FILEINODES: u32 = 1096;
const DIRINDEXES: u32 = 1116;
const BASENAMES: u32 = 1117;
const DIRNAMES: u32 = 1118;
const PAYLOADFORMAT: u32 = 1124;
const PAYLOADCOMPRESSOR: u32 = 1125;
const LONGFILESIZES: u32 = 5008;
const FILEDIGESTALGO: u32 = 5011;
const PAYLOADDIGEST: u32 = 5092;
const PAYLOADDIGESTALGO: u32 = 5093;
/// The signature header's SHA-256 of the main header (`RPMSIGTAG_SHA256`).
const SIG_SHA256: u32 = 273;
/// The signature header's signatures: DSA, RSA (header only), PGP, GPG (header and payload),
/// OpenPGP (rpm 4.20).
const SIG_SIGNATURES: [u32; 5] = [267, 268, 1002, 1005, 278];
/// `%ghost` files are listed in the header and never carried in the payload.
const GHOST: u32 = 1 << 6;

/// One file the package's header lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Absolute, as rpm installs it (`/var/cuda-repo-…/x.rpm`).
    pub path: String,
    pub size: u64,
    /// `st_mode`: type and permissions.
    pub mode: u32,
    /// Lower-case hex (empty for what is not a regular file).
    pub digest: String,
    /// A symlink's target (empty otherwise).
    pub link: String,
    /// `%ghost`: listed, never in the payload.
    pub ghost: bool,
    /// What rpm's archive writer puts in the file's `newc` entry from the header
    /// (`rpmfilesStat`), when the header has the arrays.
    pub archived: Option<Archived>,
}

/// The numbers of a file's `newc` entry that rpm takes from the header: its inode number
/// (`FILEINODES`, rpm's own numbering) and its mtime (`FILEMTIMES`); rpm writes the device
/// numbers and the checksum as 0 and takes the mode from `FILEMODES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Archived {
    pub inode: u64,
    pub mtime: u64,
    pub rdev: u64,
}

impl FileInfo {
    pub fn is_file(&self) -> bool {
        self.mode & 0o170000 == 0o100000
    }
    pub fn is_dir(&self) -> bool {
        self.mode & 0o170000 == 0o040000
    }
    pub fn is_link(&self) -> bool {
        self.mode & 0o170000 == 0o120000
    }
}

/// A package file's headers: who it is, what it carries, and where its payload starts.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub release: String,
    pub arch: String,
    pub files: Vec<FileInfo>,
    /// rpm's hash algorithm number for [`FileInfo::digest`] (8: SHA-256).
    pub digest_algo: u32,
    /// `PAYLOADCOMPRESSOR` (`gzip`, `xz`, `zstd`, …), when the header names one.
    pub compressor: Option<String>,
    /// The byte offset of the payload in the file.
    pub payload_at: u64,
    /// `PAYLOADDIGEST` (rpm ≥ 4.14): the SHA-256 (hex) of the payload as stored, when the
    /// header gives it with that algorithm.
    pub payload_sha256: Option<String>,
    /// The signature header's SHA-256 of the main header was there, and matched: the file
    /// list and its digests are the packager's.
    pub header_checked: bool,
    /// The package carries a signature (checked by `rpm -K` against the root's keys).
    pub signed: bool,
    /// How the payload was found intact: `None` until a reader walked it (a header read only),
    /// and for a package whose header gives no payload digest (older than rpm 4.14: `rpm -K`
    /// checks it).
    pub payload_checked: Option<Checked>,
}

/// How a payload was found intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Its digest (`PAYLOADDIGEST`) over the payload as stored, read as one stream.
    Whole,
    /// Uncompressed and exactly as rpm writes it: every file's data against the header's
    /// digest, in parallel, and every other byte against the header.
    FileByFile,
}

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Checked::Whole => "its payload's digest read whole",
            Checked::FileByFile => "file by file against the header",
        })
    }
}

impl Package {
    /// `name-version-release.arch`.
    pub fn nevra(&self) -> String {
        format!(
            "{}-{}-{}.{}",
            self.name, self.version, self.release, self.arch
        )
    }
}

/// Read the lead and both headers from `r` (positioned at the file's start), leaving `r` at the
/// payload's first byte.
pub fn read(r: &mut impl Read) -> Result<Package> {
    let mut lead = [0u8; LEAD];
    r.read_exact(&mut lead).context("reading the lead")?;
    if lead[..4] != LEAD_MAGIC {
        bail!("not an RPM package file (no RPM lead)");
    }
    let (sig, sig_len) = Header::read(r).context("reading the signature header")?;
    let pad = (8 - sig_len % 8) % 8;
    let mut skip = [0u8; 8];
    r.read_exact(&mut skip[..pad])
        .context("reading the signature header's padding")?;
    let (h, len) = Header::read(r).context("reading the header")?;
    let header_sha256 = sig.string(SIG_SHA256)?;
    if let Some(want) = &header_sha256 {
        use sha2::Digest;
        let got = crate::fsutil::hex(&sha2::Sha256::digest(&h.raw));
        if !got.eq_ignore_ascii_case(want) {
            bail!("header SHA256 digest: BAD (the header is damaged)");
        }
    }
    let algo = h.ints(PAYLOADDIGESTALGO)?.first().copied().unwrap_or(8);
    let payload_sha256 = h
        .strings(PAYLOADDIGEST)?
        .into_iter()
        .next()
        .filter(|d| algo == 8 && d.len() == 64)
        .map(|d| d.to_ascii_lowercase());
    let signed = SIG_SIGNATURES.iter().any(|&t| sig.entry(t).is_some());
    if let Some(other) = h.string(PAYLOADFORMAT)?.filter(|f| f != "cpio") {
        bail!("its payload is in {other} format, not cpio");
    }
    Ok(Package {
        name: h.string(NAME)?.unwrap_or_default(),
        version: h.string(VERSION)?.unwrap_or_default(),
        release: h.string(RELEASE)?.unwrap_or_default(),
        arch: h.string(ARCH)?.unwrap_or_default(),
        files: h.files()?,
        digest_algo: h.ints(FILEDIGESTALGO)?.first().copied().unwrap_or(1) as u32,
        compressor: h.string(PAYLOADCOMPRESSOR)?,
        payload_at: (LEAD + sig_len + pad + len) as u64,
        payload_sha256,
        header_checked: header_sha256.is_some(),
        payload_checked: None,
        signed,
    })
}

/// One header: its index entries and data store.
struct Header {
    entries: Vec<(u32, u32, usize, usize)>,
    /// Where the data store starts in `raw`.
    at: usize,
    /// The header as stored (intro, index, store): what the signature's digest covers.
    raw: Vec<u8>,
}

impl Header {
    /// The header at `r`, and its length in bytes.
    fn read(r: &mut impl Read) -> Result<(Header, usize)> {
        let mut intro = [0u8; 16];
        r.read_exact(&mut intro)?;
        if intro[..8] != HEADER_MAGIC {
            bail!("bad header magic");
        }
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let (n, size) = (be(&intro[8..12]), be(&intro[12..16]));
        if n > MAX_TAGS || size > MAX_DATA {
            bail!(
                "a header of {n} tags and {size} bytes, beyond gpuhost's bounds ({MAX_TAGS} tags, {} MiB)",
                MAX_DATA >> 20
            );
        }
        let at = 16 + n as usize * 16;
        let mut raw = vec![0u8; at + size as usize];
        raw[..16].copy_from_slice(&intro);
        r.read_exact(&mut raw[16..])?;
        let entries = raw[16..at]
            .chunks_exact(16)
            .map(|e| {
                let (off, count) = (be(&e[8..12]) as usize, be(&e[12..16]) as usize);
                (be(&e[0..4]), be(&e[4..8]), off, count)
            })
            .collect();
        let len = raw.len();
        Ok((Header { entries, at, raw }, len))
    }

    /// The data store.
    fn store(&self) -> &[u8] {
        &self.raw[self.at..]
    }

    fn entry(&self, tag: u32) -> Option<(u32, usize, usize)> {
        self.entries
            .iter()
            .find(|e| e.0 == tag)
            .map(|&(_, ty, off, count)| (ty, off, count))
    }

    /// The strings of a STRING, STRING_ARRAY or I18NSTRING tag (empty when absent).
    fn strings(&self, tag: u32) -> Result<Vec<String>> {
        let Some((ty, off, count)) = self.entry(tag) else {
            return Ok(Vec::new());
        };
        if !matches!(ty, 6 | 8 | 9) {
            bail!("tag {tag} is of type {ty}, not a string");
        }
        let count = if ty == 6 { 1 } else { count };
        if count > MAX_FILES {
            bail!("tag {tag} holds {count} strings, beyond gpuhost's bound of {MAX_FILES}");
        }
        let mut out = Vec::with_capacity(count);
        let mut at = off;
        for _ in 0..count {
            let rest = self.store().get(at..).context("a string past the header")?;
            let end = rest
                .iter()
                .position(|&b| b == 0)
                .with_context(|| format!("an unterminated string in tag {tag}"))?;
            out.push(String::from_utf8_lossy(&rest[..end]).into_owned());
            at += end + 1;
        }
        Ok(out)
    }

    fn string(&self, tag: u32) -> Result<Option<String>> {
        Ok(self.strings(tag)?.into_iter().next())
    }

    /// The numbers of an INT16, INT32 or INT64 tag (empty when absent).
    fn ints(&self, tag: u32) -> Result<Vec<u64>> {
        let Some((ty, off, count)) = self.entry(tag) else {
            return Ok(Vec::new());
        };
        if count > MAX_FILES {
            bail!("tag {tag} holds {count} numbers, beyond gpuhost's bound of {MAX_FILES}");
        }
        let width = match ty {
            3 => 2,
            4 => 4,
            5 => 8,
            _ => bail!("tag {tag} is of type {ty}, not a number"),
        };
        let bytes = count
            .checked_mul(width)
            .and_then(|len| self.store().get(off..off.checked_add(len)?))
            .with_context(|| format!("tag {tag} runs past the header"))?;
        Ok(bytes
            .chunks_exact(width)
            .map(|c| c.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b)))
            .collect())
    }

    /// The files the header lists (BASENAMES under DIRNAMES), each with its size, mode, digest,
    /// link target and ghost flag; the arrays must all have one value per file.
    fn files(&self) -> Result<Vec<FileInfo>> {
        let base = self.strings(BASENAMES)?;
        let n = base.len();
        let dirs = self.strings(DIRNAMES)?;
        let index = self.ints(DIRINDEXES)?;
        let mut sizes = self.ints(LONGFILESIZES)?;
        if sizes.is_empty() {
            sizes = self.ints(FILESIZES)?;
        }
        let modes = self.ints(FILEMODES)?;
        let digests = self.strings(FILEDIGESTS)?;
        let links = self.strings(FILELINKTOS)?;
        let flags = self.ints(FILEFLAGS)?;
        let (inodes, mtimes, rdevs) = (
            self.ints(FILEINODES)?,
            self.ints(FILEMTIMES)?,
            self.ints(FILERDEVS)?,
        );
        let archived = |i: usize| {
            Some(Archived {
                inode: *inodes.get(i)?,
                mtime: *mtimes.get(i)?,
                rdev: *rdevs.get(i)?,
            })
            .filter(|_| {
                [inodes.len(), mtimes.len(), rdevs.len()]
                    .iter()
                    .all(|&l| l == n)
            })
        };
        if [
            index.len(),
            sizes.len(),
            modes.len(),
            digests.len(),
            links.len(),
            flags.len(),
        ]
        .iter()
        .any(|&l| l != n)
        {
            bail!("its header's file arrays disagree on the number of files ({n} names)");
        }
        let path_bytes = (0..n).try_fold(0usize, |sum, i| {
            let dir = dirs.get(index[i] as usize).map_or(0, String::len);
            sum.checked_add(dir + base[i].len())
                .filter(|&s| s <= MAX_PATH_BYTES)
        });
        if path_bytes.is_none() {
            bail!(
                "its header's file paths take more than gpuhost's bound of {} MiB",
                MAX_PATH_BYTES >> 20
            );
        }
        (0..n)
            .map(|i| {
                let dir = dirs
                    .get(index[i] as usize)
                    .context("a file's directory index past DIRNAMES")?;
                Ok(FileInfo {
                    path: format!("{dir}{}", base[i]),
                    size: sizes[i],
                    mode: modes[i] as u32,
                    digest: digests[i].to_ascii_lowercase(),
                    link: links[i].clone(),
                    ghost: flags[i] as u32 & GHOST != 0,
                    archived: archived(i),
                })
            })
            .collect()
    }
}
