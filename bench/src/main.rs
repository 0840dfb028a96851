//! laneway-bench: load generator and probes (CLI in progress).
fn main() {}
