//! A package's files read before it is installed: the files of its payload (`rpm2cpio`) that a
//! caller asks for, unpacked by `cpio` into a scratch tree on the root's disk. A first converge
//! reads NVIDIA's local repo out of it ([`crate::transaction::ahead`]), a driver swap the new driver's
//! ([`crate::transaction::swap`]).

use std::path::Path;

use anyhow::Result;

use gpuhost_host::cmd::Cmd;
use gpuhost_host::error::hinted;
use gpuhost_host::host::Host;
use gpuhost_host::rootfs::Kind;

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

/// The files of the package file `rpm` (a path on this machine) that match `patterns`, unpacked
/// into the root's folder `tree` through the root's scratch folder `scratch` (both made if
/// missing). One reader for every caller: a first converge, a driver swap, the build host's
/// kmod build.
pub fn extract(host: &Host, rpm: &str, scratch: &str, tree: &str, patterns: &[&str]) -> Result<()> {
    host.create_dir_all(scratch)?;
    host.create_dir_all(tree)?;
    let real = (host.real_path(scratch)?, host.real_path(tree)?);
    unpack(host, rpm, (&real.0, scratch), &real.1, patterns).map_err(|e| match e {
        Unpack::Unreadable(e) => e.context(format!("{rpm} could not be read whole")),
        Unpack::Unextracted(e) => e.context(format!("extracting {} of {rpm}", patterns.join(" "))),
    })
}

/// A `gpgkey` of a `.repo` file the package carries, as dnf is to read it: an `https:` URL as it
/// is; a `file://` key inside the package's own repo directory `under` (normalised: `.` and
/// `..` resolved) as the file of the unpacked tree, which must be a regular file there with no
/// link on the way (the tree is `tree.0` on this machine, `tree.1` in the root). Anything else
/// (a file elsewhere, `..` out of the directory, a link, `http:`, `ftp:`) is bad input: a
/// package's repo never makes dnf read the build host. `repo_file` names the `.repo` file in
/// the message.
pub(crate) fn repo_key(
    host: &Host,
    key: &str,
    tree: (&Path, &str),
    under: &str,
    repo_file: &str,
) -> Result<String> {
    if key.starts_with("https://") {
        return Ok(key.to_string());
    }
    let refuse = |why: &str| {
        gpuhost_host::error::as_invalid(hinted(
            format!("{repo_file} in the local repo package names gpgkey={key}, {why}; nothing was installed"),
            "use NVIDIA's local repo package as NVIDIA ships it: its .repo file names its own key, in its own repo directory",
        ))
    };
    let Some(path) = key.strip_prefix("file://") else {
        return Err(refuse(
            "which is neither an https: URL nor a file of the package's own repo",
        ));
    };
    let Some(normal) = normalised(path) else {
        return Err(refuse("whose `..` leaves the root"));
    };
    let under = under.trim_end_matches('/');
    if !normal.starts_with(&format!("{under}/")) {
        return Err(refuse(&format!(
            "a file outside the package's own repo directory {under}"
        )));
    }
    // Each component from the tree down, not followed: a link of the payload may lead anywhere.
    let mut inside = tree.1.trim_end_matches('/').to_string();
    let parts: Vec<&str> = normal.split('/').filter(|c| !c.is_empty()).collect();
    for (i, c) in parts.iter().enumerate() {
        inside.push('/');
        inside.push_str(c);
        let want = if i + 1 == parts.len() {
            Kind::File
        } else {
            Kind::Dir
        };
        if host.kind_nofollow(&inside) != Some(want) {
            return Err(refuse(
                "which the package does not carry as a file of its own repo (missing, or a link)",
            ));
        }
    }
    Ok(format!(
        "file://{}",
        tree.0.join(normal.trim_start_matches('/')).display()
    ))
}

/// `path` with `.` and `..` resolved and repeated `/` folded (`None` when `..` would climb out of
/// `/`). Lexical only: links are judged on the files themselves.
fn normalised(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root with an unpacked tree at `/scratch/tree` holding `repo`'s key `D42D0685.pub`, and
    /// a link `out.pub` beside it to the build host's `/etc/shadow`.
    fn tree_with_key(repo: &str) -> anyhow::Result<(tempfile::TempDir, Host, PathBufPair)> {
        let tmp = tempfile::tempdir()?;
        let tree = tmp.path().join("scratch/tree");
        std::fs::create_dir_all(tree.join(&repo[1..]))?;
        std::fs::write(tree.join(&repo[1..]).join("D42D0685.pub"), "key")?;
        std::os::unix::fs::symlink("/etc/shadow", tree.join(&repo[1..]).join("out.pub"))?;
        let host = Host::new(tmp.path())?;
        Ok((tmp, host, (tree, "/scratch/tree")))
    }

    type PathBufPair = (std::path::PathBuf, &'static str);

    #[test]
    fn a_key_the_package_carries_is_read_from_the_tree() -> anyhow::Result<()> {
        let repo = "/var/nvidia-driver-local-repo-rhel9-580.82.07";
        let (_tmp, host, (tree, inside)) = tree_with_key(repo)?;
        let t = (tree.as_path(), inside);
        let key = format!("file://{repo}/D42D0685.pub");
        let want = format!(
            "file://{}",
            tree.join(&repo[1..]).join("D42D0685.pub").display()
        );
        assert_eq!(repo_key(&host, &key, t, "/var/", "r.repo")?, want);
        assert_eq!(repo_key(&host, &key, t, repo, "r.repo")?, want);
        // `.` and `..` inside the repo are resolved.
        let dotted = format!("file://{repo}/./x/../D42D0685.pub");
        assert_eq!(repo_key(&host, &dotted, t, repo, "r.repo")?, want);
        let https = "https://x/key.pub";
        assert_eq!(repo_key(&host, https, t, "/var/", "r.repo")?, https);
        Ok(())
    }

    #[test]
    fn a_key_outside_the_packages_repo_is_invalid_input() -> anyhow::Result<()> {
        let repo = "/var/nvidia-driver-local-repo-rhel9-580.82.07";
        let (_tmp, host, (tree, inside)) = tree_with_key(repo)?;
        let t = (tree.as_path(), inside);
        for key in [
            "file:///etc/pki/key".to_string(),
            format!("file://{repo}/../../tmp/key.pub"),
            "file:///../../etc/shadow".to_string(),
            format!("file://{repo}/out.pub"),
            format!("file://{repo}/missing.pub"),
            "http://example.com/key.pub".to_string(),
            "ftp://example.com/key.pub".to_string(),
            "/etc/shadow".to_string(),
            // Another local repo's directory is not this package's.
            "file:///var/cuda-repo-rhel9-13-0-local/key.pub".to_string(),
        ] {
            let e = repo_key(&host, &key, t, repo, "r.repo").err();
            assert!(
                e.as_ref().is_some_and(gpuhost_host::error::is_invalid),
                "{key}: {e:?}"
            );
            assert!(format!("{e:?}").contains(&key), "{e:?}");
        }
        Ok(())
    }
}
