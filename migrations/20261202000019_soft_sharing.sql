-- Soft sharing by fraction (issue 20): HAMi, Volcano vGPU, Run:ai and Alibaba gpushare declare a compute and/or
-- memory share of a GPU. Which share a pod pays is part of the approved inventory, versioned per cluster (or for the
-- whole organization when cluster_id is NULL); the allocation keeps the explanation of how its fraction was made.

SET LOCAL ROLE gpuledger_owner;

ALTER TABLE allocation_intervals DROP CONSTRAINT allocation_intervals_sharing_mode_check;
ALTER TABLE allocation_intervals ADD CONSTRAINT allocation_intervals_sharing_mode_check
    CHECK (sharing_mode IN ('exclusive', 'mig', 'time_slice', 'vgpu', 'passthrough', 'shared_endpoint', 'soft_share'));
-- How a soft share became its fraction, for people ("hami: compute 30 %, memory 50 % → …: 50 %").
ALTER TABLE allocation_intervals ADD COLUMN share text CHECK (length(share) <= 500);
-- Which share it is (the inventory's basis when it was priced): named in the ledger lines' explanations.
ALTER TABLE allocation_intervals ADD COLUMN share_basis text CHECK (share_basis IN ('compute', 'memory', 'larger'));

CREATE TABLE share_bases (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    version_id      uuid        NOT NULL DEFAULT gen_random_uuid(),
    -- NULL: every cluster of the organization without a version of its own at that time.
    cluster_id      uuid,
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    basis           text        NOT NULL CHECK (basis IN ('compute', 'memory', 'larger')),
    created_by      text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, version_id),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (valid_to IS NULL OR valid_to > valid_from),
    EXCLUDE USING gist (org_id WITH =, (COALESCE(cluster_id, '00000000-0000-0000-0000-000000000000'::uuid)) WITH =,
                        tstzrange(valid_from, valid_to) WITH &&)
);
CREATE UNIQUE INDEX share_bases_version ON share_bases
    (org_id, (COALESCE(cluster_id, '00000000-0000-0000-0000-000000000000'::uuid)), valid_from);

SELECT gpuledger_isolate('share_bases'::regclass);
-- Versions are closed (valid_to), never deleted.
GRANT SELECT, INSERT, UPDATE ON share_bases TO gpuledger_app;

RESET ROLE;

-- Closing a month with allocations the ledger cannot price (issue 20) — or, later, data known lost (issue 23) — needs
-- an explicit acknowledgement: who, when, why, and what was acknowledged. Kept beside the period (a closed period
-- row is never rewritten); append-only.
SET LOCAL ROLE gpuledger_owner;
CREATE TABLE close_acknowledgements (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    period          date        NOT NULL CHECK (extract(day FROM period) = 1),
    acknowledged_at timestamptz NOT NULL DEFAULT now(),
    acknowledged_by text        NOT NULL,
    reason          text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 2000),
    -- What was open when it was given: {"unpriced": n, "items": [...]}.
    what            jsonb       NOT NULL,
    PRIMARY KEY (org_id, period, acknowledged_at)
);
SELECT gpuledger_isolate('close_acknowledgements'::regclass);
GRANT SELECT, INSERT ON close_acknowledgements TO gpuledger_app;
RESET ROLE;
