-- The cross-organization doors that Citus could not plan (docs/scaling.md, "Statements that go everywhere"): a SQL
-- function with parameters is planned by Citus as a prepared statement it cannot distribute ("could not create
-- distributed plan ... SQL functions with parameters"), and a correlated subquery is refused when the FROM clause
-- holds a reference table. Same results on one PostgreSQL; the bodies below are PL/pgSQL (planned with the
-- values) and a join instead of a correlated EXISTS. Owners, grants and signatures are unchanged.

SET LOCAL ROLE gpuledger_owner;

CREATE OR REPLACE FUNCTION gpuledger_read_refresh_due(p_quiet interval, p_min_interval interval)
RETURNS SETOF uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT d.org_id FROM read_dirty d
     WHERE d.since <= now() - p_quiet
       AND NOT EXISTS (SELECT 1 FROM read_months m
                        WHERE m.org_id = d.org_id AND m.state = 'provisional' AND m.as_of > now() - p_min_interval)
     ORDER BY d.since;
END
$$;

CREATE OR REPLACE FUNCTION gpuledger_read_summaries_due(p_limit integer)
RETURNS TABLE (org_id uuid, period date)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT m.org_id, m.period FROM read_months m
      LEFT JOIN (SELECT s.org_id, s.period, s.as_of, count(*) AS n FROM read_summaries s
                  GROUP BY s.org_id, s.period, s.as_of) c
        ON c.org_id = m.org_id AND c.period = m.period AND c.as_of = m.as_of
     WHERE coalesce(c.n, 0) < 3
     ORDER BY m.period DESC, m.as_of
     LIMIT p_limit;
END
$$;

CREATE OR REPLACE FUNCTION gpuledger_legacy_telemetry_orgs() RETURNS SETOF uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT DISTINCT t.org_id FROM telemetry_rollups t;
END
$$;

-- Partitions made ahead of time move nothing: the rows of a month that arrived before its partition existed are
-- moved out of the default partition only when there are any. On Citus that move is a multi-shard DELETE … RETURNING
-- run as the owner; taken needlessly (the demo prepares its months up front), it left the transaction unable to touch
-- those placements as another role ("cannot perform query on placements that were modified in this transaction by
-- a different user"). Same partitions and rows as before on PostgreSQL.
CREATE OR REPLACE FUNCTION gpuledger_ensure_telemetry_partition(p_month date) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m_start date := date_trunc('month', p_month)::date;
    m_end   date := (date_trunc('month', p_month) + interval '1 month')::date;
    part    text := format('telemetry_rollups_%s', to_char(m_start, 'YYYYMM'));
    waiting boolean;
BEGIN
    IF to_regclass(part) IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext(part));
    IF to_regclass(part) IS NOT NULL THEN
        RETURN;
    END IF;
    SELECT EXISTS (SELECT 1 FROM telemetry_rollups_default WHERE window_start >= m_start AND window_start < m_end)
      INTO waiting;
    IF waiting THEN
        CREATE TEMP TABLE IF NOT EXISTS gpuledger_moving (LIKE telemetry_rollups) ON COMMIT DROP;
        EXECUTE format('WITH moved AS (DELETE FROM telemetry_rollups_default WHERE window_start >= %L AND window_start < %L RETURNING *)
                        INSERT INTO gpuledger_moving SELECT * FROM moved', m_start, m_end);
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF telemetry_rollups FOR VALUES FROM (%L) TO (%L)', part, m_start, m_end);
    IF waiting THEN
        EXECUTE format('INSERT INTO %I SELECT * FROM gpuledger_moving', part);
        TRUNCATE gpuledger_moving;
    END IF;
    -- On Citus a second statement making a partition in the same transaction is refused ("placements that were
    -- modified in this transaction by a different user"); one statement may make several. Callers make a range of
    -- months in one call (gpuledger_maintain_telemetry_partitions: the upkeep, the demo).
END
$$;

CREATE OR REPLACE FUNCTION gpuledger_ensure_telemetry_tier_partitions(p_month date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m_start date := date_trunc('month', p_month)::date;
    m_end   date := (date_trunc('month', p_month) + interval '1 month')::date;
    parent  text;
    part    text;
    made    integer := 0;
    waiting boolean;
BEGIN
    FOREACH parent IN ARRAY ARRAY['telemetry_hours', 'telemetry_windows'] LOOP
        part := format('%s_%s', parent, to_char(m_start, 'YYYYMM'));
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        PERFORM pg_advisory_xact_lock(hashtext(part));
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
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
        made := made + 1;
    END LOOP;
    RETURN made;
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

RESET ROLE;
