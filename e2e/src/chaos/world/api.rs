//! The server's API as the simulator drives it: the admin token's requests (retried through restarts), closing a
//! month (racing another replica), its lines, the open month's snapshot, the allocations export, a dispute and the
//! finance session that approves its credit.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::World;

impl World<'_> {
    /// Closes `period` (through the replica on `port` when given), acknowledging what the server asks to; the hash.
    pub(super) async fn close(&self, period: &str, port: Option<u16>) -> Result<Option<String>> {
        let base = port.map_or(self.base.clone(), |p| format!("http://127.0.0.1:{p}"));
        let path = format!("/api/v1/periods/{period}/close");
        let mut acknowledge = false;
        let started = Instant::now();
        loop {
            if started.elapsed() > Duration::from_secs(120) {
                bail!("closing {period}: not closed within 120 s");
            }
            let mut req = self.http.post(format!("{base}{path}")).bearer_auth(&self.seeded.admin_token);
            if acknowledge {
                req = req.json(&json!({"acknowledge": "chaos simulation: closing as it is"}));
            }
            let (code, v) = match req.send().await {
                Ok(r) if r.status().as_u16() < 500 => {
                    let code = r.status().as_u16();
                    (code, r.json::<Value>().await.unwrap_or_default())
                }
                // The server (or PostgreSQL) is away: try again.
                _ => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    continue;
                }
            };
            let detail = v["detail"].as_str().unwrap_or_default();
            match code {
                200 => return Ok(v["hash"].as_str().map(str::to_string)),
                // The other replica closed it: its hash.
                409 if detail.contains("already closed") => {
                    let (_, hash) = self.lines(period).await?;
                    return Ok(hash);
                }
                // The other replica is closing it right now: ask again.
                409 if detail.contains("being closed") => tokio::time::sleep(Duration::from_millis(300)).await,
                409 if detail.contains("cannot be closed as it is") && !acknowledge => acknowledge = true,
                _ => bail!("closing {period}: {code} {v}"),
            }
        }
    }

    /// A closed month's lines and hash.
    pub(super) async fn lines(&self, period: &str) -> Result<(Vec<Value>, Option<String>)> {
        let mut lines = Vec::new();
        let mut hash = None;
        for page in 1..1000 {
            let (code, v) = self
                .admin_retry(
                    reqwest::Method::GET,
                    &format!("/api/v1/ledger?period={period}&per_page=500&page={page}"),
                    None,
                    Duration::from_secs(60),
                )
                .await?;
            if code != 200 {
                bail!("ledger of {period}: {code} {v}");
            }
            hash = v["hash"].as_str().map(str::to_string);
            let got = v["lines"].as_array().cloned().unwrap_or_default();
            let done = got.len() < 500;
            lines.extend(got);
            if done {
                break;
            }
        }
        Ok((lines, hash))
    }

    /// The open month's lines, from a snapshot taken after `after`.
    pub(super) async fn open_month_lines(&self, period: &str, after: time::OffsetDateTime) -> Result<Vec<Value>> {
        let started = Instant::now();
        loop {
            let (code, v) = self
                .admin_retry(
                    reqwest::Method::GET,
                    &format!("/api/v1/ledger?period={period}&per_page=500"),
                    None,
                    Duration::from_secs(60),
                )
                .await?;
            let as_of = v["as_of"]
                .as_str()
                .and_then(|t| time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok());
            if code == 200 && as_of.is_some_and(|t| t >= after) {
                return Ok(v["lines"].as_array().cloned().unwrap_or_default());
            }
            if started.elapsed() > Duration::from_secs(90) {
                bail!("the open month's ledger never caught up with {after}: {code} as of {as_of:?}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The month's allocations export, each row with the organization-specific IDs left out.
    pub(super) async fn allocations(&self, period: &str) -> Result<BTreeSet<String>> {
        let r = self
            .http
            .get(format!("{}/api/v1/exports/allocations.csv?period={period}", self.base))
            .bearer_auth(&self.seeded.admin_token)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("allocations of {period}: {}", r.status());
        }
        let text = r.text().await?;
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
        let keep: Vec<usize> =
            (0..header.len()).filter(|i| !matches!(header[*i], "cluster_id" | "tenant_id" | "department_id")).collect();
        Ok(lines
            .map(|l| {
                let cells: Vec<&str> = l.split(',').collect();
                keep.iter().map(|i| cells.get(*i).copied().unwrap_or_default()).collect::<Vec<_>>().join(",")
            })
            .collect())
    }

    /// Opens a dispute on one line of `period` and accepts it with a credit of 1.00; its ID.
    pub(super) async fn accepted_dispute(&self, period: &str) -> Result<String> {
        let (lines, _) = self.lines(period).await?;
        let line = lines
            .iter()
            .find(|l| {
                l["term"] != "credit"
                    && l["amount"].as_str().is_some_and(|a| !a.starts_with('-') && a != "0" && a != "0.00")
            })
            .with_context(|| format!("{period} has no line to dispute"))?;
        let (code, d) = self
            .admin_retry(
                reqwest::Method::POST,
                "/api/v1/disputes",
                Some(json!({"period": period, "line_ids": [line["line_id"]], "reason": "chaos: disputed"})),
                Duration::from_secs(60),
            )
            .await?;
        if code >= 300 {
            bail!("opening a dispute: {code} {d}");
        }
        let id = d["id"].as_str().context("dispute id")?.to_string();
        let (code, a) = self
            .admin_retry(
                reqwest::Method::POST,
                &format!("/api/v1/disputes/{id}/accept"),
                Some(json!({"reason": "chaos: accepted", "credit_amount": "1.00"})),
                Duration::from_secs(60),
            )
            .await?;
        if code >= 300 {
            bail!("accepting the dispute: {code} {a}");
        }
        Ok(id)
    }

    /// A finance session (cookie, CSRF token) through the demo sign-in.
    pub(super) async fn finance_session(&self) -> Result<(String, String)> {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
        let r = client
            .post(format!("{}/auth/demo", self.base))
            .header("origin", &self.base)
            .form(&[("org", "demo"), ("role", "finance")])
            .send()
            .await?;
        let cookie = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|c| c.split(';').next())
            .find(|c| c.starts_with("gl_session="))
            .context("no session cookie from the demo sign-in")?
            .to_string();
        let me: Value =
            client.get(format!("{}/api/v1/me", self.base)).header("cookie", &cookie).send().await?.json().await?;
        let csrf = me["csrf_token"].as_str().context("no CSRF token")?.to_string();
        Ok((cookie, csrf))
    }

    pub(super) async fn approve_credit(&self, id: &str, (cookie, csrf): &(String, String)) -> Result<()> {
        let started = Instant::now();
        loop {
            let r = self
                .http
                .post(format!("{}/api/v1/disputes/{id}/credit/approve", self.base))
                .header("cookie", cookie)
                .header("x-csrf-token", csrf)
                .header("origin", &self.base)
                .json(&json!({}))
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) if r.status().as_u16() < 500 => {
                    bail!("approving the credit: {} {}", r.status(), r.text().await.unwrap_or_default())
                }
                other if started.elapsed() > Duration::from_secs(60) => bail!("approving the credit: {other:?}"),
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }

    pub(super) async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.seeded.admin_token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await?;
        let code = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        Ok((code, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    /// Retries a request through server restarts until it gets an answer other than 5xx or no answer.
    pub(super) async fn admin_retry(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        bound: Duration,
    ) -> Result<(u16, Value)> {
        let started = Instant::now();
        loop {
            match self.admin(method.clone(), path, body.clone()).await {
                Ok((code, v)) if code < 500 => return Ok((code, v)),
                other => {
                    if started.elapsed() > bound {
                        bail!("{method} {path}: no answer within {bound:?}: {other:?}");
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}
