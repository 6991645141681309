//! [`load`]: the fleet written into an organization as ingest would have stored it, in one transaction.

use super::{store, *};

/// What [`load`] stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Loaded {
    /// GPUs (devices).
    pub gpus: u64,
    /// Allocation intervals.
    pub allocations: u64,
    /// Telemetry windows (60 s).
    pub telemetry: u64,
    /// Shared-endpoint usage rows.
    pub usage: u64,
    /// Tenants.
    pub tenants: u64,
    /// Quotas.
    pub quotas: u64,
}

/// Whether organization `org` already holds a fleet: the details of its marker.
pub async fn loaded_marker(db: &Database, org: OrgId) -> Result<Option<Value>, DbError> {
    let mut tx = db.begin_org(org).await?;
    let marker = store::latest_marker(&mut tx, org.as_uuid(), FLEET_ACTION, FLEET_VERSION).await?;
    tx.commit().await?;
    Ok(marker)
}

/// `n` with thousands separators (`10,000`).
pub fn grouped(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Writes `world` into organization `org` in one transaction, with the marker [`loaded_marker`] reads, and logs
/// its progress. Names already defined in the organization (the demo's departments, tenants, clusters, catalog)
/// are reused; everything else is new. Makes the telemetry partitions of the months it writes first.
#[allow(clippy::type_complexity)] // column vectors for UNNEST inserts
pub async fn load(db: &Database, org: OrgId, world: &World, actor: &str) -> Result<Loaded, DbError> {
    let spec = &world.spec;
    let label = format!("seeding {} GPUs", grouped(spec.gpus));
    db.cross_org_maintenance().telemetry_partitions(spec.start.date(), spec.through.date()).await?;
    let mut tx = db.begin_org(org).await?;
    tx.allow_long_statements().await?;
    let o = org.as_uuid();
    let epoch = spec.epoch();
    let mut loaded = Loaded::default();

    tracing::info!("{label}: departments, tenants, clusters, inventory…");
    let depts = store::upsert_departments(
        &mut tx,
        o,
        &(0..world.departments.len()).map(dept_id).collect::<Vec<_>>(),
        &world.departments.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
        epoch,
    )
    .await?;
    let dept_of: Vec<Uuid> = world.departments.iter().map(|d| depts.get(*d).copied().unwrap_or_default()).collect();
    let tenant_names: Vec<String> = world.tenants.iter().map(|t| t.name.clone()).collect();
    store::insert_tenants(
        &mut tx,
        o,
        &(0..world.tenants.len()).map(tenant_id).collect::<Vec<_>>(),
        &world.tenants.iter().map(|t| dept_of[t.dept]).collect::<Vec<_>>(),
        &tenant_names,
        epoch,
    )
    .await?;
    let tenant_rows = store::tenants_named(&mut tx, o, &tenant_names).await?;
    let by_name: HashMap<String, (Uuid, Uuid)> = tenant_rows.into_iter().map(|(n, t, d)| (n, (t, d))).collect();
    // (tenant ID, its department) per tenant index.
    let tenant_of: Vec<(Uuid, Uuid)> =
        world.tenants.iter().map(|t| by_name.get(&t.name).copied().unwrap_or_default()).collect();
    loaded.tenants = tenant_of.len() as u64;
    let clusters = store::upsert_clusters(
        &mut tx,
        o,
        &(0..CLUSTERS.len()).map(cluster_id).collect::<Vec<_>>(),
        &CLUSTERS.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        epoch,
    )
    .await?;
    let cluster_of: Vec<Uuid> = CLUSTERS.iter().map(|c| clusters.get(*c).copied().unwrap_or_default()).collect();
    insert_catalog(&mut tx, o, &cluster_of).await?;

    tracing::info!("{label}: devices and nodes…");
    let mut mig_of: Vec<Vec<u32>> = vec![Vec::new(); spec.gpus];
    for (m, mi) in world.migs.iter().enumerate() {
        mig_of[mi.gpu as usize].push(m as u32);
    }
    for chunk in (0..spec.gpus as u32).collect::<Vec<_>>().chunks(CHUNK) {
        let mut cols = store::DeviceCols::default();
        let mut vgpu: Vec<Option<String>> = Vec::new();
        for &g in chunk {
            let node = &world.nodes[(g / 8) as usize];
            let c = &CLASSES[node.class];
            let migs: Vec<Value> = mig_of[g as usize]
                .iter()
                .map(|m| {
                    let mi = &world.migs[*m as usize];
                    json!({"uuid": mig_uuid(*m), "profile": mig_profile(node.class, mi.slices), "gpu_instance_id": mi.gi})
                })
                .collect();
            cols.0.push(cluster_of[node.cluster]);
            cols.1.push(gpu_uuid(g));
            cols.2.push(node_name(g / 8));
            cols.3.push(c.model.to_string());
            cols.4.push(c.memory_mib);
            cols.5.push(node.mode == Mode::Mig);
            cols.6.push(Value::Array(migs).to_string());
            vgpu.push(node.vgpu.map(|v| VGPU_TYPES[v].0.to_string()));
        }
        store::insert_devices(&mut tx, o, epoch, &cols, &vgpu).await?;
        loaded.gpus += chunk.len() as u64;
    }
    {
        let n = world.nodes.len();
        let mut cols = store::NodeCols::default();
        let mut strategy = store::NodeStrategyCols::default();
        for (i, node) in world.nodes.iter().enumerate() {
            cols.0.push(cluster_of[node.cluster]);
            cols.1.push(node_name(i as u32));
            cols.2.push(Uuid::from_u128(NODE_BASE | i as u128));
            cols.3.push(CLASSES[node.class].model.replace(' ', "-"));
            strategy.0.push((node.mode == Mode::Mig).then(|| "mixed".to_string()));
            strategy.1.push((node.mode == Mode::TimeSlice).then(|| "time-slicing".to_string()));
            strategy.2.push((node.mode == Mode::TimeSlice).then_some(4));
        }
        store::insert_nodes(&mut tx, o, epoch, &cols, &strategy).await?;
        tracing::debug!(nodes = n, "fleet nodes written");
    }

    tracing::info!("{label}: namespaces, owners, quotas…");
    store::insert_namespaces(
        &mut tx,
        o,
        &(0..world.namespaces.len()).map(ns_id).collect::<Vec<_>>(),
        &world.namespaces.iter().map(|n| cluster_of[n.cluster]).collect::<Vec<_>>(),
        &world.namespaces.iter().map(|n| n.name.clone()).collect::<Vec<_>>(),
        epoch,
    )
    .await?;
    {
        let mut cols = store::OwnershipCols::default();
        for (i, ns) in world.namespaces.iter().enumerate() {
            for ow in &ns.owners {
                cols.0.push(ns_id(i));
                cols.1.push(at(ow.from));
                cols.2.push(ow.to.map(at));
                cols.3.push(tenant_of[ow.tenant as usize].0);
            }
        }
        store::insert_ownership(&mut tx, o, &cols).await?;
    }
    {
        let mut cols = store::QuotaCols::default();
        let mut times = store::QuotaTimes::default();
        for (i, q) in world.quotas.iter().enumerate() {
            let (t, d, scope) = match q.holder {
                Holder::Tenant(t) => {
                    let (tid, did) = tenant_of[t as usize];
                    (Some(tid), None, did)
                }
                Holder::Dept(d) => (None, Some(dept_of[d as usize]), dept_of[d as usize]),
            };
            cols.0.push(quota_id(i));
            cols.1.push(t);
            cols.2.push(d);
            cols.3.push(scope);
            cols.4.push(CLASSES[q.class].name.to_string());
            cols.5.push(q.gpus.clone());
            times.0.push(at(q.from));
            times.1.push(q.to.map(at));
        }
        store::insert_quotas(&mut tx, o, &cols, &times, actor).await?;
        loaded.quotas = world.quotas.len() as u64;
    }

    // Allocation intervals: every job, including those wholly before the first month.
    let total = world.jobs.len();
    let mut next_log = 0;
    for (c, chunk) in world.jobs.chunks(CHUNK).enumerate() {
        if c * CHUNK >= next_log {
            tracing::info!("{label}: allocations {}/{}", grouped(c * CHUNK), grouped(total));
            next_log += (total / 10).max(CHUNK);
        }
        insert_allocations(&mut tx, o, world, &cluster_of, c * CHUNK, chunk).await?;
        loaded.allocations += chunk.len() as u64;
    }
    tracing::info!("{label}: allocations {}/{}", grouped(total), grouped(total));

    // Telemetry at the agents' cadence (60 s windows) into both tiers.
    loaded.telemetry += super::telemetry::write_all(&mut tx, o, world, &cluster_of, &label).await?;

    tracing::info!("{label}: shared endpoint usage…");
    loaded.usage = insert_usage(&mut tx, o, world, &cluster_of, &tenant_of).await?;

    let fmt = |t: OffsetDateTime| gpuledger_core::time_fmt::rfc3339(t);
    let details = json!({
        "gpus": spec.gpus, "seed": spec.seed, "start": fmt(spec.start), "through": fmt(spec.through),
        "window_hours": spec.window_h, "loaded": loaded,
        "full_resolution_from": spec.full_resolution_from.map(fmt),
    });
    store::insert_fleet_marker(&mut tx, o, actor, FLEET_ACTION, FLEET_VERSION, &details).await?;
    tracing::info!("{label}: committing…");
    tx.commit().await?;
    Ok(loaded)
}

/// The approved inventory the fleet needs (the demo's catalog; kept where it exists), and the time-slicing policy
/// on every cluster.
async fn insert_catalog(tx: &mut OrgTx, o: Uuid, clusters: &[Uuid]) -> Result<(), DbError> {
    use crate::demo::store as reference;
    for (class, description, models) in CATALOG {
        reference::insert_gpu_class(tx, o, class, description).await?;
        for (model, memory) in models {
            reference::insert_gpu_model(tx, o, model, CATALOG_SINCE, class, *memory).await?;
        }
    }
    for (model, profile, num, den) in MIG_PROFILES {
        reference::insert_mig_profile(tx, o, model, profile, CATALOG_SINCE, (num, den)).await?;
    }
    for (profile, num, den) in VGPU_PROFILES {
        reference::insert_t4_vgpu_profile(tx, o, profile, CATALOG_SINCE, (num, den)).await?;
    }
    for c in clusters {
        reference::insert_l4_timeslice_policy(tx, o, *c, CATALOG_SINCE).await?;
    }
    Ok(())
}

async fn insert_allocations(
    tx: &mut OrgTx,
    o: Uuid,
    w: &World,
    cluster_of: &[Uuid],
    first: usize,
    jobs: &[Job],
) -> Result<(), DbError> {
    let mut c = store::AllocCols::default();
    for (k, j) in jobs.iter().enumerate() {
        let idx = first + k;
        let lane = &w.lanes[j.lane as usize];
        let node = &w.nodes[lane.node as usize];
        let class = &CLASSES[node.class];
        let ns = &w.namespaces[j.ns as usize];
        let vm = matches!(lane.mode, Mode::Vgpu | Mode::Passthrough);
        c.cluster.push(cluster_of[node.cluster]);
        c.id.push(w.allocation_id(idx, lane));
        c.kind.push(if vm { "vmi" } else { "pod" });
        c.uid.push(job_uid(idx));
        c.name.push(match (vm, lane.endpoint) {
            (true, _) => format!("vm-{idx:07}"),
            (_, true) => format!("{ENDPOINT}-vllm-{idx:07}"),
            _ => format!("job-{idx:07}"),
        });
        c.namespace.push(ns.name.clone());
        c.ns_uid.push(ns_id(j.ns as usize));
        c.container.push((!vm).then_some("main"));
        c.node.push(node_name(lane.node));
        c.resource.push(w.resource(lane));
        c.units.push(if matches!(lane.mode, Mode::Exclusive | Mode::Passthrough) { lane.num as i32 } else { 1 });
        c.devices.push(w.device_ids(lane).join(","));
        c.model.push(class.model);
        c.class.push(class.name);
        c.mode.push(lane.mode.as_str());
        c.profile.push(w.profile(lane));
        c.replicas.push((lane.mode == Mode::TimeSlice).then_some(4));
        c.num.push(lane.num);
        c.den.push(lane.den);
        c.start.push(at(j.start));
        c.end.push(j.end.map(at));
        c.estimated.push(j.estimated);
        c.confidence.push(World::confidence(lane, j));
        c.endpoint.push(lane.endpoint.then_some(ENDPOINT));
    }
    store::insert_allocations(tx, o, &c, MODELS[0]).await?;
    Ok(())
}

/// The tenants' usage of the shared endpoint (`service_usage`, what the model servers attributed), and what the
/// model servers counted in all (`endpoint_totals`, per pod: a little more, the requests nobody could attribute).
#[allow(clippy::type_complexity)] // column vectors for UNNEST inserts
async fn insert_usage(
    tx: &mut OrgTx,
    o: Uuid,
    w: &World,
    cluster_of: &[Uuid],
    tenant_of: &[(Uuid, Uuid)],
) -> Result<u64, DbError> {
    let start = unix(w.spec.start);
    let cluster = cluster_of[w.nodes[0].cluster];
    for chunk in w.usage.chunks(CHUNK) {
        let mut cols = store::UsageCols::default();
        let mut nums = store::UsageNums::default();
        for u in chunk {
            let s = start + i64::from(u.hour) * 3_600;
            cols.0.push(u.model);
            cols.1.push(w.tenants[u.tenant as usize].name.clone());
            cols.2.push(tenant_of[u.tenant as usize].0);
            cols.3.push(at(s));
            cols.4.push(at(s + 3_600));
            nums.0.push(i64::try_from(u.requests).unwrap_or(i64::MAX));
            nums.1.push(i64::try_from(u.input).unwrap_or(i64::MAX));
            nums.2.push(i64::try_from(u.output).unwrap_or(i64::MAX));
            // Time to first token: 150–450 ms per request.
            nums.3.push(i64::try_from(u.requests * (150 + (u.input / u.requests.max(1)) % 300)).unwrap_or(0));
        }
        store::insert_service_usage(tx, o, cluster, ENDPOINT, &cols, &nums).await?;
    }
    let mut cols = store::TotalCols::default();
    let mut nums = store::TotalNums::default();
    for t in w.endpoint_totals() {
        let s = start + i64::from(t.hour) * 3_600;
        cols.0.push(t.model);
        cols.1.push(format!("llm-serving/{ENDPOINT}-vllm-{}", t.pod));
        cols.2.push(at(s));
        cols.3.push(at(s + 3_600));
        nums.0.push(i64::try_from(t.requests).unwrap_or(i64::MAX));
        nums.1.push(i64::try_from(t.input).unwrap_or(i64::MAX));
        nums.2.push(i64::try_from(t.output).unwrap_or(i64::MAX));
    }
    for k in (0..cols.0.len()).step_by(CHUNK) {
        let r = k..(k + CHUNK).min(cols.0.len());
        store::insert_endpoint_totals(tx, o, cluster, ENDPOINT, &cols, &nums, r).await?;
    }
    Ok(w.usage.len() as u64)
}
