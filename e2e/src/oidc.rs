//! A real OpenID provider for the login end-to-end tests: `e2e/oidc/provider.mjs` (Node, `oidc-provider`) in a
//! child process on a free loopback port.
//!
//! The provider has one static confidential client (secret by `client_secret_basic` or `client_secret_post`),
//! the authorization-code flow only, PKCE with `S256` required, consent granted automatically, and the
//! development login form: any login name with any password. The subject is the login name; the claims are
//! `email` = `<login>@example.test`, `name` and `groups` (see [`GROUPS`]), in the ID token as well as from
//! userinfo. The callback carries `code`, `state` and `iss`.
//!
//! Pages (for browser tests, see [`crate::browser`]):
//! - login: `form` posting to `/interaction/<uid>/login` with `input[name=login]`, `input[name=password]` and
//!   `button[type=submit]` ([`fill_login_form`] does it);
//! - logout confirm (`end_session_endpoint`, `/session/end`): `#logout-yes` signs out, `#logout-no` does not
//!   ([`confirm_logout`] clicks yes); without a `post_logout_redirect_uri` the browser ends on a page with
//!   `#logged-out`;
//! - errors (e.g. an unregistered `redirect_uri`): a page with `dl#error` whose `dd.error` is the OAuth error code.
//!
//! Needs `node` (20+) and `e2e/oidc/node_modules` (`scripts/lib.sh` `gl_ensure_oidc_provider`, or `npm ci` in
//! `e2e/oidc`).

use std::{
    io::{BufRead, BufReader, Read},
    path::PathBuf,
    process::{Child, ChildStdin, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

use anyhow::{Context, Result, bail};

use crate::browser::Browser;

/// Groups the provider gives each known login name; any other login has none.
pub const GROUPS: &[(&str, &[&str])] = &[
    ("ada", &["gl-admins"]),
    ("fin", &["gl-finance"]),
    ("dee", &["gl-dept-research"]),
    ("mo", &["gl-dept-research", "gl-dept-platform"]),
    ("vic", &["gl-viewers"]),
];

/// How long [`OidcProvider::start`] waits for the `ready` line.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A running test OpenID provider; killed when dropped.
pub struct OidcProvider {
    child: Option<Child>,
    /// Our end of the provider's stdin: when it closes (we exit, even by a kill), the provider exits.
    _stdin: Option<ChildStdin>,
    issuer: String,
    port: u16,
    client_id: String,
    client_secret: String,
    stderr: Arc<Mutex<String>>,
}

/// `e2e/oidc` in the source tree.
pub fn provider_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("oidc")
}

fn find_node() -> Result<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("node")).find(|p| p.is_file()))
        .or_else(|| ["/usr/bin/node", "/usr/local/bin/node"].map(PathBuf::from).into_iter().find(|p| p.is_file()))
        .context("node not found on PATH: the login end-to-end tests need Node.js 20 or newer (run `. scripts/lib.sh; gl_ensure_oidc_provider`)")
}

impl OidcProvider {
    /// Starts the provider with one client (`client_id`/`client_secret`, the redirect URIs and post-logout
    /// redirect URIs it may use) and waits until it listens.
    pub fn start(
        client_id: &str,
        client_secret: &str,
        redirect_uris: &[String],
        post_logout_redirect_uris: &[String],
    ) -> Result<Self> {
        let dir = provider_dir();
        if !dir.join("node_modules").join("oidc-provider").is_dir() {
            bail!(
                "{}/node_modules is missing: install the test OpenID provider with `bash -c '. scripts/lib.sh; \
                 gl_ensure_oidc_provider'` (or `npm ci` in e2e/oidc)",
                dir.display()
            );
        }
        if redirect_uris.is_empty() {
            bail!("the test OpenID provider needs at least one redirect URI");
        }
        let node = find_node()?;
        let port = crate::process::free_port()?;
        let issuer = format!("http://127.0.0.1:{port}");
        let mut child = Command::new(&node)
            .arg(dir.join("provider.mjs"))
            .current_dir(&dir)
            .env("OIDC_PORT", port.to_string())
            .env("OIDC_CLIENT_ID", client_id)
            .env("OIDC_CLIENT_SECRET", client_secret)
            .env("OIDC_REDIRECT_URIS", redirect_uris.join(","))
            .env("OIDC_POST_LOGOUT_REDIRECT_URIS", post_logout_redirect_uris.join(","))
            .env("OIDC_EXIT_ON_STDIN_EOF", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} e2e/oidc/provider.mjs", node.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("provider stdout")?;
        let mut stderr_pipe = child.stderr.take().context("provider stderr")?;

        // Drain both pipes for the provider's whole life (a full pipe would block it).
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = sink.lock()
                    && s.len() < 1 << 20
                {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });

        let mut provider = OidcProvider {
            child: Some(child),
            _stdin: stdin,
            issuer,
            port,
            client_id: client_id.to_string(),
            client_secret: client_secret.to_string(),
            stderr,
        };
        let expected = format!("ready {}", provider.issuer);
        let deadline = std::time::Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.trim() == expected => break,
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    provider.kill();
                    bail!(
                        "the test OpenID provider did not say `{expected}` within {} s; its stderr:\n{}",
                        READY_TIMEOUT.as_secs(),
                        provider.stderr()
                    );
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = provider.child.as_mut().and_then(|c| c.wait().ok());
                    // Give the stderr reader a moment to collect the last words.
                    std::thread::sleep(Duration::from_millis(100));
                    bail!(
                        "the test OpenID provider exited before it was ready ({}); its stderr:\n{}",
                        status.map(|s| s.to_string()).unwrap_or_else(|| "status unknown".into()),
                        provider.stderr()
                    );
                }
            }
        }
        // The reader thread keeps draining stdout; nothing else is printed there.
        Ok(provider)
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The client's id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The client's secret.
    pub fn client_secret(&self) -> &str {
        &self.client_secret
    }

    /// `{issuer}/.well-known/openid-configuration`.
    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.issuer)
    }

    /// `{issuer}/auth` (as in discovery).
    pub fn authorization_endpoint(&self) -> String {
        format!("{}/auth", self.issuer)
    }

    /// `{issuer}/token` (as in discovery).
    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.issuer)
    }

    /// `{issuer}/me` (as in discovery).
    pub fn userinfo_endpoint(&self) -> String {
        format!("{}/me", self.issuer)
    }

    /// `{issuer}/session/end` (as in discovery).
    pub fn end_session_endpoint(&self) -> String {
        format!("{}/session/end", self.issuer)
    }

    /// What the provider wrote to stderr so far (warnings, errors).
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stops the provider now (also done on drop).
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The groups the provider gives `login`.
pub fn groups_of(login: &str) -> Vec<String> {
    GROUPS
        .iter()
        .find(|(name, _)| *name == login)
        .map(|(_, groups)| groups.iter().map(|g| g.to_string()).collect())
        .unwrap_or_default()
}

/// On the provider's login page: types `login` and a password, and submits.
pub async fn fill_login_form(browser: &Browser, login: &str) -> Result<()> {
    let name = browser.wait_for("input[name=login]", Duration::from_secs(15)).await?;
    browser.clear(&name).await?;
    browser.send_keys(&name, login).await?;
    let password = browser.find("input[name=password]").await?;
    browser.send_keys(&password, "any-password").await?;
    let submit = browser.find("button[type=submit]").await?;
    browser.click(&submit).await
}

/// On the provider's logout confirm page: clicks "Yes, sign me out".
pub async fn confirm_logout(browser: &Browser) -> Result<()> {
    let yes = browser.wait_for("#logout-yes", Duration::from_secs(15)).await?;
    browser.click(&yes).await
}
