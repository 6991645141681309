-- Productive work of shared model-serving endpoints, per tenant and window (the `service_usage` fact): what
-- splits a shared endpoint's cost between its tenants. Counter deltas, never rates. Idempotent by its key.

SET LOCAL ROLE gpuledger_owner;

CREATE TABLE service_usage (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    endpoint        text        NOT NULL CHECK (length(endpoint) BETWEEN 1 AND 200),
    model           text        NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    -- The tenant as the fact names it; kept even when no such tenant is defined.
    tenant_name     text        NOT NULL CHECK (length(tenant_name) BETWEEN 1 AND 200),
    -- The defined tenant of that name when the row was received; NULL (and a data-quality finding) otherwise.
    tenant_id       uuid,
    window_start    timestamptz NOT NULL,
    window_end      timestamptz NOT NULL,
    requests        bigint      NOT NULL CHECK (requests >= 0),
    input_tokens    bigint      NOT NULL CHECK (input_tokens >= 0),
    output_tokens   bigint      NOT NULL CHECK (output_tokens >= 0),
    received_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, cluster_id, endpoint, model, tenant_name, window_start),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    FOREIGN KEY (org_id, tenant_id) REFERENCES tenants (org_id, tenant_id),
    CHECK (window_end > window_start)
);
CREATE INDEX service_usage_by_time ON service_usage (org_id, window_start);

SELECT gpuledger_isolate('service_usage');

GRANT SELECT, INSERT ON service_usage TO gpuledger_app;

RESET ROLE;
