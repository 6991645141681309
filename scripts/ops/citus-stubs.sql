-- CI only (scripts/lib.sh gl_ops_checks): stand-ins for Citus's create_distributed_table and create_reference_table
-- that change nothing but enforce the rules real Citus enforces when a table is distributed, so that
-- deploy/citus/distribute.sql is checked against the real schema on every test run without a Citus cluster.
-- Never load this into a database that has (or will have) the citus extension.
--
-- Rules (from Citus's create_distributed_table / create_reference_table, foreign_constraint.c and policy.c):
--   * the table is a plain or partitioned table, not a partition (partitions follow their parent), not yet a
--     Citus table; the distribution column exists;
--   * distributed: every PRIMARY KEY / UNIQUE / EXCLUDE constraint and every unique index includes the
--     distribution column (an EXCLUDE constraint with the equality operator on it);
--   * every foreign key from a Citus table points at a table that is already a Citus table (so the order of the
--     script matters), and no local table references a table being distributed (local tables that reference the
--     reference table become "Citus local tables", which can be distributed only while nothing local references them); distributed → distributed needs the same colocation group and the distribution column at the
--     same position on both sides, with no ON DELETE/UPDATE SET NULL / SET DEFAULT and no ON UPDATE CASCADE;
--     distributed → reference is allowed; reference → distributed is not;
--   * no row-level security policy of the table contains a subquery;
--   * tables with triggers need citus.enable_unsafe_triggers = on.
-- A violation raises an error naming the table and the rule — except for tables named in the setting
-- `gpuledger_ci.citus_known_blockers` (comma-separated), where it is recorded in citus_stub.blockers and reported as
-- a warning; gl_ops_checks then insists that the recorded blockers are exactly the listed ones.

CREATE SCHEMA citus_stub;
CREATE TABLE citus_stub.tables (
    rel          regclass PRIMARY KEY,
    method       text NOT NULL CHECK (method IN ('hash', 'reference')),
    dist_column  text,
    colocation   integer,
    ordinal      serial
);
CREATE TABLE citus_stub.blockers (rel regclass NOT NULL, rule text NOT NULL);

CREATE FUNCTION citus_stub.violation(p_rel regclass, p_rule text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_rel::text = ANY (string_to_array(coalesce(current_setting('gpuledger_ci.citus_known_blockers', true), ''), ',')) THEN
        INSERT INTO citus_stub.blockers VALUES (p_rel, p_rule);
        RAISE WARNING 'known Citus blocker: %: %', p_rel, p_rule;
    ELSE
        RAISE EXCEPTION 'Citus would refuse %: %', p_rel, p_rule;
    END IF;
END
$$;

-- The rules for the foreign keys from a Citus table: checked when it is distributed, and again by
-- scripts/ops/assert-distributed.sql for keys added afterwards (distribute.sql re-adds every key at its end).
CREATE FUNCTION citus_stub.check_foreign_keys(p_rel regclass, p_method text, p_dist_col text, p_colocation integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
    att smallint;
    pos integer;
    ref citus_stub.tables;
BEGIN
    SELECT attnum INTO att FROM pg_attribute WHERE attrelid = p_rel AND attname = p_dist_col AND NOT attisdropped;
    -- Foreign keys from this table.
    FOR r IN SELECT conname, confrelid::regclass AS target, conkey, confkey, confupdtype, confdeltype
               FROM pg_constraint WHERE conrelid = p_rel AND contype = 'f' AND confrelid <> p_rel LOOP
        SELECT * INTO ref FROM citus_stub.tables WHERE rel = r.target;
        IF NOT FOUND THEN
            PERFORM citus_stub.violation(p_rel, format('foreign key %s references %s, which is not (yet) a distributed '
                                                       'or reference table', r.conname, r.target));
            CONTINUE;
        END IF;
        IF p_method = 'reference' AND ref.method = 'hash' THEN
            PERFORM citus_stub.violation(p_rel, format('foreign key %s from a reference table to the distributed table %s',
                                                       r.conname, r.target));
        ELSIF p_method = 'hash' AND ref.method = 'hash' THEN
            IF ref.colocation IS DISTINCT FROM p_colocation THEN
                PERFORM citus_stub.violation(p_rel, format('foreign key %s references %s, which is not colocated',
                                                           r.conname, r.target));
            END IF;
            pos := array_position(r.conkey, att);
            IF pos IS NULL OR r.confkey[pos] IS DISTINCT FROM
                   (SELECT attnum FROM pg_attribute WHERE attrelid = r.target AND attname = ref.dist_column) THEN
                PERFORM citus_stub.violation(p_rel, format('foreign key %s to %s does not pair the distribution columns '
                                                           '(%s → %s) at the same position', r.conname, r.target,
                                                           p_dist_col, ref.dist_column));
            END IF;
        END IF;
        IF p_method = 'hash' AND array_position(r.conkey, att) IS NOT NULL
           AND (r.confdeltype IN ('n', 'd') OR r.confupdtype IN ('n', 'd', 'c')) THEN
            PERFORM citus_stub.violation(p_rel, format('foreign key %s on the distribution column uses SET NULL / '
                                                       'SET DEFAULT / ON UPDATE CASCADE', r.conname));
        END IF;
    END LOOP;
END
$$;

-- Checks shared by both kinds; p_dist_col is NULL for a reference table.
CREATE FUNCTION citus_stub.check_table(p_rel regclass, p_method text, p_dist_col text, p_colocation integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
    att smallint;
    pos integer;
    ref citus_stub.tables;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = p_rel AND relkind IN ('r', 'p')) THEN
        RAISE EXCEPTION 'Citus would refuse %: not a table', p_rel;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = p_rel AND relispartition) THEN
        RAISE EXCEPTION 'Citus would refuse %: it is a partition; distribute its parent', p_rel;
    END IF;
    IF EXISTS (SELECT 1 FROM citus_stub.tables WHERE rel = p_rel) THEN
        RAISE EXCEPTION 'Citus would refuse %: already a Citus table', p_rel;
    END IF;
    IF p_dist_col IS NOT NULL THEN
        SELECT attnum INTO att FROM pg_attribute WHERE attrelid = p_rel AND attname = p_dist_col AND NOT attisdropped;
        IF att IS NULL THEN
            RAISE EXCEPTION 'Citus would refuse %: no column %', p_rel, p_dist_col;
        END IF;
        -- Primary keys, unique and exclusion constraints.
        FOR r IN SELECT conname, contype, conkey, conexclop FROM pg_constraint
                  WHERE conrelid = p_rel AND contype IN ('p', 'u', 'x') LOOP
            pos := array_position(r.conkey, att);
            IF pos IS NULL THEN
                PERFORM citus_stub.violation(p_rel, format('constraint %s does not include the distribution column %s',
                                                           r.conname, p_dist_col));
            ELSIF r.contype = 'x' AND (SELECT oprname FROM pg_operator WHERE oid = r.conexclop[pos]) <> '=' THEN
                PERFORM citus_stub.violation(p_rel, format('exclusion constraint %s does not use = on %s',
                                                           r.conname, p_dist_col));
            END IF;
        END LOOP;
        -- Unique indexes not backing a constraint.
        FOR r IN SELECT i.indexrelid::regclass AS idx, i.indkey FROM pg_index i
                  WHERE i.indrelid = p_rel AND i.indisunique
                    AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid) LOOP
            IF NOT att = ANY (r.indkey::smallint[]) THEN
                PERFORM citus_stub.violation(p_rel, format('unique index %s does not include the distribution column %s',
                                                           r.idx, p_dist_col));
            END IF;
        END LOOP;
    END IF;
    PERFORM citus_stub.check_foreign_keys(p_rel, p_method, p_dist_col, p_colocation);
    -- Foreign keys into a distributed table from tables that are not Citus tables (yet). (Into a reference table
    -- they are fine: Citus turns the referencing tables into Citus local tables, which can be distributed later as
    -- long as no other local table references them — this rule, when they are.)
    FOR r IN SELECT conname, conrelid::regclass AS src FROM pg_constraint
              WHERE confrelid = p_rel AND contype = 'f' AND conrelid <> p_rel AND conparentid = 0 AND p_method = 'hash'
                AND NOT EXISTS (SELECT 1 FROM citus_stub.tables t WHERE t.rel = conrelid) LOOP
        PERFORM citus_stub.violation(p_rel, format('the local table %s references it (foreign key %s): Citus refuses a '
                                                   'foreign key from a local table to a distributed table, and turns a '
                                                   'local table that references a reference table into a Citus local '
                                                   'table, which can then be neither distributed nor reference one',
                                                   r.src, r.conname));
    END LOOP;
    -- Row-level security policies: no subqueries.
    FOR r IN SELECT polname FROM pg_policy WHERE polrelid = p_rel
               AND (polqual::text LIKE '%{SUBLINK %' OR polwithcheck::text LIKE '%{SUBLINK %') LOOP
        PERFORM citus_stub.violation(p_rel, format('policy %s contains a subquery (not supported in policies on '
                                                   'distributed tables)', r.polname));
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = p_rel AND NOT tgisinternal)
       AND coalesce(current_setting('citus.enable_unsafe_triggers', true), 'off') NOT IN ('on', 'true') THEN
        PERFORM citus_stub.violation(p_rel, 'it has triggers and citus.enable_unsafe_triggers is off');
    END IF;
END
$$;

CREATE FUNCTION public.create_distributed_table(table_name regclass, distribution_column text,
                                                colocate_with text DEFAULT 'default')
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    grp integer;
    typ regtype;
BEGIN
    SELECT atttypid::regtype INTO typ FROM pg_attribute
     WHERE attrelid = table_name AND attname = distribution_column AND NOT attisdropped;
    IF colocate_with = 'none' THEN
        grp := (SELECT coalesce(max(colocation), 0) + 1 FROM citus_stub.tables);
    ELSIF colocate_with = 'default' THEN
        -- Citus's default group per distribution column type.
        SELECT t.colocation INTO grp FROM citus_stub.tables t
          JOIN pg_attribute a ON a.attrelid = t.rel AND a.attname = t.dist_column
         WHERE t.method = 'hash' AND a.atttypid = typ ORDER BY t.ordinal LIMIT 1;
        grp := coalesce(grp, (SELECT coalesce(max(colocation), 0) + 1 FROM citus_stub.tables));
    ELSE
        SELECT t.colocation INTO grp FROM citus_stub.tables t WHERE t.rel = colocate_with::regclass AND t.method = 'hash';
        IF grp IS NULL THEN
            RAISE EXCEPTION 'Citus would refuse %: colocate_with % is not a distributed table', table_name, colocate_with;
        END IF;
        IF (SELECT a.atttypid FROM citus_stub.tables t JOIN pg_attribute a ON a.attrelid = t.rel AND a.attname = t.dist_column
             WHERE t.rel = colocate_with::regclass) IS DISTINCT FROM typ THEN
            RAISE EXCEPTION 'Citus would refuse %: distribution column type differs from %', table_name, colocate_with;
        END IF;
    END IF;
    PERFORM citus_stub.check_table(table_name, 'hash', distribution_column, grp);
    INSERT INTO citus_stub.tables (rel, method, dist_column, colocation) VALUES (table_name, 'hash', distribution_column, grp);
END
$$;

CREATE FUNCTION public.create_reference_table(table_name regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM citus_stub.check_table(table_name, 'reference', NULL, NULL);
    INSERT INTO citus_stub.tables (rel, method) VALUES (table_name, 'reference');
END
$$;
