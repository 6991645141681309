//! Agent gaps: a `gap` fact becomes an `agent_gap` finding in every month its dropped facts were about, and a later
//! `gap_recovered` fact (the agent's account after a re-list) marks those findings recovered — or says what stays
//! lost. Either may arrive first: each applies the other if it is already stored.
//!
//! A month's finding is `recovered` when no dropped fact that a re-list can bring back — everything but telemetry
//! windows — stays lost among the kinds touching that month; it is vacuously so when telemetry windows are all the
//! month lost. `telemetry_lost` counts the windows gone for good. Close asks for an acknowledgement for findings that
//! are not recovered (and, where the month's policy prices energy, for lost `telemetry` windows: see
//! `close::store::needs_acknowledgement`).

use gpuledger_core::{
    Period,
    ids::{ClusterId, OrgId},
    time_fmt::rfc3339,
    wire::{Fact, FactBody, GapFact, GapRecovery, TELEMETRY_KINDS},
};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::{db::OrgTx, error::AppError};

fn is_telemetry(kind: &str) -> bool {
    TELEMETRY_KINDS.contains(&kind)
}

/// A gap becomes an `agent_gap` finding in every month the dropped facts were about (their own times: an
/// allocation's start or end, a measured window), each naming the kinds and counts that touch it, so the close page
/// of each affected month shows it. A gap from an older agent (no kinds) is one finding over when it dropped.
pub(super) async fn store_gap(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    event_id: &str,
    g: &GapFact,
) -> Result<(), AppError> {
    let subject = match &g.node {
        Some(node) => format!("agent spool on {node}"),
        None => "agent spool".to_string(),
    };
    let mut rows: Vec<(String, OffsetDateTime, OffsetDateTime, Value)> = Vec::new();
    if g.kinds.is_empty() {
        rows.push((event_id.to_string(), g.from, g.to, json!({ "dropped": g.dropped })));
    } else {
        // Month → (earliest, latest, the kinds touching it).
        let mut months: std::collections::BTreeMap<Period, (OffsetDateTime, OffsetDateTime, Vec<Value>)> =
            std::collections::BTreeMap::new();
        for k in &g.kinds {
            let mut month = Period::containing(k.from);
            let last = Period::containing(k.to);
            // Validation caps a kind's range (decode.rs); this bounds the loop whatever comes.
            for _ in 0..super::decode::MAX_GAP_MONTHS {
                let (start, end) = (month.start(), month.next()?.start());
                let from = k.from.max(start);
                let to = k.to.min(end - time::Duration::microseconds(1));
                let e = months.entry(month).or_insert((from, to, Vec::new()));
                e.0 = e.0.min(from);
                e.1 = e.1.max(to);
                e.2.push(json!({ "kind": k.kind, "count": k.count, "from": rfc3339(k.from), "to": rfc3339(k.to) }));
                if month >= last {
                    break;
                }
                month = month.next()?;
            }
        }
        for (month, (from, to, kinds)) in months {
            // Telemetry windows never come back; a month that lost nothing else has nothing to recover.
            let telemetry_lost: u64 = kinds
                .iter()
                .filter(|k| k["kind"].as_str().is_some_and(is_telemetry))
                .filter_map(|k| k["count"].as_u64())
                .sum();
            // Dropped records the agent could not read are in `dropped` and in no kind: unknown, so not telemetry.
            let only_telemetry = kinds.iter().all(|k| k["kind"].as_str().is_some_and(is_telemetry))
                && g.kinds.iter().map(|k| k.count).fold(0u64, u64::saturating_add) >= g.dropped;
            rows.push((
                format!("{event_id}@{month}"),
                from,
                to,
                json!({ "dropped": g.dropped, "kinds": kinds, "node": g.node, "recovered": only_telemetry,
                        "telemetry_lost": telemetry_lost, "dropped_between": [rfc3339(g.from), rfc3339(g.to)] }),
            ));
        }
    }
    for (id, from, to, details) in rows {
        super::store::insert_agent_gap_finding(tx, org, cluster, &id, &subject, from, to, &details).await?;
    }
    // The agent's account of this gap came first (order independence): apply it now.
    let stored = super::store::gap_recovered_fact(tx, org, cluster, event_id).await?;
    if let Some((sqlx::types::Json(Fact { observed_at, body: FactBody::GapRecovered(r), .. }),)) = stored {
        apply_recovery(tx, org, cluster, &r, observed_at).await?;
    }
    Ok(())
}

/// The agent's account of a gap after a re-list: every month's finding of that gap gets the per-kind recovered and
/// lost counts of the kinds touching it, `recovered` and `telemetry_lost` (see the module's docs). A gap not (yet)
/// stored is left alone; [`store_gap`] applies the account when it comes. Idempotent: the same account gives the same
/// details.
pub(super) async fn apply_recovery(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    r: &GapRecovery,
    reported_at: OffsetDateTime,
) -> Result<(), AppError> {
    // The gap's own finding (older agents: no months) or its months' (`<gap>@YYYY-MM`).
    let findings = super::store::agent_gap_findings(tx, org, cluster, &r.gap).await?;
    for (id, details) in findings {
        let updated = recovered_details(&details, r, reported_at);
        if updated == details {
            continue;
        }
        super::store::update_agent_gap_details(tx, org, cluster, &id, &updated).await?;
    }
    Ok(())
}

/// One month's finding `details` with the agent's account applied. A kind the finding lists and the account does not
/// name stays lost whole (conservative); dropped records the agent could not read (`unaccounted`) keep every month
/// of the gap unrecovered, as does a finding from an older agent that lists no kinds.
fn recovered_details(details: &Value, r: &GapRecovery, reported_at: OffsetDateTime) -> Value {
    let listed: Vec<(String, u64)> = details["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|k| Some((k["kind"].as_str()?.to_string(), k["count"].as_u64()?)))
        .collect();
    let mut still_lost = 0u64;
    let mut telemetry_lost = 0u64;
    let mut kinds = Vec::new();
    for (kind, count) in &listed {
        let (recovered, lost) = match r.kinds.iter().find(|k| k.kind == *kind) {
            Some(k) => (k.recovered, k.lost),
            None => (0, *count),
        };
        if is_telemetry(kind) {
            telemetry_lost = telemetry_lost.saturating_add(lost);
        } else {
            still_lost = still_lost.saturating_add(lost);
        }
        kinds.push(json!({ "kind": kind, "recovered": recovered, "lost": lost }));
    }
    let recovered = !listed.is_empty() && still_lost == 0 && r.unaccounted == 0;
    let mut out = details.clone();
    if let Some(map) = out.as_object_mut() {
        map.insert("recovered".into(), json!(recovered));
        map.insert("telemetry_lost".into(), json!(telemetry_lost));
        map.insert(
            "recovery".into(),
            json!({ "kinds": kinds, "forgotten": r.forgotten, "unaccounted": r.unaccounted,
                    "reported_at": rfc3339(reported_at) }),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use gpuledger_core::wire::GapKindRecovery;
    use time::macros::datetime;

    fn account(kinds: &[(&str, u64, u64)], unaccounted: u64) -> GapRecovery {
        GapRecovery {
            gap: "gap/1/9".into(),
            kinds: kinds
                .iter()
                .map(|(k, recovered, lost)| GapKindRecovery { kind: (*k).into(), recovered: *recovered, lost: *lost })
                .collect(),
            forgotten: 0,
            unaccounted,
        }
    }

    fn month(kinds: &[(&str, u64)]) -> Value {
        let kinds: Vec<Value> = kinds.iter().map(|(k, n)| json!({"kind": k, "count": n})).collect();
        json!({"dropped": 99, "kinds": kinds, "recovered": false})
    }

    #[test]
    fn a_month_is_recovered_when_nothing_but_telemetry_stays_lost() {
        let at = datetime!(2026-12-02 10:00 UTC);
        let r = account(&[("allocation_started", 40, 0), ("namespace_observed", 2, 1), ("telemetry", 0, 7)], 0);
        // A month touched only by the starts and telemetry: recovered, the windows said lost.
        let d = recovered_details(&month(&[("allocation_started", 40), ("telemetry", 7)]), &r, at);
        assert_eq!((d["recovered"].as_bool(), d["telemetry_lost"].as_u64()), (Some(true), Some(7)), "{d}");
        assert_eq!(d["recovery"]["kinds"][0], json!({"kind": "allocation_started", "recovered": 40, "lost": 0}));
        assert_eq!(d["dropped"], 99, "the rest of the finding stays");
        // A month the lost namespace fact touches: not recovered.
        let d = recovered_details(&month(&[("namespace_observed", 2)]), &r, at);
        assert_eq!(d["recovered"], false, "{d}");
        // A kind the account does not name stays lost whole.
        let d = recovered_details(&month(&[("allocation_ended", 3)]), &r, at);
        assert_eq!((d["recovered"].as_bool(), &d["recovery"]["kinds"][0]["lost"]), (Some(false), &json!(3)));
        // Records the agent could not read: no month of the gap is recovered.
        let r = account(&[("allocation_started", 40, 0)], 1);
        assert_eq!(recovered_details(&month(&[("allocation_started", 40)]), &r, at)["recovered"], false);
        // An older agent's finding lists no kinds: it stays unrecovered.
        assert_eq!(recovered_details(&json!({"dropped": 5}), &r, at)["recovered"], false);
        // The same account twice: the same details (the update is skipped).
        let once =
            recovered_details(&month(&[("allocation_started", 40)]), &account(&[("allocation_started", 40, 0)], 0), at);
        assert_eq!(recovered_details(&once, &account(&[("allocation_started", 40, 0)], 0), at), once);
    }
}
