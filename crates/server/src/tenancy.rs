//! Tenants: who may connect, which keyspaces each connection sees, and what it may do there.
//!
//! Every keyspace of the store has a *global index* (the number log records and snapshots carry)
//! and belongs to one tenant, which addresses it by its `SELECT` index. A connection is bound to a
//! tenant when it authenticates, so isolation is structural: `SELECT n` can only reach the
//! tenant's own keyspaces, and every key command works inside the selected keyspace, so no command
//! can name another tenant's key. Locks are keyed by global keyspace too.
//!
//! Global indices are stable for the life of a data directory: the `LAYOUT` file there lists
//! `index tenant/keyspace` lines; keyspaces keep their index across restarts whatever the order of
//! the configuration, new ones get fresh indices, and a keyspace that disappears from the
//! configuration keeps its index and its data (unreachable, but never lost) until it comes back.
//!
//! With no `[[tenants]]` in the configuration there is one tenant, `default`, with the databases
//! `0..databases` and the Redis-style `default` user guarded by `requirepass`.

use crate::config::{Config, KeyspaceConfig, UserConfig};
use crate::error::{CmdError, ServerError};
use gradus_log::Durability;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// One keyspace, by global index.
#[derive(Debug)]
pub struct KeyspaceDef {
    /// `tenant/keyspace`, as in the LAYOUT file.
    pub full_name: String,
    /// Owning tenant; None for a keyspace kept from an earlier configuration (unreachable).
    pub tenant: Option<usize>,
    pub select: usize,
    pub degree: Durability,
    /// Evict by approximate LRU when over a limit (`lru`); otherwise reject writes with OOM.
    pub evict: bool,
    /// Bytes; 0 = no limit of its own.
    pub memory_limit: usize,
}

/// One tenant.
#[derive(Debug)]
pub struct TenantDef {
    pub name: String,
    /// Bytes for all the tenant's keyspaces together; 0 = no limit.
    pub memory_limit: usize,
    /// Global indices of the tenant's keyspaces, in SELECT order.
    pub keyspaces: Vec<usize>,
    by_select: BTreeMap<usize, usize>,
    /// Commands run by the tenant's connections (INFO).
    pub ops: AtomicU64,
    /// True when any of its keyspaces, or the tenant, has a memory limit.
    pub limited: bool,
}

/// How a user proves who it is.
enum Secret {
    /// The Redis-style default user: the live `requirepass` (empty = no password).
    RequirePass,
    /// `pbkdf2-sha256$rounds$salt-hex$hash-hex`.
    Pbkdf2 {
        rounds: u32,
        salt: Vec<u8>,
        hash: [u8; 32],
    },
}

/// A configured user.
pub struct User {
    pub name: String,
    pub tenant: usize,
    pub perms: Perms,
    secret: Secret,
    /// SHA-256(salt ‖ password) of the last password that passed the slow check, so a client
    /// that connects for every page does not pay the key derivation every time.
    verified: Mutex<Option<[u8; 32]>>,
}

impl User {
    /// Check `pass` (constant time in the compared bytes). `requirepass` is the live setting.
    pub fn verify(&self, pass: &[u8], requirepass: &str) -> bool {
        match &self.secret {
            Secret::RequirePass => {
                requirepass.is_empty() || same_secret(requirepass.as_bytes(), pass)
            }
            Secret::Pbkdf2 { rounds, salt, hash } => {
                let quick: [u8; 32] = Sha256::new()
                    .chain_update(salt)
                    .chain_update(pass)
                    .finalize()
                    .into();
                if self
                    .verified
                    .lock()
                    .is_some_and(|v| same_secret(&v, &quick))
                {
                    return true;
                }
                let derived = derive(pass, salt, *rounds);
                let ok = same_secret(&derived, hash);
                if ok {
                    *self.verified.lock() = Some(quick);
                }
                ok
            }
        }
    }
}

/// Compare without an early exit on the first differing byte.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn derive(pass: &[u8], salt: &[u8], rounds: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(pass, salt, rounds, &mut out);
    out
}

/// Rounds of PBKDF2-HMAC-SHA256 for new hashes (`gradus passwd`).
pub const PASSWD_ROUNDS: u32 = 20_000;

/// The stored form of `password` with a fresh random salt (what `gradus passwd` prints).
pub fn hash_password(password: &str) -> String {
    let salt: [u8; 16] = rand::random();
    let hash = derive(password.as_bytes(), &salt, PASSWD_ROUNDS);
    format!(
        "pbkdf2-sha256${PASSWD_ROUNDS}${}${}",
        hex(&salt),
        hex(&hash)
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn parse_secret(user: &str, stored: &str) -> Result<Secret, ServerError> {
    let bad = || {
        ServerError::Config(format!(
            "user {user:?}: password must be a hash printed by `gradus passwd` \
             (pbkdf2-sha256$rounds$salt$hash); passwords are never stored in clear"
        ))
    };
    let parts: Vec<&str> = stored.split('$').collect();
    let [scheme, rounds, salt, hash] = parts[..] else {
        return Err(bad());
    };
    if scheme != "pbkdf2-sha256" {
        return Err(bad());
    }
    let rounds: u32 = rounds
        .parse()
        .ok()
        .filter(|r| (1..=10_000_000).contains(r))
        .ok_or_else(bad)?;
    let salt = unhex(salt).filter(|s| !s.is_empty()).ok_or_else(bad)?;
    let hash: [u8; 32] = unhex(hash)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(bad)?;
    Ok(Secret::Pbkdf2 { rounds, salt, hash })
}

/// Everything about tenants, fixed at startup.
pub struct Tenancy {
    pub tenants: Vec<TenantDef>,
    /// By global index (the store has exactly this many keyspaces).
    pub keyspaces: Vec<KeyspaceDef>,
    users: HashMap<String, User>,
    /// True when the configuration declares tenants (then every connection must authenticate).
    pub multi_tenant: bool,
    /// (tenant, global keyspace) the memcached port serves.
    pub memcached: (usize, usize),
}

/// Parse a size such as `67108864`, `"64mb"`, `"64MiB"` or `"1g"` into bytes.
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim().to_ascii_lowercase();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n: usize = n.parse().ok()?;
    let mult: usize = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Read the LAYOUT text: one `index name` per line.
pub fn parse_layout(text: &str) -> Result<Vec<(usize, String)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (i, name) = line
            .split_once(' ')
            .ok_or_else(|| format!("LAYOUT line {}: expected `index tenant/keyspace`", n + 1))?;
        let i: usize = i
            .parse()
            .map_err(|_| format!("LAYOUT line {}: bad index", n + 1))?;
        out.push((i, name.trim().to_string()));
    }
    Ok(out)
}

/// The LAYOUT text for `tenancy`.
pub fn render_layout(tenancy: &Tenancy) -> String {
    let mut out =
        String::from("# Gradus keyspace layout: global index, tenant/keyspace. Do not edit.\n");
    for (i, k) in tenancy.keyspaces.iter().enumerate() {
        out.push_str(&format!("{i} {}\n", k.full_name));
    }
    out
}

/// What the configuration declares, before indices are assigned.
struct Declared {
    full_name: String,
    tenant: usize,
    select: usize,
    degree: Durability,
    evict: bool,
    memory_limit: usize,
}

fn size_of(what: &str, v: &Option<String>) -> Result<usize, ServerError> {
    match v {
        None => Ok(0),
        Some(s) => parse_size(s).ok_or_else(|| {
            ServerError::Config(format!(
                "{what}: memory-limit {s:?} is not a size (e.g. 67108864, \"64mb\", \"1gb\")"
            ))
        }),
    }
}

fn degree_of(what: &str, s: &str) -> Result<Durability, ServerError> {
    s.parse().map_err(|_| {
        ServerError::Config(format!(
            "{what}: unknown durability degree {s:?} (expected none, lazy, background or strict)"
        ))
    })
}

impl Tenancy {
    /// Build from the configuration. `previous` is the data directory's layout (index, name), if
    /// it has one; indices named there are kept.
    pub fn build(config: &Config, previous: &[(usize, String)]) -> Result<Tenancy, ServerError> {
        let multi_tenant = !config.tenants.is_empty();
        let mut tenants = Vec::new();
        let mut declared = Vec::new();
        let mut users = HashMap::new();
        let default_degree = config.default_degree()?;
        if !multi_tenant {
            let degrees = config.database_degrees()?;
            tenants.push(("default".to_string(), 0usize));
            for (i, degree) in degrees.into_iter().enumerate() {
                declared.push(Declared {
                    full_name: format!("default/{i}"),
                    tenant: 0,
                    select: i,
                    degree,
                    evict: false,
                    memory_limit: 0,
                });
            }
            users.insert(
                "default".to_string(),
                User {
                    name: "default".into(),
                    tenant: 0,
                    perms: Perms::ALL,
                    secret: Secret::RequirePass,
                    verified: Mutex::new(None),
                },
            );
        } else {
            if !config.requirepass.is_empty() {
                return Err(ServerError::Config(
                    "requirepass cannot be combined with [[tenants]]: give each tenant its users"
                        .into(),
                ));
            }
            for (t, tc) in config.tenants.iter().enumerate() {
                let tname = &tc.name;
                if tname.is_empty() || tname.contains(['/', ' ']) {
                    return Err(ServerError::Config(format!(
                        "tenant name {tname:?} must be non-empty without '/' or spaces"
                    )));
                }
                if tenants.iter().any(|(n, _)| n == tname) {
                    return Err(ServerError::Config(format!(
                        "tenant {tname:?} declared twice"
                    )));
                }
                tenants.push((
                    tname.clone(),
                    size_of(&format!("tenant {tname}"), &tc.memory_limit)?,
                ));
                if tc.keyspaces.is_empty() {
                    return Err(ServerError::Config(format!(
                        "tenant {tname:?} has no keyspaces"
                    )));
                }
                for ks in &tc.keyspaces {
                    declared.push(Self::declare(tname, t, ks, default_degree)?);
                }
                for u in &tc.users {
                    Self::add_user(&mut users, u, t)?;
                }
            }
        }
        for u in &config.users {
            let t = match &u.tenant {
                None => 0,
                Some(name) => tenants.iter().position(|(n, _)| n == name).ok_or_else(|| {
                    ServerError::Config(format!("user {:?}: no tenant named {name:?}", u.name))
                })?,
            };
            Self::add_user(&mut users, u, t)?;
        }
        // SELECT indices are unique within a tenant.
        for (t, (tname, _)) in tenants.iter().enumerate() {
            let mut seen = std::collections::HashSet::new();
            for d in declared.iter().filter(|d| d.tenant == t) {
                if !seen.insert(d.select) {
                    return Err(ServerError::Config(format!(
                        "tenant {tname:?}: two keyspaces use SELECT {}",
                        d.select
                    )));
                }
            }
        }

        // Assign global indices: keep the data directory's, append new ones.
        let mut slots: Vec<Option<KeyspaceDef>> = Vec::new();
        let mut placed = vec![false; declared.len()];
        for (index, name) in previous {
            if *index >= 65536 {
                return Err(ServerError::Config(format!(
                    "LAYOUT names keyspace index {index}, beyond the limit of 65535"
                )));
            }
            if slots.len() <= *index {
                slots.resize_with(index + 1, || None);
            }
            let def = match declared.iter().position(|d| &d.full_name == name) {
                Some(p) if !placed[p] => {
                    placed[p] = true;
                    Self::def_from(&declared[p])
                }
                _ => {
                    tracing::warn!(keyspace = %name, index, "keyspace in the data directory is not in the configuration; its data is kept but unreachable until it is configured again");
                    KeyspaceDef {
                        full_name: name.clone(),
                        tenant: None,
                        select: 0,
                        degree: Durability::Background,
                        evict: false,
                        memory_limit: 0,
                    }
                }
            };
            slots[*index] = Some(def);
        }
        for (p, d) in declared.iter().enumerate() {
            if !placed[p] {
                slots.push(Some(Self::def_from(d)));
            }
        }
        let keyspaces: Vec<KeyspaceDef> = slots
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                s.unwrap_or_else(|| KeyspaceDef {
                    full_name: format!("(unused)/{i}"),
                    tenant: None,
                    select: 0,
                    degree: Durability::None,
                    evict: false,
                    memory_limit: 0,
                })
            })
            .collect();
        if keyspaces.len() > 65536 {
            return Err(ServerError::Config("more than 65536 keyspaces".into()));
        }
        let tenants: Vec<TenantDef> = tenants
            .into_iter()
            .enumerate()
            .map(|(t, (name, memory_limit))| {
                let mut by_select = BTreeMap::new();
                for (g, k) in keyspaces.iter().enumerate() {
                    if k.tenant == Some(t) {
                        by_select.insert(k.select, g);
                    }
                }
                let limited =
                    memory_limit > 0 || by_select.values().any(|&g| keyspaces[g].memory_limit > 0);
                TenantDef {
                    name,
                    memory_limit,
                    keyspaces: by_select.values().copied().collect(),
                    by_select,
                    ops: AtomicU64::new(0),
                    limited,
                }
            })
            .collect();
        let memcached = {
            let t = if config.memcached_tenant.is_empty() {
                0
            } else {
                tenants
                    .iter()
                    .position(|t| t.name == config.memcached_tenant)
                    .ok_or_else(|| {
                        ServerError::Config(format!(
                            "memcached-tenant: no tenant named {:?}",
                            config.memcached_tenant
                        ))
                    })?
            };
            let g = tenants[t]
                .by_select
                .get(&config.memcached_db)
                .copied()
                .ok_or_else(|| {
                    ServerError::Config(format!(
                        "memcached-db: tenant {:?} has no keyspace with select = {}",
                        tenants[t].name, config.memcached_db
                    ))
                })?;
            (t, g)
        };
        Ok(Tenancy {
            tenants,
            keyspaces,
            users,
            multi_tenant,
            memcached,
        })
    }

    fn declare(
        tenant: &str,
        t: usize,
        ks: &KeyspaceConfig,
        default_degree: Durability,
    ) -> Result<Declared, ServerError> {
        let what = format!("keyspace {tenant}/{}", ks.name);
        if ks.name.is_empty() || ks.name.contains(['/', ' ']) {
            return Err(ServerError::Config(format!(
                "{what}: name must be non-empty without '/' or spaces"
            )));
        }
        let evict = match ks.eviction.as_deref().unwrap_or("none") {
            "none" => false,
            "lru" => true,
            other => {
                return Err(ServerError::Config(format!(
                    "{what}: eviction {other:?} (expected \"lru\" or \"none\")"
                )))
            }
        };
        Ok(Declared {
            full_name: format!("{tenant}/{}", ks.name),
            tenant: t,
            select: ks.select,
            degree: match &ks.durability {
                Some(d) => degree_of(&what, d)?,
                None => default_degree,
            },
            evict,
            memory_limit: size_of(&what, &ks.memory_limit)?,
        })
    }

    fn def_from(d: &Declared) -> KeyspaceDef {
        KeyspaceDef {
            full_name: d.full_name.clone(),
            tenant: Some(d.tenant),
            select: d.select,
            degree: d.degree,
            evict: d.evict,
            memory_limit: d.memory_limit,
        }
    }

    fn add_user(
        users: &mut HashMap<String, User>,
        u: &UserConfig,
        tenant: usize,
    ) -> Result<(), ServerError> {
        if users.contains_key(&u.name) {
            return Err(ServerError::Config(format!(
                "user {:?} declared twice",
                u.name
            )));
        }
        let perms = Perms::parse(&u.permissions)
            .map_err(|e| ServerError::Config(format!("user {:?}: {e}", u.name)))?;
        users.insert(
            u.name.clone(),
            User {
                name: u.name.clone(),
                tenant,
                perms,
                secret: parse_secret(&u.name, &u.password)?,
                verified: Mutex::new(None),
            },
        );
        Ok(())
    }

    /// The user named `name`.
    pub fn user(&self, name: &[u8]) -> Option<&User> {
        std::str::from_utf8(name)
            .ok()
            .and_then(|n| self.users.get(n))
    }

    /// Every user's name, sorted.
    pub fn user_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.users.keys().cloned().collect();
        v.sort();
        v
    }

    /// True when some user other than the password-less default exists or a password is set.
    pub fn has_authentication(&self, requirepass: &str) -> bool {
        self.multi_tenant || !requirepass.is_empty() || self.users.len() > 1
    }

    /// The global index of `tenant`'s keyspace at SELECT `index`.
    pub fn select(&self, tenant: usize, index: usize) -> Option<usize> {
        self.tenants.get(tenant)?.by_select.get(&index).copied()
    }

    /// The keyspace a connection of `tenant` starts in: SELECT 0, or the lowest it has.
    pub fn initial_keyspace(&self, tenant: usize) -> usize {
        let t = &self.tenants[tenant];
        t.by_select
            .get(&0)
            .or_else(|| t.by_select.values().next())
            .copied()
            .unwrap_or(0)
    }

    /// The tenant owning global keyspace `g` (orphans belong to no one).
    pub fn tenant_of(&self, g: usize) -> Option<usize> {
        self.keyspaces.get(g).and_then(|k| k.tenant)
    }

    /// The SELECT index of global keyspace `g`.
    pub fn select_of(&self, g: usize) -> usize {
        self.keyspaces.get(g).map_or(g, |k| k.select)
    }

    /// Per-keyspace durability defaults, by global index.
    pub fn degrees(&self) -> Vec<Durability> {
        self.keyspaces.iter().map(|k| k.degree).collect()
    }

    /// Which keyspaces may evict, by global index (the store keeps sampling lists for those).
    pub fn evicting(&self) -> Vec<bool> {
        self.keyspaces.iter().map(|k| k.evict).collect()
    }
}

/// Failed AUTH attempts per source address, and the delay they earn: every attempt from an
/// address with `n` recent failures waits 10 ms × 2^(n-1), at most 2 s; failures older than a
/// minute are forgotten, and a success clears the address.
#[derive(Default)]
pub struct AuthThrottle {
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
    pub total_failures: AtomicU64,
}

const FORGET_AFTER: Duration = Duration::from_secs(60);
const MAX_DELAY: Duration = Duration::from_secs(2);

impl AuthThrottle {
    /// How long an attempt from `ip` must wait before its answer.
    pub fn delay(&self, ip: IpAddr) -> Duration {
        let map = self.failures.lock();
        match map.get(&ip) {
            Some(&(n, at)) if n > 0 && at.elapsed() < FORGET_AFTER => {
                let ms = 10u64.saturating_mul(1 << (n - 1).min(16));
                Duration::from_millis(ms).min(MAX_DELAY)
            }
            _ => Duration::ZERO,
        }
    }

    pub fn failed(&self, ip: IpAddr) {
        self.total_failures.fetch_add(1, Ordering::Relaxed);
        let mut map = self.failures.lock();
        if map.len() > 100_000 {
            map.retain(|_, (_, at)| at.elapsed() < FORGET_AFTER);
        }
        let e = map.entry(ip).or_insert((0, Instant::now()));
        if e.1.elapsed() >= FORGET_AFTER {
            e.0 = 0;
        }
        e.0 = e.0.saturating_add(1);
        e.1 = Instant::now();
    }

    pub fn succeeded(&self, ip: IpAddr) {
        self.failures.lock().remove(&ip);
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
    fn password_hash_round_trip() {
        let stored = hash_password("alpha-pass");
        let secret = parse_secret("u", &stored).unwrap();
        let user = User {
            name: "u".into(),
            tenant: 0,
            perms: Perms::READ,
            secret,
            verified: Mutex::new(None),
        };
        assert!(user.verify(b"alpha-pass", ""));
        assert!(user.verify(b"alpha-pass", ""), "cached path");
        assert!(!user.verify(b"alpha-pas", ""));
        assert!(!user.verify(b"", ""));
        assert!(parse_secret("u", "alpha-pass").is_err());
    }

    #[test]
    fn perms_parse() {
        let p = Perms::parse(&["read".into(), "write".into()]).unwrap();
        assert!(p.contains(Perms::READ) && p.contains(Perms::WRITE));
        assert!(!p.contains(Perms::FLUSH));
        assert_eq!(Perms::parse(&["admin".into()]).unwrap(), Perms::ALL);
        assert!(Perms::parse(&["root".into()]).is_err());
        assert_eq!(p.missing(Perms::FLUSH), Perms::FLUSH);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64mb"), Some(64 << 20));
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("1x"), None);
    }

    fn two_tenants() -> Config {
        let mut c = Config::embedded();
        let user = |name: &str| {
            format!(
                "[[tenants.users]]\nname = \"{name}\"\npassword = \"{}\"\npermissions = [\"read\"]\n",
                hash_password("pw")
            )
        };
        let text = format!(
            "[[tenants]]\nname = \"a\"\n{}[[tenants.keyspaces]]\nname = \"s\"\nselect = 0\n\
             [[tenants.keyspaces]]\nname = \"c\"\nselect = 1\neviction = \"lru\"\nmemory-limit = \"1mb\"\n\
             [[tenants]]\nname = \"b\"\n{}[[tenants.keyspaces]]\nname = \"s\"\nselect = 0\n",
            user("ua"),
            user("ub")
        );
        c.merge_toml(&text).unwrap();
        c.validate().unwrap();
        c
    }

    #[test]
    fn layout_keeps_indices_and_orphans() {
        let c = two_tenants();
        let fresh = Tenancy::build(&c, &[]).unwrap();
        let names: Vec<&str> = fresh
            .keyspaces
            .iter()
            .map(|k| k.full_name.as_str())
            .collect();
        assert_eq!(names, ["a/s", "a/c", "b/s"]);
        assert_eq!(fresh.select(1, 0), Some(2));
        assert_eq!(fresh.select(1, 1), None);
        assert!(fresh.keyspaces[1].evict && fresh.tenants[0].limited && !fresh.tenants[1].limited);
        // A data directory that knew b/s at 0, an old keyspace at 1, and a/s at 3.
        let previous = vec![
            (0, "b/s".to_string()),
            (1, "old/x".to_string()),
            (3, "a/s".to_string()),
        ];
        let t = Tenancy::build(&c, &previous).unwrap();
        assert_eq!(t.keyspaces[0].full_name, "b/s");
        assert_eq!(t.keyspaces[0].tenant, Some(1));
        assert_eq!(t.keyspaces[1].tenant, None, "kept, unreachable");
        assert_eq!(t.keyspaces[1].full_name, "old/x");
        assert_eq!(t.keyspaces[3].full_name, "a/s");
        assert_eq!(
            t.keyspaces[4].full_name, "a/c",
            "new keyspaces are appended"
        );
        assert_eq!(t.select(0, 0), Some(3));
        assert_eq!(t.select(1, 0), Some(0));
        assert_eq!(t.tenant_of(2), None, "an unused index belongs to no one");
        let back = parse_layout(&render_layout(&t)).unwrap();
        assert_eq!(back.len(), t.keyspaces.len());
        assert!(back.iter().all(|(i, n)| &t.keyspaces[*i].full_name == n));
    }

    #[test]
    fn bad_tenant_configs_are_rejected() {
        let mut c = two_tenants();
        c.requirepass = "x".into();
        assert!(Tenancy::build(&c, &[]).is_err());
        let mut c = two_tenants();
        c.tenants[0].keyspaces[1].select = 0;
        let e = Tenancy::build(&c, &[]).err().unwrap().to_string();
        assert!(e.contains("two keyspaces use SELECT 0"), "{e}");
        let mut c = two_tenants();
        c.tenants[1].users[0].password = "pw".into();
        assert!(Tenancy::build(&c, &[]).is_err());
        let mut c = two_tenants();
        c.tenants[0].keyspaces[1].eviction = Some("random".into());
        assert!(Tenancy::build(&c, &[]).is_err());
    }

    proptest::proptest! {
        /// The LAYOUT, size and stored-password parsers take anything without panicking, and a
        /// rendered layout parses back to itself.
        #[test]
        fn parsers_never_panic(text in ".{0,200}", n in 0usize..5000, name in "[a-z]{1,8}/[a-z0-9]{1,8}") {
            let _ = parse_layout(&text);
            let _ = parse_size(&text);
            let _ = parse_secret("u", &text);
            let line = format!("{n} {name}\n");
            proptest::prop_assert_eq!(parse_layout(&line).unwrap(), vec![(n, name)]);
        }
    }

    #[test]
    fn throttle_grows_and_clears() {
        let t = AuthThrottle::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(t.delay(ip), Duration::ZERO);
        t.failed(ip);
        assert_eq!(t.delay(ip), Duration::from_millis(10));
        t.failed(ip);
        t.failed(ip);
        assert_eq!(t.delay(ip), Duration::from_millis(40));
        for _ in 0..30 {
            t.failed(ip);
        }
        assert_eq!(t.delay(ip), MAX_DELAY);
        t.succeeded(ip);
        assert_eq!(t.delay(ip), Duration::ZERO);
    }
}
