-- Distributes GPU Ledger's schema on Citus: every tenant table by org_id, all colocated, so that one organization's
-- rows of every table live on the same worker and each organization-scoped transaction can be routed to one shard
-- group. `organizations` is the one reference table (copied to every node). See docs/scaling.md.
--
-- When: once, on the coordinator, after `gpuledger-server migrate` has created the schema (on the coordinator, with the
-- citus extension created in the database) and before the server takes traffic. Run it as a superuser (or the
-- tables' owner, gpuledger_owner):
--     psql "$OWNER_URL" -v ON_ERROR_STOP=1 -f deploy/citus/distribute.sql
-- Existing rows are copied into the shards by create_distributed_table.
--
-- Checked on every test run (scripts/lib.sh gl_ops_checks): against a freshly migrated PostgreSQL with stand-ins that
-- enforce Citus's rules, and every table with an org_id column or row-level security must appear below. A migration
-- that adds a tenant table must add it here (after the tables it references).
--
-- No table has a row-level security policy with a subquery (Citus refuses those): the department scope of dispute
-- events, quotas and usage records reads a column written with the row (migration 12). gl_ops_checks keeps it so.
--
-- Cluster settings this layout needs (coordinator and workers; docs/scaling.md):
--   citus.propagate_set_commands = 'local'  -- SET LOCAL app.org_id (the server's Database::begin_with) must reach
--                                           -- the workers
--   citus.enable_unsafe_triggers = on        -- the append-only / policy / period guard triggers run on the shards

\set ON_ERROR_STOP on
BEGIN;

-- Shards per distributed table: fixed at distribution time (changing it later means re-sharding). 32 suits up to a
-- few workers; choose 64–128 when planning for more (docs/scaling.md).
SET LOCAL citus.shard_count = 32;
-- The guard triggers (append-only tables, cost policy and period guards) only look at OLD/NEW and raise: they are
-- safe to run on the shards.
SET LOCAL citus.enable_unsafe_triggers = on;
-- Foreign keys to reference tables and between colocated tables need one connection per worker in a transaction
-- that also creates shards: sequential mode keeps Citus from refusing the re-added keys below.
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

-- ---------------------------------------------------------------- foreign keys out of the way
-- Citus refuses a foreign key from a local table to a distributed one at every moment, and making `organizations` a
-- reference table turns every local table that references it into a "Citus local table", which then can neither be
-- distributed nor reference a distributed table. No order of the calls below avoids both, so every foreign key of
-- the schema is dropped here and added back, unchanged, once every table is a Citus table (Citus checks each
-- re-added key: colocated, distribution columns paired — and so do the CI stand-ins, scripts/ops/assert-distributed.sql).
CREATE TEMP TABLE gpuledger_foreign_keys ON COMMIT DROP AS
SELECT c.oid AS con, c.conrelid::regclass AS rel, c.conname, pg_get_constraintdef(c.oid) AS def
  FROM pg_constraint c
 WHERE c.contype = 'f' AND c.conparentid = 0 AND c.connamespace = 'public'::regnamespace;
SELECT format('ALTER TABLE %s DROP CONSTRAINT %I', rel, conname) FROM gpuledger_foreign_keys ORDER BY con \gexec

-- ---------------------------------------------------------------- reference table
-- The tenancy root: small, read everywhere, and looked up by slug across organizations (gpuledger_org_id_by_slug),
-- which a table distributed by org_id could not answer from one shard; its unique slug index does not include
-- org_id, which a distributed table would not allow. Every tenant table's foreign key to it is distributed →
-- reference, which Citus allows.
SELECT create_reference_table('organizations');

-- ---------------------------------------------------------------- distributed by org_id, one colocation group
-- Referenced tables come before the tables that reference them (Citus checks each foreign key when the referencing
-- table is distributed). All foreign keys between these tables start with org_id on both sides.

-- migration 2: business, orchestration, inventory, allocation evidence, people, tokens, audit
SELECT create_distributed_table('departments',          'org_id', colocate_with => 'none');
SELECT create_distributed_table('tenants',              'org_id', colocate_with => 'departments');
SELECT create_distributed_table('clusters',             'org_id', colocate_with => 'departments');
SELECT create_distributed_table('namespaces',           'org_id', colocate_with => 'departments');
SELECT create_distributed_table('namespace_ownership',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('gpu_classes',          'org_id', colocate_with => 'departments');
SELECT create_distributed_table('gpu_models',           'org_id', colocate_with => 'departments');
SELECT create_distributed_table('mig_profiles',         'org_id', colocate_with => 'departments');
SELECT create_distributed_table('vgpu_profiles',        'org_id', colocate_with => 'departments');
SELECT create_distributed_table('timeslice_policies',   'org_id', colocate_with => 'departments');
SELECT create_distributed_table('allocation_events',    'org_id', colocate_with => 'departments');
SELECT create_distributed_table('allocation_intervals', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('users',                'org_id', colocate_with => 'departments');
SELECT create_distributed_table('user_roles',           'org_id', colocate_with => 'departments');
SELECT create_distributed_table('api_tokens',           'org_id', colocate_with => 'departments');
SELECT create_distributed_table('audit_log',            'org_id', colocate_with => 'departments');

-- migration 3: ingest. telemetry_rollups is partitioned by month: distributing the parent distributes every
-- partition, and partitions created later (gpuledger_ensure_telemetry_partition) are distributed with it.
SELECT create_distributed_table('devices',               'org_id', colocate_with => 'departments');
SELECT create_distributed_table('nodes',                 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('telemetry_rollups',     'org_id', colocate_with => 'departments');
SELECT create_distributed_table('data_quality_findings', 'org_id', colocate_with => 'departments');

-- migration 4: the ledger
SELECT create_distributed_table('cost_policies',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('quotas',         'org_id', colocate_with => 'departments');
SELECT create_distributed_table('periods',        'org_id', colocate_with => 'departments');
SELECT create_distributed_table('ledger_lines',   'org_id', colocate_with => 'departments');
SELECT create_distributed_table('adjustments',    'org_id', colocate_with => 'departments');
SELECT create_distributed_table('disputes',       'org_id', colocate_with => 'departments');
SELECT create_distributed_table('dispute_events', 'org_id', colocate_with => 'departments');

-- migration 5: service usage
SELECT create_distributed_table('service_usage', 'org_id', colocate_with => 'departments');

-- migration 6: identity
SELECT create_distributed_table('idp_settings',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('role_mappings', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('sessions',      'org_id', colocate_with => 'departments');
SELECT create_distributed_table('oidc_logins',   'org_id', colocate_with => 'departments');

-- migration 7: agents' last contact, dispute numbers
SELECT create_distributed_table('agent_contacts',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('dispute_numbers', 'org_id', colocate_with => 'departments');

-- migration 9: usage records and endpoint aliases
SELECT create_distributed_table('usage_records',    'org_id', colocate_with => 'departments');
SELECT create_distributed_table('endpoint_aliases', 'org_id', colocate_with => 'departments');

-- migration 10: training progress
SELECT create_distributed_table('training_progress', 'org_id', colocate_with => 'departments');

-- migration 11: model servers' own totals
SELECT create_distributed_table('endpoint_totals', 'org_id', colocate_with => 'departments');

-- migration 14: the read model
SELECT create_distributed_table('read_months', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('read_lines',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('read_dirty',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('read_answers', 'org_id', colocate_with => 'departments');

-- migration 15: the read model's summaries
SELECT create_distributed_table('read_summaries', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('read_summary_rows', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('read_totals', 'org_id', colocate_with => 'departments');

-- migration 16: organizations' settings, setup links, exports and daily ingest counts. The operator's own tables
-- (operator_log, retired_slugs: no org_id, reached only through the operator's SECURITY DEFINER functions) stay
-- local tables of the coordinator, where the CLI's operator commands run.
SELECT create_distributed_table('org_settings', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('setup_links',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('org_exports',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('ingest_daily', 'org_id', colocate_with => 'departments');

-- migration 17: renames
SELECT create_distributed_table('renames', 'org_id', colocate_with => 'departments');

-- migration 18: rules for namespaces without labels
SELECT create_distributed_table('namespace_rules', 'org_id', colocate_with => 'departments');

-- migration 19: share bases for soft-shared GPUs
SELECT create_distributed_table('share_bases', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('close_acknowledgements', 'org_id', colocate_with => 'departments');

-- migration 20: per-process GPU utilization
SELECT create_distributed_table('process_windows', 'org_id', colocate_with => 'departments');

-- migration 22: budgets and webhooks
SELECT create_distributed_table('budgets', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('webhooks', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('webhook_deliveries', 'org_id', colocate_with => 'departments');

-- migration 26: telemetry in tiers (both tiers partitioned by month, like telemetry_rollups)
SELECT create_distributed_table('telemetry_series',  'org_id', colocate_with => 'departments');
SELECT create_distributed_table('telemetry_hours',   'org_id', colocate_with => 'departments');
SELECT create_distributed_table('telemetry_windows', 'org_id', colocate_with => 'departments');

-- migration 27: the evidence index of closed months
SELECT create_distributed_table('evidence_months', 'org_id', colocate_with => 'departments');
SELECT create_distributed_table('evidence_allocations', 'org_id', colocate_with => 'departments');

-- ---------------------------------------------------------------- foreign keys back, validated on the shards
SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s', rel, conname, def) FROM gpuledger_foreign_keys ORDER BY con \gexec

-- ---------------------------------------------------------------- roles the coordinator connects to workers as
-- Citus opens its connections to the workers as the role running the statement: gpuledger_app (every request),
-- gpuledger_directory (its SECURITY DEFINER functions write the reference table `organizations`) and gpuledger_owner
-- (migrations run their DDL as it, and it owns the partition functions). Each must be allowed to log in on the
-- workers; nobody else should: give them no password and let only the coordinator's address in (pg_hba.conf on the
-- workers, or certificates / pg_dist_authinfo, docs/scaling.md "Connections between nodes"). ALTER ROLE is
-- propagated to every node.
-- (Only on Citus: the CI stand-ins run this file on a plain PostgreSQL shared with the tests.)
SELECT format('ALTER ROLE %I LOGIN', r) FROM unnest(ARRAY['gpuledger_app', 'gpuledger_directory', 'gpuledger_owner']) r
 WHERE EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') \gexec

COMMIT;
