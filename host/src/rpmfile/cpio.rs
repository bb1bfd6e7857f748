//! The entries of an RPM payload's cpio archive, read as a stream: rpm's `newc` entries
//! (`070701`, name and size in the entry) and its stripped ones (`07070X`, rpm ≥ 4.12, written
//! when a file is 4 GiB or more: the entry holds only the file's index into the header, which
//! gives its size). Every entry and every data block is aligned to 4 bytes.

use std::io::{self, Read};

use anyhow::{bail, Context, Result};

/// What an entry names: a path (`newc`) or an index into the header's files (stripped).
#[derive(Debug, PartialEq, Eq)]
pub enum Named {
    Path(String),
    Index(usize),
}

/// One entry's header; its data (`size` bytes) follows in the stream.
#[derive(Debug)]
pub struct Entry {
    pub named: Named,
    /// `st_mode` (`newc` only; 0 for stripped entries, whose mode is the header's).
    pub mode: u32,
    pub nlink: u32,
    /// The data's size, when the entry says it (`newc`).
    pub size: Option<u64>,
    /// The entry's other numbers, as rpm's archive writer sets them from the header.
    pub stat: Stat,
}

/// The numbers of an entry that no reading depends on, kept to be compared with what rpm's
/// archive writer takes from the header ([`super::header::Archived`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// A stripped entry: nothing but the index.
    Stripped,
    /// A `newc` entry: its inode number and mtime, and whether its device numbers and
    /// checksum are 0 as rpm writes them.
    Newc { ino: u64, mtime: u64, zeros: bool },
    /// A `newc` entry with a field that is not hex.
    Unreadable,
}

/// A reader over the decompressed payload that knows its position (for the alignment).
pub struct Cpio<R> {
    r: R,
    pos: u64,
    /// Every padding byte so far was 0, and the trailer (once read) was rpm's: what rpm
    /// writes, so that a reader that does not hash the payload whole can tell the archive
    /// holds nothing else.
    pub clean: bool,
}

impl<R: Read> Cpio<R> {
    pub fn new(r: R) -> Self {
        Cpio {
            r,
            pos: 0,
            clean: true,
        }
    }

    /// The position in the payload: after [`Cpio::next_entry`], where the entry's data starts.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    fn exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.r.read_exact(buf)?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let mut skip = [0u8; 4];
        let n = ((4 - self.pos % 4) % 4) as usize;
        self.exact(&mut skip[..n])?;
        self.clean &= skip[..n].iter().all(|&b| b == 0);
        Ok(())
    }

    /// The next entry's header, or `None` at the trailer.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        let mut magic = [0u8; 6];
        self.exact(&mut magic)
            .map_err(|e| short(e, "the payload ends before its trailer"))?;
        match &magic {
            b"070701" | b"070702" => self.newc(),
            b"07070X" => {
                let mut fx = [0u8; 8];
                self.exact(&mut fx)?;
                self.pad()?;
                Ok(Some(Entry {
                    named: Named::Index(hex(&fx)? as usize),
                    mode: 0,
                    nlink: 1,
                    size: None,
                    stat: Stat::Stripped,
                }))
            }
            _ => bail!(
                "an entry without cpio's magic at byte {} of the payload",
                self.pos - 6
            ),
        }
    }

    fn newc(&mut self) -> Result<Option<Entry>> {
        let mut h = [0u8; 104];
        self.exact(&mut h)
            .map_err(|e| short(e, "the payload ends inside an entry's header"))?;
        let field = |i: usize| hex(&h[i * 8..i * 8 + 8]);
        let (mode, nlink, size, namesize) = (field(1)?, field(4)?, field(6)?, field(11)?);
        if namesize == 0 || namesize > 4096 {
            bail!("an entry's name of {namesize} bytes");
        }
        let mut name = vec![0u8; namesize as usize];
        self.exact(&mut name)?;
        self.pad()?;
        if name.pop() != Some(0) {
            bail!("an entry's name without its terminating NUL");
        }
        let name = String::from_utf8(name).context("an entry's name that is not UTF-8")?;
        // ino, uid, gid, mtime, the device numbers, the checksum: read leniently.
        let f = |i: usize| field(i).ok();
        let zeros = [7, 8, 9, 10, 12].iter().all(|&i| f(i) == Some(0));
        if name == "TRAILER!!!" {
            // rpm's: all 0 but nlink 1 and the name's size.
            self.clean &=
                zeros && [0, 1, 2, 3, 5, 6].iter().all(|&i| f(i) == Some(0)) && nlink == 1;
            return Ok(None);
        }
        let stat = match (f(0), f(2), f(3), f(5)) {
            (Some(ino), Some(_), Some(_), Some(mtime)) => Stat::Newc { ino, mtime, zeros },
            _ => Stat::Unreadable,
        };
        Ok(Some(Entry {
            named: Named::Path(name),
            mode: mode as u32,
            nlink: nlink as u32,
            size: Some(size),
            stat,
        }))
    }

    /// The entry's `size` bytes of data, given to `sink` piece by piece; then the padding.
    /// `stop` is asked between pieces (a signal stops a multi-GB read).
    pub fn data(
        &mut self,
        size: u64,
        mut sink: impl FnMut(&[u8]) -> Result<()>,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        let mut buf = vec![0u8; (1 << 20).min(size as usize).max(1)];
        let mut left = size;
        while left > 0 {
            stop()?;
            let n = left.min(buf.len() as u64) as usize;
            self.exact(&mut buf[..n])
                .map_err(|e| short(e, "the payload ends inside a file's data"))?;
            sink(&buf[..n])?;
            left -= n as u64;
        }
        self.pad()
            .map_err(|e| short(e, "the payload ends after a file's data"))
    }
}

/// A read error of the payload: `ends` (truncated) where the payload ended, else the error as
/// it is (a source that failed, a corrupt compressed stream: not a truncated payload).
fn short(e: io::Error, ends: &str) -> anyhow::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        anyhow::Error::new(e).context(format!("{ends} (truncated)"))
    } else {
        e.into()
    }
}

impl Cpio<std::io::BufReader<std::fs::File>> {
    /// Past the entry's `size` bytes of data without reading them (an uncompressed payload of
    /// `len` bytes); then the padding. Data that would end past `len` is a truncated payload.
    pub fn skip(&mut self, size: u64, len: u64) -> Result<()> {
        let ends = self.pos.checked_add(size).filter(|&e| e <= len);
        let Some(ends) = ends else {
            bail!("the payload ends inside a file's data (truncated)");
        };
        let by = i64::try_from(size).context("a file's size beyond what a file can hold")?;
        self.r.seek_relative(by)?;
        self.pos = ends;
        self.pad()
            .map_err(|e| short(e, "the payload ends after a file's data"))
    }

    /// What follows the trailer, to the file's end (`len` bytes of payload in all): rpm
    /// writes nothing there. Whether it is at most a few zero bytes.
    pub fn nothing_after(&mut self, len: u64) -> Result<bool> {
        let left = len.saturating_sub(self.pos);
        if left > 4096 {
            return Ok(false);
        }
        let mut rest = Vec::new();
        self.r.read_to_end(&mut rest)?;
        Ok(rest.iter().all(|&b| b == 0))
    }
}

fn hex(b: &[u8]) -> Result<u64> {
    let s = std::str::from_utf8(b).context("a cpio header field that is not hex")?;
    u64::from_str_radix(s, 16).with_context(|| format!("a cpio header field {s:?} that is not hex"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn newc(name: &str, mode: u32, data: &[u8]) -> Vec<u8> {
        let mut out = format!(
            "070701{:08x}{mode:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            1, 0, 0, 1, 0, data.len(), 0, 0, 0, 0, name.len() + 1, 0
        )
        .into_bytes();
        out.extend(name.as_bytes());
        out.push(0);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out.extend(data);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    #[test]
    fn newc_and_stripped_entries_are_read_in_order_to_the_trailer() -> Result<()> {
        let mut a = newc("./etc/x.repo", 0o100644, b"[x]\n");
        a.extend(b"07070X0000000200"); // index 2, padded to 16
        a.extend(b"abcdef\0\0");
        a.extend(newc("TRAILER!!!", 0, b""));
        let mut c = Cpio::new(a.as_slice());
        let ok = |_: &[u8]| Ok(());
        let e = c.next_entry()?.context("first")?;
        assert_eq!(e.named, Named::Path("./etc/x.repo".into()));
        let mut got: Vec<u8> = Vec::new();
        c.data(
            e.size.unwrap_or(0),
            |b| {
                got.extend(b);
                Ok(())
            },
            &|| Ok(()),
        )?;
        assert_eq!(got, b"[x]\n");
        let e = c.next_entry()?.context("second")?;
        assert_eq!(e.named, Named::Index(2));
        c.data(6, ok, &|| Ok(()))?;
        assert!(c.next_entry()?.is_none());
        Ok(())
    }

    #[test]
    fn a_payload_cut_inside_a_file_is_an_error() {
        let a = newc("./var/r/big.rpm", 0o100644, &[7u8; 100]);
        let mut c = Cpio::new(&a[..a.len() - 40]);
        let r = c.next_entry().and_then(|e| {
            let size = e.and_then(|e| e.size).unwrap_or(0);
            c.data(size, |_| Ok(()), &|| Ok(()))
        });
        assert!(format!("{r:?}").contains("truncated"), "{r:?}");
    }
}
