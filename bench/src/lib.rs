//! laneway-bench: laneway's own S3 client, load generator and probes.
//!
//! The library half is a small SigV4-signing S3 client over hyper
//! ([`S3Client`]) shared by the `laneway-bench` binary and the gateway's
//! crash-recovery test, plus the pieces the benchmark modes are built from.
//!
//! Layout:
//! - client: `client` (pool, signing plumbing, timeouts), `ops` (the S3
//!   operations), `sign` (SigV4), `xml` (reading answers), `body`
//!   (streamed request bodies), `error`;
//! - measuring: `histogram` (log-linear latency histogram), `report`
//!   (counters and the printed table), `rss` (server RSS sampler),
//!   `cpu` (loader and server CPU seconds per request);
//! - modes: `workload` (timed put/get/head/tag/mixed), `fill` (bulk load
//!   and key naming), `list` (LIST walks), `null_server` (the ceiling),
//!   `fsync` (the durable-append probe), `tenants` (several tenants at
//!   once, with `admin` to provision them and read the server's costs),
//!   `soak` (a long run with misbehaving clients and end-of-run checks);
//! - binary: `cli` (clap arguments) and `modes` (runs one mode, prints
//!   its method and figures);
//! - helpers: `content` (deterministic object bytes), `size` (`4KiB`),
//!   `machine` (the machine line printed with every result).

pub mod admin;
pub mod body;
pub mod cli;
pub mod client;
pub mod content;
pub mod cpu;
pub mod error;
pub mod fill;
pub mod fsync;
pub mod histogram;
pub mod jobs;
pub mod list;
pub mod machine;
pub mod modes;
pub mod null_server;
pub mod ops;
pub mod report;
pub mod rss;
pub mod sign;
pub mod size;
pub mod soak;
pub mod storeload;
pub mod tenants;
pub mod workload;
pub mod xml;

pub use body::{ChunkFn, ReqBody};
pub use client::S3Client;
pub use error::ClientError;
pub use ops::{GetOutput, HeaderExt, ListRequest, ObjectHeaders, PutOptions};
pub use xml::ListPage;
