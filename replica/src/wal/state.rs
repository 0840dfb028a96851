//! What a node's Raft log file holds, in memory: for every group its vote,
//! committed and purged ids and where each of its entries lies on disk;
//! for every segment its file and size.
//!
//! The same methods apply a record whether the writer thread just wrote it
//! or recovery reads it back, so the two cannot disagree on what a record
//! means. The rules:
//!
//! - an entries record at index `i` removes the group's entries from `i`
//!   on, then adds its own (openraft truncates before it appends over
//!   entries, so the removal matters only for damage); entries at or
//!   before the purged id are not taken;
//! - a relocated record puts its copies in place of the originals;
//! - a forget record drops the group's state (records after it begin the
//!   group anew);
//! - segments are deleted oldest first, only once none holds an entry a
//!   group still has ([`WalState::oldest_needed`]): an entry of an old
//!   segment that is still needed is relocated first. Recovery therefore
//!   meets each entry's newest copy last, while an entry's original may
//!   be missing with its segment; a group's entries are whole again once
//!   every record is read, which [`WalState::check`] verifies.

use super::record::EntrySpan;
use crate::types::{LogId, NodeId};
use openraft::Vote;
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

/// Where one entry lies: its record in a segment, and its span there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// The segment.
    pub segment: u64,
    /// Offset of the record (its header) in the segment.
    pub record: u64,
    /// Length of the record's body.
    pub body_len: u32,
    /// The entry within the body.
    pub span: EntrySpan,
}

/// One group's log as the file holds it.
#[derive(Debug, Default)]
pub struct GroupState {
    /// The vote.
    pub vote: Option<Vote<NodeId>>,
    /// The committed log id (a hint).
    pub committed: Option<LogId>,
    /// The last purged log id.
    pub purged: Option<LogId>,
    /// The entries after `purged`, by index (without gaps once recovery
    /// has read every record).
    pub run: BTreeMap<u64, Location>,
    /// Bytes of the entries in `run`.
    pub live_bytes: u64,
}

impl GroupState {
    /// The log id of the last entry, or the purged id if there is none.
    pub fn last_log_id(&self) -> Option<LogId> {
        self.run
            .values()
            .next_back()
            .map(|l| l.span.log_id)
            .or(self.purged)
    }

    /// The locations of the entries with `start <= index < end` the run
    /// holds (`end` None: to the end).
    pub fn range(&self, start: u64, end: Option<u64>) -> Vec<Location> {
        match end {
            Some(e) if e <= start => Vec::new(),
            Some(e) => self.run.range(start..e).map(|(_, l)| *l).collect(),
            None => self.run.range(start..).map(|(_, l)| *l).collect(),
        }
    }

    /// `locations`, written after the entries before their first index
    /// (those from it on are removed).
    pub fn appended(&mut self, locations: &[Location]) {
        let Some(start) = locations.first().map(|l| l.span.log_id.index) else {
            return;
        };
        self.truncated(start);
        self.put(locations);
    }

    /// `locations`: copies of entries, in place of the originals.
    pub fn relocated(&mut self, locations: &[Location]) {
        self.put(locations);
    }

    fn put(&mut self, locations: &[Location]) {
        for l in locations {
            if self.purged.is_some_and(|p| l.span.log_id.index <= p.index) {
                continue;
            }
            self.live_bytes += u64::from(l.span.len);
            if let Some(old) = self.run.insert(l.span.log_id.index, *l) {
                self.live_bytes -= u64::from(old.span.len);
            }
        }
    }

    /// The entries from `since` on are removed.
    pub fn truncated(&mut self, since: u64) {
        let removed = self.run.split_off(&since);
        self.live_bytes -= bytes_of(&removed);
    }

    /// The entries up to `upto` are removed, and `upto` is purged.
    pub fn purged(&mut self, upto: LogId) {
        if self.purged.is_some_and(|p| p.index >= upto.index) {
            return;
        }
        self.purged = Some(upto);
        let kept = self.run.split_off(&upto.index.saturating_add(1));
        let removed = std::mem::replace(&mut self.run, kept);
        self.live_bytes -= bytes_of(&removed);
    }

    /// The oldest segment holding one of the entries.
    pub fn oldest_segment(&self) -> Option<u64> {
        self.run.values().map(|l| l.segment).min()
    }

    /// Whether the entries are a run without gaps right after the purged
    /// id (or after nothing).
    fn whole(&self) -> bool {
        let Some(first) = self.run.keys().next() else {
            return true;
        };
        let follows_purge = self.purged.is_none_or(|p| *first == p.index + 1);
        let gapless = self
            .run
            .keys()
            .zip(self.run.keys().skip(1))
            .all(|(a, b)| a + 1 == *b);
        follows_purge && gapless
    }
}

fn bytes_of(run: &BTreeMap<u64, Location>) -> u64 {
    run.values().map(|l| u64::from(l.span.len)).sum()
}

/// One segment file.
#[derive(Debug)]
pub struct Segment {
    /// Opened for reading (a reader keeps it open while it reads, so a
    /// segment deleted meanwhile still reads).
    pub file: Arc<File>,
    /// Its length.
    pub bytes: u64,
    /// What its records' CRCs are stored XORed with
    /// ([`super::record::mask`]; 0 for a segment of format 1).
    pub mask: u32,
}

/// Every group and segment of the file.
#[derive(Debug, Default)]
pub struct WalState {
    /// The groups, by id.
    pub groups: BTreeMap<u64, GroupState>,
    /// The segments, by id (the newest is the one appended to).
    pub segments: BTreeMap<u64, Segment>,
}

impl WalState {
    /// Group `group` (created empty if unknown).
    pub fn group(&mut self, group: u64) -> &mut GroupState {
        self.groups.entry(group).or_default()
    }

    /// Drop everything of `group`: it holds no entries any more, so no
    /// segment is kept for it, and no checkpoint names it.
    pub fn forget(&mut self, group: u64) {
        self.groups.remove(&group);
    }

    /// The oldest segment some group still needs (an entry of it lies
    /// there), or None when no group holds an entry.
    pub fn oldest_needed(&self) -> Option<u64> {
        self.groups
            .values()
            .filter_map(GroupState::oldest_segment)
            .min()
    }

    /// Every group's entries that lie in `segment`, by group.
    pub fn entries_in(&self, segment: u64) -> BTreeMap<u64, Vec<Location>> {
        let mut found = BTreeMap::new();
        for (id, g) in &self.groups {
            let here: Vec<Location> = g
                .run
                .values()
                .filter(|l| l.segment == segment)
                .copied()
                .collect();
            if !here.is_empty() {
                found.insert(*id, here);
            }
        }
        found
    }

    /// Bytes of all segments.
    pub fn disk_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.bytes).sum()
    }

    /// Bytes of the entries the groups hold.
    pub fn live_bytes(&self) -> u64 {
        self.groups.values().map(|g| g.live_bytes).sum()
    }

    /// The groups whose entries have a gap or do not follow their purged
    /// id (after recovery: damage, or a record missing).
    pub fn check(&self) -> Vec<u64> {
        self.groups
            .iter()
            .filter(|(_, g)| !g.whole())
            .map(|(id, _)| *id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(openraft::CommittedLeaderId::new(term, 1), index)
    }

    fn loc(segment: u64, term: u64, index: u64) -> Location {
        Location {
            segment,
            record: index * 100,
            body_len: 100,
            span: EntrySpan {
                log_id: id(term, index),
                offset: 13,
                len: 10,
            },
        }
    }

    fn indexes(g: &GroupState) -> Vec<(u64, u64)> {
        g.run
            .values()
            .map(|l| (l.span.log_id.index, l.segment))
            .collect()
    }

    #[test]
    fn appends_truncations_and_purges_keep_a_gapless_run() {
        let mut g = GroupState::default();
        g.appended(&[loc(1, 1, 1), loc(1, 1, 2), loc(1, 1, 3)]);
        assert_eq!(g.last_log_id(), Some(id(1, 3)));
        g.truncated(3);
        g.appended(&[loc(2, 2, 3), loc(2, 2, 4)]);
        assert_eq!(indexes(&g), vec![(1, 1), (2, 1), (3, 2), (4, 2)]);
        assert_eq!(g.live_bytes, 40);
        g.purged(id(1, 2));
        assert_eq!(indexes(&g), vec![(3, 2), (4, 2)]);
        assert_eq!(g.live_bytes, 20);
        // An older purge changes nothing.
        g.purged(id(1, 1));
        assert_eq!(g.purged, Some(id(1, 2)));
        // Purging past the end leaves an empty run whose end is the purge.
        g.purged(id(2, 9));
        assert_eq!(g.last_log_id(), Some(id(2, 9)));
        assert_eq!(g.live_bytes, 0);
        // Entries at or before the purge are not taken back.
        g.appended(&[loc(3, 2, 9), loc(3, 2, 10)]);
        assert_eq!(indexes(&g), vec![(10, 3)]);
    }

    #[test]
    fn an_overlapping_append_replaces_the_tail() {
        let mut g = GroupState::default();
        g.appended(&[loc(1, 1, 1), loc(1, 1, 2), loc(1, 1, 3)]);
        g.appended(&[loc(2, 2, 2)]);
        assert_eq!(indexes(&g), vec![(1, 1), (2, 2)]);
        assert_eq!(g.live_bytes, 20);
        assert!(g.whole());
    }

    #[test]
    fn relocated_copies_take_the_originals_place_and_fill_a_missing_prefix() {
        let mut g = GroupState::default();
        g.appended(&[loc(1, 1, 4), loc(1, 1, 5)]);
        g.relocated(&[loc(6, 1, 4)]);
        assert_eq!(indexes(&g), vec![(4, 6), (5, 1)]);
        assert_eq!(g.live_bytes, 20);
        // Replayed after the originals' segment was deleted: the later
        // entries come first, the relocated ones fill in before them.
        let mut replayed = GroupState::default();
        replayed.purged(id(1, 3));
        replayed.appended(&[loc(7, 1, 6)]);
        assert!(!replayed.whole(), "4 and 5 missing so far");
        replayed.relocated(&[loc(8, 1, 4), loc(8, 1, 5)]);
        assert!(replayed.whole());
        assert_eq!(indexes(&replayed), vec![(4, 8), (5, 8), (6, 7)]);
        assert_eq!(replayed.oldest_segment(), Some(7));
        assert_eq!(g.range(4, Some(5)).len(), 1);
        assert_eq!(g.range(0, None).len(), 2);
        assert!(g.range(9, None).is_empty());
    }

    #[test]
    fn the_oldest_needed_segment_is_the_oldest_first_entry() {
        let mut s = WalState::default();
        s.group(1).appended(&[loc(3, 1, 1), loc(4, 1, 2)]);
        s.group(2).appended(&[loc(2, 1, 1)]);
        s.group(3);
        assert_eq!(s.oldest_needed(), Some(2));
        assert_eq!(s.entries_in(2).keys().copied().collect::<Vec<_>>(), vec![2]);
        assert_eq!(s.entries_in(4)[&1].len(), 1);
        s.group(2).purged(id(1, 1));
        assert_eq!(s.oldest_needed(), Some(3));
    }
}
