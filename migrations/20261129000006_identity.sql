-- Identity: per-organization OpenID provider settings and group → role mappings, server-side browser sessions,
-- pending OIDC logins, scoped export tokens, where an audited action came from, and the department scope that
-- PostgreSQL enforces next to the organization. See the conventions in migration 1 and docs/security.md.

SET LOCAL ROLE gpuledger_owner;

-- ---------------------------------------------------------------- department scope
-- The second setting of every organization-scoped transaction: `app.dept_scope` is either 'all' or a
-- comma-separated list of department ids (a department manager's, or a department-scoped export token's).
-- Anything else — unset, empty, malformed — shows nothing (fails closed, like `app.org_id`).
CREATE FUNCTION gpuledger_dept_visible(p_department uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    scope text := coalesce(current_setting('app.dept_scope', true), '');
BEGIN
    IF scope = 'all' THEN
        RETURN true;
    END IF;
    IF p_department IS NULL OR scope !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(,[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})*$' THEN
        RETURN false;
    END IF;
    RETURN p_department = ANY (string_to_array(scope, ',')::uuid[]);
END
$$;

-- Adds the department restriction to a table (AND-ed with the organization policy).
CREATE FUNCTION gpuledger_dept_scope(p_table regclass, p_expr text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE POLICY dept_scope ON %s AS RESTRICTIVE USING (gpuledger_dept_visible(%s)) '
                   'WITH CHECK (gpuledger_dept_visible(%s))', p_table, p_expr, p_expr);
END
$$;

-- A dispute belongs to the department of the lines it disputes (all of one department).
ALTER TABLE disputes ADD COLUMN department_id uuid;

SELECT gpuledger_dept_scope('departments', 'department_id');
SELECT gpuledger_dept_scope('tenants', 'department_id');
SELECT gpuledger_dept_scope('ledger_lines', 'department_id');
SELECT gpuledger_dept_scope('adjustments', 'department_id');
SELECT gpuledger_dept_scope('disputes', 'department_id');
SELECT gpuledger_dept_scope('dispute_events',
    '(SELECT d.department_id FROM disputes d WHERE d.org_id = dispute_events.org_id AND d.dispute_id = dispute_events.dispute_id)');
SELECT gpuledger_dept_scope('quotas',
    'COALESCE(department_id, (SELECT t.department_id FROM tenants t WHERE t.org_id = quotas.org_id AND t.tenant_id = quotas.tenant_id))');

-- ---------------------------------------------------------------- sign-in settings
-- Demo organizations offer local accounts (one per role) until an OpenID provider is configured.
ALTER TABLE organizations ADD COLUMN demo_login boolean NOT NULL DEFAULT false;

CREATE TABLE idp_settings (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    issuer          text        NOT NULL CHECK (issuer ~ '^https?://'),
    client_id       text        NOT NULL CHECK (length(client_id) BETWEEN 1 AND 400),
    -- Needed in clear to authenticate to the provider; never returned by the API, never logged.
    client_secret   text        NOT NULL CHECK (length(client_secret) BETWEEN 1 AND 400),
    groups_claim    text        NOT NULL DEFAULT 'groups' CHECK (length(groups_claim) BETWEEN 1 AND 100),
    scopes          text        NOT NULL DEFAULT 'openid email profile groups',
    updated_at      timestamptz NOT NULL DEFAULT now(),
    updated_by      text        NOT NULL,
    PRIMARY KEY (org_id)
);

CREATE TABLE role_mappings (
    org_id          uuid        NOT NULL,
    mapping_id      uuid        NOT NULL,
    group_name      text        NOT NULL CHECK (length(group_name) BETWEEN 1 AND 400),
    role            text        NOT NULL CHECK (role IN ('admin', 'finance', 'department_manager', 'viewer')),
    department_id   uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, mapping_id),
    FOREIGN KEY (org_id) REFERENCES organizations (org_id),
    FOREIGN KEY (org_id, department_id) REFERENCES departments (org_id, department_id),
    CHECK ((role = 'department_manager') = (department_id IS NOT NULL))
);
CREATE UNIQUE INDEX role_mappings_unique
    ON role_mappings (org_id, group_name, role, COALESCE(department_id, '00000000-0000-0000-0000-000000000000'));

-- ---------------------------------------------------------------- browser sessions
-- The cookie carries `<org id>.<secret>`; only the secret's SHA-256 is stored. Roles and departments are fixed
-- at login (a changed mapping takes effect at the next login).
CREATE TABLE sessions (
    org_id          uuid        NOT NULL,
    session_id      uuid        NOT NULL,
    secret_sha256   bytea       NOT NULL CHECK (length(secret_sha256) = 32),
    user_id         uuid        NOT NULL,
    roles           text[]      NOT NULL,
    department_ids  uuid[]      NOT NULL DEFAULT '{}',
    csrf_token      text        NOT NULL,
    -- For RP-initiated logout at the provider.
    id_token_hint   text,
    source          text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_seen_at    timestamptz NOT NULL DEFAULT now(),
    -- Absolute end, and the idle time after which an unused session ends.
    expires_at      timestamptz NOT NULL,
    idle_timeout    interval    NOT NULL DEFAULT '30 minutes',
    ended_at        timestamptz,
    PRIMARY KEY (org_id, session_id),
    UNIQUE (org_id, secret_sha256),
    FOREIGN KEY (org_id, user_id) REFERENCES users (org_id, user_id)
);

-- An authorization request in flight: state, nonce and PKCE verifier, bound to the browser by a cookie whose
-- secret's hash is kept here. Consumed once.
CREATE TABLE oidc_logins (
    org_id          uuid        NOT NULL,
    login_id        uuid        NOT NULL,
    secret_sha256   bytea       NOT NULL CHECK (length(secret_sha256) = 32),
    state           text        NOT NULL,
    nonce           text        NOT NULL,
    pkce_verifier   text        NOT NULL,
    return_to       text        NOT NULL DEFAULT '/',
    created_at      timestamptz NOT NULL DEFAULT now(),
    consumed_at     timestamptz,
    PRIMARY KEY (org_id, login_id),
    UNIQUE (org_id, secret_sha256)
);

-- ---------------------------------------------------------------- tokens and audit
-- Export tokens may be limited to departments (empty = the whole organization).
ALTER TABLE api_tokens ADD COLUMN department_ids uuid[] NOT NULL DEFAULT '{}';
ALTER TABLE api_tokens ADD COLUMN revoked_by text;
-- Where an audited action came from (client address), next to who, when and what.
ALTER TABLE audit_log ADD COLUMN source text NOT NULL DEFAULT '';

SELECT gpuledger_isolate(t) FROM unnest(ARRAY['idp_settings', 'role_mappings', 'sessions', 'oidc_logins']::regclass[]) AS t;

GRANT SELECT, INSERT, UPDATE, DELETE ON idp_settings, role_mappings TO gpuledger_app;
-- Sessions and logins end (ended_at / consumed_at); they are not deleted by the application.
GRANT SELECT, INSERT, UPDATE ON sessions, oidc_logins TO gpuledger_app;

RESET ROLE;

-- Existing disputes take their first line's department. Run as the migrating login (RLS is forced on the
-- owner, which has no organization set).
UPDATE disputes d SET department_id = (
    SELECT l.department_id FROM ledger_lines l
     WHERE l.org_id = d.org_id AND l.period = d.period AND l.line_id = d.line_ids[1]);
