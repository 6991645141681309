//! Rendered pages of stored figures (showback, a tenant's drill-down), kept per reader scope and read-model
//! generation, so fifty people opening showback at month-end cost one render, not fifty (issue 17).
//!
//! - **What a page shows depends only on stored figures** (the read model) and on who reads it. The key is the
//!   organization, the reader's roles and department scope, and the URL; the entry remembers the read model's
//!   *generation* (when its figures, summaries, pending changes and periods last changed). A request's session is
//!   checked against the database at least every [`SESSION_RECHECK`] (sign-out, a token revoked or a credential
//!   refused on this replica end it at once: `auth::revocations`) and its organization's generation at least every
//!   [`GENERATION_RECHECK`]: only the render and those two reads are saved, so a new snapshot shows within a second
//!   and a session ended or a token revoked on another replica stops within two. When a check is due,
//!   one request makes it while the others go on with the previous answer (a credential's is due at half its bound,
//!   so the bound holds; a generation's for at most as long again), so readers
//!   arriving together do not all ask the database at once; after a commit of this process every request asks.
//! - **Nothing personal is kept**: the page is rendered with markers in place of the reader's name and CSRF token,
//!   and each answer puts the reader's own (escaped) values there, with a fresh CSP nonce.
//! - **One render at a time per key**; while it runs, other readers get the previous page of the same scope (it
//!   says its own "as of"), and the request that renders gets the new one.
//! - **Bounded**: at most `max_bytes` of pages (least recently used go first); entries older than the TTL are
//!   rendered again even when nothing changed (anything outside the generation, such as the clock on a staleness
//!   note, is at most that old).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use gpuledger_core::ids::OrgId;
use uuid::Uuid;

use crate::{
    auth::{Actor, revocations, session},
    db::Database,
};

mod store;

/// What may be kept for a path: a portal page (rendered with markers, sessions only), or an API answer of stored
/// figures (sessions and tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Page,
    Api,
}

/// Paths whose answers are built from stored figures only (and so may be kept).
fn cacheable_path(path: &str) -> Option<Kind> {
    if path == "/departments" || (path.starts_with("/tenants/") && !path["/tenants/".len()..].contains('/')) {
        return Some(Kind::Page);
    }
    // The read model's lookups, the OData feed of closed months' lines (they change only at a close), the forecast
    // (stored figures and budgets) and the evidence behind a month's lines (a closed month's index; an open month's
    // answer reads live facts and says `no-store`, so it is never kept).
    const API: [&str; 6] = [
        "/api/v1/ledger",
        "/api/v1/ledger/months",
        "/api/v1/ledger/summaries",
        "/api/v1/periods",
        "/api/v1/forecast",
        "/odata/LedgerLines",
    ];
    let evidence = path
        .strip_prefix("/api/v1/periods/")
        .and_then(|rest| rest.strip_suffix("/evidence"))
        .is_some_and(|period| !period.is_empty() && !period.contains('/'));
    (API.contains(&path) || evidence).then_some(Kind::Api)
}

/// The values a kept page carries in place of the reader's own, placed in the request for the render
/// (the portal's `DbPortalData` shows them as the reader's name and CSRF token).
#[derive(Debug, Clone)]
pub struct RenderMarkers {
    /// Stands for the reader's name.
    pub name: String,
    /// Stands for the reader's CSRF token.
    pub csrf: String,
}

/// A piece of a kept page.
enum Piece {
    Text(Bytes),
    Name,
    Csrf,
    Nonce,
}

struct Page {
    generation: String,
    rendered_at: Instant,
    status: StatusCode,
    /// The render's headers, less the ones each answer makes anew (length, date, CSP, caching, request id).
    headers: HeaderMap,
    pieces: Vec<Piece>,
    bytes: usize,
}

#[derive(Default)]
struct Slot {
    page: Mutex<Option<Arc<Page>>>,
    /// Held while one request renders this key.
    rendering: tokio::sync::Mutex<()>,
    last_used: AtomicU64,
}

/// The kept pages of this process.
pub struct PageCache {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    bytes: AtomicUsize,
    max_bytes: usize,
    ttl: Duration,
    markers: RenderMarkers,
    epoch: Instant,
    /// Sessions checked in the last [`SESSION_RECHECK`], by the cookie's SHA-256.
    sessions: Mutex<HashMap<[u8; 32], Checked>>,
    /// Organizations' generations read in the last [`GENERATION_RECHECK`], with this process's commit count then.
    generations: Mutex<HashMap<OrgId, Generation>>,
    /// Answers served from a kept page, and renders (for tests and the metrics page).
    pub hits: AtomicU64,
    /// Renders.
    pub renders: AtomicU64,
}

impl Default for PageCache {
    fn default() -> Self {
        Self::new(64 * 1024 * 1024, Duration::from_secs(60))
    }
}

impl PageCache {
    /// A cache of at most `max_bytes` of pages, each rendered again after `ttl` at the latest.
    pub fn new(max_bytes: usize, ttl: Duration) -> Self {
        // Letters and digits only: HTML and JSON escaping leave them as they are.
        let marker = |what: &str| format!("glpc{what}{}", Uuid::new_v4().simple());
        Self {
            slots: Mutex::new(HashMap::new()),
            bytes: AtomicUsize::new(0),
            max_bytes,
            ttl,
            markers: RenderMarkers { name: marker("name"), csrf: marker("csrf") },
            epoch: Instant::now(),
            sessions: Mutex::new(HashMap::new()),
            generations: Mutex::new(HashMap::new()),
            hits: AtomicU64::new(0),
            renders: AtomicU64::new(0),
        }
    }

    fn slot(&self, key: &str) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.entry(key.to_string()).or_default().clone();
        slot.last_used.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        slot
    }

    fn keep(&self, slot: &Slot, page: Arc<Page>) {
        let added = page.bytes;
        let old = slot.page.lock().unwrap_or_else(|e| e.into_inner()).replace(page);
        self.bytes.fetch_add(added, Ordering::Relaxed);
        if let Some(old) = old {
            self.bytes.fetch_sub(old.bytes, Ordering::Relaxed);
        }
        if self.bytes.load(Ordering::Relaxed) > self.max_bytes {
            self.evict();
        }
    }

    /// Drops the least recently used pages until at most 3/4 of the budget is used.
    fn evict(&self) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut by_age: Vec<(u64, String)> =
            slots.iter().map(|(k, s)| (s.last_used.load(Ordering::Relaxed), k.clone())).collect();
        by_age.sort();
        for (_, key) in by_age {
            if self.bytes.load(Ordering::Relaxed) <= self.max_bytes / 4 * 3 {
                break;
            }
            if let Some(slot) = slots.remove(&key)
                && let Some(page) = slot.page.lock().unwrap_or_else(|e| e.into_inner()).take()
            {
                self.bytes.fetch_sub(page.bytes, Ordering::Relaxed);
            }
        }
    }

    /// Bytes of pages kept now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Forgets a session at once (its sign-out on this replica); other replicas forget it within
    /// [`SESSION_RECHECK`].
    pub fn forget_session(&self, cookie: &str) {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&digest(cookie));
    }

    async fn reader(&self, db: &Database, headers: &HeaderMap, kind: Kind, uri: &str) -> Option<Reader> {
        // The credential: a session cookie (pages and API), or a token (API only).
        let cookie = session::cookie_value(headers);
        let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let credential = match (kind, &cookie, authorization) {
            (_, _, Some(a)) if kind == Kind::Api => a.to_string(),
            (_, Some(c), None) => c.clone(),
            _ => return None,
        };
        let id = digest(&credential);
        let known = {
            let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions.get(&id).and_then(|(at, who, checking, epoch)| {
                let age = at.elapsed();
                // Due after half the bound: one request checks it again; the others go on with it meanwhile (until
                // the bound), so fifty readers do not all ask the database at the same instant. A revocation by
                // this process, or this credential refused here since the check, ends it at once.
                let live = revocations::live(&id, *at, *epoch);
                (live
                    && (age < SESSION_RECHECK / 2 || (age < SESSION_RECHECK && checking.swap(true, Ordering::AcqRel))))
                .then(|| who.clone())
            })
        };
        let who = match known {
            Some(who) => who,
            None => {
                let epoch = revocations::epoch();
                let checked_at = Instant::now();
                let principal = crate::auth::authenticate(db, headers).await.ok()?;
                let org = principal.org;
                let scope = crate::auth::scope_key(principal.departments.as_deref());
                let who = match principal.actor {
                    Actor::User { name, roles, csrf, .. } => {
                        let mut roles: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
                        roles.sort_unstable();
                        Who { org, scope: format!("{org}\n{}\n{scope}", roles.join(",")), name, csrf }
                    }
                    // A token's answers are kept for that token only.
                    Actor::Token { token_id, .. } => {
                        Who { org, scope: format!("{org}\ntoken:{token_id}"), name: String::new(), csrf: String::new() }
                    }
                };
                let who = Arc::new(who);
                let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
                if sessions.len() >= MAX_SESSIONS {
                    sessions.retain(|_, (at, ..)| at.elapsed() < SESSION_RECHECK);
                    if sessions.len() >= MAX_SESSIONS {
                        sessions.clear();
                    }
                }
                // The instant and epoch from before the check: a revocation during it is not missed.
                sessions.insert(id, (checked_at, who.clone(), Arc::new(AtomicBool::new(false)), epoch));
                who
            }
        };
        let org = who.org;
        let known = {
            let generations = self.generations.lock().unwrap_or_else(|e| e.into_inner());
            generations.get(&org).and_then(|(at, commits, g, checking)| {
                // After a commit of this process: everyone asks (its own writes show at once). Merely due: one asks.
                let same = *commits == crate::db::commits();
                let age = at.elapsed();
                (same
                    && (age < GENERATION_RECHECK
                        || (age < 2 * GENERATION_RECHECK && checking.swap(true, Ordering::AcqRel))))
                .then(|| g.clone())
            })
        };
        let generation = match known {
            Some(g) => g,
            None => {
                let commits = crate::db::commits();
                let mut tx = db.begin_org(org).await.ok()?;
                let g = store::generation(&mut tx).await.ok()?;
                // Read only: ended without a commit, which would count as one.
                tx.rollback().await.ok()?;
                self.remember_generation(org, commits, &g);
                g
            }
        };
        Some(Reader { key: format!("{}\n{kind:?}\n{uri}", who.scope), generation, who })
    }

    fn remember_generation(&self, org: OrgId, commits: u64, generation: &str) {
        let mut generations = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        if generations.len() >= MAX_SESSIONS {
            generations.clear();
        }
        generations.insert(org, (Instant::now(), commits, generation.to_string(), Arc::new(AtomicBool::new(false))));
    }
}

/// The longest a checked credential is taken as live without asking the database again: a session ended or a
/// token revoked on another replica stops being served kept answers here within this (docs/security.md).
pub const SESSION_RECHECK: Duration = Duration::from_secs(2);
/// How long an organization's generation is taken as current when this process has committed nothing since (a
/// snapshot stored by another replica shows within this; one of this process's own at once).
pub const GENERATION_RECHECK: Duration = Duration::from_secs(1);
/// Most sessions (and organizations) remembered at once.
const MAX_SESSIONS: usize = 50_000;

fn digest(credential: &str) -> [u8; 32] {
    revocations::digest(credential)
}

/// A credential checked at an instant, whom it names, whether a request is checking it again now, and the revocation
/// epoch before the check.
type Checked = (Instant, Arc<Who>, Arc<AtomicBool>, u64);
/// An organization's generation read at an instant, this process's commit count then, and whether a request is
/// reading it again now.
type Generation = (Instant, u64, String, Arc<AtomicBool>);

/// A reader as far as kept pages care.
struct Who {
    org: OrgId,
    /// Organization, roles and department scope: readers with the same scope see the same page.
    scope: String,
    name: String,
    csrf: String,
}

/// Who reads, and what the page is made from now.
struct Reader {
    key: String,
    generation: String,
    who: Arc<Who>,
}

/// The middleware: serves kept pages of stored figures, and keeps what it renders.
pub async fn pages(
    State((db, cache)): State<(Database, Arc<PageCache>)>,
    mut request: Request,
    next: Next,
) -> Response {
    let kind = match cacheable_path(request.uri().path()) {
        Some(kind) if request.method() == Method::GET => kind,
        _ => return next.run(request).await,
    };
    let uri = request.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    // No credential (or one that does not authenticate): the route itself answers (sign-in, 401).
    let Some(reader) = cache.reader(&db, request.headers(), kind, &uri).await else {
        return next.run(request).await;
    };
    let slot = cache.slot(&reader.key);
    let current = slot.page.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let fresh = |p: &Page| p.generation == reader.generation && p.rendered_at.elapsed() < cache.ttl;
    if let Some(page) = current.as_ref().filter(|p| fresh(p)) {
        cache.hits.fetch_add(1, Ordering::Relaxed);
        return answer(page, &reader);
    }
    // One render per key at a time; the others read the previous page meanwhile, if there is one.
    let _rendering = match (slot.rendering.try_lock(), &current) {
        (Ok(guard), _) => guard,
        (Err(_), Some(page)) => {
            cache.hits.fetch_add(1, Ordering::Relaxed);
            return answer(page, &reader);
        }
        (Err(_), None) => {
            let guard = slot.rendering.lock().await;
            let now = slot.page.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(page) = now.as_ref().filter(|p| fresh(p)) {
                cache.hits.fetch_add(1, Ordering::Relaxed);
                return answer(page, &reader);
            }
            guard
        }
    };
    cache.renders.fetch_add(1, Ordering::Relaxed);
    if kind == Kind::Page {
        request.extensions_mut().insert(cache.markers.clone());
    }
    let response = next.run(request).await;
    let no_store = response
        .headers()
        .get(header::CACHE_CONTROL)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("no-store"));
    if response.status() != StatusCode::OK || response.headers().contains_key(header::SET_COOKIE) || no_store {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PAGE).await else {
        return crate::error::AppError::Internal("a page too large to send".into()).into_response();
    };
    let nonce = parts
        .headers
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .and_then(|csp| csp.split("'nonce-").nth(1))
        .and_then(|rest| rest.split('\'').next())
        .map(str::to_string);
    let mut headers = parts.headers.clone();
    for volatile in [header::CONTENT_LENGTH, header::DATE, header::CONTENT_SECURITY_POLICY, header::CACHE_CONTROL] {
        headers.remove(volatile);
    }
    headers.remove("x-request-id");
    let page = Arc::new(Page {
        generation: reader.generation.clone(),
        rendered_at: Instant::now(),
        status: parts.status,
        headers,
        bytes: bytes.len(),
        pieces: split(&bytes, &cache.markers, nonce.as_deref()),
    });
    let answered = answer(&page, &reader);
    cache.keep(&slot, page);
    answered
}

/// Largest page kept (a larger one is not rendered for keeping: it fails the same way it would uncached).
const MAX_PAGE: usize = 16 * 1024 * 1024;

/// What a marker stands for.
#[derive(Clone, Copy)]
enum Marker {
    Name,
    Csrf,
    Nonce,
}

/// Cuts a rendered page at its markers.
fn split(body: &[u8], markers: &RenderMarkers, nonce: Option<&str>) -> Vec<Piece> {
    let mut needles: Vec<(&[u8], Marker)> =
        vec![(markers.name.as_bytes(), Marker::Name), (markers.csrf.as_bytes(), Marker::Csrf)];
    if let Some(n) = nonce.filter(|n| n.len() >= 8) {
        needles.push((n.as_bytes(), Marker::Nonce));
    }
    let mut pieces = Vec::new();
    let (mut from, mut i) = (0, 0);
    while i < body.len() {
        if let Some((needle, piece)) = needles.iter().find(|(n, _)| body[i..].starts_with(n)) {
            if from < i {
                pieces.push(Piece::Text(Bytes::copy_from_slice(&body[from..i])));
            }
            pieces.push(match piece {
                Marker::Name => Piece::Name,
                Marker::Csrf => Piece::Csrf,
                Marker::Nonce => Piece::Nonce,
            });
            i += needle.len();
            from = i;
        } else {
            i += 1;
        }
    }
    if from < body.len() {
        pieces.push(Piece::Text(Bytes::copy_from_slice(&body[from..])));
    }
    pieces
}

/// `s` safe in HTML text, attribute values and script data alike.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            '\\' => out.push_str("&#x5c;"),
            c => out.push(c),
        }
    }
    out
}

/// The kept page with the reader's own values and a fresh nonce.
fn answer(page: &Page, reader: &Reader) -> Response {
    let nonce = Uuid::new_v4().simple().to_string();
    let (name, csrf) = (escape(&reader.who.name), escape(&reader.who.csrf));
    let mut body = Vec::with_capacity(page.bytes + 256);
    for piece in &page.pieces {
        match piece {
            Piece::Text(t) => body.extend_from_slice(t),
            Piece::Name => body.extend_from_slice(name.as_bytes()),
            Piece::Csrf => body.extend_from_slice(csrf.as_bytes()),
            Piece::Nonce => body.extend_from_slice(nonce.as_bytes()),
        }
    }
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = page.status;
    let headers = response.headers_mut();
    headers.extend(page.headers.clone());
    if page.pieces.iter().any(|p| matches!(p, Piece::Nonce))
        && let Ok(csp) = HeaderValue::from_str(&csp(Some(&nonce)))
    {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    // Personal (the reader's name and token are in it): never stored by a shared cache.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-cache"));
    response
}

/// The content security policy; portal pages add their response's script nonce.
pub(crate) fn csp(nonce: Option<&str>) -> String {
    let scripts = match nonce {
        Some(n) => format!("script-src 'self' 'nonce-{n}'"),
        None => "script-src 'self'".to_string(),
    };
    format!(
        "default-src 'self'; {scripts}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; \
         base-uri 'none'; frame-ancestors 'none'"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn text(pieces: &[Piece], name: &str, csrf: &str, nonce: &str) -> String {
        let mut s = String::new();
        for p in pieces {
            match p {
                Piece::Text(t) => s.push_str(std::str::from_utf8(t).unwrap()),
                Piece::Name => s.push_str(name),
                Piece::Csrf => s.push_str(csrf),
                Piece::Nonce => s.push_str(nonce),
            }
        }
        s
    }

    #[test]
    fn markers_are_cut_out_and_put_back() {
        let cache = PageCache::default();
        let m = &cache.markers;
        let body =
            format!("<p>{}</p><input value=\"{}\"><script nonce=\"abcdefgh12\">x</script>{}", m.name, m.csrf, m.name);
        let pieces = split(body.as_bytes(), m, Some("abcdefgh12"));
        assert_eq!(pieces.iter().filter(|p| matches!(p, Piece::Name)).count(), 2);
        assert_eq!(
            text(&pieces, "ann", "c0ffee", "NEW"),
            "<p>ann</p><input value=\"c0ffee\"><script nonce=\"NEW\">x</script>ann"
        );
        assert!(!m.name.contains(|c: char| !c.is_ascii_alphanumeric()), "survives HTML and JSON escaping");
    }

    #[test]
    fn names_are_escaped_for_every_context() {
        assert_eq!(escape("<b>\"x\" & 'y' \\"), "&lt;b&gt;&quot;x&quot; &amp; &#x27;y&#x27; &#x5c;");
    }

    #[test]
    fn only_pages_of_stored_figures_are_kept() {
        assert_eq!(cacheable_path("/departments"), Some(Kind::Page));
        assert_eq!(cacheable_path("/tenants/6f1c"), Some(Kind::Page));
        assert_eq!(cacheable_path("/api/v1/ledger"), Some(Kind::Api));
        assert_eq!(cacheable_path("/odata/LedgerLines"), Some(Kind::Api));
        assert_eq!(cacheable_path("/tenants/6f1c/x"), None);
        assert_eq!(cacheable_path("/admin"), None);
        assert_eq!(cacheable_path("/disputes"), None);
        assert_eq!(cacheable_path("/odata/Allocations"), None, "raw facts change without a new generation");
        // A month's evidence may be kept (an open month's answer says `no-store`), its bundle and close not.
        assert_eq!(cacheable_path("/api/v1/periods/2026-11/evidence"), Some(Kind::Api));
        assert_eq!(cacheable_path("/api/v1/forecast"), Some(Kind::Api));
        assert_eq!(cacheable_path("/api/v1/periods/2026-11/bundle"), None);
        assert_eq!(cacheable_path("/api/v1/periods//evidence"), None);
        assert_eq!(cacheable_path("/api/v1/periods/a/b/evidence"), None);
    }

    #[test]
    fn the_budget_evicts_the_least_recently_used() {
        let cache = PageCache::new(1000, Duration::from_secs(60));
        let page = |n: usize| {
            Arc::new(Page {
                generation: "g".into(),
                rendered_at: Instant::now(),
                status: StatusCode::OK,
                headers: HeaderMap::new(),
                pieces: vec![Piece::Text(Bytes::from(vec![b'x'; n]))],
                bytes: n,
            })
        };
        for k in 0..5 {
            let slot = cache.slot(&k.to_string());
            std::thread::sleep(Duration::from_millis(2));
            cache.keep(&slot, page(300));
        }
        assert!(cache.bytes() <= 1000, "within the budget: {}", cache.bytes());
        let kept: Vec<String> = cache.slots.lock().unwrap().keys().cloned().collect();
        assert!(kept.contains(&"4".to_string()), "the newest stays: {kept:?}");
        assert!(!kept.contains(&"0".to_string()), "the oldest goes: {kept:?}");
    }
}
