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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum SharingMode {
    /// A whole GPU held by one pod (`nvidia.com/gpu` on a plain device).
    Exclusive,
    /// A MIG instance of the given profile.
    Mig {
        /// The MIG profile, e.g. `1g.10gb`.
        #[cfg_attr(feature = "schema", schemars(with = "String"))]
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
        #[cfg_attr(feature = "schema", schemars(with = "String"))]
        profile: VgpuProfile,
    },
    /// A VM with a whole device passed through.
    Passthrough,
    /// A share of one GPU as a soft-sharing scheduler declares it (HAMi, Volcano vGPU, Run:ai fractions, Alibaba
    /// gpushare): a compute share, a memory share, or both. Which one is charged is the approved inventory's
    /// [`ShareBasis`], so the fraction is resolved by [`resolve_fraction`], not by the mode alone.
    SoftShare {
        /// The scheduler whose resources or annotations declared it.
        scheduler: SoftScheduler,
        /// Share of the GPU's compute (streaming multiprocessors), in `(0, 1]`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
        compute: Option<Fraction>,
        /// Share of the GPU's memory as a fraction, in `(0, 1]`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
        memory: Option<Fraction>,
        /// Memory in MiB, when declared absolutely (a fraction once the model's memory is known).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_mib: Option<u64>,
    },
    /// A tenant's share of a shared model-serving endpoint, split by productive work.
    SharedEndpoint {
        /// The endpoint whose allocation is being split.
        #[cfg_attr(feature = "schema", schemars(with = "uuid::Uuid"))]
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
            SharingMode::TimeSlice { .. } | SharingMode::SoftShare { .. } | SharingMode::SharedEndpoint { .. } => {
                Confidence::Modeled
            }
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
            SharingMode::Mig { .. }
            | SharingMode::Vgpu { .. }
            | SharingMode::SoftShare { .. }
            | SharingMode::SharedEndpoint { .. } => Ok(None),
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
            SharingMode::SoftShare { .. } => "soft_share",
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
            SharingMode::SoftShare { scheduler, compute, memory, memory_mib } => {
                write!(f, "soft_share {scheduler}")?;
                if let Some(c) = compute {
                    write!(f, " compute {}", percent(c))?;
                }
                if let Some(m) = memory {
                    write!(f, " memory {}", percent(m))?;
                }
                if let Some(m) = memory_mib {
                    write!(f, " memory {m} MiB")?;
                }
                Ok(())
            }
            other => f.write_str(other.name()),
        }
    }
}

/// A fraction as a percentage for people (`30 %`, `33.33 %`).
fn percent(f: &Fraction) -> String {
    let text = f.checked_mul_int(100).and_then(|p| p.to_decimal_string(2)).unwrap_or_else(|_| f.to_string());
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} %")
}

/// The soft-sharing schedulers whose declarations the agents read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SoftScheduler {
    /// HAMi (`nvidia.com/gpucores`, `nvidia.com/gpumem`, `nvidia.com/gpumem-percentage`).
    Hami,
    /// Volcano vGPU (`volcano.sh/vgpu-number`, `volcano.sh/vgpu-cores`, `volcano.sh/vgpu-memory`).
    Volcano,
    /// Run:ai fractions (`gpu-fraction`, `gpu-memory` annotations).
    Runai,
    /// Alibaba Cloud gpushare (`aliyun.com/gpu-mem`, `aliyun.com/gpu-core.percentage`).
    Gpushare,
}

impl fmt::Display for SoftScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SoftScheduler::Hami => "hami",
            SoftScheduler::Volcano => "volcano",
            SoftScheduler::Runai => "runai",
            SoftScheduler::Gpushare => "gpushare",
        })
    }
}

/// Which share a soft-shared allocation pays: part of the approved inventory, versioned per cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareBasis {
    /// The compute share (a declared memory share stands in when no compute share is declared).
    Compute,
    /// The memory share (a declared compute share stands in when no memory share is declared).
    Memory,
    /// The larger of the two: what the pod keeps others from using. The default.
    #[default]
    Larger,
}

impl ShareBasis {
    /// Its snake_case name.
    pub const fn name(self) -> &'static str {
        match self {
            ShareBasis::Compute => "compute",
            ShareBasis::Memory => "memory",
            ShareBasis::Larger => "larger",
        }
    }

    /// How explanations say it.
    pub const fn describe(self) -> &'static str {
        match self {
            ShareBasis::Compute => "the compute share",
            ShareBasis::Memory => "the memory share",
            ShareBasis::Larger => "the larger of the compute and memory shares",
        }
    }
}

impl std::str::FromStr for ShareBasis {
    type Err = DomainError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "compute" => Ok(ShareBasis::Compute),
            "memory" => Ok(ShareBasis::Memory),
            "larger" => Ok(ShareBasis::Larger),
            other => Err(DomainError::invalid("basis", format!("{other:?} is not compute, memory or larger"))),
        }
    }
}

/// One approved version of a GPU model's memory (what a memory share in MiB is a fraction of).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelMemory {
    /// The GPU model.
    pub gpu_model: String,
    /// Its memory in MiB.
    pub memory_mib: u64,
    /// When this version applies.
    pub valid: Validity,
}

/// One approved version of the share basis for the inventory's scope (an organization or one cluster).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareBasisVersion {
    /// The basis.
    pub basis: ShareBasis,
    /// When it applies.
    pub valid: Validity,
}

/// A soft share resolved to the fraction charged, with how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedShare {
    /// GPU-equivalents per unit.
    pub fraction: Fraction,
    /// The basis that applied.
    pub basis: ShareBasis,
    /// For people: `"hami: compute 30 %, memory 50 % → the larger of the compute and memory shares: 50 %"`.
    pub explanation: String,
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
    /// Model memory versions (for memory shares given in MiB).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    memory: Vec<ModelMemory>,
    /// Share-basis versions for soft-shared allocations; none: [`ShareBasis::Larger`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    share_bases: Vec<ShareBasisVersion>,
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

    /// Adds a model memory version (normalized model names are the caller's business, as for profiles).
    pub fn insert_memory(&mut self, entry: ModelMemory) -> Result<(), DomainError> {
        if entry.memory_mib == 0 {
            return Err(DomainError::invalid("inventory.memory_mib", "must be positive"));
        }
        if self.memory.iter().any(|m| m.gpu_model == entry.gpu_model && m.valid.overlaps(&entry.valid)) {
            return Err(DomainError::invalid(
                "inventory.valid",
                format!("memory of {} overlaps another version", entry.gpu_model),
            ));
        }
        self.memory.push(entry);
        Ok(())
    }

    /// Adds a share-basis version; versions may not overlap.
    pub fn insert_share_basis(&mut self, entry: ShareBasisVersion) -> Result<(), DomainError> {
        if self.share_bases.iter().any(|b| b.valid.overlaps(&entry.valid)) {
            return Err(DomainError::invalid("inventory.valid", "share basis versions overlap"));
        }
        self.share_bases.push(entry);
        Ok(())
    }

    /// The model's memory at `at`.
    pub fn memory_at(&self, gpu_model: &str, at: OffsetDateTime) -> Option<u64> {
        self.memory.iter().find(|m| m.gpu_model == gpu_model && m.valid.contains(at)).map(|m| m.memory_mib)
    }

    /// The share basis at `at` ([`ShareBasis::Larger`] unless a version says otherwise).
    pub fn share_basis_at(&self, at: OffsetDateTime) -> ShareBasis {
        self.share_bases.iter().find(|b| b.valid.contains(at)).map(|b| b.basis).unwrap_or_default()
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
    /// A memory share in MiB on a model whose memory the inventory does not list.
    UnknownModelMemory,
    /// A soft share that declares neither a compute nor a memory share, or one outside `(0, 1]`.
    InvalidShare,
}

/// A fact whose fraction the inventory cannot supply. It is a value, not a failure: the
/// allocation is kept and flagged for an admin to complete the inventory, never dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("inventory gap ({reason:?}) for {mode} on {gpu_model:?} at {at}")]
pub struct InventoryGap {
    /// The mode that could not be resolved (boxed: a soft share's mode is large, and gaps travel in `Err`).
    pub mode: Box<SharingMode>,
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
    let gap = |reason| InventoryGap { mode: Box::new(mode.clone()), gpu_model: gpu_model.to_owned(), at, reason };
    let (kind, profile) = match mode {
        SharingMode::Mig { profile } => (ProfileKind::Mig, profile.as_str()),
        SharingMode::Vgpu { profile } => (ProfileKind::Vgpu, profile.as_str()),
        SharingMode::SharedEndpoint { .. } => return Err(gap(GapReason::NotFromInventory)),
        SharingMode::SoftShare { .. } => {
            return resolve_share(mode, gpu_model, at, inventory)
                .map(|r| (r.fraction, mode.base_confidence()))
                .map_err(gap);
        }
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

/// A soft share's fraction per unit under the inventory's basis at `at`. A memory share in MiB becomes a fraction
/// of the model's approved memory; a side the pod did not declare is stood in for by the side it did; a share
/// above one GPU is charged as one GPU (the device cannot give more).
pub fn resolve_share(
    mode: &SharingMode,
    gpu_model: &str,
    at: OffsetDateTime,
    inventory: &Inventory,
) -> Result<ResolvedShare, GapReason> {
    let SharingMode::SoftShare { scheduler, compute, memory, memory_mib } = mode else {
        return Err(GapReason::NotFromInventory);
    };
    let valid = |f: &Fraction| !f.is_zero() && *f <= Fraction::ONE;
    if compute.is_some_and(|c| !valid(&c)) || memory.is_some_and(|m| !valid(&m)) {
        return Err(GapReason::InvalidShare);
    }
    let basis = inventory.share_basis_at(at);
    let mut said = Vec::new();
    if let Some(c) = compute {
        said.push(format!("compute {}", percent(c)));
    }
    let memory = match (memory, memory_mib) {
        (Some(m), _) => {
            said.push(format!("memory {}", percent(m)));
            Some(*m)
        }
        (None, Some(mib)) => {
            let needed = basis != ShareBasis::Compute || compute.is_none();
            match inventory.memory_at(gpu_model, at) {
                Some(total) => {
                    let f = Fraction::new(i128::from(*mib), i128::from(total))
                        .map_err(|_| GapReason::InvalidShare)?
                        .min(Fraction::ONE);
                    said.push(format!("memory {mib} MiB of {total} MiB = {}", percent(&f)));
                    Some(f)
                }
                None if needed => return Err(GapReason::UnknownModelMemory),
                None => None,
            }
        }
        (None, None) => None,
    };
    let fraction = match (basis, compute, memory) {
        (_, None, None) => return Err(GapReason::InvalidShare),
        (ShareBasis::Compute, Some(c), _) | (ShareBasis::Memory, Some(c), None) => *c,
        (ShareBasis::Memory, _, Some(m)) | (ShareBasis::Compute, None, Some(m)) => m,
        (ShareBasis::Larger, Some(c), Some(m)) => (*c).max(m),
        (ShareBasis::Larger, Some(c), None) => *c,
        (ShareBasis::Larger, None, Some(m)) => m,
    };
    Ok(ResolvedShare {
        fraction,
        basis,
        explanation: format!("{scheduler}: {} → {}: {}", said.join(", "), basis.describe(), percent(&fraction)),
    })
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
        assert_eq!(*gap.mode, mig("2g.20gb"));
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

    fn soft(compute: Option<&str>, memory: Option<&str>, memory_mib: Option<u64>) -> SharingMode {
        SharingMode::SoftShare {
            scheduler: SoftScheduler::Hami,
            compute: compute.map(|c| c.parse().unwrap()),
            memory: memory.map(|m| m.parse().unwrap()),
            memory_mib,
        }
    }

    fn with_basis(basis: Option<ShareBasis>) -> Inventory {
        let mut inv = Inventory::new();
        inv.insert_memory(ModelMemory {
            gpu_model: "nvidia-l4".into(),
            memory_mib: 23_034,
            valid: Validity::open(datetime!(2026-01-01 00:00 UTC)),
        })
        .unwrap();
        if let Some(basis) = basis {
            inv.insert_share_basis(ShareBasisVersion { basis, valid: Validity::open(datetime!(2026-06-01 00:00 UTC)) })
                .unwrap();
        }
        inv
    }

    #[test]
    fn soft_shares_follow_the_basis() {
        let at = datetime!(2026-11-02 10:00 UTC);
        let f = |s: &str| s.parse::<Fraction>().unwrap();
        let both = soft(Some("0.3"), Some("0.5"), None);
        let larger = resolve_share(&both, "nvidia-l4", at, &with_basis(None)).unwrap();
        assert_eq!((larger.fraction, larger.basis), (f("1/2"), ShareBasis::Larger));
        assert_eq!(
            larger.explanation,
            "hami: compute 30 %, memory 50 % → the larger of the compute and memory shares: 50 %"
        );
        let compute = resolve_share(&both, "nvidia-l4", at, &with_basis(Some(ShareBasis::Compute))).unwrap();
        assert_eq!(compute.fraction, f("3/10"));
        let memory = resolve_share(&both, "nvidia-l4", at, &with_basis(Some(ShareBasis::Memory))).unwrap();
        assert_eq!(memory.fraction, f("1/2"));
        // Before the basis version: the default (larger).
        let early =
            resolve_share(&both, "nvidia-l4", datetime!(2026-05-01 00:00 UTC), &with_basis(Some(ShareBasis::Compute)));
        assert_eq!(early.unwrap().fraction, f("1/2"));
        // One side declared: it stands in for the other under every basis.
        for basis in [ShareBasis::Compute, ShareBasis::Memory, ShareBasis::Larger] {
            let only = soft(Some("0.25"), None, None);
            assert_eq!(resolve_share(&only, "nvidia-l4", at, &with_basis(Some(basis))).unwrap().fraction, f("1/4"));
        }
        // MiB against the model's memory; more than the device has is one GPU.
        let mib = soft(None, None, Some(11_517));
        assert_eq!(resolve_share(&mib, "nvidia-l4", at, &with_basis(None)).unwrap().fraction, f("1/2"));
        let huge = soft(None, None, Some(80_000));
        assert_eq!(resolve_share(&huge, "nvidia-l4", at, &with_basis(None)).unwrap().fraction, Fraction::ONE);
        // Unknown model memory is a gap unless the basis does not need it.
        let mixed = soft(Some("0.2"), None, Some(4096));
        assert_eq!(resolve_share(&mixed, "nvidia-t4", at, &with_basis(None)), Err(GapReason::UnknownModelMemory));
        let by_compute = resolve_share(&mixed, "nvidia-t4", at, &with_basis(Some(ShareBasis::Compute))).unwrap();
        assert_eq!(by_compute.fraction, f("1/5"));
        assert_eq!(
            resolve_share(&soft(None, None, None), "nvidia-l4", at, &with_basis(None)),
            Err(GapReason::InvalidShare)
        );
        assert_eq!(
            resolve_share(&soft(Some("1.5"), None, None), "nvidia-l4", at, &with_basis(None)),
            Err(GapReason::InvalidShare)
        );
        // Through resolve_fraction: modeled.
        let (fr, conf) = resolve_fraction(&both, "nvidia-l4", at, &with_basis(None)).unwrap();
        assert_eq!((fr, conf), (f("1/2"), Confidence::Modeled));
    }

    #[test]
    fn soft_share_wire_form() {
        let json = serde_json::to_string(&soft(Some("0.3"), None, Some(2048))).unwrap();
        assert_eq!(json, r#"{"mode":"soft_share","scheduler":"hami","compute":"3/10","memory_mib":2048}"#);
        let back: SharingMode = serde_json::from_str(&json).unwrap();
        assert_eq!(back, soft(Some("0.3"), None, Some(2048)));
        assert_eq!(back.to_string(), "soft_share hami compute 30 % memory 2048 MiB");
    }
}
