#!/usr/bin/env bash
# Backs up GPU Ledger's database: the database itself (pg_dump custom format) and the cluster's roles (pg_dumpall
# --roles-only: roles are global objects that pg_dump leaves out, and every table is owned by gpuledger_owner).
# See docs/operations.md "Backups".
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: backup.sh [--out DIR] [--no-role-passwords] [--no-roles] [URL]

  URL                  the database to back up, e.g. postgres://postgres@db:5432/gpuledger (default: $DATABASE_URL).
                       Use a superuser, or a login with BYPASSRLS that can read every table (PostgreSQL 14+:
                       GRANT pg_read_all_data): row-level security is FORCEd even on the owner, and pg_dump refuses
                       (rather than dumping a part) when RLS would hide rows.
  --out DIR            where to write (default: .). Files are named by database and UTC time:
                         gpuledger-<db>-<YYYYmmddTHHMMSSZ>.dump        pg_dump -Fc of the database
                         gpuledger-<db>-<YYYYmmddTHHMMSSZ>.roles.sql   pg_dumpall --roles-only
                         gpuledger-<db>-<YYYYmmddTHHMMSSZ>.sha256      checksums of both
  --no-role-passwords  dump roles without passwords (a non-superuser login cannot read them; managed services)
  --no-roles           skip the roles file

Exits non-zero, leaving no partial file under the final names, when any step fails.
Restore with restore.sh.
USAGE
}

out=. url=${DATABASE_URL:-} roles=yes role_opts=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; out=$2; shift 2 ;;
    --no-role-passwords) role_opts+=(--no-role-passwords); shift ;;
    --no-roles) roles=no; shift ;;
    -*) echo "backup.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) url=$1; shift ;;
  esac
done
[ -n "$url" ] || { echo "backup.sh: no database URL (argument or DATABASE_URL)" >&2; usage >&2; exit 2; }
for tool in pg_dump pg_dumpall pg_restore psql sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "backup.sh: $tool not found (install the PostgreSQL client, same major version as the server or newer)" >&2; exit 1; }
done
mkdir -p "$out"

db=$(psql "$url" -X -qAt -v ON_ERROR_STOP=1 -c 'SELECT current_database()') \
  || { echo "backup.sh: cannot connect to the database" >&2; exit 1; }
stamp=$(date -u +%Y%m%dT%H%M%SZ)
base="$out/gpuledger-$db-$stamp"
tmp=$(mktemp -d "$out/.backup.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "backup.sh: dumping database $db" >&2
pg_dump --format=custom --compress=6 --no-password --file="$tmp/db.dump" --dbname="$url" \
  || { echo "backup.sh: pg_dump failed" >&2; exit 1; }
# A cheap integrity check: the archive's table of contents must be readable.
pg_restore --list "$tmp/db.dump" >/dev/null || { echo "backup.sh: the dump is not readable" >&2; exit 1; }
files=("$base.dump")
if [ "$roles" = yes ]; then
  echo "backup.sh: dumping roles (cluster-wide)" >&2
  pg_dumpall --roles-only "${role_opts[@]}" --no-password --dbname="$url" --file="$tmp/roles.sql" \
    || { echo "backup.sh: pg_dumpall --roles-only failed (a non-superuser login needs --no-role-passwords)" >&2; exit 1; }
  files+=("$base.roles.sql")
fi
mv "$tmp/db.dump" "$base.dump"
[ "$roles" = yes ] && mv "$tmp/roles.sql" "$base.roles.sql"
(cd "$out" && sha256sum "${files[@]##*/}") > "$base.sha256"
for f in "${files[@]}" "$base.sha256"; do echo "$f"; done
echo "backup.sh: done ($(du -ch "${files[@]}" | tail -1 | cut -f1))" >&2
