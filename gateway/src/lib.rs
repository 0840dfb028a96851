//! laneway-gateway: the S3 front door.
//!
//! s3s parses and routes S3 requests, verifies SigV4 (secrets from
//! [`request::auth::KeyAuth`]), decodes aws-chunked bodies, and calls the
//! access check ([`request::auth::TenantAccess`]) that binds each request
//! to its tenant. [`Gateway`] implements `s3s::S3` ([`s3`]) by delegating
//! each operation to the module of its family.
//!
//! Where things live (handlers depend on `request`, never on each other;
//! the one exception is PostObject, which stores through PutObject's path):
//!
//! - [`s3`], the S3 handlers and the `s3s::S3` dispatch table
//!   - [`s3::object`], put, get, copy, delete, tagging, attributes
//!   - [`s3::bucket`], bucket operations, [`s3::bucket::list`] listings,
//!     [`s3::bucket::acl`] ACLs
//!   - [`s3::multipart`], multipart uploads, part copy, part/upload listings
//!   - [`s3::post`], PostObject and its form gate ([`s3::post::form`])
//! - [`request`], what handlers share: context, error mapping, auth and
//!   access check, name/header/body/checksum/quota rules, reply finishing
//! - [`server`], HTTP serving: `laneway serve`, connections, TLS, unread
//!   bodies
//! - [`lanes`], weighted fair-share lanes in front of s3s, and the
//!   `/metrics` request metrics ([`lanes::metrics`])
//! - [`admin`], the tenant provisioning API (and `/metrics`) and its CLI
//!   client
//! - [`jobs`], bulk tagging jobs (`?x-laneway-tagging-jobs`), a route of
//!   their own beside the S3 operations
//! - [`tagcli`], `laneway tags`: list by tag and bulk jobs from the shell
//! - [`roles`], the cluster roles (`laneway store`, `laneway gateway`)
//! - [`cluster`], cluster files and `laneway cluster local`
//! - [`config`], the command line and environment of the `laneway` binary

pub mod admin;
pub mod cluster;
pub mod config;
pub mod jobs;
pub mod lanes;
pub mod request;
pub mod roles;
pub mod s3;
pub mod server;
pub mod tagcli;

pub use request::context::Gateway;
