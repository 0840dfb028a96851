//! Fuzz target: the `Range` header (s3s's parser, then our
//! [`range::resolve`]) and `x-amz-copy-source-range`
//! ([`part_copy::parse_copy_range`]), against an object size.
//!
//! Input: `SIZE\nHEADER` (text; when the first line is not a number, the
//! size is the input's length). Checks: no panic; a satisfiable range is a
//! non-empty slice inside the object; `Content-Range` names exactly it; an
//! accepted copy range is a non-empty slice inside the source, and
//! re-formatting it as `bytes=a-b` parses to the same slice.
#![no_main]

use laneway_gateway::s3::multipart::part_copy::parse_copy_range;
use laneway_gateway::request::range::{content_range, resolve};
use libfuzzer_sys::fuzz_target;
use s3s::dto::Range;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (size, header) = match text.split_once('\n') {
        Some((n, h)) => match n.parse::<u64>() {
            Ok(n) => (n, h),
            Err(_) => (text.len() as u64, text),
        },
        None => (text.len() as u64, text),
    };
    check_range(header, size);
    check_copy_range(header, size);
});

fn check_range(header: &str, size: u64) {
    let Ok(range) = Range::parse(header) else {
        return;
    };
    let Ok(r) = resolve(&range, size) else {
        return;
    };
    assert!(
        r.start < r.end && r.end <= size,
        "{header:?} of {size}: {r:?}"
    );
    match range {
        Range::Int { first, last } => {
            assert_eq!(r.start, first);
            if let Some(last) = last {
                assert_eq!(r.end, last.min(size - 1) + 1);
            } else {
                assert_eq!(r.end, size);
            }
        }
        Range::Suffix { length } => assert_eq!(r.end - r.start, length.min(size)),
    }
    let cr = content_range(r, size);
    assert_eq!(cr, format!("bytes {}-{}/{}", r.start, r.end - 1, size));
}

fn check_copy_range(header: &str, size: u64) {
    let Ok(r) = parse_copy_range(header, size) else {
        return;
    };
    assert!(
        r.start < r.end && r.end <= size,
        "{header:?} of {size}: {r:?}"
    );
    let again = format!("bytes={}-{}", r.start, r.end - 1);
    let back = parse_copy_range(&again, size).expect("a formatted range parses");
    assert_eq!((back.start, back.end), (r.start, r.end));
}
