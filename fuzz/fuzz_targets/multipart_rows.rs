//! Fuzz target: multipart rows and ids, read from the index and from
//! clients: upload and part rows ([`multipart::decode`]), client upload ids
//! ([`parse_upload_id`]) and the key field of part records in volumes
//! ([`split_part_header_key`]).
//!
//! Input: raw bytes, tried as each. Checks: no panic and no huge
//! allocation from a corrupt length; an upload id that parses formats back
//! to the same id (lower-case hex) and every formatted id parses; a part
//! key field splits into parts that join back to the same bytes, and
//! `split(join(key, upload, n)) == (key, upload, n)`.
#![no_main]

use laneway_store::multipart::{
    PartRecord, UploadRecord, decode, format_upload_id, parse_upload_id, part_header_key,
    split_part_header_key,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode::<UploadRecord>(data);
    let _ = decode::<PartRecord>(data);
    let text = String::from_utf8_lossy(data);
    if let Ok(id) = parse_upload_id(&text) {
        assert_eq!(format_upload_id(&id), text.to_ascii_lowercase());
    }
    if let Some((key, upload, n)) = split_part_header_key(data) {
        let key = String::from_utf8_lossy(key).into_owned();
        if key.as_bytes() == &data[..data.len() - 20] {
            assert_eq!(part_header_key(&key, &upload, n), data);
        }
    }
    let (id, rest) = data.split_at(data.len().min(16));
    let mut upload = [0u8; 16];
    upload[..id.len()].copy_from_slice(id);
    assert_eq!(
        parse_upload_id(&format_upload_id(&upload)).expect("own id"),
        upload
    );
    let key = String::from_utf8_lossy(rest);
    let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let field = part_header_key(&key, &upload, n);
    let (k, u, p) = split_part_header_key(&field).expect("own field splits");
    assert_eq!((k, u, p), (key.as_bytes(), upload, n));
});
