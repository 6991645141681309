//! [`World::generate`]: the fleet planned from its spec (pure: no I/O, no clock).

use super::*;

impl World {
    /// Generates the fleet of `spec`.
    pub fn generate(spec: FleetSpec) -> Self {
        let mut rng = StdRng::seed_from_u64(spec.seed);
        let (p_start, p_end) = (unix(spec.start), unix(spec.through));
        let n_tenants = (spec.gpus / 20).clamp(12, 500);
        let n_depts = (n_tenants / 10).clamp(3, DEPARTMENTS.len());
        let departments = DEPARTMENTS[..n_depts].to_vec();
        // Tenants: popularity follows a Zipf-like law over a shuffled rank; each has a primary GPU class.
        let mut ranks: Vec<usize> = (0..n_tenants).collect();
        ranks.shuffle(&mut rng);
        let tenants: Vec<TenantDef> = (0..n_tenants)
            .map(|t| {
                let (name, dept) = match NAMED_TENANTS.get(t) {
                    Some((name, dept)) => ((*name).to_string(), *dept),
                    None => (format!("{}-{t:03}", slug(departments[t % n_depts])), t % n_depts),
                };
                // Research is the largest consumer, as on most GPU platforms (its manager sees a real share).
                let boost = if dept == 0 { 2.5 } else { 1.0 };
                TenantDef {
                    name,
                    dept,
                    primary: pick_class(&mut rng),
                    weight: boost / ((ranks[t] + 1) as f64).powf(0.8),
                }
            })
            .collect();

        // Nodes of 8 GPUs; the first 1 % serve the shared endpoint (H100, one GPU per pod); the next four are one
        // of each other sharing mode, so that even the smallest fleet has them all.
        let n_nodes = spec.gpus / 8;
        let endpoint_nodes = (n_nodes / 100).max(1);
        let forced = [(1, Mode::Mig), (3, Mode::TimeSlice), (4, Mode::Vgpu), (4, Mode::Passthrough)];
        let mut nodes = Vec::with_capacity(n_nodes);
        let mut migs = Vec::new();
        let mut lanes = Vec::new();
        for n in 0..n_nodes {
            let endpoint = n < endpoint_nodes;
            let (class, mode) = if endpoint {
                (0, Mode::Exclusive)
            } else if let Some(f) = forced.get(n - endpoint_nodes) {
                *f
            } else {
                pick_node(&mut rng)
            };
            let vgpu = (mode == Mode::Vgpu).then(|| rng.random_range(0..VGPU_TYPES.len()));
            nodes.push(Node { class, mode, cluster: n % CLUSTERS.len(), vgpu });
            let first = (n * 8) as u32;
            let lane = |gpus: Vec<u32>, mig: Option<u32>, replica: u8, num: i64, den: i64| Lane {
                node: n as u32,
                mode,
                gpus,
                mig,
                replica,
                num,
                den,
                endpoint,
            };
            match mode {
                Mode::Exclusive | Mode::Passthrough => {
                    // Whole GPUs: the node runs jobs of 1, 2, 4 or 8 GPUs (one size per node; VMs get 1 to 4).
                    let k = match (endpoint, mode) {
                        (true, _) => 1,
                        (_, Mode::Passthrough) => [1u32, 2, 4][rng.random_range(0..3)],
                        _ => [1u32, 2, 4, 8][rng.random_range(0..4)],
                    };
                    for l in 0..8 / k {
                        lanes.push(lane((first + l * k..first + (l + 1) * k).collect(), None, 0, i64::from(k), 1));
                    }
                }
                Mode::Mig => {
                    let layouts = mig_layouts(class);
                    for g in first..first + 8 {
                        let layout = layouts[rng.random_range(0..layouts.len())];
                        for (gi, &slices) in layout.iter().enumerate() {
                            let m = migs.len() as u32;
                            migs.push(MigInstance { gpu: g, slices, gi: gi as u8 + 1 });
                            lanes.push(lane(vec![g], Some(m), 0, i64::from(slices), 7));
                        }
                    }
                }
                Mode::TimeSlice => {
                    for g in first..first + 8 {
                        for r in 0..4 {
                            lanes.push(lane(vec![g], None, r, 1, 4));
                        }
                    }
                }
                Mode::Vgpu => {
                    let per_board = VGPU_TYPES[vgpu.unwrap_or(0)].1;
                    for g in first..first + 8 {
                        for _ in 0..per_board {
                            lanes.push(lane(vec![g], None, 0, 1, per_board));
                        }
                    }
                }
            }
        }

        // Namespaces: 1–2 per tenant and cluster, a few nobody owns, one for the shared endpoint.
        let mut namespaces = Vec::new();
        let epoch = unix(spec.epoch());
        for (t, td) in tenants.iter().enumerate() {
            for cluster in 0..CLUSTERS.len() {
                let n = 1 + usize::from(rng.random_bool(0.4));
                for k in 0..n {
                    namespaces.push(Namespace {
                        cluster,
                        name: format!("{}-{k}", td.name),
                        owners: vec![Owner { from: epoch, to: None, tenant: t as u16 }],
                    });
                }
            }
        }
        let owned = namespaces.len();
        let unowned_namespaces = 2 * CLUSTERS.len();
        for i in 0..unowned_namespaces {
            namespaces.push(Namespace {
                cluster: i % CLUSTERS.len(),
                name: format!("scratch-{i}"),
                owners: Vec::new(),
            });
        }
        let endpoint_ns = namespaces.len() as u32;
        namespaces.push(Namespace {
            cluster: 0,
            name: "llm-serving".into(),
            owners: vec![Owner { from: epoch, to: None, tenant: ENDPOINT_OWNER }],
        });
        // A few namespaces change owner during the first month (allocations across the change are split).
        let ownership_changes = (owned / 20).min(20);
        let span = (p_end - p_start).clamp(2 * 86_400, 30 * 86_400);
        let mut changed = 0;
        while changed < ownership_changes {
            let ns = rng.random_range(0..owned);
            if namespaces[ns].owners.len() > 1 {
                continue;
            }
            let old = namespaces[ns].owners[0].tenant;
            let new = loop {
                let t = rng.random_range(0..n_tenants) as u16;
                if t != old {
                    break t;
                }
            };
            let when = p_start + rng.random_range(span / 10..span * 9 / 10);
            namespaces[ns].owners[0].to = Some(when);
            namespaces[ns].owners.push(Owner { from: when, to: None, tenant: new });
            changed += 1;
        }

        // Where a job on (class, cluster) runs: tenants mostly use their primary class.
        let mut tables: Vec<(Vec<f64>, Vec<u32>)> = Vec::new();
        for class in 0..CLASSES.len() {
            for cluster in 0..CLUSTERS.len() {
                let mut per_tenant_ns: HashMap<u16, usize> = HashMap::new();
                for ns in &namespaces[..owned] {
                    if ns.cluster == cluster {
                        *per_tenant_ns.entry(ns.owners[0].tenant).or_default() += 1;
                    }
                }
                let (mut cum, mut ids, mut acc) = (Vec::new(), Vec::new(), 0.0);
                for (i, ns) in namespaces[..owned].iter().enumerate() {
                    if ns.cluster != cluster {
                        continue;
                    }
                    let t = ns.owners[0].tenant;
                    let td = &tenants[t as usize];
                    let affinity = if td.primary == class { 1.0 } else { 0.06 };
                    acc += td.weight * affinity / per_tenant_ns[&t] as f64;
                    cum.push(acc);
                    ids.push(i as u32);
                }
                let scratch = acc * 0.001;
                for (i, ns) in namespaces.iter().enumerate().skip(owned).take(unowned_namespaces) {
                    if ns.cluster == cluster {
                        acc += scratch;
                        cum.push(acc);
                        ids.push(i as u32);
                    }
                }
                tables.push((cum, ids));
            }
        }

        // Jobs: each lane runs jobs back to back with gaps, from before the first month up to `through`; those
        // still running then have no end yet.
        let mut jobs = Vec::new();
        for (l, lane) in lanes.iter().enumerate() {
            let node = &nodes[lane.node as usize];
            let (cum, ids) = &tables[node.class * CLUSTERS.len() + node.cluster];
            let mut t = p_start - LEAD_S + rng.random_range(0..43_200);
            loop {
                let gap = if lane.endpoint { rng.random_range(0..1_800) } else { rng.random_range(0..=GAP_MAX_S) };
                let start = t + gap;
                if start >= p_end {
                    break;
                }
                let dur = if lane.endpoint { rng.random_range(2 * 86_400..10 * 86_400) } else { duration(&mut rng) };
                let end = start + dur.max(60);
                let open = end > p_end;
                let ns = if lane.endpoint {
                    endpoint_ns
                } else {
                    let x = rng.random::<f64>() * cum[cum.len() - 1];
                    ids[cum.partition_point(|c| *c <= x).min(ids.len() - 1)]
                };
                let estimated = !open && rng.random_bool(0.01);
                jobs.push(Job { lane: l as u32, ns, start, end: (!open).then_some(end), estimated });
                if open {
                    break;
                }
                t = end;
            }
        }

        let mut world = World {
            spec,
            departments,
            tenants,
            nodes,
            migs,
            lanes,
            jobs,
            namespaces,
            ownership_changes,
            unowned_namespaces,
            quotas: Vec::new(),
            usage: Vec::new(),
            usage_tenants: 0,
        };
        world.quotas = world.plan_quotas(&mut rng);
        world.plan_usage(&mut rng);
        world
    }

    /// Quotas sized from what each tenant actually holds: most tenants have one on their primary class (some
    /// change during the first month), some a second one; tenants of some departments without their own quota
    /// share a department quota.
    fn plan_quotas(&self, rng: &mut StdRng) -> Vec<QuotaDef> {
        let (p_start, p_end) = (unix(self.spec.start), unix(self.spec.through));
        let n_tenants = self.tenants.len();
        let mut held = vec![[0.0_f64; CLASSES.len()]; n_tenants];
        for j in &self.jobs {
            let lane = &self.lanes[j.lane as usize];
            if lane.endpoint {
                continue;
            }
            let class = self.nodes[lane.node as usize].class;
            let (s, e) = (j.start.max(p_start), j.end.unwrap_or(p_end).min(p_end));
            if let Some(o) = self.namespaces[j.ns as usize].owners.first()
                && e > s
            {
                held[o.tenant as usize][class] += (e - s) as f64 * lane.num as f64 / lane.den as f64;
            }
        }
        let span = (p_end - p_start).max(1) as f64;
        let epoch = unix(self.spec.epoch());
        let mut quotas = Vec::new();
        let mut has_quota = vec![[false; CLASSES.len()]; n_tenants];
        for t in 0..n_tenants {
            if !rng.random_bool(0.8) {
                continue;
            }
            let class = self.tenants[t].primary;
            let gpus = held[t][class] / span * rng.random_range(0.5..1.1);
            has_quota[t][class] = true;
            if rng.random_bool(0.1) {
                let when = p_start + rng.random_range((p_end - p_start) / 6..(p_end - p_start).max(7) * 5 / 6);
                quotas.push(QuotaDef {
                    holder: Holder::Tenant(t as u16),
                    class,
                    gpus: quarters(gpus),
                    from: epoch,
                    to: Some(when),
                });
                let later = gpus * rng.random_range(0.7..1.4);
                quotas.push(QuotaDef {
                    holder: Holder::Tenant(t as u16),
                    class,
                    gpus: quarters(later),
                    from: when,
                    to: None,
                });
            } else {
                quotas.push(QuotaDef {
                    holder: Holder::Tenant(t as u16),
                    class,
                    gpus: quarters(gpus),
                    from: epoch,
                    to: None,
                });
            }
            if rng.random_bool(0.15) {
                let second = (0..CLASSES.len())
                    .filter(|c| *c != class)
                    .max_by(|a, b| held[t][*a].total_cmp(&held[t][*b]))
                    .unwrap_or((class + 1) % CLASSES.len());
                let gpus = held[t][second] / span * rng.random_range(0.5..1.1);
                has_quota[t][second] = true;
                quotas.push(QuotaDef {
                    holder: Holder::Tenant(t as u16),
                    class: second,
                    gpus: quarters(gpus),
                    from: epoch,
                    to: None,
                });
            }
        }
        for d in (0..self.departments.len()).filter(|d| d % 5 < 2) {
            let pooled = |c: usize| -> f64 {
                (0..n_tenants)
                    .filter(|t| self.tenants[*t].dept == d && !has_quota[*t][c])
                    .map(|t| held[t][c])
                    .sum::<f64>()
            };
            let Some(class) = (0..CLASSES.len()).max_by(|a, b| pooled(*a).total_cmp(&pooled(*b))) else { continue };
            let avg = pooled(class) / span;
            if avg > 0.0 {
                quotas.push(QuotaDef {
                    holder: Holder::Dept(d as u16),
                    class,
                    gpus: quarters(avg * 0.8),
                    from: epoch,
                    to: None,
                });
            }
        }
        quotas
    }

    /// Shared-endpoint usage: up to 50 tenants, hourly windows, one or two models each.
    fn plan_usage(&mut self, rng: &mut StdRng) {
        let n_tenants = self.tenants.len();
        let mut users: Vec<u16> = (0..n_tenants as u16).filter(|t| *t != ENDPOINT_OWNER).collect();
        users.shuffle(rng);
        users.truncate((n_tenants / 4).clamp(3, 50));
        users.sort_unstable();
        self.usage_tenants = users.len();
        let hours = self.hours();
        for &t in &users {
            let x: f64 = rng.random();
            let models: &[&'static str] = if x < 0.7 {
                &MODELS[..1]
            } else if x < 0.9 {
                &MODELS[1..]
            } else {
                &MODELS[..]
            };
            let scale = rng.random_range(20..600u64);
            for hour in 0..hours {
                for &model in models {
                    let requests = rng.random_range(1..=scale);
                    self.usage.push(UsageRow {
                        tenant: t,
                        model,
                        hour,
                        requests,
                        input: requests * rng.random_range(300..2_000u64),
                        output: requests * rng.random_range(50..600u64),
                    });
                }
            }
        }
    }

    /// Whole hours from the start to `through`.
    pub fn hours(&self) -> u32 {
        u32::try_from((unix(self.spec.through) - unix(self.spec.start)).max(0) / 3_600).unwrap_or(0)
    }

    /// Whole telemetry windows from the start to `through` (a window still in progress is not reported yet).
    pub fn windows(&self) -> u32 {
        let w = self.spec.window_h * 3_600;
        u32::try_from((unix(self.spec.through) - unix(self.spec.start)).max(0) / w).unwrap_or(0)
    }

    /// The class of a lane.
    pub fn class_of(&self, lane: &Lane) -> &'static ClassDef {
        &CLASSES[self.nodes[lane.node as usize].class]
    }

    /// The job split at ownership changes, as `ledger::load_allocations` splits it: one part per ownership row that
    /// overlaps it (ordered by `valid_from`), or one part with no tenant.
    pub fn parts(&self, j: &Job) -> Vec<(Option<u16>, i64, Option<i64>)> {
        let owners: Vec<&Owner> = self.namespaces[j.ns as usize]
            .owners
            .iter()
            .filter(|o| o.from < j.end.unwrap_or(i64::MAX) && j.start < o.to.unwrap_or(i64::MAX))
            .collect();
        if owners.is_empty() {
            return vec![(None, j.start, j.end)];
        }
        owners
            .into_iter()
            .map(|o| {
                let e = match (j.end, o.to) {
                    (Some(e), Some(ot)) => Some(e.min(ot)),
                    (Some(e), None) => Some(e),
                    (None, ot) => ot,
                };
                (Some(o.tenant), j.start.max(o.from), e)
            })
            .collect()
    }

    /// The device-plugin resource a lane's jobs request.
    pub fn resource(&self, lane: &Lane) -> String {
        let node = &self.nodes[lane.node as usize];
        match lane.mode {
            Mode::Exclusive | Mode::TimeSlice => "nvidia.com/gpu".into(),
            Mode::Mig => format!("nvidia.com/mig-{}", self.profile(lane).unwrap_or_default()),
            Mode::Vgpu => format!("nvidia.com/{}", VGPU_TYPES[node.vgpu.unwrap_or(0)].0),
            Mode::Passthrough => format!("nvidia.com/{}", CLASSES[node.class].pci_device),
        }
    }

    /// The MIG or vGPU profile of a lane.
    pub fn profile(&self, lane: &Lane) -> Option<&'static str> {
        let node = &self.nodes[lane.node as usize];
        match lane.mode {
            Mode::Mig => lane.mig.map(|m| mig_profile(node.class, self.migs[m as usize].slices)),
            Mode::Vgpu => Some(VGPU_TYPES[node.vgpu.unwrap_or(0)].0),
            _ => None,
        }
    }

    /// Job `idx`'s allocation ID, as the agents make it (`UID/container/resource` for pods, `UID/resource` for VMs).
    pub fn allocation_id(&self, idx: usize, lane: &Lane) -> String {
        match lane.mode {
            Mode::Vgpu | Mode::Passthrough => format!("{}/{}", job_uid(idx), self.resource(lane)),
            _ => format!("{}/main/{}", job_uid(idx), self.resource(lane)),
        }
    }

    /// The devices an allocation names: GPU UUIDs, a MIG instance, or a time-slice replica (`UUID::N`).
    pub fn device_ids(&self, lane: &Lane) -> Vec<String> {
        match (lane.mode, lane.mig) {
            (Mode::Mig, Some(m)) => vec![mig_uuid(m)],
            (Mode::TimeSlice, _) => lane.gpus.iter().map(|g| format!("{}::{}", gpu_uuid(*g), lane.replica)).collect(),
            _ => lane.gpus.iter().map(|g| gpu_uuid(*g)).collect(),
        }
    }

    /// How sure the fraction is: modeled for time-slicing, estimated where the end was inferred.
    pub fn confidence(lane: &Lane, j: &Job) -> &'static str {
        if j.estimated {
            "estimated"
        } else if lane.mode == Mode::TimeSlice {
            "modeled"
        } else {
            "exact"
        }
    }

    /// Share of each GPU held in each telemetry window (GPU-major), from the jobs.
    pub fn occupancy(&self) -> Vec<f32> {
        self.occupancy_per(self.spec.window_h * 3_600, self.windows() as usize)
    }

    /// Share of each GPU held in each hour (GPU-major), from the jobs.
    pub fn occupancy_hourly(&self) -> Vec<f32> {
        self.occupancy_per(3_600, self.hours() as usize)
    }

    fn occupancy_per(&self, w: i64, windows: usize) -> Vec<f32> {
        let start = unix(self.spec.start);
        let mut occ = vec![0.0_f32; self.spec.gpus * windows];
        if windows == 0 {
            return occ;
        }
        for j in &self.jobs {
            let lane = &self.lanes[j.lane as usize];
            let per_gpu = lane.num as f64 / lane.den as f64 / lane.gpus.len() as f64;
            let (s, e) = (j.start.max(start), j.end.unwrap_or(i64::MAX).min(start + w * windows as i64));
            if e <= s {
                continue;
            }
            let (first, last) = (((s - start) / w) as usize, ((e - 1 - start) / w) as usize);
            for win in first..=last.min(windows - 1) {
                let (ws, we) = (start + win as i64 * w, start + (win as i64 + 1) * w);
                let overlap = (e.min(we) - s.max(ws)) as f64 / w as f64;
                for g in &lane.gpus {
                    occ[*g as usize * windows + win] += (overlap * per_gpu) as f32;
                }
            }
        }
        occ
    }

    /// Utilization (%) of GPU `g` in window `w` held to `occupancy`: busy work varies by job and hour, and some of
    /// what is held sits idle (hung jobs, notebooks left open).
    pub fn utilization(&self, g: u32, w: u32, occupancy: f32) -> f32 {
        let x = unit((u64::from(g) << 24) ^ u64::from(w) ^ self.spec.seed);
        let busy = if x < 0.08 { 0.02 } else { 0.35 + 0.6 * x };
        (f64::from(occupancy.min(1.0)) * busy * 100.0) as f32
    }

    /// Average power (W) of GPU `g` at utilization `util` (%).
    pub fn power(&self, g: u32, util: f32) -> f64 {
        let c = &CLASSES[self.nodes[(g / 8) as usize].class];
        c.idle_w + (c.busy_w - c.idle_w) * f64::from(util) / 100.0
    }

    /// Whole joules GPU `g` used in window `win`, held to `occupancy`.
    pub fn energy_j(&self, g: u32, win: u32, occupancy: f32) -> f64 {
        let power = self.power(g, self.utilization(g, win, occupancy));
        (power * (self.spec.window_h * 3_600) as f64).round()
    }

    /// What the endpoint's model servers counted, per hour, model and pod: the tenants' usage split over a few
    /// pods, 2 % more in all (requests nobody could attribute).
    pub fn endpoint_totals(&self) -> Vec<EndpointTotalRow> {
        let mut totals: BTreeMap<(u32, &'static str), (u64, u64, u64)> = BTreeMap::new();
        for u in &self.usage {
            let t = totals.entry((u.hour, u.model)).or_default();
            t.0 += u.requests;
            t.1 += u.input;
            t.2 += u.output;
        }
        let pods = self.lanes.iter().filter(|l| l.endpoint).count().clamp(1, 4) as u64;
        let mut out = Vec::with_capacity(totals.len() * pods as usize);
        for ((hour, model), (r, i, o)) in totals {
            for pod in 0..pods {
                let share = |v: u64| v * 102 / 100 / pods + u64::from(pod == 0) * (v * 102 / 100 % pods);
                out.push(EndpointTotalRow {
                    hour,
                    model,
                    pod: pod as u32,
                    requests: share(r),
                    input: share(i),
                    output: share(o),
                });
            }
        }
        out
    }
}
