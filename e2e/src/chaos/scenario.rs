//! What happens in one seed's cluster: nodes (whole GPUs, MIG, time-slicing), namespaces owned by tenants, pods over
//! the last two months and this one, an ownership change inside the month that closes, and late pods that the API
//! reveals only after that month closed. Drawn from the seed alone (and the month it runs in), so the fault-free
//! run and the faulty run of a seed see the same cluster.

use serde_json::{Value, json};

use super::rng::Rng;
use crate::synthetic;

/// A calendar month, `YYYY-MM`, with its bounds in Unix seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Month {
    /// `YYYY-MM`.
    pub name: String,
    /// First instant.
    pub start: i64,
    /// First instant of the next month.
    pub end: i64,
}

impl Month {
    /// The month holding Unix second `t`.
    pub fn of(t: i64) -> Self {
        let (y, m) = civil(t);
        Self::from_ym(y, m)
    }

    fn from_ym(y: i64, m: i64) -> Self {
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        Self {
            name: format!("{y:04}-{m:02}"),
            start: days_from_civil(y, m, 1) * 86_400,
            end: days_from_civil(ny, nm, 1) * 86_400,
        }
    }

    /// The month before.
    pub fn previous(&self) -> Self {
        Self::of(self.start - 1)
    }
}

/// (year, month) of Unix second `t`.
fn civil(t: i64) -> (i64, i64) {
    let z = t.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month)
}

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// RFC 3339 of Unix second `t`.
pub fn rfc3339(t: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|d| d.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

/// One pod of the scenario.
#[derive(Debug, Clone)]
pub struct PodPlan {
    /// Index (names and UIDs derive from it).
    pub index: usize,
    /// Node index (as in [`synthetic::node`]).
    pub node: usize,
    /// Namespace index.
    pub namespace: usize,
    /// GPUs (or MIG slices, or replicas) it asks for.
    pub units: u32,
    /// Start, Unix seconds.
    pub start: i64,
    /// End, Unix seconds; `None` while it runs.
    pub end: Option<i64>,
}

/// One seed's cluster and its story.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The seed.
    pub seed: u64,
    /// The month closed first (its lines are disputed later).
    pub earlier: Month,
    /// The month whose close the replicas race, and the late data lands after.
    pub month: Month,
    /// The open month.
    pub current: Month,
    /// Node indexes ([`synthetic::node`]: 0 whole H100s, 1 MIG A100s, 3 time-sliced L4s, 2 whole H100s).
    pub nodes: Vec<usize>,
    /// Namespaces (`team-NN`, tenant `tenant-NN`).
    pub namespaces: usize,
    /// The pods the API holds from the start.
    pub pods: Vec<PodPlan>,
    /// Pods the API reveals only after `month` closed (finished inside it).
    pub late: Vec<PodPlan>,
    /// Namespace index reassigned to another tenant inside `month`, the tenant, and from when.
    pub reassignment: (usize, String, i64),
    /// A large history (enough to overflow a small spool while the server is away).
    pub large: bool,
}

/// First index of the late pods (apart from the others').
const LATE_BASE: usize = 900_000;

impl Scenario {
    /// The scenario of `seed`, for a run starting at Unix second `now`.
    pub fn generate(seed: u64, now: i64) -> Self {
        let mut rng = Rng::new(seed, 1);
        let current = Month::of(now);
        let month = current.previous();
        let earlier = month.previous();
        let mut nodes = vec![0, 1, 3];
        if rng.chance(50) {
            nodes.push(2);
        }
        let namespaces = rng.range(3, 8) as usize;
        // Every fifth seed (3, 8, …) and some others: a history that overflows a small spool.
        let large = seed % 5 == 3 || rng.chance(20);
        let count = if large { rng.range(2500, 3200) } else { rng.range(30, 120) } as usize;
        let mut pods = Vec::with_capacity(count);
        for index in 0..count {
            pods.push(plan(&mut rng, index, &nodes, namespaces, earlier.start, now - 3600, now));
        }
        let late = (0..rng.range(1, 4) as usize)
            .map(|i| {
                let mut p = plan(&mut rng, LATE_BASE + i, &nodes, namespaces, month.start, month.end - 7200, now);
                let end = (p.start + rng.range(600, 7200)).min(month.end - 1);
                p.end = Some(end);
                p
            })
            .collect();
        let ns = rng.range(0, namespaces as i64 - 1) as usize;
        let from = rng.range(month.start + 86_400, month.end - 86_400);
        let reassignment = (ns, format!("tenant-{:02}", 20 + rng.range(0, 4)), from - from % 60);
        Self { seed, earlier, month, current, nodes, namespaces, pods, late, reassignment, large }
    }

    /// Namespaces, nodes and the pods of the start, as `(resource, object)`.
    pub fn objects(&self, now: i64) -> Vec<(&'static str, Value)> {
        let mut out: Vec<(&'static str, Value)> = Vec::new();
        out.extend((0..self.namespaces).map(|i| ("namespaces", synthetic::namespace(i, now))));
        out.extend(self.nodes.iter().map(|i| ("nodes", synthetic::node(*i, now))));
        out.extend(self.pods.iter().map(|p| ("pods", pod(p))));
        out
    }

    /// The late pods' objects.
    pub fn late_objects(&self) -> Vec<(&'static str, Value)> {
        self.late.iter().map(|p| ("pods", pod(p))).collect()
    }

    /// One line describing the scenario.
    pub fn describe(&self) -> String {
        let running = self.pods.iter().filter(|p| p.end.is_none()).count();
        format!(
            "{} nodes {:?}, {} namespaces, {} pods ({running} running){}, {} late pod(s) in {}, team-{:02} → {} from {}",
            self.nodes.len(),
            self.nodes,
            self.namespaces,
            self.pods.len(),
            if self.large { ", large history" } else { "" },
            self.late.len(),
            self.month.name,
            self.reassignment.0,
            self.reassignment.1,
            rfc3339(self.reassignment.2)
        )
    }
}

/// A pod on one of `nodes`, starting in `from..=to`, running 10 minutes to 3 days (or still running at `now`).
fn plan(rng: &mut Rng, index: usize, nodes: &[usize], namespaces: usize, from: i64, to: i64, now: i64) -> PodPlan {
    let node = *rng.pick(nodes);
    let namespace = rng.range(0, namespaces as i64 - 1) as usize;
    let units = match node {
        1 => rng.range(1, 3) as u32,
        3 => rng.range(1, 4) as u32,
        _ => *rng.pick(&[1, 1, 2, 4]),
    };
    let start = rng.range(from, to);
    let end = start + rng.range(600, 3 * 86_400);
    PodPlan { index, node, namespace, units, start, end: (end < now - 600).then_some(end) }
}

/// A pod object as the API server serves it (the fields the agent reads, in their real places).
pub fn pod(p: &PodPlan) -> Value {
    let uid = format!("c4a05000-{:04x}-4{:03x}-8000-{:012x}", p.node, p.namespace, p.index);
    let resource = if p.node == 1 { "nvidia.com/mig-1g.10gb" } else { "nvidia.com/gpu" };
    let name = format!("job-{:06}-worker-0", p.index);
    let state = match p.end {
        Some(end) => json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": rfc3339(p.start),
                                            "finishedAt": rfc3339(end), "containerID": format!("containerd://{:064x}", p.index)}}),
        None => json!({"running": {"startedAt": rfc3339(p.start)}}),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": format!("team-{:02}", p.namespace),
            "uid": uid,
            "resourceVersion": "1",
            "creationTimestamp": rfc3339(p.start - 30),
            "labels": {"app": "trainer", "job-name": format!("job-{:06}", p.index)},
        },
        "spec": {
            "nodeName": format!("gpu-node-{:04}", p.node),
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                "resources": {"limits": {resource: p.units.to_string()}, "requests": {resource: p.units.to_string()}},
            }],
        },
        "status": {
            "phase": if p.end.is_some() { "Succeeded" } else { "Running" },
            "startTime": rfc3339(p.start - 5),
            "containerStatuses": [{"name": "main", "ready": p.end.is_none(), "restartCount": 0, "state": state,
                                   "image": "nvcr.io/nvidia/pytorch:24.08-py3", "imageID": "", "started": p.end.is_none()}],
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn months_and_their_bounds() {
        let t = 1_796_083_199; // 2026-11-30T23:59:59Z
        let m = Month::of(t);
        assert_eq!(m.name, "2026-11");
        assert_eq!(rfc3339(m.start), "2026-11-01T00:00:00Z");
        assert_eq!(rfc3339(m.end), "2026-12-01T00:00:00Z");
        assert_eq!(Month::of(m.end).name, "2026-12");
        assert_eq!(Month::of(m.end).end, Month::of(m.end + 31 * 86_400).start);
        assert_eq!(Month::of(1_767_225_600).previous().name, "2025-12");
    }

    #[test]
    fn a_seed_gives_the_same_scenario_and_late_pods_end_inside_the_month() {
        let now = 1_796_083_199;
        for seed in 0..20 {
            let a = Scenario::generate(seed, now);
            let b = Scenario::generate(seed, now);
            assert_eq!(a.describe(), b.describe());
            assert_eq!(
                serde_json::to_string(&a.objects(now)).unwrap(),
                serde_json::to_string(&b.objects(now)).unwrap()
            );
            for p in &a.late {
                let end = p.end.unwrap();
                assert!(a.month.start <= p.start && p.start < end && end < a.month.end, "{p:?}");
            }
            assert!(a.pods.iter().all(|p| p.end.is_none_or(|e| e < now) && p.start < now));
            let (_, _, from) = a.reassignment;
            assert!(a.month.start < from && from < a.month.end);
        }
        assert_ne!(Scenario::generate(1, now).describe(), Scenario::generate(2, now).describe());
    }
}
