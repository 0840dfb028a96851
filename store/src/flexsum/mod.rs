//! Flexible checksums (`x-amz-checksum-*`): the algorithms S3 clients
//! send (CRC32, CRC32C, CRC64NVME, SHA1, SHA256), their digests in the
//! base64 form the headers carry, and ([`combine`]) how a multipart
//! object's checksum follows from its parts'. The gateway verifies uploads
//! with these; the store derives a completed object's checksum with them,
//! so completion needs nothing from the gateway but data.

pub mod combine;

pub use combine::{derive, without_part_count};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use crc_fast::{CrcAlgorithm, Digest};
use ring::digest;

/// A checksum algorithm S3 clients may send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Algo {
    /// CRC32 (ISO-HDLC).
    Crc32,
    /// CRC32C (Castagnoli).
    Crc32c,
    /// CRC64/NVME.
    Crc64Nvme,
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
}

impl Algo {
    /// Every algorithm.
    pub const ALL: [Algo; 5] = [
        Algo::Crc32,
        Algo::Crc32c,
        Algo::Crc64Nvme,
        Algo::Sha1,
        Algo::Sha256,
    ];

    /// Its header (and trailer) name.
    pub fn header(self) -> &'static str {
        match self {
            Algo::Crc32 => "x-amz-checksum-crc32",
            Algo::Crc32c => "x-amz-checksum-crc32c",
            Algo::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Algo::Sha1 => "x-amz-checksum-sha1",
            Algo::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// Its name in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Crc32 => "CRC32",
            Algo::Crc32c => "CRC32C",
            Algo::Crc64Nvme => "CRC64NVME",
            Algo::Sha1 => "SHA1",
            Algo::Sha256 => "SHA256",
        }
    }

    /// The algorithm S3 calls `name` (CRC32, CRC32C, CRC64NVME, SHA1, SHA256).
    pub fn from_name(name: &str) -> Option<Algo> {
        Algo::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The crc-fast algorithm of a CRC (None for the SHAs).
    pub fn crc(self) -> Option<CrcAlgorithm> {
        match self {
            Algo::Crc32 => Some(CrcAlgorithm::Crc32IsoHdlc),
            Algo::Crc32c => Some(CrcAlgorithm::Crc32Iscsi),
            Algo::Crc64Nvme => Some(CrcAlgorithm::Crc64Nvme),
            Algo::Sha1 | Algo::Sha256 => None,
        }
    }

    /// Bytes of its digest.
    pub fn width(self) -> usize {
        match self {
            Algo::Crc32 | Algo::Crc32c => 4,
            Algo::Crc64Nvme => 8,
            Algo::Sha1 => 20,
            Algo::Sha256 => 32,
        }
    }

    /// The algorithm whose header (or trailer) is `name`.
    pub fn from_header(name: &str) -> Option<Algo> {
        Algo::ALL
            .into_iter()
            .find(|a| a.header().eq_ignore_ascii_case(name.trim()))
    }
}

/// A running digest of one algorithm.
pub enum Hasher {
    /// A CRC and its width in bytes.
    Crc(Digest, usize),
    /// A SHA.
    Sha(digest::Context),
}

impl Hasher {
    /// A new digest of `algo`.
    pub fn new(algo: Algo) -> Hasher {
        match algo {
            Algo::Crc32 => Hasher::Crc(Digest::new(CrcAlgorithm::Crc32IsoHdlc), 4),
            Algo::Crc32c => Hasher::Crc(Digest::new(CrcAlgorithm::Crc32Iscsi), 4),
            Algo::Crc64Nvme => Hasher::Crc(Digest::new(CrcAlgorithm::Crc64Nvme), 8),
            Algo::Sha1 => Hasher::Sha(digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY)),
            Algo::Sha256 => Hasher::Sha(digest::Context::new(&digest::SHA256)),
        }
    }

    /// Hash `data`.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Crc(d, _) => d.update(data),
            Hasher::Sha(c) => c.update(data),
        }
    }

    /// The base64 of the big-endian digest, as the headers carry it.
    pub fn finish(&mut self) -> String {
        match self {
            Hasher::Crc(d, width) => {
                let be = d.finalize().to_be_bytes();
                STANDARD.encode(&be[be.len().saturating_sub(*width)..])
            }
            Hasher::Sha(c) => STANDARD.encode(c.clone().finish().as_ref()),
        }
    }
}

/// The base64 digest of `data` (as the x-amz-checksum-* headers carry it).
pub fn digest_b64(algo: Algo, data: &[u8]) -> String {
    let mut h = Hasher::new(algo);
    h.update(data);
    h.finish()
}
