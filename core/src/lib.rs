//! `gpuledger-core`: GPU Ledger's pure domain.
//!
//! Identifiers of the attribution chain, UTC intervals and months, exact fractions, confidence,
//! sharing modes with the approved inventory, and the allocation math (GPU-equivalent time per
//! tenant, guaranteed vs. borrowed capacity, overcommit detection).
//!
//! **No I/O, no async, no clocks, no randomness.** Every function is a deterministic function
//! of its arguments, so a closed month can be recomputed bit-for-bit from stored facts and
//! the server, agent and tests can all share this crate without pulling in a runtime.
//! Arithmetic is exact (`i128` rationals) and reports overflow as an error rather than
//! panicking or rounding.

#![deny(missing_docs)]

pub mod allocation;
pub mod bill;
pub mod bundle;
pub mod confidence;
pub mod decimal;
pub mod efficiency;
pub mod error;
pub mod faults;
pub mod fraction;
pub mod ids;
pub mod interval;
pub mod ledger;
pub mod policy;
pub mod provider;
pub mod sharing;
pub mod telemetry;
pub mod time_fmt;
pub mod utilization;
pub mod wire;

pub use allocation::{
    Allocation, Attribution, OvercommitFinding, OvercommitReport, Ownership, Split, TenantUsage, allocated_hours,
    detect_overcommit, split_guaranteed_borrowed,
};
pub use confidence::Confidence;
pub use error::DomainError;
pub use fraction::{Fraction, Quantity};
pub use ids::{
    AgentSessionId, ClusterId, DepartmentId, EndpointId, GpuClass, GpuUuid, MigInstance, MigProfile, NamespaceUid,
    OrgId, PodUid, TenantId, UserId, VgpuProfile, VmUid,
};
pub use interval::{Interval, NANOS_PER_HOUR, NANOS_PER_SECOND, Period, Validity};
pub use sharing::{
    GapReason, Inventory, InventoryGap, ModelMemory, ProfileFraction, ProfileKind, ResolvedShare, ShareBasis,
    ShareBasisVersion, SharingMode, SoftScheduler, resolve_fraction, resolve_share,
};
pub use utilization::{
    ActivitySample, AllocationUtilization, HeldAllocation, TenantUtilization, Utilization, UtilizationOptions,
    UtilizationReport, analyze_utilization,
};
