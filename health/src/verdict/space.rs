//! Host facts from sysinfo: memory and CPUs (for the record), and the free space of `/`,
//! `/var`, Docker's data-root and /var/lib/dkms — a WARNING under the profile's floors
//! (`status.min_free_{root,var,docker,dkms}_gib`): a full /var stops dnf, DKMS and Docker.

use gpuhost_host::hostinfo::{human, HostInfo, Role};

use super::model::Severity;
use super::out::Out;
use crate::expect::Expect;
use crate::snapshot::Snapshot;

const GIB: f64 = (1u64 << 30) as f64;

pub(super) fn checks(out: &mut Out, s: &Snapshot, expect: &Expect) {
    let Some(sys) = &s.host.system else {
        return;
    };
    out.push(
        "host.system",
        "host",
        None,
        if sys.error.is_some() {
            Severity::Unknown
        } else {
            Severity::Ok
        },
        summary(sys),
        Some("sysinfo could not read /proc; is /proc mounted?".into()),
    );
    let floors = &expect.min_free_gib;
    for p in &sys.space {
        let (key, floor) = match p.role {
            Role::System => ("root", floors.root),
            Role::Var => ("var", floors.var),
            Role::DockerDataRoot => ("docker", floors.docker),
            Role::DkmsBuilds => ("dkms", floors.dkms),
            Role::Need(_) => continue,
        };
        let id = format!("host.space.{key}");
        let Some(avail) = p.available_bytes else {
            out.push(
                &id,
                "space",
                None,
                Severity::NotApplicable,
                format!("{}: no mounted filesystem found", p.path),
                None,
            );
            continue;
        };
        let on = p.mount_point.as_deref().unwrap_or("?");
        let value = format!("{} ({} on {on}): {} free", p.path, p.role, human(avail));
        let sev = if (avail as f64) < floor * GIB {
            Severity::Warning
        } else {
            Severity::Ok
        };
        out.push(
            &id,
            "space",
            None,
            sev,
            if sev == Severity::Warning {
                format!("{value}, under the {floor} GiB floor")
            } else {
                value
            },
            Some(format!(
                "free space on {on} (profile key status.min_free_{key}_gib sets the floor)"
            )),
        );
    }
}

fn summary(sys: &HostInfo) -> String {
    if let Some(e) = &sys.error {
        return e.clone();
    }
    let days = sys.uptime_s / 86400;
    let hours = (sys.uptime_s % 86400) / 3600;
    format!(
        "{} CPUs ({}), {} memory, {} available, up {days}d {hours}h",
        sys.cpus,
        sys.cpu_model.as_deref().unwrap_or("model unknown"),
        human(sys.memory_total_bytes),
        human(sys.memory_available_bytes)
    )
}
