//! Bulk tagging jobs: a tenant asks once, on the S3 endpoint, for a tag
//! change over every object of a bucket under a prefix whose tags match a
//! filter, and the gateway does it in the background, inside the tenant's
//! lane, resuming after a restart from a durable cursor.
//!
//! - [`spec`]: the request body and the job's state;
//! - [`book`]: where jobs are kept (catalog documents);
//! - [`runner`]: the pages of a running job, leases, resumption;
//! - [`route`]: `POST`/`GET`/`DELETE /{bucket}?x-laneway-tagging-jobs`.
//!
//! docs/tags.md describes the API as users see it.

pub mod book;
pub mod route;
pub mod runner;
pub mod spec;

pub use route::JobsRoute;
pub use runner::Jobs;
