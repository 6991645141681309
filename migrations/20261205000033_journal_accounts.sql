-- Journal entries out (issue 35 item 3). The month's journal (`GET /api/v1/exports/journal.csv`) debits each
-- department's cost centre and GL account and credits the platform's own; finance keeps those codes here. All four
-- are optional (a department without one still gets its journal row, with an empty account and a finding) and are
-- one line of text, 1 to 64 characters, no control characters, trimmed — what the API's `Line<64>` accepts, held
-- again by the table so that no other writer can store what the journal would then write into a CSV cell.
-- No new table: both tables keep their row-level security (organization isolation; departments also keep their
-- department scope, so a department-scoped caller reads only its own departments' accounts).
SET LOCAL ROLE gpuledger_owner;

-- The checks are written out on each column (no helper function: a function in a CHECK would have to exist on
-- every Citus worker too).
ALTER TABLE departments
    ADD COLUMN cost_center text CONSTRAINT departments_cost_center_ok
        CHECK (char_length(cost_center) BETWEEN 1 AND 64 AND cost_center = btrim(cost_center)
                                  AND cost_center !~ '[\u0001-\u001f\u007f-\u009f]'),
    ADD COLUMN gl_account  text CONSTRAINT departments_gl_account_ok
        CHECK (char_length(gl_account) BETWEEN 1 AND 64 AND gl_account = btrim(gl_account)
                                  AND gl_account !~ '[\u0001-\u001f\u007f-\u009f]');

ALTER TABLE org_settings
    ADD COLUMN platform_cost_center text CONSTRAINT org_settings_platform_cost_center_ok
        CHECK (char_length(platform_cost_center) BETWEEN 1 AND 64 AND platform_cost_center = btrim(platform_cost_center)
                                  AND platform_cost_center !~ '[\u0001-\u001f\u007f-\u009f]'),
    ADD COLUMN platform_gl_account  text CONSTRAINT org_settings_platform_gl_account_ok
        CHECK (char_length(platform_gl_account) BETWEEN 1 AND 64 AND platform_gl_account = btrim(platform_gl_account)
                                  AND platform_gl_account !~ '[\u0001-\u001f\u007f-\u009f]');

RESET ROLE;
