//! SQL of a batch's evidence and measurements: the facts as delivered, per-process windows, endpoint totals,
//! service usage and its `unknown_tenant` findings, each one set-based insert ([`crate::bulk`]).

use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    bulk::{col, constant},
    db::{DbError, OrgTx},
};

/// Facts as delivered, as columns.
pub(crate) struct EventColumns<'a> {
    /// Event IDs.
    pub(crate) ids: &'a [String],
    /// Kinds.
    pub(crate) kinds: &'a [String],
    /// Subjects (the key derived state is recomputed under).
    pub(crate) subjects: &'a [String],
    /// When each happened.
    pub(crate) times: &'a [OffsetDateTime],
    /// The facts as JSON.
    pub(crate) payloads: &'a [Value],
}

/// Inserts the facts not stored yet and returns (event ID, kind, subject) of each new one.
pub(crate) async fn insert_events(
    tx: &mut OrgTx,
    o: Uuid,
    c: Uuid,
    e: &EventColumns<'_>,
) -> Result<Vec<(String, String, String)>, DbError> {
    crate::bulk::returning(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO allocation_events (org_id, cluster_id, event_id, kind, subject, occurred_at, payload)",
            row: "$1, $2, {0}, {1}, {2}, {3}, {4}",
            consts: &[constant("uuid", &o), constant("uuid", &c)],
            cols: &[
                col("text", e.ids),
                col("text", e.kinds),
                col("text", e.subjects),
                col("timestamptz", e.times),
                col("jsonb", e.payloads),
            ],
            tail: "ON CONFLICT DO NOTHING RETURNING event_id, kind, subject",
        },
    )
    .await
}

/// Per-process GPU windows, as columns.
pub(crate) struct ProcessWindowColumns<'a> {
    /// Nodes.
    pub(crate) nodes: &'a [String],
    /// GPU UUIDs.
    pub(crate) gpus: &'a [String],
    /// Window starts.
    pub(crate) starts: &'a [OffsetDateTime],
    /// Window ends.
    pub(crate) ends: &'a [OffsetDateTime],
    /// Samples.
    pub(crate) samples: &'a [i32],
    /// The pods, as JSON.
    pub(crate) pods: &'a [Value],
}

/// Inserts per-process windows not stored yet; how many were new.
pub(crate) async fn insert_process_windows(
    tx: &mut OrgTx,
    o: Uuid,
    c: Uuid,
    w: &ProcessWindowColumns<'_>,
    new: Option<&mut std::collections::HashSet<(String, i128)>>,
) -> Result<u64, DbError> {
    let consts = [constant("uuid", &o), constant("uuid", &c)];
    let cols = [
        col("text", w.nodes),
        col("text", w.gpus),
        col("timestamptz", w.starts),
        col("timestamptz", w.ends),
        col("int", w.samples),
        col("jsonb", w.pods),
    ];
    let insert = |tail| crate::bulk::Insert {
        into: "INSERT INTO process_windows (org_id, cluster_id, node, gpu_uuid, window_start, window_end, samples, pods)",
        row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}",
        consts: &consts,
        cols: &cols,
        tail,
    };
    let Some(new) = new else {
        return crate::bulk::execute(tx, &insert("ON CONFLICT DO NOTHING")).await;
    };
    let rows: Vec<(String, OffsetDateTime)> =
        crate::bulk::returning(tx, &insert("ON CONFLICT DO NOTHING RETURNING gpu_uuid, window_start")).await?;
    let stored = rows.len() as u64;
    new.extend(rows.into_iter().map(|(g, at)| (g, unix_us(at))));
    Ok(stored)
}

/// An instant as PostgreSQL keeps it (whole microseconds, as the driver sends it): the key part a process window's
/// start is credited by.
pub(crate) fn unix_us(t: OffsetDateTime) -> i128 {
    t.unix_timestamp_nanos() / 1000
}

/// Model servers' totals, as columns.
pub(crate) struct EndpointTotalColumns<'a> {
    /// Endpoints.
    pub(crate) endpoints: &'a [String],
    /// Models.
    pub(crate) models: &'a [String],
    /// Servers.
    pub(crate) servers: &'a [String],
    /// Pods.
    pub(crate) pods: &'a [String],
    /// Window starts.
    pub(crate) starts: &'a [OffsetDateTime],
    /// Window ends.
    pub(crate) ends: &'a [OffsetDateTime],
    /// Requests.
    pub(crate) requests: &'a [i64],
    /// Input tokens.
    pub(crate) input: &'a [i64],
    /// Output tokens.
    pub(crate) output: &'a [i64],
    /// Time-to-first-token sums.
    pub(crate) ttft_sum: &'a [Option<i64>],
    /// Time-to-first-token counts.
    pub(crate) ttft_count: &'a [Option<i64>],
    /// Queue depths.
    pub(crate) depth: &'a [Option<f64>],
    /// Whether the server restarted in the window.
    pub(crate) restarted: &'a [bool],
}

/// Inserts endpoint totals not stored yet.
pub(crate) async fn insert_endpoint_totals(
    tx: &mut OrgTx,
    o: Uuid,
    c: Uuid,
    t: &EndpointTotalColumns<'_>,
) -> Result<(), DbError> {
    crate::bulk::execute(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO endpoint_totals (org_id, cluster_id, endpoint, model, server, pod, window_start,
                       window_end, requests, input_tokens, output_tokens, ttft_ms_sum, ttft_count, queue_depth, restarted)",
            row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}",
            consts: &[constant("uuid", &o), constant("uuid", &c)],
            cols: &[
                col("text", t.endpoints),
                col("text", t.models),
                col("text", t.servers),
                col("text", t.pods),
                col("timestamptz", t.starts),
                col("timestamptz", t.ends),
                col("int8", t.requests),
                col("int8", t.input),
                col("int8", t.output),
                col("int8", t.ttft_sum),
                col("int8", t.ttft_count),
                col("float8", t.depth),
                col("bool", t.restarted),
            ],
            tail: "ON CONFLICT DO NOTHING",
        },
    )
    .await?;
    Ok(())
}

/// Service usage, as columns.
pub(crate) struct ServiceUsageColumns<'a> {
    /// Endpoints.
    pub(crate) endpoint: &'a [String],
    /// Models.
    pub(crate) model: &'a [String],
    /// Tenant names as reported.
    pub(crate) tenant: &'a [String],
    /// The tenants defined under those names.
    pub(crate) tenant_ids: &'a [Option<Uuid>],
    /// Window starts.
    pub(crate) start: &'a [OffsetDateTime],
    /// Window ends.
    pub(crate) end: &'a [OffsetDateTime],
    /// Requests.
    pub(crate) requests: &'a [i64],
    /// Input tokens.
    pub(crate) input: &'a [i64],
    /// Output tokens.
    pub(crate) output: &'a [i64],
    /// Time-to-first-token sums.
    pub(crate) ttft_sum: &'a [Option<i64>],
    /// Time-to-first-token counts.
    pub(crate) ttft_count: &'a [Option<i64>],
}

/// Inserts service usage not stored yet and returns (endpoint, model, tenant name, window start, tenant) of each new
/// row.
pub(crate) async fn insert_service_usage(
    tx: &mut OrgTx,
    o: Uuid,
    c: Uuid,
    u: &ServiceUsageColumns<'_>,
) -> Result<Vec<(String, String, String, OffsetDateTime, Option<Uuid>)>, DbError> {
    crate::bulk::returning(
        tx,
        &crate::bulk::Insert {
            into:
                "INSERT INTO service_usage (org_id, cluster_id, endpoint, model, tenant_name, tenant_id, window_start,
                       window_end, requests, input_tokens, output_tokens, ttft_ms_sum, ttft_count)",
            row: "$1, $2, {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}",
            consts: &[constant("uuid", &o), constant("uuid", &c)],
            cols: &[
                col("text", u.endpoint),
                col("text", u.model),
                col("text", u.tenant),
                col("uuid", u.tenant_ids),
                col("timestamptz", u.start),
                col("timestamptz", u.end),
                col("int8", u.requests),
                col("int8", u.input),
                col("int8", u.output),
                col("int8", u.ttft_sum),
                col("int8", u.ttft_count),
            ],
            tail: "ON CONFLICT DO NOTHING RETURNING endpoint, model, tenant_name, window_start, tenant_id",
        },
    )
    .await
}

/// `unknown_tenant` findings about service usage, as columns.
pub(crate) struct UsageFindingColumns<'a> {
    /// Finding IDs.
    pub(crate) ids: &'a [String],
    /// Subjects.
    pub(crate) subjects: &'a [String],
    /// Window starts.
    pub(crate) froms: &'a [OffsetDateTime],
    /// Window ends.
    pub(crate) tos: &'a [OffsetDateTime],
    /// Details.
    pub(crate) details: &'a [Value],
}

/// Records `unknown_tenant` findings about service usage (once per finding ID).
pub(crate) async fn insert_usage_findings(
    tx: &mut OrgTx,
    o: Uuid,
    c: Uuid,
    f: &UsageFindingColumns<'_>,
) -> Result<(), DbError> {
    crate::bulk::execute(
        tx,
        &crate::bulk::Insert {
            into: "INSERT INTO data_quality_findings
                       (org_id, cluster_id, finding_id, kind, subject, occurred_from, occurred_to, details)",
            row: "$1, $2, {0}, 'unknown_tenant', {1}, {2}, {3}, {4}",
            consts: &[constant("uuid", &o), constant("uuid", &c)],
            cols: &[
                col("text", f.ids),
                col("text", f.subjects),
                col("timestamptz", f.froms),
                col("timestamptz", f.tos),
                col("jsonb", f.details),
            ],
            tail: "ON CONFLICT DO NOTHING",
        },
    )
    .await?;
    Ok(())
}
