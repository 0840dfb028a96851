//! [`LaneMeter`]: puts bytes that a handler moves *inside* the store
//! (CopyObject, UploadPartCopy) through the caller's lane, as the gate does
//! for bytes that cross the network.
//!
//! The gate ([`super::gate`]) leaves a meter in every request's extensions;
//! s3s hands the extensions to the handler, and [`pace_copy`] wraps the
//! copy's source stream. The stream is paced chunk by chunk like a large
//! body, and the request's admission permit is dropped when the source is
//! first read, before the first chunk waits for a grant (no hold-and-wait).
//! Without a meter (lanes not in front, as in unit tests) the stream is
//! returned as it is.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use laneway_qos::{Lanes, Overloaded, TenantKey, pace};
use laneway_store::BodyStream;
use std::io;

use super::body::HeldPermit;
use crate::lanes::metrics::OpSeries;
use std::sync::Arc;

/// The caller's lane and its admission permit, for a handler.
#[derive(Clone)]
pub struct LaneMeter {
    lanes: Lanes,
    tenant: TenantKey,
    held: HeldPermit,
    series: Arc<OpSeries>,
}

/// A source error, or the lanes giving up on a chunk.
enum PaceError {
    Io(io::Error),
    Overloaded(Overloaded),
}

impl From<Overloaded> for PaceError {
    fn from(o: Overloaded) -> PaceError {
        PaceError::Overloaded(o)
    }
}

impl LaneMeter {
    /// A meter for `tenant` holding the request's permit `held`; the
    /// bytes count as cost of the request's metrics `series`.
    pub fn new(
        lanes: Lanes,
        tenant: TenantKey,
        held: HeldPermit,
        series: Arc<OpSeries>,
    ) -> LaneMeter {
        LaneMeter {
            lanes,
            tenant,
            held,
            series,
        }
    }

    /// `stream` paced through the lane; drops the permit on first read.
    pub fn pace(&self, stream: BodyStream) -> BodyStream {
        let chunk = self.lanes.config().chunk_bytes;
        let source = releasing(stream, self.held.clone()).map(|r| r.map_err(PaceError::Io));
        let paced = pace(self.lanes.clone(), self.tenant.clone(), source, chunk);
        let series = Arc::clone(&self.series);
        Box::pin(paced.map(move |r| {
            if let Ok(bytes) = &r {
                series.add_cost(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
            }
            r.map_err(|e| match e {
                PaceError::Io(e) => e,
                PaceError::Overloaded(o) => io::Error::other(format!("lanes: {}", o.reason)),
            })
        }))
    }
}

/// `stream`, dropping the permit in `held` when it is first polled.
fn releasing(
    mut stream: BodyStream,
    held: HeldPermit,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    let mut held = Some(held);
    futures::stream::poll_fn(move |cx| {
        if let Some(h) = held.take() {
            drop(h.lock().take());
        }
        stream.poll_next_unpin(cx)
    })
}

/// `stream` paced through the lane of the request whose extensions are
/// `ext`, or unchanged if the request did not come through the lanes.
pub fn pace_copy(ext: &http::Extensions, stream: BodyStream) -> BodyStream {
    match ext.get::<LaneMeter>() {
        Some(meter) => meter.pace(stream),
        None => stream,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laneway_qos::LanesConfig;
    use parking_lot::Mutex;

    #[tokio::test]
    async fn copies_are_paced_and_release_the_permit() {
        let lanes = Lanes::new(LanesConfig::default());
        let tenant: TenantKey = "t".into();
        let permit = lanes.admit(&tenant, 10).await.expect("admitted");
        let held: HeldPermit = Arc::new(Mutex::new(Some(permit)));
        let series = Arc::new(OpSeries::default());
        let meter = LaneMeter::new(
            lanes.clone(),
            tenant.clone(),
            Arc::clone(&held),
            Arc::clone(&series),
        );
        let mut ext = http::Extensions::new();
        ext.insert(meter);
        let chunks = vec![
            Ok(Bytes::from(vec![1u8; 1000])),
            Ok(Bytes::from(vec![2u8; 24])),
        ];
        let source: BodyStream = Box::pin(futures::stream::iter(chunks));
        let out: Vec<Bytes> = pace_copy(&ext, source)
            .map(|r| r.expect("chunk"))
            .collect()
            .await;
        assert_eq!(out.iter().map(Bytes::len).sum::<usize>(), 1024);
        assert!(held.lock().is_none(), "permit released");
        let snap = lanes.snapshot();
        assert_eq!(snap.in_flight_units, 0);
        let t = snap
            .tenants
            .iter()
            .find(|t| t.tenant == tenant)
            .expect("lane");
        assert_eq!(t.served_units, 10 + 1024);
        assert_eq!(series.cost(), 1024, "copied bytes count as cost");
    }

    #[tokio::test]
    async fn without_a_meter_the_stream_is_untouched() {
        let source: BodyStream =
            Box::pin(futures::stream::iter(vec![Ok(Bytes::from_static(b"x"))]));
        let out: Vec<_> = pace_copy(&http::Extensions::new(), source).collect().await;
        assert_eq!(out.len(), 1);
    }
}
