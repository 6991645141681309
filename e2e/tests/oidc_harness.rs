//! Self-tests of the login end-to-end harness: the real OpenID provider (`e2e/oidc/provider.mjs`), the HTTP
//! walker, and headless Chromium — on their own, with a tiny callback server standing in for the relying party.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, extract::RawQuery, routing::get};
use gpuledger_e2e::{
    browser::Browser,
    oidc::{self, OidcProvider},
    oidc_walk::{HttpWalker, login_via_http},
};
use serde_json::Value;
use sha2::{Digest, Sha256};

const CLIENT_ID: &str = "gpuledger-test";
const CLIENT_SECRET: &str = "test-secret-0123456789";
const SCOPE: &str = "openid email profile groups";

/// A callback server on a free port: records each query string at `/callback`, answers "captured".
struct Capture {
    base: String,
    queries: Arc<Mutex<Vec<String>>>,
}

impl Capture {
    async fn start() -> Capture {
        let queries = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&queries);
        let app = Router::new()
            .route(
                "/callback",
                get(move |RawQuery(q): RawQuery| {
                    let sink = Arc::clone(&sink);
                    async move {
                        sink.lock().unwrap().push(q.unwrap_or_default());
                        "captured"
                    }
                }),
            )
            .route("/signed-out", get(|| async { "signed out" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Capture { base, queries }
    }

    fn redirect_uri(&self) -> String {
        format!("{}/callback", self.base)
    }
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn base64url_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => panic!("not base64url: {c}"),
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, c)| n | (u32::from(value(*c)) << (18 - 6 * i)));
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

#[test]
fn base64url_round_trips() {
    for input in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar", &[0xfb, 0xff, 0xfe]] {
        assert_eq!(base64url_decode(&base64url(input)), input);
    }
    assert_eq!(base64url(b"foobar"), "Zm9vYmFy");
    assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
}

/// An authorization request with PKCE: (URL, state, nonce, verifier).
fn authorization_url(provider: &OidcProvider, redirect_uri: &str) -> (String, String, String, String) {
    let state = uuid::Uuid::new_v4().simple().to_string();
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let verifier = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let challenge = base64url(&Sha256::digest(verifier.as_bytes()));
    let url = reqwest::Url::parse_with_params(
        &provider.authorization_endpoint(),
        [
            ("client_id", CLIENT_ID),
            ("redirect_uri", redirect_uri),
            ("response_type", "code"),
            ("scope", SCOPE),
            ("state", &state),
            ("nonce", &nonce),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ],
    )
    .unwrap();
    (url.to_string(), state, nonce, verifier)
}

fn query_param(url_or_query: &str, name: &str) -> Option<String> {
    let query = url_or_query.split_once('?').map_or(url_or_query, |(_, q)| q);
    reqwest::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

async fn exchange(provider: &OidcProvider, code: &str, redirect_uri: &str, verifier: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(provider.token_endpoint())
        .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
        ])
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn jwt_payload(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).expect("a JWT has three parts");
    serde_json::from_slice(&base64url_decode(payload)).unwrap()
}

#[tokio::test]
async fn provider_serves_discovery() {
    let provider = OidcProvider::start(CLIENT_ID, CLIENT_SECRET, &["http://127.0.0.1:9/callback".into()], &[]).unwrap();
    assert!(provider.issuer().starts_with("http://127.0.0.1:"));
    let doc: Value = reqwest::get(provider.discovery_url()).await.unwrap().json().await.unwrap();
    assert_eq!(doc["issuer"], provider.issuer());
    let methods = doc["code_challenge_methods_supported"].as_array().unwrap();
    assert!(methods.iter().any(|m| m == "S256"), "{doc}");
    assert_eq!(doc["end_session_endpoint"], provider.end_session_endpoint());
    assert_eq!(doc["authorization_endpoint"], provider.authorization_endpoint());
    assert_eq!(doc["token_endpoint"], provider.token_endpoint());
    assert!(doc["scopes_supported"].as_array().unwrap().iter().any(|s| s == "groups"), "{doc}");
}

#[test]
fn provider_start_failure_shows_its_stderr() {
    let Err(err) = OidcProvider::start(CLIENT_ID, "", &["http://127.0.0.1:9/callback".into()], &[]) else {
        panic!("started without a client secret")
    };
    assert!(format!("{err:#}").contains("OIDC_CLIENT_SECRET is not set"), "{err:#}");
}

#[tokio::test]
async fn http_walk_gets_a_code_that_redeems_once() {
    let capture = Capture::start().await;
    let redirect_uri = capture.redirect_uri();
    let provider = OidcProvider::start(CLIENT_ID, CLIENT_SECRET, std::slice::from_ref(&redirect_uri), &[]).unwrap();
    let (url, state, nonce, verifier) = authorization_url(&provider, &redirect_uri);

    let callback = login_via_http(&url, "ada").await.unwrap();
    assert!(callback.starts_with(&format!("{redirect_uri}?")), "{callback}");
    assert_eq!(query_param(&callback, "state").as_deref(), Some(state.as_str()));
    assert_eq!(query_param(&callback, "iss").as_deref(), Some(provider.issuer()));
    let code = query_param(&callback, "code").expect("a code");

    // A wrong verifier is refused (PKCE is checked).
    let (status, body) = exchange(&provider, &code, &redirect_uri, &"x".repeat(43)).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "{body}");

    // A new user agent logs in again; this time the right verifier.
    let mut walker = HttpWalker::new().unwrap();
    let (url, state, nonce2, verifier2) = authorization_url(&provider, &redirect_uri);
    let _ = (nonce, verifier);
    let callback = walker.login(&url, "ada").await.unwrap();
    assert_eq!(query_param(&callback, "state").as_deref(), Some(state.as_str()));
    let code = query_param(&callback, "code").unwrap();
    let (status, tokens) = exchange(&provider, &code, &redirect_uri, &verifier2).await;
    assert_eq!(status, 200, "{tokens}");
    let claims = jwt_payload(tokens["id_token"].as_str().unwrap());
    assert_eq!(claims["iss"], provider.issuer());
    assert_eq!(claims["aud"], CLIENT_ID);
    assert_eq!(claims["sub"], "ada");
    assert_eq!(claims["nonce"], nonce2.as_str());
    assert_eq!(claims["email"], "ada@example.test");
    assert_eq!(claims["groups"], serde_json::json!(["gl-admins"]));
    assert_eq!(oidc::groups_of("ada"), ["gl-admins"]);

    // Replaying the code fails.
    let (status, body) = exchange(&provider, &code, &redirect_uri, &verifier2).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "{body}");

    // The same walker is now signed in at the provider: a second authorization needs no form.
    let (url, state, _, _) = authorization_url(&provider, &redirect_uri);
    let callback = walker.login(&url, "someone-else").await.unwrap();
    assert_eq!(query_param(&callback, "state").as_deref(), Some(state.as_str()));
    assert!(walker.cookies().contains_key("_session"), "{:?}", walker.cookies());

    // Someone without groups gets an empty list.
    let (url, _, _, verifier) = authorization_url(&provider, &redirect_uri);
    let callback = login_via_http(&url, "nobody").await.unwrap();
    let code = query_param(&callback, "code").unwrap();
    let (status, tokens) = exchange(&provider, &code, &redirect_uri, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(jwt_payload(tokens["id_token"].as_str().unwrap())["groups"], serde_json::json!([]));
}

#[tokio::test]
async fn http_walk_reports_provider_errors() {
    let capture = Capture::start().await;
    let provider = OidcProvider::start(CLIENT_ID, CLIENT_SECRET, &[capture.redirect_uri()], &[]).unwrap();
    // An unregistered redirect URI: the provider shows its error page, no redirect.
    let (url, ..) = authorization_url(&provider, "http://127.0.0.1:9/elsewhere");
    let err = login_via_http(&url, "ada").await.unwrap_err();
    assert!(format!("{err:#}").contains("redirect_uri"), "{err:#}");
    // Without PKCE: an error redirect to the client.
    let url = reqwest::Url::parse_with_params(
        &provider.authorization_endpoint(),
        [
            ("client_id", CLIENT_ID),
            ("redirect_uri", capture.redirect_uri().as_str()),
            ("response_type", "code"),
            ("scope", SCOPE),
            ("state", "s1"),
        ],
    )
    .unwrap();
    let callback = login_via_http(url.as_str(), "ada").await.unwrap();
    assert_eq!(query_param(&callback, "error").as_deref(), Some("invalid_request"), "{callback}");
}

#[tokio::test]
async fn http_walk_logs_out() {
    let capture = Capture::start().await;
    let signed_out = format!("{}/signed-out", capture.base);
    let provider =
        OidcProvider::start(CLIENT_ID, CLIENT_SECRET, &[capture.redirect_uri()], std::slice::from_ref(&signed_out))
            .unwrap();
    let mut walker = HttpWalker::new().unwrap();
    let (url, _, _, verifier) = authorization_url(&provider, &capture.redirect_uri());
    let callback = walker.login(&url, "fin").await.unwrap();
    let code = query_param(&callback, "code").unwrap();
    let (_, tokens) = exchange(&provider, &code, &capture.redirect_uri(), &verifier).await;
    let id_token = tokens["id_token"].as_str().unwrap();
    let end = reqwest::Url::parse_with_params(
        &provider.end_session_endpoint(),
        [("id_token_hint", id_token), ("post_logout_redirect_uri", signed_out.as_str()), ("state", "bye")],
    )
    .unwrap();
    let next = walker.logout(end.as_str()).await.unwrap().expect("a redirect to the post-logout URI");
    assert!(next.starts_with(&signed_out), "{next}");
    assert_eq!(query_param(&next, "state").as_deref(), Some("bye"));
    // Signed out: the next authorization shows the login form again (the walker fills it for `dee`).
    let (url, _, _, verifier) = authorization_url(&provider, &capture.redirect_uri());
    let callback = walker.login(&url, "dee").await.unwrap();
    let code = query_param(&callback, "code").unwrap();
    let (_, tokens) = exchange(&provider, &code, &capture.redirect_uri(), &verifier).await;
    assert_eq!(jwt_payload(tokens["id_token"].as_str().unwrap())["sub"], "dee");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_logs_in_at_the_provider() {
    let capture = Capture::start().await;
    let signed_out = format!("{}/signed-out", capture.base);
    let redirect_uri = capture.redirect_uri();
    let provider = OidcProvider::start(
        CLIENT_ID,
        CLIENT_SECRET,
        std::slice::from_ref(&redirect_uri),
        std::slice::from_ref(&signed_out),
    )
    .unwrap();
    let (url, state, nonce, verifier) = authorization_url(&provider, &redirect_uri);
    let browser = Browser::start().await.unwrap();

    browser.goto(&url).await.unwrap();
    assert!(browser.current_url().await.unwrap().starts_with(&format!("{}/interaction/", provider.issuer())));
    assert_eq!(browser.title().await.unwrap(), "Sign-in");
    let login = browser.find("input[name=login]").await.unwrap();
    browser.send_keys(&login, "vic").await.unwrap();
    let password = browser.find("input[name=password]").await.unwrap();
    browser.send_keys(&password, "whatever").await.unwrap();
    let submit = browser.find("button[type=submit]").await.unwrap();
    browser.click(&submit).await.unwrap();
    let landed = browser.wait_for_url_prefix(&redirect_uri, Duration::from_secs(20)).await.unwrap();
    assert_eq!(browser.body_text().await.unwrap().trim(), "captured");

    let captured = capture.queries.lock().unwrap().clone();
    assert_eq!(captured.len(), 1, "{captured:?}");
    assert!(landed.ends_with(&captured[0]), "{landed} vs {captured:?}");
    assert_eq!(query_param(&captured[0], "state").as_deref(), Some(state.as_str()));
    let code = query_param(&captured[0], "code").expect("a code");
    let (status, tokens) = exchange(&provider, &code, &redirect_uri, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    let claims = jwt_payload(tokens["id_token"].as_str().unwrap());
    assert_eq!((claims["sub"].as_str(), claims["nonce"].as_str()), (Some("vic"), Some(nonce.as_str())));
    assert_eq!(claims["groups"], serde_json::json!(["gl-viewers"]));

    // Cookies: the browser holds the provider's session cookie.
    browser.goto(&provider.discovery_url()).await.unwrap();
    let session = browser.cookie("_session").await.unwrap().expect("a provider session cookie");
    assert_eq!(session["httpOnly"], true);

    // A missing selector names itself.
    let err = browser.find("#no-such-thing").await.unwrap_err();
    assert!(format!("{err:#}").contains("#no-such-thing"), "{err:#}");

    // RP-initiated logout through the confirm page.
    let end = reqwest::Url::parse_with_params(
        &provider.end_session_endpoint(),
        [("id_token_hint", tokens["id_token"].as_str().unwrap()), ("post_logout_redirect_uri", signed_out.as_str())],
    )
    .unwrap();
    browser.goto(end.as_str()).await.unwrap();
    oidc::confirm_logout(&browser).await.unwrap();
    browser.wait_for_url_prefix(&signed_out, Duration::from_secs(20)).await.unwrap();

    // Signed out at the provider: the login form again, filled by the helper.
    let (url, ..) = authorization_url(&provider, &redirect_uri);
    browser.goto(&url).await.unwrap();
    oidc::fill_login_form(&browser, "mo").await.unwrap();
    browser.wait_for_url_prefix(&redirect_uri, Duration::from_secs(20)).await.unwrap();
    assert_eq!(capture.queries.lock().unwrap().len(), 2);

    browser.close().await.unwrap();
}
