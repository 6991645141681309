-- The cloud bill in (issue 35 item 2).
--
-- 1. A node's `spec.providerID` as its agent reports it: how the cloud bill names the machine (absent on premises).
-- 2. A month's imported FOCUS bill, aggregated per resource as it is read (a provider's export has a line per
--    resource and hour: millions of lines, never stored one by one): what matched a GPU node (by the resource key of
--    `gpuledger_core::provider`), what did not, and the totals by EffectiveCost. Re-importing a month replaces its
--    import (audited); a closed month's import is never changed.
SET LOCAL ROLE gpuledger_owner;

-- Column and constraint apart, the constraint named: Citus refuses ADD COLUMN with an unnamed constraint on a
-- distributed table (the upgrade path, server/tests/citus_upgrade.rs).
ALTER TABLE nodes ADD COLUMN provider_id text;
ALTER TABLE nodes ADD CONSTRAINT nodes_provider_id_ok CHECK (length(provider_id) BETWEEN 1 AND 1024);

CREATE TABLE cost_imports (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    period          date        NOT NULL CHECK (extract(day FROM period) = 1),
    import_id       uuid        NOT NULL,
    imported_at     timestamptz NOT NULL DEFAULT now(),
    imported_by     text        NOT NULL CHECK (length(imported_by) <= 400),
    -- FOCUS version as the file's columns say it (`1.0`…`1.3`), and its BillingCurrency.
    focus_version   text        NOT NULL CHECK (length(focus_version) <= 16),
    currency        char(3)     NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    lines_read      bigint      NOT NULL CHECK (lines_read >= 0),
    -- Lines whose charge period is not in the month (left out of every sum).
    lines_outside   bigint      NOT NULL CHECK (lines_outside >= 0),
    matched_cost    numeric     NOT NULL,
    unmatched_cost  numeric     NOT NULL,
    PRIMARY KEY (org_id, period)
);

-- One row per resource of the import: a matched node's machine, or an unmatched resource (the costliest 1,000
-- unmatched by name; the rest summed in one row with resource_id NULL).
CREATE TABLE cost_import_resources (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    row_no          integer     NOT NULL CHECK (row_no >= 1),
    resource_id     text        CHECK (length(resource_id) <= 1024),
    resource_key    text        CHECK (length(resource_key) <= 1100),
    service_name    text        NOT NULL DEFAULT '' CHECK (length(service_name) <= 400),
    lines           bigint      NOT NULL CHECK (lines >= 1),
    effective_cost  numeric     NOT NULL,
    billed_cost     numeric     NOT NULL,
    -- The node it matched (cluster ID and node name); NULL when nothing claims it.
    cluster_id      uuid,
    node            text,
    PRIMARY KEY (org_id, period, row_no),
    FOREIGN KEY (org_id, period) REFERENCES cost_imports (org_id, period) ON DELETE CASCADE,
    CHECK ((cluster_id IS NULL) = (node IS NULL))
);

SELECT gpuledger_isolate(t) FROM unnest(ARRAY['cost_imports', 'cost_import_resources']::regclass[]) t;
GRANT SELECT, INSERT, DELETE ON cost_imports, cost_import_resources TO gpuledger_app;

RESET ROLE;
