#!/usr/bin/env bash
# Restores a backup made by backup.sh into an EMPTY database. See docs/operations.md "Restore".
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: restore.sh [--roles ROLES.sql] [--jobs N] DUMP [URL]

  DUMP              a gpuledger-<db>-<time>.dump written by backup.sh (pg_dump -Fc)
  URL               the target database (default: $DATABASE_URL). It must exist and be empty
                    (createdb gpuledger_restored); restore.sh never overwrites tables. Use a superuser login:
                    objects are restored with their owners (gpuledger_owner, gpuledger_directory).
  --roles FILE      apply the roles file of the same backup first (roles are cluster-wide; roles that already
                    exist are left as they are). Needed on a new cluster; without it the GPU Ledger roles must exist.
  --jobs N          restore with N parallel jobs (large databases); without it everything is restored in a
                    single transaction (all or nothing)

After a restore: point the server's DATABASE_URL at the database, set gpuledger_app's password if the roles came
from another cluster, and check /readyz (it compares the applied migrations with the binary's).
USAGE
}

roles_file= jobs= dump= url=${DATABASE_URL:-}
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --roles) [ $# -ge 2 ] || { usage >&2; exit 2; }; roles_file=$2; shift 2 ;;
    --jobs) [ $# -ge 2 ] || { usage >&2; exit 2; }; jobs=$2; shift 2 ;;
    -*) echo "restore.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) if [ -z "$dump" ]; then dump=$1; else url=$1; fi; shift ;;
  esac
done
[ -n "$dump" ] || { echo "restore.sh: no dump file given" >&2; usage >&2; exit 2; }
[ -n "$url" ] || { echo "restore.sh: no target database URL (argument or DATABASE_URL)" >&2; usage >&2; exit 2; }
[ -r "$dump" ] || { echo "restore.sh: cannot read $dump" >&2; exit 1; }
pg_restore --list "$dump" >/dev/null 2>&1 || { echo "restore.sh: $dump is not a pg_dump custom-format archive" >&2; exit 1; }
[ -z "$roles_file" ] || [ -r "$roles_file" ] || { echo "restore.sh: cannot read $roles_file" >&2; exit 1; }

q() { psql "$url" -X -qAt -v ON_ERROR_STOP=1 -c "$1"; }
db=$(q 'SELECT current_database()') || { echo "restore.sh: cannot connect to the target database" >&2; exit 1; }
existing=$(q "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p', 'v', 'm', 'S')")
if [ "$existing" != 0 ]; then
  echo "restore.sh: target database $db is not empty ($existing relations in schema public)." >&2
  echo "restore.sh: restore into a new database instead, e.g. createdb gpuledger_restored, then switch the server to it." >&2
  exit 1
fi

if [ -n "$roles_file" ]; then
  echo "restore.sh: applying roles from $roles_file (existing roles are kept)" >&2
  # pg_dumpall writes CREATE ROLE x; ALTER ROLE x WITH …: on a cluster that has the role already, CREATE fails
  # ("already exists") and is ignored; any other error stops the restore.
  errors=$(psql "$url" -X -q -f "$roles_file" 2>&1 >/dev/null | grep 'ERROR' | grep -v 'already exists' || true)
  if [ -n "$errors" ]; then
    echo "restore.sh: applying the roles failed:" >&2; echo "$errors" >&2; exit 1
  fi
fi
missing=$(q "SELECT string_agg(r, ', ') FROM unnest(ARRAY['gpuledger_owner', 'gpuledger_app', 'gpuledger_directory']) r
              WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r)")
if [ -n "$missing" ]; then
  echo "restore.sh: roles missing on this cluster: $missing. Pass the backup's roles file with --roles." >&2
  exit 1
fi

echo "restore.sh: restoring $dump into $db" >&2
opts=(--exit-on-error --no-password --dbname="$url")
if [ -n "$jobs" ]; then opts+=(--jobs="$jobs"); else opts+=(--single-transaction); fi
pg_restore "${opts[@]}" "$dump" || { echo "restore.sh: pg_restore failed; the target database may need to be dropped and recreated before retrying" >&2; exit 1; }

summary=$(q "SELECT format('%s tables, %s organizations, %s closed periods, latest migration %s',
                (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')),
                (SELECT count(*) FROM organizations),
                (SELECT count(*) FROM periods WHERE state = 'closed'),
                (SELECT max(version) FROM _sqlx_migrations WHERE success))" 2>/dev/null) \
  || summary="(summary unavailable: not a superuser, or not a GPU Ledger database)"
echo "restore.sh: restored $db: $summary" >&2
