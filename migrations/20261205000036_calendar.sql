-- The organization's calendar (issue 35 item 1). A period `YYYY-MM` is the calendar month of the organization's IANA
-- time zone (default UTC): local midnight of the 1st to local midnight of the next 1st. The zone database is
-- PostgreSQL's own (`AT TIME ZONE`; the server validates names against `pg_timezone_names`).
--
-- A closed month keeps the instants it closed with: `periods.time_zone`, `starts_at`, `ends_at` and, for the first
-- month after a change of zone, `continues_from` (where the previous closed month ended, when that is not this
-- month's local midnight: its charges begin there, so no hour is charged twice or lost). Months closed before this
-- migration keep NULL there and are read as UTC months, which they were.
SET LOCAL ROLE gpuledger_owner;

ALTER TABLE org_settings ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC';
ALTER TABLE org_settings
    ADD CONSTRAINT org_settings_time_zone_ok CHECK (length(time_zone) BETWEEN 1 AND 64 AND time_zone ~ '^[A-Za-z0-9/_+-]+$');

-- Columns, then named constraints: Citus refuses ADD COLUMN with an unnamed constraint on a distributed table.
ALTER TABLE periods
    ADD COLUMN time_zone      text,
    ADD COLUMN starts_at      timestamptz,
    ADD COLUMN ends_at        timestamptz,
    ADD COLUMN continues_from timestamptz;
-- One constraint per statement: Citus refuses ADD CONSTRAINT with other subcommands.
ALTER TABLE periods ADD CONSTRAINT periods_time_zone_ok CHECK (length(time_zone) BETWEEN 1 AND 64);
ALTER TABLE periods
    ADD CONSTRAINT periods_bounds_ok CHECK (starts_at IS NULL OR (ends_at > starts_at AND time_zone IS NOT NULL));
ALTER TABLE periods
    ADD CONSTRAINT periods_continues_ok CHECK (continues_from IS NULL OR (starts_at IS NOT NULL AND continues_from < ends_at));

RESET ROLE;
