-- Usage records from gateways and model servers (issue 8): per request or pre-aggregated per minute, idempotent by
-- record ID, with the tenant as sent or mapped from a gateway key / team alias configured for the endpoint. A
-- record whose tenant cannot be resolved is kept (tenant_id NULL) and reported, never dropped.

SET LOCAL ROLE gpuledger_owner;

CREATE TABLE usage_records (
    org_id           uuid        NOT NULL,
    record_id        text        NOT NULL CHECK (length(record_id) BETWEEN 1 AND 200),
    cluster_id       uuid        NOT NULL,
    endpoint         text        NOT NULL CHECK (length(endpoint) BETWEEN 1 AND 200),
    model            text        NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    model_version    text        CHECK (length(model_version) <= 200),
    -- What identified the caller: the tenant name, or a gateway key / team alias (kept as sent, for disputes).
    tenant_name      text        CHECK (length(tenant_name) <= 200),
    gateway_key      text        CHECK (length(gateway_key) <= 200),
    team             text        CHECK (length(team) <= 200),
    -- The tenant it resolved to when received; NULL = unknown (reported).
    tenant_id        uuid,
    started_at       timestamptz NOT NULL,
    -- Set for a pre-aggregated record (a minute's totals); NULL for one request.
    window_end       timestamptz,
    requests         bigint      NOT NULL CHECK (requests >= 1),
    input_tokens     bigint      NOT NULL CHECK (input_tokens >= 0),
    output_tokens    bigint      NOT NULL CHECK (output_tokens >= 0),
    status           text        NOT NULL CHECK (status IN ('ok', 'error', 'cancelled')),
    latency_ms       bigint      CHECK (latency_ms >= 0),
    ttft_ms          bigint      CHECK (ttft_ms >= 0),
    trace_id         text        CHECK (length(trace_id) <= 200),
    agent_session_id text        CHECK (length(agent_session_id) <= 200),
    received_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, record_id),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    FOREIGN KEY (org_id, tenant_id) REFERENCES tenants (org_id, tenant_id),
    CHECK (window_end IS NULL OR window_end > started_at),
    CHECK (tenant_name IS NOT NULL OR gateway_key IS NOT NULL OR team IS NOT NULL)
);
CREATE INDEX usage_records_by_time ON usage_records (org_id, started_at);
CREATE INDEX usage_records_by_session ON usage_records (org_id, agent_session_id) WHERE agent_session_id IS NOT NULL;
SELECT gpuledger_isolate('usage_records');
-- A department's people see their tenants' records (unresolved ones only with the whole organization in view).
SELECT gpuledger_dept_scope('usage_records',
    '(SELECT t.department_id FROM tenants t WHERE t.org_id = usage_records.org_id AND t.tenant_id = usage_records.tenant_id)');
GRANT SELECT, INSERT ON usage_records TO gpuledger_app;
-- A tenant defined (or an alias configured) later takes over the records that named it.
GRANT UPDATE (tenant_id) ON usage_records TO gpuledger_app;

-- Per endpoint: which gateway key or team alias means which tenant.
CREATE TABLE endpoint_aliases (
    org_id      uuid NOT NULL,
    endpoint    text NOT NULL CHECK (length(endpoint) BETWEEN 1 AND 200),
    kind        text NOT NULL CHECK (kind IN ('gateway_key', 'team')),
    alias       text NOT NULL CHECK (length(alias) BETWEEN 1 AND 200),
    tenant_id   uuid NOT NULL,
    PRIMARY KEY (org_id, endpoint, kind, alias),
    FOREIGN KEY (org_id, tenant_id) REFERENCES tenants (org_id, tenant_id)
);
SELECT gpuledger_isolate('endpoint_aliases');
GRANT SELECT, INSERT, UPDATE, DELETE ON endpoint_aliases TO gpuledger_app;

RESET ROLE;
