//! The flexible checksum an upload keeps is data (`ChecksumSpec`): the
//! store computes the asked algorithm over the bytes it stores, inline and
//! in volumes, or keeps a known value (a copy).

mod common;

use common::{body, open, tenant};
use laneway_store::flexsum::{Algo, digest_b64};
use laneway_store::{Checksum, ChecksumSpec, Engine, PutOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_computes_or_keeps_the_checksum_it_is_asked_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path(), Engine::Fjall, 2, 4096);
    let b = store
        .create_bucket(&tenant(), "sums", "us-east-1")
        .expect("bucket");
    for (key, len, algo) in [
        ("inline", 1000usize, Algo::Crc32),
        ("volume", 300_000, Algo::Sha256),
        ("crc64", 70_000, Algo::Crc64Nvme),
    ] {
        let data: Vec<u8> = (0..len)
            .map(|i| u8::try_from(i % 251).unwrap_or(0))
            .collect();
        let opts = PutOptions {
            content_length: Some(len as u64),
            checksum: Some(ChecksumSpec::Compute(algo)),
            ..PutOptions::default()
        };
        let put = store
            .put_object(&b, key, Default::default(), opts, body(&data))
            .await
            .expect("put");
        let want = Checksum {
            algorithm: algo.name().into(),
            value: digest_b64(algo, &data),
        };
        assert_eq!(put.checksum.as_ref(), Some(&want), "{key}");
        let head = store.head_object(&b, key).expect("head");
        assert_eq!(head.checksum, Some(want), "{key}");
    }
    let known = Checksum {
        algorithm: "CRC32C".into(),
        value: "AAAAAA==".into(),
    };
    let opts = PutOptions {
        content_length: Some(3),
        checksum: Some(ChecksumSpec::Known(known.clone())),
        ..PutOptions::default()
    };
    store
        .put_object(&b, "copy", Default::default(), opts, body(b"abc"))
        .await
        .expect("put");
    assert_eq!(
        store.head_object(&b, "copy").expect("head").checksum,
        Some(known)
    );
    store.shutdown();
}
