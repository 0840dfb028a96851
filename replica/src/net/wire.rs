//! What a Raft message looks like inside a cluster RPC call: the argument
//! frame of a [`super::RAFT_METHOD`] call is one [`RaftRequest`] (bincode),
//! its reply payload one [`RaftReply`].
//!
//! Every message names its group, so the messages of all groups two nodes
//! share travel over the same connection and the receiver routes each to
//! its group's Raft. Both records begin with a format version
//! ([`WIRE_VERSION`]): bincode is not self-describing, so a node refuses a
//! version it does not know (the caller sees a network error and retries
//! later, which is what a rolling upgrade needs) instead of misreading it.
//! New message kinds are new enum variants at the end; a node that does
//! not know one refuses the call the same way.
//!
//! A reply carries the target Raft's own answer, error included, so the
//! sender rebuilds openraft's `RemoteError` from it; failures of the
//! transport itself never get this far (see [`super::peers`]).
//!
//! Appends of several groups (heartbeats, commit updates, and rounds of
//! entries up to a size) travel together as one
//! [`super::RAFT_BATCH_METHOD`] call: its argument frame is one
//! [`RaftBatch`], its reply one [`RaftBatchReply`] with an answer per
//! append, in order ([`super::batch`] says which are gathered and when).

use super::GroupId;
use crate::types::{NodeId, TypeConfig};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

/// The format version this node writes and reads.
pub const WIRE_VERSION: u8 = 1;

/// One Raft message to a group on another node.
#[derive(Debug, Serialize, Deserialize)]
pub struct RaftRequest {
    /// Format version ([`WIRE_VERSION`]).
    pub version: u8,
    /// The group the message is for.
    pub group: GroupId,
    /// The message.
    pub msg: RaftMsg,
}

/// The Raft messages a group sends.
#[derive(Debug, Serialize, Deserialize)]
pub enum RaftMsg {
    /// Log entries (none for a heartbeat).
    Append(AppendEntriesRequest<TypeConfig>),
    /// A candidate asks for a vote.
    Vote(VoteRequest<NodeId>),
    /// One chunk of a snapshot.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
}

/// The target group's answer to a [`RaftRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub struct RaftReply {
    /// Format version ([`WIRE_VERSION`]).
    pub version: u8,
    /// The answer, of the request's kind.
    pub answer: RaftAnswer,
}

/// A Raft's answer, its own errors included.
#[derive(Debug, Serialize, Deserialize)]
pub enum RaftAnswer {
    /// To [`RaftMsg::Append`].
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To [`RaftMsg::Vote`].
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To [`RaftMsg::Snapshot`].
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
}

/// The appends of several groups to one node, in one call.
#[derive(Debug, Serialize, Deserialize)]
pub struct RaftBatch {
    /// Format version ([`WIRE_VERSION`]).
    pub version: u8,
    /// Each append and the group it is for.
    pub appends: Vec<(GroupId, AppendEntriesRequest<TypeConfig>)>,
}

/// The answers to a [`RaftBatch`], one per append, in its order.
#[derive(Debug, Serialize, Deserialize)]
pub struct RaftBatchReply {
    /// Format version ([`WIRE_VERSION`]).
    pub version: u8,
    /// The answers.
    pub answers: Vec<BatchAnswer>,
}

/// One append's fate in a [`RaftBatch`]. (Not boxed: each answer is
/// moved once, into its waiter.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Serialize, Deserialize)]
pub enum BatchAnswer {
    /// The group's Raft answered (its own error included).
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// The group is not hosted on the node (not started, stopped, moved
    /// away): what a lone call learns as `Unavailable`.
    NotHosted,
    /// The group did not answer within the receiver's wait for a batch
    /// ([`super::service::BATCH_ANSWER_WITHIN`]), so the others' answers
    /// were sent without it; the sender tries the append again.
    Late,
}

/// Why a frame did not decode.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not bincode of the expected record.
    #[error("undecodable raft message: {0}")]
    Bincode(#[from] bincode::Error),
    /// A format version this node does not know.
    #[error("raft message format version {0} is not supported (this node speaks {WIRE_VERSION})")]
    Version(u8),
}

impl RaftRequest {
    /// A request of the current format.
    pub fn new(group: GroupId, msg: RaftMsg) -> RaftRequest {
        RaftRequest {
            version: WIRE_VERSION,
            group,
            msg,
        }
    }

    /// The bincode of this request.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// A request from its bincode, if its version is known.
    pub fn decode(bytes: &[u8]) -> Result<RaftRequest, DecodeError> {
        check_version(bytes)?;
        Ok(bincode::deserialize(bytes)?)
    }
}

impl RaftReply {
    /// A reply of the current format.
    pub fn new(answer: RaftAnswer) -> RaftReply {
        RaftReply {
            version: WIRE_VERSION,
            answer,
        }
    }

    /// The bincode of this reply.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// A reply from its bincode, if its version is known.
    pub fn decode(bytes: &[u8]) -> Result<RaftReply, DecodeError> {
        check_version(bytes)?;
        Ok(bincode::deserialize(bytes)?)
    }
}

impl RaftBatch {
    /// A batch of the current format.
    pub fn new(appends: Vec<(GroupId, AppendEntriesRequest<TypeConfig>)>) -> RaftBatch {
        RaftBatch {
            version: WIRE_VERSION,
            appends,
        }
    }

    /// The bincode of this batch.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// One append of a batch and its group, encoded on its own: the
    /// sender encodes each append as it queues it (so it knows its size)
    /// and joins the pieces with [`RaftBatch::frame`].
    pub fn piece(
        group: GroupId,
        rpc: &AppendEntriesRequest<TypeConfig>,
    ) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(&(group, rpc))
    }

    /// The encoding of the batch of `pieces` (each from
    /// [`RaftBatch::piece`]), byte for byte what [`RaftBatch::encode`]
    /// writes for those appends: the version, the count as bincode writes
    /// a sequence's length (a little-endian `u64`), then the elements.
    pub fn frame(pieces: &[Vec<u8>]) -> Vec<u8> {
        let len: usize = pieces.iter().map(Vec::len).sum();
        let mut frame = Vec::with_capacity(1 + 8 + len);
        frame.push(WIRE_VERSION);
        let count = u64::try_from(pieces.len()).unwrap_or(u64::MAX);
        frame.extend_from_slice(&count.to_le_bytes());
        for piece in pieces {
            frame.extend_from_slice(piece);
        }
        frame
    }

    /// A batch from its bincode, if its version is known.
    pub fn decode(bytes: &[u8]) -> Result<RaftBatch, DecodeError> {
        check_version(bytes)?;
        Ok(bincode::deserialize(bytes)?)
    }
}

impl RaftBatchReply {
    /// A reply of the current format.
    pub fn new(answers: Vec<BatchAnswer>) -> RaftBatchReply {
        RaftBatchReply {
            version: WIRE_VERSION,
            answers,
        }
    }

    /// The bincode of this reply.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// A reply from its bincode, if its version is known.
    pub fn decode(bytes: &[u8]) -> Result<RaftBatchReply, DecodeError> {
        check_version(bytes)?;
        Ok(bincode::deserialize(bytes)?)
    }
}

/// A replica that started empty asks a peer for its vote in a group
/// ([`super::RAFT_TERMS_METHOD`], [`super::terms`]).
#[derive(Debug, Serialize, Deserialize)]
pub struct TermAsk {
    /// Format version ([`WIRE_VERSION`]).
    pub version: u8,
    /// The group asked about.
    pub group: GroupId,
}

/// The answer to a [`TermAsk`].
#[derive(Debug, Serialize, Deserialize)]
pub struct TermReply {
    /// Format version ([`WIRE_VERSION`]).
    pub version: u8,
    /// The peer's vote in the group: its term and the node it is for
    /// (`None`: the group is not hosted there, so its vote is unknown).
    pub vote: Option<openraft::LeaderId<NodeId>>,
    /// The voters of the group's newest membership in the peer's log
    /// (both halves of a joint one), with their RPC addresses: the asker
    /// waits for the votes of those the cluster file does not name
    /// (`crate::rejoin::floor`). Empty in a reply of a build before it.
    pub voters: Vec<(NodeId, String)>,
}

/// A [`TermReply`] as builds before its `voters` sent it.
#[derive(Deserialize)]
struct TermReplyVoteOnly {
    version: u8,
    vote: Option<openraft::LeaderId<NodeId>>,
}

impl TermAsk {
    /// An ask of the current format.
    pub fn new(group: GroupId) -> TermAsk {
        TermAsk {
            version: WIRE_VERSION,
            group,
        }
    }

    /// The bincode of this ask.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// An ask from its bincode, if its version is known.
    pub fn decode(bytes: &[u8]) -> Result<TermAsk, DecodeError> {
        check_version(bytes)?;
        Ok(bincode::deserialize(bytes)?)
    }
}

impl TermReply {
    /// A reply of the current format.
    pub fn new(
        vote: Option<openraft::LeaderId<NodeId>>,
        voters: Vec<(NodeId, String)>,
    ) -> TermReply {
        TermReply {
            version: WIRE_VERSION,
            vote,
            voters,
        }
    }

    /// The bincode of this reply.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// A reply from its bincode, if its version is known (one without
    /// voters, from a build before them, has none).
    pub fn decode(bytes: &[u8]) -> Result<TermReply, DecodeError> {
        check_version(bytes)?;
        match bincode::deserialize(bytes) {
            Ok(reply) => Ok(reply),
            Err(e) => match bincode::deserialize::<TermReplyVoteOnly>(bytes) {
                Ok(old) => Ok(TermReply {
                    version: old.version,
                    vote: old.vote,
                    voters: Vec::new(),
                }),
                Err(_) => Err(e.into()),
            },
        }
    }
}

/// A voter asks a peer whether it would vote for it in `term` before it
/// campaigns ([`super::RAFT_PREVOTE_METHOD`], [`super::prevote`]).
#[derive(Debug, Serialize, Deserialize)]
pub struct PreVoteAsk {
    /// Format version ([`WIRE_VERSION`]).
    pub version: u8,
    /// The group asked about.
    pub group: GroupId,
    /// The asking replica.
    pub candidate: NodeId,
    /// The term its election would be in (its vote's term plus one).
    pub term: u64,
    /// Its last log entry (`None`: an empty log).
    pub last_log: Option<openraft::LogId<NodeId>>,
}

/// The answer to a [`PreVoteAsk`].
#[derive(Debug, Serialize, Deserialize)]
pub struct PreVoteReply {
    /// Format version ([`WIRE_VERSION`]).
    pub version: u8,
    /// Whether the peer would vote for the candidate now.
    pub granted: bool,
}

impl PreVoteAsk {
    /// An ask of the current format.
    pub fn new(
        group: GroupId,
        candidate: NodeId,
        term: u64,
        last_log: Option<openraft::LogId<NodeId>>,
    ) -> PreVoteAsk {
        PreVoteAsk {
            version: WIRE_VERSION,
            group,
            candidate,
            term,
            last_log,
        }
    }

    /// The bincode of this ask.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// An ask from its bincode, if its version is known.
    pub fn decode(bytes: &[u8]) -> Result<PreVoteAsk, DecodeError> {
        check_version(bytes)?;
        Ok(bincode::deserialize(bytes)?)
    }
}

impl PreVoteReply {
    /// A reply of the current format.
    pub fn new(granted: bool) -> PreVoteReply {
        PreVoteReply {
            version: WIRE_VERSION,
            granted,
        }
    }

    /// The bincode of this reply.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// A reply from its bincode, if its version is known.
    pub fn decode(bytes: &[u8]) -> Result<PreVoteReply, DecodeError> {
        check_version(bytes)?;
        Ok(bincode::deserialize(bytes)?)
    }
}

/// Every record begins with its version byte (bincode writes a `u8` as
/// one byte), so it can be checked before the rest is decoded.
fn check_version(bytes: &[u8]) -> Result<(), DecodeError> {
    match bytes.first() {
        Some(&WIRE_VERSION) | None => Ok(()),
        Some(&other) => Err(DecodeError::Version(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Mutation;
    use openraft::error::{Fatal, RaftError};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, SnapshotMeta, Vote};

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 7), index)
    }

    #[test]
    fn requests_and_replies_survive_the_wire() {
        let entry = Entry::<TypeConfig> {
            log_id: log_id(2, 5),
            payload: EntryPayload::Normal(Mutation::default()),
        };
        let append = AppendEntriesRequest {
            vote: Vote::new_committed(2, 7),
            prev_log_id: Some(log_id(2, 4)),
            entries: vec![entry],
            leader_commit: Some(log_id(2, 4)),
        };
        let req = RaftRequest::new(9, RaftMsg::Append(append.clone()));
        let back = RaftRequest::decode(&req.encode().expect("encode")).expect("decode");
        assert_eq!(back.group, 9);
        assert!(
            matches!(back.msg, RaftMsg::Append(ref a) if format!("{a:?}") == format!("{append:?}"))
        );

        let chunk = InstallSnapshotRequest::<TypeConfig> {
            vote: Vote::new_committed(2, 7),
            meta: SnapshotMeta::default(),
            offset: 3,
            data: vec![1, 2, 3],
            done: true,
        };
        let req = RaftRequest::new(super::super::CATALOG_GROUP, RaftMsg::Snapshot(chunk));
        let back = RaftRequest::decode(&req.encode().expect("encode")).expect("decode");
        assert!(matches!(back.msg, RaftMsg::Snapshot(s) if s.data == vec![1, 2, 3] && s.done));

        let heartbeat = AppendEntriesRequest {
            entries: Vec::new(),
            ..append.clone()
        };
        let batch = RaftBatch::new(vec![(3, heartbeat.clone()), (u32::MAX, heartbeat.clone())]);
        let back = RaftBatch::decode(&batch.encode().expect("encode")).expect("decode");
        let groups: Vec<GroupId> = back.appends.iter().map(|(g, _)| *g).collect();
        assert_eq!(groups, vec![3, u32::MAX]);

        // A frame joined from pieces is the batch's own encoding, entries
        // and all, and an empty one decodes as an empty batch.
        let appends = vec![(3, heartbeat), (u32::MAX, append.clone()), (0, append)];
        let pieces: Vec<Vec<u8>> = appends
            .iter()
            .map(|(g, a)| RaftBatch::piece(*g, a).expect("piece"))
            .collect();
        let whole = RaftBatch::new(appends).encode().expect("encode");
        assert_eq!(RaftBatch::frame(&pieces), whole);
        let back = RaftBatch::decode(&RaftBatch::frame(&pieces)).expect("decode");
        assert_eq!(back.appends.len(), 3);
        assert_eq!(back.appends[1].1.entries.len(), 1);
        let empty = RaftBatch::decode(&RaftBatch::frame(&[])).expect("decode");
        assert!(empty.appends.is_empty());
        let answers = RaftBatchReply::new(vec![
            BatchAnswer::Append(Ok(AppendEntriesResponse::Success)),
            BatchAnswer::NotHosted,
            BatchAnswer::Late,
        ]);
        let back = RaftBatchReply::decode(&answers.encode().expect("encode")).expect("decode");
        assert!(matches!(
            back.answers[..],
            [
                BatchAnswer::Append(Ok(AppendEntriesResponse::Success)),
                BatchAnswer::NotHosted,
                BatchAnswer::Late
            ]
        ));

        let failed = RaftReply::new(RaftAnswer::Vote(Err(RaftError::Fatal(Fatal::Stopped))));
        let back = RaftReply::decode(&failed.encode().expect("encode")).expect("decode");
        assert!(matches!(
            back.answer,
            RaftAnswer::Vote(Err(RaftError::Fatal(Fatal::Stopped)))
        ));
    }

    #[test]
    fn a_pre_vote_ask_and_reply_round_trip_and_an_unknown_version_is_refused() {
        let last = Some(openraft::LogId::new(
            openraft::CommittedLeaderId::new(7, 3),
            41,
        ));
        let ask = PreVoteAsk::new(5, 3, 8, last);
        let bytes = ask.encode().expect("encode");
        let back = PreVoteAsk::decode(&bytes).expect("decode");
        assert_eq!(
            (back.group, back.candidate, back.term, back.last_log),
            (5, 3, 8, last)
        );
        for granted in [true, false] {
            let reply = PreVoteReply::new(granted).encode().expect("encode");
            assert_eq!(
                PreVoteReply::decode(&reply).expect("decode").granted,
                granted
            );
        }
        let mut other = bytes.clone();
        other[0] = WIRE_VERSION + 1;
        assert!(PreVoteAsk::decode(&other).is_err());
        assert!(PreVoteAsk::decode(&bytes[..3]).is_err());
    }

    #[test]
    fn a_term_reply_carries_its_voters_and_one_without_them_still_decodes() {
        let vote = Some(openraft::LeaderId::new(4, 2));
        let voters = vec![
            (2, "127.0.0.1:1".to_string()),
            (9, "127.0.0.9:9".to_string()),
        ];
        let reply = TermReply::new(vote, voters.clone());
        let back = TermReply::decode(&reply.encode().expect("encode")).expect("decode");
        assert_eq!((back.vote, back.voters), (vote, voters));
        // A reply of a build before the voters: its vote, no voters.
        #[derive(Serialize)]
        struct Before {
            version: u8,
            vote: Option<openraft::LeaderId<NodeId>>,
        }
        let before = bincode::serialize(&Before {
            version: WIRE_VERSION,
            vote,
        })
        .expect("encode");
        let back = TermReply::decode(&before).expect("decode");
        assert_eq!((back.vote, back.voters), (vote, Vec::new()));
        assert!(TermReply::decode(&[WIRE_VERSION, 7]).is_err());
    }

    #[test]
    fn an_unknown_version_or_garbage_is_refused() {
        let mut bytes = RaftRequest::new(1, RaftMsg::Vote(VoteRequest::new(Vote::new(1, 1), None)))
            .encode()
            .expect("encode");
        bytes[0] = WIRE_VERSION + 1;
        assert!(matches!(
            RaftRequest::decode(&bytes),
            Err(DecodeError::Version(_))
        ));
        let mut batch = RaftBatch::new(Vec::new()).encode().expect("encode");
        batch[0] = WIRE_VERSION + 1;
        assert!(matches!(
            RaftBatch::decode(&batch),
            Err(DecodeError::Version(_))
        ));
        assert!(RaftBatchReply::decode(&[WIRE_VERSION, 0xff]).is_err());
        assert!(RaftRequest::decode(&[WIRE_VERSION, 0xff, 0xff]).is_err());
        assert!(RaftReply::decode(&[]).is_err());
    }
}
