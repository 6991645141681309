-- Training progress reported by jobs (issue 8): cumulative steps and/or samples of a workload (a pod, or a Job /
-- training run whose pods are named `<workload>-…`) in a namespace, so the portal can show work per GPU-hour.
-- Idempotent by record ID. Analytics only: never billed.

SET LOCAL ROLE gpuledger_owner;

CREATE TABLE training_progress (
    org_id       uuid        NOT NULL,
    record_id    text        NOT NULL CHECK (length(record_id) BETWEEN 1 AND 200),
    cluster_id   uuid        NOT NULL,
    namespace    text        NOT NULL CHECK (length(namespace) BETWEEN 1 AND 253),
    workload     text        NOT NULL CHECK (length(workload) BETWEEN 1 AND 253),
    reported_at  timestamptz NOT NULL,
    steps        bigint      CHECK (steps >= 0),
    samples      bigint      CHECK (samples >= 0),
    received_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, record_id),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (steps IS NOT NULL OR samples IS NOT NULL)
);
CREATE INDEX training_progress_by_workload ON training_progress (org_id, cluster_id, namespace, workload, reported_at);
SELECT gpuledger_isolate('training_progress');
GRANT SELECT, INSERT ON training_progress TO gpuledger_app;

RESET ROLE;
