//! `gradus-memcache`: the pure codec for memcached's text protocol and its meta commands
//! (memcached 1.6 `doc/protocol.txt`). No sockets, no async runtime, no keyspace: bytes in,
//! [`Command`]s out, and helpers to write replies.
//!
//! Modules:
//! * [`error`] — [`McError`], the only error type: the violations after which the connection
//!   must close (an overlong line, binary-protocol bytes). Everything else that is wrong with a
//!   request is answered in-band with a memcached error line ([`Decoded::Reply`]).
//! * [`request`] — [`Decoder`] and [`Limits`]: incremental, zero-copy parsing of command lines
//!   and their data blocks, enforcing memcached's limits at the edge.
//! * [`meta`] — [`MetaFlags`]: the flag tokens of `mg`/`ms`/`md`/`ma`, checked and parsed.
//! * [`base64`] — the key encoding of the meta `b` flag.
//! * [`reply`] — small encoders for the reply lines (`VALUE …`, meta status lines).
//!
//! Conventions, as in `gradus-proto`: "not enough bytes yet" is `Ok(None)`, nothing panics on
//! input bytes, and no allocation is sized by a client-supplied length beyond the limits.

pub mod base64;
pub mod error;
pub mod meta;
pub mod reply;
pub mod request;

pub use error::McError;
pub use meta::{MetaFlags, MetaMode};
pub use request::{Command, Decoded, Decoder, Limits, StoreMode};
