//! Property test: random operation sequences against a simple model of the log — a `Vec` of
//! every payload appended, in LSN order, plus the highest LSN that was acknowledged durable
//! (a strict wait that returned, a `sync_now`, or the durable LSN read before a crash).
//! After every crash the recovered state (snapshot items, then records) must be a prefix of
//! the model at least as long as the acknowledged LSN; after a clean close, all of it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{check_prefix, recovered_state};
use gradus_log::{CrashMode, Durability, Log, LogOptions, Lsn, SimStorage};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Append(Durability, u8),
    WaitLast,
    SyncNow,
    Snapshot(u8),
    Sleep(u8),
    Crash(CrashMode),
    CloseAndReopen,
}

fn op() -> impl Strategy<Value = Op> {
    let degree = prop_oneof![
        Just(Durability::Lazy),
        Just(Durability::Background),
        Just(Durability::Strict)
    ];
    prop_oneof![
        10 => (degree, any::<u8>()).prop_map(|(d, len)| Op::Append(d, len)),
        2 => Just(Op::WaitLast),
        1 => Just(Op::SyncNow),
        1 => any::<u8>().prop_map(Op::Snapshot),
        1 => (0u8..4).prop_map(Op::Sleep),
        2 => prop::sample::select(CrashMode::ALL.to_vec()).prop_map(Op::Crash),
        1 => Just(Op::CloseAndReopen),
    ]
}

struct Model {
    appended: Vec<Bytes>,
    acked: Lsn,
}

fn run(seed: u64, segment_bytes: u64, ops: Vec<Op>) {
    let disk = SimStorage::new(seed);
    let mut opts = LogOptions::new("/sim/model");
    opts.segment_bytes = segment_bytes;
    opts.background_fsync_ms = 1;
    opts.lazy_flush_ms = 1000;
    let (mut log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let mut model = Model {
        appended: Vec::new(),
        acked: 0,
    };
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append(degree, len) => {
                let p = Bytes::from(format!("{i}:{}", "x".repeat(len as usize)));
                let lsn = log.append(p.clone(), degree).unwrap();
                model.appended.push(p);
                assert_dense_lsn(lsn, model.appended.len());
            }
            Op::WaitLast => {
                let last = log.last_lsn();
                assert!(log
                    .wait_durable_blocking(last, Duration::from_millis(1))
                    .is_ok());
                if log.durable_lsn() < last {
                    // Only strict records force an fsync; make this one strict.
                    let p = Bytes::from(format!("{i}:w"));
                    let lsn = log.append(p.clone(), Durability::Strict).unwrap();
                    model.appended.push(p);
                    assert!(log
                        .wait_durable_blocking(lsn, Duration::from_secs(20))
                        .unwrap());
                    model.acked = lsn;
                } else {
                    model.acked = model.acked.max(last);
                }
            }
            Op::SyncNow => model.acked = model.acked.max(log.sync_now().unwrap()),
            Op::Snapshot(frac) => {
                let last = log.last_lsn();
                let lsn = last * u64::from(frac) / 255;
                log.write_snapshot(lsn, &mut model.appended[..lsn as usize].iter().cloned())
                    .unwrap();
            }
            Op::Sleep(ms) => std::thread::sleep(Duration::from_millis(u64::from(ms))),
            Op::Crash(mode) => {
                let durable = log.durable_lsn();
                disk.crash(mode);
                drop(log);
                let (reopened, rec) = Log::open(opts.clone(), Arc::new(disk.reboot())).unwrap();
                let kept = check_prefix(&rec, &model.appended, durable.max(model.acked));
                model.appended.truncate(kept);
                model.acked = kept as Lsn;
                log = reopened;
            }
            Op::CloseAndReopen => {
                log.close().unwrap();
                let (reopened, rec) = Log::open(opts.clone(), Arc::new(disk.reboot())).unwrap();
                assert_eq!(recovered_state(&rec), model.appended);
                model.acked = model.appended.len() as Lsn;
                log = reopened;
            }
        }
    }
    log.close().unwrap();
}

fn assert_dense_lsn(lsn: Lsn, len: usize) {
    assert_eq!(lsn, len as Lsn, "LSNs must be dense and start at 1");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn recovery_matches_the_model(
        seed in any::<u64>(),
        segment_bytes in prop::sample::select(vec![128u64, 700, 1 << 16]),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        run(seed, segment_bytes, ops);
    }
}
