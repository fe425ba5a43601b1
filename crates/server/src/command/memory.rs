//! MEMORY USAGE | STATS | DOCTOR | PURGE | MALLOC-STATS | HELP: what the process holds, from the
//! allocator's count (`crate::alloc`) and the store's per-key accounting.
//!
//! `total.allocated` is every byte the allocator has handed out (Redis' `used_memory`); the
//! dataset is what the keyspaces account for their keys (block, table share, value, expiry
//! index: `gradus_store::Shard::memory_usage`), so the two differ by the server's own buffers.
//!
//! May import: `crate::alloc`, `crate::info` (the figures INFO memory shows), the store.

use super::{cmd, flags, sub, CommandSpec, Ctx, NO_KEYS};
use crate::args::{is, parse_i64};
use crate::error::{CmdError, CmdResult};
use crate::info::MemoryFigures;
use bytes::Bytes;
use gradus_proto::Frame;

/// MEMORY USAGE reads a key without naming it at a key position (as OBJECT does): it needs
/// `read`.
const READ: u32 = flags::READONLY | flags::READS_KEYSPACE;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("memory", -2, flags::READONLY, NO_KEYS, "server", "A container for memory diagnostics commands.", memory).with_subcommands(&[
        sub("memory|doctor", 2, flags::READONLY, "Outputs a memory problems report."),
        sub("memory|help", 2, flags::LOADING, "Returns helpful text about the different subcommands."),
        sub("memory|malloc-stats", 2, flags::READONLY, "Returns the allocator statistics."),
        sub("memory|purge", 2, flags::ADMIN, "Asks the allocator to release memory."),
        sub("memory|stats", 2, flags::READONLY, "Returns details about memory usage."),
        sub("memory|usage", -3, READ, "Estimates the memory usage of a key.").with_keys((2, 2, 1)).key_flags(&["RO"]),
    ]),
];

const HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Print this help.",
];

/// Redis' reply when there is too little data to judge.
const DOCTOR_EMPTY: &str = "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.";
/// Redis' reply when nothing looks wrong.
const DOCTOR_FINE: &str = "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.";
/// Below this many allocated bytes the doctor says nothing (Redis: 5 MB).
const DOCTOR_MIN_BYTES: usize = 5 << 20;

fn memory(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
    match sub.as_str() {
        "help" => Ok(Frame::Array(
            HELP.iter()
                .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
                .collect(),
        )),
        "usage" => usage(ctx, args),
        "stats" => Ok(stats(ctx)),
        "doctor" => Ok(Frame::Verbatim {
            format: *b"txt",
            text: Bytes::from(doctor(&MemoryFigures::now(ctx.shared))),
        }),
        "malloc-stats" => {
            let m = MemoryFigures::now(ctx.shared);
            Ok(Frame::Verbatim {
                format: *b"txt",
                text: Bytes::from(format!(
                    "mimalloc: allocated {} bytes, committed {} (peak {}), resident {} (peak {})\n",
                    m.allocated, m.process.commit, m.process.peak_commit, m.rss, m.process.peak_rss
                )),
            })
        }
        "purge" => {
            crate::alloc::purge();
            Ok(Frame::ok())
        }
        _ => Err(CmdError::UnknownSubcommand {
            cmd: "MEMORY".into(),
            sub: String::from_utf8_lossy(&args[1]).into_owned(),
        }),
    }
}

/// `MEMORY USAGE key [SAMPLES count]`: SAMPLES is checked as Redis checks it and otherwise
/// unused (the store's figure for a value is exact, not sampled).
fn usage(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut i = 3;
    while i < args.len() {
        if is(&args[i], "samples") && i + 1 < args.len() {
            let samples = parse_i64(&args[i + 1]).ok_or(CmdError::NotInteger)?;
            if samples < 0 {
                return Err(CmdError::Syntax);
            }
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key = &args[2];
    let now = ctx.now_ms;
    let usage = ctx.db().lock(key).memory_usage(key, now);
    Ok(usage.map_or(Frame::Null, |bytes| Frame::Integer(bytes as i64)))
}

fn stats(ctx: &mut Ctx<'_>) -> Frame {
    let m = MemoryFigures::now(ctx.shared);
    let bulk = |s: &str| Frame::Bulk(Bytes::from(s.to_string()));
    let int = |v: usize| Frame::Integer(v as i64);
    let ratio = |a: usize, b: usize| {
        if b == 0 {
            0.0
        } else {
            a as f64 / b as f64
        }
    };
    let mut out = vec![
        (bulk("peak.allocated"), int(m.peak_allocated)),
        (bulk("total.allocated"), int(m.allocated)),
        (bulk("startup.allocated"), int(m.startup_allocated)),
    ];
    let mut keys = 0;
    let mut overhead = 0;
    for ks in ctx.shared.store.keyspaces() {
        let (mut main, mut expires) = (0, 0);
        let mut count = 0;
        ks.for_each_shard(|shard| {
            let (t, e) = shard.overhead_bytes();
            main += t;
            expires += e;
            count += shard.len();
        });
        keys += count;
        overhead += main + expires;
        if count > 0 {
            out.push((
                bulk(&format!("db.{}", ks.index())),
                Frame::Map(vec![
                    (bulk("overhead.hashtable.main"), int(main)),
                    (bulk("overhead.hashtable.expires"), int(expires)),
                ]),
            ));
        }
    }
    let dataset = m.dataset.saturating_sub(overhead);
    out.extend([
        (bulk("overhead.total"), int(m.startup_allocated + overhead)),
        (bulk("keys.count"), int(keys)),
        (
            bulk("keys.bytes-per-key"),
            int(m.dataset.checked_div(keys).unwrap_or(0)),
        ),
        (bulk("dataset.bytes"), int(dataset)),
        (
            bulk("dataset.percentage"),
            Frame::Double(100.0 * ratio(dataset, m.allocated)),
        ),
        (
            bulk("peak.percentage"),
            Frame::Double(100.0 * ratio(m.allocated, m.peak_allocated)),
        ),
        (bulk("allocator.allocated"), int(m.allocated)),
        (bulk("allocator.active"), int(m.process.commit)),
        (bulk("allocator.resident"), int(m.rss)),
        (
            bulk("allocator-fragmentation.ratio"),
            Frame::Double(ratio(m.process.commit, m.allocated)),
        ),
        (
            bulk("rss-overhead.ratio"),
            Frame::Double(ratio(m.rss, m.process.commit)),
        ),
        (
            bulk("fragmentation"),
            Frame::Double(m.fragmentation_ratio()),
        ),
        (
            bulk("fragmentation.bytes"),
            Frame::Integer(m.rss as i64 - m.allocated as i64),
        ),
    ]);
    Frame::Map(out)
}

/// MEMORY DOCTOR's report: Redis' texts for "too little to judge" and "nothing wrong", and a
/// plain account of what looks wrong otherwise.
pub(crate) fn doctor(m: &MemoryFigures) -> String {
    if m.allocated < DOCTOR_MIN_BYTES {
        return DOCTOR_EMPTY.to_string();
    }
    let mut issues = Vec::new();
    if m.fragmentation_ratio() > 1.4 {
        issues.push(format!(
            " * High total RSS: the resident set is {:.2} times the memory allocated ({} vs {} bytes). Freed memory the allocator has not returned yet is the usual cause after many deletions; MEMORY PURGE asks it to return what it can.",
            m.fragmentation_ratio(),
            m.rss,
            m.allocated
        ));
    }
    if m.peak_allocated > m.allocated.saturating_mul(3) / 2 {
        issues.push(format!(
            " * Peak memory: at some point the server held {} bytes, over 150% of what it holds now ({} bytes). RSS may stay near the peak until the allocator returns the pages.",
            m.peak_allocated, m.allocated
        ));
    }
    if issues.is_empty() {
        return DOCTOR_FINE.to_string();
    }
    format!(
        "Sam, I detected a few issues in this instance memory implementation:\n\n{}\n\nI'm here to keep you safe, Sam. I want to help you.\n",
        issues.join("\n\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::ProcessMemory;

    fn figures(allocated: usize, peak: usize, rss: usize) -> MemoryFigures {
        MemoryFigures {
            allocated,
            peak_allocated: peak,
            startup_allocated: 0,
            dataset: allocated / 2,
            rss,
            process: ProcessMemory::default(),
        }
    }

    #[test]
    fn the_doctor_speaks_as_redis_does_when_there_is_nothing_to_say() {
        assert_eq!(doctor(&figures(1 << 20, 1 << 20, 4 << 20)), DOCTOR_EMPTY);
        assert_eq!(
            doctor(&figures(100 << 20, 110 << 20, 120 << 20)),
            DOCTOR_FINE
        );
        let report = doctor(&figures(100 << 20, 400 << 20, 300 << 20));
        assert!(
            report.contains("High total RSS") && report.contains("Peak memory"),
            "{report}"
        );
    }
}
