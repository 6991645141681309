-- Rules for namespaces without labels (issue 19): an exact name or a prefix → a tenant, dated like every other
-- tenancy fact. A namespace no label (and no admin reassignment) gives an owner takes the most specific rule in
-- force; what a rule gives is recorded in namespace_ownership with source 'rule', so the ledger reads one history.

SET LOCAL ROLE gpuledger_owner;

ALTER TABLE namespace_ownership DROP CONSTRAINT namespace_ownership_source_check;
ALTER TABLE namespace_ownership ADD CONSTRAINT namespace_ownership_source_check
    CHECK (source IN ('label', 'admin', 'rule'));

CREATE TABLE namespace_rules (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    rule_id         uuid        NOT NULL,
    -- NULL: every cluster of the organization.
    cluster_id      uuid,
    match           text        NOT NULL CHECK (match IN ('exact', 'prefix')),
    pattern         text        NOT NULL CHECK (length(pattern) BETWEEN 1 AND 63),
    tenant_id       uuid        NOT NULL,
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    created_by      text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, rule_id),
    FOREIGN KEY (org_id, tenant_id) REFERENCES tenants (org_id, tenant_id),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (valid_to IS NULL OR valid_to > valid_from)
);
CREATE INDEX namespace_rules_pattern ON namespace_rules (org_id, pattern);

SELECT gpuledger_isolate('namespace_rules'::regclass);
-- Rules are closed (valid_to), never deleted.
GRANT SELECT, INSERT, UPDATE ON namespace_rules TO gpuledger_app;

RESET ROLE;
