//! The cluster RPC: how gateways (and, with replication, store nodes) call
//! a store node. HTTP/2 over hyper, cleartext, one multiplexed connection
//! per pair of processes, bodies streamed both ways.
//!
//! A call is `POST /rpc/v1/{method}`. Its request body is a frame
//! ([`wire`]): a 4-byte big-endian length, that many bytes of arguments
//! (bincode, decided by the method), then the method's data stream, if any
//! (an object's body), to the end of the HTTP body. The response is the
//! same shape: a frame holding `Result<reply, WireError>`, then the reply's
//! data stream (a GET's body). HTTP status is 200 for every answered call;
//! what went wrong lives in [`WireError`], so one place maps it to a store
//! error ([`wire::WireError::into_store`]) and the gateway maps that to S3.
//!
//! Every call is signed ([`auth`]): HMAC-SHA256 under the cluster secret
//! over the method, the time, a nonce and the SHA-256 of the argument
//! frame. A store port reachable by a stranger answers nothing but
//! `Unauthorized`. The data stream is not covered by the signature (it may
//! be gigabytes, streamed); it is covered by the object's own checksums,
//! which the store verifies, as SigV4's `UNSIGNED-PAYLOAD` leaves a body to
//! its Content-MD5 or flexible checksum.
//!
//! Deadlines: the client gives each call a deadline for its answer to
//! begin ([`client::CallOptions`]) and a stall bound for every later body
//! chunk; the server bounds the time to read the argument frame and the
//! stalls of an incoming body. A node that is down, refuses, or is cut off
//! becomes [`RpcError::Unavailable`] or [`RpcError::Timeout`] within the
//! deadline; nothing waits forever.

pub mod auth;
pub mod client;
pub mod server;
pub mod stall;
pub mod wire;

pub use auth::Signer;
pub use client::{CallOptions, RpcClient};
pub use server::{Handler, Reply, RpcServer, ServerOptions};
pub use wire::{WireCode, WireError};

use thiserror::Error;

/// Path prefix of every call.
pub const PATH_PREFIX: &str = "/rpc/v1/";

/// Why a call did not produce the handler's answer.
#[derive(Debug, Error)]
pub enum RpcError {
    /// The node could not be reached (refused, reset, closed).
    #[error("store node {addr} unavailable: {why}")]
    Unavailable {
        /// The node's address.
        addr: String,
        /// What happened.
        why: String,
        /// Whether the call may have reached the node (the connection
        /// broke after the request went out: its outcome is unknown).
        /// `false`: it never left this process (no connection).
        sent: bool,
    },
    /// The node did not answer (or its body stalled) within the deadline.
    #[error("store node {addr} did not answer within {ms} ms")]
    Timeout {
        /// The node's address.
        addr: String,
        /// The deadline that passed.
        ms: u64,
        /// Whether the call may have reached the node (`false`: the
        /// deadline passed while connecting, so it never left).
        sent: bool,
    },
    /// The call's own data stream failed (its sender's body broke off or
    /// stalled), and the call failed with it: the node never saw the
    /// stream end, so it did not complete the call.
    #[error("the data stream to store node {addr} failed: {why}")]
    BodyFailed {
        /// The node's address.
        addr: String,
        /// The stream's error.
        why: String,
    },
    /// The node answered with an error.
    #[error("{0}")]
    Remote(WireError),
    /// The node's answer was not a valid frame (version skew or a bug).
    #[error("store node {addr} sent a malformed answer: {why}")]
    Protocol {
        /// The node's address.
        addr: String,
        /// What was wrong.
        why: String,
    },
}
