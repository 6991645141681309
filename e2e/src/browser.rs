//! A real headless Chromium for end-to-end tests, driven through `chromedriver` with a small W3C WebDriver
//! client (plain JSON over HTTP).
//!
//! Each [`Browser`] is its own `chromedriver` on a free port with one session and a fresh profile directory.
//! Chromium runs `--headless=new --no-sandbox` (tests run as root in CI) and resolves no host names except
//! `localhost` (`--host-resolver-rules`), so pages that reference the internet (web fonts) neither wait on
//! nor reach it. Use `127.0.0.1` or `localhost` URLs.
//!
//! Needs `chromium` and `chromedriver` (`scripts/lib.sh` `gl_ensure_chromium`, or
//! `apt-get install chromium chromium-driver`).

use std::{
    io::{Read, Write},
    net::TcpStream,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// The W3C key of an element reference in WebDriver JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long one WebDriver command may take (page loads are limited to less by the session).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A reference to an element on the current page (stale after navigation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementId(pub String);

/// A headless Chromium session; the browser and its driver are killed when this is dropped (call
/// [`Browser::close`] to end it cleanly).
pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
    driver_port: u16,
    session_id: String,
    driver: Option<Child>,
    dir: PathBuf,
}

const MISSING: &str =
    "run `bash -c '. scripts/lib.sh; gl_ensure_chromium'` or `apt-get install chromium chromium-driver`";

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    names.iter().find_map(|name| dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()))
}

/// The chromedriver binary: on PATH, or where Debian puts it.
pub fn find_chromedriver() -> Result<PathBuf> {
    on_path(&["chromedriver"])
        .or_else(|| {
            ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
                .map(PathBuf::from)
                .into_iter()
                .find(|p| p.is_file())
        })
        .with_context(|| format!("chromedriver not found: {MISSING}"))
}

/// The Chromium binary: `chromium` or `chromium-browser` on PATH, or `/usr/bin/chromium`.
pub fn find_chromium() -> Result<PathBuf> {
    on_path(&["chromium", "chromium-browser"])
        .or_else(|| Some(PathBuf::from("/usr/bin/chromium")).filter(|p| p.is_file()))
        .with_context(|| format!("chromium not found: {MISSING}"))
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub async fn start() -> Result<Browser> {
        let chromium = find_chromium()?;
        let chromedriver = find_chromedriver()?;
        let dir = std::env::temp_dir().join(format!("gl-browser-{}", uuid::Uuid::new_v4().simple()));
        let profile = dir.join("profile");
        std::fs::create_dir_all(&profile).with_context(|| format!("creating {}", profile.display()))?;
        let log = std::fs::File::create(dir.join("chromedriver.log"))?;
        let port = crate::process::free_port()?;
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group, so chromium (its child) is killed with it.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", chromedriver.display()))?;
        let http = reqwest::Client::builder()
            .timeout(COMMAND_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        let mut browser = Browser {
            http,
            session: String::new(),
            driver_port: port,
            session_id: String::new(),
            driver: Some(child),
            dir,
        };

        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = match browser.http.get(format!("{base}/status")).send().await {
                Ok(r) => r.json::<Value>().await.ok().and_then(|v| v["value"]["ready"].as_bool()).unwrap_or(false),
                Err(_) => false,
            };
            if ready {
                break;
            }
            if let Some(status) = browser.driver.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("chromedriver exited ({status}) before it was ready:\n{}", browser.driver_log());
            }
            if Instant::now() > deadline {
                bail!("chromedriver did not become ready within 20 s:\n{}", browser.driver_log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "pageLoadStrategy": "normal",
                    "timeouts": { "pageLoad": 30_000, "script": 30_000, "implicit": 0 },
                    "goog:chromeOptions": {
                        "binary": chromium.to_string_lossy(),
                        "args": [
                            "--headless=new",
                            "--no-sandbox",
                            "--disable-dev-shm-usage",
                            "--disable-gpu",
                            format!("--user-data-dir={}", profile.display()),
                            "--no-first-run",
                            "--no-default-browser-check",
                            "--disable-extensions",
                            "--disable-background-networking",
                            "--disable-sync",
                            "--disable-component-update",
                            "--window-size=1280,900",
                            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
                        ],
                    },
                },
            },
        });
        let value = match browser.call(reqwest::Method::POST, &format!("{base}/session"), Some(capabilities)).await {
            Ok(v) => v,
            Err(e) => bail!("creating a Chromium session failed: {e:#}\nchromedriver log:\n{}", browser.driver_log()),
        };
        let id = value["sessionId"].as_str().context("new session without sessionId")?.to_string();
        browser.session = format!("{base}/session/{id}");
        browser.session_id = id;
        Ok(browser)
    }

    /// The chromedriver log so far (for error messages).
    pub fn driver_log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("chromedriver.log")).unwrap_or_default();
        let start = text.len().saturating_sub(8000);
        let start = (start..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
        text[start..].to_string()
    }

    /// One WebDriver command; returns its `value`.
    async fn call(&self, method: reqwest::Method, url: &str, body: Option<Value>) -> Result<Value> {
        let what = format!("{method} {}", url.strip_prefix(&self.session).unwrap_or(url));
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.with_context(|| format!("webdriver {what}"))?;
        let status = response.status();
        let text = response.text().await.with_context(|| format!("webdriver {what}: reading the answer"))?;
        let json: Value = serde_json::from_str(&text)
            .with_context(|| format!("webdriver {what}: answer is not JSON ({status}): {text}"))?;
        let value = json.get("value").cloned().unwrap_or(Value::Null);
        if !status.is_success() || value.get("error").is_some_and(|e| e.is_string()) {
            let error = value["error"].as_str().unwrap_or("unknown error");
            let message = value["message"].as_str().unwrap_or("");
            let message = message.lines().next().unwrap_or("");
            bail!("webdriver {what}: {error}: {message}");
        }
        Ok(value)
    }

    async fn get(&self, path: &str) -> Result<Value> {
        self.call(reqwest::Method::GET, &format!("{}{path}", self.session), None).await
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.call(reqwest::Method::POST, &format!("{}{path}", self.session), Some(body)).await
    }

    async fn delete(&self, path: &str) -> Result<Value> {
        self.call(reqwest::Method::DELETE, &format!("{}{path}", self.session), None).await
    }

    /// Navigates to `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) -> Result<()> {
        self.post("/url", json!({ "url": url })).await.with_context(|| format!("navigating to {url}"))?;
        Ok(())
    }

    /// The current page's URL.
    pub async fn current_url(&self) -> Result<String> {
        let v = self.get("/url").await?;
        v.as_str().map(str::to_string).context("URL is not a string")
    }

    /// The current page's HTML (as serialized by the browser).
    pub async fn page_source(&self) -> Result<String> {
        let v = self.get("/source").await?;
        v.as_str().map(str::to_string).context("page source is not a string")
    }

    /// The current page's title.
    pub async fn title(&self) -> Result<String> {
        let v = self.get("/title").await?;
        v.as_str().map(str::to_string).context("title is not a string")
    }

    /// `document.body.innerText` of the current page.
    pub async fn body_text(&self) -> Result<String> {
        let v = self.execute("return document.body ? document.body.innerText : ''", vec![]).await?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    /// Saves a PNG screenshot of the viewport to `path` (creating its directory).
    pub async fn screenshot(&self, path: &std::path::Path) -> Result<()> {
        use base64::Engine;
        let v = self.get("/screenshot").await?;
        let data = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().context("screenshot is not a string")?)
            .context("screenshot is not base64")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))
    }

    /// Sets the window size (for screenshots of a laptop or a tablet layout).
    pub async fn set_window(&self, width: u32, height: u32) -> Result<()> {
        self.post("/window/rect", json!({ "width": width, "height": height })).await.map(|_| ())
    }

    /// Navigates back in history.
    pub async fn back(&self) -> Result<()> {
        self.post("/back", json!({})).await.map(|_| ())
    }

    /// Reloads the current page.
    pub async fn refresh(&self) -> Result<()> {
        self.post("/refresh", json!({})).await.map(|_| ())
    }

    /// The first element matching the CSS selector `css`.
    pub async fn find(&self, css: &str) -> Result<ElementId> {
        let v = self
            .post("/element", json!({ "using": "css selector", "value": css }))
            .await
            .with_context(|| format!("finding `{css}` on the page"))?;
        element_id(&v).with_context(|| format!("finding `{css}`: no element reference in {v}"))
    }

    /// Every element matching `css` (possibly none).
    pub async fn find_all(&self, css: &str) -> Result<Vec<ElementId>> {
        let v = self
            .post("/elements", json!({ "using": "css selector", "value": css }))
            .await
            .with_context(|| format!("finding all `{css}` on the page"))?;
        let list = v.as_array().with_context(|| format!("finding all `{css}`: not a list"))?;
        list.iter().map(|e| element_id(e).context("element without reference")).collect()
    }

    /// Waits up to `timeout` for an element matching `css` to appear.
    pub async fn wait_for(&self, css: &str, timeout: Duration) -> Result<ElementId> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(el) = self.find_all(css).await?.into_iter().next() {
                return Ok(el);
            }
            if Instant::now() > deadline {
                let url = self.current_url().await.unwrap_or_default();
                let body = self.body_text().await.unwrap_or_default();
                bail!("no `{css}` on {url} after {timeout:?}; the page says:\n{}", clip(&body, 2000));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the element.
    pub async fn click(&self, el: &ElementId) -> Result<()> {
        self.post(&format!("/element/{}/click", el.0), json!({})).await.map(|_| ())
    }

    /// Clicks the first element matching `css`.
    pub async fn click_css(&self, css: &str) -> Result<()> {
        let el = self.find(css).await?;
        self.click(&el).await.with_context(|| format!("clicking `{css}`"))
    }

    /// Types `text` into the element.
    pub async fn send_keys(&self, el: &ElementId, text: &str) -> Result<()> {
        self.post(&format!("/element/{}/value", el.0), json!({ "text": text })).await.map(|_| ())
    }

    /// Clears an input.
    pub async fn clear(&self, el: &ElementId) -> Result<()> {
        self.post(&format!("/element/{}/clear", el.0), json!({})).await.map(|_| ())
    }

    /// Types `text` into the first element matching `css`.
    pub async fn fill(&self, css: &str, text: &str) -> Result<()> {
        let el = self.find(css).await?;
        self.send_keys(&el, text).await.with_context(|| format!("typing into `{css}`"))
    }

    /// The element's rendered text.
    pub async fn text(&self, el: &ElementId) -> Result<String> {
        let v = self.get(&format!("/element/{}/text", el.0)).await?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    /// An attribute of the element (`None` when absent).
    pub async fn attribute(&self, el: &ElementId, name: &str) -> Result<Option<String>> {
        let v = self.get(&format!("/element/{}/attribute/{name}", el.0)).await?;
        Ok(v.as_str().map(str::to_string))
    }

    /// A DOM property of the element (e.g. `value` of an input).
    pub async fn property(&self, el: &ElementId, name: &str) -> Result<Value> {
        self.get(&format!("/element/{}/property/{name}", el.0)).await
    }

    /// Clicks the submit button `submit_css` and waits until the browser has left the current URL (or
    /// `timeout`); returns the new URL.
    pub async fn submit_form(&self, submit_css: &str, timeout: Duration) -> Result<String> {
        let before = self.current_url().await?;
        self.click_css(submit_css).await?;
        self.wait_for_url(|u| u != before, timeout).await
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page and returns its result.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value> {
        self.post("/execute/sync", json!({ "script": script, "args": args })).await
    }

    /// The cookies visible to the current page (WebDriver cookie objects: `name`, `value`, `path`, `domain`,
    /// `httpOnly`, `secure`, `sameSite`, `expiry`).
    pub async fn cookies(&self) -> Result<Vec<Value>> {
        let v = self.get("/cookie").await?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// One cookie visible to the current page, by name.
    pub async fn cookie(&self, name: &str) -> Result<Option<Value>> {
        Ok(self.cookies().await?.into_iter().find(|c| c["name"] == name))
    }

    /// Adds a cookie for the current page's domain (`{"name": …, "value": …, "path": "/", …}`).
    pub async fn add_cookie(&self, cookie: Value) -> Result<()> {
        self.post("/cookie", json!({ "cookie": cookie })).await.map(|_| ())
    }

    /// Deletes one cookie of the current page's domain.
    pub async fn delete_cookie(&self, name: &str) -> Result<()> {
        self.delete(&format!("/cookie/{name}")).await.map(|_| ())
    }

    /// Deletes every cookie of the current page's domain.
    pub async fn delete_all_cookies(&self) -> Result<()> {
        self.delete("/cookie").await.map(|_| ())
    }

    /// Waits until the current URL satisfies `done`; returns it. The error names the last URL and the page's
    /// text.
    pub async fn wait_for_url(&self, done: impl Fn(&str) -> bool, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let url = self.current_url().await?;
            if done(&url) {
                return Ok(url);
            }
            if Instant::now() > deadline {
                let body = self.body_text().await.unwrap_or_default();
                bail!(
                    "timed out after {timeout:?} waiting for the URL; still on {url}, which says:\n{}",
                    clip(&body, 2000)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the page's source contains `needle` (a form that answers on the same URL: the URL alone cannot
    /// say whether the new page is in yet); returns the source.
    pub async fn wait_for_source(&self, needle: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let source = self.page_source().await?;
            if source.contains(needle) {
                return Ok(source);
            }
            if Instant::now() > deadline {
                let body = self.body_text().await.unwrap_or_default();
                bail!("timed out after {timeout:?} waiting for {needle:?}; the page says:\n{}", clip(&body, 2000));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the current URL starts with `prefix`; returns it.
    pub async fn wait_for_url_prefix(&self, prefix: &str, timeout: Duration) -> Result<String> {
        self.wait_for_url(|u| u.starts_with(prefix), timeout).await.with_context(|| format!("waiting for {prefix}…"))
    }

    /// Ends the session and stops the browser and its driver.
    pub async fn close(mut self) -> Result<()> {
        let result = if self.session.is_empty() {
            Ok(())
        } else {
            let url = self.session.clone();
            self.session.clear();
            self.call(reqwest::Method::DELETE, &url, None).await.map(|_| ())
        };
        self.kill();
        result
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.driver.take() {
            if !self.session_id.is_empty() && !self.session.is_empty() {
                // Synchronous best effort (Drop cannot await): ask chromedriver to quit the browser.
                delete_session_blocking(self.driver_port, &self.session_id);
            }
            // Then the whole process group: chromedriver and any chromium it left.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
            let _ = remove_dir(&self.dir);
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill();
    }
}

fn remove_dir(dir: &Path) -> std::io::Result<()> {
    // Chromium may still be writing its profile for a moment after it is killed.
    for _ in 0..5 {
        if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::remove_dir_all(dir)
}

fn delete_session_blocking(port: u16, session_id: &str) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let request = format!(
        "DELETE /session/{session_id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return;
    }
    // Read one response (chromedriver may keep the connection open): headers, then Content-Length bytes.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            return;
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let length = String::from_utf8_lossy(&got[..end])
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return;
            }
        }
    }
}

fn element_id(v: &Value) -> Option<ElementId> {
    v.get(ELEMENT_KEY).and_then(Value::as_str).map(|s| ElementId(s.to_string()))
}

fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let end = (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    &s[..end]
}
