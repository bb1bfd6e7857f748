//! What `gpuhost kmod build` is given, checked before anything is compiled or written (exit 2,
//! one line naming the thing and what to do): the fleet's key and certificate (regular files,
//! the key root's and private, the certificate the key's), the kernel releases, and `--out`
//! (nothing, an empty folder, or a kmod repo gpuhost wrote).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::Result;

use gpuhost_host::cmd::Cmd;
use gpuhost_host::error::{as_invalid, hinted};
use gpuhost_host::fsutil::{kind_of, open_named_file, sha256_hex};
use gpuhost_host::invalid;
use gpuhost_host::kmodrepo::{KmodManifest, MANIFEST};

/// The lock file of a kmod repo (`--out`), held for a whole build into it.
pub(super) const LOCK: &str = ".gpuhost-kmods.lock";

/// A key or certificate larger than this is not one (a 16 kbit RSA key in PEM is 13 KiB).
const MAX_KEY_BYTES: u64 = 64 * 1024;

const KEY_HINT: &str = "give --key the fleet's module-signing private key (PEM, root's, mode 600) and --cert its certificate (DER or PEM)";

/// The fleet's key pair on the build host: the key's path (read by the signer only, after
/// every build process has ended) and the certificate, as DER (what the repo carries and
/// `mokutil` enrolls).
pub(super) struct FleetKey {
    pub(super) key: PathBuf,
    pub(super) cert_der: Vec<u8>,
}

impl FleetKey {
    /// The key and certificate, each checked before it is opened (a FIFO or a device is never
    /// opened: it would hang, or never end), the key private to root, the certificate the key's.
    pub(super) fn read(key: &Path, cert: &Path) -> Result<FleetKey> {
        let k = read_small(key, "signing key --key")?;
        private_to_me(key)?;
        if !String::from_utf8_lossy(&k).contains("PRIVATE KEY-----") {
            return Err(refused("signing key --key", key, "not a PEM private key"));
        }
        let c = read_small(cert, "certificate --cert")?;
        let pem = c.starts_with(b"-----BEGIN");
        let cert_der = if pem {
            Cmd::new("openssl")
                .args(["x509", "-outform", "DER", "-in"])
                .arg(cert)
                .binary_stdout()
                .run()
                .map_err(|e| refused("certificate --cert", cert, &format!("{e:#}")))?
                .stdout_bytes
        } else {
            c
        };
        if cert_der.first() != Some(&0x30) {
            return Err(refused(
                "certificate --cert",
                cert,
                "not an X.509 certificate",
            ));
        }
        same_public_key(key, cert, pem)?;
        Ok(FleetKey {
            key: key.to_path_buf(),
            cert_der,
        })
    }

    pub(super) fn cert_sha256(&self) -> String {
        sha256_hex(&self.cert_der)
    }
}

fn refused(what: &str, p: &Path, why: &str) -> anyhow::Error {
    as_invalid(hinted(
        format!(
            "the fleet's {what} {} cannot be used ({why}), so nothing was compiled",
            p.display()
        ),
        KEY_HINT,
    ))
}

/// The bytes of a small regular file the user named: its type judged from its metadata before
/// any open (a FIFO, a socket or a device is refused unopened: `/dev/zero` is never read), then
/// opened without blocking and checked again on the descriptor, at most [`MAX_KEY_BYTES`].
fn read_small(p: &Path, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let m = std::fs::metadata(p).map_err(|e| refused(what, p, &e.to_string()))?;
    if !m.file_type().is_file() {
        let kind = kind_of(m.file_type());
        return Err(refused(what, p, &format!("{kind}, not a regular file")));
    }
    if m.len() > MAX_KEY_BYTES {
        let why = format!("{} bytes, more than a key or certificate", m.len());
        return Err(refused(what, p, &why));
    }
    let f = open_named_file(p).map_err(|e| refused(what, p, &e.to_string()))?;
    let mut bytes = Vec::new();
    f.take(MAX_KEY_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| refused(what, p, &e.to_string()))?;
    Ok(bytes)
}

/// The key must be gpuhost's user's (root's) and readable by no one else, as a DKMS key is
/// (`secure_boot.key`): a key another user can read is no longer the fleet's secret, and the
/// build's unprivileged user must never be able to read it.
fn private_to_me(key: &Path) -> Result<()> {
    let m =
        std::fs::metadata(key).map_err(|e| refused("signing key --key", key, &e.to_string()))?;
    let me = rustix::process::geteuid().as_raw();
    if m.uid() != me {
        return Err(invalid!(
            "the fleet's signing key --key {} is owned by uid {}, not by uid {me} (root), so nothing was compiled: a module signing key must be private; run `chown {me} {}; chmod 600 {}`",
            key.display(),
            m.uid(),
            key.display(),
            key.display()
        ));
    }
    if m.mode() & 0o077 != 0 {
        return Err(invalid!(
            "the fleet's signing key --key {} is readable by others (mode {:o}), so nothing was compiled: a module signing key must be private; run `chmod 600 {}`",
            key.display(),
            m.mode() & 0o7777,
            key.display()
        ));
    }
    Ok(())
}

/// The certificate must be the key's: the public key of each (`openssl x509 -pubkey`,
/// `openssl pkey -pubout`) the same. A certificate of another key would sign nothing a node
/// trusts, found before hours of compiling rather than after.
fn same_public_key(key: &Path, cert: &Path, pem: bool) -> Result<()> {
    let of_cert = Cmd::new("openssl")
        .args(["x509", "-noout", "-pubkey", "-inform"])
        .arg(if pem { "PEM" } else { "DER" })
        .arg("-in")
        .arg(cert)
        .run()
        .map_err(|e| refused("certificate --cert", cert, &format!("{e:#}")))?;
    let of_key = Cmd::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(key)
        .run()
        .map_err(|e| refused("signing key --key", key, &format!("{e:#}")))?;
    if of_cert.stdout.trim() != of_key.stdout.trim() {
        return Err(invalid!(
            "the fleet's certificate --cert {} is not the certificate of the signing key --key {} (their public keys differ), so nothing was compiled: give --cert the certificate made with that key",
            cert.display(),
            key.display()
        ));
    }
    Ok(())
}

/// A kernel release as `uname -r` prints it on Enterprise Linux: version-release.arch, one
/// `-`, letters, digits and `._+~` only. It names paths (`/usr/src/kernels/<kver>`) and goes
/// into the RPM's spec (`Requires: kernel-uname-r = <kver>`), so nothing else gets through.
pub(super) fn check_kernel_release(k: &str) -> Result<()> {
    let chars = k
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._+~-".contains(c));
    let shape = !k.is_empty()
        && k.len() <= 128
        && k.matches('-').count() == 1
        && k.starts_with(|c: char| c.is_ascii_digit())
        && !k.ends_with(['-', '.'])
        && !k.contains("..");
    if chars && shape {
        return Ok(());
    }
    let shown = if k.is_empty() {
        "''".to_string()
    } else {
        k.escape_debug().to_string()
    };
    Err(invalid!(
        "kernel release {shown} is not an Enterprise Linux kernel release (version-release.arch, one '-', as uname -r prints on Oracle Linux), so nothing was compiled: give --kernel-release a kernel installed in the build root"
    ))
}

/// `--out` must be nothing yet, an empty folder, or a kmod repo gpuhost wrote (its manifest
/// read and checked, signed by this certificate): a site's dnf repo or any other folder is
/// never rewritten.
pub(super) fn check_out(out: &Path, cert_sha256: &str) -> Result<()> {
    let m = match std::fs::symlink_metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(out_refused(out, &e.to_string())),
        Ok(m) => m,
    };
    let m = if m.file_type().is_symlink() {
        std::fs::metadata(out).map_err(|e| out_refused(out, &e.to_string()))?
    } else {
        m
    };
    if !m.is_dir() {
        return Err(out_refused(out, kind_of(m.file_type())));
    }
    let names: Vec<String> = std::fs::read_dir(out)
        .map_err(|e| out_refused(out, &e.to_string()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != LOCK)
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    if !names.iter().any(|n| n == MANIFEST) {
        let mut shown: Vec<&str> = names.iter().map(String::as_str).collect();
        shown.sort_unstable();
        shown.truncate(5);
        let why = format!(
            "a folder that holds {} but no {MANIFEST}: not a kmod repo gpuhost wrote",
            shown.join(", ")
        );
        return Err(out_refused(out, &why));
    }
    let manifest = KmodManifest::read_verified(out)?;
    if manifest.cert_sha256 != cert_sha256 {
        return Err(invalid!(
            "{} holds kmods signed by another key (its {}): give --out a new directory, or the key that repo was built with",
            out.display(),
            gpuhost_host::kmodrepo::CERT
        ));
    }
    Ok(())
}

fn out_refused(out: &Path, why: &str) -> anyhow::Error {
    invalid!(
        "--out {} is {why}, so nothing was compiled: give --out a new or empty directory, or a kmod repo `gpuhost kmod build` wrote",
        out.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_are_enterprise_linux_ones() {
        for ok in [
            "5.15.0-206.153.7.el9uek.x86_64",
            "6.12.0-103.40.4.3.el10uek.aarch64.64k",
            "4.18.0-553.16.1.0.1.el8_10.x86_64",
        ] {
            assert!(check_kernel_release(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            " ",
            "6.1.0-57-amd64",
            "5.15.0",
            "5.15.0-1%(touch x).x86_64",
            "5.15.0-1/../../x",
            "5.15.0-1\n.x86_64",
            "-5.15.0",
            "5.15.0-1.el9 x",
        ] {
            let e = check_kernel_release(bad).err();
            assert!(
                e.as_ref().is_some_and(gpuhost_host::error::is_invalid),
                "{bad:?}: {e:?}"
            );
        }
    }

    #[test]
    fn out_is_nothing_an_empty_folder_or_a_kmod_repo() -> Result<()> {
        let d = tempfile::tempdir()?;
        assert!(check_out(&d.path().join("new"), "x").is_ok());
        assert!(check_out(d.path(), "x").is_ok());
        std::fs::write(d.path().join(LOCK), b"")?;
        assert!(check_out(d.path(), "x").is_ok());
        std::fs::create_dir(d.path().join("repodata"))?;
        let e = check_out(d.path(), "x").err();
        assert!(
            e.as_ref().is_some_and(gpuhost_host::error::is_invalid),
            "{e:?}"
        );
        assert!(format!("{e:?}").contains("repodata"), "{e:?}");
        let e = check_out(&d.path().join(LOCK), "x").err();
        assert!(format!("{e:?}").contains("a regular file"), "{e:?}");
        Ok(())
    }
}
