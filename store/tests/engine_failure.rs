//! A partition whose index engine hits a real I/O error (a full tmpfs, no
//! reserve) recovers without reopening the store: once space is freed, the
//! next writes (deletes included) succeed, and every acknowledged object
//! reads back.
//!
//! Needs root to mount a tmpfs (tests run as root here and in CI); where
//! mounting is not permitted the test says so and passes without checking.

#![allow(clippy::cast_possible_truncation)] // test data patterns

mod common;

use common::{body, get, tenant};
use laneway_store::{DiskReserve, Engine, PutOptions, Store, StoreConfig, StoreError};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmpfs mounted for one test; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).ok()?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "SKIPPED: cannot mount a tmpfs here ({}); the engine-failure test needs root",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a file still open by a thread being torn down must not
        // leave the mount behind.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn object(i: usize) -> Vec<u8> {
    (0..8 * 1024).map(|j| (i * 7 + j) as u8).collect()
}

async fn try_put(
    store: &Store,
    b: &laneway_store::BucketInfo,
    key: &str,
    data: &[u8],
) -> Result<(), StoreError> {
    let opts = PutOptions {
        content_length: Some(data.len() as u64),
        ..PutOptions::default()
    };
    store
        .put_object(b, key, Default::default(), opts, body(data))
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_recovers_from_a_failed_index_write_without_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = tmp.path().join("mnt");
    let Some(_mount) = Tmpfs::mount(&mnt, "24m") else {
        return;
    };
    let cfg = StoreConfig {
        partitions: Some(1),
        engine: Some(Engine::Fjall),
        // No reserve: the engine itself must hit ENOSPC.
        disk_reserve: DiskReserve::Bytes(0),
        ..StoreConfig::default()
    };
    let store = Store::open(&mnt.join("data"), cfg).expect("open store");
    let b = store
        .create_bucket(&tenant(), "full", "us-east-1")
        .expect("bucket");
    // Space an operator can free later: enough for the reopened engine to
    // flush its memtable (with 3 MiB, a flush after the reopen could fill
    // the disk again and poison it anew, failing 3 runs in 30 under load).
    let ballast = mnt.join("ballast");
    std::fs::write(&ballast, vec![7u8; 8 << 20]).expect("ballast");

    // Inline objects: every byte goes through the index's journal.
    let mut acked = Vec::new();
    let mut first_error = None;
    for i in 0..20_000 {
        match try_put(&store, &b, &format!("k{i:05}"), &object(i)).await {
            Ok(()) => acked.push(i),
            Err(e) => {
                first_error = Some(e);
                break;
            }
        }
    }
    let first_error = first_error.expect("the tmpfs never filled up");
    eprintln!(
        "first failed write after {} objects: {first_error}",
        acked.len()
    );

    // Free space, as an operator would; the same store must take writes
    // (a delete first, then a put) again, within a deadline.
    std::fs::remove_file(&ballast).expect("remove ballast");
    let deadline = Instant::now() + Duration::from_secs(20);
    let victim = acked.remove(0);
    loop {
        match store.delete_object(&b, &format!("k{victim:05}")).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("delete still failing: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the partition did not recover: delete fails with {e}"),
        }
    }
    try_put(&store, &b, "after", b"written after the failure")
        .await
        .expect("put after recovery");
    assert_eq!(
        get(&store, &b, "after").await.as_deref(),
        Some(&b"written after the failure"[..])
    );
    assert_eq!(get(&store, &b, &format!("k{victim:05}")).await, None);
    for i in acked {
        assert_eq!(
            get(&store, &b, &format!("k{i:05}")).await,
            Some(object(i)),
            "acknowledged object k{i:05}"
        );
    }
    store.shutdown();
    drop(store);
}
