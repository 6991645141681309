//! The demo's history comes from the sibling binary `gpuledger-demo-agents` (crate `gpuledger-fixtures`), which
//! runs the real agent code over a simulated world and delivers its facts to this server's ingest API. It is a
//! separate process so that the server does not depend on the agent: the history reaches it only over HTTP.

use std::{
    collections::VecDeque,
    ffi::OsString,
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::Context;
use serde::Deserialize;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// The binary's name.
pub const AGENTS_BIN: &str = "gpuledger-demo-agents";
/// The environment variable that names its path (when it is not next to `gpuledger-server`).
pub const AGENTS_ENV: &str = "GPULEDGER_DEMO_AGENTS";

/// What the agents delivered, as the binary prints it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Totals {
    /// Facts sent.
    pub sent: u64,
    /// Facts the server stored as new (the rest were duplicates).
    pub stored: u64,
    /// Facts kept with a data-quality flag.
    pub flagged: u64,
}

/// Where `gpuledger-demo-agents` is: [`AGENTS_ENV`], else next to the running executable, else one directory up
/// (a test binary runs from `target/<profile>/deps/`). The error says how to get it.
pub fn find_agents_binary() -> anyhow::Result<PathBuf> {
    locate(std::env::var_os(AGENTS_ENV), std::env::current_exe().ok().as_deref())
}

/// [`find_agents_binary`] with its inputs given.
fn locate(env: Option<OsString>, exe: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = env.filter(|v| !v.is_empty()).map(PathBuf::from) {
        if path.is_file() {
            return Ok(path);
        }
        anyhow::bail!(
            "{AGENTS_ENV}={}: no such file; point it at the `{AGENTS_BIN}` binary (built by `cargo build --workspace`) \
             or unset it",
            path.display()
        );
    }
    let name = format!("{AGENTS_BIN}{}", std::env::consts::EXE_SUFFIX);
    let dirs: Vec<&Path> =
        exe.and_then(Path::parent).into_iter().flat_map(|d| [Some(d), d.parent()]).flatten().collect();
    if let Some(found) = dirs.iter().map(|d| d.join(&name)).find(|p| p.is_file()) {
        return Ok(found);
    }
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    anyhow::bail!(
        "the demo history needs the `{AGENTS_BIN}` binary next to gpuledger-server (looked in {}); build it with \
         `cargo build --workspace` (or start the demo with `scripts/demo`), or set {AGENTS_ENV} to its path",
        if looked.is_empty() {
            "no directory: the running executable is unknown".to_string()
        } else {
            looked.join(", ")
        }
    )
}

/// Runs `binary` against the server at `base_url` for the history `[anchor, through]`, with one agent token per
/// cluster (`(cluster name, token)`, written to its stdin: a command line is visible to every user in `ps`) and
/// its spools under `spool_dir`. Its log lines are passed on to this process's stderr. The child is killed if
/// this future is dropped (a shutdown signal while loading).
pub async fn run(
    binary: &Path,
    base_url: &str,
    anchor: OffsetDateTime,
    through: OffsetDateTime,
    tokens: &[(&str, String)],
    spool_dir: &Path,
) -> anyhow::Result<Totals> {
    let input = serde_json::json!({
        "tokens": tokens.iter().map(|(c, t)| (c.to_string(), serde_json::Value::from(t.as_str()))).collect::<serde_json::Map<_, _>>(),
    });
    let mut child = tokio::process::Command::new(binary)
        .arg("--server")
        .arg(base_url)
        .arg("--anchor")
        .arg(anchor.format(&Rfc3339)?)
        .arg("--through")
        .arg(through.format(&Rfc3339)?)
        .arg("--spool-dir")
        .arg(spool_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let (Some(mut stdin), Some(mut stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        anyhow::bail!("{AGENTS_BIN}: its stdio was not captured");
    };
    // A write error means the child already exited; its status and stderr say why.
    let _ = async {
        stdin.write_all(input.to_string().as_bytes()).await?;
        stdin.shutdown().await
    }
    .await;
    drop(stdin);
    let read_stdout = async {
        let mut out = String::new();
        stdout.read_to_string(&mut out).await.map(|_| out)
    };
    // Forwarded as they come (a long load shows progress); the last lines are kept for the error message.
    let forward_stderr = async {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let mut last = VecDeque::new();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
            if last.len() == 3 {
                last.pop_front();
            }
            last.push_back(line);
        }
        last
    };
    let (out, last, status) = tokio::join!(read_stdout, forward_stderr, child.wait());
    let status = status.with_context(|| format!("waiting for {AGENTS_BIN}"))?;
    if !status.success() {
        let why: Vec<String> = last.into_iter().filter(|l| !l.trim().is_empty()).collect();
        anyhow::bail!("{AGENTS_BIN} failed ({status}): {}", why.join(" / "));
    }
    let out = out.with_context(|| format!("reading {AGENTS_BIN}'s output"))?;
    let line = out.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("{AGENTS_BIN} printed {line:?}, not its totals"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gl-agents-bin-{name}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("deps")).unwrap();
        dir
    }

    #[test]
    fn a_missing_agents_binary_is_a_clear_error() {
        let dir = temp_dir("missing");
        let err = locate(None, Some(&dir.join("gpuledger-server"))).unwrap_err().to_string();
        assert!(err.contains("`gpuledger-demo-agents`"), "{err}");
        assert!(err.contains("cargo build --workspace") && err.contains("scripts/demo"), "{err}");
        assert!(err.contains(AGENTS_ENV), "{err}");
        let err = locate(Some(dir.join("nope").into_os_string()), None).unwrap_err().to_string();
        assert!(err.starts_with("GPULEDGER_DEMO_AGENTS=") && err.contains("no such file"), "{err}");
        let err = locate(None, None).unwrap_err().to_string();
        assert!(err.contains("`gpuledger-demo-agents`"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_agents_binary_is_found_by_env_next_to_the_server_or_one_up() {
        let dir = temp_dir("found");
        let name = format!("{AGENTS_BIN}{}", std::env::consts::EXE_SUFFIX);
        // One directory up from a test binary in deps/.
        std::fs::write(dir.join(&name), b"").unwrap();
        assert_eq!(locate(None, Some(&dir.join("deps").join("server-test"))).unwrap(), dir.join(&name));
        // Next to the server wins over one up.
        std::fs::write(dir.join("deps").join(&name), b"").unwrap();
        assert_eq!(locate(None, Some(&dir.join("deps").join("server-test"))).unwrap(), dir.join("deps").join(&name));
        // The variable wins over both.
        let other = dir.join("elsewhere");
        std::fs::write(&other, b"").unwrap();
        assert_eq!(locate(Some(other.clone().into_os_string()), Some(&dir.join("gpuledger-server"))).unwrap(), other);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
