//! Package files made byte by byte, for the tests of gpuhost's own package reader: rpm's layout
//! (lead, signature header with the main header's SHA-256, main header, payload) with every
//! digest a packager computes, so that what a test changes is the one thing it names — a hard
//! link's data left out, a file's data altered under a recomputed payload digest, a link through
//! a link, a compressor's stream — and nothing else trips the reader first.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::expect_used,
    clippy::panic,
    clippy::unwrap_used
)]

use std::io::Write;

use sha2::Digest;

/// One file of the package.
#[derive(Clone)]
pub struct File {
    /// Absolute path.
    pub path: String,
    /// `st_mode` (type and permissions).
    pub mode: u32,
    /// A regular file's data, or a link's target.
    pub data: Vec<u8>,
    /// rpm's inode number for the file (shared by a hard link's names).
    pub inode: u32,
    /// The names of this inode in the package (2 and more: a hard link).
    pub nlink: u32,
    /// Whether the file's entry carries its data (a hard link's earlier names do not).
    pub carries: bool,
    /// The data the payload holds instead of `data` (the header keeps `data`'s digest).
    pub altered: Option<Vec<u8>>,
}

impl File {
    pub fn reg(path: &str, data: &[u8], inode: u32) -> File {
        File {
            path: path.to_string(),
            mode: 0o100644,
            data: data.to_vec(),
            inode,
            nlink: 1,
            carries: true,
            altered: None,
        }
    }
    pub fn dir(path: &str, inode: u32) -> File {
        File {
            mode: 0o040755,
            ..File::reg(path, b"", inode)
        }
    }
    pub fn link(path: &str, target: &str, inode: u32) -> File {
        File {
            mode: 0o120777,
            ..File::reg(path, target.as_bytes(), inode)
        }
    }
}

/// The package to make.
pub struct Craft {
    pub files: Vec<File>,
    /// `identity`, `gzip`, `xz`, `zstd`.
    pub compressor: &'static str,
    /// rpm's number of the file digests' algorithm (8: SHA-256, 1: MD5).
    pub digest_algo: u32,
    /// The payload as stored, replacing the compressed archive (its digest recomputed).
    pub payload: Option<Vec<u8>>,
    /// Extra empty strings after the directories' names (a header that asks for memory).
    pub empty_strings: usize,
    /// Bytes of one string tag of its own (a header that is large).
    pub filler: usize,
}

impl Craft {
    pub fn new(files: Vec<File>) -> Craft {
        Craft {
            files,
            compressor: "identity",
            digest_algo: 8,
            payload: None,
            empty_strings: 0,
            filler: 0,
        }
    }

    /// The uncompressed cpio archive, as rpm's writer lays it out.
    pub fn archive(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in &self.files {
            let data = if f.mode & 0o170000 == 0o040000 || !f.carries {
                Vec::new()
            } else {
                f.altered.clone().unwrap_or_else(|| f.data.clone())
            };
            entry(
                &mut out,
                &format!(".{}", f.path),
                f.mode,
                f.inode,
                f.nlink,
                &data,
            );
        }
        entry(&mut out, "TRAILER!!!", 0, 0, 1, b"");
        out
    }

    /// The payload as stored: the archive compressed.
    pub fn compressed(&self) -> Vec<u8> {
        if let Some(p) = &self.payload {
            return p.clone();
        }
        compress(self.compressor, &self.archive())
    }

    /// The whole package file.
    pub fn build(&self) -> Vec<u8> {
        let payload = self.compressed();
        let main = self.header(&payload);
        let mut sig = Header::default();
        sig.string(273, 6, &[hex(&sha2::Sha256::digest(&main))]);
        let sig = sig.bytes();
        let mut out = lead();
        out.extend_from_slice(&sig);
        out.resize(out.len() + (8 - sig.len() % 8) % 8, 0);
        out.extend_from_slice(&main);
        out.extend_from_slice(&payload);
        out
    }

    fn header(&self, payload: &[u8]) -> Vec<u8> {
        let mut h = Header::default();
        h.string(1000, 6, &["crafted".to_string()]);
        h.string(1001, 6, &["1.0".to_string()]);
        h.string(1002, 6, &["1".to_string()]);
        h.string(1022, 6, &["x86_64".to_string()]);
        let fs = &self.files;
        let mut dirs: Vec<String> = Vec::new();
        let mut known = std::collections::HashMap::new();
        let mut index = Vec::new();
        let mut bases = Vec::new();
        for f in fs {
            let (d, b) = f.path.rsplit_once('/').unwrap_or(("", &f.path));
            let d = format!("{d}/");
            let i = *known.entry(d.clone()).or_insert_with(|| {
                dirs.push(d);
                dirs.len() - 1
            });
            index.push(i as u32);
            bases.push(b.to_string());
        }
        let is_file = |f: &File| f.mode & 0o170000 == 0o100000;
        let is_link = |f: &File| f.mode & 0o170000 == 0o120000;
        h.int32(
            1028,
            &fs.iter()
                .map(|f| {
                    if is_file(f) || is_link(f) {
                        f.data.len() as u32
                    } else {
                        4096
                    }
                })
                .collect::<Vec<_>>(),
        );
        h.int16(1030, &fs.iter().map(|f| f.mode as u16).collect::<Vec<_>>());
        h.int16(1033, &vec![0; fs.len()]);
        h.int32(1034, &vec![1_700_000_000; fs.len()]);
        let digests: Vec<String> = fs
            .iter()
            .map(|f| {
                if is_file(f) {
                    self.digest(&f.data)
                } else {
                    String::new()
                }
            })
            .collect();
        h.string(1035, 8, &digests);
        let links: Vec<String> = fs
            .iter()
            .map(|f| {
                if is_link(f) {
                    String::from_utf8_lossy(&f.data).into_owned()
                } else {
                    String::new()
                }
            })
            .collect();
        h.string(1036, 8, &links);
        h.int32(1037, &vec![0; fs.len()]);
        h.int32(1096, &fs.iter().map(|f| f.inode).collect::<Vec<_>>());
        h.int32(1116, &index);
        h.string(1117, 8, &bases);
        dirs.extend(std::iter::repeat_n(String::new(), self.empty_strings));
        h.string(1118, 8, &dirs);
        h.string(1124, 6, &["cpio".to_string()]);
        h.string(1125, 6, &[self.compressor.to_string()]);
        h.int32(5011, &[self.digest_algo]);
        h.string(5092, 8, &[hex(&sha2::Sha256::digest(payload))]);
        h.int32(5093, &[8]);
        if self.filler > 0 {
            h.string(1049, 6, &["x".repeat(self.filler)]);
        }
        h.bytes()
    }

    fn digest(&self, data: &[u8]) -> String {
        if self.digest_algo == 1 {
            // rpm's MD5 digests are 32 hex digits; what they say does not matter here.
            return "0".repeat(32);
        }
        hex(&sha2::Sha256::digest(data))
    }
}

/// `data` compressed as rpm's payload compressors write it (one stream).
pub fn compress(how: &str, data: &[u8]) -> Vec<u8> {
    match how {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).expect("gzip");
            e.finish().expect("gzip")
        }
        "xz" => {
            let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
            e.write_all(data).expect("xz");
            e.finish().expect("xz")
        }
        "zstd" => zstd::stream::encode_all(data, 3).expect("zstd"),
        _ => data.to_vec(),
    }
}

fn lead() -> Vec<u8> {
    let mut l = vec![0u8; 96];
    l[..4].copy_from_slice(&[0xed, 0xab, 0xee, 0xdb]);
    l[4] = 3;
    l[78..80].copy_from_slice(&5u16.to_be_bytes());
    l
}

fn entry(out: &mut Vec<u8>, name: &str, mode: u32, ino: u32, nlink: u32, data: &[u8]) {
    let fields = [
        ino,
        mode,
        0,
        0,
        nlink,
        1_700_000_000,
        data.len() as u32,
        0,
        0,
        0,
        0,
        name.len() as u32 + 1,
        0,
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    out.resize(out.len().div_ceil(4) * 4, 0);
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(4) * 4, 0);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A header being written: index entries over a data store.
#[derive(Default)]
struct Header {
    index: Vec<[u32; 4]>,
    store: Vec<u8>,
}

impl Header {
    fn align(&mut self, to: usize) {
        self.store.resize(self.store.len().div_ceil(to) * to, 0);
    }
    fn string(&mut self, tag: u32, ty: u32, values: &[String]) {
        let off = self.store.len() as u32;
        for v in values {
            self.store.extend_from_slice(v.as_bytes());
            self.store.push(0);
        }
        self.index.push([tag, ty, off, values.len() as u32]);
    }
    fn int32(&mut self, tag: u32, values: &[u32]) {
        self.align(4);
        let off = self.store.len() as u32;
        for v in values {
            self.store.extend_from_slice(&v.to_be_bytes());
        }
        self.index.push([tag, 4, off, values.len() as u32]);
    }
    fn int16(&mut self, tag: u32, values: &[u16]) {
        self.align(2);
        let off = self.store.len() as u32;
        for v in values {
            self.store.extend_from_slice(&v.to_be_bytes());
        }
        self.index.push([tag, 3, off, values.len() as u32]);
    }
    fn bytes(&self) -> Vec<u8> {
        let mut out = vec![0x8e, 0xad, 0xe8, 0x01, 0, 0, 0, 0];
        out.extend_from_slice(&(self.index.len() as u32).to_be_bytes());
        out.extend_from_slice(&(self.store.len() as u32).to_be_bytes());
        for e in &self.index {
            for v in e {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        out.extend_from_slice(&self.store);
        out
    }
}
