//! Rights: what a connection's user may do ([`Perms`]), what each command needs
//! ([`required_perms`], from its table row alone), and the check dispatch runs before every
//! command ([`check_perms`], NOPERM in Redis' words from [`no_perm`]).
//!
//! May import: `command` (the table row and its flags), `client` (the connection's user and
//! rights), `error`. Must not import the rest of `tenancy` or anything that runs commands.

use crate::error::CmdError;

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
