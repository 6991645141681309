//! One run of a seed's scenario: the real server (`gpuledger-server demo` on its own database, cloned from the
//! seed's prepared one so both runs share organization, tenants and tokens), the real `cluster` agent against the
//! stand-in API server, the real `node` agent on simulated GPUs, both through the [`Proxy`] — with the fault
//! schedule, or without one (the reference).

use std::{
    collections::BTreeSet,
    fs::OpenOptions,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

mod api;
mod checks;
mod prepare;

pub use prepare::prepare;

use super::{
    faults::{Fault, Schedule, Scheduled},
    pg::Postgres,
    proxy::{Mode, Proxy},
    rng::Rng,
    scenario::{Scenario, rfc3339},
};
use crate::{
    fake_kube::FakeKube,
    is_root,
    process::{binary, free_port},
};

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

    /// `gpuledger-agent MODE` through the proxy with the cluster's token, its clock shifted by `skew`, spooling in
    /// `spool`, logging to `DIR/MODE-agent.log`; `configure` adds the mode's own flags.
    fn spawn_agent(&self, mode: &str, skew: i64, spool: &Path, configure: impl FnOnce(&mut Command)) -> Result<Child> {
        let (out, err) = log_file(&self.dir.join(format!("{mode}-agent.log")))?;
        let mut cmd = Command::new(binary("gpuledger-agent")?);
        cmd.args([mode, "--server", &self.proxy.url, "--token", &self.seeded.agent_token, "--cluster-name", CLUSTER])
            .arg(format!("--clock-skew-secs={skew}"))
            .arg("--spool-dir")
            .arg(spool);
        configure(&mut cmd);
        Ok(cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn()?)
    }

    fn start_cluster_agent(&mut self) -> Result<()> {
        if self.cluster_agent.is_none() {
            let spool_mib = self.spool_mib.to_string();
            let kubeconfig = self.kubeconfig.clone();
            self.cluster_agent = Some(self.spawn_agent("cluster", self.skew.0, &self.cluster_spool, |c| {
                c.args(["--poll-ms", "100", "--heartbeat-secs", "5", "--scrape-secs", "0"])
                    .args(["--spool-max-mib", &spool_mib, "--list-page-size", "200"])
                    .env("KUBECONFIG", kubeconfig);
            })?);
        }
        Ok(())
    }

    fn start_node_agent(&mut self) -> Result<()> {
        if self.node_agent.is_none() {
            let socket = self.dir.join("no-kubelet.sock");
            self.node_agent = Some(self.spawn_agent("node", self.skew.1, &self.node_spool, |c| {
                c.args(["--node-name", "gpu-node-0000", "--source", "simulated"])
                    .args(["--sample-secs", "1", "--window-secs", "5", "--poll-ms", "200"])
                    .arg("--pod-resources-socket")
                    .arg(socket);
            })?);
        }
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
