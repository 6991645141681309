-- Per-process GPU utilization (issue 20): the node agent samples the driver's per-process activity (NVML
-- nvmlDeviceGetProcessUtilization), maps each process to its pod through its cgroup, and reports one row per GPU and
-- window with every pod's summed SM activity. A soft-shared pod's own utilization comes from here: the GPU's
-- utilization belongs to everyone on it. A window present with the pod absent means the pod did nothing on that GPU.

SET LOCAL ROLE gpuledger_owner;
CREATE TABLE process_windows (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    node            text        NOT NULL CHECK (length(node) BETWEEN 1 AND 253),
    gpu_uuid        text        NOT NULL CHECK (length(gpu_uuid) BETWEEN 1 AND 200),
    window_start    timestamptz NOT NULL,
    window_end      timestamptz NOT NULL,
    samples         integer     NOT NULL CHECK (samples >= 0),
    -- [{"pod_uid", "sm_pct": {"min","avg","max"}, "memory_pct"?}], at most 256 (validated on ingest).
    pods            jsonb       NOT NULL,
    PRIMARY KEY (org_id, cluster_id, gpu_uuid, window_start),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (window_end > window_start),
    CHECK (jsonb_typeof(pods) = 'array')
);
-- Analytics read a node's windows over a period.
CREATE INDEX process_windows_by_node ON process_windows (org_id, cluster_id, node, window_start);

SELECT gpuledger_isolate('process_windows'::regclass);
-- Measurements are written once (idempotent by key) and never changed.
GRANT SELECT, INSERT ON process_windows TO gpuledger_app;
RESET ROLE;
