-- Renaming and retiring departments and tenants (issue 19). A rename changes the name from now on; closed months
-- keep the names frozen in their evidence bundles, and `renames` keeps every former name with who and when (append
-- only). A retired department or tenant stays in history; nothing new is given to it from `retired_at` on.

SET LOCAL ROLE gpuledger_owner;

ALTER TABLE departments ADD COLUMN retired_at timestamptz;
ALTER TABLE tenants ADD COLUMN retired_at timestamptz;

CREATE TABLE renames (
    org_id          uuid        NOT NULL REFERENCES organizations (org_id),
    rename_id       uuid        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('department', 'tenant')),
    object_id       uuid        NOT NULL,
    old_name        text        NOT NULL,
    new_name        text        NOT NULL,
    renamed_at      timestamptz NOT NULL DEFAULT now(),
    renamed_by      text        NOT NULL,
    PRIMARY KEY (org_id, rename_id)
);
CREATE INDEX renames_object ON renames (org_id, object_id, renamed_at);

SELECT gpuledger_isolate('renames'::regclass);
SELECT gpuledger_append_only('renames'::regclass);
GRANT SELECT, INSERT ON renames TO gpuledger_app;

RESET ROLE;
