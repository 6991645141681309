//! The demo organization: what `gpuledger-server demo` seeds so a first run has something to show.
//! Idempotent: running the demo again over the same data directory changes nothing.

use gpuledger_core::ids::OrgId;
use uuid::{Uuid, uuid};

use crate::db::{Database, DbError};

/// The demo organization's slug (fixed name, see DESIGN.md).
pub const DEMO_SLUG: &str = "demo";
const DEMO_ORG: Uuid = uuid!("0d3e0000-0000-4000-8000-000000000001");
const RESEARCH: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000d1");
const PRODUCT: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000d2");
const CLUSTER: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000c1");

/// Seeds the demo organization's reference data (departments, tenants, cluster, approved inventory) and
/// returns its id.
pub async fn seed(db: &Database) -> Result<OrgId, DbError> {
    let org = db
        .cross_org_directory()
        .create_org(
            OrgId::from_uuid(DEMO_ORG),
            DEMO_SLUG,
            "Demo Corp (sample data)",
        )
        .await?;
    let mut tx = db.begin_org(org).await?;
    let o = org.as_uuid();
    for (id, name) in [(RESEARCH, "Research"), (PRODUCT, "Product")] {
        sqlx::query("INSERT INTO departments (org_id, department_id, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING")
            .bind(o)
            .bind(id)
            .bind(name)
            .execute(tx.conn())
            .await?;
    }
    let tenants = [
        (
            uuid!("0d3e0000-0000-4000-8000-0000000000a1"),
            RESEARCH,
            "nlp-research",
        ),
        (
            uuid!("0d3e0000-0000-4000-8000-0000000000a2"),
            RESEARCH,
            "vision-research",
        ),
        (
            uuid!("0d3e0000-0000-4000-8000-0000000000a3"),
            PRODUCT,
            "search-ranking",
        ),
        (
            uuid!("0d3e0000-0000-4000-8000-0000000000a4"),
            PRODUCT,
            "assistant-serving",
        ),
    ];
    for (id, department, name) in tenants {
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
    }
    sqlx::query("INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, 'demo-gpu-cluster') ON CONFLICT DO NOTHING")
        .bind(o)
        .bind(CLUSTER)
        .execute(tx.conn())
        .await?;
    for (class, description) in [
        ("H100-80GB", "NVIDIA H100 SXM 80 GB"),
        ("A100-40GB", "NVIDIA A100 PCIe 40 GB"),
        ("T4-16GB", "NVIDIA T4 16 GB"),
    ] {
        sqlx::query("INSERT INTO gpu_classes (org_id, gpu_class, description) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING")
            .bind(o)
            .bind(class)
            .bind(description)
            .execute(tx.conn())
            .await?;
    }
    let since = time::macros::datetime!(2025-01-01 00:00 UTC);
    for (model, class, memory) in [
        ("NVIDIA H100 80GB HBM3", "H100-80GB", 81_559),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB", 40_960),
        ("Tesla T4", "T4-16GB", 15_360),
    ] {
        sqlx::query(
            "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class, memory_mib) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(model)
        .bind(since)
        .bind(class)
        .bind(memory)
        .execute(tx.conn())
        .await?;
    }
    // MIG fractions: compute slices out of 7.
    for (model, profile, num, den) in [
        ("NVIDIA H100 80GB HBM3", "1g.10gb", 1, 7),
        ("NVIDIA H100 80GB HBM3", "2g.20gb", 2, 7),
        ("NVIDIA H100 80GB HBM3", "3g.40gb", 3, 7),
        ("NVIDIA H100 80GB HBM3", "7g.80gb", 1, 1),
        ("NVIDIA A100-PCIE-40GB", "1g.5gb", 1, 7),
        ("NVIDIA A100-PCIE-40GB", "3g.20gb", 3, 7),
    ] {
        sqlx::query(
            "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(model)
        .bind(profile)
        .bind(since)
        .bind(num as i64)
        .bind(den as i64)
        .execute(tx.conn())
        .await?;
    }
    for (profile, num, den) in [
        ("GRID_T4-1Q", 1, 16),
        ("GRID_T4-4Q", 1, 4),
        ("GRID_T4-16Q", 1, 1),
    ] {
        sqlx::query(
            "INSERT INTO vgpu_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
             VALUES ($1, 'Tesla T4', $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(profile)
        .bind(since)
        .bind(num as i64)
        .bind(den as i64)
        .execute(tx.conn())
        .await?;
    }
    sqlx::query(
        "INSERT INTO timeslice_policies (org_id, cluster_id, name, valid_from, replicas)
         VALUES ($1, $2, 'a100-shared-4', $3, 4) ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind(CLUSTER)
    .bind(since)
    .execute(tx.conn())
    .await?;
    tx.commit().await?;
    Ok(org)
}
