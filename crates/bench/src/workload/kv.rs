//! The `kv` workload: YCSB-style core workloads over `records` preloaded keys of `value_size`
//! bytes — A (50% read, 50% update), B (95/5), C (100% read), F (50% read, 50%
//! read-modify-write) — with uniform or Zipfian key choice. Reads check that the value belongs to
//! the key read (it starts with the key's tag and has the configured size). Unit: one operation.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::Rng;
use serde::Serialize;

use crate::error::Result;
use crate::run::RunCtx;
use crate::stats::{micros, Counters, Step};
use crate::target::{Client, Endpoints};
use crate::workload::keys::{tagged_value, KeyChooser, KeyDist};
use crate::workload::UnitError;

/// YCSB core workload letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mix {
    /// 50% read, 50% update.
    A,
    /// 95% read, 5% update.
    B,
    /// 100% read.
    C,
    /// 50% read, 50% read-modify-write.
    F,
}

/// Parameters of the kv workload.
#[derive(Debug, Clone, Serialize)]
pub struct KvParams {
    /// Which mix.
    pub mix: Mix,
    /// Keys loaded before the run.
    pub records: u64,
    /// Bytes per value.
    pub value_size: usize,
    /// Key distribution.
    pub dist: KeyDist,
}

/// The configured workload.
#[derive(Debug)]
pub struct Kv {
    /// Parameters.
    pub params: KvParams,
    chooser: KeyChooser,
}

impl Kv {
    /// Configures the workload.
    pub fn new(params: KvParams) -> Kv {
        Kv {
            chooser: KeyChooser::new(params.records, params.dist),
            params,
        }
    }

    fn key(prefix: &str, i: u64) -> String {
        format!("{prefix}:user{i}")
    }

    /// Loads every record (several connections in parallel).
    pub async fn prepare(&self, endpoints: &Endpoints, tag: &str) -> Result<()> {
        let loaders = 8u64;
        let mut tasks = Vec::new();
        for l in 0..loaders {
            let (endpoints, tag) = (endpoints.clone(), tag.to_string());
            let (records, size) = (self.params.records, self.params.value_size);
            tasks.push(tokio::spawn(async move {
                let mut client = endpoints.connect().await?;
                let mut batch = Vec::with_capacity(100);
                let mut i = l;
                while i < records {
                    let key = Kv::key(&tag, i);
                    let value = tagged_value(&key, size);
                    batch.push((key, value));
                    if batch.len() == 100 {
                        client.kv_fill(&batch).await?;
                        batch.clear();
                    }
                    i += loaders;
                }
                client.kv_fill(&batch).await
            }));
        }
        for t in tasks {
            match t.await {
                Ok(r) => r?,
                Err(e) => {
                    return Err(crate::error::BenchError::Input(format!(
                        "loader task failed: {e}"
                    )))
                }
            }
        }
        Ok(())
    }

    /// One operation.
    pub async fn unit(
        &self,
        ctx: &RunCtx,
        client: &mut Client,
        rng: &mut SmallRng,
        steps: &mut Vec<Step>,
        in_window: bool,
    ) -> std::result::Result<u64, UnitError> {
        let key = Kv::key(&ctx.tag, self.chooser.next(rng));
        let read_share = match self.params.mix {
            Mix::A | Mix::F => 0.5,
            Mix::B => 0.95,
            Mix::C => 1.0,
        };
        let started = Instant::now();
        if rng.gen_bool(read_share) {
            self.read(ctx, client, &key, steps, in_window).await?;
        } else if self.params.mix == Mix::F {
            self.read(ctx, client, &key, steps, in_window).await?;
            self.update(client, &key, rng, steps).await?;
            steps.push(("read_modify_write", micros(started.elapsed())));
        } else {
            self.update(client, &key, rng, steps).await?;
        }
        Ok(micros(started.elapsed()))
    }

    async fn read(
        &self,
        ctx: &RunCtx,
        client: &mut Client,
        key: &str,
        steps: &mut Vec<Step>,
        in_window: bool,
    ) -> std::result::Result<(), UnitError> {
        let t = Instant::now();
        let value = client
            .kv_get(key)
            .await
            .map_err(|error| UnitError { op: "read", error })?;
        steps.push(("read", micros(t.elapsed())));
        let ok = value.as_ref().is_some_and(|v| {
            v.len() == self.params.value_size
                && v.starts_with(key.as_bytes())
                && v.get(key.len()) == Some(&b'|')
        });
        if in_window && !ok {
            Counters::add(&ctx.collector.counters.value_mismatches, 1);
            ctx.collector
                .mismatch(format!("kv read of {key}: value missing or not this key's"));
        }
        Ok(())
    }

    async fn update(
        &self,
        client: &mut Client,
        key: &str,
        rng: &mut SmallRng,
        steps: &mut Vec<Step>,
    ) -> std::result::Result<(), UnitError> {
        // The new value keeps the key's tag (so reads can check it) with a fresh filler.
        let value = tagged_value(
            &format!("{key}|u{}", rng.gen::<u32>()),
            self.params.value_size,
        );
        let t = Instant::now();
        client
            .kv_set(key, &value)
            .await
            .map_err(|error| UnitError {
                op: "update",
                error,
            })?;
        steps.push(("update", micros(t.elapsed())));
        Ok(())
    }
}
