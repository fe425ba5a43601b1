//! `gradus-proto`: the pure wire codecs of Gradus, a Redis-compatible server. No sockets, no
//! async runtime, no keyspace, no command semantics: bytes in, values out, and back.
//!
//! Modules:
//! * [`error`] — [`ProtoError`], the one error enum; texts match Redis' where Redis has one.
//! * [`request`] — [`RequestDecoder`] and [`Limits`]: client requests (RESP multibulk and
//!   inline) to argument vectors, incrementally and zero-copy.
//! * [`frame`] — [`Frame`], [`ProtocolVersion`], [`encode`] and the allocation-light `encode_*`
//!   helpers for replies; [`format_double`] for Redis' double text.
//! * [`reply`] — [`parse_frame`]: RESP2/RESP3 reply decoding for clients, tests and benches.
//! * [`rdb`] — [`rdb::dump`] and [`rdb::restore`]: Redis' DUMP/RESTORE payloads (RDB object
//!   encodings, LZF, CRC-64) to and from [`rdb::RdbValue`].
//!
//! Conventions: "not enough bytes yet" is `Ok(None)`, never an error; nothing panics on input
//! bytes; no allocation is sized by an attacker-supplied length beyond the configured limits.

pub mod error;
pub mod frame;
mod num;
pub mod rdb;
pub mod reply;
pub mod request;

pub use error::ProtoError;
pub use frame::{
    encode, encode_array_header, encode_big_number, encode_bool, encode_bulk, encode_double,
    encode_error, encode_integer, encode_map_header, encode_null, encode_null_array, encode_ok,
    encode_push_header, encode_set_header, encode_simple, encode_verbatim, format_double,
    format_double_human, format_fixed17, BulkArray, BulkArrayIter, Frame, ProtocolVersion,
};
pub use num::parse_strict_i64;
pub use reply::parse_frame;
pub use request::{is_http_request_command, split_inline, Limits, RequestDecoder};
