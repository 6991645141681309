-- The read model (issue 17): what pages and API reads show for a month, stored so reads are indexed lookups.
-- A closed month's figures are written by the close, in its transaction, and never change; the open month's are a
-- provisional snapshot the server's refresh worker rewrites after changes (at most one refresher per organization,
-- across replicas, by an advisory lock). Neither is ever the source of a close: a close computes from the facts.

SET LOCAL ROLE gpuledger_owner;

-- One row per organization and month that has figures.
CREATE TABLE read_months (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    period          date        NOT NULL CHECK (extract(day FROM period) = 1),
    -- 'closed': written by the close, final. 'provisional': the open month's snapshot.
    state           text        NOT NULL CHECK (state IN ('closed', 'provisional')),
    -- When the figures were computed (the facts they include were committed before this).
    as_of           timestamptz NOT NULL,
    -- How long the computation took, for the admin's eyes and the benchmarks.
    compute_ms      integer     NOT NULL DEFAULT 0,
    policy_version  integer,
    currency        char(3),
    content_hash    text,
    line_count      integer     NOT NULL DEFAULT 0,
    -- The computation's notes over the whole organization (open allocations, unpriced allocations, unattributed
    -- work): shown to organization-wide readers only.
    notes           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (org_id, period)
);

-- A month's ledger lines as the API returns them (the line's JSON), with the columns reads filter and sum by.
CREATE TABLE read_lines (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    line_no         integer     NOT NULL CHECK (line_no >= 1),
    department_id   uuid        NOT NULL,
    department      text        NOT NULL,
    tenant_id       uuid,
    tenant          text        NOT NULL,
    term            text        NOT NULL,
    amount          numeric(20, 2) NOT NULL,
    line            jsonb       NOT NULL,
    PRIMARY KEY (org_id, period, line_no),
    FOREIGN KEY (org_id, period) REFERENCES read_months (org_id, period) ON DELETE CASCADE
);
CREATE INDEX read_lines_by_department ON read_lines (org_id, period, department_id);

-- Analytics answers (utilization, inference, training, sessions) as computed for one caller scope and query,
-- valid for the figures of `as_of`: a closed month's forever, an open month's until the next snapshot. Computed
-- once per scope, query and snapshot, then read.
CREATE TABLE read_answers (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    -- The request: path and normalized query.
    request         text        NOT NULL CHECK (length(request) <= 2000),
    -- 'all' or the caller's department ids, sorted, comma-separated: the answer was computed under this scope.
    scope           text        NOT NULL CHECK (length(scope) <= 4000),
    as_of           timestamptz NOT NULL,
    body            bytea       NOT NULL,
    PRIMARY KEY (org_id, period, request, scope),
    FOREIGN KEY (org_id, period) REFERENCES read_months (org_id, period) ON DELETE CASCADE
);

-- Organizations whose open month changed since its snapshot: written by the transactions that change what a
-- month's figures are computed from (ingest, policies, inventory, tenancy, disputes, usage), read and cleared by
-- the refresh worker.
CREATE TABLE read_dirty (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    since           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id)
);

SELECT gpuledger_isolate(t) FROM unnest(ARRAY['read_months', 'read_lines', 'read_dirty', 'read_answers']::regclass[]) t;
SELECT gpuledger_dept_scope('read_lines', 'department_id');

GRANT SELECT, INSERT, UPDATE, DELETE ON read_months, read_lines, read_dirty, read_answers TO gpuledger_app;

-- The organizations whose open month the refresh worker should compute now: changed at least `p_quiet` ago and not
-- refreshed for `p_min_interval` (so a busy organization is refreshed at a steady pace, not after every batch).
-- Returns organization ids only; the refresh itself runs in each organization's own transaction. It runs as the
-- owner, which sees these two tables across organizations through the policies below and nothing else.
CREATE POLICY refresh_worker ON read_dirty FOR SELECT TO gpuledger_owner USING (true);
CREATE POLICY refresh_worker ON read_months FOR SELECT TO gpuledger_owner USING (true);
CREATE FUNCTION gpuledger_read_refresh_due(p_quiet interval, p_min_interval interval)
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT d.org_id FROM read_dirty d
     WHERE d.since <= now() - p_quiet
       AND NOT EXISTS (SELECT 1 FROM read_months m
                        WHERE m.org_id = d.org_id AND m.state = 'provisional' AND m.as_of > now() - p_min_interval)
     ORDER BY d.since
$$;
REVOKE ALL ON FUNCTION gpuledger_read_refresh_due(interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_read_refresh_due(interval, interval) TO gpuledger_app;

RESET ROLE;
