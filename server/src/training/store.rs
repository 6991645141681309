//! SQL of this feature: reads and writes inside the caller's organization-scoped transaction.

use super::{ProgressReport, done, report_of};
use crate::{auth::Visible, db::OrgTx, error::AppError};
use gpuledger_api::training::TrainingWorkload;
use gpuledger_core::{Fraction, NANOS_PER_HOUR, Period};
use std::collections::BTreeMap;
use time::OffsetDateTime;
use uuid::Uuid;

/// Stores the agents' `training_progress` facts (checked by ingest) like reports of the API, idempotent by event ID.
pub async fn store_facts(
    tx: &mut crate::db::OrgTx,
    org: gpuledger_core::ids::OrgId,
    cluster: gpuledger_core::ids::ClusterId,
    facts: &[(&str, &gpuledger_core::wire::TrainingProgressFact)],
) -> Result<u64, AppError> {
    let reports: Vec<ProgressReport> = facts.iter().map(|(id, t)| report_of(id, t)).collect();
    insert_reports(tx, org, cluster, &reports).await
}

pub(crate) async fn insert_reports(
    tx: &mut crate::db::OrgTx,
    org: gpuledger_core::ids::OrgId,
    cluster: gpuledger_core::ids::ClusterId,
    reports: &[ProgressReport],
) -> Result<u64, AppError> {
    let big = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    let ids: Vec<&str> = reports.iter().map(|r| r.record_id.as_str()).collect();
    let namespaces: Vec<&str> = reports.iter().map(|r| r.namespace.as_str()).collect();
    let workloads: Vec<&str> = reports.iter().map(|r| r.workload.as_str()).collect();
    let ats: Vec<OffsetDateTime> = reports.iter().map(|r| r.reported_at).collect();
    let steps: Vec<Option<i64>> = reports.iter().map(|r| big(r.steps)).collect();
    let samples: Vec<Option<i64>> = reports.iter().map(|r| big(r.samples)).collect();
    use crate::bulk::{col, constant};
    let (o, c) = (org.as_uuid(), cluster.as_uuid());
    Ok(crate::bulk::execute(
        tx,
        &crate::bulk::Insert {
            into:
                "INSERT INTO training_progress (org_id, record_id, cluster_id, namespace, workload, reported_at, steps,
                       samples)",
            row: "$1, {0}, $2, {1}, {2}, {3}, {4}, {5}",
            consts: &[constant("uuid", &o), constant("uuid", &c)],
            cols: &[
                col("text", &ids),
                col("text", &namespaces),
                col("text", &workloads),
                col("timestamptz", &ats),
                col("int8", &steps),
                col("int8", &samples),
            ],
            tail: "ON CONFLICT (org_id, record_id) DO NOTHING",
        },
    )
    .await?)
}

pub(crate) type Reading = (Uuid, String, String, OffsetDateTime, Option<i64>, Option<i64>);

/// The month's training workloads `visible` may see (`None`: the whole organization, which the read model stores
/// as the month's summary), each with its owner's department.
pub(crate) async fn workloads(
    mut tx: OrgTx,
    period: Period,
    visible: &Option<Visible>,
) -> Result<(Period, Vec<(Option<Uuid>, TrainingWorkload)>), AppError> {
    let (month, to) = crate::analytics::month_so_far(period)?;
    let from = month.start();
    let internal = |e: gpuledger_core::DomainError| AppError::Internal(e.to_string());
    let org = tx.org().as_uuid();
    // The month's readings, and the last one before the month, of every workload reporting in the month.
    let readings: Vec<Reading> = sqlx::query_as(
        "SELECT cluster_id, namespace, workload, reported_at, steps, samples FROM training_progress p
          WHERE p.org_id = $3 AND reported_at < $2 AND (reported_at >= $1 OR reported_at = (
                SELECT max(q.reported_at) FROM training_progress q
                 WHERE q.org_id = $3 AND q.cluster_id = p.cluster_id AND q.namespace = p.namespace
                   AND q.workload = p.workload AND q.reported_at < $1))
          ORDER BY cluster_id, namespace, workload, reported_at",
    )
    .bind(from)
    .bind(month.end())
    .bind(org)
    .fetch_all(tx.conn())
    .await?;
    let mut by: BTreeMap<(Uuid, String, String), Vec<Reading>> = BTreeMap::new();
    for r in readings {
        by.entry((r.0, r.1.clone(), r.2.clone())).or_default().push(r);
    }
    let mut rows = Vec::new();
    for ((cluster, namespace, workload), rs) in by {
        let (before, inside): (Vec<&Reading>, Vec<&Reading>) = rs.iter().partition(|r| r.3 < from);
        if inside.is_empty() {
            continue;
        }
        let series = |pick: fn(&Reading) -> Option<i64>| {
            let prior = before.last().and_then(|r| pick(r));
            let values: Vec<i64> = inside.iter().filter_map(|r| pick(r)).collect();
            (!values.is_empty()).then(|| done(prior, &values))
        };
        let steps = series(|r| r.4);
        let samples = series(|r| r.5);
        let allocations: Vec<(i64, i64, OffsetDateTime, Option<OffsetDateTime>)> = sqlx::query_as(
            "SELECT fraction_num, fraction_den, started_at, ended_at FROM allocation_intervals
              WHERE cluster_id = $1 AND namespace = $2 AND fraction_num IS NOT NULL AND fraction_den IS NOT NULL
                AND (holder_name = $3 OR starts_with(holder_name, $3 || '-'))
                AND started_at < $5 AND (ended_at IS NULL OR ended_at > $4) AND org_id = $6",
        )
        .bind(cluster)
        .bind(&namespace)
        .bind(&workload)
        .bind(from)
        .bind(to)
        .bind(org)
        .fetch_all(tx.conn())
        .await?;
        let mut nanos = Fraction::ZERO;
        for (num, den, s, e) in allocations {
            let (s, e) = (s.max(from), e.map_or(to, |e| e.min(to)));
            if s < e {
                let f = Fraction::new(i128::from(num), i128::from(den)).map_err(internal)?;
                nanos = nanos
                    .checked_add(f.checked_mul_int((e - s).whole_nanoseconds()).map_err(internal)?)
                    .map_err(internal)?;
            }
        }
        let hours = nanos.checked_div(Fraction::from_integer(NANOS_PER_HOUR).map_err(internal)?).map_err(internal)?;
        let last_at = inside.last().map_or(to, |r| r.3);
        let owner: Option<(Uuid, String, String, Uuid)> = sqlx::query_as(
            "SELECT t.tenant_id, t.name, d.name, d.department_id FROM namespaces n
               JOIN namespace_ownership o ON o.org_id = n.org_id AND o.namespace_uid = n.namespace_uid
                AND o.valid_from <= $3 AND (o.valid_to IS NULL OR o.valid_to > $3)
               JOIN tenants t ON t.org_id = o.org_id AND t.tenant_id = o.tenant_id
               JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
              WHERE n.org_id = $4 AND n.cluster_id = $1 AND n.name = $2 ORDER BY n.created_at DESC LIMIT 1",
        )
        .bind(cluster)
        .bind(&namespace)
        .bind(last_at)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?;
        if !Visible::tenant(visible, owner.as_ref().map(|o| o.0)) {
            continue;
        }
        let per_hour = |work: Option<i64>| -> Result<Option<String>, AppError> {
            Ok(match work {
                Some(w) if !hours.is_zero() => Some(
                    Fraction::from(u64::try_from(w).unwrap_or(0))
                        .checked_div(hours)
                        .and_then(|r| r.to_decimal_string(1))
                        .map_err(internal)?,
                ),
                _ => None,
            })
        };
        rows.push((
            owner.as_ref().map(|o| o.3),
            TrainingWorkload {
                namespace: namespace.clone(),
                workload: workload.clone(),
                tenant: owner.as_ref().map(|o| o.1.clone()),
                department: owner.as_ref().map(|o| o.2.clone()),
                steps,
                samples,
                gpu_hours: hours.to_decimal_string(3).map_err(internal)?,
                steps_per_gpu_hour: per_hour(steps)?,
                samples_per_gpu_hour: per_hour(samples)?,
            },
        ));
    }
    tx.commit().await?;
    Ok((period, rows))
}
