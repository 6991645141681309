-- CI only (gl_ops_checks), after scripts/ops/citus-stubs.sql and deploy/citus/distribute.sql: every table of the
-- public schema that holds an organization's rows (an org_id column) or has row-level security enabled must have been
-- distributed or made a reference table. Partitions are covered by their parent. psql variable :known_blockers is
-- the comma-separated list of tables Citus would still refuse (see distribute.sql), which must match exactly.
\set ON_ERROR_STOP on
DO $$
DECLARE
    missing text;
    listed text[] := array_remove(string_to_array(current_setting('gpuledger_ci.citus_known_blockers', true), ','), '');
    found_blockers text[];
BEGIN
    SELECT string_agg(c.relname, ', ' ORDER BY c.relname) INTO missing
      FROM pg_class c
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
       AND (c.relrowsecurity
            OR EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id' AND NOT a.attisdropped))
       AND NOT EXISTS (SELECT 1 FROM citus_stub.tables t WHERE t.rel = c.oid);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'deploy/citus/distribute.sql does not distribute these tenant tables (org_id column or RLS): %', missing
            USING HINT = 'add create_distributed_table(''<table>'', ''org_id'', colocate_with => ''departments'') after the tables it references';
    END IF;
    -- Foreign keys added after the tables were distributed (distribute.sql drops every key first and adds it back
    -- at the end) follow the same rules as those present at distribution time.
    PERFORM citus_stub.check_foreign_keys(t.rel, t.method, t.dist_column, t.colocation) FROM citus_stub.tables t;
    SELECT coalesce(array_agg(DISTINCT rel::text ORDER BY rel::text), '{}') INTO found_blockers FROM citus_stub.blockers;
    IF found_blockers IS DISTINCT FROM (SELECT coalesce(array_agg(x ORDER BY x), '{}') FROM unnest(listed) x) THEN
        RAISE EXCEPTION 'known Citus blockers changed: listed {%}, found {%}', array_to_string(listed, ','),
            array_to_string(found_blockers, ',')
            USING HINT = 'a fixed blocker: remove it from GL_CITUS_KNOWN_BLOCKERS in scripts/lib.sh and docs/scaling.md';
    END IF;
END
$$;
SELECT format('%s distributed (org_id, colocated), %s reference (%s); known blockers: %s',
              count(*) FILTER (WHERE method = 'hash'), count(*) FILTER (WHERE method = 'reference'),
              string_agg(rel::text, ', ') FILTER (WHERE method = 'reference'),
              coalesce((SELECT string_agg(DISTINCT rel::text, ', ') FROM citus_stub.blockers), 'none'))
  FROM citus_stub.tables;
