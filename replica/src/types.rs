//! What a partition's Raft log carries, and the openraft type configuration
//! built on it.
//!
//! A log entry's application payload is a [`Mutation`]: the index batch one
//! round of the partition's group commit produced ([`WriteBatch`], carried
//! here as [`BatchWire`] because the store's batch type has no serde form),
//! and/or pieces of volume data ([`DataPiece`]): an object body above the
//! inline size is shipped piece by piece ahead of the record that points
//! at it, and every replica writes each piece at the same segment and
//! offset (docs/replication.md, "Write path").

use laneway_store::index::{BatchOp, WriteBatch};
use laneway_store::replication::VolumeWrite;
use serde::{Deserialize, Serialize};

/// A node's id within the cluster (the cluster file's node number).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The openraft type configuration of a laneway partition group.
    pub TypeConfig:
        D = Mutation,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::snapshot_data::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A Raft handle of a partition group.
pub type PartitionRaft = openraft::Raft<TypeConfig>;
/// A log entry of a partition group.
pub type LogEntry = openraft::Entry<TypeConfig>;
/// A log id of a partition group.
pub type LogId = openraft::LogId<NodeId>;
/// An error from a storage call, as openraft wants it.
pub type StorageError = openraft::StorageError<NodeId>;
/// The stored membership of a partition group.
pub type Membership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
/// The metadata of a partition snapshot.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;

/// One replicated change of a partition: index rows, or a piece of
/// volume data, or both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mutation {
    /// The index rows to write, all at once.
    pub batch: BatchWire,
    /// Volume bytes to write before the rows (a piece of an object body
    /// shipped ahead of the record that will point at it).
    pub data: Vec<DataPiece>,
}

impl Mutation {
    /// A mutation of index rows only.
    pub fn of_batch(batch: &WriteBatch) -> Mutation {
        Mutation {
            batch: BatchWire::from_batch(batch),
            data: Vec::new(),
        }
    }

    /// A mutation that deletes volume segment `segment` on every replica.
    pub fn of_drop(segment: u64) -> Mutation {
        Mutation {
            batch: BatchWire {
                ops: vec![OpWire::DropSegment(segment)],
            },
            data: Vec::new(),
        }
    }

    /// The volume segments this mutation deletes.
    pub fn drops(&self) -> impl Iterator<Item = u64> + '_ {
        self.batch.ops.iter().filter_map(|op| match op {
            OpWire::DropSegment(id) => Some(*id),
            _ => None,
        })
    }

    /// Whether applying this mutation touches volume files.
    pub fn touches_volumes(&self) -> bool {
        !self.data.is_empty() || self.drops().next().is_some()
    }

    /// A mutation of volume bytes only.
    pub fn of_data(w: &VolumeWrite) -> Mutation {
        Mutation {
            batch: BatchWire::default(),
            data: vec![DataPiece {
                segment: w.segment,
                offset: w.offset,
                bytes: w.bytes.to_vec(),
            }],
        }
    }
}

/// Bytes of a volume segment at an offset, written by every replica that
/// applies the entry ([`laneway_store::volume::VolumeSet::write_at`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPiece {
    /// The volume segment's id.
    pub segment: u64,
    /// Byte offset in the segment.
    pub offset: u64,
    /// The bytes.
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// A [`WriteBatch`] in a form serde can encode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchWire {
    /// The batch's operations, in order.
    pub ops: Vec<OpWire>,
}

/// One [`BatchOp`] in a form serde can encode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpWire {
    /// Insert or replace a row.
    Put(
        #[serde(with = "serde_bytes")] Vec<u8>,
        #[serde(with = "serde_bytes")] Vec<u8>,
    ),
    /// Remove a row.
    Delete(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Delete volume segment `.0` (compaction moved every live record out
    /// of it). Not an index row: the state machine deletes the file when
    /// it applies the entry, after the entries before it. Last of the
    /// variants, so entries logged before it existed decode as they did.
    DropSegment(u64),
}

impl BatchWire {
    /// The wire form of `batch`.
    pub fn from_batch(batch: &WriteBatch) -> BatchWire {
        let ops = batch
            .ops
            .iter()
            .map(|op| match op {
                BatchOp::Put(k, v) => OpWire::Put(k.clone(), v.clone()),
                BatchOp::Delete(k) => OpWire::Delete(k.clone()),
            })
            .collect();
        BatchWire { ops }
    }

    /// Append this batch's operations to `out`.
    pub fn append_to(&self, out: &mut WriteBatch) {
        for op in &self.ops {
            match op {
                OpWire::Put(k, v) => out.put(k.clone(), v.clone()),
                OpWire::Delete(k) => out.delete(k.clone()),
                // Applied to the volumes, not the index.
                OpWire::DropSegment(_) => {}
            }
        }
    }
}

/// What applying one entry answers its proposer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The log index the entry was applied at.
    pub index: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_survives_the_wire_form_and_bincode() {
        let mut batch = WriteBatch::default();
        batch.put(b"k1".to_vec(), b"v1".to_vec());
        batch.delete(b"k0".to_vec());
        let m = Mutation::of_batch(&batch);
        let bytes = bincode::serialize(&m).expect("encode");
        let back: Mutation = bincode::deserialize(&bytes).expect("decode");
        let mut out = WriteBatch::default();
        back.batch.append_to(&mut out);
        assert_eq!(out, batch);
    }
}
