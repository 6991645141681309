//! Running the real binaries in whole-system tests.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

/// Path of a workspace binary (`gpuledger-server`, `gpuledger-agent`) built next to the running executable: a test
/// (`target/<profile>/deps/<test>`) or a binary of this crate (`target/<profile>/gpuledger-chaos`, or a copy of the
/// three side by side).
pub fn binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("executable has no directory")?;
    let candidates = [Some(dir), dir.parent()];
    if let Some(path) = candidates.into_iter().flatten().map(|d| d.join(name)).find(|p| p.is_file()) {
        return Ok(path);
    }
    bail!("{name} is not built next to {}: run `cargo build --workspace` (the test script does) first", exe.display())
}

/// A free TCP port on loopback.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A temporary directory the `postgres` OS user can traverse (the embedded database runs as it under root).
pub fn temp_dir(prefix: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// `GET url` with curl: (status, body).
pub fn http_get(url: &str) -> Result<(u16, String)> {
    let out = Command::new("curl")
        .args(["-s", "-m", "20", "-w", "\n%{http_code}", url])
        .output()
        .context("running curl (install curl)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "000"));
    Ok((code.trim().parse().unwrap_or(0), body.to_string()))
}

/// Signs in to the demo organization as a demo account (`admin`, `finance`, `department_manager`, `viewer`)
/// with curl, as the login page's form does; the session cookie (`gl_session=…`).
pub fn demo_session(base: &str, role: &str) -> Result<String> {
    let out = Command::new("curl")
        .args(["-s", "-m", "20", "-o", "/dev/null", "-D", "-", "-H"])
        .arg(format!("Origin: {base}"))
        .args(["--data", &format!("org=demo&role={role}")])
        .arg(format!("{base}/auth/demo"))
        .output()
        .context("running curl (install curl)")?;
    let headers = String::from_utf8_lossy(&out.stdout).into_owned();
    headers
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: ").or_else(|| l.strip_prefix("Set-Cookie: ")))
        .and_then(|c| c.split(';').next())
        .filter(|c| c.starts_with("gl_session="))
        .map(str::to_string)
        .with_context(|| format!("no session cookie from the demo login:\n{headers}"))
}

/// `GET url` with a cookie, with curl: (status, body).
pub fn http_get_with_cookie(url: &str, cookie: &str) -> Result<(u16, String)> {
    let out = Command::new("curl")
        .args(["-s", "-m", "20", "-H", "Accept: text/html", "-b", cookie, "-w", "\n%{http_code}", url])
        .output()
        .context("running curl (install curl)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "000"));
    Ok((code.trim().parse().unwrap_or(0), body.to_string()))
}

/// Sends a signal by name (`INT`, `TERM`, `KILL`).
pub fn signal(pid: u32, name: &str) -> Result<()> {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status()?;
    if !status.success() {
        bail!("kill -{name} {pid} failed");
    }
    Ok(())
}

/// Processes whose command line mentions `needle` (e.g. a PostgreSQL data directory).
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(pid);
            }
        }
    }
    found
}

/// A server process under test; killed (and its embedded PostgreSQL stopped) if the test fails.
pub struct ServerProcess {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// Where stdout and stderr go.
    pub log: PathBuf,
    data_dir: Option<PathBuf>,
}

impl ServerProcess {
    /// Starts `gpuledger-server ARGS… --listen 127.0.0.1:PORT` with the environment changes given.
    pub fn start(args: &[&str], env: &[(&str, Option<&str>)], data_dir: Option<&Path>, log: &Path) -> Result<Self> {
        let port = free_port()?;
        let mut cmd = Command::new(binary("gpuledger-server")?);
        cmd.args(args).arg("--listen").arg(format!("127.0.0.1:{port}"));
        if let Some(dir) = data_dir {
            cmd.arg("--data-dir").arg(dir);
        }
        for (k, v) in env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let file = std::fs::File::create(log)?;
        cmd.stdout(Stdio::from(file.try_clone()?)).stderr(Stdio::from(file)).stdin(Stdio::null());
        let child = cmd.spawn().context("spawning gpuledger-server")?;
        Ok(Self {
            child: Some(child),
            base: format!("http://127.0.0.1:{port}"),
            log: log.to_path_buf(),
            data_dir: data_dir.map(Path::to_path_buf),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `/readyz` answers 200, failing early if the process exits.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            if let Ok((200, _)) = http_get(&format!("{}/readyz", self.base)) {
                return Ok(started.elapsed());
            }
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("server exited with {status} before ready:\n{}", self.log_text());
            }
            if started.elapsed() > timeout {
                bail!("server not ready in {timeout:?}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Sends `sig` and waits for the exit.
    pub fn stop(&mut self, sig: &str, timeout: Duration) -> Result<ExitStatus> {
        let child = self.child.take().context("already stopped")?;
        signal(child.id(), sig)?;
        wait_for_exit(child, timeout, &format!("within {timeout:?} of SIG{sig}"))
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let child = self.child.take().context("already stopped")?;
        wait_for_exit(child, timeout, &format!("after {timeout:?}"))
    }
}

/// Waits for `child` to exit; kills it and fails when `timeout` passes first.
fn wait_for_exit(mut child: Child, timeout: Duration, what: &str) -> Result<ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            bail!("server did not exit {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // A killed server cannot stop its embedded PostgreSQL: do it here so nothing outlives the test.
        if let Some(dir) = &self.data_dir {
            let pgdata = dir.join("pg");
            if !processes_mentioning(&pgdata.display().to_string()).is_empty() {
                let root = Command::new("id").arg("-u").output().map(|o| o.stdout == b"0\n").unwrap_or(false);
                let mut cmd = if root {
                    let mut c = Command::new("runuser");
                    c.args(["-u", "postgres", "--", "pg_ctl"]);
                    c
                } else {
                    Command::new("pg_ctl")
                };
                let _ = cmd.arg("-D").arg(&pgdata).args(["-m", "immediate", "stop"]).output();
            }
        }
    }
}

/// `gpuledger-server demo` against `database_url` (a superuser URL: it migrates, seeds `demo`, serves as the app
/// role), ready to answer.
/// Only the organization, tenants, clusters and inventory (`--history false`): the tests using this bring their own
/// facts; the full demo (three months through the agent code, two closed months) is tested in `demo.rs` and
/// `ledger_demo.rs`.
pub fn start_demo(database_url: &str, log: &Path) -> Result<ServerProcess> {
    let mut server = ServerProcess::start(
        &["demo"],
        &[("DATABASE_URL", Some(database_url)), ("GPULEDGER_DEMO_HISTORY", Some("false"))],
        None,
        log,
    )?;
    server.wait_ready(Duration::from_secs(60))?;
    Ok(server)
}

/// `gpuledger-server token create --org demo --scope SCOPE` against `database_url`; the printed token.
pub fn create_token(database_url: &str, scope: &str) -> Result<String> {
    create_token_in(database_url, "demo", scope)
}

/// `gpuledger-server token create --org ORG --scope SCOPE` against `database_url`; the printed token.
pub fn create_token_in(database_url: &str, org: &str, scope: &str) -> Result<String> {
    let out = Command::new(binary("gpuledger-server")?)
        .args(["token", "create", "--org", org, "--scope", scope])
        .env("DATABASE_URL", database_url)
        .output()?;
    if !out.status.success() {
        bail!("token create failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Starts the real `cluster` agent: it watches the API server of `kubeconfig`, delivers to `server` as `cluster`,
/// spools in `dir/agent` and logs to `dir/agent.log`, polling every 100 ms; `extra` flags follow.
pub fn start_cluster_agent(
    dir: &Path,
    server: &str,
    token: &str,
    cluster: &str,
    kubeconfig: &Path,
    extra: &[&str],
) -> Result<Child> {
    let log = std::fs::File::create(dir.join("agent.log"))?;
    Ok(Command::new(binary("gpuledger-agent")?)
        .args(["cluster", "--server", server, "--token", token, "--cluster-name", cluster, "--poll-ms", "100"])
        .args(extra)
        .arg("--spool-dir")
        .arg(dir.join("agent"))
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()?)
}
