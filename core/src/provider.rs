//! Cloud resources named two ways: a Kubernetes node's `spec.providerID` (what the agent reads) and a bill line's
//! `ResourceId` (what a FOCUS export carries). Both reduce to one [`ResourceKey`], so a bill line finds its node
//! whichever form each side wrote (issue 35):
//!
//! | provider | `spec.providerID` | FOCUS `ResourceId` | key |
//! |---|---|---|---|
//! | AWS | `aws:///us-east-1a/i-0abc…` | `arn:aws:ec2:us-east-1:123…:instance/i-0abc…`, or `i-0abc…` | `aws:i-0abc…` |
//! | Azure | `azure:///subscriptions/S/resourceGroups/R/providers/Microsoft.Compute/virtualMachines/N` (or a scale set's `…/virtualMachineScaleSets/V/virtualMachines/3`) | the same ARM path, any case | `azure:/subscriptions/s/…/virtualmachines/n` (lower case) |
//! | Google Cloud | `gce://project/zone/name` | `//compute.googleapis.com/projects/P/zones/Z/instances/N` (or without the host) | `gcp:P/Z/N` |
//!
//! Anything else has no key: a node on premises, a bill line for storage or a managed service.

use std::fmt;

/// Longest provider ID or resource ID read (the providers' IDs are well under this).
pub const MAX_RESOURCE_ID: usize = 1024;

/// The cloud a resource key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cloud {
    /// Amazon Web Services (EC2).
    Aws,
    /// Microsoft Azure (virtual machines, scale set instances).
    Azure,
    /// Google Cloud (Compute Engine).
    Gcp,
}

impl Cloud {
    /// `aws`, `azure` or `gcp`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Aws => "aws",
            Self::Azure => "azure",
            Self::Gcp => "gcp",
        }
    }
}

/// A virtual machine's identity across a node's provider ID and a bill's resource ID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    cloud: Cloud,
    id: String,
}

impl ResourceKey {
    /// The cloud.
    pub const fn cloud(&self) -> Cloud {
        self.cloud
    }

    /// The canonical ID within the cloud (an EC2 instance ID, a lower-case ARM path, `project/zone/name`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key of a node's `spec.providerID`, if it names a cloud VM.
    pub fn from_provider_id(provider_id: &str) -> Option<Self> {
        let p = provider_id.trim();
        if p.len() > MAX_RESOURCE_ID || p.chars().any(char::is_control) {
            return None;
        }
        if let Some(rest) = p.strip_prefix("aws://") {
            // aws:///zone/i-…, aws://zone/i-…: the instance ID is the last segment.
            return aws_instance(rest.rsplit('/').next()?).map(|id| Self { cloud: Cloud::Aws, id });
        }
        if let Some(rest) = p.strip_prefix("azure://") {
            return azure_path(rest).map(|id| Self { cloud: Cloud::Azure, id });
        }
        if let Some(rest) = p.strip_prefix("gce://") {
            let parts: Vec<&str> = rest.split('/').collect();
            return match parts.as_slice() {
                [project, zone, name] if [project, zone, name].iter().all(|s| valid_segment(s)) => {
                    Some(Self { cloud: Cloud::Gcp, id: format!("{project}/{zone}/{name}") })
                }
                _ => None,
            };
        }
        None
    }

    /// The key of a bill line's `ResourceId`, if it names a cloud VM.
    pub fn from_resource_id(resource_id: &str) -> Option<Self> {
        let r = resource_id.trim();
        if r.is_empty() || r.len() > MAX_RESOURCE_ID || r.chars().any(char::is_control) {
            return None;
        }
        if let Some(rest) = r.strip_prefix("arn:") {
            // arn:aws:ec2:region:account:instance/i-…
            let fields: Vec<&str> = rest.splitn(5, ':').collect();
            return match fields.as_slice() {
                [_, "ec2", _, _, resource] => {
                    resource.strip_prefix("instance/").and_then(aws_instance).map(|id| Self { cloud: Cloud::Aws, id })
                }
                _ => None,
            };
        }
        if let Some(id) = aws_instance(r) {
            return Some(Self { cloud: Cloud::Aws, id });
        }
        if r.to_ascii_lowercase().starts_with("/subscriptions/") {
            return azure_path(r).map(|id| Self { cloud: Cloud::Azure, id });
        }
        let gce = r
            .strip_prefix("//compute.googleapis.com/")
            .or_else(|| r.strip_prefix("https://www.googleapis.com/compute/v1/"));
        let path = gce.unwrap_or(r);
        let parts: Vec<&str> = path.split('/').collect();
        if let ["projects", project, "zones", zone, "instances", name] = parts.as_slice()
            && [project, zone, name].iter().all(|s| valid_segment(s))
        {
            return Some(Self { cloud: Cloud::Gcp, id: format!("{project}/{zone}/{name}") });
        }
        None
    }
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.cloud.as_str(), self.id)
    }
}

/// `i-` and 8 or 17 hexadecimal digits, lower-cased.
fn aws_instance(s: &str) -> Option<String> {
    let hex = s.strip_prefix("i-")?;
    ((hex.len() == 8 || hex.len() == 17) && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| format!("i-{}", hex.to_ascii_lowercase()))
}

/// An ARM path of a virtual machine (`/subscriptions/…/providers/Microsoft.Compute/virtualMachines/N`, or a scale
/// set's instance `…/virtualMachineScaleSets/V/virtualMachines/I`), lower-cased (ARM IDs are case-insensitive).
fn azure_path(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    let path = lower.trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').collect();
    let ok = path.starts_with("/subscriptions/")
        && path.contains("/providers/microsoft.compute/")
        && segments.len() >= 9
        && segments.iter().skip(1).all(|s| valid_segment(s))
        && segments.iter().rev().nth(1) == Some(&"virtualmachines");
    ok.then(|| path.to_string())
}

/// A path segment: not empty, no spaces or separators.
fn valid_segment(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn key(s: &str) -> String {
        ResourceKey::from_provider_id(s).map(|k| k.to_string()).unwrap_or_default()
    }

    fn bill(s: &str) -> String {
        ResourceKey::from_resource_id(s).map(|k| k.to_string()).unwrap_or_default()
    }

    #[test]
    fn aws_instances_match_as_arn_or_bare_id() {
        let node = key("aws:///us-east-1a/i-0abc123def4567890");
        assert_eq!(node, "aws:i-0abc123def4567890");
        assert_eq!(bill("arn:aws:ec2:us-east-1:123456789012:instance/i-0ABC123DEF4567890"), node);
        assert_eq!(bill("i-0abc123def4567890"), node);
        assert_eq!(key("aws://us-east-1a/i-12345678"), "aws:i-12345678");
        // Not an instance: a volume, another service, a malformed ID.
        assert_eq!(bill("arn:aws:ec2:us-east-1:123456789012:volume/vol-0abc"), "");
        assert_eq!(bill("arn:aws:s3:::bucket"), "");
        assert_eq!(key("aws:///us-east-1a/i-xyz"), "");
    }

    #[test]
    fn azure_vms_and_scale_set_instances_match_in_any_case() {
        let vm = "azure:///subscriptions/0a1b2c3d-0000-4000-8000-000000000001/resourceGroups/MC_gpu/providers/Microsoft.Compute/virtualMachineScaleSets/aks-h100-12345678-vmss/virtualMachines/3";
        let node = key(vm);
        assert!(node.starts_with("azure:/subscriptions/0a1b2c3d"), "{node}");
        assert_eq!(bill(&vm["azure://".len()..].to_uppercase()), node);
        assert_eq!(bill(&vm["azure://".len()..].to_lowercase()), node);
        let single = "azure:///subscriptions/s1/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/gpu-vm-1";
        assert_eq!(
            bill("/subscriptions/s1/resourcegroups/RG/providers/microsoft.compute/virtualmachines/GPU-VM-1"),
            key(single)
        );
        // A disk of the same group is not the VM.
        assert_eq!(bill("/subscriptions/s1/resourceGroups/rg/providers/Microsoft.Compute/disks/d1"), "");
    }

    #[test]
    fn gce_instances_match_with_or_without_the_host() {
        let node = key("gce://my-project/us-central1-a/gke-gpu-pool-1a2b");
        assert_eq!(node, "gcp:my-project/us-central1-a/gke-gpu-pool-1a2b");
        assert_eq!(
            bill("//compute.googleapis.com/projects/my-project/zones/us-central1-a/instances/gke-gpu-pool-1a2b"),
            node
        );
        assert_eq!(bill("projects/my-project/zones/us-central1-a/instances/gke-gpu-pool-1a2b"), node);
        assert_eq!(key("gce://only/two"), "");
    }

    #[test]
    fn anything_else_has_no_key() {
        for s in ["", "kind://docker/kind/kind-worker", "baremetal://rack1/node7", "i-", "\u{0}aws:///z/i-12345678"] {
            assert_eq!(key(s), "", "{s:?}");
            assert_eq!(bill(s), "", "{s:?}");
        }
        assert_eq!(key(&format!("aws:///z/i-{}", "a".repeat(2000))), "");
    }
}
