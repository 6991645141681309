-- The open month's "to date" figures (issue 21's forecast): computed by the read model's worker with each
-- provisional snapshot — the month's ledger with allocations and quotas cut at the snapshot's time — so the forecast
-- is a lookup, not two ledger computations per request. {"departments": {id: amount}, "tenants": {id: amount}}.
SET LOCAL ROLE gpuledger_owner;
ALTER TABLE read_months ADD COLUMN to_date jsonb;
RESET ROLE;
