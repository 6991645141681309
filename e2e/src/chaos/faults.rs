//! The fault schedule of a seed: what goes wrong, when, for how long. Printed with every seed's result, so a failing
//! seed says what it went through.

use std::fmt;

use super::{proxy::Mode, rng::Rng};

/// Something that goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of the server; it starts again after `down_ms`.
    KillServer {
        /// How long it stays down.
        down_ms: u64,
    },
    /// `kill -9` of the cluster agent; it starts again on its spool after `down_ms`.
    KillClusterAgent {
        /// How long it stays down.
        down_ms: u64,
    },
    /// `kill -9` of the node agent.
    KillNodeAgent {
        /// How long it stays down.
        down_ms: u64,
    },
    /// `kill -9` of PostgreSQL (postmaster and backends); crash recovery after `down_ms`.
    KillPostgres {
        /// How long it stays down.
        down_ms: u64,
    },
    /// The network between agents and server misbehaves as `mode` for `ms`.
    Partition {
        /// What the network does.
        mode: Mode,
        /// For how long.
        ms: u64,
    },
    /// The cluster agent's spool file system is full for `ms`.
    DiskFull {
        /// For how long.
        ms: u64,
    },
    /// `count` batches already delivered are sent again, shuffled.
    Resend {
        /// How many.
        count: usize,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KillServer { down_ms } => write!(f, "kill -9 server, down {down_ms} ms"),
            Self::KillClusterAgent { down_ms } => write!(f, "kill -9 cluster agent, down {down_ms} ms"),
            Self::KillNodeAgent { down_ms } => write!(f, "kill -9 node agent, down {down_ms} ms"),
            Self::KillPostgres { down_ms } => write!(f, "kill -9 PostgreSQL, down {down_ms} ms"),
            Self::Partition { mode, ms } => write!(f, "network {mode:?} for {ms} ms"),
            Self::DiskFull { ms } => write!(f, "agent spool disk full for {ms} ms"),
            Self::Resend { count } => write!(f, "re-send {count} delivered batches, shuffled"),
        }
    }
}

/// A fault at a time after the phase starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    /// Milliseconds after the phase starts.
    pub at_ms: u64,
    /// What goes wrong.
    pub fault: Fault,
}

/// A seed's faults: during the first delivery, around the late data, and the agents' clock skew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// While the agents deliver the cluster's history (the phase lasts [`Schedule::DELIVERY_MS`]).
    pub delivery: Vec<Scheduled>,
    /// While the late pods arrive, after the close ([`Schedule::LATE_MS`]).
    pub late: Vec<Scheduled>,
    /// The cluster agent's clock minus the server's, in seconds.
    pub cluster_skew: i64,
    /// The node agent's clock minus the server's, in seconds.
    pub node_skew: i64,
    /// A long partition past the spool cap in the delivery phase (large histories only).
    pub overflow: bool,
}

impl Schedule {
    /// Length of the delivery phase.
    pub const DELIVERY_MS: u64 = 40_000;
    /// Length of an overflow's outage at the start of the delivery phase (which then lasts this much longer).
    pub const OVERFLOW_MS: u64 = 35_000;
    /// Length of the late-data phase.
    pub const LATE_MS: u64 = 15_000;

    /// The schedule of `seed`; `large`: the scenario's history can overflow a small spool.
    pub fn generate(seed: u64, large: bool) -> Self {
        let mut rng = Rng::new(seed, 2);
        let mut delivery = Vec::new();
        let overflow = large && (seed % 5 == 3 || rng.chance(70));
        if overflow {
            // The server is away from the start while the agent lists everything, longer than the agent holds appends for
            // room (`Room::STALLED`, 20 s): the spool fills and drops.
            delivery.push(Scheduled { at_ms: 0, fault: Fault::Partition { mode: Mode::Down, ms: Self::OVERFLOW_MS } });
        }
        // The other faults come after an overflow's outage (which they would otherwise cut short).
        let offset = if overflow { Self::OVERFLOW_MS } else { 0 };
        for _ in 0..rng.range(4, 9) {
            let at_ms = offset + rng.range(0, Self::DELIVERY_MS as i64 - 8000) as u64;
            delivery.push(Scheduled { at_ms, fault: draw(&mut rng) });
        }
        delivery.sort_by_key(|s| s.at_ms);
        let mut late = Vec::new();
        for _ in 0..rng.range(2, 4) {
            late.push(Scheduled { at_ms: rng.range(0, Self::LATE_MS as i64 - 6000) as u64, fault: draw(&mut rng) });
        }
        late.push(Scheduled {
            at_ms: rng.range(1000, 5000) as u64,
            fault: Fault::Resend { count: rng.range(3, 20) as usize },
        });
        late.sort_by_key(|s| s.at_ms);
        Self { delivery, late, cluster_skew: rng.range(-90, 90), node_skew: rng.range(-90, 90), overflow }
    }

    /// Length of this schedule's delivery phase.
    pub fn delivery_ms(&self) -> u64 {
        Self::DELIVERY_MS + if self.overflow { Self::OVERFLOW_MS } else { 0 }
    }

    /// The schedule, one fault per line.
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![format!(
            "clock skew: cluster agent {:+} s, node agent {:+} s{}",
            self.cluster_skew,
            self.node_skew,
            if self.overflow { "; spool overflow (server away while the agent lists)" } else { "" }
        )];
        out.extend(self.delivery.iter().map(|s| format!("delivery +{:>5} ms: {}", s.at_ms, s.fault)));
        out.extend(self.late.iter().map(|s| format!("late     +{:>5} ms: {}", s.at_ms, s.fault)));
        out
    }
}

fn draw(rng: &mut Rng) -> Fault {
    match rng.range(0, 9) {
        0 | 1 => Fault::KillServer { down_ms: rng.range(200, 4000) as u64 },
        2 => Fault::KillClusterAgent { down_ms: rng.range(0, 3000) as u64 },
        3 => Fault::KillNodeAgent { down_ms: rng.range(0, 3000) as u64 },
        4 => Fault::KillPostgres { down_ms: rng.range(200, 3000) as u64 },
        5 => Fault::DiskFull { ms: rng.range(2000, 8000) as u64 },
        6 => Fault::Resend { count: rng.range(2, 12) as usize },
        _ => Fault::Partition {
            mode: *rng.pick(&[Mode::Down, Mode::Blackhole, Mode::Flaky, Mode::Flaky]),
            ms: rng.range(2000, 12_000) as u64,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_schedule_and_every_fault_kind_occurs() {
        assert_eq!(Schedule::generate(3, true), Schedule::generate(3, true));
        let mut kinds = std::collections::HashSet::new();
        for seed in 0..50 {
            let s = Schedule::generate(seed, seed % 2 == 0);
            assert!(s.delivery.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
            assert!(s.delivery.iter().all(|f| f.at_ms < s.delivery_ms()));
            if s.overflow {
                let outage = s.delivery[0];
                assert_eq!(outage.fault, Fault::Partition { mode: Mode::Down, ms: Schedule::OVERFLOW_MS });
                assert!(s.delivery[1..].iter().all(|f| f.at_ms >= Schedule::OVERFLOW_MS), "{s:?}");
            }
            assert!(s.late.iter().any(|f| matches!(f.fault, Fault::Resend { .. })));
            assert!((-90..=90).contains(&s.cluster_skew));
            for f in s.delivery.iter().chain(&s.late) {
                kinds.insert(std::mem::discriminant(&f.fault));
            }
            assert!(!s.describe().is_empty());
        }
        assert_eq!(kinds.len(), 7, "every kind of fault is drawn by some seed");
    }
}
