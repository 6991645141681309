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

    /// Whether the postmaster runs (`pg_ctl status`).
    pub fn is_running(&self) -> bool {
        find_program("pg_ctl")
            .ok()
            .and_then(|p| as_postgres(&p).arg("-D").arg(&self.data).arg("status").output().ok())
            .is_some_and(|o| o.status.success())
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
        let out = as_postgres(&find_program("pg_ctl")?)
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .args(["-w", "-t", "120", "-o", &opts, "start"])
            .output()
            .context("running pg_ctl start")?;
        if !out.status.success() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            bail!("pg_ctl start failed: {}{log}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// `SIGKILL` to the postmaster and all its children; waits until they are gone.
    pub fn kill(&self) -> Result<()> {
        if !self.is_running() {
            return Ok(());
        }
        let pid_file = std::fs::read_to_string(self.data.join("postmaster.pid")).context("reading postmaster.pid")?;
        let postmaster: u32 = pid_file.lines().next().unwrap_or_default().trim().parse().context("postmaster pid")?;
        let mut victims = children(postmaster);
        victims.push(postmaster);
        for pid in &victims {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(std::process::Stdio::null()).status();
        }
        let started = Instant::now();
        while victims.iter().any(|p| Path::new(&format!("/proc/{p}")).exists() && !zombie(*p)) {
            if started.elapsed() > Duration::from_secs(20) {
                bail!("PostgreSQL processes survived SIGKILL: {victims:?}");
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

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next().map(|c| c == "Z")))
        .unwrap_or(true)
}
