//! XID and SXid errors from the kernel log of this boot: `/dev/kmsg` (readable by root, or by
//! anyone when `kernel.dmesg_restrict=0`), else the journal's kernel messages
//! (`journalctl -k -b`).
//!
//! The NVIDIA driver logs `NVRM: Xid (PCI:0000:3b:00): 79, pid=…, GPU has fallen off the bus.`
//! (older drivers: `NVRM: Xid (0000:3b:00): 79, …`); the PCI address is domain:bus:device.
//! Before a GPU's first XID after it initialised it logs `NVRM: GPU at PCI:0000:3b:00:
//! GPU-<uuid>` (open-gpu-kernel-modules, `_krcLogUuidOnce`, once per initialisation), which
//! tells XIDs from before a GPU reset from those after it. The NVSwitch driver logs
//! `nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 20034, Fatal, Link 24 LTSSM Fault Up`
//! (Fabric Manager User Guide: SXids, fatal and non-fatal).

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use gpuhost_host::cmd::Cmd;
use gpuhost_host::host::Host;

use crate::snapshot::{GpuInit, KernelLog, SxidEvent, XidEvent};

/// O_NONBLOCK on Linux (x86-64 and aarch64): a read past the last record returns EAGAIN.
const O_NONBLOCK: i32 = 0o4000;

/// What `journalctl --grep` keeps: XIDs, GPU initialisations, SXids.
const JOURNAL_GREP: &str = "NVRM: Xid|NVRM: GPU at PCI:|SXid \\(PCI:";

/// Read XIDs on `host`: its `/dev/kmsg`, else the journal when `host` is the live system.
pub fn collect(host: &Host) -> KernelLog {
    let live = host.is_live();
    // A character device read record by record (non-blocking): opened at the path the root's
    // resolver gives for it.
    let kmsg = kmsg_path(host);
    let kmsg_err = match read_kmsg(&kmsg) {
        Ok(text) => return parse_log("kmsg", &text),
        Err(e) => e,
    };
    if !live {
        return KernelLog {
            source: None,
            error: Some(kmsg_err),
            ..KernelLog::default()
        };
    }
    let out = Cmd::new("journalctl")
        .args(["-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"])
        .args(["--grep", JOURNAL_GREP])
        .timeout(Duration::from_secs(10))
        .output();
    match out {
        // exit 1 with empty output: no matching entries.
        Ok(o) if o.code == Some(0) || (o.code == Some(1) && o.stderr.trim().is_empty()) => {
            parse_log("journal", &o.stdout)
        }
        Ok(o) => KernelLog {
            source: None,
            error: Some(format!(
                "{kmsg_err}; journalctl -k: {}",
                gpuhost_host::cmd::tail_lines(&o.stderr, 2).trim()
            )),
            ..KernelLog::default()
        },
        Err(e) => KernelLog {
            source: None,
            error: Some(format!("{kmsg_err}; {e:#}")),
            ..KernelLog::default()
        },
    }
}

/// Read all records from a kmsg device (one record per read, EAGAIN at the end) or a plain
/// file holding such records.
fn read_kmsg(p: &Path) -> Result<String, String> {
    let mut f = open_kmsg(p)?;
    read_records(&mut f, p)
}

/// Open a kmsg device (non-blocking) or a plain file holding its records.
fn open_kmsg(p: &Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
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
        })
}

/// The records from where `f` stands to the last one (EAGAIN) or the end of a file.
fn read_records(f: &mut std::fs::File, p: &Path) -> Result<String, String> {
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

/// Events a [`Follower`] keeps of each kind, the oldest dropped first (about what a 1 MiB
/// kernel ring holds): memory stays bounded under an XID storm.
pub(crate) const FOLLOW_MAX_EVENTS: usize = 8192;

/// The kernel log followed across sweeps (`gpuhost serve`): `/dev/kmsg` is opened once and
/// each sweep reads only the records logged since the last one (a kmsg reader keeps its own
/// position), added to the events already parsed. A full read of a busy node's ring (thousands
/// of records, one system call each) is paid once, not per scrape. Where kmsg cannot be read
/// (the journal fallback) each sweep reads as [`collect`] does.
#[derive(Debug, Default)]
pub struct Follower {
    /// The kmsg path (as the host resolved it) and the open reader.
    open: Option<(std::path::PathBuf, std::fs::File)>,
    log: KernelLog,
    /// Lines parsed so far: the next record's position in the log.
    lines: u64,
}

impl Follower {
    /// The kernel log of this boot on `host`, as [`collect`] gives it.
    pub(crate) fn collect(&mut self, host: &Host) -> KernelLog {
        let kmsg = kmsg_path(host);
        if let Some((p, f)) = self.open.as_mut().filter(|(p, _)| *p == kmsg) {
            match read_records(f, p) {
                Ok(text) => {
                    self.add(&text);
                    return self.log.clone();
                }
                Err(e) => tracing::debug!("reading the kernel log again from the start: {e}"),
            }
        }
        self.open = None;
        match open_kmsg(&kmsg).and_then(|mut f| read_records(&mut f, &kmsg).map(|t| (f, t))) {
            Ok((f, text)) => {
                self.log = KernelLog {
                    source: Some("kmsg".into()),
                    ..KernelLog::default()
                };
                self.lines = 0;
                self.add(&text);
                self.open = Some((kmsg, f));
                self.log.clone()
            }
            Err(_) => collect(host),
        }
    }

    /// Lines of the kernel log read so far.
    pub(crate) fn lines(&self) -> u64 {
        self.lines
    }

    /// Parse `text` (whole records, following those parsed so far) into the kept events.
    fn add(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut new = parse_log("kmsg", text);
        for x in &mut new.xids {
            x.order += self.lines;
        }
        for g in &mut new.gpu_inits {
            g.order += self.lines;
        }
        self.lines += text.lines().count() as u64;
        append_bounded(&mut self.log.xids, new.xids);
        append_bounded(&mut self.log.gpu_inits, new.gpu_inits);
        append_bounded(&mut self.log.sxids, new.sxids);
    }
}

fn append_bounded<T>(kept: &mut Vec<T>, new: Vec<T>) {
    kept.extend(new);
    if kept.len() > FOLLOW_MAX_EVENTS {
        kept.drain(..kept.len() - FOLLOW_MAX_EVENTS);
    }
}

/// The host's `/dev/kmsg`, at the path the root's resolver gives for it.
fn kmsg_path(host: &Host) -> std::path::PathBuf {
    host.real_path("/dev/kmsg")
        .unwrap_or_else(|_| host.path("/dev/kmsg"))
}

/// XIDs, GPU initialisations and SXids from kmsg records (`6,1234,5678901,-;NVRM: Xid …`),
/// `journalctl -o short-monotonic` lines (`[ 5678.901234] host kernel: NVRM: Xid …`) or `dmesg`
/// lines, in log order.
pub fn parse_log(source: &str, text: &str) -> KernelLog {
    let mut log = KernelLog {
        source: Some(source.into()),
        ..KernelLog::default()
    };
    for (order, line) in (0u64..).zip(text.lines()) {
        if let Some(mut x) = parse_line(line) {
            x.order = order;
            log.xids.push(x);
        } else if let Some(mut g) = parse_gpu_init(line) {
            g.order = order;
            log.gpu_inits.push(g);
        } else if let Some(sx) = parse_sxid(line) {
            log.sxids.push(sx);
        }
    }
    log
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
        order: 0,
    })
}

/// `NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d-…`.
fn parse_gpu_init(line: &str) -> Option<GpuInit> {
    const AT: &str = "NVRM: GPU at PCI:";
    let at = line.find(AT)?;
    let rest = &line[at + AT.len()..];
    let (addr, uuid) = rest.rsplit_once(": ")?;
    let uuid = uuid.trim();
    if !uuid.starts_with("GPU-") {
        return None;
    }
    Some(GpuInit {
        pci: normalise_pci(addr)?,
        uuid: uuid.to_string(),
        uptime_s: uptime(&line[..at]),
        order: 0,
    })
}

/// `nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 20034, Fatal, Link 24 LTSSM Fault Up`, and
/// the `…: 10002, Severity 5 Engine instance 00 …` form that gives no fatal/non-fatal word.
fn parse_sxid(line: &str) -> Option<SxidEvent> {
    let at = line.find("SXid (")?;
    let rest = &line[at + "SXid (".len()..];
    let close = rest.find(')')?;
    let pci = rest[..close]
        .trim_start_matches("PCI:")
        .trim()
        .to_lowercase();
    let after = rest[close + 1..].trim_start_matches(':').trim_start();
    let num: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
    let sxid = num.parse().ok()?;
    let fields: Vec<&str> = after.split(',').map(str::trim).collect();
    let fatal = fields
        .iter()
        .find_map(|f| match f.to_ascii_lowercase().as_str() {
            "fatal" => Some(true),
            "non-fatal" | "nonfatal" => Some(false),
            _ => None,
        });
    let link = fields.iter().find_map(|f| {
        f.strip_prefix("Link ")
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    });
    let start = line[..at].rfind("nvidia-nvswitch").unwrap_or(at);
    Some(SxidEvent {
        sxid,
        pci,
        fatal,
        link,
        uptime_s: uptime(&line[..start]),
        message: line[start..].trim().to_string(),
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

    /// XID events alone (see [`parse_log`]).
    fn parse_xids(text: &str) -> Vec<XidEvent> {
        parse_log("", text).xids
    }

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
    fn gpu_initialisations_and_sxids_are_read_in_order() {
        let text = "\
4,900,5000000000,-;NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7
4,901,5000000100,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
4,902,6000000000,-;nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 20034, Fatal, Link 24 LTSSM Fault Up
4,903,6000000100,-;nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat Timeout Error (First)
4,904,6000000200,-;nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, Severity 5 Engine instance 00 Sub-engine instance 00
";
        let log = parse_log("kmsg", text);
        assert_eq!(log.gpu_inits.len(), 1);
        assert_eq!(log.gpu_inits[0].pci, "0000:3b:00");
        assert_eq!(
            log.gpu_inits[0].uuid,
            "GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7"
        );
        assert!(log.gpu_inits[0].order < log.xids[0].order);
        assert_eq!(log.sxids.len(), 3);
        assert_eq!(log.sxids[0].sxid, 20034);
        assert_eq!(log.sxids[0].pci, "0000:c5:00.0");
        assert_eq!(log.sxids[0].fatal, Some(true));
        assert_eq!(log.sxids[0].link, Some(24));
        assert_eq!(log.sxids[0].uptime_s, Some(6000.0));
        assert_eq!(log.sxids[1].fatal, Some(false));
        assert_eq!(log.sxids[2].fatal, None);
        assert!(log.sxids[0].message.starts_with("nvidia-nvswitch3: SXid"));
    }

    /// A root whose /dev/kmsg is a plain file holding `records`.
    fn root_with_kmsg(records: &str) -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dev")).unwrap();
        std::fs::write(dir.path().join("dev/kmsg"), records).unwrap();
        let host = Host::new(dir.path()).unwrap();
        (dir, host)
    }

    fn append(dir: &tempfile::TempDir, records: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("dev/kmsg"))
            .unwrap();
        f.write_all(records.as_bytes()).unwrap();
    }

    #[test]
    fn a_follower_reads_only_new_records_and_keeps_the_log_order() {
        let (dir, host) = root_with_kmsg(
            "4,900,5000000000,-;NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7
4,901,5000000100,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
 SUBSYSTEM=pci
",
        );
        let mut f = Follower::default();
        let first = f.collect(&host);
        assert_eq!(first, collect(&host), "the first sweep reads it whole");
        assert_eq!(first.xids.len(), 1);
        // Nothing new: the same log, nothing read twice.
        assert_eq!(f.collect(&host), first);
        // A reset (the driver prints the GPU's UUID again) and a new XID after it.
        append(
            &dir,
            "4,902,6000000000,-;NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7
4,903,6000000100,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=99, Graphics Exception
4,904,6000000200,-;nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 20034, Fatal, Link 24 LTSSM Fault Up
",
        );
        let now = f.collect(&host);
        assert_eq!(now, collect(&host), "the same as a whole read");
        assert_eq!(
            now.xids.iter().map(|x| x.xid).collect::<Vec<_>>(),
            vec![79, 13]
        );
        assert!(now.xids[0].order < now.gpu_inits[1].order);
        assert!(now.gpu_inits[1].order < now.xids[1].order);
        assert_eq!(now.sxids.len(), 1);
    }

    #[test]
    fn a_follower_keeps_a_bounded_number_of_events() {
        let line = |i: usize| {
            format!(
                "4,{i},{i}000000,-;NVRM: Xid (PCI:0000:3b:00): 13, pid={i}, Graphics Exception\n"
            )
        };
        let (dir, host) = root_with_kmsg(&line(0));
        let mut f = Follower::default();
        assert_eq!(f.collect(&host).xids.len(), 1);
        let storm: String = (1..=FOLLOW_MAX_EVENTS + 10).map(line).collect();
        append(&dir, &storm);
        let log = f.collect(&host);
        assert_eq!(log.xids.len(), FOLLOW_MAX_EVENTS);
        assert!(
            log.xids[0].message.contains(&format!("pid={}", 11)),
            "the oldest dropped"
        );
        assert!(log
            .xids
            .last()
            .unwrap()
            .message
            .contains(&format!("pid={}", FOLLOW_MAX_EVENTS + 10)));
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
