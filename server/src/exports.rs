//! Exports for finance tools: the ledger as CSV, and the OData v4 service root Power BI connects to.
//!
//! Both are read-only and take an export token (Bearer, or HTTP Basic with the token as the password — what
//! Power BI's "Basic" credential sends), an admin token, or a signed-in session. A caller limited to
//! departments gets only those departments' lines. The fuller export set (allocations, usage, disputes,
//! FOCUS, OData entity sets) is issue 7.

use axum::{
    Router,
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};
use gpuledger_core::ledger::{CSV_HEADER, LedgerLine};
use serde::Deserialize;
use serde_json::json;

use crate::{
    app::AppState,
    auth::Visible,
    error::AppError,
    ledger::period_state,
    policy::{parse_period, reader},
};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/exports/ledger.csv", get(ledger_csv))
        .route("/odata/", get(odata_root))
        .route("/odata/$metadata", get(odata_metadata))
        .route("/odata/LedgerLines", get(odata_ledger_lines))
}

/// The `LedgerLines` entity: (name, EDM type, SQL expression).
const LINE_PROPERTIES: [(&str, &str, &str); 15] = [
    ("LineId", "Edm.String", "line_id"),
    ("Period", "Edm.String", "to_char(period, 'YYYY-MM')"),
    ("DepartmentId", "Edm.Guid", "department_id::text"),
    ("Department", "Edm.String", "department"),
    ("TenantId", "Edm.Guid", "tenant_id::text"),
    ("Tenant", "Edm.String", "tenant"),
    ("Term", "Edm.String", "term"),
    ("GpuClass", "Edm.String", "gpu_class"),
    ("Quantity", "Edm.Decimal", "quantity::text"),
    ("Unit", "Edm.String", "unit"),
    ("Rate", "Edm.Decimal", "rate::text"),
    ("Amount", "Edm.Decimal", "amount::text"),
    ("Currency", "Edm.String", "currency::text"),
    ("Confidence", "Edm.String", "confidence"),
    ("Explanation", "Edm.String", "explanation"),
];

/// Largest page of an OData answer; the rest follows `@odata.nextLink`.
const ODATA_PAGE: i64 = 5000;

#[derive(Debug, Deserialize)]
struct PeriodQuery {
    period: Option<String>,
}

/// The month's lines: the closed bundle's, or the open month's preview, cut to what the caller may see.
async fn ledger_lines(
    state: &AppState,
    headers: &HeaderMap,
    period: Option<&str>,
) -> Result<(String, Vec<LedgerLine>), AppError> {
    let p = reader(state, headers).await?;
    let period = parse_period("period", period.ok_or_else(|| AppError::invalid("period", "is required (YYYY-MM)"))?)?;
    let visible = p.visible(&state.db).await?;
    // Computed for the whole organization (overhead is shared across all tenants), then cut to the caller.
    let mut tx = state.db.begin_org(p.org).await?;
    let lines = if period_state(&mut tx, period).await? == "closed" {
        crate::close::stored_bundle(&mut tx, period)
            .await?
            .ok_or_else(|| AppError::Internal("closed period without bundle".into()))?
            .lines
    } else {
        crate::close::preview(&mut tx, period).await?.ledger.lines
    };
    let lines: Vec<LedgerLine> =
        lines.into_iter().filter(|l| Visible::department(&visible, l.department_id.as_uuid())).collect();
    crate::policy::audit_by(&mut tx, &p, "export.ledger_csv", &period.to_string(), "", json!({"lines": lines.len()}))
        .await?;
    tx.commit().await?;
    Ok((period.to_string(), lines))
}

/// `GET /api/v1/exports/ledger.csv?period=YYYY-MM`: one row per ledger line, the canonical columns.
async fn ledger_csv(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<PeriodQuery>,
) -> Result<Response, AppError> {
    let (period, lines) = ledger_lines(&state, &headers, q.period.as_deref()).await?;
    let mut body = String::with_capacity(256 * (lines.len() + 1));
    body.push_str(CSV_HEADER);
    body.push('\n');
    for l in &lines {
        body.push_str(&l.csv_row());
        body.push('\n');
    }
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"gpuledger-ledger-{period}.csv\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}

fn odata(response: impl IntoResponse, content_type: &'static str) -> Response {
    let mut response = response.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert("odata-version", HeaderValue::from_static("4.0"));
    response
}

/// `GET /odata/`: the OData v4 service document.
async fn odata_root(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, AppError> {
    reader(&state, &headers).await?;
    let doc = json!({
        "@odata.context": "$metadata",
        "value": [ { "name": "LedgerLines", "kind": "EntitySet", "url": "LedgerLines" } ],
    });
    Ok(odata(doc.to_string(), "application/json;odata.metadata=minimal;IEEE754Compatible=true"))
}

/// `GET /odata/$metadata`: the CSDL describing the entity sets.
async fn odata_metadata(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, AppError> {
    reader(&state, &headers).await?;
    let properties = LINE_PROPERTIES
        .iter()
        .map(|(name, kind, _)| {
            let extra = if *kind == "Edm.Decimal" { r#" Scale="variable""# } else { "" };
            let nullable = if *name == "TenantId" { "" } else { r#" Nullable="false""# };
            format!(r#"<Property Name="{name}" Type="{kind}"{nullable}{extra}/>"#)
        })
        .collect::<String>();
    let xml = format!(
        r#"<?xml version="1.0" encoding="utf-8"?><edmx:Edmx Version="4.0" xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx"><edmx:DataServices><Schema Namespace="GpuLedger" xmlns="http://docs.oasis-open.org/odata/ns/edm"><EntityType Name="LedgerLine"><Key><PropertyRef Name="Period"/><PropertyRef Name="LineId"/></Key>{properties}</EntityType><EntityContainer Name="Container"><EntitySet Name="LedgerLines" EntityType="GpuLedger.LedgerLine"/></EntityContainer></Schema></edmx:DataServices></edmx:Edmx>"#
    );
    Ok(odata(xml, "application/xml"))
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    #[serde(rename = "$top")]
    top: Option<i64>,
    #[serde(rename = "$skip")]
    skip: Option<i64>,
}

/// `GET /odata/LedgerLines`: every closed month's lines (closed months do not change), under the caller's
/// organization and department scope (PostgreSQL filters them), paged with `$top`/`$skip`.
async fn odata_ledger_lines(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
) -> Result<Response, AppError> {
    let p = reader(&state, &headers).await?;
    let top = q.top.unwrap_or(ODATA_PAGE);
    if !(1..=ODATA_PAGE).contains(&top) {
        return Err(AppError::invalid("$top", format!("must be 1..={ODATA_PAGE}")));
    }
    let skip = q.skip.unwrap_or(0);
    if skip < 0 {
        return Err(AppError::invalid("$skip", "must not be negative"));
    }
    let columns = LINE_PROPERTIES.iter().map(|(_, _, sql)| *sql).collect::<Vec<_>>().join(", ");
    let sql = format!("SELECT ARRAY[{columns}] FROM ledger_lines ORDER BY period, line_no LIMIT $1 OFFSET $2");
    let mut tx = p.begin(&state.db).await?;
    let rows: Vec<(Vec<Option<String>>,)> = sqlx::query_as(&sql).bind(top + 1).bind(skip).fetch_all(tx.conn()).await?;
    let returned = rows.len().min(top as usize);
    crate::policy::audit_by(&mut tx, &p, "export.odata", "LedgerLines", "", json!({"skip": skip, "rows": returned}))
        .await?;
    tx.commit().await?;
    let more = rows.len() as i64 > top;
    let value: Vec<serde_json::Value> = rows
        .into_iter()
        .take(top as usize)
        .map(|(cells,)| {
            let mut object = serde_json::Map::new();
            for ((name, _, _), cell) in LINE_PROPERTIES.iter().zip(cells) {
                object.insert((*name).to_string(), cell.map_or(serde_json::Value::Null, serde_json::Value::String));
            }
            serde_json::Value::Object(object)
        })
        .collect();
    let mut doc = json!({ "@odata.context": "$metadata#LedgerLines", "value": value });
    if more {
        doc["@odata.nextLink"] = json!(format!("LedgerLines?$top={top}&$skip={}", skip + top));
    }
    Ok(odata(doc.to_string(), "application/json;odata.metadata=minimal;IEEE754Compatible=true"))
}
