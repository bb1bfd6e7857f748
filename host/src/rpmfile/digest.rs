//! The SHA-2 family digests rpm's headers give files in (`FILEDIGESTALGO` 8–11).

use sha2::Digest;

/// The SHA-2 digest the header uses, told by its hex length (SHA-224/256/384/512).
pub(super) enum Hasher {
    S224(sha2::Sha224),
    S256(sha2::Sha256),
    S384(sha2::Sha384),
    S512(sha2::Sha512),
}

impl Hasher {
    pub(super) fn new(hex_len: usize) -> Self {
        match hex_len {
            56 => Hasher::S224(sha2::Sha224::new()),
            96 => Hasher::S384(sha2::Sha384::new()),
            128 => Hasher::S512(sha2::Sha512::new()),
            _ => Hasher::S256(sha2::Sha256::new()),
        }
    }
    pub(super) fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::S224(h) => h.update(b),
            Hasher::S256(h) => h.update(b),
            Hasher::S384(h) => h.update(b),
            Hasher::S512(h) => h.update(b),
        }
    }
    /// rpm's name of the digest (`rpm -K` says `SHA256 digest`).
    pub(super) fn name(&self) -> &'static str {
        match self {
            Hasher::S224(_) => "SHA224",
            Hasher::S256(_) => "SHA256",
            Hasher::S384(_) => "SHA384",
            Hasher::S512(_) => "SHA512",
        }
    }
    pub(super) fn hex(self) -> String {
        match self {
            Hasher::S224(h) => crate::fsutil::hex(&h.finalize()),
            Hasher::S256(h) => crate::fsutil::hex(&h.finalize()),
            Hasher::S384(h) => crate::fsutil::hex(&h.finalize()),
            Hasher::S512(h) => crate::fsutil::hex(&h.finalize()),
        }
    }
}
