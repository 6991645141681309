-- Departments, tenants, clusters, namespaces with ownership history, the approved GPU inventory, allocation
-- events and intervals, users and roles, API tokens, and the audit log. See the conventions in migration 1.

SET LOCAL ROLE gpuledger_owner;

-- The standard isolation for a table holding an organization's rows: ENABLE + FORCE RLS and one policy that
-- compares org_id with the transaction's app.org_id. With no organization set, NULLIF makes the comparison
-- NULL, so nothing is visible and nothing can be written (fails closed).
CREATE FUNCTION gpuledger_isolate(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', p_table);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', p_table);
    EXECUTE format(
        'CREATE POLICY org_isolation ON %s '
        'USING (org_id = NULLIF(current_setting(''app.org_id'', true), '''')::uuid) '
        'WITH CHECK (org_id = NULLIF(current_setting(''app.org_id'', true), '''')::uuid)', p_table);
END
$$;

CREATE FUNCTION gpuledger_append_only(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format(
        'CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON %s '
        'FOR EACH ROW EXECUTE FUNCTION gpuledger_forbid_mutation()', p_table);
    EXECUTE format('CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON %s '
        'FOR EACH STATEMENT EXECUTE FUNCTION gpuledger_forbid_mutation()', p_table);
END
$$;

-- ---------------------------------------------------------------- business side
CREATE TABLE departments (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    department_id   uuid        NOT NULL,
    name            text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, department_id),
    UNIQUE (org_id, name)
);

CREATE TABLE tenants (
    org_id          uuid        NOT NULL,
    tenant_id       uuid        NOT NULL,
    department_id   uuid        NOT NULL,
    name            text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, tenant_id),
    UNIQUE (org_id, name),
    FOREIGN KEY (org_id, department_id) REFERENCES departments (org_id, department_id)
);

-- ---------------------------------------------------------------- orchestration side
CREATE TABLE clusters (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    cluster_id      uuid        NOT NULL,
    name            text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- A deleted cluster stays queryable for close and disputes.
    retired_at      timestamptz,
    PRIMARY KEY (org_id, cluster_id),
    UNIQUE (org_id, name)
);

CREATE TABLE namespaces (
    org_id          uuid        NOT NULL,
    namespace_uid   uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    name            text        NOT NULL,
    created_at      timestamptz NOT NULL,
    deleted_at      timestamptz,
    PRIMARY KEY (org_id, namespace_uid),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (deleted_at IS NULL OR deleted_at >= created_at)
);
CREATE INDEX namespaces_by_cluster ON namespaces (org_id, cluster_id, name);

-- Who owned a namespace when. A change of owner closes the old row (valid_to) and opens a new one; rows are
-- never overwritten, and no two rows of one namespace overlap.
CREATE TABLE namespace_ownership (
    org_id          uuid        NOT NULL,
    namespace_uid   uuid        NOT NULL,
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    tenant_id       uuid        NOT NULL,
    source          text        NOT NULL DEFAULT 'label' CHECK (source IN ('label', 'admin')),
    PRIMARY KEY (org_id, namespace_uid, valid_from),
    FOREIGN KEY (org_id, namespace_uid) REFERENCES namespaces (org_id, namespace_uid),
    FOREIGN KEY (org_id, tenant_id) REFERENCES tenants (org_id, tenant_id),
    CHECK (valid_to IS NULL OR valid_to > valid_from),
    EXCLUDE USING gist (org_id WITH =, namespace_uid WITH =, tstzrange(valid_from, valid_to) WITH &&)
);

-- ---------------------------------------------------------------- approved GPU inventory (versioned)
CREATE TABLE gpu_classes (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    gpu_class       text        NOT NULL CHECK (length(gpu_class) BETWEEN 1 AND 100),
    description     text        NOT NULL DEFAULT '',
    PRIMARY KEY (org_id, gpu_class)
);

CREATE TABLE gpu_models (
    org_id          uuid        NOT NULL,
    model           text        NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    gpu_class       text        NOT NULL,
    memory_mib      integer     CHECK (memory_mib > 0),
    PRIMARY KEY (org_id, model, valid_from),
    FOREIGN KEY (org_id, gpu_class) REFERENCES gpu_classes (org_id, gpu_class),
    CHECK (valid_to IS NULL OR valid_to > valid_from),
    EXCLUDE USING gist (org_id WITH =, model WITH =, tstzrange(valid_from, valid_to) WITH &&)
);

-- Fractions are exact rationals (1/7 stays 1/7 until priced).
CREATE TABLE mig_profiles (
    org_id          uuid        NOT NULL,
    model           text        NOT NULL,
    profile         text        NOT NULL CHECK (profile ~ '^[0-9]+(c\.[0-9]+)?g\.[0-9]+gb(\+[a-z]+)?$'),
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    fraction_num    bigint      NOT NULL CHECK (fraction_num > 0),
    fraction_den    bigint      NOT NULL CHECK (fraction_den > 0),
    PRIMARY KEY (org_id, model, profile, valid_from),
    CHECK (fraction_num <= fraction_den),
    CHECK (valid_to IS NULL OR valid_to > valid_from),
    EXCLUDE USING gist (org_id WITH =, model WITH =, profile WITH =, tstzrange(valid_from, valid_to) WITH &&)
);

CREATE TABLE vgpu_profiles (
    org_id          uuid        NOT NULL,
    model           text        NOT NULL,
    profile         text        NOT NULL CHECK (length(profile) BETWEEN 1 AND 100),
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    fraction_num    bigint      NOT NULL CHECK (fraction_num > 0),
    fraction_den    bigint      NOT NULL CHECK (fraction_den > 0),
    PRIMARY KEY (org_id, model, profile, valid_from),
    CHECK (fraction_num <= fraction_den),
    CHECK (valid_to IS NULL OR valid_to > valid_from),
    EXCLUDE USING gist (org_id WITH =, model WITH =, profile WITH =, tstzrange(valid_from, valid_to) WITH &&)
);

-- A declared time-slicing policy: each replica is 1/replicas of a GPU (declared, not measured).
CREATE TABLE timeslice_policies (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    name            text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    replicas        integer     NOT NULL CHECK (replicas BETWEEN 1 AND 1024),
    PRIMARY KEY (org_id, cluster_id, name, valid_from),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (valid_to IS NULL OR valid_to > valid_from),
    EXCLUDE USING gist (org_id WITH =, cluster_id WITH =, name WITH =, tstzrange(valid_from, valid_to) WITH &&)
);

-- ---------------------------------------------------------------- allocation evidence
-- Every fact an agent delivered, as delivered: append-only, deduplicated by the agent's deterministic event ID.
-- `subject` is what the fact is about (allocation ID, namespace UID, GPU UUID, node name), so derived state can be
-- recomputed from all facts about one subject whatever order they arrived in.
CREATE TABLE allocation_events (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    event_id        text        NOT NULL CHECK (length(event_id) BETWEEN 1 AND 300),
    kind            text        NOT NULL,
    subject         text        NOT NULL,
    occurred_at     timestamptz NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    payload         jsonb       NOT NULL,
    PRIMARY KEY (org_id, cluster_id, event_id),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id)
);
CREATE INDEX allocation_events_by_subject ON allocation_events (org_id, cluster_id, subject);
CREATE INDEX allocation_events_by_time ON allocation_events (org_id, occurred_at);

-- Who held which capacity, when: derived from the events, open while ended_at is NULL.
CREATE TABLE allocation_intervals (
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    allocation_id   text        NOT NULL CHECK (length(allocation_id) BETWEEN 1 AND 300),
    holder_kind     text        NOT NULL CHECK (holder_kind IN ('pod', 'vmi', 'resource_claim')),
    holder_uid      uuid        NOT NULL,
    holder_name     text        NOT NULL,
    namespace       text        NOT NULL,
    namespace_uid   uuid,
    container       text,
    node            text,
    resource        text        NOT NULL,
    units           integer     NOT NULL CHECK (units >= 1),
    device_ids      text[]      NOT NULL DEFAULT '{}',
    gpu_model       text,
    gpu_class       text,
    sharing_mode    text        NOT NULL CHECK (sharing_mode IN
                        ('exclusive', 'mig', 'time_slice', 'vgpu', 'passthrough', 'shared_endpoint')),
    profile         text,
    replicas        integer     CHECK (replicas >= 1),
    -- Capacity held in GPU-equivalents (units × per-unit fraction), exact; NULL while the inventory has no entry.
    fraction_num    bigint      CHECK (fraction_num > 0),
    fraction_den    bigint      CHECK (fraction_den > 0),
    started_at      timestamptz NOT NULL,
    ended_at        timestamptz,
    end_estimated   boolean     NOT NULL DEFAULT false,
    confidence      text        NOT NULL CHECK (confidence IN ('exact', 'modeled', 'estimated')),
    -- Set when the inventory had no entry for this profile: the fact is kept and flagged, never dropped.
    inventory_gap   text,
    labels          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, cluster_id, allocation_id),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK (ended_at IS NULL OR ended_at >= started_at),
    CHECK ((fraction_num IS NULL) = (fraction_den IS NULL))
);
CREATE INDEX allocation_intervals_by_time ON allocation_intervals (org_id, started_at, ended_at);
CREATE INDEX allocation_intervals_open ON allocation_intervals (org_id, cluster_id) WHERE ended_at IS NULL;

-- ---------------------------------------------------------------- people, machines, audit
CREATE TABLE users (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    user_id         uuid        NOT NULL,
    oidc_subject    text        NOT NULL,
    email           text,
    display_name    text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_login_at   timestamptz,
    PRIMARY KEY (org_id, user_id),
    UNIQUE (org_id, oidc_subject)
);

CREATE TABLE user_roles (
    org_id          uuid        NOT NULL,
    grant_id        uuid        NOT NULL,
    user_id         uuid        NOT NULL,
    role            text        NOT NULL CHECK (role IN ('admin', 'finance', 'department_manager', 'viewer')),
    -- Department managers are scoped to departments; the other roles are organization-wide.
    department_id   uuid,
    granted_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, grant_id),
    FOREIGN KEY (org_id, user_id) REFERENCES users (org_id, user_id),
    FOREIGN KEY (org_id, department_id) REFERENCES departments (org_id, department_id),
    CHECK ((role = 'department_manager') = (department_id IS NOT NULL))
);
CREATE UNIQUE INDEX user_roles_unique
    ON user_roles (org_id, user_id, role, COALESCE(department_id, '00000000-0000-0000-0000-000000000000'));

-- Only a hash of the secret is kept; the token is shown once at creation.
CREATE TABLE api_tokens (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    token_id        uuid        NOT NULL,
    scope           text        NOT NULL CHECK (scope IN ('admin', 'export', 'agent', 'join')),
    cluster_id      uuid,
    name            text        NOT NULL DEFAULT '',
    secret_sha256   bytea       NOT NULL CHECK (length(secret_sha256) = 32),
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text        NOT NULL,
    expires_at      timestamptz,
    revoked_at      timestamptz,
    last_used_at    timestamptz,
    PRIMARY KEY (org_id, token_id),
    UNIQUE (org_id, secret_sha256),
    FOREIGN KEY (org_id, cluster_id) REFERENCES clusters (org_id, cluster_id),
    CHECK ((scope IN ('agent', 'join')) = (cluster_id IS NOT NULL))
);

CREATE TABLE audit_log (
    org_id          uuid        NOT NULL,
    audit_id        uuid        NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    actor           text        NOT NULL,
    action          text        NOT NULL,
    target          text        NOT NULL DEFAULT '',
    reason          text        NOT NULL DEFAULT '',
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (org_id, audit_id)
);
CREATE INDEX audit_log_by_time ON audit_log (org_id, at);

-- ---------------------------------------------------------------- isolation and privileges
SELECT gpuledger_isolate(t) FROM unnest(ARRAY[
    'departments', 'tenants', 'clusters', 'namespaces', 'namespace_ownership',
    'gpu_classes', 'gpu_models', 'mig_profiles', 'vgpu_profiles', 'timeslice_policies',
    'allocation_events', 'allocation_intervals', 'users', 'user_roles', 'api_tokens', 'audit_log'
]::regclass[]) AS t;

SELECT gpuledger_append_only(t) FROM unnest(ARRAY['allocation_events', 'audit_log']::regclass[]) AS t;

GRANT SELECT, INSERT, UPDATE, DELETE ON
    departments, tenants, clusters, namespaces, gpu_classes, gpu_models, mig_profiles, vgpu_profiles,
    timeslice_policies, allocation_intervals, users, user_roles, api_tokens
TO gpuledger_app;
-- History is closed, not overwritten: no DELETE.
GRANT SELECT, INSERT, UPDATE ON namespace_ownership TO gpuledger_app;
GRANT SELECT, INSERT ON allocation_events, audit_log TO gpuledger_app;

RESET ROLE;
