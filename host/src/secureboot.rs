//! Secure Boot: who signed a kernel module, and whether the firmware trusts that key.
//!
//! With Secure Boot on, EL kernels (lockdown) load a module only when its appended signature
//! verifies against a key in the kernel's keyrings: the kernel's own, UEFI `db`, and the Machine
//! Owner Keys that shim hands over (`MokListRT`). DKMS-built modules are signed by whatever key
//! DKMS 3.x is configured with (`mok_signing_key`/`mok_certificate`, read from
//! `/etc/dkms/framework.conf` and `/etc/dkms/framework.conf.d/*.conf` by `prepare_signing` in
//! the dkms script); NVIDIA's precompiled kmods carry NVIDIA's signature
//! (NVIDIA/yum-packaging-precompiled-kmod `dnf-kmod-nvidia.spec`: `sign-file sha256`, the
//! signature appended in `%post`), whose certificate must be enrolled as a MOK (its `UEFI.md`:
//! `NVIDIA2019-public_key.der`).
//!
//! Everything here reads files: the module's trailer as the kernel's `mod_verify_sig` reads it
//! (`struct module_signature` + `"~Module signature appended~\n"`, PKCS#7 signed data whose
//! signer info names the certificate by issuer and serial number, or by subject key identifier),
//! DER certificates, and the EFI signature lists in efivarfs (UEFI spec `EFI_SIGNATURE_LIST`;
//! efivarfs files start with the 4-byte attributes). `mokutil --test-key` answers the same
//! question for one certificate; [`test_key`] runs it.

use std::fmt;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cmd::Cmd;
use crate::host::Host;

/// What `scripts/sign-file` appends after the signature (include/linux/module_signature.h).
pub(crate) const MAGIC: &[u8] = b"~Module signature appended~\n";
/// `struct module_signature`: algo, hash, id_type, signer_len, key_id_len, pad[3], be32 sig_len.
const TRAILER: usize = 12;
/// `id_type` of a PKCS#7 signature (`PKEY_ID_PKCS7`), the only kind kernels since 4.3 accept.
const PKEY_ID_PKCS7: u8 = 2;

/// efivarfs directory and the GUIDs of the variables read here.
pub(crate) const EFIVARS: &str = "/sys/firmware/efi/efivars";
const SHIM_GUID: &str = "605dab50-e046-4300-abb6-3dd810dd8b23";
const IMAGE_SECURITY_GUID: &str = "d719b2cb-3d3a-4596-a3bc-dad00e67656f";
/// `EFI_CERT_X509_GUID` a5c059a1-94e4-4aa7-87b5-ab155c2bf072, as stored (mixed endian).
const CERT_X509: [u8; 16] = [
    0xa1, 0x59, 0xc0, 0xa5, 0xe4, 0x94, 0xa7, 0x4a, 0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72,
];

/// How a PKCS#7 signer info names its certificate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyId {
    /// `issuerAndSerialNumber`: the issuer `Name` (DER) and the serial number (DER content).
    IssuerSerial {
        issuer: String,
        #[serde(with = "hex")]
        issuer_der: Vec<u8>,
        #[serde(with = "hex")]
        serial: Vec<u8>,
    },
    /// `subjectKeyIdentifier`.
    SubjectKeyId(#[serde(with = "hex")] Vec<u8>),
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyId::IssuerSerial { issuer, serial, .. } => {
                write!(f, "{issuer} (serial {})", hex::encode(serial))
            }
            KeyId::SubjectKeyId(k) => write!(f, "key id {}", hex::encode(k)),
        }
    }
}

/// An X.509 certificate, as far as matching signers needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cert {
    pub subject: String,
    pub issuer: String,
    issuer_der: Vec<u8>,
    serial: Vec<u8>,
    ski: Option<Vec<u8>>,
}

impl Cert {
    /// Parse a DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Cert> {
        let (cert, _) = tlv(der, SEQUENCE).context("not a DER X.509 certificate")?;
        let (tbs, _) = tlv(cert, SEQUENCE).context("no tbsCertificate")?;
        let mut rest = tbs;
        if rest.first() == Some(&0xa0) {
            rest = skip(rest)?; // [0] version
        }
        let (serial, r) = tlv(rest, INTEGER).context("no serial number")?;
        let r = skip(r)?; // signature algorithm
        let (issuer_der, r) = whole(r, SEQUENCE).context("no issuer")?;
        let r = skip(r)?; // validity
        let (subject_der, mut r) = whole(r, SEQUENCE).context("no subject")?;
        r = skip(r)?; // subjectPublicKeyInfo
        let mut ski = None;
        while let Some(&tag) = r.first() {
            if tag == 0xa3 {
                let (exts, _) = tlv(r, 0xa3)?;
                ski = subject_key_id(exts)?;
                break;
            }
            r = skip(r)?;
        }
        Ok(Cert {
            subject: name_text(subject_der),
            issuer: name_text(issuer_der),
            issuer_der: issuer_der.to_vec(),
            serial: serial.to_vec(),
            ski,
        })
    }

    /// Read a DER certificate file on the host.
    pub fn load(host: &Host, path: &str) -> Result<Cert> {
        let der = host
            .read_bytes_opt(path)?
            .ok_or_else(|| anyhow!("{path}: no such file"))?;
        Cert::from_der(&der).with_context(|| {
            format!("{path}: not a DER X.509 certificate (convert a PEM one with `openssl x509 -in CERT.pem -outform DER -out {path}`)")
        })
    }

    /// True when a signer info naming `id` means this certificate.
    pub fn is(&self, id: &KeyId) -> bool {
        match id {
            KeyId::IssuerSerial {
                issuer_der, serial, ..
            } => *issuer_der == self.issuer_der && *serial == self.serial,
            KeyId::SubjectKeyId(k) => self.ski.as_ref() == Some(k),
        }
    }
}

impl fmt::Display for Cert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.subject)
    }
}

/// The appended signature of a module file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleSignature {
    /// The digest the signer info names (`sha256`, `sha512`, …).
    pub hash: String,
    pub signer: KeyId,
}

/// Parse the appended signature of an (uncompressed) module; `None` when it carries none.
pub(crate) fn appended_signature(module: &[u8]) -> Result<Option<ModuleSignature>> {
    let Some(body) = module.strip_suffix(MAGIC) else {
        return Ok(None);
    };
    let Some(split) = body.len().checked_sub(TRAILER) else {
        bail!("the module signature trailer is truncated");
    };
    let (rest, ms) = body.split_at(split);
    if ms[2] != PKEY_ID_PKCS7 {
        bail!(
            "the module carries a signature of id type {}, not PKCS#7: no kernel since 4.3 accepts it",
            ms[2]
        );
    }
    let sig_len = u32::from_be_bytes([ms[8], ms[9], ms[10], ms[11]]) as usize;
    let Some(start) = rest.len().checked_sub(sig_len) else {
        bail!("the module signature claims {sig_len} bytes, more than the file holds");
    };
    let signer = pkcs7_signer(&rest[start..]).context("unreadable PKCS#7 module signature")?;
    Ok(Some(signer))
}

/// The digest and signer of the first signer info of PKCS#7 signed data.
fn pkcs7_signer(der: &[u8]) -> Result<ModuleSignature> {
    let (ci, _) = tlv(der, SEQUENCE)?;
    let (oid, r) = tlv(ci, OID)?;
    if oid != OID_SIGNED_DATA {
        bail!("content type is not signedData");
    }
    let (explicit, _) = tlv(r, 0xa0)?;
    let (sd, _) = tlv(explicit, SEQUENCE)?;
    let mut r = skip(sd)?; // version
    r = skip(r)?; // digestAlgorithms
    r = skip(r)?; // encapContentInfo
    while matches!(r.first(), Some(0xa0 | 0xa1)) {
        r = skip(r)?; // certificates, crls
    }
    let (infos, _) = tlv(r, SET)?;
    let (si, _) = tlv(infos, SEQUENCE).context("no signer info")?;
    let r = skip(si)?; // version
    let signer = match r.first() {
        Some(&SEQUENCE) => {
            let (ias, _) = tlv(r, SEQUENCE)?;
            let (issuer_der, r2) = whole(ias, SEQUENCE)?;
            let (serial, _) = tlv(r2, INTEGER)?;
            KeyId::IssuerSerial {
                issuer: name_text(issuer_der),
                issuer_der: issuer_der.to_vec(),
                serial: serial.to_vec(),
            }
        }
        Some(0x80) => KeyId::SubjectKeyId(tlv(r, 0x80)?.0.to_vec()),
        _ => bail!("signer info names its certificate in an unknown way"),
    };
    let r = skip(r)?;
    let (alg, _) = tlv(r, SEQUENCE)?;
    let (oid, _) = tlv(alg, OID)?;
    Ok(ModuleSignature {
        hash: digest_name(oid),
        signer,
    })
}

/// The module file's bytes, decompressed (`.ko.xz`, `.ko.zst`, `.ko.gz`: the signature is
/// appended before compression) by the tools kmod itself links.
pub(crate) fn read_module(host: &Host, path: &str) -> Result<Vec<u8>> {
    let tool = if path.ends_with(".xz") {
        Some("xz")
    } else if path.ends_with(".zst") {
        Some("zstd")
    } else if path.ends_with(".gz") {
        Some("gzip")
    } else {
        None
    };
    match tool {
        None => host
            .read_bytes_opt(path)?
            .ok_or_else(|| anyhow!("{path}: no such file")),
        Some(t) => {
            let file = host.real_path(path)?;
            let cmd = Cmd::new(t).args(["-d", "-c"]).arg(&file).binary_stdout();
            let out = cmd.run()?;
            Ok(out.stdout_bytes)
        }
    }
}

/// The appended signature of a module file on this machine (`.ko`, or compressed `.ko.xz`,
/// `.ko.zst`, `.ko.gz`, decompressed in process): a kmod's module checked before it is
/// installed.
pub fn file_signature(path: &std::path::Path) -> Result<Option<ModuleSignature>> {
    use std::io::Read;
    let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    let bytes = match crate::rpmfile::by_suffix(&path.to_string_lossy(), &raw)? {
        Some(mut r) => {
            r.read_to_end(&mut out)
                .with_context(|| format!("decompressing {}", path.display()))?;
            &out
        }
        None => &raw,
    };
    appended_signature(bytes)
}

/// [`read_module`] + [`appended_signature`], remembered per file (path, size, mtime) for the
/// life of the process: `gpuhost serve` sweeps every few seconds, and an `nvidia.ko.xz` takes
/// a few hundred milliseconds to decompress.
pub(crate) fn module_signature_cached(host: &Host, path: &str) -> Result<Option<ModuleSignature>> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Stamp = (u64, i64, i64, u64);
    type Seen = HashMap<std::path::PathBuf, (Stamp, Option<ModuleSignature>)>;
    static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
    let real = host.path(path);
    let stamp = host
        .stamp(path)
        .ok_or_else(|| anyhow!("{path}: no such file"))?;
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((s, sig)) = seen.as_ref().and_then(|m| m.get(&real)) {
        if *s == stamp {
            return Ok(sig.clone());
        }
    }
    let sig = appended_signature(&read_module(host, path)?)?;
    seen.get_or_insert_with(HashMap::new)
        .insert(real, (stamp, sig.clone()));
    Ok(sig)
}

/// Where a signer's certificate stands with the firmware.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Trust {
    /// In `MokListRT` (enrolled Machine Owner Keys) or UEFI `db`: the kernel trusts it.
    Enrolled { list: String, subject: String },
    /// In `MokNew`: shim's MokManager asks at the next boot, at the console, to enroll it.
    Pending { subject: String },
    /// In none of them.
    Unknown,
}

/// The certificates of the EFI signature lists the kernel trusts for modules, and the pending
/// enrollment request, read from efivarfs.
#[derive(Clone, Debug, Default)]
pub struct Keys {
    /// (variable, certificate)
    pub trusted: Vec<(String, Cert)>,
    pub pending: Vec<Cert>,
}

impl Keys {
    /// Read `MokListRT`, `MokListRT1`… (shim splits a long list), `db` and `MokNew`.
    pub fn read(host: &Host) -> Result<Keys> {
        let mut keys = Keys::default();
        let mut vars = vec!["MokListRT".to_string()];
        vars.extend((1..10).map(|i| format!("MokListRT{i}")));
        vars.push("db".to_string());
        for name in vars {
            for cert in efi_certs(host, &name)? {
                keys.trusted.push((name.clone(), cert));
            }
        }
        keys.pending = efi_certs(host, "MokNew")?;
        Ok(keys)
    }

    pub fn trust(&self, id: &KeyId) -> Trust {
        if let Some((list, c)) = self.trusted.iter().find(|(_, c)| c.is(id)) {
            return Trust::Enrolled {
                list: list.clone(),
                subject: c.subject.clone(),
            };
        }
        match self.pending.iter().find(|c| c.is(id)) {
            Some(c) => Trust::Pending {
                subject: c.subject.clone(),
            },
            None => Trust::Unknown,
        }
    }
}

/// The X.509 certificates of one EFI variable (none when it does not exist).
fn efi_certs(host: &Host, name: &str) -> Result<Vec<Cert>> {
    let path = efivar_path(name);
    let Some(data) = host.read_bytes_opt(&path)? else {
        return Ok(Vec::new());
    };
    let lists = data.get(4..).unwrap_or_default(); // efivarfs: 4 bytes of attributes first
    signature_list_certs(lists).with_context(|| format!("{path}: not an EFI signature list"))
}

/// The X.509 entries of concatenated `EFI_SIGNATURE_LIST`s.
pub(crate) fn signature_list_certs(mut data: &[u8]) -> Result<Vec<Cert>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let (Some(kind), Some(head)) = (data.get(..16), data.get(16..28)) else {
            bail!("truncated list header");
        };
        let le = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (list_size, header_size, sig_size) = (le(0) as usize, le(4) as usize, le(8) as usize);
        let list = data
            .get(..list_size)
            .filter(|_| list_size >= 28 + header_size && sig_size > 16)
            .ok_or_else(|| anyhow!("list size {list_size} does not fit"))?;
        if kind == CERT_X509 {
            for entry in list[28 + header_size..].chunks(sig_size) {
                // SignatureOwner GUID, then the DER certificate.
                if let Some(der) = entry.get(16..) {
                    out.push(Cert::from_der(der)?);
                }
            }
        }
        data = &data[list_size..];
    }
    Ok(out)
}

/// What `mokutil --test-key CERT` says of a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestKey {
    Enrolled,
    Pending,
    NotEnrolled,
}

/// `mokutil --test-key CERT`: "CERT is already enrolled" / "is already in the enrollment
/// request" (exit 1), "is not enrolled" (exit 0). In an install root, mokutil reads the root's
/// efivars (libefivar's `EFIVARFS_PATH`).
pub fn test_key(host: &Host, cert_path: &str) -> Result<TestKey> {
    test_key_file(host, &host.real_path(cert_path)?)
}

/// [`test_key`] of a certificate file of the machine gpuhost runs on (a kmod repo's), against
/// the root's firmware variables.
pub fn test_key_file(host: &Host, cert: &std::path::Path) -> Result<TestKey> {
    let mut cmd = Cmd::new("mokutil").arg("--test-key").arg(cert);
    if !host.is_live() {
        let mut dir = host.path(EFIVARS).into_os_string();
        dir.push("/");
        cmd = cmd.env("EFIVARFS_PATH", dir);
    }
    let out = cmd.output()?;
    let text = format!("{}{}", out.stdout, out.stderr);
    if text.contains("is already enrolled") {
        Ok(TestKey::Enrolled)
    } else if text.contains("already in the enrollment request") {
        Ok(TestKey::Pending)
    } else if text.contains("is not enrolled") {
        Ok(TestKey::NotEnrolled)
    } else {
        Err(cmd.failure(&out))
    }
}

/// How to create and enroll a module signing key (the profile names `key` and `cert`).
pub fn key_howto(key: &str, cert: &str) -> String {
    format!(
        "openssl req -new -x509 -newkey rsa:2048 -nodes -days 36500 -subj \"/CN=$(hostname) module signing key/\" -keyout {key} -outform DER -out {cert} && chmod 600 {key} && mokutil --import {cert} (asks for a one-time password), reboot and confirm the key in MokManager at the console, then set secure_boot.key = \"{key}\" and secure_boot.cert = \"{cert}\" in the profile"
    )
}

/// Where [`key_howto`] puts a key when the profile names none.
pub const DEFAULT_KEY: &str = "/etc/pki/gpuhost/mok.key";
pub const DEFAULT_CERT: &str = "/etc/pki/gpuhost/mok.der";

/// The certificate NVIDIA signs its precompiled RHEL kmods with
/// (NVIDIA/yum-packaging-precompiled-kmod `UEFI.md`, for RHEL 8; "subject to change").
pub const NVIDIA_PRECOMPILED_CERT: &str =
    "NVIDIA2019-public_key.der (https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/NVIDIA2019-public_key.der; the module's signer above names the key in use)";

/// Concatenated `EFI_SIGNATURE_LIST`s of X.509 certificates (one list per certificate, as
/// `mokutil --import` writes `MokNew`), owned by shim's GUID: what crafted install roots put
/// into efivarfs files after the 4 attribute bytes.
pub fn efi_signature_list(certs: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for der in certs {
        let sig_size = 16 + der.len();
        out.extend_from_slice(&CERT_X509);
        for n in [28 + sig_size, 0, sig_size] {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        out.extend_from_slice(&shim_guid_bytes());
        out.extend_from_slice(der);
    }
    out
}

/// An efivarfs file path of shim's variables (`MokListRT`, `MokNew`) or UEFI's `db`.
pub fn efivar_path(name: &str) -> String {
    let guid = if name == "db" {
        IMAGE_SECURITY_GUID
    } else {
        SHIM_GUID
    };
    format!("{EFIVARS}/{name}-{guid}")
}

/// 605dab50-e046-4300-abb6-3dd810dd8b23 as stored.
fn shim_guid_bytes() -> [u8; 16] {
    [
        0x50, 0xab, 0x5d, 0x60, 0x46, 0xe0, 0x00, 0x43, 0xab, 0xb6, 0x3d, 0xd8, 0x10, 0xdd, 0x8b,
        0x23,
    ]
}

// --- a small DER reader: enough for certificates and PKCS#7 signer infos -------------------

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const OID: u8 = 0x06;
/// 1.2.840.113549.1.7.2
const OID_SIGNED_DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x02];
/// 2.5.29.14
const OID_SKI: &[u8] = &[0x55, 0x1d, 0x0e];

/// One DER element: (tag, content, the whole element, the rest).
type Element<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

fn element(buf: &[u8]) -> Result<Element<'_>> {
    let (&tag, r) = buf.split_first().ok_or_else(|| anyhow!("truncated DER"))?;
    let (&first, r) = r.split_first().ok_or_else(|| anyhow!("truncated DER"))?;
    let (len, r) = if first < 0x80 {
        (first as usize, r)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || r.len() < n {
            bail!("unsupported DER length");
        }
        let len = r[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &r[n..])
    };
    if r.len() < len {
        bail!("truncated DER element");
    }
    let header = buf.len() - r.len();
    Ok((tag, &r[..len], &buf[..header + len], &r[len..]))
}

/// The content of an element of tag `want`, and what follows it.
fn tlv(buf: &[u8], want: u8) -> Result<(&[u8], &[u8])> {
    let (tag, content, _, rest) = element(buf)?;
    if tag != want {
        bail!("DER tag {tag:#04x} where {want:#04x} was expected");
    }
    Ok((content, rest))
}

/// The whole element (header included) of tag `want`, and what follows it.
fn whole(buf: &[u8], want: u8) -> Result<(&[u8], &[u8])> {
    let (tag, _, all, rest) = element(buf)?;
    if tag != want {
        bail!("DER tag {tag:#04x} where {want:#04x} was expected");
    }
    Ok((all, rest))
}

fn skip(buf: &[u8]) -> Result<&[u8]> {
    Ok(element(buf)?.3)
}

/// The subjectKeyIdentifier in a certificate's `[3]` extensions.
fn subject_key_id(exts: &[u8]) -> Result<Option<Vec<u8>>> {
    let (mut list, _) = tlv(exts, SEQUENCE)?;
    while !list.is_empty() {
        let (ext, rest) = tlv(list, SEQUENCE)?;
        list = rest;
        let (oid, mut r) = tlv(ext, OID)?;
        if oid != OID_SKI {
            continue;
        }
        if r.first() == Some(&0x01) {
            r = skip(r)?; // critical
        }
        let (octets, _) = tlv(r, 0x04)?;
        let (ski, _) = tlv(octets, 0x04)?;
        return Ok(Some(ski.to_vec()));
    }
    Ok(None)
}

/// `CN=…, O=…` of a DER `Name` (the attributes people read; others are left out).
fn name_text(name: &[u8]) -> String {
    let mut parts = Vec::new();
    let Ok((mut sets, _)) = tlv(name, SEQUENCE) else {
        return "(unreadable name)".into();
    };
    while let Ok((set, rest)) = tlv(sets, SET) {
        sets = rest;
        let Ok((atv, _)) = tlv(set, SEQUENCE) else {
            continue;
        };
        let Ok((oid, r)) = tlv(atv, OID) else {
            continue;
        };
        let label = match oid {
            [0x55, 0x04, 0x03] => "CN",
            [0x55, 0x04, 0x0a] => "O",
            [0x55, 0x04, 0x0b] => "OU",
            _ => continue,
        };
        if let Ok((_, value, _, _)) = element(r) {
            parts.push(format!("{label}={}", String::from_utf8_lossy(value)));
        }
    }
    if parts.is_empty() {
        "(no CN/O in name)".into()
    } else {
        parts.join(", ")
    }
}

fn digest_name(oid: &[u8]) -> String {
    const NIST: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02];
    match oid.strip_prefix(NIST) {
        Some([1]) => "sha256".into(),
        Some([2]) => "sha384".into(),
        Some([3]) => "sha512".into(),
        Some([4]) => "sha224".into(),
        _ if oid == [0x2b, 0x0e, 0x03, 0x02, 0x1a] => "sha1".into(),
        _ => format!("digest {}", hex::encode(oid)),
    }
}

/// Lower-case hex for byte strings in JSON and messages.
mod hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) use crate::fsutil::hex as encode;

    pub(super) fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(b))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        (0..s.len())
            .step_by(2)
            .map(|i| {
                s.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| serde::de::Error::custom("bad hex"))
            })
            .collect()
    }
}

/// The NVIDIA modules modprobe would load for `kver` (paths relative to
/// `/lib/modules/<kver>/`, from `modules.dep`) and their appended signatures, each file read
/// once per file version per process: what `kernel-module` judges and `gpuhost status` shows.
pub fn module_signatures(
    host: &Host,
    kver: &str,
) -> Result<Vec<(String, Result<Option<ModuleSignature>>)>> {
    let mut out = Vec::new();
    for m in crate::kmods::NVIDIA_MODULES {
        if let Some(path) = crate::kmods::loadable_path(host, kver, m)? {
            let file = format!("/lib/modules/{kver}/{path}");
            out.push((path, module_signature_cached(host, &file)));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Debian's `sign-file` (linux-kbuild), the same program EL kernel-devel ships.
    fn sign_file() -> Option<PathBuf> {
        let found = std::fs::read_dir("/usr/lib")
            .ok()?
            .flatten()
            .map(|e| e.path().join("scripts/sign-file"))
            .find(|p| p.exists());
        if found.is_none() && std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_some() {
            panic!("sign-file (linux-kbuild-*) is required");
        }
        found
    }

    fn tool(name: &str) -> bool {
        let ok = Command::new(name).arg("--help").output().is_ok();
        if !ok && std::env::var_os("GPUHOST_REQUIRE_ALL_TOOLS").is_some() {
            panic!("{name} is required");
        }
        ok
    }

    /// A key pair made the way `key_howto` says (openssl, DER certificate).
    fn keypair(dir: &Path, name: &str, cn: &str) -> (PathBuf, PathBuf) {
        let (key, cert) = (
            dir.join(format!("{name}.key")),
            dir.join(format!("{name}.der")),
        );
        let st = Command::new("openssl")
            .args([
                "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
            ])
            .arg("-subj")
            .arg(format!("/CN={cn}/O=gpuhost tests/"))
            .arg("-keyout")
            .arg(&key)
            .args(["-outform", "DER", "-out"])
            .arg(&cert)
            .output()
            .expect("openssl runs");
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        (key, cert)
    }

    fn sign(sf: &Path, hash: &str, key: &Path, cert: &Path, module: &Path, keyid: bool) {
        let mut c = Command::new(sf);
        if keyid {
            c.arg("-k");
        }
        let st = c
            .arg(hash)
            .arg(key)
            .arg(cert)
            .arg(module)
            .output()
            .expect("sign-file runs");
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    }

    #[test]
    fn reads_who_signed_a_module_as_sign_file_signs_it() -> Result<()> {
        let Some(sf) = sign_file() else { return Ok(()) };
        if !tool("openssl") || !tool("xz") {
            return Ok(());
        }
        let dir = tempfile::tempdir()?;
        let (k1, c1) = keypair(dir.path(), "mok", "node signing key");
        let (_, c2) = keypair(dir.path(), "other", "someone else");
        let cert1 = Cert::from_der(&std::fs::read(&c1)?)?;
        let cert2 = Cert::from_der(&std::fs::read(&c2)?)?;
        assert_eq!(cert1.subject, "CN=node signing key, O=gpuhost tests");

        let module = dir.path().join("lib/modules/k/extra/nvidia.ko");
        std::fs::create_dir_all(module.parent().unwrap_or(dir.path()))?;
        let body = b"\x7fELF not really a module, but sign-file does not care".repeat(100);
        std::fs::write(&module, &body)?;
        assert_eq!(appended_signature(&std::fs::read(&module)?)?, None);

        sign(&sf, "sha256", &k1, &c1, &module, false);
        let signed = std::fs::read(&module)?;
        assert!(signed.starts_with(&body), "the signature is appended");
        let sig = appended_signature(&signed)?.expect("signed");
        assert_eq!(sig.hash, "sha256");
        assert!(matches!(sig.signer, KeyId::IssuerSerial { .. }));
        assert!(cert1.is(&sig.signer) && !cert2.is(&sig.signer));
        assert!(sig.signer.to_string().starts_with("CN=node signing key"));

        // -k: the signer info names the subject key identifier instead.
        std::fs::write(&module, &body)?;
        sign(&sf, "sha512", &k1, &c1, &module, true);
        let sig = appended_signature(&std::fs::read(&module)?)?.expect("signed");
        assert_eq!(sig.hash, "sha512");
        assert!(matches!(sig.signer, KeyId::SubjectKeyId(_)));
        assert!(cert1.is(&sig.signer) && !cert2.is(&sig.signer));

        // DKMS compresses after signing (.ko.xz): the signature is read from the decompressed file.
        let st = Command::new("xz").arg("-f").arg(&module).status()?;
        assert!(st.success());
        let host = Host::new(dir.path())?;
        let bytes = read_module(&host, "/lib/modules/k/extra/nvidia.ko.xz")?;
        let sig2 = appended_signature(&bytes)?.expect("signed");
        assert!(cert1.is(&sig2.signer));
        Ok(())
    }

    /// A module the distribution signed (this machine's kernel package, signed at its build):
    /// gpuhost's reader names the signer, the key and the digest that kmod's own PKCS#7 reader
    /// (`modinfo -F signer/sig_key/sig_hashalgo`) names.
    #[test]
    fn reads_a_distribution_signed_module_as_kmod_does() -> Result<()> {
        let modinfo = |f: &Path, field: &str| -> String {
            let o = Command::new("modinfo").args(["-F", field]).arg(f).output();
            o.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default()
        };
        let mut checked = 0;
        for kdir in std::fs::read_dir("/lib/modules")
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = kdir.path().join("kernel/net/key");
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let f = e.path();
                let want_signer = modinfo(&f, "signer");
                if want_signer.is_empty() || f.extension().is_some_and(|x| x != "ko") {
                    continue;
                }
                let sig = appended_signature(&std::fs::read(&f)?)?.expect("signed");
                let key = modinfo(&f, "sig_key").replace(':', "").to_lowercase();
                match &sig.signer {
                    KeyId::IssuerSerial { issuer, serial, .. } => {
                        assert!(
                            issuer.contains(&format!("CN={want_signer}")),
                            "{issuer} vs {want_signer}"
                        );
                        assert!(
                            hex::encode(serial).ends_with(&key),
                            "{} vs {key}",
                            hex::encode(serial)
                        );
                    }
                    KeyId::SubjectKeyId(k) => assert_eq!(hex::encode(k), key),
                }
                assert_eq!(sig.hash, modinfo(&f, "sig_hashalgo"));
                checked += 1;
            }
        }
        eprintln!("compared {checked} distribution-signed modules with kmod's reading");
        Ok(())
    }

    /// A module file is read once per version (size, mtime, inode): the same file, even with
    /// other bytes written in place under the old mtime, answers from memory; a new mtime is
    /// read again. (`gpuhost serve` sweeps every few seconds; an nvidia.ko.xz takes a while.)
    #[test]
    fn a_module_is_read_once_per_file_version() -> Result<()> {
        let Some(sf) = sign_file() else { return Ok(()) };
        if !tool("openssl") {
            return Ok(());
        }
        let dir = tempfile::tempdir()?;
        let (k, c) = keypair(dir.path(), "mok", "cache test key");
        let module = dir.path().join("m.ko");
        std::fs::write(&module, b"module body".repeat(50))?;
        sign(&sf, "sha256", &k, &c, &module, false);
        let host = Host::new(dir.path())?;
        assert!(module_signature_cached(&host, "/m.ko")?.is_some());
        // Same length, same inode, same mtime: other (unsigned) bytes are not noticed.
        let mtime = std::fs::metadata(&module)?.modified()?;
        let len = std::fs::metadata(&module)?.len() as usize;
        let f = std::fs::OpenOptions::new().write(true).open(&module)?;
        std::io::Write::write_all(&mut &f, &vec![b'x'; len])?;
        f.set_modified(mtime)?;
        assert!(
            module_signature_cached(&host, "/m.ko")?.is_some(),
            "answered from memory"
        );
        // A new mtime is a new version: read again, now unsigned.
        f.set_modified(mtime + std::time::Duration::from_secs(1))?;
        assert_eq!(module_signature_cached(&host, "/m.ko")?, None);
        Ok(())
    }

    #[test]
    fn a_damaged_trailer_is_an_error_not_unsigned() {
        let mut m = b"module".to_vec();
        m.extend_from_slice(&[0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0x10, 0]);
        m.extend_from_slice(MAGIC);
        assert!(appended_signature(&m).is_err());
        let mut m = vec![0u8; 4];
        m.extend_from_slice(MAGIC);
        assert!(appended_signature(&m).is_err());
        assert!(Cert::from_der(b"\x30\x03\x02\x01").is_err());
    }

    /// The efivars gpuhost reads are the ones real mokutil reads: the same crafted root gives
    /// the same answers through both.
    #[test]
    fn enrolled_and_pending_keys_agree_with_mokutil() -> Result<()> {
        if !tool("openssl") || !tool("mokutil") {
            return Ok(());
        }
        let dir = tempfile::tempdir()?;
        let (_, c1) = keypair(dir.path(), "enrolled", "enrolled key");
        let (_, c2) = keypair(dir.path(), "pending", "pending key");
        let (_, c3) = keypair(dir.path(), "stranger", "unknown key");
        let (d1, d2) = (std::fs::read(&c1)?, std::fs::read(&c2)?);
        let vars = dir.path().join("sys/firmware/efi/efivars");
        std::fs::create_dir_all(&vars)?;
        let host = Host::new(dir.path())?;
        let write = |name: &str, certs: &[&[u8]]| -> Result<()> {
            let mut data = 6u32.to_le_bytes().to_vec();
            data.extend(efi_signature_list(certs));
            std::fs::write(host.path(efivar_path(name)), data)?;
            Ok(())
        };
        write("MokListRT", &[&d1])?;
        write("MokNew", &[&d2])?;
        // The certificates lie at the root's top: /enrolled.der, …
        assert_eq!(test_key(&host, "/enrolled.der")?, TestKey::Enrolled);
        assert_eq!(test_key(&host, "/pending.der")?, TestKey::Pending);
        assert_eq!(test_key(&host, "/stranger.der")?, TestKey::NotEnrolled);

        let keys = Keys::read(&host)?;
        let id = |c: &Path| -> Result<KeyId> {
            let c = Cert::from_der(&std::fs::read(c)?)?;
            Ok(KeyId::IssuerSerial {
                issuer: c.issuer.clone(),
                issuer_der: c.issuer_der.clone(),
                serial: c.serial.clone(),
            })
        };
        assert!(
            matches!(keys.trust(&id(&c1)?), Trust::Enrolled { ref list, .. } if list == "MokListRT")
        );
        assert!(matches!(keys.trust(&id(&c2)?), Trust::Pending { .. }));
        assert_eq!(keys.trust(&id(&c3)?), Trust::Unknown);
        Ok(())
    }
}
