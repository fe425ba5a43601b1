//! The command line and the orchestration of a benchmark: parse the arguments (clap), start or
//! attach to each target, run the points on a tokio runtime, collect a [`BenchResult`], write
//! JSON and Markdown. Everything the `gradus-bench` binary does lives here so it can be tested;
//! the binary only calls [`main_with_args`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::codec::Compression;
use crate::error::{BenchError, Result};
use crate::fault::{FaultKind, FaultPlan};
use crate::report::{
    attach_knee, next_refinement, point_x, rfc3339, unix_now, write_json, write_markdown,
    BenchResult, HeldLayer, LoadInfo, Machine, ServerInfo, TargetResult, WorkloadInfo, SCHEMA,
};
use crate::run::{run_point, Load, Timing};
use crate::server::{Binaries, ManagedServer};
use crate::target::{Client, ClientConfig, Endpoints, Layer, LockMode, TargetKind, TargetSpec};
use crate::workload::exam::{Exam, ExamParams};
use crate::workload::keys::{KeyDist, ThinkDist};
use crate::workload::kv::{Kv, KvParams, Mix};
use crate::workload::lms::{Lms, LmsParams};
use crate::workload::{Workload, WorkloadKind};

/// gradus-bench: reproduce the LMS cache/session-store studies on one machine.
#[derive(Debug, Parser)]
#[command(name = "gradus-bench", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// One workload against one target at one concurrency (or one arrival rate).
    Run(RunArgs),
    /// One workload against one target over a list of concurrencies (or rates).
    Sweep(SweepArgs),
    /// One workload against several targets, same load, one report.
    Compare(CompareArgs),
}

/// `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Workload.
    #[arg(value_enum)]
    pub workload: WorkloadKind,
    /// Target: gradus:DEGREE (none, lazy, background, strict; append +polling for polling locks),
    /// redis:APPENDFSYNC (no, everysec, always) or memcached; append @host:port to attach.
    #[arg(long, default_value = "gradus:background")]
    pub target: String,
    /// Attach to a running server at this address instead of starting one.
    #[arg(long)]
    pub addr: Option<String>,
    /// Concurrent users (closed loop).
    #[arg(long, default_value_t = 10)]
    pub users: usize,
    /// Arrivals per second (open loop; replaces --users).
    #[arg(long)]
    pub rate: Option<f64>,
    #[command(flatten)]
    pub common: Common,
}

/// `sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Workload.
    #[arg(value_enum)]
    pub workload: WorkloadKind,
    /// Target (see `run --help`).
    #[arg(long, default_value = "gradus:background")]
    pub target: String,
    /// Attach to a running server at this address instead of starting one.
    #[arg(long)]
    pub addr: Option<String>,
    /// Concurrent users, comma-separated (closed loop).
    #[arg(long, value_delimiter = ',', default_value = "1,10,30,100")]
    pub users: Vec<usize>,
    /// Arrival rates, comma-separated (open loop; replaces --users).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    #[command(flatten)]
    pub common: Common,
}

/// `compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Workload.
    #[arg(value_enum)]
    pub workload: WorkloadKind,
    /// Targets, comma-separated (append @host:port to one to attach to it).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "gradus:none,gradus:background,gradus:strict,redis:no,redis:everysec,redis:always,memcached"
    )]
    pub targets: Vec<String>,
    /// Concurrent users, comma-separated (closed loop).
    #[arg(long, value_delimiter = ',', default_value = "1,30,100")]
    pub users: Vec<usize>,
    /// Arrival rates, comma-separated (open loop; replaces --users).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    #[command(flatten)]
    pub common: Common,
}

/// Options shared by every subcommand.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Measured seconds per point (after the warm-up).
    #[arg(long, default_value_t = 20.0)]
    pub duration: f64,
    /// Seconds of warm-up per point, excluded from the results.
    #[arg(long, default_value_t = 5.0)]
    pub warmup: f64,
    /// Seconds over which users start (closed loop).
    #[arg(long, default_value_t = 2.0)]
    pub ramp_up: f64,
    /// Stop a point once this many units (journeys, ops) are measured.
    #[arg(long)]
    pub units: Option<u64>,
    /// Longest wait for in-flight units at the end of a point, seconds.
    #[arg(long, default_value_t = 15.0)]
    pub drain: f64,
    /// Mean think time in ms (defaults: lms 300, exam 1000, kv 0).
    #[arg(long)]
    pub think_ms: Option<f64>,
    /// Think time distribution.
    #[arg(long, value_enum, default_value_t = ThinkDist::Uniform)]
    pub think_dist: ThinkDist,
    /// Open loop: connection pool size.
    #[arg(long, default_value_t = 100)]
    pub connections: usize,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the JSON result here ("-" for stdout).
    #[arg(long, default_value = "-")]
    pub json: PathBuf,
    /// Write a Markdown report here (SVG charts go next to it).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// The gradus binary (default: `gradus` next to this executable).
    #[arg(long)]
    pub gradus_bin: Option<PathBuf>,
    /// The redis-server binary.
    #[arg(long, default_value = "redis-server")]
    pub redis_bin: PathBuf,
    /// The memcached binary.
    #[arg(long, default_value = "memcached")]
    pub memcached_bin: PathBuf,
    /// Bound on every reply wait, ms.
    #[arg(long, default_value_t = 10_000)]
    pub op_timeout_ms: u64,
    /// Longest wait for a session lock, ms.
    #[arg(long, default_value_t = 10_000)]
    pub lock_wait_ms: u64,
    /// Session lock lease (lock key expiry), ms.
    #[arg(long, default_value_t = 30_000)]
    pub lock_lease_ms: u64,
    /// Session locks for Gradus targets: native (SESSION.OPEN/CLOSE) or polling (the phpredis
    /// SET NX PX sequence); the same as a `+polling` suffix on every gradus target.
    #[arg(long, value_enum)]
    pub lock_mode: Option<LockMode>,
    /// Polling interval of emulated locks, ms (phpredis and Gradus polling: 20).
    #[arg(long)]
    pub poll_ms: Option<u64>,
    /// Polling interval of memcached `add` locks, ms (php-memcached's lock_wait_min: 150).
    #[arg(long, default_value_t = 150)]
    pub memcached_poll_ms: u64,
    /// Session TTL, seconds.
    #[arg(long, default_value_t = 1440)]
    pub session_ttl: u32,
    /// Database memory scenarios: buffer pool / block cache / shared_buffers as percentages of
    /// the estimated data, comma-separated (e.g. 100,50,10); each database target runs once per
    /// value (a `/memPCT` suffix on a target sets one itself).
    #[arg(long, value_delimiter = ',')]
    pub db_memory: Vec<u32>,
    /// Fault run: restart the managed server cleanly at this share of the measured window
    /// (e.g. 50%), on the same port with the same data; the users carry on.
    #[arg(long)]
    pub restart_at: Option<String>,
    /// Fault run: `kill -9` the managed server at this share of the measured window (e.g. 50%),
    /// then start it again on the same port with the same data; the users carry on.
    #[arg(long)]
    pub kill_at: Option<String>,
    /// Client runtime worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub client_threads: usize,
    /// Limit the managed server to this many disk reads and this many disk writes per second
    /// (a cgroup block-I/O throttle on the device of its data directory; needs root).
    #[arg(long)]
    pub iops_limit: Option<u32>,
    /// Adaptive sweep: after the listed user counts, run up to this many more, each halfway
    /// between the last good and the first bad point (see --knee-factor), to locate the knee.
    #[arg(long, default_value_t = 0)]
    pub refine: usize,
    /// A point is bad (past the knee) when its unit P90 exceeds this many times the first
    /// point's, or when units failed.
    #[arg(long, default_value_t = 2.0)]
    pub knee_factor: f64,
    /// Hold the session layer on this target while the targets under test serve only the
    /// application cache (the paper's one-layer-at-a-time runs); the tool starts it once per
    /// target under test. Default: the session layer is the target under test too.
    #[arg(long)]
    pub session_target: Option<String>,
    /// Hold the application cache on this target while the targets under test serve only the
    /// sessions. Default: the cache is on the target under test too.
    #[arg(long)]
    pub cache_target: Option<String>,
    /// Client-side compression: session data and cache values of at least this many bytes are
    /// LZ4-compressed before they are sent (as php-memcached's `compression_threshold` and
    /// phpredis' `compression` do). Off when absent.
    #[arg(long)]
    pub compress_threshold: Option<usize>,
    /// Model a network between the application and the stores: every connection goes through
    /// a loopback relay in the bench that holds each direction for half of this round-trip
    /// time, ms (0.2–0.5 for a LAN; 0 relays without delay). Direct connections when absent.
    #[arg(long)]
    pub rtt_ms: Option<f64>,
    /// Size of serialized values relative to PHP's `serialize()`, percent: scales the session
    /// and cache value sizes (e.g. for a more compact serializer).
    #[arg(long, default_value_t = 100)]
    pub serializer_size: u32,
    /// Connection cap of database targets (`max_connections`); default: 300 (PostgreSQL), 500
    /// (MariaDB). A page that cannot connect fails, as a PHP page would.
    #[arg(long)]
    pub db_max_connections: Option<u32>,
    #[command(flatten)]
    pub lms: LmsArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub exam: ExamArgs,
}

/// `lms` workload options.
#[derive(Debug, Args, Clone)]
pub struct LmsArgs {
    /// lms: session size after login, bytes.
    #[arg(long, default_value_t = 1024)]
    pub session_min: usize,
    /// lms: session size at logout, bytes.
    #[arg(long, default_value_t = 4096)]
    pub session_max: usize,
    /// lms: fewest cache reads per page.
    #[arg(long, default_value_t = 20)]
    pub cache_reads_min: usize,
    /// lms: most cache reads per page.
    #[arg(long, default_value_t = 150)]
    pub cache_reads_max: usize,
    /// lms: share of cache reads done as multi-gets.
    #[arg(long, default_value_t = 0.3)]
    pub multiget_share: f64,
    /// lms: cache hit ratio.
    #[arg(long, default_value_t = 0.98)]
    pub hit_ratio: f64,
    /// lms: CPU microseconds to regenerate a missed value.
    #[arg(long, default_value_t = 500)]
    pub regen_us: u64,
    /// lms: bytes per cache value.
    #[arg(long, default_value_t = 512)]
    pub cache_value_size: usize,
    /// lms: cached keys per definition.
    #[arg(long, default_value_t = 1000)]
    pub cache_keys: u64,
    /// lms: probability that a page fires a concurrent AJAX request on the same session.
    #[arg(long, default_value_t = 0.3)]
    pub ajax_ratio: f64,
    /// lms: application time per page, ms, spent between the session read and the session
    /// write (the session stays locked meanwhile, as in PHP). The default, 300, is of the order
    /// of the PHP time per page the Moodle study's profile reports (a few hundred ms); 0 times
    /// the store operations alone.
    #[arg(long, default_value_t = 300.0)]
    pub app_ms: f64,
    /// lms: spend the application time burning the bench's CPU instead of sleeping (by
    /// default it sleeps: in the study the PHP code ran on a separate web server).
    #[arg(long)]
    pub app_spin: bool,
    /// lms and kv: key popularity.
    #[arg(long, value_enum, default_value_t = KeyDist::Zipfian)]
    pub dist: KeyDist,
}

/// `kv` workload options.
#[derive(Debug, Args, Clone)]
pub struct KvArgs {
    /// kv: YCSB mix.
    #[arg(long, value_enum, default_value_t = Mix::A)]
    pub mix: Mix,
    /// kv: records loaded before the run.
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    /// kv: bytes per value (at least 64).
    #[arg(long, default_value_t = 1000)]
    pub value_size: usize,
}

/// `exam` workload options.
#[derive(Debug, Args, Clone)]
pub struct ExamArgs {
    /// exam: question groups per attempt.
    #[arg(long, default_value_t = 20)]
    pub groups: usize,
    /// exam: questions per group.
    #[arg(long, default_value_t = 10)]
    pub questions: usize,
    /// exam: bytes per question.
    #[arg(long, default_value_t = 800)]
    pub question_size: usize,
    /// exam: smallest answer, bytes.
    #[arg(long, default_value_t = 200)]
    pub answer_min: usize,
    /// exam: largest answer, bytes.
    #[arg(long, default_value_t = 600)]
    pub answer_max: usize,
    /// exam: students per proctor.
    #[arg(long, default_value_t = 25)]
    pub students_per_proctor: usize,
    /// exam: seconds between two polls of a proctor.
    #[arg(long, default_value_t = 3.0)]
    pub poll_interval: f64,
}

/// What one invocation asks for, after validation.
struct Plan {
    subcommand: &'static str,
    /// A layer held on one target while the targets under test serve the other.
    held: Option<(Layer, TargetSpec)>,
    fault: Option<FaultPlan>,
    workload: Workload,
    targets: Vec<TargetSpec>,
    loads: Vec<Load>,
    common: Common,
}

fn check(cond: bool, msg: &str) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(BenchError::Input(msg.to_string()))
    }
}

fn build_workload(kind: WorkloadKind, c: &Common) -> Result<Workload> {
    Ok(match kind {
        WorkloadKind::Kv => {
            check(c.kv.value_size >= 64, "--value-size must be at least 64")?;
            check(c.kv.records >= 1, "--records must be at least 1")?;
            Workload::Kv(Arc::new(Kv::new(KvParams {
                mix: c.kv.mix,
                records: c.kv.records,
                value_size: c.kv.value_size,
                dist: c.lms.dist,
            })))
        }
        WorkloadKind::Lms => {
            let l = &c.lms;
            check(
                l.session_min >= 64 && l.session_min <= l.session_max,
                "--session-min must be at least 64 and at most --session-max",
            )?;
            check(
                l.cache_reads_min <= l.cache_reads_max,
                "--cache-reads-min must not exceed --cache-reads-max",
            )?;
            for (v, name) in [
                (l.multiget_share, "--multiget-share"),
                (l.hit_ratio, "--hit-ratio"),
                (l.ajax_ratio, "--ajax-ratio"),
            ] {
                check(
                    (0.0..=1.0).contains(&v),
                    &format!("{name} must be between 0 and 1"),
                )?;
            }
            check(
                l.cache_value_size >= 64,
                "--cache-value-size must be at least 64",
            )?;
            check(
                l.app_ms.is_finite() && l.app_ms >= 0.0,
                "--app-ms must be a non-negative number",
            )?;
            let scale = |n: usize| (n * c.serializer_size as usize / 100).max(64);
            Workload::Lms(Arc::new(Lms::new(LmsParams {
                session_min: scale(l.session_min),
                session_max: scale(l.session_max),
                cache_reads_min: l.cache_reads_min,
                cache_reads_max: l.cache_reads_max,
                multiget_share: l.multiget_share,
                hit_ratio: l.hit_ratio,
                regen_us: l.regen_us,
                cache_value_size: scale(l.cache_value_size),
                cache_keys: l.cache_keys.max(1),
                key_dist: l.dist,
                ajax_ratio: l.ajax_ratio,
                app_ms: l.app_ms,
                app_spin: l.app_spin,
            })))
        }
        WorkloadKind::Exam => {
            let e = &c.exam;
            check(
                e.groups >= 1 && e.questions >= 1,
                "--groups and --questions must be at least 1",
            )?;
            check(
                e.answer_min <= e.answer_max,
                "--answer-min must not exceed --answer-max",
            )?;
            check(e.question_size >= 64, "--question-size must be at least 64")?;
            Workload::Exam(Arc::new(Exam::new(ExamParams {
                groups: e.groups,
                questions_per_group: e.questions,
                question_size: e.question_size,
                answer_min: e.answer_min,
                answer_max: e.answer_max,
                students_per_proctor: e.students_per_proctor.max(1),
                poll_interval_s: e.poll_interval,
            })))
        }
    })
}

fn loads(users: &[usize], rates: &[f64], connections: usize) -> Result<Vec<Load>> {
    if !rates.is_empty() {
        check(
            rates.iter().all(|r| r.is_finite() && *r > 0.0),
            "--rate values must be positive",
        )?;
        check(connections >= 1, "--connections must be at least 1")?;
        return Ok(rates
            .iter()
            .map(|&rate| Load::Open { rate, connections })
            .collect());
    }
    check(!users.is_empty(), "give at least one --users value")?;
    check(
        users.iter().all(|&u| u >= 1),
        "--users values must be at least 1",
    )?;
    Ok(users.iter().map(|&users| Load::Closed { users }).collect())
}

fn with_addr(spec: &str, addr: &Option<String>) -> Result<TargetSpec> {
    let mut t = TargetSpec::parse(spec)?;
    if let Some(a) = addr {
        t.addr = Some(a.clone());
    }
    Ok(t)
}

fn plan(cli: Cli) -> Result<Plan> {
    let (subcommand, workload, targets, loads, common) = match cli.command {
        Command::Run(a) => {
            let rates: Vec<f64> = a.rate.into_iter().collect();
            let l = loads(&[a.users], &rates, a.common.connections)?;
            (
                "run",
                build_workload(a.workload, &a.common)?,
                vec![with_addr(&a.target, &a.addr)?],
                l,
                a.common,
            )
        }
        Command::Sweep(a) => {
            let l = loads(&a.users, &a.rate, a.common.connections)?;
            (
                "sweep",
                build_workload(a.workload, &a.common)?,
                vec![with_addr(&a.target, &a.addr)?],
                l,
                a.common,
            )
        }
        Command::Compare(a) => {
            let targets = a
                .targets
                .iter()
                .map(|t| TargetSpec::parse(t))
                .collect::<Result<Vec<_>>>()?;
            check(!targets.is_empty(), "give at least one target")?;
            let l = loads(&a.users, &a.rate, a.common.connections)?;
            (
                "compare",
                build_workload(a.workload, &a.common)?,
                targets,
                l,
                a.common,
            )
        }
    };
    let mut targets = targets;
    if let Some(mode) = common.lock_mode {
        for t in &mut targets {
            match (t.kind, mode) {
                (TargetKind::Gradus, _) => t.lock_mode = mode,
                (_, LockMode::Native) => {
                    return Err(BenchError::Input(format!(
                        "--lock-mode native: {} has no native session locks (a Gradus feature)",
                        t.label()
                    )))
                }
                (_, LockMode::Polling) => {}
            }
        }
    }
    check(
        common.duration > 0.0
            && common.warmup >= 0.0
            && common.ramp_up >= 0.0
            && common.drain >= 0.0,
        "--duration must be positive; --warmup, --ramp-up and --drain not negative",
    )?;
    check(
        common.db_memory.iter().all(|p| (1..=1000).contains(p)),
        "--db-memory values are percentages (1-1000)",
    )?;
    {
        let open = loads.iter().any(|l| matches!(l, Load::Open { .. }));
        let max_users = loads
            .iter()
            .map(|l| match l {
                Load::Closed { users } => *users,
                Load::Open { connections, .. } => *connections,
            })
            .max()
            .unwrap_or(1);
        let t = timing(&workload, &common, open);
        let data = crate::db::sizing::estimate_data_bytes(
            &workload,
            max_users,
            t.warmup_s + t.duration_s,
            t.think_ms,
        );
        crate::db::sizing::apply_scenarios(&mut targets, &common.db_memory, data);
    }
    if loads.iter().any(|l| matches!(l, Load::Open { .. })) {
        check(
            workload.supports_open_loop(),
            "the exam workload is closed-loop only (students and proctors); use --users",
        )?;
    }
    let fault = match (&common.restart_at, &common.kill_at) {
        (Some(_), Some(_)) => {
            return Err(BenchError::Input(
                "give --restart-at or --kill-at, not both".into(),
            ))
        }
        (Some(t), None) => Some(FaultPlan::parse(FaultKind::Restart, t)?),
        (None, Some(t)) => Some(FaultPlan::parse(FaultKind::Kill, t)?),
        (None, None) => None,
    };
    if fault.is_some() {
        check(
            !loads.iter().any(|l| matches!(l, Load::Open { .. }))
                && !matches!(workload, Workload::Exam(_)),
            "fault runs use the closed loop with the lms or kv workload",
        )?;
        check(
            targets.iter().all(|t| t.addr.is_none()),
            "fault runs restart the server, so the tool must start it (no @address)",
        )?;
    }
    check(
        common.knee_factor.is_finite() && common.knee_factor > 1.0,
        "--knee-factor must be above 1",
    )?;
    check(
        common.refine == 0 || loads.iter().all(|l| matches!(l, Load::Closed { .. })),
        "--refine works on user counts (closed loop)",
    )?;
    check(
        common.serializer_size >= 1,
        "--serializer-size is a percentage (at least 1)",
    )?;
    check(
        common
            .rtt_ms
            .map(|r| r.is_finite() && (0.0..=1000.0).contains(&r))
            .unwrap_or(true),
        "--rtt-ms must be between 0 and 1000",
    )?;
    if let Some(n) = common.db_max_connections {
        check(n >= 1, "--db-max-connections must be at least 1")?;
        for t in &mut targets {
            if t.kind.is_database() {
                t.max_connections = Some(n);
            }
        }
    }
    let held = match (&common.session_target, &common.cache_target) {
        (Some(_), Some(_)) => {
            return Err(BenchError::Input(
                "give --session-target or --cache-target, not both: the targets under test \
                 serve the other layer"
                    .into(),
            ))
        }
        (Some(t), None) => Some((Layer::Session, TargetSpec::parse(t)?)),
        (None, Some(t)) => Some((Layer::Cache, TargetSpec::parse(t)?)),
        (None, None) => None,
    };
    if common.iops_limit.is_some() {
        check(
            fault.is_none(),
            "--iops-limit and fault runs do not mix (a restarted server leaves the cgroup)",
        )?;
        check(
            common.iops_limit >= Some(1),
            "--iops-limit must be at least 1",
        )?;
    }
    if let Some((_, h)) = &held {
        check(
            fault.is_none(),
            "fault runs restart the target under test; hold no layer on another target",
        )?;
        check(
            h.kind != TargetKind::Files || h.addr.is_none(),
            "the files store has no address",
        )?;
    }
    Ok(Plan {
        held,
        subcommand,
        fault,
        workload,
        targets,
        loads,
        common,
    })
}

fn client_config(spec: &TargetSpec, c: &Common) -> ClientConfig {
    let poll = match spec.kind {
        TargetKind::Memcached => c.memcached_poll_ms,
        _ => c.poll_ms.unwrap_or(20),
    };
    ClientConfig {
        kind: spec.kind,
        lock_mode: spec.lock_mode,
        durability_command: match (spec.kind, &spec.addr) {
            (TargetKind::Gradus, Some(_)) => spec.degree.clone(),
            _ => None,
        },
        lock_wait: Duration::from_millis(c.lock_wait_ms),
        lock_lease: Duration::from_millis(c.lock_lease_ms),
        poll_interval: Duration::from_millis(poll.max(1)),
        session_ttl_s: c.session_ttl.max(1),
        op_timeout: Duration::from_millis(c.op_timeout_ms.max(1)),
        compression: c
            .compress_threshold
            .map(|threshold| Compression { threshold }),
        relay_one_way: c.rtt_ms.map(|ms| Duration::from_secs_f64(ms / 2000.0)),
    }
}

fn timing(workload: &Workload, c: &Common, open: bool) -> Timing {
    let default_think = match workload {
        Workload::Kv(_) => 0.0,
        Workload::Lms(_) if open => 0.0,
        Workload::Lms(_) => 300.0,
        Workload::Exam(_) => 1000.0,
    };
    Timing {
        ramp_up_s: c.ramp_up,
        warmup_s: c.warmup,
        duration_s: c.duration,
        units_limit: c.units,
        drain_s: c.drain,
        think_ms: c.think_ms.unwrap_or(default_think).max(0.0),
        think_dist: c.think_dist,
    }
}

/// Measures one target over every load; never panics, never hangs past its bounds.
fn run_target(
    rt: &tokio::runtime::Runtime,
    plan: &Plan,
    spec: &TargetSpec,
    index: usize,
    bins: &Binaries,
) -> TargetResult {
    let mut result = TargetResult {
        label: spec.label(),
        spec: spec.clone(),
        server: None,
        points: Vec::new(),
        knee: None,
        disk_bytes: None,
        disk: None,
        iops_limit: None,
        held: None,
        partial: false,
        partial_reason: None,
    };
    let config = Arc::new(client_config(spec, &plan.common));
    let mut managed = None;
    let addr = match &spec.addr {
        Some(a) => a.clone(),
        None => match ManagedServer::start(spec, bins, Duration::from_secs(60)) {
            Ok(s) => {
                let a = s.addr.clone();
                managed = Some(s);
                a
            }
            Err(e) => {
                result.partial = true;
                result.partial_reason = Some(e.to_string());
                return result;
            }
        },
    };
    let described = rt.block_on(async {
        let mut c = Client::connect(&addr, config.clone()).await?;
        c.describe_server().await
    });
    let reported = match described {
        Ok(r) => r,
        Err(e) => {
            result.partial = true;
            result.partial_reason = Some(format!("server at {addr} unusable: {e}"));
            return result;
        }
    };
    if spec.kind == TargetKind::Gradus
        && spec.lock_mode == LockMode::Native
        && reported.protocol_version.is_empty()
    {
        eprintln!("gradus-bench: warning: {addr} did not report a version in INFO");
    }
    let managed = managed.map(|m| Arc::new(parking_lot::Mutex::new(m)));
    result.server = Some(ServerInfo {
        managed: managed.is_some(),
        addr: addr.clone(),
        launch: managed.as_ref().map(|m| m.lock().launch.clone()),
        reported,
        client_durability: config.durability_command.clone(),
    });
    // The storage IOPS limit, kept until the server has stopped.
    let mut iops_limit = None;
    if let Some(iops) = plan.common.iops_limit {
        let applied = match &managed {
            Some(m) => {
                let m = m.lock();
                match m.pid() {
                    Some(pid) => crate::iolimit::apply(
                        &crate::sampler::process_tree(pid),
                        &m.data_dir(),
                        iops,
                    ),
                    None => Err(BenchError::Input(
                        "--iops-limit: this store has no server process".into(),
                    )),
                }
            }
            None => Err(BenchError::Input(
                "--iops-limit applies to a server the tool starts (no @address)".into(),
            )),
        };
        match applied {
            Ok(l) => {
                result.iops_limit = Some(l.description.clone());
                iops_limit = Some(l);
            }
            Err(e) => {
                result.partial = true;
                result.partial_reason = Some(e.to_string());
            }
        }
    }
    // The held layer's store: started (or attached) once for this target under test.
    let mut held_server = None;
    let endpoints = match &plan.held {
        None => Endpoints::single(addr.clone(), config.clone()),
        Some((layer, held)) => {
            let held_config = Arc::new(client_config(held, &plan.common));
            let held_addr = match &held.addr {
                Some(a) => a.clone(),
                None => match ManagedServer::start(held, bins, Duration::from_secs(60)) {
                    Ok(s) => {
                        let a = s.addr.clone();
                        held_server = Some(s);
                        a
                    }
                    Err(e) => {
                        result.partial = true;
                        result.partial_reason =
                            Some(format!("the held {layer} store {}: {e}", held.label()));
                        if let Some(m) = managed {
                            m.lock().stop(Duration::from_secs(10));
                        }
                        return result;
                    }
                },
            };
            result.held = Some(HeldLayer {
                layer: *layer,
                label: held.label(),
                addr: held_addr.clone(),
            });
            let under_test = (addr.clone(), config.clone());
            let other = (held_addr, held_config);
            match layer {
                Layer::Session => Endpoints {
                    session: other,
                    cache: Some(under_test),
                },
                Layer::Cache => Endpoints {
                    session: under_test,
                    cache: Some(other),
                },
            }
        }
    };
    if plan.held.is_some() {
        // Creates the held database's tables (and checks it answers).
        if let Err(e) = rt.block_on(async { endpoints.connect().await?.describe_server().await }) {
            result.partial = true;
            result.partial_reason = Some(format!("the held store is unusable: {e}"));
        }
    }
    let open = plan.loads.iter().any(|l| matches!(l, Load::Open { .. }));
    let timing = timing(&plan.workload, &plan.common, open);
    let mut pending: std::collections::VecDeque<Load> = plan.loads.iter().copied().collect();
    let mut refinements = plan.common.refine;
    let mut i = 0usize;
    loop {
        let load = match pending.pop_front() {
            Some(l) => l,
            None if refinements > 0 => {
                match next_refinement(&result.points, plan.common.knee_factor) {
                    Some(users) => {
                        refinements -= 1;
                        Load::Closed { users }
                    }
                    None => break,
                }
            }
            None => break,
        };
        if result.partial {
            break;
        }
        if crate::run::interrupted() {
            result.partial = true;
            result.partial_reason = Some("interrupted (SIGINT) before every point ran".into());
            break;
        }
        if !plan.common.quiet {
            eprintln!("== {} {}: {:?}", spec.label(), plan.workload.name(), load);
        }
        let tag = format!("gb{:x}t{index}p{i}", unix_now() & 0xffff_ffff);
        // The pid changes when a fault run restarts the server.
        let pid = managed.as_ref().and_then(|m| m.lock().pid());
        let fault = plan.fault.zip(managed.clone());
        let outcome = rt.block_on(run_point(
            plan.workload.clone(),
            addr.clone(),
            config.clone(),
            endpoints.clone(),
            load,
            timing,
            plan.common.seed.wrapping_add(i as u64),
            tag,
            pid,
            plan.common.quiet,
            fault,
        ));
        let mut point = outcome.result;
        let mut server_gone = false;
        if let Some(m) = managed.as_ref() {
            let mut m = m.lock();
            if let Some(status) = m.exit_status() {
                server_gone = true;
                let reason = format!(
                    "the server process exited ({status}); its last output: {}",
                    m.log_tail()
                );
                point.partial = true;
                point.partial_reason = Some(reason);
            }
        }
        // An adaptive sweep carries on past a point that failed while the server lives (users
        // refused at the connection cap, say): that point is its first bad one.
        let stop =
            point.partial && (plan.common.refine == 0 || server_gone || crate::run::interrupted());
        if stop && !result.partial {
            result.partial = true;
            result.partial_reason = point.partial_reason.clone();
        }
        result.points.push(point);
        i += 1;
        if stop {
            break;
        }
    }
    result
        .points
        .sort_by(|a, b| point_x(a).total_cmp(&point_x(b)));
    attach_knee(
        &mut result,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    );
    result.disk_bytes = managed.as_ref().map(|m| m.lock().disk_bytes());
    result.disk = managed.as_ref().map(|m| m.lock().disk_usage());
    if let Some(m) = managed {
        m.lock().stop(Duration::from_secs(10));
    }
    if let Some(mut h) = held_server {
        h.stop(Duration::from_secs(10));
    }
    drop(iops_limit);
    result
}

/// Runs a parsed command line; returns the result (written already) or an input error.
pub fn execute(cli: Cli, argv: Vec<String>) -> Result<BenchResult> {
    let plan = plan(cli)?;
    let mut bins = Binaries::defaults();
    if let Some(g) = &plan.common.gradus_bin {
        bins.gradus = g.clone();
    }
    bins.redis = plan.common.redis_bin.clone();
    bins.memcached = plan.common.memcached_bin.clone();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if plan.common.client_threads > 0 {
        builder.worker_threads(plan.common.client_threads);
    }
    let rt = builder.enable_all().build()?;
    rt.block_on(async { crate::run::watch_for_interrupt() });
    let started = unix_now();
    let open = plan.loads.iter().any(|l| matches!(l, Load::Open { .. }));
    let mut targets = Vec::new();
    for (i, spec) in plan.targets.iter().enumerate() {
        if crate::run::interrupted() {
            targets.push(TargetResult {
                label: spec.label(),
                spec: spec.clone(),
                server: None,
                points: Vec::new(),
                knee: None,
                disk_bytes: None,
                disk: None,
                iops_limit: None,
                held: None,
                partial: true,
                partial_reason: Some("not run: interrupted (SIGINT)".into()),
            });
            continue;
        }
        let t = run_target(&rt, &plan, spec, i, &bins);
        if let (Some(reason), false) = (&t.partial_reason, plan.common.quiet) {
            eprintln!("gradus-bench: {}: {reason}", t.label);
        }
        targets.push(t);
    }
    rt.shutdown_timeout(Duration::from_secs(2));
    let partial_reason = targets.iter().find_map(|t| {
        t.partial_reason
            .as_ref()
            .map(|r| format!("{}: {r}", t.label))
    });
    let result = BenchResult {
        schema: SCHEMA,
        tool: format!("gradus-bench {}", env!("CARGO_PKG_VERSION")),
        command: argv,
        subcommand: plan.subcommand.to_string(),
        started_at: rfc3339(started),
        finished_at: rfc3339(unix_now()),
        machine: Machine::detect(),
        workload: WorkloadInfo {
            name: plan.workload.name().to_string(),
            params: plan.workload.params_json(),
        },
        load: LoadInfo {
            model: if open { "open" } else { "closed" }.to_string(),
            users: plan
                .loads
                .iter()
                .filter_map(|l| match l {
                    Load::Closed { users } => Some(*users),
                    _ => None,
                })
                .collect(),
            rates: plan
                .loads
                .iter()
                .filter_map(|l| match l {
                    Load::Open { rate, .. } => Some(*rate),
                    _ => None,
                })
                .collect(),
            connections: open.then_some(plan.common.connections),
            timing: timing(&plan.workload, &plan.common, open),
            seed: plan.common.seed,
        },
        partial: partial_reason.is_some(),
        partial_reason,
        targets,
    };
    write_json(&result, &plan.common.json)?;
    if let Some(md) = &plan.common.report {
        write_markdown(&result, md)?;
    }
    Ok(result)
}

/// The binary's entry point: exit status 0 for a complete result, 3 for a partial one (still
/// written), 2 for bad input or an output error (nothing measured or written).
pub fn main_with_args(argv: Vec<String>) -> std::process::ExitCode {
    if argv.get(1).map(String::as_str) == Some("php-lms") {
        return crate::php_lms::main_with_args(argv);
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return std::process::ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match execute(cli, argv) {
        Ok(r) if r.partial => {
            eprintln!(
                "gradus-bench: partial result: {}",
                r.partial_reason.as_deref().unwrap_or("")
            );
            std::process::ExitCode::from(3)
        }
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gradus-bench: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
