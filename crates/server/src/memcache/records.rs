//! How memcached writes are logged: as their *effect* on the item, never as the request, because
//! a request's outcome depends on state that replay does not reproduce (CAS values are entry
//! versions, which restart from the snapshot). The effect of a store, append, incr, stale mark or
//! vivified stub is one internal command that sets the item exactly:
//!
//! `MCSTORE key value client-flags expires-at-ms bits` (expires-at 0 = no TTL; bits: 1 stale,
//! 2 recache lease handed out)
//!
//! Deletions are logged as `DEL key`, touches as `PEXPIREAT`/`PERSIST`, `flush_all` as
//! `FLUSHDB` — commands replay already knows. MCSTORE is in the command table so replay can run
//! it; a client may call it too (it is a SET with memcached flags), but it is not meant for that.

use crate::command::{cmd, flags, Ctx, KEY1};
use crate::error::{CmdError, CmdResult};
use bytes::Bytes;
use gradus_proto::Frame;
use gradus_store::{ItemMeta, Value};

pub const COMMANDS: &[crate::command::CommandSpec] = &[cmd(
    "mcstore",
    6,
    flags::WRITE | flags::DENYOOM,
    KEY1,
    "string",
    "Internal: sets a string with memcached client flags and item state (the logged form of memcached writes).",
    mcstore,
)];

fn num(arg: &[u8]) -> Result<u64, CmdError> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(CmdError::NotInteger)
}

fn mcstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let client_flags = u32::try_from(num(&args[3])?).map_err(|_| CmdError::NotInteger)?;
    let expires_at = Some(num(&args[4])?).filter(|&t| t != 0);
    let bits = u8::try_from(num(&args[5])?).map_err(|_| CmdError::NotInteger)?;
    let meta = ItemMeta {
        client_flags,
        bits: bits & ItemMeta::PERSISTED_BITS,
    };
    let now = ctx.now_ms;
    ctx.db().lock(&args[1]).set_with_meta(
        &args[1],
        // Copied: a stored value must not pin the request or log buffer it arrived in.
        Value::string_copy(&args[2]),
        expires_at,
        meta,
        now,
    );
    Ok(Frame::ok())
}

/// The MCSTORE arguments that recreate an item.
pub fn mcstore_args(
    key: &Bytes,
    value: Bytes,
    meta: ItemMeta,
    expires_at: Option<u64>,
) -> Vec<Bytes> {
    vec![
        Bytes::from_static(b"MCSTORE"),
        key.clone(),
        value,
        Bytes::from(meta.client_flags.to_string()),
        Bytes::from(expires_at.unwrap_or(0).to_string()),
        Bytes::from((meta.bits & ItemMeta::PERSISTED_BITS).to_string()),
    ]
}

/// `DEL key`.
pub fn del_args(key: &Bytes) -> Vec<Bytes> {
    vec![Bytes::from_static(b"DEL"), key.clone()]
}

/// `PEXPIREAT key ms`, or `PERSIST key` for no TTL.
pub fn expiry_args(key: &Bytes, expires_at: Option<u64>) -> Vec<Bytes> {
    match expires_at {
        Some(t) => vec![
            Bytes::from_static(b"PEXPIREAT"),
            key.clone(),
            Bytes::from(t.to_string()),
        ],
        None => vec![Bytes::from_static(b"PERSIST"), key.clone()],
    }
}
