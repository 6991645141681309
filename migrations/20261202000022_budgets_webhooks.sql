-- Finance sees ahead (issue 21): budgets per department or tenant and month, webhooks with their delivery log, and
-- the policy's idle-reservation setting is in the policy document itself (no table).

SET LOCAL ROLE gpuledger_owner;

-- A budget for one department or one tenant in one month. Setting it again appends a row; the latest counts (the
-- history stays, and each change is audited).
CREATE TABLE budgets (
    org_id          uuid          NOT NULL REFERENCES organizations (org_id),
    budget_id       uuid          NOT NULL DEFAULT gen_random_uuid(),
    period          date          NOT NULL CHECK (extract(day FROM period) = 1),
    department_id   uuid,
    tenant_id       uuid,
    amount          numeric(20,2) NOT NULL CHECK (amount >= 0),
    created_by      text          NOT NULL,
    created_at      timestamptz   NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (org_id, budget_id),
    FOREIGN KEY (org_id, department_id) REFERENCES departments (org_id, department_id),
    FOREIGN KEY (org_id, tenant_id) REFERENCES tenants (org_id, tenant_id),
    CHECK ((department_id IS NULL) <> (tenant_id IS NULL))
);
CREATE INDEX budgets_by_period ON budgets (org_id, period, created_at);
SELECT gpuledger_isolate('budgets'::regclass);
GRANT SELECT, INSERT ON budgets TO gpuledger_app;

-- Where events go. The secret signs every body (HMAC-SHA256); it is shown once, when the webhook is made.
CREATE TABLE webhooks (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    webhook_id      uuid        NOT NULL DEFAULT gen_random_uuid(),
    url             text        NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    events          text[]      NOT NULL CHECK (cardinality(events) BETWEEN 1 AND 10),
    format          text        NOT NULL DEFAULT 'json' CHECK (format IN ('json', 'slack')),
    secret          text        NOT NULL CHECK (length(secret) BETWEEN 32 AND 200),
    created_by      text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    disabled_at     timestamptz,
    PRIMARY KEY (org_id, webhook_id)
);
SELECT gpuledger_isolate('webhooks'::regclass);
GRANT SELECT, INSERT, UPDATE ON webhooks TO gpuledger_app;

-- One event for one webhook, until delivered or given up; `dedupe_key` makes each condition notify once
-- (`budget.forecast_exceeded` once per budget and month, `idle.reservation` once per allocation and idle stretch).
CREATE TABLE webhook_deliveries (
    org_id          uuid        NOT NULL,
    delivery_id     uuid        NOT NULL DEFAULT gen_random_uuid(),
    webhook_id      uuid        NOT NULL,
    event           text        NOT NULL,
    dedupe_key      text        NOT NULL CHECK (length(dedupe_key) <= 500),
    payload         jsonb       NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_status     integer,
    last_error      text        CHECK (length(last_error) <= 1000),
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    PRIMARY KEY (org_id, delivery_id),
    UNIQUE (org_id, webhook_id, dedupe_key),
    FOREIGN KEY (org_id, webhook_id) REFERENCES webhooks (org_id, webhook_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (org_id, webhook_id, created_at DESC);
SELECT gpuledger_isolate('webhook_deliveries'::regclass);
GRANT SELECT, INSERT, UPDATE ON webhook_deliveries TO gpuledger_app;

-- The notifier's cross-organization question: which organizations have webhooks (to watch their conditions) or
-- deliveries due. Organization IDs only; everything else runs in each organization's own transaction.
CREATE POLICY notifier ON webhooks FOR SELECT TO gpuledger_owner USING (true);
CREATE FUNCTION gpuledger_notify_due()
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT DISTINCT org_id FROM webhooks WHERE disabled_at IS NULL
$$;
REVOKE ALL ON FUNCTION gpuledger_notify_due() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_notify_due() TO gpuledger_app;

RESET ROLE;
