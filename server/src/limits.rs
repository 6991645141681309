//! Limits on what a request may make the server parse. A JSON body is scanned byte by byte before any parser
//! allocates for it: nesting depth, string length, items per array or object and values in all are counted while
//! the bytes go by (chunk by chunk, so a compressed body is refused while it is still being inflated), and the
//! first limit crossed is named together with where it was crossed (`facts[12].labels`). The scanner keeps
//! nothing but one small frame per open container, so its memory is bounded by the depth limit.
//!
//! It does not validate JSON (serde does, afterwards, on a body known to be small enough); on invalid JSON it
//! still terminates and stays bounded.

use std::{fmt::Write as _, net::IpAddr};

use gpuledger_core::ids::OrgId;

use crate::error::AppError;

/// Limits of one JSON document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Deepest nesting of arrays and objects.
    pub max_depth: usize,
    /// Longest string (bytes, as sent, escapes included).
    pub max_string_bytes: usize,
    /// Most items in one array or members in one object.
    pub max_items: usize,
    /// Most values in the whole document (every array item and object member counts).
    pub max_values: usize,
}

impl JsonLimits {
    /// REST API bodies (policies, tenants, disputes, identity settings…): small documents typed by hand or by a
    /// script. The largest real ones (a cost policy with a few dozen classes) have a few hundred values. A string
    /// may take 32 KiB as sent: the longest text the contract allows (2,000 characters) written as `\u` escapes
    /// of astral characters (12 bytes each) still fits.
    pub const API: Self = Self { max_depth: 16, max_string_bytes: 32 * 1024, max_items: 5_000, max_values: 50_000 };
}

/// A limit that was crossed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHit {
    /// Where, as a path (`facts[3].labels`, or `body` at the top).
    pub at: String,
    /// Which limit, in words, with its value.
    pub reason: String,
}

#[derive(Debug)]
struct Frame {
    object: bool,
    /// Commas seen at this level.
    commas: usize,
    /// Whether a value (or key) has started at this level.
    nonempty: bool,
    /// In an object: whether the next string is a key.
    expect_key: bool,
    /// In an object: the current member's key (first 64 bytes).
    key: String,
}

impl Frame {
    fn items(&self) -> usize {
        self.commas + usize::from(self.nonempty)
    }
}

/// Streaming scanner enforcing [`JsonLimits`]; feed it the document in chunks.
#[derive(Debug)]
pub struct JsonGuard {
    limits: JsonLimits,
    stack: Vec<Frame>,
    in_string: bool,
    escape: bool,
    /// Inside a `\u` escape: the hexadecimal digits read so far (a NUL, `\u0000`, is refused: PostgreSQL's text
    /// cannot hold it, whatever field it is in).
    unicode: Option<Vec<u8>>,
    string_bytes: usize,
    /// Collecting a key's bytes (first 64).
    key_bytes: Option<Vec<u8>>,
    values: usize,
    /// Inside a number, `true`, `false` or `null` (may span chunks).
    scalar: bool,
    /// Set once a limit was crossed: later feeds answer the same.
    hit: Option<LimitHit>,
}

const KEY_KEEP: usize = 64;

impl JsonGuard {
    /// A scanner for one document.
    pub fn new(limits: JsonLimits) -> Self {
        Self {
            limits,
            stack: Vec::new(),
            in_string: false,
            escape: false,
            unicode: None,
            string_bytes: 0,
            key_bytes: None,
            values: 0,
            scalar: false,
            hit: None,
        }
    }

    /// Scans a whole document.
    pub fn check(limits: JsonLimits, bytes: &[u8]) -> Result<(), LimitHit> {
        Self::new(limits).feed(bytes)
    }

    /// The path of the current position.
    fn path(&self) -> String {
        let mut out = String::new();
        for f in &self.stack {
            if f.object {
                if !f.key.is_empty() {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&f.key);
                }
            } else {
                let _ = write!(out, "[{}]", f.items().saturating_sub(1));
            }
        }
        if out.is_empty() { "body".into() } else { out }
    }

    fn fail(&mut self, reason: String) -> LimitHit {
        let hit = LimitHit { at: self.path(), reason };
        self.hit = Some(hit.clone());
        hit
    }

    /// A value starts at the current level (a scalar's first byte, a string's quote, a container's bracket).
    fn value_starts(&mut self) -> Result<(), LimitHit> {
        self.values += 1;
        if self.values > self.limits.max_values {
            return Err(self.fail(format!("more than {} values in the document", self.limits.max_values)));
        }
        if let Some(top) = self.stack.last_mut()
            && !top.nonempty
        {
            top.nonempty = true;
        }
        Ok(())
    }

    /// Scans the next chunk of the document.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), LimitHit> {
        if let Some(hit) = &self.hit {
            return Err(hit.clone());
        }
        for &b in chunk {
            if self.in_string {
                if let Some(digits) = &mut self.unicode {
                    digits.push(b);
                    if digits.len() == 4 {
                        let nul = digits.iter().all(|d| *d == b'0');
                        self.unicode = None;
                        if nul {
                            return Err(self.fail("a NUL character (\\u0000) in a string".into()));
                        }
                    }
                } else if self.escape {
                    self.escape = false;
                    if b == b'u' {
                        self.unicode = Some(Vec::with_capacity(4));
                    }
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if let Some(bytes) = self.key_bytes.take()
                        && let Some(top) = self.stack.last_mut()
                    {
                        top.key = String::from_utf8_lossy(&bytes).into_owned();
                    }
                    continue;
                }
                self.string_bytes += 1;
                if self.string_bytes > self.limits.max_string_bytes {
                    return Err(self.fail(format!("a string longer than {} bytes", self.limits.max_string_bytes)));
                }
                if let Some(k) = &mut self.key_bytes
                    && k.len() < KEY_KEEP
                {
                    k.push(b);
                }
                continue;
            }
            match b {
                b'"' => {
                    self.scalar = false;
                    self.in_string = true;
                    self.string_bytes = 0;
                    let is_key = self.stack.last().is_some_and(|f| f.object && f.expect_key);
                    if is_key {
                        if let Some(top) = self.stack.last_mut() {
                            top.expect_key = false;
                            top.nonempty = true;
                        }
                        self.key_bytes = Some(Vec::new());
                    } else {
                        self.value_starts()?;
                    }
                }
                b'{' | b'[' => {
                    self.scalar = false;
                    self.value_starts()?;
                    if self.stack.len() >= self.limits.max_depth {
                        return Err(self.fail(format!("nested deeper than {} levels", self.limits.max_depth)));
                    }
                    let object = b == b'{';
                    self.stack.push(Frame {
                        object,
                        commas: 0,
                        nonempty: false,
                        expect_key: object,
                        key: String::new(),
                    });
                }
                b'}' | b']' => {
                    self.scalar = false;
                    self.stack.pop();
                }
                b',' => {
                    self.scalar = false;
                    if let Some(top) = self.stack.last_mut() {
                        top.commas += 1;
                        if top.object {
                            top.expect_key = true;
                            top.key.clear();
                        }
                        let (object, items) = (top.object, top.items());
                        if items > self.limits.max_items {
                            let what = if object { "members in one object" } else { "items in one array" };
                            return Err(self.fail(format!("more than {} {what}", self.limits.max_items)));
                        }
                    }
                }
                b':' | b' ' | b'\t' | b'\n' | b'\r' => self.scalar = false,
                _ => {
                    if !self.scalar {
                        self.scalar = true;
                        self.value_starts()?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Per-organization limit on concurrent heavy reads (ledger previews, exports, OData pages, analytics): each
/// organization gets at most `per_org` at a time, so one tenant's dashboard refresh cannot take the whole pool.
/// A request waits up to `wait` for its organization's turn, then is answered 503 with `Retry-After`.
#[derive(Debug)]
pub struct HeavyReads {
    per_org: usize,
    wait: std::time::Duration,
    orgs: std::sync::Mutex<std::collections::HashMap<OrgId, std::sync::Arc<tokio::sync::Semaphore>>>,
}

/// A held turn; dropping it lets the organization's next heavy read start.
#[derive(Debug)]
pub struct HeavyPermit(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit);

impl HeavyReads {
    /// At most `per_org` heavy reads per organization at once (at least 1); a request waits `wait` for a turn.
    pub fn new(per_org: usize, wait: std::time::Duration) -> Self {
        Self { per_org: per_org.max(1), wait, orgs: std::sync::Mutex::new(Default::default()) }
    }

    /// Waits for a turn of `org`.
    pub async fn acquire(&self, org: OrgId) -> Result<HeavyPermit, AppError> {
        let semaphore = {
            let mut orgs = self.orgs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            orgs.entry(org).or_insert_with(|| std::sync::Arc::new(tokio::sync::Semaphore::new(self.per_org))).clone()
        };
        match tokio::time::timeout(self.wait, semaphore.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(HeavyPermit(permit)),
            _ => Err(AppError::Unavailable(format!(
                "this organization already runs {} heavy reads (ledger, exports, analytics); try again shortly \
                 (--heavy-reads-per-org)",
                self.per_org
            ))),
        }
    }

    /// Heavy reads of `org` running now.
    pub fn running(&self, org: OrgId) -> usize {
        let orgs = self.orgs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        orgs.get(&org).map_or(0, |s| self.per_org - s.available_permits())
    }
}

/// Month-sized background work of this process — a close, the read model's refresh of the open months, a month's
/// summaries, an evidence index built from a bundle — takes turns: each holds a month of the fleet's facts in
/// memory, so two at once would need twice the memory (measured: 3.0 GB instead of 1.8 GB at 10,000 GPUs, a close
/// beside the open month's refresh) for no gain on cores the first one already fills.
pub async fn month_work() -> Result<tokio::sync::SemaphorePermit<'static>, AppError> {
    static TURN: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    TURN.acquire().await.map_err(|e| AppError::Internal(format!("month work: {e}")))
}

/// What one batch may make the server decode (docs/security.md, "Limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestLimits {
    /// Largest batch after decompression (`--ingest-max-decoded-bytes`). The agent sends at most 8 MiB.
    pub max_decoded_bytes: u64,
    /// Shape of the JSON: checked while it is inflated, before anything is parsed.
    pub json: JsonLimits,
}

impl Default for IngestLimits {
    fn default() -> Self {
        Self {
            max_decoded_bytes: DEFAULT_MAX_DECODED_BYTES,
            // A fact nests 4 levels deep and has a few dozen values; labels and annotations are the longest
            // strings (Kubernetes caps a label value at 63 bytes, all annotations together at 256 KiB).
            json: JsonLimits {
                max_depth: 16,
                max_string_bytes: 64 * 1024,
                max_items: gpuledger_core::wire::MAX_FACTS_PER_BATCH,
                max_values: 100 * gpuledger_core::wire::MAX_FACTS_PER_BATCH,
            },
        }
    }
}

/// Default of [`IngestLimits::max_decoded_bytes`]: four times the agent's own batch ceiling (8 MiB).
pub const DEFAULT_MAX_DECODED_BYTES: u64 = 32 * 1024 * 1024;

/// Where webhooks may point. By default an https URL whose host resolves to public addresses only, so an
/// organization's admin cannot make the server call into the operator's network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    /// `--webhook-allow-loopback` (on in `demo`): plain http and loopback addresses (a receiver on this machine).
    pub allow_loopback: bool,
    /// `--webhook-allow-private`: private, link-local and unique-local addresses (receivers inside the operator's
    /// network).
    pub allow_private: bool,
}

impl OutboundPolicy {
    /// Checks the URL's form and an address-literal host; returns (host, port).
    pub fn check_url(&self, url: &str) -> Result<(String, u16), String> {
        let parsed = reqwest::Url::parse(url).map_err(|_| "is not a URL".to_string())?;
        let host = parsed.host_str().filter(|h| !h.is_empty()).ok_or("has no host")?.to_string();
        let loopback = crate::auth::net::is_loopback_host(&host);
        match parsed.scheme() {
            "https" => {}
            "http" if loopback && self.allow_loopback => {}
            "http" => {
                return Err("must be an https URL (plain http only for a loopback receiver, with the server's \
                            --webhook-allow-loopback)"
                    .into());
            }
            _ => return Err("must be an https URL".into()),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() || parsed.fragment().is_some() {
            return Err("may not carry credentials or a fragment".into());
        }
        if url.len() > 2000 {
            return Err("is longer than 2000 characters".into());
        }
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            self.check_address(ip)?;
        }
        Ok((host, parsed.port_or_known_default().unwrap_or(443)))
    }

    /// Refuses an internal address unless allowed.
    pub fn check_address(&self, ip: IpAddr) -> Result<(), String> {
        if !crate::auth::net::is_internal(ip) || self.allow_private || (self.allow_loopback && ip.is_loopback()) {
            return Ok(());
        }
        Err(format!(
            "resolves to {ip}, a loopback, private or link-local address (allowed only with the server's \
             --webhook-allow-private, or --webhook-allow-loopback for loopback)"
        ))
    }

    /// The whole check: the URL, then every address its host resolves to.
    pub async fn check(&self, url: &str) -> Result<(), String> {
        let (host, port) = self.check_url(url)?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let addrs = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|_| format!("has a host ({host}) that does not resolve"))?;
        for addr in addrs {
            self.check_address(addr.ip())?;
        }
        Ok(())
    }
}

impl crate::auth::net::AddressPolicy for OutboundPolicy {
    const WHAT: &'static str = "webhook";
    fn check_address(&self, ip: IpAddr) -> Result<(), String> {
        OutboundPolicy::check_address(self, ip)
    }
}

/// The request limits a running server applies (flags of `serve` and `demo`; docs/security.md).
#[derive(Debug)]
pub struct ServerLimits {
    /// What an agent's batch may make the server decode.
    pub ingest: IngestLimits,
    /// How long before its cluster's registration a measured window may start (`--ingest-backfill-days`).
    pub backfill: time::Duration,
    /// Concurrent heavy reads per organization.
    pub heavy: HeavyReads,
    /// The read model's staleness bound (`--snapshot-max-age-secs`): answers from an older snapshot, with changes
    /// waiting, say they are stale.
    pub snapshot_max_age: time::Duration,
    /// Where webhooks may point (`--webhook-allow-loopback`, `--webhook-allow-private`).
    pub outbound: OutboundPolicy,
}

/// Default of `--ingest-backfill-days`: a year and a month, so a cluster that joins can still send what it
/// measured over the last closed year.
pub const DEFAULT_BACKFILL_DAYS: i64 = 400;

/// Default of `--heavy-reads-per-org`.
pub const DEFAULT_HEAVY_READS_PER_ORG: usize = 4;

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            ingest: IngestLimits::default(),
            backfill: time::Duration::days(DEFAULT_BACKFILL_DAYS),
            heavy: HeavyReads::new(DEFAULT_HEAVY_READS_PER_ORG, std::time::Duration::from_secs(10)),
            snapshot_max_age: time::Duration::seconds(60),
            outbound: OutboundPolicy::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    const SMALL: JsonLimits = JsonLimits { max_depth: 4, max_string_bytes: 8, max_items: 3, max_values: 20 };

    #[test]
    fn ordinary_documents_pass() {
        JsonGuard::check(SMALL, br#"{"a":[1,2,3],"b":{"c":"12345678"},"d":null}"#).unwrap();
        JsonGuard::check(JsonLimits::API, br#"{"name":"Research","escaped":"a\"b\\"}"#).unwrap();
        JsonGuard::check(SMALL, b"").unwrap();
    }

    #[test]
    fn each_limit_is_named_with_where_it_was_crossed() {
        let hit = JsonGuard::check(SMALL, br#"{"a":[[[[1]]]]}"#).unwrap_err();
        assert_eq!(hit.at, "a[0][0][0]");
        assert!(hit.reason.contains("nested deeper than 4"), "{hit:?}");
        let hit = JsonGuard::check(SMALL, br#"{"a":1,"name":"123456789"}"#).unwrap_err();
        assert_eq!(hit.at, "name");
        assert!(hit.reason.contains("longer than 8 bytes"), "{hit:?}");
        let hit = JsonGuard::check(SMALL, br#"{"facts":[{},{},{},{}]}"#).unwrap_err();
        assert_eq!(hit.at, "facts[3]");
        assert!(hit.reason.contains("more than 3 items in one array"), "{hit:?}");
        let hit = JsonGuard::check(SMALL, br#"{"a":1,"b":2,"c":3,"d":4}"#).unwrap_err();
        assert!(hit.reason.contains("members in one object"), "{hit:?}");
        let many = format!("[{}]", ["[1,2]"; 3].join(","));
        let limits = JsonLimits { max_values: 6, ..SMALL };
        let hit = JsonGuard::check(limits, many.as_bytes()).unwrap_err();
        assert!(hit.reason.contains("more than 6 values"), "{hit:?}");
    }

    #[test]
    fn chunks_are_the_same_as_one_piece() {
        let doc = br#"{"facts":[{"k":"v"},{"k":"w"},{"k":"x"},{"k":"y"}]}"#;
        for cut in 0..doc.len() {
            let mut g = JsonGuard::new(SMALL);
            let r = g.feed(&doc[..cut]).and_then(|()| g.feed(&doc[cut..]));
            assert_eq!(r, JsonGuard::check(SMALL, doc), "cut at {cut}");
        }
    }

    #[test]
    fn a_nul_is_refused_wherever_it_is_and_only_a_nul() {
        let hit = JsonGuard::check(JsonLimits::API, br#"{"agent":{"version":"1.2\u0000"}}"#).unwrap_err();
        assert_eq!(hit.at, "agent.version");
        assert!(hit.reason.contains("NUL"), "{hit:?}");
        assert!(JsonGuard::check(JsonLimits::API, br#"{"k\u0000":1}"#).is_err(), "in a key too");
        // An escaped backslash before `u0000` is text, not an escape; other escapes are fine.
        JsonGuard::check(JsonLimits::API, br#"{"a":"\\u0000","b":"\u0001\u00e9\n"}"#).unwrap();
        let doc = br#"{"a":"x\u0000"}"#;
        for cut in 0..doc.len() {
            let mut g = JsonGuard::new(JsonLimits::API);
            assert!(g.feed(&doc[..cut]).and_then(|()| g.feed(&doc[cut..])).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn escaped_quotes_do_not_end_strings() {
        let hit = JsonGuard::check(SMALL, br#"["\"\"\"\"\"\"\"\"\""]"#).unwrap_err();
        assert!(hit.reason.contains("longer than 8"), "{hit:?}");
        JsonGuard::check(SMALL, br#"["a,b,c,d"]"#).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        /// Any bytes: no panic, and the scanner's own state stays within the depth limit.
        #[test]
        fn any_bytes_terminate_within_bounds(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let mut g = JsonGuard::new(SMALL);
            let _ = g.feed(&bytes);
            prop_assert!(g.stack.len() <= SMALL.max_depth);
        }

        /// Valid JSON within the limits always passes unless a string holds a NUL; the same document with one
        /// more level of nesting than allowed never does.
        #[test]
        fn valid_json_within_limits_passes(v in arb_json(3)) {
            fn has_nul(v: &serde_json::Value) -> bool {
                match v {
                    serde_json::Value::String(s) => s.contains('\0'),
                    serde_json::Value::Array(a) => a.iter().any(has_nul),
                    serde_json::Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
                    _ => false,
                }
            }
            let text = serde_json::to_vec(&v).unwrap();
            prop_assert_eq!(JsonGuard::check(JsonLimits::API, &text).is_ok(), !has_nul(&v));
            prop_assume!(!has_nul(&v));
            let mut deep = String::new();
            for _ in 0..JsonLimits::API.max_depth { deep.push('['); }
            deep.push_str(std::str::from_utf8(&text).unwrap());
            for _ in 0..JsonLimits::API.max_depth { deep.push(']'); }
            let nested = JsonGuard::check(JsonLimits::API, deep.as_bytes());
            let is_container = v.is_array() || v.is_object();
            prop_assert_eq!(nested.is_err(), is_container);
        }
    }

    fn arb_json(depth: u32) -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            ".{0,20}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(depth, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z\"\\\\]{0,6}", inner, 0..8)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
