//! Which share a soft-shared allocation pays: `POST /api/v1/inventory/share-basis` (admin or finance). HAMi, Volcano
//! vGPU, Run:ai and Alibaba gpushare declare a compute share, a memory share, or both; the approved inventory says
//! which one is charged (`compute`, `memory`, or the `larger`, the default), per cluster or for the whole
//! organization, dated like every inventory fact. Soft-shared allocations that started since are priced again;
//! closed months keep their lines and get corrections at the next close.

use axum::{Json, extract::State, http::StatusCode};
use gpuledger_api::tenancy::{CreatedShareBasis, ShareBasisBody};
use gpuledger_core::sharing::ShareBasis;
use serde_json::json;
use uuid::Uuid;

use super::store::{add_share_basis, cluster_by_key};
use crate::{
    error::AppError,
    http::{Caller, JsonBody, ManagePolicy},
    state::AppState,
};

pub(super) async fn add_basis(
    State(state): State<AppState>,
    p: Caller<ManagePolicy>,
    JsonBody(body): JsonBody<ShareBasisBody>,
) -> Result<(StatusCode, Json<CreatedShareBasis>), AppError> {
    let valid_from = body.valid_from.at();
    let basis: ShareBasis = body.basis.as_str().parse().map_err(|_| AppError::Internal("share basis names".into()))?;
    let mut tx = p.begin(&state.db).await?;
    let cluster: Option<(Uuid, String)> = match body.cluster.as_deref() {
        Some(key) => Some(cluster_by_key(&mut tx, key).await?),
        None => None,
    };
    add_share_basis(&mut tx, cluster.as_ref().map(|c| c.0), basis, valid_from, &p.actor()).await?;
    let recomputed =
        crate::ingest::recompute_soft_shares(&mut tx, p.org, cluster.as_ref().map(|c| c.0), valid_from).await?;
    let name = cluster.map(|c| c.1);
    tx.audit_by(
        &p,
        "inventory.share_basis",
        &format!("share_basis:{}", name.as_deref().unwrap_or("*")),
        "",
        json!({ "basis": basis.name(), "valid_from": valid_from.unix_timestamp(), "recomputed": recomputed }),
    )
    .await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedShareBasis { cluster: name, basis: basis.name().into(), recomputed_allocations: recomputed }),
    ))
}
