//! What S3 handlers share: the request context, the error mapping and the
//! rules of names, headers, bodies and checksums. Nothing here depends on a
//! handler module ([`crate::s3`]); handlers depend on these.
//!
//! - [`context`], the [`context::Gateway`] every handler receives and the
//!   per-request context (tenant, key scope)
//! - [`error`], the one StoreError/GwError -> S3 code mapping
//! - [`auth`], SigV4 secrets and the access check; [`opclass`] what each
//!   operation reads and writes; [`presign`] signed-request time limits
//! - [`names`], bucket-name, key and version-id rules; [`vhost`]
//!   virtual-hosted-style bucket addressing
//! - [`upload`], what every write shares (size limit, Content-Length,
//!   Content-MD5, write preconditions); [`canned_acl`] `x-amz-acl` on
//!   writes; [`tags`] tag rules and the `x-amz-tagging` header;
//!   [`tag_filter`] the tag filter of a listing
//! - [`copy_source`], the source of CopyObject and UploadPartCopy
//! - [`parts`], part numbers, part-listing pages, part checksums
//! - [`meta`], metadata headers, time and size conversions
//! - [`conditional`], and [`range`]: preconditions and byte ranges
//! - [`body`], streaming adapters; [`checksum`] the x-amz-checksum-* of
//!   uploads; [`composite`] the checksums of multipart uploads
//! - [`quota`], the write path's quota asks (the store decides)
//! - [`token`], ListObjectsV2 continuation tokens and v1 markers
//! - [`reply`], finishing the XML documents s3s cannot write as S3 does

pub mod auth;
pub mod body;
pub mod canned_acl;
pub mod checksum;
pub mod composite;
pub mod conditional;
pub mod context;
pub mod copy_source;
pub mod error;
pub mod meta;
pub mod names;
pub mod opclass;
pub mod parts;
pub mod presign;
pub mod quota;
pub mod range;
pub mod reply;
pub mod tag_filter;
pub mod tags;
pub mod token;
pub mod upload;
pub mod vhost;
