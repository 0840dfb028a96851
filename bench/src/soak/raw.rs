//! Raw HTTP/1.1 over a TCP socket, for the clients that misbehave on
//! purpose: a request head written by hand (signed by the bench's signer,
//! or not at all), a body cut short, a receive buffer kept small so a
//! slow reader is really slow, and the status line read back.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Largest response head read.
const MAX_HEAD: usize = 64 * 1024;

/// A response head read off a raw connection.
#[derive(Debug)]
pub struct Head {
    /// HTTP status.
    pub status: u16,
    /// `Content-Length`, if sent.
    pub content_length: Option<u64>,
    /// Body bytes that arrived with the head.
    pub leftover: Vec<u8>,
}

/// The first address of `authority` (`127.0.0.1:9000`).
pub async fn resolve(authority: &str) -> io::Result<SocketAddr> {
    tokio::net::lookup_host(authority)
        .await?
        .next()
        .ok_or_else(|| io::Error::other(format!("{authority}: no address")))
}

/// Connects to `addr`, with a receive buffer of `rcvbuf` bytes if given
/// (set before connecting, so the window the peer sees is small).
pub async fn connect(addr: SocketAddr, rcvbuf: Option<u32>) -> io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(n) = rcvbuf {
        socket.set_recv_buffer_size(n)?;
    }
    let stream = tokio::time::timeout(Duration::from_secs(5), socket.connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The head of `req` as HTTP/1.1 bytes (request line, headers, blank line).
pub fn head_bytes<B>(req: &Request<B>) -> Vec<u8> {
    let target = req
        .uri()
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    let mut out = format!("{} {target} HTTP/1.1\r\n", req.method()).into_bytes();
    for (name, value) in req.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Writes all of `data`, within `limit`.
pub async fn send(stream: &mut TcpStream, data: &[u8], limit: Duration) -> io::Result<()> {
    tokio::time::timeout(limit, stream.write_all(data))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "write timed out"))?
}

/// Reads a response head within `limit`; `Ok(None)` if the server closed
/// the connection (or reset it) without one.
pub async fn read_head(stream: &mut TcpStream, limit: Duration) -> io::Result<Option<Head>> {
    let read = async {
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = find_blank_line(&buf) {
                return Ok(
                    parse_head(&buf[..end]).map(|(status, content_length)| Head {
                        status,
                        content_length,
                        leftover: buf[end..].to_vec(),
                    }),
                );
            }
            if buf.len() > MAX_HEAD {
                return Err(io::Error::other("response head too long"));
            }
            match stream.read(&mut chunk).await {
                Ok(0) => return Ok(None),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    };
    tokio::time::timeout(limit, read)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no response head"))?
}

/// Offset just past the first `\r\n\r\n`.
fn find_blank_line(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Status and `Content-Length` of a head; `None` if it is not HTTP.
fn parse_head(head: &[u8]) -> Option<(u16, Option<u64>)> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let mut parts = status_line.split(' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let status = parts.next()?.parse().ok()?;
    let length = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        if name.eq_ignore_ascii_case("content-length") {
            value.trim().parse().ok()
        } else {
            None
        }
    });
    Some((status, length))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_heads() {
        let req = Request::builder()
            .method("PUT")
            .uri("http://h:1/b/k?x=1")
            .header("host", "h:1")
            .header("content-length", "5")
            .body(())
            .expect("static request");
        assert_eq!(
            head_bytes(&req),
            b"PUT /b/k?x=1 HTTP/1.1\r\nhost: h:1\r\ncontent-length: 5\r\n\r\n".to_vec()
        );
        let resp = b"HTTP/1.1 206 Partial\r\nContent-Length: 12\r\n\r\nabc";
        let end = find_blank_line(resp).expect("blank line");
        assert_eq!(parse_head(&resp[..end]), Some((206, Some(12))));
        assert_eq!(&resp[end..], b"abc");
        assert_eq!(parse_head(b"SSH-2.0\r\n\r\n"), None);
    }
}
