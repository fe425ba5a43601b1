//! `gradus-bench php-lms`: the `lms` journey driven *through* PHP, so that a page's latency
//! includes PHP's own cost as the published studies' figures did. Each page view is an HTTP
//! request to a PHP page (`php_lms/page.php`) served by `php -S` with several workers; the page
//! opens its session with a session handler, reads the Moodle-style application cache (one hash
//! per definition, `HGET`/`HMGET`, a miss now and then regenerated and stored), writes the
//! session back and closes it. With probability `--ajax-ratio` a page also fires a concurrent
//! AJAX request on the same session (it reads the session and leaves it unchanged), so the
//! session lock is contended as browsers contend it.
//!
//! Backends, started by the tool on free loopback ports with no persistence, like for like:
//! `gradus` (`--durability none`) with `Gradus\SessionHandler` (clients/php: `SESSION.OPEN` /
//! `SESSION.CLOSE`, waiting server-side), and `redis` (`redis-server --save "" --appendonly no`)
//! with phpredis' stock handler and its lock turned on (`SET NX` polled every
//! `--stock-lock-wait-us`). Rounds are interleaved (the order rotates every round) and every run
//! gets fresh servers. A page's latency runs from its request until both it and its AJAX request
//! (if any) have answered, as in the `lms` workload; journeys are 13 pages with think times.
//! Every main page returns the session's page count, which is checked against the count the
//! journey expects (a lost session write shows as a mismatch).
//!
//! Self-contained: it starts its own servers and speaks HTTP/1.0 itself. May import: `error`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{BenchError, Result};

const PAGE_PHP: &str = include_str!("php_lms/page.php");
const PREFILL_PHP: &str = include_str!("php_lms/prefill.php");
const PAGES_PER_JOURNEY: usize = 13;
const DEFINITIONS: [&str; 10] = [
    "core_string",
    "core_config",
    "core_coursemodinfo",
    "core_langmenu",
    "core_plugin_functions",
    "core_navigation_expandcourse",
    "core_htmlpurifier",
    "core_course_categories",
    "core_user_favourites",
    "mod_forum_discussion_subscriptions",
];

/// The session store and handler behind the PHP pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Gradus (`--durability none`) with `Gradus\SessionHandler`.
    Gradus,
    /// redis-server without persistence, with phpredis' stock session handler (locking on).
    Redis,
}

impl Backend {
    fn label(self) -> &'static str {
        match self {
            Backend::Gradus => "Gradus + Gradus\\SessionHandler",
            Backend::Redis => "Redis + phpredis stock handler (locking)",
        }
    }
}

/// `gradus-bench php-lms`.
#[derive(Debug, Parser, Serialize)]
#[command(
    name = "gradus-bench php-lms",
    bin_name = "gradus-bench php-lms",
    about = "The lms journey driven through PHP pages (php -S): Gradus\\SessionHandler on Gradus vs phpredis' stock handler on Redis"
)]
pub struct PhpLmsArgs {
    /// Backends to compare, in the first round's order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "gradus,redis"
    )]
    pub backends: Vec<Backend>,
    /// Concurrent users (closed loop), each running journeys of 13 pages.
    #[arg(long, default_value_t = 30)]
    pub users: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// Warm-up seconds per run (not measured).
    #[arg(long, default_value_t = 5.0)]
    pub warmup: f64,
    /// Interleaved rounds (each runs every backend once, the order rotating).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// PHP_CLI_SERVER_WORKERS of php -S.
    #[arg(long, default_value_t = 8)]
    pub php_workers: usize,
    /// Probability that a page fires a concurrent AJAX request on the same session.
    #[arg(long, default_value_t = 0.3)]
    pub ajax_ratio: f64,
    /// Mean think time between pages, ms (uniform in 0..2x).
    #[arg(long, default_value_t = 100)]
    pub think_ms: u64,
    /// Fewest application-cache reads on a page.
    #[arg(long, default_value_t = 20)]
    pub cache_reads_min: usize,
    /// Most application-cache reads on a page.
    #[arg(long, default_value_t = 150)]
    pub cache_reads_max: usize,
    /// Cache reads of an AJAX request.
    #[arg(long, default_value_t = 10)]
    pub ajax_cache_reads: usize,
    /// Share of cache reads made as multi-gets of 10 keys.
    #[arg(long, default_value_t = 0.3)]
    pub multiget_share: f64,
    /// Probability that a read finds its value.
    #[arg(long, default_value_t = 0.98)]
    pub hit_ratio: f64,
    /// CPU time burnt to regenerate a missed value, microseconds.
    #[arg(long, default_value_t = 500)]
    pub regen_us: u64,
    /// Bytes per cache value.
    #[arg(long, default_value_t = 512)]
    pub cache_value_size: usize,
    /// Cached keys per definition.
    #[arg(long, default_value_t = 1000)]
    pub cache_keys: usize,
    /// Session size after login, bytes (growing linearly to --session-max at logout).
    #[arg(long, default_value_t = 1024)]
    pub session_min: usize,
    /// Session size at logout, bytes.
    #[arg(long, default_value_t = 4096)]
    pub session_max: usize,
    /// phpredis' redis.session.lock_wait_time: the stock handler's polling interval, µs.
    #[arg(long, default_value_t = 20_000)]
    pub stock_lock_wait_us: u64,
    /// The gradus binary (default: the one next to gradus-bench).
    #[arg(long)]
    pub gradus_bin: Option<PathBuf>,
    /// The redis-server binary.
    #[arg(long, default_value = "redis-server")]
    pub redis_bin: String,
    /// The php binary (php-cli with phpredis).
    #[arg(long, default_value = "php")]
    pub php_bin: String,
    /// The Gradus PHP library (clients/php of the repository).
    #[arg(long, default_value = "clients/php")]
    pub php_client: PathBuf,
    /// Seed of the users' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a Markdown report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// A latency summary in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub avg_us: f64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Largest.
    pub max_us: u64,
}

fn summary(h: &Histogram<u64>) -> Latency {
    Latency {
        count: h.len(),
        avg_us: h.mean(),
        p50_us: h.value_at_quantile(0.5),
        p90_us: h.value_at_quantile(0.9),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
    }
}

/// One backend's run in one round.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Round number (from 1).
    pub round: usize,
    /// Which backend.
    pub backend: Backend,
    /// Pages (main requests) measured.
    pub pages: u64,
    /// Pages per second.
    pub pages_per_s: f64,
    /// Page latency: request until the page and its AJAX request (if any) answered.
    pub page: Latency,
    /// Main requests alone.
    pub main_request: Latency,
    /// AJAX requests alone.
    pub ajax_request: Latency,
    /// Requests that failed (not 200, or no answer).
    pub errors: u64,
    /// Main pages whose session page count was not the one the journey expected.
    pub session_mismatches: u64,
    /// /proc/loadavg (1 min) when the run started and ended.
    pub loadavg: (f64, f64),
}

/// The whole comparison.
#[derive(Debug, Serialize)]
pub struct PhpLmsResult {
    /// The command line.
    pub command: Vec<String>,
    /// The parameters.
    pub params: PhpLmsArgs,
    /// `php --version` (first line) and phpredis' version.
    pub php_version: String,
    /// Every run.
    pub runs: Vec<RunResult>,
}

/// Entry point of `gradus-bench php-lms …` (argv[1] is `php-lms`).
pub fn main_with_args(argv: Vec<String>) -> std::process::ExitCode {
    let args = match PhpLmsArgs::try_parse_from(argv.iter().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return std::process::ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run(args, argv) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gradus-bench php-lms: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run(args: PhpLmsArgs, argv: Vec<String>) -> Result<PhpLmsResult> {
    if args.backends.is_empty() || args.users == 0 || args.rounds == 0 {
        return Err(BenchError::Input(
            "need at least one backend, user and round".into(),
        ));
    }
    let autoload = std::fs::canonicalize(args.php_client.join("autoload.php")).map_err(|e| {
        BenchError::Input(format!(
            "--php-client {}: no autoload.php ({e})",
            args.php_client.display()
        ))
    })?;
    let gradus_bin = match &args.gradus_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("gradus"),
    };
    let php_version = php_version(&args.php_bin);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut runs = Vec::new();
    for round in 0..args.rounds {
        let n = args.backends.len();
        for i in 0..n {
            let backend = args.backends[(i + round) % n];
            eprintln!(
                "php-lms: round {}/{}: {}",
                round + 1,
                args.rounds,
                backend.label()
            );
            let result = one_run(&args, &runtime, backend, round + 1, &gradus_bin, &autoload)?;
            eprintln!(
                "php-lms:   {} pages, page P90 {:.1} ms, P50 {:.1} ms, errors {}, mismatches {}",
                result.pages,
                result.page.p90_us as f64 / 1000.0,
                result.page.p50_us as f64 / 1000.0,
                result.errors,
                result.session_mismatches
            );
            runs.push(result);
        }
    }
    let result = PhpLmsResult {
        command: argv,
        params: args,
        php_version,
        runs,
    };
    if let Some(path) = &result.params.json {
        std::fs::write(path, serde_json::to_vec_pretty(&result)?)?;
    }
    let markdown = markdown(&result);
    match &result.params.report {
        Some(path) => std::fs::write(path, &markdown)?,
        None => print!("{markdown}"),
    }
    Ok(result)
}

fn php_version(php: &str) -> String {
    let out = |args: &[&str]| {
        Command::new(php)
            .args(args)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default()
    };
    format!(
        "{}; phpredis {}",
        out(&["--version"]),
        out(&["-r", "echo phpversion('redis');"])
    )
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// A child process in its own process group (php -S has worker children), stopped on drop.
struct Managed {
    child: Child,
    what: String,
}

impl Managed {
    fn spawn(what: &str, cmd: &mut Command) -> Result<Managed> {
        use std::os::unix::process::CommandExt;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| BenchError::ServerStart {
                what: what.to_string(),
                detail: e.to_string(),
            })?;
        Ok(Managed {
            child,
            what: what.to_string(),
        })
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        let group = -(self.child.id() as i32);
        // SAFETY: kill(2) with a process-group id we created; no memory is involved.
        unsafe {
            libc::kill(group, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(group, libc::SIGKILL);
        }
        let _ = self.child.wait();
        eprintln!("php-lms: {} needed SIGKILL", self.what);
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn wait_listening(port: u16, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(BenchError::ServerStart {
        what: what.to_string(),
        detail: format!("not listening on 127.0.0.1:{port} after 20 s"),
    })
}

fn php_single_quoted(json: &str) -> String {
    json.replace('\\', "\\\\").replace('\'', "\\'")
}

fn one_run(
    args: &PhpLmsArgs,
    runtime: &tokio::runtime::Runtime,
    backend: Backend,
    round: usize,
    gradus_bin: &Path,
    autoload: &Path,
) -> Result<RunResult> {
    let dir = std::env::temp_dir().join(format!(
        "gradus-php-lms-{}-{round}-{backend:?}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("www"))?;
    let store_port = free_port()?;
    let port = store_port.to_string();
    let store = match backend {
        Backend::Gradus => Managed::spawn(
            "gradus",
            Command::new(gradus_bin).args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port,
                "--memcached-port",
                "0",
                "--durability",
                "none",
                "--dir",
                &dir.join("data").to_string_lossy(),
            ]),
        )?,
        Backend::Redis => Managed::spawn(
            "redis-server",
            Command::new(&args.redis_bin).args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &dir.to_string_lossy(),
            ]),
        )?,
    };
    wait_listening(store_port, "the session store")?;
    let settings = serde_json::json!({
        "backend": match backend { Backend::Gradus => "gradus", Backend::Redis => "redis" },
        "host": "127.0.0.1",
        "port": store_port,
        "autoload": autoload,
        "stock_lock_wait_us": args.stock_lock_wait_us,
        "definitions": DEFINITIONS,
        "cache_keys": args.cache_keys,
        "value_size": args.cache_value_size,
        "multiget_share": args.multiget_share,
        "hit_ratio": args.hit_ratio,
        "regen_us": args.regen_us,
    })
    .to_string();
    std::fs::write(
        dir.join("www/page.php"),
        PAGE_PHP.replace("__SETTINGS__", &php_single_quoted(&settings)),
    )?;
    std::fs::write(dir.join("prefill.php"), PREFILL_PHP)?;
    let prefill = Command::new(&args.php_bin)
        .arg(dir.join("prefill.php"))
        .arg(&settings)
        .output()?;
    if !prefill.status.success() {
        return Err(BenchError::ServerStart {
            what: "the cache prefill (php)".into(),
            detail: String::from_utf8_lossy(&prefill.stderr).into_owned()
                + &String::from_utf8_lossy(&prefill.stdout),
        });
    }
    let http_port = free_port()?;
    let php = Managed::spawn(
        "php -S",
        Command::new(&args.php_bin)
            .env("PHP_CLI_SERVER_WORKERS", args.php_workers.to_string())
            .args(["-d", "display_errors=0", "-d", "log_errors=0", "-S"])
            .arg(format!("127.0.0.1:{http_port}"))
            .arg("-t")
            .arg(dir.join("www")),
    )?;
    wait_listening(http_port, "php -S")?;
    let load_start = loadavg();
    let measured = runtime.block_on(drive(args, http_port, round as u64));
    let load_end = loadavg();
    drop(php);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    let m = measured?;
    Ok(RunResult {
        round,
        backend,
        pages: m.page.len(),
        pages_per_s: m.page.len() as f64 / args.duration,
        page: summary(&m.page),
        main_request: summary(&m.main),
        ajax_request: summary(&m.ajax),
        errors: m.errors,
        session_mismatches: m.mismatches,
        loadavg: (load_start, load_end),
    })
}

struct Measured {
    page: Histogram<u64>,
    main: Histogram<u64>,
    ajax: Histogram<u64>,
    errors: u64,
    mismatches: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

async fn drive(args: &PhpLmsArgs, http_port: u16, round: u64) -> Result<Measured> {
    let shared = Arc::new(Mutex::new(Measured {
        page: histogram(),
        main: histogram(),
        ajax: histogram(),
        errors: 0,
        mismatches: 0,
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let warmup = Duration::from_secs_f64(args.warmup);
    let end = warmup + Duration::from_secs_f64(args.duration);
    let params = Arc::new(PageParams::from(args));
    let mut users = Vec::new();
    for user in 0..args.users {
        let (shared, stop, params) = (shared.clone(), stop.clone(), params.clone());
        let seed = args.seed ^ (round << 32) ^ user as u64;
        users.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            // Spread the users' first pages over the first think time.
            tokio::time::sleep(Duration::from_millis(
                rng.gen_range(0..=params.think_ms * 2 + 1),
            ))
            .await;
            let mut journey = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let sid = format!("u{user}j{journey}r{round}x{:016x}", rng.gen::<u64>());
                journey += 1;
                for page in 0..PAGES_PER_JOURNEY {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if page > 0 {
                        let ms = rng.gen_range(0..=params.think_ms * 2);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    let started = t0.elapsed();
                    let reads = rng.gen_range(params.reads_min..=params.reads_max);
                    let size = params.session_min
                        + (params.session_max - params.session_min) * page
                            / (PAGES_PER_JOURNEY - 1);
                    let main_path = format!(
                        "/page.php?reads={reads}&size={size}&seed={}&ajax=0",
                        rng.gen::<u32>()
                    );
                    let with_ajax = page > 0 && rng.gen_bool(params.ajax_ratio);
                    let begun = Instant::now();
                    let (main, ajax) = if with_ajax {
                        let ajax_path = format!(
                            "/page.php?reads={}&size=0&seed={}&ajax=1",
                            params.ajax_reads,
                            rng.gen::<u32>()
                        );
                        let (m, a) = tokio::join!(
                            timed_get(http_port, &main_path, &sid),
                            timed_get(http_port, &ajax_path, &sid)
                        );
                        (m, Some(a))
                    } else {
                        (timed_get(http_port, &main_path, &sid).await, None)
                    };
                    let page_us = begun.elapsed().as_micros() as u64;
                    let finished = t0.elapsed();
                    let failed = main.is_err() || matches!(ajax, Some(Err(_)));
                    if started < warmup || finished > end {
                        if failed {
                            break; // a new journey, with a new session
                        }
                        continue;
                    }
                    let mut m = shared.lock();
                    if let Ok((body, us)) = &main {
                        let _ = m.main.record((*us).max(1));
                        if body.trim() != (page + 1).to_string() {
                            m.mismatches += 1;
                        }
                    }
                    if let Some(Ok((_, us))) = &ajax {
                        let _ = m.ajax.record((*us).max(1));
                    }
                    if failed {
                        m.errors += 1;
                        break; // a new journey, with a new session
                    }
                    let _ = m.page.record(page_us.max(1));
                }
            }
        }));
    }
    tokio::time::sleep(end).await;
    stop.store(true, Ordering::Relaxed);
    for u in users {
        let _ = tokio::time::timeout(Duration::from_secs(60), u).await;
    }
    let m = std::mem::replace(
        &mut *shared.lock(),
        Measured {
            page: histogram(),
            main: histogram(),
            ajax: histogram(),
            errors: 0,
            mismatches: 0,
        },
    );
    Ok(m)
}

struct PageParams {
    think_ms: u64,
    reads_min: usize,
    reads_max: usize,
    ajax_reads: usize,
    ajax_ratio: f64,
    session_min: usize,
    session_max: usize,
}

impl From<&PhpLmsArgs> for PageParams {
    fn from(a: &PhpLmsArgs) -> Self {
        PageParams {
            think_ms: a.think_ms,
            reads_min: a.cache_reads_min.min(a.cache_reads_max),
            reads_max: a.cache_reads_max.max(a.cache_reads_min),
            ajax_reads: a.ajax_cache_reads,
            ajax_ratio: a.ajax_ratio.clamp(0.0, 1.0),
            session_min: a.session_min.min(a.session_max),
            session_max: a.session_max.max(a.session_min),
        }
    }
}

/// One HTTP/1.0 GET with the session cookie: (body, microseconds), or an error for anything but 200.
async fn timed_get(port: u16, path: &str, sid: &str) -> Result<(String, u64)> {
    let started = Instant::now();
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let request = format!(
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nCookie: PHPSESSID={sid}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::with_capacity(512);
        stream.read_to_end(&mut response).await?;
        Ok::<_, BenchError>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .map_err(|_| BenchError::Timeout(Duration::from_secs(60), "a PHP page"))??;
    let us = started.elapsed().as_micros() as u64;
    let text = String::from_utf8_lossy(&response);
    let status_ok = text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    if !status_ok {
        return Err(BenchError::Protocol(format!(
            "PHP page answered {}",
            text.lines().next().unwrap_or("nothing")
        )));
    }
    Ok((body.to_string(), us))
}

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn markdown(r: &PhpLmsResult) -> String {
    let p = &r.params;
    let mut s = String::new();
    s.push_str("## gradus-bench php-lms\n\n");
    s.push_str(&format!("Command: `{}`\n\n", r.command.join(" ")));
    s.push_str(&format!(
        "{} users, {} s measured after {} s warm-up per run, {} interleaved rounds, php -S with {} workers, \
         AJAX ratio {}, think {} ms mean, {}–{} cache reads per page ({} for AJAX), stock lock polling every {} µs. {}\n\n",
        p.users, p.duration, p.warmup, p.rounds, p.php_workers, p.ajax_ratio, p.think_ms,
        p.cache_reads_min, p.cache_reads_max, p.ajax_cache_reads, p.stock_lock_wait_us, r.php_version
    ));
    s.push_str("| round | backend | pages | pages/s | page avg ms | P50 | P90 | P99 | main P90 | AJAX P90 | errors | session mismatches | load 1m (start–end) |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for run in &r.runs {
        s.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {:.2}–{:.2} |\n",
            run.round,
            run.backend.label(),
            run.pages,
            run.pages_per_s,
            run.page.avg_us / 1000.0,
            ms(run.page.p50_us),
            ms(run.page.p90_us),
            ms(run.page.p99_us),
            ms(run.main_request.p90_us),
            ms(run.ajax_request.p90_us),
            run.errors,
            run.session_mismatches,
            run.loadavg.0,
            run.loadavg.1
        ));
    }
    s.push('\n');
    let p90 = |b: Backend| {
        median(
            r.runs
                .iter()
                .filter(|x| x.backend == b)
                .map(|x| x.page.p90_us as f64 / 1000.0)
                .collect(),
        )
    };
    for b in &p.backends {
        s.push_str(&format!(
            "- median page P90, {}: {:.1} ms\n",
            b.label(),
            p90(*b)
        ));
    }
    if p.backends.contains(&Backend::Gradus) && p.backends.contains(&Backend::Redis) {
        let ratios: Vec<f64> = (1..=p.rounds)
            .filter_map(|round| {
                let get = |b| r.runs.iter().find(|x| x.round == round && x.backend == b);
                Some(
                    get(Backend::Gradus)?.page.p90_us as f64
                        / get(Backend::Redis)?.page.p90_us as f64,
                )
            })
            .collect();
        s.push_str(&format!(
            "- page P90 ratio Gradus / Redis per round: {}; median {:.2}\n",
            ratios
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            median(ratios.clone())
        ));
    }
    s
}
