//! [`load`]: the fleet written into an organization as ingest would have stored it, in one transaction.

use super::*;

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
    let marker: Option<Value> = sqlx::query_scalar(
        "SELECT details FROM audit_log WHERE org_id = $1 AND action = $2 AND target = $3 ORDER BY at DESC LIMIT 1",
    )
    .bind(org.as_uuid())
    .bind(FLEET_ACTION)
    .bind(FLEET_VERSION)
    .fetch_optional(tx.conn())
    .await?;
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
    let depts = upsert_named(
        &mut tx,
        "INSERT INTO departments (org_id, department_id, name, created_at)
         SELECT $1, u.id, u.name, $4 FROM unnest($2::uuid[], $3::text[]) AS u(id, name) ON CONFLICT DO NOTHING",
        "SELECT name, department_id FROM departments WHERE org_id = $1 AND name = ANY($2)",
        o,
        (0..world.departments.len()).map(dept_id).collect(),
        world.departments.iter().map(|d| d.to_string()).collect(),
        epoch,
    )
    .await?;
    let dept_of: Vec<Uuid> = world.departments.iter().map(|d| depts.get(*d).copied().unwrap_or_default()).collect();
    sqlx::query(
        "INSERT INTO tenants (org_id, tenant_id, department_id, name, created_at)
         SELECT $1, u.id, u.dept, u.name, $5 FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS u(id, dept, name)
         ON CONFLICT DO NOTHING",
    )
    .bind(o)
    .bind((0..world.tenants.len()).map(tenant_id).collect::<Vec<_>>())
    .bind(world.tenants.iter().map(|t| dept_of[t.dept]).collect::<Vec<_>>())
    .bind(world.tenants.iter().map(|t| t.name.clone()).collect::<Vec<_>>())
    .bind(epoch)
    .execute(tx.conn())
    .await?;
    let tenant_rows: Vec<(String, Uuid, Uuid)> =
        sqlx::query_as("SELECT name, tenant_id, department_id FROM tenants WHERE org_id = $1 AND name = ANY($2)")
            .bind(o)
            .bind(world.tenants.iter().map(|t| t.name.clone()).collect::<Vec<_>>())
            .fetch_all(tx.conn())
            .await?;
    let by_name: HashMap<String, (Uuid, Uuid)> = tenant_rows.into_iter().map(|(n, t, d)| (n, (t, d))).collect();
    // (tenant ID, its department) per tenant index.
    let tenant_of: Vec<(Uuid, Uuid)> =
        world.tenants.iter().map(|t| by_name.get(&t.name).copied().unwrap_or_default()).collect();
    loaded.tenants = tenant_of.len() as u64;
    let clusters = upsert_named(
        &mut tx,
        "INSERT INTO clusters (org_id, cluster_id, name, created_at)
         SELECT $1, u.id, u.name, $4 FROM unnest($2::uuid[], $3::text[]) AS u(id, name) ON CONFLICT DO NOTHING",
        "SELECT name, cluster_id FROM clusters WHERE org_id = $1 AND name = ANY($2)",
        o,
        (0..CLUSTERS.len()).map(cluster_id).collect(),
        CLUSTERS.iter().map(|c| c.to_string()).collect(),
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
        let mut cols: (Vec<Uuid>, Vec<String>, Vec<String>, Vec<String>, Vec<i64>, Vec<bool>, Vec<String>) =
            Default::default();
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
        sqlx::query(
            "INSERT INTO devices (org_id, cluster_id, gpu_uuid, valid_from, node, model, memory_mib, mig_enabled,
                                  mig_devices, vgpu_profile)
             SELECT $1, u.c, u.g, $2, u.n, u.m, u.mem, u.mig, u.migs::jsonb, u.vgpu
               FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bool[], $9::text[],
                           $10::text[]) AS u(c, g, n, m, mem, mig, migs, vgpu)",
        )
        .bind(o)
        .bind(epoch)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .bind(&cols.5)
        .bind(&cols.6)
        .bind(&vgpu)
        .execute(tx.conn())
        .await?;
        loaded.gpus += chunk.len() as u64;
    }
    {
        let n = world.nodes.len();
        let mut cols: (Vec<Uuid>, Vec<String>, Vec<Uuid>, Vec<String>) = Default::default();
        let mut strategy: (Vec<Option<String>>, Vec<Option<String>>, Vec<Option<i32>>) = Default::default();
        for (i, node) in world.nodes.iter().enumerate() {
            cols.0.push(cluster_of[node.cluster]);
            cols.1.push(node_name(i as u32));
            cols.2.push(Uuid::from_u128(NODE_BASE | i as u128));
            cols.3.push(CLASSES[node.class].model.replace(' ', "-"));
            strategy.0.push((node.mode == Mode::Mig).then(|| "mixed".to_string()));
            strategy.1.push((node.mode == Mode::TimeSlice).then(|| "time-slicing".to_string()));
            strategy.2.push((node.mode == Mode::TimeSlice).then_some(4));
        }
        sqlx::query(
            "INSERT INTO nodes (org_id, cluster_id, name, valid_from, node_uid, gpu_product, gpu_count, mig_strategy,
                                sharing_strategy, replicas)
             SELECT $1, u.c, u.n, $2, u.uid, u.p, 8, u.mig, u.s, u.r
               FROM unnest($3::uuid[], $4::text[], $5::uuid[], $6::text[], $7::text[], $8::text[], $9::int[])
                 AS u(c, n, uid, p, mig, s, r)",
        )
        .bind(o)
        .bind(epoch)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&strategy.0)
        .bind(&strategy.1)
        .bind(&strategy.2)
        .execute(tx.conn())
        .await?;
        tracing::debug!(nodes = n, "fleet nodes written");
    }

    tracing::info!("{label}: namespaces, owners, quotas…");
    sqlx::query(
        "INSERT INTO namespaces (org_id, namespace_uid, cluster_id, name, created_at)
         SELECT $1, u.id, u.c, u.n, $5 FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS u(id, c, n)",
    )
    .bind(o)
    .bind((0..world.namespaces.len()).map(ns_id).collect::<Vec<_>>())
    .bind(world.namespaces.iter().map(|n| cluster_of[n.cluster]).collect::<Vec<_>>())
    .bind(world.namespaces.iter().map(|n| n.name.clone()).collect::<Vec<_>>())
    .bind(epoch)
    .execute(tx.conn())
    .await?;
    {
        let mut cols: (Vec<Uuid>, Vec<OffsetDateTime>, Vec<Option<OffsetDateTime>>, Vec<Uuid>) = Default::default();
        for (i, ns) in world.namespaces.iter().enumerate() {
            for ow in &ns.owners {
                cols.0.push(ns_id(i));
                cols.1.push(at(ow.from));
                cols.2.push(ow.to.map(at));
                cols.3.push(tenant_of[ow.tenant as usize].0);
            }
        }
        sqlx::query(
            "INSERT INTO namespace_ownership (org_id, namespace_uid, valid_from, valid_to, tenant_id, source)
             SELECT $1, u.ns, u.f, u.t, u.tenant, 'label'
               FROM unnest($2::uuid[], $3::timestamptz[], $4::timestamptz[], $5::uuid[]) AS u(ns, f, t, tenant)",
        )
        .bind(o)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .execute(tx.conn())
        .await?;
    }
    {
        let mut cols: (Vec<Uuid>, Vec<Option<Uuid>>, Vec<Option<Uuid>>, Vec<Uuid>, Vec<String>, Vec<String>) =
            Default::default();
        let mut times: (Vec<OffsetDateTime>, Vec<Option<OffsetDateTime>>) = Default::default();
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
        sqlx::query(
            "INSERT INTO quotas (org_id, quota_id, tenant_id, department_id, scope_department_id, gpu_class, gpus,
                                 valid_from, valid_to, source, created_by)
             SELECT $1, u.id, u.t, u.d, u.s, u.c, u.g::numeric, u.f, u.e, 'admin', $10
               FROM unnest($2::uuid[], $3::uuid[], $4::uuid[], $5::uuid[], $6::text[], $7::text[], $8::timestamptz[],
                           $9::timestamptz[]) AS u(id, t, d, s, c, g, f, e)",
        )
        .bind(o)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .bind(&cols.5)
        .bind(&times.0)
        .bind(&times.1)
        .bind(actor)
        .execute(tx.conn())
        .await?;
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
    sqlx::query(
        "INSERT INTO audit_log (org_id, audit_id, actor, action, target, reason, details)
         VALUES ($1, $2, $3, $4, $5, 'synthetic demo fleet', $6)",
    )
    .bind(o)
    .bind(Uuid::new_v4())
    .bind(actor)
    .bind(FLEET_ACTION)
    .bind(FLEET_VERSION)
    .bind(json!({
        "gpus": spec.gpus, "seed": spec.seed, "start": fmt(spec.start), "through": fmt(spec.through),
        "window_hours": spec.window_h, "loaded": loaded,
    }))
    .execute(tx.conn())
    .await?;
    tracing::info!("{label}: committing…");
    tx.commit().await?;
    Ok(loaded)
}

/// Inserts named rows (IDs, names) that may exist already under another ID, and returns every name's ID.
#[allow(clippy::too_many_arguments)]
async fn upsert_named(
    tx: &mut OrgTx,
    insert: &str,
    select: &str,
    org: Uuid,
    ids: Vec<Uuid>,
    names: Vec<String>,
    epoch: OffsetDateTime,
) -> Result<HashMap<String, Uuid>, DbError> {
    sqlx::query(insert).bind(org).bind(&ids).bind(&names).bind(epoch).execute(tx.conn()).await?;
    let rows: Vec<(String, Uuid)> = sqlx::query_as(select).bind(org).bind(&names).fetch_all(tx.conn()).await?;
    Ok(rows.into_iter().collect())
}

/// The approved inventory the fleet needs (the demo's catalog; kept where it exists), and the time-slicing policy
/// on every cluster.
async fn insert_catalog(tx: &mut OrgTx, o: Uuid, clusters: &[Uuid]) -> Result<(), DbError> {
    for (class, description, models) in CATALOG {
        sqlx::query(
            "INSERT INTO gpu_classes (org_id, gpu_class, description) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(class)
        .bind(description)
        .execute(tx.conn())
        .await?;
        for (model, memory) in models {
            sqlx::query(
                "INSERT INTO gpu_models (org_id, model, valid_from, gpu_class, memory_mib) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT DO NOTHING",
            )
            .bind(o)
            .bind(model)
            .bind(CATALOG_SINCE)
            .bind(class)
            .bind(memory)
            .execute(tx.conn())
            .await?;
        }
    }
    for (model, profile, num, den) in MIG_PROFILES {
        sqlx::query(
            "INSERT INTO mig_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(model)
        .bind(profile)
        .bind(CATALOG_SINCE)
        .bind(num)
        .bind(den)
        .execute(tx.conn())
        .await?;
    }
    for (profile, num, den) in VGPU_PROFILES {
        sqlx::query(
            "INSERT INTO vgpu_profiles (org_id, model, profile, valid_from, fraction_num, fraction_den)
             VALUES ($1, 'Tesla T4', $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(profile)
        .bind(CATALOG_SINCE)
        .bind(num)
        .bind(den)
        .execute(tx.conn())
        .await?;
    }
    for c in clusters {
        sqlx::query(
            "INSERT INTO timeslice_policies (org_id, cluster_id, name, valid_from, replicas)
             VALUES ($1, $2, 'l4-time-slicing', $3, 4) ON CONFLICT DO NOTHING",
        )
        .bind(o)
        .bind(c)
        .bind(CATALOG_SINCE)
        .execute(tx.conn())
        .await?;
    }
    Ok(())
}

#[derive(Default)]
struct AllocCols {
    cluster: Vec<Uuid>,
    id: Vec<String>,
    kind: Vec<&'static str>,
    uid: Vec<Uuid>,
    name: Vec<String>,
    namespace: Vec<String>,
    ns_uid: Vec<Uuid>,
    container: Vec<Option<&'static str>>,
    node: Vec<String>,
    resource: Vec<String>,
    units: Vec<i32>,
    devices: Vec<String>,
    model: Vec<&'static str>,
    class: Vec<&'static str>,
    mode: Vec<&'static str>,
    profile: Vec<Option<&'static str>>,
    replicas: Vec<Option<i32>>,
    num: Vec<i64>,
    den: Vec<i64>,
    start: Vec<OffsetDateTime>,
    end: Vec<Option<OffsetDateTime>>,
    estimated: Vec<bool>,
    confidence: Vec<&'static str>,
    endpoint: Vec<Option<&'static str>>,
}

async fn insert_allocations(
    tx: &mut OrgTx,
    o: Uuid,
    w: &World,
    cluster_of: &[Uuid],
    first: usize,
    jobs: &[Job],
) -> Result<(), DbError> {
    let mut c = AllocCols::default();
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
    sqlx::query(
        "INSERT INTO allocation_intervals (org_id, cluster_id, allocation_id, holder_kind, holder_uid, holder_name,
             namespace, namespace_uid, container, node, resource, units, device_ids, gpu_model, gpu_class,
             sharing_mode, profile, replicas, fraction_num, fraction_den, started_at, ended_at, end_estimated,
             confidence, labels)
         SELECT $1, u.cluster, u.id, u.kind, u.uid, u.name, u.ns, u.ns_uid, u.container, u.node, u.resource, u.units,
                string_to_array(u.devices, ','), u.model, u.class, u.mode, u.profile, u.replicas, u.num, u.den,
                u.s, u.e, u.estimated, u.confidence,
                CASE WHEN u.endpoint IS NULL THEN '{}'::jsonb
                     ELSE jsonb_build_object('endpoint', u.endpoint, 'model', $26::text) END
           FROM unnest($2::uuid[], $3::text[], $4::text[], $5::uuid[], $6::text[], $7::text[], $8::uuid[], $9::text[],
                       $10::text[], $11::text[], $12::int[], $13::text[], $14::text[], $15::text[], $16::text[],
                       $17::text[], $18::int[], $19::bigint[], $20::bigint[], $21::timestamptz[], $22::timestamptz[],
                       $23::bool[], $24::text[], $25::text[])
             AS u(cluster, id, kind, uid, name, ns, ns_uid, container, node, resource, units, devices, model, class,
                  mode, profile, replicas, num, den, s, e, estimated, confidence, endpoint)",
    )
    .bind(o)
    .bind(&c.cluster)
    .bind(&c.id)
    .bind(&c.kind)
    .bind(&c.uid)
    .bind(&c.name)
    .bind(&c.namespace)
    .bind(&c.ns_uid)
    .bind(&c.container)
    .bind(&c.node)
    .bind(&c.resource)
    .bind(&c.units)
    .bind(&c.devices)
    .bind(&c.model)
    .bind(&c.class)
    .bind(&c.mode)
    .bind(&c.profile)
    .bind(&c.replicas)
    .bind(&c.num)
    .bind(&c.den)
    .bind(&c.start)
    .bind(&c.end)
    .bind(&c.estimated)
    .bind(&c.confidence)
    .bind(&c.endpoint)
    .bind(MODELS[0])
    .execute(tx.conn())
    .await?;
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
        let mut cols: (Vec<&str>, Vec<String>, Vec<Uuid>, Vec<OffsetDateTime>, Vec<OffsetDateTime>) =
            Default::default();
        let mut nums: (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>) = Default::default();
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
        sqlx::query(
            "INSERT INTO service_usage (org_id, cluster_id, endpoint, model, tenant_name, tenant_id, window_start,
                                        window_end, requests, input_tokens, output_tokens, ttft_ms_sum, ttft_count)
             SELECT $1, $2, $3, u.m, u.tn, u.t, u.s, u.e, u.r, u.i, u.o, u.ttft, u.r
               FROM unnest($4::text[], $5::text[], $6::uuid[], $7::timestamptz[], $8::timestamptz[], $9::bigint[],
                           $10::bigint[], $11::bigint[], $12::bigint[]) AS u(m, tn, t, s, e, r, i, o, ttft)",
        )
        .bind(o)
        .bind(cluster)
        .bind(ENDPOINT)
        .bind(&cols.0)
        .bind(&cols.1)
        .bind(&cols.2)
        .bind(&cols.3)
        .bind(&cols.4)
        .bind(&nums.0)
        .bind(&nums.1)
        .bind(&nums.2)
        .bind(&nums.3)
        .execute(tx.conn())
        .await?;
    }
    let mut cols: (Vec<&str>, Vec<String>, Vec<OffsetDateTime>, Vec<OffsetDateTime>) = Default::default();
    let mut nums: (Vec<i64>, Vec<i64>, Vec<i64>) = Default::default();
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
        sqlx::query(
            "INSERT INTO endpoint_totals (org_id, cluster_id, endpoint, model, server, pod, window_start, window_end,
                                          requests, input_tokens, output_tokens)
             SELECT $1, $2, $3, u.m, 'vllm', u.p, u.s, u.e, u.r, u.i, u.o
               FROM unnest($4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::bigint[], $9::bigint[],
                           $10::bigint[]) AS u(m, p, s, e, r, i, o)",
        )
        .bind(o)
        .bind(cluster)
        .bind(ENDPOINT)
        .bind(&cols.0[r.clone()])
        .bind(&cols.1[r.clone()])
        .bind(&cols.2[r.clone()])
        .bind(&cols.3[r.clone()])
        .bind(&nums.0[r.clone()])
        .bind(&nums.1[r.clone()])
        .bind(&nums.2[r])
        .execute(tx.conn())
        .await?;
    }
    Ok(w.usage.len() as u64)
}
