//! Flexible checksums of multipart uploads as the S3 protocol states them:
//! which checksum an upload asks for, what each part and the completion
//! may send. How the object's checksum follows from its parts' (COMPOSITE
//! and FULL_OBJECT) is the store's (`laneway_store::flexsum`), which
//! derives it inside the completion.
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
//! the store compares them inside the completion, so a mismatch
//! (`BadDigest`) completes nothing.

use crate::request::error::{GwError, GwResult};
use laneway_store::Checksum;
use laneway_store::flexsum::Algo;
pub use laneway_store::flexsum::without_part_count;
use laneway_store::multipart::UploadChecksum;
use s3s::dto::{ChecksumAlgorithm, ChecksumType, CompletedPart};

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

#[cfg(test)]
mod tests {
    use super::*;

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
