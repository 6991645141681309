//! Sign-in with the organization's OpenID provider: discovery, authorization code with PKCE (S256), state and
//! nonce bound to the browser by a pending-login cookie, ID-token validation (signature, issuer, audience,
//! expiry, nonce), groups → roles, and RP-initiated logout when the provider offers it.

use std::{
    collections::HashMap,
    net::IpAddr,
    path::Path,
    sync::Mutex,
    time::{Duration, Instant},
};

use base64::Engine;
use gpuledger_core::ids::DepartmentId;
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope as OidcScope, TokenResponse,
    core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata},
};
use serde_json::Value;

use super::{Role, sha256, store};
use crate::{
    db::{DbError, OrgTx},
    error::AppError,
};

/// An organization's provider settings (the client secret never leaves the server).
#[derive(Debug, Clone)]
pub struct IdpSettings {
    /// The issuer URL (discovery at `{issuer}/.well-known/openid-configuration`).
    pub issuer: String,
    /// The client registered for GPU Ledger.
    pub client_id: String,
    /// Its secret: the organization's file in the mounted secrets directory when there is one, else the stored one.
    pub client_secret: String,
    /// Where the secret came from: `file` (the mounted secrets directory) or `database`.
    pub client_secret_source: &'static str,
    /// The ID-token (or userinfo) claim listing the user's groups.
    pub groups_claim: String,
    /// Requested scopes, space-separated.
    pub scopes: String,
}

/// Loads the organization's provider settings, if any. With `secrets_dir` (`--oidc-secrets-dir`, e.g. a mounted
/// Kubernetes Secret), a file named after the organization's slug holds its client secret and takes precedence over
/// the stored one, so the secret need not be in the database. The file is named by the organization the
/// transaction is scoped to: an organization's admins can never make the server send another's secret.
pub async fn settings(tx: &mut OrgTx, secrets_dir: Option<&Path>) -> Result<Option<IdpSettings>, DbError> {
    let row = store::idp_settings(tx).await?;
    Ok(row.map(|store::IdpRow { issuer, client_id, client_secret: stored, groups_claim, scopes, slug }| {
        let (client_secret, client_secret_source) = match mounted_secret(secrets_dir, &slug) {
            Some(secret) => (secret, "file"),
            None => (stored, "database"),
        };
        IdpSettings { issuer, client_id, client_secret, client_secret_source, groups_claim, scopes }
    }))
}

/// The organization's client secret from the mounted secrets directory: `<dir>/<slug>`, trimmed; `None` when there
/// is no directory, no such file, or it is empty. A file that exists but cannot be read is logged.
pub fn mounted_secret(secrets_dir: Option<&Path>, slug: &str) -> Option<String> {
    let path = secrets_dir?.join(slug);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text.trim().to_string()).filter(|s| !s.is_empty()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "OIDC client secret file unreadable; using the stored one");
            None
        }
    }
}

/// Issuer → (fetched at, metadata, end-session endpoint).
type MetadataCache = HashMap<String, (Instant, CoreProviderMetadata, Option<String>)>;

/// Which identity providers the server may talk to. By default an issuer is an https URL whose host resolves to
/// public addresses only: an organization admin cannot make the server probe the internal network (cloud metadata
/// services, databases, admin ports) through discovery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IssuerPolicy {
    /// `--oidc-allow-http-loopback`: plain `http://` for a loopback host (a provider on the same machine).
    pub allow_http_loopback: bool,
    /// `--oidc-allow-private-issuer`: hosts on loopback, private, link-local or unique-local addresses (a provider
    /// inside the operator's own network).
    pub allow_private: bool,
}

impl IssuerPolicy {
    /// Checks what can be checked without the network: the scheme and an address-literal host. Returns the host.
    pub fn check_url(&self, issuer: &str) -> Result<(String, u16), String> {
        let url = reqwest::Url::parse(issuer).map_err(|_| "is not a URL".to_string())?;
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or("has no host")?.to_string();
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http_loopback && super::net::is_loopback_host(&host) => {}
            "http" if super::net::is_loopback_host(&host) => {
                return Err(
                    "must be https (http for a loopback host needs the server's --oidc-allow-http-loopback)".into()
                );
            }
            _ => return Err("must be an https URL".into()),
        }
        if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() {
            return Err("may not carry credentials, a query or a fragment".into());
        }
        let literal = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
        if let Some(ip) = literal {
            self.check_address(ip)?;
        }
        Ok((host, url.port_or_known_default().unwrap_or(443)))
    }

    /// Refuses an internal address unless the operator allowed private issuers.
    pub fn check_address(&self, ip: IpAddr) -> Result<(), String> {
        if self.allow_private || !super::net::is_internal(ip) {
            return Ok(());
        }
        Err(format!(
            "resolves to {ip}, a loopback, private or link-local address (allowed only with the server's \
             --oidc-allow-private-issuer)"
        ))
    }

    /// The whole check: [`Self::check_url`], then every address the host resolves to.
    pub async fn check(&self, issuer: &str) -> Result<(), String> {
        let (host, port) = self.check_url(issuer)?;
        if self.allow_private {
            return Ok(());
        }
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let addrs = tokio::net::lookup_host((host.as_str(), port)).await.map_err(|e| {
            tracing::warn!(issuer, error = %e, "the identity provider's host does not resolve");
            "has a host that does not resolve".to_string()
        })?;
        for addr in addrs {
            self.check_address(addr.ip())?;
        }
        Ok(())
    }
}

impl super::net::AddressPolicy for IssuerPolicy {
    const WHAT: &'static str = "identity provider";
    fn check_address(&self, ip: IpAddr) -> Result<(), String> {
        IssuerPolicy::check_address(self, ip)
    }
}

/// Provider metadata, fetched once per issuer and kept for a few minutes; and the HTTP client that talks to
/// providers (it never follows redirects: the library's SSRF advice; and resolves names by the [`IssuerPolicy`]).
pub struct Providers {
    http: reqwest::Client,
    cache: Mutex<MetadataCache>,
    ttl: Duration,
    /// `--oidc-secrets-dir`: organizations' client secrets as files named by slug.
    pub secrets_dir: Option<std::path::PathBuf>,
    /// Which issuers may be used.
    pub policy: IssuerPolicy,
}

impl Default for Providers {
    fn default() -> Self {
        Self::new(None, IssuerPolicy::default())
    }
}

impl Providers {
    /// Providers with a secrets directory and an issuer policy.
    pub fn new(secrets_dir: Option<std::path::PathBuf>, policy: IssuerPolicy) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .dns_resolver(std::sync::Arc::new(super::net::GuardedResolver(policy)))
            .build()
            .unwrap_or_default();
        Self { http, cache: Mutex::new(HashMap::new()), ttl: Duration::from_secs(300), secrets_dir, policy }
    }

    /// Checks an issuer URL against the policy (scheme, and the addresses its host resolves to); the reason is
    /// meant for the admin saving the settings.
    pub async fn check_issuer(&self, issuer: &str) -> Result<(), String> {
        self.policy.check(issuer).await
    }
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers").finish_non_exhaustive()
    }
}

/// What callers are told when discovery fails; the details go to the server log only.
const DISCOVERY_FAILED: &str = "OpenID discovery failed";

/// Why a sign-in was refused (also what the audit log records).
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The provider could not be reached or answered nonsense.
    #[error("the identity provider is not available: {0}")]
    Provider(String),
    /// No pending login for this browser, or it was already used or is too old.
    #[error("no pending sign-in for this browser (expired, already used, or started elsewhere)")]
    NoPendingLogin,
    /// `state` differs from the one this browser's login started with.
    #[error("the state parameter does not match this browser's sign-in")]
    StateMismatch,
    /// The provider answered with an error.
    #[error("the identity provider refused the sign-in: {0}")]
    Refused(String),
    /// The code could not be exchanged (wrong, replayed, or PKCE mismatch).
    #[error("the authorization code was refused: {0}")]
    CodeRefused(String),
    /// The ID token failed validation (signature, issuer, audience, expiry or nonce).
    #[error("the ID token is not valid: {0}")]
    InvalidIdToken(String),
    /// Valid sign-in, but the user's groups map to no role here.
    #[error("signed in as {0}, but none of your groups has a role in this organization")]
    NoRole(String),
}

impl Providers {
    async fn metadata(&self, issuer: &str) -> Result<(CoreProviderMetadata, Option<String>), LoginError> {
        {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, meta, end)) = cache.get(issuer)
                && at.elapsed() < self.ttl
            {
                return Ok((meta.clone(), end.clone()));
            }
        }
        // Checked again before every discovery: the settings may predate the policy, or the DNS may have changed.
        if let Err(reason) = self.policy.check(issuer).await {
            tracing::warn!(issuer, reason, "identity provider issuer refused by the issuer policy");
            return Err(LoginError::Provider(DISCOVERY_FAILED.into()));
        }
        let url = IssuerUrl::new(issuer.to_string()).map_err(|e| {
            tracing::warn!(issuer, error = %e, "identity provider issuer is not a URL");
            LoginError::Provider(DISCOVERY_FAILED.into())
        })?;
        let meta = CoreProviderMetadata::discover_async(url, &self.http).await.map_err(|e| {
            tracing::warn!(issuer, error = %describe_token_error(&e), "OpenID discovery failed");
            LoginError::Provider(DISCOVERY_FAILED.into())
        })?;
        // The core metadata type has no end_session_endpoint: read it from the document itself.
        let end_session = self
            .http
            .get(format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')))
            .send()
            .await
            .ok()
            .and_then(|r| r.error_for_status().ok());
        let end_session = match end_session {
            Some(r) => r.json::<Value>().await.ok().and_then(|v| v["end_session_endpoint"].as_str().map(String::from)),
            None => None,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.insert(issuer.to_string(), (Instant::now(), meta.clone(), end_session.clone()));
        Ok((meta, end_session))
    }

    /// Checks that an issuer answers discovery (used when an admin saves settings).
    pub async fn check(&self, issuer: &str) -> Result<(), LoginError> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(issuer);
        self.metadata(issuer).await.map(|_| ())
    }

    /// The provider's logout URL for an ID token, when it supports RP-initiated logout.
    pub async fn logout_url(&self, idp: &IdpSettings, id_token: &str, after: &str) -> Option<String> {
        let (_, end) = self.metadata(&idp.issuer).await.ok()?;
        let mut url = reqwest::Url::parse(&end?).ok()?;
        url.query_pairs_mut()
            .append_pair("id_token_hint", id_token)
            .append_pair("client_id", &idp.client_id)
            .append_pair("post_logout_redirect_uri", after);
        Some(url.to_string())
    }
}

fn client(
    meta: CoreProviderMetadata,
    idp: &IdpSettings,
    redirect: &str,
) -> Result<
    CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    >,
    LoginError,
> {
    let redirect = RedirectUrl::new(redirect.to_string()).map_err(|e| LoginError::Provider(e.to_string()))?;
    Ok(CoreClient::from_provider_metadata(
        meta,
        ClientId::new(idp.client_id.clone()),
        Some(ClientSecret::new(idp.client_secret.clone())),
    )
    .set_redirect_uri(redirect))
}

/// Starts a sign-in: records state, nonce and PKCE verifier against a new pending-login secret (the cookie
/// value returned) and returns the provider's authorization URL.
pub async fn start(
    providers: &Providers,
    tx: &mut OrgTx,
    idp: &IdpSettings,
    redirect: &str,
    return_to: &str,
) -> Result<(String, String), AppError> {
    let unavailable = |e: LoginError| {
        tracing::warn!(issuer = %idp.issuer, error = %e, "cannot start a sign-in at the identity provider");
        AppError::Unavailable("the identity provider is not available right now".into())
    };
    let (meta, _) = providers.metadata(&idp.issuer).await.map_err(unavailable)?;
    let client = client(meta, idp, redirect).map_err(unavailable)?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut request =
        client.authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random);
    for scope in idp.scopes.split_whitespace().filter(|s| *s != "openid") {
        request = request.add_scope(OidcScope::new(scope.to_string()));
    }
    let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
    let (cookie, hash) = super::session::new_secret(tx.org());
    store::insert_pending_login(tx, hash, state.secret(), nonce.secret(), verifier.secret(), return_to).await?;
    Ok((url.to_string(), cookie))
}

/// A verified sign-in.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The provider's subject.
    pub subject: String,
    /// E-mail, when the provider gave one.
    pub email: Option<String>,
    /// Display name.
    pub name: String,
    /// Groups from the configured claim.
    pub groups: Vec<String>,
    /// The raw ID token (for RP-initiated logout).
    pub id_token: String,
    /// Where the browser wanted to go.
    pub return_to: String,
}

/// Consumes the pending login of `login_cookie` (once, whatever happens next) and returns its
/// (state, nonce, verifier, return_to).
pub async fn consume(tx: &mut OrgTx, login_cookie: &str) -> Result<(String, String, String, String), DbError> {
    let row = store::consume_pending_login(tx, sha256(login_cookie)).await?;
    row.ok_or(DbError::Sqlx(sqlx::Error::RowNotFound))
}

/// Whether `login_cookie` names a sign-in this organization started (used up or expired included).
pub async fn was_issued(tx: &mut OrgTx, login_cookie: &str) -> Result<bool, DbError> {
    store::pending_login_exists(tx, sha256(login_cookie)).await
}

/// Finishes a sign-in: checks `state`, exchanges the code with the PKCE verifier, validates the ID token with
/// the nonce, and reads the groups.
pub async fn finish(
    providers: &Providers,
    idp: &IdpSettings,
    redirect: &str,
    pending: (String, String, String, String),
    state: &str,
    code: &str,
) -> Result<Verified, LoginError> {
    let (expected_state, nonce, verifier, return_to) = pending;
    // Both sides hashed, so the comparison takes the same time wherever they differ.
    if sha256(&expected_state) != sha256(state) {
        return Err(LoginError::StateMismatch);
    }
    let (meta, _) = providers.metadata(&idp.issuer).await?;
    let client = client(meta, idp, redirect)?;
    let response = client
        .exchange_code(AuthorizationCode::new(code.to_string()))
        .map_err(|e| LoginError::Provider(e.to_string()))?
        .set_pkce_verifier(PkceCodeVerifier::new(verifier))
        .request_async(&providers.http)
        .await
        .map_err(|e| LoginError::CodeRefused(describe_token_error(&e)))?;
    let id_token = response.id_token().ok_or_else(|| LoginError::InvalidIdToken("no ID token returned".into()))?;
    let verifier = client.id_token_verifier();
    let claims =
        id_token.claims(&verifier, &Nonce::new(nonce)).map_err(|e| LoginError::InvalidIdToken(e.to_string()))?;
    let subject = claims.subject().to_string();
    let email = claims.email().map(|e| e.to_string());
    let name = claims
        .name()
        .and_then(|n| n.get(None))
        .map(|n| n.to_string())
        .or_else(|| email.clone())
        .unwrap_or_else(|| subject.clone());
    let raw = id_token.to_string();
    // The token is verified above; its payload carries the groups claim the core claim types do not model.
    let mut groups = groups_in(&payload_of(&raw), &idp.groups_claim);
    if groups.is_none() {
        groups = userinfo_groups(providers, &client, response.access_token().secret(), &idp.groups_claim).await;
    }
    Ok(Verified { subject, email, name, groups: groups.unwrap_or_default(), id_token: raw, return_to })
}

fn describe_token_error<E: std::error::Error>(e: &E) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn payload_of(jwt: &str) -> Value {
    jwt.split('.')
        .nth(1)
        .and_then(|p| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p.trim_end_matches('=')).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(Value::Null)
}

/// The groups in `claim`: an array of strings, or one string.
pub fn groups_in(claims: &Value, claim: &str) -> Option<Vec<String>> {
    match claims.get(claim)? {
        Value::Array(items) => Some(items.iter().filter_map(|v| v.as_str().map(String::from)).collect()),
        Value::String(one) => Some(vec![one.clone()]),
        _ => None,
    }
}

async fn userinfo_groups(
    providers: &Providers,
    client: &CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    >,
    access_token: &str,
    claim: &str,
) -> Option<Vec<String>> {
    let url = client.user_info_url()?.url().clone();
    let response = providers.http.get(url).bearer_auth(access_token).send().await.ok()?.error_for_status().ok()?;
    let body: Value = response.json().await.ok()?;
    groups_in(&body, claim)
}

/// The roles (and manager departments) the organization's mappings give these groups.
pub async fn roles_for(tx: &mut OrgTx, groups: &[String]) -> Result<(Vec<Role>, Vec<DepartmentId>), DbError> {
    let rows = store::role_mappings_of_groups(tx, groups).await?;
    let mut roles: Vec<Role> = rows.iter().filter_map(|(r, _)| Role::parse(r)).collect();
    roles.sort();
    roles.dedup();
    let mut departments: Vec<DepartmentId> = rows.iter().filter_map(|(_, d)| d.map(DepartmentId::from_uuid)).collect();
    departments.sort();
    departments.dedup();
    Ok((roles, departments))
}

pub use super::store::upsert_user;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn groups_come_from_the_configured_claim_as_a_list_or_a_single_string() {
        let claims = serde_json::json!({"groups": ["a", "b", 3], "role": "x"});
        assert_eq!(groups_in(&claims, "groups"), Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(groups_in(&claims, "role"), Some(vec!["x".to_string()]));
        assert_eq!(groups_in(&claims, "missing"), None);
        let jwt =
            format!("h.{}.s", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"groups":["gl-admins"]}"#));
        assert_eq!(groups_in(&payload_of(&jwt), "groups"), Some(vec!["gl-admins".to_string()]));
        assert_eq!(payload_of("not a jwt"), Value::Null);
    }

    #[tokio::test]
    async fn issuers_are_https_and_public_unless_the_operator_allows_otherwise() {
        let strict = IssuerPolicy::default();
        for (issuer, says) in [
            ("http://idp.example.com", "must be an https URL"),
            ("http://127.0.0.1:8080", "--oidc-allow-http-loopback"),
            ("http://localhost", "--oidc-allow-http-loopback"),
            ("ftp://idp.example.com", "must be an https URL"),
            ("https://user:pw@idp.example.com", "credentials"),
            ("https://idp.example.com/?x=1", "query"),
            ("not a url", "not a URL"),
            ("https://127.0.0.1", "--oidc-allow-private-issuer"),
            ("https://10.0.0.8/realms/x", "private"),
            ("https://192.168.1.1", "private"),
            ("https://169.254.169.254", "link-local"),
            ("https://[::1]", "loopback"),
            ("https://[fd12::1]", "private"),
            ("https://[fe80::1]", "link-local"),
            ("https://localhost", "--oidc-allow-private-issuer"),
        ] {
            let e = strict.check(issuer).await.expect_err(issuer);
            assert!(e.contains(says), "{issuer}: {e}");
        }
        // A public address literal passes (no DNS needed).
        assert!(strict.check("https://203.0.113.10/realms/acme").await.is_ok());
        // The operator's flags open exactly their part.
        let http_loopback = IssuerPolicy { allow_http_loopback: true, allow_private: false };
        assert!(http_loopback.check("http://127.0.0.1:9").await.unwrap_err().contains("private"));
        assert!(http_loopback.check("http://idp.example.com").await.is_err(), "http only for loopback");
        let both = IssuerPolicy { allow_http_loopback: true, allow_private: true };
        assert!(both.check("http://127.0.0.1:9").await.is_ok() && both.check("http://[::1]:9").await.is_ok());
        assert!(
            both.check("http://10.0.0.1").await.is_err(),
            "http is for loopback only, even when private is allowed"
        );
        let private = IssuerPolicy { allow_http_loopback: false, allow_private: true };
        assert!(private.check("https://10.0.0.1").await.is_ok());
    }
}
