//! What can be exported: each entity set is one SQL `FROM` with typed columns, a key, and how to cut it to a
//! month, a department or a tenant. The CSV files and the OData feed are both built from these, through
//! [`Select`], so they cannot disagree.
//!
//! Every query runs in the caller's organization-scoped transaction (PostgreSQL's row-level security decides what
//! is visible); department-scoped callers additionally get `scoped_where` (raw facts such as allocations are
//! organization-level, so they are cut to the tenants PostgreSQL shows the caller).
//!
//! Every table is also compared with the organization explicitly (`{org}` in the SQL below, see [`ORG`]), so
//! that on Citus the statement is routed to the organization's shard (docs/scaling.md).

use sqlx::{Postgres, postgres::PgArguments, query::Query};
use time::{Date, OffsetDateTime};
use uuid::Uuid;

use super::cells::{Column, Kind};

/// Where the SQL of a source compares `org_id` with the organization: [`Select::organization`]'s parameter, or,
/// until one is bound, the setting row-level security compares with ([`CURRENT_ORG`]; the same rows, not routed).
pub const ORG: &str = "{org}";

/// The organization of the transaction, as the row-level security policies read it.
const CURRENT_ORG: &str = "NULLIF(current_setting('app.org_id', true), '')::uuid";

/// How rows are cut to months cheaply, so that a month's export (or an OData filter on `Period`/`PeriodStart`)
/// reads only that month's rows. Each template's `{}` is replaced with a `timestamptz` parameter.
#[derive(Debug)]
pub struct MonthSql {
    /// The row's month start (`timestamptz`), compared exactly.
    pub exact: &'static str,
    /// A condition implied by "the row's month starts at or after `{}`" (a month start).
    pub from: &'static str,
    /// A condition implied by "the row's month starts before `{}`" (a month start).
    pub before: &'static str,
}

/// An exportable entity set.
#[derive(Debug)]
pub struct Source {
    /// OData entity set (`LedgerLines`).
    pub set: &'static str,
    /// OData entity type (`LedgerLine`).
    pub entity: &'static str,
    /// `FROM …` (joins included).
    pub from: &'static str,
    /// `FROM …` of the CSV file when it differs (the same rows, planned for one pass over a month).
    pub csv_from: &'static str,
    /// Always applied (`""`: none); names the driving table's `org_id` (`{org}`).
    pub base_where: &'static str,
    /// Columns, in CSV order.
    pub columns: &'static [Column],
    /// Key property names; also the default order (ascending), and what keyset paging continues after.
    pub key: &'static [&'static str],
    /// How many leading key columns are plain columns of an index in key order (0: all of them). Keyset paging
    /// adds `(those) >= (…)` so that PostgreSQL starts the index scan at the page instead of filtering up to it.
    pub key_index_prefix: usize,
    /// Row order of the CSV file.
    pub csv_order: &'static str,
    /// Applied for department-scoped callers (`""`: none needed, RLS does it).
    pub scoped_where: &'static str,
    /// How to cut to months (`None`: not month-based).
    pub month: Option<MonthSql>,
    /// A department filter; `{}` is a `uuid` parameter (`""`: not offered).
    pub department: &'static str,
    /// A tenant filter; `{}` is a `uuid` parameter (`""`: not offered).
    pub tenant: &'static str,
}

impl Source {
    /// A column by OData name.
    pub fn column(&self, name: &str) -> Option<&'static Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The key columns.
    pub fn key_columns(&self) -> Vec<&'static Column> {
        self.key.iter().filter_map(|k| self.column(k)).collect()
    }

    /// The CSV columns.
    pub fn csv_columns(&self) -> Vec<&'static Column> {
        self.columns.iter().filter(|c| c.csv).collect()
    }
}

// ---------------------------------------------------------------- the sets

use Kind::{Bool, DateTime, Decimal, Guid, Int32, Int64, Month, Text};

const LEDGER_COLUMNS: &[Column] = &[
    Column::new("LineId", Text, "l.line_id"),
    Column::new("Period", Month, "l.period"),
    Column::new("DepartmentId", Guid, "l.department_id"),
    Column::new("Department", Text, "l.department"),
    Column::new("TenantId", Guid, "l.tenant_id").null(),
    Column::new("Tenant", Text, "l.tenant"),
    Column::new("Term", Text, "l.term"),
    Column::new("GpuClass", Text, "l.gpu_class"),
    Column::new("Quantity", Decimal, "l.quantity"),
    Column::new("Unit", Text, "l.unit"),
    Column::new("Rate", Decimal, "l.rate"),
    Column::new("Amount", Decimal, "l.amount"),
    Column::new("Currency", Text, "l.currency::text"),
    Column::new("Confidence", Text, "l.confidence"),
    Column::new("PolicyVersion", Int32, "l.policy_version"),
    Column::new("Evidence", Text, "l.evidence"),
    Column::new("Corrects", Text, "l.corrects").null(),
    Column::new("Explanation", Text, "l.explanation"),
    Column::new("LineNo", Int32, "l.line_no").odata_only(),
    Column::new("PeriodStart", DateTime, "(l.period::timestamp AT TIME ZONE 'UTC')").odata_only(),
    Column::new("PeriodEnd", DateTime, "((l.period + interval '1 month') AT TIME ZONE 'UTC')").odata_only(),
];

/// Closed months' ledger lines (a closed month never changes; an open month is computed on request and is not
/// in the feed).
pub static LEDGER_LINES: Source = Source {
    set: "LedgerLines",
    entity: "LedgerLine",
    from: "ledger_lines l",
    csv_from: "",
    base_where: "l.org_id = {org}",
    columns: LEDGER_COLUMNS,
    key: &["Period", "LineId"],
    key_index_prefix: 0,
    csv_order: "l.period, l.line_no",
    scoped_where: "",
    month: Some(MonthSql {
        exact: "(l.period::timestamp AT TIME ZONE 'UTC')",
        from: "l.period >= ({})::date",
        before: "l.period < ({})::date",
    }),
    department: "l.department_id = {}",
    tenant: "l.tenant_id = {}",
};

/// An allocation interval, split at changes of the namespace's owner and at month boundaries, with the GPU-hours
/// it held in that piece (open allocations count up to now).
///
/// A namespace's owners (with their tenant and department, as the caller may see them) are read once as arrays in
/// a lateral subquery that depends on the namespace only, so PostgreSQL memoizes one lookup per namespace instead
/// of probing the ownership, tenant and department indexes once per allocation; the allocations are read in key order from their primary key, so a page of the OData feed is
/// an index range however deep it is (see docs/benchmarks.md, "Exports").
const ALLOCATIONS_FROM: &str = "allocation_intervals a
    JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
    CROSS JOIN LATERAL (SELECT array_agg(x.valid_from) AS froms, array_agg(x.valid_to) AS tos,
                               array_agg(t.tenant_id) AS tenant_ids, array_agg(t.name) AS tenants,
                               array_agg(d.department_id) AS department_ids, array_agg(d.name) AS departments
                          FROM namespace_ownership x
                          LEFT JOIN tenants t ON t.org_id = x.org_id AND t.tenant_id = x.tenant_id
                          LEFT JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
                         WHERE x.org_id = a.org_id AND x.org_id = {org} AND x.namespace_uid = a.namespace_uid) own
    LEFT JOIN LATERAL unnest(own.froms, own.tos, own.tenant_ids, own.tenants, own.department_ids, own.departments)
              AS o(valid_from, valid_to, tenant_id, tenant, department_id, department)
         ON o.valid_from < COALESCE(a.ended_at, 'infinity') AND COALESCE(o.valid_to, 'infinity') > a.started_at
    CROSS JOIN LATERAL (SELECT GREATEST(a.started_at, o.valid_from) AS s,
                               LEAST(COALESCE(a.ended_at, 'infinity'), COALESCE(o.valid_to, 'infinity'), now()) AS e) w
    CROSS JOIN LATERAL generate_series(date_trunc('month', w.s), date_trunc('month', w.e - interval '1 microsecond'),
                                       interval '1 month') m(month)
    CROSS JOIN LATERAL (SELECT GREATEST(w.s, m.month) AS ps, LEAST(w.e, m.month + interval '1 month') AS pe) p";

/// The same rows for a whole file: owners, tenants and departments as plain joins, which PostgreSQL hashes once
/// (the lateral lookups above pay off for a page in key order, not for a month in one pass). The download itself
/// is computed in Rust from the raw intervals (`super::allocations`); this plan is the reference it is tested
/// against, and what the benchmark's `COPY` runs.
const ALLOCATIONS_CSV_FROM: &str = "allocation_intervals a
    JOIN clusters c ON c.org_id = a.org_id AND c.cluster_id = a.cluster_id
    LEFT JOIN (SELECT x.org_id, x.namespace_uid, x.valid_from, x.valid_to, t.tenant_id, t.name AS tenant,
                      d.department_id, d.name AS department
                 FROM namespace_ownership x
                 LEFT JOIN tenants t ON t.org_id = x.org_id AND t.tenant_id = x.tenant_id
                 LEFT JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id
                WHERE x.org_id = {org}) o
         ON o.org_id = a.org_id AND o.namespace_uid = a.namespace_uid
        AND o.valid_from < COALESCE(a.ended_at, 'infinity') AND COALESCE(o.valid_to, 'infinity') > a.started_at
    JOIN (SELECT g AS month FROM generate_series(
              date_trunc('month', COALESCE((SELECT min(y.started_at) FROM allocation_intervals y
                                             WHERE y.org_id = {org}), now())),
              date_trunc('month', now()), interval '1 month') g) m
         ON m.month < LEAST(COALESCE(a.ended_at, 'infinity'), COALESCE(o.valid_to, 'infinity'), now())
        AND m.month + interval '1 month' > GREATEST(a.started_at, o.valid_from)
    CROSS JOIN LATERAL (SELECT GREATEST(a.started_at, o.valid_from, m.month) AS ps,
                               LEAST(COALESCE(a.ended_at, 'infinity'), COALESCE(o.valid_to, 'infinity'), now(),
                                     m.month + interval '1 month') AS pe) p";

const ALLOCATION_COLUMNS: &[Column] = &[
    Column::new("Period", Month, "m.month::date"),
    Column::new("ClusterId", Guid, "a.cluster_id"),
    Column::new("Cluster", Text, "c.name"),
    Column::new("AllocationId", Text, "a.allocation_id"),
    Column::new("Start", DateTime, "p.ps"),
    Column::new("End", DateTime, "p.pe"),
    Column::new(
        "GpuHours",
        Decimal,
        "round(a.fraction_num::numeric * extract(epoch FROM p.pe - p.ps) / (a.fraction_den * 3600), 6)",
    )
    .null(),
    Column::new("Fraction", Decimal, "round(a.fraction_num::numeric / a.fraction_den, 6)").null(),
    Column::new("TenantId", Guid, "o.tenant_id").null(),
    Column::new("Tenant", Text, "o.tenant").null(),
    Column::new("DepartmentId", Guid, "o.department_id").null(),
    Column::new("Department", Text, "o.department").null(),
    Column::new("HolderKind", Text, "a.holder_kind"),
    Column::new("HolderUid", Guid, "a.holder_uid"),
    Column::new("HolderName", Text, "a.holder_name"),
    Column::new("Namespace", Text, "a.namespace"),
    Column::new("NamespaceUid", Guid, "a.namespace_uid").null(),
    Column::new("Container", Text, "a.container").null(),
    Column::new("Node", Text, "a.node").null(),
    Column::new("Resource", Text, "a.resource"),
    Column::new("Units", Int32, "a.units"),
    Column::new("Devices", Text, "array_to_string(a.device_ids, ' ')"),
    Column::new("GpuModel", Text, "a.gpu_model").null(),
    Column::new("GpuClass", Text, "a.gpu_class").null(),
    Column::new("SharingMode", Text, "a.sharing_mode"),
    Column::new("Profile", Text, "a.profile").null(),
    Column::new("Replicas", Int32, "a.replicas").null(),
    Column::new("Endpoint", Text, "a.labels->>'endpoint'").null(),
    Column::new("StartedAt", DateTime, "a.started_at"),
    Column::new("EndedAt", DateTime, "a.ended_at").null(),
    Column::new("EndEstimated", Bool, "a.end_estimated"),
    Column::new("Confidence", Text, "a.confidence"),
    Column::new("InventoryGap", Text, "a.inventory_gap").null(),
    Column::new("Share", Text, "a.share").null(),
    Column::new("PeriodStart", DateTime, "m.month").odata_only(),
];

/// Who held which GPU capacity, per month and owner.
pub static ALLOCATIONS: Source = Source {
    set: "Allocations",
    entity: "Allocation",
    from: ALLOCATIONS_FROM,
    csv_from: ALLOCATIONS_CSV_FROM,
    base_where: "a.org_id = {org} AND p.pe > p.ps",
    columns: ALLOCATION_COLUMNS,
    key: &["ClusterId", "AllocationId", "Start"],
    key_index_prefix: 2,
    // A month's file comes in the order PostgreSQL reads it: sorting a million rows would cost more than the
    // export itself.
    csv_order: "",
    scoped_where: "o.tenant_id IS NOT NULL",
    month: Some(MonthSql {
        exact: "m.month",
        from: "(a.ended_at IS NULL OR a.ended_at > {})",
        before: "a.started_at < {}",
    }),
    department: "o.department_id = {}",
    tenant: "o.tenant_id = {}",
};

const TENANT_COLUMNS: &[Column] = &[
    Column::new("TenantId", Guid, "t.tenant_id"),
    Column::new("Name", Text, "t.name"),
    Column::new("DepartmentId", Guid, "t.department_id"),
    Column::new("Department", Text, "d.name"),
    Column::new("CreatedAt", DateTime, "t.created_at"),
];

/// Tenants.
pub static TENANTS: Source = Source {
    set: "Tenants",
    entity: "Tenant",
    from: "tenants t JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id",
    csv_from: "",
    base_where: "t.org_id = {org}",
    columns: TENANT_COLUMNS,
    key: &["TenantId"],
    key_index_prefix: 0,
    csv_order: "t.name",
    scoped_where: "",
    month: None,
    department: "t.department_id = {}",
    tenant: "t.tenant_id = {}",
};

const DEPARTMENT_COLUMNS: &[Column] = &[
    Column::new("DepartmentId", Guid, "d.department_id"),
    Column::new("Name", Text, "d.name"),
    Column::new("CreatedAt", DateTime, "d.created_at"),
];

/// Departments.
pub static DEPARTMENTS: Source = Source {
    set: "Departments",
    entity: "Department",
    from: "departments d",
    csv_from: "",
    base_where: "d.org_id = {org}",
    columns: DEPARTMENT_COLUMNS,
    key: &["DepartmentId"],
    key_index_prefix: 0,
    csv_order: "d.name",
    scoped_where: "",
    month: None,
    department: "d.department_id = {}",
    tenant: "",
};

/// Every month from the first with facts or a close to the current one, with its state.
const PERIODS_FROM: &str = "(SELECT g::date AS period FROM generate_series(
        date_trunc('month', LEAST(COALESCE((SELECT min(period) FROM periods WHERE org_id = {org}), now()),
                                  COALESCE((SELECT min(started_at) FROM allocation_intervals WHERE org_id = {org}),
                                           now()))),
        date_trunc('month', now()), interval '1 month') g) g
    LEFT JOIN periods p ON p.org_id = {org} AND p.period = g.period";

const PERIOD_COLUMNS: &[Column] = &[
    Column::new("Period", Month, "g.period"),
    Column::new("PeriodStart", DateTime, "(g.period::timestamp AT TIME ZONE 'UTC')"),
    Column::new("PeriodEnd", DateTime, "((g.period + interval '1 month') AT TIME ZONE 'UTC')"),
    Column::new("State", Text, "COALESCE(p.state, 'open')"),
    Column::new("ClosedAt", DateTime, "p.closed_at").null(),
    Column::new("ClosedBy", Text, "p.closed_by").null(),
    Column::new("PolicyVersion", Int32, "p.policy_version").null(),
    Column::new("ContentHash", Text, "p.content_hash").null().scoped("NULL::text"),
    Column::new("PreviousHash", Text, "p.previous_hash").null().scoped("NULL::text"),
    Column::new(
        "LineCount",
        Int64,
        "(SELECT count(*) FROM ledger_lines l WHERE l.org_id = {org} AND l.period = g.period)",
    ),
    Column::new(
        "Amount",
        Decimal,
        "(SELECT sum(l.amount) FROM ledger_lines l WHERE l.org_id = {org} AND l.period = g.period)",
    )
    .null(),
    Column::new("Currency", Text, "p.currency::text").null(),
];

/// Months and their close (department-scoped callers get their departments' line counts and totals, and no
/// organization-wide hashes).
pub static PERIODS: Source = Source {
    set: "Periods",
    entity: "Period",
    from: PERIODS_FROM,
    csv_from: "",
    base_where: "",
    columns: PERIOD_COLUMNS,
    key: &["Period"],
    key_index_prefix: 0,
    csv_order: "g.period",
    scoped_where: "",
    month: Some(MonthSql {
        exact: "(g.period::timestamp AT TIME ZONE 'UTC')",
        from: "g.period >= ({})::date",
        before: "g.period < ({})::date",
    }),
    department: "",
    tenant: "",
};

const USAGE_FROM: &str = "service_usage u
    JOIN clusters c ON c.org_id = u.org_id AND c.cluster_id = u.cluster_id
    LEFT JOIN tenants t ON t.org_id = u.org_id AND t.tenant_id = u.tenant_id
    LEFT JOIN departments d ON d.org_id = t.org_id AND d.department_id = t.department_id";

const USAGE_COLUMNS: &[Column] = &[
    Column::new("Period", Month, "date_trunc('month', u.window_start)::date"),
    Column::new("ClusterId", Guid, "u.cluster_id"),
    Column::new("Cluster", Text, "c.name"),
    Column::new("Endpoint", Text, "u.endpoint"),
    Column::new("Model", Text, "u.model"),
    Column::new("TenantName", Text, "u.tenant_name"),
    Column::new("WindowStart", DateTime, "u.window_start"),
    Column::new("WindowEnd", DateTime, "u.window_end"),
    Column::new("TenantId", Guid, "t.tenant_id").null(),
    Column::new("Tenant", Text, "t.name").null(),
    Column::new("DepartmentId", Guid, "d.department_id").null(),
    Column::new("Department", Text, "d.name").null(),
    Column::new("Requests", Int64, "u.requests"),
    Column::new("InputTokens", Int64, "u.input_tokens"),
    Column::new("OutputTokens", Int64, "u.output_tokens"),
    Column::new("ReceivedAt", DateTime, "u.received_at"),
    Column::new("PeriodStart", DateTime, "date_trunc('month', u.window_start)").odata_only(),
];

/// Productive work of shared model-serving endpoints, per tenant and window.
pub static USAGE: Source = Source {
    set: "Usage",
    entity: "UsageRecord",
    from: USAGE_FROM,
    csv_from: "",
    base_where: "u.org_id = {org}",
    columns: USAGE_COLUMNS,
    key: &["ClusterId", "Endpoint", "Model", "TenantName", "WindowStart"],
    key_index_prefix: 0,
    csv_order: "u.cluster_id, u.endpoint, u.model, u.tenant_name, u.window_start",
    scoped_where: "t.tenant_id IS NOT NULL",
    month: Some(MonthSql {
        exact: "date_trunc('month', u.window_start)",
        from: "u.window_start >= {}",
        before: "u.window_start < {}",
    }),
    department: "d.department_id = {}",
    tenant: "t.tenant_id = {}",
};

const DISPUTE_COLUMNS: &[Column] = &[
    Column::new("DisputeId", Guid, "x.dispute_id"),
    Column::new("Number", Int32, "x.number"),
    Column::new("Period", Month, "x.period"),
    Column::new("LineIds", Text, "array_to_string(x.line_ids, ' ')"),
    Column::new("State", Text, "x.state"),
    Column::new("Reason", Text, "x.reason"),
    Column::new("OpenedBy", Text, "x.opened_by"),
    Column::new("OpenedAt", DateTime, "x.opened_at"),
    Column::new("ResolvedBy", Text, "x.resolved_by").null(),
    Column::new("ResolvedAt", DateTime, "x.resolved_at").null(),
    Column::new("Resolution", Text, "x.resolution").null(),
    Column::new("CreditAmount", Decimal, "x.credit_amount").null(),
    Column::new("AdjustmentId", Guid, "x.adjustment_id").null(),
    Column::new(
        "CreditState",
        Text,
        "(SELECT j.state FROM adjustments j
           WHERE j.org_id = x.org_id AND j.org_id = {org} AND j.adjustment_id = x.adjustment_id)",
    )
    .null(),
    Column::new("DepartmentId", Guid, "x.department_id").null(),
    Column::new("Department", Text, "dep.name").null(),
    Column::new(
        "Comments",
        Int64,
        "(SELECT count(*) FROM dispute_events e
           WHERE e.org_id = x.org_id AND e.org_id = {org} AND e.dispute_id = x.dispute_id
             AND e.action = 'commented')",
    ),
    Column::new(
        "LastActivityAt",
        DateTime,
        "(SELECT max(e.at) FROM dispute_events e
           WHERE e.org_id = x.org_id AND e.org_id = {org} AND e.dispute_id = x.dispute_id)",
    )
    .null(),
    Column::new("PeriodStart", DateTime, "(x.period::timestamp AT TIME ZONE 'UTC')").odata_only(),
];

/// Disputes of ledger lines and how they ended.
pub static DISPUTES: Source = Source {
    set: "Disputes",
    entity: "Dispute",
    from: "disputes x LEFT JOIN departments dep ON dep.org_id = x.org_id AND dep.department_id = x.department_id",
    csv_from: "",
    base_where: "x.org_id = {org}",
    columns: DISPUTE_COLUMNS,
    key: &["DisputeId"],
    key_index_prefix: 0,
    csv_order: "x.number",
    scoped_where: "",
    month: Some(MonthSql {
        exact: "(x.period::timestamp AT TIME ZONE 'UTC')",
        from: "x.period >= ({})::date",
        before: "x.period < ({})::date",
    }),
    department: "x.department_id = {}",
    tenant: "EXISTS (SELECT 1 FROM ledger_lines l WHERE l.org_id = x.org_id AND l.org_id = {org}
                        AND l.period = x.period
                        AND l.line_id = ANY (x.line_ids) AND l.tenant_id = {})",
};

/// Every OData entity set, in service-document order.
pub static SETS: [&Source; 7] = [&LEDGER_LINES, &ALLOCATIONS, &TENANTS, &DEPARTMENTS, &PERIODS, &USAGE, &DISPUTES];

/// The set of that name.
pub fn by_set(name: &str) -> Option<&'static Source> {
    SETS.iter().copied().find(|s| s.set == name)
}

// ---------------------------------------------------------------- queries

/// A bound query parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// `text`.
    Text(String),
    /// `date`.
    Date(Date),
    /// `timestamptz`.
    Time(OffsetDateTime),
    /// `uuid`.
    Uuid(Uuid),
    /// A decimal's text, cast to `numeric`.
    Numeric(String),
    /// `int8`.
    Int(i64),
    /// `bool`.
    Bool(bool),
}

/// Parameters of a query being built.
#[derive(Clone, Debug, Default)]
pub struct Args(pub Vec<Arg>);

impl Args {
    /// Adds a parameter; returns its placeholder with an explicit cast (`$3::timestamptz`).
    pub fn push(&mut self, a: Arg) -> String {
        let cast = match &a {
            Arg::Text(_) => "text",
            Arg::Date(_) => "date",
            Arg::Time(_) => "timestamptz",
            Arg::Uuid(_) => "uuid",
            Arg::Numeric(_) => "numeric",
            Arg::Int(_) => "int8",
            Arg::Bool(_) => "bool",
        };
        self.0.push(a);
        format!("${}::{cast}", self.0.len())
    }

    /// Binds every parameter to `q`.
    pub fn bind<'q>(&'q self, mut q: Query<'q, Postgres, PgArguments>) -> Query<'q, Postgres, PgArguments> {
        for a in &self.0 {
            q = match a {
                Arg::Text(s) | Arg::Numeric(s) => q.bind(s.as_str()),
                Arg::Date(d) => q.bind(*d),
                Arg::Time(t) => q.bind(*t),
                Arg::Uuid(u) => q.bind(*u),
                Arg::Int(i) => q.bind(*i),
                Arg::Bool(b) => q.bind(*b),
            };
        }
        q
    }
}

/// First instant of the month containing `t` (UTC).
pub fn month_floor(t: OffsetDateTime) -> OffsetDateTime {
    gpuledger_core::Period::containing(t).start()
}

/// First instant of the month after the one containing `t` (`t` itself past year 9999).
pub fn next_month(t: OffsetDateTime) -> OffsetDateTime {
    gpuledger_core::Period::containing(t).next().map_or(t, |p| p.start())
}

/// A query over one source being built: the columns it reads, its conditions and its order.
#[derive(Debug)]
pub struct Select {
    /// The source.
    pub source: &'static Source,
    /// Output columns.
    pub columns: Vec<&'static Column>,
    /// Conditions (AND-ed).
    pub conds: Vec<String>,
    /// Parameters.
    pub args: Args,
    /// `ORDER BY` items.
    pub order: Vec<String>,
    /// `LIMIT`.
    pub limit: Option<i64>,
    /// `OFFSET`.
    pub offset: Option<i64>,
    /// Department-scoped caller: organization-wide columns are withheld.
    pub scoped: bool,
    /// `FROM …`.
    pub from: &'static str,
    /// The placeholder of the organization's parameter ([`Self::organization`]), written where the SQL says
    /// [`ORG`].
    pub org: Option<String>,
}

impl Select {
    /// Every column (or only the CSV's), the source's own conditions, the caller's scope.
    pub fn new(source: &'static Source, scoped: bool, csv: bool) -> Self {
        let columns = if csv { source.csv_columns() } else { source.columns.iter().collect() };
        let mut conds = Vec::new();
        if !source.base_where.is_empty() {
            conds.push(source.base_where.to_string());
        }
        if scoped && !source.scoped_where.is_empty() {
            conds.push(source.scoped_where.to_string());
        }
        let from = if csv && !source.csv_from.is_empty() { source.csv_from } else { source.from };
        Self {
            source,
            columns,
            conds,
            args: Args::default(),
            order: Vec::new(),
            limit: None,
            offset: None,
            scoped,
            from,
            org: None,
        }
    }

    /// Compares every table with `org` (the caller's organization) as a parameter, so that the statement can be
    /// routed to one shard. Without it the SQL compares with the transaction's setting (the same rows).
    pub fn organization(&mut self, org: Uuid) {
        self.org = Some(self.args.push(Arg::Uuid(org)));
    }

    /// `sql` with [`ORG`] written out.
    fn with_org(&self, sql: &str) -> String {
        sql.replace(ORG, self.org.as_deref().unwrap_or(CURRENT_ORG))
    }

    /// The SQL expression of a column as this caller sees it.
    pub fn expr(&self, c: &Column) -> &'static str {
        match c.scoped_sql {
            Some(s) if self.scoped => s,
            _ => c.sql,
        }
    }

    /// Restricts to rows whose month starts in `[from, before)` (month starts), when the source is month-based:
    /// conditions the planner can use (the exact test is separate).
    pub fn month_range(&mut self, from: Option<OffsetDateTime>, before: Option<OffsetDateTime>) {
        let Some(m) = &self.source.month else { return };
        if let Some(from) = from {
            let p = self.args.push(Arg::Time(from));
            self.conds.push(m.from.replace("{}", &p));
        }
        if let Some(before) = before {
            let p = self.args.push(Arg::Time(before));
            self.conds.push(m.before.replace("{}", &p));
        }
    }

    /// Only rows of the month starting at `start`. False when the source is not month-based.
    pub fn month(&mut self, start: OffsetDateTime) -> bool {
        let Some(m) = &self.source.month else { return false };
        let p = self.args.push(Arg::Time(start));
        self.conds.push(format!("{} = {p}", m.exact));
        self.month_range(Some(start), Some(next_month(start)));
        true
    }

    /// Only a department's rows. False when the source has no department filter.
    pub fn department(&mut self, id: Uuid) -> bool {
        if self.source.department.is_empty() {
            return false;
        }
        let p = self.args.push(Arg::Uuid(id));
        self.conds.push(self.source.department.replace("{}", &p));
        true
    }

    /// Only a tenant's rows. False when the source has no tenant filter.
    pub fn tenant(&mut self, id: Uuid) -> bool {
        if self.source.tenant.is_empty() {
            return false;
        }
        let p = self.args.push(Arg::Uuid(id));
        self.conds.push(self.source.tenant.replace("{}", &p));
        true
    }

    fn where_clause(&self) -> String {
        if self.conds.is_empty() { String::new() } else { format!(" WHERE {}", self.conds.join(" AND ")) }
    }

    /// `SELECT …` of the output columns (each cast to what [`super::cells::decode`] reads), then `extra`
    /// expressions.
    pub fn sql(&self, extra: &[String]) -> String {
        let mut cols: Vec<String> =
            self.columns.iter().map(|c| format!("CAST(({}) AS {})", self.expr(c), c.kind.select_type())).collect();
        cols.extend(extra.iter().cloned());
        let mut sql = format!("SELECT {} FROM {}{}", cols.join(", "), self.from, self.where_clause());
        if !self.order.is_empty() {
            sql.push_str(" ORDER BY ");
            sql.push_str(&self.order.join(", "));
        }
        if let Some(l) = self.limit {
            sql.push_str(&format!(" LIMIT {l}"));
        }
        if let Some(o) = self.offset.filter(|o| *o > 0) {
            sql.push_str(&format!(" OFFSET {o}"));
        }
        self.with_org(&sql)
    }

    /// [`Self::sql`] with every parameter written as a literal (for `COPY`, which takes no parameters). The
    /// parameters are typed values (dates, UUIDs, numbers, quoted text), so this is as safe as binding them.
    pub fn sql_literal(&self, extra: &[String]) -> String {
        let mut sql = self.sql(extra);
        for (i, a) in self.args.0.iter().enumerate().rev() {
            let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
            let (value, cast) = match a {
                Arg::Text(s) => (quote(s), "text"),
                Arg::Numeric(s) => (quote(s), "numeric"),
                Arg::Date(d) => (quote(&d.to_string()), "date"),
                Arg::Time(t) => (quote(&super::cells::instant_string(*t)), "timestamptz"),
                Arg::Uuid(u) => (quote(&u.to_string()), "uuid"),
                Arg::Int(n) => (n.to_string(), "int8"),
                Arg::Bool(b) => (b.to_string(), "bool"),
            };
            sql = sql.replace(&format!("${}::{cast}", i + 1), &format!("{value}::{cast}"));
        }
        sql
    }

    /// `SELECT count(*) …` under the same conditions.
    pub fn count_sql(&self) -> String {
        self.with_org(&format!("SELECT count(*) FROM {}{}", self.from, self.where_clause()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn ledger_csv_columns_are_the_canonical_header() {
        let header: Vec<String> = LEDGER_LINES.csv_columns().iter().map(|c| c.csv_name()).collect();
        assert_eq!(header.join(","), gpuledger_core::ledger::CSV_HEADER);
    }

    #[test]
    fn every_set_has_its_key_columns_and_unique_names() {
        for s in SETS {
            assert_eq!(s.key_columns().len(), s.key.len(), "{}", s.set);
            for k in s.key_columns() {
                assert!(!k.nullable, "{}.{} is a key and must not be null", s.set, k.name);
            }
            let mut names: Vec<&str> = s.columns.iter().map(|c| c.name).collect();
            names.sort_unstable();
            let n = names.len();
            names.dedup();
            assert_eq!(names.len(), n, "{}: duplicate column", s.set);
        }
    }

    #[test]
    fn literal_sql_has_no_parameters_left() {
        let mut s = Select::new(&ALLOCATIONS, false, true);
        s.month(time::macros::datetime!(2026-09-01 00:00 UTC));
        s.tenant(Uuid::nil());
        for _ in 0..8 {
            s.args.push(Arg::Text("it's".into()));
        }
        s.conds.push("x = $11::text".into());
        let sql = s.sql_literal(&[]);
        assert!(!sql.contains('$'), "{sql}");
        assert!(sql.contains("m.month = '2026-09-01T00:00:00Z'::timestamptz"), "{sql}");
        assert!(sql.contains("x = 'it''s'::text"), "{sql}");
    }

    #[test]
    fn every_table_is_compared_with_the_organization() {
        for source in SETS {
            for csv in [false, true] {
                let mut s = Select::new(source, false, csv);
                let plain = s.sql(&[]);
                assert!(!plain.contains(ORG) && plain.contains(CURRENT_ORG), "{plain}");
                s.month(time::macros::datetime!(2026-09-01 00:00 UTC));
                s.organization(Uuid::nil());
                let param = format!("org_id = ${}::uuid", s.args.0.len());
                let sql = s.sql(&[]);
                assert!(!sql.contains(ORG) && !sql.contains(CURRENT_ORG) && sql.contains(&param), "{sql}");
                assert!(s.count_sql().contains(&param), "{}", s.count_sql());
                assert!(!s.sql_literal(&[]).contains('$'), "{sql}");
            }
        }
    }

    #[test]
    fn months() {
        let t = time::macros::datetime!(2026-12-15 10:00 UTC);
        assert_eq!(month_floor(t), time::macros::datetime!(2026-12-01 00:00 UTC));
        assert_eq!(next_month(month_floor(t)), time::macros::datetime!(2027-01-01 00:00 UTC));
    }
}
