//! Stable-Rust fuzzing of recovery, bounded in time (env `GRADUS_FUZZ_SECS`, default 3):
//! valid log directories (one segment; two segments; a snapshot plus segments; segments with
//! or without zero fill after their records) are mutated at random — bit flips, random bytes,
//! truncation, insertion, deletion, duplicated ranges, huge lengths — put on a SimStorage and
//! opened. Recovery must never panic; when it succeeds the state must be a prefix of what was
//! written (nothing invented or reordered), and a second open must succeed with the same state
//! and no torn tail (recovery repairs what it accepts).
//! The cargo-fuzz target `fuzz/fuzz_targets/log_recovery.rs` does the same with libFuzzer.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::recovered_state;
use gradus_log::format::{self, encode_record, encode_segment_header, encode_snapshot};
use gradus_log::{Log, LogError, LogOptions, Recovered, RecoveryBatch, SimStorage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A directory image: file name → content, plus the state it encodes (payload of LSN n at n-1).
struct Image {
    files: Vec<(String, Vec<u8>)>,
    model: Vec<Bytes>,
}

fn records(rng: &mut StdRng, count: usize) -> Vec<Bytes> {
    (0..count)
        .map(|i| {
            let len = if rng.gen_bool(0.1) {
                rng.gen_range(100..600)
            } else {
                rng.gen_range(0..24)
            };
            let mut p = format!("r{i}:").into_bytes();
            p.extend((0..len).map(|_| rng.gen::<u8>()));
            Bytes::from(p)
        })
        .collect()
}

fn segment(first: u64, payloads: &[Bytes]) -> Vec<u8> {
    let mut buf = encode_segment_header(first).to_vec();
    for (i, p) in payloads.iter().enumerate() {
        encode_record(&mut buf, first + i as u64, p);
    }
    buf
}

fn image(rng: &mut StdRng) -> Image {
    let count = rng.gen_range(0..30);
    let model = records(rng, count);
    let n = model.len();
    let mut files = Vec::new();
    match rng.gen_range(0..3) {
        0 => files.push((format::segment_file_name(1), segment(1, &model))),
        1 => {
            let split = rng.gen_range(0..=n);
            // A non-last segment always holds at least one record.
            let split = split.max(1).min(n.max(1));
            files.push((
                format::segment_file_name(1),
                segment(1, &model[..split.min(n)]),
            ));
            if split < n {
                files.push((
                    format::segment_file_name(split as u64 + 1),
                    segment(split as u64 + 1, &model[split..]),
                ));
            }
        }
        _ => {
            let snap = rng.gen_range(0..=n);
            files.push((
                format::snapshot_file_name(snap as u64),
                encode_snapshot(snap as u64, model[..snap].iter().map(|b| &b[..])),
            ));
            files.push((format::segment_file_name(1), segment(1, &model)));
        }
    }
    // Segments the writer made are zero-filled past their records.
    for (name, content) in &mut files {
        if name.ends_with(".log") && rng.gen_bool(0.5) {
            let zeros = rng.gen_range(1..3000);
            content.resize(content.len() + zeros, 0);
        }
    }
    Image { files, model }
}

fn mutate(rng: &mut StdRng, data: &mut Vec<u8>) {
    for _ in 0..rng.gen_range(1..=3) {
        let len = data.len();
        match rng.gen_range(0..8) {
            0 if len > 0 => {
                let i = rng.gen_range(0..len);
                data[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.gen_range(0..len);
                data[i] = rng.gen();
            }
            2 => data.truncate(rng.gen_range(0..=len)),
            3 => {
                let at = rng.gen_range(0..=len);
                let extra: Vec<u8> = (0..rng.gen_range(1..40)).map(|_| rng.gen()).collect();
                data.splice(at..at, extra);
            }
            4 if len > 0 => {
                let a = rng.gen_range(0..len);
                let b = rng.gen_range(a..=len);
                data.drain(a..b);
            }
            5 if len > 0 => {
                let a = rng.gen_range(0..len);
                let b = rng.gen_range(a..=len.min(a + 64));
                let copy = data[a..b].to_vec();
                let at = rng.gen_range(0..=len);
                data.splice(at..at, copy);
            }
            6 if len >= 4 => {
                // A huge length field somewhere.
                let i = rng.gen_range(0..=len - 4);
                let huge: u32 = rng.gen_range(format::MAX_RECORD_LEN as u32 - 8..=u32::MAX);
                data[i..i + 4].copy_from_slice(&huge.to_le_bytes());
            }
            _ => data.extend((0..rng.gen_range(1..20)).map(|_| 0u8)),
        }
    }
}

fn open(disk: &SimStorage, dir: &Path) -> Result<(Log, Recovered), LogError> {
    // Small segments keep a case cheap: once zero fill is on, the segment it fills is filled up
    // to `segment_bytes` (or one 4 MiB chunk). Recovery reads the files whatever this is.
    let mut opts = LogOptions::new(dir);
    opts.segment_bytes = 64 << 10;
    Log::open(opts, Arc::new(disk.reboot()))
}

/// [`open`], handing what recovery finds to a sink instead ([`Log::open_streaming`]): the state
/// the sink ends up with (snapshot items, minus any it was told to discard, then record
/// payloads), or the error.
fn open_streaming(disk: &SimStorage, dir: &Path) -> Result<Vec<Bytes>, LogError> {
    let mut opts = LogOptions::new(dir);
    opts.segment_bytes = 64 << 10;
    let mut state: Vec<Bytes> = Vec::new();
    let mut records_started = false;
    let mut sink = |batch: RecoveryBatch<'_>| {
        match batch {
            RecoveryBatch::SnapshotItems(items) => {
                assert!(!records_started, "snapshot items after records");
                state.extend(items);
            }
            RecoveryBatch::DiscardSnapshot => {
                assert!(!records_started, "a discard after records");
                state.clear();
            }
            RecoveryBatch::Records(records) => {
                records_started = true;
                state.extend(records.drain(..).map(|(_, payload)| payload));
            }
        }
        Ok(())
    };
    Log::open_streaming(opts, Arc::new(disk.reboot()), &mut sink).map(|_| ())?;
    Ok(state)
}

#[test]
fn mutated_log_directories_never_panic_and_never_invent_records() {
    let secs: f64 = std::env::var("GRADUS_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let budget = Duration::from_secs_f64(secs);
    let seed: u64 = std::env::var("GRADUS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6772_6164);
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = PathBuf::from("/fuzz/log");
    let started = Instant::now();
    let (mut cases, mut accepted, mut torn) = (0u64, 0u64, 0u64);
    while started.elapsed() < budget {
        cases += 1;
        let mut img = image(&mut rng);
        let victim = rng.gen_range(0..img.files.len());
        mutate(&mut rng, &mut img.files[victim].1);
        let disk = SimStorage::new(cases);
        let twin = SimStorage::new(cases);
        for (name, content) in &img.files {
            disk.put_file(&dir.join(name), content);
            twin.put_file(&dir.join(name), content);
        }
        // Streaming recovery (on an identical disk: the first open may cut a torn tail) must
        // reach the same state, or fail the same way.
        let streamed = open_streaming(&twin, &dir);
        match open(&disk, &dir) {
            Ok((log, rec)) => {
                accepted += 1;
                assert_eq!(
                    streamed.as_ref().ok(),
                    Some(&recovered_state(&rec)),
                    "case {cases}: streaming recovery differs"
                );
                if rec.torn_tail_bytes > 0 {
                    torn += 1;
                }
                let state = recovered_state(&rec);
                assert!(
                    state.len() <= img.model.len() && state[..] == img.model[..state.len()],
                    "case {cases}: recovered state is not a prefix of what was written"
                );
                log.close().unwrap();
                let (_log, again) = open(&disk, &dir).expect("second open after a repair");
                assert_eq!(
                    again.torn_tail_bytes, 0,
                    "case {cases}: repair did not stick"
                );
                assert_eq!(
                    recovered_state(&again),
                    state,
                    "case {cases}: second open differs"
                );
            }
            Err(e @ LogError::Corrupt { .. }) | Err(e @ LogError::UnsupportedVersion { .. }) => {
                assert_eq!(
                    streamed.err().map(|s| s.to_string()),
                    Some(e.to_string()),
                    "case {cases}: streaming recovery differs"
                );
            }
            Err(other) => panic!("case {cases}: unexpected error {other}"),
        }
    }
    eprintln!(
        "fuzz_recovery: {cases} cases in {:?} (seed {seed}): {accepted} opened ({torn} with a torn tail), {} refused",
        started.elapsed(),
        cases - accepted
    );
    assert!(cases > 0);
}
