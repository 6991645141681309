-- The read model's summaries (issue 17): the utilization, inference and training figures the pages show for a
-- month, computed once per month figures (a close, a snapshot) by the refresh worker and then read as rows under
-- the organization and the department scope, never computed on a page read.

SET LOCAL ROLE gpuledger_owner;

-- One row per organization, month and kind of summary: which figures it was computed after, and its answer-wide
-- fields. Not tied to read_months by a foreign key: a new snapshot replaces the month's figures, and the previous
-- summary stays readable (saying its own as_of) until the worker has computed the new one.
CREATE TABLE read_summaries (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    period          date        NOT NULL CHECK (extract(day FROM period) = 1),
    kind            text        NOT NULL CHECK (kind IN ('utilization', 'inference', 'training')),
    -- The read_months.as_of of the figures this summary goes with; the worker recomputes when they differ.
    as_of           timestamptz NOT NULL,
    -- When the summary itself was computed, and how long it took.
    computed_at     timestamptz NOT NULL DEFAULT now(),
    compute_ms      integer     NOT NULL DEFAULT 0,
    -- Fields of the whole answer (window, threshold, basis): no department's figures.
    head            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (org_id, period, kind)
);

-- The summary's rows: one per tenant, workload or endpoint, as the API answers them. A row of a department's
-- tenant carries the department (the department scope cuts on it); a row of the whole organization (an endpoint's
-- total, work no tenant accounts for) has none, and only organization-wide readers see it.
CREATE TABLE read_summary_rows (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    kind            text        NOT NULL,
    row_no          integer     NOT NULL CHECK (row_no >= 1),
    section         text        NOT NULL CHECK (section IN ('tenants', 'endpoints', 'unattributed', 'workloads')),
    department_id   uuid,
    body            jsonb       NOT NULL,
    PRIMARY KEY (org_id, period, kind, row_no),
    FOREIGN KEY (org_id, period, kind) REFERENCES read_summaries (org_id, period, kind) ON DELETE CASCADE
);

-- A month's total per department, written with its lines (`readmodel::store`): the showback's six-month trend
-- reads a handful of rows per month instead of summing every line under the department policy.
CREATE TABLE read_totals (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    department_id   uuid        NOT NULL,
    department      text        NOT NULL,
    total           numeric(20, 2) NOT NULL,
    PRIMARY KEY (org_id, period, department_id),
    FOREIGN KEY (org_id, period) REFERENCES read_months (org_id, period) ON DELETE CASCADE
);

SELECT gpuledger_isolate(t) FROM unnest(ARRAY['read_summaries', 'read_summary_rows', 'read_totals']::regclass[]) t;
SELECT gpuledger_dept_scope('read_summary_rows', 'department_id');
SELECT gpuledger_dept_scope('read_totals', 'department_id');

GRANT SELECT, INSERT, UPDATE, DELETE ON read_summaries, read_summary_rows, read_totals TO gpuledger_app;

-- The months whose summaries do not go with their current figures: newest first (the open month and the last
-- closed one are what people read). Like gpuledger_read_refresh_due, it runs as the owner, which may read these
-- figures' metadata across organizations through the policy below and nothing else.
CREATE POLICY refresh_worker ON read_summaries FOR SELECT TO gpuledger_owner USING (true);
CREATE FUNCTION gpuledger_read_summaries_due(p_limit integer)
RETURNS TABLE (org_id uuid, period date)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT m.org_id, m.period FROM read_months m
     WHERE (SELECT count(*) FROM read_summaries s
             WHERE s.org_id = m.org_id AND s.period = m.period AND s.as_of = m.as_of) < 3
     ORDER BY m.period DESC, m.as_of
     LIMIT p_limit
$$;
REVOKE ALL ON FUNCTION gpuledger_read_summaries_due(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_read_summaries_due(integer) TO gpuledger_app;

RESET ROLE;

-- Months stored before this migration get their totals from their lines (the migration runs as a role that sees
-- every organization's rows).
INSERT INTO read_totals (org_id, period, department_id, department, total)
SELECT org_id, period, department_id, min(department), sum(amount) FROM read_lines
 GROUP BY org_id, period, department_id
ON CONFLICT DO NOTHING;
