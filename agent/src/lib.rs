//! GPU Ledger's cluster agent.
//!
//! - [`k8s`]: Kubernetes objects (Pod, Node, Namespace, KubeVirt VMI) → allocation facts.
//! - [`metrics`]: Prometheus text exposition parsing; DCGM Exporter and model-server metrics → facts.
//! - [`node`]: the `node` mode's GPU sources (NVML, DCGM endpoint, simulated) and per-minute rollups.
//! - [`podresources`]: kubelet's pod-resources API (which container holds which device).
//! - [`spool`]: the on-disk spool that keeps facts until the server confirms a durable commit.
//! - [`cluster`]: the `cluster` mode's watcher and the pure [`cluster::Deriver`].
//! - [`scrape`]: the `cluster` mode's model-server scraping (`endpoint_totals` facts).
//! - [`training`]: training progress from pod annotations (`training_progress` facts).
//! - [`deliver`]: batches from the spool to the server, acknowledged only after a durable commit.
//! - [`inspect`]: `gpuledger-agent inspect`, the same derivations for one file.
#![deny(missing_docs)]

pub mod backpressure;
pub mod clock;
pub mod cluster;
pub mod deliver;
pub mod inspect;
pub mod k8s;
pub mod metrics;
pub mod node;
pub mod nvidia;
pub mod podresources;
pub mod scrape;
pub mod spool;
pub mod training;
