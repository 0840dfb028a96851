//! Flexible checksums of multipart uploads: which checksum an upload asks
//! for, and how the object's checksum follows from its parts', as AWS
//! defines it.
//!
//! - COMPOSITE (CRC32, CRC32C, SHA1, SHA256; the default for all but
//!   CRC64NVME): the checksum of the concatenated raw part checksums,
//!   base64, with `-N` appended (N parts). It vouches for the parts, not
//!   for the object's bytes as one stream.
//! - FULL_OBJECT (CRC64NVME always; CRC32/CRC32C when asked): the CRC of
//!   the whole object, obtained by combining the part CRCs with the parts'
//!   lengths (`crc_fast::checksum_combine`), so no byte is read again.
//!
//! An upload created with an algorithm needs that algorithm on every part:
//! a part sent with another is refused at once ([`check_part`],
//! `InvalidRequest` "Checksum Type mismatch", as AWS words it). One created
//! without (boto3's low-level calls still send CRC32 per part) gets a
//! checksum when every part carries the same algorithm, and none otherwise.
//! The stored value's `-N` suffix tells the two types apart.
//!
//! CompleteMultipartUpload may repeat the whole object's checksum
//! (`x-amz-checksum-*`, optionally `x-amz-checksum-type`): its algorithm
//! and type must be the upload's ([`check_whole`]), and its value must
//! equal the one derived from the parts, with or without the `-N` suffix;
//! the comparison runs inside the completion ([`combiner`]), so a mismatch
//! (`BadDigest`) completes nothing.

use crate::checksum::{Algo, digest_b64};
use crate::error::{GwError, GwResult};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use laneway_store::multipart::{Combiner, UploadChecksum};
use laneway_store::{Checksum, StoreError, StoreResult};
use s3s::dto::{ChecksumAlgorithm, ChecksumType, CompletedPart};
use std::sync::Arc;

/// The checksum a CreateMultipartUpload asks for, validated.
pub fn requested(
    algorithm: Option<&ChecksumAlgorithm>,
    ty: Option<&ChecksumType>,
) -> GwResult<Option<UploadChecksum>> {
    let Some(algorithm) = algorithm else {
        if ty.is_some() {
            return Err(GwError::InvalidRequest(
                "The x-amz-checksum-type header requires x-amz-checksum-algorithm".into(),
            ));
        }
        return Ok(None);
    };
    let algo = Algo::from_name(algorithm.as_str()).ok_or_else(|| {
        GwError::InvalidArgument(format!(
            "Unsupported checksum algorithm {}",
            algorithm.as_str()
        ))
    })?;
    let full_object = match ty.map(ChecksumType::as_str) {
        None => algo == Algo::Crc64Nvme,
        Some(ChecksumType::FULL_OBJECT) => true,
        Some(ChecksumType::COMPOSITE) => false,
        Some(other) => {
            return Err(GwError::InvalidArgument(format!(
                "Unknown checksum type {other}"
            )));
        }
    };
    let allowed = match algo {
        Algo::Crc64Nvme => full_object,
        Algo::Sha1 | Algo::Sha256 => !full_object,
        Algo::Crc32 | Algo::Crc32c => true,
    };
    if !allowed {
        return Err(GwError::InvalidRequest(format!(
            "The {} checksum algorithm does not support the {} checksum type",
            algo.name(),
            if full_object {
                "FULL_OBJECT"
            } else {
                "COMPOSITE"
            }
        )));
    }
    Ok(Some(UploadChecksum {
        algorithm: algo.name().to_string(),
        full_object,
    }))
}

/// The x-amz-checksum-type of a stored checksum.
pub fn type_of(c: &Checksum) -> ChecksumType {
    if c.value.contains('-') {
        ChecksumType::from_static(ChecksumType::COMPOSITE)
    } else {
        ChecksumType::from_static(ChecksumType::FULL_OBJECT)
    }
}

/// The checksum a CompleteMultipartUpload entry repeats for its part.
pub fn listed(part: &CompletedPart) -> GwResult<Option<Checksum>> {
    single([
        (Algo::Crc32, &part.checksum_crc32),
        (Algo::Crc32c, &part.checksum_crc32c),
        (Algo::Crc64Nvme, &part.checksum_crc64nvme),
        (Algo::Sha1, &part.checksum_sha1),
        (Algo::Sha256, &part.checksum_sha256),
    ])
}

/// The one checksum among the five fields (InvalidRequest for several).
fn single(all: [(Algo, &Option<String>); 5]) -> GwResult<Option<Checksum>> {
    let mut given = all
        .into_iter()
        .filter_map(|(a, v)| v.as_ref().map(|v| (a, v)));
    let first = given.next();
    if given.next().is_some() {
        return Err(GwError::InvalidRequest(
            "Expecting a single x-amz-checksum- value".into(),
        ));
    }
    Ok(first.map(|(a, v)| Checksum {
        algorithm: a.name().to_string(),
        value: v.trim().to_string(),
    }))
}

/// Refuse a part whose checksum algorithm is not the one its upload was
/// created with (a part without a checksum is judged at completion).
pub fn check_part(declared: Option<&UploadChecksum>, sent: Option<Algo>) -> GwResult<()> {
    match (declared, sent) {
        (Some(d), Some(a)) if !a.name().eq_ignore_ascii_case(&d.algorithm) => Err(
            GwError::ChecksumTypeMismatch(d.algorithm.to_lowercase(), a.name().to_lowercase()),
        ),
        _ => Ok(()),
    }
}

/// The whole-object checksum a CompleteMultipartUpload carries, if any,
/// with the checksum type it names.
pub struct Whole {
    /// The checksum (algorithm and value as sent).
    pub checksum: Checksum,
    /// x-amz-checksum-type, if sent.
    pub full_object: Option<bool>,
}

/// The whole-object checksum of a CompleteMultipartUpload (at most one
/// `x-amz-checksum-*`).
pub fn whole(
    given: [(Algo, &Option<String>); 5],
    ty: Option<&ChecksumType>,
) -> GwResult<Option<Whole>> {
    let Some(checksum) = single(given)? else {
        return Ok(None);
    };
    let full_object = match ty.map(ChecksumType::as_str) {
        None => None,
        Some(ChecksumType::FULL_OBJECT) => Some(true),
        Some(ChecksumType::COMPOSITE) => Some(false),
        Some(other) => {
            return Err(GwError::InvalidArgument(format!(
                "Unknown checksum type {other}"
            )));
        }
    };
    Ok(Some(Whole {
        checksum,
        full_object,
    }))
}

/// A whole-object checksum must use the upload's algorithm and type (an
/// upload created without one is judged by the checksum its parts make).
pub fn check_whole(declared: Option<&UploadChecksum>, whole: Option<&Whole>) -> GwResult<()> {
    let (Some(d), Some(w)) = (declared, whole) else {
        return Ok(());
    };
    let type_name = |full: bool| if full { "full_object" } else { "composite" };
    if !w.checksum.algorithm.eq_ignore_ascii_case(&d.algorithm) {
        return Err(GwError::ChecksumTypeMismatch(
            d.algorithm.to_lowercase(),
            w.checksum.algorithm.to_lowercase(),
        ));
    }
    match w.full_object {
        Some(full) if full != d.full_object => Err(GwError::ChecksumTypeMismatch(
            type_name(d.full_object).into(),
            type_name(full).into(),
        )),
        _ => Ok(()),
    }
}

/// A composite checksum's value without its `-N` part count.
pub fn without_part_count(value: &str) -> &str {
    value.split_once('-').map_or(value, |(v, _)| v)
}

/// The store's hook computing an object's checksum at completion, and
/// comparing it with the whole-object checksum the client sent, if any.
pub fn combiner(expected: Option<Checksum>) -> Combiner {
    Combiner(Arc::new(move |declared, parts| {
        let got = combine(declared, parts)?;
        verify_whole(expected.as_ref(), got.as_ref())?;
        Ok(got)
    }))
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
            assert_eq!(type_of(&got).as_str(), "FULL_OBJECT");
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
        assert_eq!(type_of(&got).as_str(), "COMPOSITE");
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
        let want = |v: String| {
            Some(Checksum {
                algorithm: "CRC32".into(),
                value: v,
            })
        };
        let good = combiner(want(digest_b64(Algo::Crc32, b"abcdef")));
        assert!((good.0)(Some(&full), &refs).is_ok());
        let bad = combiner(want(digest_b64(Algo::Crc32, b"abcdeX")));
        assert!(matches!(
            (bad.0)(Some(&full), &refs),
            Err(StoreError::ChecksumMismatch(_))
        ));
        // Composite: with or without the -N suffix.
        let composite = combine(None, &refs).expect("ok").expect("some");
        let bare = without_part_count(&composite.value).to_string();
        assert!((combiner(want(bare)).0)(None, &refs).is_ok());
        assert!((combiner(want(composite.value)).0)(None, &refs).is_ok());
    }

    #[test]
    fn part_and_whole_algorithms_must_be_the_uploads() {
        let declared = UploadChecksum {
            algorithm: "CRC32".into(),
            full_object: false,
        };
        assert!(check_part(Some(&declared), Some(Algo::Crc32)).is_ok());
        assert!(check_part(Some(&declared), None).is_ok());
        assert!(check_part(None, Some(Algo::Sha1)).is_ok());
        assert!(matches!(
            check_part(Some(&declared), Some(Algo::Sha256)),
            Err(GwError::ChecksumTypeMismatch(_, _))
        ));
        let w = |algorithm: &str, full_object| Whole {
            checksum: Checksum {
                algorithm: algorithm.into(),
                value: "x".into(),
            },
            full_object,
        };
        assert!(check_whole(Some(&declared), Some(&w("CRC32", None))).is_ok());
        assert!(check_whole(Some(&declared), Some(&w("CRC32C", None))).is_err());
        assert!(check_whole(Some(&declared), Some(&w("CRC32", Some(true)))).is_err());
        assert!(check_whole(None, Some(&w("SHA1", Some(true)))).is_ok());
    }

    #[test]
    fn creation_rules() {
        let a = |s: &'static str| ChecksumAlgorithm::from_static(s);
        let t = |s: &'static str| ChecksumType::from_static(s);
        let crc64 = requested(Some(&a("CRC64NVME")), None)
            .expect("ok")
            .expect("some");
        assert!(crc64.full_object);
        assert!(requested(Some(&a("CRC64NVME")), Some(&t("COMPOSITE"))).is_err());
        assert!(requested(Some(&a("SHA256")), Some(&t("FULL_OBJECT"))).is_err());
        assert!(requested(None, Some(&t("COMPOSITE"))).is_err());
        let crc32 = requested(Some(&a("CRC32")), None)
            .expect("ok")
            .expect("some");
        assert!(!crc32.full_object);
    }
}
