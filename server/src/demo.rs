//! The demo organization: what `gpuledger-server demo` seeds so a first run has something to show.
//! Idempotent: running the demo again over the same data directory changes nothing.

use gpuledger_core::{
    ids::{ClusterId, MigProfile, OrgId, VgpuProfile},
    sharing::SharingMode,
    wire::{
        AllocationEnd, AllocationStart, AttributionLabels, EndReason, Fact, FactBody, Holder, NamespaceFact, event_id,
    },
};
use time::OffsetDateTime;
use uuid::{Uuid, uuid};

use crate::{
    db::{Database, DbError},
    ingest,
};

/// The demo organization's slug (fixed name, see DESIGN.md).
pub const DEMO_SLUG: &str = "demo";
const DEMO_ORG: Uuid = uuid!("0d3e0000-0000-4000-8000-000000000001");
const RESEARCH: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000d1");
const PRODUCT: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000d2");
const CLUSTER: Uuid = uuid!("0d3e0000-0000-4000-8000-0000000000c1");

/// Seeds the demo organization's reference data (departments, tenants, cluster, approved inventory) and
/// returns its id.
pub async fn seed(db: &Database) -> Result<OrgId, DbError> {
    let org =
        db.cross_org_directory().create_org(OrgId::from_uuid(DEMO_ORG), DEMO_SLUG, "Demo Corp (sample data)").await?;
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
        (uuid!("0d3e0000-0000-4000-8000-0000000000a1"), RESEARCH, "nlp-research"),
        (uuid!("0d3e0000-0000-4000-8000-0000000000a2"), RESEARCH, "vision-research"),
        (uuid!("0d3e0000-0000-4000-8000-0000000000a3"), PRODUCT, "search-ranking"),
        (uuid!("0d3e0000-0000-4000-8000-0000000000a4"), PRODUCT, "assistant-serving"),
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
    sqlx::query(
        "INSERT INTO clusters (org_id, cluster_id, name) VALUES ($1, $2, 'demo-gpu-cluster') ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind(CLUSTER)
    .execute(tx.conn())
    .await?;
    for (class, description) in [
        ("H100-80GB", "NVIDIA H100 SXM 80 GB"),
        ("A100-40GB", "NVIDIA A100 PCIe 40 GB"),
        ("T4-16GB", "NVIDIA T4 16 GB"),
    ] {
        sqlx::query(
            "INSERT INTO gpu_classes (org_id, gpu_class, description) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
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
    for (profile, num, den) in [("GRID_T4-1Q", 1, 16), ("GRID_T4-4Q", 1, 4), ("GRID_T4-16Q", 1, 1)] {
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
    // Workloads go through the real ingest code (the same `store` the HTTP endpoint calls), anchored at the
    // start of the current month so a re-run adds nothing.
    let facts = sample_facts(OffsetDateTime::now_utc());
    ingest::store(&mut tx, org, ClusterId::from_uuid(CLUSTER), &facts)
        .await
        .map_err(|e| DbError::Sqlx(sqlx::Error::Protocol(format!("demo ingest: {e}"))))?;
    tx.commit().await?;
    Ok(org)
}

/// A few workloads of every sharing mode in two namespaces, as an agent would report them.
pub fn sample_facts(now: OffsetDateTime) -> Vec<Fact> {
    let month = now.replace_day(1).unwrap_or(now).replace_time(time::Time::MIDNIGHT);
    let at = |hours: i64| month + time::Duration::hours(hours);
    let mut facts = Vec::new();
    let namespaces = [
        (uuid!("0d3e0000-0000-4000-8000-00000000e001"), "nlp", "nlp-research"),
        (uuid!("0d3e0000-0000-4000-8000-00000000e002"), "serving", "assistant-serving"),
    ];
    for (uid, name, tenant) in namespaces {
        facts.push(Fact {
            event_id: event_id("namespace", &[&uid.to_string(), tenant]),
            observed_at: month,
            body: FactBody::NamespaceObserved(NamespaceFact {
                namespace_uid: uid,
                name: name.into(),
                created_at: month,
                deleted_at: None,
                labels: AttributionLabels { tenant: Some(tenant.into()), ..AttributionLabels::default() },
                labels_since: month,
            }),
        });
    }
    let h100 = "NVIDIA H100 80GB HBM3";
    // (name, namespace index, resource, units, mode, GPU model, start hour, end hour)
    type Workload<'a> = (&'a str, usize, &'a str, u32, SharingMode, &'a str, i64, Option<i64>);
    let workloads: [Workload; 6] = [
        ("train-llm-0", 0, "nvidia.com/gpu", 2, SharingMode::Exclusive, h100, 2, Some(50)),
        ("finetune-1", 0, "nvidia.com/mig-1g.10gb", 1, mig("1g.10gb"), h100, 5, Some(29)),
        (
            "notebook-2",
            0,
            "nvidia.com/gpu",
            1,
            SharingMode::TimeSlice { replicas: 4 },
            "NVIDIA A100-PCIE-40GB",
            1,
            None,
        ),
        ("vllm-3", 1, "nvidia.com/gpu", 1, SharingMode::Exclusive, h100, 0, None),
        ("vdi-4", 1, "nvidia.com/GRID_T4-4Q", 1, vgpu("GRID_T4-4Q"), "Tesla T4", 3, Some(11)),
        ("render-5", 1, "nvidia.com/TU104GL_Tesla_T4", 1, SharingMode::Passthrough, "Tesla T4", 4, None),
    ];
    for (i, (name, ns, resource, units, mode, model, start, end)) in workloads.into_iter().enumerate() {
        let started_at = at(start);
        if started_at > now {
            continue;
        }
        // One set of workloads per month: the pod UIDs carry the month.
        let month_no = (month.year() as u128) * 12 + month.month() as u128;
        let pod = Uuid::from_u128(0x0d3e_0000_0000_4000_8000_0000_0000_0000 + (month_no << 8) + i as u128);
        let allocation_id = format!("{pod}/main/{resource}");
        let (ns_uid, ns_name, _) = namespaces[ns];
        facts.push(Fact {
            event_id: event_id("alloc-start", &[&allocation_id]),
            observed_at: started_at,
            body: FactBody::AllocationStarted(AllocationStart {
                allocation_id: allocation_id.clone(),
                holder: if resource.contains("T4") { Holder::Vmi } else { Holder::Pod },
                holder_uid: pod,
                holder_name: name.into(),
                namespace: ns_name.into(),
                namespace_uid: Some(ns_uid),
                container: Some("main".into()),
                node: Some(format!("gpu-node-{}", i % 3)),
                resource: resource.into(),
                units,
                mode,
                gpu_model: Some(model.into()),
                device_ids: vec![],
                started_at,
                labels: AttributionLabels::default(),
            }),
        });
        if let Some(end) = end.map(at).filter(|t| *t <= now) {
            facts.push(Fact {
                event_id: event_id("alloc-end", &[&allocation_id]),
                observed_at: end,
                body: FactBody::AllocationEnded(AllocationEnd {
                    allocation_id,
                    ended_at: end,
                    reason: EndReason::Finished,
                }),
            });
        }
    }
    facts
}

fn mig(profile: &str) -> SharingMode {
    MigProfile::new(profile).map_or(SharingMode::Exclusive, |profile| SharingMode::Mig { profile })
}

fn vgpu(profile: &str) -> SharingMode {
    VgpuProfile::new(profile).map_or(SharingMode::Passthrough, |profile| SharingMode::Vgpu { profile })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::datetime;

    #[test]
    fn sample_workloads_are_those_started_by_now_and_stable_within_a_month() {
        let mid = sample_facts(datetime!(2026-11-20 12:00 UTC));
        let starts = mid.iter().filter(|f| f.body.kind() == "allocation_started").count();
        let ends = mid.iter().filter(|f| f.body.kind() == "allocation_ended").count();
        assert_eq!((starts, ends), (6, 3));
        assert_eq!(sample_facts(datetime!(2026-11-25 08:00 UTC)).len(), mid.len());
        let ids = |facts: &[Fact]| facts.iter().map(|f| f.event_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&mid), ids(&sample_facts(datetime!(2026-11-28 23:00 UTC))));
        // Only what has started by `now`; nothing in the future.
        let early = sample_facts(datetime!(2026-11-01 00:30 UTC));
        assert_eq!(early.iter().filter(|f| f.body.kind() == "allocation_started").count(), 1);
        // Next month: different workloads (new pod UIDs), so months never overwrite each other.
        let next = sample_facts(datetime!(2026-12-20 12:00 UTC));
        assert!(ids(&next).iter().filter(|i| i.starts_with("alloc")).all(|i| !ids(&mid).contains(i)));
    }
}
