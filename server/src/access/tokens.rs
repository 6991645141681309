//! Token management for admins: list, create (shown once), revoke (effective at once). The same scope parsing
//! serves the CLI (`gpuledger-server token create`).

use axum::{
    Json, Router,
    extract::{FromRequestParts, State},
    http::{StatusCode, request::Parts},
    routing::{get, post},
};
use gpuledger_api::{
    auth::{CreatedToken, NewToken, Revoked, TokenList},
    input::{Int, Line, TokenScope},
    params::IdPath,
};
use gpuledger_core::{ids::DepartmentId, time_fmt::rfc3339};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::store;
use crate::auth::{Scope, create_token, ensure_cluster, source};
use crate::{
    db::OrgTx,
    describe::{Describe, Inputs, inputs as described},
    error::AppError,
    http::{Administer, Caller, JsonBody, PathParams},
    state::AppState,
};

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<Inputs> {
    vec![
        described("get", "/api/v1/tokens", list),
        described("post", "/api/v1/tokens", create),
        described("post", "/api/v1/tokens/{id}/revoke", revoke),
    ]
}

/// Routes under `/api/v1/tokens`.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/tokens", get(list).post(create)).route("/api/v1/tokens/{id}/revoke", post(revoke))
}

/// Parses `admin`, `export`, `agent:CLUSTER` or `join:CLUSTER` (registering a new cluster name), with
/// department names for a department-scoped export token. Errors name the field.
pub async fn parse_scope(tx: &mut OrgTx, scope: &str, departments: &[String]) -> Result<(Scope, bool), AppError> {
    if !departments.is_empty() && scope != "export" {
        return Err(AppError::refused("departments", "only export tokens can be limited to departments"));
    }
    let mut registered = false;
    let parsed = match scope {
        "admin" => Scope::Admin,
        "export" => {
            let mut ids = Vec::new();
            for name in departments {
                let id = store::department_by_name(tx, name).await?;
                let id = id.ok_or_else(|| AppError::unknown("departments", format!("no department named {name:?}")))?;
                ids.push(DepartmentId::from_uuid(id));
            }
            Scope::Export { departments: ids }
        }
        other => {
            let (kind, cluster_name) = other.split_once(':').unwrap_or((other, ""));
            let cluster_name = cluster_name.trim();
            if !matches!(kind, "agent" | "join") || cluster_name.is_empty() {
                return Err(AppError::invalid(
                    "scope",
                    format!("expected admin, export, agent:CLUSTER or join:CLUSTER, got {other:?}"),
                ));
            }
            let (cluster, created) = ensure_cluster(tx, cluster_name).await?;
            registered = created;
            if kind == "agent" { Scope::Agent { cluster } } else { Scope::Join { cluster } }
        }
    };
    Ok((parsed, registered))
}

/// The client's turn at creating tokens: refused (429) before authentication and the body are read.
struct CreateTurn;

impl FromRequestParts<AppState> for CreateTurn {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        state.auth.limits.check("tokens", &source(&parts.headers))?;
        Ok(Self)
    }
}

impl Describe for CreateTurn {
    fn describe(inputs: &mut Inputs) {
        inputs.errors.insert(429);
    }
}

/// The rate limit comes first (before authentication and the body): the extractors run in this order.
async fn create(
    State(state): State<AppState>,
    _turn: CreateTurn,
    p: Caller<Administer>,
    JsonBody(request): JsonBody<NewToken>,
) -> Result<(StatusCode, Json<CreatedToken>), AppError> {
    let departments: Vec<String> = request.departments.iter().map(ToString::to_string).collect();
    let days = request.expires_in_days.map(Int::get);
    let created = create_for(&state, &p, &request.name, &request.scope, &departments, days).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Creates a token for an admin (API and portal form); the answer holds the token, the only time it is shown.
pub async fn create_for(
    state: &AppState,
    p: &crate::auth::Principal,
    name: &str,
    scope: &str,
    departments: &[String],
    expires_in_days: Option<i64>,
) -> Result<CreatedToken, AppError> {
    // The API's guards, for the portal's form too.
    let name = Line::<200>::new(name).map_err(|reason| AppError::invalid("name", reason))?;
    let scope = TokenScope::parse(scope.trim()).map_err(|reason| AppError::invalid("scope", reason))?;
    for d in departments {
        Line::<100>::new(d).map_err(|reason| AppError::invalid("departments", reason))?;
    }
    let expires_at = match expires_in_days.map(Int::<1, 3650>::new).transpose() {
        Ok(days) => days.map(|d| OffsetDateTime::now_utc() + time::Duration::days(d.get())),
        Err(_) => {
            return Err(AppError::invalid("expires_in_days", "between 1 and 3650 days, or absent for no expiry"));
        }
    };
    let name = name.as_str();
    let mut tx = p.begin(&state.db).await?;
    let (scope, _) = parse_scope(&mut tx, scope.as_str(), departments).await?;
    let (token_id, token) = create_token(&mut tx, &scope, name, &p.actor(), expires_at).await?;
    tx.commit_quiet().await?; // credentials only: no figure changes
    Ok(CreatedToken {
        token_id: token_id.to_string(),
        name: name.to_string(),
        scope: scope.contract(),
        token,
        expires_at: expires_at.map(rfc3339),
    })
}

async fn list(State(state): State<AppState>, p: Caller<Administer>) -> Result<Json<TokenList>, AppError> {
    let mut tx = p.begin(&state.db).await?;
    let tokens = list_tokens(&mut tx).await?;
    tx.commit().await?;
    Ok(Json(TokenList { tokens: tokens.into_iter().map(Into::into).collect() }))
}

pub use super::store::{TokenInfo, list_tokens};

impl From<TokenInfo> for gpuledger_api::auth::TokenInfo {
    fn from(t: TokenInfo) -> Self {
        Self {
            token_id: t.token_id.to_string(),
            name: t.name,
            scope: t.scope.0,
            cluster: t.cluster,
            departments: t.departments,
            created_by: t.created_by,
            created_at: rfc3339(t.created_at),
            expires_at: t.expires_at.map(rfc3339),
            last_used_at: t.last_used_at.map(rfc3339),
            revoked_at: t.revoked_at.map(rfc3339),
        }
    }
}

async fn revoke(
    State(state): State<AppState>,
    p: Caller<Administer>,
    PathParams(path): PathParams<IdPath>,
) -> Result<Json<Revoked>, AppError> {
    let id = path.id.to_string();
    revoke_for(&state, &p, &id).await?;
    Ok(Json(Revoked { token_id: id, revoked: true }))
}

/// Revokes a token (idempotent); 404 when the organization has no such token.
pub async fn revoke_for(state: &AppState, p: &crate::auth::Principal, id: &str) -> Result<(), AppError> {
    let token_id = Uuid::try_parse(id).map_err(|_| AppError::NotFound(format!("token {id}")))?;
    let mut tx = p.begin(&state.db).await?;
    match store::token_revoked_at(&mut tx, token_id).await? {
        None => return Err(AppError::NotFound(format!("token {id}"))),
        Some(Some(_)) => return Ok(()),
        Some(None) => {}
    }
    store::revoke_token(&mut tx, token_id, &p.actor()).await?;
    tx.audit_by(p, "token.revoke", &token_id.to_string(), "", json!({})).await?;
    tx.commit_quiet().await?; // credentials only: no figure changes
    // Kept answers for this token end now on this replica (within `SESSION_RECHECK` on the others).
    crate::auth::revocations::revoked();
    Ok(())
}
