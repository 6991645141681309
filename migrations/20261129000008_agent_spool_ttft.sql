-- Each agent's spool backlog (reported with every batch) for the admin page, and time to first token of shared
-- endpoints' requests (for inference efficiency on the showback page). Both optional: older agents send neither.
-- And the devices kubelet assigned (a separate `device_assigned` fact, from the node agent) kept on the interval,
-- so readers (ledger, utilization, exports) no longer look them up per row.

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

-- When the assignment `device_ids` came from was observed; NULL when they came from the allocation fact itself (or
-- there are none yet). A later assignment replaces an earlier one, whatever order they arrive in.
ALTER TABLE allocation_intervals ADD COLUMN devices_assigned_at timestamptz;

-- A tenant defined after its usage arrived takes over the rows kept under its name (tenant_id only).
GRANT UPDATE (tenant_id) ON service_usage TO gpuledger_app;

RESET ROLE;

-- Existing intervals take their devices from the latest assignment (as the readers did per row until now).
UPDATE allocation_intervals a
   SET device_ids = d.ids, devices_assigned_at = d.at
  FROM (SELECT DISTINCT ON (i.org_id, i.cluster_id, i.allocation_id) i.org_id, i.cluster_id, i.allocation_id,
               ARRAY(SELECT jsonb_array_elements_text(e.payload->'device_ids')) AS ids, e.occurred_at AS at
          FROM allocation_intervals i
          JOIN allocation_events e
            ON e.org_id = i.org_id AND e.cluster_id = i.cluster_id AND e.kind = 'device_assigned'
           AND e.subject IN (i.holder_uid::text || '/' || i.container,
                             i.namespace || '/' || i.holder_name || '/' || i.container)
           AND e.payload->>'resource' = i.resource
         WHERE cardinality(i.device_ids) = 0
         ORDER BY i.org_id, i.cluster_id, i.allocation_id, e.occurred_at DESC) d
 WHERE a.org_id = d.org_id AND a.cluster_id = d.cluster_id AND a.allocation_id = d.allocation_id;
