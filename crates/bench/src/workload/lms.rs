//! The `lms` workload: one simulated LMS user journey of 13 page views (login, front page,
//! course, participants, course, forum, forum post, discussion, course, quiz, grades, profile,
//! logout). Every page, as a PHP page with a session handler and an application cache does it:
//! lock and read the session; 20–150 application-cache reads, some of them multi-gets; now and
//! then a miss, which regenerates the value (burning CPU for `regen_us`) and stores it; write the
//! session back (1–4 KiB, growing a little on every page); unlock. With probability `ajax_ratio`
//! a page also fires an AJAX request on a second connection that contends for the same session
//! lock, as browsers do — that is what makes the lock algorithm matter. Unit: one journey, whose
//! latency is the sum of its page latencies (think time excluded, as JMeter's transaction
//! controller reports it). Each page also spends `app_ms` of application time with the session
//! locked (PHP's own work; asleep by default, as it ran on another machine in the study), and
//! its bytes and round trips on the wire are recorded (`wire.page.*`).

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::error::Result;
use crate::run::{Conns, RunCtx};
use crate::stats::{micros, Step};
use crate::target::Client;
use crate::workload::keys::{tagged_value, KeyChooser, KeyDist};
use crate::workload::session::{self, session_content, SessionTracker};
use crate::workload::UnitError;

/// The 13 pages of the journey, in order.
pub const PAGES: [&str; 13] = [
    "login",
    "front_page",
    "course",
    "participants",
    "course",
    "forum",
    "forum_post",
    "discussion",
    "course",
    "quiz",
    "grades",
    "profile",
    "logout",
];

/// Per-page op names (`page.<name>`), parallel to [`PAGES`].
const PAGE_OPS: [&str; 13] = [
    "page.login",
    "page.front_page",
    "page.course",
    "page.participants",
    "page.course",
    "page.forum",
    "page.forum_post",
    "page.discussion",
    "page.course",
    "page.quiz",
    "page.grades",
    "page.profile",
    "page.logout",
];

/// Names of a page's wire figures: bytes sent, bytes received, round trips.
const PAGE_WIRE: [&str; 3] = [
    "wire.page.sent",
    "wire.page.received",
    "wire.page.round_trips",
];

/// Application-cache definitions (one Redis hash / one memcached key prefix each), named after
/// the Moodle caches a page typically reads.
pub const DEFINITIONS: [&str; 10] = [
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

/// Parameters of the lms workload.
#[derive(Debug, Clone, Serialize)]
pub struct LmsParams {
    /// Session size after login, bytes.
    pub session_min: usize,
    /// Session size at logout, bytes (it grows linearly in between).
    pub session_max: usize,
    /// Fewest cache reads on a page.
    pub cache_reads_min: usize,
    /// Most cache reads on a page.
    pub cache_reads_max: usize,
    /// Share of cache reads done as multi-gets (of 5–15 keys).
    pub multiget_share: f64,
    /// Probability that a read finds its value.
    pub hit_ratio: f64,
    /// CPU time burnt to regenerate a missed value, microseconds.
    pub regen_us: u64,
    /// Bytes per cache value.
    pub cache_value_size: usize,
    /// Cached keys per definition.
    pub cache_keys: u64,
    /// Key popularity.
    pub key_dist: KeyDist,
    /// Probability that a page also fires a concurrent AJAX request on the same session.
    pub ajax_ratio: f64,
    /// Application time per page between the session read and the session write, ms.
    pub app_ms: f64,
    /// Burn CPU for the application time instead of sleeping.
    pub app_spin: bool,
}

/// The configured workload.
#[derive(Debug)]
pub struct Lms {
    /// Parameters.
    pub params: LmsParams,
    chooser: KeyChooser,
}

impl Lms {
    /// Configures the workload.
    pub fn new(params: LmsParams) -> Lms {
        Lms {
            chooser: KeyChooser::new(params.cache_keys, params.key_dist),
            params,
        }
    }

    fn cache_value(&self, definition: &str, key: &str) -> Vec<u8> {
        tagged_value(&format!("{definition}:{key}"), self.params.cache_value_size)
    }

    /// Fills every definition's hot keys.
    pub async fn prepare(&self, client: &mut Client) -> Result<()> {
        for def in DEFINITIONS {
            let items: Vec<(String, Vec<u8>)> = (0..self.params.cache_keys)
                .map(|i| {
                    let key = format!("k{i}");
                    let value = self.cache_value(def, &key);
                    (key, value)
                })
                .collect();
            client.cache_fill(def, &items).await?;
        }
        Ok(())
    }

    fn session_size(&self, page: usize) -> usize {
        let (lo, hi) = (
            self.params.session_min,
            self.params.session_max.max(self.params.session_min),
        );
        lo + (hi - lo) * page / (PAGES.len() - 1)
    }

    /// One journey with a fresh session id.
    #[allow(clippy::too_many_arguments)]
    pub async fn journey(
        &self,
        ctx: &RunCtx,
        conns: &mut Conns,
        user: usize,
        seq: u64,
        rng: &mut SmallRng,
        steps: &mut Vec<Step>,
        in_window: bool,
    ) -> std::result::Result<u64, UnitError> {
        let tracker = SessionTracker::new(format!("{}:sess:u{user}:j{seq}", ctx.tag));
        ctx.fault.set_live(user, tracker.clone());
        let mut journey_us = 0u64;
        let mut ajax_steps: Vec<Step> = Vec::with_capacity(64);
        let mut miss_seq = 0u64;
        for (page, op) in PAGE_OPS.iter().enumerate() {
            if page > 0 {
                ctx.think(rng).await;
            }
            let size = self.session_size(page);
            let with_ajax = page > 0 && conns.len() > 1 && rng.gen_bool(self.params.ajax_ratio);
            let started = Instant::now();
            let wire_before = super::conns_wire(conns);
            let (main, rest) = conns.split_at_mut(1);
            let main = &mut main[0];
            if with_ajax {
                let ajax_seed: u64 = rng.gen();
                ajax_steps.clear();
                let (page_result, ajax_result) = tokio::join!(
                    self.page(
                        ctx,
                        main,
                        &tracker,
                        size,
                        user,
                        &mut miss_seq,
                        rng,
                        steps,
                        in_window
                    ),
                    self.ajax(
                        ctx,
                        &mut rest[0],
                        &tracker,
                        size,
                        ajax_seed,
                        &mut ajax_steps,
                        in_window
                    )
                );
                page_result?;
                ajax_result?;
                steps.extend_from_slice(&ajax_steps);
            } else {
                self.page(
                    ctx,
                    main,
                    &tracker,
                    size,
                    user,
                    &mut miss_seq,
                    rng,
                    steps,
                    in_window,
                )
                .await?;
            }
            let us = micros(started.elapsed());
            if let (Some(before), Some(after)) = (wire_before, super::conns_wire(conns)) {
                super::push_wire(steps, PAGE_WIRE, after.since(before).total());
            }
            steps.push(("page", us));
            steps.push((op, us));
            ctx.fault.record_page(started.duration_since(ctx.t0), us);
            journey_us += us;
        }
        if let Some(Some(data)) = tracker.expected() {
            ctx.remember_final(tracker.sid.clone(), data);
        }
        Ok(journey_us)
    }

    /// One page view on the main connection.
    #[allow(clippy::too_many_arguments)]
    async fn page(
        &self,
        ctx: &RunCtx,
        client: &mut Client,
        tracker: &SessionTracker,
        size: usize,
        user: usize,
        miss_seq: &mut u64,
        rng: &mut SmallRng,
        steps: &mut Vec<Step>,
        in_window: bool,
    ) -> std::result::Result<(), UnitError> {
        let opened = session::open(ctx, client, tracker, 0, steps, in_window).await?;
        let reads = rng.gen_range(
            self.params.cache_reads_min
                ..=self.params.cache_reads_max.max(self.params.cache_reads_min),
        );
        if let Err(e) = self
            .cache_reads(ctx, client, reads, user, miss_seq, rng, steps, in_window)
            .await
        {
            session::release_after_error(client, tracker, &opened).await;
            return Err(e);
        }
        if self.params.app_ms > 0.0 {
            let app = Duration::from_secs_f64(self.params.app_ms / 1000.0);
            if self.params.app_spin {
                super::burn_cpu(app);
            } else {
                tokio::time::sleep(app).await;
            }
        }
        let data = session_content(&tracker.sid, tracker.next_version(), size);
        session::close(ctx, client, tracker, 0, &opened, data, steps, in_window).await
    }

    /// The AJAX request: lock, a few cache reads, write back, unlock.
    #[allow(clippy::too_many_arguments)]
    async fn ajax(
        &self,
        ctx: &RunCtx,
        client: &mut Client,
        tracker: &SessionTracker,
        size: usize,
        seed: u64,
        steps: &mut Vec<Step>,
        in_window: bool,
    ) -> std::result::Result<(), UnitError> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let started = Instant::now();
        let opened = session::open(ctx, client, tracker, 1, steps, in_window).await?;
        let mut miss_seq = seed;
        let reads = rng.gen_range(2..=6);
        if let Err(e) = self
            .cache_reads(
                ctx,
                client,
                reads,
                usize::MAX,
                &mut miss_seq,
                &mut rng,
                steps,
                in_window,
            )
            .await
        {
            session::release_after_error(client, tracker, &opened).await;
            return Err(e);
        }
        let data = session_content(&tracker.sid, tracker.next_version(), size);
        session::close(ctx, client, tracker, 1, &opened, data, steps, in_window).await?;
        steps.push(("ajax", micros(started.elapsed())));
        Ok(())
    }

    /// `reads` cache reads, some grouped into multi-gets; misses are regenerated and stored.
    #[allow(clippy::too_many_arguments)]
    async fn cache_reads(
        &self,
        ctx: &RunCtx,
        client: &mut Client,
        reads: usize,
        user: usize,
        miss_seq: &mut u64,
        rng: &mut SmallRng,
        steps: &mut Vec<Step>,
        in_window: bool,
    ) -> std::result::Result<(), UnitError> {
        let mut done = 0;
        while done < reads {
            let def = DEFINITIONS[rng.gen_range(0..DEFINITIONS.len())];
            let batch = if reads - done >= 5 && rng.gen_bool(self.params.multiget_share) {
                rng.gen_range(5..=15).min(reads - done)
            } else {
                1
            };
            let keys: Vec<String> = (0..batch)
                .map(|_| {
                    if rng.gen_bool(self.params.hit_ratio) {
                        format!("k{}", self.chooser.next(rng))
                    } else {
                        // A key nobody has stored yet: a real miss.
                        *miss_seq += 1;
                        format!("m{}-{user}-{}", ctx.tag, miss_seq)
                    }
                })
                .collect();
            let t = Instant::now();
            let values = if batch == 1 {
                client
                    .cache_get(def, &keys[0])
                    .await
                    .map(|v| vec![v])
                    .map_err(|error| UnitError {
                        op: "cache_get",
                        error,
                    })?
            } else {
                client
                    .cache_get_multi(def, &keys)
                    .await
                    .map_err(|error| UnitError {
                        op: "cache_mget",
                        error,
                    })?
            };
            steps.push((
                if batch == 1 {
                    "cache_get"
                } else {
                    "cache_mget"
                },
                micros(t.elapsed()),
            ));
            super::use_cached(
                ctx,
                client,
                steps,
                in_window,
                (def, &keys, values),
                |key| self.cache_value(def, key),
                |key| format!("cache {def}/{key}"),
                Duration::from_micros(self.params.regen_us),
            )
            .await?;
            done += batch;
        }
        Ok(())
    }
}
