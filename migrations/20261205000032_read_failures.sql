-- A stored value can never poison a background job (issue 33 item 3). When the read model's worker cannot compute
-- an organization's open months from its data as it stands (e.g. a figure the decimal arithmetic cannot hold), it
-- records why here — one row per organization, an admin sees it with the figures (`GET /api/v1/ledger`
-- `refresh_failure`, the showback page) — keeps serving the last good snapshot marked stale, and does not try again
-- until something changes (`read_dirty`). A refresh that succeeds deletes the row.
SET LOCAL ROLE gpuledger_owner;

CREATE TABLE read_failures (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    -- The first failure of this run of failures, and the latest.
    first_failed_at timestamptz NOT NULL,
    failed_at       timestamptz NOT NULL,
    attempts        integer     NOT NULL CHECK (attempts >= 1),
    -- The month being computed, the input named by the error (a field or path), and the reason, as the error said.
    period          date        CHECK (extract(day FROM period) = 1),
    field           text        NOT NULL CHECK (length(field) <= 200),
    reason          text        NOT NULL CHECK (length(reason) <= 2000),
    PRIMARY KEY (org_id)
);

SELECT gpuledger_isolate('read_failures'::regclass);
GRANT SELECT, INSERT, UPDATE, DELETE ON read_failures TO gpuledger_app;

RESET ROLE;
