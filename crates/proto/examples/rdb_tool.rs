//! A line-oriented bridge to the DUMP/RESTORE codec, for tests and migration scripts in other
//! languages.
//!
//! * `rdb_tool decode`: every stdin line is a payload in hex; prints one JSON object a line,
//!   `{"rdb_type": N, "type": T, "value": V}` or `{"error": "...", "footer": bool}`.
//! * `rdb_tool encode`: every stdin line is such a `{"type": T, "value": V}` object; prints the
//!   payload in hex, or `error: ...`.
//!
//! T is `string`, `list`, `set`, `zset` or `hash`. Strings are hex (binary-safe); V is a string,
//! a list of strings, a list of `[member, score]` (score as text: `"1.5"`, `"inf"`, `"-0.0"`) or a
//! list of `[field, value]`.

use std::io::{self, BufRead, Write};

use bytes::Bytes;
use gradus_proto::rdb::{dump, restore, RdbValue};
use serde_json::{json, Value};

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim();
    if text.len() & 1 == 1 {
        return Err("odd number of hex digits".into());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad hex at {i}"))
        })
        .collect()
}

fn to_json(payload: &[u8]) -> Value {
    let value = match restore(payload) {
        Ok(v) => v,
        Err(e) => return json!({"error": e.to_string(), "footer": e.is_footer()}),
    };
    let hexes = |items: &[Bytes]| items.iter().map(|i| to_hex(i)).collect::<Vec<_>>();
    let (kind, v) = match &value {
        RdbValue::Str(s) => ("string", json!(to_hex(s))),
        RdbValue::List(l) => ("list", json!(hexes(l))),
        RdbValue::Set(s) => ("set", json!(hexes(s))),
        RdbValue::ZSet(z) => (
            "zset",
            json!(z
                .iter()
                .map(|(m, s)| json!([to_hex(m), format!("{s:?}")]))
                .collect::<Vec<_>>()),
        ),
        RdbValue::Hash(h) => (
            "hash",
            json!(h
                .iter()
                .map(|(f, v)| json!([to_hex(f), to_hex(v)]))
                .collect::<Vec<_>>()),
        ),
        RdbValue::Stream(s) => (
            "stream",
            json!({"length": s.length, "nodes": s.nodes.len(), "groups": s.groups.len()}),
        ),
    };
    json!({"rdb_type": payload[0], "type": kind, "value": v})
}

fn bytes_of(v: &Value) -> Result<Bytes, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a hex string, got {v}"))
        .and_then(from_hex)
        .map(Bytes::from)
}

fn pairs_of(v: &Value) -> Result<Vec<(&Value, &Value)>, String> {
    v.as_array()
        .ok_or("expected a list of pairs")?
        .iter()
        .map(|p| match p.as_array().map(Vec::as_slice) {
            Some([a, b]) => Ok((a, b)),
            _ => Err(format!("expected a pair, got {p}")),
        })
        .collect()
}

fn from_json(line: &str) -> Result<RdbValue, String> {
    let obj: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let v = &obj["value"];
    let list = |v: &Value| -> Result<Vec<Bytes>, String> {
        v.as_array()
            .ok_or("expected a list")?
            .iter()
            .map(bytes_of)
            .collect()
    };
    match obj["type"].as_str() {
        Some("string") => Ok(RdbValue::Str(bytes_of(v)?)),
        Some("list") => Ok(RdbValue::List(list(v)?)),
        Some("set") => Ok(RdbValue::Set(list(v)?)),
        Some("zset") => pairs_of(v)?
            .into_iter()
            .map(|(m, s)| {
                let score = s
                    .as_str()
                    .and_then(|s| s.parse::<f64>().ok())
                    .ok_or_else(|| format!("bad score {s}"))?;
                Ok((bytes_of(m)?, score))
            })
            .collect::<Result<_, String>>()
            .map(RdbValue::ZSet),
        Some("hash") => pairs_of(v)?
            .into_iter()
            .map(|(f, v)| Ok((bytes_of(f)?, bytes_of(v)?)))
            .collect::<Result<_, String>>()
            .map(RdbValue::Hash),
        _ => Err(format!("unknown type in {line}")),
    }
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if mode != "decode" && mode != "encode" {
        eprintln!("usage: rdb_tool decode|encode < lines");
        std::process::exit(2);
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    for line in io::stdin().lock().lines() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let text = if mode == "decode" {
            match from_hex(&line) {
                Ok(payload) => to_json(&payload).to_string(),
                Err(e) => json!({"error": e, "footer": false}).to_string(),
            }
        } else {
            match from_json(&line).and_then(|v| dump(&v).map_err(|e| e.to_string())) {
                Ok(payload) => to_hex(&payload),
                Err(e) => format!("error: {e}"),
            }
        };
        writeln!(out, "{text}").expect("stdout");
    }
}
