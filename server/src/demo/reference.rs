//! The demo organization's reference data, inserted directly as an administrator would set it up: departments,
//! tenants, the two clusters, GPU classes and the approved inventory (GPU models, MIG and vGPU profile fractions,
//! the time-slicing policy). Everything that *happened* comes from the agents, over HTTP (see [`super::load_history`]).

use gpuledger_core::ids::OrgId;
use uuid::{Uuid, uuid};

use super::store;
use crate::db::{Database, DbError, OrgTx};

/// The demo organization's slug (fixed name, see DESIGN.md).
pub const DEMO_SLUG: &str = "demo";
const DEMO_ORG: Uuid = uuid!("0d3e0000-0000-4000-8000-000000000001");
const RESEARCH: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000d1");
const PRODUCT: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000d2");
const PLATFORM: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000d3");

/// The demo's clusters: (ID, name).
pub const CLUSTERS: [(Uuid, &str); 2] = [
    (uuid!("0d3e0000-0000-4000-8000-0000000000c2"), "prod-east"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000c3"), "research-west"),
];

/// Departments: (ID, name, the slug their namespaces carry in `gpuledger.io/department`).
const DEPARTMENTS: [(Uuid, &str); 3] =
    [(RESEARCH, "Research"), (PRODUCT, "Product"), (PLATFORM, "Platform Engineering")];

/// The departments' journal accounts, in [`DEPARTMENTS`]' order: (cost centre, GL account) — IT services expense,
/// per department's cost centre.
const DEPARTMENT_ACCOUNTS: [(&str, &str); 3] =
    [("CC-1100", "6420-GPU"), ("CC-1200", "6420-GPU"), ("CC-9100", "6420-GPU")];

/// The platform's own account the demo's journal credits: (cost centre, GL account) — the internal recovery of GPU
/// cost, against the platform team's cost centre.
const PLATFORM_ACCOUNT: (&str, &str) = ("CC-9100", "6429-GPU-RECOVERY");

/// Tenants: (ID, department, name). Namespaces name them in the `gpuledger.io/tenant` label; Kueue ClusterQueues
/// carry the same names.
pub const TENANTS: [(Uuid, Uuid, &str); 9] = [
    (uuid!("0d3e0000-0000-4000-8000-0000000000a1"), RESEARCH, "nlp-research"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000a2"), RESEARCH, "vision-research"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000a5"), RESEARCH, "speech-research"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000a3"), PRODUCT, "search-ranking"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000a4"), PRODUCT, "assistant-serving"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000a6"), PRODUCT, "recommendations"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000a7"), PLATFORM, "ml-platform"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000a8"), PLATFORM, "analytics-vdi"),
    (uuid!("0d3e0000-0000-4000-8000-0000000000a9"), PLATFORM, "data-engineering"),
];

/// (class, description, [(model, memory MiB)]).
pub(super) type GpuClass = (&'static str, &'static str, &'static [(&'static str, i32)]);

/// GPU classes (pricing), each with the models that belong to it: (class, description, [(model, memory MiB)]).
/// Kueue ResourceFlavors are named after the class in lower case (`H100-80GB` → `h100-80gb`).
pub(super) const CLASSES: [GpuClass; 5] = [
    ("H100-80GB", "NVIDIA H100 SXM 80 GB", &[("NVIDIA H100 80GB HBM3", 81_559)]),
    ("A100-80GB", "NVIDIA A100 SXM4 80 GB", &[("NVIDIA A100-SXM4-80GB", 81_920)]),
    ("A100-40GB", "NVIDIA A100 PCIe 40 GB", &[("NVIDIA A100-PCIE-40GB", 40_960)]),
    ("L4-24GB", "NVIDIA L4 24 GB", &[("NVIDIA L4", 23_034)]),
    ("T4-16GB", "NVIDIA T4 16 GB", &[("Tesla T4", 15_360)]),
];

/// MIG profiles: (model, profile, fraction numerator, denominator) — compute slices out of 7.
pub(super) const MIG_PROFILES: [(&str, &str, i64, i64); 11] = [
    ("NVIDIA H100 80GB HBM3", "1g.10gb", 1, 7),
    ("NVIDIA H100 80GB HBM3", "2g.20gb", 2, 7),
    ("NVIDIA H100 80GB HBM3", "3g.40gb", 3, 7),
    ("NVIDIA H100 80GB HBM3", "7g.80gb", 1, 1),
    ("NVIDIA A100-SXM4-80GB", "1g.10gb", 1, 7),
    ("NVIDIA A100-SXM4-80GB", "2g.20gb", 2, 7),
    ("NVIDIA A100-SXM4-80GB", "3g.40gb", 3, 7),
    ("NVIDIA A100-SXM4-80GB", "4g.40gb", 4, 7),
    ("NVIDIA A100-SXM4-80GB", "7g.80gb", 1, 1),
    ("NVIDIA A100-PCIE-40GB", "1g.5gb", 1, 7),
    ("NVIDIA A100-PCIE-40GB", "3g.20gb", 3, 7),
];

/// vGPU types on the T4 (time-sliced vGPU: a fixed number per board): (profile, numerator, denominator).
pub(super) const VGPU_PROFILES: [(&str, i64, i64); 5] =
    [("GRID_T4-1Q", 1, 16), ("GRID_T4-2Q", 1, 8), ("GRID_T4-4Q", 1, 4), ("GRID_T4-8Q", 1, 2), ("GRID_T4-16Q", 1, 1)];

/// When the approved inventory (classes, models, profiles, time-slicing policy) takes effect.
pub(super) const CATALOG_SINCE: time::OffsetDateTime = time::macros::datetime!(2025-01-01 00:00 UTC);

/// Seeds the demo organization's reference data and returns its id. Idempotent. The organization is created the
/// way an operator's `org create` creates one ([`crate::orgs::create`]), the first time only.
pub async fn seed(db: &Database) -> Result<OrgId, crate::error::AppError> {
    let org = crate::orgs::ensure(db, OrgId::from_uuid(DEMO_ORG), DEMO_SLUG, "Demo Corp (sample data)", "demo").await?;
    let mut tx = db.begin_org(org).await?;
    insert_all(&mut tx, org.as_uuid()).await?;
    tx.commit().await?;
    Ok(org)
}

/// Inserts the reference data an administrator would set up, keeping what exists.
async fn insert_all(tx: &mut OrgTx, o: Uuid) -> Result<(), DbError> {
    // A demo organization offers its local demo accounts until an identity provider is configured.
    store::enable_demo_login(tx).await?;
    let mut first = false;
    for ((id, name), (cost_center, gl_account)) in DEPARTMENTS.into_iter().zip(DEPARTMENT_ACCOUNTS) {
        first |= store::insert_department(tx, o, id, name, cost_center, gl_account).await?;
    }
    if first {
        // The platform's own account, which the demo's journal credits; set once, like the departments' (an admin's
        // later change stays).
        store::set_platform_account(tx, o, PLATFORM_ACCOUNT.0, PLATFORM_ACCOUNT.1).await?;
    }
    for (id, department, name) in TENANTS {
        store::insert_tenant(tx, o, id, department, name).await?;
    }
    for (id, name) in CLUSTERS {
        store::insert_cluster(tx, o, id, name).await?;
    }
    let since = CATALOG_SINCE;
    for (class, description, models) in CLASSES {
        store::insert_gpu_class(tx, o, class, description).await?;
        for (model, memory) in models {
            store::insert_gpu_model(tx, o, model, since, class, *memory).await?;
        }
    }
    for (model, profile, num, den) in MIG_PROFILES {
        store::insert_mig_profile(tx, o, model, profile, since, (num, den)).await?;
    }
    for (profile, num, den) in VGPU_PROFILES {
        store::insert_t4_vgpu_profile(tx, o, profile, since, (num, den)).await?;
    }
    // The L4 pool's device plugin shares each GPU 4 ways (time-slicing, `nvidia.com/gpu`).
    store::insert_l4_timeslice_policy(tx, o, CLUSTERS[0].0, since).await?;
    Ok(())
}
