//! One shard of a keyspace: a hash map of live entries, an expiry index and memory accounting.
//!
//! A shard is plain data guarded by its keyspace's mutex; every method takes `&mut self` and never
//! blocks or allocates beyond the values it stores. Expired entries are removed lazily by the
//! accessors here and actively by `sweep_expired`. Each mutation bumps the entry's version so
//! `WATCH` can tell that a key changed.
//!
//! Eviction support: every entry carries its access data, and eviction samples a few keys at
//! random slots of the table (Redis' sampling approach). Like Redis, which reuses one 24-bit
//! field of each object, the access data is read per the shard's [`AccessClock`]: the last
//! access in 10 ms ticks (LRU), or Redis' LFU counter and decrement time (LFU policies, with
//! Redis' `LFULogIncr` and `LFUDecrAndReturn`); switching the clock reinterprets it, as switching
//! `maxmemory-policy` does in Redis. An access on a thread inside [`with_touch`]`(false, …)`
//! (a `CLIENT NO-TOUCH` connection's command) leaves it as it was.
//!
//! Layout: entries live in an [`EntryMap`] (one block per key holding the entry and the key's
//! bytes, 8-byte table slots; see `crate::table`). The expiry index refers to blocks by address,
//! which is stable while a block is in the table; every path that removes a block removes its
//! expiry first. An entry is its value and one metadata word: a key without a TTL or memcached
//! client flags keeps its access stamp and its version (31 bits, read back against the shard's
//! newest) in that word; a key with a TTL keeps them with its expiry in a 16-byte allocation the
//! word points to, a key with client flags or a client-chosen version everything in a 24-byte
//! one (see [`Entry`]).

use crate::list::ListValue;
use crate::set::SetValue;
use crate::stream::StreamValue;
use crate::string::StrValue;
use crate::table::{alloc_class, key_of, EntryMap, Node};
use crate::value::{HashValue, Value, ValueKind};
use crate::zset::ZSetValue;
use bytes::Bytes;
use hashbrown::HashMap;
use std::cell::Cell;
use std::collections::BTreeSet;
use std::convert::Infallible;

/// `Entry::expires_at` of a key without a TTL (Redis refuses expiry times past `i64::MAX`).
const NO_EXPIRY: u64 = u64::MAX;

/// A stored key's value and metadata: 48 bytes, so with a short key (up to 15 bytes) the key's
/// block is a 64-byte allocation (see `crate::table`).
///
/// The metadata is one word ([`MetaWord`]). A key with no TTL, no memcached client flags and
/// no version chosen by a client — most keys — keeps its access stamp and the low 31 bits of
/// its version in that word itself; a key with a TTL keeps them with its expiry in a 16-byte
/// allocation of its own ([`SmallExt`]), and a key with client flags or a version chosen by a
/// client keeps everything, in full, in a 24-byte one ([`Ext`]). A version kept as 31 bits is
/// read back as the newest version of the shard with those bits ([`Shard::full_version`]):
/// exact for as long as the shard has handed out fewer than 2^31 versions since, and otherwise
/// larger than the true one, so that a stale WATCH or CAS value can fail where it would have
/// held, never the other way round.
#[derive(Debug, Clone)]
pub struct Entry {
    pub value: Value,
    meta: MetaWord,
}

/// Every metadata field of an entry, in full; also how a [`MetaWord`] keeps them when it
/// cannot do with less.
#[derive(Debug, Clone, Copy)]
struct Ext {
    /// Unix ms, or [`NO_EXPIRY`] (8 bytes instead of an `Option`'s 16).
    expires_at: u64,
    version: u64,
    /// As [`MetaWord::inline`]'s.
    stamp: u32,
    /// memcached client flags ([`ItemMeta::client_flags`]).
    client_flags: u32,
}

/// What a key with a TTL (and nothing else an inline word cannot hold) keeps beside its value.
#[derive(Debug, Clone, Copy)]
struct SmallExt {
    expires_at: u64,
    stamp: u32,
    /// The version's low [`VERSION_BITS`] bits.
    version_low: u32,
}

/// An entry's version as stored (see [`Entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredVersion {
    /// The low [`VERSION_BITS`] bits of the version, which was the shard's newest when stored.
    Low(u32),
    Full(u64),
}

/// Bits of a version an inline [`MetaWord`] or a [`SmallExt`] keeps.
const VERSION_BITS: u32 = 31;
const VERSION_MASK: u64 = (1 << VERSION_BITS) - 1;

/// An entry's metadata word: either inline — bit 0 set, the version's low [`VERSION_BITS`] bits
/// in bits 1-31 and the access stamp (see [`TICK_BITS`]: the access data, and the memcached
/// meta bits in the top three) in bits 32-63 — or the address of the entry's own [`SmallExt`]
/// (bits 0 and 1 clear) or [`Ext`] (bit 1 set), which it owns (both are 8-byte aligned).
struct MetaWord(*mut u8);

const INLINE: usize = 1;
const BIG: usize = 2;

const _: () = assert!(usize::BITS == 64, "an inline MetaWord needs a 64-bit word");
const _: () = assert!(std::mem::align_of::<SmallExt>() >= 4 && std::mem::align_of::<Ext>() >= 4);

// SAFETY: a `MetaWord` owns its `SmallExt` or `Ext` exclusively (like a `Box`), and both are
// plain data.
unsafe impl Send for MetaWord {}
unsafe impl Sync for MetaWord {}

/// A [`MetaWord`] read.
enum Kind<'a> {
    Inline(u64),
    Small(&'a SmallExt),
    Big(&'a Ext),
}

/// A [`MetaWord`] to change in place.
enum KindMut<'a> {
    Inline,
    Small(&'a mut SmallExt),
    Big(&'a mut Ext),
}

impl MetaWord {
    fn inline(stamp: u32, version: u64) -> MetaWord {
        let word = u64::from(stamp) << 32 | (version & VERSION_MASK) << 1 | INLINE as u64;
        MetaWord(std::ptr::without_provenance_mut(word as usize))
    }

    fn small(ext: SmallExt) -> MetaWord {
        MetaWord(Box::into_raw(Box::new(ext)).cast())
    }

    fn big(ext: Ext) -> MetaWord {
        MetaWord(
            Box::into_raw(Box::new(ext))
                .cast::<u8>()
                .map_addr(|a| a | BIG),
        )
    }

    /// Which of the three forms the word is (Debug, tests).
    fn kind_name(&self) -> &'static str {
        match self.kind() {
            Kind::Inline(_) => "inline",
            Kind::Small(_) => "small",
            Kind::Big(_) => "big",
        }
    }

    fn kind(&self) -> Kind<'_> {
        let addr = self.0.addr();
        // SAFETY: a word with bit 0 clear is the address of the `SmallExt` (bit 1 clear) or
        // `Ext` (bit 1 set) this word owns.
        unsafe {
            if addr & INLINE != 0 {
                Kind::Inline(addr as u64)
            } else if addr & BIG != 0 {
                Kind::Big(&*self.0.map_addr(|a| a & !BIG).cast::<Ext>())
            } else {
                Kind::Small(&*self.0.cast::<SmallExt>())
            }
        }
    }

    fn kind_mut(&mut self) -> KindMut<'_> {
        let addr = self.0.addr();
        // SAFETY: as in `kind`; `&mut self` is the only access to it.
        unsafe {
            if addr & INLINE != 0 {
                KindMut::Inline
            } else if addr & BIG != 0 {
                KindMut::Big(&mut *self.0.map_addr(|a| a & !BIG).cast::<Ext>())
            } else {
                KindMut::Small(&mut *self.0.cast::<SmallExt>())
            }
        }
    }

    /// Every field (a 31-bit version as it was stored: see [`MetaWord::stored_version`]).
    fn fields(&self) -> Ext {
        match self.kind() {
            Kind::Inline(word) => Ext {
                expires_at: NO_EXPIRY,
                version: (word >> 1) & VERSION_MASK,
                stamp: (word >> 32) as u32,
                client_flags: 0,
            },
            Kind::Small(ext) => Ext {
                expires_at: ext.expires_at,
                version: u64::from(ext.version_low),
                stamp: ext.stamp,
                client_flags: 0,
            },
            Kind::Big(ext) => *ext,
        }
    }

    fn stored_version(&self) -> StoredVersion {
        match self.kind() {
            Kind::Inline(word) => StoredVersion::Low(((word >> 1) & VERSION_MASK) as u32),
            Kind::Small(ext) => StoredVersion::Low(ext.version_low),
            Kind::Big(ext) => StoredVersion::Full(ext.version),
        }
    }
}

impl Drop for MetaWord {
    fn drop(&mut self) {
        let addr = self.0.addr();
        // SAFETY: the box was made by `MetaWord::small` / `MetaWord::big` (bit 1 tells which)
        // and is owned by this word only.
        unsafe {
            if addr & INLINE != 0 {
            } else if addr & BIG != 0 {
                drop(Box::from_raw(self.0.map_addr(|a| a & !BIG).cast::<Ext>()));
            } else {
                drop(Box::from_raw(self.0.cast::<SmallExt>()));
            }
        }
    }
}

impl Clone for MetaWord {
    fn clone(&self) -> MetaWord {
        match self.kind() {
            Kind::Inline(_) => MetaWord(self.0),
            Kind::Small(ext) => MetaWord::small(*ext),
            Kind::Big(ext) => MetaWord::big(*ext),
        }
    }
}

impl std::fmt::Debug for MetaWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaWord")
            .field("kind", &self.kind_name())
            .field("fields", &self.fields())
            .finish()
    }
}

/// Bits of [`Entry::stamp`] that hold the access tick: 2^29 ticks of 10 ms, ~62 days (Redis'
/// own LRU clock wraps after 194 days at 1 s; ages are computed modulo the wrap, as Redis does).
const TICK_BITS: u32 = 29;
const TICK_MASK: u32 = (1 << TICK_BITS) - 1;

/// The LFU counter of a new key (Redis' `LFU_INIT_VAL`): a new key can collect a few accesses
/// before it is the first to go.
pub const LFU_INIT_VAL: u8 = 5;

/// How entries' access data is kept (Redis' `maxmemory-policy`: the LFU policies keep a
/// frequency counter, the others the time of the last access). Every shard of a keyspace reads
/// its keyspace's clock when locked (see `crate::keyspace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccessClock {
    /// The last access, in 10 ms ticks.
    #[default]
    Lru,
    /// Redis' LFU data with its settings `lfu-log-factor` and `lfu-decay-time` (minutes).
    Lfu { log_factor: u32, decay_time: u32 },
}

impl AccessClock {
    /// As one word, for a keyspace's atomic (see [`AccessClock::from_bits`]).
    pub fn to_bits(self) -> u64 {
        match self {
            AccessClock::Lru => 0,
            AccessClock::Lfu {
                log_factor,
                decay_time,
            } => 1 << 63 | u64::from(decay_time & 0x7fff_ffff) << 32 | u64::from(log_factor),
        }
    }

    pub fn from_bits(bits: u64) -> Self {
        if bits >> 63 == 0 {
            return AccessClock::Lru;
        }
        AccessClock::Lfu {
            log_factor: bits as u32,
            decay_time: (bits >> 32) as u32 & 0x7fff_ffff,
        }
    }

    pub fn is_lfu(self) -> bool {
        matches!(self, AccessClock::Lfu { .. })
    }

    /// The access data of a key created at `now_ms` (Redis' `initObjectLRUOrLFU`).
    fn fresh(self, now_ms: u64) -> u32 {
        match self {
            AccessClock::Lru => access_tick(now_ms),
            AccessClock::Lfu { .. } => lfu_minutes(now_ms) << 8 | u32::from(LFU_INIT_VAL),
        }
    }
}

/// Redis' `LFUGetTimeInMinutes`: Unix minutes, 16 bits (wrapping).
fn lfu_minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) & 0xffff) as u32
}

/// Redis' `LFUTimeElapsed`: minutes since `ldt`, the clock taken to have wrapped at most once.
fn lfu_elapsed(ldt: u32, now_ms: u64) -> u32 {
    let now = lfu_minutes(now_ms);
    if now >= ldt {
        now - ldt
    } else {
        65535 - ldt + now
    }
}

/// Redis' `LFULogIncr`: the greater the counter, the less likely an access increments it
/// (saturating at 255); counters up to [`LFU_INIT_VAL`] always grow.
pub fn lfu_log_incr(counter: u8, log_factor: u32) -> u8 {
    if counter == 255 {
        return 255;
    }
    let r: f64 = rand::random();
    let baseval = f64::from(counter.saturating_sub(LFU_INIT_VAL));
    let p = 1.0 / (baseval * f64::from(log_factor) + 1.0);
    if r < p {
        counter + 1
    } else {
        counter
    }
}

/// Redis' `LFUDecrAndReturn` of access data `word` at `now_ms`: the counter less one for each
/// `decay_time` minutes since the last decrement (0: never decays).
fn lfu_decayed(word: u32, decay_time: u32, now_ms: u64) -> u8 {
    let ldt = (word >> 8) & 0xffff;
    let counter = word & 0xff;
    let periods = match decay_time {
        0 => 0,
        d => lfu_elapsed(ldt, now_ms) / d,
    };
    counter.saturating_sub(periods) as u8
}

thread_local! {
    /// Set while this thread runs a command of a `CLIENT NO-TOUCH` connection (see
    /// [`with_touch`]): accesses then leave keys' access data alone.
    static NO_TOUCH: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with reads and writes on this thread touching the keys they access (`touch`) or not
/// (Redis' `CLIENT NO-TOUCH`, which the server applies per command; TOUCH always touches). The
/// previous mode is restored after, also if `f` panics. Commands run synchronously on one
/// thread (no shard lock is held across an `.await`), so a thread-local is the command's scope.
pub fn with_touch<R>(touch: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            NO_TOUCH.with(|n| n.set(self.0));
        }
    }
    let _restore = Restore(NO_TOUCH.with(|n| n.replace(!touch)));
    f()
}

/// Which keys eviction prefers (Redis' `maxmemory-policy` values that evict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// The key idle longest.
    AllKeysLru,
    /// The key with a TTL idle longest.
    VolatileLru,
    /// The key with the lowest (decayed) LFU counter.
    AllKeysLfu,
    /// The key with a TTL with the lowest LFU counter.
    VolatileLfu,
    /// Any key.
    AllKeysRandom,
    /// Any key with a TTL.
    VolatileRandom,
    /// The key with the nearest expiry.
    VolatileTtl,
}

impl EvictionPolicy {
    /// How strongly `entry` is a victim at `now_ms` (higher first; an expired key above all),
    /// or None when the policy never evicts it. `clock` says how its access data is kept: the
    /// LFU policies rank by 255 less the decayed counter, as Redis' `evictionPoolPopulate`.
    pub fn rank(self, entry: &Entry, clock: AccessClock, now_ms: u64) -> Option<u64> {
        if entry.is_expired(now_ms) {
            return Some(u64::MAX);
        }
        let ttl = entry.expires_at();
        let idle = || u64::from(entry.idle_ticks(now_ms));
        let rarity = || {
            let decay_time = match clock {
                AccessClock::Lfu { decay_time, .. } => decay_time,
                AccessClock::Lru => 1,
            };
            255 - u64::from(entry.frequency(decay_time, now_ms))
        };
        match self {
            EvictionPolicy::AllKeysLru => Some(idle()),
            EvictionPolicy::VolatileLru => ttl.map(|_| idle()),
            EvictionPolicy::AllKeysLfu => Some(rarity()),
            EvictionPolicy::VolatileLfu => ttl.map(|_| rarity()),
            EvictionPolicy::AllKeysRandom => Some(0),
            EvictionPolicy::VolatileRandom => ttl.map(|_| 0),
            EvictionPolicy::VolatileTtl => ttl.map(|t| u64::MAX - 1 - t),
        }
    }

    /// Whether only keys with a TTL qualify.
    pub fn volatile_only(self) -> bool {
        matches!(
            self,
            EvictionPolicy::VolatileLru
                | EvictionPolicy::VolatileLfu
                | EvictionPolicy::VolatileRandom
                | EvictionPolicy::VolatileTtl
        )
    }
}

/// The access clock: Unix time in 10 ms ticks, truncated to [`TICK_BITS`] bits (wraps every ~62
/// days; ages are computed modulo the wrap).
pub fn access_tick(now_ms: u64) -> u32 {
    (now_ms / 10) as u32 & TICK_MASK
}

/// What the memcached protocol keeps beside a value: the client's 32-bit flags and the meta
/// protocol's per-item state. Every whole-value write (SET, memcached `set`) resets it; in-place
/// changes (APPEND, INCR) keep it. Stored in 4 bytes and 3 bits of the entry; the time since the
/// last access (meta `l`, `la`) is the entry's access data ([`Entry::idle_ticks`]; minutes
/// under an LFU clock), which every store and fetch sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemMeta {
    /// Opaque flags stored by memcached clients (php-memcached keeps its serializer here).
    pub client_flags: u32,
    /// `STALE` | `WIN_SENT` | `FETCHED`.
    pub bits: u8,
}

impl ItemMeta {
    /// Marked stale by `md key I` (or a stale `ms … I` store): readers see `X`.
    pub const STALE: u8 = 1;
    /// A client already received the recache win (`W`); later readers see `Z`.
    pub const WIN_SENT: u8 = 2;
    /// Fetched at least once since stored (meta `h`).
    pub const FETCHED: u8 = 4;
    /// The bits that snapshots and log records carry (a restart keeps a stale mark and a
    /// pending recache lease; "fetched" is access history, not data).
    pub const PERSISTED_BITS: u8 = Self::STALE | Self::WIN_SENT;

    pub fn has(&self, bit: u8) -> bool {
        self.bits & bit != 0
    }
}

/// The version whose low [`VERSION_BITS`] bits are `low`: the newest not above `newest` (see
/// [`Entry`]).
fn expand_version(low: u32, newest: u64) -> u64 {
    let v = newest & !VERSION_MASK | u64::from(low);
    if v > newest && v > VERSION_MASK {
        v - (VERSION_MASK + 1)
    } else {
        v
    }
}

/// `stored` in full while `newest` is the shard's newest version.
fn full_version(stored: StoredVersion, newest: u64) -> u64 {
    match stored {
        StoredVersion::Low(low) => expand_version(low, newest),
        StoredVersion::Full(v) => v,
    }
}

impl Entry {
    /// An entry holding `value`, stored at `now_ms` with version `version`, which must be its
    /// shard's newest (LRU access data).
    pub fn new(value: Value, expires_at: Option<u64>, version: u64, now_ms: u64) -> Entry {
        let meta = ItemMeta::default();
        Entry::with_meta(value, expires_at, version, meta, AccessClock::Lru, now_ms)
    }

    fn with_meta(
        value: Value,
        expires_at: Option<u64>,
        version: u64,
        meta: ItemMeta,
        clock: AccessClock,
        now_ms: u64,
    ) -> Entry {
        let stamp = clock.fresh(now_ms) & TICK_MASK | u32::from(meta.bits & 0b111) << TICK_BITS;
        let mut entry = Entry {
            value,
            meta: MetaWord::inline(stamp, version),
        };
        let expires_at = expires_at.unwrap_or(NO_EXPIRY);
        if expires_at != NO_EXPIRY || meta.client_flags != 0 {
            let fields = Ext {
                expires_at,
                version,
                stamp,
                client_flags: meta.client_flags,
            };
            entry.store_as(fields, version);
        }
        entry
    }

    /// Every field in full, a 31-bit version read against `newest`, the shard's newest version.
    fn full_fields(&self, newest: u64) -> Ext {
        let mut fields = self.meta.fields();
        if let StoredVersion::Low(low) = self.meta.stored_version() {
            fields.version = expand_version(low, newest);
        }
        fields
    }

    /// Keep `fields` in as little as they fit (see [`Entry`]): a version in 31 bits if those
    /// give it back exactly while `newest` is the shard's newest version, no allocation without
    /// an expiry or client flags. An allocation of the right kind is reused.
    fn store_as(&mut self, fields: Ext, newest: u64) {
        let exact = fields.version <= newest && newest - fields.version <= VERSION_MASK;
        let small = SmallExt {
            expires_at: fields.expires_at,
            stamp: fields.stamp,
            version_low: (fields.version & VERSION_MASK) as u32,
        };
        match self.meta.kind_mut() {
            _ if exact && fields.client_flags == 0 && fields.expires_at == NO_EXPIRY => {
                self.meta = MetaWord::inline(fields.stamp, fields.version);
            }
            KindMut::Small(ext) if exact && fields.client_flags == 0 => *ext = small,
            _ if exact && fields.client_flags == 0 => self.meta = MetaWord::small(small),
            KindMut::Big(ext) => *ext = fields,
            _ => self.meta = MetaWord::big(fields),
        }
    }

    fn stamp(&self) -> u32 {
        match self.meta.kind() {
            Kind::Inline(word) => (word >> 32) as u32,
            Kind::Small(ext) => ext.stamp,
            Kind::Big(ext) => ext.stamp,
        }
    }

    fn set_stamp(&mut self, stamp: u32) {
        match self.meta.kind_mut() {
            KindMut::Inline => {
                let word = self.meta.0.addr() as u64 & 0xffff_ffff | u64::from(stamp) << 32;
                self.meta = MetaWord(std::ptr::without_provenance_mut(word as usize));
            }
            KindMut::Small(ext) => ext.stamp = stamp,
            KindMut::Big(ext) => ext.stamp = stamp,
        }
    }

    /// Give the entry `version`, the shard's newest (a write).
    fn set_version(&mut self, version: u64) {
        match self.meta.kind_mut() {
            KindMut::Inline => self.meta = MetaWord::inline(self.stamp(), version),
            KindMut::Small(ext) => ext.version_low = (version & VERSION_MASK) as u32,
            KindMut::Big(ext) => ext.version = version,
        }
    }

    /// The version as stored (see [`Shard::full_version`]).
    pub fn stored_version(&self) -> StoredVersion {
        self.meta.stored_version()
    }

    /// Heap bytes the entry's metadata takes beside its block (its [`SmallExt`] or [`Ext`]).
    fn ext_bytes(&self) -> usize {
        match self.meta.kind() {
            Kind::Inline(_) => 0,
            Kind::Small(_) => alloc_class(std::mem::size_of::<SmallExt>()),
            Kind::Big(_) => alloc_class(std::mem::size_of::<Ext>()),
        }
    }

    fn raw_expiry(&self) -> u64 {
        match self.meta.kind() {
            Kind::Inline(_) => NO_EXPIRY,
            Kind::Small(ext) => ext.expires_at,
            Kind::Big(ext) => ext.expires_at,
        }
    }

    /// The access data (the low [`TICK_BITS`] of the stamp).
    fn access_data(&self) -> u32 {
        self.stamp() & TICK_MASK
    }

    fn set_access_data(&mut self, data: u32) {
        self.set_stamp((self.stamp() & !TICK_MASK) | (data & TICK_MASK));
    }

    /// Record an access at `now_ms` (Redis' `lookupKey`: the LRU time set, or the LFU counter
    /// decayed and then incremented logarithmically), unless this thread's command must not
    /// touch keys ([`with_touch`]). The meta bits are kept.
    fn touch(&mut self, clock: AccessClock, now_ms: u64) {
        if NO_TOUCH.with(Cell::get) {
            return;
        }
        let data = match clock {
            AccessClock::Lru => access_tick(now_ms),
            AccessClock::Lfu {
                log_factor,
                decay_time,
            } => {
                let counter = lfu_decayed(self.access_data(), decay_time, now_ms);
                lfu_minutes(now_ms) << 8 | u32::from(lfu_log_incr(counter, log_factor))
            }
        };
        self.set_access_data(data);
    }

    /// Set the memcached meta state; the version stays what it was (`newest`: the shard's
    /// newest version).
    fn set_meta(&mut self, meta: ItemMeta, newest: u64) {
        let mut fields = self.full_fields(newest);
        fields.client_flags = meta.client_flags;
        fields.stamp = (fields.stamp & TICK_MASK) | (u32::from(meta.bits & 0b111) << TICK_BITS);
        self.store_as(fields, newest);
    }

    /// Absolute expiry time in Unix milliseconds, if the key has a TTL.
    pub fn expires_at(&self) -> Option<u64> {
        let t = self.raw_expiry();
        (t != NO_EXPIRY).then_some(t)
    }
    /// Ticks (10 ms) since the last access at `now_ms`, the access data read as LRU data.
    pub fn idle_ticks(&self, now_ms: u64) -> u32 {
        access_tick(now_ms).wrapping_sub(self.stamp()) & TICK_MASK
    }
    /// The LFU counter at `now_ms`, decayed by one for each `decay_time` minutes since its last
    /// decrement (Redis' `LFUDecrAndReturn`; the entry is not changed), the access data read as
    /// LFU data.
    pub fn frequency(&self, decay_time: u32, now_ms: u64) -> u8 {
        lfu_decayed(self.access_data(), decay_time, now_ms)
    }
    /// Ticks (10 ms) since the last access under `clock` (LFU data keeps the last access in
    /// minutes: memcached's `la` then counts whole minutes).
    pub fn idle_ticks_by(&self, clock: AccessClock, now_ms: u64) -> u32 {
        match clock {
            AccessClock::Lru => self.idle_ticks(now_ms),
            AccessClock::Lfu { .. } => {
                lfu_elapsed((self.access_data() >> 8) & 0xffff, now_ms).saturating_mul(6000)
            }
        }
    }
    /// memcached client flags and meta state.
    pub fn meta(&self) -> ItemMeta {
        ItemMeta {
            client_flags: match self.meta.kind() {
                Kind::Big(ext) => ext.client_flags,
                _ => 0,
            },
            bits: (self.stamp() >> TICK_BITS) as u8,
        }
    }
    fn is_expired(&self, now_ms: u64) -> bool {
        self.raw_expiry() <= now_ms
    }
    /// What a snapshot writes of this entry.
    pub fn view(&self) -> ItemView<'_> {
        ItemView {
            value: self.value.view(),
            expires_at: self.expires_at(),
            meta: self.meta(),
        }
    }
}

/// An entry as a snapshot writes it: its value, expiry and meta state, borrowed. A string is
/// handed over as bytes, never as a `Bytes` that could be cloned: the snapshot's copy of a
/// shard refers to string buffers without holding a reference count (see `ShardCopy`).
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    pub value: ValueView<'a>,
    pub expires_at: Option<u64>,
    pub meta: ItemMeta,
}

/// The value of an [`ItemView`].
#[derive(Debug, Clone, Copy)]
pub enum ValueView<'a> {
    Str(&'a [u8]),
    Hash(&'a HashValue),
    ZSet(&'a ZSetValue),
    List(&'a ListValue),
    Set(&'a SetValue),
    Stream(&'a StreamValue),
}

impl ValueView<'_> {
    /// Approximate heap bytes held by the value. O(1).
    pub fn mem_size(&self) -> usize {
        match self {
            ValueView::Str(b) => crate::string::string_heap_bytes(b.len()),
            ValueView::Hash(h) => h.mem_size(),
            // Held inline in the entry: only its buffer or its box and tables.
            ValueView::ZSet(z) => z.mem_size(),
            ValueView::List(l) => l.mem_size(),
            // The set's own box (see `Value`).
            ValueView::Set(s) => std::mem::size_of::<SetValue>() + s.mem_size(),
            ValueView::Stream(s) => s.mem_size(),
        }
    }
}

impl Value {
    /// The value borrowed, strings as bytes.
    pub fn view(&self) -> ValueView<'_> {
        match self {
            Value::Str(b) => ValueView::Str(b),
            Value::Hash(h) => ValueView::Hash(h),
            Value::ZSet(z) => ValueView::ZSet(z),
            Value::List(l) => ValueView::List(l),
            Value::Set(s) => ValueView::Set(s),
            Value::Stream(s) => ValueView::Stream(s),
        }
    }
}

/// A snapshot's copy of one shard (see [`Shard::copy_for_snapshot`]), reused from shard to shard
/// so that its buffers are grown (and their fresh memory first touched, which costs the kernel a
/// page fault per page) before a shard's lock is taken, not while it is held.
#[derive(Default)]
pub(crate) struct ShardCopy {
    /// String entries, their keys and values borrowed from the shard without touching their
    /// reference counts (for entries spread over memory, taking those is what made a copy under
    /// the lock slow: two cache misses per entry). Valid only while the shard keeps those buffers
    /// alive and unchanged for it, that is until [`Shard::release_snapshot_copy`].
    borrowed: Vec<BorrowedStr>,
    /// Collections (changed in place, so they cannot be borrowed): cloned, their keys borrowed
    /// like the strings'.
    collections: Vec<(*const u8, usize, Entry)>,
    /// The entries a change kept as they were at arming.
    owned: Vec<(Bytes, Entry)>,
    /// Scratch for the copy: where the live entries of changed keys keep their keys.
    changed: hashbrown::HashSet<(usize, usize)>,
}

/// A string of a [`BorrowedStr`]: a long one's shared buffer, borrowed; a short one copied
/// (it lives inside the key's block, which a change rewrites in place).
enum BorrowedValue {
    Shared { ptr: *const u8, len: usize },
    Inline(StrValue),
}

/// See [`ShardCopy::borrowed`].
struct BorrowedStr {
    key: *const u8,
    key_len: usize,
    value: BorrowedValue,
    expires_at: Option<u64>,
    meta: ItemMeta,
}

impl ShardCopy {
    /// Make room for a copy of a shard of `entries` entries of which `kept` were changed since
    /// arming (see [`Shard::snapshot_copy_len`]), with some to spare: the shard may grow before
    /// its lock is taken.
    pub(crate) fn prepare(&mut self, (entries, kept): (usize, usize)) {
        fn room<T>(v: &mut Vec<T>, wanted: usize) {
            let wanted = wanted + wanted / 4 + 64;
            if v.capacity() < wanted {
                v.reserve(wanted);
                v.spare_capacity_mut()
                    .iter_mut()
                    .for_each(|slot| *slot = std::mem::MaybeUninit::zeroed());
            }
        }
        room(&mut self.borrowed, entries);
        room(&mut self.owned, kept);
        if self.collections.capacity() < 64 {
            self.collections.reserve(64);
        }
        // (A new table's control bytes are written when it is made; its buckets, a few pages,
        // are touched as they are used.)
        self.changed.reserve(kept + kept / 4 + 64);
    }

    /// The key and what the snapshot writes of it, for every entry copied.
    ///
    /// # Safety
    /// The shard copied must not have been released since.
    pub(crate) unsafe fn iter(&self) -> impl Iterator<Item = (&[u8], ItemView<'_>)> {
        // SAFETY: the shard keeps these buffers allocated and unchanged until it is released
        // (see `Shard::copy_for_snapshot`), which the caller guarantees it is not.
        let borrowed = self.borrowed.iter().map(|b| unsafe {
            (
                std::slice::from_raw_parts(b.key, b.key_len),
                ItemView {
                    value: ValueView::Str(match &b.value {
                        BorrowedValue::Shared { ptr, len } => {
                            std::slice::from_raw_parts(*ptr, *len)
                        }
                        BorrowedValue::Inline(s) => s,
                    }),
                    expires_at: b.expires_at,
                    meta: b.meta,
                },
            )
        });
        // SAFETY: as for the strings.
        let collections = self.collections.iter().map(|(key, key_len, e)| unsafe {
            (std::slice::from_raw_parts(*key, *key_len), e.view())
        });
        borrowed
            .chain(collections)
            .chain(self.owned.iter().map(|(k, e)| (&k[..], e.view())))
    }

    /// Drop the copy (not the buffers).
    pub(crate) fn clear(&mut self) {
        self.borrowed.clear();
        self.collections.clear();
        self.owned.clear();
        self.changed.clear();
    }
}

/// Bytes of table a key costs: an 8-byte slot and a control byte, at the ~60 % fill a table
/// that doubles averages.
const SLOT_BYTES: usize = 15;
/// Bytes the expiry index costs per key with a TTL: a 16-byte B-tree element with the tree's
/// own overhead.
const EXPIRY_INDEX_BYTES: usize = 32;

/// Heap bytes `key`'s entry holding `value` takes: its block, its share of the table and the
/// value's own allocations (the expiry index is counted where it changes).
fn entry_size(key_len: usize, value: &Value) -> usize {
    alloc_class(Node::block_size(key_len)) + SLOT_BYTES + value.mem_size()
}

/// What a flushed shard held; dropping it frees the memory (do that on a background thread).
pub struct Cleared {
    _map: EntryMap,
    _expiries: BTreeSet<(u64, usize)>,
}

/// What a shard keeps for a snapshot that is armed and has not copied it yet, or has copied it
/// and is still writing it out (see [`crate::snapshot`]).
#[derive(Debug)]
pub(crate) struct PendingSnapshot {
    /// Gone if the snapshot was abandoned: the shard then stops keeping anything for it.
    sink: std::sync::Weak<crate::snapshot::SnapshotSink>,
    /// Where this shard is, for a flush that hands its contents to the sink.
    keyspace: usize,
    shard: usize,
    /// For each key changed since the snapshot was armed (or, once copied, since the copy),
    /// its entry as it was then (`None`: the key did not exist).
    before: HashMap<Bytes, Option<Entry>>,
    /// The snapshot holds a copy of this shard that borrows its string buffers: every change
    /// still keeps the entry it replaces (in `before`), and a flush keeps the old map (in
    /// `retired`), so that no buffer the copy refers to is freed or changed until the snapshot
    /// releases the shard. A block removed from the table meanwhile is kept in
    /// `retired_nodes` (the copy borrows its key).
    copied: bool,
    retired: Vec<EntryMap>,
    retired_nodes: Vec<Node>,
}

/// What a write to an entry's value did (see [`write_entry`]).
struct Written<R> {
    result: R,
    /// The value's bytes before and after.
    before: usize,
    after: usize,
    /// The value is a collection left empty (its key goes).
    empty: bool,
}

/// `f` on `entry`'s value as a write: unless `f` refuses (`Err`, having left the value as it
/// was), the entry gets `version` and, with `access`, an access. The shard's side is
/// [`Shard::wrote`]'s.
fn write_entry<R, E>(
    entry: &mut Entry,
    version: u64,
    clock: AccessClock,
    now_ms: u64,
    access: bool,
    f: impl FnOnce(&mut Value) -> Result<R, E>,
) -> Result<Written<R>, E> {
    let before = entry.value.mem_size();
    let result = f(&mut entry.value)?;
    entry.set_version(version);
    if access {
        entry.touch(clock, now_ms);
    }
    Ok(Written {
        result,
        before,
        after: entry.value.mem_size(),
        empty: entry.value.is_empty_collection(),
    })
}

/// A shard of one keyspace. See the module docs for the invariants.
#[derive(Debug, Default)]
pub struct Shard {
    map: EntryMap,
    /// (expires_at_ms, address of the entry's block) for every entry with a TTL; kept exactly
    /// in sync with `map` (a block leaves this index before it leaves the table).
    expiries: BTreeSet<(u64, usize)>,
    used_bytes: usize,
    next_version: u64,
    expired_count: u64,
    /// Set while a snapshot is armed and has not copied this shard yet.
    pending_snapshot: Option<Box<PendingSnapshot>>,
    /// Where keys reclaimed by expiry go until the server takes them (for `expired` keyspace
    /// notifications and client-side caching's invalidations): the keyspace's one log, shared
    /// by its shards, so taking it never locks a shard; None while nobody wants them.
    expired_log: Option<ExpiredLog>,
    /// How entries' access data is kept: its keyspace's clock, copied in whenever the shard is
    /// locked (`crate::keyspace`), so a policy change reaches every shard without a sweep.
    clock: AccessClock,
    /// Until this Unix ms a read leaves an expired key in place (it only reads as absent):
    /// Redis 7.2 deletes no expired key while writes are paused, so nothing reaches a replica
    /// or the log. Copied in from the keyspace whenever the shard is locked, as `clock` is.
    expiry_held_until: u64,
}

/// The keyspace's log of expired keys (see [`Shard::set_expired_log`]).
pub type ExpiredLog = std::sync::Arc<parking_lot::Mutex<Vec<Bytes>>>;

/// Most expired keys a keyspace keeps between two takes; past it the rest are not reported.
pub const EXPIRED_LOG_MAX: usize = 65536;

impl Shard {
    /// An empty shard. Versions start from the clock (Unix ms × 1024), not from 0, so a version
    /// handed out before a restart (a memcached CAS value a client still holds) is never handed
    /// out again after it: a stale `cas` fails instead of matching a different write.
    pub fn new() -> Self {
        let mut shard = Self::default();
        shard.next_version = crate::now_ms() << 10;
        shard
    }

    /// Approximate LRU (LFU under an LFU clock): look at up to `samples` keys in random slots
    /// of the table and return the one idle longest, or used least (expired keys first). None
    /// when the shard is empty.
    pub fn eviction_candidate(&mut self, samples: usize, now_ms: u64) -> Option<Bytes> {
        let clock = self.clock;
        let policy = match clock {
            AccessClock::Lru => EvictionPolicy::AllKeysLru,
            AccessClock::Lfu { .. } => EvictionPolicy::AllKeysLfu,
        };
        self.sample_victim(samples, |entry| policy.rank(entry, clock, now_ms))
    }

    /// How this shard keeps entries' access data.
    pub fn access_clock(&self) -> AccessClock {
        self.clock
    }

    /// Keep access data per `clock` from now on (existing data is reinterpreted, as Redis
    /// does when `maxmemory-policy` switches between LRU and LFU).
    pub fn set_access_clock(&mut self, clock: AccessClock) {
        self.clock = clock;
    }

    /// Until `until_ms` (Unix ms; 0: not at all) reads leave expired keys in place (see the
    /// field).
    pub fn hold_expiry_until(&mut self, until_ms: u64) {
        self.expiry_held_until = until_ms;
    }

    /// Look at up to `samples` keys in random slots and return the one `rank` scores highest
    /// (keys it scores `None` are passed over). The `maxmemory` policies rank keys this way
    /// ([`EvictionPolicy::rank`]).
    pub fn sample_victim(
        &self,
        samples: usize,
        rank: impl FnMut(&Entry) -> Option<u64>,
    ) -> Option<Bytes> {
        self.sample_victim_scored(samples, rank).map(|(_, key)| key)
    }

    /// [`Shard::sample_victim`] with the victim's score, to compare victims across shards.
    pub fn sample_victim_scored(
        &self,
        samples: usize,
        mut rank: impl FnMut(&Entry) -> Option<u64>,
    ) -> Option<(u64, Bytes)> {
        let mut best: Option<(u64, &[u8])> = None;
        let mut rng = rand::thread_rng();
        let slots = self.map.slots();
        for _ in 0..samples {
            let start = rand::Rng::gen_range(&mut rng, 0..slots.max(1));
            let Some(node) = self.map.node_near(start) else {
                break;
            };
            let Some(score) = rank(node.entry()) else {
                continue;
            };
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, node.key()));
            }
        }
        best.map(|(score, k)| (score, Bytes::copy_from_slice(k)))
    }

    fn bump(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Arm this shard (number `shard` of keyspace `keyspace`) for the snapshot `sink`. An empty
    /// shard is left alone (the snapshot copies nothing from a shard it did not arm): arming
    /// happens while every command waits, and most shards of most keyspaces are empty.
    pub(crate) fn arm_snapshot(
        &mut self,
        sink: &std::sync::Arc<crate::snapshot::SnapshotSink>,
        keyspace: usize,
        shard: usize,
    ) {
        if self.map.is_empty() {
            self.pending_snapshot = None;
            return;
        }
        let sink = std::sync::Arc::downgrade(sink);
        self.pending_snapshot = Some(Box::new(PendingSnapshot {
            sink,
            keyspace,
            shard,
            before: HashMap::new(),
            copied: false,
            retired: Vec::new(),
            retired_nodes: Vec::new(),
        }));
    }

    /// Called before `key`'s entry changes: while a snapshot waits for this shard, keep the
    /// entry as it was when the snapshot was armed (the first change of each key only).
    #[inline]
    fn preserve(&mut self, key: &[u8]) {
        let Some(pending) = self.pending_snapshot.as_deref_mut() else {
            return;
        };
        if pending.sink.strong_count() == 0 {
            self.pending_snapshot = None;
            return;
        }
        if pending.before.contains_key(key) {
            return;
        }
        let (key, entry) = match self.map.node(key) {
            Some(node) => (
                Bytes::copy_from_slice(node.key()),
                Some(node.entry().clone()),
            ),
            // Once copied, only buffers the copy may refer to need keeping.
            None if pending.copied => return,
            None => (Bytes::copy_from_slice(key), None),
        };
        pending.before.insert(key, entry);
    }

    /// If a snapshot waits for this shard, copy the shard's entries as they were when it was
    /// armed into `out` (empty), and keep every string buffer they refer to alive and unchanged
    /// until [`Shard::release_snapshot_copy`]. Long strings are borrowed (pointers, no
    /// reference count touched: the lock is held for a walk of the table and little more),
    /// short ones (held inline in their blocks, which a change rewrites) copied, collections
    /// and the entries kept for the snapshot cloned. Copies
    /// nothing if no snapshot waits (none armed, or a flush handed the contents over already).
    pub(crate) fn copy_for_snapshot(&mut self, out: &mut ShardCopy) {
        let Some(pending) = self.pending_snapshot.as_deref_mut() else {
            return;
        };
        if pending.copied || pending.sink.strong_count() == 0 {
            return;
        }
        pending.copied = true;
        let before = std::mem::take(&mut pending.before);
        // The live entries of the keys changed since arming are left out (their entries as
        // armed are in `before`). They are few; looking each live entry up in `before` would
        // hash every key of the shard, reading every key's bytes: a cache miss per entry with
        // the lock held. So the changed keys' live entries are found once, and recognised in
        // the walk by where their key is stored (address and length: two live keys never
        // share both).
        let changed = &mut out.changed;
        changed.extend(
            before
                .keys()
                .filter_map(|k| self.map.node(k))
                .map(|n| (n.key().as_ptr() as usize, n.key().len())),
        );
        for (k, e) in self.map.iter() {
            if !changed.is_empty() && changed.contains(&(k.as_ptr() as usize, k.len())) {
                continue;
            }
            match &e.value {
                // The pointers stay valid and what they point to unchanged until
                // `release_snapshot_copy`: with `copied` set, every path that changes or
                // removes an entry calls `preserve` first, which keeps a clone of the entry
                // (its value) in `before`; a removed block (its key) goes to `retired_nodes`;
                // a flush moves the map into `retired`; a dropped shard hands all of them to
                // the sink (see `Drop for Shard`); and a string's buffer is never changed in
                // place while another `Bytes` refers to it (the clone in `before`).
                Value::Str(v) => out.borrowed.push(BorrowedStr {
                    key: k.as_ptr(),
                    key_len: k.len(),
                    // A short string lives in the block, which a change rewrites: copied.
                    value: if v.is_inline() {
                        BorrowedValue::Inline(v.clone())
                    } else {
                        BorrowedValue::Shared {
                            ptr: v.as_ptr(),
                            len: v.len(),
                        }
                    },
                    expires_at: e.expires_at(),
                    meta: e.meta(),
                }),
                // A small list's clone copies its one buffer (at most ~8 KiB); a large list's
                // shares its packs (see `crate::list`).
                Value::Hash(_)
                | Value::ZSet(_)
                | Value::List(_)
                | Value::Set(_)
                | Value::Stream(_) => out.collections.push((k.as_ptr(), k.len(), e.clone())),
            }
        }
        out.owned
            .extend(before.into_iter().filter_map(|(k, e)| Some((k, e?))));
    }

    /// How many entries, and how many kept for the snapshot, [`Shard::copy_for_snapshot`] would
    /// copy now (see [`ShardCopy::prepare`]).
    pub(crate) fn snapshot_copy_len(&self) -> (usize, usize) {
        let kept = self.pending_snapshot.as_ref().map_or(0, |p| p.before.len());
        (self.map.len(), kept)
    }

    /// The snapshot is done with its copy of this shard: stop keeping entries for it. Returns
    /// what was kept, to be dropped after the shard's lock is released.
    pub(crate) fn release_snapshot_copy(&mut self) -> Option<Box<PendingSnapshot>> {
        if self.pending_snapshot.as_ref().is_some_and(|p| p.copied) {
            self.pending_snapshot.take()
        } else {
            None
        }
    }

    /// Bytes `key` and its value take (MEMORY USAGE): its block, its share of the table, the
    /// value's allocations and its place in the expiry index. None when the key is not live.
    pub fn memory_usage(&mut self, key: &[u8], now_ms: u64) -> Option<usize> {
        let entry = self.live_mut(key, now_ms)?;
        let expiry = if entry.expires_at().is_some() {
            EXPIRY_INDEX_BYTES
        } else {
            0
        };
        Some(entry_size(key.len(), &entry.value) + entry.ext_bytes() + expiry)
    }

    /// Bytes of this shard's table itself (slots and control bytes) and of its expiry index:
    /// the overhead MEMORY STATS reports beside the data.
    pub fn overhead_bytes(&self) -> (usize, usize) {
        (
            self.map.table_bytes(),
            self.expiries.len() * EXPIRY_INDEX_BYTES,
        )
    }

    /// Number of entries, including expired ones not yet reclaimed.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Approximate bytes held by keys and values.
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }
    /// Number of entries with a TTL.
    pub fn volatile_count(&self) -> usize {
        self.expiries.len()
    }
    /// Keys reclaimed because their TTL ran out (lazily or by the sweep).
    pub fn expired_count(&self) -> u64 {
        self.expired_count
    }

    /// Remove `key` if it is expired; true when it was.
    fn expire_if_needed(&mut self, key: &[u8], now_ms: u64) -> bool {
        let expired = matches!(self.map.get(key), Some(e) if e.is_expired(now_ms));
        if expired {
            self.remove_entry(key);
            self.expired_count += 1;
            self.log_expired(key);
        }
        expired
    }

    /// For a read: whether `key` is expired (it reads as absent then). It is reclaimed as
    /// [`Shard::expire_if_needed`] does, unless expiry is held (writes paused): then it stays.
    fn expired_for_read(&mut self, key: &[u8], now_ms: u64) -> bool {
        if now_ms < self.expiry_held_until {
            return matches!(self.map.get(key), Some(e) if e.is_expired(now_ms));
        }
        self.expire_if_needed(key, now_ms)
    }

    fn log_expired(&mut self, key: &[u8]) {
        if let Some(log) = &self.expired_log {
            let mut log = log.lock();
            if log.len() < EXPIRED_LOG_MAX {
                log.push(Bytes::copy_from_slice(key));
            }
        }
    }

    /// Keep the keys expiry reclaims in `log` (None: stop keeping them). Lock order: a
    /// shard's lock, then the log's.
    pub fn set_expired_log(&mut self, log: Option<ExpiredLog>) {
        self.expired_log = log;
    }

    fn remove_entry(&mut self, key: &[u8]) -> Option<Entry> {
        self.preserve(key);
        let node = self.map.remove(key)?;
        if let Some(t) = node.entry().expires_at() {
            self.expiries.remove(&(t, node.addr()));
            self.used_bytes -= EXPIRY_INDEX_BYTES;
        }
        self.used_bytes -= entry_size(node.key().len(), &node.entry().value);
        self.used_bytes -= node.entry().ext_bytes();
        match self.pending_snapshot.as_deref_mut() {
            // A snapshot's copy may borrow this block's key: keep the block, its entry taken
            // out (what the copy borrows of the value is kept alive by the clone `preserve`
            // put in `before`).
            Some(pending) if pending.copied => {
                let mut node = node;
                let emptied = Entry::new(Value::Str(StrValue::new()), None, 0, 0);
                let entry = std::mem::replace(node.entry_mut(), emptied);
                pending.retired_nodes.push(node);
                Some(entry)
            }
            _ => Some(node.into_entry()),
        }
    }

    /// The live entry for `key`, reclaiming it first if it expired.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let clock = self.clock;
        let entry = self.live_mut(key, now_ms)?;
        entry.touch(clock, now_ms);
        Some(entry)
    }

    /// The live entry of `key` in one hash lookup, unchanged; an expired one is dealt with as
    /// [`Shard::expired_for_read`] does and reads as absent. (Checked code needs two lookups
    /// here: the borrow checker cannot see that the expired path hands out no borrow.)
    fn live_mut(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let entry: *mut Entry = self.map.get_mut(key)?;
        // SAFETY: `entry` points into a block `self.map` owns, valid until the map is touched
        // again. The expired path reads it before touching `self` and never after; the live
        // path turns it into a borrow tied to `&mut self`, so nothing can touch the map while
        // that borrow lives.
        if unsafe { (*entry).is_expired(now_ms) } {
            self.expired_for_read(key, now_ms);
            return None;
        }
        Some(unsafe { &mut *entry })
    }

    /// Whether `key` holds a live entry, changing nothing (an expired one is left for expiry).
    pub fn is_live(&self, key: &[u8], now_ms: u64) -> bool {
        self.map.get(key).is_some_and(|e| !e.is_expired(now_ms))
    }

    /// The live entry for `key` without counting an access (OBJECT looks at a key this way):
    /// its last-access time stays as it was. An expired key is reclaimed first.
    pub fn peek(&mut self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        self.live_mut(key, now_ms).map(|e| &*e)
    }

    /// The sorted set at `key` becomes a skiplist if it is a listpack (Redis' SORT converts the
    /// sorted set it sorts). Its members and scores do not change: no new version, nothing to log
    /// or snapshot; only its memory is accounted anew.
    pub fn zset_to_skiplist(&mut self, key: &[u8]) {
        if let Some(Entry {
            value: Value::ZSet(z),
            ..
        }) = self.map.get_mut(key)
        {
            let before = z.mem_size();
            z.convert_to_skiplist();
            self.used_bytes = self.used_bytes + z.mem_size() - before;
        }
    }

    /// The live entry for `key` as a memcached read sees it, with its meta state and its
    /// seconds since the last access *before* this read; `bump` marks it fetched and accessed
    /// now (meta `u` skips that), and its version (memcached's CAS value). One hash lookup.
    pub fn fetch(
        &mut self,
        key: &[u8],
        now_ms: u64,
        bump: bool,
    ) -> Option<(&Entry, ItemMeta, u64, u64)> {
        let (clock, newest) = (self.clock, self.next_version);
        let entry = self.live_mut(key, now_ms)?;
        let before = entry.meta();
        let idle_s = u64::from(entry.idle_ticks_by(clock, now_ms)) / 100;
        if bump {
            let meta = ItemMeta {
                bits: before.bits | ItemMeta::FETCHED,
                ..before
            };
            entry.set_meta(meta, newest);
            entry.touch(clock, now_ms);
        }
        let version = full_version(entry.stored_version(), newest);
        Some((&*entry, before, idle_s, version))
    }

    /// Version of `key` for WATCH: 0 when absent or expired. Not an access (Redis' WATCH and
    /// EXEC's check look at keys without touching them).
    pub fn version_of(&mut self, key: &[u8], now_ms: u64) -> u64 {
        let newest = self.next_version;
        self.peek(key, now_ms)
            .map_or(0, |e| full_version(e.stored_version(), newest))
    }

    /// Apply `f` to the live value of `key`. Returns None when the key is absent. The entry's version
    /// is bumped and memory re-accounted; a collection left empty is deleted.
    pub fn modify<R>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        f: impl FnOnce(&mut Value) -> R,
    ) -> Option<R> {
        self.try_modify(key, now_ms, |v| Ok::<R, Infallible>(f(v)))
            .map(|r| match r {
                Ok(result) => result,
                Err(never) => match never {},
            })
    }

    /// [`Shard::modify`] for a write that may refuse the value it finds (a wrong type): `f`
    /// must leave the value as it was when it returns `Err`, and then nothing changes, as in
    /// [`Shard::try_upsert`]. None when the key is absent. One hash lookup on the common path
    /// (expiry is checked on the entry itself), so a command needs no type check before it.
    pub fn try_modify<R, E>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        f: impl FnOnce(&mut Value) -> Result<R, E>,
    ) -> Option<Result<R, E>> {
        match self.write_live(key, now_ms, f) {
            Ok(result) => Some(result),
            Err((_, expired)) => {
                if expired {
                    self.expire_if_needed(key, now_ms);
                }
                None
            }
        }
    }

    /// Apply `f` to the value of `key`, creating it with `create()` (and no TTL) when absent.
    /// Returns `f`'s result; a collection left empty (e.g. `f` failed on a new value) is deleted.
    pub fn upsert<R>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        create: impl FnOnce() -> Value,
        f: impl FnOnce(&mut Value) -> R,
    ) -> R {
        match self.try_upsert(key, now_ms, create, |v| Ok::<R, Infallible>(f(v))) {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// [`Shard::upsert`] for a write that may refuse the value it finds (a wrong type, a string
    /// that is not a number): `f` must leave the value as it was when it returns `Err`, and
    /// then nothing changes (no new version, so a WATCH of the key still holds). A live key
    /// costs one hash lookup, so a command needs no separate type check before it.
    pub fn try_upsert<R, E>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        create: impl FnOnce() -> Value,
        f: impl FnOnce(&mut Value) -> Result<R, E>,
    ) -> Result<R, E> {
        let f = match self.write_live(key, now_ms, f) {
            Ok(result) => return result,
            Err((f, expired)) => {
                if expired {
                    self.expire_if_needed(key, now_ms);
                }
                f
            }
        };
        // Absent or expired: a new value, which `f` may still refuse (then it goes again).
        let value = create();
        self.used_bytes += entry_size(key.len(), &value);
        let version = self.bump();
        let meta = ItemMeta::default();
        let entry = Entry::with_meta(value, None, version, meta, self.clock, now_ms);
        self.map.insert_new(Node::new(key, entry));
        // A key just created is not accessed as well (Redis: the write's lookup found nothing;
        // a new key's LFU counter starts at LFU_INIT_VAL).
        let result = self.apply(key, now_ms, false, f);
        if result.is_err() {
            self.remove_entry(key);
        }
        result
    }

    /// `f` on the value of `key`, which the caller has checked is present and live; `access`:
    /// the write counts as an access.
    fn apply<R>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        access: bool,
        f: impl FnOnce(&mut Value) -> R,
    ) -> R {
        let version = self.next_version + 1;
        let clock = self.clock;
        let Some(entry) = self.map.get_mut(key) else {
            unreachable!("apply: caller checked that the key is present")
        };
        let Ok(written) = write_entry(entry, version, clock, now_ms, access, |v| {
            Ok::<R, Infallible>(f(v))
        });
        self.wrote(key, version, &written);
        written.result
    }

    /// `f` on the value of `key` if it is live, as a write (see [`write_entry`]), in one hash
    /// lookup; `Err((f, expired))` gives `f` back when the key is absent or expired (left as it
    /// is: `expired` says there is an entry to reclaim).
    fn write_live<R, E, F: FnOnce(&mut Value) -> Result<R, E>>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        f: F,
    ) -> Result<Result<R, E>, (F, bool)> {
        self.preserve(key);
        let version = self.next_version + 1;
        let clock = self.clock;
        match self.map.get_mut(key) {
            Some(entry) if !entry.is_expired(now_ms) => Ok(write_entry(
                entry, version, clock, now_ms, true, f,
            )
            .map(|written| {
                self.wrote(key, version, &written);
                written.result
            })),
            Some(_) => Err((f, true)),
            None => Err((f, false)),
        }
    }

    /// The shard's side of a write [`write_entry`] made to `key` with `version`: the version
    /// handed out, the value's bytes re-accounted, a collection left empty deleted.
    fn wrote<R>(&mut self, key: &[u8], version: u64, written: &Written<R>) {
        self.next_version = version;
        self.used_bytes = self.used_bytes + written.after - written.before;
        if written.empty {
            self.remove_entry(key);
        }
    }

    /// Store `value` under `key` with the given expiry, replacing any previous entry (whose value is
    /// returned if it was live). Replacing a live key is an access of it, and its access data
    /// carries over (Redis' `setKey`: the write's lookup touches the key, and `dbSetValue` keeps
    /// the old object's LRU/LFU field); a new key starts fresh (LFU: at [`LFU_INIT_VAL`]).
    pub fn set(
        &mut self,
        key: &[u8],
        value: Value,
        expires_at: Option<u64>,
        now_ms: u64,
    ) -> Option<Entry> {
        self.set_with_meta(key, value, expires_at, ItemMeta::default(), now_ms)
    }

    /// [`Shard::set`] with memcached client flags and meta state (one hash lookup).
    pub fn set_with_meta(
        &mut self,
        key: &[u8],
        value: Value,
        expires_at: Option<u64>,
        meta: ItemMeta,
        now_ms: u64,
    ) -> Option<Entry> {
        self.preserve(key);
        let version = self.next_version + 1;
        self.next_version = version;
        let clock = self.clock;
        let mut new = Entry::with_meta(value, expires_at, version, meta, clock, now_ms);
        // Overwrite in place when the key exists: one hash lookup, no key copy.
        if let Some(node) = self.map.node_mut(key) {
            let addr = node.addr();
            let entry = node.entry_mut();
            let was_expired = entry.is_expired(now_ms);
            if !was_expired {
                new.set_access_data(entry.access_data());
                new.touch(clock, now_ms);
            }
            self.used_bytes = self.used_bytes - entry.value.mem_size() - entry.ext_bytes()
                + new.value.mem_size()
                + new.ext_bytes();
            if entry.expires_at() != new.expires_at() {
                if let Some(t) = entry.expires_at() {
                    self.expiries.remove(&(t, addr));
                    self.used_bytes -= EXPIRY_INDEX_BYTES;
                }
                if let Some(t) = expires_at {
                    self.expiries.insert((t, addr));
                    self.used_bytes += EXPIRY_INDEX_BYTES;
                }
            }
            let old = std::mem::replace(entry, new);
            if was_expired {
                self.expired_count += 1;
                self.log_expired(key);
                return None;
            }
            return Some(old);
        }
        self.used_bytes += entry_size(key.len(), &new.value) + new.ext_bytes();
        let node = self.map.insert_new(Node::new(key, new));
        if let Some(t) = expires_at {
            self.expiries.insert((t, node.addr()));
            self.used_bytes += EXPIRY_INDEX_BYTES;
        }
        None
    }

    /// Store an entry taken from another keyspace (MOVE, SWAPDB) under `key`: its value, expiry,
    /// memcached state and last access go with it; it gets a new version of this shard (so a
    /// WATCH of `key` here sees the change). Returns the entry it replaced, if that was live.
    pub fn adopt(&mut self, key: &[u8], entry: Entry, now_ms: u64) -> Option<Entry> {
        let (stamp, expires_at, meta) = (entry.stamp(), entry.expires_at(), entry.meta());
        let old = self.set_with_meta(key, entry.value, expires_at, meta, now_ms);
        if let Some(adopted) = self.map.get_mut(key) {
            adopted.set_stamp(stamp);
        }
        old
    }

    /// An entry's version in full (see [`Entry`]).
    pub fn full_version(&self, stored: StoredVersion) -> u64 {
        full_version(stored, self.next_version)
    }

    /// The version given to the latest write in this shard (after `set`: the new entry's).
    pub fn last_version(&self) -> u64 {
        self.next_version
    }

    /// Make `key` look idle for `idle_ms` at `now_ms` (RESTORE … IDLETIME): its last access is
    /// set that far back. False when the key is not there, or under an LFU clock, where Redis'
    /// `objectSetLRUOrLFU` ignores an idle time too.
    pub fn set_idle(&mut self, key: &[u8], idle_ms: u64, now_ms: u64) -> bool {
        if self.clock.is_lfu() {
            return false;
        }
        self.set_access_data(key, access_tick(now_ms.saturating_sub(idle_ms)), now_ms)
    }

    /// Give `key` the LFU counter `freq` as of now (RESTORE … FREQ). False when the key is not
    /// there, or under an LRU clock, where Redis ignores a frequency too.
    pub fn set_frequency(&mut self, key: &[u8], freq: u8, now_ms: u64) -> bool {
        if !self.clock.is_lfu() {
            return false;
        }
        self.set_access_data(key, lfu_minutes(now_ms) << 8 | u32::from(freq), now_ms)
    }

    fn set_access_data(&mut self, key: &[u8], data: u32, now_ms: u64) -> bool {
        self.expire_if_needed(key, now_ms);
        self.preserve(key);
        match self.map.get_mut(key) {
            Some(e) => {
                e.set_access_data(data);
                true
            }
            None => false,
        }
    }

    /// The memcached meta state of a live key, for changes that are not writes of the value
    /// (fetched/last-access marks, the recache win): the version is not bumped.
    pub fn update_meta(
        &mut self,
        key: &[u8],
        now_ms: u64,
        change: impl FnOnce(&mut ItemMeta),
    ) -> bool {
        if self.expired_for_read(key, now_ms) {
            return false;
        }
        self.preserve(key);
        let Some(entry) = self.map.get_mut(key) else {
            return false;
        };
        let mut meta = entry.meta();
        change(&mut meta);
        let ext_before = entry.ext_bytes();
        entry.set_meta(meta, self.next_version);
        self.used_bytes = self.used_bytes + entry.ext_bytes() - ext_before;
        true
    }

    /// Give a live key a new version (memcached: a new CAS value), `explicit` when the client
    /// chose it (meta `E`); later versions of this shard stay above it. Returns the version.
    pub fn renew_version(&mut self, key: &[u8], explicit: Option<u64>, now_ms: u64) -> Option<u64> {
        self.expire_if_needed(key, now_ms);
        let version = explicit.unwrap_or(self.next_version + 1);
        let entry = self.map.get_mut(key)?;
        let ext_before = entry.ext_bytes();
        let mut fields = entry.full_fields(self.next_version);
        fields.version = version;
        self.next_version = self.next_version.max(version);
        entry.store_as(fields, self.next_version);
        self.used_bytes = self.used_bytes + entry.ext_bytes() - ext_before;
        Some(version)
    }

    /// Delete `key`; returns the entry if it was live.
    pub fn remove(&mut self, key: &[u8], now_ms: u64) -> Option<Entry> {
        if self.expire_if_needed(key, now_ms) {
            return None;
        }
        self.remove_entry(key)
    }

    /// Change the TTL of a live key (None = persist). Returns false when the key is absent.
    pub fn set_expiry(&mut self, key: &[u8], expires_at: Option<u64>, now_ms: u64) -> bool {
        self.expire_if_needed(key, now_ms);
        self.preserve(key);
        let version = self.next_version + 1;
        let Some(node) = self.map.node_mut(key) else {
            return false;
        };
        let addr = node.addr();
        let entry = node.entry_mut();
        if let Some(t) = entry.expires_at() {
            self.expiries.remove(&(t, addr));
            self.used_bytes -= EXPIRY_INDEX_BYTES;
        }
        if let Some(t) = expires_at {
            self.expiries.insert((t, addr));
            self.used_bytes += EXPIRY_INDEX_BYTES;
        }
        let ext_before = entry.ext_bytes();
        let mut fields = entry.full_fields(self.next_version);
        fields.expires_at = expires_at.unwrap_or(NO_EXPIRY);
        fields.version = version;
        entry.store_as(fields, version);
        self.used_bytes = self.used_bytes + entry.ext_bytes() - ext_before;
        self.next_version = version;
        true
    }

    /// Remove up to `budget` expired keys, earliest first. Returns how many were removed.
    pub fn sweep_expired(&mut self, now_ms: u64, budget: usize) -> usize {
        self.sweep_expired_with(now_ms, budget, |_| {})
    }

    /// [`Shard::sweep_expired`], calling `removed` with each key it removes (a primary streams
    /// a DEL of each to its replicas).
    pub fn sweep_expired_with(
        &mut self,
        now_ms: u64,
        budget: usize,
        mut on_removed: impl FnMut(&Bytes),
    ) -> usize {
        let mut removed = 0;
        while removed < budget {
            let Some(&(t, addr)) = self.expiries.first() else {
                break;
            };
            if t > now_ms {
                break;
            }
            // SAFETY: a block in the expiry index is in the table, hence alive; the key is
            // copied before anything is removed.
            let key = Bytes::copy_from_slice(unsafe { key_of(addr) });
            self.remove_entry(&key);
            self.expired_count += 1;
            self.log_expired(&key);
            on_removed(&key);
            removed += 1;
        }
        removed
    }

    /// Drop every entry in O(1): the old contents are handed back so the caller can free them off
    /// the request path.
    pub fn clear(&mut self) -> Cleared {
        self.used_bytes = 0;
        // Keep versions monotonic across a flush so WATCH still sees later changes.
        self.next_version += 1;
        let mut map = std::mem::take(&mut self.map);
        if let Some(mut pending) = self.pending_snapshot.take() {
            if let Some(sink) = pending.sink.upgrade() {
                if pending.copied {
                    // The snapshot's copy still reads the old buffers: keep them for it.
                    pending.retired.push(std::mem::take(&mut map));
                    self.pending_snapshot = Some(pending);
                } else {
                    // A waiting snapshot takes the flushed contents as its copy (moved, not
                    // copied), with the changes made since it was armed undone.
                    for (key, entry) in pending.before {
                        match entry {
                            Some(entry) => drop(map.insert(&key, entry)),
                            None => drop(map.remove(&key)),
                        }
                    }
                    sink.deposit(pending.keyspace, pending.shard, std::mem::take(&mut map));
                }
            }
        }
        Cleared {
            _map: map,
            _expiries: std::mem::take(&mut self.expiries),
        }
    }

    /// Iterate live entries (expired-but-unreclaimed ones are skipped).
    pub fn iter_live(&self, now_ms: u64) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.map.iter().filter(move |(_, e)| !e.is_expired(now_ms))
    }

    /// The underlying map, for cursor scans (callers must skip expired entries themselves).
    pub fn map(&self) -> &EntryMap {
        &self.map
    }

    /// The type of the live value at `key`, if any (read-only: counts no access, reclaims nothing).
    pub fn live_kind(&self, key: &[u8], now_ms: u64) -> Option<ValueKind> {
        self.map
            .get(key)
            .filter(|e| !e.is_expired(now_ms))
            .map(|e| e.value.kind())
    }

    /// True when a live entry exists for `key` (read-only: does not reclaim).
    pub fn contains_live(&self, key: &[u8], now_ms: u64) -> bool {
        matches!(self.map.get(key), Some(e) if !e.is_expired(now_ms))
    }
}

impl Drop for Shard {
    /// A shard dropped (or replaced) while a snapshot's copy borrows its strings hands its
    /// contents to the snapshot, which drops them when it is done.
    fn drop(&mut self) {
        if let Some(mut pending) = self.pending_snapshot.take() {
            if pending.copied {
                if let Some(sink) = pending.sink.upgrade() {
                    pending.retired.push(std::mem::take(&mut self.map));
                    sink.retire(*pending);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(StrValue::from(v))
    }

    #[test]
    fn lazy_expiry_and_accounting() {
        let mut sh = Shard::new();
        sh.set(b"a", s("1"), Some(100), 0);
        sh.set(b"b", s("22"), None, 0);
        assert!(sh.get(b"a", 99).is_some());
        assert!(sh.get(b"a", 100).is_none());
        assert_eq!(sh.len(), 1);
        assert_eq!(sh.volatile_count(), 0);
        sh.remove(b"b", 0);
        assert_eq!(sh.used_bytes(), 0);
    }

    /// `try_upsert` (HSET's and INCR's one-lookup write): a refusal changes nothing, not even
    /// the version a WATCH compares; a refused new value does not stay behind.
    #[test]
    fn try_upsert_refusal_changes_nothing() {
        let mut sh = Shard::new();
        sh.set(b"k", s("abc"), Some(5_000), 0);
        let version = sh.version_of(b"k", 1);
        let refused: Result<(), &str> = sh.try_upsert(b"k", 1, || s("0"), |_| Err("no"));
        assert_eq!(refused, Err("no"));
        assert_eq!(sh.version_of(b"k", 1), version);
        let done: Result<usize, ()> = sh.try_upsert(
            b"k",
            2,
            || s("0"),
            |v| {
                *v = s("abcd");
                Ok(4)
            },
        );
        assert_eq!(done, Ok(4));
        assert!(sh.version_of(b"k", 2) > version);
        assert_eq!(
            sh.get(b"k", 2).and_then(|e| e.expires_at()),
            Some(5_000),
            "TTL kept"
        );
        let refused: Result<(), ()> = sh.try_upsert(b"new", 3, || s("0"), |_| Err(()));
        assert!(refused.is_err());
        assert!(sh.get(b"new", 3).is_none());
    }

    /// Redis' pause.tcl "Test both active and passive expires are skipped during client
    /// pause": while expiry is held a read sees an expired key as absent and leaves it in place.
    #[test]
    fn passive_expiry_is_held_while_writes_are_paused() {
        let mut sh = Shard::new();
        sh.set(b"a", s("1"), Some(100), 0);
        sh.hold_expiry_until(1_000);
        assert!(sh.get(b"a", 200).is_none());
        assert!(sh.peek(b"a", 200).is_none());
        assert!(sh.fetch(b"a", 200, true).is_none());
        assert!(sh.memory_usage(b"a", 200).is_none());
        assert_eq!((sh.len(), sh.expired_count()), (1, 0));
        // Lifted, the next read reclaims it.
        sh.hold_expiry_until(0);
        assert!(sh.get(b"a", 200).is_none());
        assert_eq!((sh.len(), sh.expired_count()), (0, 1));
        // The hold ends by itself at its end.
        sh.set(b"b", s("1"), Some(100), 0);
        sh.hold_expiry_until(300);
        assert!(sh.get(b"b", 300).is_none());
        assert_eq!((sh.len(), sh.expired_count()), (0, 2));
    }

    #[test]
    fn sweep_removes_only_due_keys() {
        let mut sh = Shard::new();
        for i in 0..10u64 {
            sh.set(format!("k{i}").as_bytes(), s("v"), Some(i * 10), 0);
        }
        assert_eq!(sh.sweep_expired(45, 100), 5);
        assert_eq!(sh.len(), 5);
        assert_eq!(sh.sweep_expired(1000, 2), 2);
        assert_eq!(sh.len(), 3);
    }

    #[test]
    fn sweep_reports_each_key_it_removes_earliest_first() {
        let mut sh = Shard::new();
        for i in 0..5u64 {
            sh.set(format!("k{i}").as_bytes(), s("v"), Some(100 - i * 10), 0);
        }
        sh.set(b"forever", s("v"), None, 0);
        let mut removed = Vec::new();
        assert_eq!(
            sh.sweep_expired_with(85, 100, |k| removed.push(k.clone())),
            3
        );
        assert_eq!(
            removed,
            [
                Bytes::from_static(b"k4"),
                Bytes::from_static(b"k3"),
                Bytes::from_static(b"k2")
            ]
        );
        assert_eq!(sh.len(), 3);
    }

    #[test]
    fn versions_change_on_every_write() {
        let mut sh = Shard::new();
        sh.set(b"k", s("v"), None, 0);
        let v1 = sh.version_of(b"k", 0);
        sh.modify(b"k", 0, |_| ());
        let v2 = sh.version_of(b"k", 0);
        sh.set_expiry(b"k", Some(50), 0);
        let v3 = sh.version_of(b"k", 0);
        assert!(v1 < v2 && v2 < v3);
        assert_eq!(sh.version_of(b"k", 60), 0);
    }

    /// What `used_bytes` must be: every live key's MEMORY USAGE.
    fn accounted(sh: &mut Shard, keys: &[&[u8]]) -> usize {
        keys.iter().filter_map(|k| sh.memory_usage(k, 0)).sum()
    }

    #[test]
    fn a_plain_key_keeps_its_metadata_in_the_entry_and_a_ttl_or_flags_move_it_out() {
        assert_eq!(std::mem::size_of::<Entry>(), 48);
        let mut sh = Shard::new();
        sh.set(b"k", s("v"), None, 0);
        assert_eq!(sh.map.get(b"k").unwrap().meta.kind_name(), "inline");
        sh.set_expiry(b"k", Some(5_000), 0);
        let e = sh.map.get(b"k").unwrap();
        assert_eq!(e.meta.kind_name(), "small");
        assert_eq!(e.ext_bytes(), 16);
        assert_eq!(e.expires_at(), Some(5_000));
        assert_eq!(accounted(&mut sh, &[b"k"]), sh.used_bytes());
        sh.set_expiry(b"k", None, 0);
        assert_eq!(
            sh.map.get(b"k").unwrap().meta.kind_name(),
            "inline",
            "PERSIST"
        );
        assert_eq!(accounted(&mut sh, &[b"k"]), sh.used_bytes());

        let meta = ItemMeta {
            client_flags: 0xdead_beef,
            bits: ItemMeta::STALE,
        };
        sh.set_with_meta(b"m", s("v"), None, meta, 0);
        let e = sh.map.get(b"m").unwrap();
        assert_eq!(e.meta(), meta);
        assert_eq!((e.meta.kind_name(), e.ext_bytes()), ("big", 24));
        assert_eq!(accounted(&mut sh, &[b"k", b"m"]), sh.used_bytes());
        sh.update_meta(b"m", 0, |m| m.client_flags = 0);
        let e = sh.map.get(b"m").unwrap();
        assert_eq!(e.meta.kind_name(), "inline", "flags cleared");
        assert!(e.meta().has(ItemMeta::STALE));
        assert_eq!(accounted(&mut sh, &[b"k", b"m"]), sh.used_bytes());
        sh.remove(b"k", 0);
        sh.remove(b"m", 0);
        assert_eq!(sh.used_bytes(), 0);
    }

    #[test]
    fn the_access_stamp_survives_every_change_of_where_the_metadata_is_kept() {
        let mut sh = Shard::new();
        sh.set(b"k", s("v"), None, 1_000);
        sh.update_meta(b"k", 0, |m| m.bits |= ItemMeta::WIN_SENT);
        sh.set_expiry(b"k", Some(1 << 50), 0);
        sh.update_meta(b"k", 0, |m| m.client_flags = 7);
        sh.set_expiry(b"k", None, 0);
        let e = sh.peek(b"k", 0).unwrap();
        assert_eq!(e.idle_ticks(61_000), 6_000);
        assert_eq!(e.meta().bits, ItemMeta::WIN_SENT);
        assert_eq!(e.meta().client_flags, 7);
    }

    #[test]
    fn a_version_kept_in_31_bits_reads_back_exactly_and_a_chosen_one_in_full() {
        let mut sh = Shard::new();
        sh.set(b"k", s("v"), None, 0);
        let v = sh.version_of(b"k", 0);
        assert_eq!(v, sh.last_version());
        // Two billion versions handed out elsewhere: still exact up to 2^31 - 1 of them.
        sh.next_version += VERSION_MASK;
        assert_eq!(sh.version_of(b"k", 0), v);
        // One more and a 31-bit version can no longer be told from a newer one: it reads as
        // newer (a stale WATCH or CAS fails), never as an older version.
        sh.next_version += 1;
        assert!(sh.version_of(b"k", 0) > v);
        // A version a client chose (meta `E`) is kept in full, however old.
        assert_eq!(sh.renew_version(b"k", Some(3), 0), Some(3));
        assert_eq!(sh.map.get(b"k").unwrap().meta.kind_name(), "big");
        sh.next_version += 10 * VERSION_MASK;
        assert_eq!(sh.version_of(b"k", 0), 3);
        // The next write gives it the shard's newest version again.
        sh.modify(b"k", 0, |_| ());
        let w = sh.version_of(b"k", 0);
        assert_eq!(w, sh.last_version());
        assert_eq!(accounted(&mut sh, &[b"k"]), sh.used_bytes());
        // A key with a TTL keeps 31 bits beside its expiry, read back the same way.
        sh.set(b"t", s("v"), Some(1 << 50), 0);
        assert_eq!(sh.map.get(b"t").unwrap().meta.kind_name(), "small");
        let t = sh.version_of(b"t", 0);
        sh.next_version += VERSION_MASK;
        assert_eq!(sh.version_of(b"t", 0), t);
        sh.next_version += 1;
        assert!(sh.version_of(b"t", 0) > t);
        assert_eq!(accounted(&mut sh, &[b"k", b"t"]), sh.used_bytes());
    }

    #[test]
    fn versions_never_repeat_across_writes_whatever_their_low_bits() {
        let mut sh = Shard::new();
        let mut seen = std::collections::HashSet::new();
        for round in 0..200u64 {
            sh.set(b"k", s("v"), (round % 3 == 0).then_some(1 << 50), 0);
            assert!(seen.insert(sh.version_of(b"k", 0)), "round {round}");
            // Versions handed out to other keys, past a wrap of the 31 bits now and then.
            sh.next_version += if round % 7 == 0 { VERSION_MASK } else { 3 };
        }
    }

    #[test]
    fn empty_collection_is_deleted() {
        let mut sh = Shard::new();
        sh.upsert(
            b"h",
            0,
            || Value::Hash(Default::default()),
            |v| {
                if let Value::Hash(h) = v {
                    h.insert(b"f", b"v", Default::default());
                }
            },
        );
        assert_eq!(sh.len(), 1);
        sh.modify(b"h", 0, |v| {
            if let Value::Hash(h) = v {
                h.remove(b"f");
            }
        });
        assert_eq!(sh.len(), 0);
        assert_eq!(sh.used_bytes(), 0);
    }

    /// Redis' defaults: `lfu-log-factor` 10, `lfu-decay-time` 1.
    const LFU: AccessClock = AccessClock::Lfu {
        log_factor: 10,
        decay_time: 1,
    };
    /// A time on a whole minute, so minute arithmetic in the tests is exact.
    const T0: u64 = 1_700_000_040_000;
    const MINUTE: u64 = 60_000;

    fn freq(sh: &mut Shard, key: &[u8], now: u64) -> u8 {
        sh.peek(key, now).expect("live").frequency(1, now)
    }

    #[test]
    fn lfu_new_key_starts_at_init_val_and_its_first_access_counts() {
        let mut sh = Shard::new();
        sh.set_access_clock(LFU);
        sh.set(b"k", s("v"), None, T0);
        assert_eq!(freq(&mut sh, b"k", T0), LFU_INIT_VAL);
        // At or under LFU_INIT_VAL an access always increments (Redis' LFULogIncr).
        sh.get(b"k", T0);
        assert_eq!(freq(&mut sh, b"k", T0), LFU_INIT_VAL + 1);
        // A key a write creates is not also accessed by it (Redis: `lookupKeyWrite` found
        // nothing).
        sh.upsert(b"h", T0, || s("v"), |_| ());
        assert_eq!(freq(&mut sh, b"h", T0), LFU_INIT_VAL);
        sh.modify(b"h", T0, |_| ());
        assert_eq!(freq(&mut sh, b"h", T0), LFU_INIT_VAL + 1);
    }

    #[test]
    fn lfu_overwrite_keeps_the_counter_and_counts_as_an_access() {
        let mut sh = Shard::new();
        sh.set_access_clock(LFU);
        sh.set(b"k", s("v"), None, T0);
        sh.set_frequency(b"k", 100, T0);
        sh.set(b"k", s("w"), None, T0);
        assert!((100..=101).contains(&freq(&mut sh, b"k", T0)));
        // Deleted and added anew, it starts over.
        sh.remove(b"k", T0);
        sh.set(b"k", s("v"), None, T0);
        assert_eq!(freq(&mut sh, b"k", T0), LFU_INIT_VAL);
    }

    #[test]
    fn lfu_counter_decays_one_per_decay_time_minutes() {
        let mut sh = Shard::new();
        sh.set_access_clock(LFU);
        sh.set(b"k", s("v"), None, T0);
        assert!(sh.set_frequency(b"k", 100, T0));
        let entry = sh.peek(b"k", T0).expect("live");
        assert_eq!(entry.frequency(1, T0 + 3 * MINUTE + 59_000), 97);
        assert_eq!(entry.frequency(2, T0 + 3 * MINUTE), 99);
        assert_eq!(
            entry.frequency(0, T0 + 300 * MINUTE),
            100,
            "0: never decays"
        );
        assert_eq!(entry.frequency(1, T0 + 300 * MINUTE), 0);
        // The 16-bit minutes clock wraps: a decrement time "ahead" of now was before the wrap.
        assert_eq!(lfu_elapsed(65_530, 3 * MINUTE), 8);
        // An access decays first, then increments, and restarts the decay.
        sh.get(b"k", T0 + 10 * MINUTE);
        assert!((90..=91).contains(&freq(&mut sh, b"k", T0 + 10 * MINUTE)));
    }

    #[test]
    fn lfu_log_incr_saturates_and_slows_with_the_log_factor() {
        assert_eq!(lfu_log_incr(255, 0), 255);
        assert_eq!(lfu_log_incr(200, 0), 201, "factor 0: every access counts");
        assert_eq!(lfu_log_incr(0, 10), 1);
        let grown = (0..1000).filter(|_| lfu_log_incr(105, 10) > 105).count();
        // p = 1 / (100 × 10 + 1): about one in a thousand.
        assert!(grown < 20, "{grown}");
    }

    #[test]
    fn restore_idletime_and_freq_apply_only_under_their_own_clock() {
        let mut sh = Shard::new();
        sh.set(b"k", s("v"), None, T0);
        assert!(!sh.set_frequency(b"k", 100, T0), "LRU: FREQ ignored");
        assert!(sh.set_idle(b"k", 5_000, T0));
        assert_eq!(sh.peek(b"k", T0).expect("live").idle_ticks(T0), 500);
        sh.set_access_clock(LFU);
        assert!(!sh.set_idle(b"k", 5_000, T0), "LFU: IDLETIME ignored");
        assert!(sh.set_frequency(b"k", 42, T0));
        assert_eq!(freq(&mut sh, b"k", T0), 42);
    }

    #[test]
    fn lfu_eviction_takes_the_least_frequently_used() {
        let mut sh = Shard::new();
        sh.set_access_clock(LFU);
        for (key, f) in [(&b"hot"[..], 200), (b"cold", 1), (b"warm", 100)] {
            sh.set(key, s("v"), None, T0);
            sh.set_frequency(key, f, T0);
        }
        for _ in 0..20 {
            let victim = sh.sample_victim(64, |e| EvictionPolicy::AllKeysLfu.rank(e, LFU, T0));
            assert_eq!(victim.as_deref(), Some(&b"cold"[..]));
            assert_eq!(sh.eviction_candidate(64, T0).as_deref(), Some(&b"cold"[..]));
        }
        // volatile-lfu passes over keys without a TTL.
        let none = sh.sample_victim(64, |e| EvictionPolicy::VolatileLfu.rank(e, LFU, T0));
        assert_eq!(none, None);
    }

    #[test]
    fn no_touch_accesses_leave_access_data_alone() {
        let mut sh = Shard::new();
        sh.set(b"k", s("v"), None, T0);
        with_touch(false, || {
            sh.get(b"k", T0 + 5_000);
            sh.modify(b"k", T0 + 5_000, |_| ());
            sh.set(b"k", s("w"), None, T0 + 5_000);
        });
        assert_eq!(
            sh.peek(b"k", T0 + 5_000)
                .expect("live")
                .idle_ticks(T0 + 5_000),
            500
        );
        // TOUCH touches even inside a no-touch command (scopes nest and restore).
        with_touch(false, || {
            with_touch(true, || sh.get(b"k", T0 + 5_000).map(|_| ()))
        });
        assert_eq!(
            sh.peek(b"k", T0 + 5_000)
                .expect("live")
                .idle_ticks(T0 + 5_000),
            0
        );
        sh.set_access_clock(LFU);
        sh.set(b"n", s("v"), None, T0);
        with_touch(false, || sh.get(b"n", T0));
        assert_eq!(freq(&mut sh, b"n", T0), LFU_INIT_VAL);
        sh.get(b"n", T0);
        assert_eq!(freq(&mut sh, b"n", T0), LFU_INIT_VAL + 1);
    }

    #[test]
    fn access_clock_round_trips_through_its_bits() {
        for clock in [
            AccessClock::Lru,
            LFU,
            AccessClock::Lfu {
                log_factor: i32::MAX as u32,
                decay_time: i32::MAX as u32,
            },
            AccessClock::Lfu {
                log_factor: 0,
                decay_time: 0,
            },
        ] {
            assert_eq!(AccessClock::from_bits(clock.to_bits()), clock);
        }
    }
}
