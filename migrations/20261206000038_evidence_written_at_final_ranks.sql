-- The close now writes each evidence record once, at its final ranks over the whole month (the close's cursor ranks
-- them in PostgreSQL; docs/scaling.md, "The streamed close"): setting every record's ranks with one UPDATE at the end
-- took 49 s for a 10,000-GPU month. The app no longer updates a record at all; it still sets the month's counts.
SET LOCAL ROLE gpuledger_owner;

REVOKE UPDATE (start_rank, end_rank, fraction_rank, id_rank) ON evidence_allocations FROM gpuledger_app;

RESET ROLE;
