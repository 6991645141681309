//! A throwaway PostgreSQL the simulator owns, so it can kill it (`SIGKILL` to the postmaster and every backend, as
//! an out-of-memory killer or a power cut would) and start it again on the same data directory (crash recovery).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{find_program, is_root, process::free_port};

/// A PostgreSQL cluster in `dir/pg`.
pub struct Postgres {
    data: PathBuf,
    log: PathBuf,
    /// Port on 127.0.0.1.
    pub port: u16,
}

fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Postgres {
    /// `initdb` in `dir/pg` and start it.
    pub fn create(dir: &Path) -> Result<Self> {
        let data = dir.join("pg");
        let log = dir.join("pg.log");
        if is_root() {
            // PostgreSQL runs as `postgres`: it owns its data directory and its log.
            std::fs::create_dir_all(&data)?;
            std::fs::write(&log, "")?;
            let status = Command::new("chown").args(["-R", "postgres"]).arg(&data).arg(&log).status()?;
            if !status.success() {
                bail!("chown postgres {} failed", data.display());
            }
        }
        let out = as_postgres(&find_program("initdb")?)
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"])
            .output()
            .context("running initdb")?;
        if !out.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let pg = Self { data, log, port: free_port()? };
        pg.start()?;
        Ok(pg)
    }

    /// Superuser URL of `database`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The postmaster's PID, from `postmaster.pid` (left behind by a kill).
    fn postmaster(&self) -> Option<u32> {
        std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?.lines().next()?.trim().parse().ok()
    }

    /// Whether the postmaster runs: its PID file names a live process (not a zombie: a killed postmaster is
    /// re-parented and, where nothing reaps it, lingers as one — `pg_ctl status` calls that running).
    pub fn is_running(&self) -> bool {
        self.postmaster().is_some_and(alive)
    }

    /// Starts it unless it runs (after a kill: crash recovery) and waits until it accepts connections.
    pub fn start(&self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        // Durability stays on: a kill -9 of PostgreSQL must lose nothing that was committed.
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=200",
            self.port
        );
        let mut attempt = 0;
        let out = loop {
            // A killed postmaster that lingers as a zombie (nothing reaped it yet) still "owns" its PID file for
            // PostgreSQL, which refuses to start ("lock file already exists"): it is dead, so the file is stale.
            if self.postmaster().is_some_and(|p| !alive(p)) {
                let _ = std::fs::remove_file(self.data.join("postmaster.pid"));
            }
            let out = as_postgres(&find_program("pg_ctl")?)
                .arg("-D")
                .arg(&self.data)
                .arg("-l")
                .arg(&self.log)
                .args(["-w", "-t", "120", "-o", &opts, "start"])
                .output()
                .context("running pg_ctl start")?;
            attempt += 1;
            // Its backends may hold the old shared memory for a moment after the kill: try again shortly.
            if out.status.success() || attempt == 5 || self.is_running() {
                break out;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        if !out.status.success() {
            if self.is_running() {
                // Started after all (or never stopped): what the caller wanted.
                return Ok(());
            }
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            bail!(
                "pg_ctl start failed (postmaster.pid names {:?}, alive: {:?}): {}{}",
                self.postmaster(),
                self.postmaster().map(alive),
                String::from_utf8_lossy(&out.stderr),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(())
    }

    /// `SIGKILL` to the postmaster, then to all its children; waits until they are gone. The postmaster goes first:
    /// killed after a child, it would notice the child's death and restart the others itself.
    pub fn kill(&self) -> Result<()> {
        // Any process the PID file names is signalled (a zombie ignores it): no liveness guess decides whether to kill.
        let Some(postmaster) = self.postmaster().filter(|p| Path::new(&format!("/proc/{p}")).exists()) else {
            return Ok(());
        };
        let victims = children(postmaster);
        let sigkill = |pid: u32| {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(std::process::Stdio::null()).status();
        };
        sigkill(postmaster);
        for pid in &victims {
            sigkill(*pid);
        }
        let started = Instant::now();
        while alive(postmaster) || victims.iter().any(|p| alive(*p)) {
            if started.elapsed() > Duration::from_secs(20) {
                bail!("PostgreSQL processes survived SIGKILL: {postmaster} {victims:?}");
            }
            // Backends forked while the first signals flew: signal whatever is left.
            for pid in children(postmaster).into_iter().chain([postmaster]) {
                sigkill(pid);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Fast shutdown (end of a run).
    pub fn stop(&self) {
        if let Ok(pg_ctl) = find_program("pg_ctl") {
            let _ = as_postgres(&pg_ctl).arg("-D").arg(&self.data).args(["-m", "immediate", "stop"]).output();
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The direct children of `parent` (PostgreSQL's backends and workers).
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid …`: comm may hold spaces, so read after the last ')'.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// A process that exists and is not a zombie.
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid)
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next().map(|c| c == "Z")))
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// `kill -9` of the postmaster and its backends while a client is connected, then crash recovery: nothing
    /// committed is lost, and a second kill or start in a row is harmless.
    #[tokio::test]
    async fn a_killed_postgres_restarts_with_what_was_committed() {
        let dir = crate::process::temp_dir("gl-chaos-pg").unwrap();
        let pg = Postgres::create(&dir).unwrap();
        let pool = sqlx::PgPool::connect(&pg.url("postgres")).await.unwrap();
        sqlx::raw_sql("CREATE TABLE t (v int); INSERT INTO t VALUES (42);").execute(&pool).await.unwrap();
        assert!(pg.is_running());
        pg.kill().unwrap();
        assert!(!pg.is_running());
        pg.kill().unwrap();
        assert!(sqlx::query("SELECT 1").execute(&pool).await.is_err(), "the server is gone");
        pg.start().unwrap();
        pg.start().unwrap();
        assert!(pg.is_running());
        let pool = sqlx::PgPool::connect(&pg.url("postgres")).await.unwrap();
        let v: i32 = sqlx::query_scalar("SELECT v FROM t").fetch_one(&pool).await.unwrap();
        assert_eq!(v, 42);
        pg.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
