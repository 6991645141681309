-- The ledger: versioned cost policies, quotas, periods and their close, frozen ledger lines, adjustments and
-- disputes. Money is NUMERIC, never float. See docs/database.md.

SET LOCAL ROLE gpuledger_owner;

-- ---------------------------------------------------------------- cost policy (versioned)
-- draft → approved (by finance) → superseded. The content of a non-draft version never changes (trigger).
CREATE TABLE cost_policies (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    version         integer     NOT NULL CHECK (version >= 1),
    state           text        NOT NULL DEFAULT 'draft' CHECK (state IN ('draft', 'approved', 'superseded')),
    -- First month it prices (first day of the month, UTC).
    effective_from  date        NOT NULL CHECK (extract(day FROM effective_from) = 1),
    currency        char(3)     NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    document        jsonb       NOT NULL,
    note            text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text        NOT NULL,
    approved_at     timestamptz,
    approved_by     text,
    superseded_at   timestamptz,
    PRIMARY KEY (org_id, version),
    CHECK ((state = 'draft') = (approved_at IS NULL))
);
-- One approved version per starting month; a newer approval for the same month supersedes the older.
CREATE UNIQUE INDEX cost_policies_one_approved ON cost_policies (org_id, effective_from) WHERE state = 'approved';

CREATE FUNCTION gpuledger_policy_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.state <> 'draft' THEN
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
CREATE TRIGGER policy_guard BEFORE UPDATE OR DELETE ON cost_policies
    FOR EACH ROW EXECUTE FUNCTION gpuledger_policy_guard();

-- ---------------------------------------------------------------- quotas (guaranteed capacity)
CREATE TABLE quotas (
    org_id          uuid        NOT NULL,
    quota_id        uuid        NOT NULL,
    tenant_id       uuid,
    department_id   uuid,
    gpu_class       text        NOT NULL,
    gpus            numeric(12, 4) NOT NULL CHECK (gpus >= 0),
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz,
    source          text        NOT NULL DEFAULT 'admin' CHECK (source IN ('admin', 'kueue')),
    -- For Kueue imports: the ClusterQueue (cluster and UID) it came from.
    source_ref      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text        NOT NULL,
    PRIMARY KEY (org_id, quota_id),
    FOREIGN KEY (org_id, tenant_id) REFERENCES tenants (org_id, tenant_id),
    FOREIGN KEY (org_id, department_id) REFERENCES departments (org_id, department_id),
    FOREIGN KEY (org_id, gpu_class) REFERENCES gpu_classes (org_id, gpu_class),
    CHECK ((tenant_id IS NULL) <> (department_id IS NULL)),
    CHECK (valid_to IS NULL OR valid_to > valid_from),
    EXCLUDE USING gist (org_id WITH =, (COALESCE(tenant_id, department_id)) WITH =, gpu_class WITH =,
                        tstzrange(valid_from, valid_to) WITH &&)
);

-- ---------------------------------------------------------------- periods and their close
-- A row exists once a period has been closed or is closing; a month without a row is open.
-- 'closing' is the lock: only the transaction that moved it from open (or from a stale closing) computes.
CREATE TABLE periods (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    period          date        NOT NULL CHECK (extract(day FROM period) = 1),
    state           text        NOT NULL CHECK (state IN ('open', 'closing', 'closed')),
    closing_by      text,
    closing_since   timestamptz,
    closed_at       timestamptz,
    closed_by       text,
    policy_version  integer,
    inventory_version text,
    previous_hash   text,
    content_hash    text,
    line_count      integer,
    total_amount    numeric(20, 2),
    currency        char(3),
    -- The evidence bundle as closed (gzip of its JSON): the facts may change later, the bundle does not.
    bundle_gz       bytea,
    PRIMARY KEY (org_id, period),
    CHECK ((state = 'closed') = (content_hash IS NOT NULL AND bundle_gz IS NOT NULL))
);

CREATE FUNCTION gpuledger_period_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.state = 'closed' THEN
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
CREATE TRIGGER period_guard BEFORE UPDATE OR DELETE ON periods
    FOR EACH ROW EXECUTE FUNCTION gpuledger_period_guard();

-- Lines of closed periods only (open periods are computed on demand). Immutable: a trigger refuses
-- UPDATE, DELETE and TRUNCATE.
CREATE TABLE ledger_lines (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    line_no         integer     NOT NULL CHECK (line_no >= 1),
    line_id         text        NOT NULL,
    department_id   uuid        NOT NULL,
    department      text        NOT NULL,
    tenant_id       uuid,
    tenant          text        NOT NULL,
    term            text        NOT NULL CHECK (term IN
                        ('guaranteed', 'borrowed', 'energy', 'service', 'overhead', 'credit', 'adjustment')),
    gpu_class       text        NOT NULL,
    quantity        numeric(24, 6) NOT NULL,
    unit            text        NOT NULL,
    rate            numeric(24, 12) NOT NULL,
    amount          numeric(20, 2) NOT NULL,
    currency        char(3)     NOT NULL,
    confidence      text        NOT NULL CHECK (confidence IN ('exact', 'modeled', 'estimated')),
    policy_version  integer     NOT NULL,
    evidence        text        NOT NULL,
    corrects        text,
    explanation     text        NOT NULL,
    -- The canonical CSV row the close hash covers, exactly as hashed.
    canonical       text        NOT NULL,
    PRIMARY KEY (org_id, period, line_id),
    UNIQUE (org_id, period, line_no),
    FOREIGN KEY (org_id, period) REFERENCES periods (org_id, period)
);
CREATE INDEX ledger_lines_by_tenant ON ledger_lines (org_id, tenant_id, period);

-- Credits (from accepted disputes, approved by finance) and late-data corrections waiting for, or landed in,
-- an open period. A credit lands in the first period closed after its approval.
CREATE TABLE adjustments (
    org_id          uuid        NOT NULL,
    adjustment_id   uuid        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('credit', 'late_data')),
    state           text        NOT NULL CHECK (state IN ('pending_approval', 'approved', 'applied', 'rejected')),
    tenant_id       uuid,
    department_id   uuid        NOT NULL,
    gpu_class       text        NOT NULL DEFAULT '',
    amount          numeric(20, 2) NOT NULL,
    currency        char(3)     NOT NULL,
    -- What it corrects: `PERIOD/line_id` of a closed line.
    corrects        text        NOT NULL,
    dispute_id      uuid,
    reason          text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text        NOT NULL,
    approved_at     timestamptz,
    approved_by     text,
    applied_period  date,
    PRIMARY KEY (org_id, adjustment_id),
    FOREIGN KEY (org_id, tenant_id) REFERENCES tenants (org_id, tenant_id),
    FOREIGN KEY (org_id, department_id) REFERENCES departments (org_id, department_id),
    CHECK ((state = 'applied') = (applied_period IS NOT NULL))
);

-- ---------------------------------------------------------------- disputes
CREATE TABLE disputes (
    org_id          uuid        NOT NULL,
    dispute_id      uuid        NOT NULL,
    number          integer     NOT NULL,
    period          date        NOT NULL,
    line_ids        text[]      NOT NULL CHECK (cardinality(line_ids) >= 1),
    state           text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'accepted', 'rejected')),
    reason          text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 4000),
    opened_by       text        NOT NULL,
    opened_at       timestamptz NOT NULL DEFAULT now(),
    resolved_by     text,
    resolved_at     timestamptz,
    resolution      text,
    credit_amount   numeric(20, 2),
    adjustment_id   uuid,
    PRIMARY KEY (org_id, dispute_id),
    UNIQUE (org_id, number),
    FOREIGN KEY (org_id, period) REFERENCES periods (org_id, period),
    CHECK ((state = 'open') = (resolved_at IS NULL))
);

-- Every transition and comment, with who, when and why: append-only.
CREATE TABLE dispute_events (
    org_id          uuid        NOT NULL,
    event_id        uuid        NOT NULL,
    dispute_id      uuid        NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    actor           text        NOT NULL,
    action          text        NOT NULL CHECK (action IN
                        ('opened', 'commented', 'accepted', 'rejected', 'credit_approved', 'credit_rejected')),
    body            text        NOT NULL DEFAULT '',
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (org_id, event_id),
    FOREIGN KEY (org_id, dispute_id) REFERENCES disputes (org_id, dispute_id)
);
CREATE INDEX dispute_events_by_dispute ON dispute_events (org_id, dispute_id, at);

-- ---------------------------------------------------------------- isolation and privileges
SELECT gpuledger_isolate(t) FROM unnest(ARRAY[
    'cost_policies', 'quotas', 'periods', 'ledger_lines', 'adjustments', 'disputes', 'dispute_events'
]::regclass[]) AS t;

SELECT gpuledger_append_only(t) FROM unnest(ARRAY['ledger_lines', 'dispute_events']::regclass[]) AS t;

GRANT SELECT, INSERT, UPDATE, DELETE ON cost_policies, quotas TO gpuledger_app;
GRANT SELECT, INSERT, UPDATE ON periods, adjustments, disputes TO gpuledger_app;
GRANT SELECT, INSERT ON ledger_lines, dispute_events TO gpuledger_app;

RESET ROLE;
