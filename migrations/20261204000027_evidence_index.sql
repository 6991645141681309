-- Reads stay under 100 ms (issue 31).
--
-- 1. The evidence behind a closed month's lines, as an index written at close: one row per allocation record of the
--    month's evidence bundle, so `GET /api/v1/periods/{period}/evidence` pages rows by index instead of decoding the
--    whole gzipped bundle on every request. The close writes it in its own transaction; a month closed before this
--    migration gets it from its bundle on the first request for its evidence (in a transaction of its own, under an
--    advisory lock so concurrent first readers build it once).
--
--    The endpoint's sorts (start, end, fraction, id; each ascending or descending) are stored as ranks computed at
--    build time with the very comparators the endpoint used over the bundle: a rank is the record's position in
--    that order over the whole month (ties broken by position in the bundle, as the stable sort did), so the ranks
--    are a permutation of 1..n, descending is the exact reverse, and any filtered subset keeps the same relative
--    order. Exact rationals (`fraction`) need no SQL ordering of their own this way.
-- 2. The open month's idle analysis (`GET /api/v1/idle`), stored with its provisional snapshot by the read model's
--    worker (`read_months.idle`).
SET LOCAL ROLE gpuledger_owner;

-- One row per indexed closed month: that the index exists (a month with no allocation has no rows below), how many
-- records it holds, and the record counts per (tenant, GPU class, endpoint) group, from which the endpoint's total
-- for any filter and department scope is summed without counting rows.
CREATE TABLE evidence_months (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    period          date        NOT NULL CHECK (extract(day FROM period) = 1),
    allocations     integer     NOT NULL CHECK (allocations >= 0),
    -- [[tenant_id or null, gpu_class or null, endpoint or null, count], …]
    groups          jsonb       NOT NULL DEFAULT '[]'::jsonb,
    -- 'close': written by the close; 'bundle': built later from the stored bundle (months closed before this).
    source          text        NOT NULL CHECK (source IN ('close', 'bundle')),
    built_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, period)
);

-- The allocation records of the month's bundle, as the endpoint answers them.
CREATE TABLE evidence_allocations (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    -- Positions in each of the endpoint's orders over the whole month (1-based, a permutation each).
    start_rank      integer     NOT NULL CHECK (start_rank >= 1),
    end_rank        integer     NOT NULL CHECK (end_rank >= 1),
    fraction_rank   integer     NOT NULL CHECK (fraction_rank >= 1),
    id_rank         integer     NOT NULL CHECK (id_rank >= 1),
    -- `cluster/allocation` (`#n` when split at an ownership change).
    allocation      text        NOT NULL,
    tenant_id       uuid,
    gpu_class       text,
    endpoint        text,
    -- The exact rational as the bundle writes it (`3/7`).
    fraction        text        NOT NULL,
    starts_at       timestamptz NOT NULL,
    ends_at         timestamptz,
    confidence      text        NOT NULL CHECK (confidence IN ('exact', 'modeled', 'estimated')),
    -- The physical GPU UUIDs, a JSON array of strings.
    devices         jsonb       NOT NULL DEFAULT '[]'::jsonb,
    PRIMARY KEY (org_id, period, start_rank),
    FOREIGN KEY (org_id, period) REFERENCES evidence_months (org_id, period) ON DELETE CASCADE
);
-- The sorts (the primary key serves `start`); a GPU class filter walks these too (a handful of classes, each a
-- large share of the month).
CREATE UNIQUE INDEX evidence_allocations_by_end ON evidence_allocations (org_id, period, end_rank);
CREATE UNIQUE INDEX evidence_allocations_by_fraction ON evidence_allocations (org_id, period, fraction_rank);
CREATE UNIQUE INDEX evidence_allocations_by_id ON evidence_allocations (org_id, period, id_rank);
-- The filters that select a small share of the month: a tenant, an endpoint.
CREATE INDEX evidence_allocations_by_tenant ON evidence_allocations (org_id, period, tenant_id, start_rank);
CREATE INDEX evidence_allocations_by_endpoint ON evidence_allocations (org_id, period, endpoint, start_rank)
    WHERE endpoint IS NOT NULL;

SELECT gpuledger_isolate(t) FROM unnest(ARRAY['evidence_months', 'evidence_allocations']::regclass[]) t;
-- Written once (the close, or the first read of an older month), never changed: no UPDATE or DELETE for the app.
GRANT SELECT, INSERT ON evidence_months, evidence_allocations TO gpuledger_app;

-- The open month's idle reservations as the worker computed them with the snapshot ({"list": IdleList,
-- "departments": [department id or null per item]}); NULL for closed months and before the first such snapshot.
ALTER TABLE read_months ADD COLUMN idle jsonb;

RESET ROLE;
