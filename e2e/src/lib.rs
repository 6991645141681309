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

/// Creates an empty database with a unique name.
pub async fn fresh_database() -> Result<TestDatabase> {
    use sqlx::Connection;
    let cluster = cluster()?;
    let name = format!("gl_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn =
        sqlx::PgConnection::connect(&cluster.url("postgres")).await.context("connecting to the test cluster")?;
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await?;
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
