-- Department scope without subqueries (Citus refuses subqueries in row-level security policies on distributed
-- tables, docs/scaling.md): dispute events, quotas and usage records carry the department they are seen under,
-- written with the row, and their `dept_scope` policy reads that column like every other department-scoped table.
-- Semantics unchanged: the department of the dispute, of the quota's holder (its department, or its tenant's), of
-- the record's tenant (none while the record has no tenant).

SET LOCAL ROLE gpuledger_owner;

-- Dispute events: the dispute's department. The table is append-only: its guard is suspended for the backfill.
ALTER TABLE dispute_events ADD COLUMN department_id uuid;
ALTER TABLE dispute_events DISABLE TRIGGER append_only;
UPDATE dispute_events e SET department_id = d.department_id
  FROM disputes d WHERE d.org_id = e.org_id AND d.dispute_id = e.dispute_id;
ALTER TABLE dispute_events ENABLE TRIGGER append_only;
DROP POLICY dept_scope ON dispute_events;
SELECT gpuledger_dept_scope('dispute_events', 'department_id');

-- Quotas: the holder's department (`department_id` stays the holder when a department holds the quota).
ALTER TABLE quotas ADD COLUMN scope_department_id uuid;
UPDATE quotas q SET scope_department_id = COALESCE(q.department_id,
    (SELECT t.department_id FROM tenants t WHERE t.org_id = q.org_id AND t.tenant_id = q.tenant_id));
DROP POLICY dept_scope ON quotas;
SELECT gpuledger_dept_scope('quotas', 'scope_department_id');

-- Usage records: the tenant's department, set whenever the tenant is (attribution later by alias or tenant).
ALTER TABLE usage_records ADD COLUMN department_id uuid;
UPDATE usage_records r SET department_id = t.department_id
  FROM tenants t WHERE t.org_id = r.org_id AND t.tenant_id = r.tenant_id;
DROP POLICY dept_scope ON usage_records;
SELECT gpuledger_dept_scope('usage_records', 'department_id');
GRANT UPDATE (department_id) ON usage_records TO gpuledger_app;

RESET ROLE;
