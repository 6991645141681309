//! Device faults from DCGM Exporter scrapes → `device_fault` facts (issue 35: credits when the hardware failed).
//!
//! What a scrape says and what the agent makes of it:
//! - `DCGM_FI_DEV_XID_ERRORS` is the value of the **last** XID error of the GPU (0: none since the driver loaded). A
//!   change to a non-zero code is a fault (`xid`); a change back to 0 (a reset reloaded the driver) ends it
//!   (`recovered`). The first scrape after the agent starts reports a non-zero code it finds once (it may be old: the
//!   server's outage logic treats a repeated XID during an open outage as the same outage).
//! - A GPU that was in the previous scrape and is missing from this one (while the scrape still lists other GPUs)
//!   fell off the bus or was lost (`device_lost`, XID 79's usual companion); its return is `recovered`.
//! - `DCGM_FI_DEV_RETIRED_DBE` (pages retired for double-bit ECC errors) rising is `retired_pages`.
//!
//! MIG rows carry their parent GPU's UUID: one state per physical GPU. Nothing here reads a clock.

use std::collections::{BTreeMap, BTreeSet};

use gpuledger_core::wire::{DeviceFaultFact, DeviceFaultKind, Fact, FactBody, event_id};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::prom::Sample;

/// Last XID error of the GPU.
pub const XID_ERRORS: &str = "DCGM_FI_DEV_XID_ERRORS";
/// Pages retired for double-bit ECC errors.
pub const RETIRED_DBE: &str = "DCGM_FI_DEV_RETIRED_DBE";
/// Most GPUs one node agent tracks (a node has at most a few dozen; a hostile exporter cannot grow this).
const MAX_TRACKED: usize = 1_024;

/// What the agent remembers of each GPU between scrapes.
#[derive(Debug, Default)]
pub struct FaultWatch {
    xid: BTreeMap<String, u32>,
    retired: BTreeMap<String, u64>,
    present: BTreeSet<String>,
    lost: BTreeSet<String>,
}

impl FaultWatch {
    /// An empty watch (nothing seen yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one scrape of `node` taken at `at`; returns the faults (and recoveries) it shows.
    pub fn observe(&mut self, node: &str, samples: &[Sample], at: OffsetDateTime) -> Vec<DeviceFaultFact> {
        let mut out = Vec::new();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut xids: BTreeMap<String, u32> = BTreeMap::new();
        let mut retired: BTreeMap<String, u64> = BTreeMap::new();
        for s in samples {
            let Some(uuid) = s.label("UUID").filter(|u| u.len() <= 128) else { continue };
            if seen.len() >= MAX_TRACKED && !seen.contains(uuid) {
                continue;
            }
            seen.insert(uuid.to_string());
            let whole = s.value.is_finite() && s.value >= 0.0 && s.value.fract() == 0.0 && s.value < 4.0e9;
            if !whole {
                continue;
            }
            // Integral and in range: the casts below are exact.
            if s.name == XID_ERRORS {
                xids.entry(uuid.to_string()).or_insert(s.value as u32);
            } else if s.name == RETIRED_DBE {
                retired.entry(uuid.to_string()).or_insert(s.value as u64);
            }
        }
        let fact = |uuid: &str, fault, xid, detail: String| DeviceFaultFact {
            node: node.to_string(),
            gpu_uuid: uuid.to_string(),
            fault,
            xid,
            occurred_at: at,
            detail: Some(detail),
        };
        // Lost: in the previous scrape, not in this one, while this one lists GPUs (an empty or failed scrape says
        // nothing about the devices).
        if !seen.is_empty() {
            for uuid in self.present.difference(&seen) {
                if self.lost.insert(uuid.clone()) {
                    out.push(fact(
                        uuid,
                        DeviceFaultKind::DeviceLost,
                        None,
                        "gone from the DCGM exporter's output".into(),
                    ));
                }
            }
        }
        for uuid in &seen {
            if self.lost.remove(uuid) {
                out.push(fact(uuid, DeviceFaultKind::Recovered, None, "back in the DCGM exporter's output".into()));
            }
        }
        for (uuid, code) in &xids {
            let before = self.xid.get(uuid).copied().unwrap_or(0);
            if *code != before {
                if *code == 0 {
                    out.push(fact(uuid, DeviceFaultKind::Recovered, None, format!("{XID_ERRORS} {before} → 0")));
                } else {
                    let what =
                        gpuledger_core::faults::describe_xid(*code).map(|d| format!(" ({d})")).unwrap_or_default();
                    out.push(fact(
                        uuid,
                        DeviceFaultKind::Xid,
                        Some(*code),
                        format!("{XID_ERRORS} {before} → {code}{what}"),
                    ));
                }
            }
        }
        for (uuid, pages) in &retired {
            let before = self.retired.get(uuid).copied();
            if before.is_some_and(|b| *pages > b) || (before.is_none() && *pages > 0 && !self.present.is_empty()) {
                out.push(fact(
                    uuid,
                    DeviceFaultKind::RetiredPages,
                    None,
                    format!("{RETIRED_DBE} {} → {pages}", before.unwrap_or(0)),
                ));
            }
        }
        if !seen.is_empty() {
            self.present = seen;
        }
        self.xid.extend(xids);
        self.retired.extend(retired);
        // Bounded like the scrape: forget GPUs long gone from every map once past the cap.
        if self.xid.len() > MAX_TRACKED || self.retired.len() > MAX_TRACKED || self.lost.len() > MAX_TRACKED {
            let keep = self.present.clone();
            self.xid.retain(|k, _| keep.contains(k));
            self.retired.retain(|k, _| keep.contains(k));
            self.lost.retain(|k| keep.contains(k));
        }
        out
    }
}

/// A fault as a fact. The event ID names the GPU, the kind, the code and the instant: the same observation sent
/// twice (a spool re-delivery) is stored once.
pub fn fault_fact(f: &DeviceFaultFact, observed_at: OffsetDateTime) -> Fact {
    let at = f.occurred_at.format(&Rfc3339).unwrap_or_default();
    let xid = f.xid.map(|x| x.to_string()).unwrap_or_default();
    Fact {
        event_id: event_id("device-fault", &[&f.gpu_uuid, f.fault.as_str(), &xid, &at]),
        observed_at,
        body: FactBody::DeviceFault(f.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::metrics::prom;
    use time::macros::datetime;

    /// The real capture (two T4s, XID 0 on both) of `../shared/fixtures/dcgm`, and the same capture as DCGM writes it
    /// after GPU 1 fell off the bus (`DCGM_FI_DEV_XID_ERRORS` 79), and after GPU 1 is gone from the output.
    fn fixture() -> String {
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/dcgm/fractional_t4_runai_reservation_pod.txt");
        std::fs::read_to_string(path).unwrap()
    }

    fn parse(text: &str) -> Vec<Sample> {
        prom::parse(text).unwrap().samples
    }

    #[test]
    fn an_xid_79_in_a_real_dcgm_capture_is_a_fault_and_its_reset_a_recovery() {
        let clean = fixture();
        let gpu1 = "GPU-5f587dd4-6505-0873-c6db-8324dbfe5ba9";
        let xid_line = clean.lines().find(|l| l.starts_with(XID_ERRORS) && l.contains(gpu1)).unwrap().to_string();
        assert!(xid_line.ends_with(" 0"), "{xid_line}");
        let faulted = clean.replace(&xid_line, &format!("{} 79", &xid_line[..xid_line.len() - 2]));
        let mut w = FaultWatch::new();
        assert!(w.observe("n1", &parse(&clean), datetime!(2026-11-03 10:00 UTC)).is_empty(), "a clean start");
        let f = w.observe("n1", &parse(&faulted), datetime!(2026-11-03 10:01 UTC));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].gpu_uuid.as_str(), f[0].fault, f[0].xid), (gpu1, DeviceFaultKind::Xid, Some(79)));
        assert!(f[0].detail.as_deref().unwrap().contains("0 → 79 (GPU has fallen off the bus)"), "{f:?}");
        assert!(w.observe("n1", &parse(&faulted), datetime!(2026-11-03 10:02 UTC)).is_empty(), "reported once");
        // The GPU gone from the output (its rows removed), then back after a reset with XID 0.
        let gone: String = faulted.lines().filter(|l| !l.contains(gpu1)).map(|l| format!("{l}\n")).collect();
        let lost = w.observe("n1", &parse(&gone), datetime!(2026-11-03 10:03 UTC));
        assert_eq!(lost.iter().map(|f| f.fault).collect::<Vec<_>>(), vec![DeviceFaultKind::DeviceLost]);
        let back = w.observe("n1", &parse(&clean), datetime!(2026-11-03 11:00 UTC));
        assert_eq!(back.len(), 2, "back on the bus, and its XID cleared: {back:?}");
        assert!(back.iter().all(|f| f.fault == DeviceFaultKind::Recovered && f.gpu_uuid == gpu1));
        // An empty scrape (the exporter restarting) loses nothing.
        assert!(w.observe("n1", &[], datetime!(2026-11-03 11:01 UTC)).is_empty());
        let fact = fault_fact(&f[0], datetime!(2026-11-03 10:01 UTC));
        assert_eq!(fact.body.kind(), "device_fault");
        assert_eq!(fact.event_id, fault_fact(&f[0], datetime!(2026-11-03 12:00 UTC)).event_id, "re-sent: same ID");
    }

    #[test]
    fn retired_pages_rising_is_a_fault() {
        let text = |n: u32| {
            format!(
                "# TYPE {RETIRED_DBE} counter\n{RETIRED_DBE}{{gpu=\"0\",UUID=\"GPU-a\"}} {n}\n{XID_ERRORS}{{gpu=\"0\",UUID=\"GPU-a\"}} 0\n"
            )
        };
        let mut w = FaultWatch::new();
        assert!(w.observe("n", &parse(&text(0)), datetime!(2026-11-01 00:00 UTC)).is_empty());
        let f = w.observe("n", &parse(&text(2)), datetime!(2026-11-01 00:01 UTC));
        assert_eq!(f.iter().map(|f| f.fault).collect::<Vec<_>>(), vec![DeviceFaultKind::RetiredPages]);
        assert!(w.observe("n", &parse(&text(2)), datetime!(2026-11-01 00:02 UTC)).is_empty());
    }
}
