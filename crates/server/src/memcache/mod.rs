//! The memcached front end: a second listener (`memcached-port`, default 11211) speaking
//! memcached's text and meta protocols over the same keyspaces as RESP.
//!
//! The path is the module list: [`listener`] accepts → [`connection`] turns bytes into
//! `gradus_memcache::Command`s and back → [`session`] hands each command to [`text`] (the text
//! protocol) or [`meta`] (the meta protocol), which both run on the storage core in [`session`]
//! against the connection's keyspace (`memcached-db`, or after a `-Y`-style login the user's
//! tenant's `memcached-keyspace`; the text protocol has no SELECT) → the log,
//! through the same write path (`persist::write`) as RESP writes. [`records`] holds the internal
//! `MCSTORE` command that memcached writes are logged as, [`lease`] the RESP side of stampede
//! protection (`GETLEASE`/`SETLEASE`), [`stats`] the `stats` replies.
//!
//! What memcached keeps per item (32-bit client flags, the CAS value, stale/win state) lives in
//! the store entry itself (`gradus_store::ItemMeta`, the entry version as CAS), so an item
//! written here is an ordinary string over RESP and a RESP string is an item here (flags 0).
//! This module must not parse bytes itself (that is `gradus-memcache`'s job) and never holds a
//! shard lock or the write-order lock across an `.await`.

pub mod connection;
pub mod lease;
pub mod listener;
pub mod meta;
pub mod records;
pub mod session;
pub mod stats;
pub mod text;

/// The memcached version Gradus reports (`version`, `stats`): the 1.6 protocol it follows.
pub const MEMCACHED_COMPAT_VERSION: &str = "1.6.21";

/// memcached's exptime rule: 0 = never; negative = already expired; up to 30 days = seconds
/// from now; larger = an absolute Unix time in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    Never,
    At(u64),
    Expired,
}

/// The relative/absolute boundary of memcached exptimes (30 days, in seconds).
const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

impl Expiry {
    pub fn from_exptime(exptime: i64, now_ms: u64) -> Expiry {
        if exptime == 0 {
            Expiry::Never
        } else if exptime < 0 {
            Expiry::Expired
        } else if exptime <= REALTIME_MAXDELTA {
            Expiry::At(now_ms + exptime as u64 * 1000)
        } else {
            let at = exptime as u64 * 1000;
            if at <= now_ms {
                Expiry::Expired
            } else {
                Expiry::At(at)
            }
        }
    }

    /// The store's form (None = no TTL); `Expired` maps to now (already due).
    pub fn expires_at(self, now_ms: u64) -> Option<u64> {
        match self {
            Expiry::Never => None,
            Expiry::At(t) => Some(t),
            Expiry::Expired => Some(now_ms),
        }
    }
}

/// Remaining TTL in whole seconds as the meta `t` flag reports it (-1 = no TTL).
pub fn ttl_secs(expires_at: Option<u64>, now_ms: u64) -> i64 {
    match expires_at {
        None => -1,
        Some(t) => (t.saturating_sub(now_ms)).div_ceil(1000) as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_rules() {
        let now = 1_700_000_000_000;
        assert_eq!(Expiry::from_exptime(0, now), Expiry::Never);
        assert_eq!(Expiry::from_exptime(-1, now), Expiry::Expired);
        assert_eq!(Expiry::from_exptime(10, now), Expiry::At(now + 10_000));
        assert_eq!(
            Expiry::from_exptime(REALTIME_MAXDELTA + 1, now),
            Expiry::Expired,
            "an absolute time in 1970 is in the past"
        );
        assert_eq!(
            Expiry::from_exptime(1_800_000_000, now),
            Expiry::At(1_800_000_000_000)
        );
        assert_eq!(ttl_secs(Some(now + 1500), now), 2);
        assert_eq!(ttl_secs(None, now), -1);
    }
}
