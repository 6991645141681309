//! The embedded default database: a private PostgreSQL cluster run from the machine's own `initdb` and
//! `pg_ctl`, under the server's data directory. Created on first run, reused afterwards, stopped on exit.
//!
//! Layout of the data directory:
//! - `pg/` — the cluster (owned by the `postgres` OS user when we run as root: PostgreSQL refuses root);
//! - `credentials.json` — generated passwords of the cluster's superuser and of the application role (0600).
//!
//! The cluster listens on 127.0.0.1 only, on a port picked at each start, with no Unix socket, and requires
//! SCRAM passwords.

use std::{
    fs,
    io::Write,
    net::TcpListener,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    process::{Command, Output},
};

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Name of the application database inside the embedded cluster.
pub const DATABASE: &str = "gpuledger";

/// Why the embedded database could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// `initdb` / `pg_ctl` were not found.
    #[error(
        "PostgreSQL server binaries not found ({missing} is not on PATH nor in /usr/lib/postgresql/*/bin). \
         Install PostgreSQL 15 or newer (Debian/Ubuntu: `apt-get install postgresql`; macOS: `brew install \
         postgresql@15`), point --pg-bin-dir at its bin directory, or set DATABASE_URL to use an existing server"
    )]
    BinariesMissing {
        /// The binary that was looked for.
        missing: &'static str,
    },
    /// Running as root without a `postgres` OS user to run the cluster as.
    #[error(
        "PostgreSQL refuses to run as root and there is no `postgres` OS user to run it as: create one \
         (`useradd --system postgres`), run as a non-root user, or set DATABASE_URL"
    )]
    NoPostgresUser,
    /// The `postgres` OS user cannot reach the data directory.
    #[error(
        "the postgres OS user cannot use {path}: a parent directory is not searchable by it. Choose a \
         --data-dir it can reach (e.g. under /var/lib or /tmp), or run as a non-root user"
    )]
    Unreachable {
        /// The cluster directory.
        path: String,
    },
    /// A command failed.
    #[error("{command} failed: {detail}")]
    Command {
        /// What was run.
        command: String,
        /// Its output and the tail of the server log.
        detail: String,
    },
    /// Filesystem trouble.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The data directory is inconsistent.
    #[error("{0}")]
    Inconsistent(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> EmbeddedError + '_ {
    move |source| EmbeddedError::Io { path: path.display().to_string(), source }
}

/// Generated passwords, kept beside the cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Credentials {
    superuser_password: String,
    app_password: String,
}

fn random_secret() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    hex::encode(bytes)
}

/// The PostgreSQL programs, and the OS user they run as.
#[derive(Debug, Clone)]
struct Programs {
    initdb: PathBuf,
    pg_ctl: PathBuf,
    /// `Some("postgres")` when we are root.
    run_as: Option<String>,
}

impl Programs {
    fn find(bin_dir: Option<&Path>) -> Result<Self, EmbeddedError> {
        let initdb = find_program("initdb", bin_dir).ok_or(EmbeddedError::BinariesMissing { missing: "initdb" })?;
        let pg_ctl = find_program("pg_ctl", bin_dir).ok_or(EmbeddedError::BinariesMissing { missing: "pg_ctl" })?;
        let run_as = if is_root() {
            if os_user_id("postgres").is_none() {
                return Err(EmbeddedError::NoPostgresUser);
            }
            Some("postgres".to_string())
        } else {
            None
        };
        Ok(Self { initdb, pg_ctl, run_as })
    }

    fn command(&self, program: &Path) -> Command {
        match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    fn run(&self, mut cmd: Command, what: &str) -> Result<Output, EmbeddedError> {
        let output =
            cmd.output().map_err(|e| EmbeddedError::Command { command: what.into(), detail: e.to_string() })?;
        if output.status.success() {
            Ok(output)
        } else {
            Err(EmbeddedError::Command {
                command: what.into(),
                detail: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout).trim(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            })
        }
    }
}

/// Finds a PostgreSQL program: in `bin_dir` when given, else on PATH, else the newest `/usr/lib/postgresql/*/bin`.
pub fn find_program(name: &str, bin_dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = bin_dir {
        let p = dir.join(name);
        return p.is_file().then_some(p);
    }
    let from_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if from_path.is_some() {
        return from_path;
    }
    // Debian keeps server binaries off PATH; take the newest version installed.
    let mut candidates: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.is_file())
        .collect();
    candidates
        .sort_by_key(|p| p.components().nth(4).and_then(|c| c.as_os_str().to_str()?.parse::<u32>().ok()).unwrap_or(0));
    candidates.pop()
}

/// Whether this process runs as root (PostgreSQL then has to run as the `postgres` OS user).
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

fn os_user_id(user: &str) -> Option<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == user).then_some(())?;
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    })
}

fn free_port() -> Result<u16, EmbeddedError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io_err(Path::new("127.0.0.1:0")))?;
    let port = listener.local_addr().map_err(io_err(Path::new("127.0.0.1:0")))?.port();
    Ok(port)
}

/// A running embedded cluster. Stop it with [`EmbeddedPostgres::stop`]; dropping it stops it too.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    programs: Programs,
    pgdata: PathBuf,
    port: u16,
    credentials: Credentials,
    /// Whether we must stop the cluster when done (false when another server process runs it).
    running: bool,
    /// Held while this process runs the cluster: other commands on the same data directory use it as guests.
    lock: Option<fs::File>,
}

impl EmbeddedPostgres {
    /// Creates the cluster under `data_dir` on first use, then starts it. Blocking: call before serving.
    pub fn start(data_dir: &Path, bin_dir: Option<&Path>) -> Result<Self, EmbeddedError> {
        let programs = Programs::find(bin_dir)?;
        fs::create_dir_all(data_dir).map_err(io_err(data_dir))?;
        let data_dir = data_dir.canonicalize().map_err(io_err(data_dir))?;
        let pgdata = data_dir.join("pg");
        let credentials_path = data_dir.join("credentials.json");
        let owner = programs.run_as.as_deref().and_then(os_user_id);

        let initialized = pgdata.join("PG_VERSION").is_file();
        let credentials = if initialized {
            let text = fs::read_to_string(&credentials_path).map_err(|_| {
                EmbeddedError::Inconsistent(format!(
                    "{} holds a PostgreSQL cluster but {} is missing; restore it or remove {}",
                    pgdata.display(),
                    credentials_path.display(),
                    pgdata.display()
                ))
            })?;
            serde_json::from_str(&text)
                .map_err(|e| EmbeddedError::Inconsistent(format!("{}: {e}", credentials_path.display())))?
        } else {
            let credentials = Credentials { superuser_password: random_secret(), app_password: random_secret() };
            Self::init(&programs, &data_dir, &pgdata, owner, &credentials)?;
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&credentials_path)
                .map_err(io_err(&credentials_path))?;
            let text =
                serde_json::to_string_pretty(&credentials).map_err(|e| EmbeddedError::Inconsistent(e.to_string()))?;
            file.write_all(text.as_bytes()).map_err(io_err(&credentials_path))?;
            credentials
        };

        // Whoever holds `server.lock` runs the cluster; other commands on the same directory (e.g. `token create`
        // while the demo runs) connect to it as guests and leave it running.
        let lock_path = data_dir.join("server.lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        let mut me = Self { programs, pgdata, port: 0, credentials, running: false, lock: None };
        match lock.try_lock() {
            Ok(()) => me.lock = Some(lock),
            Err(fs::TryLockError::WouldBlock) => return me.join_running(),
            Err(fs::TryLockError::Error(e)) => {
                return Err(EmbeddedError::Io { path: lock_path.display().to_string(), source: e });
            }
        }
        // A server left running by a crashed predecessor would hold the directory: stop it first.
        let mut status = me.programs.command(&me.programs.pg_ctl);
        status.arg("status").arg("-D").arg(&me.pgdata);
        if status.output().map(|o| o.status.success()).unwrap_or(false) {
            tracing::warn!(pgdata = %me.pgdata.display(), "embedded PostgreSQL was left running; restarting it");
            me.pg_stop()?;
        }
        me.port = free_port()?;
        let log = me.pgdata.join("gpuledger-postgres.log");
        let mut start = me.programs.command(&me.programs.pg_ctl);
        start
            .arg("start")
            .arg("-D")
            .arg(&me.pgdata)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "120", "-o"])
            .arg(format!("-p {}", me.port));
        if let Err(e) = me.programs.run(start, "pg_ctl start") {
            let tail = fs::read_to_string(&log)
                .map(|t| t.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n"))
                .unwrap_or_default();
            return Err(match e {
                EmbeddedError::Command { command, detail } => {
                    EmbeddedError::Command { command, detail: format!("{detail}\n{tail}") }
                }
                other => other,
            });
        }
        me.running = true;
        tracing::info!(pgdata = %me.pgdata.display(), port = me.port, "embedded PostgreSQL started");
        Ok(me)
    }

    fn init(
        programs: &Programs,
        data_dir: &Path,
        pgdata: &Path,
        owner: Option<(u32, u32)>,
        credentials: &Credentials,
    ) -> Result<(), EmbeddedError> {
        if pgdata.exists() {
            fs::remove_dir_all(pgdata).map_err(io_err(pgdata))?;
        }
        fs::create_dir_all(pgdata).map_err(io_err(pgdata))?;
        fs::set_permissions(pgdata, fs::Permissions::from_mode(0o700)).map_err(io_err(pgdata))?;
        let pwfile = pgdata.join("initdb.pw");
        fs::write(&pwfile, &credentials.superuser_password).map_err(io_err(&pwfile))?;
        if let Some((uid, gid)) = owner {
            // The postgres OS user must own its directory and be able to reach it.
            fs::set_permissions(data_dir, fs::Permissions::from_mode(0o755)).map_err(io_err(data_dir))?;
            grant_search_to_others(data_dir);
            std::os::unix::fs::chown(pgdata, Some(uid), Some(gid)).map_err(io_err(pgdata))?;
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).map_err(io_err(&pwfile))?;
            let mut probe = programs.command(Path::new("test"));
            probe.arg("-w").arg(pgdata);
            if !probe.status().map(|s| s.success()).unwrap_or(false) {
                return Err(EmbeddedError::Unreachable { path: pgdata.display().to_string() });
            }
        }
        // initdb wants an empty directory: move the password file out of the way first.
        let pw_outside = data_dir.join("initdb.pw");
        fs::rename(&pwfile, &pw_outside).map_err(io_err(&pwfile))?;
        let mut initdb = programs.command(&programs.initdb);
        initdb
            .arg("-D")
            .arg(pgdata)
            .args(["-U", "postgres", "-E", "UTF8", "--no-locale", "--auth=scram-sha-256"])
            .arg(format!("--pwfile={}", pw_outside.display()));
        let result = programs.run(initdb, "initdb");
        let _ = fs::remove_file(&pw_outside);
        result?;
        let conf = pgdata.join("postgresql.conf");
        let mut file = fs::OpenOptions::new().append(true).open(&conf).map_err(io_err(&conf))?;
        file.write_all(
            b"\n# gpuledger embedded default\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n",
        )
        .map_err(io_err(&conf))?;
        tracing::info!(pgdata = %pgdata.display(), "embedded PostgreSQL cluster created");
        Ok(())
    }

    /// Uses the cluster another process runs: waits for its `postmaster.pid` to name a port and say ready.
    fn join_running(mut self) -> Result<Self, EmbeddedError> {
        let pid_file = self.pgdata.join("postmaster.pid");
        for _ in 0..120 {
            if let Ok(text) = fs::read_to_string(&pid_file)
                && let Some(port) = text.lines().nth(3).and_then(|l| l.trim().parse::<u16>().ok())
                && text.lines().nth(7).is_some_and(|status| status.trim() == "ready")
            {
                self.port = port;
                tracing::info!(port, "using the embedded PostgreSQL another gpuledger-server process runs");
                return Ok(self);
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        Err(EmbeddedError::Inconsistent(format!(
            "another gpuledger-server holds {} but its PostgreSQL is not ready",
            self.pgdata.display()
        )))
    }

    /// Whether this process runs the cluster (false: a guest of another server process).
    pub fn is_owner(&self) -> bool {
        self.lock.is_some()
    }

    /// URL of the cluster's superuser on `database`.
    pub fn superuser_url(&self, database: &str) -> String {
        format!("postgres://postgres:{}@127.0.0.1:{}/{database}", self.credentials.superuser_password, self.port)
    }

    /// URL of the application role on the application database.
    pub fn app_url(&self) -> String {
        format!(
            "postgres://{}:{}@127.0.0.1:{}/{DATABASE}",
            crate::db::APP_ROLE,
            self.credentials.app_password,
            self.port
        )
    }

    /// The application role's password (set on the role after migrations).
    pub fn app_password(&self) -> &str {
        &self.credentials.app_password
    }

    /// The cluster directory.
    pub fn pgdata(&self) -> &Path {
        &self.pgdata
    }

    fn pg_stop(&self) -> Result<(), EmbeddedError> {
        let mut stop = self.programs.command(&self.programs.pg_ctl);
        stop.arg("stop").arg("-D").arg(&self.pgdata).args(["-m", "fast", "-w", "-t", "60"]);
        self.programs.run(stop, "pg_ctl stop").map(|_| ())
    }

    /// Stops the cluster (fast shutdown: open sessions are ended, committed data is safe).
    pub fn stop(mut self) -> Result<(), EmbeddedError> {
        if !self.running {
            return Ok(());
        }
        self.running = false;
        let result = self.pg_stop();
        if result.is_ok() {
            tracing::info!(pgdata = %self.pgdata.display(), "embedded PostgreSQL stopped");
        }
        result
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        if self.running {
            self.running = false;
            if let Err(e) = self.pg_stop() {
                tracing::error!(error = %e, "could not stop embedded PostgreSQL");
            }
        }
    }
}

/// Creates the application database if it is missing, applies the migrations, and lets the application role
/// log in with its generated password.
pub async fn prepare(pg: &EmbeddedPostgres) -> Result<(), crate::db::DbError> {
    use sqlx::Connection;
    let mut conn =
        sqlx::PgConnection::connect_with(&crate::db::connect_options(&pg.superuser_url("postgres"))?).await?;
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(DATABASE)
        .fetch_one(&mut conn)
        .await?;
    if !exists {
        sqlx::query(&format!("CREATE DATABASE {DATABASE}")).execute(&mut conn).await?;
    }
    conn.close().await?;
    let admin_url = pg.superuser_url(DATABASE);
    crate::db::migrate(&admin_url).await?;
    let mut conn = sqlx::PgConnection::connect_with(&crate::db::connect_options(&admin_url)?).await?;
    let statement: String = sqlx::query_scalar("SELECT format('ALTER ROLE gpuledger_app LOGIN PASSWORD %L', $1::text)")
        .bind(pg.app_password())
        .fetch_one(&mut conn)
        .await?;
    sqlx::query(&statement).execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

/// Running as root with the data directory under a private directory of ours (e.g. `mktemp -d`, mode 0700), the
/// `postgres` OS user could not reach its cluster. Adds search permission for others (`o+x`: enter, not list or
/// read) to the ancestors *we own* that lack it, and says so; directories of other users are left alone.
fn grant_search_to_others(data_dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    // The data directory was just created by us, so its owner is our user.
    let me = fs::metadata(data_dir).map(|m| m.uid()).unwrap_or(u32::MAX);
    for dir in data_dir.ancestors().skip(1) {
        let Ok(meta) = fs::metadata(dir) else { continue };
        if meta.uid() != me || meta.mode() & 0o001 != 0 {
            continue;
        }
        let mode = (meta.mode() & 0o7777) | 0o001;
        match fs::set_permissions(dir, fs::Permissions::from_mode(mode)) {
            Ok(()) => tracing::info!(dir = %dir.display(), mode = format!("{mode:o}"),
                "allowed others to enter (o+x) so the postgres OS user can reach the embedded cluster"),
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "could not add o+x for the postgres OS user"),
        }
    }
}
