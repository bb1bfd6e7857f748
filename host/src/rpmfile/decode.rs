//! A package's payload decompressed (gzip, xz, lzma, zstd), and how a reading error is told
//! apart: the file under the decompressor failing (an NFS export gone: [`super::Fault::Source`],
//! the caller says to check the mount) or the compressed stream being corrupt (the package's:
//! [`super::Fault::Bad`], the caller says to download it again).
//! Decompressors pass their source's I/O errors through unchanged; the payload's reader marks
//! those ([`FromSource`]), so every other error a decompressor gives is the stream's
//! ([`Undecodable`]).

use std::io::{self, BufRead, Read};

use anyhow::Result;

use super::header::Package;

/// How the payload is compressed: the header's `PAYLOADCOMPRESSOR`, or, without one (or
/// gzip), its first bytes `head` tell (`identity`: none).
pub(super) fn compression(pkg: &Package, head: &[u8]) -> String {
    match pkg.compressor.as_deref() {
        Some(c) if c != "gzip" => c.to_string(),
        _ if head.starts_with(&[0x1f, 0x8b]) => "gzip".to_string(),
        _ if head.starts_with(b"0707") => "identity".to_string(),
        c => c.unwrap_or("none").to_string(),
    }
}

/// The most memory a decompressor may ask for (an xz or lzma dictionary, a zstd window):
/// 128 MiB. `xz -9` needs 65 MiB, zstd's own default decoding limit is 2^27 bytes; a stream
/// asking for more is refused as the package's fault before it is given the memory. With the
/// header's bound ([`super::header`]) it keeps a package's reading under 256 MiB.
pub(super) const MEMLIMIT: u64 = 128 << 20;
/// zstd's window, as a power of two: `MEMLIMIT` (128 MiB).
const ZSTD_WINDOW_LOG: u32 = 27;

/// A decompressing reader of `raw` told by the file name's suffix (`.gz`, `.xz`, `.zst`), or
/// `None` for a name without one: repo metadata files and a kmod's compressed modules.
/// Concatenated streams are read as one (as dnf reads metadata); memory as `MEMLIMIT` (128 MiB).
pub fn by_suffix<'a>(name: &str, raw: &'a [u8]) -> Result<Option<Box<dyn Read + 'a>>> {
    Ok(if name.ends_with(".gz") {
        Some(Box::new(flate2::read::MultiGzDecoder::new(raw)))
    } else if name.ends_with(".xz") {
        let stream =
            liblzma::stream::Stream::new_stream_decoder(MEMLIMIT, liblzma::stream::CONCATENATED)?;
        Some(Box::new(liblzma::read::XzDecoder::new_stream(raw, stream)))
    } else if name.ends_with(".zst") {
        let mut d = zstd::stream::read::Decoder::new(raw)?;
        d.window_log_max(ZSTD_WINDOW_LOG)?;
        Some(Box::new(d))
    } else {
        None
    })
}

/// The payload's decompressed stream: by the header's `PAYLOADCOMPRESSOR`, or, without one, by
/// its first bytes (rpm reads a payload with no compressor as gzip, which passes plain data
/// through).
pub(super) fn decompressor<R: BufRead + 'static>(pkg: &Package, mut r: R) -> Result<Box<dyn Read>> {
    let head = r
        .fill_buf()?
        .get(..6)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    let decoder: Box<dyn Read> = match compression(pkg, &head).as_str() {
        "identity" | "ufdio" => return Ok(Box::new(r)),
        // One stream, as rpm's own reader (`rpmio`) takes one: what follows it is not the
        // archive's, so an archive that runs on into a second stream is cut short here.
        "gzip" => Box::new(flate2::bufread::GzDecoder::new(r)),
        "xz" => Box::new(liblzma::bufread::XzDecoder::new_stream(
            r,
            liblzma::stream::Stream::new_stream_decoder(MEMLIMIT, 0)?,
        )),
        "lzma" => Box::new(liblzma::bufread::XzDecoder::new_stream(
            r,
            liblzma::stream::Stream::new_lzma_decoder(MEMLIMIT)?,
        )),
        "zstd" => {
            let mut d = zstd::stream::read::Decoder::with_buffer(r)?.single_frame();
            d.window_log_max(ZSTD_WINDOW_LOG)?;
            Box::new(d)
        }
        other => {
            anyhow::bail!("its payload is compressed with {other}, which gpuhost does not read")
        }
    };
    Ok(Box::new(Decoded(decoder)))
}

/// An I/O error of the file under the payload's decompressor, carried up through it.
#[derive(Debug)]
pub(super) struct FromSource(io::Error);

impl std::fmt::Display for FromSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for FromSource {}

/// `e`, marked as the source's: what the payload's reader returns for a failed read.
pub(super) fn from_source(e: io::Error) -> io::Error {
    io::Error::new(e.kind(), FromSource(e))
}

/// The decompressor found the compressed stream corrupt: the payload is damaged.
#[derive(Debug)]
struct Undecodable(String);

impl std::fmt::Display for Undecodable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "its payload cannot be decompressed ({}): the payload is damaged",
            self.0
        )
    }
}

impl std::error::Error for Undecodable {}

/// A decompressor's reads, its own errors marked [`Undecodable`].
struct Decoded(Box<dyn Read>);

impl Read for Decoded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            let passed = e.get_ref().is_some_and(|i| i.is::<FromSource>())
                || matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::Interrupted
                );
            if passed {
                e
            } else {
                io::Error::new(io::ErrorKind::InvalidData, Undecodable(e.to_string()))
            }
        })
    }
}

/// The read error `e` is the source's (the file could not be read), not the package's (cut
/// short, or a corrupt compressed stream).
pub(super) fn is_source_error(e: &io::Error) -> bool {
    e.kind() != io::ErrorKind::UnexpectedEof && !e.get_ref().is_some_and(|i| i.is::<Undecodable>())
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("gzip");
        e.finish().expect("gzip")
    }

    /// A reader that gives `ok` bytes of `data`, then fails as a vanished NFS export does.
    struct Failing {
        data: io::Cursor<Vec<u8>>,
        ok: u64,
    }

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.data.position() >= self.ok {
                return Err(from_source(io::Error::from_raw_os_error(116))); // ESTALE
            }
            let left = (self.ok - self.data.position()) as usize;
            let n = buf.len().min(left);
            self.data.read(&mut buf[..n])
        }
    }

    fn read_all(r: impl Read + 'static) -> io::Error {
        let decoder = flate2::bufread::MultiGzDecoder::new(io::BufReader::new(r));
        let mut out = Vec::new();
        match Decoded(Box::new(decoder)).read_to_end(&mut out) {
            Ok(n) => panic!("read {n} bytes, no error"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_corrupt_stream_is_the_packages_fault_and_a_failed_read_the_sources() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let mut bad = gz(&data);
        let at = bad.len() / 2;
        bad[at] ^= 0x55;
        let e = read_all(io::Cursor::new(bad));
        assert!(!is_source_error(&e), "{e}");
        assert!(e.to_string().contains("cannot be decompressed"), "{e}");

        let good = gz(&data);
        let ok = good.len() as u64 / 2;
        let e = read_all(Failing {
            data: io::Cursor::new(good.clone()),
            ok,
        });
        assert!(is_source_error(&e), "{e}");

        // Cut short: the package's (a download interrupted).
        let e = read_all(io::Cursor::new(good[..good.len() / 2].to_vec()));
        assert!(!is_source_error(&e), "{e}");
    }
}
