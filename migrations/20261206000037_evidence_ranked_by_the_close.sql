-- The close writes a month's evidence index a part at a time (issue 31, the streamed close; docs/scaling.md): each
-- record at a provisional rank, then, in the same transaction, every record's ranks over the whole month and the
-- month's counts. The app may therefore set those columns — nothing else of a record, and nothing of a record
-- outside the transaction that wrote it is ever updated by the server (no reader sees an index before its close
-- commits). Still no DELETE.
SET LOCAL ROLE gpuledger_owner;

GRANT UPDATE (allocations, groups) ON evidence_months TO gpuledger_app;
GRANT UPDATE (start_rank, end_rank, fraction_rank, id_rank) ON evidence_allocations TO gpuledger_app;

RESET ROLE;
