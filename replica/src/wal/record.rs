//! The records of a node's Raft log file ([`super::Wal`]), and their framing.
//!
//! A segment file is an 8-byte header ([`SEGMENT_MAGIC`], whose last byte is
//! the format version) followed by records:
//!
//! | field | bytes |
//! | --- | --- |
//! | body length, u32 LE | 4 |
//! | CRC32C of the body, u32 LE | 4 |
//! | body | length |
//!
//! A body starts with its kind (one byte) and the group it belongs to (u64
//! LE); what follows depends on the kind:
//!
//! - [`Kind::Entries`] and [`Kind::Relocated`]: the count (u32 LE), then
//!   each entry as its length (u32 LE) and its bincode form. An entry's
//!   bincode form begins with its log id (openraft's `Entry` serializes
//!   `log_id` first), so recovery reads the id without decoding the payload.
//! - [`Kind::Truncate`]: the first index removed (u64 LE).
//! - [`Kind::Purge`], [`Kind::Vote`], [`Kind::Committed`]: the bincode form
//!   of the purged log id, the vote, or the (optional) committed log id.
//! - [`Kind::Forget`]: nothing more; the group's whole state (vote,
//!   committed and purged ids, entries) is dropped.
//!
//! Entries are encoded by the group's task, straight into the record,
//! before they reach the writer thread ([`Framed::entries`]), so the
//! thread that all groups share only copies bytes into the file.

use crate::types::{LogEntry, LogId, NodeId};
use openraft::Vote;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The first bytes of a segment file: "LWWAL", two zero bytes, and the
/// format version (2: every record's CRC is stored XORed with the
/// segment's [`mask`]).
pub const SEGMENT_MAGIC: [u8; 8] = *b"LWWAL\0\0\x02";

/// The first bytes of a segment of format 1, whose CRCs are stored as they
/// are (written before segment files were reused; still read, and
/// appended to when one is the newest).
pub const SEGMENT_MAGIC_V1: [u8; 8] = *b"LWWAL\0\0\x01";

/// What the CRCs of segment `id`'s records are stored XORed with.
///
/// Why: a segment may be begun in the file of one deleted before
/// ([`super::segment`], "Reuse"), whose old records still follow the new
/// ones. An old record whose CRC was masked for another segment never
/// passes the check of this one: the mask is a bijection of the id's low
/// 32 bits (an odd multiplier), so it differs for any two ids below 2^32,
/// and is never 0 for them, so format-1 records (unmasked) never pass
/// either.
pub fn mask(id: u64) -> u32 {
    let low = u32::try_from(id & u64::from(u32::MAX)).unwrap_or(0);
    low.wrapping_mul(0x9E37_79B1)
}

/// The mask of a segment whose header is `magic`: `None` when it is no
/// segment header this build reads.
pub fn mask_for(magic: &[u8; 8], id: u64) -> Option<u32> {
    if *magic == SEGMENT_MAGIC {
        Some(mask(id))
    } else if *magic == SEGMENT_MAGIC_V1 {
        Some(0)
    } else {
        None
    }
}

/// XOR the stored CRC of every record in `frames` (whole framed records,
/// back to back) with `mask`.
pub fn mask_frames(frames: &mut [u8], mask: u32) {
    if mask == 0 {
        return;
    }
    let mut at = 0;
    while at + FRAME_HEADER <= frames.len() {
        let header: [u8; FRAME_HEADER] = frames[at..at + FRAME_HEADER]
            .try_into()
            .unwrap_or([0; FRAME_HEADER]);
        let (body_len, sum) = parse_header(&header);
        frames[at + 4..at + FRAME_HEADER].copy_from_slice(&(sum ^ mask).to_le_bytes());
        at = at.saturating_add(FRAME_HEADER).saturating_add(body_len);
    }
}

/// Bytes before a record's body: its length and its CRC.
pub const FRAME_HEADER: usize = 8;

/// Largest body a record may have. A length above it is read as damage,
/// never as an allocation to make.
pub const MAX_BODY: usize = 256 << 20;

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Entries appended after the group's log (a truncation, if any, was
    /// written before them).
    Entries = 1,
    /// Copies of entries a group holds, written again so that the old
    /// segment holding the originals can be deleted; they take the
    /// originals' place.
    Relocated = 2,
    /// The entries from an index on are removed.
    Truncate = 3,
    /// The entries up to a log id are removed, and that id is the purged one.
    Purge = 4,
    /// The group's vote.
    Vote = 5,
    /// The group's last committed log id (a hint for restarts).
    Committed = 6,
    /// Everything of the group before it is dropped (its replica left this
    /// node); records after it begin the group anew.
    Forget = 7,
}

impl Kind {
    fn of(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Entries,
            2 => Kind::Relocated,
            3 => Kind::Truncate,
            4 => Kind::Purge,
            5 => Kind::Vote,
            6 => Kind::Committed,
            7 => Kind::Forget,
            _ => return None,
        })
    }
}

/// Bytes of a body before its kind-specific part: kind and group.
const BODY_HEAD: usize = 9;

/// Where one entry of a framed record lies within the record's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntrySpan {
    /// The entry's log id.
    pub log_id: LogId,
    /// Offset of its bincode form in the body.
    pub offset: u32,
    /// Length of its bincode form.
    pub len: u32,
}

/// A record ready to be written: header and body, and for entries where
/// each one lies in the body.
#[derive(Debug)]
pub struct Framed {
    /// Header and body.
    pub bytes: Vec<u8>,
    /// The entries, in order (empty for other kinds).
    pub spans: Vec<EntrySpan>,
}

/// A record's body failed to encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A field did not encode or decode.
    #[error("wal record: {0}")]
    Bincode(#[from] bincode::Error),
    /// The body does not follow the format.
    #[error("wal record: {0}")]
    Malformed(&'static str),
}

impl Framed {
    /// The record of `entries` of `group`, as [`Kind::Entries`] or
    /// [`Kind::Relocated`]: each entry is encoded straight into the
    /// record (this runs for every append, on the group's task).
    pub fn entries(kind: Kind, group: u64, entries: &[LogEntry]) -> Result<Framed, RecordError> {
        let mut record = Builder::new(kind, group, entries.len())?;
        for e in entries {
            record.entry(e.log_id, |bytes| Ok(bincode::serialize_into(bytes, e)?))?;
        }
        record.finish()
    }

    /// The record of entries already in bincode form.
    pub fn encoded_entries(
        kind: Kind,
        group: u64,
        entries: &[(LogId, Vec<u8>)],
    ) -> Result<Framed, RecordError> {
        let mut record = Builder::new(kind, group, entries.len())?;
        for (log_id, encoded) in entries {
            record.entry(*log_id, |bytes| {
                bytes.extend_from_slice(encoded);
                Ok(())
            })?;
        }
        record.finish()
    }

    /// The record removing `group`'s entries from `since` on.
    pub fn truncate(group: u64, since: u64) -> Result<Framed, RecordError> {
        let mut record = Builder::head(Kind::Truncate, group);
        record.bytes.extend_from_slice(&since.to_le_bytes());
        record.finish()
    }

    /// The record of `group`'s purge up to `upto`.
    pub fn purge(group: u64, upto: &LogId) -> Result<Framed, RecordError> {
        Framed::value(Kind::Purge, group, upto)
    }

    /// The record of `group`'s vote.
    pub fn vote(group: u64, vote: &Vote<NodeId>) -> Result<Framed, RecordError> {
        Framed::value(Kind::Vote, group, vote)
    }

    /// The record of `group`'s committed log id.
    pub fn committed(group: u64, committed: &Option<LogId>) -> Result<Framed, RecordError> {
        Framed::value(Kind::Committed, group, committed)
    }

    /// The record dropping everything of `group` before it.
    pub fn forget(group: u64) -> Result<Framed, RecordError> {
        Builder::head(Kind::Forget, group).finish()
    }

    fn value<T: Serialize>(kind: Kind, group: u64, value: &T) -> Result<Framed, RecordError> {
        let mut record = Builder::head(kind, group);
        bincode::serialize_into(&mut record.bytes, value)?;
        record.finish()
    }
}

/// A record being written: header room, then the body, encoded in place.
struct Builder {
    /// Header (filled in by `finish`) and body.
    bytes: Vec<u8>,
    spans: Vec<EntrySpan>,
}

impl Builder {
    /// A record of `kind` and `group` with room for its header.
    fn head(kind: Kind, group: u64) -> Builder {
        let mut bytes = Vec::with_capacity(256);
        bytes.extend_from_slice(&[0; FRAME_HEADER]);
        bytes.push(kind as u8);
        bytes.extend_from_slice(&group.to_le_bytes());
        Builder {
            bytes,
            spans: Vec::new(),
        }
    }

    /// An entries record of `count` entries.
    fn new(kind: Kind, group: u64, count: usize) -> Result<Builder, RecordError> {
        let n = u32::try_from(count).map_err(|_| RecordError::Malformed("count"))?;
        let mut record = Builder::head(kind, group);
        record.bytes.extend_from_slice(&n.to_le_bytes());
        record.spans.reserve(count);
        Ok(record)
    }

    /// Add the entry `log_id`, whose bincode form `encode` appends.
    fn entry(
        &mut self,
        log_id: LogId,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), RecordError>,
    ) -> Result<(), RecordError> {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&[0; 4]);
        encode(&mut self.bytes)?;
        let start = at + 4;
        let len =
            u32::try_from(self.bytes.len() - start).map_err(|_| RecordError::Malformed("entry"))?;
        self.bytes[at..start].copy_from_slice(&len.to_le_bytes());
        let offset =
            u32::try_from(start - FRAME_HEADER).map_err(|_| RecordError::Malformed("too large"))?;
        self.spans.push(EntrySpan {
            log_id,
            offset,
            len,
        });
        Ok(())
    }

    /// The record, its header holding the body's length and CRC.
    fn finish(mut self) -> Result<Framed, RecordError> {
        let body_len = self.bytes.len() - FRAME_HEADER;
        if body_len > MAX_BODY {
            return Err(RecordError::Malformed(
                "record larger than the largest body",
            ));
        }
        let len = u32::try_from(body_len).map_err(|_| RecordError::Malformed("too large"))?;
        let sum = crc(&self.bytes[FRAME_HEADER..]);
        self.bytes[..4].copy_from_slice(&len.to_le_bytes());
        self.bytes[4..FRAME_HEADER].copy_from_slice(&sum.to_le_bytes());
        Ok(Framed {
            bytes: self.bytes,
            spans: self.spans,
        })
    }
}

/// The CRC a record header carries for `body`.
pub fn crc(body: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(body)
}

/// A record header: the body's length and CRC.
pub fn parse_header(header: &[u8; FRAME_HEADER]) -> (usize, u32) {
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    (usize::try_from(len).unwrap_or(usize::MAX), crc)
}

/// A decoded record body.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// [`Kind::Entries`] or [`Kind::Relocated`]: where each entry lies.
    Entries {
        /// Which of the two.
        kind: Kind,
        /// The group.
        group: u64,
        /// The entries' spans in the body.
        spans: Vec<EntrySpan>,
    },
    /// [`Kind::Truncate`].
    Truncate {
        /// The group.
        group: u64,
        /// The first index removed.
        since: u64,
    },
    /// [`Kind::Purge`].
    Purge {
        /// The group.
        group: u64,
        /// The last purged log id.
        upto: LogId,
    },
    /// [`Kind::Vote`].
    Vote {
        /// The group.
        group: u64,
        /// The vote.
        vote: Vote<NodeId>,
    },
    /// [`Kind::Committed`].
    Committed {
        /// The group.
        group: u64,
        /// The committed log id.
        committed: Option<LogId>,
    },
    /// [`Kind::Forget`].
    Forget {
        /// The group.
        group: u64,
    },
}

impl Record {
    /// Decode `body` (whose CRC was checked). Entries are not decoded, only
    /// their log ids and spans.
    pub fn decode(body: &[u8]) -> Result<Record, RecordError> {
        if body.len() < BODY_HEAD {
            return Err(RecordError::Malformed("short body"));
        }
        let kind = Kind::of(body[0]).ok_or(RecordError::Malformed("unknown kind"))?;
        let group = u64::from_le_bytes(fixed(&body[1..BODY_HEAD])?);
        let rest = &body[BODY_HEAD..];
        Ok(match kind {
            Kind::Entries | Kind::Relocated => Record::Entries {
                kind,
                group,
                spans: spans(body)?,
            },
            Kind::Truncate => Record::Truncate {
                group,
                since: u64::from_le_bytes(fixed(rest)?),
            },
            Kind::Purge => Record::Purge {
                group,
                upto: value(rest)?,
            },
            Kind::Vote => Record::Vote {
                group,
                vote: value(rest)?,
            },
            Kind::Committed => Record::Committed {
                group,
                committed: value(rest)?,
            },
            Kind::Forget => Record::Forget { group },
        })
    }
}

/// The spans of the entries of an entries body.
fn spans(body: &[u8]) -> Result<Vec<EntrySpan>, RecordError> {
    let mut at = BODY_HEAD;
    let count = u32::from_le_bytes(fixed(slice(body, at, 4)?)?);
    at += 4;
    let mut spans = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 16));
    for _ in 0..count {
        let len = u32::from_le_bytes(fixed(slice(body, at, 4)?)?);
        at += 4;
        let bytes = slice(body, at, usize::try_from(len).unwrap_or(usize::MAX))?;
        let log_id: LogId = bincode::deserialize(bytes)?;
        spans.push(EntrySpan {
            log_id,
            offset: u32::try_from(at).map_err(|_| RecordError::Malformed("offset"))?,
            len,
        });
        at += bytes.len();
    }
    if at != body.len() {
        return Err(RecordError::Malformed("bytes after the entries"));
    }
    Ok(spans)
}

/// The entry `span` names in `body`, decoded.
pub fn entry_at(body: &[u8], span: &EntrySpan) -> Result<LogEntry, RecordError> {
    let offset = usize::try_from(span.offset).map_err(|_| RecordError::Malformed("offset"))?;
    let len = usize::try_from(span.len).map_err(|_| RecordError::Malformed("length"))?;
    Ok(bincode::deserialize(slice(body, offset, len)?)?)
}

/// The raw bytes of the entry `span` names in `body`.
pub fn entry_bytes<'a>(body: &'a [u8], span: &EntrySpan) -> Result<&'a [u8], RecordError> {
    let offset = usize::try_from(span.offset).map_err(|_| RecordError::Malformed("offset"))?;
    let len = usize::try_from(span.len).map_err(|_| RecordError::Malformed("length"))?;
    slice(body, offset, len)
}

fn slice(body: &[u8], at: usize, len: usize) -> Result<&[u8], RecordError> {
    let end = at
        .checked_add(len)
        .ok_or(RecordError::Malformed("length"))?;
    body.get(at..end)
        .ok_or(RecordError::Malformed("entry past the body"))
}

fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], RecordError> {
    bytes
        .get(..N)
        .and_then(|b| b.try_into().ok())
        .ok_or(RecordError::Malformed("short field"))
}

fn value<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, RecordError> {
    Ok(bincode::deserialize(bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Mutation;
    use laneway_store::index::WriteBatch;

    fn entry(index: u64, term: u64, body: usize) -> LogEntry {
        let mut batch = WriteBatch::default();
        batch.put(b"key".to_vec(), vec![9; body]);
        LogEntry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(term, 2), index),
            payload: openraft::EntryPayload::Normal(Mutation::of_batch(&batch)),
        }
    }

    #[test]
    fn masks_differ_between_segments_and_are_never_zero() {
        let masks: std::collections::HashSet<u32> = (1..=100_000u64).map(mask).collect();
        assert_eq!(masks.len(), 100_000);
        assert!(!masks.contains(&0));
        // Format 1 reads unmasked; no other header is a segment's.
        assert_eq!(mask_for(&SEGMENT_MAGIC_V1, 7), Some(0));
        assert_eq!(mask_for(&SEGMENT_MAGIC, 7), Some(mask(7)));
        assert_eq!(mask_for(b"LWWAL\0\0\x03", 7), None);
    }

    #[test]
    fn masking_frames_changes_only_their_crcs_and_undoes_itself() {
        let a = Framed::vote(1, &Vote::new(3, 1)).expect("vote");
        let b = Framed::entries(Kind::Entries, 2, &[entry(1, 1, 40)]).expect("entries");
        let mut frames = [a.bytes.clone(), b.bytes.clone()].concat();
        mask_frames(&mut frames, mask(9));
        let second = a.bytes.len();
        let stored =
            |at: usize, f: &[u8]| u32::from_le_bytes(f[at + 4..at + 8].try_into().expect("4"));
        assert_eq!(stored(0, &frames), stored(0, &a.bytes) ^ mask(9));
        assert_eq!(stored(second, &frames), stored(0, &b.bytes) ^ mask(9));
        assert_eq!(frames[8..second], a.bytes[8..]);
        assert_eq!(frames[second + 8..], b.bytes[8..]);
        mask_frames(&mut frames, mask(9));
        assert_eq!(frames, [a.bytes, b.bytes].concat());
    }

    fn body(framed: &Framed) -> &[u8] {
        let header: [u8; FRAME_HEADER] = framed.bytes[..FRAME_HEADER].try_into().expect("header");
        let (len, sum) = parse_header(&header);
        let body = &framed.bytes[FRAME_HEADER..];
        assert_eq!(body.len(), len);
        assert_eq!(crc(body), sum);
        body
    }

    #[test]
    fn an_entry_s_bincode_form_begins_with_its_log_id() {
        let e = entry(17, 3, 10);
        let bytes = bincode::serialize(&e).expect("encode");
        let id: LogId = bincode::deserialize(&bytes).expect("prefix");
        assert_eq!(id, e.log_id);
    }

    #[test]
    fn entries_round_trip_with_their_spans() {
        let entries: Vec<LogEntry> = (5..8usize).map(|i| entry(i as u64, 2, 100 * i)).collect();
        let framed = Framed::entries(Kind::Entries, 42, &entries).expect("frame");
        let Record::Entries { kind, group, spans } = Record::decode(body(&framed)).expect("decode")
        else {
            panic!("not entries");
        };
        assert_eq!((kind, group), (Kind::Entries, 42));
        assert_eq!(spans, framed.spans);
        for (span, want) in spans.iter().zip(&entries) {
            assert_eq!(&entry_at(body(&framed), span).expect("entry"), want);
        }
    }

    #[test]
    fn small_records_round_trip() {
        let id = LogId::new(openraft::CommittedLeaderId::new(4, 1), 9);
        let vote = Vote::new_committed(4, 1);
        let cases = [
            (
                Framed::truncate(3, 77),
                Record::Truncate {
                    group: 3,
                    since: 77,
                },
            ),
            (Framed::purge(3, &id), Record::Purge { group: 3, upto: id }),
            (Framed::vote(3, &vote), Record::Vote { group: 3, vote }),
            (
                Framed::committed(3, &Some(id)),
                Record::Committed {
                    group: 3,
                    committed: Some(id),
                },
            ),
        ];
        for (framed, want) in cases {
            let framed = framed.expect("frame");
            assert_eq!(Record::decode(body(&framed)).expect("decode"), want);
        }
    }

    #[test]
    fn damaged_bodies_are_errors_not_panics() {
        let entries = vec![entry(1, 1, 50)];
        let framed = Framed::entries(Kind::Entries, 1, &entries).expect("frame");
        let good = body(&framed).to_vec();
        for cut in 0..good.len() {
            assert!(Record::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut unknown = good.clone();
        unknown[0] = 99;
        assert!(Record::decode(&unknown).is_err());
        let mut long = good;
        long.push(0);
        assert!(Record::decode(&long).is_err(), "trailing bytes");
    }
}
