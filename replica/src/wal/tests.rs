//! Tests of the node's Raft log file: what is acknowledged comes back
//! after a reopen, segments are deleted and relocated as the file's bounds
//! say, a torn tail is cut off and damage elsewhere refused, and a random
//! model run (appends, truncations, purges, votes over several groups with
//! tiny segments, reopened every few steps) always reads back what a plain
//! in-memory model holds; segments begun in preallocated spares reopen
//! where their records end, and a torn write into the zeros is cut off; a
//! forgotten group comes back empty and holds no segment; segments no
//! group needs are reused, and neither the old records after a reused
//! file's new ones nor anything else stale reads back; and a writer
//! process killed with SIGKILL mid-run,
//! again and again on one directory, never loses an append it
//! acknowledged.

use super::*;
use crate::types::{LogEntry, LogId, Mutation};
use laneway_store::index::WriteBatch;
use openraft::storage::RaftLogStorage;
use openraft::{RaftLogReader, Vote};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

fn id(term: u64, index: u64) -> LogId {
    LogId::new(openraft::CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64, body: usize) -> LogEntry {
    let mut batch = WriteBatch::default();
    batch.put(
        format!("k{index}").into_bytes(),
        vec![(index % 251) as u8; body],
    );
    LogEntry {
        log_id: id(term, index),
        payload: openraft::EntryPayload::Normal(Mutation::of_batch(&batch)),
    }
}

fn tiny() -> Limits {
    Limits {
        segment_bytes: 16 << 10,
        slack_bytes: 32 << 10,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn append(log: &mut WalLog, entries: Vec<LogEntry>) {
    log.write_entries(&entries).await.expect("append");
}

async fn all(log: &mut WalLog) -> Vec<LogEntry> {
    log.try_get_log_entries(0..).await.expect("read")
}

#[test]
fn what_was_acknowledged_comes_back_after_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    rt.block_on(async {
        let wal = Wal::open(dir.path()).expect("open");
        let mut a = wal.log(1);
        let mut b = wal.log(2);
        append(&mut a, (1..=5).map(|i| entry(1, i, 100)).collect()).await;
        append(&mut b, (1..=3).map(|i| entry(1, i, 10)).collect()).await;
        a.truncate(id(1, 4)).await.expect("truncate");
        append(&mut a, vec![entry(2, 4, 7)]).await;
        a.purge(id(1, 1)).await.expect("purge");
        a.save_vote(&Vote::new_committed(2, 1)).await.expect("vote");
        a.save_committed(Some(id(2, 4))).await.expect("committed");
        b.save_vote(&Vote::new(3, 9)).await.expect("vote");
        // The committed id travels with the next record of its group.
        append(&mut a, vec![entry(2, 5, 7)]).await;
    });
    rt.block_on(async {
        let wal = Wal::open(dir.path()).expect("reopen");
        let mut a = wal.log(1);
        let mut b = wal.log(2);
        let sizes: u64 = all(&mut a)
            .await
            .iter()
            .map(|e| bincode::serialize(e).expect("encode").len() as u64)
            .sum();
        assert_eq!(a.stored_bytes(), sizes, "the log's size is its entries'");
        let got: Vec<LogId> = all(&mut a).await.iter().map(|e| e.log_id).collect();
        assert_eq!(got, vec![id(1, 2), id(1, 3), id(2, 4), id(2, 5)]);
        assert_eq!(all(&mut a).await[2], entry(2, 4, 7));
        let state = a.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(id(1, 1)));
        assert_eq!(state.last_log_id, Some(id(2, 5)));
        assert_eq!(
            a.read_vote().await.expect("vote"),
            Some(Vote::new_committed(2, 1))
        );
        assert_eq!(a.read_committed().await.expect("committed"), Some(id(2, 4)));
        assert_eq!(b.read_vote().await.expect("vote"), Some(Vote::new(3, 9)));
        assert_eq!(all(&mut b).await.len(), 3);
        assert!(
            wal.log(3)
                .get_log_state()
                .await
                .expect("state")
                .last_log_id
                .is_none()
        );
    });
}

#[test]
fn a_forgotten_group_comes_back_empty_and_keeps_no_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("open");
        let mut gone = wal.log(5);
        let mut kept = wal.log(6);
        append(&mut gone, (1..=3).map(|i| entry(1, i, 50)).collect()).await;
        gone.save_vote(&Vote::new_committed(1, 2))
            .await
            .expect("vote");
        gone.purge(id(1, 1)).await.expect("purge");
        append(&mut kept, vec![entry(1, 1, 50)]).await;
        gone.forget().await.expect("forget");
        assert!(all(&mut gone).await.is_empty());
        assert_eq!(gone.read_vote().await.expect("vote"), None);
        // Enough of the other group's writes to pass many tiny segments:
        // the forgotten group's first segment goes without a relocation.
        for i in 2..=200 {
            append(&mut kept, vec![entry(1, i, 500)]).await;
            if i % 20 == 0 {
                kept.purge(id(1, i - 5)).await.expect("purge");
            }
        }
        assert_eq!(wal.stats().relocated_bytes, 0, "{:?}", wal.stats());
        assert!(segment::list(dir.path()).expect("list")[0] > 1);
    });
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        let mut gone = wal.log(5);
        let state = gone.get_log_state().await.expect("state");
        assert_eq!((state.last_log_id, state.last_purged_log_id), (None, None));
        assert_eq!(gone.read_vote().await.expect("vote"), None);
        assert_eq!(all(&mut wal.log(6)).await.len(), 5);
        // The group begun anew keeps what it writes after the forget.
        append(&mut gone, vec![entry(4, 1, 9)]).await;
    });
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        assert_eq!(all(&mut wal.log(5)).await, vec![entry(4, 1, 9)]);
    });
}

#[test]
fn purged_segments_are_deleted_and_an_idle_group_is_relocated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("open");
        let mut idle = wal.log(7);
        let mut busy = wal.log(8);
        append(&mut idle, vec![entry(1, 1, 50), entry(1, 2, 50)]).await;
        for i in 1..=400 {
            append(&mut busy, vec![entry(1, i, 500)]).await;
            if i % 20 == 0 {
                busy.purge(id(1, i - 5)).await.expect("purge");
            }
        }
        let stats = wal.stats();
        // About 200 KiB went through 16 KiB segments: without deletion and
        // relocation the idle group's first entries would keep all of it.
        assert!(stats.disk_bytes < 100 << 10, "{stats:?}");
        assert!(stats.relocated_bytes > 0, "{stats:?}");
        assert!(
            segment::list(dir.path()).expect("list")[0] > 1,
            "the first segment is gone"
        );
        assert_eq!(all(&mut idle).await, vec![entry(1, 1, 50), entry(1, 2, 50)]);
    });
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        assert_eq!(
            all(&mut wal.log(7)).await,
            vec![entry(1, 1, 50), entry(1, 2, 50)]
        );
        let busy: Vec<u64> = all(&mut wal.log(8))
            .await
            .iter()
            .map(|e| e.log_id.index)
            .collect();
        assert_eq!(busy, (396..=400).collect::<Vec<u64>>());
    });
}

#[test]
fn a_large_idle_log_is_relocated_a_segment_at_a_time_and_the_file_stays_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("open");
        let mut idle = wal.log(1);
        let mut busy = wal.log(2);
        // About six segments' worth that will never be purged.
        let held: Vec<LogEntry> = (1..=200).map(|i| entry(1, i, 500)).collect();
        for e in &held {
            append(&mut idle, vec![e.clone()]).await;
        }
        // The file is measured against what the groups hold at the same
        // moment (one lock): the busy group holds 2 to 11 entries as it
        // goes, so the end's figure would understate the bound mid-run.
        let mut worst: Option<(u64, WalStats)> = None;
        for i in 1..=2000 {
            append(&mut busy, vec![entry(1, i, 500)]).await;
            if i % 10 == 0 {
                busy.purge(id(1, i - 2)).await.expect("purge");
            }
            let now = wal.stats();
            let over = now.disk_bytes.saturating_sub(2 * now.live_bytes);
            if worst.as_ref().is_none_or(|(w, _)| over > *w) {
                worst = Some((over, now));
            }
        }
        let stats = wal.stats();
        // Relocation begins past twice what the groups hold and the
        // slack. Beyond that: a segment being filled; dead segments kept
        // behind a live one until relocation reaches it (a few segments'
        // worth a rotation, the live bytes at most); and a relocation's
        // copies, seen while the writer has written them and not yet
        // deleted their originals. Without relocation the file keeps
        // every busy entry ever written (1.3 MB here, against at most
        // about 0.44 MB allowed).
        let allowed = stats.live_bytes + tiny().slack_bytes + 4 * tiny().segment_bytes;
        let (over, at) = worst.expect("measured");
        assert!(
            over <= allowed,
            "{over} > {allowed} past twice the live bytes: {at:?}"
        );
        assert!(stats.relocated_bytes > 0, "{stats:?}");
        assert_eq!(all(&mut idle).await, held);
    });
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        assert_eq!(all(&mut wal.log(1)).await.len(), 200);
        assert_eq!(all(&mut wal.log(2)).await.len(), 2);
    });
}

#[test]
fn a_torn_tail_is_cut_off_and_damage_elsewhere_refused() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("open");
        let mut log = wal.log(1);
        for i in 1..=100 {
            append(&mut log, vec![entry(1, i, 400)]).await;
        }
    });
    let ids = segment::list(dir.path()).expect("list");
    assert!(ids.len() > 2, "{ids:?}");
    let newest = segment::path(dir.path(), *ids.last().expect("one"));
    // A record whose body never fully arrived.
    let mut f = OpenOptions::new().append(true).open(&newest).expect("open");
    f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 9, 9])
        .expect("write");
    drop(f);
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        let mut log = wal.log(1);
        assert_eq!(all(&mut log).await.len(), 100);
        append(&mut log, vec![entry(1, 101, 10)]).await;
    });
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        assert_eq!(all(&mut wal.log(1)).await.len(), 101);
    });
    // A flipped byte in an older segment is not silently skipped.
    let older = segment::path(dir.path(), ids[ids.len() - 2]);
    let mut bytes = std::fs::read(&older).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&older, bytes).expect("write");
    let err = Wal::open_with(dir.path(), tiny()).err().expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
}

/// How many segment files wait in `dir` to be reused.
fn reusable(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".reuse"))
        })
        .count()
}

/// The id of the segment at `path`.
fn id_of(path: &std::path::Path) -> u64 {
    let name = path.file_name().and_then(|n| n.to_str()).expect("name");
    name.strip_suffix(".wal")
        .expect(".wal")
        .parse()
        .expect("id")
}

/// Append to group 1 until the newest segment was begun in a preallocated
/// spare (its file is longer than the records it holds); returns how many
/// entries were appended and the segment's path.
async fn fill_into_a_spare(wal: &Wal, dir: &std::path::Path) -> (u64, std::path::PathBuf) {
    let mut log = wal.log(1);
    for i in 1..=2000 {
        append(&mut log, vec![entry(1, i, 400)]).await;
        let ids = segment::list(dir).expect("list");
        let newest = segment::path(dir, *ids.last().expect("one"));
        let held = segment::scan(&newest, id_of(&newest), |_, _| Ok(())).expect("scan");
        let on_disk = std::fs::metadata(&newest).expect("stat").len();
        if ids.len() > 1 && on_disk > held.valid {
            assert_eq!(on_disk, tiny().segment_bytes, "the spare's size");
            assert!(!held.damaged);
            return (i, newest);
        }
    }
    panic!("no segment was begun in a spare");
}

#[test]
fn a_segment_begun_in_a_spare_reopens_where_its_records_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let (n, newest) = rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("open");
        fill_into_a_spare(&wal, dir.path()).await
    });
    let size = std::fs::metadata(&newest).expect("stat").len();
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        let mut log = wal.log(1);
        assert_eq!(all(&mut log).await.len() as u64, n);
        // The zeros after the records are no torn write: nothing was cut.
        assert_eq!(std::fs::metadata(&newest).expect("stat").len(), size);
        append(&mut log, vec![entry(1, n + 1, 100)]).await;
    });
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        let got = all(&mut wal.log(1)).await;
        assert_eq!(got.len() as u64, n + 1);
        assert_eq!(got.last(), Some(&entry(1, n + 1, 100)));
    });
}

#[test]
fn a_torn_write_into_preallocated_space_is_cut_off() {
    use std::os::unix::fs::FileExt;
    // Garbage where the next record would start, and garbage after a
    // frame header of zeros (a write whose first page never arrived).
    for gap in [0u64, 64] {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = runtime();
        let (n, newest) = rt.block_on(async {
            let wal = Wal::open_with(dir.path(), tiny()).expect("open");
            fill_into_a_spare(&wal, dir.path()).await
        });
        let end = segment::scan(&newest, id_of(&newest), |_, _| Ok(()))
            .expect("scan")
            .valid;
        let f = OpenOptions::new().write(true).open(&newest).expect("open");
        f.write_all_at(&[200, 0, 0, 0, 1, 2, 3, 4, 9, 9], end + gap)
            .expect("write");
        drop(f);
        assert!(
            segment::scan(&newest, id_of(&newest), |_, _| Ok(()))
                .expect("scan")
                .damaged
        );
        rt.block_on(async {
            let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
            let mut log = wal.log(1);
            assert_eq!(all(&mut log).await.len() as u64, n, "gap {gap}");
            append(&mut log, vec![entry(1, n + 1, 10)]).await;
        });
        rt.block_on(async {
            let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
            let got = all(&mut wal.log(1)).await;
            assert_eq!(got.len() as u64, n + 1, "gap {gap}");
            assert_eq!(got.last(), Some(&entry(1, n + 1, 10)));
        });
    }
}

#[test]
fn a_reused_file_s_old_records_end_the_new_segment_where_its_own_do() {
    // Segment 5 holds two records; its file becomes the spare and segment
    // 6 is begun in it with a first record of the same length as 5's
    // first, so 5's second record starts exactly where 6's would.
    let dir = tempfile::tempdir().expect("tempdir");
    let a = record::Framed::vote(1, &Vote::new(4, 1)).expect("a").bytes;
    let b = record::Framed::vote(1, &Vote::new(5, 1)).expect("b").bytes;
    let c = record::Framed::vote(1, &Vote::new(6, 1)).expect("c").bytes;
    assert_eq!(a.len(), c.len());
    let old = segment::create(dir.path(), 5, &[a, b].concat(), None).expect("5");
    drop(old.file);
    let mut seen = 0;
    segment::scan(&segment::path(dir.path(), 5), 5, |_, _| {
        seen += 1;
        Ok(())
    })
    .expect("scan 5");
    assert_eq!(seen, 2);
    let reuse = segment::reuse_path(dir.path(), 5);
    std::fs::rename(segment::path(dir.path(), 5), &reuse).expect("rename");
    let new = segment::create(dir.path(), 6, &c, Some(&reuse)).expect("6");
    assert!(new.allocated > new.len, "begun over the old records");
    let mut bodies = Vec::new();
    let scan = segment::scan(&segment::path(dir.path(), 6), 6, |_, body| {
        bodies.push(body.to_vec());
        Ok(())
    })
    .expect("scan 6");
    assert_eq!(bodies, vec![c[record::FRAME_HEADER..].to_vec()]);
    assert_eq!(scan.valid, new.len);
    assert!(scan.damaged, "the old record follows, and fails the check");
    // Read as segment 5 (the mask its records were written with), the new
    // segment's own record fails instead.
    assert_eq!(
        segment::scan(&segment::path(dir.path(), 6), 5, |_, _| Ok(()))
            .expect("scan")
            .valid,
        record::SEGMENT_MAGIC.len() as u64
    );
}

#[test]
fn a_log_of_format_1_opens_and_takes_appends_unmasked_until_its_next_segment() {
    // A log written before CRCs were masked: segment 1, unmasked records.
    let dir = tempfile::tempdir().expect("tempdir");
    let first = record::Framed::entries(
        record::Kind::Entries,
        1,
        &[entry(1, 1, 300), entry(1, 2, 300)],
    )
    .expect("framed")
    .bytes;
    std::fs::write(
        segment::path(dir.path(), 1),
        [&record::SEGMENT_MAGIC_V1[..], &first].concat(),
    )
    .expect("write");
    let rt = runtime();
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("open");
        let mut log = wal.log(1);
        assert_eq!(
            all(&mut log).await,
            vec![entry(1, 1, 300), entry(1, 2, 300)]
        );
        append(&mut log, vec![entry(1, 3, 300)]).await;
    });
    let bytes = std::fs::read(segment::path(dir.path(), 1)).expect("read");
    assert_eq!(bytes[..8], record::SEGMENT_MAGIC_V1, "still format 1");
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        let mut log = wal.log(1);
        assert_eq!(all(&mut log).await.len(), 3);
        // Past a rotation, new segments are of format 2 and all reads back.
        for i in 4..=200 {
            append(&mut log, vec![entry(1, i, 300)]).await;
        }
    });
    let ids = segment::list(dir.path()).expect("list");
    assert!(ids.len() > 1, "{ids:?}");
    let newest = std::fs::read(segment::path(dir.path(), *ids.last().expect("one"))).expect("read");
    assert_eq!(newest[..8], record::SEGMENT_MAGIC);
    rt.block_on(async {
        let wal = Wal::open_with(dir.path(), tiny()).expect("reopen");
        let got = all(&mut wal.log(1)).await;
        assert_eq!(got.len(), 200);
        assert_eq!(got[0], entry(1, 1, 300));
        assert_eq!(got[199], entry(1, 200, 300));
    });
}

#[test]
fn segments_no_group_needs_are_reused_and_what_reopens_is_exactly_what_was_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut stale_tail_seen = false;
    let mut last = 0u64;
    for round in 0..4u64 {
        rt.block_on(async {
            let wal = Wal::open_with(dir.path(), tiny()).expect("open");
            assert_eq!(reusable(dir.path()), 0, "kept files are deleted at open");
            let mut log = wal.log(1);
            let kept: Vec<u64> = all(&mut log).await.iter().map(|e| e.log_id.index).collect();
            let from = (last + 1).saturating_sub(10).max(1);
            assert_eq!(kept, (from..=last).collect::<Vec<u64>>(), "round {round}");
            for e in all(&mut log).await {
                assert_eq!(e, entry(1, e.log_id.index, 500), "round {round}");
            }
            for i in last + 1..=last + 300 {
                append(&mut log, vec![entry(1, i, 500)]).await;
                if i % 10 == 0 {
                    log.purge(id(1, i - 10)).await.expect("purge");
                }
                let ids = segment::list(dir.path()).expect("list");
                let newest = segment::path(dir.path(), *ids.last().expect("one"));
                let scan = segment::scan(&newest, id_of(&newest), |_, _| Ok(())).expect("scan");
                stale_tail_seen |= scan.damaged;
                assert!(reusable(dir.path()) <= segment::REUSABLE);
            }
            last += 300;
            assert!(
                wal.stats().reused_segments > 0,
                "round {round}: {:?}",
                wal.stats()
            );
        });
    }
    assert!(stale_tail_seen, "no segment was begun over old records");
}

/// The model of one group's log.
#[derive(Default, Clone, Debug, PartialEq)]
struct Model {
    entries: BTreeMap<u64, LogEntry>,
    purged: Option<LogId>,
    vote: Option<Vote<u64>>,
}

#[test]
fn a_random_run_reopened_often_matches_a_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut models: BTreeMap<u64, Model> = BTreeMap::new();
    let mut term = 1;
    let mut relocated = 0;
    for round in 0..13 {
        rt.block_on(async {
            let wal = Wal::open_with(dir.path(), tiny()).expect("open");
            for (g, model) in &models {
                check(&wal, *g, model, round).await;
            }
            if round == 12 {
                return;
            }
            for _ in 0..120 {
                let g = rng.random_range(0..4u64);
                let model = models.entry(g).or_default();
                let mut log = wal.log(g);
                let last = model
                    .entries
                    .keys()
                    .next_back()
                    .copied()
                    .or(model.purged.map(|p| p.index))
                    .unwrap_or(0);
                match rng.random_range(0..10) {
                    0..=5 => {
                        let n = rng.random_range(1..4);
                        let new: Vec<LogEntry> = (last + 1..=last + n)
                            .map(|i| entry(term, i, rng.random_range(0..900)))
                            .collect();
                        for e in &new {
                            model.entries.insert(e.log_id.index, e.clone());
                        }
                        append(&mut log, new).await;
                    }
                    6 if last > 0 => {
                        let since =
                            rng.random_range(model.purged.map_or(1, |p| p.index + 1)..=last + 1);
                        model.entries.retain(|i, _| *i < since);
                        log.truncate(id(term, since)).await.expect("truncate");
                        term += 1;
                    }
                    7 if last > 0 => {
                        let upto = rng.random_range(model.purged.map_or(0, |p| p.index)..=last + 2);
                        let upto = id(term, upto);
                        if model.purged.is_none_or(|p| p.index < upto.index) {
                            model.entries.retain(|i, _| *i > upto.index);
                            model.purged = Some(upto);
                        }
                        log.purge(upto).await.expect("purge");
                    }
                    8 => {
                        let vote = Vote::new(term, g);
                        model.vote = Some(vote);
                        log.save_vote(&vote).await.expect("vote");
                    }
                    _ => {}
                }
            }
            // Purges are written without a sync of their own: one synced
            // record makes them durable before the "crash" (the drop).
            for g in models.keys() {
                wal.log(*g)
                    .save_vote(&models[g].vote.unwrap_or(Vote::new(0, 0)))
                    .await
                    .expect("sync");
            }
            for model in models.values_mut() {
                model.vote = Some(model.vote.unwrap_or(Vote::new(0, 0)));
            }
            relocated += wal.stats().relocated_bytes;
        });
    }
    // The run went through segment deletions and relocations.
    let segments = segment::list(dir.path()).expect("list");
    assert!(segments.len() < 20, "{segments:?} left");
    assert!(segments[0] > 10, "{segments:?} left");
    assert!(relocated > 0);
}

async fn check(wal: &Wal, g: u64, model: &Model, round: usize) {
    let mut log = wal.log(g);
    let got = all(&mut log).await;
    let want: Vec<LogEntry> = model.entries.values().cloned().collect();
    assert_eq!(got, want, "group {g} after round {round}");
    let state = log.get_log_state().await.expect("state");
    assert_eq!(state.last_purged_log_id, model.purged, "group {g}");
    let last = model
        .entries
        .values()
        .next_back()
        .map(|e| e.log_id)
        .or(model.purged);
    assert_eq!(state.last_log_id, last, "group {g}");
    assert_eq!(
        log.read_vote().await.expect("vote"),
        model.vote,
        "group {g}"
    );
}

/// The environment variable that makes [`crash_child`] run: the directory
/// of the log file it appends to.
const CRASH_DIR: &str = "LANEWAY_WAL_CRASH_DIR";

/// Groups the crash test writes.
const CRASH_GROUPS: u64 = 4;

/// Small segments, so that rotations, deletions and relocations happen
/// while the child is killed.
fn crash_limits() -> Limits {
    Limits {
        segment_bytes: 64 << 10,
        slack_bytes: 64 << 10,
    }
}

/// The entry the crash test writes at `index` of `group` (its content
/// follows from both, so a reader can check it byte for byte).
fn crash_entry(group: u64, index: u64) -> LogEntry {
    entry(
        1,
        index,
        usize::try_from((group * 131 + index * 17) % 700).unwrap_or(0),
    )
}

/// Not a test of its own: the child process of
/// [`acknowledged_appends_survive_sigkill_of_the_writer`]. It appends to
/// the log file in `$LANEWAY_WAL_CRASH_DIR` until killed, purging now and
/// then, and prints every acknowledged append as "group index".
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR) else {
        return;
    };
    use std::io::Write;
    let rt = runtime();
    rt.block_on(async {
        let wal = Wal::open_with(std::path::Path::new(&dir), crash_limits()).expect("open");
        let mut logs: Vec<WalLog> = (0..CRASH_GROUPS).map(|g| wal.log(g)).collect();
        let mut next = Vec::new();
        for log in &mut logs {
            let last = log.get_log_state().await.expect("state").last_log_id;
            next.push(last.map_or(1, |l| l.index + 1));
        }
        let mut out = std::io::stdout().lock();
        for step in 0u64.. {
            let g = step % CRASH_GROUPS;
            let slot = usize::try_from(g).unwrap_or(0);
            let i = next[slot];
            logs[slot]
                .write_entries(&[crash_entry(g, i)])
                .await
                .expect("append");
            writeln!(out, "{g} {i}").expect("print");
            out.flush().expect("flush");
            next[slot] = i + 1;
            // Group 0 keeps everything (its old entries get relocated);
            // the others purge behind them.
            if g != 0 && i % 40 == 0 {
                logs[slot].purge(id(1, i - 5)).await.expect("purge");
            }
        }
    });
}

#[test]
fn acknowledged_appends_survive_sigkill_of_the_writer() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let mut acked = vec![0u64; usize::try_from(CRASH_GROUPS).unwrap_or(0)];
    let rt = runtime();
    for round in 0..5u64 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "wal::tests::crash_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CRASH_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the writer");
        let stdout = child.stdout.take().expect("stdout");
        let mut seen = 0;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("line");
            let mut parts = line.split_whitespace().map(str::parse::<u64>);
            let (Some(Ok(g)), Some(Ok(i)), None) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            acked[usize::try_from(g).unwrap_or(0)] = i;
            seen += 1;
            if seen == 400 + round * 97 {
                break;
            }
        }
        // SIGKILL while it writes: whatever it had not acknowledged may
        // be cut short.
        child.kill().expect("kill");
        let _ = child.wait();
        rt.block_on(async {
            let wal = Wal::open_with(dir.path(), crash_limits()).expect("recover");
            for g in 0..CRASH_GROUPS {
                let mut log = wal.log(g);
                let state = log.get_log_state().await.expect("state");
                let last = state.last_log_id.map_or(0, |l| l.index);
                let want = acked[usize::try_from(g).unwrap_or(0)];
                assert!(
                    last >= want,
                    "round {round}, group {g}: log ends at {last}, {want} acknowledged"
                );
                let first = state.last_purged_log_id.map_or(1, |p| p.index + 1);
                let got = all(&mut log).await;
                assert_eq!(
                    got.len() as u64,
                    last + 1 - first,
                    "round {round}, group {g}: a gap"
                );
                for e in &got {
                    assert_eq!(
                        e,
                        &crash_entry(g, e.log_id.index),
                        "round {round}, group {g}"
                    );
                }
                if g == 0 {
                    assert_eq!(first, 1, "group 0 never purges");
                }
            }
        });
    }
    let segments = segment::list(dir.path()).expect("list");
    assert!(segments[0] > 1, "old segments were deleted: {segments:?}");
}
