//! One run of a seed's scenario: the real server (`gpuledger-server demo` on its own database, cloned from the
//! seed's prepared one so both runs share organization, tenants and tokens), the real `cluster` agent against the
//! stand-in API server, the real `node` agent on simulated GPUs, both through the [`Proxy`] — with the fault
//! schedule, or without one (the reference).

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::OpenOptions,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{
    faults::{Fault, Schedule, Scheduled},
    pg::Postgres,
    proxy::{Acked, Mode, Proxy},
    rng::Rng,
    scenario::{Scenario, rfc3339},
};
use crate::{fake_kube::FakeKube, is_root, process::free_port};

/// The cluster's name (the agent token's scope).
const CLUSTER: &str = "chaos";
/// Bound on `/readyz` after the faults stop.
const READY_BOUND: Duration = Duration::from_secs(60);
/// Bound on delivering every fact the cluster holds after the faults stop.
const DRAIN_BOUND: Duration = Duration::from_secs(240);

/// What the seed's runs share: a database with the organization, tenants and tokens, to clone.
pub struct Seeded {
    template: String,
    agent_token: String,
    admin_token: String,
}

/// A sibling binary of the running one (`target/<profile>/…`).
fn binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("no executable dir")?;
    for d in [dir, dir.parent().unwrap_or(dir)] {
        let p = d.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!("{name} is not built next to {}: run `cargo build --workspace` first", exe.display())
}

fn log_file(path: &Path) -> Result<(Stdio, Stdio)> {
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    Ok((Stdio::from(f.try_clone()?), Stdio::from(f)))
}

fn spawn_server(url: &str, port: u16, log: &Path) -> Result<Child> {
    let (out, err) = log_file(log)?;
    Command::new(binary("gpuledger-server")?)
        .args(["demo", "--listen", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", url)
        .env("GPULEDGER_DEMO_HISTORY", "false")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .context("spawning gpuledger-server")
}

/// A child killed when this goes out of scope (a setup that fails half-way leaves no server behind).
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill9(&mut self.0);
    }
}

fn kill9(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn cli(url: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(binary("gpuledger-server")?).args(args).env("DATABASE_URL", url).output()?;
    if !out.status.success() {
        bail!("gpuledger-server {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

async fn wait_ready(http: &reqwest::Client, base: &str, bound: Duration) -> Result<Duration> {
    let started = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > bound {
            bail!("{base}/readyz not ready within {bound:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn psql(url: &str, sql: &str) -> Result<()> {
    let pool = sqlx::PgPool::connect(url).await?;
    sqlx::raw_sql(sql).execute(&pool).await?;
    pool.close().await;
    Ok(())
}

/// Migrates and seeds the demo organization once, creates the cluster's tokens and the scenario's tenants, and
/// leaves it as the template both runs clone.
pub async fn prepare(pg: &Postgres, s: &Scenario, root: &Path) -> Result<Seeded> {
    psql(&pg.url("postgres"), "CREATE DATABASE seeded").await?;
    let url = pg.url("seeded");
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let mut server = KillOnDrop(Some(spawn_server(&url, port, &root.join("prepare.log"))?));
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    wait_ready(&http, &base, Duration::from_secs(120)).await?;
    let agent_token = cli(&url, &["token", "create", "--org", "demo", "--scope", &format!("agent:{CLUSTER}")])?;
    let admin_token = cli(&url, &["token", "create", "--org", "demo", "--scope", "admin"])?;
    // Tenants exist before any fact names them, so both runs give them the same IDs (and the same close hashes).
    let mut tenants: BTreeMap<String, &str> = BTreeMap::new();
    for i in 0..s.namespaces {
        tenants.insert(format!("tenant-{:02}", i % 25), if i % 2 == 0 { "Research" } else { "Engineering" });
    }
    tenants.insert(s.reassignment.1.clone(), "Research");
    for dept in ["Research", "Engineering"] {
        let _ = http
            .post(format!("{base}/api/v1/departments"))
            .bearer_auth(&admin_token)
            .json(&json!({"name": dept}))
            .send()
            .await?;
    }
    for (name, dept) in &tenants {
        let r = http
            .post(format!("{base}/api/v1/tenants"))
            .bearer_auth(&admin_token)
            .json(&json!({"name": name, "department": dept}))
            .send()
            .await?;
        if !(r.status().is_success() || r.status().as_u16() == 409) {
            bail!("creating tenant {name}: {} {}", r.status(), r.text().await.unwrap_or_default());
        }
    }
    // A cost policy for the inventory's classes, effective from the earliest month the scenario closes.
    let inventory: Value =
        http.get(format!("{base}/api/v1/inventory")).bearer_auth(&admin_token).send().await?.json().await?;
    let mut classes = BTreeSet::new();
    collect_classes(&inventory, &mut classes);
    if classes.is_empty() {
        bail!("the demo inventory names no GPU class: {inventory}");
    }
    let rates: Vec<Value> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"gpu_class": c, "guaranteed": format!("{}.25", i + 1), "borrowed": format!("{}.75", i + 2)}))
        .collect();
    let policy = json!({
        "currency": "USD",
        "classes": rates,
        "energy": {"per_kwh": "0.14", "pue": "1.35"},
        "services": [],
        "token_weights": [{"model": "*", "input": "1", "output": "4"}],
        "overhead": {"fixed": [{"name": "platform team", "amount": "1000.00"}], "unallocated_capacity": false,
                     "key": {"kind": "allocated_gpu_hours"}}
    });
    let r = http
        .post(format!("{base}/api/v1/policies"))
        .bearer_auth(&admin_token)
        .json(&json!({"effective_from": s.earlier.name, "note": "chaos", "policy": policy}))
        .send()
        .await?;
    let code = r.status();
    let draft: Value = r.json().await.unwrap_or_default();
    let v = draft["version"].as_i64().with_context(|| format!("creating the policy: {code} {draft}"))?;
    let r = http
        .post(format!("{base}/api/v1/policies/{v}/approve"))
        .bearer_auth(&admin_token)
        .json(&json!({"reason": "chaos"}))
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("approving the policy: {} {}", r.status(), r.text().await.unwrap_or_default());
    }
    if let Some(c) = server.0.as_mut() {
        crate::process::signal(c.id(), "TERM")?;
        let _ = c.wait();
    }
    kill9(&mut server.0);
    Ok(Seeded { template: "seeded".into(), agent_token, admin_token })
}

/// Every `gpu_class` value anywhere in `v`.
fn collect_classes(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                match (k.as_str(), x) {
                    ("gpu_class", Value::String(c)) => {
                        out.insert(c.clone());
                    }
                    _ => collect_classes(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_classes(x, out)),
        _ => {}
    }
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Broken properties found within the run.
    pub violations: Vec<String>,
    /// Measurements.
    pub notes: Vec<String>,
    /// Every row of the month's allocations export (organization-specific IDs left out).
    pub month_allocations: BTreeSet<String>,
    /// Agent gaps still unrecovered (finding keys).
    pub unrecovered_gaps: Vec<String>,
    /// Whether the month's findings show those gaps.
    pub gaps_on_close_page: bool,
    /// The earlier month's close hash.
    pub earlier_hash: Option<String>,
    /// The raced month's close hash.
    pub month_hash: Option<String>,
    /// Whether the racing credit landed in the raced month (else in the open one).
    pub credit_in_month: bool,
    /// The raced month's lines, credits left out.
    pub month_lines_without_credits: BTreeSet<String>,
    /// The open month's late-data adjustment lines (tenant, class, quantity, amount).
    pub late_adjustments: BTreeSet<String>,
}

struct World<'a> {
    dir: PathBuf,
    pg: &'a Postgres,
    url: String,
    port: u16,
    base: String,
    server: Option<Child>,
    kube: FakeKube,
    kubeconfig: PathBuf,
    proxy: Proxy,
    seeded: &'a Seeded,
    cluster_agent: Option<Child>,
    node_agent: Option<Child>,
    cluster_spool: PathBuf,
    node_spool: PathBuf,
    /// The tmpfs under the cluster agent's spool, when one could be mounted.
    spool_fs: Option<PathBuf>,
    spool_mib: u64,
    skew: (i64, i64),
    http: reqwest::Client,
    out: Outcome,
    rng: Rng,
    /// Pods that appear during the delivery phase, evenly spread over it.
    arrivals: Vec<(&'static str, Value)>,
}

/// One run: `schedule` `None` is the fault-free reference.
pub async fn run(
    pg: &Postgres,
    seeded: &Seeded,
    s: &Scenario,
    schedule: Option<&Schedule>,
    dir: &Path,
) -> Result<Outcome> {
    std::fs::create_dir_all(dir)?;
    let db = if schedule.is_some() { "faulty" } else { "reference" };
    psql(&pg.url("postgres"), &format!("CREATE DATABASE {db} TEMPLATE {}", seeded.template)).await?;
    let url = pg.url(db);
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let kube = FakeKube::start().await?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // Under faults, most pods appear while the faults happen (watch events), so delivery and faults overlap; the
    // rest (and every pod of a large history, which must overflow the spool) are in the API from the start.
    let objects = s.objects(now);
    let spread = schedule.is_some() && !s.large;
    let mut arrivals = Vec::new();
    for (i, (resource, object)) in objects.into_iter().enumerate() {
        if spread && resource == "pods" && i % 3 != 0 {
            arrivals.push((resource, object));
        } else {
            kube.apply_silently(resource, object)?;
        }
    }
    let kubeconfig = kube.kubeconfig(dir)?;
    let proxy = Proxy::start(&base, Rng::new(s.seed, 3)).await?;
    let cluster_spool_root = dir.join("cluster-spool-fs");
    std::fs::create_dir_all(&cluster_spool_root)?;
    let overflow = schedule.is_some_and(|sc| sc.overflow);
    let spool_mib = if overflow { 1 } else { 64 };
    let mut out = Outcome::default();
    let spool_fs = if schedule.is_some() {
        match mount_tmpfs(&cluster_spool_root, spool_mib * 4) {
            Ok(()) => Some(cluster_spool_root.clone()),
            Err(e) => {
                out.notes.push(format!("disk-full faults not injected: {e:#}"));
                None
            }
        }
    } else {
        None
    };
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let mut w = World {
        dir: dir.to_path_buf(),
        pg,
        url,
        port,
        base,
        server: None,
        kube,
        kubeconfig,
        proxy,
        seeded,
        cluster_agent: None,
        node_agent: None,
        cluster_spool: cluster_spool_root.join("spool"),
        node_spool: dir.join("node-spool"),
        spool_fs,
        spool_mib,
        skew: schedule.map_or((0, 0), |sc| (sc.cluster_skew, sc.node_skew)),
        http,
        out,
        rng: Rng::new(s.seed, 4),
        arrivals,
    };
    let result = w.story(s, schedule).await;
    w.shutdown();
    if let Some(fs) = &w.spool_fs {
        let _ = Command::new("umount").arg("-l").arg(fs).status();
    }
    result?;
    Ok(w.out)
}

fn mount_tmpfs(at: &Path, mib: u64) -> Result<()> {
    if !is_root() {
        bail!("mounting a tmpfs needs root");
    }
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={}k", mib * 1024)])
        .arg("tmpfs")
        .arg(at)
        .output()?;
    if !out.status.success() {
        bail!("mount -t tmpfs: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// A timed step of the fault schedule, expanded: a fault's start and its end.
#[derive(Debug, Clone, Copy)]
enum Step {
    Start(Fault),
    End(Fault),
    /// The `n`th pod of the arrivals appears.
    Arrive(usize),
}

impl World<'_> {
    fn start_server(&mut self) -> Result<()> {
        if self.server.is_none() {
            self.server = Some(spawn_server(&self.url, self.port, &self.dir.join("server.log"))?);
        }
        Ok(())
    }

    fn start_cluster_agent(&mut self) -> Result<()> {
        if self.cluster_agent.is_some() {
            return Ok(());
        }
        let (out, err) = log_file(&self.dir.join("cluster-agent.log"))?;
        self.cluster_agent = Some(
            Command::new(binary("gpuledger-agent")?)
                .args(["cluster", "--server", &self.proxy.url, "--token", &self.seeded.agent_token])
                .args(["--cluster-name", CLUSTER, "--poll-ms", "100", "--heartbeat-secs", "5", "--scrape-secs", "0"])
                .args(["--spool-max-mib", &self.spool_mib.to_string(), "--list-page-size", "200"])
                .arg(format!("--clock-skew-secs={}", self.skew.0))
                .arg("--spool-dir")
                .arg(&self.cluster_spool)
                .env("KUBECONFIG", &self.kubeconfig)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()?,
        );
        Ok(())
    }

    fn start_node_agent(&mut self) -> Result<()> {
        if self.node_agent.is_some() {
            return Ok(());
        }
        let (out, err) = log_file(&self.dir.join("node-agent.log"))?;
        self.node_agent = Some(
            Command::new(binary("gpuledger-agent")?)
                .args(["node", "--server", &self.proxy.url, "--token", &self.seeded.agent_token])
                .args(["--cluster-name", CLUSTER, "--node-name", "gpu-node-0000", "--source", "simulated"])
                .args(["--sample-secs", "1", "--window-secs", "5", "--poll-ms", "200"])
                .arg(format!("--clock-skew-secs={}", self.skew.1))
                .arg("--pod-resources-socket")
                .arg(self.dir.join("no-kubelet.sock"))
                .arg("--spool-dir")
                .arg(&self.node_spool)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()?,
        );
        Ok(())
    }

    fn shutdown(&mut self) {
        kill9(&mut self.cluster_agent);
        kill9(&mut self.node_agent);
        kill9(&mut self.server);
    }

    /// A process that died on its own is a violation (we only kill with the schedule).
    fn check_alive(&mut self) {
        for (name, child) in [
            ("server", &mut self.server),
            ("cluster agent", &mut self.cluster_agent),
            ("node agent", &mut self.node_agent),
        ] {
            if let Some(c) = child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.out.violations.push(format!("liveness: the {name} exited by itself ({status})"));
                *child = None;
            }
        }
    }

    async fn apply(&mut self, step: Step) -> Result<()> {
        match step {
            Step::Start(Fault::KillServer { .. }) => kill9(&mut self.server),
            Step::End(Fault::KillServer { .. }) => self.start_server()?,
            Step::Start(Fault::KillClusterAgent { .. }) => kill9(&mut self.cluster_agent),
            Step::End(Fault::KillClusterAgent { .. }) => self.start_cluster_agent()?,
            Step::Start(Fault::KillNodeAgent { .. }) => kill9(&mut self.node_agent),
            Step::End(Fault::KillNodeAgent { .. }) => self.start_node_agent()?,
            Step::Start(Fault::KillPostgres { .. }) => self.pg.kill()?,
            Step::End(Fault::KillPostgres { .. }) => self.pg.start()?,
            Step::Start(Fault::Partition { mode, .. }) => self.proxy.set_mode(mode),
            Step::End(Fault::Partition { .. }) => self.proxy.set_mode(Mode::Pass),
            Step::Start(Fault::DiskFull { .. }) => self.fill_disk(),
            Step::End(Fault::DiskFull { .. }) => self.free_disk(),
            Step::Start(Fault::Resend { count }) => {
                let mut batches = self.proxy.recorded();
                self.rng.shuffle(&mut batches);
                batches.truncate(count);
                let proxy = self.proxy.clone();
                tokio::spawn(async move { proxy.resend(&batches).await });
            }
            Step::End(Fault::Resend { .. }) => {}
            Step::Arrive(n) => {
                if let Some((resource, object)) = self.arrivals.get(n) {
                    self.kube.apply(resource, object.clone())?;
                }
            }
        }
        Ok(())
    }

    fn fill_disk(&mut self) {
        let Some(fs) = &self.spool_fs else { return };
        use std::io::Write;
        if let Ok(mut f) = std::fs::File::create(fs.join("ballast")) {
            let block = vec![0u8; 64 * 1024];
            while f.write_all(&block).is_ok() {}
        }
    }

    fn free_disk(&mut self) {
        if let Some(fs) = &self.spool_fs {
            let _ = std::fs::remove_file(fs.join("ballast"));
        }
    }

    /// Runs `schedule` (faults with their ends) from now, for `phase` at least; everything restored at the end.
    async fn faults(&mut self, schedule: &[Scheduled], phase: Duration, arrivals: bool) -> Result<()> {
        let mut steps: Vec<(u64, Step)> = Vec::new();
        if arrivals {
            let n = self.arrivals.len() as u64;
            let span = phase.as_millis() as u64 * 3 / 4;
            steps.extend((0..n).map(|i| (i * span / n.max(1), Step::Arrive(i as usize))));
        }
        for s in schedule {
            steps.push((s.at_ms, Step::Start(s.fault)));
            let lasts = match s.fault {
                Fault::KillServer { down_ms }
                | Fault::KillClusterAgent { down_ms }
                | Fault::KillNodeAgent { down_ms }
                | Fault::KillPostgres { down_ms } => down_ms,
                Fault::Partition { ms, .. } | Fault::DiskFull { ms } => ms,
                Fault::Resend { .. } => 0,
            };
            steps.push((s.at_ms + lasts, Step::End(s.fault)));
        }
        steps.sort_by_key(|(t, _)| *t);
        let started = Instant::now();
        for (at, step) in steps {
            let due = Duration::from_millis(at);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
            self.check_alive();
            self.apply(step).await.with_context(|| format!("applying {step:?}"))?;
        }
        if let Some(rest) = phase.checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        // The faults stop: everything is back.
        self.proxy.set_mode(Mode::Pass);
        self.free_disk();
        self.pg.start()?;
        self.check_alive();
        self.start_server()?;
        self.start_cluster_agent()?;
        self.start_node_agent()?;
        Ok(())
    }

    async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.seeded.admin_token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await?;
        let code = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        Ok((code, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    /// Retries a request through server restarts until it gets an answer other than 5xx or no answer.
    async fn admin_retry(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        bound: Duration,
    ) -> Result<(u16, Value)> {
        let started = Instant::now();
        loop {
            match self.admin(method.clone(), path, body.clone()).await {
                Ok((code, v)) if code < 500 => return Ok((code, v)),
                other => {
                    if started.elapsed() > bound {
                        bail!("{method} {path}: no answer within {bound:?}: {other:?}");
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Event IDs of allocation facts stored for the cluster.
    async fn stored_events(&self, ids: &[String]) -> Result<BTreeSet<String>> {
        let pool = sqlx::PgPool::connect(&self.url).await?;
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT event_id FROM allocation_events WHERE event_id = ANY($1)
               AND cluster_id = (SELECT cluster_id FROM clusters WHERE name = $2)",
        )
        .bind(ids)
        .bind(CLUSTER)
        .fetch_all(&pool)
        .await?;
        pool.close().await;
        Ok(rows.into_iter().collect())
    }

    /// Waits until every fact `objects` derive to (allocations, owners, nodes) is stored; how long it took.
    async fn drain(
        &self,
        objects: &[(&'static str, Value)],
        bound: Duration,
    ) -> Result<std::result::Result<Duration, String>> {
        let served: Vec<Value> = objects.iter().map(|(_, o)| o.clone()).collect();
        let expected: Vec<String> = gpuledger_agent::inspect::inspect(
            gpuledger_agent::inspect::Kind::K8s,
            &serde_json::to_string(&served)?,
            time::OffsetDateTime::now_utc(),
            None,
        )?
        .facts
        .into_iter()
        .map(|f| f.event_id)
        .filter(|e| e.starts_with("alloc-"))
        .collect();
        let started = Instant::now();
        loop {
            let stored = self.stored_events(&expected).await.unwrap_or_default();
            if stored.len() == expected.len() {
                return Ok(Ok(started.elapsed()));
            }
            if started.elapsed() > bound {
                let missing: Vec<&String> = expected.iter().filter(|e| !stored.contains(*e)).take(3).collect();
                return Ok(Err(format!(
                    "{} of {} allocation facts stored after {bound:?}; missing e.g. {missing:?}",
                    stored.len(),
                    expected.len()
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Everything that happens, in order.
    async fn story(&mut self, s: &Scenario, schedule: Option<&Schedule>) -> Result<()> {
        self.start_server()?;
        wait_ready(&self.http, &self.base, Duration::from_secs(120)).await?;
        self.start_cluster_agent()?;
        self.start_node_agent()?;
        let (ns, tenant, from) = s.reassignment.clone();
        let reassign = json!({"cluster": CLUSTER, "namespace": format!("team-{ns:02}"), "tenant": tenant,
                              "valid_from": rfc3339(from), "reason": "chaos: team moved"});

        // Phase 1: the agents deliver the history (under faults).
        let delivered = Instant::now();
        if let Some(sc) = schedule {
            self.faults(&sc.delivery, Duration::from_millis(sc.delivery_ms()), true).await?;
        }
        // Phase 2: liveness — ready and drained within bounds.
        match wait_ready(&self.http, &self.base, READY_BOUND).await {
            Ok(d) => self.out.notes.push(format!("ready {} ms after the faults stopped", d.as_millis())),
            Err(e) => self.out.violations.push(format!("liveness: {e:#}")),
        }
        let objects = s.objects(time::OffsetDateTime::now_utc().unix_timestamp());
        match self.drain(&objects, DRAIN_BOUND).await? {
            Ok(d) => self.out.notes.push(format!(
                "history drained {} ms after the faults stopped ({} ms from the start)",
                d.as_millis(),
                delivered.elapsed().as_millis()
            )),
            Err(e) => self.out.violations.push(format!("liveness: {e}")),
        }
        // The ownership change (the namespace must be known: its owner fact has arrived by now).
        let (code, body) = self
            .admin_retry(
                reqwest::Method::POST,
                "/api/v1/tenancy/reassignments",
                Some(reassign),
                Duration::from_secs(60),
            )
            .await?;
        if code >= 300 {
            self.out.violations.push(format!("the reassignment was refused: {code} {body}"));
        }

        // Phase 3: close the earlier month, then race the month's close (two replicas) with a credit.
        self.out.earlier_hash = self.close(&s.earlier.name, None).await?;
        let credit = self.accepted_dispute(&s.earlier.name).await?;
        let finance = self.finance_session().await?;
        let replica_port = free_port()?;
        let mut replica = KillOnDrop(None);
        if schedule.is_some() {
            replica.0 = Some(spawn_server(&self.url, replica_port, &self.dir.join("replica.log"))?);
            wait_ready(&self.http, &format!("http://127.0.0.1:{replica_port}"), Duration::from_secs(60)).await?;
            let a = self.close(&s.month.name, None);
            let b = self.close(&s.month.name, Some(replica_port));
            let c = self.approve_credit(&credit, &finance);
            let (a, b, c) = tokio::join!(a, b, c);
            let (a, b) = (a?, b?);
            c?;
            if a.is_none() || a != b {
                self.out.violations.push(format!("two replicas closing {}: hashes {a:?} and {b:?}", s.month.name));
            }
            self.out.month_hash = a;
        } else {
            self.out.month_hash = self.close(&s.month.name, None).await?;
            self.approve_credit(&credit, &finance).await?;
        }
        kill9(&mut replica.0);
        let (month_lines, month_hash) = self.lines(&s.month.name).await?;
        if month_hash != self.out.month_hash {
            self.out.violations.push(format!(
                "{} answers hash {month_hash:?} after closing with {:?}",
                s.month.name, self.out.month_hash
            ));
        }
        let credits_in_month = month_lines.iter().filter(|l| l["term"] == "credit").count();
        self.out.credit_in_month = credits_in_month > 0;
        self.out.month_lines_without_credits =
            month_lines.iter().filter(|l| l["term"] != "credit").map(canonical_line).collect();
        self.out.month_allocations = self.allocations(&s.month.name).await?;
        self.out.notes.push(format!(
            "closed {} (hash {}) and {} ({} lines, hash {}, {} allocation rows); the racing credit landed in {}",
            s.earlier.name,
            short(&self.out.earlier_hash),
            s.month.name,
            month_lines.len(),
            short(&self.out.month_hash),
            self.out.month_allocations.len(),
            if self.out.credit_in_month { &s.month.name } else { &s.current.name }
        ));

        // Phase 4: late pods of the closed month appear (under faults), batches are re-sent.
        let late = s.late_objects();
        for (resource, object) in &late {
            self.kube.apply(resource, object.clone())?;
        }
        if let Some(sc) = schedule {
            self.faults(&sc.late, Duration::from_millis(Schedule::LATE_MS), false).await?;
        }
        if let Err(e) = wait_ready(&self.http, &self.base, READY_BOUND).await {
            self.out.violations.push(format!("liveness (late phase): {e:#}"));
        }
        let mut all = objects.clone();
        all.extend(late);
        match self.drain(&all, DRAIN_BOUND).await? {
            Ok(d) => self.out.notes.push(format!("late pods drained {} ms after the faults stopped", d.as_millis())),
            Err(e) => self.out.violations.push(format!("liveness (late phase): {e}")),
        }
        let stored_at = time::OffsetDateTime::now_utc();

        // Phase 5: checks within the run.
        // Immutability: the closed months answer what they closed with.
        let (after, hash_after) = self.lines(&s.month.name).await?;
        if hash_after != self.out.month_hash
            || after.iter().map(canonical_line).collect::<BTreeSet<_>>()
                != month_lines.iter().map(canonical_line).collect::<BTreeSet<_>>()
        {
            self.out.violations.push(format!("immutability: {} changed after its close", s.month.name));
        }
        let credits_in_current = self.open_month_lines(&s.current.name, stored_at).await?;
        let credit_lines = credits_in_current.iter().filter(|l| l["term"] == "credit").count() + credits_in_month;
        if credit_lines != 1 {
            self.out.violations.push(format!(
                "the approved credit appears {credit_lines} times across {} and {} (once expected)",
                s.month.name, s.current.name
            ));
        }
        self.out.late_adjustments = credits_in_current
            .iter()
            .filter(|l| l["term"] == "adjustment")
            .map(|l| format!("{} {} {} {}", l["tenant"], l["gpu_class"], l["quantity"], l["amount"]))
            .collect();
        self.out.notes.push(format!(
            "late data: {} adjustment line(s) in {}",
            self.out.late_adjustments.len(),
            s.current.name
        ));
        if self.out.late_adjustments.is_empty() {
            self.out.violations.push(format!("late data: no adjustment for {} in {}", s.month.name, s.current.name));
        }
        self.conservation().await?;
        self.gaps(&s.month.name).await?;
        self.dead_letters();
        let st = self.proxy.stats();
        self.out.notes.push(format!(
            "proxy: {} passed, {} refused, {} delayed, {} duplicated, {} answers cut; {} facts acknowledged",
            st.passed,
            st.refused,
            st.delayed,
            st.duplicated,
            st.cut,
            self.proxy.acked().len()
        ));
        Ok(())
    }

    /// Closes `period` (through the replica on `port` when given), acknowledging what the server asks to; the hash.
    async fn close(&self, period: &str, port: Option<u16>) -> Result<Option<String>> {
        let base = port.map_or(self.base.clone(), |p| format!("http://127.0.0.1:{p}"));
        let path = format!("/api/v1/periods/{period}/close");
        let mut acknowledge = false;
        let started = Instant::now();
        loop {
            if started.elapsed() > Duration::from_secs(120) {
                bail!("closing {period}: not closed within 120 s");
            }
            let mut req = self.http.post(format!("{base}{path}")).bearer_auth(&self.seeded.admin_token);
            if acknowledge {
                req = req.json(&json!({"acknowledge": "chaos simulation: closing as it is"}));
            }
            let (code, v) = match req.send().await {
                Ok(r) if r.status().as_u16() < 500 => {
                    let code = r.status().as_u16();
                    (code, r.json::<Value>().await.unwrap_or_default())
                }
                // The server (or PostgreSQL) is away: try again.
                _ => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    continue;
                }
            };
            let detail = v["detail"].as_str().unwrap_or_default();
            match code {
                200 => return Ok(v["hash"].as_str().map(str::to_string)),
                // The other replica closed it: its hash.
                409 if detail.contains("already closed") => {
                    let (_, hash) = self.lines(period).await?;
                    return Ok(hash);
                }
                // The other replica is closing it right now: ask again.
                409 if detail.contains("being closed") => tokio::time::sleep(Duration::from_millis(300)).await,
                409 if detail.contains("cannot be closed as it is") && !acknowledge => acknowledge = true,
                _ => bail!("closing {period}: {code} {v}"),
            }
        }
    }

    /// A closed month's lines and hash.
    async fn lines(&self, period: &str) -> Result<(Vec<Value>, Option<String>)> {
        let mut lines = Vec::new();
        let mut hash = None;
        for page in 1..1000 {
            let (code, v) = self
                .admin_retry(
                    reqwest::Method::GET,
                    &format!("/api/v1/ledger?period={period}&per_page=500&page={page}"),
                    None,
                    Duration::from_secs(60),
                )
                .await?;
            if code != 200 {
                bail!("ledger of {period}: {code} {v}");
            }
            hash = v["hash"].as_str().map(str::to_string);
            let got = v["lines"].as_array().cloned().unwrap_or_default();
            let done = got.len() < 500;
            lines.extend(got);
            if done {
                break;
            }
        }
        Ok((lines, hash))
    }

    /// The open month's lines, from a snapshot taken after `after`.
    async fn open_month_lines(&self, period: &str, after: time::OffsetDateTime) -> Result<Vec<Value>> {
        let started = Instant::now();
        loop {
            let (code, v) = self
                .admin_retry(
                    reqwest::Method::GET,
                    &format!("/api/v1/ledger?period={period}&per_page=500"),
                    None,
                    Duration::from_secs(60),
                )
                .await?;
            let as_of = v["as_of"]
                .as_str()
                .and_then(|t| time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok());
            if code == 200 && as_of.is_some_and(|t| t >= after) {
                return Ok(v["lines"].as_array().cloned().unwrap_or_default());
            }
            if started.elapsed() > Duration::from_secs(90) {
                bail!("the open month's ledger never caught up with {after}: {code} as of {as_of:?}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The month's allocations export, each row with the organization-specific IDs left out.
    async fn allocations(&self, period: &str) -> Result<BTreeSet<String>> {
        let r = self
            .http
            .get(format!("{}/api/v1/exports/allocations.csv?period={period}", self.base))
            .bearer_auth(&self.seeded.admin_token)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("allocations of {period}: {}", r.status());
        }
        let text = r.text().await?;
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
        let keep: Vec<usize> =
            (0..header.len()).filter(|i| !matches!(header[*i], "cluster_id" | "tenant_id" | "department_id")).collect();
        Ok(lines
            .map(|l| {
                let cells: Vec<&str> = l.split(',').collect();
                keep.iter().map(|i| cells.get(*i).copied().unwrap_or_default()).collect::<Vec<_>>().join(",")
            })
            .collect())
    }

    /// Opens a dispute on one line of `period` and accepts it with a credit of 1.00; its ID.
    async fn accepted_dispute(&self, period: &str) -> Result<String> {
        let (lines, _) = self.lines(period).await?;
        let line = lines
            .iter()
            .find(|l| {
                l["term"] != "credit"
                    && l["amount"].as_str().is_some_and(|a| !a.starts_with('-') && a != "0" && a != "0.00")
            })
            .with_context(|| format!("{period} has no line to dispute"))?;
        let (code, d) = self
            .admin_retry(
                reqwest::Method::POST,
                "/api/v1/disputes",
                Some(json!({"period": period, "line_ids": [line["line_id"]], "reason": "chaos: disputed"})),
                Duration::from_secs(60),
            )
            .await?;
        if code >= 300 {
            bail!("opening a dispute: {code} {d}");
        }
        let id = d["id"].as_str().context("dispute id")?.to_string();
        let (code, a) = self
            .admin_retry(
                reqwest::Method::POST,
                &format!("/api/v1/disputes/{id}/accept"),
                Some(json!({"reason": "chaos: accepted", "credit_amount": "1.00"})),
                Duration::from_secs(60),
            )
            .await?;
        if code >= 300 {
            bail!("accepting the dispute: {code} {a}");
        }
        Ok(id)
    }

    /// A finance session (cookie, CSRF token) through the demo sign-in.
    async fn finance_session(&self) -> Result<(String, String)> {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
        let r = client
            .post(format!("{}/auth/demo", self.base))
            .header("origin", &self.base)
            .form(&[("org", "demo"), ("role", "finance")])
            .send()
            .await?;
        let cookie = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|c| c.split(';').next())
            .find(|c| c.starts_with("gl_session="))
            .context("no session cookie from the demo sign-in")?
            .to_string();
        let me: Value =
            client.get(format!("{}/api/v1/me", self.base)).header("cookie", &cookie).send().await?.json().await?;
        let csrf = me["csrf_token"].as_str().context("no CSRF token")?.to_string();
        Ok((cookie, csrf))
    }

    async fn approve_credit(&self, id: &str, (cookie, csrf): &(String, String)) -> Result<()> {
        let started = Instant::now();
        loop {
            let r = self
                .http
                .post(format!("{}/api/v1/disputes/{id}/credit/approve", self.base))
                .header("cookie", cookie)
                .header("x-csrf-token", csrf)
                .header("origin", &self.base)
                .json(&json!({}))
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) if r.status().as_u16() < 500 => {
                    bail!("approving the credit: {} {}", r.status(), r.text().await.unwrap_or_default())
                }
                other if started.elapsed() > Duration::from_secs(60) => bail!("approving the credit: {other:?}"),
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }

    /// Every acknowledged fact is stored, once.
    async fn conservation(&mut self) -> Result<()> {
        let acked = self.proxy.acked();
        let events: Vec<String> = acked
            .iter()
            .filter_map(|a| if let Acked::Event(e) = a { Some(e.clone()) } else { None })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let stored = self.stored_events(&events).await?;
        let lost: Vec<&String> = events.iter().filter(|e| !stored.contains(*e)).collect();
        if !lost.is_empty() {
            self.out.violations.push(format!(
                "conservation: {} acknowledged facts are not stored, e.g. {:?}",
                lost.len(),
                lost.iter().take(3).collect::<Vec<_>>()
            ));
        }
        let pool = sqlx::PgPool::connect(&self.url).await?;
        let mut missing_windows = 0usize;
        let mut example = None;
        let windows: BTreeSet<&Acked> = acked.iter().filter(|a| !matches!(a, Acked::Event(_))).collect();
        for a in &windows {
            let n: i64 =
                match a {
                    Acked::Window(gpu, instance, start) => {
                        sqlx::query_scalar(
                            "SELECT count(*) FROM telemetry_rollups WHERE gpu_uuid = $1 AND gpu_instance_id = $2
                        AND window_start = to_timestamp($3)",
                        )
                        .bind(gpu)
                        .bind(*instance as i32)
                        .bind(*start as f64)
                        .fetch_one(&pool)
                        .await?
                    }
                    Acked::Processes(gpu, start) => sqlx::query_scalar(
                        "SELECT count(*) FROM process_windows WHERE gpu_uuid = $1 AND window_start = to_timestamp($2)",
                    )
                    .bind(gpu)
                    .bind(*start as f64)
                    .fetch_one(&pool)
                    .await?,
                    Acked::Event(_) => 1,
                };
            if n != 1 {
                missing_windows += 1;
                example.get_or_insert(format!("{a:?} stored {n} times"));
            }
        }
        pool.close().await;
        if missing_windows > 0 {
            self.out.violations.push(format!(
                "conservation: {missing_windows} acknowledged telemetry windows are not stored exactly once, e.g. {example:?}"
            ));
        }
        self.out.notes.push(format!(
            "{} acknowledged facts and {} windows all stored once",
            events.len(),
            windows.len()
        ));
        Ok(())
    }

    /// Agent gaps: which are unrecovered, and whether the month's findings show them.
    async fn gaps(&mut self, month: &str) -> Result<()> {
        let pool = sqlx::PgPool::connect(&self.url).await?;
        let gaps: Vec<(String, String)> = sqlx::query_as(
            "SELECT finding_id::text, to_char(occurred_from, 'YYYY-MM') FROM data_quality_findings
              WHERE kind = 'agent_gap' AND COALESCE((details->>'recovered')::boolean, false) = false",
        )
        .fetch_all(&pool)
        .await?;
        pool.close().await;
        self.out.unrecovered_gaps = gaps.iter().map(|(k, m)| format!("{m}: {k}")).collect();
        if !gaps.is_empty() {
            let months: BTreeSet<&String> = gaps.iter().map(|(_, m)| m).collect();
            self.out.notes.push(format!("{} unrecovered agent gap finding(s), in {months:?}", gaps.len()));
        }
        let (_, findings) = self
            .admin_retry(
                reqwest::Method::GET,
                &format!("/api/v1/periods/{month}/findings"),
                None,
                Duration::from_secs(30),
            )
            .await?;
        self.out.gaps_on_close_page =
            findings.to_string().contains("agent_gap") || findings.to_string().contains("agent gap");
        Ok(())
    }

    /// Nothing may be dead-lettered: every fact the scenario makes is valid.
    fn dead_letters(&mut self) {
        for dir in [&self.cluster_spool, &self.node_spool] {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                if name.contains("dead") {
                    let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                    if !text.trim().is_empty() {
                        self.out.violations.push(format!(
                            "dead letters in {}: {} record(s), first: {}",
                            entry.path().display(),
                            text.lines().count(),
                            text.lines().next().unwrap_or_default().chars().take(400).collect::<String>()
                        ));
                    }
                }
            }
        }
    }
}

fn short(h: &Option<String>) -> String {
    h.as_deref().map_or("none".into(), |h| h.chars().take(12).collect())
}

/// A line as compared across runs: everything but organization-specific IDs.
fn canonical_line(l: &Value) -> String {
    let mut v = l.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("department_id");
        o.remove("tenant_id");
    }
    v.to_string()
}
