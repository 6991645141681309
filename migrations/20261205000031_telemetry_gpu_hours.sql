-- Telemetry in one row per physical GPU and hour (issue 31). Before this, each device-hour (a whole GPU, and each
-- MIG instance apart) was a row in two tables: `telemetry_windows` (the block) and `telemetry_hours` (the sums).
-- At 10,000 GPUs with 12,110 MIG instances that was 36 M rows a month, and about 110 bytes of each row was header,
-- key and index entry before any telemetry: the database took 2,183 B per GPU-hour held (docs/telemetry.md).
--
-- `telemetry_gpu_hours` keeps, per physical GPU (its `telemetry_series` row with gpu_instance_id -1) and hour:
--   * the GPU's own sums in columns (what the close prices: energy; what idle detection reads: utilization);
--   * its MIG instances' sums, as a mask of the instance IDs that reported, their window count and covered ms
--     (coverage) and a compact encoding of each instance's sums (core `telemetry::encode_instance_sums`; read by
--     utilization analytics);
--   * the full-resolution block of the GPU and its instances together (core `telemetry::encode_gpu_hour`,
--     deflated), NULL once retention stripped the month's full resolution.
-- The tables before stay until the server's upkeep has moved their rows here (`telemetry::store::move_tiers`);
-- nothing writes them any more.

SET LOCAL ROLE gpuledger_owner;

CREATE TABLE telemetry_gpu_hours (
    org_id          uuid        NOT NULL,
    series_id       bigint      NOT NULL,   -- the physical GPU's series (gpu_instance_id -1)
    hour            timestamptz NOT NULL,
    -- 8-byte columns first, then 4, then 2: no alignment padding inside the row.
    util_sum        bigint      NOT NULL CHECK (util_sum >= 0),   -- Σ utilization (0.1 %) × ms, the GPU's windows
    energy_j        bigint      NOT NULL CHECK (energy_j >= 0),   -- whole joules
    instances       bigint      NOT NULL DEFAULT 0,               -- bit i: MIG instance i reported this hour
    samples         integer     NOT NULL CHECK (samples >= 0),
    sampled_ms      integer     NOT NULL CHECK (sampled_ms >= 0),
    span_from_ms    integer     NOT NULL,
    span_to_ms      integer     NOT NULL,
    util_ms         integer     NOT NULL CHECK (util_ms >= 0),
    mem_max         integer     NOT NULL CHECK (mem_max >= 0),    -- MiB
    power_max       integer     NOT NULL CHECK (power_max >= 0),  -- 0.1 W
    energy_ms       integer     NOT NULL CHECK (energy_ms >= 0),
    inst_windows    integer     NOT NULL DEFAULT 0 CHECK (inst_windows >= 0),
    inst_sampled_ms integer     NOT NULL DEFAULT 0 CHECK (inst_sampled_ms >= 0),
    windows         smallint    NOT NULL CHECK (windows >= 0),    -- the GPU's own windows (0: only its instances)
    util_max        smallint    NOT NULL CHECK (util_max >= 0),   -- 0.1 %
    inst_sums       bytea       CHECK (length(inst_sums) <= 8192),
    block           bytea       CHECK (length(block) <= 4194304),
    PRIMARY KEY (org_id, series_id, hour),
    CHECK (windows > 0 OR instances <> 0),
    CHECK ((instances = 0) = (inst_sums IS NULL)),
    CHECK (windows = 0 OR span_to_ms > span_from_ms)
) PARTITION BY RANGE (hour);
CREATE TABLE telemetry_gpu_hours_default PARTITION OF telemetry_gpu_hours DEFAULT;
-- The block is already compressed.
ALTER TABLE telemetry_gpu_hours ALTER COLUMN block SET STORAGE EXTERNAL;
ALTER TABLE telemetry_gpu_hours ALTER COLUMN inst_sums SET STORAGE EXTERNAL;

SELECT gpuledger_isolate('telemetry_gpu_hours');
GRANT SELECT, INSERT, UPDATE ON telemetry_gpu_hours TO gpuledger_app;
-- The upkeep moves the tables before into this one.
GRANT DELETE ON telemetry_hours, telemetry_windows TO gpuledger_app;

-- Makes the month's partition of the tiers if missing (rows waiting in the default partition for that month are
-- moved in). Only `telemetry_gpu_hours` gets new months: nothing writes the tables before.
CREATE OR REPLACE FUNCTION gpuledger_ensure_telemetry_tier_partitions(p_month date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m_start date := date_trunc('month', p_month)::date;
    m_end   date := (date_trunc('month', p_month) + interval '1 month')::date;
    parent  text := 'telemetry_gpu_hours';
    part    text;
    waiting boolean;
BEGIN
    part := format('%s_%s', parent, to_char(m_start, 'YYYYMM'));
    IF to_regclass(part) IS NOT NULL THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext(part));
    IF to_regclass(part) IS NOT NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE hour >= %L AND hour < %L)', parent || '_default', m_start, m_end)
       INTO waiting;
    IF waiting THEN
        EXECUTE format('CREATE TEMP TABLE IF NOT EXISTS gpuledger_moving_%s (LIKE %I) ON COMMIT DROP', parent, parent);
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE hour >= %L AND hour < %L RETURNING *)
                        INSERT INTO gpuledger_moving_%s SELECT * FROM moved', parent || '_default', m_start, m_end, parent);
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', part, parent, m_start, m_end);
    IF waiting THEN
        EXECUTE format('INSERT INTO %I SELECT * FROM gpuledger_moving_%s', part, parent);
        EXECUTE format('TRUNCATE gpuledger_moving_%s', parent);
    END IF;
    RETURN 1;
END
$$;

CREATE OR REPLACE FUNCTION gpuledger_maintain_telemetry_partitions(p_from date, p_through date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m       date;
    made    integer := 0;
BEGIN
    -- One maker at a time (the upkeep's task and the demo's loader): two makers taking the months' locks and their
    -- parents' locks in different orders deadlocked.
    PERFORM pg_advisory_xact_lock(hashtext('gpuledger_maintain_telemetry_partitions'));
    IF p_through < p_from OR p_through > p_from + interval '10 years' THEN
        RAISE EXCEPTION 'maintenance range % .. % is not a sensible one', p_from, p_through;
    END IF;
    FOR m IN
        SELECT generate_series(date_trunc('month', p_from), date_trunc('month', p_through), interval '1 month')::date
        UNION
        SELECT DISTINCT date_trunc('month', window_start)::date FROM telemetry_rollups_default
        UNION
        SELECT DISTINCT date_trunc('month', hour)::date FROM telemetry_gpu_hours_default
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

-- The organizations with rows in the tables before (the upkeep's cross-organization door; IDs only).
CREATE POLICY tier_mover ON telemetry_hours FOR SELECT TO gpuledger_owner USING (true);
CREATE FUNCTION gpuledger_old_tier_orgs() RETURNS SETOF uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    -- No correlated subquery over `organizations` (a reference table on Citus, which refuses that shape).
    RETURN QUERY SELECT DISTINCT t.org_id FROM telemetry_hours t;
END
$$;
REVOKE ALL ON FUNCTION gpuledger_old_tier_orgs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_old_tier_orgs() TO gpuledger_app;

-- The organization's ID also as `organizations.id`: the name operators' tools and ad-hoc queries reach for first
-- (e.g. finding an organization's shard with get_shard_id_for_distribution_column on Citus). Generated, so the two
-- can never disagree; every table keys by org_id.
ALTER TABLE organizations ADD COLUMN id uuid GENERATED ALWAYS AS (org_id) STORED;

RESET ROLE;

-- Partitions of the months the tables before have.
SELECT gpuledger_ensure_telemetry_tier_partitions(to_date(substr(c.relname, 17), 'YYYYMM'))
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'telemetry_hours'::regclass AND c.relname ~ '^telemetry_hours_[0-9]{6}$';
