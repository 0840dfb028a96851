//! The store's error type. The gateway maps each variant to an S3 error code
//! in one place (gateway `error.rs`); nothing here knows about HTTP.

use thiserror::Error;

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Everything a store operation can fail with.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The bucket does not exist for this tenant.
    #[error("the specified bucket does not exist")]
    NoSuchBucket,
    /// The tenant already owns a bucket of that name.
    #[error("the bucket already exists and is owned by you")]
    BucketAlreadyOwnedByYou,
    /// Delete of a bucket that still holds objects.
    #[error("the bucket you tried to delete is not empty")]
    BucketNotEmpty,
    /// The object does not exist.
    #[error("the specified key does not exist")]
    NoSuchKey,
    /// The body did not match the Content-MD5 the client sent.
    #[error("the Content-MD5 you specified did not match what we received")]
    BadDigest,
    /// The body ended before the declared length.
    #[error("the request body ended before its declared length")]
    IncompleteBody,
    /// The body reading failed (client went away, decoding error).
    #[error("reading the request body failed: {0}")]
    Body(String),
    /// The multipart upload does not exist (never created, completed or aborted).
    #[error("the specified multipart upload does not exist")]
    NoSuchUpload,
    /// A listed part was not uploaded or its ETag differs.
    #[error(
        "one or more of the specified parts could not be found or its entity tag did not match"
    )]
    InvalidPart,
    /// The part list is not in ascending part-number order.
    #[error("the list of parts was not in ascending order")]
    InvalidPartOrder,
    /// A part other than the last is below the minimum part size.
    #[error("your proposed upload is smaller than the minimum allowed size")]
    EntityTooSmall,
    /// A whole-object checksum given at completion differs from the one
    /// derived from the parts (algorithm name).
    #[error("the {0} checksum you specified did not match the calculated checksum")]
    ChecksumMismatch(String),
    /// A precondition on a write failed (object exists / etag differs).
    #[error("at least one of the preconditions you specified did not hold")]
    PreconditionFailed,
    /// Stored data failed its checksum.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// Invalid input that the gateway should have caught.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The store is shutting down.
    #[error("the store is shutting down")]
    ShuttingDown,
    /// The write would take the filesystem's free space below the reserve
    /// kept for deletes and compaction (see [`crate::space`]).
    #[error("not enough free disk space for this write")]
    InsufficientStorage,
    /// The write would take its tenant past a quota ([`crate::quota`]);
    /// the message names the quota, for the client.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// A partition's index is being reopened after an I/O failure; retry.
    #[error("partition temporarily unavailable: {0}")]
    Unavailable(String),
    /// The partition is not hosted by this store (a cluster node serves
    /// only the partitions its map gives it).
    #[error("{0} is not hosted here")]
    NotHosted(crate::ids::PartitionId),
    /// This replica of the partition (or catalog) group is not its leader;
    /// the leader's Raft id, when known ([`crate::replication`]).
    #[error("not the leader of this group (leader: {0:?}); retry at the leader")]
    NotLeader(Option<u64>),
    /// The data directory was created with different settings.
    #[error("data directory mismatch: {0}")]
    Layout(String),
    /// An I/O error from disk.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// An error from the index engine.
    #[error("index engine error: {0}")]
    Engine(String),
}

impl StoreError {
    /// The same error again, for each of several callers one failure
    /// answers (an I/O error keeps its kind and message).
    pub fn duplicate(&self) -> StoreError {
        use StoreError as E;
        match self {
            E::NoSuchBucket => E::NoSuchBucket,
            E::BucketAlreadyOwnedByYou => E::BucketAlreadyOwnedByYou,
            E::BucketNotEmpty => E::BucketNotEmpty,
            E::NoSuchKey => E::NoSuchKey,
            E::BadDigest => E::BadDigest,
            E::IncompleteBody => E::IncompleteBody,
            E::Body(m) => E::Body(m.clone()),
            E::NoSuchUpload => E::NoSuchUpload,
            E::InvalidPart => E::InvalidPart,
            E::InvalidPartOrder => E::InvalidPartOrder,
            E::EntityTooSmall => E::EntityTooSmall,
            E::ChecksumMismatch(m) => E::ChecksumMismatch(m.clone()),
            E::PreconditionFailed => E::PreconditionFailed,
            E::Corrupt(m) => E::Corrupt(m.clone()),
            E::InvalidArgument(m) => E::InvalidArgument(m.clone()),
            E::ShuttingDown => E::ShuttingDown,
            E::InsufficientStorage => E::InsufficientStorage,
            E::QuotaExceeded(m) => E::QuotaExceeded(m.clone()),
            E::Unavailable(m) => E::Unavailable(m.clone()),
            E::NotHosted(p) => E::NotHosted(*p),
            E::NotLeader(l) => E::NotLeader(*l),
            E::Layout(m) => E::Layout(m.clone()),
            E::Io(e) => E::Io(std::io::Error::new(e.kind(), e.to_string())),
            E::Engine(m) => E::Engine(m.clone()),
        }
    }
}
