//! The result of a benchmark and its two renderings: JSON with every figure (the schema is the
//! set of `Serialize` types below, documented field by field, and summarised in the README), and a
//! Markdown report for people with SVG charts from `svg`. Also the knee finder for latency
//! curves. Pure data and formatting: no sockets, no processes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::error::Result;
use crate::run::{Load, Timing};
use crate::sampler::Resources;
use crate::server::LaunchRecord;
use crate::stats::LatencySummary;
use crate::target::{ServerReport, TargetSpec};

/// Version of the JSON layout; bumped when a field changes meaning or disappears.
pub const SCHEMA: &str = "gradus-bench/1";

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// `gradus-bench` and its version.
    pub tool: String,
    /// The command line, one element per argument.
    pub command: Vec<String>,
    /// `run`, `sweep` or `compare`.
    pub subcommand: String,
    /// Start, UTC, RFC 3339.
    pub started_at: String,
    /// End, UTC, RFC 3339.
    pub finished_at: String,
    /// The machine the client (and managed servers) ran on.
    pub machine: Machine,
    /// Workload name and its parameters.
    pub workload: WorkloadInfo,
    /// Load model and timing.
    pub load: LoadInfo,
    /// True when anything ended early or failed; `partial_reason` says what.
    pub partial: bool,
    /// The first reason the result is incomplete.
    pub partial_reason: Option<String>,
    /// One entry per target, in command-line order.
    pub targets: Vec<TargetResult>,
}

/// The machine.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// `MemTotal` from `/proc/meminfo`, bytes.
    pub mem_total_bytes: u64,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// CPU model name from `/proc/cpuinfo`.
    pub cpu_model: String,
}

impl Machine {
    /// Reads the machine description from `/proc`.
    pub fn detect() -> Machine {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Machine {
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            mem_total_bytes: mem_kib * 1024,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            cpu_model: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|v| v.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default(),
        }
    }
}

/// Which workload, with which parameters.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadInfo {
    /// `kv`, `lms` or `exam`.
    pub name: String,
    /// Its parameters (see the workload modules).
    pub params: serde_json::Value,
}

/// How load was applied.
#[derive(Debug, Clone, Serialize)]
pub struct LoadInfo {
    /// `closed` or `open`.
    pub model: String,
    /// Closed loop: the user counts, one point each.
    pub users: Vec<usize>,
    /// Open loop: the arrival rates per second, one point each.
    pub rates: Vec<f64>,
    /// Open loop: connection pool size.
    pub connections: Option<usize>,
    /// Ramp-up, warm-up, duration, think time.
    pub timing: Timing,
    /// RNG seed.
    pub seed: u64,
}

/// A layer held on a fixed target (`--session-target`, `--cache-target`).
#[derive(Debug, Clone, Serialize)]
pub struct HeldLayer {
    /// Which layer was held.
    pub layer: crate::target::Layer,
    /// Its target's label.
    pub label: String,
    /// Its address.
    pub addr: String,
}

/// One target's results.
#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    /// Short label, e.g. `redis:everysec`.
    pub label: String,
    /// The parsed specification.
    pub spec: TargetSpec,
    /// The server, when it could be reached.
    pub server: Option<ServerInfo>,
    /// One per user count / rate, in order.
    pub points: Vec<PointResult>,
    /// The knee of the unit P90 curve, when there are at least three points.
    pub knee: Option<Knee>,
    /// Bytes the managed server's data directory takes on disk after the last point
    /// (allocated blocks; logs, snapshots, tablespaces, binary logs).
    pub disk_bytes: Option<u64>,
    /// The same split into logs and table data.
    pub disk: Option<crate::server::DiskUsage>,
    /// The storage IOPS limit the server ran under (`--iops-limit`), as set.
    pub iops_limit: Option<String>,
    /// The layer held on another target while this one served the other layer (`null`: this
    /// target served both).
    pub held: Option<HeldLayer>,
    /// True when this target's results are incomplete.
    pub partial: bool,
    /// Why.
    pub partial_reason: Option<String>,
}

/// The server under test.
#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    /// True when the tool started it.
    pub managed: bool,
    /// `127.0.0.1:port`.
    pub addr: String,
    /// Binary, arguments, `--version` output and pid, for managed servers.
    pub launch: Option<LaunchRecord>,
    /// What the server reports: version, `INFO` fields, full configuration.
    pub reported: ServerReport,
    /// For Gradus attached by address: the `CLIENT DURABILITY` sent on each connection.
    pub client_durability: Option<String>,
}

/// Session-lock figures of one point.
#[derive(Debug, Clone, Serialize, Default)]
pub struct LockReport {
    /// Locks acquired.
    pub acquisitions: u64,
    /// Acquisitions that waited for another request of the same session (or polled).
    pub waits: u64,
    /// Failed polling attempts (`SET NX` / `add` finding the lock taken).
    pub polls: u64,
    /// Lock waits that ran out (the page failed).
    pub timeouts: u64,
    /// Latency of the acquisitions that waited.
    pub wait_latency: LatencySummary,
}

/// Data checks of one point.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Verification {
    /// Sessions written.
    pub sessions_written: u64,
    /// Session reads (under the lock) whose content was exactly the last content written.
    pub sessions_verified: u64,
    /// Session reads with other content.
    pub session_mismatches: u64,
    /// Sessions read back after the run with the right content.
    pub final_readback_checked: u64,
    /// Sessions read back after the run with other content or missing.
    pub final_readback_mismatches: u64,
    /// Cache reads that found a value.
    pub cache_hits: u64,
    /// Cache reads that found nothing.
    pub cache_misses: u64,
    /// Values regenerated and written after a miss.
    pub cache_regenerated: u64,
    /// Cache/kv values whose content did not match the key.
    pub value_mismatches: u64,
    /// Sessions seen by proctors (exam).
    pub proctor_sessions_seen: u64,
    /// The first mismatch, verbatim.
    pub first_mismatch: Option<String>,
}

/// One measurement point.
#[derive(Debug, Clone, Serialize)]
pub struct PointResult {
    /// Closed loop: users.
    pub users: Option<usize>,
    /// Open loop: arrivals per second.
    pub rate: Option<f64>,
    /// The load model of this point.
    pub load: Load,
    /// Seconds spent loading data before the point.
    pub prepare_s: f64,
    /// Length of the measured window, seconds.
    pub measured_s: f64,
    /// The unit of work (`journey`, `op`, `post_answer`).
    pub unit: String,
    /// Units measured.
    pub units: u64,
    /// Units per second.
    pub units_per_s: f64,
    /// Request/response exchanges measured (all protocol ops).
    pub protocol_ops: u64,
    /// The same per second.
    pub protocol_ops_per_s: f64,
    /// Latency of the unit (open loop: service time, from the actual start).
    pub unit_latency: LatencySummary,
    /// Open loop: latency of the unit from its intended start.
    pub response_time: Option<LatencySummary>,
    /// `lms`: 13.
    pub pages_per_journey: Option<usize>,
    /// Every operation's latency, by name.
    pub ops: BTreeMap<String, LatencySummary>,
    /// Bytes and round trips on the wire per page and per unit.
    pub wire: WireReport,
    /// Units abandoned after an error.
    pub abandoned_units: u64,
    /// Units cut off by the end of the drain period.
    pub cut_at_end: u64,
    /// Open loop: arrivals dropped because too many were waiting.
    pub dropped_arrivals: u64,
    /// Connections re-opened after an error.
    pub reconnects: u64,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Session-lock figures.
    pub locks: LockReport,
    /// Data checks.
    pub verification: Verification,
    /// Server resource use over the measured window.
    pub resources: Resources,
    /// CPU used by the bench itself over the measured window (it shares the machine with
    /// managed servers), in percent of one core.
    pub client_cpu_percent_of_one_core: Option<f64>,
    /// Fault runs: what the restart or kill cost (see `fault`).
    pub fault: Option<crate::fault::FaultReport>,
    /// True when the point ended early.
    pub partial: bool,
    /// Why.
    pub partial_reason: Option<String>,
}

/// One wire figure over the measured pages or units.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct WireFigure {
    /// Pages or units measured.
    pub count: u64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// Largest.
    pub max: u64,
}

/// What went over the network, counted in the client layer (see `wire`).
#[derive(Debug, Clone, Serialize, Default)]
pub struct WireReport {
    /// False when the target's bytes could not be counted (the files store; MariaDB's driver
    /// without `--rtt-ms`, which routes it through the counting relay).
    pub counted: bool,
    /// Why not, when not.
    pub note: Option<String>,
    /// The modelled round-trip time, ms (`--rtt-ms`), `null` for direct connections.
    pub rtt_ms: Option<f64>,
    /// Client-side compression threshold, bytes (`--compress-threshold`).
    pub compress_threshold: Option<usize>,
    /// `page.sent`, `page.received`, `page.round_trips` (lms), and per unit and layer
    /// `unit.session_sent`, `unit.session_received`, `unit.session_round_trips`,
    /// `unit.cache_sent`, `unit.cache_received`, `unit.cache_round_trips`. Bytes are TCP
    /// payload (protocol framing included, TCP/IP headers not).
    pub figures: BTreeMap<String, WireFigure>,
}

impl WireReport {
    /// Builds the report from the `wire.*` histograms of a point.
    pub fn from_summaries(
        wire: &BTreeMap<String, LatencySummary>,
        config: &crate::target::ClientConfig,
    ) -> WireReport {
        let figures: BTreeMap<String, WireFigure> = wire
            .iter()
            .map(|(name, s)| {
                (
                    name.trim_start_matches("wire.").to_string(),
                    WireFigure {
                        count: s.count,
                        avg: s.avg_us,
                        p50: s.p50_us,
                        p90: s.p90_us,
                        max: s.max_us,
                    },
                )
            })
            .collect();
        let counted = !figures.is_empty();
        let note = (!counted).then(|| {
            match config.kind {
                crate::target::TargetKind::Files => "the files store has no network connection",
                crate::target::TargetKind::Mariadb | crate::target::TargetKind::Myrocks => {
                    "MariaDB's driver owns its socket: give --rtt-ms (0 for no delay) to count \
                     it through the relay"
                }
                _ => "no unit completed in the measured window",
            }
            .to_string()
        });
        WireReport {
            counted,
            note,
            rtt_ms: config.relay_one_way.map(|d| d.as_secs_f64() * 2000.0),
            compress_threshold: config.compression.map(|c| c.threshold),
            figures,
        }
    }

    /// Mean of one figure, if present.
    pub fn avg(&self, name: &str) -> Option<f64> {
        self.figures.get(name).map(|f| f.avg)
    }
}

/// The knee of a latency curve.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Knee {
    /// Index of the knee point.
    pub index: usize,
    /// Its users (or rate).
    pub x: f64,
    /// Its P90, ms.
    pub p90_ms: f64,
    /// How it was found.
    pub method: &'static str,
    /// Which resource ran out past the knee, with the figures that say so (a reading of the
    /// point after the knee against the first point; see [`saturated_resource`]).
    pub saturated: Option<String>,
}

/// Finds the knee of an increasing latency curve: after scaling both axes to 0..1, the point
/// farthest below the straight line from the first to the last point (the "Kneedle" rule).
/// `None` with fewer than three points, or when latency at the end is under 1.5 times the start
/// (a flat curve has no knee).
pub fn find_knee(xs: &[f64], ys: &[f64]) -> Option<usize> {
    if xs.len() < 3 || xs.len() != ys.len() {
        return None;
    }
    let (x0, x1) = (xs[0], xs[xs.len() - 1]);
    let (y0, y1) = (ys[0], ys[ys.len() - 1]);
    if x1 <= x0 || y1 < 1.5 * y0 || y1 <= y0 {
        return None;
    }
    let mut best = None;
    let mut best_gap = 0.0;
    for i in 1..xs.len() - 1 {
        let xn = (xs[i] - x0) / (x1 - x0);
        let yn = (ys[i] - y0) / (y1 - y0);
        let gap = xn - yn;
        if gap > best_gap {
            best_gap = gap;
            best = Some(i);
        }
    }
    best
}

/// Sets the knee of a target from its points' unit P90 (points in increasing load order), and
/// names the resource that saturated past it. `cpus`: the machine's cores; `cap`: the
/// database's connection cap, if one was set.
pub fn attach_knee(target: &mut TargetResult, cpus: usize) {
    // The curve is made of the points that measured something; a point that failed (users
    // refused at a connection cap) is past the knee whatever its latency.
    let measured: Vec<usize> = (0..target.points.len())
        .filter(|&i| !target.points[i].partial && target.points[i].unit_latency.count > 0)
        .collect();
    let xs: Vec<f64> = measured
        .iter()
        .map(|&i| point_x(&target.points[i]))
        .collect();
    let ys: Vec<f64> = measured
        .iter()
        .map(|&i| target.points[i].unit_latency.p90_us as f64 / 1000.0)
        .collect();
    let cap = target.spec.max_connections;
    let first_failed = target.points.iter().position(|p| p.partial);
    let knee = find_knee(&xs, &ys)
        .map(|k| {
            (
                measured[k],
                xs[k],
                ys[k],
                "largest gap below the chord of the normalised P90 curve (Kneedle)",
            )
        })
        .or_else(|| {
            // No bend among the measured points but a failed point after them: the knee is
            // the last measured point before it.
            let f = first_failed?;
            let k = measured.iter().rposition(|&i| i < f)?;
            Some((
                measured[k],
                xs[k],
                ys[k],
                "last point measured before a point that failed",
            ))
        });
    target.knee = knee.map(|(i, x, p90_ms, method)| {
        let past = &target.points[(i + 1).min(target.points.len() - 1)];
        Knee {
            index: i,
            x,
            p90_ms,
            method,
            saturated: Some(saturated_resource(&target.points[0], past, cap, cpus)),
        }
    });
}

/// A point's position on the load axis: users, or arrivals per second.
pub fn point_x(p: &PointResult) -> f64 {
    p.users.map(|u| u as f64).or(p.rate).unwrap_or(0.0)
}

/// True when a point is past the knee: its unit P90 is above `factor` times the first point's,
/// or units failed, or the point ended early.
pub fn point_is_bad(first: &PointResult, p: &PointResult, factor: f64) -> bool {
    let base = first.unit_latency.p90_us.max(1) as f64;
    p.partial
        || p.abandoned_units > 0
        || p.unit_latency.count == 0
        || p.unit_latency.p90_us as f64 > factor * base
}

/// The next user count of an adaptive sweep: halfway between the last good point and the first
/// bad one (points sorted by users; see [`point_is_bad`]), or `None` when they are adjacent
/// user counts or no point is bad (or none is good).
pub fn next_refinement(points: &[PointResult], factor: f64) -> Option<usize> {
    let mut sorted: Vec<&PointResult> = points.iter().filter(|p| p.users.is_some()).collect();
    sorted.sort_by_key(|p| p.users);
    let first = *sorted.first()?;
    let bad = sorted.iter().position(|p| point_is_bad(first, p, factor))?;
    if bad == 0 {
        return None;
    }
    let lo = sorted[bad - 1].users?;
    let hi = sorted[bad].users?;
    (hi > lo + 1).then_some(lo + (hi - lo) / 2)
}

/// Names the resource that ran out at point `at`, compared with the `first` point: the CPU of
/// the machine (server and bench together near the cores' total), connections (open sockets at
/// the database's cap, or connection errors), the disks (operations per second several times
/// the first point's), or session-lock waits. A heuristic reading of the sampled figures, not a
/// proof; the figures it rests on are in the text.
pub fn saturated_resource(
    first: &PointResult,
    at: &PointResult,
    cap: Option<u32>,
    cpus: usize,
) -> String {
    let r = &at.resources;
    let r0 = &first.resources;
    let mut found = Vec::new();
    let server_cpu = if r.available {
        r.cpu_percent_of_one_core
    } else {
        0.0
    };
    let bench_cpu = at.client_cpu_percent_of_one_core.unwrap_or(0.0);
    let total = (cpus.max(1) * 100) as f64;
    if server_cpu + bench_cpu >= 0.85 * total {
        found.push(format!(
            "CPU: server {server_cpu:.0} % + bench {bench_cpu:.0} % of {total:.0} %"
        ));
    }
    let connect_errors: u64 = at
        .errors
        .iter()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            k.contains("connect") || k.contains("too many")
        })
        .map(|(_, n)| n)
        .sum();
    let refused = at
        .partial_reason
        .as_deref()
        .map(|r| r.contains("connect"))
        .unwrap_or(false);
    if let Some(cap) = cap {
        if r.available && r.sockets_max as f64 >= 0.9 * cap as f64 || connect_errors > 0 || refused
        {
            found.push(format!(
                "connections: {} sockets open against a cap of {cap}, {connect_errors} connection errors",
                r.sockets_max
            ));
        }
    } else if connect_errors > 0 || refused {
        found.push(format!(
            "connections: {connect_errors} connection errors{}",
            if refused { ", users refused" } else { "" }
        ));
    }
    if r.available && r0.available {
        let ops = r.disk_read_ops_per_s + r.disk_write_ops_per_s;
        let ops0 = r0.disk_read_ops_per_s + r0.disk_write_ops_per_s;
        if ops >= 100.0 && ops >= 3.0 * ops0.max(1.0) {
            found.push(format!(
                "disk: {:.0} reads/s + {:.0} writes/s (first point {ops0:.0}/s); server reads {:.0} KiB/s",
                r.disk_read_ops_per_s,
                r.disk_write_ops_per_s,
                r.read_bytes_per_s / 1024.0
            ));
        }
    }
    let wait = at.locks.wait_latency.avg_us;
    if at.locks.waits > 0 && wait > 0.25 * at.unit_latency.avg_us.max(1.0) / 13.0 {
        found.push(format!(
            "session locks: {} waits averaging {:.1} ms",
            at.locks.waits,
            wait / 1000.0
        ));
    }
    if found.is_empty() {
        format!(
            "none of CPU ({:.0} % of {total:.0} %), connections or disk reached its limit at {}: \
             latency grew by queueing",
            server_cpu + bench_cpu,
            point_x(at)
        )
    } else {
        found.join("; ")
    }
}

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1000.0)
}

/// The "bytes on the wire" section: per page (lms) and per unit, per layer.
fn wire_markdown(result: &BenchResult) -> String {
    let mut md = String::new();
    let any = result
        .targets
        .iter()
        .flat_map(|t| t.points.iter())
        .any(|p| p.wire.counted);
    if !any {
        return md;
    }
    let unit = result
        .targets
        .iter()
        .flat_map(|t| t.points.first())
        .map(|p| p.unit.clone())
        .next()
        .unwrap_or_else(|| "unit".into());
    let _ = writeln!(
        md,
        "\n## Bytes on the wire\n\nCounted in the client layer (TCP payload, protocol framing \
         included). Means per page and per {unit}; session and cache layers apart.\n"
    );
    let _ = writeln!(
        md,
        "| target | users/rate | RTT ms | compression ≥ B | page sent B | page received B | page round trips | {unit} session B | {unit} cache B | {unit} round trips | KiB/s both ways |\n|{}",
        "---|".repeat(11)
    );
    let num = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
    for t in &result.targets {
        for p in &t.points {
            let x = p
                .users
                .map(|u| u.to_string())
                .or(p.rate.map(|r| format!("{r}/s")))
                .unwrap_or_default();
            let w = &p.wire;
            if !w.counted {
                let _ = writeln!(
                    md,
                    "| {} | {x} | {} | - | - | - | - | - | - | - | - |",
                    t.label,
                    w.note.as_deref().unwrap_or("not counted")
                );
                continue;
            }
            let sum = |a: &str, b: &str| Some(w.avg(a)? + w.avg(b)?);
            let session = sum("unit.session_sent", "unit.session_received");
            let cache = sum("unit.cache_sent", "unit.cache_received");
            let rts = sum("unit.session_round_trips", "unit.cache_round_trips");
            let rate = session
                .zip(cache)
                .map(|(s, c)| (s + c) * p.units_per_s / 1024.0);
            let _ = writeln!(
                md,
                "| {} | {x} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                t.label,
                w.rtt_ms
                    .map(|r| format!("{r}"))
                    .unwrap_or_else(|| "direct".into()),
                w.compress_threshold
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "off".into()),
                num(w.avg("page.sent")),
                num(w.avg("page.received")),
                w.avg("page.round_trips")
                    .map(|v| format!("{v:.1}"))
                    .unwrap_or_else(|| "-".into()),
                num(session),
                num(cache),
                num(rts),
                rate.map(|r| format!("{r:.0}"))
                    .unwrap_or_else(|| "-".into()),
            );
        }
    }
    md
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1024.0 * 1024.0))
}

/// Writes the JSON result.
pub fn write_json(result: &BenchResult, path: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(result)?;
    if path.as_os_str() == "-" {
        println!("{text}");
    } else {
        create_parent(path)?;
        std::fs::write(path, text + "\n")?;
    }
    Ok(())
}

fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => Ok(std::fs::create_dir_all(dir)?),
        _ => Ok(()),
    }
}

/// Writes the Markdown report to `path` and its SVG charts next to it.
pub fn write_markdown(result: &BenchResult, path: &Path) -> Result<()> {
    create_parent(path)?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut md = String::new();
    let unit = result
        .targets
        .iter()
        .flat_map(|t| t.points.first())
        .map(|p| p.unit.clone())
        .next()
        .unwrap_or_else(|| "unit".into());
    let _ = writeln!(
        md,
        "# gradus-bench {}: `{}`\n",
        result.subcommand, result.workload.name
    );
    let _ = writeln!(md, "```sh\n{}\n```\n", shell_line(&result.command));
    let _ = writeln!(
        md,
        "- date: {} → {}\n- machine: {} CPUs ({}), {:.1} GiB RAM, kernel {}\n- load: {} loop, timing {}\n- workload parameters: `{}`",
        result.started_at,
        result.finished_at,
        result.machine.cpus,
        result.machine.cpu_model,
        result.machine.mem_total_bytes as f64 / (1u64 << 30) as f64,
        result.machine.kernel,
        result.load.model,
        serde_json::to_string(&result.load.timing).unwrap_or_default(),
        serde_json::to_string(&result.workload.params).unwrap_or_default(),
    );
    if result.partial {
        let _ = writeln!(
            md,
            "\n**Partial result:** {}",
            result.partial_reason.as_deref().unwrap_or("unknown reason")
        );
    }
    let _ = writeln!(md, "\n## Servers\n");
    for t in &result.targets {
        match &t.server {
            Some(s) => {
                let version = s
                    .launch
                    .as_ref()
                    .map(|l| l.version_output.clone())
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| s.reported.protocol_version.clone());
                let args = s
                    .launch
                    .as_ref()
                    .map(|l| format!("`{} {}`", l.binary, shell_line(&l.args)))
                    .unwrap_or_else(|| format!("attached at {}", s.addr));
                let _ = writeln!(md, "- **{}**: {version} — {args}", t.label);
                if let Some(l) = &t.iops_limit {
                    let _ = writeln!(md, "  - storage limit: {l}");
                }
                if let Some(h) = &t.held {
                    let _ = writeln!(
                        md,
                        "  - {} layer held on **{}** at {} (this target served the other layer only)",
                        h.layer, h.label, h.addr
                    );
                }
            }
            None => {
                let _ = writeln!(
                    md,
                    "- **{}**: not measured — {}",
                    t.label,
                    t.partial_reason.as_deref().unwrap_or("")
                );
            }
        }
    }
    let _ = writeln!(md, "\n## {unit} latency (ms) and server resources\n");
    let _ = writeln!(
        md,
        "| target | users/rate | {unit}s/s | ops/s | avg | p50 | p90 | p99 | max | errors | lock waits | polls | verified | mismatches | server CPU % | PSS MiB | disk read KiB/s | disk write KiB/s | write calls/s | disk ops r/w per s | sockets | bench CPU % |"
    );
    let _ = writeln!(md, "|{}", "---|".repeat(22));
    for t in &result.targets {
        for p in &t.points {
            let x = p
                .users
                .map(|u| u.to_string())
                .or(p.rate.map(|r| format!("{r}/s")))
                .unwrap_or_default();
            let l = &p.unit_latency;
            let r = &p.resources;
            let res = if r.available {
                format!(
                    "{:.0} | {} | {:.0} | {:.0} | {:.0} | {:.0}/{:.0} | {}",
                    r.cpu_percent_of_one_core,
                    mib(r.pss_max_bytes),
                    r.read_bytes_per_s / 1024.0,
                    r.write_bytes_per_s / 1024.0,
                    r.write_syscalls_per_s,
                    r.disk_read_ops_per_s,
                    r.disk_write_ops_per_s,
                    r.sockets_max
                )
            } else {
                "n/a | n/a | n/a | n/a | n/a | n/a | n/a".to_string()
            };
            let v = &p.verification;
            let _ = writeln!(
                md,
                "| {}{} | {x} | {:.1} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {res} | {} |",
                t.label,
                if p.partial { " (partial)" } else { "" },
                p.units_per_s,
                p.protocol_ops_per_s,
                ms(l.avg_us),
                ms(l.p50_us as f64),
                ms(l.p90_us as f64),
                ms(l.p99_us as f64),
                ms(l.max_us as f64),
                p.errors.values().sum::<u64>(),
                p.locks.waits,
                p.locks.polls,
                v.sessions_verified + v.final_readback_checked,
                v.session_mismatches + v.final_readback_mismatches + v.value_mismatches,
                p.client_cpu_percent_of_one_core
                    .map(|c| format!("{c:.0}"))
                    .unwrap_or_else(|| "n/a".into()),
            );
        }
    }
    let _ = writeln!(
        md,
        "\nMemory is PSS (`/proc/<pid>/smaps_rollup`, summed over the server's processes: shared \
         memory such as PostgreSQL's `shared_buffers` counted once; the JSON also has RSS). Disk \
         read/write KiB/s are the server's own (`/proc/<pid>/io`); disk ops/s are the machine's \
         whole disks (`/proc/diskstats`), other work on the machine included."
    );
    if let Some(rt) = result
        .targets
        .iter()
        .flat_map(|t| t.points.iter())
        .find(|p| p.response_time.is_some())
    {
        let _ = rt;
        let _ = writeln!(
            md,
            "\nOpen loop: response time measured from the intended start (includes queueing):\n"
        );
        let _ = writeln!(md, "| target | rate | service p90 | response avg | response p90 | response p99 | dropped |\n|---|---|---|---|---|---|---|");
        for t in &result.targets {
            for p in &t.points {
                if let Some(r) = &p.response_time {
                    let _ = writeln!(
                        md,
                        "| {} | {}/s | {} | {} | {} | {} | {} |",
                        t.label,
                        p.rate.unwrap_or(0.0),
                        ms(p.unit_latency.p90_us as f64),
                        ms(r.avg_us),
                        ms(r.p90_us as f64),
                        ms(r.p99_us as f64),
                        p.dropped_arrivals
                    );
                }
            }
        }
    }
    md.push_str(&wire_markdown(result));
    // Charts.
    let xs_label = if result.load.model == "open" {
        "arrivals per second"
    } else {
        "users"
    };
    let latency_svg = format!("{stem}-latency.svg");
    let series: Vec<crate::svg::Series> = result
        .targets
        .iter()
        .filter(|t| !t.points.is_empty())
        .map(|t| {
            // Points that measured nothing (users refused, a server gone) are left off the line.
            let shown: Vec<usize> = (0..t.points.len())
                .filter(|&i| !t.points[i].partial && t.points[i].unit_latency.count > 0)
                .collect();
            crate::svg::Series {
                label: t.label.clone(),
                points: shown
                    .iter()
                    .map(|&i| {
                        let p = &t.points[i];
                        (point_x(p), p.unit_latency.p90_us as f64 / 1000.0)
                    })
                    .collect(),
                knee: t
                    .knee
                    .as_ref()
                    .and_then(|k| shown.iter().position(|&i| i == k.index)),
            }
        })
        .collect();
    if series.iter().any(|s| s.points.len() > 1) {
        std::fs::write(
            dir.join(&latency_svg),
            crate::svg::line_chart(
                &format!("{unit} P90 latency vs {xs_label}"),
                xs_label,
                "P90 ms",
                &series,
            ),
        )?;
        let _ = writeln!(
            md,
            "\n## Latency curve\n\n![{unit} P90 vs {xs_label}]({latency_svg})\n"
        );
        for t in &result.targets {
            match &t.knee {
                Some(k) => {
                    let _ = writeln!(
                        md,
                        "- {}: knee at {} ({:.2} ms P90); past it: {}",
                        t.label,
                        k.x,
                        k.p90_ms,
                        k.saturated.as_deref().unwrap_or("-")
                    );
                }
                None => {
                    let _ = writeln!(
                        md,
                        "- {}: no knee (fewer than three points, or a flat curve)",
                        t.label
                    );
                }
            }
        }
    }
    // Bars of avg and P90 per target, one chart per user count / rate.
    let mut xs: Vec<String> = Vec::new();
    for t in &result.targets {
        for p in &t.points {
            let x = p
                .users
                .map(|u| u.to_string())
                .or(p.rate.map(|r| r.to_string()))
                .unwrap_or_default();
            if !xs.contains(&x) {
                xs.push(x);
            }
        }
    }
    if !xs.is_empty() {
        let _ = writeln!(md, "\n## Average and P90 {unit} latency per target\n");
    }
    for x in xs {
        let bars: Vec<crate::svg::Bar> = result
            .targets
            .iter()
            .filter_map(|t| {
                t.points
                    .iter()
                    .find(|p| {
                        p.users
                            .map(|u| u.to_string())
                            .or(p.rate.map(|r| r.to_string()))
                            .as_deref()
                            == Some(x.as_str())
                    })
                    .map(|p| crate::svg::Bar {
                        label: t.label.clone(),
                        avg: p.unit_latency.avg_us / 1000.0,
                        p90: p.unit_latency.p90_us as f64 / 1000.0,
                    })
            })
            .collect();
        let name = format!("{stem}-bars-{}.svg", x.replace(['.', '/'], "_"));
        std::fs::write(
            dir.join(&name),
            crate::svg::bar_chart(&format!("{unit} latency at {x} {xs_label}"), "ms", &bars),
        )?;
        let _ = writeln!(md, "![avg and P90 at {x} {xs_label}]({name})\n");
    }
    md.push_str(&crate::fault::markdown(result));
    // Per-operation detail.
    let _ = writeln!(md, "\n## Operations (ms)\n");
    let _ = writeln!(md, "| target | users/rate | op | count | errors | avg | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|---|---|---|");
    for t in &result.targets {
        for p in &t.points {
            let x = p
                .users
                .map(|u| u.to_string())
                .or(p.rate.map(|r| format!("{r}/s")))
                .unwrap_or_default();
            for (name, s) in &p.ops {
                if name.starts_with("page.") {
                    continue;
                }
                let _ = writeln!(
                    md,
                    "| {} | {x} | {name} | {} | {} | {} | {} | {} | {} | {} |",
                    t.label,
                    s.count,
                    s.errors,
                    ms(s.avg_us),
                    ms(s.p50_us as f64),
                    ms(s.p90_us as f64),
                    ms(s.p99_us as f64),
                    ms(s.max_us as f64)
                );
            }
        }
    }
    let notes = result
        .targets
        .iter()
        .flat_map(|t| t.points.iter().map(move |p| (t, p)))
        .filter(|(_, p)| !p.resources.available)
        .map(|(t, p)| {
            format!(
                "- {}: resources unavailable — {}",
                t.label,
                p.resources.reason.clone().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>();
    let _ = writeln!(
        md,
        "\nResource figures are for the server process only, sampled from /proc once a second over the measured window; fsync calls are not visible there (write calls are)."
    );
    for n in notes {
        let _ = writeln!(md, "{n}");
    }
    std::fs::write(path, md)?;
    Ok(())
}

/// The arguments as one shell line (single-quoting those that need it).
pub fn shell_line(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:,=+@".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Seconds since the epoch as an RFC 3339 UTC timestamp.
pub fn rfc3339(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Now, as seconds since the epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knee_of_a_hockey_stick() {
        let xs = [1.0, 10.0, 30.0, 50.0, 100.0];
        let ys = [2.0, 2.1, 2.4, 3.0, 40.0];
        assert_eq!(find_knee(&xs, &ys), Some(3));
        assert_eq!(find_knee(&xs, &[2.0, 2.0, 2.1, 2.1, 2.2]), None);
        assert_eq!(find_knee(&xs[..2], &ys[..2]), None);
    }

    fn synthetic_point(users: usize, p90_ms: f64) -> PointResult {
        let lat = LatencySummary {
            count: 100,
            p90_us: (p90_ms * 1000.0) as u64,
            avg_us: p90_ms * 800.0,
            ..LatencySummary::default()
        };
        PointResult {
            users: Some(users),
            rate: None,
            load: crate::run::Load::Closed { users },
            prepare_s: 0.0,
            measured_s: 10.0,
            unit: "journey".into(),
            units: 100,
            units_per_s: 10.0,
            protocol_ops: 0,
            protocol_ops_per_s: 0.0,
            unit_latency: lat,
            response_time: None,
            pages_per_journey: Some(13),
            ops: BTreeMap::new(),
            wire: WireReport::default(),
            abandoned_units: 0,
            cut_at_end: 0,
            dropped_arrivals: 0,
            reconnects: 0,
            errors: BTreeMap::new(),
            locks: LockReport::default(),
            verification: Verification::default(),
            resources: Resources::unavailable("synthetic"),
            client_cpu_percent_of_one_core: None,
            fault: None,
            partial: false,
            partial_reason: None,
        }
    }

    /// A latency curve flat at 10 ms up to a planted knee at 270 users, then rising steeply
    /// (as a closed loop past saturation: latency grows linearly with users).
    fn planted(users: usize) -> f64 {
        if users <= 270 {
            10.0 + users as f64 * 0.002
        } else {
            10.0 + (users - 270) as f64 * 1.5
        }
    }

    #[test]
    fn adaptive_sweep_and_knee_finder_find_a_planted_knee() {
        let mut points: Vec<PointResult> = [1, 100, 200, 400, 600]
            .iter()
            .map(|&u| synthetic_point(u, planted(u)))
            .collect();
        let mut added = 0;
        while let Some(u) = next_refinement(&points, 2.0) {
            assert!(!points.iter().any(|p| p.users == Some(u)), "no repeats");
            points.push(synthetic_point(u, planted(u)));
            added += 1;
            assert!(added < 20, "refinement converges");
        }
        points.sort_by_key(|p| p.users);
        // 2× the 10 ms base is crossed at 277 users: the last good and first bad are adjacent.
        let users: Vec<usize> = points.iter().map(|p| p.users.unwrap()).collect();
        let first_bad = users
            .iter()
            .position(|&u| planted(u) > 2.0 * planted(1))
            .unwrap();
        assert_eq!(users[first_bad] - users[first_bad - 1], 1, "{users:?}");
        assert_eq!(users[first_bad], 277);
        // The knee finder, on the refined curve, lands within 5 % of the planted knee.
        let mut target = TargetResult {
            label: "synthetic".into(),
            spec: crate::target::TargetSpec::parse("redis").unwrap(),
            server: None,
            points,
            knee: None,
            disk_bytes: None,
            disk: None,
            iops_limit: None,
            held: None,
            partial: false,
            partial_reason: None,
        };
        attach_knee(&mut target, 2);
        let knee = target.knee.expect("a knee");
        assert!((knee.x - 270.0).abs() <= 0.05 * 270.0, "knee at {}", knee.x);
        assert!(knee.saturated.unwrap().contains("queueing"));
    }

    #[test]
    fn a_point_refused_at_the_connection_cap_is_past_the_knee() {
        let mut failed = synthetic_point(180, 0.0);
        failed.partial = true;
        failed.partial_reason = Some("user 149 cannot connect: Too many connections".into());
        failed.unit_latency = LatencySummary::default();
        failed.resources = Resources {
            available: true,
            sockets_max: 151,
            ..Resources::default()
        };
        let mut spec = crate::target::TargetSpec::parse("mariadb").unwrap();
        spec.max_connections = Some(150);
        let mut target = TargetResult {
            label: "capped".into(),
            spec,
            server: None,
            points: vec![
                synthetic_point(10, 800.0),
                synthetic_point(60, 1300.0),
                failed,
            ],
            knee: None,
            disk_bytes: None,
            disk: None,
            iops_limit: None,
            held: None,
            partial: true,
            partial_reason: None,
        };
        attach_knee(&mut target, 2);
        let knee = target.knee.expect("a knee");
        assert_eq!(knee.x, 60.0);
        let s = knee.saturated.unwrap();
        assert!(s.contains("cap of 150"), "{s}");
    }

    #[test]
    fn saturation_names_cpu_connections_and_disk() {
        let first = synthetic_point(1, 10.0);
        let mut at = synthetic_point(300, 50.0);
        at.client_cpu_percent_of_one_core = Some(80.0);
        at.resources = Resources {
            available: true,
            cpu_percent_of_one_core: 100.0,
            sockets_max: 100,
            disk_read_ops_per_s: 900.0,
            ..Resources::default()
        };
        let mut first_r = first.clone();
        first_r.resources = Resources {
            available: true,
            disk_read_ops_per_s: 10.0,
            ..Resources::default()
        };
        let text = saturated_resource(&first_r, &at, Some(100), 2);
        assert!(text.contains("CPU"), "{text}");
        assert!(text.contains("cap of 100"), "{text}");
        assert!(text.contains("disk"), "{text}");
        let calm = saturated_resource(&first_r, &first_r, Some(100), 2);
        assert!(calm.starts_with("none of"), "{calm}");
    }

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
    }

    #[test]
    fn shell_lines_quote_what_needs_it() {
        let args = vec![
            "gradus-bench".to_string(),
            "--targets".into(),
            "a b".into(),
            "it's".into(),
        ];
        assert_eq!(shell_line(&args), "gradus-bench --targets 'a b' 'it'\\''s'");
    }
}
