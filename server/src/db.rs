//! The database door. Handlers reach PostgreSQL only through [`Database::begin_org`], which opens an
//! organization-scoped transaction ([`OrgTx`]); the one path that looks across organizations is
//! [`Database::cross_org_directory`], loudly named and limited to slug lookups and organization creation.
//! The pool itself is private to this module.

use gpuledger_core::ids::{DepartmentId, OrgId};
use sqlx::{
    Connection, Executor, PgConnection, PgPool, Postgres, Transaction,
    migrate::Migrator,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use std::{str::FromStr, time::Duration};

/// The schema migrations, embedded in the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// The role the server's requests run as: owns nothing, cannot bypass row-level security.
pub const APP_ROLE: &str = "gpuledger_app";

/// Failures of the database layer.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database refused or failed a query.
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The connection would run requests with rights that bypass isolation.
    #[error("refusing to serve requests as role {role:?}: {reason}")]
    PrivilegedRole {
        /// The role the app pool ended up as.
        role: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The URL could not be parsed.
    #[error("invalid database URL: {0}")]
    Url(String),
    /// TLS to the database failed; the message names the setting to change.
    #[error("{0}")]
    Tls(String),
    /// A stored value could not be read back (a damaged telemetry block).
    #[error("stored data could not be read: {0}")]
    Data(String),
}

/// Who a connection runs as, and what that role may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleInfo {
    /// `current_user`.
    pub name: String,
    /// Superuser.
    pub superuser: bool,
    /// BYPASSRLS.
    pub bypass_rls: bool,
    /// Number of relations in `public` the role owns.
    pub owned_relations: i64,
}

/// Reads the role a connection runs as.
pub async fn role_info(conn: &mut PgConnection) -> Result<RoleInfo, DbError> {
    let (name, superuser, bypass_rls, owned_relations): (String, bool, bool, i64) = sqlx::query_as(
        "SELECT r.rolname::text, r.rolsuper, r.rolbypassrls,
                (SELECT count(*) FROM pg_class c
                  WHERE c.relowner = r.oid AND c.relnamespace = 'public'::regnamespace)
           FROM pg_roles r WHERE r.rolname = current_user",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(RoleInfo { name, superuser, bypass_rls, owned_relations })
}

/// Parses a connection URL and names the server in `pg_stat_activity`.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, DbError> {
    PgConnectOptions::from_str(url)
        .map(|o| o.application_name("gpuledger-server"))
        .map_err(|e| DbError::Url(e.to_string()))
}

/// Connects to `url`, waiting up to `wait` while the database refuses connections or is still starting (crash
/// recovery after a restart): a server and its database start in any order. Other errors fail at once.
pub async fn connect_waiting(url: &str, wait: Duration) -> Result<PgConnection, DbError> {
    let options = connect_options(url)?;
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(250);
    let mut warned = false;
    loop {
        match PgConnection::connect_with(&options).await {
            Ok(conn) => return Ok(conn),
            Err(e) if transient(&e) && started.elapsed() + pause <= wait => {
                if !warned {
                    tracing::warn!(error = %e, wait_secs = wait.as_secs(), "the database is not reachable yet; waiting");
                    warned = true;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(connect_error(e)),
        }
    }
}

/// A connection failure as the operator should read it: a refused TLS certificate names the `sslmode` setting to
/// change instead of a bare `invalid peer certificate: UnsupportedCertVersion` (Citus turns SSL on with a self-signed
/// X.509 v1 certificate when its extension is created; docs/scaling.md, "TLS to the coordinator").
pub fn connect_error(e: sqlx::Error) -> DbError {
    match e {
        sqlx::Error::Tls(inner) => DbError::Tls(tls_advice(&inner.to_string())),
        other => DbError::Sqlx(other),
    }
}

/// The explanation of a TLS failure `detail`, naming the settings that fix it.
pub fn tls_advice(detail: &str) -> String {
    let certificate = detail.contains("certificate") || detail.contains("Cert");
    let what = if certificate {
        "the database server's TLS certificate was refused"
    } else {
        "the TLS handshake with the database failed"
    };
    format!(
        "{what} ({detail}). Set sslmode in DATABASE_URL: `sslmode=verify-full&sslrootcert=/path/to/ca.pem` with a \
         certificate your CA signed for the database's host name (production), or `sslmode=disable` on loopback or a \
         network you trust. A Citus node uses a self-signed X.509 v1 certificate that it generates when the extension \
         is created, which this server never accepts, not even under sslmode=prefer or require (docs/scaling.md, \
         \"TLS to the coordinator\")"
    )
}

/// Refused, reset, or "the database system is starting up" (57P03): worth waiting for.
fn transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|c| c == "57P03"),
        _ => false,
    }
}

/// Applies the embedded migrations over a connection that may create roles and tables.
pub async fn migrate(url: &str) -> Result<(), DbError> {
    let mut conn = PgConnection::connect_with(&connect_options(url)?).await.map_err(connect_error)?;
    // On a Citus coordinator the files cannot be sent whole once tables are distributed (crate::citus).
    let citus = crate::citus::state(&mut conn).await?;
    if citus != crate::citus::CitusState::Absent {
        tracing::info!(?citus, "migrating a Citus coordinator");
    }
    crate::citus::migrate(&mut conn, &MIGRATOR, citus).await?;
    conn.close().await?;
    Ok(())
}

/// The newest migration this binary knows.
pub fn latest_migration() -> Option<i64> {
    MIGRATOR.iter().map(|m| m.version).max()
}

/// How the app pool becomes the application role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppLogin {
    /// The URL logs in as the application role itself (production, and the embedded default).
    Direct,
    /// The URL logs in as a privileged role (a development convenience); each pooled connection then runs
    /// `SET ROLE gpuledger_app`, so requests still run without the rights to bypass isolation.
    SetRole,
}

/// Pool and per-transaction limits (flags of `serve` and `demo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbOptions {
    /// Connections in the pool.
    pub max_connections: u32,
    /// How long a request waits for a free connection before it is answered 503 (`Retry-After`).
    pub acquire_timeout: Duration,
    /// `statement_timeout` of every organization transaction: no statement of a request runs longer.
    pub statement_timeout: Duration,
    /// `statement_timeout` of exports, which read whole months ([`OrgTx::allow_long_statements`]).
    pub export_statement_timeout: Duration,
    /// `lock_timeout` of every organization transaction: a statement that waits this long for a lock (a row
    /// another request holds, a Citus shard being moved) gives up, and the request is answered 503 with
    /// `Retry-After` — well before the HTTP request timeout, so a blocked write is never a 408 or a hang.
    /// Turns taken on purpose ([`OrgTx::wait_for_turn`]) wait up to the statement limit instead.
    pub lock_timeout: Duration,
}

impl Default for DbOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(30),
            export_statement_timeout: Duration::from_secs(300),
            lock_timeout: Duration::from_secs(10),
        }
    }
}

/// The application's handle on PostgreSQL.
#[derive(Clone)]
pub struct Database {
    pool: PgPool,
    options: DbOptions,
    /// Whether the database is a Citus coordinator with distributed tables (set-based inserts take another form
    /// there: the `bulk` module). Read when the pool opens: distribute before starting the servers (docs/scaling.md).
    distributed: bool,
}

/// Readiness as `/readyz` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The database answered.
    pub reachable: bool,
    /// The newest applied migration.
    pub applied: Option<i64>,
    /// The newest migration this binary carries.
    pub expected: Option<i64>,
}

impl Readiness {
    /// Reachable, and the schema has at least this binary's migrations. A newer schema is ready too: upgrades
    /// migrate before the new replicas roll (expand first, contract a release later, `docs/operations.md`), so
    /// the old replicas keep serving against the expanded schema and a binary can be rolled back.
    pub fn is_ready(&self) -> bool {
        self.reachable && self.expected.is_some() && self.applied >= self.expected
    }
}

impl Database {
    /// Opens the application pool and proves it runs as a role that cannot bypass isolation: not a superuser,
    /// not BYPASSRLS, owning no relation. Refuses to return otherwise.
    pub async fn connect(url: &str, login: AppLogin, max_connections: u32) -> Result<Self, DbError> {
        Self::connect_with(url, login, DbOptions { max_connections, ..DbOptions::default() }).await
    }

    /// [`Database::connect`] with explicit pool and statement limits.
    pub async fn connect_with(url: &str, login: AppLogin, db_options: DbOptions) -> Result<Self, DbError> {
        let options = connect_options(url)?;
        let mut pool_options = PgPoolOptions::new()
            .max_connections(db_options.max_connections)
            .acquire_timeout(db_options.acquire_timeout);
        if login == AppLogin::SetRole {
            pool_options = pool_options.after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute("SET ROLE gpuledger_app").await?;
                    Ok(())
                })
            });
        }
        let pool = pool_options.connect_with(options).await.map_err(connect_error)?;
        let mut conn = pool.acquire().await?;
        let role = role_info(&mut conn).await?;
        let distributed = crate::citus::state(&mut conn).await? == crate::citus::CitusState::Distributed;
        drop(conn);
        let reason = if role.superuser {
            Some("it is a superuser")
        } else if role.bypass_rls {
            Some("it has BYPASSRLS")
        } else if role.owned_relations > 0 {
            Some("it owns tables (FORCE RLS aside, owners can alter policies)")
        } else {
            None
        };
        if let Some(reason) = reason {
            pool.close().await;
            return Err(DbError::PrivilegedRole { role: role.name, reason: reason.into() });
        }
        Ok(Self { pool, options: db_options, distributed })
    }

    /// Whether the database is a distributed Citus coordinator.
    pub fn distributed(&self) -> bool {
        self.distributed
    }

    /// The limits this pool applies.
    pub fn options(&self) -> DbOptions {
        self.options
    }

    /// Begins a transaction scoped to one organization: every row it reads or writes in a tenant table is
    /// that organization's, enforced by PostgreSQL's row-level security. Dropping it without
    /// [`OrgTx::commit`] rolls it back, and the setting dies with the transaction.
    ///
    /// It sees every department of the organization. Requests on behalf of someone scoped to departments
    /// (a department manager, a department export token) go through [`Database::begin_scoped`] instead.
    pub async fn begin_org(&self, org: OrgId) -> Result<OrgTx, DbError> {
        self.begin_with(org, "all").await
    }

    /// Like [`Database::begin_org`], restricted to `departments` as well: PostgreSQL shows and accepts only
    /// those departments' rows in department-owned tables (`app.dept_scope`). `None` is the whole organization.
    pub async fn begin_scoped(&self, org: OrgId, departments: Option<&[DepartmentId]>) -> Result<OrgTx, DbError> {
        match departments {
            None => self.begin_with(org, "all").await,
            Some(list) => {
                let scope = list.iter().map(|d| d.as_uuid().to_string()).collect::<Vec<_>>().join(",");
                // An empty list sets '' — which PostgreSQL reads as "no department" (fails closed).
                self.begin_with(org, &scope).await
            }
        }
    }

    /// Like [`Database::begin_org`], in one `REPEATABLE READ` snapshot: every statement sees the organization as it
    /// was at the transaction's first read (an export and the fingerprint it records read the same rows).
    pub async fn begin_org_snapshot(&self, org: OrgId) -> Result<OrgTx, DbError> {
        self.begin_in(org, "all", Some("BEGIN ISOLATION LEVEL REPEATABLE READ")).await
    }

    async fn begin_with(&self, org: OrgId, dept_scope: &str) -> Result<OrgTx, DbError> {
        self.begin_in(org, dept_scope, None).await
    }

    async fn begin_in(&self, org: OrgId, dept_scope: &str, begin: Option<&'static str>) -> Result<OrgTx, DbError> {
        let mut tx = match begin {
            Some(statement) => self.pool.begin_with(statement).await?,
            None => self.pool.begin().await?,
        };
        // `SET LOCAL` rather than `set_config(…, true)`: the same transaction-scoped setting, and the form Citus
        // forwards to its workers (`citus.propagate_set_commands = 'local'`, docs/scaling.md). Both values are
        // built here from UUIDs ("all", or UUIDs joined by commas), so quoting them cannot be escaped; the check
        // below keeps it that way.
        if !dept_scope.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ',') {
            return Err(DbError::Url(format!("invalid department scope {dept_scope:?}")));
        }
        // Every request's statements are bounded in time (a runaway filter or an unlucky plan cannot hold a
        // connection for long); a transaction left idle is ended by the server too.
        let set = format!(
            "SET LOCAL app.org_id = '{}'; SET LOCAL app.dept_scope = '{dept_scope}'; \
             SET LOCAL statement_timeout = {}; SET LOCAL idle_in_transaction_session_timeout = {}; \
             SET LOCAL lock_timeout = {}",
            org.as_uuid().hyphenated(),
            millis(self.options.statement_timeout),
            millis(self.options.statement_timeout.max(self.options.export_statement_timeout)),
            millis(self.options.lock_timeout),
        );
        (&mut *tx).execute(set.as_str()).await?;
        Ok(OrgTx {
            tx,
            org,
            long_timeout: self.options.export_statement_timeout,
            lock_timeout: self.options.lock_timeout,
            distributed: self.distributed,
        })
    }

    /// The only door that looks across organizations: resolving a slug and creating an organization, through
    /// SECURITY DEFINER functions that return nothing else.
    pub fn cross_org_directory(&self) -> CrossOrgDirectory<'_> {
        CrossOrgDirectory { pool: &self.pool }
    }

    /// The operator's door across organizations (`gpuledger-server org …`): the list of organizations and the
    /// operator log, through SECURITY DEFINER functions owned by `gpuledger_directory` that return nothing of any
    /// organization's data. Never called by a request handler; what the operator changes in one organization goes
    /// through that organization's own transaction (the `orgs` module).
    pub fn cross_org_operator(&self) -> CrossOrgOperator<'_> {
        CrossOrgOperator { pool: &self.pool }
    }

    /// The server's own upkeep across organizations (telemetry partitions): loudly named, like
    /// [`Database::cross_org_directory`], and limited to SECURITY DEFINER functions that return counts.
    pub fn cross_org_maintenance(&self) -> CrossOrgMaintenance<'_> {
        CrossOrgMaintenance { pool: &self.pool }
    }

    /// Whether the database answers and its schema matches this binary.
    pub async fn readiness(&self) -> Readiness {
        let expected = latest_migration();
        let probe = async {
            let mut conn = self.pool.acquire().await?;
            // An unmigrated database has no migrations table: reachable, nothing applied.
            let has_table: bool = sqlx::query_scalar("SELECT to_regclass('public._sqlx_migrations') IS NOT NULL")
                .fetch_one(&mut *conn)
                .await?;
            if !has_table {
                return Ok(None);
            }
            let applied: Option<i64> = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(&mut *conn)
                .await?;
            Ok::<_, sqlx::Error>(applied)
        };
        match tokio::time::timeout(Duration::from_secs(3), probe).await {
            Ok(Ok(applied)) => Readiness { reachable: true, applied, expected },
            _ => Readiness { reachable: false, applied: None, expected },
        }
    }

    /// Closes the pool, waiting for connections in use.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn millis(d: Duration) -> u128 {
    d.as_millis().max(1)
}

/// Commits of this process so far (any organization): a page kept by the page cache (`pagecache`) asks the database for
/// its organization's generation again after any of them, so this process never serves a page older than its own
/// last write.
static COMMITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of organization-scoped commits this process has made (see [`OrgTx::commit`]).
pub fn commits() -> u64 {
    COMMITS.load(std::sync::atomic::Ordering::Acquire)
}

/// A transaction with `app.org_id` set for its lifetime.
pub struct OrgTx {
    tx: Transaction<'static, Postgres>,
    org: OrgId,
    long_timeout: Duration,
    lock_timeout: Duration,
    distributed: bool,
}

impl OrgTx {
    /// Whether the database is a distributed Citus coordinator (see the `bulk` module).
    pub fn distributed(&self) -> bool {
        self.distributed
    }

    /// The organization this transaction is scoped to.
    pub fn org(&self) -> OrgId {
        self.org
    }

    /// The connection, for queries inside the transaction.
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// Lifts this transaction's `statement_timeout` to the export limit: exports read whole months and stream them,
    /// but still end.
    pub async fn allow_long_statements(&mut self) -> Result<(), DbError> {
        let set = format!("SET LOCAL statement_timeout = {}", millis(self.long_timeout));
        (&mut *self.tx).execute(set.as_str()).await?;
        Ok(())
    }

    /// Takes the transaction-scoped advisory lock `(class, key)`, waiting for whoever holds it (a refresh or a close
    /// of the same organization, which may take a while) up to the statement limit rather than the short
    /// `lock_timeout`; later statements are bound by `lock_timeout` again.
    pub async fn wait_for_turn(&mut self, class: i32, key: i32) -> Result<(), DbError> {
        (&mut *self.tx).execute("SET LOCAL lock_timeout = 0").await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)").bind(class).bind(key).execute(&mut *self.tx).await?;
        let reset = format!("SET LOCAL lock_timeout = {}", millis(self.lock_timeout));
        (&mut *self.tx).execute(reset.as_str()).await?;
        Ok(())
    }

    /// Commits; the organization setting ends with the transaction. A transaction that wrote anything marks the
    /// organization's open months as changed (`read_dirty`), so the read model's refresh worker recomputes them:
    /// no handler has to remember to say so (see [`OrgTx::commit_quiet`] for the writes that change no figures).
    pub async fn commit(mut self) -> Result<(), DbError> {
        // On Citus the organization's rows are written on the worker that holds its shard group, and the
        // coordinator's own transaction gets no ID: whether this transaction wrote is asked there too, by a statement
        // routed to that shard group (Citus runs it on the connection that wrote, so it sees the same transaction).
        // Without it no ingest on Citus marked the open months as changed (found by scripts/citus-test).
        let wrote_on_worker = if self.distributed {
            let (wrote, _): (bool, i64) = sqlx::query_as(
                "SELECT pg_current_xact_id_if_assigned() IS NOT NULL, count(*) FROM read_dirty WHERE org_id = $1",
            )
            .bind(self.org.as_uuid())
            .fetch_one(&mut *self.tx)
            .await?;
            wrote
        } else {
            false
        };
        sqlx::query(
            "INSERT INTO read_dirty (org_id) SELECT $1 WHERE $2 OR pg_current_xact_id_if_assigned() IS NOT NULL
             ON CONFLICT (org_id) DO NOTHING",
        )
        .bind(self.org.as_uuid())
        .bind(wrote_on_worker)
        .execute(&mut *self.tx)
        .await?;
        self.tx.commit().await?;
        COMMITS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// Commits without marking the open months as changed: for writes that change no figure (a credential's
    /// last use, a session's last activity, the read model's own refresh).
    pub async fn commit_quiet(self) -> Result<(), DbError> {
        self.tx.commit().await?;
        COMMITS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// Commits a credential's own bookkeeping (a session's or token's last use): no figure changes and no kept page
    /// goes stale, so unlike the other commits it is not counted in [`commits`].
    pub async fn commit_identity(self) -> Result<(), DbError> {
        Ok(self.tx.commit().await?)
    }

    /// Rolls back explicitly (dropping does the same).
    pub async fn rollback(self) -> Result<(), DbError> {
        Ok(self.tx.rollback().await?)
    }
}

/// See [`Database::cross_org_directory`].
pub struct CrossOrgDirectory<'a> {
    pool: &'a PgPool,
}

impl CrossOrgDirectory<'_> {
    /// The organization with this slug, if any.
    pub async fn org_id_by_slug(&self, slug: &str) -> Result<Option<OrgId>, DbError> {
        let id: Option<uuid::Uuid> =
            sqlx::query_scalar("SELECT gpuledger_org_id_by_slug($1)").bind(slug).fetch_one(self.pool).await?;
        Ok(id.map(OrgId::from_uuid))
    }

    /// Creates an organization, or returns the existing one with this slug.
    pub async fn create_org(&self, id: OrgId, slug: &str, name: &str) -> Result<OrgId, DbError> {
        let id: uuid::Uuid = sqlx::query_scalar("SELECT gpuledger_create_org($1, $2, $3)")
            .bind(id.as_uuid())
            .bind(slug)
            .bind(name)
            .fetch_one(self.pool)
            .await?;
        Ok(OrgId::from_uuid(id))
    }
}

/// An organization as the operator lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorOrg {
    /// Its id.
    pub org: OrgId,
    /// Its slug.
    pub slug: String,
    /// Its display name.
    pub name: String,
    /// When it was created.
    pub created_at: time::OffsetDateTime,
    /// `active` or `suspended`.
    pub state: String,
    /// When the state last changed.
    pub state_changed_at: time::OffsetDateTime,
    /// Why it was suspended (empty when not said).
    pub state_reason: String,
    /// API requests per minute allowed (`None`: no limit).
    pub rate_limit_per_minute: Option<i32>,
    /// Facts its agents may send per UTC day (`None`: no limit).
    pub ingest_facts_per_day: Option<i64>,
}

/// One entry of the operator log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorLogEntry {
    /// When.
    pub at: time::OffsetDateTime,
    /// Who (`operator:<user>`).
    pub actor: String,
    /// What (`org.create`, `org.suspend`, …).
    pub action: String,
    /// The organization's slug.
    pub org_slug: String,
    /// The organization's id (kept after it was deleted).
    pub org: Option<OrgId>,
    /// Details.
    pub details: serde_json::Value,
}

type OperatorOrgRow =
    (uuid::Uuid, String, String, time::OffsetDateTime, String, time::OffsetDateTime, String, Option<i32>, Option<i64>);

/// See [`Database::cross_org_operator`].
pub struct CrossOrgOperator<'a> {
    pool: &'a PgPool,
}

impl CrossOrgOperator<'_> {
    /// Every organization, by slug.
    pub async fn organizations(&self) -> Result<Vec<OperatorOrg>, DbError> {
        let rows: Vec<OperatorOrgRow> = sqlx::query_as(
            "SELECT org_id, slug, name, created_at, state, state_changed_at, state_reason, rate_limit_per_minute,
                    ingest_facts_per_day
               FROM gpuledger_operator_orgs()",
        )
        .fetch_all(self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(org, slug, name, created_at, state, state_changed_at, state_reason, rate, ingest)| OperatorOrg {
                org: OrgId::from_uuid(org),
                slug,
                name,
                created_at,
                state,
                state_changed_at,
                state_reason,
                rate_limit_per_minute: rate,
                ingest_facts_per_day: ingest,
            })
            .collect())
    }

    /// The operator log, newest first: of one slug, or of every organization.
    pub async fn log(&self, slug: Option<&str>, limit: i32) -> Result<Vec<OperatorLogEntry>, DbError> {
        let rows: Vec<(time::OffsetDateTime, String, String, String, Option<uuid::Uuid>, serde_json::Value)> =
            sqlx::query_as(
                "SELECT at, actor, action, org_slug, org_ref, details FROM gpuledger_operator_log_read($1, $2)",
            )
            .bind(slug)
            .bind(limit)
            .fetch_all(self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(at, actor, action, org_slug, org, details)| OperatorLogEntry {
                at,
                actor,
                action,
                org_slug,
                org: org.map(OrgId::from_uuid),
                details,
            })
            .collect())
    }
}

/// See [`Database::cross_org_maintenance`].
pub struct CrossOrgMaintenance<'a> {
    pool: &'a PgPool,
}

impl CrossOrgMaintenance<'_> {
    /// The organizations that still have telemetry stored before the tiers (`telemetry_rollups`), which the
    /// upkeep moves into them.
    pub async fn legacy_telemetry_orgs(&self) -> Result<Vec<OrgId>, DbError> {
        let ids: Vec<uuid::Uuid> =
            sqlx::query_scalar("SELECT gpuledger_legacy_telemetry_orgs()").fetch_all(self.pool).await?;
        Ok(ids.into_iter().map(OrgId::from_uuid).collect())
    }

    /// The organizations that still have telemetry in the tables before one row per GPU-hour (migration 31),
    /// which the upkeep moves into `telemetry_gpu_hours`.
    pub async fn old_tier_orgs(&self) -> Result<Vec<OrgId>, DbError> {
        let ids: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT gpuledger_old_tier_orgs()").fetch_all(self.pool).await?;
        Ok(ids.into_iter().map(OrgId::from_uuid).collect())
    }

    /// Makes the telemetry partitions of the months `from..=through` and of any month waiting in the default
    /// partition; returns how many it made.
    pub async fn telemetry_partitions(&self, from: time::Date, through: time::Date) -> Result<i32, DbError> {
        let made: i32 = sqlx::query_scalar("SELECT gpuledger_maintain_telemetry_partitions($1, $2)")
            .bind(from)
            .bind(through)
            .fetch_one(self.pool)
            .await?;
        Ok(made)
    }

    /// The organizations whose open-month figures the read model's worker should refresh now: changed at least
    /// `quiet` ago and not refreshed within `min_interval`.
    pub async fn read_refresh_due(&self, quiet: Duration, min_interval: Duration) -> Result<Vec<OrgId>, DbError> {
        let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
            "SELECT gpuledger_read_refresh_due(make_interval(secs => $1), make_interval(secs => $2))",
        )
        .bind(quiet.as_secs_f64())
        .bind(min_interval.as_secs_f64())
        .fetch_all(self.pool)
        .await?;
        Ok(ids.into_iter().map(OrgId::from_uuid).collect())
    }

    /// The organizations with an active webhook (the notifier checks their conditions and deliveries).
    pub async fn notify_orgs(&self) -> Result<Vec<OrgId>, DbError> {
        let ids: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT gpuledger_notify_due()").fetch_all(self.pool).await?;
        Ok(ids.into_iter().map(OrgId::from_uuid).collect())
    }

    /// The (organization, month) pairs whose stored summaries do not go with their current figures, newest month
    /// first, at most `limit`.
    pub async fn read_summaries_due(&self, limit: i32) -> Result<Vec<(OrgId, time::Date)>, DbError> {
        let rows: Vec<(uuid::Uuid, time::Date)> =
            sqlx::query_as("SELECT org_id, period FROM gpuledger_read_summaries_due($1)")
                .bind(limit)
                .fetch_all(self.pool)
                .await?;
        Ok(rows.into_iter().map(|(o, p)| (OrgId::from_uuid(o), p)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::Readiness;

    #[test]
    fn ready_at_this_binarys_schema_or_a_newer_one_never_an_older_one() {
        let r = |reachable, applied, expected| Readiness { reachable, applied, expected }.is_ready();
        assert!(r(true, Some(11), Some(11)));
        assert!(r(true, Some(12), Some(11)), "the old replicas stay ready after the upgrade's migration");
        assert!(!r(true, Some(10), Some(11)));
        assert!(!r(true, None, Some(11)), "nothing applied");
        assert!(!r(false, Some(11), Some(11)), "unreachable");
        assert!(!r(true, None, None));
    }

    /// A refused connection is waited for up to the bound, then named; no wait fails at once.
    #[tokio::test]
    async fn an_unreachable_database_is_waited_for_within_the_bound() {
        #![allow(clippy::unwrap_used)]
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("postgres://nobody@127.0.0.1:{port}/none");
        let started = std::time::Instant::now();
        let e = super::connect_waiting(&url, std::time::Duration::ZERO).await.unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_millis(500), "{e}");
        let started = std::time::Instant::now();
        let e = super::connect_waiting(&url, std::time::Duration::from_secs(2)).await.unwrap_err();
        let waited = started.elapsed();
        assert!(
            waited >= std::time::Duration::from_millis(700) && waited < std::time::Duration::from_secs(4),
            "{waited:?}"
        );
        assert!(e.to_string().to_lowercase().contains("refused"), "{e}");
    }
}
