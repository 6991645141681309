//! The command line: `serve`, `demo`, `migrate`, `token`, `org`. Every flag has an environment fallback (see README).

use std::{
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{
    app::{self, AppState, HttpOptions},
    auth,
    db::{self, AppLogin, Database},
    demo,
    embedded::{self, EmbeddedPostgres},
    health,
};

pub mod org;
pub use org::OrgCommand;
pub(crate) use org::org_command;

/// GPU Ledger server: who used the GPU, and what do they owe.
#[derive(Debug, Parser)]
#[command(name = "gpuledger-server", version, about)]
pub struct Cli {
    /// PostgreSQL URL. Without it, a private cluster is run from the machine's `initdb`/`pg_ctl` under
    /// --data-dir. A superuser URL is migrated automatically and requests run as `gpuledger_app` (SET ROLE);
    /// otherwise the URL must log in as `gpuledger_app` and `migrate` is run separately.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Where the embedded default database lives (ignored with DATABASE_URL). Default: /var/lib/gpuledger
    /// as root, else $XDG_DATA_HOME/gpuledger (or ~/.local/share/gpuledger); `demo` adds `/demo`.
    #[arg(long, env = "GPULEDGER_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Directory holding `initdb` and `pg_ctl`, when they are not on PATH.
    #[arg(long, env = "GPULEDGER_PG_BIN_DIR", global = true)]
    pub pg_bin_dir: Option<PathBuf>,
    /// How long to wait for a DATABASE_URL that is unreachable or still starting when the server starts (it and its
    /// database may start in any order), in seconds; 0 fails at once.
    #[arg(long, env = "GPULEDGER_DATABASE_WAIT_SECS", global = true, default_value_t = 120)]
    pub database_wait_secs: u64,
    /// Log format on stderr. The level comes from RUST_LOG (default `info`).
    #[arg(long, env = "GPULEDGER_LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Run the server with the `demo` organization seeded: the first-run experience.
    Demo(DemoArgs),
    /// Apply database migrations and exit.
    Migrate,
    /// Recompute a closed period's evidence bundle offline (no database) and check every line and the hash;
    /// exits 0 only when all match, else names each line that differs.
    Verify {
        /// The bundle file (`GET /api/v1/periods/YYYY-MM/bundle`); `-` reads stdin.
        bundle: PathBuf,
    },
    /// Print the lines recomputed from an evidence bundle's inputs as CSV (change an input, see the effect).
    Recompute {
        /// The bundle file; `-` reads stdin.
        bundle: PathBuf,
    },
    /// API tokens for machines (agents, Power BI, automation).
    Token {
        /// What to do with tokens.
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Organizations (operators): create, list, suspend, resume, limits, setup links, export, delete.
    Org {
        /// What to do with organizations.
        #[command(subcommand)]
        command: OrgCommand,
    },
}

/// Token commands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it once on stdout (only its hash is stored).
    Create(TokenCreateArgs),
}

/// Options of `token create`.
#[derive(Debug, Clone, Args)]
pub struct TokenCreateArgs {
    /// Organization slug.
    #[arg(long)]
    pub org: String,
    /// `admin`, `export`, `agent:CLUSTER`, or `join:CLUSTER` (a one-time token, valid 24 h, that
    /// `gpuledger-agent join` exchanges for the cluster's credential). The cluster is registered if new.
    #[arg(long)]
    pub scope: String,
    /// A label to recognise the token by.
    #[arg(long, default_value = "")]
    pub name: String,
    /// Limits an export token to a department (by name); repeat for several. Without it an export token
    /// reads the whole organization.
    #[arg(long = "department")]
    pub departments: Vec<String>,
    /// Days until the token expires (join tokens: at most 24 h whatever this says). Default: no expiry.
    #[arg(long)]
    pub expires_in_days: Option<i64>,
}

/// Options of `serve` and `demo`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "GPULEDGER_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Requests running longer are answered 408.
    #[arg(long, env = "GPULEDGER_REQUEST_TIMEOUT_SECS", default_value_t = 30)]
    pub request_timeout_secs: u64,
    /// Largest accepted request body, in bytes (larger ones get 413).
    #[arg(long, env = "GPULEDGER_BODY_LIMIT_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub body_limit_bytes: usize,
    /// Size of the application's database connection pool.
    #[arg(long, env = "GPULEDGER_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
    /// The portal's public base URL, e.g. `https://ledger.example.com` (OIDC redirect URI, cookie security).
    /// Unset: taken from the request's Host over plain HTTP, which is right only on loopback.
    #[arg(long, env = "GPULEDGER_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Minutes after which an unused browser session ends.
    #[arg(long, env = "GPULEDGER_SESSION_IDLE_MINUTES", default_value_t = 30)]
    pub session_idle_minutes: i64,
    /// Hours after which a browser session ends, used or not.
    #[arg(long, env = "GPULEDGER_SESSION_MAX_HOURS", default_value_t = 12)]
    pub session_max_hours: i64,
    /// Sign-in and token-creation attempts allowed per client address and minute.
    #[arg(long, env = "GPULEDGER_LOGIN_RATE_PER_MINUTE", default_value_t = 30)]
    pub login_rate_per_minute: u32,
    /// Directory of OpenID Connect client secrets, one file per organization named by its slug (e.g. a mounted
    /// Kubernetes Secret). An organization's file takes precedence over the secret stored with its provider.
    #[arg(long, env = "GPULEDGER_OIDC_SECRETS_DIR")]
    pub oidc_secrets_dir: Option<PathBuf>,
    /// Milliseconds a request waits for a free database connection before it is answered 503 with Retry-After.
    #[arg(long, env = "GPULEDGER_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 3000)]
    pub db_acquire_timeout_ms: u64,
    /// PostgreSQL `statement_timeout` of every request's transaction, in seconds.
    #[arg(long, env = "GPULEDGER_STATEMENT_TIMEOUT_SECS", default_value_t = 30)]
    pub statement_timeout_secs: u64,
    /// `statement_timeout` of exports (CSV, FOCUS, OData), which read whole months, in seconds.
    #[arg(long, env = "GPULEDGER_EXPORT_STATEMENT_TIMEOUT_SECS", default_value_t = 300)]
    pub export_statement_timeout_secs: u64,
    /// PostgreSQL `lock_timeout` of every request's transaction, in milliseconds: a request waiting this long for
    /// a lock (a Citus shard being moved, a row another request holds) is answered 503 with Retry-After. Kept below
    /// the statement timeout.
    #[arg(long, env = "GPULEDGER_LOCK_TIMEOUT_MS", default_value_t = 10_000)]
    pub lock_timeout_ms: u64,
    /// Heavy reads (ledger previews, exports, OData pages, analytics) one organization may run at once; more
    /// wait up to 10 s, then get 503 with Retry-After.
    #[arg(long, env = "GPULEDGER_HEAVY_READS_PER_ORG", default_value_t = crate::limits::DEFAULT_HEAVY_READS_PER_ORG)]
    pub heavy_reads_per_org: usize,
    /// Largest agent batch once decompressed, in bytes (larger ones get 413).
    #[arg(long, env = "GPULEDGER_INGEST_MAX_DECODED_BYTES", default_value_t = crate::ingest::DEFAULT_MAX_DECODED_BYTES)]
    pub ingest_max_decoded_bytes: u64,
    /// Days before its cluster's registration that a measured window (telemetry, model-server, training) may
    /// start; older facts are refused with the reason.
    #[arg(long, env = "GPULEDGER_INGEST_BACKFILL_DAYS", default_value_t = crate::limits::DEFAULT_BACKFILL_DAYS)]
    pub ingest_backfill_days: i64,
    /// The open month's figures are recomputed within this many seconds of a change (the read model's staleness
    /// bound); pages built from an older snapshot say so.
    #[arg(long, env = "GPULEDGER_SNAPSHOT_MAX_AGE_SECS", default_value_t = 60)]
    pub snapshot_max_age_secs: u64,
    /// Seconds between the notifier's rounds: budgets the forecast passes and idle reservations are noticed, and
    /// webhook deliveries due are sent, within this.
    #[arg(long, env = "GPULEDGER_NOTIFY_INTERVAL_SECS", default_value_t = 30)]
    pub notify_interval_secs: u64,
    /// Let webhooks point at a loopback receiver (plain http allowed for it): a receiver on this machine. `demo`
    /// turns it on.
    #[arg(long, env = "GPULEDGER_WEBHOOK_ALLOW_LOOPBACK")]
    pub webhook_allow_loopback: bool,
    /// Let webhooks point at private, link-local or unique-local addresses (receivers inside your own network).
    /// Otherwise such targets are refused, so an organization admin cannot make the server call internal services.
    #[arg(long, env = "GPULEDGER_WEBHOOK_ALLOW_PRIVATE")]
    pub webhook_allow_private: bool,
    /// Accept an identity provider issuer over plain `http://` when its host is loopback (a provider on the same
    /// machine, as in tests). Otherwise issuers must be https.
    #[arg(long, env = "GPULEDGER_OIDC_ALLOW_HTTP_LOOPBACK")]
    pub oidc_allow_http_loopback: bool,
    /// Accept an identity provider whose host resolves to a loopback, private, link-local or unique-local address
    /// (a provider inside your own network). Otherwise such issuers are refused, so an organization admin cannot
    /// make the server reach internal services.
    #[arg(long, env = "GPULEDGER_OIDC_ALLOW_PRIVATE_ISSUER")]
    pub oidc_allow_private_issuer: bool,
    /// Reverse proxies (comma-separated IP addresses or CIDR ranges) whose `X-Forwarded-For` names the client
    /// for rate limits and the audit log. Default: none (the TCP peer is the client).
    #[arg(long, env = "GPULEDGER_TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: String,
    /// Let `serve` run with a DATABASE_URL that logs in as a superuser (development only; it migrates and
    /// serves as gpuledger_app via SET ROLE). Without it `serve` refuses such a URL. Not needed by `demo`.
    #[arg(long, env = "GPULEDGER_ALLOW_SUPERUSER_DATABASE_URL")]
    pub allow_superuser_database_url: bool,
}

impl ServeArgs {
    /// Pool and statement limits from these options.
    pub fn db_options(&self) -> db::DbOptions {
        db::DbOptions {
            max_connections: self.db_max_connections.max(1),
            acquire_timeout: Duration::from_millis(self.db_acquire_timeout_ms.max(1)),
            statement_timeout: Duration::from_secs(self.statement_timeout_secs.max(1)),
            export_statement_timeout: Duration::from_secs(
                self.export_statement_timeout_secs.max(self.statement_timeout_secs).max(1),
            ),
            lock_timeout: Duration::from_millis(
                self.lock_timeout_ms.clamp(1, self.statement_timeout_secs.max(1).saturating_mul(1000)),
            ),
        }
    }

    /// Request limits from these options.
    pub fn limits(&self) -> anyhow::Result<crate::limits::ServerLimits> {
        if !(1..=3650).contains(&self.ingest_backfill_days) {
            anyhow::bail!("--ingest-backfill-days: between 1 and 3650");
        }
        if self.ingest_max_decoded_bytes < 1024 * 1024 {
            anyhow::bail!("--ingest-max-decoded-bytes: at least 1048576 (the agent sends batches of up to 8 MiB)");
        }
        let defaults = crate::limits::ServerLimits::default();
        Ok(crate::limits::ServerLimits {
            ingest: crate::ingest::IngestLimits { max_decoded_bytes: self.ingest_max_decoded_bytes, ..defaults.ingest },
            backfill: time::Duration::days(self.ingest_backfill_days),
            heavy: crate::limits::HeavyReads::new(self.heavy_reads_per_org, Duration::from_secs(10)),
            snapshot_max_age: time::Duration::seconds(i64::try_from(self.snapshot_max_age_secs).unwrap_or(60)),
            outbound: self.outbound(false),
        })
    }

    /// Where webhooks may point; `demo_mode` allows loopback receivers.
    pub fn outbound(&self, demo_mode: bool) -> crate::notifications::OutboundPolicy {
        crate::notifications::OutboundPolicy {
            allow_loopback: self.webhook_allow_loopback || demo_mode,
            allow_private: self.webhook_allow_private,
        }
    }

    /// Sign-in settings from these options; `demo_mode` only for `demo` (it offers the demo sign-in).
    pub fn auth(&self, demo_mode: bool) -> anyhow::Result<crate::auth::AuthState> {
        if let Some(url) = &self.public_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            anyhow::bail!("--public-url: expected an http(s) URL, got {url:?}");
        }
        if self.session_idle_minutes < 1 || self.session_max_hours < 1 {
            anyhow::bail!("--session-idle-minutes and --session-max-hours must be at least 1");
        }
        Ok(crate::auth::AuthState {
            sessions: crate::auth::session::SessionSettings {
                idle: time::Duration::minutes(self.session_idle_minutes),
                absolute: time::Duration::hours(self.session_max_hours),
                public_url: self.public_url.clone(),
            },
            limits: crate::auth::limits::RateLimits::new(self.login_rate_per_minute.max(1), Duration::from_secs(60)),
            providers: crate::auth::oidc::Providers::new(
                self.oidc_secrets_dir.clone(),
                crate::auth::oidc::IssuerPolicy {
                    allow_http_loopback: self.oidc_allow_http_loopback,
                    allow_private: self.oidc_allow_private_issuer,
                },
            ),
            demo_mode,
            trusted_proxies: crate::auth::net::Cidr::parse_list(&self.trusted_proxies)
                .map_err(|e| anyhow::anyhow!("--trusted-proxies: {e}"))?,
        })
    }
}

/// Options of `demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Serving options.
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Send the demo history again even when an earlier run loaded it up to this hour (the server stores the
    /// duplicates once; useful to check idempotency).
    #[arg(long, env = "GPULEDGER_DEMO_RELOAD")]
    pub reload: bool,
    /// Load the demo's three months of history and close its ledger (`--history false`: only the organization,
    /// its tenants, clusters and inventory — what tests of the agents need, in seconds).
    #[arg(long, env = "GPULEDGER_DEMO_HISTORY", default_value_t = true, action = clap::ArgAction::Set)]
    pub history: bool,
    /// Instead of the agents' history, a synthetic fleet of this many GPUs (40 to 100,000, whole nodes of 8) in
    /// every sharing mode, from the start of last month to now: last month closed, this month open. Loaded once
    /// per data directory; 10,000 GPUs take minutes (`/readyz` answers 503 until then).
    #[arg(long, env = "GPULEDGER_DEMO_GPUS", value_parser = clap::value_parser!(u64).range(40..=100_000))]
    pub gpus: Option<u64>,
    /// With `--gpus`: keep the fleet's full-resolution windows only for its last this-many days, as the retention
    /// job run with `--full-resolution-days N` would have left them (the hourly sums stay for every hour). Unset:
    /// every hour keeps its windows. For fleets larger than the disk (100,000 GPUs need ~80 GB with every block).
    #[arg(long, env = "GPULEDGER_DEMO_FULL_RESOLUTION_DAYS", requires = "gpus", value_parser = clap::value_parser!(u32).range(0..=366))]
    pub full_resolution_days: Option<u32>,
}

/// The default data directory for the embedded database.
pub fn default_data_dir() -> PathBuf {
    if embedded::is_root() {
        return PathBuf::from("/var/lib/gpuledger");
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("gpuledger");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/gpuledger"),
        None => PathBuf::from("gpuledger-data"),
    }
}

/// The database the command works against: an outside server, or the embedded default (kept running
/// until dropped or stopped).
pub struct Target {
    /// The embedded cluster, when no DATABASE_URL was given.
    pub embedded: Option<EmbeddedPostgres>,
    /// Applied migrations and opened the app pool.
    pub db: Database,
}

impl Target {
    /// Stops the embedded cluster, if any.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.db.close().await;
        if let Some(pg) = self.embedded {
            tokio::task::spawn_blocking(move || pg.stop()).await??;
        }
        Ok(())
    }
}

async fn start_embedded(cli: &Cli, data_dir: PathBuf) -> anyhow::Result<EmbeddedPostgres> {
    let bin_dir = cli.pg_bin_dir.clone();
    tracing::info!(data_dir = %data_dir.display(), "no DATABASE_URL: using the embedded default database");
    let pg = tokio::task::spawn_blocking(move || EmbeddedPostgres::start(&data_dir, bin_dir.as_deref())).await??;
    embedded::prepare(&pg).await?;
    Ok(pg)
}

/// Opens the database for serving: migrates when the login may, then opens the app pool. A superuser
/// DATABASE_URL is refused unless `superuser_ok` (`demo`, `token create`, or `serve
/// --allow-superuser-database-url`); the embedded default database is not a URL the operator gave and is always
/// fine.
pub async fn open(
    cli: &Cli,
    data_dir: PathBuf,
    db_options: db::DbOptions,
    superuser_ok: bool,
) -> anyhow::Result<Target> {
    match &cli.database_url {
        Some(url) => {
            let login = {
                use sqlx::Connection;
                let wait = std::time::Duration::from_secs(cli.database_wait_secs);
                let mut conn = db::connect_waiting(url, wait).await?;
                let role = db::role_info(&mut conn).await?;
                conn.close().await?;
                if role.superuser && !superuser_ok {
                    anyhow::bail!(
                        "DATABASE_URL logs in as the superuser {:?}: `serve` refuses it (a superuser bypasses \
                         row-level security). Log in as gpuledger_app and run `gpuledger-server migrate` \
                         separately, or, for development only, pass --allow-superuser-database-url \
                         (GPULEDGER_ALLOW_SUPERUSER_DATABASE_URL=true)",
                        role.name
                    );
                }
                if role.superuser {
                    tracing::warn!(
                        role = %role.name,
                        "DATABASE_URL logs in as a superuser: migrating, then running requests as gpuledger_app \
                         (SET ROLE). In production, log in as gpuledger_app and run `migrate` separately."
                    );
                    match db::migrate(url).await {
                        // The schema is ahead of this binary (a rollback after an upgrade's migration): serve
                        // against it; migrations only ever expand what an older release reads.
                        Err(db::DbError::Migrate(sqlx::migrate::MigrateError::VersionMissing(v))) => {
                            tracing::warn!(applied = v, expected = ?db::latest_migration(),
                                "the database has migrations this binary does not know; serving without migrating");
                        }
                        r => r?,
                    }
                    AppLogin::SetRole
                } else {
                    AppLogin::Direct
                }
            };
            let db = Database::connect_with(url, login, db_options).await?;
            let readiness = db.readiness().await;
            if !readiness.is_ready() {
                tracing::warn!(applied = ?readiness.applied, expected = ?readiness.expected,
                    "schema is not current: run `gpuledger-server migrate`; /readyz reports not ready until then");
            }
            Ok(Target { embedded: None, db })
        }
        None => {
            let pg = start_embedded(cli, data_dir).await?;
            let db = Database::connect_with(&pg.app_url(), AppLogin::Direct, db_options).await;
            match db {
                Ok(db) => Ok(Target { embedded: Some(pg), db }),
                Err(e) => {
                    tokio::task::spawn_blocking(move || pg.stop()).await??;
                    Err(e.into())
                }
            }
        }
    }
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Migrate => match &cli.database_url {
            Some(url) => {
                db::migrate(url).await?;
                tracing::info!(version = ?db::latest_migration(), "migrations applied");
                Ok(())
            }
            None => {
                let data_dir = cli.data_dir.clone().unwrap_or_else(default_data_dir);
                let pg = start_embedded(&cli, data_dir).await?;
                tracing::info!(version = ?db::latest_migration(), "migrations applied");
                tokio::task::spawn_blocking(move || pg.stop()).await??;
                Ok(())
            }
        },
        Command::Verify { bundle } => verify_bundle(bundle),
        Command::Recompute { bundle } => {
            let b = read_bundle(bundle)?;
            print!("{}", gpuledger_core::bundle::recompute_csv(&b.inputs)?);
            Ok(())
        }
        Command::Token { command: TokenCommand::Create(args) } => {
            let data_dir = cli.data_dir.clone().unwrap_or_else(default_data_dir);
            let target =
                open(&cli, data_dir, db::DbOptions { max_connections: 2, ..db::DbOptions::default() }, true).await?;
            let result = create_token(&target.db, args).await;
            target.shutdown().await?;
            let token = result?;
            println!("{token}");
            Ok(())
        }
        Command::Org { command } => {
            let data_dir = cli.data_dir.clone().unwrap_or_else(default_data_dir);
            // Exports and deletes read or remove a whole organization: generous statement limits.
            let options = db::DbOptions {
                max_connections: 2,
                statement_timeout: Duration::from_secs(3600),
                export_statement_timeout: Duration::from_secs(24 * 3600),
                ..db::DbOptions::default()
            };
            let target = open(&cli, data_dir, options, true).await?;
            let result = org_command(&target.db, command).await;
            target.shutdown().await?;
            result
        }
        Command::Serve(args) => {
            let data_dir = cli.data_dir.clone().unwrap_or_else(default_data_dir);
            serve(&cli, args, data_dir, None).await
        }
        Command::Demo(args) => {
            let data_dir = cli.data_dir.clone().unwrap_or_else(|| default_data_dir().join("demo"));
            // The demo's clock: everything below takes `now` from here.
            let now = time::OffsetDateTime::now_utc();
            let gpus = args.gpus.map(|g| usize::try_from(g).unwrap_or(demo::fleet::MAX_GPUS));
            let run = DemoRun {
                now,
                reload: args.reload,
                history: args.history,
                gpus,
                full_resolution_days: args.full_resolution_days,
            };
            serve(&cli, &args.serve, data_dir, Some(run)).await
        }
    }
}

fn read_bundle(path: &std::path::Path) -> anyhow::Result<gpuledger_core::bundle::Bundle> {
    use std::io::Read;
    let mut raw = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut raw)?;
    } else {
        raw = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    // Accept the bundle gzipped too (as a browser or proxy may have saved it).
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw.as_slice()).read_to_end(&mut out)?;
        raw = out;
    }
    let de = &mut serde_json::Deserializer::from_slice(&raw);
    serde_path_to_error::deserialize(de)
        .map_err(|e| anyhow::anyhow!("{}: not an evidence bundle: at {}: {}", path.display(), e.path(), e.inner()))
}

fn verify_bundle(path: &std::path::Path) -> anyhow::Result<()> {
    let b = read_bundle(path)?;
    let v = gpuledger_core::bundle::verify(&b).map_err(|e| anyhow::anyhow!("cannot recompute {}: {e}", b.period))?;
    if v.ok() {
        println!(
            "OK {} {}: {} lines recomputed and equal; hash {} matches (policy v{}, inventory {}, previous {})",
            b.organization,
            b.period,
            v.recomputed,
            b.hash,
            b.policy_version,
            b.inventory_version,
            b.previous_hash.as_deref().unwrap_or("none")
        );
        return Ok(());
    }
    for d in &v.differences {
        println!("DIFFERS {d}");
    }
    anyhow::bail!("{} {}: {} difference(s); the bundle does not verify", b.organization, b.period, v.differences.len())
}

async fn create_token(db: &Database, args: &TokenCreateArgs) -> anyhow::Result<String> {
    let org = db
        .cross_org_directory()
        .org_id_by_slug(&args.org)
        .await?
        .ok_or_else(|| anyhow::anyhow!("--org: no organization with slug {:?}", args.org))?;
    let mut tx = db.begin_org(org).await?;
    let (scope, registered) = crate::access::tokens::parse_scope(&mut tx, args.scope.trim(), &args.departments)
        .await
        .map_err(|e| anyhow::anyhow!("--{e}"))?;
    if registered {
        eprintln!("registered cluster {:?}", args.scope.split_once(':').map(|(_, c)| c.trim()).unwrap_or_default());
    }
    let expires_at = match args.expires_in_days {
        None => None,
        Some(d) if (1..=3650).contains(&d) => Some(time::OffsetDateTime::now_utc() + time::Duration::days(d)),
        Some(_) => anyhow::bail!("--expires-in-days: between 1 and 3650"),
    };
    let (token_id, token) = auth::create_token(&mut tx, &scope, &args.name, "cli", expires_at).await?;
    tx.commit_quiet().await?; // credentials only: no figure changes
    eprintln!("created {} token {token_id} for organization {:?}; it is shown once:", args.scope, args.org);
    Ok(token)
}

/// A `demo` start: its clock and options.
#[derive(Debug, Clone, Copy)]
struct DemoRun {
    now: time::OffsetDateTime,
    reload: bool,
    history: bool,
    /// `--gpus`: a synthetic fleet instead of the agents' history.
    gpus: Option<usize>,
    /// `--full-resolution-days`: the fleet's windows kept for its last N days only.
    full_resolution_days: Option<u32>,
}

async fn serve(cli: &Cli, args: &ServeArgs, data_dir: PathBuf, demo: Option<DemoRun>) -> anyhow::Result<()> {
    let superuser_ok = demo.is_some() || args.allow_superuser_database_url;
    let target = open(cli, data_dir, args.db_options(), superuser_ok).await?;
    if target.embedded.as_ref().is_some_and(|pg| !pg.is_owner()) {
        let pgdata = target.embedded.as_ref().map(|pg| pg.pgdata().display().to_string()).unwrap_or_default();
        target.shutdown().await?;
        anyhow::bail!(
            "another gpuledger-server is already serving from {pgdata}; stop it or choose another --data-dir"
        );
    }
    let result = async {
        let http = HttpOptions {
            request_timeout: Duration::from_secs(args.request_timeout_secs),
            body_limit: args.body_limit_bytes,
        };
        let mut limits = args.limits()?;
        limits.outbound = args.outbound(demo.is_some());
        if !(5..=3600).contains(&args.snapshot_max_age_secs) {
            anyhow::bail!("--snapshot-max-age-secs: between 5 and 3600");
        }
        if !(1..=3600).contains(&args.notify_interval_secs) {
            anyhow::bail!("--notify-interval-secs: between 1 and 3600");
        }
        let _notifier = crate::notifications::worker::spawn(
            target.db.clone(),
            crate::notifications::worker::NotifyOptions {
                tick: Duration::from_secs(args.notify_interval_secs),
                policy: limits.outbound,
            },
        );
        let _maintenance = crate::maintenance::spawn(target.db.clone());
        let _read_model = crate::readmodel::worker::spawn(
            target.db.clone(),
            crate::readmodel::worker::RefreshOptions {
                max_age: Duration::from_secs(args.snapshot_max_age_secs),
                ..Default::default()
            },
        );
        let Some(run) = demo else {
            let state = AppState::with_auth(target.db.clone(), None, args.auth(false)?).with_limits(limits);
            app::serve(args.listen, app::router(state, &http)).await?;
            return anyhow::Ok(());
        };
        let org = demo::seed(&target.db).await?;
        tracing::info!(org = %org, "demo organization `demo` seeded");
        let state = AppState::with_auth(target.db.clone(), Some(org), args.auth(true)?).with_limits(limits);
        serve_demo(args.listen, app::router(state, &http), &target.db, org, run).await
    }
    .await;
    target.shutdown().await?;
    result
}

/// Serves while the demo history is loaded through this very server's ingest API; `/readyz` answers 503
/// ("demo data still loading") until it is in and the ledger is finished.
async fn serve_demo(
    listen: std::net::SocketAddr,
    router: axum::Router,
    db: &Database,
    org: gpuledger_core::ids::OrgId,
    run: DemoRun,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let local = listener.local_addr()?;
    tracing::info!(address = %local, "listening; portal at http://{local}/ (demo data still loading)");
    let gate = health::StartupGate::closed("demo data still loading");
    let service = gate.clone().guard(router).into_make_service_with_connect_info::<SocketAddr>();
    let server = axum::serve(listener, service).with_graceful_shutdown(app::shutdown_signal());
    let mut server = std::pin::pin!(server.into_future());
    // The demo's agents reach the server on loopback, whatever address it listens on.
    let ip = match local.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let base_url = format!("http://{}", std::net::SocketAddr::new(ip, local.port()));
    if !run.history {
        gate.open();
        tracing::info!("demo organization ready without history (--history false)");
        server.await?;
        return Ok(());
    }
    tokio::select! {
        stopped = &mut server => {
            // A shutdown signal arrived while loading: stop without finishing.
            stopped?;
            return Ok(());
        }
        loaded = async {
            match run.gpus {
                Some(gpus) => demo::prepare_fleet(db, org, gpus, run.full_resolution_days, run.now).await,
                None => demo::prepare(db, org, &base_url, run.now, run.reload).await,
            }
        } => {
            loaded.context("loading the demo data")?;
        }
    }
    // Every figure the pages show is stored before anyone is let in (no first reader waits for a computation).
    let settled = Instant::now();
    crate::readmodel::worker::settle(db, org).await.context("computing the demo's read model")?;
    tracing::info!(seconds = settled.elapsed().as_secs_f64(), "demo read model settled");
    gate.open();
    tracing::info!("demo data loaded; ready");
    server.await?;
    Ok(())
}
