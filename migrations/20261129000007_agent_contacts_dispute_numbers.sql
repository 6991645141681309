-- Agents' last contact (for the admin page) and organization-level dispute numbers.
--
-- Each agent's last contact (cluster agents and node agents): when, which version, how many
-- facts, and how far behind (now minus the newest observation in the batch). Upserted with each batch.

SET LOCAL ROLE gpuledger_owner;

CREATE TABLE agent_contacts (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    mode            text        NOT NULL CHECK (mode IN ('cluster', 'node')),
    -- The node of a node agent; '' for the cluster agent.
    node            text        NOT NULL DEFAULT '',
    version         text        NOT NULL,
    first_seen_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at    timestamptz NOT NULL DEFAULT now(),
    last_batch_facts integer    NOT NULL DEFAULT 0,
    lag_seconds     bigint,
    PRIMARY KEY (org_id, cluster_id, mode, node),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id)
);

SELECT gpuledger_isolate('agent_contacts');
GRANT SELECT, INSERT, UPDATE ON agent_contacts TO gpuledger_app;

-- Dispute numbers per organization. A department manager's transaction sees only their departments' disputes, so
-- "max(number) + 1" over `disputes` would collide with another department's: the counter is organization-level.
CREATE TABLE dispute_numbers (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    last_number     integer     NOT NULL CHECK (last_number >= 0),
    PRIMARY KEY (org_id)
);
SELECT gpuledger_isolate('dispute_numbers');
GRANT SELECT, INSERT, UPDATE ON dispute_numbers TO gpuledger_app;

RESET ROLE;

-- Existing disputes: the counters start at each organization's highest number (as the migrating login, which
-- sees every organization).
INSERT INTO dispute_numbers (org_id, last_number)
SELECT org_id, max(number) FROM disputes GROUP BY org_id
ON CONFLICT (org_id) DO NOTHING;
