//! Resolving a `Range` header against an object's size.
//!
//! s3s parses the header (`bytes=a-b`, `bytes=a-`, `bytes=-n`); this module
//! turns it into the store's half-open [`GetRange`] or refuses it:
//! - `a-b`: `a` must be below the size; `b` is clamped to the last byte.
//! - `a-`: from `a` to the end; `a` must be below the size.
//! - `-n`: the last `n` bytes (all of them when `n` exceeds the size);
//!   `n = 0` is unsatisfiable.
//!
//! An empty object has no satisfiable range. Unsatisfiable ranges are
//! `416 InvalidRange`, as S3 answers.

use crate::request::error::{GwError, GwResult};
use laneway_store::GetRange;
use s3s::dto::Range;

/// The bytes of a `size`-byte object that `range` asks for.
pub fn resolve(range: &Range, size: u64) -> GwResult<GetRange> {
    match *range {
        Range::Int { first, last } => {
            if first >= size {
                return Err(GwError::InvalidRange);
            }
            let last = last.map_or(size - 1, |l| l.min(size - 1));
            if last < first {
                return Err(GwError::InvalidRange);
            }
            Ok(GetRange {
                start: first,
                end: last + 1,
            })
        }
        Range::Suffix { length } => {
            if length == 0 || size == 0 {
                return Err(GwError::InvalidRange);
            }
            Ok(GetRange {
                start: size - length.min(size),
                end: size,
            })
        }
    }
}

/// The `Content-Range` value of a served range.
pub fn content_range(r: GetRange, size: u64) -> String {
    format!("bytes {}-{}/{}", r.start, r.end.saturating_sub(1), size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(first: u64, last: Option<u64>) -> Range {
        Range::Int { first, last }
    }

    fn ok(range: Range, size: u64) -> (u64, u64) {
        let r = resolve(&range, size).expect("satisfiable");
        (r.start, r.end)
    }

    #[test]
    fn closed_ranges_clamp_to_the_end() {
        assert_eq!(ok(int(0, Some(0)), 10), (0, 1));
        assert_eq!(ok(int(2, Some(5)), 10), (2, 6));
        assert_eq!(ok(int(2, Some(500)), 10), (2, 10));
        assert_eq!(ok(int(9, Some(9)), 10), (9, 10));
    }

    #[test]
    fn open_ranges_run_to_the_end() {
        assert_eq!(ok(int(0, None), 10), (0, 10));
        assert_eq!(ok(int(7, None), 10), (7, 10));
    }

    #[test]
    fn suffix_ranges_take_the_tail() {
        assert_eq!(ok(Range::Suffix { length: 3 }, 10), (7, 10));
        assert_eq!(ok(Range::Suffix { length: 10 }, 10), (0, 10));
        assert_eq!(ok(Range::Suffix { length: 99 }, 10), (0, 10));
    }

    #[test]
    fn unsatisfiable_ranges_are_refused() {
        for (range, size) in [
            (int(10, None), 10),
            (int(10, Some(20)), 10),
            (int(0, None), 0),
            (int(0, Some(0)), 0),
            (Range::Suffix { length: 0 }, 10),
            (Range::Suffix { length: 5 }, 0),
        ] {
            assert!(
                matches!(resolve(&range, size), Err(GwError::InvalidRange)),
                "{range:?} of {size}"
            );
        }
    }

    #[test]
    fn content_range_is_inclusive() {
        assert_eq!(
            content_range(GetRange { start: 2, end: 6 }, 10),
            "bytes 2-5/10"
        );
    }
}
