//! Credits when the hardware failed: which device faults count (the policy), the outages they open on a device
//! (from the fault until the device recovered), and the hours of an allocation that fell into one (from the fault
//! plus a grace time until the allocation ended or the device recovered). Pure: the server reads the facts and the
//! allocations, this module says which hours to credit.

use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use crate::wire::DeviceFaultKind;

/// The XID codes credited by default: 48 (double-bit ECC error), 79 (GPU has fallen off the bus), 94 (contained
/// ECC error: the application was stopped), 95 (uncontained ECC error: every application on the GPU stopped).
pub const DEFAULT_XIDS: [u32; 4] = [48, 79, 94, 95];

/// What NVIDIA documents an XID to mean, for people (the codes this module's users meet most); `None` otherwise.
pub fn describe_xid(xid: u32) -> Option<&'static str> {
    Some(match xid {
        13 => "graphics engine exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "preemptive cleanup, due to previous errors",
        48 => "double-bit ECC error",
        61 | 62 => "internal micro-controller error",
        63 => "ECC page retirement or row remapping recorded",
        64 => "ECC page retirement or row remapping failure",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        119 | 120 => "GSP error",
        _ => return None,
    })
}

/// When a fault earns a credit (part of the cost policy; absent from a document that keeps the defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPolicy {
    /// XID codes that open an outage.
    #[serde(default = "default_xids")]
    pub xids: Vec<u32>,
    /// Whether a GPU gone from the bus (`device_lost`) opens one.
    #[serde(default = "yes")]
    pub device_lost: bool,
    /// Whether retired memory pages open one.
    #[serde(default)]
    pub retired_pages: bool,
    /// Minutes after the fault before hours count (a job that restarts at once lost nothing).
    #[serde(default = "default_grace")]
    pub grace_minutes: u32,
    /// Propose the credits for finance's approval (`false`: faults are listed with their hours, nothing proposed).
    #[serde(default = "yes")]
    pub auto_propose: bool,
}

fn default_xids() -> Vec<u32> {
    DEFAULT_XIDS.to_vec()
}
fn yes() -> bool {
    true
}
fn default_grace() -> u32 {
    5
}

impl Default for FaultPolicy {
    fn default() -> Self {
        Self { xids: default_xids(), device_lost: true, retired_pages: false, grace_minutes: 5, auto_propose: true }
    }
}

impl FaultPolicy {
    /// Whether these are the defaults (not written into documents).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether a fault of `kind` (with `xid`) opens an outage under this policy.
    pub fn counts(&self, kind: DeviceFaultKind, xid: Option<u32>) -> bool {
        match kind {
            DeviceFaultKind::Xid => xid.is_some_and(|x| self.xids.contains(&x)),
            DeviceFaultKind::DeviceLost => self.device_lost,
            DeviceFaultKind::RetiredPages => self.retired_pages,
            DeviceFaultKind::Recovered => false,
        }
    }
}

/// One fault fact of a device, as the server read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultEvent {
    /// The fact's event ID (the evidence).
    pub event_id: String,
    /// What happened.
    pub kind: DeviceFaultKind,
    /// XID code.
    pub xid: Option<u32>,
    /// When.
    pub at: OffsetDateTime,
}

/// An outage of one device: a counted fault until the device recovered (`None`: not yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    /// The fault that opened it.
    pub fault: FaultEvent,
    /// When the device recovered.
    pub recovered_at: Option<OffsetDateTime>,
}

/// The outages of one device from its fault facts (any order): a counted fault opens one unless one is already open
/// (a second XID during an outage is the same outage); `recovered` closes it. Faults the policy does not count are
/// ignored.
pub fn outages(policy: &FaultPolicy, events: &[FaultEvent]) -> Vec<Outage> {
    let mut sorted: Vec<&FaultEvent> = events.iter().collect();
    sorted.sort_by(|a, b| a.at.cmp(&b.at).then(a.event_id.cmp(&b.event_id)));
    let mut out: Vec<Outage> = Vec::new();
    let mut open: Option<usize> = None;
    for e in sorted {
        match e.kind {
            DeviceFaultKind::Recovered => {
                if let Some(i) = open.take() {
                    out[i].recovered_at = Some(e.at);
                }
            }
            kind if policy.counts(kind, e.xid) && open.is_none() => {
                open = Some(out.len());
                out.push(Outage { fault: e.clone(), recovered_at: None });
            }
            _ => {}
        }
    }
    out
}

/// The part of an allocation `[start, end)` (`end` `None`: still running, counted to `now`) that an outage took:
/// from the fault plus `grace` until the allocation ended, the device recovered or `now`, whichever first.
pub fn lost_window(
    outage: &Outage,
    grace: Duration,
    start: OffsetDateTime,
    end: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Option<(OffsetDateTime, OffsetDateTime)> {
    let from = start.max(outage.fault.at + grace);
    let mut to = end.unwrap_or(now).min(now);
    if let Some(r) = outage.recovered_at {
        to = to.min(r);
    }
    (to > from).then_some((from, to))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use time::macros::datetime;

    fn ev(id: &str, kind: DeviceFaultKind, xid: Option<u32>, at: OffsetDateTime) -> FaultEvent {
        FaultEvent { event_id: id.into(), kind, xid, at }
    }

    #[test]
    fn an_xid_79_opens_an_outage_until_the_device_recovers() {
        let p = FaultPolicy::default();
        let events = [
            ev("r", DeviceFaultKind::Recovered, None, datetime!(2026-11-03 14:00 UTC)),
            ev("f", DeviceFaultKind::Xid, Some(79), datetime!(2026-11-03 10:00 UTC)),
            ev("again", DeviceFaultKind::Xid, Some(79), datetime!(2026-11-03 11:00 UTC)),
            ev("minor", DeviceFaultKind::Xid, Some(13), datetime!(2026-11-04 10:00 UTC)),
            ev("lost", DeviceFaultKind::DeviceLost, None, datetime!(2026-11-05 10:00 UTC)),
        ];
        let o = outages(&p, &events);
        assert_eq!(o.len(), 2, "{o:?}");
        assert_eq!((o[0].fault.event_id.as_str(), o[0].recovered_at), ("f", Some(datetime!(2026-11-03 14:00 UTC))));
        assert_eq!((o[1].fault.event_id.as_str(), o[1].recovered_at), ("lost", None));
        // A job running 08:00–20:00 lost 10:05–14:00 (5 minutes of grace; the device came back at 14:00).
        let w = lost_window(
            &o[0],
            Duration::minutes(5),
            datetime!(2026-11-03 08:00 UTC),
            Some(datetime!(2026-11-03 20:00 UTC)),
            datetime!(2026-11-30 00:00 UTC),
        );
        assert_eq!(w, Some((datetime!(2026-11-03 10:05 UTC), datetime!(2026-11-03 14:00 UTC))));
        // One that ended within the grace time lost nothing; one started after the recovery neither.
        let short = lost_window(
            &o[0],
            Duration::minutes(5),
            datetime!(2026-11-03 08:00 UTC),
            Some(datetime!(2026-11-03 10:03 UTC)),
            datetime!(2026-11-30 00:00 UTC),
        );
        assert_eq!(short, None);
        let later =
            lost_window(&o[0], Duration::ZERO, datetime!(2026-11-03 15:00 UTC), None, datetime!(2026-11-30 00:00 UTC));
        assert_eq!(later, None);
        // Still lost and still running: counted to now.
        let open =
            lost_window(&o[1], Duration::ZERO, datetime!(2026-11-05 00:00 UTC), None, datetime!(2026-11-05 12:30 UTC));
        assert_eq!(open, Some((datetime!(2026-11-05 10:00 UTC), datetime!(2026-11-05 12:30 UTC))));
    }

    #[test]
    fn the_policy_decides_which_faults_count() {
        let mut p = FaultPolicy { xids: vec![48], device_lost: false, ..FaultPolicy::default() };
        assert!(p.counts(DeviceFaultKind::Xid, Some(48)));
        assert!(!p.counts(DeviceFaultKind::Xid, Some(79)));
        assert!(!p.counts(DeviceFaultKind::DeviceLost, None));
        assert!(!p.counts(DeviceFaultKind::RetiredPages, None));
        p.retired_pages = true;
        assert!(p.counts(DeviceFaultKind::RetiredPages, None));
        assert!(!p.counts(DeviceFaultKind::Recovered, None));
        assert_eq!(describe_xid(79), Some("GPU has fallen off the bus"));
        let json: FaultPolicy = serde_json::from_str("{}").unwrap();
        assert!(json.is_default());
    }
}
