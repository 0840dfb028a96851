//! How a multipart object's flexible checksum follows from its parts', as
//! AWS defines it:
//!
//! - COMPOSITE (CRC32, CRC32C, SHA1, SHA256; the default for all but
//!   CRC64NVME): the checksum of the concatenated raw part checksums,
//!   base64, with `-N` appended (N parts). It vouches for the parts, not
//!   for the object's bytes as one stream.
//! - FULL_OBJECT (CRC64NVME always; CRC32/CRC32C when asked): the CRC of
//!   the whole object, obtained by combining the part CRCs with the parts'
//!   lengths (`crc_fast::checksum_combine`), so no byte is read again.
//!
//! An upload created without an algorithm gets a checksum when every part
//! carries the same algorithm, and none otherwise. The store runs
//! [`derive`] inside the completion's commit, over exactly the part
//! records the object is made of, with the whole-object checksum the
//! client sent as plain data (so a completion crosses a network as well as
//! a function call).

use super::{Algo, digest_b64};
use crate::error::{StoreError, StoreResult};
use crate::multipart::UploadChecksum;
use crate::record::Checksum;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// A composite checksum's value without its `-N` part count.
pub fn without_part_count(value: &str) -> &str {
    value.split_once('-').map_or(value, |(v, _)| v)
}

/// The completed object's checksum, derived from the upload's declared
/// checksum and its parts' (checksum, size) in object order, and checked
/// against the whole-object checksum the client sent at completion, if
/// any (ChecksumMismatch otherwise, so nothing completes).
pub fn derive(
    declared: Option<&UploadChecksum>,
    parts: &[(Option<&Checksum>, u64)],
    expected: Option<&Checksum>,
) -> StoreResult<Option<Checksum>> {
    let got = combine(declared, parts)?;
    verify_whole(expected, got.as_ref())?;
    Ok(got)
}

/// The derived checksum must be the one the client sent (the client may
/// leave out a composite value's `-N`).
fn verify_whole(expected: Option<&Checksum>, got: Option<&Checksum>) -> StoreResult<()> {
    let Some(want) = expected else {
        return Ok(());
    };
    let value = want.value.trim();
    let matches = got.is_some_and(|g| {
        g.algorithm.eq_ignore_ascii_case(&want.algorithm)
            && (g.value == value || without_part_count(&g.value) == value)
    });
    if matches {
        Ok(())
    } else {
        Err(StoreError::ChecksumMismatch(want.algorithm.clone()))
    }
}

fn combine(
    declared: Option<&UploadChecksum>,
    parts: &[(Option<&Checksum>, u64)],
) -> StoreResult<Option<Checksum>> {
    let (algo, full_object) = match declared {
        Some(d) => {
            let algo = Algo::from_name(&d.algorithm)
                .ok_or_else(|| StoreError::Corrupt("upload checksum algorithm".into()))?;
            (algo, d.full_object)
        }
        None => match common_algo(parts) {
            Some(algo) => (algo, algo == Algo::Crc64Nvme),
            None => return Ok(None),
        },
    };
    let mut raw = Vec::with_capacity(parts.len());
    for (sum, size) in parts {
        let sum = sum.filter(|s| s.algorithm == algo.name()).ok_or_else(|| {
            StoreError::InvalidArgument(format!(
                "The upload was created using a {} checksum; every part must carry one",
                algo.name()
            ))
        })?;
        raw.push((decode(algo, &sum.value)?, *size));
    }
    let value = match algo.crc().filter(|_| full_object) {
        Some(crc) => full_object_crc(algo, crc, &raw),
        None => {
            let joined: Vec<u8> = raw.iter().flat_map(|(b, _)| b.iter().copied()).collect();
            format!("{}-{}", digest_b64(algo, &joined), raw.len())
        }
    };
    Ok(Some(Checksum {
        algorithm: algo.name().to_string(),
        value,
    }))
}

/// The algorithm every part carries, if they all carry the same one.
fn common_algo(parts: &[(Option<&Checksum>, u64)]) -> Option<Algo> {
    let first = parts.first()?.0?;
    parts
        .iter()
        .all(|(c, _)| c.is_some_and(|c| c.algorithm == first.algorithm))
        .then(|| Algo::from_name(&first.algorithm))
        .flatten()
}

fn decode(algo: Algo, value: &str) -> StoreResult<Vec<u8>> {
    STANDARD
        .decode(value)
        .ok()
        .filter(|b| b.len() == algo.width())
        .ok_or_else(|| StoreError::Corrupt(format!("stored {} part checksum", algo.name())))
}

fn full_object_crc(algo: Algo, crc: crc_fast::CrcAlgorithm, parts: &[(Vec<u8>, u64)]) -> String {
    let as_u64 = |b: &[u8]| b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x));
    let mut acc: Option<u64> = None;
    for (bytes, len) in parts {
        let part = as_u64(bytes);
        acc = Some(match acc {
            None => part,
            Some(a) => crc_fast::checksum_combine(crc, a, part, *len),
        });
    }
    let be = acc.unwrap_or(0).to_be_bytes();
    STANDARD.encode(&be[be.len().saturating_sub(algo.width())..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(algo: Algo, data: &[u8]) -> (Checksum, u64) {
        let c = Checksum {
            algorithm: algo.name().into(),
            value: digest_b64(algo, data),
        };
        (c, data.len() as u64)
    }

    fn run(declared: Option<UploadChecksum>, algo: Algo, chunks: &[&[u8]]) -> Option<Checksum> {
        let parts: Vec<_> = chunks.iter().map(|c| part(algo, c)).collect();
        let refs: Vec<_> = parts.iter().map(|(c, n)| (Some(c), *n)).collect();
        combine(declared.as_ref(), &refs).expect("combine")
    }

    #[test]
    fn full_object_crcs_equal_the_crc_of_the_whole() {
        let chunks: [&[u8]; 3] = [b"hello ", b"multipart ", b"world"];
        for algo in [Algo::Crc32, Algo::Crc32c, Algo::Crc64Nvme] {
            let declared = UploadChecksum {
                algorithm: algo.name().into(),
                full_object: true,
            };
            let got = run(Some(declared), algo, &chunks).expect("some");
            assert_eq!(got.value, digest_b64(algo, b"hello multipart world"));
            assert!(
                !got.value.contains('-'),
                "a full-object value has no part count"
            );
        }
    }

    #[test]
    fn composite_is_a_checksum_of_checksums() {
        let chunks: [&[u8]; 2] = [b"abc", b"def"];
        let got = run(None, Algo::Sha256, &chunks).expect("inferred");
        let mut raw = STANDARD
            .decode(digest_b64(Algo::Sha256, b"abc"))
            .expect("b64");
        raw.extend(
            STANDARD
                .decode(digest_b64(Algo::Sha256, b"def"))
                .expect("b64"),
        );
        assert_eq!(got.value, format!("{}-2", digest_b64(Algo::Sha256, &raw)));
        // Undeclared CRC64NVME parts make a full-object checksum.
        let got = run(None, Algo::Crc64Nvme, &chunks).expect("inferred");
        assert_eq!(got.value, digest_b64(Algo::Crc64Nvme, b"abcdef"));
    }

    #[test]
    fn declared_algorithm_is_required_on_every_part() {
        let (c, n) = part(Algo::Crc32, b"x");
        let declared = UploadChecksum {
            algorithm: "CRC32".into(),
            full_object: false,
        };
        assert!(combine(Some(&declared), &[(Some(&c), n), (None, 1)]).is_err());
        assert_eq!(
            combine(None, &[(Some(&c), n), (None, 1)]).expect("ok"),
            None
        );
    }

    #[test]
    fn whole_object_checksums_are_compared_inside_the_completion() {
        let chunks: [&[u8]; 2] = [b"abc", b"def"];
        let parts: Vec<_> = chunks.iter().map(|c| part(Algo::Crc32, c)).collect();
        let refs: Vec<_> = parts.iter().map(|(c, n)| (Some(c), *n)).collect();
        let full = UploadChecksum {
            algorithm: "CRC32".into(),
            full_object: true,
        };
        let want = |v: String| Checksum {
            algorithm: "CRC32".into(),
            value: v,
        };
        let good = want(digest_b64(Algo::Crc32, b"abcdef"));
        assert!(derive(Some(&full), &refs, Some(&good)).is_ok());
        let bad = want(digest_b64(Algo::Crc32, b"abcdeX"));
        assert!(matches!(
            derive(Some(&full), &refs, Some(&bad)),
            Err(StoreError::ChecksumMismatch(_))
        ));
        // Composite: with or without the -N suffix.
        let composite = combine(None, &refs).expect("ok").expect("some");
        let bare = want(without_part_count(&composite.value).to_string());
        assert!(derive(None, &refs, Some(&bare)).is_ok());
        assert!(derive(None, &refs, Some(&want(composite.value))).is_ok());
    }
}
