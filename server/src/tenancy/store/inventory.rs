//! The approved GPU inventory: classes, models, MIG and vGPU profiles, time-slicing declarations and share bases,
//! read for `GET /api/v1/inventory` and written one versioned entry at a time.

use time::OffsetDateTime;
use uuid::Uuid;

use super::{ModelRow, ProfileRow, TimeslicingRow, rows};
use crate::{
    db::{DbError, OrgTx},
    error::AppError,
};

/// (class, description) of every GPU class.
pub(crate) async fn gpu_classes(tx: &mut OrgTx) -> Result<Vec<(String, String)>, AppError> {
    rows(tx, "SELECT gpu_class, description FROM gpu_classes WHERE org_id = $1 ORDER BY gpu_class").await
}

/// Every GPU model entry, by model and start.
pub(crate) async fn gpu_models(tx: &mut OrgTx) -> Result<Vec<ModelRow>, AppError> {
    rows(
        tx,
        concat!(
            "SELECT model, gpu_class, memory_mib, ",
            json_time!("valid_from"),
            " AS valid_from, ",
            json_time!("valid_to"),
            " AS valid_to FROM gpu_models WHERE org_id = $1 ORDER BY model, gpu_models.valid_from"
        ),
    )
    .await
}

/// Every MIG and vGPU profile entry, ordered by the stored start, not by its text.
pub(crate) async fn profiles(tx: &mut OrgTx) -> Result<Vec<ProfileRow>, AppError> {
    rows(
        tx,
        concat!(
            "SELECT kind, model, profile, fraction, valid_from, valid_to FROM (
               SELECT 'mig' AS kind, model, profile, fraction_num || '/' || fraction_den AS fraction, ",
            json_time!("valid_from"),
            " AS valid_from, ",
            json_time!("valid_to"),
            " AS valid_to, valid_from AS starts FROM mig_profiles WHERE org_id = $1
               UNION ALL
               SELECT 'vgpu', model, profile, fraction_num || '/' || fraction_den, ",
            json_time!("valid_from"),
            ", ",
            json_time!("valid_to"),
            ", valid_from FROM vgpu_profiles WHERE org_id = $1) p
             ORDER BY kind, model, profile, starts"
        ),
    )
    .await
}

/// Every time-slicing declaration, by cluster, name and start.
pub(crate) async fn timeslicing(tx: &mut OrgTx) -> Result<Vec<TimeslicingRow>, AppError> {
    rows(
        tx,
        concat!(
            "SELECT c.name AS cluster, t.name, t.replicas, ",
            json_time!("t.valid_from"),
            " AS valid_from, ",
            json_time!("t.valid_to"),
            " AS valid_to
               FROM timeslice_policies t JOIN clusters c ON c.org_id = t.org_id AND c.cluster_id = t.cluster_id
              WHERE t.org_id = $1
              ORDER BY c.name, t.name, t.valid_from"
        ),
    )
    .await
}

/// (cluster, basis, start, end) of every share basis: the organization's (no cluster) first, then by start.
pub(crate) async fn share_bases(
    tx: &mut OrgTx,
) -> Result<Vec<(Option<String>, String, String, Option<String>)>, DbError> {
    Ok(sqlx::query_as(concat!(
        "SELECT c.name, b.basis, ",
        json_time!("b.valid_from"),
        ", ",
        json_time!("b.valid_to"),
        " FROM share_bases b LEFT JOIN clusters c ON c.org_id = b.org_id AND c.cluster_id = b.cluster_id
          WHERE b.org_id = $1 ORDER BY c.name NULLS FIRST, b.valid_from"
    ))
    .bind(tx.org().as_uuid())
    .fetch_all(tx.conn())
    .await?)
}

/// Adds GPU class `class` unless it exists.
pub(crate) async fn ensure_gpu_class(tx: &mut OrgTx, class: &str) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class) VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .bind(org)
        .bind(class)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// Inserts a GPU model entry from `valid_from`.
pub(crate) async fn insert_model(
    tx: &mut OrgTx,
    model: &str,
    valid_from: OffsetDateTime,
    class: &str,
    memory_mib: Option<i32>,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class, memory_mib) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(org)
    .bind(model)
    .bind(valid_from)
    .bind(class)
    .bind(memory_mib)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Inserts a profile entry (`table`: `mig_profiles` or `vgpu_profiles`) of fraction `num`/`den` from `valid_from`.
pub(crate) async fn insert_profile(
    tx: &mut OrgTx,
    table: &str,
    model: &str,
    profile: &str,
    valid_from: OffsetDateTime,
    num: i64,
    den: i64,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(&format!(
        "INSERT INTO {table} (org_id, model, profile, valid_from, fraction_num, fraction_den)
         VALUES ($1, $2, $3, $4, $5, $6)"
    ))
    .bind(org)
    .bind(model)
    .bind(profile)
    .bind(valid_from)
    .bind(num)
    .bind(den)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The id of the cluster named `name`, if any.
pub(crate) async fn cluster_id_by_name(tx: &mut OrgTx, name: &str) -> Result<Option<Uuid>, DbError> {
    let org = tx.org().as_uuid();
    Ok(sqlx::query_scalar("SELECT cluster_id FROM clusters WHERE name = $1 AND org_id = $2")
        .bind(name)
        .bind(org)
        .fetch_optional(tx.conn())
        .await?)
}

/// Inserts a time-slicing declaration of `cluster` from `valid_from`.
pub(crate) async fn insert_timeslicing(
    tx: &mut OrgTx,
    cluster: Uuid,
    name: &str,
    valid_from: OffsetDateTime,
    replicas: i32,
) -> Result<(), DbError> {
    let org = tx.org().as_uuid();
    sqlx::query(
        "INSERT INTO timeslice_policies (org_id, cluster_id, name, valid_from, replicas) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(org)
    .bind(cluster)
    .bind(name)
    .bind(valid_from)
    .bind(replicas)
    .execute(tx.conn())
    .await?;
    Ok(())
}
