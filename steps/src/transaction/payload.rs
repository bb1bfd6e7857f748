//! A package's files read before it is installed: the files of its payload (`rpm2cpio`) that a
//! caller asks for, unpacked by `cpio` into a scratch tree on the root's disk. A first converge
//! reads NVIDIA's local repo out of it ([`crate::transaction::ahead`]), a driver swap the new driver's
//! ([`crate::transaction::swap`]).

use std::path::{Path, PathBuf};

use gpuhost_host::cmd::Cmd;
use gpuhost_host::host::Host;

/// Why a payload was not unpacked: the package could not be read whole (`rpm2cpio`), or the
/// files asked for could not be extracted (`cpio`). Each caller says it in its own words.
pub(crate) enum Unpack {
    Unreadable(anyhow::Error),
    Unextracted(anyhow::Error),
}

/// The files of `rpm`'s payload that match `patterns` (`./etc/yum.repos.d/*`), unpacked into
/// `tree`, through `payload.cpio` in `scratch` (the folder the root names `scratch_in_root`),
/// which is removed when done.
pub(crate) fn unpack(
    host: &Host,
    rpm: &str,
    (scratch, scratch_in_root): (&Path, &str),
    tree: &Path,
    patterns: &[&str],
) -> Result<(), Unpack> {
    let payload = scratch.join("payload.cpio");
    Cmd::new("rpm2cpio")
        .arg(rpm)
        .stdout_file(&payload)
        .run()
        .map_err(Unpack::Unreadable)?;
    Cmd::new("cpio")
        .args(["-idm", "--quiet", "--no-absolute-filenames"])
        .args(patterns)
        .stdin_file(&payload)
        .current_dir(tree)
        .run()
        .map_err(Unpack::Unextracted)?;
    host.remove_file(format!("{scratch_in_root}/payload.cpio"))
        .map(drop)
        .map_err(Unpack::Unextracted)
}

/// A `gpgkey` of a `.repo` file the package carries, read from the unpacked `tree` when it is a
/// `file://` key under `under` (where the package puts its keys); None for any other key.
pub(crate) fn key_in_tree(key: &str, tree: &Path, under: &str) -> Option<PathBuf> {
    key.strip_prefix("file://")
        .filter(|p| p.starts_with(under))
        .map(|p| tree.join(p.trim_start_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_the_package_carries_is_read_from_the_tree() {
        let tree = Path::new("/root/var/cache/gpuhost/download/tree");
        let key = "file:///var/nvidia-driver-local-repo-rhel9-580.82.07/D42D0685.pub";
        assert_eq!(
            key_in_tree(key, tree, "/var/"),
            Some(tree.join("var/nvidia-driver-local-repo-rhel9-580.82.07/D42D0685.pub"))
        );
        assert_eq!(
            key_in_tree(key, tree, "/var/cuda-repo-rhel9-13-0-local"),
            None
        );
        assert_eq!(key_in_tree("https://x/key.pub", tree, "/var/"), None);
        assert_eq!(key_in_tree("file:///etc/pki/key", tree, "/var/"), None);
    }
}
