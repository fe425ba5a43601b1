//! The command table and everything a handler sees.
//!
//! The table is data: one [`CommandSpec`] per command (name, arity, flags, key positions, summary,
//! group, handler). Dispatch ([`crate::dispatch`]), `COMMAND`/`COMMAND INFO`/`COMMAND DOCS`, the
//! auth check and MULTI queueing all read it; nothing else keeps its own list of commands.
//! Each submodule implements one family and exports its rows as `COMMANDS`.

pub mod connection;
pub mod hashes;
pub mod keys;
pub mod locks;
pub mod scripting;
pub mod server;
pub mod strings;
pub mod transactions;
pub mod zsets;

use crate::client::ClientState;
use crate::error::{CmdError, CmdResult};
use crate::state::Shared;
use bytes::Bytes;
use gradus_store::Keyspace;
use std::sync::OnceLock;

/// A handler: `args[0]` is the command name as sent; arity has been checked already.
pub type Handler = fn(&mut Ctx<'_>, &[Bytes]) -> CmdResult;

/// Command flags (Redis' names in `COMMAND INFO`).
pub mod flags {
    /// Modifies the keyspace (will be logged once durability exists).
    pub const WRITE: u32 = 1 << 0;
    /// Only reads.
    pub const READONLY: u32 = 1 << 1;
    /// Server administration.
    pub const ADMIN: u32 = 1 << 2;
    /// Allowed before authentication.
    pub const NO_AUTH: u32 = 1 << 3;
    /// Executed at once even inside MULTI (not queued).
    pub const NO_QUEUE: u32 = 1 << 4;
    /// Not allowed inside MULTI.
    pub const NO_MULTI: u32 = 1 << 5;
    /// O(1)-ish.
    pub const FAST: u32 = 1 << 6;
    /// May grow memory.
    pub const DENYOOM: u32 = 1 << 7;
    /// Connection-level (no keys).
    pub const LOADING: u32 = 1 << 8;
    /// Non-deterministic output.
    pub const RANDOM: u32 = 1 << 9;
    /// Runs without the dispatcher's shared hold of the store gate (EXEC takes it exclusively;
    /// SAVE/BGSAVE arm a snapshot, which needs the exclusive hold).
    pub const OWN_GATE: u32 = 1 << 10;
    /// A write that logs its *effects* itself (SESSION.*: the lock check must not be replayed),
    /// so the dispatcher does not log the command.
    pub const SELF_LOGGED: u32 = 1 << 11;

    pub(crate) const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (NO_AUTH, "no_auth"),
        (NO_MULTI, "no_multi"),
        (FAST, "fast"),
        (LOADING, "loading"),
        (RANDOM, "random"),
    ];
}

/// One row of the command table.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: N = exactly N args (name included), -N = at least N.
    pub arity: i32,
    pub flags: u32,
    /// Key positions as in Redis: first, last (-1 = last arg, -2 = one before), step. 0,0,0 = no keys.
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    /// `COMMAND DOCS` group and summary.
    pub group: &'static str,
    pub summary: &'static str,
    pub handler: Handler,
}

impl CommandSpec {
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// True when `argc` (name included) satisfies the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }

    /// Flag names for `COMMAND INFO`.
    pub fn flag_names(&self) -> Vec<&'static str> {
        flags::NAMES
            .iter()
            .filter(|(f, _)| self.has(*f))
            .map(|(_, n)| *n)
            .collect()
    }

    /// Indexes of the key arguments in `args`.
    pub fn key_indexes(&self, argc: usize) -> Vec<usize> {
        if self.first_key <= 0 || self.step <= 0 {
            return Vec::new();
        }
        let last = if self.last_key < 0 {
            argc as i32 + self.last_key
        } else {
            self.last_key.min(argc as i32 - 1)
        };
        (self.first_key..=last)
            .step_by(self.step as usize)
            .map(|i| i as usize)
            .collect()
    }
}

/// Shorthand for table rows.
#[allow(clippy::too_many_arguments)]
pub const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: (i32, i32, i32),
    group: &'static str,
    summary: &'static str,
    handler: Handler,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        group,
        summary,
        handler,
    }
}

/// Redis keeps small hashes and sorted sets (up to this many entries) in a listpack, which
/// HSCAN/ZSCAN return in one page with cursor 0; Gradus mirrors that for client compatibility.
pub const LISTPACK_MAX_ENTRIES: usize = 128;
/// ... and only while every field, value or member is at most this long.
pub const LISTPACK_MAX_VALUE: usize = 64;

/// No key arguments.
pub const NO_KEYS: (i32, i32, i32) = (0, 0, 0);
/// The first argument is the only key.
pub const KEY1: (i32, i32, i32) = (1, 1, 1);

/// The whole table, built once from every family's rows.
pub fn table() -> &'static CommandTable {
    static TABLE: OnceLock<CommandTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        CommandTable::new(&[
            connection::COMMANDS,
            server::COMMANDS,
            strings::COMMANDS,
            keys::COMMANDS,
            hashes::COMMANDS,
            zsets::COMMANDS,
            transactions::COMMANDS,
            locks::COMMANDS,
            scripting::COMMANDS,
            crate::memcache::records::COMMANDS,
            crate::memcache::lease::COMMANDS,
        ])
    })
}

/// Name → spec lookup over the table.
pub struct CommandTable {
    by_name: hashbrown::HashMap<&'static [u8], &'static CommandSpec>,
    all: Vec<&'static CommandSpec>,
}

impl CommandTable {
    fn new(families: &[&'static [CommandSpec]]) -> Self {
        let mut by_name = hashbrown::HashMap::new();
        let mut all = Vec::new();
        for family in families {
            for spec in family.iter() {
                let dup = by_name.insert(spec.name.as_bytes(), spec);
                assert!(dup.is_none(), "command {} defined twice", spec.name);
                all.push(spec);
            }
        }
        all.sort_by_key(|s| s.name);
        Self { by_name, all }
    }

    /// Case-insensitive lookup without allocating for names up to 32 bytes.
    pub fn get(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        let mut buf = [0u8; 32];
        if name.len() > buf.len() {
            return None;
        }
        let lower = &mut buf[..name.len()];
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        self.by_name.get(&*lower).copied()
    }

    pub fn all(&self) -> &[&'static CommandSpec] {
        &self.all
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}

/// What a handler works with: server-wide state, this connection's state, and the time.
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub client: &'a mut ClientState,
    /// The time the command started, in Unix ms (one clock reading per command, as Redis does).
    pub now_ms: u64,
}

impl Ctx<'_> {
    /// Count a key lookup as a hit or a miss (INFO keyspace_hits/misses).
    pub fn lookup(&self, hit: bool) {
        let c = if hit {
            &self.client.counters.hits
        } else {
            &self.client.counters.misses
        };
        crate::client::LocalCounters::bump(c);
    }

    /// The connection's selected keyspace.
    pub fn db(&self) -> &Keyspace {
        self.shared
            .store
            .db(self.client.db)
            .expect("selected db index validated by SELECT")
    }
}

/// The value of type `T` at `key` for reading: Ok(None) when absent, WRONGTYPE when the key holds
/// another type (`pick` says which type is wanted, e.g. `Value::as_hash`).
pub fn read_typed<'s, T>(
    shard: &'s mut gradus_store::Shard,
    key: &[u8],
    now: u64,
    pick: fn(&gradus_store::Value) -> Option<&T>,
) -> Result<Option<&'s T>, CmdError> {
    match shard.get(key, now) {
        None => Ok(None),
        Some(entry) => pick(&entry.value).map(Some).ok_or(CmdError::WrongType),
    }
}

/// Like [`read_typed`], and counts the lookup in the keyspace hit/miss statistics (a key of the
/// wrong type counts as a hit, as in Redis).
pub fn lookup_typed<'s, T>(
    ctx: &Ctx<'_>,
    shard: &'s mut gradus_store::Shard,
    key: &[u8],
    pick: fn(&gradus_store::Value) -> Option<&T>,
) -> Result<Option<&'s T>, CmdError> {
    ctx.lookup(shard.get(key, ctx.now_ms).is_some());
    read_typed(shard, key, ctx.now_ms, pick)
}

/// Error for a wrong number of arguments, named after the command (lower-case like Redis).
pub fn arity_error(name: &[u8]) -> CmdError {
    CmdError::WrongArity(String::from_utf8_lossy(name).to_lowercase())
}
