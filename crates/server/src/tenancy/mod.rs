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
//!
//! This module is the model and the keyspace layout: [`Tenancy`] built from the configuration,
//! its tenants and keyspaces, the users lookup, and the `LAYOUT` text (the file itself is
//! `persist::layout`'s). [`auth`] verifies users and throttles AUTH; [`acl`] holds the rights,
//! the ACL categories and the check of a command against them; [`acl_users`] the Redis ACL users
//! (`ACL SETUSER`, the aclfile), layered on tenants.
//!
//! May import: `config`, `error`; `acl` also reads command table rows (`command::CommandSpec`)
//! and the connection's rights (`client`). Must not import `state`, `persist` or command
//! handlers: they import this.

pub mod acl;
pub mod acl_users;
pub mod auth;

pub use acl::{check_perms, no_perm, required_perms, Perms};
pub use auth::{hash_password, AuthThrottle, User};

use crate::config::{Config, KeyspaceConfig, UserConfig};
use crate::error::ServerError;
use auth::{parse_secret, Secret};
use gradus_log::Durability;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;

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
    /// The global keyspace its users get on the memcached port (None: they cannot log in there).
    pub memcached: Option<usize>,
}

/// Everything about tenants, fixed at startup.
pub struct Tenancy {
    pub tenants: Vec<TenantDef>,
    /// By global index (the store has exactly this many keyspaces).
    pub keyspaces: Vec<KeyspaceDef>,
    users: HashMap<String, User>,
    /// True when the configuration declares tenants (then every connection must authenticate).
    pub multi_tenant: bool,
    /// (tenant, global keyspace) the memcached port serves before a login, and without one:
    /// `memcached-tenant`'s memcached keyspace (its `memcached-keyspace`, else `memcached-db`).
    /// A login moves the connection to its user's tenant's keyspace ([`Tenancy::memcached_of`]).
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

/// A fingerprint of what a primary and its replicas must share (replication refuses a
/// mismatch): the keyspace layout (global index, tenant/keyspace), whether tenants are
/// declared, and each user's name and tenant. Degrees and limits may differ: each node applies
/// its own. SHA-1 in hex.
pub fn layout_fingerprint(tenancy: &Tenancy) -> String {
    let mut text = render_layout(tenancy);
    text.push_str(&format!("multi_tenant {}\n", tenancy.multi_tenant));
    let mut users: Vec<(&String, usize)> =
        tenancy.users.iter().map(|(n, u)| (n, u.tenant)).collect();
    users.sort();
    for (name, tenant) in users {
        text.push_str(&format!("user {name} {tenant}\n"));
    }
    sha1_smol::Sha1::from(text).digest().to_string()
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
            "{what}: unknown durability degree {s:?} (expected none, lazy, background, strict or replicated)"
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
                User::new("default".into(), 0, Perms::ALL, Secret::RequirePass),
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
        let mut tenants: Vec<TenantDef> = tenants
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
                    memcached: None,
                }
            })
            .collect();
        // Each tenant's own memcached keyspace, by name.
        for (t, tc) in config.tenants.iter().enumerate() {
            let Some(name) = &tc.memcached_keyspace else {
                continue;
            };
            let full = format!("{}/{name}", tc.name);
            let g = keyspaces
                .iter()
                .position(|k| k.tenant == Some(t) && k.full_name == full)
                .ok_or_else(|| {
                    ServerError::Config(format!(
                        "tenant {:?}: memcached-keyspace {name:?} is not one of its keyspaces",
                        tc.name
                    ))
                })?;
            tenants[t].memcached = Some(g);
        }
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
                .memcached
                .or_else(|| tenants[t].by_select.get(&config.memcached_db).copied())
                .ok_or_else(|| {
                    ServerError::Config(format!(
                        "memcached-db: tenant {:?} has no keyspace with select = {}",
                        tenants[t].name, config.memcached_db
                    ))
                })?;
            tenants[t].memcached = Some(g);
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
            User::new(
                u.name.clone(),
                tenant,
                perms,
                parse_secret(&u.name, &u.password)?,
            ),
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

    /// The keyspace at SELECT `index` of the tenant owning global keyspace `g` (MOVE, COPY … DB
    /// and SWAPDB name keyspaces this way; the tenant comes from `g` so a replay, which has no
    /// authenticated tenant, resolves them as the write did).
    pub fn sibling(&self, g: usize, index: i64) -> Option<usize> {
        let tenant = self.tenant_of(g)?;
        self.select(tenant, usize::try_from(index).ok()?)
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

    /// The keyspace `tenant`'s users get on the memcached port, if any.
    pub fn memcached_of(&self, tenant: usize) -> Option<usize> {
        self.tenants.get(tenant)?.memcached
    }

    /// The tenant named `name`.
    pub fn tenant_named(&self, name: &str) -> Option<usize> {
        self.tenants.iter().position(|t| t.name == name)
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

    /// How many keyspaces there are (global indexes are 0..this).
    pub fn keyspace_count(&self) -> usize {
        self.keyspaces.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64mb"), Some(64 << 20));
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("1x"), None);
    }

    #[test]
    fn memcached_keyspace_per_tenant() {
        let mut c = two_tenants();
        c.tenants[1].memcached_keyspace = Some("s".into());
        let t = Tenancy::build(&c, &[]).unwrap();
        // Tenant a: the port's tenant, memcached-db 0; tenant b: its own keyspace "s".
        assert_eq!(t.memcached, (0, t.select(0, 0).unwrap()));
        assert_eq!(t.memcached_of(0), Some(t.select(0, 0).unwrap()));
        assert_eq!(t.memcached_of(1), Some(t.select(1, 0).unwrap()));
        assert_ne!(t.memcached_of(0), t.memcached_of(1));
        // Without it, b has none: its users cannot log in on the memcached port.
        let t = Tenancy::build(&two_tenants(), &[]).unwrap();
        assert_eq!(t.memcached_of(1), None);
        // memcached-tenant's own memcached-keyspace wins over memcached-db.
        let mut c = two_tenants();
        c.tenants[0].memcached_keyspace = Some("c".into());
        let t = Tenancy::build(&c, &[]).unwrap();
        assert_eq!(t.memcached, (0, t.select(0, 1).unwrap()));
        c.tenants[0].memcached_keyspace = Some("x".into());
        assert!(Tenancy::build(&c, &[]).is_err());
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
}
