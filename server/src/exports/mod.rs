//! Exports for finance tools: CSV files, the OData v4 feed Power BI connects to, and a FinOps FOCUS dataset.
//!
//! - `GET /api/v1/exports/{ledger,allocations,usage,disputes}.csv?period=YYYY-MM[&department=UUID][&tenant=UUID]`:
//!   streamed from PostgreSQL in constant memory (one bounded channel of 64 KiB chunks between the query and the
//!   socket; the allocations are joined and computed in Rust from the raw intervals, see [`allocations`]), RFC 4180, UTF-8, CRLF, timestamps in UTC ISO 8601, decimals exact with a `.`, text cells that a
//!   spreadsheet would run as a formula prefixed with `'` (see [`cells`]).
//! - `GET /api/v1/exports/focus.csv?period=YYYY-MM[&version=1.3|1.2|1.0]`: the month's ledger as FOCUS ([`focus`]).
//! - `GET /api/v1/exports/journal.csv?period=YYYY-MM[&by=tenant]`: a closed month as balanced journal entries
//!   ([`journal`]).
//! - `/odata/`: the OData v4 service ([`odata`]): service document, `$metadata`, seven entity sets with
//!   `$select`, `$filter`, `$orderby`, `$top`, `$skip`, `$count` and server-driven paging. Only API tokens
//!   (HTTP Basic with the token as password, Bearer, or a Web API key) — never the portal's cookie.
//!
//! All are read-only: an export token (whole organization or chosen departments), an admin token, or (CSV only)
//! a signed-in session. Department-scoped callers see only their departments (PostgreSQL applies the scope).
//! Every export is audited.

mod allocations;
mod cells;
mod filter;
mod focus;
pub mod journal;
pub(crate) mod odata;
mod sources;
pub mod store;

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};
use futures::TryStreamExt;
use gpuledger_api::params::CsvParams;
use gpuledger_core::{Period, ledger::LedgerLine};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::http::{Caller, Params, ReadLedger};
use crate::{
    auth::Principal,
    db::Database,
    describe::{Inputs, inputs as described},
    error::AppError,
    state::AppState,
    store::period_state,
};
use cells::Cell;
use sources::{Select, Source};

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/exports/ledger.csv", get(ledger_csv))
        .route("/api/v1/exports/allocations.csv", get(allocations_csv))
        .route("/api/v1/exports/usage.csv", get(usage_csv))
        .route("/api/v1/exports/disputes.csv", get(disputes_csv))
        .route("/api/v1/exports/focus.csv", get(focus::focus_csv))
        .route("/api/v1/exports/journal.csv", get(journal::journal_csv))
        .route("/odata", get(odata::service_document))
        .route("/odata/", get(odata::service_document))
        .route("/odata/$metadata", get(odata::metadata))
        .route("/odata/{set}", get(odata::collection))
        .route("/odata/{set}/$count", get(odata::count))
}

/// What a month's CSV export of `set` (`LedgerLines`, `Allocations`, `Usage`, `Disputes`) selects, as the
/// `COPY (SELECT …) TO STDOUT (FORMAT csv, HEADER)` PostgreSQL can write by itself: the same rows and columns
/// (PostgreSQL's text forms; for `Allocations`, the SQL plan the Rust-computed file is tested against). The export
/// benchmark's reference; run it in an organization transaction.
pub fn copy_statement(set: &str, period: Period) -> Option<String> {
    let source = sources::by_set(set)?;
    let mut select = Select::new(source, false, true);
    let (start, _) = crate::ledger::utc_bounds(period).ok()?;
    select.month(start);
    if !source.csv_order.is_empty() {
        select.order = vec![source.csv_order.to_string()];
    }
    Some(format!("COPY ({}) TO STDOUT WITH (FORMAT csv, HEADER)", select.sql_literal(&[])))
}

/// GPU-hours of `micros` microseconds at `num / den` GPUs, and the fraction, as the allocations CSV writes them
/// (computed in Rust the way PostgreSQL's `numeric` computes the SQL plan's expressions; tests compare the two).
#[doc(hidden)]
pub fn decimals_for_tests(num: i64, den: i64, micros: i128) -> (String, String) {
    let text = |v: Option<i128>| {
        let mut s = String::new();
        match v {
            Some(v) => allocations::write_micro(&mut s, v),
            None => s.push_str("overflow"),
        }
        s
    };
    (text(allocations::gpu_hours_micro(num, den, micros)), text(allocations::fraction_micro(num, den)))
}

/// Bytes gathered before a chunk goes to the client.
const CHUNK: usize = 64 * 1024;
/// Chunks buffered between the query and the socket: with [`CHUNK`], the most a download holds in memory.
const CHANNEL_DEPTH: usize = 4;

/// What this feature's REST handlers take, for the API document (`/odata` describes itself in `$metadata`).
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/exports/ledger.csv", ledger_csv),
        described("get", "/api/v1/exports/allocations.csv", allocations_csv),
        described("get", "/api/v1/exports/usage.csv", usage_csv),
        described("get", "/api/v1/exports/disputes.csv", disputes_csv),
        described("get", "/api/v1/exports/focus.csv", focus::focus_csv),
        described("get", "/api/v1/exports/journal.csv", journal::journal_csv),
    ]
}

/// The validated filters of a CSV export.
pub(crate) struct CsvFilter {
    period: Period,
    department: Option<Uuid>,
    tenant: Option<Uuid>,
}

impl CsvFilter {
    fn new(
        period: gpuledger_api::input::Month,
        department: Option<gpuledger_api::input::Id>,
        tenant: Option<gpuledger_api::input::Id>,
    ) -> Self {
        Self { period: period.period(), department: department.map(|d| d.uuid()), tenant: tenant.map(|t| t.uuid()) }
    }

    fn details(&self) -> serde_json::Value {
        json!({"period": self.period.to_string(), "department": self.department, "tenant": self.tenant})
    }

    /// Whether an in-memory ledger line passes the department and tenant filters.
    fn keeps(&self, l: &LedgerLine) -> bool {
        self.department.is_none_or(|d| l.department_id.as_uuid() == d)
            && self.tenant.is_none_or(|t| l.tenant_id.is_some_and(|x| x.as_uuid() == t))
    }
}

/// A CSV download's headers.
fn csv_response(body: Body, name: &str, period: Period) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8; header=present"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"gpuledger-{name}-{period}.csv\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    response
}

/// What a CSV download runs: a [`Select`] PostgreSQL computes whole, or the allocations joined and computed in
/// Rust ([`allocations`]).
enum Plan {
    Sql(Select),
    Allocations(allocations::Cut),
}

impl Plan {
    fn set(&self) -> &'static str {
        match self {
            Self::Sql(s) => s.source.set,
            Self::Allocations(_) => sources::ALLOCATIONS.set,
        }
    }

    /// The month's plan of `source` for the caller and the filters; `sql` forces the all-SQL plan.
    fn new(source: &'static Source, p: &Principal, f: &CsvFilter, sql: bool) -> Result<Self, AppError> {
        let (start, _) = crate::ledger::utc_bounds(f.period)?;
        if !sql && std::ptr::eq(source, &sources::ALLOCATIONS) {
            return Ok(Self::Allocations(allocations::Cut {
                from: Some(start),
                before: Some(sources::next_month(start)),
                scoped: p.departments.is_some(),
                department: f.department,
                tenant: f.tenant,
            }));
        }
        let mut select = Select::new(source, p.departments.is_some(), true);
        select.organization(p.org.as_uuid());
        select.month(start);
        if let Some(d) = f.department {
            select.department(d);
        }
        if let Some(t) = f.tenant {
            select.tenant(t);
        }
        if !source.csv_order.is_empty() {
            select.order = vec![source.csv_order.to_string()];
        }
        Ok(Self::Sql(select))
    }
}

type Chunks = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// Streams a plan as CSV: a task runs the query in the caller's transaction and sends 64 KiB chunks through a
/// bounded channel, so memory stays constant whatever the size. The answer starts only once the query has
/// produced its first row (or finished), so a failing query is an error status, not a truncated file; a failure
/// later ends the body with an error (the client sees a broken transfer, never a silently short file).
async fn stream_csv(db: Database, p: Principal, plan: Plan) -> Result<Body, AppError> {
    let (chunks, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL_DEPTH);
    let (started, ready) = oneshot::channel::<Result<(), AppError>>();
    tokio::spawn(async move {
        let mut started = Some(started);
        let result = produce_csv(&db, &p, &plan, &chunks, &mut started).await;
        if let Err(e) = result {
            match started.take() {
                Some(s) => {
                    let _ = s.send(Err(e));
                }
                None => {
                    tracing::error!(error = %e, set = plan.set(), "CSV export failed while streaming");
                    let _ = chunks.send(Err(std::io::Error::other("the export failed; see the server log"))).await;
                }
            }
        }
    });
    ready.await.map_err(|_| AppError::Internal("CSV export task ended early".into()))??;
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Ok(Body::from_stream(stream))
}

async fn produce_csv(
    db: &Database,
    p: &Principal,
    plan: &Plan,
    chunks: &Chunks,
    started: &mut Option<oneshot::Sender<Result<(), AppError>>>,
) -> Result<(), AppError> {
    let mut tx = p.begin(db).await?;
    // Streams a whole month: the export's statement limit, not the request's.
    tx.allow_long_statements().await?;
    store::export_session(&mut tx).await?;
    let mut buf = Vec::with_capacity(CHUNK + 4096);
    let select = match plan {
        Plan::Sql(select) => select,
        Plan::Allocations(cut) => {
            let dims = allocations::Dimensions::load(tx.conn()).await?;
            let columns = sources::ALLOCATIONS.csv_columns();
            cells::csv_header(&mut buf, columns.iter().map(|c| c.csv_name()));
            let first = || {
                if let Some(s) = started.take() {
                    let _ = s.send(Ok(()));
                }
            };
            let flush = |chunk: Vec<u8>| async move { chunks.send(Ok(Bytes::from(chunk))).await.is_ok() };
            allocations::write_rows(tx.conn(), &dims, cut, &mut buf, CHUNK, first, flush).await?;
            tx.commit().await?;
            if !buf.is_empty() {
                let _ = chunks.send(Ok(Bytes::from(buf))).await;
            }
            return Ok(());
        }
    };
    let sql = select.sql(&[]);
    cells::csv_header(&mut buf, select.columns.iter().map(|c| c.csv_name()));
    let kinds: Vec<cells::Kind> = select.columns.iter().map(|c| c.kind).collect();
    {
        let mut rows = store::select_stream(tx.conn(), &sql, &select.args);
        loop {
            let row = rows.try_next().await?;
            if let Some(s) = started.take() {
                let _ = s.send(Ok(()));
            }
            let Some(row) = row else { break };
            for (i, k) in kinds.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                cells::csv_cell(&mut buf, &cells::decode(&row, i, *k)?);
            }
            buf.extend_from_slice(b"\r\n");
            if buf.len() >= CHUNK {
                let chunk = Bytes::from(std::mem::replace(&mut buf, Vec::with_capacity(CHUNK + 4096)));
                if chunks.send(Ok(chunk)).await.is_err() {
                    return Ok(()); // the client went away
                }
            }
        }
    }
    tx.commit().await?;
    if !buf.is_empty() {
        let _ = chunks.send(Ok(Bytes::from(buf))).await;
    }
    Ok(())
}

/// A month's allocations CSV (`allocations.csv` with these filters) in memory, for tests and comparisons:
/// computed in Rust as the download is (`sql_plan` false), or entirely by PostgreSQL (`sql_plan` true: the plan
/// the Rust one must agree with, row for row and byte for byte; rows in read order, which may differ).
pub async fn allocations_csv_bytes(
    db: &Database,
    p: &Principal,
    period: Period,
    department: Option<Uuid>,
    tenant: Option<Uuid>,
    sql_plan: bool,
) -> Result<Vec<u8>, AppError> {
    let plan = Plan::new(&sources::ALLOCATIONS, p, &CsvFilter { period, department, tenant }, sql_plan)?;
    let (chunks, mut rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL_DEPTH);
    let produce = async move {
        let mut started = None;
        produce_csv(db, p, &plan, &chunks, &mut started).await
    };
    let collect = async {
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            out.extend_from_slice(&chunk.map_err(|e| AppError::Internal(e.to_string()))?);
        }
        Ok::<_, AppError>(out)
    };
    let (produced, collected) = tokio::join!(produce, collect);
    produced?;
    collected
}

/// Audits an export in its own transaction (before any data leaves).
async fn audit_export(
    db: &Database,
    p: &Principal,
    action: &str,
    target: &str,
    details: serde_json::Value,
) -> Result<(), AppError> {
    let mut tx = p.begin(db).await?;
    tx.audit_by(p, action, target, "", details).await?;
    tx.commit().await?;
    Ok(())
}

/// A table export: one month (and optionally one department or tenant) of a source, streamed.
async fn table_csv(
    state: &AppState,
    p: &Principal,
    q: CsvParams,
    source: &'static sources::Source,
    name: &str,
) -> Result<Response, AppError> {
    let f = CsvFilter::new(q.period, q.department, q.tenant);
    let body = table_body(state, p, &f, source, name).await?;
    Ok(csv_response(body, name, f.period))
}

async fn table_body(
    state: &AppState,
    p: &Principal,
    f: &CsvFilter,
    source: &'static sources::Source,
    name: &str,
) -> Result<Body, AppError> {
    let plan = Plan::new(source, p, f, false)?;
    audit_export(&state.db, p, &format!("export.{name}_csv"), &f.period.to_string(), f.details()).await?;
    stream_csv(state.db.clone(), p.clone(), plan).await
}

/// `GET /api/v1/exports/allocations.csv?period=YYYY-MM`: allocation intervals of the month, split at owner
/// changes, with their GPU-hours in the month.
async fn allocations_csv(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<CsvParams>,
) -> Result<Response, AppError> {
    table_csv(&state, &p, q, &sources::ALLOCATIONS, "allocations").await
}

/// `GET /api/v1/exports/usage.csv?period=YYYY-MM`: shared endpoints' productive work per tenant and window.
async fn usage_csv(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<CsvParams>,
) -> Result<Response, AppError> {
    table_csv(&state, &p, q, &sources::USAGE, "usage").await
}

/// `GET /api/v1/exports/disputes.csv?period=YYYY-MM`: disputes of the month's lines.
async fn disputes_csv(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<CsvParams>,
) -> Result<Response, AppError> {
    table_csv(&state, &p, q, &sources::DISPUTES, "disputes").await
}

/// `GET /api/v1/exports/ledger.csv?period=YYYY-MM`: one row per ledger line, the canonical columns. A closed month
/// streams from the stored lines; an open month comes from the read model's snapshot (computed for the whole
/// organization, cut to what the caller may see).
async fn ledger_csv(
    State(state): State<AppState>,
    p: Caller<ReadLedger>,
    Params(q): Params<CsvParams>,
) -> Result<Response, AppError> {
    let f = CsvFilter::new(q.period, q.department, q.tenant);
    let mut tx = p.begin(&state.db).await?;
    let closed = period_state(&mut tx, f.period).await? == gpuledger_api::states::PeriodState::Closed;
    tx.commit().await?;
    if closed {
        let body = table_body(&state, &p, &f, &sources::LEDGER_LINES, "ledger").await?;
        return Ok(csv_response(body, "ledger", f.period));
    }
    let (lines, _) = month_lines(&state, &p, &f).await?;
    audit_export(&state.db, &p, "export.ledger_csv", &f.period.to_string(), f.details()).await?;
    let columns = sources::LEDGER_LINES.csv_columns();
    let mut buf = Vec::with_capacity(256 * (lines.len() + 1));
    cells::csv_header(&mut buf, columns.iter().map(|c| c.csv_name()));
    for l in &lines {
        cells::csv_row(&mut buf, line_cells(l).iter());
    }
    Ok(csv_response(Body::from(buf), "ledger", f.period))
}

/// A ledger line's cells in the order of the ledger CSV's columns.
fn line_cells(l: &LedgerLine) -> [Cell<'_>; 18] {
    let month = l.period.first_day();
    [
        Cell::text(&l.line_id),
        Cell::Month(month),
        Cell::Guid(l.department_id.as_uuid()),
        Cell::text(&l.department),
        l.tenant_id.map_or(Cell::Null, |t| Cell::Guid(t.as_uuid())),
        Cell::text(&l.tenant),
        Cell::text(l.term.as_str()),
        Cell::text(&l.gpu_class),
        Cell::Num(l.quantity.to_string().into()),
        Cell::text(&l.unit),
        Cell::Num(l.rate.to_string().into()),
        Cell::Num(l.amount.to_string().into()),
        Cell::text(&l.currency),
        Cell::text(l.confidence.as_str()),
        Cell::Int(i64::from(l.policy_version)),
        Cell::text(&l.evidence),
        l.corrects.as_deref().map_or(Cell::Null, Cell::text),
        Cell::text(&l.explanation),
    ]
}

/// The month's lines as the caller may see them, filtered, and whether the month is closed: the closed bundle's
/// lines, or the open month's preview (computed for the whole organization: overhead is shared by every tenant).
async fn month_lines(state: &AppState, p: &Principal, f: &CsvFilter) -> Result<(Vec<LedgerLine>, bool), AppError> {
    // From the read model: a closed month's stored lines, or the open month's snapshot (computed for the whole
    // organization, cut by PostgreSQL to the caller's departments).
    let Some((head, lines)) = crate::readmodel::visible_lines(&state.db, p, f.period).await? else {
        return Err(AppError::Conflict(format!(
            "no approved cost policy covers {}: approve one effective from {} or earlier",
            f.period, f.period
        )));
    };
    let closed = head.state == crate::figures::FigState::Closed;
    let lines = lines.into_iter().filter(|l| f.keeps(l)).collect();
    Ok((lines, closed))
}
