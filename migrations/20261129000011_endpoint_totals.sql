-- What shared endpoints' model servers counted themselves (the agent's scrapes: `endpoint_totals` facts), per pod,
-- model and window, all tenants together. The ledger reconciles them with the tenants' usage: the remainder is
-- reported as unattributed and its share of the endpoint's cost goes to the overhead pool. Idempotent by its key.

SET LOCAL ROLE gpuledger_owner;

CREATE TABLE endpoint_totals (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    endpoint        text        NOT NULL CHECK (length(endpoint) BETWEEN 1 AND 200),
    model           text        NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    server          text        NOT NULL CHECK (server IN ('vllm', 'triton', 'tgi', 'nim')),
    pod             text        NOT NULL CHECK (length(pod) BETWEEN 1 AND 507),
    window_start    timestamptz NOT NULL,
    window_end      timestamptz NOT NULL,
    requests        bigint      NOT NULL CHECK (requests >= 0),
    input_tokens    bigint      NOT NULL CHECK (input_tokens >= 0),
    output_tokens   bigint      NOT NULL CHECK (output_tokens >= 0),
    ttft_ms_sum     bigint      CHECK (ttft_ms_sum >= 0),
    ttft_count      bigint      CHECK (ttft_count >= 0),
    queue_depth     double precision CHECK (queue_depth >= 0),
    restarted       boolean     NOT NULL DEFAULT false,
    received_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, cluster_id, endpoint, model, pod, window_start),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (window_end > window_start),
    CHECK ((ttft_ms_sum IS NULL) = (ttft_count IS NULL))
);
CREATE INDEX endpoint_totals_by_time ON endpoint_totals (org_id, window_start);

SELECT gpuledger_isolate('endpoint_totals');

GRANT SELECT, INSERT ON endpoint_totals TO gpuledger_app;

RESET ROLE;
