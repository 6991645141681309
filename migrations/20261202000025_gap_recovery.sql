-- Agent gaps a re-list brought back (issue 23): when an agent reports that a gap's dropped facts were derived again
-- (a `gap_recovered` fact), ingest marks that gap's findings recovered and writes the per-kind counts into their
-- `details`. Only that column: a finding's identity, kind and months stay as first written, and findings are never
-- deleted by the application.
SET LOCAL ROLE gpuledger_owner;
GRANT UPDATE (details) ON data_quality_findings TO gpuledger_app;
RESET ROLE;
