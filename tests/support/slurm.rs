//! A real Slurm cluster of N nodes on this machine (Debian's munged, slurmctld and one slurmd per
//! node, each on its own port), in a temp dir, stopped when dropped. `RebootProgram` is a script
//! that records each call in `reboots.log`; [`Slurm::reboot_slurmd`] plays the node's reboot by
//! starting its slurmd again in a time namespace whose boot time is now.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn have(tool: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).exists())
}

pub struct Slurm {
    pub dir: tempfile::TempDir,
    munged: Option<Child>,
    slurmctld: Option<Child>,
    slurmd: Vec<(String, Option<Child>)>,
    pub conf: PathBuf,
}

impl Slurm {
    /// None (skipped) when the daemons are missing or we are not root, unless
    /// GPUHOST_REQUIRE_ALL_TOOLS is set (CI), where that fails.
    pub fn start(nodes: &[&str]) -> Option<Slurm> {
        let missing: Vec<&str> = [
            "munged",
            "slurmctld",
            "slurmd",
            "scontrol",
            "squeue",
            "sinfo",
            "sbatch",
            "unshare",
        ]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
        let root = text(&Command::new("id").arg("-u").output().unwrap().stdout).trim() == "0";
        if !missing.is_empty() || !root {
            let why = format!("missing {missing:?}, root: {root} (apt-get install -y slurmctld slurmd slurm-client munge)");
            assert!(
                std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_none(),
                "Slurm test cannot run: {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("munge"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let key: Vec<u8> = (0..1024u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        std::fs::write(d.join("munge/munge.key"), key).unwrap();
        std::fs::set_permissions(
            d.join("munge/munge.key"),
            std::fs::Permissions::from_mode(0o400),
        )
        .unwrap();
        let sock = d.join("munge/sock");
        let munged = Command::new("munged")
            .arg("--foreground")
            .arg(format!(
                "--key-file={}",
                d.join("munge/munge.key").display()
            ))
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--pid-file={}", d.join("munge/pid").display()))
            .arg(format!("--log-file={}", d.join("munge/log").display()))
            .arg(format!("--seed-file={}", d.join("munge/seed").display()))
            .arg("--force")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let reboot = d.join("reboot-program");
        std::fs::write(
            &reboot,
            format!(
                "#!/bin/sh\necho \"$(date +%s) $*\" >> {}/reboots.log\n",
                d.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&reboot, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut node_lines = String::new();
        for n in nodes {
            node_lines.push_str(&format!(
                "NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={} CPUs=1 RealMemory=100 State=UNKNOWN\n",
                free_port()
            ));
        }
        let conf = d.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=gpuhostfleet
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
ReturnToService=2
RebootProgram={reboot}
ResumeTimeout=300
{node_lines}PartitionName=gpu Nodes={all} Default=YES MaxTime=INFINITE State=UP
",
                ctld_port = free_port(),
                sock = sock.display(),
                d = d.display(),
                reboot = reboot.display(),
                all = nodes.join(","),
            ),
        )
        .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            assert!(Instant::now() < until, "munged never made its socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        let slurmctld = Command::new("slurmctld")
            .args(["-D", "-i", "-f"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut s = Slurm {
            dir,
            munged: Some(munged),
            slurmctld: Some(slurmctld),
            slurmd: Vec::new(),
            conf,
        };
        for n in nodes {
            let c = s.spawn_slurmd(n, None);
            s.slurmd.push((n.to_string(), Some(c)));
        }
        for n in nodes {
            s.wait_state(n, |st| st == "IDLE", 30);
        }
        Some(s)
    }

    fn spawn_slurmd(&self, node: &str, boot_offset: Option<i64>) -> Child {
        let mut cmd = match boot_offset {
            Some(off) => {
                let mut c = Command::new("unshare");
                c.args(["--time", "--fork", "--kill-child", "--boottime"])
                    .arg(off.to_string())
                    .arg("slurmd");
                c
            }
            None => Command::new("slurmd"),
        };
        cmd.args(["-D", "-N", node, "-f"])
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// The node's slurmd stops and starts again with a boot time of now: what slurmctld sees
    /// of a reboot (its RebootProgram only records the call).
    pub fn reboot_slurmd(&mut self, node: &str) {
        let i = self.slurmd.iter().position(|(n, _)| n == node).unwrap();
        if let Some(mut c) = self.slurmd[i].1.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // slurmctld takes a boot time older than its reboot request (seconds) for no reboot.
        std::thread::sleep(Duration::from_millis(2500));
        let up: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // The new boot time is less than a second ago.
        #[allow(clippy::cast_possible_truncation)]
        let offset = -(up.ceil() as i64 - 1);
        let c = self.spawn_slurmd(node, Some(offset));
        self.slurmd[i].1 = Some(c);
    }

    pub fn cmd(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    pub fn scontrol(&self, args: &[&str]) -> Output {
        self.cmd("scontrol").args(args).output().unwrap()
    }

    pub fn node(&self, node: &str) -> String {
        text(&self.scontrol(&["show", "node", node, "--oneliner"]).stdout)
    }

    pub fn state(&self, node: &str) -> String {
        let n = self.node(node);
        n.split_whitespace()
            .find_map(|f| f.strip_prefix("State="))
            .unwrap_or("?")
            .to_string()
    }

    pub fn reason(&self, node: &str) -> Option<String> {
        let n = self.node(node);
        n.find(" Reason=").map(|i| n[i + 8..].trim().to_string())
    }

    pub fn wait_state(&self, node: &str, ok: impl Fn(&str) -> bool, secs: u64) {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            let st = self.state(node);
            if ok(&st) {
                return;
            }
            assert!(
                Instant::now() < until,
                "{node}: state {st}\n{}\n{}",
                self.node(node),
                std::fs::read_to_string(self.dir.path().join("log/slurmctld.log"))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The RebootProgram's calls so far.
    pub fn reboots(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("reboots.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for (_, c) in &mut self.slurmd {
            if let Some(c) = c {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for c in [self.slurmctld.as_mut(), self.munged.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
