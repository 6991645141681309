//! Browser sessions: server-side rows in PostgreSQL, an HttpOnly cookie with the organization and a secret.
//!
//! The cookie is `__Host-gl_session` (Secure, Path=/, no Domain) — or `gl_session` without Secure when the
//! portal is reached over plain HTTP on a loopback address, where browsers would drop a Secure cookie. Both are
//! HttpOnly and SameSite=Lax. A new session (new secret) is made at every login; it ends at logout, after
//! the idle timeout, or at the absolute timeout, whichever comes first.

use axum::http::{HeaderMap, HeaderValue, header};
use gpuledger_core::ids::{DepartmentId, OrgId};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{Actor, Principal, Role, random_secret, sha256, store};
use crate::{
    db::{Database, DbError, OrgTx},
    error::AppError,
};

/// Session cookie name over HTTPS.
pub const SECURE_COOKIE: &str = "__Host-gl_session";
/// Session cookie name over plain HTTP on loopback.
pub const PLAIN_COOKIE: &str = "gl_session";
/// Pending-login cookie names (state, nonce and PKCE verifier are bound to it).
pub const LOGIN_SECURE_COOKIE: &str = "__Host-gl_login";
/// See [`LOGIN_SECURE_COOKIE`].
pub const LOGIN_PLAIN_COOKIE: &str = "gl_login";

/// How sessions behave.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    /// An unused session ends after this long.
    pub idle: time::Duration,
    /// A session ends this long after login, used or not.
    pub absolute: time::Duration,
    /// The portal's public base URL (`https://ledger.example.com`); when unset, it is taken from the request's
    /// `Host` (plain HTTP) — fine on loopback, configure it anywhere else.
    pub public_url: Option<String>,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self { idle: time::Duration::minutes(30), absolute: time::Duration::hours(12), public_url: None }
    }
}

impl SessionSettings {
    /// The base URL the browser reached us at (no trailing slash).
    pub fn base_url(&self, headers: &HeaderMap) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => {
                let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
                format!("http://{host}")
            }
        }
    }

    /// Whether the public URL is https: then browsers are told to use nothing else (HSTS).
    pub fn https(&self) -> bool {
        self.public_url.as_deref().is_some_and(|u| u.starts_with("https://"))
    }

    /// Whether cookies must be Secure: always, except plain HTTP on a loopback host.
    pub fn secure(&self, headers: &HeaderMap) -> bool {
        let base = self.base_url(headers);
        match base.strip_prefix("http://") {
            Some(rest) => !is_loopback(rest),
            None => true,
        }
    }
}

fn is_loopback(host_port: &str) -> bool {
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split([':', '/']).next().unwrap_or_default(),
    };
    host == "localhost" || host == "::1" || host.starts_with("127.")
}

/// The value of the first cookie named one of `names`.
pub fn cookie_named(headers: &HeaderMap, names: &[&str]) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        names.contains(&name).then(|| value.trim().to_string())
    })
}

/// Drops from the request's `Cookie` headers the session and pending-login cookies of the name this deployment
/// does not use (`gl_session` when cookies are `__Host-` ones, and the other way round): a cookie planted under
/// the other name — by a sibling subdomain or over plain HTTP, which `__Host-` rules out — is never read. Run on
/// every request (`app::peer`) before any handler looks at cookies.
pub fn keep_deployment_cookies(headers: &mut HeaderMap, secure: bool) {
    let foreign: [&str; 2] =
        if secure { [PLAIN_COOKIE, LOGIN_PLAIN_COOKIE] } else { [SECURE_COOKIE, LOGIN_SECURE_COOKIE] };
    let values: Vec<String> =
        headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).map(String::from).collect();
    if values.is_empty() {
        return;
    }
    let kept: Vec<&str> = values
        .iter()
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .filter(|pair| !foreign.contains(&pair.split_once('=').map_or(*pair, |(name, _)| name).trim()))
        .collect();
    headers.remove(header::COOKIE);
    if let Ok(v) = HeaderValue::from_str(&kept.join("; "))
        && !kept.is_empty()
    {
        headers.insert(header::COOKIE, v);
    }
}

/// The session cookie, if the request carries one.
pub fn cookie_value(headers: &HeaderMap) -> Option<String> {
    cookie_named(headers, &[SECURE_COOKIE, PLAIN_COOKIE])
}

/// A `Set-Cookie` value. `max_age` `Some(0)` deletes; `None` is a browser-session cookie.
pub fn set_cookie(secure: bool, secure_name: &str, plain_name: &str, value: &str, max_age: Option<i64>) -> HeaderValue {
    let name = if secure { secure_name } else { plain_name };
    let mut cookie = format!("{name}={value}; Path=/; HttpOnly; SameSite=Lax");
    if secure {
        cookie.push_str("; Secure");
    }
    if let Some(age) = max_age {
        cookie.push_str(&format!("; Max-Age={age}"));
    }
    HeaderValue::from_str(&cookie).unwrap_or_else(|_| HeaderValue::from_static("gl_invalid=; Max-Age=0"))
}

/// The CSRF token of a session: derived from its cookie, so checking it needs no database round trip, and
/// unknowable to a page that cannot read the HttpOnly cookie.
pub fn csrf_for(cookie: &str) -> String {
    let digest = Sha256::digest(format!("gpuledger-csrf\0{cookie}").as_bytes());
    hex::encode(&digest[..20])
}

/// Splits `<org>.<secret>`.
pub fn split(value: &str) -> Option<(OrgId, &str)> {
    let (org, secret) = value.split_once('.')?;
    if secret.len() != 64 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Uuid::try_parse(org).ok().map(|u| (OrgId::from_uuid(u), secret))
}

/// A new pair of (cookie value, hash to store) for `org`.
pub fn new_secret(org: OrgId) -> (String, Vec<u8>) {
    let value = format!("{}.{}", org.as_uuid().simple(), random_secret());
    let hash = sha256(&value);
    (value, hash)
}

/// What a login establishes.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// The user (already upserted).
    pub user_id: Uuid,
    /// Granted roles (at least one).
    pub roles: Vec<Role>,
    /// Departments of the department-manager grants.
    pub departments: Vec<DepartmentId>,
    /// The ID token, for RP-initiated logout.
    pub id_token_hint: Option<String>,
    /// Client address.
    pub source: String,
}

/// Creates a session in `tx`'s organization; returns the cookie value.
pub async fn create(tx: &mut OrgTx, settings: &SessionSettings, new: &NewSession) -> Result<String, DbError> {
    let (value, hash) = new_secret(tx.org());
    let roles: Vec<&str> = new.roles.iter().map(|r| r.as_str()).collect();
    let departments: Vec<Uuid> = new.departments.iter().map(|d| d.as_uuid()).collect();
    let csrf = csrf_for(&value);
    let record = store::SessionRecord {
        secret_sha256: hash,
        user_id: new.user_id,
        roles: &roles,
        departments: &departments,
        csrf: &csrf,
        id_token_hint: &new.id_token_hint,
        source: &new.source,
        absolute_secs: settings.absolute.whole_seconds() as f64,
        idle_secs: settings.idle.whole_seconds() as f64,
    };
    store::insert_session(tx, &record).await?;
    Ok(value)
}

/// The principal of a live session cookie; 401 when it is unknown, tampered with, ended or timed out.
pub async fn principal(db: &Database, cookie: &str) -> Result<Principal, AppError> {
    let (org, _) = split(cookie).ok_or(AppError::Unauthorized)?;
    let mut tx = db.begin_org(org).await?;
    let principal = principal_in(&mut tx, cookie).await;
    tx.commit_identity().await?;
    principal
}

/// [`principal`] inside `tx` (an organization-wide transaction of the cookie's organization, see [`split`]), for a
/// caller that reads more in the same transaction (the page cache reads the read model's generation with it).
pub async fn principal_in(tx: &mut crate::db::OrgTx, cookie: &str) -> Result<Principal, AppError> {
    let (org, _) = split(cookie).ok_or(AppError::Unauthorized)?;
    if org != tx.org() {
        return Err(AppError::Unauthorized);
    }
    // last_seen_at is written at most once a minute; the idle timeout is measured from it.
    let row = store::live_session(tx, sha256(cookie)).await?;
    let Some((session_id, user_id, roles, departments, email, subject, rate_limit_per_minute)) = row else {
        // A session of a suspended organization is refused with the reason (it works again once resumed).
        return Err(crate::auth::store::suspension(tx).await?.unwrap_or(AppError::Unauthorized));
    };
    let roles: Vec<Role> = roles.iter().filter_map(|r| Role::parse(r)).collect();
    if roles.is_empty() {
        return Err(AppError::Unauthorized);
    }
    let departments = if roles.iter().any(|r| r.org_wide()) {
        None
    } else {
        Some(departments.into_iter().map(DepartmentId::from_uuid).collect())
    };
    Ok(Principal {
        org,
        actor: Actor::User { user_id, session_id, name: email.unwrap_or(subject), roles, csrf: csrf_for(cookie) },
        departments,
        source: String::new(),
        rate_limit_per_minute,
    })
}

/// Ends the session of `cookie`; returns its ID token (for the provider's logout) when it was live.
pub async fn end(db: &Database, cookie: &str) -> Result<Option<Option<String>>, AppError> {
    let Some((org, _)) = split(cookie) else { return Ok(None) };
    let mut tx = db.begin_org(org).await?;
    let ended = store::end_session(&mut tx, sha256(cookie)).await?;
    tx.commit_quiet().await?;
    Ok(ended)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn cookies_are_found_by_name_and_split_into_org_and_secret() {
        let org = OrgId::from_uuid(Uuid::new_v4());
        let (value, hash) = new_secret(org);
        assert_eq!(hash.len(), 32);
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("a=b; gl_session={value}; c=d")).unwrap());
        assert_eq!(cookie_value(&headers).as_deref(), Some(value.as_str()));
        assert_eq!(split(&value).map(|(o, _)| o), Some(org));
        // A tampered secret (wrong length or alphabet) is not even looked up.
        assert!(split(&value.replace('.', ".x")).is_none());
        assert!(split("nonsense").is_none());
        assert_ne!(csrf_for(&value), csrf_for(&format!("{value}0")));
    }

    #[test]
    fn cookies_are_secure_except_plain_http_on_loopback() {
        let mut headers = HeaderMap::new();
        let settings = SessionSettings::default();
        for (host, secure) in
            [("127.0.0.1:8080", false), ("localhost", false), ("[::1]:80", false), ("ledger.example", true)]
        {
            headers.insert(header::HOST, HeaderValue::from_static(host));
            assert_eq!(settings.secure(&headers), secure, "{host}");
        }
        let https = SessionSettings { public_url: Some("https://ledger.example".into()), ..SessionSettings::default() };
        assert!(https.secure(&headers));
        let cookie = set_cookie(true, SECURE_COOKIE, PLAIN_COOKIE, "v", None);
        let text = cookie.to_str().unwrap();
        assert!(text.starts_with("__Host-gl_session=v; Path=/; HttpOnly; SameSite=Lax; Secure"), "{text}");
        let plain = set_cookie(false, SECURE_COOKIE, PLAIN_COOKIE, "v", Some(0));
        assert_eq!(plain.to_str().unwrap(), "gl_session=v; Path=/; HttpOnly; SameSite=Lax; Max-Age=0");
        assert!(https.https() && !settings.https());
    }

    #[test]
    fn only_the_deployments_cookie_names_are_kept() {
        let both = || {
            let mut h = HeaderMap::new();
            h.append(header::COOKIE, HeaderValue::from_static("gl_session=p; theme=dark"));
            h.append(header::COOKIE, HeaderValue::from_static("__Host-gl_session=s; gl_login=l; __Host-gl_login=sl"));
            h
        };
        let mut secure = both();
        keep_deployment_cookies(&mut secure, true);
        assert_eq!(cookie_value(&secure).as_deref(), Some("s"));
        assert_eq!(secure[header::COOKIE], "theme=dark; __Host-gl_session=s; __Host-gl_login=sl");
        let mut plain = both();
        keep_deployment_cookies(&mut plain, false);
        assert_eq!(cookie_value(&plain).as_deref(), Some("p"));
        assert_eq!(plain[header::COOKIE], "gl_session=p; theme=dark; gl_login=l");
        // A planted plain cookie alone is not read on an https deployment.
        let mut planted = HeaderMap::new();
        planted.insert(header::COOKIE, HeaderValue::from_static("gl_session=p"));
        keep_deployment_cookies(&mut planted, true);
        assert!(cookie_value(&planted).is_none() && !planted.contains_key(header::COOKIE));
    }
}
