//! Training progress from pod annotations: a training loop (or its launcher) keeps
//! `gpuledger.io/training-steps` and/or `gpuledger.io/training-samples` on its pod up to date (cumulative counts,
//! e.g. `kubectl annotate --overwrite pod $POD gpuledger.io/training-steps=1200`); the cluster agent turns each new
//! value into a `training_progress` fact. The workload is the pod's Job (label `batch.kubernetes.io/job-name`, or the
//! older `job-name`) when it has one, else the pod's name — what the server matches the GPU-hours of.

use std::collections::BTreeMap;

use gpuledger_core::wire::{Fact, FactBody, TrainingProgressFact, event_id};
use serde_json::Value;
use time::OffsetDateTime;

/// Annotation with the optimizer steps so far.
pub const ANNOTATION_STEPS: &str = "gpuledger.io/training-steps";
/// Annotation with the samples (or tokens) so far.
pub const ANNOTATION_SAMPLES: &str = "gpuledger.io/training-samples";

/// An annotation that is not a whole number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod}: {annotation}={value:?} is not a whole number of 0 or more")]
pub struct ProgressError {
    /// `namespace/name`.
    pub pod: String,
    /// The annotation.
    pub annotation: &'static str,
    /// Its value.
    pub value: String,
}

/// The latest counters sent per pod, so an unchanged pod sends nothing.
#[derive(Debug, Default)]
pub struct ProgressWatch {
    last: BTreeMap<String, (Option<u64>, Option<u64>)>,
}

impl ProgressWatch {
    /// A pod changed (or was deleted): a fact when its counters are new. Deleted pods are forgotten.
    pub fn on_pod(&mut self, pod: &Value, deleted: bool, now: OffsetDateTime) -> Result<Option<Fact>, ProgressError> {
        let meta = &pod["metadata"];
        let uid = meta["uid"].as_str().unwrap_or_default().to_owned();
        if deleted {
            self.last.remove(&uid);
            return Ok(None);
        }
        let (Some(namespace), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
            return Ok(None);
        };
        let read = |annotation: &'static str| -> Result<Option<u64>, ProgressError> {
            match meta["annotations"][annotation].as_str().map(str::trim) {
                None | Some("") => Ok(None),
                Some(v) => v.parse::<u64>().map(Some).map_err(|_| ProgressError {
                    pod: format!("{namespace}/{name}"),
                    annotation,
                    value: v.to_owned(),
                }),
            }
        };
        let counters = (read(ANNOTATION_STEPS)?, read(ANNOTATION_SAMPLES)?);
        if counters == (None, None) || self.last.get(&uid) == Some(&counters) {
            return Ok(None);
        }
        self.last.insert(uid.clone(), counters);
        let labels = &meta["labels"];
        let workload = ["batch.kubernetes.io/job-name", "job-name"]
            .iter()
            .find_map(|k| labels[*k].as_str().filter(|v| !v.is_empty()))
            .unwrap_or(name);
        let text = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        Ok(Some(Fact {
            // The same counters of the same pod are the same report, however often they are seen.
            event_id: event_id("training", &[&uid, &text(counters.0), &text(counters.1)]),
            observed_at: now,
            body: FactBody::TrainingProgress(TrainingProgressFact {
                namespace: namespace.to_owned(),
                workload: workload.to_owned(),
                reported_at: now,
                steps: counters.0,
                samples: counters.1,
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;
    use time::macros::datetime;

    use super::*;
    use crate::{inspect::read_documents, metrics::fixtures};

    fn pod(annotations: &[(&str, &str)], job: Option<&str>) -> Value {
        let mut pod = read_documents(&fixtures::read("k8s", "pod_live_runai_mig_1g5gb.yaml")).unwrap().remove(0);
        for (k, v) in annotations {
            pod["metadata"]["annotations"][*k] = json!(v);
        }
        if let Some(job) = job {
            pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!(job);
        }
        pod
    }

    #[test]
    fn new_counters_are_reported_once_under_the_pods_job() {
        let t = datetime!(2026-11-01 10:00 UTC);
        let mut w = ProgressWatch::default();
        assert_eq!(w.on_pod(&pod(&[], None), false, t).unwrap(), None, "no annotations: nothing");
        let p = pod(&[(ANNOTATION_STEPS, "1200"), (ANNOTATION_SAMPLES, " 38400 ")], Some("llm-pretrain"));
        let f = w.on_pod(&p, false, t).unwrap().unwrap();
        let FactBody::TrainingProgress(tp) = &f.body else { panic!("{f:?}") };
        assert_eq!((tp.workload.as_str(), tp.steps, tp.samples), ("llm-pretrain", Some(1200), Some(38_400)));
        assert_eq!(tp.namespace, p["metadata"]["namespace"].as_str().unwrap());
        assert_eq!(serde_json::to_value(&f).unwrap()["kind"], "training_progress");
        // The same counters again (a resync): nothing; new ones: a new fact with another event ID.
        assert_eq!(w.on_pod(&p, false, t).unwrap(), None);
        let p2 = pod(&[(ANNOTATION_STEPS, "1300"), (ANNOTATION_SAMPLES, "41600")], Some("llm-pretrain"));
        let g = w.on_pod(&p2, false, t).unwrap().unwrap();
        assert_ne!(g.event_id, f.event_id);
        // Without a Job, the pod's name is the workload.
        let mut w = ProgressWatch::default();
        let lone = pod(&[(ANNOTATION_SAMPLES, "5")], None);
        let h = w.on_pod(&lone, false, t).unwrap().unwrap();
        let FactBody::TrainingProgress(tp) = &h.body else { panic!() };
        assert_eq!((tp.workload.as_str(), tp.steps), (lone["metadata"]["name"].as_str().unwrap(), None));
    }

    #[test]
    fn a_value_that_is_not_a_count_is_an_error_naming_the_annotation() {
        let mut w = ProgressWatch::default();
        let e = w.on_pod(&pod(&[(ANNOTATION_STEPS, "-3")], None), false, datetime!(2026-11-01 10:00 UTC)).unwrap_err();
        assert!(e.to_string().contains("gpuledger.io/training-steps=\"-3\""), "{e}");
    }
}
