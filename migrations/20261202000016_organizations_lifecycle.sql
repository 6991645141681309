-- Organizations as a product (issue 19): the operator creates, suspends, resumes, exports and deletes them from the
-- CLI; the first admin gets in with a one-time setup link; admins keep the organization's settings; the operator
-- sets its limits. See docs/operations.md ("Onboarding an organization") and the conventions in migration 1.
--
-- Who may do what, in the database:
--   * the organization's own rows (settings, setup links, exports, the daily ingest count) are tenant tables like any
--     other: org_id first in the key, RLS forced, reached through the organization's transaction;
--   * what only the operator changes (an organization's state and limits) is changed through SECURITY DEFINER
--     functions owned by gpuledger_directory; the application role may no longer UPDATE those columns itself;
--   * the operator's own tables (the operator log, the slugs of deleted organizations) hold no organization's rows
--     (no org_id column: they outlive the organizations they mention) and are reached only through those functions;
--   * erasing an organization's rows runs as the owner (SECURITY DEFINER) inside that organization's transaction,
--     and only when the organization is suspended and its last export still matches every row it holds.

SET LOCAL ROLE gpuledger_owner;

-- ---------------------------------------------------------------- state and limits
ALTER TABLE organizations
    ADD COLUMN state text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'suspended')),
    ADD COLUMN state_changed_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN state_reason text NOT NULL DEFAULT '' CHECK (length(state_reason) <= 500),
    -- Operator-set limits; NULL is no limit.
    ADD COLUMN rate_limit_per_minute integer CHECK (rate_limit_per_minute BETWEEN 1 AND 1000000),
    ADD COLUMN ingest_facts_per_day bigint CHECK (ingest_facts_per_day BETWEEN 1 AND 100000000000);

-- The application may rename its organization (the display name) and switch the demo login; state and limits are the
-- operator's (functions below).
REVOKE UPDATE ON organizations FROM gpuledger_app;
GRANT UPDATE (name, demo_login) ON organizations TO gpuledger_app;
CREATE POLICY directory_update ON organizations FOR UPDATE TO gpuledger_directory USING (true) WITH CHECK (true);
GRANT UPDATE (state, state_changed_at, state_reason, rate_limit_per_minute, ingest_facts_per_day)
    ON organizations TO gpuledger_directory;

-- ---------------------------------------------------------------- settings admins keep
CREATE TABLE org_settings (
    org_id            uuid        NOT NULL REFERENCES organizations (org_id),
    default_currency  char(3)     NOT NULL DEFAULT 'USD' CHECK (default_currency ~ '^[A-Z]{3}$'),
    retention_months  integer     NOT NULL DEFAULT 84 CHECK (retention_months BETWEEN 12 AND 120),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    updated_by        text        NOT NULL,
    PRIMARY KEY (org_id)
);

-- ---------------------------------------------------------------- the first admin's way in
-- A one-time link: only the SHA-256 of the token is kept; it signs its holder in once, as admin, before it expires.
CREATE TABLE setup_links (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    link_id         uuid        NOT NULL,
    secret_sha256   bytea       NOT NULL CHECK (length(secret_sha256) = 32),
    role            text        NOT NULL DEFAULT 'admin' CHECK (role = 'admin'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text        NOT NULL,
    expires_at      timestamptz NOT NULL,
    used_at         timestamptz,
    used_from       text,
    PRIMARY KEY (org_id, link_id),
    UNIQUE (org_id, secret_sha256),
    CHECK (expires_at > created_at)
);

-- ---------------------------------------------------------------- exports (the organization's data portability)
-- One row per `org export`: the fingerprint of every row the organization held when it was taken (see
-- gpuledger_org_fingerprint), so `org delete` can tell that nothing changed since.
CREATE TABLE org_exports (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    export_id       uuid        NOT NULL,
    exported_at     timestamptz NOT NULL DEFAULT now(),
    exported_by     text        NOT NULL,
    row_count       bigint      NOT NULL CHECK (row_count >= 0),
    table_count     integer     NOT NULL CHECK (table_count >= 0),
    fingerprint     text        NOT NULL,
    file_sha256     text        NOT NULL,
    PRIMARY KEY (org_id, export_id)
);

-- ---------------------------------------------------------------- ingest volume per day
-- Facts received per UTC day, counted only for organizations with an ingest limit.
CREATE TABLE ingest_daily (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    day             date        NOT NULL,
    facts           bigint      NOT NULL DEFAULT 0 CHECK (facts >= 0),
    PRIMARY KEY (org_id, day)
);

SELECT gpuledger_isolate(t)
  FROM unnest(ARRAY['org_settings', 'setup_links', 'org_exports', 'ingest_daily']::regclass[]) AS t;
SELECT gpuledger_append_only('org_exports');

GRANT SELECT, INSERT, UPDATE ON org_settings, ingest_daily TO gpuledger_app;
GRANT SELECT, INSERT ON setup_links, org_exports TO gpuledger_app;
-- A link is used once: the only change it ever sees.
GRANT UPDATE (used_at, used_from) ON setup_links TO gpuledger_app;

-- ---------------------------------------------------------------- the operator's own tables
-- What the operator did to which organization, kept after the organization is gone (hence no org_id: the
-- organization's id is `org_ref`, not a key into anything). Append-only.
CREATE TABLE operator_log (
    entry_id        uuid        NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    actor           text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action          text        NOT NULL CHECK (length(action) BETWEEN 1 AND 100),
    org_slug        text        NOT NULL,
    org_ref         uuid,
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (entry_id)
);
CREATE INDEX operator_log_by_slug ON operator_log (org_slug, at);
SELECT gpuledger_append_only('operator_log');

-- A slug is taken once: the slugs of deleted organizations are never given out again.
CREATE TABLE retired_slugs (
    slug            text        NOT NULL,
    org_ref         uuid        NOT NULL,
    deleted_at      timestamptz NOT NULL DEFAULT now(),
    deleted_by      text        NOT NULL,
    PRIMARY KEY (slug)
);
SELECT gpuledger_append_only('retired_slugs');

GRANT SELECT, INSERT ON operator_log, retired_slugs TO gpuledger_directory;

-- ---------------------------------------------------------------- the tables that hold an organization's rows
-- Discovered from the catalog: every table of the schema with an org_id column (partitions through their parent).
-- Export, fingerprint and erase all walk this list, so a table added later is covered without a change here.
CREATE FUNCTION gpuledger_org_tables() RETURNS TABLE (table_name text)
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
    SELECT c.relname::text FROM pg_class c
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
       AND EXISTS (SELECT 1 FROM pg_attribute a
                    WHERE a.attrelid = c.oid AND a.attname = 'org_id' AND NOT a.attisdropped)
     ORDER BY 1
$$;
GRANT EXECUTE ON FUNCTION gpuledger_org_tables() TO gpuledger_app;

-- A fingerprint of every row the organization holds (all of the tables above but org_exports, which records the
-- fingerprints): per table, the row count and the sum of the first 60 bits of each row's md5. Any insert, update
-- or delete of one of its rows changes it. Only inside the organization's own transaction.
CREATE FUNCTION gpuledger_org_fingerprint(p_org uuid) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    t text;
    n bigint;
    s numeric;
    parts text[] := '{}';
BEGIN
    IF p_org IS NULL OR NULLIF(current_setting('app.org_id', true), '')::uuid IS DISTINCT FROM p_org THEN
        RAISE EXCEPTION 'an organization''s fingerprint is read in its own transaction only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    FOR t IN SELECT table_name FROM gpuledger_org_tables() WHERE table_name <> 'org_exports' LOOP
        EXECUTE format('SELECT count(*), coalesce(sum((''x'' || substr(md5(x::text), 1, 15))::bit(60)::bigint), 0) '
                       'FROM %I x WHERE x.org_id = $1', t)
           INTO n, s USING p_org;
        parts := parts || format('%s:%s:%s', t, n, s);
    END LOOP;
    RETURN md5(array_to_string(parts, E'\n'));
END
$$;
REVOKE ALL ON FUNCTION gpuledger_org_fingerprint(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_org_fingerprint(uuid) TO gpuledger_app;

-- Whether the current statement is the sanctioned erasure of this organization's rows: run by the owner (only
-- gpuledger_org_erase runs as the owner and deletes) with the erasure marked for exactly this organization.
CREATE FUNCTION gpuledger_org_erasing(p_org uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT current_user = 'gpuledger_owner' AND p_org IS NOT NULL
       AND coalesce(current_setting('gpuledger.erase_org', true), '') = p_org::text
$$;

-- The guards that keep history append-only let the erasure of a whole organization through, and nothing else.
CREATE OR REPLACE FUNCTION gpuledger_forbid_mutation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- (Nested: the operator's tables have no org_id to look at.)
    IF TG_OP = 'DELETE' AND TG_LEVEL = 'ROW' AND TG_TABLE_NAME NOT IN ('operator_log', 'retired_slugs') THEN
        IF gpuledger_org_erasing(OLD.org_id) THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE OR REPLACE FUNCTION gpuledger_policy_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.state <> 'draft' AND NOT gpuledger_org_erasing(OLD.org_id) THEN
            RAISE EXCEPTION 'cost policy version % is %, not a draft: it cannot be deleted', OLD.version, OLD.state
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.state <> 'draft' AND (NEW.document IS DISTINCT FROM OLD.document
        OR NEW.effective_from IS DISTINCT FROM OLD.effective_from OR NEW.currency IS DISTINCT FROM OLD.currency
        OR NEW.approved_at IS DISTINCT FROM OLD.approved_at OR NEW.approved_by IS DISTINCT FROM OLD.approved_by) THEN
        RAISE EXCEPTION 'cost policy version % is %: an approved version is never edited', OLD.version, OLD.state
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.state = 'superseded' AND NEW.state <> 'superseded' THEN
        RAISE EXCEPTION 'cost policy version % is superseded for good', OLD.version
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.state = 'approved' AND NEW.state = 'draft' THEN
        RAISE EXCEPTION 'cost policy version % is approved: it cannot return to draft', OLD.version
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION gpuledger_period_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.state = 'closed' AND NOT gpuledger_org_erasing(OLD.org_id) THEN
            RAISE EXCEPTION 'period % is closed: it is never deleted', OLD.period
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.state = 'closed' THEN
        RAISE EXCEPTION 'period % is closed: it is never rewritten', OLD.period
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

-- Removes every row of the organization from every table that holds its rows, the organization itself last, in the
-- caller's transaction (the organization's own: app.org_id must be p_org). Refused unless the organization is
-- suspended and its newest export's fingerprint matches what it holds now. Returns the rows removed per table.
CREATE FUNCTION gpuledger_org_erase(p_org uuid) RETURNS TABLE (table_name text, removed bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v_state text;
    v_exported text;
    pending text[];
    retry text[];
    t text;
    n bigint;
    left_over bigint;
BEGIN
    IF p_org IS NULL OR NULLIF(current_setting('app.org_id', true), '')::uuid IS DISTINCT FROM p_org THEN
        RAISE EXCEPTION 'an organization is erased in its own transaction only' USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT o.state INTO v_state FROM organizations o WHERE o.org_id = p_org FOR UPDATE;
    IF v_state IS NULL THEN
        RAISE EXCEPTION 'no such organization' USING ERRCODE = 'no_data_found';
    END IF;
    IF v_state <> 'suspended' THEN
        RAISE EXCEPTION 'the organization is %: suspend it before deleting it', v_state
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT e.fingerprint INTO v_exported FROM org_exports e WHERE e.org_id = p_org
     ORDER BY e.exported_at DESC LIMIT 1;
    IF v_exported IS NULL THEN
        RAISE EXCEPTION 'the organization was never exported: export it before deleting it'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF v_exported <> gpuledger_org_fingerprint(p_org) THEN
        RAISE EXCEPTION 'the organization changed since its last export: export it again before deleting it'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM set_config('gpuledger.erase_org', p_org::text, true);
    -- Referencing tables before the tables they reference: a table whose rows are still referenced is tried again
    -- after the others (each attempt in its own subtransaction).
    SELECT array_agg(o.table_name ORDER BY o.table_name = 'organizations', o.table_name) INTO pending
      FROM gpuledger_org_tables() o;
    WHILE cardinality(pending) > 0 LOOP
        retry := '{}';
        FOREACH t IN ARRAY pending LOOP
            BEGIN
                EXECUTE format('DELETE FROM %I x WHERE x.org_id = $1', t) USING p_org;
                GET DIAGNOSTICS n = ROW_COUNT;
                table_name := t;
                removed := n;
                RETURN NEXT;
            EXCEPTION WHEN foreign_key_violation THEN
                retry := retry || t;
            END;
        END LOOP;
        IF cardinality(retry) = cardinality(pending) THEN
            RAISE EXCEPTION 'cannot erase the organization: rows of % are still referenced', retry;
        END IF;
        pending := retry;
    END LOOP;
    -- Nothing of it is left anywhere (checked, not assumed).
    FOR t IN SELECT o.table_name FROM gpuledger_org_tables() o LOOP
        EXECUTE format('SELECT count(*) FROM %I x WHERE x.org_id = $1', t) INTO left_over USING p_org;
        IF left_over > 0 THEN
            RAISE EXCEPTION 'cannot erase the organization: % rows of % remain', left_over, t;
        END IF;
    END LOOP;
    PERFORM set_config('gpuledger.erase_org', '', true);
END
$$;
REVOKE ALL ON FUNCTION gpuledger_org_erase(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_org_erase(uuid) TO gpuledger_app;

RESET ROLE;

-- ---------------------------------------------------------------- the operator's door (owned by gpuledger_directory)
SET LOCAL ROLE gpuledger_owner;

-- Creates an organization once: refused (unique_violation) when the slug is taken now or was ever taken.
CREATE FUNCTION gpuledger_operator_create_org(p_org_id uuid, p_slug text, p_name text) RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM retired_slugs WHERE slug = p_slug) THEN
        RAISE EXCEPTION 'the slug % belonged to a deleted organization: a slug is taken once', p_slug
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'retired_slugs_pkey';
    END IF;
    IF EXISTS (SELECT 1 FROM organizations WHERE slug = p_slug) THEN
        RAISE EXCEPTION 'the slug % is taken', p_slug
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'organizations_slug';
    END IF;
    INSERT INTO organizations (org_id, slug, name) VALUES (p_org_id, p_slug, p_name);
    RETURN p_org_id;
END
$$;

-- The idempotent creation the tests and older seeds use refuses retired slugs too.
CREATE OR REPLACE FUNCTION gpuledger_create_org(p_org_id uuid, p_slug text, p_name text) RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    existing uuid;
BEGIN
    SELECT org_id INTO existing FROM organizations WHERE slug = p_slug;
    IF existing IS NOT NULL THEN
        RETURN existing;
    END IF;
    IF EXISTS (SELECT 1 FROM retired_slugs WHERE slug = p_slug) THEN
        RAISE EXCEPTION 'the slug % belonged to a deleted organization: a slug is taken once', p_slug
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'retired_slugs_pkey';
    END IF;
    INSERT INTO organizations (org_id, slug, name) VALUES (p_org_id, p_slug, p_name);
    RETURN p_org_id;
END
$$;

-- Every organization, with what the operator sees of it (no tenant data: counts are read per organization).
CREATE FUNCTION gpuledger_operator_orgs()
RETURNS TABLE (org_id uuid, slug text, name text, created_at timestamptz, state text, state_changed_at timestamptz,
               state_reason text, rate_limit_per_minute integer, ingest_facts_per_day bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT o.org_id, o.slug, o.name, o.created_at, o.state, o.state_changed_at, o.state_reason,
           o.rate_limit_per_minute, o.ingest_facts_per_day
      FROM organizations o ORDER BY o.slug
$$;

-- Suspends or resumes; returns the previous state.
CREATE FUNCTION gpuledger_operator_set_state(p_org uuid, p_state text, p_reason text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    previous text;
BEGIN
    SELECT state INTO previous FROM organizations WHERE org_id = p_org FOR UPDATE;
    IF previous IS NULL THEN
        RAISE EXCEPTION 'no such organization' USING ERRCODE = 'no_data_found';
    END IF;
    IF previous <> p_state THEN
        UPDATE organizations SET state = p_state, state_changed_at = now(), state_reason = coalesce(p_reason, '')
         WHERE org_id = p_org;
    END IF;
    RETURN previous;
END
$$;

-- Sets the operator's limits (NULL: no limit).
CREATE FUNCTION gpuledger_operator_set_limits(p_org uuid, p_rate integer, p_ingest bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    UPDATE organizations SET rate_limit_per_minute = p_rate, ingest_facts_per_day = p_ingest WHERE org_id = p_org;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no such organization' USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Writes the operator log.
CREATE FUNCTION gpuledger_operator_log(p_actor text, p_action text, p_slug text, p_org uuid, p_details jsonb)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    INSERT INTO operator_log (entry_id, actor, action, org_slug, org_ref, details)
    VALUES (gen_random_uuid(), p_actor, p_action, p_slug, p_org, coalesce(p_details, '{}'::jsonb))
$$;

-- Reads the operator log (newest first), optionally of one slug.
CREATE FUNCTION gpuledger_operator_log_read(p_slug text, p_limit integer)
RETURNS TABLE (at timestamptz, actor text, action text, org_slug text, org_ref uuid, details jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT l.at, l.actor, l.action, l.org_slug, l.org_ref, l.details FROM operator_log l
     WHERE p_slug IS NULL OR l.org_slug = p_slug
     ORDER BY l.at DESC LIMIT p_limit
$$;

-- Keeps a deleted organization's slug from ever being given out again.
CREATE FUNCTION gpuledger_operator_retire_slug(p_org uuid, p_slug text, p_actor text) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    INSERT INTO retired_slugs (slug, org_ref, deleted_by) VALUES (p_slug, p_org, p_actor)
$$;

ALTER FUNCTION gpuledger_operator_create_org(uuid, text, text) OWNER TO gpuledger_directory;
ALTER FUNCTION gpuledger_operator_orgs() OWNER TO gpuledger_directory;
ALTER FUNCTION gpuledger_operator_set_state(uuid, text, text) OWNER TO gpuledger_directory;
ALTER FUNCTION gpuledger_operator_set_limits(uuid, integer, bigint) OWNER TO gpuledger_directory;
ALTER FUNCTION gpuledger_operator_log(text, text, text, uuid, jsonb) OWNER TO gpuledger_directory;
ALTER FUNCTION gpuledger_operator_log_read(text, integer) OWNER TO gpuledger_directory;
ALTER FUNCTION gpuledger_operator_retire_slug(uuid, text, text) OWNER TO gpuledger_directory;
REVOKE ALL ON FUNCTION gpuledger_operator_create_org(uuid, text, text), gpuledger_operator_orgs(),
    gpuledger_operator_set_state(uuid, text, text), gpuledger_operator_set_limits(uuid, integer, bigint),
    gpuledger_operator_log(text, text, text, uuid, jsonb), gpuledger_operator_log_read(text, integer),
    gpuledger_operator_retire_slug(uuid, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_operator_create_org(uuid, text, text), gpuledger_operator_orgs(),
    gpuledger_operator_set_state(uuid, text, text), gpuledger_operator_set_limits(uuid, integer, bigint),
    gpuledger_operator_log(text, text, text, uuid, jsonb), gpuledger_operator_log_read(text, integer),
    gpuledger_operator_retire_slug(uuid, text, text) TO gpuledger_app;

RESET ROLE;

-- Organizations made before this migration get their settings row.
INSERT INTO org_settings (org_id, updated_by) SELECT org_id, 'migration' FROM organizations ON CONFLICT DO NOTHING;
