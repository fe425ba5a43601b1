//! Rights: what a connection's user may do ([`Perms`]), what each command needs
//! ([`required_perms`], from its table row alone), Redis' ACL categories of a command
//! ([`categories`], also from its row), and the check dispatch runs before every command
//! ([`check_perms`]: the tenant-level rights, then an ACL user's rules; NOPERM in Redis' words).
//!
//! May import: `command` (the table row and its flags), `client` (the connection's user and
//! rights), `error`. Must not import the rest of `tenancy` or anything that runs commands.

use crate::error::CmdError;

/// Redis' ACL categories, one bit each, in `ACL CAT` order.
pub mod category {
    pub const KEYSPACE: u32 = 1 << 0;
    pub const READ: u32 = 1 << 1;
    pub const WRITE: u32 = 1 << 2;
    pub const SET: u32 = 1 << 3;
    pub const SORTEDSET: u32 = 1 << 4;
    pub const LIST: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const STRING: u32 = 1 << 7;
    pub const BITMAP: u32 = 1 << 8;
    pub const HYPERLOGLOG: u32 = 1 << 9;
    pub const GEO: u32 = 1 << 10;
    pub const STREAM: u32 = 1 << 11;
    pub const PUBSUB: u32 = 1 << 12;
    pub const ADMIN: u32 = 1 << 13;
    pub const FAST: u32 = 1 << 14;
    pub const SLOW: u32 = 1 << 15;
    pub const BLOCKING: u32 = 1 << 16;
    pub const DANGEROUS: u32 = 1 << 17;
    pub const CONNECTION: u32 = 1 << 18;
    pub const TRANSACTION: u32 = 1 << 19;
    pub const SCRIPTING: u32 = 1 << 20;

    /// Names, in Redis' `ACL CAT` order.
    pub const NAMES: &[(&str, u32)] = &[
        ("keyspace", KEYSPACE),
        ("read", READ),
        ("write", WRITE),
        ("set", SET),
        ("sortedset", SORTEDSET),
        ("list", LIST),
        ("hash", HASH),
        ("string", STRING),
        ("bitmap", BITMAP),
        ("hyperloglog", HYPERLOGLOG),
        ("geo", GEO),
        ("stream", STREAM),
        ("pubsub", PUBSUB),
        ("admin", ADMIN),
        ("fast", FAST),
        ("slow", SLOW),
        ("blocking", BLOCKING),
        ("dangerous", DANGEROUS),
        ("connection", CONNECTION),
        ("transaction", TRANSACTION),
        ("scripting", SCRIPTING),
    ];
}

/// The category bit named `name` (ASCII case-insensitive, without the `@`).
pub fn category_by_name(name: &str) -> Option<u32> {
    category::NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, bit)| *bit)
}

/// The name of one category bit.
pub fn category_name(bit: u32) -> &'static str {
    category::NAMES
        .iter()
        .find(|(_, b)| *b == bit)
        .map_or("", |(n, _)| n)
}

/// Redis' ACL categories of a command, from its table row: `spec` is the row (a subcommand's
/// where there is one), `container` the command's own row (its group; the same row when there is
/// no subcommand). Flags give `@read`/`@write`, `@fast`/`@slow`, `@blocking`, `@admin` and
/// `@dangerous` (admin and flushing rows); the group gives the data type (`@string`, `@list` …,
/// `@keyspace` for generic key commands); a row's own `acl_categories` add the rest (`KEYS` and
/// `INFO` are `@dangerous`, `DBSIZE` is `@keyspace` …).
pub fn categories(
    spec: &crate::command::CommandSpec,
    container: &crate::command::CommandSpec,
) -> u32 {
    use crate::command::flags;
    use category::*;
    let mut c = spec.acl_categories | container.acl_categories;
    if spec.has(flags::WRITE) {
        c |= WRITE;
    } else if spec.has(flags::READONLY) || (spec.first_key > 0 && !spec.has(flags::ADMIN)) {
        c |= READ;
    }
    c |= if spec.has(flags::FAST) { FAST } else { SLOW };
    if spec.has(flags::BLOCKING) {
        c |= BLOCKING;
    }
    if spec.has(flags::ADMIN) {
        c |= ADMIN | DANGEROUS;
    }
    if spec.has(flags::FLUSHES) {
        c |= KEYSPACE | DANGEROUS;
    }
    c |= match container.group {
        "string" => STRING,
        "bitmap" => BITMAP,
        "hyperloglog" => HYPERLOGLOG,
        "hash" => HASH,
        "sorted-set" => SORTEDSET,
        "list" => LIST,
        "set" => SET,
        "geo" => GEO,
        "stream" => STREAM,
        "pubsub" => PUBSUB,
        "generic" => KEYSPACE,
        "transactions" => TRANSACTION,
        "connection" => CONNECTION,
        "scripting" => SCRIPTING,
        _ => 0,
    };
    c
}

/// A user's rights, as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Perms(u8);

impl Perms {
    pub const NONE: Perms = Perms(0);
    pub const READ: Perms = Perms(1);
    pub const WRITE: Perms = Perms(2);
    pub const FLUSH: Perms = Perms(4);
    pub const ADMIN: Perms = Perms(8);
    pub const ALL: Perms = Perms(15);
    const NAMES: [(&'static str, Perms); 4] = [
        ("read", Perms::READ),
        ("write", Perms::WRITE),
        ("flush", Perms::FLUSH),
        ("admin", Perms::ADMIN),
    ];

    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn union(self, other: Perms) -> Perms {
        Perms(self.0 | other.0)
    }
    /// The rights in `other` that `self` lacks.
    pub fn missing(self, other: Perms) -> Perms {
        Perms(other.0 & !self.0)
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Parse a config list such as `["read", "write"]`; `admin` implies every other right.
    pub fn parse(names: &[String]) -> Result<Perms, String> {
        let mut p = Perms::NONE;
        for name in names {
            let found = Self::NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    format!("unknown permission {name:?} (expected read, write, flush or admin)")
                })?;
            p = p.union(found.1);
        }
        if p.contains(Perms::ADMIN) {
            p = Perms::ALL;
        }
        Ok(p)
    }

    /// Names of the rights in this set, e.g. `read write`.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(_, p)| self.contains(*p))
            .map(|(n, _)| *n)
            .collect()
    }
}

/// The rights a command needs, from its table row alone (`spec` is the subcommand's row where
/// there is one, see `CommandSpec::resolve`): `read` to look at keys, `write` to change keys or
/// take locks, `flush` to empty a keyspace, a tenant or a prefix, `admin` for server-wide
/// operations. Commands that touch no data (PING, AUTH, CLIENT SETNAME …) need nothing.
pub fn required_perms(spec: &crate::command::CommandSpec) -> Perms {
    use crate::command::flags;
    if spec.has(flags::ADMIN) {
        return Perms::ADMIN;
    }
    if spec.has(flags::FLUSHES) {
        return Perms::FLUSH;
    }
    let mut need = Perms::NONE;
    if spec.has(flags::WRITE | flags::TAKES_LOCKS) {
        need = need.union(Perms::WRITE);
    }
    if (!spec.has(flags::WRITE) && spec.first_key > 0) || spec.has(flags::READS_KEYSPACE) {
        need = need.union(Perms::READ);
    }
    need
}

/// NOPERM unless the connection's user has the rights `spec` (the subcommand's row where there
/// is one) needs.
pub fn check_perms(
    client: &crate::client::ClientState,
    spec: &crate::command::CommandSpec,
) -> Result<(), CmdError> {
    // Fast paths (every command of the default user, an admin, or a read/write/flush user):
    // only admin-flagged rows can need more.
    let perms = client.perms;
    if perms == Perms::ALL
        || (perms.contains(Perms::READ.union(Perms::WRITE).union(Perms::FLUSH))
            && !spec.has(crate::command::flags::ADMIN))
    {
        return Ok(());
    }
    if perms.contains(required_perms(spec)) {
        Ok(())
    } else {
        Err(no_perm(&client.user, spec.name))
    }
}

/// An ACL user's rules (when the connection authenticated as one): the command `row` (a
/// subcommand's row where there is one; `spec` its command's own row) and its keys in `args`.
pub fn check_acl(
    client: &crate::client::ClientState,
    row: &crate::command::CommandSpec,
    spec: &crate::command::CommandSpec,
    args: &[bytes::Bytes],
) -> Result<(), super::acl_users::Denied> {
    match &client.acl {
        Some(user) => user.check(row, spec, args),
        None => Ok(()),
    }
}

/// NOPERM in Redis' words.
pub fn no_perm(user: &str, command: &str) -> CmdError {
    CmdError::Other(format!(
        "NOPERM User {user} has no permissions to run the '{command}' command"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perms_parse() {
        let p = Perms::parse(&["read".into(), "write".into()]).unwrap();
        assert!(p.contains(Perms::READ) && p.contains(Perms::WRITE));
        assert!(!p.contains(Perms::FLUSH));
        assert_eq!(Perms::parse(&["admin".into()]).unwrap(), Perms::ALL);
        assert!(Perms::parse(&["root".into()]).is_err());
        assert_eq!(p.missing(Perms::FLUSH), Perms::FLUSH);
    }
}
