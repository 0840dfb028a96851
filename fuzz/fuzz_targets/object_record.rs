//! Fuzz target: object records as read from a partition index
//! ([`StoredObject::decode`], [`ListSummary::decode`], [`Usage::decode`]).
//!
//! Input: a record value (format byte, then bincode). Checks: no panic and
//! no huge allocation from a corrupt length; a record that decodes
//! re-encodes (as the current format) to bytes that decode to the same
//! record; the listing summary of a record that decodes agrees with it.
//! Then the input's bytes build a record (through `arbitrary`) and
//! `decode(encode(r)) == r` is checked for it, and for its usage row.
#![no_main]

use laneway_store::record::{
    Checksum, DataLoc, ListSummary, ObjectMeta, PartLoc, StoredObject, Tag, Usage,
};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = StoredObject::decode(data) {
        let again = r.encode();
        assert_eq!(
            StoredObject::decode(&again).expect("re-encoded record decodes"),
            r
        );
        let s = ListSummary::decode(data).expect("a record that decodes has a summary");
        assert_eq!(
            (s.size, s.md5, s.mtime_ms, s.parts),
            (r.size, r.md5, r.mtime_ms, r.parts)
        );
        let _ = r.info("key");
    }
    let _ = ListSummary::decode(data).map(|s| s.info("key"));
    if let Ok(u) = Usage::decode(data) {
        assert_eq!(u.encode(), data[..16]);
    }
    if let Ok(r) = record(&mut Unstructured::new(data)) {
        assert_eq!(
            StoredObject::decode(&r.encode()).expect("own record decodes"),
            r
        );
        let u = Usage {
            objects: r.mtime_ms,
            bytes: i64::try_from(r.size).unwrap_or(i64::MAX),
        };
        assert_eq!(Usage::decode(&u.encode()).expect("usage decodes"), u);
    }
});

fn record(u: &mut Unstructured<'_>) -> Result<StoredObject> {
    Ok(StoredObject {
        size: u.arbitrary()?,
        md5: u.arbitrary()?,
        mtime_ms: u.arbitrary()?,
        parts: u.arbitrary()?,
        meta: ObjectMeta {
            content_type: u.arbitrary()?,
            content_encoding: u.arbitrary()?,
            content_disposition: u.arbitrary()?,
            content_language: u.arbitrary()?,
            cache_control: u.arbitrary()?,
            expires: u.arbitrary()?,
            user: u.arbitrary()?,
        },
        tags: (0..u.int_in_range(0..=3)?)
            .map(|_| {
                Ok(Tag {
                    key: u.arbitrary()?,
                    value: u.arbitrary()?,
                })
            })
            .collect::<Result<_>>()?,
        checksum: match u.arbitrary::<bool>()? {
            true => Some(Checksum {
                algorithm: u.arbitrary()?,
                value: u.arbitrary()?,
            }),
            false => None,
        },
        data: data_loc(u)?,
        part_checksums: u.arbitrary()?,
    })
}

fn data_loc(u: &mut Unstructured<'_>) -> Result<DataLoc> {
    Ok(match u.int_in_range(0..=2)? {
        0 => DataLoc::Inline(u.arbitrary()?),
        1 => DataLoc::Volume {
            segment: u.arbitrary()?,
            offset: u.arbitrary()?,
            record_len: u.arbitrary()?,
        },
        _ => DataLoc::Parts(
            (0..u.int_in_range(0..=4)?)
                .map(|_| {
                    Ok(PartLoc {
                        segment: u.arbitrary()?,
                        offset: u.arbitrary()?,
                        record_len: u.arbitrary()?,
                        header_key_len: u.arbitrary()?,
                        size: u.arbitrary()?,
                    })
                })
                .collect::<Result<_>>()?,
        ),
    })
}
