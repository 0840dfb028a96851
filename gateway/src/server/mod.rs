//! HTTP serving: the listener and the path of a request before it reaches
//! s3s.
//!
//! - [`serve`], `laneway serve` (and the gateway role): bind, accept, the
//!   per-request pipeline in front of s3s
//! - [`conn`], connection limits, timeouts and the accept loop's guards
//! - [`tls`], HTTPS (`--tls-cert/--tls-key`)
//! - [`unread`], requests answered before their body was read

pub mod conn;
pub mod serve;
pub mod tls;
pub mod unread;
