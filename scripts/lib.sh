# Shared helpers for the project's scripts. Sourced, never run.
set -euo pipefail

gl_say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
gl_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

gl_is_root() { [ "$(id -u)" = 0 ]; }

# apt-get install, when we are root on Debian/Ubuntu; otherwise say what to install.
gl_apt_install() { # packages...
  if gl_is_root && command -v apt-get >/dev/null 2>&1; then
    gl_say "installing $* (apt-get)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
        || gl_die "apt-get install $* failed"
    fi
  else
    gl_die "missing: $*. Install them with your package manager (Debian/Ubuntu: sudo apt-get install $*)"
  fi
}

# PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or in /usr/lib/postgresql/*/bin.
gl_find_pg_bin() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"; return 0
  fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$d" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  return 1
}

gl_ensure_postgres() {
  if ! gl_find_pg_bin >/dev/null; then
    gl_apt_install postgresql
    gl_find_pg_bin >/dev/null || gl_die "PostgreSQL installed but initdb not found"
  fi
  local bin; bin=$(gl_find_pg_bin)
  case ":$PATH:" in *":$bin:"*) ;; *) export PATH="$bin:$PATH" ;; esac
  if gl_is_root && ! id postgres >/dev/null 2>&1; then
    gl_die "PostgreSQL refuses to run as root and there is no 'postgres' OS user; create one (useradd --system postgres) or run as a non-root user"
  fi
}

gl_ensure_tools() {
  command -v cargo >/dev/null 2>&1 || gl_die "cargo not found: install Rust (https://rustup.rs), version 1.95 or newer"
  command -v curl >/dev/null 2>&1 || gl_apt_install curl
  gl_ensure_postgres
}

# Builds the binaries the scripts run with exactly scripts/test's selection (`--workspace --all-targets`): building
# only some packages' binaries resolves features without the tests' dev-dependencies, and cargo then builds sqlx,
# leptos and the server a second time (~2.5 min and ~2 GB on CI each time) — after scripts/test's own build a no-op.
gl_build_workspace() {
  cargo build --quiet --workspace --all-targets "$@" || gl_die "cargo build --workspace --all-targets failed"
}

gl_ensure_nextest() {
  if ! cargo nextest --version >/dev/null 2>&1; then
    gl_say "installing cargo-nextest (cargo install, once)"
    cargo install cargo-nextest --locked >/dev/null || gl_die "cargo install cargo-nextest failed"
  fi
}

# promtool (Debian/Ubuntu package `prometheus`) for the recording rules' unit tests in deploy/prometheus.
gl_ensure_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  if gl_is_root && command -v apt-get >/dev/null 2>&1; then
    gl_apt_install prometheus
  else
    gl_die "missing: promtool (the Prometheus rules' unit tests need it). Debian/Ubuntu: sudo apt-get install prometheus; elsewhere: the prometheus release archive from https://prometheus.io/download/ has it"
  fi
  command -v promtool >/dev/null 2>&1 || gl_die "prometheus installed but no promtool found"
}

# Runs `promtool test rules` on every promtool test file (a YAML file with `rule_files:`) under deploy/.
gl_promtool_tests() {
  local files
  files=$(grep -rl --include='*.yml' --include='*.yaml' '^rule_files:' deploy | sort)
  [ -n "$files" ] || gl_die "no promtool test files under deploy/"
  # shellcheck disable=SC2086
  promtool test rules $files || gl_die "promtool test rules failed"
}

# Headless Chromium and its WebDriver (the login end-to-end tests drive a real browser).
gl_find_chromium() {
  local c
  for c in chromium chromium-browser; do command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }; done
  [ -x /usr/bin/chromium ] && { echo /usr/bin/chromium; return 0; }
  return 1
}
gl_find_chromedriver() {
  command -v chromedriver >/dev/null 2>&1 && { command -v chromedriver; return 0; }
  local c
  for c in /usr/bin/chromedriver /usr/lib/chromium/chromedriver; do [ -x "$c" ] && { echo "$c"; return 0; }; done
  return 1
}
gl_ensure_chromium() {
  if gl_find_chromium >/dev/null && gl_find_chromedriver >/dev/null; then return 0; fi
  if gl_is_root && command -v apt-get >/dev/null 2>&1; then
    gl_apt_install chromium chromium-driver
  else
    gl_die "missing: chromium and chromedriver (the login end-to-end tests drive a headless browser). Debian/Ubuntu: sudo apt-get install chromium chromium-driver"
  fi
  gl_find_chromium >/dev/null || gl_die "chromium installed but no chromium binary found"
  gl_find_chromedriver >/dev/null || gl_die "chromium-driver installed but no chromedriver found"
}

# The OpenID provider the login end-to-end tests run (e2e/oidc: Node 20+, oidc-provider from package-lock.json).
gl_ensure_oidc_provider() {
  local dir; dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/e2e/oidc"
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
    || gl_die "node and npm not found: the login end-to-end tests need Node.js 20 or newer (https://nodejs.org, or Debian/Ubuntu: apt-get install nodejs npm)"
  local major; major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  [ "$major" -ge 20 ] || gl_die "Node.js $(node --version) is too old: the login end-to-end tests need Node.js 20 or newer"
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
    gl_say "installing the test OpenID provider (npm ci in e2e/oidc)"
    (cd "$dir" && npm ci --no-audit --no-fund >/dev/null) || gl_die "npm ci in $dir failed"
    touch "$dir/node_modules"
  fi
}

# The outside clients the export tests run (python-odata, the FinOps Foundation's focus-validator 1.0.0, which
# wants multimethod<2), in a virtual environment of their own; exports GL_PYTHON, its interpreter.
gl_ensure_python_clients() {
  command -v python3 >/dev/null 2>&1 || gl_apt_install python3 python3-venv
  local venv="${XDG_CACHE_HOME:-$HOME/.cache}/gpuledger-python-clients"
  if ! "$venv/bin/python" -c 'import odata, focus_validator' >/dev/null 2>&1; then
    gl_say "installing python-odata and focus-validator (pip, once, in $venv)"
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null 2>&1 || { gl_apt_install python3-venv; python3 -m venv "$venv" >/dev/null; } \
      || gl_die "python3 -m venv $venv failed"
    "$venv/bin/pip" install -q 'python-odata==0.8.1' 'focus-validator==1.0.0' 'multimethod<2' >/dev/null \
      || gl_die "pip install python-odata focus-validator failed (needs PyPI)"
  fi
  export GL_PYTHON="$venv/bin/python"
}

# Schemathesis and openapi-spec-validator (issue 33), pinned, in a virtual environment of their own: the one the
# acceptance check uses when it is there (same versions), else installed once. Exports GL_SCHEMATHESIS_BIN.
GL_SCHEMATHESIS_PINS=('schemathesis==4.32.5' 'openapi-spec-validator==0.9.0')
gl_ensure_schemathesis() {
  local venv
  for venv in "${XDG_CACHE_HOME:-$HOME/.cache}/glcheck-schemathesis-4.32.5" \
              "${XDG_CACHE_HOME:-$HOME/.cache}/gpuledger-schemathesis"; do
    if [ -x "$venv/bin/schemathesis" ] && [ -x "$venv/bin/openapi-spec-validator" ] \
      && "$venv/bin/schemathesis" --version 2>/dev/null | grep -q '4\.32\.5'; then
      export GL_SCHEMATHESIS_BIN="$venv/bin"
      return
    fi
  done
  command -v python3 >/dev/null 2>&1 || gl_apt_install python3 python3-venv
  gl_say "installing ${GL_SCHEMATHESIS_PINS[*]} (pip, once, in $venv)"
  rm -rf "$venv"
  python3 -m venv "$venv" >/dev/null 2>&1 || { gl_apt_install python3-venv; python3 -m venv "$venv" >/dev/null; } \
    || gl_die "python3 -m venv $venv failed"
  "$venv/bin/pip" install -q "${GL_SCHEMATHESIS_PINS[@]}" >/dev/null \
    || gl_die "pip install ${GL_SCHEMATHESIS_PINS[*]} failed (needs PyPI, or a venv with them at $venv)"
  export GL_SCHEMATHESIS_BIN="$venv/bin"
}

# The deployment linters (issue 9): kubectl (renders the Kustomize overlays), and kubernetes-validate and checkov in
# a virtual environment of their own (pinned; separate from the export tests' clients). Exports GL_DEPLOY_BIN.
GL_DEPLOY_TOOLS_PINS=('kubernetes-validate==1.37.0' 'checkov==3.3.30')
gl_ensure_deploy_tools() {
  if ! command -v kubectl >/dev/null 2>&1; then
    if gl_is_root && command -v apt-get >/dev/null 2>&1 && apt-cache show kubectl >/dev/null 2>&1; then
      gl_apt_install kubectl
    fi
    command -v kubectl >/dev/null 2>&1 || gl_die "missing: kubectl (renders deploy/k8s with its built-in Kustomize). Debian/Ubuntu: add the Kubernetes apt repository (https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/) and apt-get install kubectl; elsewhere the release binary from dl.k8s.io"
  fi
  command -v python3 >/dev/null 2>&1 || gl_apt_install python3 python3-venv
  local venv="${XDG_CACHE_HOME:-$HOME/.cache}/gpuledger-deploy-tools"
  local want; want=$(printf '%s\n' "${GL_DEPLOY_TOOLS_PINS[@]}")
  if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$want" ] || ! [ -x "$venv/bin/checkov" ] || ! [ -x "$venv/bin/kubernetes-validate" ]; then
    gl_say "installing ${GL_DEPLOY_TOOLS_PINS[*]} (pip, once, in $venv)"
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null 2>&1 || { gl_apt_install python3-venv; python3 -m venv "$venv" >/dev/null; } \
      || gl_die "python3 -m venv $venv failed"
    "$venv/bin/pip" install -q "${GL_DEPLOY_TOOLS_PINS[@]}" >/dev/null \
      || gl_die "pip install ${GL_DEPLOY_TOOLS_PINS[*]} failed (needs PyPI)"
    echo "$want" >"$venv/.pins"
  fi
  export GL_DEPLOY_BIN="$venv/bin"
}

# The deployment checks: renders every Kustomize directory under deploy/k8s with `kubectl kustomize`, validates
# the output against the Kubernetes schemas (strict: unknown fields fail) of the oldest and newest versions we
# support, checks that deploy/systemd/server.env.example names every variable server/src/cli/ reads, and
# runs checkov on the rendered manifests and deploy/docker/Dockerfile.* with deploy/checkov.yaml.
# Needs gl_ensure_deploy_tools first.
GL_K8S_VERSIONS=(1.33.0 1.37.0)
gl_deploy_checks() {
  local root; root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  local out; out=$(mktemp -d -t gl-deploy.XXXXXX)
  local k dirs rendered=() n=0
  dirs=$(cd "$root" && find deploy/k8s -name kustomization.yaml -printf '%h\n' | sort)
  [ -n "$dirs" ] || { rm -rf "$out"; gl_die "no kustomization.yaml under deploy/k8s"; }
  for k in $dirs; do
    local f="$out/$(echo "$k" | tr / _).yaml"
    kubectl kustomize "$root/$k" >"$f" || { rm -rf "$out"; gl_die "kubectl kustomize $k failed"; }
    rendered+=("$f"); n=$((n + $(grep -c '^kind:' "$f" || true)))
  done
  local v
  for v in "${GL_K8S_VERSIONS[@]}"; do
    "$GL_DEPLOY_BIN/kubernetes-validate" --strict --quiet -k "$v" "${rendered[@]}" >"$out/kv.log" 2>&1 \
      || { grep -v '^INFO' "$out/kv.log" >&2 || true; rm -rf "$out"; gl_die "kubernetes-validate (Kubernetes $v) failed"; }
  done
  local e missing="" vars
  # Every `env = "…"` of the server's command line (server/src/cli/); none found means this check broke.
  vars=$(grep -rho 'env = "[A-Z_]*"' "$root/server/src/cli" | cut -d'"' -f2 | sort -u)
  [ -n "$vars" ] || { rm -rf "$out"; gl_die "no environment variables found in server/src/cli/: the check is broken"; }
  for e in $vars; do
    grep -q "^#\{0,1\}$e=" "$root/deploy/systemd/server.env.example" || missing="$missing $e"
  done
  [ -z "$missing" ] || { rm -rf "$out"; gl_die "deploy/systemd/server.env.example does not document:$missing"; }
  local docker=("$root"/deploy/docker/Dockerfile.*)
  [ -e "${docker[0]}" ] || { rm -rf "$out"; gl_die "no deploy/docker/Dockerfile.*"; }
  local args=() f
  for f in "${rendered[@]}" "${docker[@]}"; do args+=(-f "$f"); done
  if ! "$GL_DEPLOY_BIN/checkov" --config-file "$root/deploy/checkov.yaml" "${args[@]}" >"$out/checkov.log" 2>&1; then
    grep -v -e 'prismacloud' -e 'urllib3' -e 'guidelines' "$out/checkov.log" >&2 || true
    rm -rf "$out"; gl_die "checkov found something not accepted in docs/deploy.md (deploy/checkov.yaml)"
  fi
  gl_say "deploy: $(echo "$dirs" | wc -l) kustomizations, $n objects valid for Kubernetes ${GL_K8S_VERSIONS[*]}; checkov: $(grep -o 'Passed checks: [0-9]*, Failed checks: [0-9]*, Skipped checks: [0-9]*' "$out/checkov.log" | tr '\n' ' ')"
  rm -rf "$out"
}

# ---------------------------------------------------------------- database operations checks (docs/operations.md)
# Tables Citus would still refuse in deploy/citus/distribute.sql (policies with subqueries; docs/scaling.md
# "Before Citus"). gl_ops_checks fails when the set found differs, so a fix must remove the entry here too.
GL_CITUS_KNOWN_BLOCKERS=""

# The URL of database NAME on the server of URL (the last path component replaced).
gl_db_url() { # url name
  local url=$1 name=$2 query=""
  case $url in *\?*) query="?${url#*\?}"; url=${url%%\?*} ;; esac
  printf '%s/%s%s\n' "${url%/*}" "$name" "$query"
}

# Applies migrations/*.sql in filename order exactly as sqlx 0.8 does: its _sqlx_migrations table, each file sent as
# one simple-protocol query inside a transaction together with its bookkeeping row (version, description with `_` as
# spaces, SHA-384 checksum), so `gpuledger-server migrate` would find the database current.
gl_apply_migrations() { # url
  local url=$1 f base version desc sum
  psql "$url" -X -q -v ON_ERROR_STOP=1 -c "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
      version BIGINT PRIMARY KEY, description TEXT NOT NULL, installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
      success BOOLEAN NOT NULL, checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL)" >/dev/null
  for f in migrations/*.sql; do
    base=${f##*/}; version=${base%%_*}; desc=${base#*_}; desc=${desc%.sql}; desc=${desc//_/ }
    sum=$(sha384sum "$f" | cut -d' ' -f1)
    psql "$url" -X -q -v ON_ERROR_STOP=1 -c BEGIN -c "$(cat "$f")" \
      -c "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
          VALUES ($version, '$desc', TRUE, '\\x$sum', -1)" -c COMMIT >/dev/null \
      || gl_die "migration $base failed when applied with psql"
  done
}

# Database operations checks against the throwaway server of $DATABASE_URL (a superuser URL), before the build:
# migrations applied twice on one cluster (roles are cluster-wide), deploy/citus/distribute.sql against stand-ins that
# enforce Citus's rules and covering every tenant table, telemetry-retention.sh (dry run, then --apply), and a
# backup.sh → restore.sh round trip. Scratch databases are dropped at the end.
gl_ops_checks() {
  local started=$SECONDS admin=${DATABASE_URL:?gl_ops_checks needs DATABASE_URL}
  local name="gl_ops_$$" scratch restored out tmp now parts got
  scratch=$(gl_db_url "$admin" "$name"); restored=$(gl_db_url "$admin" "${name}_restored")
  tmp=$(mktemp -d -t gpuledger-ops.XXXXXX)
  export PGOPTIONS='-c client_min_messages=warning'
  local q=(psql -X -qAt -v ON_ERROR_STOP=1)
  "${q[@]}" "$admin" -c "DROP DATABASE IF EXISTS $name" -c "DROP DATABASE IF EXISTS ${name}_restored" \
    -c "CREATE DATABASE $name" -c "CREATE DATABASE ${name}_restored" >/dev/null

  # 1. Migrations, as the superuser, twice on this cluster: the second database finds the roles already there.
  gl_apply_migrations "$restored"
  "${q[@]}" "$admin" -c "DROP DATABASE ${name}_restored" -c "CREATE DATABASE ${name}_restored" >/dev/null
  gl_apply_migrations "$scratch"
  got=$("${q[@]}" "$scratch" -c "SELECT count(*) FROM _sqlx_migrations WHERE success")
  [ "$got" = "$(ls migrations/*.sql | wc -l)" ] || gl_die "ops checks: $got migrations recorded"
  echo "ops: migrations: $got applied with psql as sqlx would (twice on one cluster: existing roles are fine)"

  # 2. Telemetry retention: two old months (all closed), a month within the kept months but past the full-resolution
  # days (its blocks stripped, its sums kept), the current month, the default partition.
  now=$(date -u +%Y-%m)
  local mid; mid=$(date -u -d "$now-01 -4 months" +%Y-%m)
  "${q[@]}" "$scratch" >/dev/null <<SQL
SELECT gpuledger_create_org('00000000-0000-0000-0000-00000000000a', 'ops-a', 'Ops A');
INSERT INTO clusters (org_id, cluster_id, name) VALUES ('00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-0000000000c1', 'c1');
SELECT gpuledger_ensure_telemetry_partition(d) FROM unnest(ARRAY['2000-01-01', '2000-02-01', '$now-01']::date[]) d;
SELECT gpuledger_ensure_telemetry_tier_partitions(d) FROM unnest(ARRAY['2000-01-01', '2000-02-01', '$mid-01', '$now-01']::date[]) d;
INSERT INTO telemetry_series (org_id, series_id, cluster_id, gpu_uuid, node) VALUES ('00000000-0000-0000-0000-00000000000a', 1, '00000000-0000-0000-0000-0000000000c1', 'GPU-1', 'n1');
INSERT INTO telemetry_gpu_hours (org_id, series_id, hour, util_sum, energy_j, samples, sampled_ms, span_from_ms, span_to_ms, util_ms, mem_max, power_max, energy_ms, windows, util_max, block)
SELECT '00000000-0000-0000-0000-00000000000a', 1, m, 0, 42000, 6, 60000, 0, 60000, 0, 0, 0, 60000, 1, 0, '\x0102'
  FROM unnest(ARRAY['$mid-01', '$now-01']::timestamptz[]) m;
INSERT INTO telemetry_coverage_days (org_id, series_id, windows, gpu_ms, block_bytes, inst_bytes, instances, last_hour, day, len_s, hours, device_hours, own)
SELECT '00000000-0000-0000-0000-00000000000a', 1, 1, 60000, 2, 0, 0, m, (m AT TIME ZONE 'UTC')::date, 60, 1, 1, true
  FROM unnest(ARRAY['2000-01-01', '$mid-01', '$now-01']::timestamptz[]) m;
INSERT INTO telemetry_rollups (org_id, cluster_id, gpu_uuid, window_start, window_end, node, samples, energy_j)
SELECT '00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-0000000000c1', 'GPU-' || g, m + make_interval(mins => g),
       m + make_interval(mins => g + 1), 'n1', 6, 42000
  FROM unnest(ARRAY['2000-01-01', '2000-02-01', '$now-01']::timestamptz[]) m, generate_series(1, 8) g;
INSERT INTO periods (org_id, period, state, content_hash, bundle_gz, closed_at, closed_by)
SELECT '00000000-0000-0000-0000-00000000000a', p, 'closed', 'ops-check', '\x00', now(), 'ops' FROM unnest(ARRAY['2000-01-01', '2000-02-01']::date[]) p;
SQL
  _gl_ops_parts() { "${q[@]}" "$scratch" -c "SELECT string_agg(inhrelid::regclass::text, ' ' ORDER BY inhrelid::regclass::text) FROM pg_inherits WHERE inhparent IN ('telemetry_rollups'::regclass, 'telemetry_gpu_hours'::regclass)"; }
  local before; before=$(_gl_ops_parts)
  deploy/scripts/telemetry-retention.sh --keep-months 13 "$scratch" > "$tmp/dry.txt" || { cat "$tmp/dry.txt"; gl_die "ops checks: telemetry-retention.sh dry run failed"; }
  [ "$(_gl_ops_parts)" = "$before" ] || gl_die "ops checks: the retention dry run changed the partitions"
  grep -q 'would be dropped .*: telemetry_gpu_hours_200001 telemetry_gpu_hours_200002 telemetry_rollups_200001 telemetry_rollups_200002;' "$tmp/dry.txt" \
    || { cat "$tmp/dry.txt"; gl_die "ops checks: the retention dry run did not list exactly the two old months"; }
  grep -q "would have their full resolution stripped: telemetry_gpu_hours_${mid/-/};" "$tmp/dry.txt" \
    || { cat "$tmp/dry.txt"; gl_die "ops checks: the retention dry run did not list $mid's full resolution to strip"; }
  deploy/scripts/telemetry-retention.sh --keep-months 13 --apply "$scratch" > "$tmp/apply.txt" || { cat "$tmp/apply.txt"; gl_die "ops checks: telemetry-retention.sh --apply failed"; }
  got=$(_gl_ops_parts)
  [ "$got" = "telemetry_gpu_hours_${mid/-/} telemetry_gpu_hours_${now/-/} telemetry_gpu_hours_default telemetry_rollups_${now/-/} telemetry_rollups_default" ] \
    || gl_die "ops checks: after retention the partitions are '$got' (expected $mid, the current month and the default)"
  got=$("${q[@]}" "$scratch" -c "SELECT string_agg(to_char(hour, 'YYYY-MM') || ':' || (block IS NOT NULL) || ':' || energy_j, ' ' ORDER BY hour) FROM telemetry_gpu_hours")
  [ "$got" = "$mid:false:42000 $now:true:42000" ] || gl_die "ops checks: after retention the GPU-hours are '$got' ($mid stripped of its block with its sums kept, $now whole)"
  got=$("${q[@]}" "$scratch" -c "SELECT string_agg(to_char(day, 'YYYY-MM') || ':' || block_bytes, ' ' ORDER BY day) FROM telemetry_coverage_days")
  [ "$got" = "$mid:0 $now:2" ] || gl_die "ops checks: after retention the coverage days are '$got' (2000-01 dropped, $mid's block bytes 0, $now's kept)"
  echo "ops: telemetry retention: dry run kept every partition; --apply dropped exactly 2000-01 and 2000-02, stripped $mid's full resolution (sums kept), kept $now and the default"

  # 3. Backup → restore into another database; the same tables and rows.
  out=$(deploy/scripts/backup.sh --out "$tmp/backup" "$scratch" 2>"$tmp/backup.err") || { cat "$tmp/backup.err"; gl_die "ops checks: backup.sh failed"; }
  deploy/scripts/restore.sh --roles "$(grep 'roles.sql$' <<<"$out")" "$(grep '\.dump$' <<<"$out")" "$restored" 2>"$tmp/restore.err" \
    || { cat "$tmp/restore.err"; gl_die "ops checks: restore.sh failed"; }
  local count="SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p'))
                   || ' tables, ' || (SELECT count(*) FROM telemetry_rollups) || ' telemetry rows, '
                   || (SELECT count(*) FROM periods WHERE state = 'closed') || ' closed periods, '
                   || (SELECT count(*) FROM pg_policy) || ' policies'"
  local a b; a=$("${q[@]}" "$scratch" -c "$count"); b=$("${q[@]}" "$restored" -c "$count")
  [ "$a" = "$b" ] || gl_die "ops checks: restored database differs: '$b' vs '$a'"
  echo "ops: backup.sh → restore.sh round trip: $b in both"

  # 4. Citus: distribute.sql against stand-ins enforcing Citus's rules; every tenant table covered.
  "${q[@]}" "$scratch" -f scripts/ops/citus-stubs.sql >/dev/null
  PGOPTIONS="$PGOPTIONS -c gpuledger_ci.citus_known_blockers=$GL_CITUS_KNOWN_BLOCKERS" \
    "${q[@]}" "$scratch" -f deploy/citus/distribute.sql >/dev/null 2>"$tmp/citus.err" \
    || { cat "$tmp/citus.err"; gl_die "ops checks: deploy/citus/distribute.sql breaks a Citus rule"; }
  got=$(PGOPTIONS="$PGOPTIONS -c gpuledger_ci.citus_known_blockers=$GL_CITUS_KNOWN_BLOCKERS" \
    "${q[@]}" "$scratch" -f scripts/ops/assert-distributed.sql 2>"$tmp/citus.err") \
    || { cat "$tmp/citus.err"; gl_die "ops checks: deploy/citus/distribute.sql does not cover the schema"; }
  echo "ops: citus: $got"

  # 5. Queries carry org_id: the three export FROM fragments whose driving table is filtered in their base_where are
  # all that may rely on RLS alone (docs/scaling.md).
  got=$(python3 scripts/sql-routing-audit --quiet --max 3) || { echo "$got"; gl_die "ops checks: SQL on tenant tables without an explicit org_id (scripts/sql-routing-audit)"; }
  echo "ops: routing: $got" | head -1

  "${q[@]}" "$admin" -c "DROP DATABASE $name" -c "DROP DATABASE ${name}_restored" >/dev/null
  rm -rf "$tmp"
  unset PGOPTIONS
  echo "ops: database operations checks passed in $((SECONDS - started)) s"
}

# ---------------------------------------------------------------- a Citus cluster on loopback (issue 32)

# Citus 13.2 in this machine's PostgreSQL: installed by scripts/citus-install when missing (root; ~4 min once per
# machine, idempotent), or a clear error.
gl_ensure_citus() {
  local pgc lib share
  pgc=$(command -v pg_config || echo /usr/lib/postgresql/15/bin/pg_config)
  lib=$("$pgc" --pkglibdir 2>/dev/null || true); share=$("$pgc" --sharedir 2>/dev/null || true)
  if [ -f "$lib/citus.so" ] && grep -q "default_version = '13.2" "$share/extension/citus.control" 2>/dev/null; then
    return 0
  fi
  gl_is_root || gl_die "Citus 13.2 is not installed in $("$pgc" --version 2>/dev/null || echo PostgreSQL): run \
scripts/citus-install as root (builds ../shared/tools/citus, ~4 min), or skip the Citus job with GL_CITUS=0"
  gl_say "installing Citus 13.2.2 into PostgreSQL (scripts/citus-install; ~4 min, once per machine)"
  scripts/citus-install >&2 || gl_die "scripts/citus-install failed: Citus is needed for the Citus job (GL_CITUS=0 skips it)"
  grep -q "default_version = '13.2" "$share/extension/citus.control" 2>/dev/null \
    || gl_die "scripts/citus-install ran but citus.control is not 13.2 ($share/extension/citus.control)"
}

# Starts a Citus coordinator and N workers (default 2) on loopback in DIR (owned by postgres when we are root), each
# with shared_preload_libraries=citus and test-only durability off. Sets GL_CITUS_PORTS (coordinator first) and
# GL_CITUS_DIR. Databases are made by gl_citus_database. Stop with gl_citus_stop.
GL_CITUS_PORTS=(); GL_CITUS_DIR=""
gl_citus_run() { if gl_is_root; then runuser -u postgres -- "$@"; else "$@"; fi; }
gl_citus_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
gl_citus_node() { # dir name port: initdb + start one node
  local dir=$1 name=$2 port=$3
  gl_citus_run initdb -D "$dir/$name" -U postgres -A trust -E UTF8 --no-locale >/dev/null \
    || gl_die "initdb of Citus node $name failed"
  # Test-only: durability off for speed. max_worker_processes: Citus runs a maintenance daemon per database that
  # has the extension, and the test job makes a database per test on every node.
  gl_citus_run pg_ctl -D "$dir/$name" -l "$dir/$name.log" -w -t 60 -o "-p $port -k $dir -c listen_addresses=127.0.0.1 \
-c shared_preload_libraries=citus -c max_connections=400 -c max_worker_processes=256 -c wal_level=logical \
-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c log_min_error_statement=log" start >/dev/null \
    || { tail -20 "$dir/$name.log" >&2; gl_die "Citus node $name did not start"; }
}
gl_citus_start() { # dir [workers]
  local dir=$1 n=${2:-2} i p
  GL_CITUS_DIR=$dir; GL_CITUS_PORTS=()
  mkdir -p "$dir"; chmod 755 "$dir"
  if gl_is_root; then chown postgres "$dir"; fi
  for i in $(seq 0 "$n"); do
    p=$(gl_citus_port); GL_CITUS_PORTS+=("$p")
    if [ "$i" = 0 ]; then gl_citus_node "$dir" coord "$p"; else gl_citus_node "$dir" "w$i" "$p"; fi
  done
}
gl_citus_stop() {
  local d
  [ -n "$GL_CITUS_DIR" ] || return 0
  for d in "$GL_CITUS_DIR"/*/; do
    [ -f "$d/PG_VERSION" ] && gl_citus_run pg_ctl -D "$d" -m immediate stop >/dev/null 2>&1 || true
  done
}
gl_citus_url() { # port [database]
  printf 'postgres://postgres@127.0.0.1:%s/%s?sslmode=disable\n' "$1" "${2:-postgres}"
}
# Creates database NAME on every node of the cluster with the citus extension and the settings GPU Ledger needs
# (docs/scaling.md, runbook step 1), and registers the workers in it on the coordinator.
gl_citus_database() { # name
  local name=$1 p sql
  for p in "${GL_CITUS_PORTS[@]}"; do
    psql -X -qAt -v ON_ERROR_STOP=1 "$(gl_citus_url "$p")" -c "CREATE DATABASE $name" >/dev/null
    psql -X -qAt -v ON_ERROR_STOP=1 "$(gl_citus_url "$p" "$name")" -c "SET client_min_messages = warning" \
      -c "CREATE EXTENSION citus" \
      -c "ALTER DATABASE $name SET citus.propagate_set_commands = 'local'" \
      -c "ALTER DATABASE $name SET citus.enable_unsafe_triggers = on" >/dev/null \
      || gl_die "CREATE EXTENSION citus in $name on port $p failed"
  done
  sql="SELECT citus_set_coordinator_host('127.0.0.1', ${GL_CITUS_PORTS[0]});"
  for p in "${GL_CITUS_PORTS[@]:1}"; do sql+="SELECT citus_add_node('127.0.0.1', $p);"; done
  psql -X -qAt -v ON_ERROR_STOP=1 "$(gl_citus_url "${GL_CITUS_PORTS[0]}" "$name")" -c "$sql" >/dev/null \
    || gl_die "registering the Citus nodes in $name failed"
}
# Fails unless every `dept_scope` (and any restrictive) row-level security policy of a distributed table is
# restrictive on the coordinator, on each of its shards and on each worker's copy of the table (Citus 13.2 re-creates
# policies without AS RESTRICTIVE; deploy/citus/distribute.sql repairs them). Prints how many copies were checked.
gl_citus_policies_check() { # url
  local out
  out=$(psql -X -qAt -v ON_ERROR_STOP=1 "$1" <<'SQL'
WITH restrictive AS (
  SELECT pol.polrelid::regclass AS rel, pol.polname FROM pg_policy pol
    JOIN pg_dist_partition d ON d.logicalrelid = pol.polrelid WHERE pol.polname = 'dept_scope' OR NOT pol.polpermissive
), copies AS (
  SELECT pol.polrelid::regclass AS rel, pol.polname, 'coordinator' AS copy, true AS success,
         CASE WHEN pol.polpermissive THEN 't' ELSE 'f' END AS result
    FROM pg_policy pol JOIN pg_dist_partition d ON d.logicalrelid = pol.polrelid WHERE pol.polname = 'dept_scope'
  UNION ALL
  SELECT r.rel, r.polname, 'shard ' || x.shardid AS copy, x.success, x.result FROM restrictive r,
         LATERAL run_command_on_shards(r.rel, format('SELECT polpermissive FROM pg_policy WHERE polrelid = %s::regclass AND polname = %L',
                                                     '''%1$s''', r.polname)) x
  UNION ALL
  SELECT r.rel, r.polname, 'worker ' || x.nodeport, x.success, x.result FROM restrictive r,
         LATERAL run_command_on_workers(format('SELECT polpermissive FROM pg_policy WHERE polrelid = %L::regclass AND polname = %L',
                                               r.rel::text, r.polname)) x
)
SELECT count(*) || ' ' || count(*) FILTER (WHERE NOT success OR result <> 'f') || ' ' ||
       coalesce(string_agg(rel || '.' || polname || ' on ' || copy || ': ' || result, '; ') FILTER (WHERE NOT success OR result <> 'f'), '')
  FROM copies;
SQL
) || gl_die "checking the policies on the shards failed"
  local checked=${out%% *} rest=${out#* }; local bad=${rest%% *}
  [ "$checked" -gt 0 ] || gl_die "no dept_scope policy found on the shards"
  [ "$bad" = 0 ] || gl_die "restrictive policies are PERMISSIVE on $bad shard or worker copies (Citus drops AS RESTRICTIVE; run deploy/citus/distribute.sql again): ${rest#* }"
  echo "citus: $checked shard and worker copies of restrictive policies checked: all restrictive"
}
