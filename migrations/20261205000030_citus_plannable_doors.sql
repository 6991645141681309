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

RESET ROLE;
