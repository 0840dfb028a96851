//! A body stream with a stall bound: when no chunk arrives for the bound,
//! the stream fails with `TimedOut` (and ends), so a peer that stops
//! sending costs a bounded wait, never a task parked forever.

use crate::store::BodyStream;
use futures::StreamExt;
use std::time::Duration;

/// `body`, failing with `ErrorKind::TimedOut` after `stall` without a chunk.
pub fn with_stall(body: BodyStream, stall: Duration) -> BodyStream {
    Box::pin(futures::stream::unfold(
        Some(body),
        move |state| async move {
            let mut body = state?;
            match tokio::time::timeout(stall, body.next()).await {
                Ok(Some(item)) => Some((item, Some(body))),
                Ok(None) => None,
                Err(_) => {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no data for {} ms", stall.as_millis()),
                    );
                    Some((Err(e), None))
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn a_stalled_stream_fails_once_and_ends() {
        let first = futures::stream::once(async { Ok(Bytes::from_static(b"a")) });
        let body: BodyStream = Box::pin(first.chain(futures::stream::pending()));
        let mut s = with_stall(body, Duration::from_millis(20));
        assert_eq!(&s.next().await.expect("chunk").expect("ok")[..], b"a");
        let err = s.next().await.expect("item").expect_err("stall");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(s.next().await.is_none());
    }
}
