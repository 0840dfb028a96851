//! laneway-store: the partitioned, durable object store under the gateway.
//!
//! A data directory holds a fixed, power-of-two number of partitions chosen
//! when it is created. Each object lives in exactly one partition, chosen by a
//! stable hash of (bucket id, key). A partition owns a metadata index (ordered
//! by (bucket id, key), so LIST is a range scan), a set of append-only data
//! volume segments for objects above the inline threshold, and a commit thread
//! that gathers concurrent mutations into one durable batch (group commit).
//!
//! The gateway only sees [`StoreClient`] ([`client`]), which [`Store`]
//! implements in process ([`LocalStore`]) and a remote client implements
//! over the cluster RPC ([`rpc`]): buckets live in the [`catalog`], objects
//! in partitions, and LIST is a streaming k-way merge over partitions
//! ([`list`]). Tenant quotas are decided here too, where the usage lives
//! ([`quota`], [`StoreClient::reserve_quota`]).

pub mod caller;
pub mod catalog;
pub mod client;
pub mod cluster;
pub mod commit;
pub mod compaction;
pub mod error;
pub mod flexsum;
pub mod fsutil;
pub mod gate;
pub mod hash;
pub mod ids;
pub mod index;
pub mod index_fjall;
pub mod index_reopen;
pub mod index_sled;
pub mod ingest;
pub mod layout;
pub mod list;
pub mod multipart;
pub mod node;
pub mod partition;
pub mod quota;
pub mod record;
pub mod remote;
pub mod repeat;
pub mod replication;
pub mod rpc;
pub mod seal_rows;
pub mod seals;
pub mod space;
pub mod store;
pub mod sync_queue;
pub mod tagindex;
pub mod uploads;
pub mod volume;

#[cfg(test)]
mod index_suite;

pub use client::{LocalStore, StoreClient};
pub use commit::WriteCond;
pub use compaction::CompactionReport;
pub use error::{StoreError, StoreResult};
pub use ids::{BucketId, PartitionId, TenantId};
pub use index::Engine;
pub use list::{ListEntry, ListPage, ListQuery, Resume};
pub use multipart::{PartInfo, UploadInfo};
pub use quota::{QuotaAsk, QuotaHold, QuotaLimits, Quotas, Reservation};
pub use record::{Checksum, ObjectInfo, ObjectMeta, Tag};
pub use space::DiskReserve;
pub use store::{BodyStream, BucketInfo, ChecksumSpec, GetRange, PutOptions, Store, StoreConfig};
pub use tagindex::{EditCounts, TagCond, TagEdit};
pub use uploads::{ObjectPart, UploadEntry, UploadPage, UploadQuery};
