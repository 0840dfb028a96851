//! The cluster roles of the `laneway` binary. Today: `laneway cluster init`
//! and `laneway cluster show` ([`cli`]), which write and check the cluster
//! file (laneway-store's `cluster` module owns its format and the
//! partition map).

pub mod cli;
