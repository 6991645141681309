#!/usr/bin/env bash
# Telemetry retention: drops whole monthly partitions of the GPU-hours (telemetry_gpu_hours; and the tables before it:
# telemetry_hours, telemetry_windows, telemetry_rollups) older than the kept months, and strips the full-resolution
# blocks out of GPU-hour months older than the kept days (the hours' sums stay). Dry run unless --apply. Touches nothing else: not the default partition, not any other table, never money (closed periods keep
# their evidence bundles in periods.bundle_gz). See docs/operations.md "Telemetry retention".
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: telemetry-retention.sh [--keep-months N] [--full-resolution-days D] [--now YYYY-MM] [--include-unclosed]
                              [--apply] [URL]

  URL                 the database, as its owner or a superuser (default: $DATABASE_URL)
  --keep-months N     months kept before the current one (default 13: a year and a month for year-over-year
                      comparisons). A partition is dropped when its whole range ends on or before the first day of
                      (current month − N months). Applies to telemetry_gpu_hours, telemetry_hours and
                      telemetry_rollups.
  --full-resolution-days D
                      days of full-resolution windows kept (default 62: the month before last stays whole through
                      its close and disputes). A month whose whole range ends on or before today − D days has its
                      blocks stripped (telemetry_gpu_hours: block set to NULL, then the partition rewritten by
                      VACUUM FULL) or, for telemetry_windows, is dropped. Nothing reads blocks for money: each
                      GPU-hour keeps its exact sums.
  --now YYYY-MM       the current month (default: this month, UTC)
  --include-unclosed  also drop months that an organization with telemetry in them has not closed. Without it such
                      a partition is kept: the open ledger of that month still reads its energy.
  --apply             drop (and strip) the listed partitions (default: dry run, nothing changes)

Prints one line per partition (name, range, estimated rows, size, decision). Exit status 0 when the plan ran
(applied or not), 1 on an error (e.g. a lock not obtained within 5 s; rerun later), 2 on wrong usage.
USAGE
}

keep=13 full_days=62 now= apply=no include_unclosed=no url=${DATABASE_URL:-}
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --keep-months) [ $# -ge 2 ] || { usage >&2; exit 2; }; keep=$2; shift 2 ;;
    --full-resolution-days) [ $# -ge 2 ] || { usage >&2; exit 2; }; full_days=$2; shift 2 ;;
    --now) [ $# -ge 2 ] || { usage >&2; exit 2; }; now=$2; shift 2 ;;
    --include-unclosed) include_unclosed=yes; shift ;;
    --apply) apply=yes; shift ;;
    -*) echo "telemetry-retention.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) url=$1; shift ;;
  esac
done
[ -n "$url" ] || { echo "telemetry-retention.sh: no database URL (argument or DATABASE_URL)" >&2; usage >&2; exit 2; }
[[ $keep =~ ^[0-9]+$ ]] && [ "$keep" -ge 1 ] || { echo "telemetry-retention.sh: --keep-months must be a whole number ≥ 1" >&2; exit 2; }
[[ $full_days =~ ^[0-9]+$ ]] && [ "$full_days" -ge 1 ] || { echo "telemetry-retention.sh: --full-resolution-days must be a whole number ≥ 1" >&2; exit 2; }
today=$(date -u +%Y-%m-%d)
[ -n "$now" ] && today="$now-01"
[ -z "$now" ] && now=$(date -u +%Y-%m)
[[ $now =~ ^[0-9]{4}-(0[1-9]|1[0-2])$ ]] || { echo "telemetry-retention.sh: --now must be YYYY-MM" >&2; exit 2; }

export PGTZ=UTC PGOPTIONS='-c client_min_messages=warning'
plan=$(psql "$url" -X -qAt -F '|' -v ON_ERROR_STOP=1 -v now="$now-01" -v keep="$keep" -v include_unclosed="$include_unclosed" \
  -v today="$today" -v full_days="$full_days" <<'SQL'
SELECT to_regclass('public.telemetry_rollups') IS NOT NULL AS ok \gset
\if :ok
\else
\echo 'ERROR|telemetry_rollups does not exist: not a GPU Ledger database, or not migrated'
\quit
\endif
CREATE FUNCTION pg_temp.gl_retention_plan(p_cutoff timestamptz, p_full_cutoff timestamptz, p_include_unclosed boolean)
RETURNS TABLE (part text, from_ts timestamptz, to_ts timestamptz, est_rows bigint, bytes bigint, decision text, reason text)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    orgs uuid[];
    o uuid;
    unclosed integer;
    blocks_left boolean;
BEGIN
    FOR r IN SELECT c.oid, c.relname::text AS name, pg_get_expr(c.relpartbound, c.oid) AS bound, c.reltuples,
                    i.inhparent::regclass::text AS parent
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent IN (SELECT to_regclass(t) FROM unnest(ARRAY['public.telemetry_rollups',
                                       'public.telemetry_hours', 'public.telemetry_windows',
                                       'public.telemetry_gpu_hours']) t)
              ORDER BY c.relname LOOP
        part := r.name; est_rows := CASE WHEN r.reltuples >= 0 THEN r.reltuples::bigint END; bytes := pg_total_relation_size(r.oid);
        from_ts := NULL; to_ts := NULL;
        IF r.bound = 'DEFAULT' THEN
            decision := 'keep'; reason := 'default partition (never dropped)';
            RETURN NEXT; CONTINUE;
        END IF;
        from_ts := substring(r.bound FROM 'FROM \(''([^'']*)''\)')::timestamptz;
        to_ts := substring(r.bound FROM 'TO \(''([^'']*)''\)')::timestamptz;
        IF r.name !~ '^telemetry_(rollups|hours|windows|gpu_hours)_[0-9]{6}$' OR from_ts IS NULL OR to_ts IS NULL THEN
            decision := 'keep'; reason := 'not a monthly partition made by the server';
        ELSIF r.parent = 'telemetry_windows' THEN
            -- Full resolution: nothing that prices reads it (the hourly tier keeps the sums), so only its age counts.
            IF to_ts > p_full_cutoff THEN
                decision := 'keep'; reason := 'full resolution within the kept days';
            ELSE
                decision := 'drop'; reason := 'full resolution older than the kept days (the hourly tier keeps the sums)';
            END IF;
        ELSIF to_ts > p_cutoff AND r.parent = 'telemetry_gpu_hours' AND to_ts <= p_full_cutoff THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE block IS NOT NULL)', r.name) INTO blocks_left;
            IF blocks_left THEN
                decision := 'strip'; reason := 'full resolution older than the kept days: blocks removed, the sums kept';
            ELSE
                decision := 'keep'; reason := 'within the kept months (no full resolution left in it)';
            END IF;
        ELSIF to_ts > p_cutoff THEN
            decision := 'keep'; reason := 'within the kept months';
        ELSE
            -- Organizations with rows in it (a loose scan of the primary key, which starts with org_id); each must
            -- have closed that month, read as that organization (RLS).
            EXECUTE format('WITH RECURSIVE o AS (SELECT (SELECT org_id FROM %I ORDER BY org_id LIMIT 1) AS id
                              UNION ALL SELECT (SELECT org_id FROM %I WHERE org_id > o.id ORDER BY org_id LIMIT 1)
                                FROM o WHERE o.id IS NOT NULL)
                            SELECT coalesce(array_agg(id), ''{}'') FROM o WHERE id IS NOT NULL', r.name, r.name) INTO orgs;
            unclosed := 0;
            FOREACH o IN ARRAY orgs LOOP
                PERFORM set_config('app.org_id', o::text, true);
                IF NOT EXISTS (SELECT 1 FROM periods p WHERE p.org_id = o AND p.state = 'closed'
                                  AND p.period = (date_trunc('month', from_ts AT TIME ZONE 'UTC'))::date) THEN
                    unclosed := unclosed + 1;
                END IF;
            END LOOP;
            PERFORM set_config('app.org_id', '', true);
            IF unclosed = 0 THEN
                decision := 'drop'; reason := format('older than the kept months; %s organization(s), all closed', cardinality(orgs));
            ELSIF p_include_unclosed THEN
                decision := 'drop'; reason := format('older than the kept months; %s of %s organization(s) have not closed it (--include-unclosed)', unclosed, cardinality(orgs));
            ELSE
                decision := 'keep'; reason := format('older than the kept months, but %s of %s organization(s) have not closed it', unclosed, cardinality(orgs));
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
SELECT 'CUTOFF', (date_trunc('month', :'now'::date) - make_interval(months => :keep))::date;
SELECT 'PART', part, coalesce(to_char(from_ts, 'YYYY-MM-DD'), ''), coalesce(to_char(to_ts, 'YYYY-MM-DD'), ''),
       coalesce(est_rows::text, '?'), bytes, decision, reason
  FROM pg_temp.gl_retention_plan((date_trunc('month', :'now'::date) - make_interval(months => :keep))::timestamptz,
                                 (:'today'::date - :full_days::int)::timestamptz, :'include_unclosed' = 'yes');
SELECT 'DEFAULT_OLD', count(*) FROM telemetry_rollups_default
 WHERE window_start < (date_trunc('month', :'now'::date) - make_interval(months => :keep))::timestamptz;
SQL
) || { echo "telemetry-retention.sh: could not read the partitions" >&2; exit 1; }

if grep -q '^ERROR|' <<<"$plan"; then grep '^ERROR|' <<<"$plan" | cut -d'|' -f2- >&2; exit 1; fi
cutoff=$(grep '^CUTOFF|' <<<"$plan" | cut -d'|' -f2)
echo "telemetry retention: now $now, keeping $keep months: partitions ending on or before $cutoff are dropped"
drops=() strips=() freed=0
while IFS='|' read -r _ part from to rows bytes decision reason; do
  range="[$from, $to)"; [ -z "$from" ] && range="(default)"
  printf '  %-26s %-26s ~%10s rows %12s bytes  %-4s  %s\n' "$part" "$range" "$rows" "$bytes" "$decision" "$reason"
  if [ "$decision" = drop ]; then drops+=("$part"); freed=$((freed + bytes)); fi
  if [ "$decision" = strip ]; then strips+=("$part"); fi
done < <(grep '^PART|' <<<"$plan")
default_old=$(grep '^DEFAULT_OLD|' <<<"$plan" | cut -d'|' -f2)
if [ "${default_old:-0}" != 0 ]; then
  echo "note: $default_old rows older than $cutoff sit in telemetry_rollups_default and are not removed; create their month's" \
       "partition (SELECT gpuledger_ensure_telemetry_partition('YYYY-MM-01')) to move them there, then rerun"
fi
if [ ${#drops[@]} -eq 0 ] && [ ${#strips[@]} -eq 0 ]; then echo "nothing to drop"; exit 0; fi
if [ "$apply" = no ]; then
  [ ${#drops[@]} -eq 0 ] || echo "dry run: ${#drops[@]} partition(s) would be dropped ($freed bytes): ${drops[*]}; rerun with --apply to drop them"
  [ ${#strips[@]} -eq 0 ] || echo "dry run: ${#strips[@]} partition(s) would have their full resolution stripped: ${strips[*]}; rerun with --apply"
  exit 0
fi
for part in "${strips[@]}"; do
  [[ $part =~ ^telemetry_gpu_hours_[0-9]{6}$ ]] || { echo "telemetry-retention.sh: refusing unexpected name $part" >&2; exit 1; }
  # The blocks go, the sums stay; VACUUM FULL rewrites the month without the dead row versions (it locks only this
  # old month's partition, which nothing prices from: a late window for it is refused anyway once stripped).
  psql "$url" -X -q -v ON_ERROR_STOP=1 -c "SET lock_timeout = '5s'" \
    -c "BEGIN" -c "UPDATE public.$part SET block = NULL WHERE block IS NOT NULL" \
    -c "SELECT gpuledger_telemetry_coverage_retention(lower(r), upper(r), false) FROM (SELECT daterange(
          substring(pg_get_expr(relpartbound, oid) FROM 'FROM \(''([^'']*)''\)')::timestamptz::date,
          substring(pg_get_expr(relpartbound, oid) FROM 'TO \(''([^'']*)''\)')::timestamptz::date) r
          FROM pg_class WHERE oid = 'public.$part'::regclass) x" -c "COMMIT" -c "VACUUM FULL public.$part" \
    || { echo "telemetry-retention.sh: stripping $part failed (lock not obtained within 5 s? rerun later)" >&2; exit 1; }
  echo "stripped $part"
done
for part in "${drops[@]}"; do
  [[ $part =~ ^telemetry_(rollups|hours|windows|gpu_hours)_[0-9]{6}$ ]] || { echo "telemetry-retention.sh: refusing unexpected name $part" >&2; exit 1; }
  parent=${part%_*}
  # Dropping a partition locks the parent briefly (ingest waits); give up after 5 s rather than queue behind a long
  # query and block ingest behind us. The check and the drop are one transaction.
  psql "$url" -X -q -v ON_ERROR_STOP=1 -c "SET lock_timeout = '5s'" -c "DO \$\$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass('public.$part')
                      AND inhparent = 'public.$parent'::regclass) THEN
        RAISE EXCEPTION '$part is no longer a partition of $parent';
    END IF;
    IF '$parent' = 'telemetry_gpu_hours' THEN
        -- The coverage of the dropped month goes with it.
        PERFORM gpuledger_telemetry_coverage_retention(lower(r), upper(r), true) FROM (SELECT daterange(
            substring(pg_get_expr(relpartbound, oid) FROM 'FROM \(''([^'']*)''\)')::timestamptz::date,
            substring(pg_get_expr(relpartbound, oid) FROM 'TO \(''([^'']*)''\)')::timestamptz::date) r
            FROM pg_class WHERE oid = 'public.$part'::regclass) x;
    END IF;
    DROP TABLE public.$part;
END
\$\$" || { echo "telemetry-retention.sh: dropping $part failed (lock not obtained within 5 s? rerun later)" >&2; exit 1; }
  echo "dropped $part"
done
echo "applied: ${#drops[@]} partition(s) dropped ($freed bytes), ${#strips[@]} stripped of full resolution"
