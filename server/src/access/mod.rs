//! Access over HTTP: sign-in (OIDC, the demo's accounts) and sign-out ([`routes`]), API tokens ([`tokens`]), and an
//! agent's join. Who a credential is and what it may do is [`crate::auth`]'s; this is the feature that hands
//! credentials out and takes them back.

use axum::http::HeaderMap;

use crate::{
    auth::{authenticate, redeem_join_token, source},
    error::AppError,
};

pub mod routes;
mod store;
pub mod tokens;

/// What this feature's handlers take, for the API document.
pub(crate) fn inputs() -> Vec<crate::describe::Inputs> {
    let mut out = vec![crate::describe::inputs("post", "/api/v1/agents/join", join)];
    out.extend(routes::inputs());
    out.extend(tokens::inputs());
    out
}

/// `POST /api/v1/agents/join`: a join token in, the cluster credential out.
pub fn router() -> axum::Router<crate::state::AppState> {
    axum::Router::new().route("/api/v1/agents/join", axum::routing::post(join)).merge(routes::router())
}

async fn join(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
    headers: HeaderMap,
) -> Result<axum::Json<gpuledger_api::auth::Joined>, AppError> {
    state.auth.limits.check("join", &source(&headers))?;
    let principal = authenticate(&state.db, &headers).await?;
    let (token, cluster) = redeem_join_token(&state.db, &principal).await?;
    Ok(axum::Json(gpuledger_api::auth::Joined { token, cluster }))
}
