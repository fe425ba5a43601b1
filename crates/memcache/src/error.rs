//! The crate's one error type. A [`McError`] means the byte stream can no longer be trusted and
//! the server closes the connection, as memcached does; errors a client can recover from are
//! replies ([`crate::Decoded::Reply`]), not `McError`s. Depends on nothing but `thiserror`.

/// A violation after which the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McError {
    /// More than the line limit (2048 bytes by default) buffered with no newline. memcached
    /// closes such a connection without a reply.
    #[error("command line too long")]
    LineTooLong,
    /// The first byte of a request was 0x80, the binary protocol's request magic. Gradus speaks
    /// only the text protocol; the server answers with an error line and closes.
    #[error("binary protocol is not supported")]
    BinaryProtocol,
    /// An HTTP request line (an unknown command whose last token starts with `HTTP/`), as a web
    /// page makes a browser send: memcached hangs up at once, so nothing after it can run.
    #[error("HTTP request on the memcached port (possible cross-protocol attack)")]
    HttpRequest,
}
