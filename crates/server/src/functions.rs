//! Redis 7 function libraries: what FUNCTION LOAD registered, per tenant.
//!
//! A tenant's libraries are its own: `FUNCTION LOAD` in one tenant's keyspace is not seen by
//! another tenant (nor listed, called, dumped or flushed by it). Each tenant's set is an
//! immutable [`Libraries`] behind an `Arc`, replaced whole by a change (copy-on-write), so
//! `FCALL` only clones an `Arc` under a read lock that no change holds for more than the swap.
//!
//! This module holds data only: the Lua side (running a library's code to learn what it
//! registers, calling a function) is `command::scripting`'s, the commands are
//! `command::functions`'. Changes are logged by those commands through the write path and kept
//! in snapshots (`persist::snapshot`, `persist::record`). May import: nothing of the server but
//! `bytes` and std.

use bytes::Bytes;
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A script's or function's flags (Redis 7: `#!lua flags=…` for EVAL, `flags = {…}` for
/// `redis.register_function`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScriptFlags(u8);

impl ScriptFlags {
    pub const NO_WRITES: ScriptFlags = ScriptFlags(1);
    pub const ALLOW_OOM: ScriptFlags = ScriptFlags(2);
    pub const ALLOW_STALE: ScriptFlags = ScriptFlags(4);
    pub const NO_CLUSTER: ScriptFlags = ScriptFlags(8);
    pub const ALLOW_CROSS_SLOT_KEYS: ScriptFlags = ScriptFlags(16);

    /// Every flag with its Redis name, in the order FUNCTION LIST shows them.
    pub const NAMES: [(ScriptFlags, &'static str); 5] = [
        (Self::NO_WRITES, "no-writes"),
        (Self::ALLOW_OOM, "allow-oom"),
        (Self::ALLOW_STALE, "allow-stale"),
        (Self::NO_CLUSTER, "no-cluster"),
        (Self::ALLOW_CROSS_SLOT_KEYS, "allow-cross-slot-keys"),
    ];

    pub const fn bits(self) -> u8 {
        self.0
    }

    pub const fn from_bits(bits: u8) -> ScriptFlags {
        ScriptFlags(bits & 31)
    }

    /// The flag named `name`, if Redis knows it.
    pub fn named(name: &[u8]) -> Option<ScriptFlags> {
        Self::NAMES
            .iter()
            .find(|(_, n)| n.as_bytes() == name)
            .map(|(f, _)| *f)
    }

    pub fn contains(self, other: ScriptFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn insert(&mut self, other: ScriptFlags) {
        self.0 |= other.0;
    }

    /// The names of the flags set, in Redis' order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .into_iter()
            .filter(move |(f, _)| self.contains(*f))
            .map(|(_, n)| n)
    }
}

/// One function a library registered.
#[derive(Debug)]
pub struct FunctionDef {
    pub name: String,
    pub description: Option<Bytes>,
    pub flags: ScriptFlags,
    /// Set once a run touched a key it did not declare: later runs take the exclusive path
    /// from the start (see `command::scripting`).
    pub cross_key: AtomicBool,
}

/// One loaded library.
#[derive(Debug)]
pub struct Library {
    /// Unique for each load in this process: a thread's Lua state keeps the library's compiled
    /// functions under it.
    pub id: u64,
    pub name: String,
    /// The whole code as loaded, shebang line included (FUNCTION LIST WITHCODE, DUMP, logs).
    pub code: Bytes,
    pub functions: Vec<FunctionDef>,
}

static NEXT_LIBRARY_ID: AtomicU64 = AtomicU64::new(1);

impl Library {
    pub fn new(name: String, code: Bytes, functions: Vec<FunctionDef>) -> Library {
        Library {
            id: NEXT_LIBRARY_ID.fetch_add(1, Ordering::Relaxed),
            name,
            code,
            functions,
        }
    }
}

/// A tenant's libraries, by name, and its functions, by name (function names are unique across
/// a tenant's libraries, as across a Redis server's).
#[derive(Debug, Default, Clone)]
pub struct Libraries {
    pub by_name: BTreeMap<String, Arc<Library>>,
    /// By name in ASCII lower case: FCALL finds a function whatever the case of its name, and
    /// two libraries may not hold names that differ only in case (Redis' `functionDictType`
    /// compares them so). Regression: `test_fcall_finds_a_function_whatever_the_case`.
    functions: HashMap<String, (Arc<Library>, usize)>,
}

/// The key of a function's name in [`Libraries`] (ASCII lower case; borrowed when it is).
fn folded(name: &str) -> std::borrow::Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// Why a set of libraries cannot take a library (Redis' texts, without the `ERR `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Collision {
    Library(String),
    Function(String),
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Collision::Library(name) => write!(f, "Library '{name}' already exists"),
            Collision::Function(name) => write!(f, "Function {name} already exists"),
        }
    }
}

impl Libraries {
    /// The function `name` and its library.
    pub fn function(&self, name: &str) -> Option<(&Arc<Library>, &FunctionDef)> {
        self.functions
            .get(folded(name).as_ref())
            .map(|(lib, i)| (lib, &lib.functions[*i]))
    }

    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    /// Add `library`; `replace`: one of the same name goes first. Fails, changing nothing, when
    /// the name is taken (without `replace`) or one of its functions belongs to another library.
    pub fn add(&mut self, library: Arc<Library>, replace: bool) -> Result<(), Collision> {
        let old = self.by_name.get(&library.name).cloned();
        if old.is_some() && !replace {
            return Err(Collision::Library(library.name.clone()));
        }
        for f in &library.functions {
            if let Some((owner, _)) = self.functions.get(folded(&f.name).as_ref()) {
                if owner.name != library.name {
                    return Err(Collision::Function(f.name.clone()));
                }
            }
        }
        if let Some(old) = old {
            self.remove(&old.name);
        }
        for (i, f) in library.functions.iter().enumerate() {
            // Two of one library's names that differ only in case: the first is found (Redis
            // keeps the first in its server-wide table).
            self.functions
                .entry(folded(&f.name).into_owned())
                .or_insert_with(|| (library.clone(), i));
        }
        self.by_name.insert(library.name.clone(), library);
        Ok(())
    }

    /// Remove the library `name`; false when there is none.
    pub fn remove(&mut self, name: &str) -> bool {
        match self.by_name.remove(name) {
            Some(lib) => {
                for f in &lib.functions {
                    self.functions.remove(folded(&f.name).as_ref());
                }
                true
            }
            None => false,
        }
    }
}

/// Every tenant's libraries (indexed by tenant).
pub struct Registry {
    tenants: Vec<RwLock<Arc<Libraries>>>,
}

impl Registry {
    pub fn new(tenants: usize) -> Registry {
        Registry {
            tenants: (0..tenants.max(1))
                .map(|_| RwLock::new(Arc::default()))
                .collect(),
        }
    }

    /// Tenant `tenant`'s libraries now.
    pub fn get(&self, tenant: usize) -> Arc<Libraries> {
        self.tenants
            .get(tenant)
            .map(|l| l.read().clone())
            .unwrap_or_default()
    }

    /// Change tenant `tenant`'s libraries with `change` (on a copy, which replaces them when
    /// `change` succeeds). Changes of one tenant are serialized.
    pub fn update<R, E>(
        &self,
        tenant: usize,
        change: impl FnOnce(&mut Libraries) -> Result<R, E>,
    ) -> Option<Result<R, E>> {
        let slot = self.tenants.get(tenant)?;
        let mut current = slot.write();
        let mut next = Libraries::clone(&current);
        let result = change(&mut next);
        if result.is_ok() {
            *current = Arc::new(next);
        }
        Some(result)
    }

    /// Every tenant's libraries (for a snapshot), by tenant index.
    pub fn all(&self) -> Vec<Arc<Libraries>> {
        self.tenants.iter().map(|l| l.read().clone()).collect()
    }

    /// Forget every tenant's libraries (a snapshot found damaged was loaded).
    pub fn clear(&self) {
        for slot in &self.tenants {
            *slot.write() = Arc::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, functions: &[&str]) -> Arc<Library> {
        Arc::new(Library::new(
            name.into(),
            Bytes::new(),
            functions
                .iter()
                .map(|f| FunctionDef {
                    name: f.to_string(),
                    description: None,
                    flags: ScriptFlags::default(),
                    cross_key: AtomicBool::new(false),
                })
                .collect(),
        ))
    }

    #[test]
    fn function_names_are_unique_across_libraries_and_replace_swaps_a_library_whole() {
        let mut libs = Libraries::default();
        libs.add(lib("a", &["f", "g"]), false).unwrap();
        assert_eq!(
            libs.add(lib("a", &["h"]), false),
            Err(Collision::Library("a".into()))
        );
        assert_eq!(
            libs.add(lib("b", &["g"]), false),
            Err(Collision::Function("g".into()))
        );
        assert_eq!(libs.function_count(), 2, "a failed add changes nothing");
        libs.add(lib("a", &["h"]), true).unwrap();
        assert!(libs.function("f").is_none());
        assert_eq!(libs.function("h").unwrap().0.name, "a");
        assert!(libs.remove("a"));
        assert_eq!(libs.function_count(), 0);
    }

    #[test]
    fn tenants_do_not_share_libraries() {
        let registry = Registry::new(2);
        registry
            .update(0, |l| l.add(lib("a", &["f"]), false))
            .unwrap()
            .unwrap();
        assert!(registry.get(0).function("f").is_some());
        assert!(registry.get(1).function("f").is_none());
    }
}
