//! The server layer's error type: everything a command can fail with, rendered as a RESP error.
//!
//! Texts match Redis word for word where a client could depend on them (redis-py maps
//! `WRONGTYPE`, `NOAUTH`, `EXECABORT`, `NOSCRIPT` … prefixes to exception classes).

use gradus_proto::Frame;

/// Why a command failed. `Display` is the error line without the leading `-`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CmdError {
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(String),
    #[error("ERR unknown command '{name}', with args beginning with: {args}")]
    UnknownCommand { name: String, args: String },
    #[error("ERR unknown subcommand '{sub}'. Try {cmd} HELP.")]
    UnknownSubcommand { cmd: String, sub: String },
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR value is not a valid float")]
    NotFloat,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error("ERR no such key")]
    NoSuchKey,
    #[error("ERR DB index is out of range")]
    DbIndexOutOfRange,
    #[error("NOAUTH Authentication required.")]
    NoAuth,
    #[error("WRONGPASS invalid username-password pair or user is disabled.")]
    WrongPass,
    #[error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")]
    StringTooLong,
    /// Any other error, already formatted with its prefix word (e.g. `ERR invalid expire time in 'set' command`).
    #[error("{0}")]
    Other(String),
}

impl CmdError {
    /// An `ERR`-prefixed error with a free text.
    pub fn err(text: impl std::fmt::Display) -> Self {
        CmdError::Other(format!("ERR {text}"))
    }

    /// The RESP error frame for this error.
    pub fn to_frame(&self) -> Frame {
        Frame::Error(self.to_string())
    }
}

/// Result of a command handler.
pub type CmdResult = Result<Frame, CmdError>;

/// Errors that stop the server from starting or serving (config, bind).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("config error: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
