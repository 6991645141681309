//! The cross-tenant suite: every route of the server — portal pages and forms, REST API, exports, OData — asked by
//! organization A's users and tokens for organization B's objects by ID.
//!
//! - A's credentials (admin, export, Platform-only export, agent and join tokens; admin, finance, Research manager
//!   and viewer sessions) ask every route for B's objects: 404 for an object by ID, in the path or as a field of the
//!   body or query (a few bodies are refused before the lookup: 422 for their form, 409 for a rule), and list
//!   routes answer 200 with none of B's IDs or names in the body.
//! - The Research manager asks for Platform's objects, the Platform export token for Research's: the same.
//! - A credential without the route's capability is refused (401 without a credential, 403 otherwise): an export
//!   token can't write, an agent token can't read.
//! - Each refusal is checked against a control: the same request for A's own object finds it.
//! - Nothing of B's changes (a checksum of every B row in every tenant table, before and after).
//! - `every_route_has_a_case` reads the source: a route added without a case here fails it, and says where.
//!
//! The same attempts as raw SQL under the application role are in `isolation.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::routes::{portal_routes, server_routes};

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::Duration,
};

use axum::{
    body::{Body, to_bytes},
    http::{Request, header},
};
use gpuledger_core::{
    ids::{DepartmentId, OrgId},
    sharing::SharingMode,
    wire::{
        AgentInfo, AllocationEnd, AllocationStart, AttributionLabels, Batch, EndReason, Fact, FactBody, Holder,
        NamespaceFact, ServiceUsageFact, WIRE_VERSION, event_id,
    },
};
use gpuledger_server::{
    app::{self, AppState, HttpOptions},
    auth::{self, AuthState, Role, Scope, limits::RateLimits, oidc, session},
    db::Database,
};
use serde_json::{Value, json};
use time::{OffsetDateTime, macros::datetime};
use tower::ServiceExt;
use uuid::Uuid;

const H100: &str = "NVIDIA H100 80GB HBM3";
const CLASS: &str = "H100-80GB";
/// Closed in both organizations; its lines are what the disputes dispute.
const CLOSED: &str = "2026-09";
/// Closed in B only (open in A).
const B_ONLY_CLOSED: &str = "2026-08";
/// B's draft policy version: A never gets this far.
const B_DRAFT_VERSION: i32 = 50;
/// B's webhook: A never sees, lists or disables it.
const B_WEBHOOK: Uuid = Uuid::from_u128(0xb0b0_0000_0000_4000_8000_0000_0000_0001);

// ---------------------------------------------------------------- credentials

/// Who asks: organization A's credentials (and no credential at all).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Cred {
    Anonymous,
    AdminToken,
    /// Sent as HTTP Basic (how Power BI sends it); the others as Bearer.
    ExportToken,
    /// An export token limited to the Platform department.
    ExportPlatform,
    AgentToken,
    JoinToken,
    AdminSession,
    FinanceSession,
    /// The demo department manager: Research only.
    ManagerSession,
    ViewerSession,
}

const EVERY: [Cred; 10] = [
    Cred::Anonymous,
    Cred::AdminToken,
    Cred::ExportToken,
    Cred::ExportPlatform,
    Cred::AgentToken,
    Cred::JoinToken,
    Cred::AdminSession,
    Cred::FinanceSession,
    Cred::ManagerSession,
    Cred::ViewerSession,
];

impl Cred {
    fn is_session(self) -> bool {
        matches!(self, Self::AdminSession | Self::FinanceSession | Self::ManagerSession | Self::ViewerSession)
    }
}

/// Who may use a route (stated here, independently of the server's own capability table).
#[derive(Clone, Copy, Debug)]
enum Who {
    /// Public endpoints: everyone, credential or not.
    Anyone,
    /// Any valid credential.
    Authenticated,
    /// Read the ledger: sessions, admin and export tokens.
    Readers,
    /// Readers that see the whole organization (not the manager, not the Platform export token).
    OrgReaders,
    /// Readers by API token only (the OData feed never takes the portal's cookie): admin and export tokens.
    TokenReaders,
    /// Policies, quotas, close, dispute resolution: admin and finance sessions, the admin token.
    AdminOrFinance,
    /// Open and comment on disputes: admin, finance and manager sessions, the admin token.
    Participants,
    /// Approve or refuse a credit: the finance session only (no token scope approves credits).
    CreditApprovers,
    /// Tokens, identity settings, audit: the admin session and the admin token.
    Admins,
    /// Send facts: the agent token.
    Agents,
    /// Redeem a join token: the join token.
    Joiners,
    /// Portal pages gated to these sessions.
    Sessions(&'static [Cred]),
}

impl Who {
    fn allows(self, c: Cred) -> bool {
        use Cred::*;
        match self {
            Self::Anyone => true,
            Self::Authenticated => c != Anonymous,
            Self::Readers => matches!(
                c,
                AdminToken
                    | ExportToken
                    | ExportPlatform
                    | AdminSession
                    | FinanceSession
                    | ManagerSession
                    | ViewerSession
            ),
            Self::OrgReaders => {
                matches!(c, AdminToken | ExportToken | AdminSession | FinanceSession | ViewerSession)
            }
            Self::TokenReaders => matches!(c, AdminToken | ExportToken | ExportPlatform),
            Self::AdminOrFinance => matches!(c, AdminToken | AdminSession | FinanceSession),
            Self::Participants => matches!(c, AdminToken | AdminSession | FinanceSession | ManagerSession),
            Self::CreditApprovers => c == FinanceSession,
            Self::Admins => matches!(c, AdminToken | AdminSession),
            Self::Agents => c == AgentToken,
            Self::Joiners => c == JoinToken,
            Self::Sessions(list) => list.contains(&c),
        }
    }
}

/// How a credential the route does not allow is turned away.
#[derive(Clone, Copy, Debug)]
enum Denied {
    /// The API: 401 without a credential, 403 with one.
    Api,
    /// The OData feed: a session cookie is no credential there (401, like none); 403 for other tokens.
    TokenOnly,
    /// Portal forms: to the login page (303) without a credential, 403 with one.
    Form,
    /// Portal pages (they read sessions only; tokens count as signed out): to the login page without a session,
    /// 403 for a session without the role.
    Page,
}

impl Denied {
    fn accepts(self, c: Cred, status: u16) -> bool {
        match self {
            Self::Api => status == if c == Cred::Anonymous { 401 } else { 403 },
            Self::TokenOnly => status == if c == Cred::Anonymous || c.is_session() { 401 } else { 403 },
            Self::Form => status == if c == Cred::Anonymous { 303 } else { 403 },
            Self::Page => {
                if c.is_session() {
                    status == 403
                } else {
                    matches!(status, 302 | 303 | 307)
                }
            }
        }
    }

    fn describe(self, c: Cred) -> &'static str {
        match (self, c == Cred::Anonymous, c.is_session()) {
            (Self::Api, true, _) => "401",
            (Self::TokenOnly, true, _) | (Self::TokenOnly, _, true) => "401 (the cookie is not an OData credential)",
            (Self::Form, true, _) => "303 to the login page",
            (Self::Page, _, true) => "403",
            (Self::Page, _, false) => "a redirect to the login page",
            _ => "403",
        }
    }
}

/// What an allowed credential must get.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Exactly this status.
    Status(u16),
    /// This status, and none of the foreign objects' IDs or names anywhere in the answer.
    Clean(u16),
}

// ---------------------------------------------------------------- cases

/// Whose objects a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Organization B's (asked by every credential of A).
    OtherOrg,
    /// Another department of A (asked by the credentials limited to one department).
    OtherDepartment,
    /// A's own (the controls).
    Own,
}

/// The objects a request is built from.
#[derive(Clone, Debug)]
struct Target {
    name: String,
    kind: Kind,
    org: Uuid,
    slug: String,
    /// Its departments (for B: both; for a department: that one).
    departments: Vec<Uuid>,
    tenant: Uuid,
    /// A line of the closed month.
    line: String,
    dispute_open: Uuid,
    dispute_open_number: i32,
    dispute_accepted: Uuid,
    /// Organization-level objects (`None` for a department target).
    policy_version: Option<i32>,
    token: Option<Uuid>,
    form_token: Option<Uuid>,
    /// A month with an evidence bundle.
    bundle_period: Option<&'static str>,
    cluster_name: Option<String>,
    issuer: Option<String>,
    /// Strings of this target's data that must not appear in an answer to another party.
    markers: Vec<String>,
}

/// A request.
#[derive(Clone, Debug)]
struct Req {
    uri: String,
    payload: Payload,
    headers: Vec<(&'static str, String)>,
    /// A session cookie value to send instead of any credential (the request then runs once, as that cookie).
    raw_cookie: Option<String>,
}

#[derive(Clone, Debug)]
enum Payload {
    None,
    Json(Value),
    Form(String),
}

fn req(uri: impl Into<String>, payload: Payload) -> Option<Req> {
    Some(Req { uri: uri.into(), payload, headers: Vec::new(), raw_cookie: None })
}

fn get(uri: impl Into<String>) -> Option<Req> {
    req(uri, Payload::None)
}

/// A portal page, asked for as a browser does (it is the `Accept` header that makes a redirect a 302).
fn page(uri: impl Into<String>) -> Option<Req> {
    let mut r = get(uri)?;
    r.headers.push(("accept", "text/html,application/xhtml+xml".into()));
    Some(r)
}

fn with_json(uri: impl Into<String>, v: Value) -> Option<Req> {
    req(uri, Payload::Json(v))
}

fn with_form(uri: impl Into<String>, form: impl Into<String>) -> Option<Req> {
    req(uri, Payload::Form(form.into()))
}

/// A control: the same request for A's own object, by `cred`, gets `status` (and, with `marker`, shows some of
/// A's data).
#[derive(Clone, Copy, Debug)]
struct Control {
    cred: Cred,
    status: u16,
    marker: bool,
}

const fn control(cred: Cred, status: u16, marker: bool) -> Option<Control> {
    Some(Control { cred, status, marker })
}

/// One attempt: a route asked for a target's objects.
struct Case {
    method: &'static str,
    /// The route template exactly as the server registers it.
    route: &'static str,
    who: Who,
    denied: Denied,
    expect: Expect,
    /// The request for a target; `None` where the route has nothing of that kind of target to ask for.
    build: fn(&Target) -> Option<Req>,
    control: Option<Control>,
}

fn valid_policy() -> Value {
    json!({"effective_from": "2027-01", "note": "cross-tenant probe", "policy": {
        "currency": "USD", "classes": [{"gpu_class": CLASS, "guaranteed": "2.00", "borrowed": "3.00"}]
    }})
}

fn org_level(t: &Target) -> Option<&Target> {
    (t.kind != Kind::OtherDepartment).then_some(t)
}

/// The table. Every route the server registers needs at least one case (see `every_route_has_a_case`).
fn cases() -> Vec<Case> {
    use Cred::*;
    use Denied::{Api, Form, Page, TokenOnly};
    use Expect::{Clean, Status};
    use Who::*;
    vec![
        // ---- an API path no operation answers: problem+json 404 for everyone, naming nothing of anyone's
        Case {
            method: "ANY",
            route: "/api",
            who: Anyone,
            denied: Api,
            expect: Clean(404),
            build: |_| get("/api"),
            control: None,
        },
        Case {
            method: "ANY",
            route: "/api/",
            who: Anyone,
            denied: Api,
            expect: Clean(404),
            build: |_| get("/api/"),
            control: None,
        },
        Case {
            method: "ANY",
            route: "/api/{*rest}",
            who: Anyone,
            denied: Api,
            expect: Clean(404),
            build: |_| get("/api/v1/no-such-operation"),
            control: None,
        },
        // ---- health and documents: public, and nothing of any organization in them
        Case {
            method: "GET",
            route: "/healthz",
            who: Anyone,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/healthz"),
            control: None,
        },
        Case {
            method: "GET",
            route: "/readyz",
            who: Anyone,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/readyz"),
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/openapi.json",
            who: Anyone,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/openapi.json"),
            control: None,
        },
        // ---- Prometheus: one organization per credential, a department's workloads only (the identity gauge with
        // open workloads in both organizations is in metrics.rs)
        Case {
            method: "GET",
            route: "/metrics",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/metrics"),
            control: control(ExportToken, 200, true),
        },
        // ---- sign-in
        Case {
            method: "GET",
            route: "/auth/login",
            who: Anyone,
            denied: Api,
            expect: Clean(303),
            build: |t| org_level(t).and_then(|_| get("/auth/login?next=/admin")),
            control: None,
        },
        // Starting a sign-in at B's provider is open to anyone (it is how B's people sign in); the provider here
        // does not resolve, and the answer says nothing of it.
        Case {
            method: "POST",
            route: "/auth/login",
            who: Anyone,
            denied: Api,
            expect: Clean(503),
            build: |t| {
                let t = org_level(t)?;
                let mut r = with_form("/auth/login", format!("org={}&next=/admin", t.slug))?;
                r.headers.push(("origin", "http://localhost".into()));
                Some(r)
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/auth/callback",
            who: Anyone,
            denied: Api,
            expect: Clean(303),
            build: |t| org_level(t).and_then(|_| get("/auth/callback?code=c&state=s")),
            control: None,
        },
        // B offers no demo login: nobody gets a session of B through it, whatever A credential they hold.
        Case {
            method: "POST",
            route: "/auth/demo",
            who: Anyone,
            denied: Api,
            expect: Status(403),
            build: |t| {
                let t = org_level(t)?;
                let mut r = with_form("/auth/demo", format!("org={}&role=admin", t.slug))?;
                r.headers.push(("origin", "http://localhost".into()));
                Some(r)
            },
            control: None,
        },
        // Signing out with a cookie naming B (and a guessed secret) ends nothing of B's.
        Case {
            method: "POST",
            route: "/auth/logout",
            who: Anyone,
            denied: Api,
            expect: Status(303),
            build: |t| {
                let t = org_level(t)?;
                let mut r = with_form("/auth/logout", "")?;
                r.raw_cookie = Some(format!("{}.{}", t.org.simple(), "ab".repeat(32)));
                Some(r)
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/me",
            who: Authenticated,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/me"),
            control: control(AdminToken, 200, true),
        },
        // ---- identity administration (organization singletons: A's own, never B's)
        Case {
            method: "GET",
            route: "/api/v1/identity/provider",
            who: Admins,
            denied: Api,
            expect: Clean(200),
            build: |t| org_level(t).and_then(|_| get("/api/v1/identity/provider")),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "PUT",
            route: "/api/v1/identity/provider",
            who: Admins,
            denied: Api,
            expect: Status(422),
            build: |t| {
                let t = org_level(t)?;
                with_json("/api/v1/identity/provider", json!({"issuer": t.issuer.clone()?, "client_id": ""}))
            },
            control: None,
        },
        Case {
            method: "DELETE",
            route: "/api/v1/identity/provider",
            who: Admins,
            denied: Api,
            expect: Status(404),
            build: |t| org_level(t).and_then(|_| req("/api/v1/identity/provider", Payload::None)),
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/identity/role-mappings",
            who: Admins,
            denied: Api,
            expect: Clean(200),
            build: |t| org_level(t).and_then(|_| get("/api/v1/identity/role-mappings")),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "PUT",
            route: "/api/v1/identity/role-mappings",
            who: Admins,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json(
                    "/api/v1/identity/role-mappings",
                    json!({"mappings": [
                        {"group": "probe", "role": "department_manager", "department": t.departments[0].to_string()}
                    ]}),
                )
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/audit",
            who: Admins,
            denied: Api,
            expect: Clean(200),
            build: |t| org_level(t).and_then(|_| get("/api/v1/audit")),
            control: control(AdminToken, 200, true),
        },
        // ---- tokens
        Case {
            method: "GET",
            route: "/api/v1/tokens",
            who: Admins,
            denied: Api,
            expect: Clean(200),
            build: |t| org_level(t).and_then(|_| get("/api/v1/tokens")),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "POST",
            route: "/api/v1/tokens",
            who: Admins,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json(
                    "/api/v1/tokens",
                    json!({"name": "probe", "scope": "export", "departments": [t.departments[0].to_string()]}),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/api/v1/tokens/{id}/revoke",
            who: Admins,
            denied: Api,
            expect: Status(404),
            build: |t| with_json(format!("/api/v1/tokens/{}/revoke", t.token?), json!({})),
            control: control(AdminToken, 200, false),
        },
        // A's join token joins A's cluster, nothing of B's (run last: it is single-use).
        Case {
            method: "POST",
            route: "/api/v1/agents/join",
            who: Joiners,
            denied: Api,
            expect: Clean(200),
            build: |t| org_level(t).and_then(|_| req("/api/v1/agents/join", Payload::None)),
            control: None,
        },
        // ---- policies and quotas
        Case {
            method: "GET",
            route: "/api/v1/policies",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/policies"),
            control: control(AdminToken, 200, true),
        },
        // Creating a draft creates it in A (B's checksum shows B unchanged).
        Case {
            method: "POST",
            route: "/api/v1/policies",
            who: AdminOrFinance,
            denied: Api,
            expect: Clean(201),
            build: |t| org_level(t).and_then(|_| with_json("/api/v1/policies", valid_policy())),
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/policies/{version}",
            who: Readers,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/policies/{}", t.policy_version?)),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "PUT",
            route: "/api/v1/policies/{version}",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |t| with_json(format!("/api/v1/policies/{}", t.policy_version?), valid_policy()),
            control: control(AdminToken, 409, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/policies/{version}/approve",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |t| with_json(format!("/api/v1/policies/{}/approve", t.policy_version?), json!({"reason": "probe"})),
            control: control(AdminToken, 409, false),
        },
        // The what-if of B's version: not found (RLS); A's own version answers A's month, A's names in it.
        Case {
            method: "GET",
            route: "/api/v1/policies/{version}/impact",
            who: Readers,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/policies/{}/impact?period={CLOSED}", t.policy_version?)),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/quotas",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/quotas"),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "POST",
            route: "/api/v1/quotas",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json(
                    "/api/v1/quotas",
                    json!({"tenant": t.tenant.to_string(), "gpu_class": CLASS, "gpus": "1", "valid_from": "2026-08-01T00:00:00Z"}),
                )
            },
            // A's own tenant is found: its quota already covers that time.
            control: control(AdminToken, 409, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/quotas/import-kueue",
            who: AdminOrFinance,
            denied: Api,
            expect: Clean(200),
            build: |t| org_level(t).and_then(|_| with_json("/api/v1/quotas/import-kueue", json!({"mappings": {}}))),
            control: None,
        },
        // ---- ledger, periods, evidence
        Case {
            method: "GET",
            route: "/api/v1/ledger",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/ledger?period={CLOSED}")),
            control: control(AdminToken, 200, true),
        },
        // A month B closed and A did not: A's own preview (computed for the whole organization, then cut to the
        // caller's departments), nothing of B's bundle.
        Case {
            method: "GET",
            route: "/api/v1/ledger",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/ledger?period={B_ONLY_CLOSED}")),
            control: control(AdminToken, 200, true),
        },
        // Month totals from the read model: the caller's own organization and departments only.
        Case {
            method: "GET",
            route: "/api/v1/ledger/months",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/ledger/months?from={B_ONLY_CLOSED}&to={CLOSED}")),
            // Totals only: nothing of A's by name to look for.
            control: None,
        },
        // The month's stored summaries: rows of the caller's own organization and departments only.
        Case {
            method: "GET",
            route: "/api/v1/ledger/summaries",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/ledger/summaries?period={CLOSED}")),
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/periods/{period}/evidence",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/periods/{CLOSED}/evidence")),
            control: control(AdminToken, 200, true),
        },
        // The open month (closed in B only): read live from A's store.
        Case {
            method: "GET",
            route: "/api/v1/periods/{period}/evidence",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/periods/{B_ONLY_CLOSED}/evidence")),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/periods",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/periods"),
            control: control(AdminToken, 200, true),
        },
        // B's closed month is no closed month of A's: A cannot close it any more (its later month is closed).
        Case {
            method: "POST",
            route: "/api/v1/periods/{period}/close",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(409),
            build: |t| {
                with_json(
                    format!("/api/v1/periods/{}/close", t.bundle_period.filter(|_| t.kind == Kind::OtherOrg)?),
                    json!({}),
                )
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/periods/{period}/bundle",
            who: OrgReaders,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/periods/{}/bundle", t.bundle_period?)),
            control: control(AdminToken, 200, true),
        },
        // ---- disputes
        Case {
            method: "GET",
            route: "/api/v1/disputes",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/disputes"),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "POST",
            route: "/api/v1/disputes",
            who: Participants,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json("/api/v1/disputes", json!({"period": CLOSED, "line_ids": [t.line], "reason": "probe"}))
            },
            // A's own line is found: it is already disputed.
            control: control(AdminToken, 409, false),
        },
        Case {
            method: "GET",
            route: "/api/v1/disputes/{id}",
            who: Readers,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/disputes/{}", t.dispute_open)),
            control: control(AdminToken, 200, true),
        },
        // By number: numbers are per organization, so only another department's is a foreign object.
        Case {
            method: "GET",
            route: "/api/v1/disputes/{id}",
            who: Readers,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/disputes/{}", t.dispute_open_number)).filter(|_| t.kind != Kind::OtherOrg),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "POST",
            route: "/api/v1/disputes/{id}/comments",
            who: Participants,
            denied: Api,
            expect: Status(404),
            build: |t| with_json(format!("/api/v1/disputes/{}/comments", t.dispute_open), json!({"body": "probe"})),
            control: control(AdminToken, 201, false),
        },
        // The controls below run in this order on A's own disputes: accept the open one, then it is no longer open;
        // approve the accepted one's credit, then it is no longer pending.
        Case {
            method: "POST",
            route: "/api/v1/disputes/{id}/accept",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json(
                    format!("/api/v1/disputes/{}/accept", t.dispute_open),
                    json!({"reason": "probe", "credit_amount": "1.00"}),
                )
            },
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/disputes/{id}/reject",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |t| with_json(format!("/api/v1/disputes/{}/reject", t.dispute_open), json!({"reason": "probe"})),
            control: control(AdminToken, 409, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/disputes/{id}/credit/approve",
            who: CreditApprovers,
            denied: Api,
            expect: Status(404),
            build: |t| with_json(format!("/api/v1/disputes/{}/credit/approve", t.dispute_accepted), json!({})),
            control: control(FinanceSession, 200, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/disputes/{id}/credit/reject",
            who: CreditApprovers,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json(format!("/api/v1/disputes/{}/credit/reject", t.dispute_accepted), json!({"reason": "probe"}))
            },
            control: control(FinanceSession, 409, false),
        },
        // ---- exports and OData (what Power BI reads, with HTTP Basic)
        Case {
            method: "GET",
            route: "/api/v1/exports/ledger.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/exports/ledger.csv?period={CLOSED}")),
            control: control(ExportToken, 200, true),
        },
        // A month B closed and A did not: A's own preview.
        Case {
            method: "GET",
            route: "/api/v1/exports/ledger.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/exports/ledger.csv?period={B_ONLY_CLOSED}")),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/odata/",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata/"),
            control: control(ExportToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/odata",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata"),
            control: control(ExportToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/odata/$metadata",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata/$metadata"),
            control: control(ExportToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/odata/{set}",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata/LedgerLines"),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/odata/{set}",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata/LedgerLines?$top=1&$skip=1"),
            control: control(ExportToken, 200, true),
        },
        // Asking for another organization's or department's objects by ID in a filter finds nothing.
        Case {
            method: "GET",
            route: "/odata/{set}",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |t| get(format!("/odata/Tenants?$filter=TenantId%20eq%20{}", t.tenant)),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/odata/{set}",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata/Allocations"),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/odata/{set}",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata/Departments"),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/odata/{set}",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata/Periods"),
            control: control(ExportToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/odata/{set}",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |_| get("/odata/Usage"),
            control: control(ExportToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/odata/{set}",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |t| {
                get(format!("/odata/Disputes?$filter=DisputeId%20eq%20{}%20or%20Number%20ge%200", t.dispute_open))
            },
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/odata/{set}/$count",
            who: TokenReaders,
            denied: TokenOnly,
            expect: Clean(200),
            build: |t| get(format!("/odata/LedgerLines/$count?$filter=DepartmentId%20eq%20{}", t.departments[0])),
            control: control(ExportToken, 200, false),
        },
        // The other CSV files and FOCUS: the caller's own organization and departments only.
        Case {
            method: "GET",
            route: "/api/v1/exports/allocations.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/exports/allocations.csv?period={CLOSED}")),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/exports/allocations.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |t| get(format!("/api/v1/exports/allocations.csv?period={CLOSED}&tenant={}", t.tenant)),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/exports/usage.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/exports/usage.csv?period={CLOSED}")),
            control: control(ExportToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/api/v1/exports/disputes.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |t| get(format!("/api/v1/exports/disputes.csv?period={CLOSED}&department={}", t.departments[0])),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/exports/focus.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/exports/focus.csv?period={CLOSED}")),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/exports/focus.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/exports/focus.csv?period={B_ONLY_CLOSED}&version=1.0")),
            control: control(ExportToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/exports/journal.csv",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/exports/journal.csv?period={CLOSED}&by=tenant")),
            control: control(ExportToken, 200, true),
        },
        // ---- the cloud bill and fault credits: the caller's own organization only (B's nodes, import and faults
        // never show; an import writes A's own month)
        Case {
            method: "GET",
            route: "/api/v1/inventory/nodes",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/inventory/nodes"),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/api/v1/costs/imports",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |_| get(format!("/api/v1/costs/imports?period={CLOSED}")),
            control: None,
        },
        Case {
            method: "POST",
            route: "/api/v1/costs/imports",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(422),
            build: |t| {
                org_level(t).and_then(|_| with_json(format!("/api/v1/costs/imports?period={CLOSED}"), json!({})))
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/faults/credits",
            who: OrgReaders,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/faults/credits?period={CLOSED}")),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/faults/credits/approve",
            who: CreditApprovers,
            denied: Api,
            expect: Status(404),
            build: |_| {
                with_json(
                    "/api/v1/faults/credits/approve",
                    json!({"fault_event_id": "probe", "allocation_id": "c/probe"}),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/api/v1/faults/credits/reject",
            who: CreditApprovers,
            denied: Api,
            expect: Status(404),
            build: |_| {
                with_json(
                    "/api/v1/faults/credits/reject",
                    json!({"fault_event_id": "probe", "allocation_id": "c/probe"}),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/costs/import",
            who: AdminOrFinance,
            denied: Form,
            expect: Status(415),
            build: |_| with_form(format!("/ui/costs/import?period={CLOSED}"), "bill=x"),
            control: None,
        },
        Case {
            method: "GET",
            route: "/admin/costs",
            who: Sessions(&[AdminSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/admin/costs"),
            control: control(AdminSession, 200, false),
        },
        // ---- analytics
        Case {
            method: "GET",
            route: "/api/v1/analytics/utilization",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/analytics/utilization?period={CLOSED}")),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/analytics/utilization",
            who: Readers,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/analytics/utilization?period={CLOSED}&tenant={}", t.tenant)),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/analytics/inference",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/analytics/inference?period={CLOSED}")),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/analytics/inference",
            who: Readers,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/analytics/inference?period={CLOSED}&department={}", t.departments[0])),
            control: control(AdminToken, 200, true),
        },
        // ---- tenancy and inventory: lists show only the caller's own; writes name things in the caller's org only
        Case {
            method: "GET",
            route: "/api/v1/departments",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/departments"),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "POST",
            route: "/api/v1/departments",
            who: Admins,
            denied: Api,
            expect: Status(422),
            build: |_| with_json("/api/v1/departments", json!({"name": ""})),
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/tenants",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/tenants"),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "POST",
            route: "/api/v1/tenants",
            who: Admins,
            denied: Api,
            expect: Status(404),
            // B's department, by ID: not found in A.
            build: |t| {
                with_json(
                    "/api/v1/tenants",
                    json!({"name": "probe-tenant", "department": t.departments[0].to_string()}),
                )
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/inventory",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/inventory"),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/inventory/models",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(422),
            build: |_| {
                with_json(
                    "/api/v1/inventory/models",
                    json!({"model": "", "gpu_class": "x", "valid_from": "2026-01-01T00:00:00Z"}),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/api/v1/inventory/profiles",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(409),
            build: |_| {
                with_json(
                    "/api/v1/inventory/profiles",
                    json!({"kind": "mig", "model": "m", "profile": "3g.40gb", "fraction": "0", "valid_from": "2026-01-01T00:00:00Z"}),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/api/v1/inventory/timeslicing",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            // B's cluster, by name: not found in A.
            build: |t| {
                with_json(
                    "/api/v1/inventory/timeslicing",
                    json!({"cluster": t.cluster_name.clone()?, "name": "probe", "replicas": 2, "valid_from": "2026-01-01T00:00:00Z"}),
                )
            },
            control: None,
        },
        // Previewing a change on B's cluster, by name: not found in A (and a preview saves nothing anywhere).
        Case {
            method: "POST",
            route: "/api/v1/inventory/impact",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json(
                    format!("/api/v1/inventory/impact?period={CLOSED}"),
                    json!({"timeslicing": {"cluster": t.cluster_name.clone()?, "name": "probe", "replicas": 2, "valid_from": "2026-01-01T00:00:00Z"}}),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/api/v1/inventory/share-basis",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            // B's cluster, by name: not found in A.
            build: |t| {
                with_json(
                    "/api/v1/inventory/share-basis",
                    json!({"cluster": t.cluster_name.clone()?, "basis": "compute", "valid_from": "2026-01-01T00:00:00Z"}),
                )
            },
            control: None,
        },
        // Telemetry coverage: the organization's own clusters and nodes, for admins.
        Case {
            method: "GET",
            route: "/api/v1/telemetry/coverage",
            who: Admins,
            denied: Api,
            expect: Clean(200),
            build: |t| org_level(t).and_then(|_| get(format!("/api/v1/telemetry/coverage?period={CLOSED}"))),
            control: control(AdminToken, 200, false),
        },
        // Foresight: budgets, forecast, idle reservations and webhooks are the organization's own.
        Case {
            method: "GET",
            route: "/api/v1/idle",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/idle"),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/api/v1/budgets",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/budgets?period={CLOSED}")),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/budgets",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            // B's tenant, by ID: not a tenant of A.
            build: |t| {
                with_json(
                    "/api/v1/budgets",
                    json!({"tenant": t.tenant.to_string(), "period": CLOSED, "amount": "1.00"}),
                )
                .filter(|_| t.kind == Kind::OtherOrg)
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/forecast",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/forecast?period={CLOSED}")),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/api/v1/notifications/webhooks",
            who: AdminOrFinance,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/notifications/webhooks"),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/notifications/webhooks",
            who: AdminOrFinance,
            denied: Api,
            // B's receiver's address is no business of A's; an internal target is refused for everyone.
            expect: Status(409),
            build: |_| {
                with_json(
                    "/api/v1/notifications/webhooks",
                    json!({"url": "https://169.254.169.254/", "events": ["period.closed"]}),
                )
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/notifications/webhooks/{id}/deliveries",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |t| {
                get(format!("/api/v1/notifications/webhooks/{B_WEBHOOK}/deliveries"))
                    .filter(|_| t.kind == Kind::OtherOrg)
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/api/v1/notifications/webhooks/{id}/disable",
            who: AdminOrFinance,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json(format!("/api/v1/notifications/webhooks/{B_WEBHOOK}/disable"), json!({}))
                    .filter(|_| t.kind == Kind::OtherOrg)
            },
            control: None,
        },
        Case {
            method: "PATCH",
            route: "/api/v1/departments/{department}",
            who: Admins,
            denied: Api,
            expect: Status(404),
            // B's department, by ID: not found in A; a rename would be visible to B otherwise.
            build: |t| {
                org_level(t).and_then(|t| {
                    with_json(
                        format!("/api/v1/departments/{}", t.departments[0]),
                        json!({"name": "probe-renamed", "reason": "cross-tenant probe"}),
                    )
                })
            },
            control: None,
        },
        Case {
            method: "PATCH",
            route: "/api/v1/tenants/{tenant}",
            who: Admins,
            denied: Api,
            expect: Status(404),
            build: |t| {
                org_level(t).and_then(|t| {
                    with_json(
                        format!("/api/v1/tenants/{}", t.tenant),
                        json!({"name": "probe-renamed", "reason": "cross-tenant probe"}),
                    )
                })
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/api/v1/tenancy/namespace-rules",
            who: Admins,
            denied: Api,
            expect: Status(404),
            // B's tenant, by ID: not found in A.
            build: |t| {
                with_json(
                    "/api/v1/tenancy/namespace-rules",
                    json!({"match": "prefix", "pattern": "probe-", "tenant": t.tenant.to_string(),
                           "valid_from": "2026-01-01T00:00:00Z", "reason": "cross-tenant probe"}),
                )
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/tenancy/namespace-rules",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get("/api/v1/tenancy/namespace-rules"),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/tenancy/reassignments",
            who: Admins,
            denied: Api,
            expect: Status(404),
            // B's cluster and tenant: not found in A.
            build: |t| {
                with_json(
                    "/api/v1/tenancy/reassignments",
                    json!({"cluster": t.cluster_name.clone()?, "namespace": "probe", "tenant": t.tenant.to_string(),
                           "valid_from": "2026-01-01T00:00:00Z", "reason": "cross-tenant probe"}),
                )
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/tenancy/ownership",
            who: Readers,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/tenancy/ownership?cluster={}&namespace=probe", t.cluster_name.clone()?)),
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/analytics/sessions",
            who: Readers,
            denied: Api,
            expect: Status(404),
            build: |t| get(format!("/api/v1/analytics/sessions?period={CLOSED}&tenant={}", t.tenant)),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/analytics/training",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/analytics/training?period={CLOSED}")),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "POST",
            route: "/api/v1/training/progress",
            who: Agents,
            denied: Api,
            expect: Clean(200),
            // Reports land in the caller's own cluster whatever they name (no B name is written into A's data:
            // pages listing A's workloads would then show it).
            build: |_| {
                with_json(
                    "/api/v1/training/progress",
                    json!({"record_id": format!("probe-{}", Uuid::new_v4()), "namespace": "probe-ns",
                           "workload": "probe", "reported_at": "2026-09-15T11:00:00Z", "steps": 1}),
                )
            },
            control: None,
        },
        // ---- gateways' usage records: naming B's tenant attributes nothing; aliases are per organization
        Case {
            method: "POST",
            route: "/api/v1/usage/records",
            who: Agents,
            denied: Api,
            expect: Clean(200),
            build: |t| {
                with_json(
                    "/api/v1/usage/records",
                    json!({"record_id": format!("probe-{}", Uuid::new_v4()), "endpoint": "probe", "model": "m",
                           "tenant": t.tenant.to_string(), "started_at": "2026-09-15T11:00:00Z",
                           "input_tokens": 1, "output_tokens": 1}),
                )
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/api/v1/endpoints/{endpoint}/aliases",
            who: Admins,
            denied: Api,
            expect: Clean(200),
            build: |t| get(format!("/api/v1/endpoints/{}-llm/aliases", t.slug.trim_start_matches("org-"))),
            control: control(AdminToken, 200, true),
        },
        Case {
            method: "PUT",
            route: "/api/v1/endpoints/{endpoint}/aliases",
            who: Admins,
            denied: Api,
            expect: Status(404),
            build: |t| {
                with_json(
                    format!("/api/v1/endpoints/{}-llm/aliases", t.slug.trim_start_matches("org-")),
                    json!({"aliases": [{"kind": "team", "alias": "probe", "tenant": t.tenant.to_string()}]}),
                )
            },
            control: None,
        },
        // ---- ingest: A's agent claiming B's cluster is refused and writes nothing
        Case {
            method: "POST",
            route: "/api/v1/ingest/batches",
            who: Agents,
            denied: Api,
            expect: Status(403),
            build: |t| with_json("/api/v1/ingest/batches", batch(t.cluster_name.clone(), Vec::new())),
            control: control(AgentToken, 200, false),
        },
        // ---- portal forms
        Case {
            method: "POST",
            route: "/admin/tokens",
            who: Admins,
            denied: Form,
            expect: Status(404),
            build: |t| with_form("/admin/tokens", format!("name=probe&scope=export&departments={}", t.departments[0])),
            control: None,
        },
        Case {
            method: "POST",
            route: "/admin/tokens/{id}/revoke",
            who: Admins,
            denied: Form,
            expect: Status(404),
            build: |t| with_form(format!("/admin/tokens/{}/revoke", t.form_token?), ""),
            control: control(AdminSession, 303, false),
        },
        // ---- portal pages: what a person of A sees never shows B (or, to a manager, another department)
        Case {
            method: "GET",
            route: "/",
            who: Anyone,
            denied: Page,
            expect: Clean(200),
            build: |_| page("/"),
            control: None,
        },
        Case {
            method: "GET",
            route: "/login",
            who: Anyone,
            denied: Page,
            expect: Clean(200),
            build: |_| page("/login"),
            control: None,
        },
        Case {
            method: "GET",
            route: "/admin",
            who: Sessions(&[AdminSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/admin"),
            control: control(AdminSession, 200, true),
        },
        Case {
            method: "GET",
            route: "/finance",
            who: Sessions(&[AdminSession, FinanceSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/finance"),
            control: control(FinanceSession, 200, false),
        },
        Case {
            method: "GET",
            route: "/departments",
            who: Sessions(&[AdminSession, FinanceSession, ManagerSession, ViewerSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/departments"),
            control: control(AdminSession, 200, true),
        },
        Case {
            method: "GET",
            route: "/api/v1/periods/{period}/findings",
            who: OrgReaders,
            denied: Api,
            expect: Clean(200),
            build: |_| get(format!("/api/v1/periods/{CLOSED}/findings")),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "GET",
            route: "/tenants/{id}",
            who: Sessions(&[AdminSession, FinanceSession, ManagerSession, ViewerSession]),
            denied: Page,
            expect: Clean(404),
            build: |t| page(format!("/tenants/{}?period={CLOSED}", t.tenant)),
            control: control(AdminSession, 200, true),
        },
        Case {
            method: "GET",
            route: "/disputes",
            who: Sessions(&[AdminSession, FinanceSession, ManagerSession, ViewerSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/disputes"),
            // The list shows numbers, months and amounts, none of the markers (ids, names).
            control: control(AdminSession, 200, false),
        },
        Case {
            method: "GET",
            route: "/disputes/{id}",
            who: Sessions(&[AdminSession, FinanceSession, ManagerSession, ViewerSession]),
            denied: Page,
            expect: Clean(404),
            build: |t| page(format!("/disputes/{}", t.dispute_open)),
            control: control(AdminSession, 200, true),
        },
        Case {
            method: "GET",
            route: "/close/{period}",
            who: Sessions(&[AdminSession, FinanceSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page(format!("/close/{CLOSED}")),
            control: control(FinanceSession, 200, false),
        },
        Case {
            method: "GET",
            route: "/exports",
            who: Sessions(&[AdminSession, FinanceSession, ManagerSession, ViewerSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/exports"),
            control: None,
        },
        // ---- the organization's settings (a singleton: A's own, never B's) and the first admin's setup link
        Case {
            method: "GET",
            route: "/api/v1/organization/settings",
            who: Readers,
            denied: Api,
            expect: Clean(200),
            build: |t| org_level(t).and_then(|_| get("/api/v1/organization/settings")),
            control: control(AdminToken, 200, false),
        },
        Case {
            method: "PUT",
            route: "/api/v1/organization/settings",
            who: Admins,
            denied: Api,
            expect: Status(422),
            build: |t| {
                org_level(t).and_then(|_| {
                    with_json(
                        "/api/v1/organization/settings",
                        json!({"display_name": "probe", "default_currency": "EUR", "retention_months": 5}),
                    )
                })
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/organization/settings",
            who: Admins,
            denied: Form,
            expect: Status(422),
            build: |_| {
                with_form("/ui/organization/settings", "display_name=probe&default_currency=EUR&retention_months=5")
            },
            control: None,
        },
        Case {
            method: "GET",
            route: "/admin/notifications",
            who: Sessions(&[AdminSession, FinanceSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/admin/notifications"),
            control: control(AdminSession, 200, false),
        },
        Case {
            method: "GET",
            route: "/admin/organization",
            who: Sessions(&[AdminSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/admin/organization"),
            control: control(AdminSession, 200, false),
        },
        // A setup link naming B with a guessed secret signs nobody in to B: 404, whoever asks.
        Case {
            method: "GET",
            route: "/setup/{token}",
            who: Anyone,
            denied: Api,
            expect: Clean(404),
            build: |t| org_level(t).and_then(|t| get(format!("/setup/gls_{}_{}", t.org.simple(), "ab".repeat(32)))),
            control: None,
        },
        Case {
            method: "GET",
            route: "/admin/identity",
            who: Sessions(&[AdminSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/admin/identity"),
            control: control(AdminSession, 200, false),
        },
        Case {
            method: "GET",
            route: "/admin/policies",
            who: Sessions(&[AdminSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/admin/policies"),
            control: control(AdminSession, 200, true),
        },
        Case {
            method: "GET",
            route: "/admin/inventory",
            who: Sessions(&[AdminSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/admin/inventory"),
            control: control(AdminSession, 200, true),
        },
        Case {
            method: "GET",
            route: "/admin/audit",
            who: Sessions(&[AdminSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page("/admin/audit"),
            control: control(AdminSession, 200, false),
        },
        Case {
            method: "GET",
            route: "/admin/telemetry",
            who: Sessions(&[AdminSession]),
            denied: Page,
            expect: Clean(200),
            build: |_| page(format!("/admin/telemetry?period={CLOSED}")),
            control: control(AdminSession, 200, false),
        },
        // ---- portal forms that act through the REST API as the signed-in person
        Case {
            method: "POST",
            route: "/ui/disputes",
            who: Participants,
            denied: Form,
            expect: Status(404),
            build: |t| with_form("/ui/disputes", format!("period={CLOSED}&line={}&reason=probe", t.line)),
            control: control(AdminToken, 409, false),
        },
        Case {
            method: "POST",
            route: "/ui/disputes/{id}/{action}",
            who: Participants,
            denied: Form,
            expect: Status(404),
            build: |t| with_form(format!("/ui/disputes/{}/comment", t.dispute_open), "body=probe"),
            // By now the API cases' controls have accepted A's open dispute: comments are closed (found, 409).
            control: control(AdminToken, 409, false),
        },
        Case {
            method: "POST",
            route: "/ui/periods/{period}/close",
            who: AdminOrFinance,
            denied: Form,
            expect: Status(409),
            build: |t| {
                with_form(format!("/ui/periods/{}/close", t.bundle_period.filter(|_| t.kind == Kind::OtherOrg)?), "")
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/clusters",
            who: Admins,
            denied: Form,
            expect: Status(422),
            build: |t| {
                with_form("/ui/clusters", format!("name={}%20probe", t.cluster_name.clone().unwrap_or_default()))
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/identity/provider",
            who: Admins,
            denied: Form,
            expect: Status(422),
            build: |_| with_form("/ui/identity/provider", "issuer=not-a-url&client_id=x&client_secret=y"),
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/identity/role-mappings",
            who: Admins,
            denied: Form,
            expect: Status(422),
            build: |_| with_form("/ui/identity/role-mappings", "mappings=probe%20%3D%20no-such-role"),
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/policies/{version}/approve",
            who: AdminOrFinance,
            denied: Form,
            expect: Status(404),
            build: |t| with_form(format!("/ui/policies/{}/approve", t.policy_version?), ""),
            control: control(AdminToken, 409, false),
        },
        Case {
            method: "POST",
            route: "/ui/policies/{version}",
            who: AdminOrFinance,
            denied: Form,
            expect: Status(404),
            build: |t| {
                with_form(
                    format!("/ui/policies/{}", t.policy_version?),
                    format!("effective_from=2026-12&document={}", valid_policy()["policy"]),
                )
            },
            // A's own version is approved: not edited in place.
            control: control(AdminToken, 409, false),
        },
        // Writes in the caller's own organization only: there is no B object to name, so bad input is refused.
        Case {
            method: "POST",
            route: "/ui/policies",
            who: AdminOrFinance,
            denied: Form,
            expect: Status(422),
            build: |_| with_form("/ui/policies", "effective_from=2026-12&document=%7B%7D"),
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/departments",
            who: Admins,
            denied: Form,
            expect: Status(422),
            build: |_| with_form("/ui/departments", "name="),
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/tenants",
            who: Admins,
            denied: Form,
            expect: Status(404),
            build: |t| with_form("/ui/tenants", format!("name=probe&department={}", t.departments[0])),
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/inventory/{what}",
            who: AdminOrFinance,
            denied: Form,
            expect: Status(404),
            build: |t| {
                with_form(
                    "/ui/inventory/timeslicing",
                    format!("cluster={}&name=probe&replicas=2&valid_from=2026-01-01", t.cluster_name.clone()?),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/tenancy/rules",
            who: Admins,
            denied: Form,
            expect: Status(404),
            build: |t| {
                with_form(
                    "/ui/tenancy/rules",
                    format!("match=prefix&pattern=probe-&tenant={}&valid_from=2026-01-01&reason=probe", t.tenant),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/tenancy/tenant",
            who: Admins,
            denied: Form,
            expect: Status(404),
            build: |t| {
                org_level(t).and_then(|t| {
                    with_form("/ui/tenancy/tenant", format!("tenant={}&name=probe-renamed&reason=probe", t.tenant))
                })
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/tenancy/department",
            who: Admins,
            denied: Form,
            expect: Status(404),
            build: |t| {
                org_level(t).and_then(|t| {
                    with_form(
                        "/ui/tenancy/department",
                        format!("department={}&gl_account=probe&cost_center=&reason=probe", t.departments[0]),
                    )
                })
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/tenancy/reassign",
            who: Admins,
            denied: Form,
            expect: Status(404),
            build: |t| {
                with_form(
                    "/ui/tenancy/reassign",
                    format!(
                        "cluster={}&namespace=probe&tenant={}&valid_from=2026-01-01T00%3A00&reason=probe",
                        t.cluster_name.clone()?,
                        t.tenant
                    ),
                )
            },
            control: None,
        },
        Case {
            method: "POST",
            route: "/ui/quotas",
            who: AdminOrFinance,
            denied: Form,
            expect: Status(404),
            build: |t| {
                with_form(
                    "/ui/quotas",
                    format!("holder_kind=tenant&holder={}&gpu_class={CLASS}&gpus=1&valid_from=2026-08-01", t.tenant),
                )
            },
            control: None,
        },
    ]
}

// ---------------------------------------------------------------- the world

struct Disputes {
    research_open: (Uuid, i32),
    research_accepted: Uuid,
    platform_open: (Uuid, i32),
    platform_accepted: Uuid,
}

/// One organization as seeded.
struct Org {
    id: OrgId,
    slug: String,
    prefix: String,
    research: Uuid,
    platform: Uuid,
    /// Tenants: alpha (Research), plat (Platform).
    alpha: Uuid,
    plat: Uuid,
    cluster_name: String,
    admin: String,
    export: String,
    export_platform: String,
    agent: String,
    join: String,
    spare_tokens: [Uuid; 2],
    disputes: Disputes,
    /// The guaranteed lines of the closed month: alpha's (Research), plat's (Platform).
    guaranteed_lines: [String; 2],
    /// Namespace and pod UIDs of each tenant.
    alpha_uids: Vec<Uuid>,
    plat_uids: Vec<Uuid>,
}

struct Session {
    cookie: String,
    csrf: String,
}

struct Env {
    app: axum::Router,
    su: sqlx::PgPool,
    a: Org,
    b: Org,
    sessions: BTreeMap<Cred, Session>,
    b_session_cookie: String,
    _test_db: gpuledger_e2e::TestDatabase,
}

struct Answer {
    status: u16,
    /// The `Location` header, if any.
    location: String,
    body: String,
}

impl Answer {
    fn text(&self) -> String {
        format!("{}\n{}", self.location, self.body)
    }

    fn short(&self) -> String {
        let b: String = self.body.chars().take(400).collect();
        if self.location.is_empty() { b } else { format!("(Location: {}) {b}", self.location) }
    }
}

async fn send(env: &Env, cred: Cred, method: &str, r: &Req) -> Answer {
    let mut b = Request::builder().method(method).uri(&r.uri);
    let token = match cred {
        Cred::AdminToken => Some(&env.a.admin),
        Cred::ExportPlatform => Some(&env.a.export_platform),
        Cred::AgentToken => Some(&env.a.agent),
        Cred::JoinToken => Some(&env.a.join),
        _ => None,
    };
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if cred == Cred::ExportToken {
        use base64::Engine;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("powerbi:{}", env.a.export));
        b = b.header(header::AUTHORIZATION, format!("Basic {basic}"));
    }
    if let Some(s) = env.sessions.get(&cred) {
        b = b.header(header::COOKIE, format!("gl_session={}", s.cookie));
        if method != "GET" {
            b = b.header("x-csrf-token", &s.csrf);
        }
    }
    if let Some(raw) = &r.raw_cookie {
        b = b.header(header::COOKIE, format!("gl_session={raw}")).header("x-csrf-token", session::csrf_for(raw));
    }
    for (k, v) in &r.headers {
        b = b.header(*k, v);
    }
    let body = match &r.payload {
        Payload::None => Body::empty(),
        Payload::Json(v) => {
            b = b.header(header::CONTENT_TYPE, "application/json");
            Body::from(serde_json::to_vec(v).unwrap())
        }
        Payload::Form(f) => {
            b = b.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            Body::from(f.clone())
        }
    };
    let response = env.app.clone().oneshot(b.body(body).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let location =
        response.headers().get(header::LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let bytes = to_bytes(response.into_body(), 64 << 20).await.unwrap();
    Answer { status, location, body: String::from_utf8_lossy(&bytes).into_owned() }
}

/// A call with a token, for seeding: the status and the JSON answer.
async fn api(app: &axum::Router, token: &str, method: &str, uri: &str, body: Option<Value>) -> (u16, Value) {
    let r = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(serde_json::to_vec(&b).unwrap())))
        .unwrap();
    let response = app.clone().oneshot(r).await.unwrap();
    let status = response.status().as_u16();
    let bytes = to_bytes(response.into_body(), 64 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn ok(app: &axum::Router, token: &str, method: &str, uri: &str, body: Option<Value>, want: u16) -> Value {
    let (status, v) = api(app, token, method, uri, body).await;
    assert_eq!(status, want, "seeding {method} {uri}: {v}");
    v
}

fn batch(cluster: Option<String>, facts: Vec<Fact>) -> Value {
    let b = Batch {
        wire_version: WIRE_VERSION,
        agent: AgentInfo { version: "test".into(), mode: "cluster".into(), node: None, spool: None },
        cluster,
        facts,
    };
    serde_json::to_value(&b).unwrap()
}

fn namespace(uid: Uuid, name: &str, tenant: &str) -> Fact {
    Fact {
        event_id: event_id("namespace", &[&uid.to_string(), "1"]),
        observed_at: datetime!(2026-08-01 00:00 UTC),
        body: FactBody::NamespaceObserved(NamespaceFact {
            namespace_uid: uid,
            name: name.into(),
            created_at: datetime!(2026-08-01 00:00 UTC),
            deleted_at: None,
            labels: AttributionLabels { tenant: Some(tenant.into()), ..Default::default() },
            labels_since: datetime!(2026-08-01 00:00 UTC),
        }),
    }
}

/// A pod holding `units` GPUs from `from` to `to`; returns its UID and facts.
fn pod(ns: Uuid, ns_name: &str, units: u32, from: OffsetDateTime, to: OffsetDateTime) -> (Uuid, Vec<Fact>) {
    let pod = Uuid::new_v4();
    let allocation_id = format!("{pod}/main/nvidia.com/gpu");
    let facts = vec![
        Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at: from,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: Holder::Pod,
                holder_uid: pod,
                holder_name: "trainer".into(),
                namespace: ns_name.into(),
                namespace_uid: Some(ns),
                container: Some("main".into()),
                node: Some("node-1".into()),
                resource: "nvidia.com/gpu".into(),
                units,
                mode: SharingMode::Exclusive,
                gpu_model: Some(H100.into()),
                device_ids: vec![],
                started_at: from,
                labels: AttributionLabels::default(),
            }),
        },
        Fact {
            event_id: event_id("alloc-end", &[&allocation_id]),
            observed_at: to,
            body: FactBody::AllocationEnded(AllocationEnd { allocation_id, ended_at: to, reason: EndReason::Finished }),
        },
    ];
    (pod, facts)
}

/// Organization `p` ("a" or "b"): Research (tenant `p-alpha`) and Platform (tenant `p-plat`), a cluster `p-gpu`
/// with August and September usage above quota, an approved policy from August, the months in `closes` closed,
/// and in each department an open dispute and an accepted one with a credit pending approval.
async fn seed_org(app: &axum::Router, db: &Database, su: &sqlx::PgPool, p: &str, closes: &[&str]) -> Org {
    let slug = format!("org-{p}");
    let id = db
        .cross_org_directory()
        .create_org(OrgId::from_uuid(Uuid::new_v4()), &slug, &format!("Org {}", p.to_uppercase()))
        .await
        .unwrap();
    let o = id.as_uuid();
    let (research, platform, alpha, plat) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let n = |s: &str| format!("{p}-{s}");
    sqlx::query(
        "INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, 'Research'), ($1, $3, 'Platform')",
    )
    .bind(o)
    .bind(research)
    .bind(platform)
    .execute(su)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at)
         VALUES ($1, $2, $3, $4, '2025-01-01'), ($1, $5, $6, $7, '2025-01-01')",
    )
    .bind(o)
    .bind(alpha)
    .bind(research)
    .bind(n("alpha"))
    .bind(plat)
    .bind(platform)
    .bind(n("plat"))
    .execute(su)
    .await
    .unwrap();
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, $2)")
        .bind(o)
        .bind(CLASS)
        .execute(su)
        .await
        .unwrap();
    sqlx::query("INSERT INTO gpu_models (org_id, model, valid_from, gpu_class) VALUES ($1, $2, '2025-01-01', $3)")
        .bind(o)
        .bind(H100)
        .bind(CLASS)
        .execute(su)
        .await
        .unwrap();

    let cluster_name = n("gpu");
    let mut tx = db.begin_org(id).await.unwrap();
    let (cluster, _) = auth::ensure_cluster(&mut tx, &cluster_name).await.unwrap();
    let mut token =
        async |scope: Scope, name: &str| auth::create_token(&mut tx, &scope, &n(name), "seed", None).await.unwrap();
    let (_, admin) = token(Scope::Admin, "admin-token").await;
    let (_, export) = token(Scope::export(), "export-token").await;
    let platform_only = Scope::Export { departments: vec![DepartmentId::from_uuid(platform)] };
    let (_, export_platform) = token(platform_only, "export-platform-token").await;
    let (_, agent) = token(Scope::Agent { cluster }, "agent-token").await;
    let (_, join) = token(Scope::Join { cluster }, "join-token").await;
    let (spare1, _) = token(Scope::export(), "spare-token-1").await;
    let (spare2, _) = token(Scope::export(), "spare-token-2").await;
    tx.commit().await.unwrap();

    let policy = json!({"effective_from": "2026-08", "note": format!("{p} policy note"), "policy": {
        "currency": "USD", "classes": [{"gpu_class": CLASS, "guaranteed": "2.00", "borrowed": "3.00"}]
    }});
    ok(app, &admin, "POST", "/api/v1/policies", Some(policy), 201).await;
    ok(app, &admin, "POST", "/api/v1/policies/1/approve", Some(json!({"reason": "seed"})), 200).await;
    for tenant in [n("alpha"), n("plat")] {
        let quota = json!({"tenant": tenant, "gpu_class": CLASS, "gpus": "1", "valid_from": "2026-08-01T00:00:00Z"});
        ok(app, &admin, "POST", "/api/v1/quotas", Some(quota), 201).await;
    }

    // Usage: each tenant holds 2 GPUs for 10 hours in August and in September (1 above its quota).
    let (ns_alpha, ns_plat) = (Uuid::new_v4(), Uuid::new_v4());
    let mut facts =
        vec![namespace(ns_alpha, &n("alpha-ns"), &n("alpha")), namespace(ns_plat, &n("plat-ns"), &n("plat"))];
    let (mut alpha_uids, mut plat_uids) = (vec![ns_alpha], vec![ns_plat]);
    for (ns, name, uids, day) in
        [(ns_alpha, n("alpha-ns"), &mut alpha_uids, 10), (ns_plat, n("plat-ns"), &mut plat_uids, 20)]
    {
        for month in [time::Month::August, time::Month::September] {
            let from = time::Date::from_calendar_date(2026, month, day).unwrap().midnight().assume_utc();
            let (uid, f) = pod(ns, &name, 2, from, from + time::Duration::hours(10));
            uids.push(uid);
            facts.extend(f);
        }
    }
    // Each tenant's requests to a shared model endpoint in September (analytics: inference efficiency).
    for (i, tenant) in [n("alpha"), n("plat")].into_iter().enumerate() {
        let start = datetime!(2026-09-15 10:00 UTC);
        let end = start + time::Duration::hours(1);
        facts.push(Fact {
            event_id: event_id("service-usage", &[&n("llm"), &tenant, "m", "2026-09-15T10:00:00Z"]),
            observed_at: end,
            body: FactBody::ServiceUsage(ServiceUsageFact {
                endpoint: n("llm"),
                model: "m".into(),
                tenant,
                window_start: start,
                window_end: end,
                requests: 10 + i as u64,
                input_tokens: 1000,
                output_tokens: 2000,
                ttft_ms_sum: Some(2500),
                ttft_count: Some(10),
            }),
        });
    }
    ok(app, &agent, "POST", "/api/v1/ingest/batches", Some(batch(Some(cluster_name.clone()), facts)), 200).await;
    // A gateway's usage record and the endpoint's alias that attributes it (a team → alpha).
    let aliases = json!({"aliases": [{"kind": "team", "alias": n("alpha-team"), "tenant": n("alpha")}]});
    ok(app, &admin, "PUT", &format!("/api/v1/endpoints/{}/aliases", n("llm")), Some(aliases), 200).await;
    let record = json!({"record_id": n("req-1"), "endpoint": n("llm"), "model": "m", "team": n("alpha-team"),
                        "started_at": "2026-09-15T11:00:00Z", "input_tokens": 5, "output_tokens": 7});
    let stored = ok(app, &agent, "POST", "/api/v1/usage/records", Some(record), 200).await;
    assert_eq!(stored["unknown"].as_array().map(Vec::len), Some(0), "{stored}");
    for period in closes {
        ok(app, &admin, "POST", &format!("/api/v1/periods/{period}/close"), None, 200).await;
    }

    let ledger = ok(app, &admin, "GET", &format!("/api/v1/ledger?period={CLOSED}"), None, 200).await;
    let line_of = |term: &str, tenant: &str| -> String {
        let lines = ledger["lines"].as_array().unwrap();
        let l = lines.iter().find(|l| l["term"] == term && l["tenant"] == tenant);
        l.unwrap_or_else(|| panic!("no {term} line of {tenant} in {ledger:#}"))["line_id"].as_str().unwrap().to_string()
    };
    let guaranteed_lines = [line_of("guaranteed", &n("alpha")), line_of("guaranteed", &n("plat"))];
    let open_dispute = async |term: &str, tenant: &str| {
        let line = line_of(term, tenant);
        let body = json!({"period": CLOSED, "line_ids": [line], "reason": format!("{p}-reason {term} {tenant}")});
        let d = ok(app, &admin, "POST", "/api/v1/disputes", Some(body), 201).await;
        (d["id"].as_str().unwrap().parse::<Uuid>().unwrap(), i32::try_from(d["number"].as_i64().unwrap()).unwrap())
    };
    let research_open = open_dispute("guaranteed", &n("alpha")).await;
    let (research_accepted, _) = open_dispute("borrowed", &n("alpha")).await;
    let platform_open = open_dispute("guaranteed", &n("plat")).await;
    let (platform_accepted, _) = open_dispute("borrowed", &n("plat")).await;
    for d in [research_accepted, platform_accepted] {
        let accept = json!({"reason": format!("{p}-reason accepted"), "credit_amount": "1.00"});
        ok(app, &admin, "POST", &format!("/api/v1/disputes/{d}/accept"), Some(accept), 200).await;
    }

    // Identity: a group mapping each.
    sqlx::query("INSERT INTO role_mappings (org_id, mapping_id, group_name, role) VALUES ($1, $2, $3, 'admin')")
        .bind(o)
        .bind(Uuid::new_v4())
        .bind(format!("org-{p}-admins"))
        .execute(su)
        .await
        .unwrap();

    Org {
        id,
        slug,
        prefix: p.to_string(),
        research,
        platform,
        alpha,
        plat,
        cluster_name,
        admin,
        export,
        export_platform,
        agent,
        join,
        spare_tokens: [spare1, spare2],
        disputes: Disputes { research_open, research_accepted, platform_open, platform_accepted },
        guaranteed_lines,
        alpha_uids,
        plat_uids,
    }
}

/// A demo session of A in `role`, through the real sign-in endpoint.
async fn demo_session(app: &axum::Router, slug: &str, role: Role) -> Session {
    let r = Request::post("/auth/demo")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ORIGIN, "http://localhost")
        .body(Body::from(format!("org={slug}&role={}", role.as_str())))
        .unwrap();
    let response = app.clone().oneshot(r).await.unwrap();
    assert_eq!(response.status().as_u16(), 303, "demo login as {role:?}");
    let set = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("gl_session="))
        .expect("a gl_session cookie")
        .to_string();
    let cookie = set.split(';').next().unwrap().to_string();
    let me =
        Request::get("/api/v1/me").header(header::COOKIE, format!("gl_session={cookie}")).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(me).await.unwrap();
    let v: Value = serde_json::from_slice(&to_bytes(response.into_body(), 1 << 20).await.unwrap()).unwrap();
    let csrf = v["csrf_token"].as_str().expect("a session has a CSRF token").to_string();
    Session { cookie, csrf }
}

async fn env() -> Env {
    let (test_db, db) = common::migrated().await;
    let su = common::admin_pool(&test_db).await;
    // The suite sends a few hundred requests from one "client": lift the sign-in and token rate limits.
    let auth_state = AuthState {
        limits: RateLimits::new(100_000, Duration::from_secs(60)),
        demo_mode: true,
        ..AuthState::default()
    };
    let app = app::router(AppState::with_auth(db.clone(), None, auth_state), &HttpOptions::default());
    let a = seed_org(&app, &db, &su, "a", &[CLOSED]).await;
    let b = seed_org(&app, &db, &su, "b", &[B_ONLY_CLOSED, CLOSED]).await;

    // B: an identity provider, a draft policy far beyond A's versions, and a live session of a B user.
    sqlx::query(
        "INSERT INTO idp_settings (org_id, issuer, client_id, client_secret, updated_by)
         VALUES ($1, 'https://idp.org-b.invalid', 'org-b-client', 'org-b-secret', 'seed')",
    )
    .bind(b.id.as_uuid())
    .execute(&su)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO cost_policies (org_id, version, effective_from, currency, document, note, created_by)
         VALUES ($1, $2, '2027-01-01', 'USD', '{\"currency\": \"USD\"}', 'org-b secret draft', 'seed')",
    )
    .bind(b.id.as_uuid())
    .bind(B_DRAFT_VERSION)
    .execute(&su)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO webhooks (org_id, webhook_id, url, events, secret, created_by)
         VALUES ($1, $2, 'https://hooks.org-b.invalid/gl', '{period.closed}', 'whsec_org_b_secret_0123456789abcdef', 'seed')",
    )
    .bind(b.id.as_uuid())
    .bind(B_WEBHOOK)
    .execute(&su)
    .await
    .unwrap();
    let mut tx = db.begin_org(b.id).await.unwrap();
    let user = oidc::upsert_user(&mut tx, "b-subject", Some("b-user@org-b.invalid"), "B User").await.unwrap();
    let new = session::NewSession {
        user_id: user,
        roles: vec![Role::Admin],
        departments: Vec::new(),
        id_token_hint: None,
        source: "seed".into(),
    };
    let b_session_cookie = session::create(&mut tx, &session::SessionSettings::default(), &new).await.unwrap();
    tx.commit().await.unwrap();

    // A: the demo accounts, one session per role.
    sqlx::query("UPDATE organizations SET demo_login = true WHERE org_id = $1")
        .bind(a.id.as_uuid())
        .execute(&su)
        .await
        .unwrap();
    let mut sessions = BTreeMap::new();
    for (cred, role) in [
        (Cred::AdminSession, Role::Admin),
        (Cred::FinanceSession, Role::Finance),
        (Cred::ManagerSession, Role::DepartmentManager),
        (Cred::ViewerSession, Role::Viewer),
    ] {
        sessions.insert(cred, demo_session(&app, &a.slug, role).await);
    }
    Env { app, su, a, b, sessions, b_session_cookie, _test_db: test_db }
}

/// Every UUID in `org`'s rows of every tenant table (read by the superuser), as text.
async fn uuids_of(su: &sqlx::PgPool, org: OrgId) -> BTreeSet<String> {
    fn walk(v: &Value, out: &mut BTreeSet<String>) {
        match v {
            Value::String(s) => {
                if let Ok(u) = Uuid::parse_str(s)
                    && !u.is_nil()
                {
                    out.insert(u.to_string());
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    for table in tenant_tables(su).await {
        let rows: Vec<Value> = sqlx::query_scalar(&format!("SELECT to_jsonb(t) FROM {table} t WHERE org_id = $1"))
            .bind(org.as_uuid())
            .fetch_all(su)
            .await
            .unwrap();
        rows.iter().for_each(|r| walk(r, &mut out));
    }
    out
}

async fn tenant_tables(su: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
          WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
            AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id')
          ORDER BY 1",
    )
    .fetch_all(su)
    .await
    .unwrap()
}

/// A checksum of every row of `org` in every tenant table.
async fn checksum(su: &sqlx::PgPool, org: OrgId) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for table in tenant_tables(su).await {
        // The one record an outsider may add to B: that a token naming B was refused (audited for B's admins,
        // carrying nothing of the caller's but its address). Checked on its own below.
        let own = if table == "audit_log" { " AND action <> 'token.refused'" } else { "" };
        let sum: String = sqlx::query_scalar(&format!(
            "SELECT count(*) || ':' || md5(COALESCE(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {table} t
              WHERE org_id = $1{own}"
        ))
        .bind(org.as_uuid())
        .fetch_one(su)
        .await
        .unwrap();
        out.insert(table, sum);
    }
    out
}

/// Strings that are the organization's own: names given at seeding, content hashes of its closed months.
async fn names_of(su: &sqlx::PgPool, org: &Org) -> Vec<String> {
    let p = &org.prefix;
    let mut names: Vec<String> = [
        "alpha",
        "plat",
        "gpu",
        "admin-token",
        "export-token",
        "export-platform-token",
        "agent-token",
        "join-token",
        "spare-token-1",
        "spare-token-2",
        "reason",
    ]
    .iter()
    .map(|s| format!("{p}-{s}"))
    .collect();
    names.extend([format!("{p} policy note"), format!("org-{p}-admins"), org.slug.clone()]);
    let hashes: Vec<String> =
        sqlx::query_scalar("SELECT content_hash FROM periods WHERE org_id = $1 AND content_hash IS NOT NULL")
            .bind(org.id.as_uuid())
            .fetch_all(su)
            .await
            .unwrap();
    names.extend(hashes);
    names
}

/// IDs of a department's quotas and credits (read by the superuser).
async fn department_ids(su: &sqlx::PgPool, org: &Org, department: Uuid) -> Vec<String> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT q.quota_id FROM quotas q LEFT JOIN tenants t ON t.org_id = q.org_id AND t.tenant_id = q.tenant_id
          WHERE q.org_id = $1 AND COALESCE(q.department_id, t.department_id) = $2
         UNION ALL
         SELECT adjustment_id FROM adjustments WHERE org_id = $1 AND department_id = $2",
    )
    .bind(org.id.as_uuid())
    .bind(department)
    .fetch_all(su)
    .await
    .unwrap();
    ids.iter().map(Uuid::to_string).collect()
}

async fn targets(env: &Env) -> (Target, Target, Target, Target) {
    let (a, b) = (&env.a, &env.b);
    let org_target =
        |org: &Org, name: &str, kind: Kind, policy: i32, token: Uuid, form_token: Uuid, bundle: &'static str| Target {
            name: name.to_string(),
            kind,
            org: org.id.as_uuid(),
            slug: org.slug.clone(),
            departments: vec![org.research, org.platform],
            tenant: org.alpha,
            line: org.guaranteed_lines[0].clone(),
            dispute_open: org.disputes.research_open.0,
            dispute_open_number: org.disputes.research_open.1,
            dispute_accepted: org.disputes.research_accepted,
            policy_version: Some(policy),
            token: Some(token),
            form_token: Some(form_token),
            bundle_period: Some(bundle),
            cluster_name: Some(org.cluster_name.clone()),
            issuer: Some(format!("https://idp.{}.invalid", org.slug)),
            markers: Vec::new(),
        };
    let mut other = org_target(
        b,
        "organization B",
        Kind::OtherOrg,
        B_DRAFT_VERSION,
        b.spare_tokens[0],
        b.spare_tokens[1],
        B_ONLY_CLOSED,
    );
    let mut markers: Vec<String> = uuids_of(&env.su, b.id).await.into_iter().collect();
    markers.extend(names_of(&env.su, b).await);
    markers.extend(
        ["Org B", "idp.org-b.invalid", "org-b-client", "b-user@org-b.invalid", "org-b secret draft"].map(String::from),
    );
    other.markers = markers;

    let mut own = org_target(a, "A itself", Kind::Own, 1, a.spare_tokens[0], a.spare_tokens[1], CLOSED);
    let mut markers: Vec<String> = uuids_of(&env.su, a.id).await.into_iter().collect();
    markers.extend(names_of(&env.su, a).await);
    own.markers = markers;

    let department = |name: &str, dept: Uuid, tenant: Uuid, line: &String, open: (Uuid, i32), accepted: Uuid| Target {
        name: format!("A's {name} department"),
        kind: Kind::OtherDepartment,
        org: a.id.as_uuid(),
        slug: a.slug.clone(),
        departments: vec![dept],
        tenant,
        line: line.clone(),
        dispute_open: open.0,
        dispute_open_number: open.1,
        dispute_accepted: accepted,
        policy_version: None,
        token: None,
        form_token: None,
        bundle_period: None,
        cluster_name: None,
        issuer: None,
        markers: Vec::new(),
    };
    let d = &a.disputes;
    let lines = &a.guaranteed_lines;
    let mut platform = department("Platform", a.platform, a.plat, &lines[1], d.platform_open, d.platform_accepted);
    let mut research = department("Research", a.research, a.alpha, &lines[0], d.research_open, d.research_accepted);
    for (t, dept, uids, tenant, disputes, label) in [
        (&mut platform, a.platform, &a.plat_uids, a.plat, [d.platform_open.0, d.platform_accepted], "plat"),
        (&mut research, a.research, &a.alpha_uids, a.alpha, [d.research_open.0, d.research_accepted], "alpha"),
    ] {
        let mut m: Vec<String> = vec![dept.to_string(), tenant.to_string(), format!("a-{label}")];
        m.extend(uids.iter().map(Uuid::to_string));
        m.extend(disputes.iter().map(Uuid::to_string));
        m.extend(department_ids(&env.su, a, dept).await);
        m.push(if label == "plat" { "Platform".into() } else { "Research".into() });
        t.markers = m;
    }
    (other, platform, research, own)
}

fn found_markers<'m>(answer: &Answer, markers: &'m [String]) -> Vec<&'m str> {
    let text = answer.text();
    markers.iter().filter(|m| text.contains(m.as_str())).map(String::as_str).collect()
}

// ---------------------------------------------------------------- the tests

#[tokio::test]
async fn every_route_refuses_another_organizations_and_another_departments_objects() {
    let started = std::time::Instant::now();
    let env = env().await;
    let seeded = started.elapsed();
    let (other_org, platform, research, own) = targets(&env).await;
    let before = checksum(&env.su, env.b.id).await;

    // B's objects are asked for by every credential of A; another department's by the credentials limited to one.
    let runs: Vec<(&Target, Vec<Cred>)> = vec![
        (&other_org, EVERY.to_vec()),
        (&platform, vec![Cred::ManagerSession]),
        (&research, vec![Cred::ExportPlatform]),
    ];
    let mut cases = cases();
    // Join tokens are single-use: their case goes last.
    cases.sort_by_key(|c| matches!(c.who, Who::Joiners));

    let mut failures: Vec<String> = Vec::new();
    let mut requests = 0;
    let mut attempted: BTreeSet<(String, String)> = BTreeSet::new();
    for case in &cases {
        for (target, creds) in &runs {
            let Some(r) = (case.build)(target) else { continue };
            attempted.insert((case.method.to_string(), case.route.to_string()));
            let creds: Vec<Cred> = if r.raw_cookie.is_some() { vec![Cred::Anonymous] } else { creds.clone() };
            for cred in creds {
                let answer = send(&env, cred, case.method, &r).await;
                requests += 1;
                let what = format!("{} {} as {cred:?} asking for {}", case.method, r.uri, target.name);
                // Whatever the status, a list or page answer shows nothing of the target.
                if let Expect::Clean(_) = case.expect {
                    let leaked = found_markers(&answer, &target.markers);
                    if !leaked.is_empty() {
                        failures.push(format!("{what}: the answer shows {leaked:?}: {}", answer.short()));
                    }
                }
                if case.who.allows(cred) || r.raw_cookie.is_some() {
                    let (Expect::Status(want) | Expect::Clean(want)) = case.expect;
                    if answer.status != want {
                        failures.push(format!("{what}: expected {want}, got {}: {}", answer.status, answer.short()));
                    }
                } else if !case.denied.accepts(cred, answer.status) {
                    failures.push(format!(
                        "{what}: not allowed, expected {}, got {}: {}",
                        case.denied.describe(cred),
                        answer.status,
                        answer.short()
                    ));
                }
            }
        }
    }

    // The controls: the same requests for A's own objects find them (so each 404 above is about whose object it
    // is, not a broken route).
    let mut controls = 0;
    for case in &cases {
        let Some(c) = case.control else { continue };
        let r = (case.build)(&own)
            .unwrap_or_else(|| panic!("{} {}: a control needs a request for A", case.method, case.route));
        let answer = send(&env, c.cred, case.method, &r).await;
        controls += 1;
        let what = format!("control: {} {} as {:?} asking for A's own object", case.method, r.uri, c.cred);
        if answer.status != c.status {
            failures.push(format!("{what}: expected {}, got {}: {}", c.status, answer.status, answer.short()));
        } else if c.marker && found_markers(&answer, &own.markers).is_empty() {
            failures.push(format!("{what}: the answer shows none of A's own data: {}", answer.short()));
        }
    }

    // Forged credentials: the organization part of a token or cookie is bound to its secret.
    let a_secret = env.a.admin.rsplit('_').next().unwrap();
    let b_secret = env.b.admin.rsplit('_').next().unwrap();
    let a_cookie_secret = env.sessions[&Cred::AdminSession].cookie.split('.').nth(1).unwrap().to_string();
    let forged_tokens = [
        format!("glt_{}_{a_secret}", env.b.id.as_uuid().simple()),
        format!("glt_{}_{b_secret}", env.a.id.as_uuid().simple()),
    ];
    let forged_cookies = [format!("{}.{a_cookie_secret}", env.b.id.as_uuid().simple())];
    for token in &forged_tokens {
        let (status, v) = api(&env.app, token, "GET", "/api/v1/me", None).await;
        requests += 1;
        if status != 401 {
            failures.push(format!("GET /api/v1/me with the forged token {token}: expected 401, got {status}: {v}"));
        }
    }
    for cookie in &forged_cookies {
        let r = Request::get("/api/v1/me")
            .header(header::COOKIE, format!("gl_session={cookie}"))
            .body(Body::empty())
            .unwrap();
        let status = env.app.clone().oneshot(r).await.unwrap().status().as_u16();
        requests += 1;
        if status != 401 {
            failures.push(format!("GET /api/v1/me with the forged cookie {cookie}: expected 401, got {status}"));
        }
    }

    // Nothing of B's changed.
    let after = checksum(&env.su, env.b.id).await;
    let refusals: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT actor, target, details::text FROM audit_log WHERE org_id = $1 AND action = 'token.refused'",
    )
    .bind(env.b.id.as_uuid())
    .fetch_all(&env.su)
    .await
    .unwrap();
    for (actor, target, details) in &refusals {
        if (actor.as_str(), target.as_str(), details.as_str()) != ("anonymous", "", "{}") {
            failures
                .push(format!("a token.refused record in B carries more than the refusal: {actor} {target} {details}"));
        }
    }
    for (table, sum) in &before {
        if after.get(table) != Some(sum) {
            failures.push(format!("B's rows in {table} changed: {sum} → {:?}", after.get(table)));
        }
    }
    // B's own session survived the sign-out attempts and still works (for B).
    let r = Request::get("/api/v1/me")
        .header(header::COOKIE, format!("gl_session={}", env.b_session_cookie))
        .body(Body::empty())
        .unwrap();
    let response = env.app.clone().oneshot(r).await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "B's session must still be live");
    let me: Value = serde_json::from_slice(&to_bytes(response.into_body(), 1 << 20).await.unwrap()).unwrap();
    assert_eq!(me["organization"]["slug"], "org-b", "{me}");
    // … and the checksum would notice a change of B's rows: B's own admin revokes a token.
    ok(&env.app, &env.b.admin, "POST", &format!("/api/v1/tokens/{}/revoke", env.b.spare_tokens[0]), None, 200).await;
    let changed = checksum(&env.su, env.b.id).await;
    assert_ne!(changed["api_tokens"], after["api_tokens"], "the checksum must notice a change of B's rows");

    // Every case ran against at least one target.
    for case in &cases {
        assert!(
            attempted.contains(&(case.method.to_string(), case.route.to_string())),
            "{} {}: the case builds no request for any target",
            case.method,
            case.route
        );
    }
    eprintln!(
        "cross-tenant: {} cases, {requests} requests, {controls} controls; seeding {:.1?}, total {:.1?}",
        cases.len(),
        seeded,
        started.elapsed()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

// ---------------------------------------------------------------- every route has a case

#[test]
fn every_route_has_a_case() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut routes = server_routes(root);
    routes.extend(portal_routes(root));
    // The scan itself works: it finds routes we know exist, with their methods.
    for known in [
        ("GET", "/healthz"),
        ("POST", "/api/v1/disputes/{id}/accept"),
        ("PUT", "/api/v1/policies/{version}"),
        ("GET", "/"),
    ] {
        assert!(
            routes.iter().any(|(m, p, _)| (m.as_str(), p.as_str()) == known),
            "the route scan missed {known:?}; it found {routes:?}"
        );
    }
    let covered: BTreeSet<(String, String)> =
        cases().iter().map(|c| (c.method.to_string(), c.route.to_string())).collect();
    let mut missing = Vec::new();
    for (method, path, file) in &routes {
        if !covered.contains(&(method.clone(), path.clone())) {
            missing.push(format!(
                "{method} {path} (registered in {file}) has no case: add a `Case {{ method: \"{method}\", route: \
                 \"{path}\", … }}` to `cases()` in server/tests/cross_tenant.rs — how to ask it for organization \
                 B's objects (and another department's), who may use it, and what must come back"
            ));
        }
    }
    let registered: BTreeSet<(String, String)> = routes.iter().map(|(m, p, _)| (m.clone(), p.clone())).collect();
    for (method, path) in &covered {
        if !registered.contains(&(method.clone(), path.clone())) {
            missing.push(format!(
                "the case {method} {path} in server/tests/cross_tenant.rs names no registered route: fix or remove it"
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The OpenAPI document is checked against the routes the server registers: every REST operation is documented
/// with its methods, and nothing is documented that no route serves (`/odata` describes itself in `$metadata`;
/// `/api/{*rest}` is the problem+json 404 for unknown paths).
#[test]
fn the_openapi_document_matches_the_registered_routes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let documented: BTreeSet<(String, String)> = gpuledger_server::openapi::document()["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object().unwrap().keys().map(move |m| (m.to_uppercase(), path.clone())).collect::<Vec<_>>()
        })
        .collect();
    let api = |p: &str| p.starts_with("/api/v1/") || ["/healthz", "/readyz", "/metrics"].contains(&p);
    let registered: BTreeSet<(String, String)> =
        server_routes(root).into_iter().filter(|(_, p, _)| api(p)).map(|(m, p, _)| (m, p)).collect();
    assert!(registered.len() >= 50, "the route scan found only {registered:?}");
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&registered).collect();
    assert!(undocumented.is_empty(), "routes missing from server/src/openapi.rs: {undocumented:?}");
    assert!(unserved.is_empty(), "operations in server/src/openapi.rs that no route serves: {unserved:?}");
}
