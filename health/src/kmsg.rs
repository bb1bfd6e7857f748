//! XID errors from the kernel log: `/dev/kmsg` (readable by root, or by anyone when
//! `kernel.dmesg_restrict=0`), else the journal's kernel messages (`journalctl -k -b`).
//!
//! The NVIDIA driver logs `NVRM: Xid (PCI:0000:3b:00): 79, pid=…, GPU has fallen off the bus.`
//! (older drivers: `NVRM: Xid (0000:3b:00): 79, …`). The PCI address is domain:bus:device.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use gpuhost_steps::cmd::Cmd;
use gpuhost_steps::host::Host;

use crate::snapshot::{KernelLog, XidEvent};

/// O_NONBLOCK on Linux (x86-64 and aarch64): a read past the last record returns EAGAIN.
const O_NONBLOCK: i32 = 0o4000;

/// XIDs that mean the GPU (or its memory, or its links) needs attention now: DCGM's health
/// watches. 48 double-bit ECC, 74 NVLink, 79 fallen off the bus, 94/95 contained/uncontained
/// ECC, 119/120 GSP RPC timeout / GSP error, 140 unrecovered ECC.
pub const CRITICAL_XIDS: &[u32] = &[48, 74, 79, 94, 95, 119, 120, 140];

/// XIDs that are usually an application's fault (illegal address, graphics exception, …):
/// reported, not a node problem.
pub const APPLICATION_XIDS: &[u32] = &[13, 31, 43, 45, 68, 69];

/// Read XIDs on `host`: its `/dev/kmsg`, else the journal when `host` is the live system.
pub fn collect(host: &Host) -> KernelLog {
    let live = host.is_live();
    let kmsg = host.path("/dev/kmsg");
    let kmsg_err = match read_kmsg(&kmsg) {
        Ok(text) => {
            return KernelLog {
                source: Some("kmsg".into()),
                error: None,
                xids: parse_xids(&text),
            }
        }
        Err(e) => e,
    };
    if !live {
        return KernelLog {
            source: None,
            error: Some(kmsg_err),
            xids: Vec::new(),
        };
    }
    let out = Cmd::new("journalctl")
        .args(["-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"])
        .args(["--grep", "NVRM: Xid"])
        .timeout(Duration::from_secs(10))
        .output();
    match out {
        // exit 1 with empty output: no matching entries.
        Ok(o) if o.code == Some(0) || (o.code == Some(1) && o.stderr.trim().is_empty()) => {
            KernelLog {
                source: Some("journal".into()),
                error: None,
                xids: parse_xids(&o.stdout),
            }
        }
        Ok(o) => KernelLog {
            source: None,
            error: Some(format!(
                "{kmsg_err}; journalctl -k: {}",
                gpuhost_steps::cmd::tail_lines(&o.stderr, 2).trim()
            )),
            xids: Vec::new(),
        },
        Err(e) => KernelLog {
            source: None,
            error: Some(format!("{kmsg_err}; {e:#}")),
            xids: Vec::new(),
        },
    }
}

/// Read all records from a kmsg device (one record per read, EAGAIN at the end) or a plain
/// file holding such records.
fn read_kmsg(p: &Path) -> Result<String, String> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(p)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                format!(
                    "{}: permission denied (kernel.dmesg_restrict=1; run as root)",
                    p.display()
                )
            } else {
                format!("{}: {e}", p.display())
            }
        })?;
    let mut all = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                all.extend_from_slice(&buf[..n]);
                if all.len() > 64 * 1024 * 1024 {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // EPIPE: records were overwritten while reading; the next read resumes.
            Err(e) if e.raw_os_error() == Some(32) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("{}: {e}", p.display())),
        }
    }
    Ok(String::from_utf8_lossy(&all).into_owned())
}

/// XID events from kmsg records (`6,1234,5678901,-;NVRM: Xid …`), `journalctl -o
/// short-monotonic` lines (`[ 5678.901234] host kernel: NVRM: Xid …`) or `dmesg` lines.
pub fn parse_xids(text: &str) -> Vec<XidEvent> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<XidEvent> {
    let at = line.find("NVRM: Xid (")?;
    let message = line[at..].trim().to_string();
    let rest = &line[at + "NVRM: Xid (".len()..];
    let close = rest.find(')')?;
    let addr = rest[..close].trim_start_matches("PCI:");
    let pci = normalise_pci(addr)?;
    let after = rest[close + 1..].trim_start_matches(':').trim_start();
    let num: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
    let xid = num.parse().ok()?;
    Some(XidEvent {
        xid,
        pci,
        uptime_s: uptime(&line[..at]),
        message,
    })
}

/// kmsg prefix `pri,seq,usec,flags;` or a bracketed `[ 5678.901234]` seconds stamp.
fn uptime(prefix: &str) -> Option<f64> {
    if let Some(semi) = prefix.find(';') {
        let fields: Vec<&str> = prefix[..semi].split(',').collect();
        if fields.len() >= 3 {
            if let Ok(us) = fields[2].parse::<u64>() {
                return Some(us as f64 / 1e6);
            }
        }
    }
    let open = prefix.find('[')?;
    let close = prefix[open..].find(']')? + open;
    prefix[open + 1..close].trim().parse().ok()
}

/// `0000:3b:00`, `00000000:3B:00.0`, `3b:00.0` → `0000:3b:00` (domain:bus:device, lower case).
pub fn normalise_pci(addr: &str) -> Option<String> {
    let addr = addr.trim();
    let no_fn = match addr.rsplit_once('.') {
        Some((a, f)) if f.len() == 1 => a,
        _ => addr,
    };
    let parts: Vec<&str> = no_fn.split(':').collect();
    let (dom, bus, dev) = match parts.as_slice() {
        [d, b, v] => (u32::from_str_radix(d, 16).ok()?, *b, *v),
        [b, v] => (0, *b, *v),
        _ => return None,
    };
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    Some(format!("{dom:04x}:{bus:02x}:{dev:02x}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn parses_kmsg_and_journal_lines() {
        let text = "\
6,1001,5123456789,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
 SUBSYSTEM=pci
4,1002,5123456800,-;NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
[ 5678.901234] gpu01 kernel: NVRM: Xid (0000:86:00): 13, pid=99, Graphics Exception
6,1003,1,-;nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver
";
        let x = parse_xids(text);
        assert_eq!(x.len(), 2);
        assert_eq!(x[0].xid, 79);
        assert_eq!(x[0].pci, "0000:3b:00");
        assert_eq!(x[0].uptime_s, Some(5123.456789));
        assert_eq!(x[1].xid, 13);
        assert_eq!(x[1].pci, "0000:86:00");
        assert_eq!(x[1].uptime_s, Some(5678.901234));
    }

    #[test]
    fn normalises_addresses() {
        assert_eq!(
            normalise_pci("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00")
        );
        assert_eq!(normalise_pci("0000:3b:00").as_deref(), Some("0000:3b:00"));
        assert_eq!(normalise_pci("3b:00.0").as_deref(), Some("0000:3b:00"));
        assert_eq!(normalise_pci("zz"), None);
    }
}
