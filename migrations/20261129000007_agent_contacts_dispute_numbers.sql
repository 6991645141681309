-- Each agent's last contact (cluster agents and node agents), for the admin page: when, which version, how many
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

RESET ROLE;
