//! The status page (`/` on the metrics port): one server-rendered HTML page for an administrator,
//! with no external assets (inline CSS, no scripts) that reloads itself every few seconds
//! (`<meta http-equiv="refresh">`). Sections: durability degrees and fsync latency, memory per
//! tenant against its limit, session lock contention, clients, the last snapshot, recent slow
//! commands. Every text from clients (names, arguments, addresses) is HTML-escaped.
//!
//! May import: `state`, `observe`, `info` (data directory sizes).

use crate::state::Shared;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// Seconds between the page's reloads.
pub const REFRESH_SECONDS: u32 = 5;

/// `text` with `&`, `<`, `>`, `"` and `'` escaped for HTML.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}\
th{background:#eee}.bar{background:#e5e5e5;width:12em;height:.8em;display:inline-block}\
.fill{background:#3a7;height:100%}.over{background:#c33}.muted{color:#777}code{font-size:.95em}";

/// The page.
pub fn render(shared: &Shared) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let uptime = shared.started.elapsed().as_secs();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
<meta name=\"viewport\" content=\"width=device-width\"><title>Gradus status</title>\
<style>{STYLE}</style></head><body><h1>Gradus status</h1>\
<p class=\"muted\">Gradus {} (Redis {} compatible), port {}, up {}s; this page reloads every {REFRESH_SECONDS}s.</p>",
        crate::GRADUS_VERSION,
        crate::REDIS_COMPAT_VERSION,
        shared.port.load(Ordering::Relaxed),
        uptime
    );
    durability(shared, &mut out);
    memory(shared, &mut out);
    locks(shared, &mut out);
    clients(shared, &mut out);
    snapshot(shared, &mut out);
    slow_commands(shared, &mut out);
    out.push_str("</body></html>\n");
    out
}

fn durability(shared: &Shared, out: &mut String) {
    out.push_str("<h2 id=\"durability\">Durability degrees and fsync latency</h2>");
    let mut per_degree: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for def in &shared.tenancy.keyspaces {
        if def.tenant.is_some() {
            per_degree
                .entry(def.degree.as_str())
                .or_default()
                .push(def.full_name.clone());
        }
    }
    out.push_str("<table><tr><th>Degree</th><th>Keyspaces</th></tr>");
    for (degree, names) in &per_degree {
        let _ = write!(
            out,
            "<tr><td>{degree}</td><td>{}</td></tr>",
            escape(&names.join(", "))
        );
    }
    out.push_str("</table>");
    match shared.persist.log.get() {
        None => out.push_str("<p>No keyspace is logged: nothing is fsynced.</p>"),
        Some(log) => {
            let s = log.stats();
            let _ = write!(
                out,
                "<table><tr><th>fsyncs</th><th>mean fsync</th><th>last fsync</th><th>worst fsync</th>\
<th>mean group commit</th><th>durable LSN</th><th>not yet durable</th><th>log</th></tr>\
<tr><td>{}</td><td>{:.0} µs</td><td>{} µs</td><td>{} µs</td><td>{:.1} records</td><td>{}</td><td>{} records</td><td>{}</td></tr></table>",
                s.fsyncs,
                s.mean_fsync_micros(),
                s.last_fsync_micros,
                s.max_fsync_micros,
                s.mean_batch(),
                s.durable_lsn,
                s.last_lsn.saturating_sub(s.durable_lsn),
                match &s.poisoned {
                    None => "healthy".to_string(),
                    Some(why) => format!("POISONED: {}", escape(why)),
                }
            );
        }
    }
}

fn bar(used: usize, limit: usize) -> String {
    if limit == 0 {
        return "<span class=\"muted\">no limit</span>".into();
    }
    let pct = (used as f64 / limit as f64 * 100.0).min(100.0);
    let class = if used > limit { "fill over" } else { "fill" };
    format!(
        "<span class=\"bar\"><span class=\"{class}\" style=\"width:{pct:.0}%;display:block\"></span></span> {pct:.0}%"
    )
}

fn memory(shared: &Shared, out: &mut String) {
    out.push_str("<h2 id=\"memory\">Memory per tenant</h2><table><tr><th>Tenant</th><th>Keyspace</th><th>Keys</th><th>Used</th><th>Limit</th><th></th><th>Evicted</th></tr>");
    let store = shared.store.keyspaces();
    for t in &shared.tenancy.tenants {
        let used: usize = t.keyspaces.iter().map(|&g| store[g].used_bytes()).sum();
        let keys: usize = t.keyspaces.iter().map(|&g| store[g].stats().0).sum();
        let _ = write!(
            out,
            "<tr><th>{}</th><th>all</th><th>{keys}</th><th>{}</th><th>{}</th><th>{}</th><th></th></tr>",
            escape(&t.name),
            human_bytes(used as u64),
            if t.memory_limit == 0 { "—".into() } else { human_bytes(t.memory_limit as u64) },
            bar(used, t.memory_limit)
        );
        for &g in &t.keyspaces {
            let def = &shared.tenancy.keyspaces[g];
            let ks = &store[g];
            let used = ks.used_bytes();
            let _ = write!(
                out,
                "<tr><td></td><td>{} (db {})</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(def.full_name.rsplit('/').next().unwrap_or("")),
                def.select,
                ks.stats().0,
                human_bytes(used as u64),
                if def.memory_limit == 0 { "—".into() } else { human_bytes(def.memory_limit as u64) },
                bar(used, def.memory_limit),
                ks.evictions()
            );
        }
    }
    out.push_str("</table>");
}

fn locks(shared: &Shared, out: &mut String) {
    let s = shared.locks.stats();
    let (held, waiting) = shared.locks.counts();
    let (wait_buckets, wait_sum) = s.wait.read();
    let waits: u64 = wait_buckets.iter().sum();
    let mean_wait = wait_sum.checked_div(waits).unwrap_or(0);
    let _ = write!(
        out,
        "<h2 id=\"locks\">Lock contention</h2><table><tr><th>Held now</th><th>Waiting now</th><th>Granted at once</th>\
<th>Granted after a wait</th><th>Mean wait</th><th>Waiter-cap rejections</th><th>Expired leases</th></tr>\
<tr><td>{held}</td><td>{waiting}</td><td>{}</td><td>{}</td><td>{mean_wait} µs</td><td>{}</td><td>{}</td></tr></table>",
        s.granted_at_once.load(Ordering::Relaxed),
        s.granted_after_wait.load(Ordering::Relaxed),
        s.waiter_cap_rejections.load(Ordering::Relaxed),
        s.lease_expirations.load(Ordering::Relaxed)
    );
    let busiest: Vec<_> = {
        let mut all = shared.locks.list();
        all.sort_by_key(|l| std::cmp::Reverse(l.waiters));
        all.into_iter().take(10).collect()
    };
    if !busiest.is_empty() {
        out.push_str(
            "<table><tr><th>Lock</th><th>Holder</th><th>Held for</th><th>Waiters</th></tr>",
        );
        for l in busiest {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td>client {}</td><td>{} ms</td><td>{}</td></tr>",
                escape(&String::from_utf8_lossy(&l.name)),
                l.holder_client,
                l.held_for.as_millis(),
                l.waiters
            );
        }
        out.push_str("</table>");
    }
}

fn clients(shared: &Shared, out: &mut String) {
    let all = shared.clients.all();
    let _ = write!(
        out,
        "<h2 id=\"clients\">Clients</h2><p>{} connected (maxclients {}).</p>",
        all.len(),
        shared.live.maxclients.load(Ordering::Relaxed)
    );
    out.push_str("<table><tr><th>id</th><th>addr</th><th>name</th><th>tenant</th><th>user</th><th>age</th><th>idle</th><th>last command</th></tr>");
    let now = gradus_store::now_ms();
    for c in all.iter().take(100) {
        let tenant = shared
            .tenancy
            .tenants
            .get(c.tenant.load(Ordering::Relaxed))
            .map_or("—", |t| t.name.as_str());
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}s</td><td>{}s</td><td>{}</td></tr>",
            c.id,
            escape(&c.addr.to_string()),
            escape(&c.name.lock().clone().unwrap_or_default()),
            escape(tenant),
            escape(&c.user.lock()),
            c.created.elapsed().as_secs(),
            now.saturating_sub(c.last_active_ms.load(Ordering::Relaxed)) / 1000,
            escape(&c.last_cmd.lock())
        );
    }
    out.push_str("</table>");
    if all.len() > 100 {
        let _ = write!(
            out,
            "<p class=\"muted\">… and {} more.</p>",
            all.len() - 100
        );
    }
}

fn snapshot(shared: &Shared, out: &mut String) {
    let p = &shared.persist;
    let (log_bytes, snapshot_bytes) = crate::info::data_dir_sizes(&shared.config.dir);
    let last = p.last_save_unix.load(Ordering::Relaxed);
    let ago = crate::observe::unix_seconds().saturating_sub(last);
    let millis = match p.last_snapshot_millis.load(Ordering::Relaxed) {
        u64::MAX => "—".to_string(),
        ms => format!("{ms} ms"),
    };
    let _ = write!(
        out,
        "<h2 id=\"snapshot\">Last snapshot</h2><table><tr><th>Taken</th><th>Took</th><th>Status</th><th>In progress</th>\
<th>Snapshots on disk</th><th>Log on disk</th><th>Snapshots written</th></tr>\
<tr><td>{ago}s ago (Unix {last})</td><td>{millis}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        escape(&p.last_snapshot_status.lock()),
        if p.snapshot_pending() { "yes" } else { "no" },
        human_bytes(snapshot_bytes),
        human_bytes(log_bytes),
        p.snapshots_written.load(Ordering::Relaxed)
    );
}

fn slow_commands(shared: &Shared, out: &mut String) {
    let entries = shared.observer.slowlog.get(20, |_| true);
    let _ = write!(
        out,
        "<h2 id=\"slowlog\">Recent slow commands</h2><p class=\"muted\">Commands over {} µs (slowlog-log-slower-than), newest first.</p>",
        shared.live.slowlog_log_slower_than.load(Ordering::Relaxed)
    );
    if entries.is_empty() {
        out.push_str("<p>None.</p>");
        return;
    }
    out.push_str("<table><tr><th>id</th><th>when</th><th>µs</th><th>command</th><th>client</th><th>name</th></tr>");
    for e in entries {
        let words: Vec<String> = e
            .args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            e.id,
            e.time,
            e.micros,
            escape(&words.join(" ")),
            escape(&e.addr),
            escape(&e.name)
        );
    }
    out.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_text_cannot_inject_markup() {
        assert_eq!(
            escape("<script>\"x\" & 'y'</script>"),
            "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;"
        );
    }
}
