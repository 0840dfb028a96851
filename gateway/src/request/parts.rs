//! Parts as requests name them: part numbers (GetObject's `partNumber`,
//! UploadPart, UploadPartCopy), the paging of part and upload listings
//! (ListParts, ListMultipartUploads, GetObjectAttributes), and a part's
//! stored checksum in the output fields.

use crate::request::checksum::{self, Algo};
use crate::request::error::{GwError, GwResult};
use laneway_store::Checksum;
use laneway_store::multipart::MAX_PARTS;
use s3s::dto::ChecksumAlgorithm;

/// A part number from the request, within 1..=10000.
pub fn part_number(n: i32) -> GwResult<u32> {
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_PARTS).contains(n))
        .ok_or_else(|| {
            GwError::InvalidArgument(format!(
                "Part number must be an integer between 1 and {MAX_PARTS}, inclusive"
            ))
        })
}

/// A part's stored checksum spread over the five output fields.
pub fn part_sums(c: Option<&Checksum>) -> checksum::Fields {
    checksum::fields(c, true, true)
}

/// The algorithm of a stored checksum, for list outputs.
pub fn algorithm_of(name: &str) -> Option<ChecksumAlgorithm> {
    Algo::from_name(name).map(|a| ChecksumAlgorithm::from_static(a.name()))
}

/// Largest page, and the default, of both listings.
pub const MAX_PAGE: usize = 1000;

/// A page size from the request: default and cap [`MAX_PAGE`].
pub fn page_size(max: Option<i32>, name: &str) -> GwResult<usize> {
    match max {
        None => Ok(MAX_PAGE),
        Some(n) => usize::try_from(n)
            .map(|n| n.min(MAX_PAGE))
            .map_err(|_| GwError::InvalidArgument(format!("{name} must be non-negative"))),
    }
}

/// The part-number marker of a part listing (0: from the first part).
pub fn part_marker(marker: Option<i32>) -> GwResult<u32> {
    match marker {
        None => Ok(0),
        Some(m) => u32::try_from(m).map_err(|_| {
            GwError::InvalidArgument("part-number-marker must be non-negative".into())
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_numbers_are_1_to_10000() {
        assert_eq!(part_number(1).expect("1"), 1);
        assert_eq!(part_number(10_000).expect("max"), 10_000);
        for bad in [0, -1, 10_001] {
            assert!(matches!(part_number(bad), Err(GwError::InvalidArgument(_))));
        }
    }

    #[test]
    fn page_sizes_default_and_cap_at_1000() {
        assert_eq!(page_size(None, "x").expect("default"), 1000);
        assert_eq!(page_size(Some(5), "x").expect("5"), 5);
        assert_eq!(page_size(Some(5000), "x").expect("cap"), 1000);
        assert!(page_size(Some(-1), "x").is_err());
    }
}
