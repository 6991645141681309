-- Ingest: device and node history, telemetry rollups partitioned by month, data-quality findings.

SET LOCAL ROLE gpuledger_owner;

-- Physical GPUs as the node agents saw them; a change (MIG layout, node) closes the row and opens a new one.
CREATE TABLE devices (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    gpu_uuid        text        NOT NULL,
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    node            text        NOT NULL,
    model           text        NOT NULL,
    memory_mib      bigint,
    mig_enabled     boolean     NOT NULL DEFAULT false,
    mig_devices     jsonb       NOT NULL DEFAULT '[]'::jsonb,
    vgpu_profile    text,
    PRIMARY KEY (org_id, cluster_id, gpu_uuid, valid_from),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (valid_to IS NULL OR valid_to > valid_from)
);

-- GPU nodes and how their device plugin shares GPUs, with history.
CREATE TABLE nodes (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    name            text        NOT NULL,
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    node_uid        uuid        NOT NULL,
    gpu_product     text,
    gpu_count       integer,
    mig_strategy    text,
    sharing_strategy text,
    replicas        integer,
    allocatable     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (org_id, cluster_id, name, valid_from),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (valid_to IS NULL OR valid_to > valid_from)
);

-- Utilization rolled up on the node (analytics only: never money by itself). Partitioned by month of
-- window_start so retention is dropping a partition. Idempotent by its key.
CREATE TABLE telemetry_rollups (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    gpu_uuid        text        NOT NULL,
    gpu_instance_id integer     NOT NULL DEFAULT -1, -- -1: the whole GPU
    window_start    timestamptz NOT NULL,
    window_end      timestamptz NOT NULL,
    node            text        NOT NULL,
    mig_profile     text,
    samples         integer     NOT NULL CHECK (samples >= 0),
    util_min        real, util_avg real, util_max real,
    mem_used_min    real, mem_used_avg real, mem_used_max real,
    power_min       real, power_avg real, power_max real,
    energy_j        double precision,
    pod_namespace   text,
    pod_name        text,
    pod_uid         uuid,
    PRIMARY KEY (org_id, cluster_id, gpu_uuid, gpu_instance_id, window_start),
    CHECK (window_end > window_start)
) PARTITION BY RANGE (window_start);
CREATE TABLE telemetry_rollups_default PARTITION OF telemetry_rollups DEFAULT;

-- Creates the month's partition if missing (called by the server, which runs as the app role and cannot
-- create tables itself). Rows already in the default partition for that month are moved into it.
CREATE FUNCTION gpuledger_ensure_telemetry_partition(p_month date) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m_start date := date_trunc('month', p_month)::date;
    m_end   date := (date_trunc('month', p_month) + interval '1 month')::date;
    part    text := format('telemetry_rollups_%s', to_char(m_start, 'YYYYMM'));
BEGIN
    IF to_regclass(part) IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext(part));
    IF to_regclass(part) IS NOT NULL THEN
        RETURN;
    END IF;
    CREATE TEMP TABLE IF NOT EXISTS gpuledger_moving (LIKE telemetry_rollups) ON COMMIT DROP;
    -- Partitions carry no policy and no grants (only the parent is reachable by the app role), so rows of every
    -- organization can be moved here without lifting RLS on the parent.
    EXECUTE format('WITH moved AS (DELETE FROM telemetry_rollups_default WHERE window_start >= %L AND window_start < %L RETURNING *)
                    INSERT INTO gpuledger_moving SELECT * FROM moved', m_start, m_end);
    EXECUTE format('CREATE TABLE %I PARTITION OF telemetry_rollups FOR VALUES FROM (%L) TO (%L)', part, m_start, m_end);
    EXECUTE format('INSERT INTO %I SELECT * FROM gpuledger_moving', part);
    TRUNCATE gpuledger_moving;
END
$$;
REVOKE ALL ON FUNCTION gpuledger_ensure_telemetry_partition(date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_ensure_telemetry_partition(date) TO gpuledger_app;

-- What ingest noticed that a reviewer must see: profiles missing from the inventory, agent gaps,
-- over-committed devices. Kept, never silently fixed.
CREATE TABLE data_quality_findings (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    finding_id      text        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('inventory_gap', 'agent_gap', 'overcommit', 'unknown_tenant')),
    subject         text        NOT NULL,
    occurred_from   timestamptz,
    occurred_to     timestamptz,
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, cluster_id, finding_id),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id)
);

SELECT gpuledger_isolate(t) FROM unnest(ARRAY['devices', 'nodes', 'telemetry_rollups', 'data_quality_findings']::regclass[]) AS t;

GRANT SELECT, INSERT, UPDATE ON devices, nodes TO gpuledger_app;
GRANT SELECT, INSERT ON telemetry_rollups, data_quality_findings TO gpuledger_app;

RESET ROLE;
