//! The GPU's NUMA node, and binding the calling thread to its CPUs (`sched_setaffinity` of this
//! thread alone), so that what the thread allocates and first touches — the PCIe check's pinned
//! host memory — is local to the GPU. Read from sysfs: `numa_node` of the GPU's PCI function,
//! the node's `cpulist`.

/// Bind this thread to the CPUs of the NUMA node of the GPU at `bus` (NVML's form,
/// `00000000:3B:00.0`); the node, when the kernel names one and the binding took.
pub(crate) fn bind_to_gpu(bus: &str) -> Option<u32> {
    let node = node_of(bus)?;
    let cpus =
        std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")).ok()?;
    let cpus = parse_cpulist(cpus.trim())?;
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus.iter().filter(|c| **c < libc::CPU_SETSIZE as usize) {
        // SAFETY: c is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(*c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the set is a valid cpu_set_t of that size.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    (rc == 0).then_some(node)
}

/// sysfs's `numa_node` of the PCI function (`-1`: none).
fn node_of(bus: &str) -> Option<u32> {
    // NVML's 8-digit domain is sysfs's 4-digit one, lower case.
    let (domain, rest) = bus.split_once(':')?;
    let domain = domain.trim_start_matches('0');
    let sysfs = format!("{:0>4}:{}", domain, rest.to_ascii_lowercase());
    let text = std::fs::read_to_string(format!("/sys/bus/pci/devices/{sysfs}/numa_node")).ok()?;
    text.trim()
        .parse::<i32>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// `0-15,32-47` → the CPUs.
fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_as_the_kernel_writes_them() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist(""), None);
        assert_eq!(parse_cpulist("a-b"), None);
    }
}
