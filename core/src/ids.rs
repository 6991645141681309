//! Identifiers of the attribution chain.
//!
//! Identifiers are immutable UIDs/UUIDs, never names alone (see DESIGN.md, "The attribution
//! chain"). No constructor here generates randomness: callers that mint new IDs do so at the
//! edge and pass the `Uuid` in, which keeps this crate deterministic and testable.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::DomainError;

macro_rules! uuid_id {
    ($(#[$meta:meta])* $name:ident, $field:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// Wraps an existing UUID.
            pub const fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// The underlying UUID.
            pub const fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(uuid: Uuid) -> Self {
                Self(uuid)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }

        impl FromStr for $name {
            type Err = DomainError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s.trim())
                    .map(Self)
                    .map_err(|e| DomainError::invalid($field, e.to_string()))
            }
        }
    };
}

uuid_id!(
    /// An organization (the top of the business chain).
    OrgId,
    "org_id"
);
uuid_id!(
    /// A department inside an organization.
    DepartmentId,
    "department_id"
);
uuid_id!(
    /// A tenant: the party that is charged.
    TenantId,
    "tenant_id"
);
uuid_id!(
    /// A registered cluster.
    ClusterId,
    "cluster_id"
);
uuid_id!(
    /// A Kubernetes namespace's UID (not its name, which can be reused).
    NamespaceUid,
    "namespace_uid"
);
uuid_id!(
    /// A Kubernetes pod's UID.
    PodUid,
    "pod_uid"
);
uuid_id!(
    /// A virtual machine's UID (vGPU or passthrough holder).
    VmUid,
    "vm_uid"
);
uuid_id!(
    /// A shared model-serving endpoint.
    EndpointId,
    "endpoint_id"
);
uuid_id!(
    /// A session of an autonomous AI agent that spawns short-lived workloads.
    AgentSessionId,
    "agent_session_id"
);
uuid_id!(
    /// A portal user.
    UserId,
    "user_id"
);

/// Implements the string plumbing shared by validated string newtypes: `as_str`, `Display`,
/// `FromStr`, and serde as a plain string that is validated on the way in.
macro_rules! validated_string {
    ($name:ident, $validate:path) => {
        impl $name {
            /// Validates and wraps a string.
            pub fn new(value: impl Into<String>) -> Result<Self, DomainError> {
                let value = value.into();
                $validate(&value)?;
                Ok(Self(value))
            }

            /// The validated string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = DomainError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = DomainError;

            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

/// An NVIDIA physical GPU UUID, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (hex digits).
///
/// MIG devices are not GPU UUIDs: they are a [`MigInstance`] on a parent GPU.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GpuUuid(String);

fn validate_gpu_uuid(value: &str) -> Result<(), DomainError> {
    const FIELD: &str = "gpu_uuid";
    let rest = value
        .strip_prefix("GPU-")
        .ok_or_else(|| DomainError::invalid(FIELD, format!("{value:?} does not start with \"GPU-\"")))?;
    let groups: Vec<&str> = rest.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lengths != [8, 4, 4, 4, 12] {
        return Err(DomainError::invalid(FIELD, format!("{value:?} is not GPU- followed by 8-4-4-4-12 hex digits")));
    }
    if !rest.chars().all(|c| c == '-' || c.is_ascii_hexdigit()) {
        return Err(DomainError::invalid(FIELD, format!("{value:?} contains non-hex characters")));
    }
    Ok(())
}

validated_string!(GpuUuid, validate_gpu_uuid);

/// A MIG instance: a GPU instance and compute instance on a parent GPU.
///
/// Displayed and parsed in NVIDIA's legacy form `MIG-GPU-<uuid>/<gi>/<ci>`, which keeps the
/// parent device visible (newer drivers hand out opaque `MIG-<uuid>` names; agents resolve
/// those to this triple before sending).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MigInstance {
    /// The physical GPU the instance lives on.
    pub parent: GpuUuid,
    /// The GPU instance ID on that GPU.
    pub gpu_instance_id: u32,
    /// The compute instance ID inside the GPU instance.
    pub compute_instance_id: u32,
}

impl fmt::Display for MigInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MIG-{}/{}/{}", self.parent, self.gpu_instance_id, self.compute_instance_id)
    }
}

impl FromStr for MigInstance {
    type Err = DomainError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const FIELD: &str = "mig_instance";
        let bad = || DomainError::invalid(FIELD, format!("{s:?} is not MIG-GPU-<uuid>/<gi>/<ci>"));
        let rest = s.strip_prefix("MIG-").ok_or_else(bad)?;
        let mut parts = rest.split('/');
        let (Some(gpu), Some(gi), Some(ci), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        Ok(Self {
            parent: GpuUuid::new(gpu)?,
            gpu_instance_id: gi.parse().map_err(|_| bad())?,
            compute_instance_id: ci.parse().map_err(|_| bad())?,
        })
    }
}

fn validate_label(field: &'static str, value: &str) -> Result<(), DomainError> {
    if value.trim().is_empty() {
        return Err(DomainError::invalid(field, "must not be empty"));
    }
    if value.trim() != value {
        return Err(DomainError::invalid(field, format!("{value:?} has surrounding whitespace")));
    }
    if value.chars().any(char::is_control) {
        return Err(DomainError::invalid(field, format!("{value:?} contains control characters")));
    }
    Ok(())
}

/// A GPU class used for pricing, e.g. `H100-80GB`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GpuClass(String);

fn validate_gpu_class(value: &str) -> Result<(), DomainError> {
    validate_label("gpu_class", value)
}

validated_string!(GpuClass, validate_gpu_class);

/// A vGPU profile name, e.g. `GRID_T4-1Q` or `NVIDIA A100-4C`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct VgpuProfile(String);

fn validate_vgpu_profile(value: &str) -> Result<(), DomainError> {
    validate_label("vgpu_profile", value)
}

validated_string!(VgpuProfile, validate_vgpu_profile);

/// A MIG profile name, e.g. `1g.10gb`, `3g.40gb`, `1g.10gb+me`, `1c.3g.40gb`.
///
/// Grammar (liberal, to accept future NVIDIA names): an optional compute-instance part
/// `<n>c.`, a GPU-instance part `<n>g.`, a memory part `<n>gb`, then zero or more `+<tag>`
/// suffixes of ASCII letters/digits. All counts are positive integers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MigProfile(String);

/// The numbers in a MIG profile name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MigParts {
    compute_instance_slices: Option<u32>,
    gpu_slices: u32,
    memory_gb: u32,
}

fn parse_mig(value: &str) -> Result<MigParts, DomainError> {
    const FIELD: &str = "mig_profile";
    let bad = |why: &str| DomainError::invalid(FIELD, format!("{value:?}: {why}"));
    let positive = |digits: &str, what: &str| -> Result<u32, DomainError> {
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(bad(&format!("{what} is not a number")));
        }
        match digits.parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(bad(&format!("{what} must be a positive integer"))),
        }
    };
    let mut suffixes = value.split('+');
    let main = suffixes.next().unwrap_or_default();
    for tag in suffixes {
        if tag.is_empty() || !tag.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad("a '+' suffix must be letters or digits"));
        }
    }
    let parts: Vec<&str> = main.split('.').collect();
    let (ci, gi, mem) = match parts.as_slice() {
        [gi, mem] => (None, *gi, *mem),
        [ci, gi, mem] => (Some(*ci), *gi, *mem),
        _ => return Err(bad("expected <n>g.<n>gb or <n>c.<n>g.<n>gb")),
    };
    let compute_instance_slices = match ci {
        Some(ci) => Some(positive(
            ci.strip_suffix('c').ok_or_else(|| bad("compute part must end in 'c'"))?,
            "compute-instance slices",
        )?),
        None => None,
    };
    let gpu_slices =
        positive(gi.strip_suffix('g').ok_or_else(|| bad("GPU-instance part must end in 'g'"))?, "GPU slices")?;
    let memory_gb = positive(mem.strip_suffix("gb").ok_or_else(|| bad("memory part must end in 'gb'"))?, "memory")?;
    if compute_instance_slices.is_some_and(|c| c > gpu_slices) {
        return Err(bad("compute-instance slices exceed the GPU instance's slices"));
    }
    Ok(MigParts { compute_instance_slices, gpu_slices, memory_gb })
}

fn validate_mig_profile(value: &str) -> Result<(), DomainError> {
    parse_mig(value).map(|_| ())
}

validated_string!(MigProfile, validate_mig_profile);

impl MigProfile {
    fn parts(&self) -> MigParts {
        // Validated at construction; the fallback is unreachable but avoids a panic path.
        parse_mig(&self.0).unwrap_or(MigParts { compute_instance_slices: None, gpu_slices: 1, memory_gb: 1 })
    }

    /// GPU (compute) slices of the GPU instance: the number before `g.` (3 for `1c.3g.40gb`).
    pub fn compute_slices(&self) -> u32 {
        self.parts().gpu_slices
    }

    /// Slices of the compute instance when the profile names one (`1` for `1c.3g.40gb`).
    pub fn compute_instance_slices(&self) -> Option<u32> {
        self.parts().compute_instance_slices
    }

    /// Memory in GB as named by the profile (`40` for `3g.40gb`).
    pub fn memory_gb(&self) -> u32 {
        self.parts().memory_gb
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const GPU: &str = "GPU-3f1c2b4a-9d8e-4c7b-a6f5-0123456789ab";

    #[test]
    fn uuid_ids_round_trip_text_and_json() {
        let u = Uuid::from_u128(0x1234);
        let t = TenantId::from_uuid(u);
        assert_eq!(t.as_uuid(), u);
        let s = t.to_string();
        assert_eq!(s.parse::<TenantId>().unwrap(), t);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, format!("\"{s}\""));
        assert_eq!(serde_json::from_str::<TenantId>(&json).unwrap(), t);
    }

    #[test]
    fn uuid_id_parse_error_names_field() {
        let err = "nope".parse::<PodUid>().unwrap_err();
        assert!(matches!(err, DomainError::Invalid { field: "pod_uid", .. }), "{err}");
    }

    #[test]
    fn gpu_uuid_validation() {
        assert_eq!(GpuUuid::new(GPU).unwrap().as_str(), GPU);
        for bad in [
            "",
            "3f1c2b4a-9d8e-4c7b-a6f5-0123456789ab",
            "MIG-3f1c2b4a-9d8e-4c7b-a6f5-0123456789ab",
            "GPU-3f1c2b4a-9d8e-4c7b-a6f5-0123456789a",
            "GPU-3f1c2b4a-9d8e-4c7b-a6f5-0123456789az",
            "GPU-3f1c2b4a9d8e-4c7b-a6f5-0123456789ab-",
        ] {
            let err = GpuUuid::new(bad).unwrap_err();
            assert!(matches!(err, DomainError::Invalid { field: "gpu_uuid", .. }), "{bad}");
        }
        assert!(serde_json::from_str::<GpuUuid>("\"GPU-x\"").is_err());
    }

    #[test]
    fn mig_instance_round_trip() {
        let m: MigInstance = format!("MIG-{GPU}/7/0").parse().unwrap();
        assert_eq!(m.parent.as_str(), GPU);
        assert_eq!((m.gpu_instance_id, m.compute_instance_id), (7, 0));
        assert_eq!(m.to_string(), format!("MIG-{GPU}/7/0"));
        assert!(format!("MIG-{GPU}/7").parse::<MigInstance>().is_err());
        assert!(format!("{GPU}/7/0").parse::<MigInstance>().is_err());
    }

    #[test]
    fn mig_profiles_parse() {
        let cases = [
            ("1g.10gb", 1, None, 10),
            ("2g.20gb", 2, None, 20),
            ("3g.40gb", 3, None, 40),
            ("7g.80gb", 7, None, 80),
            ("1g.10gb+me", 1, None, 10),
            ("1c.3g.40gb", 3, Some(1), 40),
        ];
        for (name, slices, ci, mem) in cases {
            let p = MigProfile::new(name).unwrap();
            assert_eq!(p.compute_slices(), slices, "{name}");
            assert_eq!(p.compute_instance_slices(), ci, "{name}");
            assert_eq!(p.memory_gb(), mem, "{name}");
        }
        for bad in [
            "",
            "g.10gb",
            "1g",
            "1g.10",
            "0g.10gb",
            "xg.10gb",
            "1g.10gb+",
            "1g.10gb+m-e",
            "4c.3g.40gb",
            "1c.2c.3g.40gb",
            "garbage",
        ] {
            let err = MigProfile::new(bad).unwrap_err();
            assert!(matches!(err, DomainError::Invalid { field: "mig_profile", .. }), "{bad}");
        }
    }

    #[test]
    fn labels_reject_empty() {
        assert!(GpuClass::new("H100-80GB").is_ok());
        assert!(VgpuProfile::new("NVIDIA A100-4C").is_ok());
        assert!(VgpuProfile::new("GRID_T4-1Q").is_ok());
        assert!(matches!(GpuClass::new("  ").unwrap_err(), DomainError::Invalid { field: "gpu_class", .. }));
        assert!(VgpuProfile::new("").is_err());
        assert!(GpuClass::new(" H100").is_err());
    }
}
