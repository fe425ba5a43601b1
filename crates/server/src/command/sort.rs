//! SORT and SORT_RO: sort the elements of a sorted set (and of lists and sets, where the store has
//! them) numerically or as strings, by the elements themselves or by keys a `BY` pattern names,
//! fetch `GET` patterns for each, slice with `LIMIT`, and — SORT only — store the result as a list.
//!
//! Redis' rules are followed to the letter: a `BY` pattern without `*` means "don't sort" (the
//! value's own order, reversed by DESC for ordered types); a pattern's first `*` is replaced by
//! the element and `->field` reads a hash field; `#` is the element itself; a missing key weighs 0
//! (numeric) or sorts first (ALPHA); a weight that is not a number fails the whole command. Ties
//! between equal numeric weights are broken by comparing the elements as bytes. ALPHA compares
//! bytes, as Redis does under the C locale.
//!
//! Redis converts a sorted set it sorts to its skiplist encoding, so OBJECT ENCODING reports
//! `skiplist` for it afterwards; so does Gradus.
//!
//! The elements and every key the patterns name are read under one lock of all their shards, so
//! the result is a consistent view. `SORT … STORE` logs what it did, not itself: a `DEL` of the
//! destination and, when the result is not empty, an `RPUSH` of it, both run as writes joining
//! the command's write transaction. A replay therefore never re-reads the `BY`/`GET` keys, which
//! the log's partitioned replay could not order against writes to them.

use super::{cmd, flags, table, CommandSpec, Ctx, KEY1};
use crate::args::{int_arg, is};
use crate::error::{CmdError, CmdResult};
use bytes::{Bytes, BytesMut};
use gradus_proto::Frame;
use gradus_store::{MultiLock, Value};
use std::cmp::Ordering;

const READS: u32 = flags::MOVABLE_KEYS | flags::READS_KEYSPACE;

#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("sort", -2, flags::WRITE | flags::SELF_LOGGED | flags::DENYOOM | READS, KEY1, "generic", "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.", sort).keys_by(sort_keys).reads(1, 1).key_flags(&["RO access", "OW update"]),
    cmd("sort_ro", -2, flags::READONLY | READS, KEY1, "generic", "Returns the sorted elements of a list, a set, or a sorted set.", sort_ro),
];

/// SORT's keys as Redis' `sortGetKeys` finds them (COMMAND GETKEYS, ACL key rules, client-side
/// caching): the sorted key, then the destination after the last `STORE` that has an argument
/// after it. Like Redis it skips the arguments of LIMIT (2), GET and BY (1) and nothing else,
/// and it does not skip a STORE's argument (`STORE store x` stores into `x`); the BY and GET
/// patterns name no key of their own (they depend on the sorted value).
/// Regression: `test_command_getkeys_finds_the_sort_store_key`.
fn sort_keys(args: &[Bytes]) -> Vec<usize> {
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let a = &args[i];
        if is(a, "limit") {
            i += 2;
        } else if is(a, "get") || is(a, "by") {
            i += 1;
        } else if is(a, "store") && i + 1 < args.len() {
            store = Some(i + 1);
        }
        i += 1;
    }
    std::iter::once(1).chain(store).collect()
}

/// The elements of a value SORT can sort, in the value's own order, and whether that order
/// means something (a sorted set's or a list's does; a set's does not, so SORT … STORE of a set
/// "by nothing" sorts it as strings to stay deterministic, as Redis does). Each sortable type
/// adds its arm here.
pub struct Elements {
    pub items: Vec<Bytes>,
    pub ordered: bool,
}

/// The elements of `value`, or WRONGTYPE for a type SORT does not take.
pub fn elements_of(value: &Value) -> Result<Elements, CmdError> {
    match value {
        Value::ZSet(z) => Ok(Elements {
            items: z.iter().map(|(member, _)| member.to_bytes()).collect(),
            ordered: true,
        }),
        Value::List(l) => Ok(Elements {
            items: l.iter().map(Bytes::copy_from_slice).collect(),
            ordered: true,
        }),
        Value::Set(s) => Ok(Elements {
            items: s.iter().map(|m| m.to_bytes()).collect(),
            ordered: false,
        }),
        Value::Str(_) | Value::Hash(_) | Value::Stream(_) => Err(CmdError::WrongType),
    }
}

/// A BY or GET pattern, taken apart once.
#[derive(Debug, Clone, PartialEq)]
enum Pattern {
    /// `#`: the element itself.
    Element,
    /// A key with the element in place of the first `*`, and a hash field after `->`.
    Key {
        prefix: Bytes,
        suffix: Bytes,
        field: Option<Bytes>,
    },
    /// No `*`: names no key (GET yields nil; BY means "don't sort").
    Fixed,
}

impl Pattern {
    fn parse(p: &Bytes) -> Pattern {
        if p.as_ref() == b"#" {
            return Pattern::Element;
        }
        let Some(star) = p.iter().position(|&b| b == b'*') else {
            return Pattern::Fixed;
        };
        let rest = p.slice(star + 1..);
        let arrow = rest
            .windows(2)
            .position(|w| w == b"->")
            .filter(|&at| at + 2 < rest.len());
        let (suffix, field) = match arrow {
            Some(at) => (rest.slice(..at), Some(rest.slice(at + 2..))),
            None => (rest, None),
        };
        Pattern::Key {
            prefix: p.slice(..star),
            suffix,
            field,
        }
    }

    /// The key this pattern names for `element`.
    fn key(&self, element: &[u8]) -> Option<Bytes> {
        let Pattern::Key { prefix, suffix, .. } = self else {
            return None;
        };
        let mut key = BytesMut::with_capacity(prefix.len() + element.len() + suffix.len());
        key.extend_from_slice(prefix);
        key.extend_from_slice(element);
        key.extend_from_slice(suffix);
        Some(key.freeze())
    }

    /// What the pattern yields for `element`: the element, the string at the key, the hash
    /// field — or None (no such key, another type, no such field, no `*`).
    fn lookup(&self, lock: &mut MultiLock<'_>, element: &Bytes, now: u64) -> Option<Bytes> {
        let key = match self {
            Pattern::Element => return Some(element.clone()),
            Pattern::Fixed => return None,
            Pattern::Key { .. } => self.key(element)?,
        };
        let entry = lock.shard(&key).get(&key, now)?;
        match (self, &entry.value) {
            (Pattern::Key { field: None, .. }, Value::Str(s)) => Some(s.to_bytes()),
            (Pattern::Key { field: Some(f), .. }, Value::Hash(h)) => {
                h.get(f).map(Bytes::copy_from_slice)
            }
            _ => None,
        }
    }
}

/// SORT's options, as parsed.
struct Options {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    store: Option<Bytes>,
    by: Option<Pattern>,
    /// A BY pattern without `*`: keep the value's own order.
    dontsort: bool,
    gets: Vec<Pattern>,
}

fn parse(args: &[Bytes], readonly: bool) -> Result<Options, CmdError> {
    let mut o = Options {
        desc: false,
        alpha: false,
        limit: None,
        store: None,
        by: None,
        dontsort: false,
        gets: Vec::new(),
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        if is(a, "asc") {
            o.desc = false;
        } else if is(a, "desc") {
            o.desc = true;
        } else if is(a, "alpha") {
            o.alpha = true;
        } else if is(a, "limit") && left >= 2 {
            o.limit = Some((int_arg(&args[j + 1])?, int_arg(&args[j + 2])?));
            j += 2;
        } else if !readonly && is(a, "store") && left >= 1 {
            o.store = Some(args[j + 1].clone());
            j += 1;
        } else if is(a, "by") && left >= 1 {
            let by = Pattern::parse(&args[j + 1]);
            o.dontsort = by == Pattern::Fixed;
            o.by = Some(by);
            j += 1;
        } else if is(a, "get") && left >= 1 {
            o.gets.push(Pattern::parse(&args[j + 1]));
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// A weight as Redis reads it with `strtod`: leading white space allowed, nothing after the
/// number, no NaN, no overflow; the empty string is 0.
fn weight(bytes: &[u8]) -> Option<f64> {
    if bytes.is_empty() {
        return Some(0.0);
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let text = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let value: f64 = text.parse().ok()?;
    let literal_infinity = text
        .trim_start_matches(['+', '-'])
        .to_ascii_lowercase()
        .starts_with("inf");
    (!value.is_nan() && (value.is_finite() || literal_infinity)).then_some(value)
}

/// One element being sorted and what it is sorted by.
struct Item {
    element: Bytes,
    score: f64,
    by: Option<Bytes>,
}

/// Sort the elements of `key` as `o` says and apply the GET patterns: the output, element by
/// element (an element's GET results in order), None for a GET that found nothing.
fn sorted(ctx: &mut Ctx<'_>, key: &Bytes, o: &Options) -> Result<Vec<Option<Bytes>>, CmdError> {
    let now = ctx.now_ms;
    let read = |lock: &mut MultiLock<'_>| -> Result<Option<Elements>, CmdError> {
        lock.shard(key)
            .get(key, now)
            .map(|e| elements_of(&e.value))
            .transpose()
    };
    let db = ctx.db();
    let mut seen = read(&mut db.lock_keys([key.as_ref()]))?;
    ctx.lookup(seen.is_some());
    loop {
        // Lock the sorted key and every key the patterns name for its elements, then check that
        // the elements are still those the keys were derived from.
        let patterns: Vec<&Pattern> = o.by.iter().chain(&o.gets).collect();
        let mut keys = vec![key.clone()];
        for element in seen.iter().flat_map(|e| &e.items) {
            keys.extend(patterns.iter().filter_map(|p| p.key(element)));
        }
        let mut lock = db.lock_keys(keys.iter().map(|k| k.as_ref()));
        let now_seen = read(&mut lock)?;
        let same = match (&now_seen, &seen) {
            (None, None) => true,
            (Some(a), Some(b)) => a.items == b.items,
            _ => false,
        };
        if !same {
            seen = now_seen;
            continue;
        }
        // As in Redis, a sorted set that was sorted is a skiplist from now on.
        lock.shard(key).zset_to_skiplist(key);
        let elements = seen.unwrap_or(Elements {
            items: Vec::new(),
            ordered: true,
        });
        let in_script = ctx.client.in_script;
        return sort_locked(&mut lock, elements, o, in_script, now);
    }
}

fn sort_locked(
    lock: &mut MultiLock<'_>,
    elements: Elements,
    o: &Options,
    in_script: bool,
    now: u64,
) -> Result<Vec<Option<Bytes>>, CmdError> {
    let mut dontsort = o.dontsort;
    let mut alpha = o.alpha;
    let mut by = o.by.as_ref();
    if dontsort && !elements.ordered && (o.store.is_some() || in_script) {
        // A set stored "by nothing", or sorted so for a script, is sorted as strings, so the
        // stored list or the script's input is deterministic (Redis' sortCommandGeneric).
        (dontsort, alpha, by) = (false, true, None);
    }
    let len = elements.items.len() as i64;
    let (start, count) = o.limit.unwrap_or((0, -1));
    let mut start = start.clamp(0, len);
    let count = count.clamp(-1, len);
    let mut end = if count < 0 {
        len - 1
    } else {
        start + count - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    end = end.min(len - 1);

    let mut items: Vec<Item> = elements
        .items
        .into_iter()
        .map(|element| Item {
            element,
            score: 0.0,
            by: None,
        })
        .collect();
    if dontsort {
        if elements.ordered && o.desc {
            items.reverse();
        }
    } else {
        let mut bad_weight = false;
        for item in &mut items {
            let value = match by {
                Some(p) => p.lookup(lock, &item.element, now),
                None => Some(item.element.clone()),
            };
            let Some(value) = value else { continue };
            if alpha {
                if by.is_some() {
                    item.by = Some(value);
                }
            } else {
                match weight(&value) {
                    Some(w) => item.score = w,
                    None => bad_weight = true,
                }
            }
        }
        if bad_weight {
            return Err(CmdError::err(
                "One or more scores can't be converted into double",
            ));
        }
        let by_pattern = by.is_some();
        items.sort_by(|a, b| {
            let order = if !alpha {
                a.score
                    .partial_cmp(&b.score)
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| a.element.cmp(&b.element))
            } else if by_pattern {
                match (&a.by, &b.by) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(x), Some(y)) => x.cmp(y),
                }
            } else {
                a.element.cmp(&b.element)
            };
            if o.desc {
                order.reverse()
            } else {
                order
            }
        });
    }
    let range = if end >= start {
        &items[start as usize..=end as usize]
    } else {
        &[][..]
    };
    let mut out = Vec::with_capacity(range.len() * o.gets.len().max(1));
    for item in range {
        if o.gets.is_empty() {
            out.push(Some(item.element.clone()));
        }
        for get in &o.gets {
            out.push(get.lookup(lock, &item.element, now));
        }
    }
    Ok(out)
}

/// Run `words` as a write that joins this command's write transaction; its error, if any.
fn write(ctx: &mut Ctx<'_>, words: Vec<Bytes>) -> Result<(), CmdError> {
    let spec = table().get(&words[0]).ok_or_else(|| {
        CmdError::err(format!(
            "{} is not available",
            String::from_utf8_lossy(&words[0])
        ))
    })?;
    match crate::dispatch::run_write(ctx.shared, ctx.client, spec, words, ctx.now_ms) {
        Frame::Error(e) => Err(CmdError::Other(e)),
        _ => Ok(()),
    }
}

fn run(ctx: &mut Ctx<'_>, args: &[Bytes], readonly: bool) -> CmdResult {
    let o = parse(args, readonly)?;
    let out = sorted(ctx, &args[1], &o)?;
    let Some(dest) = o.store.clone() else {
        return Ok(Frame::Array(
            out.into_iter()
                .map(|v| v.map_or(Frame::Null, Frame::Bulk))
                .collect(),
        ));
    };
    let stored = out.len();
    let existed = ctx.db().lock(&dest).contains_live(&dest, ctx.now_ms);
    // The DEL and RPUSH are how the store is written, not what Redis announces: SORT's own
    // events are `sortstore` (or `del` when nothing is stored over an existing key).
    let muted = std::mem::replace(&mut ctx.client.notify_muted, true);
    let result = (|| {
        write(ctx, vec![Bytes::from_static(b"DEL"), dest.clone()])?;
        if stored > 0 {
            let mut push = Vec::with_capacity(stored + 2);
            push.push(Bytes::from_static(b"RPUSH"));
            push.push(dest.clone());
            push.extend(out.into_iter().map(Option::unwrap_or_default));
            write(ctx, push)?;
        }
        Ok::<(), CmdError>(())
    })();
    ctx.client.notify_muted = muted;
    result?;
    if stored > 0 {
        if !existed {
            let db = ctx.client.db;
            ctx.notify_new_in(db, &dest);
        }
        ctx.notify(crate::notify::LIST, "sortstore", &dest);
    } else if existed {
        ctx.notify(crate::notify::GENERIC, "del", &dest);
    }
    Ok(Frame::Integer(stored as i64))
}

fn sort(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    run(ctx, args, false)
}

fn sort_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    run(ctx, args, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(p: &'static str) -> Pattern {
        Pattern::parse(&Bytes::from_static(p.as_bytes()))
    }

    #[test]
    fn sort_keys_are_found_as_redis_sort_get_keys_finds_them() {
        let keys = |words: &str| {
            let args: Vec<Bytes> = words
                .split(' ')
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect();
            table().get(b"sort").expect("row").key_indexes(&args)
        };
        assert_eq!(keys("sort k"), vec![1]);
        assert_eq!(keys("sort k store d"), vec![1, 3]);
        assert_eq!(keys("sort k STORE d store e"), vec![1, 5], "the last STORE");
        assert_eq!(keys("sort k by w_* get # store d"), vec![1, 7]);
        assert_eq!(keys("sort k get store"), vec![1], "a GET pattern");
        assert_eq!(keys("sort k limit store x"), vec![1], "LIMIT skips two");
        assert_eq!(keys("sort k limit 0 store store d"), vec![1, 6]);
        assert_eq!(keys("sort k store store x"), vec![1, 4]);
        assert_eq!(keys("sort k alpha store"), vec![1], "STORE without a key");
    }

    #[test]
    fn patterns_are_taken_apart_as_redis_does() {
        assert_eq!(pattern("#"), Pattern::Element);
        assert_eq!(pattern("nostar"), Pattern::Fixed);
        assert_eq!(pattern("w_*").key(b"3").as_deref(), Some(&b"w_3"[..]));
        let hash = pattern("h_*_x->f->g");
        assert_eq!(hash.key(b"1").as_deref(), Some(&b"h_1_x"[..]));
        assert!(matches!(hash, Pattern::Key { field: Some(ref f), .. } if f.as_ref() == b"f->g"));
        // "->" with nothing after it is part of the key name.
        let plain = pattern("k_*->");
        assert_eq!(plain.key(b"1").as_deref(), Some(&b"k_1->"[..]));
        assert!(matches!(plain, Pattern::Key { field: None, .. }));
        // Only the first '*' is replaced.
        assert_eq!(pattern("a*b*").key(b"1").as_deref(), Some(&b"a1b*"[..]));
    }

    #[test]
    fn weights_are_read_like_strtod() {
        assert_eq!(weight(b""), Some(0.0));
        assert_eq!(weight(b"  1.5"), Some(1.5));
        assert_eq!(weight(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(weight(b"1e3"), Some(1000.0));
        for bad in [&b"1.5 "[..], b"   ", b"abc", b"nan", b"1e400", b"1x"] {
            assert_eq!(weight(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_sortable_types_have_elements() {
        let mut z = gradus_store::ZSetValue::new();
        z.insert(b"b", 1.0, gradus_store::ZSetLimits::REDIS_DEFAULT);
        z.insert(b"a", 2.0, gradus_store::ZSetLimits::REDIS_DEFAULT);
        let e = elements_of(&Value::zset(z)).unwrap();
        assert_eq!(e.items, [Bytes::from("b"), Bytes::from("a")]);
        assert!(e.ordered);
        assert!(matches!(
            elements_of(&Value::Hash(Default::default())),
            Err(CmdError::WrongType)
        ));
        assert!(matches!(
            elements_of(&Value::string(Bytes::new())),
            Err(CmdError::WrongType)
        ));
    }

    #[test]
    fn options_parse_with_redis_errors() {
        let a = |w: &str| -> Vec<Bytes> {
            w.split(' ')
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect()
        };
        let o = parse(
            &a("sort k by nosort get # get h_*->f limit 1 2 desc alpha"),
            false,
        )
        .unwrap();
        assert!(o.dontsort && o.desc && o.alpha && o.gets.len() == 2 && o.limit == Some((1, 2)));
        assert!(matches!(
            parse(&a("sort k limit 1 x"), false),
            Err(CmdError::NotInteger)
        ));
        assert!(matches!(
            parse(&a("sort k limit 1"), false),
            Err(CmdError::Syntax)
        ));
        assert!(parse(&a("sort k store d"), false).unwrap().store.is_some());
        assert!(matches!(
            parse(&a("sort_ro k store d"), true),
            Err(CmdError::Syntax)
        ));
    }
}
