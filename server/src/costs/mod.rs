//! The cloud bill in (issue 35 item 2).
//!
//! - `GET /api/v1/inventory/nodes`: the GPU nodes as their agents last reported them, with the provider ID the
//!   bill names each machine by (`spec.providerID`) and the key a bill line is matched on.
//! - `POST /api/v1/costs/imports?period=YYYY-MM` (admin or finance): a FOCUS 1.0–1.3 CSV as the providers export
//!   it (gzip accepted: `Content-Encoding: gzip` or a gzipped body), read as it is inflated and summed per resource
//!   (`gpuledger_core::bill`), matched to the nodes that existed in the month by resource key
//!   (`gpuledger_core::provider`). The answer: lines read, `matched_cost`, `unmatched_cost` (EffectiveCost), the
//!   matched resources, the costliest unmatched ones, and findings (VMs on the bill no node names; cloud nodes
//!   without a bill line) with their fix. Re-importing a month replaces its import (audited `costs.import`). A bill
//!   usually arrives days after its month ends, often after the close: a closed month takes it too (`after_close`
//!   in the answer) — its closed figures stand, and where the policy prices a class by the bill the next close
//!   books the difference as a late-data correction (the open month's figures show it at once). Only a month
//!   whose close is running refuses it (409: try when it has finished).
//! - `GET /api/v1/costs/imports?period=YYYY-MM`: the month's import as stored (404 when none).
//!
//! Pricing a GPU class at the bill's actual cost: `gpuledger_core::ledger::actual` (docs/cloud-bill.md).

use std::io::Read;

use axum::{Json, Router, extract::State, routing::get};
use gpuledger_api::{
    Items,
    costs::{CostFinding, CostImport, ImportParams, InventoryNode, MatchedResource, NodesParams, UnmatchedResource},
};
use gpuledger_core::{
    Period,
    bill::{self, BillSummary},
    decimal::Decimal,
    provider::ResourceKey,
    time_fmt::rfc3339,
};
use serde_json::json;

use crate::{
    describe::{Inputs, inputs as described},
    error::AppError,
    http::{Caller, ManagePolicy, Params, ReadLedger},
    state::AppState,
};

pub mod store;

/// Most unmatched resources stored by name (the rest are summed in one row).
const STORED_UNMATCHED: usize = 1_000;
/// Most unmatched resources an answer lists.
const SHOWN_UNMATCHED: usize = 50;
/// Most findings of each kind an answer lists.
const SHOWN_FINDINGS: usize = 50;
/// Most bytes of CSV read from one (possibly gzipped) body.
const MAX_INFLATED_BYTES: u64 = 1 << 30;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/inventory/nodes", get(list_nodes))
        .route("/api/v1/costs/imports", get(get_import).post(post_import))
}

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/inventory/nodes", list_nodes),
        described("get", "/api/v1/costs/imports", get_import),
        described("post", "/api/v1/costs/imports", post_import),
    ]
}

async fn list_nodes(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<NodesParams>,
) -> Result<Json<Items<InventoryNode>>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let rows = store::current_nodes(&mut tx, q.cluster.as_deref()).await?;
    tx.commit_quiet().await?;
    let items = rows
        .into_iter()
        .map(|n| {
            let key = n.provider_id.as_deref().and_then(ResourceKey::from_provider_id);
            InventoryNode {
                cluster: n.cluster,
                name: n.name,
                node_uid: n.node_uid.to_string(),
                gpu_product: n.gpu_product,
                gpu_count: n.gpu_count,
                provider_id: n.provider_id,
                cloud: key.as_ref().map(|k| k.cloud().as_str().to_string()),
                resource_key: key.map(|k| k.to_string()),
                since: rfc3339(n.valid_from),
            }
        })
        .collect();
    Ok(Json(Items { items }))
}

async fn get_import(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    Params(q): Params<ImportParams>,
) -> Result<Json<CostImport>, AppError> {
    read_import(&state, &p, q).await.map(Json)
}

/// The month's imported bill (`GET /api/v1/costs/imports`); 404 when none was imported.
pub(crate) async fn read_import(
    state: &AppState,
    p: &crate::auth::Principal,
    q: ImportParams,
) -> Result<CostImport, AppError> {
    let period = q.period.period();
    let mut tx = p.begin(&state.db).await?;
    let answer = load(&mut tx, period).await?;
    tx.commit_quiet().await?;
    answer.ok_or_else(|| AppError::unknown("period", format!("no bill was imported for {period}")))
}

async fn post_import(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    Params(q): Params<ImportParams>,
    request: axum::extract::Request,
) -> Result<Json<CostImport>, AppError> {
    let gzip_header = request
        .headers()
        .get(axum::http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("gzip"));
    let body = crate::http::body_bytes(request, &state).await?;
    import_bill(&state, &p, q.period.period(), body, gzip_header).await.map(Json)
}

/// Imports `body` (a FOCUS CSV, gzipped when `gzip` or when it starts with gzip's magic bytes) as `period`'s cloud
/// bill, replacing an earlier import of the month (audited), and answers the stored import with its findings. The
/// REST handler and the portal's upload form both call it. A month that is not open, or has not begun, is refused.
pub async fn import_bill(
    state: &AppState,
    p: &Caller<ManagePolicy>,
    period: Period,
    body: axum::body::Bytes,
    gzip: bool,
) -> Result<CostImport, AppError> {
    if period.first_day() > time::OffsetDateTime::now_utc().date() {
        return Err(AppError::refused("period", format!("{period} has not begun")));
    }
    if body.is_empty() {
        return Err(AppError::invalid("body", "a FOCUS CSV is required (Content-Type: text/csv; gzip allowed)"));
    }
    let from = period.start();
    let to = period.add_months(1)?.start();
    let summary = tokio::task::spawn_blocking(move || read_bill(&body, gzip, from, to))
        .await
        .map_err(|e| AppError::Internal(e.to_string()))??;

    let mut tx = p.begin(&state.db).await?;
    let month_state = crate::store::period_state(&mut tx, period).await?;
    if month_state == gpuledger_api::states::PeriodState::Closing {
        return Err(AppError::refused(
            "period",
            format!("{period} is being closed: import its bill when the close has finished"),
        ));
    }
    let nodes = store::nodes_during(&mut tx, from, to).await?;
    let actor = p.actor();
    let (import, rows) = matched_rows(period, &actor, &summary, &nodes)?;
    let replaced = store::replace(&mut tx, &import, &rows).await?;
    tx.audit_by(
        p,
        "costs.import",
        &format!("period:{period}"),
        "",
        json!({"lines_read": summary.lines_read, "matched_cost": import.matched_cost,
               "unmatched_cost": import.unmatched_cost, "currency": summary.currency, "replaced": replaced}),
    )
    .await?;
    let answer = load(&mut tx, period).await?;
    tx.commit().await?;
    answer.ok_or_else(|| AppError::Internal("the import just stored is not there".into()))
}

/// Reads a body (gzipped or not) as a FOCUS CSV; errors name the line and column.
fn read_bill(
    body: &[u8],
    gzip_header: bool,
    from: time::OffsetDateTime,
    to: time::OffsetDateTime,
) -> Result<BillSummary, AppError> {
    let gzipped = gzip_header || body.starts_with(&[0x1f, 0x8b]);
    let result = if gzipped {
        let inflated = flate2::read::GzDecoder::new(body).take(MAX_INFLATED_BYTES);
        bill::read(std::io::BufReader::with_capacity(64 * 1024, inflated), from, to)
    } else {
        bill::read(std::io::BufReader::new(body), from, to)
    };
    result.map_err(|e| {
        if e.column == "body" && e.reason.contains("could not be read") {
            AppError::invalid("body", format!("not valid gzip: {}", e.reason))
        } else {
            AppError::invalid(format!("body:line {}:{}", e.line, e.column), e.reason)
        }
    })
}

/// The import's totals and rows: each resource matched by key to a node of the month, or not.
fn matched_rows<'a>(
    period: Period,
    actor: &'a str,
    summary: &'a BillSummary,
    nodes: &[store::NodeRow],
) -> Result<(store::NewImport<'a>, Vec<store::NewResource>), AppError> {
    let by_key: std::collections::HashMap<String, &store::NodeRow> = nodes
        .iter()
        .filter_map(|n| n.provider_id.as_deref().and_then(ResourceKey::from_provider_id).map(|k| (k.to_string(), n)))
        .collect();
    // Each resource's sum is exact already; their total can only pass what a decimal holds with a hostile bill.
    let too_large = |e: gpuledger_core::DomainError| {
        AppError::invalid("body", format!("the bill's costs add up beyond what is kept exactly ({e})"))
    };
    let (mut matched_cost, mut unmatched_cost) = (Decimal::ZERO, Decimal::ZERO);
    let (mut matched, mut unmatched) = (Vec::new(), Vec::new());
    for r in &summary.resources {
        let key = r.key.as_ref().map(ToString::to_string);
        let node = key.as_ref().and_then(|k| by_key.get(k));
        let row = store::NewResource {
            resource_id: r.resource_id.clone(),
            resource_key: key.clone(),
            service_name: r.service_name.clone(),
            lines: i64::try_from(r.lines).unwrap_or(i64::MAX),
            effective_cost: r.effective_cost.to_string(),
            billed_cost: r.billed_cost.to_string(),
            node: node.map(|n| (n.cluster_id, n.name.clone())),
        };
        if node.is_some() {
            matched_cost = matched_cost.checked_add(&r.effective_cost).map_err(too_large)?;
            matched.push(row);
        } else {
            unmatched_cost = unmatched_cost.checked_add(&r.effective_cost).map_err(too_large)?;
            unmatched.push((r.effective_cost, row));
        }
    }
    // The costliest unmatched by name; the rest summed in one row, so the stored rows add up to the totals.
    unmatched.sort_by(|a, b| b.0.value().cmp(&a.0.value()).then(b.0.is_negative().cmp(&a.0.is_negative())));
    let mut rows = matched;
    let mut rest: Option<store::NewResource> = None;
    for (i, (cost, row)) in unmatched.into_iter().enumerate() {
        if i < STORED_UNMATCHED {
            rows.push(row);
            continue;
        }
        let r = rest.get_or_insert_with(|| store::NewResource {
            resource_id: None,
            resource_key: None,
            service_name: "(other resources)".into(),
            lines: 0,
            effective_cost: "0".into(),
            billed_cost: "0".into(),
            node: None,
        });
        r.lines = r.lines.saturating_add(row.lines);
        r.effective_cost = Decimal::parse(&r.effective_cost)?.checked_add(&cost).map_err(too_large)?.to_string();
        r.billed_cost = Decimal::parse(&r.billed_cost)?
            .checked_add(&Decimal::parse(&row.billed_cost)?)
            .map_err(too_large)?
            .to_string();
    }
    rows.extend(rest);
    let import = store::NewImport {
        period: period.first_day(),
        imported_by: actor,
        focus_version: &summary.focus_version,
        currency: &summary.currency,
        lines_read: i64::try_from(summary.lines_read).unwrap_or(i64::MAX),
        lines_outside: i64::try_from(summary.lines_outside).unwrap_or(i64::MAX),
        matched_cost: matched_cost.to_string(),
        unmatched_cost: unmatched_cost.to_string(),
    };
    Ok((import, rows))
}

/// The stored import of `period` as the API answers it, with its findings against the month's nodes.
pub async fn load(tx: &mut crate::db::OrgTx, period: Period) -> Result<Option<CostImport>, AppError> {
    let Some(head) = store::import(tx, period.first_day()).await? else { return Ok(None) };
    let resources = store::resources(tx, period.first_day()).await?;
    let nodes = store::nodes_during(tx, period.start(), period.add_months(1)?.start()).await?;
    let mut matched = Vec::new();
    let mut unmatched = Vec::new();
    let mut findings = Vec::new();
    let mut billed_nodes = std::collections::HashSet::new();
    for r in resources {
        match (r.cluster, r.node) {
            (Some(cluster), Some(node)) => {
                billed_nodes.insert((cluster.clone(), node.clone()));
                matched.push(MatchedResource {
                    resource_id: r.resource_id.unwrap_or_default(),
                    resource_key: r.resource_key.unwrap_or_default(),
                    cluster,
                    node,
                    lines: r.lines,
                    effective_cost: r.effective_cost,
                    billed_cost: r.billed_cost,
                });
            }
            _ => {
                // A VM (it has a key) that no GPU node names: a machine someone should account for.
                if let (Some(id), Some(_)) = (&r.resource_id, &r.resource_key)
                    && findings.len() < SHOWN_FINDINGS
                {
                    findings.push(CostFinding {
                        kind: gpuledger_api::costs::CostFindingKind::UnclaimedVm,
                        subject: id.clone(),
                        detail: format!(
                            "{} {} of {} ({} bill lines) for a virtual machine no GPU node of {period} names",
                            r.effective_cost, head.currency, r.service_name, r.lines
                        ),
                        fix: "If it is a GPU node, install the agent in its cluster (its node fact carries \
                              spec.providerID); if it is not, nothing to do: its cost stays outside the GPU ledger"
                            .into(),
                    });
                }
                if unmatched.len() < SHOWN_UNMATCHED {
                    unmatched.push(UnmatchedResource {
                        resource_id: r.resource_id,
                        service_name: r.service_name,
                        lines: r.lines,
                        effective_cost: r.effective_cost,
                    });
                }
            }
        }
    }
    let mut missing = 0;
    for n in nodes.iter().filter(|n| n.provider_id.as_deref().and_then(ResourceKey::from_provider_id).is_some()) {
        if billed_nodes.contains(&(n.cluster.clone(), n.name.clone())) {
            continue;
        }
        missing += 1;
        if missing <= SHOWN_FINDINGS {
            findings.push(CostFinding {
                kind: gpuledger_api::costs::CostFindingKind::NodeWithoutBillLine,
                subject: format!("{}/{}", n.cluster, n.name),
                detail: format!(
                    "GPU node {}/{} ({}) ran in {period} but the imported bill has no line for it",
                    n.cluster,
                    n.name,
                    n.provider_id.as_deref().unwrap_or_default()
                ),
                fix: "Import the bill of the account or subscription it runs in (a FOCUS export per billing account), \
                      or check that the export includes resource IDs"
                    .into(),
            });
        }
    }
    Ok(Some(CostImport {
        period: period.to_string(),
        after_close: head.after_close,
        imported_at: rfc3339(head.imported_at),
        imported_by: head.imported_by,
        focus_version: head.focus_version,
        currency: head.currency,
        lines_read: head.lines_read,
        lines_outside_period: head.lines_outside,
        matched_cost: head.matched_cost,
        unmatched_cost: head.unmatched_cost,
        matched,
        unmatched,
        findings,
    }))
}

/// When `policy` prices classes at actual cost and `period` has no imported bill: the reason, for people (the
/// classes are then priced at the policy's fallback rates).
pub async fn bill_missing(
    tx: &mut crate::db::OrgTx,
    period: Period,
    policy: Option<&gpuledger_core::policy::CostPolicy>,
) -> Result<Option<String>, AppError> {
    let classes: Vec<&str> = policy
        .into_iter()
        .flat_map(|p| p.classes.iter())
        .filter(|c| c.actual_cost)
        .map(|c| c.gpu_class.as_str())
        .collect();
    if classes.is_empty() || store::import(tx, period.first_day()).await?.is_some() {
        return Ok(None);
    }
    Ok(Some(format!(
        "no cloud bill imported for {period}: {} priced at actual cost, so at the policy's fallback rates",
        classes.join(", ")
    )))
}

/// The month's cloud-bill findings as data-quality findings (the month's findings page): a bill missing for classes
/// priced at actual cost, and the import's own findings (VMs no GPU node names, GPU nodes without a bill line).
pub async fn findings(
    tx: &mut crate::db::OrgTx,
    period: Period,
) -> Result<Vec<gpuledger_api::close::Finding>, AppError> {
    let policy = crate::store::policy_for(tx, period).await?;
    let mut out = Vec::new();
    if let Some(reason) = bill_missing(tx, period, policy.as_ref()).await? {
        out.push(gpuledger_api::close::Finding {
            cluster: String::new(),
            kind: gpuledger_api::states::FindingKind::CloudBillMissing,
            subject: period.to_string(),
            from: None,
            to: None,
            details: json!({ "reason": reason }),
            fix: Some(format!(
                "import the month's FOCUS bill (Admin → Cloud bill, or POST /api/v1/costs/imports?period={period}); \
                 the open month is priced again from it"
            )),
        });
    }
    if let Some(import) = load(tx, period).await? {
        for f in import.findings {
            let cluster = match f.kind {
                gpuledger_api::costs::CostFindingKind::NodeWithoutBillLine => {
                    f.subject.split('/').next().unwrap_or_default().to_string()
                }
                gpuledger_api::costs::CostFindingKind::UnclaimedVm => String::new(),
            };
            out.push(gpuledger_api::close::Finding {
                cluster,
                kind: f.kind.into(),
                subject: f.subject,
                from: None,
                to: None,
                details: json!({ "reason": f.detail }),
                fix: Some(f.fix),
            });
        }
    }
    Ok(out)
}
