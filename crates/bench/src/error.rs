//! The one error type of `gradus-bench`. Every failure the tool can meet — bad command-line input,
//! a server that cannot be started or reached, a protocol surprise, a network wait that timed out,
//! an output file that cannot be written — is one variant of [`BenchError`], with a message meant
//! for the person running the benchmark. Depends only on `thiserror` and the standard library.

use std::time::Duration;

/// Anything that can go wrong in a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The command line asked for something that does not exist or does not fit together.
    #[error("invalid input: {0}")]
    Input(String),
    /// A server the tool was asked to start could not be started or did not come up.
    #[error("cannot start {what}: {detail}")]
    ServerStart {
        /// Which server (e.g. `redis-server`).
        what: String,
        /// Why, including the tail of its log where there is one.
        detail: String,
    },
    /// A TCP connection could not be opened.
    #[error("cannot connect to {addr}: {detail}")]
    Connect {
        /// The address tried.
        addr: String,
        /// The operating system's reason.
        detail: String,
    },
    /// A network wait ran past its bound.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, &'static str),
    /// The server closed the connection.
    #[error("the server closed the connection")]
    Closed,
    /// A socket or file error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Bytes from the server that are not valid protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server answered with an error reply.
    #[error("server error reply: {0}")]
    Server(String),
    /// The server answered with a well-formed reply of an unexpected shape.
    #[error("unexpected reply to {command}: {reply}")]
    Unexpected {
        /// The command that was sent.
        command: &'static str,
        /// A short rendering of what came back.
        reply: String,
    },
    /// A session lock could not be acquired within the lock wait bound.
    #[error("session lock not acquired within {0:?}")]
    LockTimeout(Duration),
    /// JSON encoding of the result failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl BenchError {
    /// True when the connection this error came from can no longer be used (the stream may be
    /// out of step, closed, or the server gone); the worker must reconnect before going on.
    pub fn breaks_connection(&self) -> bool {
        matches!(
            self,
            BenchError::Timeout(..)
                | BenchError::Closed
                | BenchError::Io(_)
                | BenchError::Protocol(_)
                | BenchError::Connect { .. }
        )
    }
}

impl From<gradus_proto::ProtoError> for BenchError {
    fn from(e: gradus_proto::ProtoError) -> Self {
        BenchError::Protocol(e.to_string())
    }
}

/// The crate's result alias.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
