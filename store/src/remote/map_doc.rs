//! The partition map shared through the catalog ([`crate::cluster::MAP_DOC`]):
//! each round of a client's leader watch reads the catalog's copy of the
//! cluster file, takes it if its map is newer than the client's, and
//! publishes the client's own when the catalog's is older or missing.
//!
//! Newest wins, in both directions, by the map's version, which only ever
//! grows and is bumped by every change ([`crate::cluster::placement`]).
//! Two publishers at once cannot overwrite each other: a publish replaces
//! the document only at the version it read (`PutCatalogDoc`), and the one
//! that loses reads the winner's copy in its next round. A client never
//! writes its own file from the catalog's copy (processes of one host
//! share one file); it holds the newer map in memory, and takes it again
//! from the catalog after a restart.

use super::RemoteStore;
use super::leaders::Target;
use crate::cluster::{MAP_DOC, Offer};
use crate::error::{StoreError, StoreResult};
use crate::node::proto::Call;
use std::time::Duration;
use tokio::time::Instant;

/// What one exchange with the catalog's copy did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapShare {
    /// The catalog's map was newer: this client's map now.
    Taken,
    /// Both held the same map version.
    Same,
    /// This client's map was newer (or the catalog had none): published.
    Published,
}

impl RemoteStore {
    /// Compare this client's map with the catalog's copy, within `within`:
    /// take the catalog's if newer, publish this client's if the
    /// catalog's is older or missing.
    pub async fn share_map(&self, within: Duration) -> StoreResult<MapShare> {
        let deadline = Instant::now() + within;
        let read = Call::CatalogDoc {
            name: MAP_DOC.to_string(),
        };
        let (doc, _) = self
            .send_routed::<Option<(u64, Vec<u8>)>>(Target::Catalog, read, deadline)
            .await
            .map_err(|f| f.error)?;
        let expected = match doc {
            Some((version, body)) => match self.offer_map(&body)? {
                Offer::Taken => return Ok(MapShare::Taken),
                Offer::Same => return Ok(MapShare::Same),
                Offer::Older => version,
            },
            None => 0,
        };
        let Some(text) = self.inner.map.published() else {
            return Ok(MapShare::Same);
        };
        let write = Call::PutCatalogDoc {
            name: MAP_DOC.to_string(),
            expected,
            body: text.into_bytes(),
        };
        let (_version, _) = self
            .send_routed::<u64>(Target::Catalog, write, deadline)
            .await
            .map_err(|f| f.error)?;
        Ok(MapShare::Published)
    }

    /// Offer the catalog's copy `body` to this client's map source.
    fn offer_map(&self, body: &[u8]) -> StoreResult<Offer> {
        let text = std::str::from_utf8(body)
            .map_err(|_| StoreError::Corrupt(format!("catalog document {MAP_DOC}: not UTF-8")))?;
        self.inner
            .map
            .offer(text)
            .map_err(|e| StoreError::Corrupt(format!("catalog document {MAP_DOC}: {e}")))
    }
}
