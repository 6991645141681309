-- The evidence index's orders other than `start` as chunks of a permutation (issue 31, docs/scaling.md "The
-- evidence orders"): for each order, the records' start ranks in that order, 256 to a row, written once at the end
-- of the month's index. They replace three unique indexes on (end_rank), (fraction_rank) and (id_rank) whose upkeep
-- was half of the index's write at the close (1.1 M records at 10,000 GPUs, each inserted into six B-trees); a page
-- in one of those orders is now a chunk or two and a lookup by the primary key.
SET LOCAL ROLE gpuledger_owner;

CREATE TABLE evidence_orders (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    -- 1: end, 2: fraction, 3: ID (start is the primary key of evidence_allocations itself).
    sort            smallint    NOT NULL CHECK (sort BETWEEN 1 AND 3),
    -- Ranks chunk * 256 + 1 … chunk * 256 + 256 in that order.
    chunk           integer     NOT NULL CHECK (chunk >= 0),
    start_ranks     integer[]   NOT NULL CHECK (cardinality(start_ranks) BETWEEN 1 AND 256),
    -- No foreign key to evidence_months: on a distributed database (an upgrade, docs/scaling.md) this table is
    -- local until distribute.sql runs again, and Citus refuses a key from a local table to a distributed one.
    -- Nothing deletes a month's index but an operator (with its orders) and the organization's erasure.
    PRIMARY KEY (org_id, period, sort, chunk)
);

SELECT gpuledger_isolate('evidence_orders');
-- Written once with its month's index, never changed.
GRANT SELECT, INSERT ON evidence_orders TO gpuledger_app;

-- The months indexed before this migration: their orders from the ranks they hold, every organization's, through
-- policies that live only for this statement's transaction.
CREATE POLICY orders_backfill_read ON evidence_allocations FOR SELECT TO gpuledger_owner USING (true);
CREATE POLICY orders_backfill_write ON evidence_orders FOR INSERT TO gpuledger_owner WITH CHECK (true);
INSERT INTO evidence_orders (org_id, period, sort, chunk, start_ranks)
SELECT e.org_id, e.period, k.sort, (k.r - 1) / 256, array_agg(e.start_rank ORDER BY k.r)
  FROM evidence_allocations e
 CROSS JOIN LATERAL (VALUES (1::smallint, e.end_rank), (2::smallint, e.fraction_rank), (3::smallint, e.id_rank)) AS k (sort, r)
 GROUP BY e.org_id, e.period, k.sort, (k.r - 1) / 256;
DROP POLICY orders_backfill_write ON evidence_orders;
DROP POLICY orders_backfill_read ON evidence_allocations;

DROP INDEX evidence_allocations_by_end;
DROP INDEX evidence_allocations_by_fraction;
DROP INDEX evidence_allocations_by_id;

RESET ROLE;
