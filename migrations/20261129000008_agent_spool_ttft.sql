-- Each agent's spool backlog (reported with every batch) for the admin page, and time to first token of shared
-- endpoints' requests (for inference efficiency on the showback page). Both optional: older agents send neither.

SET LOCAL ROLE gpuledger_owner;

ALTER TABLE agent_contacts
    ADD COLUMN spool_pending_facts bigint CHECK (spool_pending_facts >= 0),
    ADD COLUMN spool_pending_bytes bigint CHECK (spool_pending_bytes >= 0),
    ADD COLUMN spool_dropped_facts bigint CHECK (spool_dropped_facts >= 0);

-- Milliseconds summed over `ttft_count` requests of the window (both or neither).
ALTER TABLE service_usage
    ADD COLUMN ttft_ms_sum bigint CHECK (ttft_ms_sum >= 0),
    ADD COLUMN ttft_count  bigint CHECK (ttft_count >= 0),
    ADD CONSTRAINT service_usage_ttft_pair CHECK ((ttft_ms_sum IS NULL) = (ttft_count IS NULL));

-- A tenant defined after its usage arrived takes over the rows kept under its name (tenant_id only).
GRANT UPDATE (tenant_id) ON service_usage TO gpuledger_app;

RESET ROLE;
