//! Sharing modes and the approved inventory that turns a mode into a capacity fraction.
//!
//! The fraction of a GPU an allocation holds comes from declared policy and the approved
//! inventory, never from a momentary metric (DESIGN.md, "Allocation").

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::confidence::Confidence;
use crate::error::DomainError;
use crate::fraction::Fraction;
use crate::ids::{EndpointId, MigProfile, VgpuProfile};
use crate::interval::Validity;

/// How a GPU is shared by the allocation that holds (part of) it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum SharingMode {
    /// A whole GPU held by one pod (`nvidia.com/gpu` on a plain device).
    Exclusive,
    /// A MIG instance of the given profile.
    Mig {
        /// The MIG profile, e.g. `1g.10gb`.
        profile: MigProfile,
    },
    /// One replica of a declared time-slicing policy.
    TimeSlice {
        /// Declared replicas per GPU (must be at least 1).
        replicas: u32,
    },
    /// A VM with a vGPU profile.
    Vgpu {
        /// The vGPU profile, e.g. `GRID_T4-1Q`.
        profile: VgpuProfile,
    },
    /// A VM with a whole device passed through.
    Passthrough,
    /// A tenant's share of a shared model-serving endpoint, split by productive work.
    SharedEndpoint {
        /// The endpoint whose allocation is being split.
        endpoint: EndpointId,
    },
}

impl SharingMode {
    /// Confidence of the mode's fraction before any interval doubts: exact for modes fixed by
    /// devices and approved profiles, modeled for declared-policy and work-split modes.
    pub const fn base_confidence(&self) -> Confidence {
        match self {
            SharingMode::Exclusive | SharingMode::Mig { .. } | SharingMode::Vgpu { .. } | SharingMode::Passthrough => {
                Confidence::Exact
            }
            SharingMode::TimeSlice { .. } | SharingMode::SharedEndpoint { .. } => Confidence::Modeled,
        }
    }

    /// The fraction when it follows from the mode alone: 1 for exclusive and passthrough,
    /// `1/replicas` for time-slicing. `None` for MIG and vGPU (see [`resolve_fraction`]) and
    /// for shared endpoints (split by productive work elsewhere).
    pub fn fraction(&self) -> Result<Option<Fraction>, DomainError> {
        match self {
            SharingMode::Exclusive | SharingMode::Passthrough => Ok(Some(Fraction::ONE)),
            SharingMode::TimeSlice { replicas } => {
                if *replicas == 0 {
                    return Err(DomainError::invalid("replicas", "must be at least 1"));
                }
                Fraction::new(1, i128::from(*replicas)).map(Some)
            }
            SharingMode::Mig { .. } | SharingMode::Vgpu { .. } | SharingMode::SharedEndpoint { .. } => Ok(None),
        }
    }

    /// Short snake_case name of the mode, as in the serde tag.
    pub const fn name(&self) -> &'static str {
        match self {
            SharingMode::Exclusive => "exclusive",
            SharingMode::Mig { .. } => "mig",
            SharingMode::TimeSlice { .. } => "time_slice",
            SharingMode::Vgpu { .. } => "vgpu",
            SharingMode::Passthrough => "passthrough",
            SharingMode::SharedEndpoint { .. } => "shared_endpoint",
        }
    }
}

impl fmt::Display for SharingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SharingMode::Mig { profile } => write!(f, "mig {profile}"),
            SharingMode::TimeSlice { replicas } => write!(f, "time_slice 1/{replicas}"),
            SharingMode::Vgpu { profile } => write!(f, "vgpu {profile}"),
            SharingMode::SharedEndpoint { endpoint } => write!(f, "shared_endpoint {endpoint}"),
            other => f.write_str(other.name()),
        }
    }
}

/// Which kind of profile an inventory entry prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileKind {
    /// A MIG profile.
    Mig,
    /// A vGPU profile.
    Vgpu,
}

/// One approved, versioned inventory fact: on `gpu_model`, `profile` is worth `fraction` of a
/// GPU during `valid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileFraction {
    /// MIG or vGPU.
    pub kind: ProfileKind,
    /// The GPU model the profile runs on, e.g. `NVIDIA A100-SXM4-80GB`.
    pub gpu_model: String,
    /// The profile name, e.g. `1g.10gb` or `GRID_A100-4C`.
    pub profile: String,
    /// Approved fraction of one GPU, in `(0, 1]`.
    pub fraction: Fraction,
    /// When this version of the entry applies.
    pub valid: Validity,
}

/// The approved inventory of profile fractions, with versions chosen by time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    entries: Vec<ProfileFraction>,
}

impl Inventory {
    /// An empty inventory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds an inventory from entries, validating each as [`Inventory::insert`] does.
    pub fn from_entries<I: IntoIterator<Item = ProfileFraction>>(entries: I) -> Result<Self, DomainError> {
        let mut inv = Self::new();
        for e in entries {
            inv.insert(e)?;
        }
        Ok(inv)
    }

    /// Adds a version. Rejects a fraction outside `(0, 1]`, empty names, and a validity that
    /// overlaps another version of the same (kind, model, profile): exactly one version may
    /// apply at any instant, so lookups never depend on insertion order.
    pub fn insert(&mut self, entry: ProfileFraction) -> Result<(), DomainError> {
        if entry.fraction.is_zero() || entry.fraction > Fraction::ONE {
            return Err(DomainError::invalid("inventory.fraction", format!("{} is not in (0, 1]", entry.fraction)));
        }
        if entry.gpu_model.trim().is_empty() {
            return Err(DomainError::invalid("inventory.gpu_model", "must not be empty"));
        }
        if entry.profile.trim().is_empty() {
            return Err(DomainError::invalid("inventory.profile", "must not be empty"));
        }
        if let Some(clash) = self.entries.iter().find(|e| {
            e.kind == entry.kind
                && e.gpu_model == entry.gpu_model
                && e.profile == entry.profile
                && e.valid.overlaps(&entry.valid)
        }) {
            return Err(DomainError::invalid(
                "inventory.valid",
                format!(
                    "{} on {} overlaps the version valid from {}",
                    entry.profile,
                    entry.gpu_model,
                    clash.valid.from()
                ),
            ));
        }
        self.entries.push(entry);
        Ok(())
    }

    /// All versions, in insertion order.
    pub fn entries(&self) -> &[ProfileFraction] {
        &self.entries
    }

    /// The version of (kind, model, profile) valid at `at`, if any.
    pub fn lookup(
        &self,
        kind: ProfileKind,
        gpu_model: &str,
        profile: &str,
        at: OffsetDateTime,
    ) -> Option<&ProfileFraction> {
        self.entries
            .iter()
            .find(|e| e.kind == kind && e.gpu_model == gpu_model && e.profile == profile && e.valid.contains(at))
    }

    fn knows(&self, kind: ProfileKind, gpu_model: &str, profile: &str) -> bool {
        self.entries.iter().any(|e| e.kind == kind && e.gpu_model == gpu_model && e.profile == profile)
    }
}

/// Why no fraction could be resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapReason {
    /// The inventory has no entry for this profile on this GPU model.
    UnknownProfile,
    /// The profile is known, but no version is valid at the allocation's time.
    NoVersionValidAt,
    /// A time-slicing policy declared zero replicas.
    InvalidReplicas,
    /// The mode's fraction is not an inventory fact (shared endpoints are split by work).
    NotFromInventory,
}

/// A fact whose fraction the inventory cannot supply. It is a value, not a failure: the
/// allocation is kept and flagged for an admin to complete the inventory, never dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("inventory gap ({reason:?}) for {mode} on {gpu_model:?} at {at}")]
pub struct InventoryGap {
    /// The mode that could not be resolved.
    pub mode: SharingMode,
    /// The GPU model it was looked up for.
    pub gpu_model: String,
    /// The instant looked up.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Why it could not be resolved.
    pub reason: GapReason,
}

/// The capacity fraction and its confidence for an allocation in `mode` on `gpu_model` at
/// `at`, taking MIG/vGPU fractions from the inventory version valid at `at`.
pub fn resolve_fraction(
    mode: &SharingMode,
    gpu_model: &str,
    at: OffsetDateTime,
    inventory: &Inventory,
) -> Result<(Fraction, Confidence), InventoryGap> {
    let gap = |reason| InventoryGap { mode: mode.clone(), gpu_model: gpu_model.to_owned(), at, reason };
    let (kind, profile) = match mode {
        SharingMode::Mig { profile } => (ProfileKind::Mig, profile.as_str()),
        SharingMode::Vgpu { profile } => (ProfileKind::Vgpu, profile.as_str()),
        SharingMode::SharedEndpoint { .. } => return Err(gap(GapReason::NotFromInventory)),
        other => {
            return match other.fraction() {
                Ok(Some(f)) => Ok((f, other.base_confidence())),
                _ => Err(gap(GapReason::InvalidReplicas)),
            };
        }
    };
    match inventory.lookup(kind, gpu_model, profile, at) {
        Some(entry) => Ok((entry.fraction, mode.base_confidence())),
        None if inventory.knows(kind, gpu_model, profile) => Err(gap(GapReason::NoVersionValidAt)),
        None => Err(gap(GapReason::UnknownProfile)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use time::macros::datetime;
    use uuid::Uuid;

    const A100: &str = "NVIDIA A100-SXM4-80GB";

    fn mig(p: &str) -> SharingMode {
        SharingMode::Mig { profile: MigProfile::new(p).unwrap() }
    }

    fn inventory() -> Inventory {
        Inventory::from_entries([
            ProfileFraction {
                kind: ProfileKind::Mig,
                gpu_model: A100.into(),
                profile: "1g.10gb".into(),
                fraction: Fraction::new(1, 7).unwrap(),
                valid: Validity::new(datetime!(2026-01-01 00:00 UTC), Some(datetime!(2026-10-01 00:00 UTC))).unwrap(),
            },
            // A later approval re-prices the same profile at 1/8 from October.
            ProfileFraction {
                kind: ProfileKind::Mig,
                gpu_model: A100.into(),
                profile: "1g.10gb".into(),
                fraction: Fraction::new(1, 8).unwrap(),
                valid: Validity::open(datetime!(2026-10-01 00:00 UTC)),
            },
            ProfileFraction {
                kind: ProfileKind::Vgpu,
                gpu_model: A100.into(),
                profile: "GRID_A100-4C".into(),
                fraction: Fraction::new(1, 20).unwrap(),
                valid: Validity::open(datetime!(2026-01-01 00:00 UTC)),
            },
        ])
        .unwrap()
    }

    #[test]
    fn base_confidence_and_fraction() {
        assert_eq!(SharingMode::Exclusive.base_confidence(), Confidence::Exact);
        assert_eq!(mig("1g.10gb").base_confidence(), Confidence::Exact);
        assert_eq!(SharingMode::Passthrough.base_confidence(), Confidence::Exact);
        assert_eq!(SharingMode::TimeSlice { replicas: 4 }.base_confidence(), Confidence::Modeled);
        let shared = SharingMode::SharedEndpoint { endpoint: EndpointId::from_uuid(Uuid::nil()) };
        assert_eq!(shared.base_confidence(), Confidence::Modeled);
        assert_eq!(SharingMode::Exclusive.fraction().unwrap(), Some(Fraction::ONE));
        assert_eq!(SharingMode::TimeSlice { replicas: 4 }.fraction().unwrap(), Some(Fraction::new(1, 4).unwrap()));
        assert!(SharingMode::TimeSlice { replicas: 0 }.fraction().is_err());
        assert_eq!(mig("1g.10gb").fraction().unwrap(), None);
    }

    #[test]
    fn serde_is_tagged_snake_case() {
        let json = serde_json::to_string(&SharingMode::TimeSlice { replicas: 4 }).unwrap();
        assert_eq!(json, r#"{"mode":"time_slice","replicas":4}"#);
        assert_eq!(serde_json::to_string(&mig("1g.10gb")).unwrap(), r#"{"mode":"mig","profile":"1g.10gb"}"#);
        assert_eq!(serde_json::to_string(&SharingMode::Exclusive).unwrap(), r#"{"mode":"exclusive"}"#);
        let back: SharingMode = serde_json::from_str(r#"{"mode":"mig","profile":"3g.40gb"}"#).unwrap();
        assert_eq!(back, mig("3g.40gb"));
        assert!(serde_json::from_str::<SharingMode>(r#"{"mode":"mig","profile":"bogus"}"#).is_err());
    }

    #[test]
    fn resolves_versions_at_the_validity_boundary() {
        let inv = inventory();
        let before = datetime!(2026-09-30 23:59:59.999999999 UTC);
        let at = datetime!(2026-10-01 00:00 UTC);
        assert_eq!(
            resolve_fraction(&mig("1g.10gb"), A100, before, &inv).unwrap(),
            (Fraction::new(1, 7).unwrap(), Confidence::Exact)
        );
        assert_eq!(
            resolve_fraction(&mig("1g.10gb"), A100, at, &inv).unwrap(),
            (Fraction::new(1, 8).unwrap(), Confidence::Exact)
        );
        let vgpu = SharingMode::Vgpu { profile: VgpuProfile::new("GRID_A100-4C").unwrap() };
        assert_eq!(resolve_fraction(&vgpu, A100, at, &inv).unwrap().0, Fraction::new(1, 20).unwrap());
    }

    #[test]
    fn gaps_are_values() {
        let inv = inventory();
        let at = datetime!(2026-10-01 00:00 UTC);
        let gap = resolve_fraction(&mig("2g.20gb"), A100, at, &inv).unwrap_err();
        assert_eq!(gap.reason, GapReason::UnknownProfile);
        assert_eq!(gap.mode, mig("2g.20gb"));
        assert_eq!(resolve_fraction(&mig("1g.10gb"), "H100", at, &inv).unwrap_err().reason, GapReason::UnknownProfile);
        assert_eq!(
            resolve_fraction(&mig("1g.10gb"), A100, datetime!(2025-12-31 00:00 UTC), &inv).unwrap_err().reason,
            GapReason::NoVersionValidAt
        );
        assert_eq!(
            resolve_fraction(&SharingMode::TimeSlice { replicas: 0 }, A100, at, &inv).unwrap_err().reason,
            GapReason::InvalidReplicas
        );
        assert_eq!(
            resolve_fraction(&SharingMode::TimeSlice { replicas: 4 }, A100, at, &inv).unwrap(),
            (Fraction::new(1, 4).unwrap(), Confidence::Modeled)
        );
    }

    #[test]
    fn inventory_rejects_overlaps_and_bad_fractions() {
        let mut inv = inventory();
        let overlapping = ProfileFraction {
            kind: ProfileKind::Mig,
            gpu_model: A100.into(),
            profile: "1g.10gb".into(),
            fraction: Fraction::new(1, 7).unwrap(),
            valid: Validity::open(datetime!(2026-12-01 00:00 UTC)),
        };
        assert!(inv.insert(overlapping.clone()).is_err());
        let too_big = ProfileFraction {
            profile: "9g.90gb".into(),
            fraction: Fraction::new(8, 7).unwrap(),
            ..overlapping.clone()
        };
        assert!(inv.insert(too_big).is_err());
        let zero = ProfileFraction { profile: "9g.90gb".into(), fraction: Fraction::ZERO, ..overlapping };
        assert!(inv.insert(zero).is_err());
        assert_eq!(inv.entries().len(), 3);
    }
}
