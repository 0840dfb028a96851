//! [`SnapshotData`]: a partition snapshot as openraft moves it, an async
//! reader of a stored snapshot's network stream or an async writer that
//! receives one ([`crate::snapshot_volumes`] has the stream's layout).
//!
//! openraft's chunked transfer wants one `AsyncRead + AsyncWrite +
//! AsyncSeek` type for both sides: the leader seeks to a chunk's offset and
//! reads it; a follower seeks to it and writes it. The two halves here
//! never meet (a stored snapshot is never written, a received one never
//! read), so each refuses the other's calls.
//!
//! Every file read or write, and the fsync that ends a received segment,
//! runs on tokio's blocking pool, one job at a time per snapshot: the task
//! that polls (a replication task, or the RPC handler of a chunk) never
//! blocks its runtime thread, where the heartbeats of every group run.

use crate::blocking::ReplicaError;
use crate::snapshot_volumes::{Receiver, Sources};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

/// Bytes one blocking read fetches.
const READ_AHEAD: usize = 1 << 20;

/// A snapshot's data, being sent or being received.
pub struct SnapshotData {
    mode: Mode,
}

enum Mode {
    Send(Send),
    Receive(Receive),
}

/// Reading a stored snapshot's stream.
struct Send {
    sources: Arc<Sources>,
    pos: u64,
    /// Bytes read ahead, starting at `buf_pos`.
    buf: Vec<u8>,
    buf_pos: u64,
    job: Option<JoinHandle<(u64, io::Result<Vec<u8>>)>>,
}

/// Writing a received stream.
struct Receive {
    state: RecvState,
}

enum RecvState {
    Idle(Box<Receiver>),
    Busy(JoinHandle<(Box<Receiver>, io::Result<usize>)>),
    /// A job panicked or was cancelled with the receiver in it.
    Lost,
}

fn io_err(e: ReplicaError) -> io::Error {
    match e {
        ReplicaError::Io(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

fn joined<T>(r: Result<T, tokio::task::JoinError>) -> io::Result<T> {
    r.map_err(|e| io::Error::other(format!("snapshot i/o task failed: {e}")))
}

impl SnapshotData {
    /// The stream of a stored snapshot, for sending.
    pub fn sending(sources: Sources) -> SnapshotData {
        SnapshotData {
            mode: Mode::Send(Send {
                sources: Arc::new(sources),
                pos: 0,
                buf: Vec::new(),
                buf_pos: 0,
                job: None,
            }),
        }
    }

    /// A stream to receive into `receiver`.
    pub fn receiving(receiver: Receiver) -> SnapshotData {
        SnapshotData {
            mode: Mode::Receive(Receive {
                state: RecvState::Idle(Box::new(receiver)),
            }),
        }
    }

    /// Whether this is a stream being received.
    pub fn is_receiving(&self) -> bool {
        matches!(self.mode, Mode::Receive(_))
    }

    /// The receiver of a received stream (no write may be in flight).
    pub fn into_receiver(self) -> io::Result<Receiver> {
        match self.mode {
            Mode::Receive(Receive {
                state: RecvState::Idle(r),
            }) => Ok(*r),
            _ => Err(io::Error::other("not a snapshot received whole")),
        }
    }
}

impl Send {
    fn poll_read(&mut self, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let end = self.buf_pos + self.buf.len() as u64;
            if self.pos >= self.buf_pos && self.pos < end {
                let at = usize::try_from(self.pos - self.buf_pos).unwrap_or(0);
                let n = (self.buf.len() - at).min(out.remaining());
                out.put_slice(&self.buf[at..at + n]);
                self.pos += n as u64;
                return Poll::Ready(Ok(()));
            }
            if let Some(job) = &mut self.job {
                let (start, bytes) = joined(ready!(Pin::new(job).poll(cx)))?;
                self.job = None;
                self.buf = bytes?;
                self.buf_pos = start;
                if self.buf.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            if self.pos >= self.sources.total() {
                return Poll::Ready(Ok(()));
            }
            let (sources, pos) = (Arc::clone(&self.sources), self.pos);
            self.job = Some(tokio::task::spawn_blocking(move || {
                (pos, sources.read(pos, READ_AHEAD).map_err(io_err))
            }));
        }
    }

    fn seek(&mut self, to: io::SeekFrom) -> io::Result<()> {
        let total = self.sources.total();
        let pos = match to {
            io::SeekFrom::Start(p) => Some(p),
            io::SeekFrom::End(d) => total.checked_add_signed(d),
            io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        // A read in flight for another position is dropped when it lands
        // (its start no longer covers `pos`).
        self.pos = pos.ok_or_else(|| io::Error::other("seek before the start"))?;
        Ok(())
    }
}

impl Receive {
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        if let RecvState::Idle(_) = self.state {
            let RecvState::Idle(mut r) = std::mem::replace(&mut self.state, RecvState::Lost) else {
                unreachable!("matched above");
            };
            let data = bytes.to_vec();
            self.state = RecvState::Busy(tokio::task::spawn_blocking(move || {
                let res = r.write(&data).map(|()| data.len()).map_err(io_err);
                (r, res)
            }));
        }
        self.poll_idle(cx)
    }

    /// Wait for the job in flight; its result.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        match &mut self.state {
            RecvState::Idle(_) => Poll::Ready(Ok(0)),
            RecvState::Lost => Poll::Ready(Err(io::Error::other("snapshot receiver lost"))),
            RecvState::Busy(job) => {
                let done = ready!(Pin::new(job).poll(cx));
                match joined(done) {
                    Ok((r, res)) => {
                        self.state = RecvState::Idle(r);
                        Poll::Ready(res)
                    }
                    Err(e) => {
                        self.state = RecvState::Lost;
                        Poll::Ready(Err(e))
                    }
                }
            }
        }
    }

    fn seek(&mut self, to: io::SeekFrom) -> io::Result<()> {
        let RecvState::Idle(r) = &mut self.state else {
            return Err(io::Error::other("seek while a snapshot write is in flight"));
        };
        let io::SeekFrom::Start(pos) = to else {
            return Err(io::Error::other(
                "a received snapshot seeks from its start only",
            ));
        };
        r.seek(pos).map_err(io_err)
    }

    fn pos(&self) -> u64 {
        match &self.state {
            RecvState::Idle(r) => r.position(),
            _ => 0,
        }
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().mode {
            Mode::Send(s) => s.poll_read(cx, buf),
            Mode::Receive(_) => Poll::Ready(Err(io::Error::other(
                "a snapshot being received is not read",
            ))),
        }
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().mode {
            Mode::Receive(r) => r.poll_write(cx, buf),
            Mode::Send(_) => Poll::Ready(Err(io::Error::other("a stored snapshot is not written"))),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().mode {
            Mode::Receive(r) => r.poll_idle(cx).map_ok(|_| ()),
            Mode::Send(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, to: io::SeekFrom) -> io::Result<()> {
        match &mut self.get_mut().mode {
            Mode::Send(s) => s.seek(to),
            Mode::Receive(r) => r.seek(to),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(match &self.mode {
            Mode::Send(s) => s.pos,
            Mode::Receive(r) => r.pos(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::SegmentExtent;
    use laneway_store::volume::VolumeSet;
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_stored_snapshot_streams_into_a_receiver_in_chunks_with_seeks() {
        let src = tempfile::tempdir().expect("src");
        let vol = VolumeSet::open(&src.path().join("vol"), 1 << 30).expect("vol");
        let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        vol.write_at(4, 0, &body).expect("write");
        std::fs::write(src.path().join("idx"), vec![9u8; 5000]).expect("idx");
        let seg = vec![SegmentExtent {
            id: 4,
            len: body.len() as u64,
        }];
        let sources = Sources::open(&src.path().join("idx"), seg, Some(&vol)).expect("sources");
        let mut send = SnapshotData::sending(sources);
        let end = send.seek(io::SeekFrom::End(0)).await.expect("end");

        let dst = tempfile::tempdir().expect("dst");
        let dvol = Arc::new(VolumeSet::open(&dst.path().join("vol"), 1 << 30).expect("dvol"));
        let receiver =
            Receiver::create(&dst.path().join("recv"), Some(Arc::clone(&dvol))).expect("recv");
        let mut recv = SnapshotData::receiving(receiver);
        // As openraft sends: seek, read a chunk, write it at its offset;
        // the second chunk twice, as after a lost answer.
        let chunk = 2 * crate::snapshot_volumes::FRAME;
        let mut offsets: Vec<u64> = (0..end.div_ceil(chunk)).map(|i| i * chunk).collect();
        offsets.insert(2, chunk);
        for off in offsets {
            send.seek(io::SeekFrom::Start(off)).await.expect("seek");
            let mut buf = Vec::new();
            (&mut send)
                .take(chunk)
                .read_to_end(&mut buf)
                .await
                .expect("read");
            recv.seek(io::SeekFrom::Start(off)).await.expect("seek");
            recv.write_all(&buf).await.expect("write");
        }
        recv.shutdown().await.expect("shutdown");
        let got = recv
            .into_receiver()
            .expect("receiver")
            .finish()
            .expect("finish");
        assert_eq!(std::fs::read(&got.path).expect("idx"), vec![9u8; 5000]);
        let mut back = vec![0u8; body.len()];
        std::os::unix::fs::FileExt::read_exact_at(&*dvol.file(4).expect("seg"), &mut back, 0)
            .expect("read");
        assert_eq!(back, body);
    }
}
