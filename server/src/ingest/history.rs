//! History of what agents report about the cluster: namespace ownership, nodes and devices, each change closing
//! the row in force and opening a new one, whatever order facts arrive in.

use gpuledger_core::{
    ids::{ClusterId, OrgId},
    wire::FlaggedFact,
};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::store::history as store;
use crate::{
    db::{DbError, OrgTx},
    error::AppError,
};

/// Records a namespace and its owner. Ownership is history: a change closes the row in force at that time and
/// opens a new one; facts may arrive in any order.
pub(super) async fn apply_namespace(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &gpuledger_core::wire::NamespaceFact,
    event_id: &str,
    flagged: &mut Vec<FlaggedFact>,
) -> Result<(), AppError> {
    store::upsert_namespace(tx, org, cluster, n).await?;
    // Allocations that arrived before their namespace (watchers race; batches reorder) get its UID now, so the
    // result does not depend on arrival order.
    store::set_namespace_uid_of_allocations(tx, org, cluster, n).await?;
    let tenant: Option<Uuid> = match &n.labels.tenant {
        None => None,
        Some(name) => {
            let id = store::tenant_named(tx, org, name).await?;
            if id.is_none() {
                let reason = format!("namespace {:?} names tenant {name:?}, which is not defined", n.name);
                store::insert_unknown_tenant_finding(
                    tx,
                    org,
                    cluster,
                    &format!("unknown-tenant/{event_id}"),
                    &n.namespace_uid.to_string(),
                    n.labels_since,
                    &json!({ "reason": reason }),
                )
                .await?;
                flagged.push(FlaggedFact { event_id: event_id.to_string(), reason });
            }
            id
        }
    };
    let since = n.labels_since;
    // The row in force at `since`, and the first row after it.
    let current = store::ownership_at(tx, org, n.namespace_uid, since).await?;
    let next_from = store::next_ownership_from(tx, org, n.namespace_uid, since).await?;
    let until = match &current {
        Some((_, to, current_tenant)) => {
            if Some(*current_tenant) == tenant {
                return Ok(()); // nothing changes
            }
            // Close the row in force at `since` (closed, never overwritten).
            store::close_ownership(tx, org, n.namespace_uid, current.as_ref().map(|c| c.0), since).await?;
            *to
        }
        None => next_from,
    };
    if let Some(tenant) = tenant
        && current.as_ref().is_none_or(|(from, _, _)| *from < since)
    {
        store::insert_ownership(tx, org, n.namespace_uid, since, until, tenant).await?;
    } else if let (Some(tenant), Some((from, _, _))) = (tenant, &current) {
        // Same start instant, new owner: the closed row would be empty; replace its owner in place.
        store::replace_owner(tx, org, n.namespace_uid, *from, tenant, until).await?;
    }
    if tenant.is_none() {
        // No owner from the labels: the rules for namespaces without labels fill what no entry covers.
        crate::store::fill_from_rules(tx, n.namespace_uid).await?;
    }
    Ok(())
}

/// Records node `n` as of `at`: a change closes the row in force and opens a new one.
pub(super) async fn apply_node(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    n: &gpuledger_core::wire::NodeFact,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    let allocatable = serde_json::to_value(&n.allocatable).unwrap_or_default();
    if store::node_unchanged(tx, org, cluster, n, &allocatable).await? == Some(true) {
        return Ok(());
    }
    store::close_node(tx, org, cluster, &n.name, at).await?;
    store::insert_node(tx, org, cluster, n, at, &allocatable).await
}

/// Records device `d` as of `at`: a change closes the row in force and opens a new one.
pub(super) async fn apply_device(
    tx: &mut OrgTx,
    org: OrgId,
    cluster: ClusterId,
    d: &gpuledger_core::wire::DeviceFact,
    at: OffsetDateTime,
) -> Result<(), DbError> {
    let mig = serde_json::to_value(&d.mig_devices).unwrap_or_default();
    if store::device_unchanged(tx, org, cluster, d, &mig).await? == Some(true) {
        return Ok(());
    }
    store::close_device(tx, org, cluster, &d.gpu_uuid, at).await?;
    store::insert_device(tx, org, cluster, d, at, &mig).await
}
