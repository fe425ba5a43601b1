//! The `exam` workload: an online exam. Students log in over the ramp-up (a new session), then
//! for each question group fetch the group's questions from the application cache (one
//! multi-get; a miss regenerates the question) and post an answer (lock the session, append the
//! answer, write it back, unlock); after the last group they submit and start the next attempt.
//! Proctors — one per `students_per_proctor` students — poll the session status of their
//! students every `poll_interval_s` seconds with one multi-key read. Results per operation:
//! `login`, `fetch_questions`, `post_answer`, `submit`, `proctor_poll`. Closed loop only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::error::Result;
use crate::run::RunCtx;
use crate::stats::{micros, Counters, Step};
use crate::target::Client;
use crate::workload::keys::tagged_value;
use crate::workload::session::{self, SessionTracker};
use crate::workload::UnitError;

/// The cache definition holding the questions.
const QUESTIONS: &str = "exam_questions";
/// Largest session an attempt grows to; older answers are dropped beyond it.
const SESSION_CAP: usize = 64 * 1024;

/// Parameters of the exam workload.
#[derive(Debug, Clone, Serialize)]
pub struct ExamParams {
    /// Question groups in one attempt.
    pub groups: usize,
    /// Questions per group (one multi-get).
    pub questions_per_group: usize,
    /// Bytes per question.
    pub question_size: usize,
    /// Smallest answer, bytes.
    pub answer_min: usize,
    /// Largest answer, bytes.
    pub answer_max: usize,
    /// Students per proctor (at least one proctor).
    pub students_per_proctor: usize,
    /// Seconds between two polls of one proctor.
    pub poll_interval_s: f64,
}

/// The configured workload.
#[derive(Debug)]
pub struct Exam {
    /// Parameters.
    pub params: ExamParams,
}

fn student_sid(tag: &str, student: usize) -> String {
    format!("{tag}:exam:s{student}")
}

impl Exam {
    /// Configures the workload.
    pub fn new(params: ExamParams) -> Exam {
        Exam { params }
    }

    fn question(&self, key: &str) -> Vec<u8> {
        tagged_value(&format!("{QUESTIONS}:{key}"), self.params.question_size)
    }

    /// Stores every question.
    pub async fn prepare(&self, client: &mut Client) -> Result<()> {
        let items: Vec<(String, Vec<u8>)> = (0..self.params.groups)
            .flat_map(|g| (0..self.params.questions_per_group).map(move |q| format!("g{g}q{q}")))
            .map(|k| {
                let v = self.question(&k);
                (k, v)
            })
            .collect();
        client.cache_fill(QUESTIONS, &items).await
    }
}

/// Starts the students and the proctors.
pub fn spawn(ctx: &Arc<RunCtx>, exam: Arc<Exam>, students: usize) -> Vec<JoinHandle<()>> {
    let per = exam.params.students_per_proctor.max(1);
    let proctors = students.div_ceil(per).max(1);
    let mut handles: Vec<JoinHandle<()>> = (0..students)
        .map(|s| tokio::spawn(student(ctx.clone(), exam.clone(), s, students)))
        .collect();
    for p in 0..proctors {
        let watched: Vec<String> = (0..students)
            .filter(|s| s % proctors == p)
            .map(|s| student_sid(&ctx.tag, s))
            .collect();
        handles.push(tokio::spawn(proctor(ctx.clone(), exam.clone(), p, watched)));
    }
    handles
}

/// Records a failed step; reconnects on a broken connection. False: stop this role.
async fn failed(ctx: &RunCtx, client: &mut Client, e: UnitError, in_window: bool) -> bool {
    ctx.collector.error(e.op, &e.error, in_window);
    if e.error.breaks_connection() {
        if ctx.stopping() {
            return false;
        }
        match ctx.connect().await {
            Ok(c) => *client = c,
            Err(err) => {
                ctx.abort(format!(
                    "lost the server during {}: {}; reconnect: {err}",
                    e.op, e.error
                ));
                return false;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    true
}

async fn student(ctx: Arc<RunCtx>, exam: Arc<Exam>, s: usize, students: usize) {
    let delay = if students > 1 {
        ctx.timing.ramp_up_s * s as f64 / students as f64
    } else {
        0.0
    };
    tokio::time::sleep(Duration::from_secs_f64(delay)).await;
    let mut client = match ctx.connect().await {
        Ok(c) => c,
        Err(e) => {
            ctx.abort(format!("student {s} cannot connect: {e}"));
            return;
        }
    };
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ (s as u64).wrapping_mul(0x5851_F42D));
    let tracker = SessionTracker::new(student_sid(&ctx.tag, s));
    let mut steps: Vec<Step> = Vec::with_capacity(64);
    let mut errors_in_row = 0u32;
    // Log in: the session is created.
    loop {
        if ctx.stopping() {
            return;
        }
        let started = Instant::now();
        let in_window = ctx.in_window(started);
        steps.clear();
        match write_session(&ctx, &mut client, &tracker, b"", &mut steps, in_window).await {
            Ok(()) => {
                ctx.collector.commit(&steps, None, in_window);
                ctx.collector
                    .record_extra_if("login", micros(started.elapsed()), in_window);
                break;
            }
            Err(e) => {
                errors_in_row += 1;
                if errors_in_row > 50 || !failed(&ctx, &mut client, e, in_window).await {
                    return;
                }
            }
        }
    }
    let mut group = 0usize;
    while !ctx.stopping() {
        ctx.think(&mut rng).await;
        if ctx.stopping() {
            break;
        }
        // Fetch the group's questions.
        let started = Instant::now();
        let in_window = ctx.in_window(started);
        steps.clear();
        let fetched = fetch(&ctx, &exam, &mut client, group, &mut steps, in_window).await;
        let fetched = match fetched {
            Ok(()) => {
                ctx.collector.commit(&steps, None, in_window);
                ctx.collector.record_extra_if(
                    "fetch_questions",
                    micros(started.elapsed()),
                    in_window,
                );
                true
            }
            Err(e) => {
                errors_in_row += 1;
                if errors_in_row > 50 || !failed(&ctx, &mut client, e, in_window).await {
                    ctx.abort(format!("student {s}: too many errors in a row"));
                    return;
                }
                false
            }
        };
        if !fetched {
            continue;
        }
        ctx.think(&mut rng).await;
        // Post the answer (or submit after the last group).
        let last = group + 1 == exam.params.groups;
        let (op, answer) = if last {
            (
                "submit",
                format!("submitted attempt at group {group};").into_bytes(),
            )
        } else {
            let n = rng.gen_range(
                exam.params.answer_min..=exam.params.answer_max.max(exam.params.answer_min),
            );
            let mut a = format!("g{group}:").into_bytes();
            a.extend(tagged_value(&format!("answer{group}"), n));
            a.push(b';');
            ("post_answer", a)
        };
        let started = Instant::now();
        let in_window = ctx.in_window(started);
        steps.clear();
        match write_session(&ctx, &mut client, &tracker, &answer, &mut steps, in_window).await {
            Ok(()) => {
                errors_in_row = 0;
                let us = micros(started.elapsed());
                if op == "post_answer" {
                    ctx.collector
                        .commit(&steps, Some(("post_answer", us)), in_window);
                } else {
                    ctx.collector.commit(&steps, None, in_window);
                    ctx.collector.record_extra_if(op, us, in_window);
                }
                group = (group + 1) % exam.params.groups.max(1);
            }
            Err(e) => {
                errors_in_row += 1;
                if errors_in_row > 50 || !failed(&ctx, &mut client, e, in_window).await {
                    ctx.abort(format!("student {s}: too many errors in a row"));
                    return;
                }
            }
        }
    }
    if let Some(Some(data)) = tracker.expected() {
        ctx.remember_final(tracker.sid.clone(), data);
    }
}

/// Lock, append `answer` to the session (keeping it under the cap), write, unlock.
async fn write_session(
    ctx: &RunCtx,
    client: &mut Client,
    tracker: &SessionTracker,
    answer: &[u8],
    steps: &mut Vec<Step>,
    in_window: bool,
) -> std::result::Result<(), UnitError> {
    let opened = session::open(ctx, client, tracker, 0, steps, in_window).await?;
    let version = tracker.next_version();
    let header = format!("{}|v{version}|", tracker.sid);
    let old = opened.data.clone().unwrap_or_default();
    // Keep the previous answers (everything after the old header) and add the new one.
    let body = match old.iter().position(|&c| c == b'|') {
        Some(first) => match old[first + 1..].iter().position(|&c| c == b'|') {
            Some(second) => old.slice(first + second + 2..),
            None => Bytes::new(),
        },
        None => Bytes::new(),
    };
    let mut data = BytesMut::with_capacity(header.len() + body.len() + answer.len());
    data.extend_from_slice(header.as_bytes());
    let keep_from = (body.len() + answer.len() + header.len()).saturating_sub(SESSION_CAP);
    data.extend_from_slice(&body[keep_from.min(body.len())..]);
    data.extend_from_slice(answer);
    session::close(
        ctx,
        client,
        tracker,
        0,
        &opened,
        data.freeze(),
        steps,
        in_window,
    )
    .await
}

async fn fetch(
    ctx: &RunCtx,
    exam: &Exam,
    client: &mut Client,
    group: usize,
    steps: &mut Vec<Step>,
    in_window: bool,
) -> std::result::Result<(), UnitError> {
    let keys: Vec<String> = (0..exam.params.questions_per_group)
        .map(|q| format!("g{group}q{q}"))
        .collect();
    let t = Instant::now();
    let values = client
        .cache_get_multi(QUESTIONS, &keys)
        .await
        .map_err(|error| UnitError {
            op: "fetch_questions",
            error,
        })?;
    steps.push(("cache_mget", micros(t.elapsed())));
    super::use_cached(
        ctx,
        client,
        steps,
        in_window,
        (QUESTIONS, &keys, values),
        |key| exam.question(key),
        |key| format!("question {key}"),
        Duration::ZERO,
    )
    .await?;
    Ok(())
}

async fn proctor(ctx: Arc<RunCtx>, exam: Arc<Exam>, p: usize, watched: Vec<String>) {
    let mut client = match ctx.connect().await {
        Ok(c) => c,
        Err(e) => {
            ctx.abort(format!("proctor {p} cannot connect: {e}"));
            return;
        }
    };
    let interval = Duration::from_secs_f64(exam.params.poll_interval_s.max(0.05));
    // Proctors start spread over one interval.
    let offset = interval.mul_f64((p as f64 * 0.37).fract());
    tokio::time::sleep(offset).await;
    let mut errors_in_row = 0u32;
    while !ctx.stopping() && !watched.is_empty() {
        let started = Instant::now();
        let in_window = ctx.in_window(started);
        match client.session_read_multi(&watched).await {
            Ok(sessions) => {
                errors_in_row = 0;
                let us = micros(started.elapsed());
                ctx.collector
                    .commit(&[("proctor_poll", us)], None, in_window);
                if in_window {
                    let seen = sessions.iter().filter(|s| s.is_some()).count() as u64;
                    Counters::add(&ctx.collector.counters.proctor_sessions_seen, seen);
                    for (sid, data) in watched.iter().zip(&sessions) {
                        if let Some(d) = data {
                            if !d.starts_with(format!("{sid}|").as_bytes()) {
                                Counters::add(&ctx.collector.counters.session_mismatches, 1);
                                ctx.collector
                                    .mismatch(format!("proctor read of {sid}: not this session"));
                            }
                        }
                    }
                }
            }
            Err(error) => {
                errors_in_row += 1;
                let e = UnitError {
                    op: "proctor_poll",
                    error,
                };
                if errors_in_row > 50 || !failed(&ctx, &mut client, e, in_window).await {
                    return;
                }
            }
        }
        let next = started + interval;
        while Instant::now() < next && !ctx.stopping() {
            tokio::time::sleep(
                Duration::from_millis(100).min(next.saturating_duration_since(Instant::now())),
            )
            .await;
        }
    }
}
