-- Distributes GPU Ledger's schema on Citus: every tenant table by org_id, all colocated, so that one organization's
-- rows of every table live on the same worker and each organization-scoped transaction can be routed to one shard
-- group. `organizations` is the one reference table (copied to every node). See docs/scaling.md.
--
-- When: on the coordinator, after `gpuledger-server migrate` has created the schema (on the coordinator, with the
-- citus extension created in the database) and before the server takes traffic; and again after every upgrade's
-- `migrate` (it skips what is distributed and distributes the tables new migrations created). Run it as a superuser (or the
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

-- ---------------------------------------------------------------- run again after an upgrade
-- This file may run again after `gpuledger-server migrate` added tables (docs/scaling.md, "Upgrading a distributed
-- database"): tables already distributed (or the reference table) are skipped; tables a migration created since —
-- local tables, or "Citus local tables" when they reference `organizations` — are distributed now.
SET LOCAL citus.enable_ddl_propagation = off;  -- session-local helpers: nothing to propagate
CREATE FUNCTION pg_temp.is_citus_table(t regclass) RETURNS boolean LANGUAGE plpgsql AS $f$
DECLARE
    found boolean := false;
BEGIN
    -- Real Citus only; the CI stand-ins have no pg_dist_partition and start from a schema with nothing distributed.
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1
                                   AND (partmethod = ''h'' OR repmodel = ''t''))' INTO found USING t;
    END IF;
    RETURN found;
END
$f$;
CREATE FUNCTION pg_temp.distribute(t regclass, colocate_with text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
    name text := t::text;  -- Citus may recreate the table (a new OID) while distributing it
BEGIN
    IF pg_temp.is_citus_table(t) THEN
        RETURN name || ': already distributed';
    END IF;
    PERFORM create_distributed_table(t, 'org_id', colocate_with => colocate_with);
    RETURN name || ': distributed';
END
$f$;
CREATE FUNCTION pg_temp.reference(t regclass) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
    IF pg_temp.is_citus_table(t) THEN
        RETURN t::text || ': already a reference table';
    END IF;
    PERFORM create_reference_table(t);
    RETURN t::text || ': reference table';
END
$f$;
SET LOCAL citus.enable_ddl_propagation = on;

-- ---------------------------------------------------------------- foreign keys out of the way
-- Citus refuses a foreign key from a local table (or a "Citus local table": a local table that references a
-- reference table, which is what every tenant table becomes once `organizations` is one) to a distributed table, at
-- every moment. So the keys between tenant tables whose referenced table is not distributed yet (all of them, the
-- first time; after an upgrade, those of the new tables) are dropped here and added back, unchanged, once every
-- table is distributed (Citus checks each re-added key: colocated, distribution columns paired — and so do the CI
-- stand-ins, scripts/ops/assert-distributed.sql). Keys to `organizations` stay: distributed → reference is allowed.
-- Names, not OIDs: Citus recreates a Citus local table that loses its last key to a reference table.
CREATE TEMP TABLE gpuledger_foreign_keys ON COMMIT DROP AS
SELECT c.oid AS con, format('%I', r.relname) AS rel, c.conname, pg_get_constraintdef(c.oid) AS def
  FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
 WHERE c.contype = 'f' AND c.conparentid = 0 AND c.connamespace = 'public'::regnamespace
   AND c.confrelid <> 'organizations'::regclass AND NOT pg_temp.is_citus_table(c.confrelid);
SELECT format('ALTER TABLE %s DROP CONSTRAINT %I', rel, conname) FROM gpuledger_foreign_keys ORDER BY con \gexec

-- ---------------------------------------------------------------- reference table
-- The tenancy root: small, read everywhere, and looked up by slug across organizations (gpuledger_org_id_by_slug),
-- which a table distributed by org_id could not answer from one shard; its unique slug index does not include
-- org_id, which a distributed table would not allow. Every tenant table's foreign key to it is distributed →
-- reference, which Citus allows.
SELECT pg_temp.reference('organizations');

-- ---------------------------------------------------------------- distributed by org_id, one colocation group
-- Referenced tables come before the tables that reference them (Citus checks each foreign key when the referencing
-- table is distributed). All foreign keys between these tables start with org_id on both sides.

-- migration 2: business, orchestration, inventory, allocation evidence, people, tokens, audit
SELECT pg_temp.distribute('departments', 'none');
SELECT pg_temp.distribute('tenants', 'departments');
SELECT pg_temp.distribute('clusters', 'departments');
SELECT pg_temp.distribute('namespaces', 'departments');
SELECT pg_temp.distribute('namespace_ownership', 'departments');
SELECT pg_temp.distribute('gpu_classes', 'departments');
SELECT pg_temp.distribute('gpu_models', 'departments');
SELECT pg_temp.distribute('mig_profiles', 'departments');
SELECT pg_temp.distribute('vgpu_profiles', 'departments');
SELECT pg_temp.distribute('timeslice_policies', 'departments');
SELECT pg_temp.distribute('allocation_events', 'departments');
SELECT pg_temp.distribute('allocation_intervals', 'departments');
SELECT pg_temp.distribute('users', 'departments');
SELECT pg_temp.distribute('user_roles', 'departments');
SELECT pg_temp.distribute('api_tokens', 'departments');
SELECT pg_temp.distribute('audit_log', 'departments');

-- migration 3: ingest. telemetry_rollups is partitioned by month: distributing the parent distributes every
-- partition, and partitions created later (gpuledger_ensure_telemetry_partition) are distributed with it.
SELECT pg_temp.distribute('devices', 'departments');
SELECT pg_temp.distribute('nodes', 'departments');
SELECT pg_temp.distribute('telemetry_rollups', 'departments');
SELECT pg_temp.distribute('data_quality_findings', 'departments');

-- migration 4: the ledger
SELECT pg_temp.distribute('cost_policies', 'departments');
SELECT pg_temp.distribute('quotas', 'departments');
SELECT pg_temp.distribute('periods', 'departments');
SELECT pg_temp.distribute('ledger_lines', 'departments');
SELECT pg_temp.distribute('adjustments', 'departments');
SELECT pg_temp.distribute('disputes', 'departments');
SELECT pg_temp.distribute('dispute_events', 'departments');

-- migration 5: service usage
SELECT pg_temp.distribute('service_usage', 'departments');

-- migration 6: identity
SELECT pg_temp.distribute('idp_settings', 'departments');
SELECT pg_temp.distribute('role_mappings', 'departments');
SELECT pg_temp.distribute('sessions', 'departments');
SELECT pg_temp.distribute('oidc_logins', 'departments');

-- migration 7: agents' last contact, dispute numbers
SELECT pg_temp.distribute('agent_contacts', 'departments');
SELECT pg_temp.distribute('dispute_numbers', 'departments');

-- migration 9: usage records and endpoint aliases
SELECT pg_temp.distribute('usage_records', 'departments');
SELECT pg_temp.distribute('endpoint_aliases', 'departments');

-- migration 10: training progress
SELECT pg_temp.distribute('training_progress', 'departments');

-- migration 11: model servers' own totals
SELECT pg_temp.distribute('endpoint_totals', 'departments');

-- migration 14: the read model
SELECT pg_temp.distribute('read_months', 'departments');
SELECT pg_temp.distribute('read_lines', 'departments');
SELECT pg_temp.distribute('read_dirty', 'departments');
SELECT pg_temp.distribute('read_answers', 'departments');

-- migration 15: the read model's summaries
SELECT pg_temp.distribute('read_summaries', 'departments');
SELECT pg_temp.distribute('read_summary_rows', 'departments');
SELECT pg_temp.distribute('read_totals', 'departments');

-- migration 16: organizations' settings, setup links, exports and daily ingest counts. The operator's own tables
-- (operator_log, retired_slugs: no org_id, reached only through the operator's SECURITY DEFINER functions) stay
-- local tables of the coordinator, where the CLI's operator commands run.
SELECT pg_temp.distribute('org_settings', 'departments');
SELECT pg_temp.distribute('setup_links', 'departments');
SELECT pg_temp.distribute('org_exports', 'departments');
SELECT pg_temp.distribute('ingest_daily', 'departments');

-- migration 17: renames
SELECT pg_temp.distribute('renames', 'departments');

-- migration 18: rules for namespaces without labels
SELECT pg_temp.distribute('namespace_rules', 'departments');

-- migration 19: share bases for soft-shared GPUs
SELECT pg_temp.distribute('share_bases', 'departments');
SELECT pg_temp.distribute('close_acknowledgements', 'departments');

-- migration 20: per-process GPU utilization
SELECT pg_temp.distribute('process_windows', 'departments');

-- migration 22: budgets and webhooks
SELECT pg_temp.distribute('budgets', 'departments');
SELECT pg_temp.distribute('webhooks', 'departments');
SELECT pg_temp.distribute('webhook_deliveries', 'departments');

-- migration 26: telemetry in tiers (both tiers partitioned by month, like telemetry_rollups)
SELECT pg_temp.distribute('telemetry_series', 'departments');
SELECT pg_temp.distribute('telemetry_hours', 'departments');
SELECT pg_temp.distribute('telemetry_windows', 'departments');

-- migration 27: the evidence index of closed months
SELECT pg_temp.distribute('evidence_months', 'departments');
SELECT pg_temp.distribute('evidence_allocations', 'departments');

-- migration 31: one row per GPU-hour (partitioned by month)
SELECT pg_temp.distribute('telemetry_gpu_hours', 'departments');

-- migration 32: why an organization's open months could not be refreshed
SELECT pg_temp.distribute('read_failures', 'departments');

-- migration 34: the cloud bill's imports
SELECT pg_temp.distribute('cost_imports', 'departments');
SELECT pg_temp.distribute('cost_import_resources', 'departments');
SELECT pg_temp.distribute('fault_credit_decisions', 'departments');

-- migration 39: telemetry coverage per GPU and day
SELECT pg_temp.distribute('telemetry_coverage_days', 'departments');

-- migration 40: the evidence index's orders as chunks of a permutation
SELECT pg_temp.distribute('evidence_orders', 'departments');

-- migration 41: closed months' bundles in chunks
SELECT pg_temp.distribute('period_bundle_chunks', 'departments');

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

-- ---------------------------------------------------------------- restrictive policies, on the shards too
-- Citus 13.2 re-creates row-level security policies WITHOUT `AS RESTRICTIVE` wherever it writes them itself —
-- CreatePolicyCommandForPolicy (commands/policy.c) never reads the policy's `permissive` flag: on every shard, on
-- every worker's copy of the table, and on the coordinator's own table when distributing re-creates it (the tables
-- that reference `organizations` became Citus local tables above and are rebuilt). Our `dept_scope` policies — the
-- only restrictive ones (server/tests/catalog.rs) — are ANDed with `org_isolation`; made permissive they are ORed
-- with it, so a row is visible when its organization matches OR its department is in scope: under the scope 'all',
-- every organization's rows; within an organization, every department's rows whatever the scope. Found by the Citus
-- job of scripts/test (server/tests/isolation.rs on a real cluster). So every `dept_scope` (and any restrictive)
-- policy of a distributed table is re-created AS RESTRICTIVE on the coordinator's table, on each shard and on each
-- worker's copy, after the COMMIT above (run_command_on_shards works over connections of its own, which see
-- committed shards only). Shards Citus creates later copy it wrong again: run this file again after every shard
-- move, rebalance or node added (docs/scaling.md). scripts/citus-test checks that every copy is restrictive.
BEGIN;
SET LOCAL citus.enable_ddl_propagation = off;  -- a helper here; the coordinator's tables are repaired without propagating
CREATE FUNCTION pg_temp.restrict_dept_scope() RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
    p record;
    r record;
    policy text;
    policies integer := 0;
    coordinator integer := 0;
    shards integer := 0;
    workers integer := 0;
BEGIN
    -- Real Citus only (the CI stand-ins distribute nothing).
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN 'restrictive policies: not a Citus coordinator, nothing to do';
    END IF;
    FOR p IN
        SELECT pol.polrelid::regclass AS rel, pol.polname, pol.polpermissive,
               CASE pol.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE'
                               WHEN 'd' THEN 'DELETE' ELSE 'ALL' END AS cmd,
               CASE WHEN pol.polroles = '{0}' THEN 'PUBLIC'
                    ELSE (SELECT string_agg(quote_ident(rolname), ', ') FROM pg_roles WHERE oid = ANY (pol.polroles)) END AS roles,
               coalesce(' USING (' || pg_get_expr(pol.polqual, pol.polrelid) || ')', '') ||
               coalesce(' WITH CHECK (' || pg_get_expr(pol.polwithcheck, pol.polrelid) || ')', '') AS exprs
          FROM pg_policy pol JOIN pg_dist_partition d ON d.logicalrelid = pol.polrelid
         WHERE pol.polname = 'dept_scope' OR NOT pol.polpermissive
         ORDER BY 1, 2
    LOOP
        policies := policies + 1;
        policy := format('DROP POLICY IF EXISTS %I ON @T@; CREATE POLICY %I ON @T@ AS RESTRICTIVE FOR %s TO %s',
                         p.polname, p.polname, p.cmd, p.roles) || p.exprs;
        IF p.polpermissive THEN
            EXECUTE replace(policy, '@T@', p.rel::text);
            coordinator := coordinator + 1;
        END IF;
        -- %1$s: the shard's name (run_command_on_shards formats the command with it).
        FOR r IN EXECUTE 'SELECT * FROM run_command_on_shards($1, $2)'
                 USING p.rel, replace(replace(policy, '%', '%%'), '@T@', '%1$s')
        LOOP
            IF NOT r.success THEN
                RAISE EXCEPTION 'policy % of % on shard %: %', p.polname, p.rel, r.shardid, r.result;
            END IF;
            shards := shards + 1;
        END LOOP;
        FOR r IN EXECUTE 'SELECT * FROM run_command_on_workers($1)'
                 USING 'SET citus.enable_ddl_propagation TO off; ' || replace(policy, '@T@', p.rel::text)
        LOOP
            IF NOT r.success THEN
                RAISE EXCEPTION 'policy % of % on worker %:%: %', p.polname, p.rel, r.nodename, r.nodeport, r.result;
            END IF;
            workers := workers + 1;
        END LOOP;
    END LOOP;
    RETURN format('restrictive policies: %s re-created AS RESTRICTIVE on %s shards and %s workers'' copies (%s on '
                  'the coordinator had lost it)', policies, shards, workers, coordinator);
END
$f$;
SELECT pg_temp.restrict_dept_scope();
COMMIT;
