//! SQL of the demo: the reference data an administrator would set up (departments, tenants, clusters, the approved
//! inventory), the markers of what was loaded, and the few lookups the demo's finance side makes.

use gpuledger_core::Period;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::db::{DbError, OrgTx};

/// Lets the organization offer its local demo accounts (until an identity provider is configured).
pub(super) async fn enable_demo_login(tx: &mut OrgTx) -> Result<(), DbError> {
    sqlx::query("UPDATE organizations SET demo_login = true").execute(tx.conn()).await?;
    Ok(())
}

/// Inserts a department with its journal accounts; whether it was new.
pub(super) async fn insert_department(
    tx: &mut OrgTx,
    o: Uuid,
    id: Uuid,
    name: &str,
    cost_center: &str,
    gl_account: &str,
) -> Result<bool, DbError> {
    let added = sqlx::query(
        "INSERT INTO departments (org_id, department_id, name, cost_center, gl_account) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind(id)
    .bind(name)
    .bind(cost_center)
    .bind(gl_account)
    .execute(tx.conn())
    .await?;
    Ok(added.rows_affected() > 0)
}

/// Sets the platform's own journal account.
pub(super) async fn set_platform_account(
    tx: &mut OrgTx,
    o: Uuid,
    cost_center: &str,
    gl_account: &str,
) -> Result<(), DbError> {
    sqlx::query("UPDATE org_settings SET platform_cost_center = $2, platform_gl_account = $3 WHERE org_id = $1")
        .bind(o)
        .bind(cost_center)
        .bind(gl_account)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Inserts a tenant (kept if it exists).
pub(super) async fn insert_tenant(
    tx: &mut OrgTx,
    o: Uuid,
    id: Uuid,
    department: Uuid,
    name: &str,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO tenants (org_id, tenant_id, department_id, name) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind(id)
    .bind(department)
    .bind(name)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts a cluster (kept if it exists).
pub(super) async fn insert_cluster(tx: &mut OrgTx, o: Uuid, id: Uuid, name: &str) -> Result<(), DbError> {
    sqlx::query("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING")
        .bind(o)
        .bind(id)
        .bind(name)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Inserts a GPU class (kept if it exists).
pub(super) async fn insert_gpu_class(tx: &mut OrgTx, o: Uuid, class: &str, description: &str) -> Result<(), DbError> {
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class, description) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING")
        .bind(o)
        .bind(class)
        .bind(description)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Inserts an approved GPU model of `class` from `since` (kept if it exists).
pub(super) async fn insert_gpu_model(
    tx: &mut OrgTx,
    o: Uuid,
    model: &str,
    since: OffsetDateTime,
    class: &str,
    memory_mib: i32,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class, memory_mib) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind(model)
    .bind(since)
    .bind(class)
    .bind(memory_mib)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts an approved MIG profile fraction from `since` (kept if it exists).
pub(super) async fn insert_mig_profile(
    tx: &mut OrgTx,
    o: Uuid,
    model: &str,
    profile: &str,
    since: OffsetDateTime,
    (num, den): (i64, i64),
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind(model)
    .bind(profile)
    .bind(since)
    .bind(num)
    .bind(den)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts an approved vGPU profile fraction of the T4 from `since` (kept if it exists).
pub(super) async fn insert_t4_vgpu_profile(
    tx: &mut OrgTx,
    o: Uuid,
    profile: &str,
    since: OffsetDateTime,
    (num, den): (i64, i64),
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO vgpu_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
             VALUES ($1, 'Tesla T4', $2, $3, $4, $5) ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind(profile)
    .bind(since)
    .bind(num)
    .bind(den)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts the 4-way L4 time-slicing policy of `cluster` from `since` (kept if it exists).
pub(super) async fn insert_l4_timeslice_policy(
    tx: &mut OrgTx,
    o: Uuid,
    cluster: Uuid,
    since: OffsetDateTime,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO timeslice_policies (org_id, cluster_id, name, valid_from, replicas)
         VALUES ($1, $2, 'l4-time-slicing', $3, 4) ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind(cluster)
    .bind(since)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// When the organization was created.
pub(super) async fn org_created_at(tx: &mut OrgTx, o: Uuid) -> Result<OffsetDateTime, DbError> {
    let created: OffsetDateTime = sqlx::query_scalar("SELECT created_at FROM organizations WHERE org_id = $1")
        .bind(o)
        .fetch_one(tx.conn())
        .await?;
    Ok(created)
}

/// The details of the latest `demo.history_loaded` marker of history `version`.
pub(super) async fn history_marker(tx: &mut OrgTx, o: Uuid, version: &str) -> Result<Option<Value>, DbError> {
    let marker: Option<Value> = sqlx::query_scalar(
        "SELECT details FROM audit_log WHERE org_id = $2 AND action = 'demo.history_loaded' AND target = $1
              ORDER BY at DESC LIMIT 1",
    )
    .bind(version)
    .bind(o)
    .fetch_optional(tx.conn())
    .await?;
    Ok(marker)
}

/// Whether any agents' demo history was loaded.
pub(super) async fn history_loaded(tx: &mut OrgTx, o: Uuid) -> Result<bool, DbError> {
    let h: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM audit_log WHERE org_id = $1 AND action = 'demo.history_loaded')",
    )
    .bind(o)
    .fetch_one(tx.conn())
    .await?;
    Ok(h)
}

/// Writes the `demo.history_loaded` marker of history `version`.
pub(super) async fn insert_history_marker(
    tx: &mut OrgTx,
    o: Uuid,
    version: &str,
    details: &Value,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, reason, details)
             VALUES ($1, $2, 'demo', 'demo.history_loaded', $3, 'demo history generated by the agents', $4)",
    )
    .bind(o)
    .bind(Uuid::new_v4())
    .bind(version)
    .bind(details)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Revokes the API tokens `ids` not revoked yet.
pub(super) async fn revoke_tokens(tx: &mut OrgTx, o: Uuid, ids: &[Uuid]) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE api_tokens SET revoked_at = now() WHERE org_id = $2 AND token_id = ANY($1) AND revoked_at IS NULL",
    )
    .bind(ids)
    .bind(o)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Revokes API token `id`.
pub(super) async fn revoke_token(tx: &mut OrgTx, o: Uuid, id: Uuid) -> Result<(), DbError> {
    sqlx::query("UPDATE api_tokens SET revoked_at = now() WHERE org_id = $2 AND token_id = $1")
        .bind(id)
        .bind(o)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Whether a cost policy is approved.
pub(super) async fn approved_policy_exists(tx: &mut OrgTx, o: Uuid) -> Result<bool, DbError> {
    let approved: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM cost_policies WHERE org_id = $1 AND state = 'approved')")
            .bind(o)
            .fetch_one(tx.conn())
            .await?;
    Ok(approved)
}

/// The GPU classes, by name.
pub(super) async fn gpu_classes(tx: &mut OrgTx, o: Uuid) -> Result<Vec<String>, DbError> {
    let classes: Vec<String> =
        sqlx::query_scalar("SELECT gpu_class FROM gpu_classes WHERE org_id = $1 ORDER BY gpu_class")
            .bind(o)
            .fetch_all(tx.conn())
            .await?;
    Ok(classes)
}

/// Whether quotas were imported from Kueue.
pub(super) async fn kueue_quotas_exist(tx: &mut OrgTx, o: Uuid) -> Result<bool, DbError> {
    let imported: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM quotas WHERE org_id = $1 AND source = 'kueue')")
            .bind(o)
            .fetch_one(tx.conn())
            .await?;
    Ok(imported)
}

/// Whether any dispute exists.
pub(super) async fn dispute_exists(tx: &mut OrgTx, o: Uuid) -> Result<bool, DbError> {
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM disputes WHERE org_id = $1)")
        .bind(o)
        .fetch_one(tx.conn())
        .await?;
    Ok(exists)
}

/// The largest borrowed ledger line of `period`.
pub(super) async fn largest_borrowed_line(tx: &mut OrgTx, o: Uuid, period: Period) -> Result<Option<String>, DbError> {
    let line: Option<String> = sqlx::query_scalar(
        "SELECT line_id FROM ledger_lines WHERE org_id = $2 AND period = $1 AND term = 'borrowed'
          ORDER BY amount DESC, line_id LIMIT 1",
    )
    .bind(period.first_day())
    .bind(o)
    .fetch_optional(tx.conn())
    .await?;
    Ok(line)
}
