//! Redis ACL users: the rules `ACL SETUSER` and an `aclfile` give them (`on`/`off`, `>pass`,
//! `#sha256`, `nopass`, `~pattern`, `%R~`/`%W~`, `allkeys`, `resetkeys`, `+@category`, `-cmd`,
//! `allcommands`, `nocommands`, `&channel`, `reset`), the check of a command and its keys against
//! them, their description as `ACL LIST` and `ACL GETUSER` show it, the registry of such users,
//! and the `ACL LOG` of denials.
//!
//! ACL users are layered on tenants: each belongs to one tenant (the one of the admin who
//! created it, or `tenant=<name>` in its rules when tenants are declared), works in that tenant's
//! keyspaces with the tenant-level rights `read`, `write` and `flush` (plus `admin` when no
//! tenants are declared, as Redis' users), and its command rules and key patterns narrow that
//! further: its patterns apply to key names inside its tenant. Configured users (`[[users]]`,
//! `[[tenants.users]]`, the `default` user) stay as the configuration says.
//!
//! Passwords are kept as SHA-256 hex digests, as Redis keeps them (so an aclfile of Redis' moves
//! over as is).
//!
//! May import: `tenancy::acl` (categories, rights), `command` (the table rows a rule names),
//! `error`. Must not import `state` or command handlers.

use super::acl::{self, category_by_name, Perms};
use crate::command::{table, CommandSpec};
use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// What a command rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// `@category` (its bit).
    Category(u32),
    /// `cmd` or `cmd|sub` (lower case).
    Command(String),
}

/// One key pattern with the access it grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPattern {
    pub pattern: String,
    pub read: bool,
    pub write: bool,
}

/// An ACL user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclUser {
    pub name: String,
    pub tenant: usize,
    pub enabled: bool,
    pub nopass: bool,
    /// SHA-256 digests, lower-case hex.
    pub passwords: Vec<String>,
    /// `+@all` (true) or `-@all` (false) before `rules`.
    all_commands: bool,
    /// The command rules after that, in order; the last one that matches decides.
    rules: Vec<(bool, Target)>,
    pub allkeys: bool,
    pub keys: Vec<KeyPattern>,
    pub allchannels: bool,
    pub channels: Vec<String>,
}

/// Why a command is refused (see [`AclUser::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// The command (its full name, `config|get` for a subcommand).
    Command(String),
    /// A key the command names.
    Key(String),
    /// A pub/sub channel (or PSUBSCRIBE pattern) the command names.
    Channel(String),
}

impl Denied {
    /// The NOPERM error, in Redis 7.2's words.
    pub fn error_text(&self, user: &str) -> String {
        match self {
            Denied::Command(c) => {
                format!("NOPERM User {user} has no permissions to run the '{c}' command")
            }
            Denied::Key(_) => "NOPERM No permissions to access a key".into(),
            Denied::Channel(_) => "NOPERM No permissions to access a channel".into(),
        }
    }

    /// ACL DRYRUN's text (Redis 7.2).
    pub fn dryrun_text(&self, user: &str) -> String {
        match self {
            Denied::Command(c) => {
                format!("User {user} has no permissions to run the '{c}' command")
            }
            Denied::Key(k) => format!("User {user} has no permissions to access the '{k}' key"),
            Denied::Channel(c) => {
                format!("User {user} has no permissions to access the '{c}' channel")
            }
        }
    }
}

/// SHA-256 of a password, lower-case hex (Redis' ACL hash).
pub fn sha256_hex(password: &[u8]) -> String {
    let digest = Sha256::digest(password);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

impl AclUser {
    /// A new user as Redis makes one: off, no password, no commands, no keys, no channels.
    pub fn new(name: &str, tenant: usize) -> AclUser {
        AclUser {
            name: name.to_string(),
            tenant,
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            all_commands: false,
            rules: Vec::new(),
            allkeys: false,
            keys: Vec::new(),
            allchannels: false,
            channels: Vec::new(),
        }
    }

    /// Apply one rule. `tenant_of` resolves `tenant=<name>` (None: unknown or not allowed).
    /// Errors are the text after Redis' "Error in ACL SETUSER modifier '…': ".
    pub fn apply(
        &mut self,
        rule: &str,
        tenant_of: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<(), String> {
        let lower = rule.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "allkeys" => {
                self.allkeys = true;
                self.keys.clear();
            }
            "resetkeys" => {
                self.allkeys = false;
                self.keys.clear();
            }
            "allchannels" => {
                self.allchannels = true;
                self.channels.clear();
            }
            "resetchannels" => {
                self.allchannels = false;
                self.channels.clear();
            }
            "allcommands" => self.set_all(true),
            "nocommands" => self.set_all(false),
            "reset" => {
                let tenant = self.tenant;
                *self = AclUser::new(&self.name, tenant);
            }
            "sanitize-payload" | "skip-sanitize-payload" => {}
            _ => return self.apply_prefixed(rule, &lower, tenant_of),
        }
        Ok(())
    }

    fn apply_prefixed(
        &mut self,
        rule: &str,
        lower: &str,
        tenant_of: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<(), String> {
        let syntax = || "Syntax error".to_string();
        if let Some(pass) = rule.strip_prefix('>') {
            let hash = sha256_hex(pass.as_bytes());
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if let Some(pass) = rule.strip_prefix('<') {
            let hash = sha256_hex(pass.as_bytes());
            self.remove_password(&hash)?;
        } else if let Some(hash) = rule.strip_prefix('#') {
            check_hash(hash)?;
            if !self.passwords.iter().any(|h| h == hash) {
                self.passwords.push(hash.to_string());
            }
            self.nopass = false;
        } else if let Some(hash) = rule.strip_prefix('!') {
            check_hash(hash)?;
            self.remove_password(hash)?;
        } else if let Some(pattern) = rule.strip_prefix('~') {
            self.add_keys(pattern, true, true);
        } else if let Some(rest) = rule.strip_prefix('%') {
            let (access, pattern) = rest.split_once('~').ok_or_else(syntax)?;
            let (mut read, mut write) = (false, false);
            for c in access.chars() {
                match c.to_ascii_uppercase() {
                    'R' => read = true,
                    'W' => write = true,
                    _ => return Err(syntax()),
                }
            }
            if !(read || write) {
                return Err(syntax());
            }
            self.add_keys(pattern, read, write);
        } else if let Some(channel) = rule.strip_prefix('&') {
            if channel == "*" {
                self.allchannels = true;
                self.channels.clear();
            } else if !self.allchannels && !self.channels.iter().any(|c| c == channel) {
                self.channels.push(channel.to_string());
            }
        } else if let Some(name) = lower.strip_prefix("tenant=") {
            let _ = name;
            let name = &rule["tenant=".len()..];
            self.tenant = tenant_of(name).ok_or_else(|| format!("No tenant named '{name}'"))?;
        } else if let Some(rest) = lower.strip_prefix('+') {
            self.command_rule(true, rest)?;
        } else if let Some(rest) = lower.strip_prefix('-') {
            self.command_rule(false, rest)?;
        } else {
            return Err(syntax());
        }
        Ok(())
    }

    fn remove_password(&mut self, hash: &str) -> Result<(), String> {
        let before = self.passwords.len();
        self.passwords.retain(|h| h != hash);
        if self.passwords.len() == before {
            return Err("no such password".into());
        }
        Ok(())
    }

    fn add_keys(&mut self, pattern: &str, read: bool, write: bool) {
        if pattern == "*" && read && write {
            self.allkeys = true;
            self.keys.clear();
            return;
        }
        if self.allkeys {
            return;
        }
        let p = KeyPattern {
            pattern: pattern.to_string(),
            read,
            write,
        };
        if !self.keys.contains(&p) {
            self.keys.push(p);
        }
    }

    fn set_all(&mut self, allow: bool) {
        self.all_commands = allow;
        self.rules.clear();
    }

    /// `+…`/`-…` (lower case, without the sign): `@category`, `cmd` or `cmd|sub`.
    fn command_rule(&mut self, allow: bool, what: &str) -> Result<(), String> {
        let target = if let Some(cat) = what.strip_prefix('@') {
            if cat == "all" {
                self.set_all(allow);
                return Ok(());
            }
            Target::Category(
                category_by_name(cat).ok_or("Unknown command or category name in ACL")?,
            )
        } else {
            let (container, sub) = match what.split_once('|') {
                Some((c, s)) => (c, Some(s)),
                None => (what, None),
            };
            let spec = table()
                .get(container.as_bytes())
                .ok_or("Unknown command or category name in ACL")?;
            if let Some(sub) = sub {
                if spec.subcommands.is_empty() {
                    return Err("Allowing first-arg of a subcommand is not supported".into());
                }
                if !spec
                    .subcommands
                    .iter()
                    .any(|s| s.name.rsplit('|').next() == Some(sub))
                {
                    return Err("Unknown command or category name in ACL".into());
                }
            }
            Target::Command(what.to_string())
        };
        // As Redis: an earlier copy of the same rule (either sign) is dropped, this one appended.
        self.rules.retain(|(_, t)| *t != target);
        self.rules.push((allow, target));
        Ok(())
    }

    /// Whether the command row `spec` (a subcommand's row where there is one) may run;
    /// `container` is the container's row for a subcommand (for its name and group).
    pub fn allows_command(&self, spec: &CommandSpec, container: &CommandSpec) -> bool {
        let cats = acl::categories(spec, container);
        let mut allowed = self.all_commands;
        for (allow, target) in &self.rules {
            let hit = match target {
                Target::Category(bit) => cats & bit != 0,
                Target::Command(name) => name == spec.name || name == container.name,
            };
            if hit {
                allowed = *allow;
            }
        }
        allowed
    }

    /// Whether `key` may be read (and/or written).
    pub fn allows_key(&self, key: &[u8], read: bool, write: bool) -> bool {
        if self.allkeys {
            return true;
        }
        let (mut r, mut w) = (!read, !write);
        for p in &self.keys {
            if gradus_store::glob::glob_match(p.pattern.as_bytes(), key) {
                r |= p.read;
                w |= p.write;
                if r && w {
                    return true;
                }
            }
        }
        r && w
    }

    /// The check dispatch runs: the command, then each of its keys (read for a command that
    /// reads, write for one that writes).
    pub fn check(
        &self,
        spec: &CommandSpec,
        container: &CommandSpec,
        args: &[bytes::Bytes],
    ) -> Result<(), Denied> {
        // As Redis' `ACLSelectorCheckCmd`: a command any client may run before authenticating
        // (AUTH, HELLO, RESET, QUIT) needs no permission, so a user without `+auth` can still
        // log in again on its connection.
        if !spec.has(crate::command::flags::NO_AUTH) && !self.allows_command(spec, container) {
            return Err(Denied::Command(spec.name.to_string()));
        }
        if !self.allchannels {
            // As Redis: a channel must match one of the user's `&` patterns; a PSUBSCRIBE
            // pattern must be one of them, literally.
            let (channels, patterns) = container.channel_args(args);
            for channel in channels {
                let allowed = self.channels.iter().any(|p| {
                    if patterns {
                        p.as_bytes() == &channel[..]
                    } else {
                        gradus_store::glob::glob_match(p.as_bytes(), channel)
                    }
                });
                if !allowed {
                    return Err(Denied::Channel(
                        String::from_utf8_lossy(channel).into_owned(),
                    ));
                }
            }
        }
        if self.allkeys {
            return Ok(());
        }
        let write = container.has(crate::command::flags::WRITE);
        let read = !write || container.has(crate::command::flags::READONLY);
        for i in container.key_indexes(args) {
            if let Some(key) = args.get(i) {
                if !self.allows_key(key, read, write) {
                    return Err(Denied::Key(String::from_utf8_lossy(key).into_owned()));
                }
            }
        }
        Ok(())
    }

    /// Whether `password` opens this user.
    pub fn verify(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let hash = sha256_hex(password);
        self.passwords.iter().any(|h| h == &hash)
    }

    /// `+@all`/`-@all` and the rules after it, as ACL GETUSER's `commands` shows them.
    pub fn describe_commands(&self) -> String {
        let mut out = String::from(if self.all_commands { "+@all" } else { "-@all" });
        for (allow, target) in &self.rules {
            out.push(' ');
            out.push(if *allow { '+' } else { '-' });
            match target {
                Target::Category(bit) => {
                    out.push('@');
                    out.push_str(acl::category_name(*bit));
                }
                Target::Command(name) => out.push_str(name),
            }
        }
        out
    }

    /// The key patterns as ACL GETUSER's `keys` shows them (`~*`, `%R~a* ~b*`).
    pub fn describe_keys(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        self.keys
            .iter()
            .map(|p| match (p.read, p.write) {
                (true, true) => format!("~{}", p.pattern),
                (true, false) => format!("%R~{}", p.pattern),
                _ => format!("%W~{}", p.pattern),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The channel patterns as ACL GETUSER's `channels` shows them.
    pub fn describe_channels(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        self.channels
            .iter()
            .map(|c| format!("&{c}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The user as one `ACL LIST` line (also an aclfile line); `tenant` is the tenant's name
    /// when tenants are declared (written as `tenant=<name>`, Gradus' own rule).
    pub fn describe(&self, tenant: Option<&str>) -> String {
        let mut parts = vec![
            "user".to_string(),
            self.name.clone(),
            if self.enabled { "on" } else { "off" }.to_string(),
        ];
        if self.nopass {
            parts.push("nopass".into());
        }
        for h in &self.passwords {
            parts.push(format!("#{h}"));
        }
        if let Some(t) = tenant {
            parts.push(format!("tenant={t}"));
        }
        let keys = self.describe_keys();
        if !keys.is_empty() {
            parts.push(keys);
        }
        if self.allchannels {
            parts.push("&*".into());
        } else {
            parts.push("resetchannels".into());
            let channels = self.describe_channels();
            if !channels.is_empty() {
                parts.push(channels);
            }
        }
        parts.push(self.describe_commands());
        parts.join(" ")
    }

    /// The tenant-level rights an ACL user works with (see the module docs).
    pub fn perms(&self, multi_tenant: bool) -> Perms {
        let base = Perms::READ.union(Perms::WRITE).union(Perms::FLUSH);
        if multi_tenant {
            base
        } else {
            Perms::ALL
        }
    }
}

fn check_hash(hash: &str) -> Result<(), String> {
    if hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err("The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters".into())
    }
}

/// One `ACL LOG` entry.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub count: u64,
    /// `command`, `key` or `auth`.
    pub reason: &'static str,
    /// `toplevel`, `multi` or `lua`.
    pub context: &'static str,
    pub object: String,
    pub username: String,
    pub client_info: String,
    pub entry_id: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
}

/// The most entries `ACL LOG` keeps (Redis' `acllog-max-len` default).
const LOG_MAX: usize = 128;

/// The ACL users made at run time or read from the aclfile, and the log of denials.
#[derive(Default)]
pub struct AclUsers {
    /// By name. Taken briefly (AUTH, ACL commands); never held across an `.await`.
    users: RwLock<BTreeMap<String, Arc<AclUser>>>,
    log: Mutex<(VecDeque<LogEntry>, u64)>,
}

impl AclUsers {
    pub fn get(&self, name: &str) -> Option<Arc<AclUser>> {
        self.users.read().get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        self.users.read().keys().cloned().collect()
    }

    pub fn all(&self) -> Vec<Arc<AclUser>> {
        self.users.read().values().cloned().collect()
    }

    pub fn put(&self, user: AclUser) {
        self.users.write().insert(user.name.clone(), Arc::new(user));
    }

    pub fn remove(&self, name: &str) -> bool {
        self.users.write().remove(name).is_some()
    }

    /// Replace every user (ACL LOAD, start-up).
    pub fn replace(&self, users: Vec<AclUser>) {
        *self.users.write() = users
            .into_iter()
            .map(|u| (u.name.clone(), Arc::new(u)))
            .collect();
    }

    /// Add a denial; one like the last few (same reason, object, user, context) counts up instead.
    pub fn log(&self, mut entry: LogEntry) {
        let mut guard = self.log.lock();
        let (entries, next_id) = &mut *guard;
        if let Some(same) = entries.iter_mut().find(|e| {
            e.reason == entry.reason
                && e.context == entry.context
                && e.object == entry.object
                && e.username == entry.username
                && entry.created_ms.saturating_sub(e.updated_ms) < 60_000
        }) {
            same.count += 1;
            same.updated_ms = entry.created_ms;
            same.client_info = entry.client_info;
            return;
        }
        entry.entry_id = *next_id;
        *next_id += 1;
        entries.push_front(entry);
        entries.truncate(LOG_MAX);
    }

    /// The newest `count` entries, newest first.
    pub fn log_entries(&self, count: usize) -> Vec<LogEntry> {
        self.log.lock().0.iter().take(count).cloned().collect()
    }

    pub fn log_reset(&self) {
        self.log.lock().0.clear();
    }
}

/// Parse an aclfile: one `user <name> <rules…>` per line (blank lines and `#` comments aside).
/// Errors name the line: `path:3: …`.
pub fn parse_file(
    text: &str,
    path: &str,
    default_tenant: usize,
    tenant_of: &dyn Fn(&str) -> Option<usize>,
    reserved: &dyn Fn(&str) -> bool,
) -> Result<Vec<AclUser>, String> {
    let mut users: Vec<AclUser> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: &str| format!("{path}:{}: {why}", n + 1);
        let mut words = line.split_whitespace();
        if words.next() != Some("user") {
            return Err(at("line should start with user keyword"));
        }
        let name = words.next().ok_or_else(|| at("user name missing"))?;
        if reserved(name) {
            return Err(at(&format!(
                "user '{name}' is defined in the configuration, not in the aclfile"
            )));
        }
        if users.iter().any(|u| u.name == name) {
            return Err(at(&format!("Duplicate user '{name}' found")));
        }
        let mut user = AclUser::new(name, default_tenant);
        for rule in words {
            user.apply(rule, tenant_of)
                .map_err(|e| at(&format!("Error in applying operation '{rule}': {e}")))?;
        }
        users.push(user);
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &str) -> AclUser {
        let mut u = AclUser::new("alice", 0);
        for r in rules.split_whitespace() {
            u.apply(r, &|_| None).unwrap();
        }
        u
    }

    fn row(name: &str) -> &'static CommandSpec {
        table().get(name.as_bytes()).unwrap()
    }

    #[test]
    fn command_rules_last_match_wins() {
        let u = user("on +@all -@dangerous");
        assert!(u.allows_command(row("get"), row("get")));
        assert!(!u.allows_command(row("flushall"), row("flushall")));
        assert!(!u.allows_command(row("keys"), row("keys")));
        let u = user("+@read -get +set");
        assert!(!u.allows_command(row("get"), row("get")));
        assert!(u.allows_command(row("set"), row("set")));
        assert!(u.allows_command(row("hgetall"), row("hgetall")));
        assert!(!u.allows_command(row("hset"), row("hset")));
        assert_eq!(u.describe_commands(), "-@all +@read -get +set");
        let u = user("+@read -@read");
        assert_eq!(u.describe_commands(), "-@all -@read");
        let u = user("+get nocommands");
        assert_eq!(u.describe_commands(), "-@all");
    }

    #[test]
    fn key_patterns() {
        let u = user("~app:* %R~ro:* %W~wo:*");
        assert!(u.allows_key(b"app:1", true, true));
        assert!(u.allows_key(b"ro:1", true, false));
        assert!(!u.allows_key(b"ro:1", false, true));
        assert!(u.allows_key(b"wo:1", false, true));
        assert!(!u.allows_key(b"wo:1", true, false));
        assert!(!u.allows_key(b"other", true, false));
        assert_eq!(u.describe_keys(), "~app:* %R~ro:* %W~wo:*");
        assert_eq!(user("~a allkeys").describe_keys(), "~*");
        assert_eq!(user("allkeys resetkeys ~b").describe_keys(), "~b");
    }

    #[test]
    fn passwords_are_sha256() {
        let u = user("on >secret");
        assert!(u.verify(b"secret"));
        assert!(!u.verify(b"other"));
        assert_eq!(
            u.passwords,
            vec!["2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b".to_string()]
        );
        assert!(!user("off >secret").verify(b"secret"));
        assert!(user("on nopass").verify(b"anything"));
        let mut u = user("on");
        assert!(u.apply("#abc", &|_| None).is_err());
        assert!(u.apply("+nosuchcommand", &|_| None).is_err());
        assert!(u.apply("+@nosuchcategory", &|_| None).is_err());
        assert!(u.apply("bogus", &|_| None).is_err());
    }

    #[test]
    fn describe_matches_redis() {
        assert_eq!(
            user("").describe(None),
            "user alice off resetchannels -@all"
        );
        assert_eq!(
            user("on nopass allkeys allchannels allcommands").describe(None),
            "user alice on nopass ~* &* +@all"
        );
    }

    #[test]
    fn saved_lines_load_back_the_same() {
        for rules in [
            "",
            "on >a >b nopass",
            "on #2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b ~a* %R~b %W~c &x",
            "off allkeys allchannels +@all -@dangerous +config|get -keys",
            "on resetkeys ~k %RW~j nocommands +get -@read +@read",
        ] {
            let u = user(rules);
            let line = u.describe(None);
            let back = parse_file(&line, "f", 0, &|_| None, &|_| false).unwrap();
            assert_eq!(back, vec![u], "{line}");
        }
    }

    #[test]
    fn aclfile_lines() {
        let users = parse_file(
            "# comment\nuser a on nopass ~* +@all\n\nuser b off\n",
            "users.acl",
            0,
            &|_| None,
            &|n| n == "default",
        )
        .unwrap();
        assert_eq!(users.len(), 2);
        let err =
            parse_file("user a on +nosuch\n", "users.acl", 0, &|_| None, &|_| false).unwrap_err();
        assert!(err.starts_with("users.acl:1: "), "{err}");
        assert!(parse_file("user default on\n", "f", 0, &|_| None, &|n| n == "default").is_err());
    }
}
