//! Errors returned by the S3 client.
//!
//! Every failure carries enough to be counted by the benchmarks ("503
//! SlowDown", "timeout", "transport") and to be judged by the crash test
//! (an HTTP status means the server answered; a transport error means the
//! request may or may not have been applied).

use std::time::Duration;

/// A failed S3 request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a non-success status.
    #[error("HTTP {status} {code}: {message}")]
    S3 {
        /// HTTP status code.
        status: u16,
        /// S3 error code from the XML body (`NoSuchKey`, ...), or empty.
        code: String,
        /// S3 error message from the XML body, or empty.
        message: String,
    },
    /// No complete response arrived within the client's request timeout.
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    /// Connecting, writing or reading failed (reset, refused, EOF).
    #[error("transport error: {0}")]
    Transport(String),
    /// The request could not be built or signed (bad key, bad endpoint).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The server answered 2xx but the body or headers made no sense.
    #[error("bad response: {0}")]
    BadResponse(String),
}

impl ClientError {
    /// The HTTP status if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::S3 { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The S3 error code if the server sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::S3 { code, .. } if !code.is_empty() => Some(code),
            _ => None,
        }
    }

    /// A short label for error tallies: `"503 SlowDown"`, `"timeout"`, ...
    pub fn label(&self) -> String {
        match self {
            Self::S3 { status, code, .. } if code.is_empty() => status.to_string(),
            Self::S3 { status, code, .. } => format!("{status} {code}"),
            Self::Timeout(_) => "timeout".to_owned(),
            Self::Transport(_) => "transport".to_owned(),
            Self::InvalidRequest(_) => "invalid-request".to_owned(),
            Self::BadResponse(_) => "bad-response".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_status_and_code() {
        let err = ClientError::S3 {
            status: 503,
            code: "SlowDown".into(),
            message: String::new(),
        };
        assert_eq!(err.label(), "503 SlowDown");
        assert_eq!(err.status(), Some(503));
        assert_eq!(ClientError::Transport("x".into()).label(), "transport");
    }
}
