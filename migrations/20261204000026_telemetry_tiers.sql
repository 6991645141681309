-- Telemetry in tiers (issue 31). Agents send one window per GPU (and MIG instance) every 60 s: 432 M rows a month
-- at 10,000 GPUs as one `telemetry_rollups` row each (~460 B) is ~200 GB a month. Now:
--   telemetry_series  one row per device (cluster, GPU UUID, MIG instance): a bigint key instead of repeating the
--                     UUID text in every row;
--   telemetry_windows full resolution: one row per device and hour holding the hour's windows as a compact block
--                     (core `telemetry::encode`, deflated by the server), kept for a bounded time
--                     (`--telemetry-full-days`, dropped by partition);
--   telemetry_hours   the hour's exact integer sums (energy joules, sampled/active milliseconds, maxima), written in
--                     the same transaction as the block, kept for the organization's retention. Close, analytics,
--                     idle detection and bundles read these.
-- `telemetry_rollups` stays for rows stored before this migration: the server's upkeep moves them into the tiers
-- through the same merge path as ingest (deleting what it moved) and reads never look at it again.

SET LOCAL ROLE gpuledger_owner;

CREATE SEQUENCE telemetry_series_id_seq AS bigint;

CREATE TABLE telemetry_series (
    org_id          uuid        NOT NULL,
    series_id       bigint      NOT NULL DEFAULT nextval('telemetry_series_id_seq'),
    cluster_id      uuid        NOT NULL,
    gpu_uuid        text        NOT NULL CHECK (length(gpu_uuid) BETWEEN 1 AND 200),
    gpu_instance_id integer     NOT NULL DEFAULT -1, -- -1: the whole GPU
    -- The node that last reported the device, and its MIG profile.
    node            text        NOT NULL CHECK (length(node) BETWEEN 1 AND 253),
    mig_profile     text        CHECK (length(mig_profile) <= 64),
    first_seen      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, series_id),
    UNIQUE (org_id, cluster_id, gpu_uuid, gpu_instance_id),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id)
);

-- No foreign key to telemetry_series from the two tiers: they take hundreds of rows a second and a series is never
-- deleted while its organization exists (organization deletion removes the tiers first).
CREATE TABLE telemetry_hours (
    org_id          uuid        NOT NULL,
    series_id       bigint      NOT NULL,
    hour            timestamptz NOT NULL,
    windows         smallint    NOT NULL CHECK (windows > 0),
    samples         integer     NOT NULL CHECK (samples >= 0),
    sampled_ms      integer     NOT NULL CHECK (sampled_ms > 0),
    span_from_ms    integer     NOT NULL,
    span_to_ms      integer     NOT NULL,
    util_ms         integer     NOT NULL CHECK (util_ms >= 0),
    util_sum        bigint      NOT NULL CHECK (util_sum >= 0),   -- Σ utilization (0.1 %) × ms
    util_max        smallint    NOT NULL CHECK (util_max >= 0),   -- 0.1 %
    mem_max         integer     NOT NULL CHECK (mem_max >= 0),    -- MiB
    power_max       integer     NOT NULL CHECK (power_max >= 0),  -- 0.1 W
    energy_ms       integer     NOT NULL CHECK (energy_ms >= 0),
    energy_j        bigint      NOT NULL CHECK (energy_j >= 0),   -- whole joules
    -- Size of the hour's full-resolution block (what keeping it costs, for the coverage page).
    block_bytes     integer     NOT NULL DEFAULT 0 CHECK (block_bytes >= 0),
    PRIMARY KEY (org_id, series_id, hour),
    CHECK (span_to_ms > span_from_ms)
) PARTITION BY RANGE (hour);
CREATE TABLE telemetry_hours_default PARTITION OF telemetry_hours DEFAULT;

CREATE TABLE telemetry_windows (
    org_id          uuid        NOT NULL,
    series_id       bigint      NOT NULL,
    hour            timestamptz NOT NULL,
    windows         smallint    NOT NULL CHECK (windows > 0),
    -- Deflated `telemetry::encode` block; the hour's sums are in telemetry_hours.
    block           bytea       NOT NULL CHECK (length(block) <= 1048576),
    PRIMARY KEY (org_id, series_id, hour)
) PARTITION BY RANGE (hour);
CREATE TABLE telemetry_windows_default PARTITION OF telemetry_windows DEFAULT;
-- The block is already compressed: PostgreSQL's own compression would only cost CPU.
ALTER TABLE telemetry_windows ALTER COLUMN block SET STORAGE EXTERNAL;

SELECT gpuledger_isolate(t) FROM unnest(ARRAY['telemetry_series', 'telemetry_hours', 'telemetry_windows']::regclass[]) AS t;
-- A late window rewrites its hour's block and sums; a node change updates its series.
GRANT SELECT, INSERT, UPDATE ON telemetry_series, telemetry_hours, telemetry_windows TO gpuledger_app;
GRANT USAGE ON SEQUENCE telemetry_series_id_seq TO gpuledger_app;
-- A late window for an hour whose full resolution retention dropped is taken back in the same transaction.
GRANT DELETE ON telemetry_windows TO gpuledger_app;
-- The upkeep moves rows stored before this migration into the tiers.
GRANT DELETE ON telemetry_rollups TO gpuledger_app;

-- Makes the month's partitions of both tiers if missing; rows waiting in the default partitions for that month are
-- moved in (as for telemetry_rollups).
CREATE FUNCTION gpuledger_ensure_telemetry_tier_partitions(p_month date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m_start date := date_trunc('month', p_month)::date;
    m_end   date := (date_trunc('month', p_month) + interval '1 month')::date;
    parent  text;
    part    text;
    made    integer := 0;
BEGIN
    FOREACH parent IN ARRAY ARRAY['telemetry_hours', 'telemetry_windows'] LOOP
        part := format('%s_%s', parent, to_char(m_start, 'YYYYMM'));
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        PERFORM pg_advisory_xact_lock(hashtext(part));
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        EXECUTE format('CREATE TEMP TABLE IF NOT EXISTS gpuledger_moving_%s (LIKE %I) ON COMMIT DROP', parent, parent);
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE hour >= %L AND hour < %L RETURNING *)
                        INSERT INTO gpuledger_moving_%s SELECT * FROM moved', parent || '_default', m_start, m_end, parent);
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', part, parent, m_start, m_end);
        EXECUTE format('INSERT INTO %I SELECT * FROM gpuledger_moving_%s', part, parent);
        EXECUTE format('TRUNCATE gpuledger_moving_%s', parent);
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;
REVOKE ALL ON FUNCTION gpuledger_ensure_telemetry_tier_partitions(date) FROM PUBLIC;

-- The upkeep's one call: now also the tiers' months (and months waiting in their default partitions).
CREATE OR REPLACE FUNCTION gpuledger_maintain_telemetry_partitions(p_from date, p_through date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m       date;
    made    integer := 0;
BEGIN
    IF p_through < p_from OR p_through > p_from + interval '10 years' THEN
        RAISE EXCEPTION 'maintenance range % .. % is not a sensible one', p_from, p_through;
    END IF;
    FOR m IN
        SELECT generate_series(date_trunc('month', p_from), date_trunc('month', p_through), interval '1 month')::date
        UNION
        SELECT DISTINCT date_trunc('month', window_start)::date FROM telemetry_rollups_default
        UNION
        SELECT DISTINCT date_trunc('month', hour)::date FROM telemetry_hours_default
        UNION
        SELECT DISTINCT date_trunc('month', hour)::date FROM telemetry_windows_default
    LOOP
        IF to_regclass(format('telemetry_rollups_%s', to_char(m, 'YYYYMM'))) IS NULL THEN
            PERFORM gpuledger_ensure_telemetry_partition(m);
            made := made + 1;
        END IF;
        made := made + gpuledger_ensure_telemetry_tier_partitions(m);
    END LOOP;
    RETURN made;
END
$$;

-- The organizations with rows stored before the tiers (the upkeep's cross-organization door; IDs only). The
-- function runs as the owner, which sees telemetry_rollups across organizations through this policy only.
CREATE POLICY legacy_mover ON telemetry_rollups FOR SELECT TO gpuledger_owner USING (true);
CREATE FUNCTION gpuledger_legacy_telemetry_orgs() RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT o.org_id FROM organizations o WHERE EXISTS (SELECT 1 FROM telemetry_rollups t WHERE t.org_id = o.org_id)
$$;
REVOKE ALL ON FUNCTION gpuledger_legacy_telemetry_orgs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_legacy_telemetry_orgs() TO gpuledger_app;

RESET ROLE;

-- Partitions of months that already exist (made before this migration) for the tiers too.
SELECT gpuledger_ensure_telemetry_tier_partitions(to_date(substr(c.relname, 19), 'YYYYMM'))
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'telemetry_rollups'::regclass AND c.relname ~ '^telemetry_rollups_[0-9]{6}$';
