//! What a run checks within itself: delivery drained, every acknowledged fact stored once, agent gaps and whether
//! the close page shows them, nothing dead-lettered.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use anyhow::Result;
use serde_json::Value;

use super::{CLUSTER, World};
use crate::chaos::proxy::Acked;

impl World<'_> {
    /// Event IDs of allocation facts stored for the cluster.
    pub(super) async fn stored_events(&self, ids: &[String]) -> Result<BTreeSet<String>> {
        let pool = sqlx::PgPool::connect(&self.url).await?;
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT event_id FROM allocation_events WHERE event_id = ANY($1)
               AND cluster_id = (SELECT cluster_id FROM clusters WHERE name = $2)",
        )
        .bind(ids)
        .bind(CLUSTER)
        .fetch_all(&pool)
        .await?;
        pool.close().await;
        Ok(rows.into_iter().collect())
    }

    /// Waits until every fact `objects` derive to (allocations, owners, nodes) is stored; how long it took.
    pub(super) async fn drain(
        &self,
        objects: &[(&'static str, Value)],
        bound: Duration,
    ) -> Result<std::result::Result<Duration, String>> {
        let served: Vec<Value> = objects.iter().map(|(_, o)| o.clone()).collect();
        let expected: Vec<String> = gpuledger_agent::inspect::inspect(
            gpuledger_agent::inspect::Kind::K8s,
            &serde_json::to_string(&served)?,
            time::OffsetDateTime::now_utc(),
            None,
        )?
        .facts
        .into_iter()
        .map(|f| f.event_id)
        .filter(|e| e.starts_with("alloc-"))
        .collect();
        let started = Instant::now();
        loop {
            let stored = self.stored_events(&expected).await.unwrap_or_default();
            if stored.len() == expected.len() {
                return Ok(Ok(started.elapsed()));
            }
            if started.elapsed() > bound {
                let missing: Vec<&String> = expected.iter().filter(|e| !stored.contains(*e)).take(3).collect();
                return Ok(Err(format!(
                    "{} of {} allocation facts stored after {bound:?}; missing e.g. {missing:?}",
                    stored.len(),
                    expected.len()
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Every acknowledged fact is stored, once.
    pub(super) async fn conservation(&mut self) -> Result<()> {
        let acked = self.proxy.acked();
        let events: Vec<String> = acked
            .iter()
            .filter_map(|a| if let Acked::Event(e) = a { Some(e.clone()) } else { None })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let stored = self.stored_events(&events).await?;
        let lost: Vec<&String> = events.iter().filter(|e| !stored.contains(*e)).collect();
        if !lost.is_empty() {
            self.out.violations.push(format!(
                "conservation: {} acknowledged facts are not stored, e.g. {:?}",
                lost.len(),
                lost.iter().take(3).collect::<Vec<_>>()
            ));
        }
        let pool = sqlx::PgPool::connect(&self.url).await?;
        let mut missing_windows = 0usize;
        let mut example = None;
        let windows: BTreeSet<&Acked> = acked.iter().filter(|a| !matches!(a, Acked::Event(_))).collect();
        for a in &windows {
            let n: i64 =
                match a {
                    Acked::Window(gpu, instance, start) => {
                        // The window's hour block, decoded: stored once means its start is there (a block keeps
                        // one window per start).
                        let hour = *start - start.rem_euclid(3_600);
                        let blocks: Vec<Vec<u8>> = sqlx::query_scalar(
                            "SELECT h.block FROM telemetry_gpu_hours h
                               JOIN telemetry_series s ON s.org_id = h.org_id AND s.series_id = h.series_id
                              WHERE s.gpu_uuid = $1 AND s.gpu_instance_id = -1 AND h.hour = to_timestamp($2)
                                AND h.block IS NOT NULL",
                        )
                        .bind(gpu)
                        .bind(hour as f64)
                        .fetch_all(&pool)
                        .await?;
                        let mut n = 0_i64;
                        for b in &blocks {
                            let mut raw = Vec::new();
                            std::io::Read::read_to_end(&mut flate2::read::DeflateDecoder::new(b.as_slice()), &mut raw)?;
                            let devices = gpuledger_core::telemetry::decode_gpu_hour(hour * 1_000, &raw)
                                .map_err(|e| anyhow::anyhow!("block of {gpu}: {e}"))?;
                            n += devices
                                .get(&(*instance as i32))
                                .map_or(0, |ws| ws.iter().filter(|w| w.start_ms == *start * 1_000).count())
                                as i64;
                        }
                        n
                    }
                    Acked::Processes(gpu, start) => sqlx::query_scalar(
                        "SELECT count(*) FROM process_windows WHERE gpu_uuid = $1 AND window_start = to_timestamp($2)",
                    )
                    .bind(gpu)
                    .bind(*start as f64)
                    .fetch_one(&pool)
                    .await?,
                    Acked::Event(_) => 1,
                };
            if n != 1 {
                missing_windows += 1;
                example.get_or_insert(format!("{a:?} stored {n} times"));
            }
        }
        pool.close().await;
        if missing_windows > 0 {
            self.out.violations.push(format!(
                "conservation: {missing_windows} acknowledged telemetry windows are not stored exactly once, e.g. {example:?}"
            ));
        }
        self.out.notes.push(format!(
            "{} acknowledged facts and {} windows all stored once",
            events.len(),
            windows.len()
        ));
        Ok(())
    }

    /// Agent gaps: which are unrecovered, and whether the month's findings show them.
    pub(super) async fn gaps(&mut self, month: &str) -> Result<()> {
        let pool = sqlx::PgPool::connect(&self.url).await?;
        let gaps: Vec<(String, String)> = sqlx::query_as(
            "SELECT finding_id::text, to_char(occurred_from, 'YYYY-MM') FROM data_quality_findings
              WHERE kind = 'agent_gap' AND COALESCE((details->>'recovered')::boolean, false) = false",
        )
        .fetch_all(&pool)
        .await?;
        pool.close().await;
        self.out.unrecovered_gaps = gaps.iter().map(|(k, m)| format!("{m}: {k}")).collect();
        if !gaps.is_empty() {
            let months: BTreeSet<&String> = gaps.iter().map(|(_, m)| m).collect();
            self.out.notes.push(format!("{} unrecovered agent gap finding(s), in {months:?}", gaps.len()));
        }
        let (_, findings) = self
            .admin_retry(
                reqwest::Method::GET,
                &format!("/api/v1/periods/{month}/findings"),
                None,
                Duration::from_secs(30),
            )
            .await?;
        self.out.gaps_on_close_page =
            findings.to_string().contains("agent_gap") || findings.to_string().contains("agent gap");
        Ok(())
    }

    /// Nothing may be dead-lettered: every fact the scenario makes is valid.
    pub(super) fn dead_letters(&mut self) {
        for dir in [&self.cluster_spool, &self.node_spool] {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                if name.contains("dead") {
                    let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                    if !text.trim().is_empty() {
                        self.out.violations.push(format!(
                            "dead letters in {}: {} record(s), first: {}",
                            entry.path().display(),
                            text.lines().count(),
                            text.lines().next().unwrap_or_default().chars().take(400).collect::<String>()
                        ));
                    }
                }
            }
        }
    }
}
