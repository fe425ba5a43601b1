//! The single error type of the crate. Every protocol violation found by the request decoder
//! ([`crate::RequestDecoder`]) or the reply parser ([`crate::parse_frame`]) is one variant here.
//! Where Redis has an error text for the same violation, `Display` reproduces it byte for byte
//! (without the leading `ERR `: the server replies `-ERR {error}`). "Not enough bytes yet" is never
//! an error: decoders return `Ok(None)` for it. Depends on nothing but `thiserror`.

use std::fmt;

/// A protocol violation. After any of these the connection's byte stream can no longer be trusted:
/// the server replies `-ERR {error}` and closes the connection, as Redis does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// `*N` header that is not a decimal integer, or N > [`crate::Limits::max_array_len`].
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// `$N` header that is not a decimal integer, negative, or N > [`crate::Limits::max_bulk_len`].
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// A bulk header inside a multibulk request did not start with `$`; holds the byte found.
    #[error("Protocol error: expected '$', got '{}'", PrintableByte(*.0))]
    ExpectedDollar(u8),
    /// The payload of a bulk argument was not followed by `\r\n` (Redis has no text for this: it
    /// silently skips two bytes; Gradus refuses to resynchronise on garbage).
    #[error("Protocol error: expected CRLF after bulk data")]
    MissingBulkTerminator,
    /// Inline command containing a NUL byte. Redis silently truncates the line at the NUL (C
    /// string handling); Gradus refuses it, since such a line is binary garbage, not typing.
    #[error("Protocol error: NUL byte in inline request")]
    NulInInlineRequest,
    /// Inline command with an unterminated quote, or a closing quote not followed by a space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// More than [`crate::Limits::max_inline_len`] bytes buffered with no `\n` in an inline command.
    #[error("Protocol error: too big inline request")]
    TooBigInlineRequest,
    /// More than `max_inline_len` bytes buffered with no `\r` after a `*` header start.
    #[error("Protocol error: too big mbulk count string")]
    TooBigMbulkCount,
    /// More than `max_inline_len` bytes buffered with no `\r` after a `$` header start.
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// Reply parser: a frame started with a byte that is no RESP2/RESP3 type marker
    /// (streamed aggregates `*?` etc. are reported as [`ProtoError::InvalidReply`]).
    #[error("Protocol error: invalid reply type byte '{}'", PrintableByte(*.0))]
    InvalidReplyType(u8),
    /// Reply parser: a malformed field; the payload names it ("integer", "bulk length", ...).
    #[error("Protocol error: invalid {0} in reply")]
    InvalidReply(&'static str),
    /// Reply parser: aggregates nested deeper than [`crate::reply::MAX_DEPTH`].
    #[error("Protocol error: reply nested too deeply")]
    NestingTooDeep,
}

/// Shows a raw protocol byte inside an error text. `\r` and `\n` become a space (Redis maps them
/// so when it emits the error line); other bytes are shown as the Latin-1 character.
struct PrintableByte(u8);

impl fmt::Display for PrintableByte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = match self.0 {
            b'\r' | b'\n' => ' ',
            b => char::from(b),
        };
        write!(f, "{c}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_match_redis() {
        assert_eq!(
            ProtoError::InvalidMultibulkLength.to_string(),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(
            ProtoError::InvalidBulkLength.to_string(),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            ProtoError::ExpectedDollar(b'X').to_string(),
            "Protocol error: expected '$', got 'X'"
        );
        assert_eq!(
            ProtoError::ExpectedDollar(b'\r').to_string(),
            "Protocol error: expected '$', got ' '"
        );
        assert_eq!(
            ProtoError::UnbalancedQuotes.to_string(),
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            ProtoError::TooBigInlineRequest.to_string(),
            "Protocol error: too big inline request"
        );
        assert_eq!(
            ProtoError::TooBigMbulkCount.to_string(),
            "Protocol error: too big mbulk count string"
        );
        assert_eq!(
            ProtoError::TooBigBulkCount.to_string(),
            "Protocol error: too big bulk count string"
        );
    }
}
