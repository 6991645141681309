-- Telemetry coverage per GPU and UTC day (issue 31). `GET /api/v1/telemetry/coverage` summed the month's GPU-hours
-- (7.2 M rows at 10,000 GPUs, most of a row being its full-resolution block): 28 s a request, past the request limit.
-- The GPU-hours' writers (`telemetry::store::insert_gpu_hours` and the merge of late windows) now keep, in the same
-- transaction, each GPU's day as one row per mean window length (whole seconds; nearly always one): the coverage reads
-- ~31 rows per GPU a month, plus the GPU-hours of the partial days at the edges of a month in another time zone.
--
-- Additive columns are exact sums over the day's GPU-hours of that length; `own`, `instances` and `last_hour` only
-- ever grow (a merge adds windows, never removes them), so a row a merged hour left keeps true facts about its GPU.
-- Retention keeps this table in step: a stripped month's `block_bytes` become 0, a dropped month's rows go
-- (`gpuledger_telemetry_coverage_retention`, called by deploy/scripts/telemetry-retention.sh).
SET LOCAL ROLE gpuledger_owner;

CREATE TABLE telemetry_coverage_days (
    org_id       uuid        NOT NULL,
    series_id    bigint      NOT NULL,   -- the physical GPU's series (gpu_instance_id -1)
    windows      bigint      NOT NULL,   -- Σ windows, the GPU's and its MIG instances'
    gpu_ms       bigint      NOT NULL,   -- Σ ms the GPU's own windows cover
    block_bytes  bigint      NOT NULL,   -- Σ bytes of the full-resolution blocks
    inst_bytes   bigint      NOT NULL,   -- Σ bytes of the MIG instances' encoded sums
    instances    bigint      NOT NULL,   -- OR of the hours' MIG instance masks
    last_hour    timestamptz NOT NULL,   -- latest hour counted
    day          date        NOT NULL,   -- UTC
    len_s        integer     NOT NULL,   -- the hours' mean window length, whole seconds
    hours        integer     NOT NULL,   -- GPU-hour rows
    device_hours integer     NOT NULL,   -- Σ (the GPU reported) + (its instances that reported)
    own          boolean     NOT NULL,   -- the GPU itself reported in some hour
    PRIMARY KEY (org_id, day, series_id, len_s)
) WITH (fillfactor = 50);
-- Ingest updates a GPU's day with every merged batch (a row a minute per GPU at the agents' cadence): half of each
-- page left free keeps those updates heap-only (no new key entry, the old version pruned in place).
SELECT gpuledger_isolate('telemetry_coverage_days');
GRANT SELECT, INSERT, UPDATE ON telemetry_coverage_days TO gpuledger_app;

-- Retention and the backfill below work on every organization's rows at once, as the owner: this policy lets
-- the owner (never the app) see and change them without an organization's setting — which plain PostgreSQL could
-- take per organization with set_config, but which a Citus coordinator does not send to its workers' shards.
CREATE POLICY coverage_keeper ON telemetry_coverage_days FOR ALL TO gpuledger_owner USING (true) WITH CHECK (true);

-- Retention's step on this table for the months [p_from, p_to): strip (blocks gone: their bytes are 0) or drop (rows
-- gone). Returns the rows changed.
CREATE FUNCTION gpuledger_telemetry_coverage_retention(p_from date, p_to date, p_drop boolean) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    IF p_drop THEN
        DELETE FROM telemetry_coverage_days WHERE day >= p_from AND day < p_to;
    ELSE
        UPDATE telemetry_coverage_days SET block_bytes = 0 WHERE day >= p_from AND day < p_to AND block_bytes <> 0;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
REVOKE ALL ON FUNCTION gpuledger_telemetry_coverage_retention(date, date, boolean) FROM PUBLIC;

-- The GPU-hours stored before this migration: every organization's, read through a policy that lives only for this
-- statement's transaction.
CREATE POLICY coverage_backfill ON telemetry_gpu_hours FOR SELECT TO gpuledger_owner USING (true);
INSERT INTO telemetry_coverage_days (org_id, series_id, windows, gpu_ms, block_bytes, inst_bytes, instances, last_hour,
                                     day, len_s, hours, device_hours, own)
SELECT org_id, series_id, sum(windows + inst_windows), sum(sampled_ms), coalesce(sum(octet_length(block)), 0),
       coalesce(sum(octet_length(inst_sums)), 0), bit_or(instances), max(hour), (hour AT TIME ZONE 'UTC')::date,
       ((sampled_ms::bigint + inst_sampled_ms) / (windows + inst_windows) / 1000)::int, count(*),
       sum((windows > 0)::int + bit_count(instances::bit(64))), bool_or(windows > 0)
  FROM telemetry_gpu_hours
 GROUP BY org_id, series_id, (hour AT TIME ZONE 'UTC')::date,
          ((sampled_ms::bigint + inst_sampled_ms) / (windows + inst_windows) / 1000)::int;
DROP POLICY coverage_backfill ON telemetry_gpu_hours;

RESET ROLE;
