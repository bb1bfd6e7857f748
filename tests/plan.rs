//! `plan` says what `apply` then does, key by key (issue 54): for the profile keys added since
//! plan was last held against apply — `driver.keep_local_repo`, `driver.install`,
//! `driver.imex`, `driver.switch_stream`, `driver.allow_erase`, the container runtime's
//! `docker.daemon.*` and `container_toolkit.cdi`, `prefix_links`, and a bundle on a node set up
//! online — `plan` of a root and then `apply` of the same arguments agree on every step's
//! outcome and on the work of every change (`world::plan_is_apply`); a second apply changes
//! nothing. (`driver.kmod_repo`'s paths are held in tests/kmods.rs.)

#![allow(clippy::panic)] // a test fails by panicking

#[path = "world/mod.rs"]
mod world;

use std::process::Command;

use world::{
    assert_converged, code, local, plan_is_apply, profile, report, Os, Root, CUDA_LOCAL_EL8_12_2,
    CUDA_LOCAL_EL8_12_4, CUDA_LOCAL_EL9_13_0, DRIVER_LOCAL_EL10_580, DRIVER_LOCAL_EL10_590,
    DRIVER_LOCAL_EL9_570, UEK10, UEK8_NEW, UEK9,
};

/// `--profile P --set driver.local_repo_rpm=<the world's RPM>` and `extra`.
fn args(p: &str, rpm: &str, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "--profile".to_string(),
        profile(p),
        "--set".into(),
        format!("driver.local_repo_rpm={}", local(rpm)),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Plan is apply for these arguments, apply converges (exit 0) and a second apply is unchanged.
fn converges_as_planned(root: &Root, args: &[String]) {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (rc, rep) = plan_is_apply(root, &refs);
    assert_eq!(rc, 0, "{args:?}: {rep:#}");
    let mut again = vec!["apply", "--format", "json"];
    again.extend_from_slice(&refs);
    let o = root.gpuhost(&again);
    assert_eq!(code(&o), 0, "{args:?}");
    assert_converged(&report(&o));
}

/// An H100 SXM pair on PCI, and with `hgx` an NVSwitch.
fn gpus(root: &Root, hgx: bool) {
    for i in 0..2 {
        root.add_pci_device(
            &format!("0000:{:02x}:00.0", 0x19 + i),
            0x10de,
            0x2330,
            0x030200,
        );
    }
    if hgx {
        root.add_pci_device("0000:05:00.0", 0x10de, 0x22a3, 0x068000);
    }
}

/// `driver.keep_local_repo = false`: the first converge into gpuhost's cache, the swap to
/// another driver from its package, the move back to `true` (NVIDIA's package installed, the
/// cache removed) and to `false` again.
#[test]
fn keep_local_repo_first_converge_swap_and_moves() {
    let root = Root::new(Os::Ol9, &[UEK9]);
    let off = ["--set", "driver.keep_local_repo=false"];
    converges_as_planned(&root, &args("ol9-uek", DRIVER_LOCAL_EL9_570, &off));
    let replace = [
        "--set",
        "driver.keep_local_repo=false",
        "--set",
        "driver.replace_local_repo=true",
    ];
    converges_as_planned(&root, &args("ol9-uek", CUDA_LOCAL_EL9_13_0, &replace));
    converges_as_planned(&root, &args("ol9-uek", CUDA_LOCAL_EL9_13_0, &[]));
    converges_as_planned(&root, &args("ol9-uek", CUDA_LOCAL_EL9_13_0, &off));
}

/// Oracle Linux 10's compute-only set (no module streams), its branch held by versionlock, and
/// a swap to the next branch; on an HGX node (Fabric Manager, NSCQ) with IMEX asked for.
#[test]
fn compute_only_with_imex_on_hgx_and_a_branch_swap() {
    let root = Root::new(Os::Ol10, &[UEK10]);
    gpus(&root, true);
    let set = [
        "--set",
        "driver.install=compute-only",
        "--set",
        "driver.imex=true",
    ];
    converges_as_planned(&root, &args("ol10-uek", DRIVER_LOCAL_EL10_580, &set));
    let swap = [
        "--set",
        "driver.install=compute-only",
        "--set",
        "driver.imex=true",
        "--set",
        "driver.replace_local_repo=true",
    ];
    converges_as_planned(&root, &args("ol10-uek", DRIVER_LOCAL_EL10_590, &swap));
}

/// The other flavour's stream on a converged node (`driver.switch_stream`): one swap of the set.
#[test]
fn switch_stream_to_the_other_flavour() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    gpus(&root, false);
    converges_as_planned(&root, &args("ol8-uek", CUDA_LOCAL_EL8_12_2, &[]));
    let switch = [
        "--set",
        "driver.flavour=proprietary",
        "--set",
        "driver.switch_stream=true",
    ];
    converges_as_planned(&root, &args("ol8-uek", CUDA_LOCAL_EL8_12_2, &switch));
}

/// The container runtime's keys: the nvidia runtime as Docker's default, a shared-memory size,
/// CDI; and the prefix links of a library from another repo.
#[test]
fn container_runtime_keys_and_prefix_links() {
    let root = Root::new(Os::Ol8, &[UEK8_NEW]);
    let (_dir, site) = world::site_toml(&format!(
        "extends = \"{}\"\n\n[driver]\nlocal_repo_rpm = \"{}\"\n\n[docker.daemon]\ndefault_runtime_nvidia = true\ndefault_shm_size = \"8g\"\n\n[container_toolkit]\ncdi = true\n\n[[prefix_links]]\npackages = [\"libnccl\", \"libnccl-devel\"]\nprefix = \"/opt/nvidia/nccl\"\n",
        profile("ol8-uek"),
        local(CUDA_LOCAL_EL8_12_2)
    ));
    converges_as_planned(&root, &["--profile".to_string(), site]);
}

/// A site package that needs the old driver, named in `driver.allow_erase`: the swap erases it,
/// as plan says.
#[test]
fn allow_erase_lets_a_swap_erase_a_site_package() {
    let root = Root::new(Os::Ol9, &[UEK9]);
    converges_as_planned(&root, &args("ol9-uek", DRIVER_LOCAL_EL9_570, &[]));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let spec = dir.path().join("site.spec");
    std::fs::write(
        &spec,
        "Name: site-keep-r570\nVersion: 1\nRelease: 1\nSummary: keeps R570\nLicense: MIT\nBuildArch: noarch\nRequires: nvidia-driver = 3:570.124.06\n%description\nA site's pin.\n%files\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = Command::new("rpmbuild")
        .arg("-bb")
        .arg("--define")
        .arg(format!("_topdir {}", dir.path().display()))
        .arg(&spec)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rpm = dir.path().join("RPMS/noarch/site-keep-r570-1-1.noarch.rpm");
    let o = root.rpm(&["-i", "--nodeps", &rpm.display().to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let allow = [
        "--set",
        "driver.replace_local_repo=true",
        "--set",
        "driver.allow_erase=[\"site-keep-r570\"]",
    ];
    converges_as_planned(&root, &args("ol9-uek", CUDA_LOCAL_EL9_13_0, &allow));
    assert!(root.installed("site-keep-r570").is_none());
}

/// A bundle on a node set up online (item 1): the same driver, unchanged; the set moved into
/// gpuhost's cache (`--set driver.keep_local_repo=false`); another driver's bundle swapped in.
#[test]
fn a_bundle_on_a_node_set_up_online() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let node = Root::new(Os::Ol8, &[UEK8_NEW]);
    converges_as_planned(&node, &args("ol8-uek", CUDA_LOCAL_EL8_12_2, &[]));
    let make = |rpm: &str, name: &str| {
        let out = tmp.path().join(name);
        let src = Root::new(Os::Ol8, &[UEK8_NEW]);
        let a = args("ol8-uek", rpm, &["--set", "driver.replace_local_repo=true"]);
        let mut b = vec!["bundle", "--out"];
        let shown = out.display().to_string();
        b.push(&shown);
        b.extend(a.iter().map(String::as_str));
        let o = src.gpuhost(&b);
        assert_eq!(code(&o), 0, "{}", world::stderr(&o));
        shown
    };
    let same = make(CUDA_LOCAL_EL8_12_2, "a");
    let other = make(CUDA_LOCAL_EL8_12_4, "b");
    converges_as_planned(&node, &["--bundle".to_string(), same.clone()]);
    let off = [
        "--bundle",
        same.as_str(),
        "--set",
        "driver.keep_local_repo=false",
    ];
    converges_as_planned(&node, &off.map(str::to_string));
    converges_as_planned(&node, &["--bundle".to_string(), other]);
}
