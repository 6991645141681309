-- Roles, the tenancy root, and the one cross-organization door.
--
-- Conventions every migration follows (docs/database.md):
--   * objects are created while `SET LOCAL ROLE gpuledger_owner` is in force, so the owner role owns them and
--     the migrating login (often a superuser) owns nothing that holds tenant rows;
--   * every table that holds an organization's rows has `org_id` leading its primary key, ENABLE and FORCE
--     ROW LEVEL SECURITY, and a policy on the transaction's `app.org_id`;
--   * the application role gets only the privileges it needs (append-only tables: SELECT and INSERT);
--   * the file ends with RESET ROLE, because sqlx records the migration as the login role.

-- Roles are cluster-wide: several databases (tests make one per test) may race to create them.
DO $$
BEGIN
    BEGIN
        CREATE ROLE gpuledger_owner NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    BEGIN
        -- What the server logs in as. Owns nothing, cannot bypass RLS. LOGIN and a password are set by
        -- whoever provisions the database (the embedded default does it itself).
        CREATE ROLE gpuledger_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    BEGIN
        -- Owns the narrow SECURITY DEFINER functions that look across organizations (slug → id).
        -- Nobody logs in as it and the app role is not a member of it.
        CREATE ROLE gpuledger_directory NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
END
$$;

GRANT gpuledger_owner TO CURRENT_USER;
GRANT gpuledger_directory TO gpuledger_owner;
GRANT USAGE, CREATE ON SCHEMA public TO gpuledger_owner;
GRANT USAGE ON SCHEMA public TO gpuledger_app;
-- CREATE only because a function's new owner must hold it; nobody logs in as this role.
GRANT USAGE, CREATE ON SCHEMA public TO gpuledger_directory;
-- /readyz compares the applied migrations with the binary's.
GRANT SELECT ON _sqlx_migrations TO gpuledger_app;
-- Trusted extension: lets exclusion constraints mix uuid equality with range overlap.
CREATE EXTENSION IF NOT EXISTS btree_gist;

SET LOCAL ROLE gpuledger_owner;

-- Rejects UPDATE and DELETE on append-only tables, for every role (the app role has no such grant either).
CREATE FUNCTION gpuledger_forbid_mutation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TABLE organizations (
    org_id      uuid        NOT NULL,
    slug        text        NOT NULL CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id)
);
CREATE UNIQUE INDEX organizations_slug ON organizations (slug);
ALTER TABLE organizations ENABLE ROW LEVEL SECURITY;
ALTER TABLE organizations FORCE ROW LEVEL SECURITY;
CREATE POLICY org_isolation ON organizations
    USING (org_id = NULLIF(current_setting('app.org_id', true), '')::uuid)
    WITH CHECK (org_id = NULLIF(current_setting('app.org_id', true), '')::uuid);
CREATE POLICY directory_read ON organizations FOR SELECT TO gpuledger_directory USING (true);
CREATE POLICY directory_create ON organizations FOR INSERT TO gpuledger_directory WITH CHECK (true);
GRANT SELECT, UPDATE ON organizations TO gpuledger_app;
GRANT SELECT, INSERT ON organizations TO gpuledger_directory;

-- The cross-organization door, as narrow as it can be: a slug resolves to an id, nothing more.
CREATE FUNCTION gpuledger_org_id_by_slug(p_slug text) RETURNS uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT org_id FROM organizations WHERE slug = p_slug
$$;
-- Creating an organization is cross-organization by nature (no org is set yet). Returns the existing id when
-- the slug is taken, so seeding is idempotent.
CREATE FUNCTION gpuledger_create_org(p_org_id uuid, p_slug text, p_name text) RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    existing uuid;
BEGIN
    SELECT org_id INTO existing FROM organizations WHERE slug = p_slug;
    IF existing IS NOT NULL THEN
        RETURN existing;
    END IF;
    INSERT INTO organizations (org_id, slug, name) VALUES (p_org_id, p_slug, p_name);
    RETURN p_org_id;
END
$$;
ALTER FUNCTION gpuledger_org_id_by_slug(text) OWNER TO gpuledger_directory;
ALTER FUNCTION gpuledger_create_org(uuid, text, text) OWNER TO gpuledger_directory;
REVOKE ALL ON FUNCTION gpuledger_org_id_by_slug(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION gpuledger_create_org(uuid, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuledger_org_id_by_slug(text) TO gpuledger_app;
GRANT EXECUTE ON FUNCTION gpuledger_create_org(uuid, text, text) TO gpuledger_app;

RESET ROLE;
