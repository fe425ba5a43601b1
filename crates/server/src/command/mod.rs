//! The command table and everything a handler sees.
//!
//! The table is data: one [`CommandSpec`] per command (name, arity, flags, key positions, summary,
//! group, handler). Dispatch ([`crate::dispatch`]), `COMMAND`/`COMMAND INFO`/`COMMAND DOCS`, the
//! auth check and MULTI queueing all read it; nothing else keeps its own list of commands.
//! Each submodule implements one family and exports its rows as `COMMANDS`.

pub mod acl;
pub mod bitmaps;
pub mod blocking;
pub mod cluster;
pub mod connection;
pub mod databases;
pub mod diagnostics;
pub mod dump;
pub mod failover;
pub mod functions;
pub mod geo;
pub mod hashes;
pub mod hyperloglog;
pub mod keys;
pub mod lists;
pub mod locks;
pub mod memory;
pub mod migrate;
pub mod pubsub;
pub mod replication;
pub mod scripting;
pub mod server;
pub mod sets;
pub mod sort;
pub mod streams;
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
    /// so the write path does not log the command: the handler hands its effects to the open
    /// write transaction (`persist::write::log_effect`).
    pub const SELF_LOGGED: u32 = 1 << 11;
    /// Writes every keyspace of the caller's tenant (FLUSHALL): logged at the strongest degree
    /// among them, and replayed even where the recorded keyspace is no longer logged.
    pub const TENANT_WIDE: u32 = 1 << 12;
    /// Empties a keyspace, a tenant or a key prefix: needs the `flush` right (Redis' `@dangerous`).
    pub const FLUSHES: u32 = 1 << 13;
    /// Takes or releases named locks: needs the `write` right though it changes no key.
    pub const TAKES_LOCKS: u32 = 1 << 14;
    /// Reads the keyspace without naming keys (KEYS, SCAN, DBSIZE, lock listings): needs `read`.
    pub const READS_KEYSPACE: u32 = 1 << 15;
    /// Not allowed from scripts (Redis' `noscript`).
    pub const NOSCRIPT: u32 = 1 << 16;
    /// May block the connection until a key is ready (Redis' `blocking`).
    pub const BLOCKING: u32 = 1 << 18;
    /// A read that may change the stored value as a side effect (PFCOUNT refreshes the cached
    /// cardinality): it runs on the write path like a write and logs what it changed itself
    /// (with `SELF_LOGGED`), but needs only the rights of a read (Redis' `may_replicate`).
    pub const MAY_REPLICATE: u32 = 1 << 17;
    /// Its keys are not all at fixed positions (Redis' `movablekeys`): after a `numkeys`
    /// argument (LMPOP; see [`super::CommandSpec::with_numkeys`], whose keys `key_indexes`
    /// finds), or read through patterns (SORT's BY and GET). A replay runs a record of one that
    /// has no `numkeys` alone, never beside a partition's others.
    pub const MOVABLE_KEYS: u32 = 1 << 19;
    /// A write that runs under the exclusive store gate, so no other command sees it half done
    /// (SWAPDB, which moves every key of two keyspaces).
    pub const EXCLUSIVE: u32 = 1 << 20;
    /// Never logged to the slow log (Redis' `skip_slowlog`: EXEC, whose commands are logged
    /// one by one).
    pub const SKIP_SLOWLOG: u32 = 1 << 21;
    /// Carries secrets after an `AUTH` word (AUTH, HELLO … AUTH): the slow log shows them as
    /// `(redacted)`, as Redis does.
    pub const SECRET_ARGS: u32 = 1 << 22;
    /// Reads every keyspace's shards without naming keys and without needing the `read` right
    /// (INFO's key counts): a script that runs under its keys' locks may not run it.
    pub const WHOLE_STORE: u32 = 1 << 23;
    /// A pub/sub command (Redis' `pubsub`).
    pub const PUBSUB: u32 = 1 << 24;
    /// Allowed while a RESP2 connection is subscribed to channels (Redis allows only
    /// (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET there).
    pub const SUBSCRIBED_OK: u32 = 1 << 25;
    /// Redis' `skip_monitor` (EVAL, FCALL …): MONITOR shows it before it runs, so the
    /// commands of the script follow it; any other command is shown once it has run.
    pub const SKIP_MONITOR: u32 = 1 << 26;
    /// Not a write, but may propagate to replicas (Redis' `may_replicate` on PUBLISH and on
    /// scripts, unless a script declares `no-writes`): held back by CLIENT PAUSE WRITE.
    pub const REPLICATES: u32 = 1 << 27;
    /// Runs the connection's queued commands (EXEC): held back by CLIENT PAUSE WRITE when one
    /// of them would be.
    pub const RUNS_QUEUED: u32 = 1 << 28;
    /// Its keys may be none (Redis' `no_mandatory_keys`: EVAL, FCALL, whose `numkeys` may be
    /// 0): `COMMAND GETKEYS` answers an empty list then, not an error.
    pub const NO_MANDATORY_KEYS: u32 = 1 << 29;
    /// Runs while a script or function is past `busy-reply-threshold` (Redis' `allow_busy`:
    /// AUTH, HELLO, the transaction commands, RESET, QUIT, SHUTDOWN, SCRIPT|FUNCTION KILL,
    /// FUNCTION STATS, REPLCONF); every other command is refused with BUSY then (see
    /// `command::scripting`). Such a row must not wait for the store gate or a shard while
    /// that script runs: it is `OWN_GATE` (or waits for nothing).
    pub const ALLOW_BUSY: u32 = 1 << 30;
    /// Refused unless a setting allows it, before authentication (Redis' `protected`: DEBUG,
    /// by `enable-debug-command`; see `dispatch`).
    pub const PROTECTED: u32 = 1 << 31;

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
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (MAY_REPLICATE, "may_replicate"),
        (MOVABLE_KEYS, "movablekeys"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (PUBSUB, "pubsub"),
        (NO_MANDATORY_KEYS, "no_mandatory_keys"),
        (ALLOW_BUSY, "allow_busy"),
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
    /// Subcommand rows of a container command (`CONFIG GET` is `config|get`): their own arity,
    /// flags and summary; the container's handler runs them.
    pub subcommands: &'static [CommandSpec],
    /// For a command flagged `movablekeys`: the index of its `numkeys` argument, which the keys
    /// follow (LMPOP numkeys key [key ...]); 0 otherwise. Keys at `first_key..=last_key` come
    /// before it (ZUNIONSTORE dst numkeys key [key ...]).
    pub numkeys_at: usize,
    /// For a command flagged `movablekeys` whose destination follows a `STORE` or `STOREDIST`
    /// word (GEORADIUS … STORE key): the first argument index searched for those words (Redis'
    /// keyword key specs' `startfrom`); 0 otherwise. See [`store_keyword_keys`].
    pub store_keyword_from: usize,
    /// For a command flagged `movablekeys` whose keys only its own parsing finds (Redis'
    /// `get_keys_function`: SORT … STORE key, wherever STORE comes): that parsing, giving the
    /// key indexes in `args`. It replaces the key positions above in [`CommandSpec::key_indexes`].
    pub keys_by: Option<KeysBy>,
    /// Other keyspaces of the caller's tenant the command writes, named by SELECT number in
    /// its arguments (MOVE, COPY … DB, SWAPDB): the write path's scope and replay follow them.
    pub other_keyspaces: Option<OtherKeyspaces>,
    /// Redis ACL categories the row has besides those its flags and group give (bits of
    /// `tenancy::acl::category`; see `tenancy::acl::categories`).
    pub acl_categories: u32,
    /// The keyspace notification a write emits for its keys when it succeeds (see `notify`).
    pub notify: Option<Notify>,
    /// Runs a Lua script that may pass `busy-reply-threshold` (EVAL, EVALSHA, FCALL and their
    /// read-only forms): EXEC of a transaction that queues one announces itself as an
    /// exclusive script does (see `scripting::hold_for_exec`).
    pub runs_script: bool,
    /// The arguments from `.0` to `.1` (-1: the last) that a write looks up for reading (a
    /// *STORE's sources, GETDEL's key): each one absent is a `keymiss` keyspace event, as
    /// Redis' `lookupKeyRead` publishes (reads need none: all their keys are read).
    pub read_keys: Option<(usize, i32)>,
    /// The pub/sub channels the command names, for ACL channel rules (`&pattern`): the
    /// arguments from `first` to `last` (-1: the last one), and whether they are patterns
    /// (PSUBSCRIBE's must equal one of the user's patterns, as in Redis).
    pub channels: Option<ChannelArgs>,
    /// What the command does with each of its keys, as Redis 7's key-spec flags say it
    /// (`COMMAND GETKEYSANDFLAGS`): see [`KeyFlags`].
    pub key_flags: KeyFlags,
    /// For a row flagged `secret_args` whose secrets are not where AUTH's and HELLO's are
    /// (MIGRATE … AUTH password / AUTH2 username password): the arguments `from..to` to show
    /// as `(redacted)` (see `observe::slowlog::secret_args`).
    pub secrets: Option<SecretsAt>,
}

/// Where a command's secrets are (see [`CommandSpec::secrets`]): `(from, to)`, `to` exclusive.
pub type SecretsAt = fn(&[Bytes]) -> (usize, usize);

/// A row's key-spec flags (Redis' names: `RO`/`RW`/`OW`/`RM`, then `access`, `update`,
/// `insert`, `delete`), one space-separated list per key in the order
/// [`CommandSpec::key_indexes`] finds them, the last one serving every key after it (MSET's
/// keys are all `OW update`; LMOVE's are `RW access delete` then `RW insert`).
#[derive(Debug, Clone, Copy)]
pub enum KeyFlags {
    /// None given: a read's keys are `RO access`, a write's `RW access update` (Redis' most
    /// common flags for each).
    Default,
    /// The same for any arguments.
    Fixed(&'static [&'static str]),
    /// Depending on the arguments (Redis' `variable_flags`: SET … GET reads its key).
    Computed(fn(&[Bytes]) -> &'static [&'static str]),
}

/// A command's own key finder (see [`CommandSpec::keys_by`]): the indexes of its keys in `args`.
pub type KeysBy = fn(&[Bytes]) -> Vec<usize>;

/// Where a pub/sub command's channel arguments are (see [`CommandSpec::channels`]).
#[derive(Debug, Clone, Copy)]
pub struct ChannelArgs {
    pub first: usize,
    pub last: i32,
    pub patterns: bool,
}

/// The keyspace events of a write (Redis' `notifyKeyspaceEvent` calls, as data): the
/// `notify` class and event name for each key argument in order (the last pair serves the
/// keys after it: MSET's every key is `set`; RENAME's are `rename_from` then `rename_to`).
#[derive(Debug, Clone, Copy)]
pub struct Notify {
    pub events: &'static [(u32, &'static str)],
    /// Emitted only when the reply says something changed (not `0` or nil: SETNX, SREM …).
    pub only_if_changed: bool,
    /// Emitted only for the keys that existed before the write (DEL, UNLINK).
    pub only_existing: bool,
}

/// How a command names other keyspaces of its tenant (by SELECT number, as the client sends
/// it); each function returns None when the arguments name none (or not as a number).
#[derive(Debug, Clone, Copy)]
pub enum OtherKeyspaces {
    /// Keys go from the selected keyspace into the one named (MOVE, COPY … DB).
    Target(fn(&[Bytes]) -> Option<i64>),
    /// The two keyspaces named exchange their contents (SWAPDB).
    Swap(fn(&[Bytes]) -> Option<(i64, i64)>),
}

/// The keyspaces a command writes besides (or instead of) the selected one; see
/// [`CommandSpec::named_keyspaces`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// Nothing besides the selected keyspace (or the arguments name no keyspace of the tenant:
    /// the handler answers the error).
    Selected,
    /// Data goes from the selected keyspace `from` into `to` (global indices, distinct).
    Target { from: usize, to: usize },
    /// Keyspaces `a` and `b` (global indices, distinct) exchange their contents.
    Swap(usize, usize),
}

impl CommandSpec {
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Whether it runs on the write path (`persist::write`): a write, or a read that may change
    /// the stored value.
    pub fn runs_as_write(&self) -> bool {
        self.has(flags::WRITE | flags::MAY_REPLICATE)
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

    /// The row that describes `args`: a container's subcommand row when `args[1]` names one,
    /// else this row.
    pub fn resolve(&'static self, args: &[Bytes]) -> &'static CommandSpec {
        if let (false, Some(sub)) = (self.subcommands.is_empty(), args.get(1)) {
            for row in self.subcommands {
                let name = row.name.rsplit('|').next().unwrap_or(row.name);
                if name.as_bytes().eq_ignore_ascii_case(sub) {
                    return row;
                }
            }
        }
        self
    }

    /// The same row with subcommand rows (table rows: `cmd(...).with_subcommands(&[...])`).
    pub const fn with_subcommands(mut self, subcommands: &'static [CommandSpec]) -> CommandSpec {
        self.subcommands = subcommands;
        self
    }

    /// The same row with the keyspaces it names in its arguments (table rows:
    /// `cmd(...).with_other_keyspaces(OtherKeyspaces::Target(f))`).
    pub const fn with_other_keyspaces(mut self, named: OtherKeyspaces) -> CommandSpec {
        self.other_keyspaces = Some(named);
        self
    }

    /// The keyspaces `args` name, as global indices in the tenant of keyspace `db` (the selected
    /// one; the tenant is read from it, so a replay resolves them as the write did).
    pub fn named_keyspaces(
        &self,
        tenancy: &crate::tenancy::Tenancy,
        db: usize,
        args: &[Bytes],
    ) -> Named {
        let resolve = |n: i64| tenancy.sibling(db, n);
        match self.other_keyspaces {
            None => Named::Selected,
            Some(OtherKeyspaces::Target(f)) => match f(args).and_then(resolve) {
                Some(to) if to != db => Named::Target { from: db, to },
                _ => Named::Selected,
            },
            Some(OtherKeyspaces::Swap(f)) => match f(args).map(|(a, b)| (resolve(a), resolve(b))) {
                Some((Some(a), Some(b))) if a != b => Named::Swap(a, b),
                _ => Named::Selected,
            },
        }
    }

    /// The same row with ACL categories of its own (table rows: `cmd(...).with_acl(category::DANGEROUS)`).
    pub const fn with_acl(mut self, categories: u32) -> CommandSpec {
        self.acl_categories |= categories;
        self
    }

    /// The same row naming pub/sub channels from argument `first` to `last` (-1: the last), for
    /// ACL channel rules; `patterns` when they are channel patterns (PSUBSCRIBE).
    pub const fn with_channels(mut self, first: usize, last: i32, patterns: bool) -> CommandSpec {
        self.channels = Some(ChannelArgs {
            first,
            last,
            patterns,
        });
        self
    }

    /// The channel arguments of a command with this row (empty for rows naming none).
    pub fn channel_args<'a>(&self, args: &'a [Bytes]) -> (&'a [Bytes], bool) {
        let Some(c) = self.channels else {
            return (&[], false);
        };
        let end = if c.last < 0 {
            args.len()
        } else {
            (c.last as usize + 1).min(args.len())
        };
        (args.get(c.first..end).unwrap_or(&[]), c.patterns)
    }

    /// The same row with the keyspace events it emits (table rows:
    /// `cmd(...).notifies(&[(notify::STRING, "set")])`).
    pub const fn notifies(mut self, events: &'static [(u32, &'static str)]) -> CommandSpec {
        self.notify = Some(Notify {
            events,
            only_if_changed: false,
            only_existing: false,
        });
        self
    }

    /// The same row naming the arguments a write reads (see [`CommandSpec::read_keys`]).
    pub const fn reads(mut self, first: usize, last: i32) -> CommandSpec {
        self.read_keys = Some((first, last));
        self
    }

    /// Like [`CommandSpec::notifies`], for each key that existed before the write (DEL).
    pub const fn notifies_existing(
        mut self,
        events: &'static [(u32, &'static str)],
    ) -> CommandSpec {
        self.notify = Some(Notify {
            events,
            only_if_changed: true,
            only_existing: true,
        });
        self
    }

    /// Like [`CommandSpec::notifies`], for a write that may change nothing (its reply is then
    /// `0` or nil, and nothing is emitted).
    pub const fn notifies_if_changed(
        mut self,
        events: &'static [(u32, &'static str)],
    ) -> CommandSpec {
        self.notify = Some(Notify {
            events,
            only_if_changed: true,
            only_existing: false,
        });
        self
    }

    /// Marks the row as running a Lua script (see [`CommandSpec::runs_script`]).
    pub const fn runs_script(mut self) -> CommandSpec {
        self.runs_script = true;
        self
    }

    /// The same row with its keys after a `numkeys` argument at `index` (table rows:
    /// `cmd(...).with_numkeys(1)`); flags it `movablekeys`.
    pub const fn with_numkeys(mut self, index: usize) -> CommandSpec {
        self.numkeys_at = index;
        self.flags |= flags::MOVABLE_KEYS;
        self
    }

    /// The same row with a destination key after a `STORE`/`STOREDIST` word searched for from
    /// argument `from` on (table rows: `cmd(...).with_store_keyword(5)`); flags it `movablekeys`.
    pub const fn with_store_keyword(mut self, from: usize) -> CommandSpec {
        self.store_keyword_from = from;
        self.flags |= flags::MOVABLE_KEYS;
        self
    }

    /// The same row with its keys found by `keys` (table rows: `cmd(...).keys_by(sort_keys)`;
    /// see [`CommandSpec::keys_by`]); flags it `movablekeys`.
    pub const fn keys_by(mut self, keys: KeysBy) -> CommandSpec {
        self.keys_by = Some(keys);
        self.flags |= flags::MOVABLE_KEYS;
        self
    }

    /// The same row with its secrets found by `at` (table rows: `cmd(...).secrets_at(f)`;
    /// see [`CommandSpec::secrets`]); flags it `secret_args`.
    pub const fn secrets_at(mut self, at: SecretsAt) -> CommandSpec {
        self.secrets = Some(at);
        self.flags |= flags::SECRET_ARGS;
        self
    }

    /// The same row with key positions (a subcommand row's: `sub(...).with_keys((2, 2, 1))`,
    /// MEMORY USAGE's key, for `COMMAND INFO` and `COMMAND GETKEYS`).
    pub const fn with_keys(mut self, keys: (i32, i32, i32)) -> CommandSpec {
        self.first_key = keys.0;
        self.last_key = keys.1;
        self.step = keys.2;
        self
    }

    /// The same row with the key-spec flags of its keys (table rows:
    /// `cmd(...).key_flags(&["RW access delete", "RW insert"])`; see [`KeyFlags`]).
    pub const fn key_flags(mut self, flags: &'static [&'static str]) -> CommandSpec {
        self.key_flags = KeyFlags::Fixed(flags);
        self
    }

    /// Like [`CommandSpec::key_flags`], computed from the arguments.
    pub const fn key_flags_by(
        mut self,
        flags: fn(&[Bytes]) -> &'static [&'static str],
    ) -> CommandSpec {
        self.key_flags = KeyFlags::Computed(flags);
        self
    }

    /// The key-spec flags of the `n`th key (from 0) that [`CommandSpec::key_indexes`] finds in
    /// `args`.
    pub fn flags_of_key(&self, args: &[Bytes], n: usize) -> Vec<&'static str> {
        let list: &[&str] = match self.key_flags {
            KeyFlags::Fixed(list) => list,
            KeyFlags::Computed(f) => f(args),
            KeyFlags::Default if self.has(flags::WRITE) => &["RW access update"],
            KeyFlags::Default => &["RO access"],
        };
        list.get(n)
            .or(list.last())
            .map_or_else(Vec::new, |l| l.split(' ').collect())
    }

    /// Indexes of the key arguments in `args` (the command name first). For a `numkeys`
    /// command, none when its `numkeys` is not a count of arguments that are there.
    pub fn key_indexes(&self, args: &[Bytes]) -> Vec<usize> {
        if let Some(keys_by) = self.keys_by {
            return keys_by(args);
        }
        let mut keys = self.fixed_key_indexes(args);
        if self.store_keyword_from > 0 {
            keys.extend(store_keyword_keys(args, self.store_keyword_from));
        }
        keys
    }

    /// [`CommandSpec::key_indexes`] without a `STORE` word's key.
    fn fixed_key_indexes(&self, args: &[Bytes]) -> Vec<usize> {
        let argc = args.len();
        if self.numkeys_at > 0 {
            let at = self.numkeys_at;
            // Keys at fixed positions before `numkeys` (ZUNIONSTORE's destination) come first.
            let fixed = (self.first_key.max(1)..=self.last_key.max(0)).map(|i| i as usize);
            return match args.get(at).and_then(|n| crate::args::parse_i64(n)) {
                Some(n) if n > 0 && (n as u64) < (argc - at) as u64 => {
                    fixed.chain(at + 1..=at + n as usize).collect()
                }
                _ => Vec::new(),
            };
        }
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
        subcommands: &[],
        numkeys_at: 0,
        runs_script: false,
        store_keyword_from: 0,
        keys_by: None,
        other_keyspaces: None,
        acl_categories: 0,
        channels: None,
        notify: None,
        read_keys: None,
        key_flags: KeyFlags::Default,
        secrets: None,
    }
}

/// The keys after a `STORE` and after a `STOREDIST` word, as Redis 7's keyword key specs find
/// them: the first of each word from argument `from` on that has an argument after it, `STORE`'s
/// key first.
pub fn store_keyword_keys(args: &[Bytes], from: usize) -> Vec<usize> {
    let first_after = |word: &str| {
        (from..args.len().saturating_sub(1))
            .find(|&i| crate::args::is(&args[i], word))
            .map(|i| i + 1)
    };
    first_after("store")
        .into_iter()
        .chain(first_after("storedist"))
        .collect()
}

/// A subcommand row (`full_name` is `container|sub`): the container's handler runs it, so the
/// row carries what differs: arity, flags and summary.
pub const fn sub(
    full_name: &'static str,
    arity: i32,
    flags: u32,
    summary: &'static str,
) -> CommandSpec {
    cmd(
        full_name,
        arity,
        flags,
        NO_KEYS,
        "",
        summary,
        container_handler,
    )
}

/// Never called: dispatch runs a subcommand through its container's handler.
fn container_handler(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Err(CmdError::err("subcommand rows are run by their container"))
}

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
            acl::COMMANDS,
            server::COMMANDS,
            replication::COMMANDS,
            failover::COMMANDS,
            diagnostics::COMMANDS,
            databases::COMMANDS,
            sort::COMMANDS,
            strings::COMMANDS,
            bitmaps::COMMANDS,
            hyperloglog::COMMANDS,
            keys::COMMANDS,
            dump::COMMANDS,
            migrate::COMMANDS,
            hashes::COMMANDS,
            zsets::COMMANDS,
            geo::COMMANDS,
            lists::COMMANDS,
            blocking::COMMANDS,
            sets::COMMANDS,
            streams::COMMANDS,
            transactions::COMMANDS,
            locks::COMMANDS,
            pubsub::COMMANDS,
            scripting::COMMANDS,
            functions::COMMANDS,
            memory::COMMANDS,
            cluster::COMMANDS,
            crate::memcache::records::COMMANDS,
            crate::memcache::lease::COMMANDS,
        ])
    })
}

/// How many buckets [`CommandTable`] sorts its names into (a power of two).
const NAME_BUCKET_BITS: u32 = 10;

/// A name's bucket: a hash of its length and of its first, second and last bytes with the case
/// bit set (`'s'` and `'S'` alike), so a name and its other-case spellings meet, and most
/// buckets hold one command.
fn name_bucket(name: &[u8]) -> usize {
    let at = |i: usize| u32::from(name.get(i).map_or(0, |b| b | 0x20));
    let mixed = (name.len() as u32).wrapping_mul(0x9E37_79B1)
        ^ at(0)
        ^ (at(1) << 8)
        ^ (at(name.len().wrapping_sub(1)) << 16);
    (mixed.wrapping_mul(0x85EB_CA6B) >> (32 - NAME_BUCKET_BITS)) as usize
}

/// Name → spec lookup over the table.
pub struct CommandTable {
    /// The commands in buckets by [`name_bucket`] (at most four rows each): a lookup compares
    /// the name with the rows of its bucket, case-insensitively, without copying it.
    by_name: Vec<Vec<(&'static [u8], &'static CommandSpec)>>,
    all: Vec<&'static CommandSpec>,
    /// Every row, subcommand rows included, with its family (a subcommand row: its
    /// container's group), numbered for per-command statistics.
    rows: Vec<(&'static CommandSpec, &'static str)>,
    /// A row's number in `rows`, by its address.
    row_numbers: hashbrown::HashMap<usize, usize>,
}

impl CommandTable {
    fn new(families: &[&'static [CommandSpec]]) -> Self {
        let mut by_name: Vec<Vec<(&'static [u8], &'static CommandSpec)>> =
            vec![Vec::new(); 1 << NAME_BUCKET_BITS];
        let mut all = Vec::new();
        for family in families {
            for spec in family.iter() {
                let name = spec.name.as_bytes();
                assert!(
                    !name.iter().any(u8::is_ascii_uppercase),
                    "command {} is not lower case",
                    spec.name
                );
                let bucket = &mut by_name[name_bucket(name)];
                assert!(
                    !bucket.iter().any(|(other, _)| *other == name),
                    "command {} defined twice",
                    spec.name
                );
                bucket.push((name, spec));
                all.push(spec);
            }
        }
        all.sort_by_key(|s| s.name);
        let rows: Vec<(&'static CommandSpec, &'static str)> = all
            .iter()
            .flat_map(|spec| {
                std::iter::once((*spec, spec.group))
                    .chain(spec.subcommands.iter().map(|row| (row, spec.group)))
            })
            .collect();
        let row_numbers = rows
            .iter()
            .enumerate()
            .map(|(i, (row, _))| (*row as *const CommandSpec as usize, i))
            .collect();
        Self {
            by_name,
            all,
            rows,
            row_numbers,
        }
    }

    /// Every row (subcommand rows after their container) with its family, in row-number order.
    pub fn rows(&self) -> &[(&'static CommandSpec, &'static str)] {
        &self.rows
    }

    /// How many rows [`Self::rows`] has.
    pub fn row_count(&self) -> usize {
        self.rows.len()
    }

    /// The number of a row of this table (a command's or a subcommand's).
    pub fn row_index(&self, row: &'static CommandSpec) -> usize {
        self.row_numbers
            .get(&(row as *const CommandSpec as usize))
            .copied()
            .expect("a row of the command table")
    }

    /// Case-insensitive lookup by name, run once per command: no copy, no general hash.
    pub fn get(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        self.by_name[name_bucket(name)]
            .iter()
            .find(|(row, _)| {
                // Rows are lower case (checked when the table is made): one byte converted.
                row.len() == name.len()
                    && row
                        .iter()
                        .zip(name)
                        .all(|(r, n)| *r == n.to_ascii_lowercase())
            })
            .map(|(_, spec)| *spec)
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

    /// Publish keyspace event `event` (of `notify` class `class`) on `key` of the selected
    /// keyspace, where Redis' handler calls `notifyKeyspaceEvent` (see `notify`).
    pub fn notify(&mut self, class: u32, event: &str, key: &[u8]) {
        let db = self.client.db;
        self.notify_in(db, class, event, key);
    }

    /// [`Ctx::notify`] in keyspace `db` (a global index: MOVE's and COPY's target).
    pub fn notify_in(&mut self, db: usize, class: u32, event: &str, key: &[u8]) {
        if crate::notify::enabled(self.shared) {
            crate::notify::key_event(self.shared, self.client, class, event, db, key);
        }
    }

    /// Publish `new` for `key`, just added to keyspace `db` (for commands that add a key
    /// before their first event on it, or over one they deleted, as Redis' RENAME, COPY, MOVE
    /// and RESTORE do).
    pub fn notify_new_in(&mut self, db: usize, key: &[u8]) {
        if crate::notify::enabled(self.shared) {
            crate::notify::key_added(self.shared, self.client, db, key);
        }
    }

    /// Log `args` as an effect of the write running now, in the selected keyspace (for commands
    /// flagged `self_logged`; see `persist::write::log_effect`).
    pub fn log_effect(&mut self, args: Vec<Bytes>) {
        let db = self.client.db;
        crate::persist::write::log_effect(self.client, db, args);
    }

    /// The keyspace at SELECT `index` of the selected keyspace's tenant (global index), or
    /// Redis' `DB index is out of range`.
    pub fn sibling(&self, index: i64) -> Result<usize, CmdError> {
        self.shared
            .tenancy
            .sibling(self.client.db, index)
            .ok_or(CmdError::DbIndexOutOfRange)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_keys_are_found_as_redis_key_specs_find_them() {
        let args = |s: &str| -> Vec<Bytes> {
            s.split(' ')
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        let georadius = table().get(b"georadius").expect("row");
        assert!(georadius.has(flags::MOVABLE_KEYS));
        let keys = |s: &str| georadius.key_indexes(&args(s));
        assert_eq!(keys("georadius k 0 0 1 km"), vec![1]);
        assert_eq!(keys("georadius k 0 0 1 km store d"), vec![1, 7]);
        assert_eq!(
            keys("georadius k 0 0 1 km storedist d store e"),
            vec![1, 9, 7]
        );
        assert_eq!(keys("georadius k 0 0 1 km store a store b"), vec![1, 7]);
        assert_eq!(keys("georadius k 0 0 1 km withdist store"), vec![1]);
        assert_eq!(keys("georadius k 0 0 1 store x"), vec![1]);
    }
    use crate::tenancy::{required_perms, Perms};

    /// The same row under another name: what the table says of a command, without its name.
    fn renamed(spec: &CommandSpec) -> CommandSpec {
        CommandSpec {
            name: "renamed",
            subcommands: &[],
            ..*spec
        }
    }

    #[test]
    fn every_commands_rights_come_from_its_table_row() {
        let mut rows: Vec<&CommandSpec> = table().all().to_vec();
        rows.extend(table().all().iter().flat_map(|s| s.subcommands.iter()));
        for spec in rows {
            assert_eq!(
                required_perms(spec),
                required_perms(&renamed(spec)),
                "{}: its rights depend on its name",
                spec.name
            );
        }
        let need = |words: &[&str]| {
            let args: Vec<Bytes> = words.iter().map(|w| Bytes::from(w.to_string())).collect();
            required_perms(table().get(&args[0]).expect("in the table").resolve(&args))
        };
        assert_eq!(need(&["flushall"]), Perms::FLUSH);
        assert_eq!(need(&["purge", "p:"]), Perms::FLUSH);
        assert_eq!(
            need(&["script", "flush"]),
            Perms::ADMIN,
            "a subcommand's row"
        );
        assert_eq!(need(&["script", "load", "return 1"]), Perms::NONE);
        assert_eq!(need(&["lock", "l"]), Perms::WRITE);
        assert_eq!(
            need(&["session.open", "s"]),
            Perms::WRITE.union(Perms::READ)
        );
        assert_eq!(need(&["scan", "0"]), Perms::READ);
        assert_eq!(need(&["get", "k"]), Perms::READ);
        assert_eq!(need(&["set", "k", "v"]), Perms::WRITE);
        assert_eq!(need(&["ping"]), Perms::NONE);
    }

    #[test]
    fn every_command_is_found_by_its_name_in_any_case() {
        for spec in table().all() {
            let lower = spec.name.as_bytes();
            let upper = spec.name.to_ascii_uppercase();
            let mixed: Vec<u8> = lower
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        b.to_ascii_uppercase()
                    } else {
                        *b
                    }
                })
                .collect();
            for name in [lower, upper.as_bytes(), &mixed] {
                let found = table().get(name).expect("found");
                assert!(std::ptr::eq(found, *spec), "{}", spec.name);
            }
        }
        for unknown in [
            &b""[..],
            b"g",
            b"gett",
            b"ge",
            b"\x07et",
            b"set\0",
            &[b's'; 40],
        ] {
            assert!(table().get(unknown).is_none(), "{unknown:?}");
        }
        // The lookup stays a handful of comparisons.
        let longest = table().by_name.iter().map(Vec::len).max().unwrap_or(0);
        assert!(longest <= 4, "a name bucket holds {longest} commands");
    }

    #[test]
    fn subcommand_rows_belong_to_their_container() {
        for spec in table().all() {
            for row in spec.subcommands {
                let (container, sub) = row.name.split_once('|').expect("container|sub");
                assert_eq!(container, spec.name);
                let args = [Bytes::from(spec.name), Bytes::from(sub.to_uppercase())];
                assert!(std::ptr::eq(spec.resolve(&args), row), "{}", row.name);
            }
            let unknown = [Bytes::from(spec.name), Bytes::from_static(b"no-such-sub")];
            assert!(std::ptr::eq(spec.resolve(&unknown), *spec));
        }
    }

    /// The command table is the only list of commands: no code outside it picks a command out by
    /// its name (a flag, an ACL category or a subcommand row says what is special).
    #[test]
    fn no_code_matches_commands_by_name() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut pending = vec![root];
        let mut found = Vec::new();
        let patterns = [
            concat!("spec.name ", "=="),
            concat!("spec.name ", "!="),
            concat!("matches!(", "spec.name"),
            concat!("contains(&", "spec.name)"),
            concat!("spec.group ", "=="),
        ];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).expect("readable source tree") {
                let path = entry.expect("entry").path();
                if path.is_dir() && !path.ends_with("target") {
                    pending.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).expect("utf-8 source");
                    for (i, line) in text.lines().enumerate() {
                        if patterns.iter().any(|p| line.contains(p)) {
                            found.push(format!("{}:{}: {line}", path.display(), i + 1));
                        }
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "commands matched by name:\n{}",
            found.join("\n")
        );
    }
}
