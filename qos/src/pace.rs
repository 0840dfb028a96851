//! [`pace`]: charges a body stream to its tenant's lane as the bytes flow.
//!
//! Admitting a request once for its whole body would let a tenant with a
//! 5 GiB upload hold its units for minutes, or make it wait for 5 GiB of
//! free capacity before sending a byte. Instead the body goes through the
//! scheduler in chunks: the paced stream gathers up to `chunk` bytes from
//! the inner stream (slicing, never copying, the `Bytes` it gets), takes
//! them from the tenant's bytes/s cap (sleeping while that is exhausted),
//! waits for a grant of that many units, and only then yields them. The
//! chunk's permit is held while the consumer works on it, that is until
//! the consumer polls for the next item (or drops the stream), but never
//! longer than the lanes' `max_hold` (it is a [`Lease`]): a consumer that
//! does not come back is waiting on its client (hyper on a socket the
//! client does not read), which is not work. It is released *before* the
//! inner stream is read again, so no units are held while waiting for a
//! slow client or disk.
//!
//! Direction does not matter: wrap the client's upload before it is handed
//! to the store (a chunk is stored under its permit), or the store's read
//! stream before it is handed to the HTTP body (a chunk is sent under its
//! permit).
//!
//! Chunks of an admitted body are never refused for a full lane; one that
//! waits longer than `stream_max_wait` ends the stream with
//! `E::from(Overloaded)`. An error of the inner stream is passed through
//! after the bytes that came before it, and ends the paced stream.

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::Bytes;
use futures::{Stream, StreamExt, stream};

use crate::Overloaded;
use crate::lanes::Lanes;
use crate::lease::Lease;
use crate::tenant::TenantKey;

/// Paces `stream`, a body of `tenant`'s request, through the tenant's lane
/// in chunks of at most `chunk` bytes (0 is treated as 1).
///
/// For each chunk the paced stream reads up to `chunk` bytes from `stream`
/// (slicing the `Bytes` it gets, never copying), takes them from the
/// tenant's bytes/s cap (sleeping while that is exhausted), waits for a
/// grant of that many cost units, and then yields them. The grant is held
/// until the consumer polls again (it has stored or sent the chunk by then)
/// or drops the stream, at most `max_hold` ([`Lanes::lease`]), and it is
/// released before `stream` is read again,
/// so no units are held while waiting for a slow client or disk.
///
/// Chunks are charged their bytes only; the request's base cost is charged
/// by [`Lanes::admit`]. They are never refused for a full lane (they count
/// towards it), but one that waits longer than `stream_max_wait` ends the
/// stream with `E::from(Overloaded)`. An error of `stream` is yielded after
/// the bytes before it and ends the paced stream. Do not await a chunk
/// while holding a [`Permit`] of the same request (see `docs/qos.md`).
pub fn pace<S, E>(
    lanes: Lanes,
    tenant: TenantKey,
    stream: S,
    chunk: usize,
) -> impl Stream<Item = Result<Bytes, E>>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: From<Overloaded>,
{
    let state = Pacer {
        lanes,
        tenant,
        inner: Box::pin(stream),
        chunk: chunk.max(1),
        leftover: None,
        ready: VecDeque::new(),
        permit: None,
        error: None,
        done: false,
    };
    stream::unfold(state, Pacer::step)
}

/// The paced stream's state between items.
struct Pacer<S, E> {
    lanes: Lanes,
    tenant: TenantKey,
    inner: Pin<Box<S>>,
    chunk: usize,
    /// The tail of an inner item that was cut at a chunk boundary.
    leftover: Option<Bytes>,
    /// Pieces of the current chunk, granted, not yet yielded.
    ready: VecDeque<Bytes>,
    /// The current chunk's grant, leased: given back when the consumer
    /// polls again, or after `max_hold` if it does not come back.
    permit: Option<Lease>,
    /// An inner error to yield once the bytes before it are out.
    error: Option<E>,
    /// The inner stream ended (or failed).
    done: bool,
}

impl<S, E> Pacer<S, E>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: From<Overloaded>,
{
    /// Produces the next item: a piece of the granted chunk, or the next
    /// chunk after its grant, or the deferred error, or the end.
    async fn step(mut self) -> Option<(Result<Bytes, E>, Self)> {
        if let Some(piece) = self.ready.pop_front() {
            return Some((Ok(piece), self));
        }
        // The consumer is done with the previous chunk.
        self.permit = None;
        let total = self.gather().await;
        if total > 0 {
            return self.grant(total).await;
        }
        let err = self.error.take()?;
        self.done = true;
        Some((Err(err), self))
    }

    /// Reads pieces into `ready` until a chunk is full or the inner stream
    /// ends or fails. Returns the bytes gathered.
    async fn gather(&mut self) -> usize {
        let mut total = 0;
        while total < self.chunk && !self.done {
            let piece = match self.leftover.take() {
                Some(b) => b,
                None => match self.inner.next().await {
                    Some(Ok(b)) => b,
                    Some(Err(e)) => {
                        self.error = Some(e);
                        self.done = true;
                        break;
                    }
                    None => {
                        self.done = true;
                        break;
                    }
                },
            };
            total += self.take_piece(piece, total);
        }
        total
    }

    /// Queues as much of `piece` as fits in the chunk after `total` bytes;
    /// keeps the rest as leftover. Returns the bytes queued.
    fn take_piece(&mut self, mut piece: Bytes, total: usize) -> usize {
        let room = self.chunk - total;
        if piece.len() > room {
            self.leftover = Some(piece.split_off(room));
        }
        let n = piece.len();
        if n > 0 {
            self.ready.push_back(piece);
        }
        n
    }

    /// Charges `total` bytes to the caps and the lane, then yields the
    /// chunk's first piece; on refusal, ends the stream with the error.
    async fn grant(mut self, total: usize) -> Option<(Result<Bytes, E>, Self)> {
        let bytes = u64::try_from(total).unwrap_or(u64::MAX);
        self.lanes.throttle_bytes(&self.tenant, bytes).await;
        match self.lanes.acquire_chunk(&self.tenant, bytes).await {
            Ok(permit) => {
                self.permit = Some(self.lanes.lease(permit));
                let first = self.ready.pop_front()?;
                Some((Ok(first), self))
            }
            Err(overloaded) => {
                self.ready.clear();
                self.error = None;
                self.done = true;
                Some((Err(E::from(overloaded)), self))
            }
        }
    }
}
