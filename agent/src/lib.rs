//! GPU Ledger's cluster agent.
//!
//! - [`k8s`]: Kubernetes objects (Pod, Node, Namespace, KubeVirt VMI) → allocation facts.
//! - [`metrics`]: Prometheus text exposition parsing; DCGM Exporter and model-server metrics → facts.
//! - [`spool`]: the on-disk spool that keeps facts until the server confirms a durable commit.
//! - [`inspect`]: `gpuledger-agent inspect`, the same derivations for one file.

pub mod inspect;
pub mod k8s;
pub mod metrics;
pub mod spool;
