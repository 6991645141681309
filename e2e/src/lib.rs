//! Test support shared by the crates' integration tests and the whole-system tests in `e2e/tests/`.
//!
//! [`cluster`] gives a PostgreSQL cluster for the whole test process: the one `DATABASE_URL` names (a
//! superuser URL; the project's test script starts one for the whole run), or else a throwaway cluster started
//! from the system's `initdb`/`pg_ctl` in a temporary directory and stopped when the process exits.
//! [`fresh_database`] makes an empty database in it for one test.
#![deny(missing_docs)]

use std::{
    io::Write,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{Mutex, OnceLock},
};

use anyhow::{Context, Result, bail};

pub mod browser;
pub mod chaos;
pub mod fake_kube;
pub mod oidc;
pub mod oidc_walk;
pub mod process;
pub mod stub;
pub mod synthetic;

/// A PostgreSQL cluster the tests may create databases in.
pub struct Cluster {
    /// `postgres://USER[:PASSWORD]@HOST:PORT` without a database name.
    base_url: String,
    /// Keeps the throwaway cluster's watchdog alive: when this process exits, its stdin closes and the
    /// watchdog stops the cluster and removes its directory.
    _watchdog: Option<Mutex<(Child, ChildStdin)>>,
}

impl Cluster {
    /// A superuser URL for `database`.
    pub fn url(&self, database: &str) -> String {
        format!("{}/{database}", self.base_url)
    }

    /// `postgres://gpuledger_app:PASSWORD@HOST:PORT/database` — the application role on `database`.
    pub fn app_url(&self, database: &str) -> Result<String> {
        let rest = self.base_url.split_once('@').map(|(_, host)| host).context("DATABASE_URL has no host part")?;
        Ok(format!("postgres://gpuledger_app:{APP_PASSWORD}@{rest}/{database}"))
    }
}

/// The password tests give the application role.
pub const APP_PASSWORD: &str = "gpuledger-test-app";

static CLUSTER: OnceLock<std::result::Result<Cluster, String>> = OnceLock::new();

/// The process-wide test cluster (started on first use).
pub fn cluster() -> Result<&'static Cluster> {
    CLUSTER
        .get_or_init(|| start_cluster().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("test PostgreSQL unavailable: {e}"))
}

fn start_cluster() -> Result<Cluster> {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        let base = url.rsplit_once('/').map(|(b, _)| b.to_string()).unwrap_or(url);
        return Ok(Cluster { base_url: base, _watchdog: None });
    }
    let initdb = find_program("initdb")?;
    let pg_ctl = find_program("pg_ctl")?;
    let root = is_root();
    let dir = std::env::temp_dir().join(format!("gpuledger-test-pg-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let runner = |program: &Path| {
        if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    };
    if root {
        let status = Command::new("chown").arg("postgres").arg(&dir).status()?;
        if !status.success() {
            bail!("cannot chown {} to the postgres OS user (initdb refuses root)", dir.display());
        }
    }
    let pgdata = dir.join("data");
    let out = runner(&initdb)
        .arg("-D")
        .arg(&pgdata)
        .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"])
        .output()
        .context("running initdb")?;
    if !out.status.success() {
        bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    // Test-only speedups: durability does not matter for a throwaway cluster.
    let options = format!(
        "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    );
    let out = runner(&pg_ctl)
        .arg("-D")
        .arg(&pgdata)
        .arg("-l")
        .arg(dir.join("log"))
        .args(["-w", "-t", "60", "-o", &options, "start"])
        .output()
        .context("running pg_ctl start")?;
    if !out.status.success() {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        bail!("pg_ctl start failed: {}{}", String::from_utf8_lossy(&out.stderr), log);
    }
    // The watchdog outlives nothing: it waits for EOF on stdin (our exit), then stops and removes the cluster.
    let stop = format!(
        "cat >/dev/null; {} {} -D '{}' -m immediate stop >/dev/null 2>&1; rm -rf '{}'",
        if root { "runuser -u postgres --" } else { "" },
        pg_ctl.display(),
        pgdata.display(),
        dir.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &stop])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the cluster watchdog")?;
    let mut stdin = child.stdin.take().context("watchdog stdin")?;
    stdin.flush()?;
    Ok(Cluster {
        base_url: format!("postgres://postgres@127.0.0.1:{port}"),
        _watchdog: Some(Mutex::new((child, stdin))),
    })
}

/// `initdb`, `pg_ctl`… on PATH or under `/usr/lib/postgresql/*/bin`.
pub fn find_program(name: &str) -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()))
        .unwrap_or(None);
    if let Some(p) = on_path {
        return Ok(p);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop().with_context(|| {
        format!("{name} not found: install PostgreSQL 15+ server binaries (Debian: apt-get install postgresql), or set DATABASE_URL to a superuser URL")
    })
}

/// Whether this process runs as root (PostgreSQL then runs as the `postgres` user).
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// A database made for one test; its superuser and application-role URLs.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    /// The database's name.
    pub name: String,
    /// Superuser URL (RLS does not apply: use only for set-up and catalog checks).
    pub admin_url: String,
    /// `gpuledger_app` URL (call [`allow_app_login`] after migrating).
    pub app_url: String,
}

/// Creates an empty database with a unique name — or, on a Citus test cluster ([`citus`]), a copy of the
/// migrated and distributed template database on every node.
pub async fn fresh_database() -> Result<TestDatabase> {
    use sqlx::Connection;
    let cluster = cluster()?;
    let name = format!("gl_test_{}", uuid::Uuid::new_v4().simple());
    if let Some(citus) = citus()? {
        // The workers' copies first: the coordinator's copy routes to databases of its own name on the workers.
        for worker in &citus.workers {
            copy_template(worker, &citus.template, &name).await?;
        }
        copy_template(&cluster.base_url, &citus.template, &name).await?;
    } else {
        let mut conn =
            sqlx::PgConnection::connect(&cluster.url("postgres")).await.context("connecting to the test cluster")?;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await?;
        conn.close().await?;
    }
    Ok(TestDatabase { admin_url: cluster.url(&name), app_url: cluster.app_url(&name)?, name })
}

/// `CREATE DATABASE name TEMPLATE template` on the server `base`, with the template's own settings
/// (`ALTER DATABASE … SET`, which PostgreSQL does not copy: Citus's `citus.propagate_set_commands` and
/// `citus.enable_unsafe_triggers` are among them).
async fn copy_template(base: &str, template: &str, name: &str) -> Result<()> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&format!("{base}/postgres"))
        .await
        .with_context(|| format!("connecting to {base}"))?;
    let create = format!("CREATE DATABASE {name} TEMPLATE {template}");
    sqlx::query(&create).execute(&mut conn).await.with_context(|| format!("{create} on {base}"))?;
    let settings: Vec<String> = sqlx::query_scalar(
        "SELECT unnest(s.setconfig) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
          WHERE d.datname = $1 AND s.setrole = 0",
    )
    .bind(template)
    .fetch_all(&mut conn)
    .await?;
    for setting in settings {
        let (key, value) = setting.split_once('=').with_context(|| format!("a database setting {setting:?}"))?;
        let statement = format!("ALTER DATABASE {name} SET {key} = '{}'", value.replace('\'', "''"));
        sqlx::query(&statement).execute(&mut conn).await.with_context(|| format!("{statement} on {base}"))?;
    }
    conn.close().await?;
    // Citus records the database itself among its distributed objects, by OID: point the copy's record at the copy,
    // or adding a node later (server/tests/citus_rebalance.rs) looks for the template there.
    let mut conn = sqlx::PgConnection::connect(&format!("{base}/{name}")).await?;
    sqlx::query(
        "UPDATE pg_catalog.pg_dist_object SET objid = (SELECT oid FROM pg_database WHERE datname = current_database())
          WHERE classid = 'pg_database'::regclass AND objid = (SELECT oid FROM pg_database WHERE datname = $1)",
    )
    .bind(template)
    .execute(&mut conn)
    .await
    .with_context(|| format!("pointing {name}'s Citus object record at itself on {base}"))?;
    conn.close().await?;
    Ok(())
}

/// The Citus test cluster `scripts/citus-test` starts (docs/testing.md, "On Citus").
#[derive(Debug, Clone)]
pub struct CitusCluster {
    /// Superuser URLs of the workers, without a database name (`postgres://postgres@127.0.0.1:PORT`).
    pub workers: Vec<String>,
    /// A database migrated to the head and distributed (`deploy/citus/distribute.sql`) that exists, identical, on
    /// the coordinator and on every worker; [`fresh_database`] copies it on every node under one new name. Shard
    /// metadata names shards, not databases, so identical copies stay consistent with each other.
    pub template: String,
}

/// `Some` when the tests run against a Citus coordinator (`DATABASE_URL`) prepared by `scripts/citus-test`:
/// `GL_TEST_CITUS_WORKERS` (the workers' superuser URLs, comma-separated, without a database name) and
/// `GL_TEST_CITUS_TEMPLATE` (the template's name). One without the other is an error.
pub fn citus() -> Result<Option<CitusCluster>> {
    let workers = std::env::var("GL_TEST_CITUS_WORKERS").ok().filter(|w| !w.trim().is_empty());
    let template = std::env::var("GL_TEST_CITUS_TEMPLATE").ok().filter(|t| !t.trim().is_empty());
    match (workers, template) {
        (None, None) => Ok(None),
        (Some(workers), Some(template)) => {
            if !template.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                bail!("GL_TEST_CITUS_TEMPLATE must be a plain database name, not {template:?}");
            }
            let workers: Vec<String> = workers
                .split(',')
                .map(|w| w.trim().trim_end_matches('/').to_string())
                .filter(|w| !w.is_empty())
                .collect();
            Ok(Some(CitusCluster { workers, template }))
        }
        _ => bail!("set both GL_TEST_CITUS_WORKERS and GL_TEST_CITUS_TEMPLATE (scripts/citus-test), or neither"),
    }
}

/// On the Citus test cluster ([`citus`]): a new database on the coordinator and every worker with the `citus`
/// extension, the settings GPU Ledger needs (`citus.propagate_set_commands = 'local'`,
/// `citus.enable_unsafe_triggers = on`) and the workers registered — the runbook's step 1 (docs/scaling.md), before
/// `migrate` and `deploy/citus/distribute.sql`. Not a copy of the template: for tests of migrating and distributing.
pub async fn fresh_citus_database() -> Result<TestDatabase> {
    use sqlx::Connection;
    let cluster = cluster()?;
    let citus = citus()?.context("not a Citus test cluster: run scripts/citus-test")?;
    let name = format!("gl_test_{}", uuid::Uuid::new_v4().simple());
    let host_port = |base: &str| -> Result<(String, u16)> {
        let at = base.rsplit_once('@').map(|(_, h)| h).unwrap_or(base);
        let (host, port) = at.rsplit_once(':').with_context(|| format!("no port in {base}"))?;
        Ok((host.to_string(), port.parse().with_context(|| format!("port of {base}"))?))
    };
    let (coordinator_host, coordinator_port) = host_port(&cluster.base_url)?;
    let bases: Vec<&str> = citus.workers.iter().map(String::as_str).chain([cluster.base_url.as_str()]).collect();
    for base in &bases {
        let mut conn = sqlx::PgConnection::connect(&format!("{base}/postgres")).await?;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await?;
        conn.close().await?;
        let mut conn = sqlx::PgConnection::connect(&format!("{base}/{name}")).await?;
        for statement in [
            "SET client_min_messages = warning".to_string(),
            "CREATE EXTENSION citus".to_string(),
            format!("ALTER DATABASE {name} SET citus.propagate_set_commands = 'local'"),
            format!("ALTER DATABASE {name} SET citus.enable_unsafe_triggers = on"),
        ] {
            sqlx::query(&statement).execute(&mut conn).await.with_context(|| format!("{statement} on {base}"))?;
        }
        conn.close().await?;
    }
    let mut conn = sqlx::PgConnection::connect(&cluster.url(&name)).await?;
    sqlx::query("SELECT citus_set_coordinator_host($1, $2)")
        .bind(&coordinator_host)
        .bind(i32::from(coordinator_port))
        .execute(&mut conn)
        .await?;
    for worker in &citus.workers {
        let (host, port) = host_port(worker)?;
        sqlx::query("SELECT citus_add_node($1, $2)").bind(host).bind(i32::from(port)).execute(&mut conn).await?;
    }
    conn.close().await?;
    Ok(TestDatabase { admin_url: cluster.url(&name), app_url: cluster.app_url(&name)?, name })
}

/// Lets `gpuledger_app` log in with [`APP_PASSWORD`] (roles are cluster-wide; serialized because concurrent
/// ALTER ROLE on one role can fail with "tuple concurrently updated").
pub async fn allow_app_login(db: &TestDatabase) -> Result<()> {
    use sqlx::Connection;
    let cluster = cluster()?;
    let mut conn = sqlx::PgConnection::connect(&cluster.url("postgres")).await?;
    sqlx::query("SELECT pg_advisory_lock(727274)").execute(&mut conn).await?;
    let result =
        sqlx::query(&format!("ALTER ROLE gpuledger_app LOGIN PASSWORD '{APP_PASSWORD}'")).execute(&mut conn).await;
    sqlx::query("SELECT pg_advisory_unlock(727274)").execute(&mut conn).await?;
    result.with_context(|| format!("enabling gpuledger_app login for {}", db.name))?;
    conn.close().await?;
    Ok(())
}

/// Serializes migrations across test processes: migrations create cluster-wide roles.
pub async fn with_cluster_lock<T, F: std::future::Future<Output = Result<T>>>(f: F) -> Result<T> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&cluster()?.url("postgres")).await?;
    sqlx::query("SELECT pg_advisory_lock(727275)").execute(&mut conn).await?;
    let result = f.await;
    sqlx::query("SELECT pg_advisory_unlock(727275)").execute(&mut conn).await?;
    conn.close().await?;
    result
}
