//! laneway-gateway: the S3 front door.
//!
//! s3s parses and routes S3 requests, verifies SigV4 (secrets from
//! [`auth::KeyAuth`]), decodes aws-chunked bodies, and calls the access
//! check ([`auth::TenantAccess`]) that binds each request to its tenant.
//! [`context::Gateway`] implements `s3s::S3` ([`s3`]) by delegating each
//! operation to the module of its family:
//!
//! - [`bucket`]: CreateBucket, DeleteBucket, HeadBucket, ListBuckets,
//!   GetBucketLocation, GetBucketVersioning (always unversioned)
//! - [`put`], [`get`], [`copy`], [`delete`]: object reads and writes;
//!   [`post`] browser-form uploads (PostObject), [`attributes`]
//!   GetObjectAttributes
//! - [`list`]: ListObjectsV2, ListObjects, ListObjectVersions ([`token`]
//!   holds the continuation-token format)
//! - [`tagging`]: object and bucket tagging
//! - [`multipart`], [`part_copy`], [`uploads`]: multipart uploads
//!   ([`composite`] derives their flexible checksums)
//! - [`acl`]: ACL reads and the `private`-only ACL writes
//!
//! Shared pieces: [`error`] (the one StoreError/GwError -> S3 code
//! mapping), [`names`] (bucket/key rules), [`meta`] (metadata headers),
//! [`conditional`] and [`range`] (GET/HEAD/copy preconditions and ranges),
//! [`body`] (streaming adapters), [`checksum`] (x-amz-checksum-* of
//! uploads), [`opclass`] (what each operation reads/writes, for the
//! access check), [`quota`] (the write path's quota asks, which the store
//! decides). [`serve`]
//! and [`config`] are the `laneway serve` process around it all; [`lanes`]
//! puts every request and body byte through the weighted fair-share lanes
//! in front of s3s, with [`metrics`] for `/metrics`; [`admin`] is the
//! tenant provisioning API (and `/metrics`) and its CLI client; [`tls`]
//! serves HTTPS (`--tls-cert/--tls-key`) and [`vhost`] virtual-hosted-style
//! bucket addressing (`--domain`). [`conn`] bounds and times out the
//! connections; [`post_form`] checks a form upload's signature before its
//! file is read; [`reply`] finishes the XML documents s3s cannot write as
//! S3 does (error ids, GetObjectAttributes' bare ETag).

pub mod acl;
pub mod admin;
pub mod attributes;
pub mod auth;
pub mod body;
pub mod bucket;
pub mod checksum;
pub mod cluster;
pub mod composite;
pub mod conditional;
pub mod config;
pub mod conn;
pub mod context;
pub mod copy;
pub mod delete;
pub mod error;
pub mod get;
pub mod lanes;
pub mod list;
pub mod meta;
pub mod metrics;
pub mod multipart;
pub mod names;
pub mod opclass;
pub mod part_copy;
pub mod post;
pub mod post_form;
pub mod presign;
pub mod put;
pub mod quota;
pub mod range;
pub mod reply;
pub mod roles;
pub mod s3;
pub mod serve;
pub mod tagging;
pub mod tls;
pub mod token;
pub mod unread;
pub mod uploads;
pub mod vhost;

pub use context::Gateway;
