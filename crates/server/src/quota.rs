//! Memory limits: a keyspace's own `memory-limit` and its tenant's total, enforced before every
//! command that may grow memory (those flagged `denyoom`, and EXEC of a transaction holding one).
//!
//! As in Redis, a write is admitted while usage is at or under the limit (so usage can overshoot by
//! one write) and the next one is refused or makes room first:
//! - over a keyspace's own limit, an `lru` keyspace evicts its own keys by approximate LRU
//!   (sampling) until it fits; a `none` keyspace refuses the write with `-OOM` and keeps every byte;
//! - over the tenant's limit, the tenant's `lru` keyspaces give up keys (the selected one first if it
//!   is one, else the largest); when none has anything left, the write is refused with `-OOM`.
//!
//! So cache pressure can never evict session data: only `lru` keyspaces ever lose keys. Evictions
//! from a logged keyspace are logged as DEL, so replay agrees with memory.

use crate::client::ClientState;
use crate::command::{flags, CommandSpec};
use crate::error::CmdError;
use crate::persist::record::LoggedCommand;
use crate::state::Shared;
use bytes::Bytes;

/// Keys sampled per eviction (Redis' maxmemory-samples default).
const SAMPLES: usize = 5;
/// Evictions one command may perform before it proceeds anyway (bounds its latency).
const MAX_EVICTIONS_PER_COMMAND: usize = 10_000;

/// True when `spec` (with the connection's queued transaction, for EXEC) may grow memory.
pub fn may_grow(spec: &CommandSpec, client: &ClientState) -> bool {
    if spec.has(flags::DENYOOM) {
        return true;
    }
    spec.name == "exec"
        && client
            .multi
            .as_ref()
            .is_some_and(|m| m.queued.iter().any(|(s, _)| s.has(flags::DENYOOM)))
}

fn used(shared: &Shared, g: usize) -> usize {
    shared.store.keyspaces()[g].used_bytes()
}

/// What is over its limit, if anything.
fn over(shared: &Shared, g: usize, tenant: usize) -> (bool, bool) {
    let t = &shared.tenancy;
    let def = &t.keyspaces[g];
    let ks_over = def.memory_limit > 0 && used(shared, g) > def.memory_limit;
    let tdef = &t.tenants[tenant];
    let tenant_over = tdef.memory_limit > 0
        && tdef
            .keyspaces
            .iter()
            .map(|&k| used(shared, k))
            .sum::<usize>()
            > tdef.memory_limit;
    (ks_over, tenant_over)
}

/// Make room for a write into the connection's keyspace, or say why there is none.
pub fn make_room(shared: &Shared, client: &mut ClientState, now_ms: u64) -> Result<(), CmdError> {
    let tenancy = &shared.tenancy;
    let g = client.db;
    let Some(tenant) = tenancy.tenant_of(g) else {
        return Ok(());
    };
    if over(shared, g, tenant) == (false, false) {
        return Ok(());
    }
    // Evict under the gate (a snapshot sees an eviction and its DEL record together or neither)
    // and, when an eviction may be logged, in log order. A cache whose evicting keyspaces are
    // all `none` (the usual case) does not touch the global write-order lock.
    let _gate = shared.store.shared(client.id);
    let may_log = tenancy.tenants[tenant]
        .keyspaces
        .iter()
        .any(|&k| tenancy.keyspaces[k].evict && shared.persist.db_logged(k));
    let _order = may_log.then(|| shared.write_order.lock());
    let mut evicted: Vec<LoggedCommand> = Vec::new();
    let mut count = 0;
    let result = loop {
        let (ks_over, tenant_over) = over(shared, g, tenant);
        if !ks_over && !tenant_over || count >= MAX_EVICTIONS_PER_COMMAND {
            break Ok(());
        }
        let victim = if ks_over {
            tenancy.keyspaces[g].evict.then_some(g)
        } else {
            tenancy.tenants[tenant]
                .keyspaces
                .iter()
                .copied()
                .filter(|&k| tenancy.keyspaces[k].evict && used(shared, k) > 0)
                .max_by_key(|&k| (k == g, used(shared, k)))
        };
        let Some(key) =
            victim.and_then(|v| Some((v, shared.store.keyspaces()[v].evict_one(SAMPLES, now_ms)?)))
        else {
            break Err(oom(shared, g, tenant, ks_over));
        };
        count += 1;
        if shared.persist.db_logged(key.0) {
            evicted.push(LoggedCommand {
                db: key.0,
                args: vec![Bytes::from_static(b"DEL"), key.1],
            });
        }
    };
    if !evicted.is_empty() {
        let degree = evicted
            .iter()
            .filter_map(|c| shared.persist.degrees.get(c.db).copied())
            .max()
            .unwrap_or(gradus_log::Durability::Lazy);
        if let Err(e) = shared.persist.append(client, now_ms, &evicted, degree) {
            tracing::error!(error = %e, "logging evictions failed");
            return Err(CmdError::Other(format!(
                "MISCONF evictions applied in memory but not logged: {e}"
            )));
        }
    }
    result
}

fn oom(shared: &Shared, g: usize, tenant: usize, keyspace_limit: bool) -> CmdError {
    let t = &shared.tenancy;
    let what = if keyspace_limit {
        format!("keyspace {}", t.keyspaces[g].full_name)
    } else {
        format!("tenant {}", t.tenants[tenant].name)
    };
    CmdError::Other(format!(
        "OOM command not allowed when used memory > 'memory-limit' of {what}"
    ))
}
