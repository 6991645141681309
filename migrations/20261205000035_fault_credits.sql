-- Credits when the hardware failed (issue 35 item 4). The faults themselves are facts (`allocation_events`, kind
-- `device_fault`, append-only evidence like every fact); the credits they earn are computed from the facts and the
-- allocations on the faulted GPUs (server/src/faults). What is stored here is finance's decision on each
-- (fault, allocation): made once, with who, why and what was credited; an approved one points at the adjustment
-- the next close applies.
SET LOCAL ROLE gpuledger_owner;

CREATE TABLE fault_credit_decisions (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    fault_event_id  text        NOT NULL CHECK (length(fault_event_id) BETWEEN 1 AND 300),
    allocation_key  text        NOT NULL CHECK (length(allocation_key) BETWEEN 1 AND 700),
    decision        text        NOT NULL CHECK (decision IN ('approved', 'rejected')),
    decided_by      text        NOT NULL CHECK (length(decided_by) <= 400),
    decided_at      timestamptz NOT NULL DEFAULT now(),
    reason          text        NOT NULL DEFAULT '' CHECK (length(reason) <= 2000),
    gpu_hours       numeric     NOT NULL CHECK (gpu_hours >= 0),
    amount          numeric(20, 2) NOT NULL CHECK (amount >= 0),
    adjustment_id   uuid,
    PRIMARY KEY (org_id, fault_event_id, allocation_key),
    CHECK ((decision = 'approved') = (adjustment_id IS NOT NULL))
);

SELECT gpuledger_isolate('fault_credit_decisions'::regclass);
SELECT gpuledger_append_only('fault_credit_decisions'::regclass);
GRANT SELECT, INSERT ON fault_credit_decisions TO gpuledger_app;

RESET ROLE;
