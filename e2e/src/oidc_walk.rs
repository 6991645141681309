//! Walking the provider's login over plain HTTP, without a browser — for tests that tamper with the flow (replayed
//! codes, swapped state, wrong nonce…).
//!
//! [`HttpWalker`] follows redirects by hand with its own cookie jar (name → value, sent to every path of every
//! host: enough for one provider), fills any form the provider shows (the development login form: login name,
//! any password) and stops at the first redirect that leaves the provider — the client's redirect URI with
//! `code`, `state` and `iss` (or `error`) — without requesting it.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use reqwest::{StatusCode, Url, header};

/// How many requests one walk may take.
const MAX_HOPS: usize = 20;

/// The password typed into the development login form (any works).
pub const PASSWORD: &str = "any-password";

/// A hand-driven HTTP user agent for the provider's pages.
pub struct HttpWalker {
    client: reqwest::Client,
    jar: BTreeMap<String, String>,
}

/// Logs `login` in, starting from the provider's authorization URL (as built by the relying party); returns the
/// final redirect to the client's redirect URI (`REDIRECT_URI?code=…&state=…&iss=…`), not requested.
pub async fn login_via_http(authorize_url: &str, login: &str) -> Result<String> {
    HttpWalker::new()?.login(authorize_url, login).await
}

/// What one request answered.
struct Answer {
    status: StatusCode,
    location: Option<Url>,
    body: String,
}

impl HttpWalker {
    /// A walker with an empty cookie jar.
    pub fn new() -> Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(30))
            .no_proxy()
            .build()?;
        Ok(HttpWalker { client, jar: BTreeMap::new() })
    }

    /// The cookies collected so far (name → value).
    pub fn cookies(&self) -> &BTreeMap<String, String> {
        &self.jar
    }

    /// Forgets every cookie (a new user agent).
    pub fn clear_cookies(&mut self) {
        self.jar.clear();
    }

    /// Logs `login` in from `authorize_url`: follows the provider's redirects, fills the login form (and any
    /// other form it shows), and returns the first redirect that leaves the provider's origin, unrequested.
    /// With a provider session already in the jar no form appears.
    pub async fn login(&mut self, authorize_url: &str, login: &str) -> Result<String> {
        let start = Url::parse(authorize_url).with_context(|| format!("authorization URL {authorize_url}"))?;
        self.walk(start, Some(login)).await
    }

    /// RP-initiated logout: requests `end_session_url` (`{issuer}/session/end?…`), confirms on the provider's
    /// page, and returns where the provider sends the user agent next: the `post_logout_redirect_uri`
    /// (unrequested) when the request named one, else `None` once the provider's "signed out" page is reached.
    pub async fn logout(&mut self, end_session_url: &str) -> Result<Option<String>> {
        let provider = Url::parse(end_session_url).with_context(|| format!("end-session URL {end_session_url}"))?;
        let mut url = provider.clone();
        let mut form: Option<(Url, Vec<(String, String)>)> = None;
        for _ in 0..MAX_HOPS {
            let answer = match form.take() {
                Some((action, fields)) => {
                    url = action.clone();
                    self.post_form(&action, &fields).await?
                }
                None => self.get(&url).await?,
            };
            if let Some(next) = answer.location {
                if next.origin() != provider.origin() {
                    return Ok(Some(next.to_string()));
                }
                url = next;
                continue;
            }
            if !answer.status.is_success() {
                bail!("{url} answered {}: {}", answer.status, clip(&answer.body, 1000));
            }
            if answer.body.contains("id=\"logged-out\"") {
                return Ok(None);
            }
            let parsed = parse_form(&answer.body)
                .with_context(|| format!("{url}: neither a redirect nor a form: {}", clip(&answer.body, 1000)))?;
            let mut fields = parsed.fields;
            fields.retain(|(name, _)| name != "logout");
            fields.push(("logout".into(), "yes".into()));
            form = Some((url.join(&parsed.action)?, fields));
        }
        bail!("logout took more than {MAX_HOPS} requests")
    }

    async fn walk(&mut self, start: Url, login: Option<&str>) -> Result<String> {
        let provider = start.clone();
        let mut url = start;
        let mut form: Option<(Url, Vec<(String, String)>)> = None;
        for _ in 0..MAX_HOPS {
            let answer = match form.take() {
                Some((action, fields)) => {
                    url = action.clone();
                    self.post_form(&action, &fields).await?
                }
                None => self.get(&url).await?,
            };
            if let Some(next) = answer.location {
                if next.origin() != provider.origin() {
                    return Ok(next.to_string());
                }
                url = next;
                continue;
            }
            if !answer.status.is_success() {
                bail!("{url} answered {}: {}", answer.status, provider_error(&answer.body));
            }
            let Some(parsed) = parse_form(&answer.body) else {
                bail!("{url}: the provider showed no form and no redirect: {}", provider_error(&answer.body));
            };
            let mut fields = parsed.fields;
            for (name, value) in fields.iter_mut() {
                match name.as_str() {
                    "login" => *value = login.context("the provider asks for a login")?.to_string(),
                    "password" => *value = PASSWORD.to_string(),
                    _ => {}
                }
            }
            form = Some((url.join(&parsed.action)?, fields));
        }
        bail!("the login took more than {MAX_HOPS} requests")
    }

    async fn get(&mut self, url: &Url) -> Result<Answer> {
        let request = self.client.get(url.clone());
        self.send(request, url).await
    }

    async fn post_form(&mut self, url: &Url, fields: &[(String, String)]) -> Result<Answer> {
        let request = self.client.post(url.clone()).form(fields);
        self.send(request, url).await
    }

    async fn send(&mut self, mut request: reqwest::RequestBuilder, url: &Url) -> Result<Answer> {
        if !self.jar.is_empty() {
            let cookie = self.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
            request = request.header(header::COOKIE, cookie);
        }
        let response = request.send().await.with_context(|| format!("requesting {url}"))?;
        for set in response.headers().get_all(header::SET_COOKIE) {
            if let Ok(set) = set.to_str() {
                self.store(set);
            }
        }
        let status = response.status();
        let location = match response.headers().get(header::LOCATION) {
            Some(l) if status.is_redirection() => {
                let l = l.to_str().context("Location is not text")?;
                Some(url.join(l).with_context(|| format!("Location {l}"))?)
            }
            _ => None,
        };
        let body = response.text().await.unwrap_or_default();
        Ok(Answer { status, location, body })
    }

    /// Takes one `Set-Cookie` header: stores `name=value`, or forgets the cookie when it is expired.
    fn store(&mut self, set_cookie: &str) {
        let mut parts = set_cookie.split(';');
        let Some((name, value)) = parts.next().and_then(|p| p.split_once('=')) else { return };
        let (name, value) = (name.trim().to_string(), value.trim().to_string());
        let expired = parts.any(|attr| {
            let attr = attr.trim().to_ascii_lowercase();
            attr == "max-age=0"
                || attr.starts_with("max-age=-")
                || (attr.starts_with("expires=") && attr.contains("1970"))
        });
        if expired || value.is_empty() {
            self.jar.remove(&name);
        } else {
            self.jar.insert(name, value);
        }
    }
}

/// A form found in a page: its action and its fields (inputs with a name, and the name/value of a submit
/// button with a name).
struct Form {
    action: String,
    fields: Vec<(String, String)>,
}

/// The first `<form>` of `html` with its `<input>` fields; buttons with a `name` count as fields too (so
/// `<button name=logout value=yes form=…>` outside the form is included when it names this form).
fn parse_form(html: &str) -> Option<Form> {
    let lower = html.to_ascii_lowercase();
    let start = lower.find("<form")?;
    let open_end = start + lower[start..].find('>')?;
    let attrs = attributes(&html[start + 5..open_end]);
    let action = attr(&attrs, "action").unwrap_or_default();
    let form_id = attr(&attrs, "id");
    let end = lower[open_end..].find("</form").map_or(html.len(), |i| open_end + i);
    let mut fields = Vec::new();
    for tag in tags(&html[open_end..end], &lower[open_end..end], "<input") {
        let a = attributes(tag);
        let kind = attr(&a, "type").unwrap_or_default().to_ascii_lowercase();
        if let Some(name) = attr(&a, "name")
            && !matches!(kind.as_str(), "submit" | "button" | "image" | "reset")
        {
            fields.push((name, attr(&a, "value").unwrap_or_default()));
        }
    }
    // Named buttons tied to the form by `form=ID` anywhere in the page (the first "yes"-like one only).
    if let Some(id) = form_id {
        for tag in tags(html, &lower, "<button") {
            let a = attributes(tag);
            if attr(&a, "form").as_deref() == Some(id.as_str())
                && let Some(name) = attr(&a, "name")
            {
                fields.push((name, attr(&a, "value").unwrap_or_default()));
                break;
            }
        }
    }
    Some(Form { action, fields })
}

/// The attribute text of each `<NAME …>` tag in `html` (`lower` is `html` lowercased).
fn tags<'a>(html: &'a str, lower: &str, open: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(i) = lower[at..].find(open) {
        let s = at + i + open.len();
        let Some(e) = lower[s..].find('>') else { break };
        found.push(&html[s..s + e]);
        at = s + e;
    }
    found
}

/// `name="value"` pairs of a tag's attribute text (names lowercased, values unescaped; quoted or bare).
fn attributes(tag: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let chars: Vec<char> = tag.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == '/') {
            i += 1;
        }
        let name_start = i;
        while i < chars.len() && !chars[i].is_whitespace() && chars[i] != '=' && chars[i] != '/' {
            i += 1;
        }
        if i == name_start {
            i += 1;
            continue;
        }
        let name: String = chars[name_start..i].iter().collect::<String>().to_ascii_lowercase();
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < chars.len() && chars[i] == '=' {
            i += 1;
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            if i < chars.len() && (chars[i] == '"' || chars[i] == '\'') {
                let quote = chars[i];
                i += 1;
                let s = i;
                while i < chars.len() && chars[i] != quote {
                    i += 1;
                }
                value = chars[s..i].iter().collect();
                i += 1;
            } else {
                let s = i;
                while i < chars.len() && !chars[i].is_whitespace() {
                    i += 1;
                }
                value = chars[s..i].iter().collect();
            }
        }
        out.push((name, unescape(&value)));
    }
    out
}

fn attr(attrs: &[(String, String)], name: &str) -> Option<String> {
    attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// Undoes the HTML escapes oidc-provider's templates use.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#34;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#x2F;", "/")
        .replace("&amp;", "&")
}

/// The OAuth error code and description on the provider's error page, or the start of the page.
fn provider_error(body: &str) -> String {
    let field = |class: &str| {
        let marker = format!("class=\"{class}\">");
        let i = body.find(&marker)? + marker.len();
        let e = body[i..].find('<')?;
        Some(unescape(&body[i..i + e]))
    };
    match (field("error"), field("error_description")) {
        (Some(e), Some(d)) => format!("provider error {e}: {d}"),
        (Some(e), None) => format!("provider error {e}"),
        _ => clip(body, 1000).to_string(),
    }
}

fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let end = (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_development_login_form() {
        let html = r#"<form autocomplete="off" action="/interaction/abc&amp;d/login" method="post">
  <input type="hidden" name="prompt" value="login"/>
  <input required type="text" name="login" placeholder="Enter any login" autofocus="on">
  <input required type="password" name="password" placeholder="and password" >
  <button type="submit" class="login login-submit">Sign-in</button>
</form>"#;
        let form = parse_form(html).unwrap_or_else(|| panic!("no form"));
        assert_eq!(form.action, "/interaction/abc&d/login");
        let names: Vec<&str> = form.fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["prompt", "login", "password"]);
        assert_eq!(form.fields[0].1, "login");
    }

    #[test]
    fn parses_the_logout_confirm_form_with_its_outside_button() {
        let html = r#"<form method="post" action="http://127.0.0.1:1/session/end/confirm" id="op.logoutForm"><input type="hidden" name="xsrf" value="x1"/></form>
<button id="logout-yes" type="submit" form="op.logoutForm" name="logout" value="yes">Yes</button>
<button id="logout-no" type="submit" form="op.logoutForm">No</button>"#;
        let form = parse_form(html).unwrap_or_else(|| panic!("no form"));
        assert_eq!(form.action, "http://127.0.0.1:1/session/end/confirm");
        assert_eq!(form.fields, [("xsrf".to_string(), "x1".to_string()), ("logout".to_string(), "yes".to_string())]);
    }

    #[test]
    fn cookie_jar_stores_and_forgets() {
        let Ok(mut w) = HttpWalker::new() else { panic!("client") };
        w.store("_session=abc; path=/; samesite=lax; httponly");
        w.store("_interaction=u1; path=/interaction/u1; expires=Thu, 01 Jan 2099 00:00:00 GMT");
        assert_eq!(w.cookies().get("_session").map(String::as_str), Some("abc"));
        w.store("_interaction=; path=/interaction/u1; expires=Thu, 01 Jan 1970 00:00:00 GMT");
        assert!(!w.cookies().contains_key("_interaction"));
    }
}
