//! A quota hold as a row of the catalog ([`crate::catalog::Catalog::put_hold`]):
//! what a replicated catalog's desk writes before it answers a
//! reservation, so the next leader of the catalog's group knows the
//! writes in flight (`crate::node::desk`).
//!
//! Value: `FORMAT_V1 | bincode(HoldRow)`.

use super::Inflight;
use crate::error::{StoreError, StoreResult};
use crate::ids::TenantId;
use crate::record::FORMAT_V1;
use serde::{Deserialize, Serialize};

/// One hold: whose, how much, and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldRow {
    /// The tenant whose quota it counts against.
    pub tenant: TenantId,
    /// What it counts in flight.
    pub amount: Inflight,
    /// When it was granted (ms since the epoch, the granting leader's clock).
    pub made_ms: i64,
}

impl HoldRow {
    /// The row's value.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT_V1];
        if let Err(e) = bincode::serialize_into(&mut out, self) {
            unreachable!("bincode of a plain struct into a Vec failed: {e}");
        }
        out
    }

    /// A row's value decoded.
    pub fn decode(bytes: &[u8]) -> StoreResult<HoldRow> {
        match bytes.split_first() {
            Some((&FORMAT_V1, rest)) => bincode::deserialize(rest)
                .map_err(|e| StoreError::Corrupt(format!("quota hold row: {e}"))),
            _ => Err(StoreError::Corrupt("quota hold row: unknown format".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_back_as_written_and_garbage_is_refused() {
        let row = HoldRow {
            tenant: TenantId("acme".into()),
            amount: Inflight {
                bytes: 5 << 20,
                objects: 1,
                uploads: 0,
            },
            made_ms: 1_765_000_000_000,
        };
        assert_eq!(HoldRow::decode(&row.encode()).expect("decode"), row);
        assert!(HoldRow::decode(b"").is_err());
        assert!(HoldRow::decode(&[9, 1, 2]).is_err());
        assert!(HoldRow::decode(&[FORMAT_V1, 1]).is_err());
    }
}
