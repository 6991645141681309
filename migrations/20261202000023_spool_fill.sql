-- How full each agent's spool is (issue 23): reported with every batch, shown on the admin page (a warning at 80 %)
-- and as gpuledger_agent_spool_fill_ratio on /metrics. NULL from agents that do not report it.
SET LOCAL ROLE gpuledger_owner;
ALTER TABLE agent_contacts
    ADD COLUMN spool_disk_bytes bigint CHECK (spool_disk_bytes >= 0),
    ADD COLUMN spool_max_bytes bigint CHECK (spool_max_bytes > 0);
RESET ROLE;
