#!/usr/bin/env bash
# Starts a throwaway PostgreSQL for rowbranch's tests and prints where it is:
#
#   eval "$(scripts/test-postgres.sh)"      # sets DATABASE_URL (and the PGMQ_* below) in this shell
#   cargo test
#
# Each run makes a new cluster in a new temporary directory, listening on a free port on
# 127.0.0.1 only (its socket inside that directory), with trust authentication (anyone on this
# machine may connect as `postgres`: it holds nothing but test data) and fsync off (fast, and
# lost on a crash). It has a database `rowbranch_test`. Standard output is two lines, with up to
# two more between them:
#
#   export DATABASE_URL=postgres://postgres@127.0.0.1:PORT/rowbranch_test
#   export PGMQ_SQL_TEMPLATE=rowbranch_pgmq_sql               (when pgmq could be installed so)
#   export PGMQ_EXTENSION_TEMPLATE=rowbranch_pgmq_extension   (likewise)
#   # stop: COMMAND            (stops the server and removes its directory)
#
# Everything else goes to standard error. The server runs until that command, a reboot, or the
# end of the machine (a CI container); nothing about it outlives its temporary directory, except
# the two pgmq extension files below.
#
# pgmq, for the queue tests: the SQL of pgmq that the `pgmq` crate carries, pinned by
# scripts/pgmq-sql/ (a manifest with its own Cargo.lock, fetched with `cargo fetch --locked`,
# never compiled, its files checked against scripts/pgmq-sql/SHA256SUMS; a mismatch stops this
# script). It is installed twice, each into a template database that tests copy with
# `create database … template …` (connections to the templates themselves are refused):
#   - PGMQ_SQL_TEMPLATE: the file run as plain SQL (pgmq's "SQL-only installation");
#   - PGMQ_EXTENSION_TEMPLATE: `create extension pgmq`, from pgmq.control and pgmq--VERSION.sql
#     written into the server's extension directory (SHAREDIR/extension). That needs root or a
#     writable directory; the files stay there after the server stops, and are replaced only
#     when they are this script's own (the control file carries a line saying so).
# Either one that cannot be made (no cargo, no network for the first fetch, no writable
# extension directory, a foreign pgmq already there) is said on standard error and not exported;
# the tests that need it then skip, or fail under CI=true.
#
# Where the server comes from: $PG_BINDIR if set, else the newest /usr/lib/postgresql/*/bin
# (Debian's layout), else the directory of `pg_ctl` on PATH. If there is none and this runs as
# root (CI on a clean Debian machine), it installs Debian's `postgresql` package. As root, the
# server runs as the `postgres` system user (or `nobody`), since PostgreSQL refuses to run as
# root; otherwise it runs as the current user.
set -euo pipefail

me="test-postgres.sh"

die() {
  echo "$me: $*" >&2
  exit 1
}

is_root() {
  [ "$(id -u)" -eq 0 ]
}

# The directory holding `initdb`, `pg_ctl` and `postgres`, or nothing.
find_bindir() {
  local dir
  if [ -n "${PG_BINDIR:-}" ]; then
    echo "$PG_BINDIR"
    return
  fi
  for dir in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return
    fi
  done
  if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    dirname "$(command -v pg_ctl)"
  fi
}

bindir="$(find_bindir)"
if [ -z "$bindir" ]; then
  if ! is_root; then
    die "no PostgreSQL server found (looked in /usr/lib/postgresql/*/bin and PATH). Install one (Debian: sudo apt-get install postgresql), set PG_BINDIR to its bin directory, or run this as root to install it."
  fi
  command -v apt-get >/dev/null 2>&1 ||
    die "no PostgreSQL server found and no apt-get to install one: install PostgreSQL, or set PG_BINDIR"
  echo "$me: no PostgreSQL server found; installing Debian's postgresql package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt_log="$(mktemp)"
  apt-get update -qq >"$apt_log" 2>&1 ||
    die "apt-get update failed: $(tail -n 5 "$apt_log")"
  apt-get install -y -qq --no-install-recommends postgresql >"$apt_log" 2>&1 </dev/null ||
    die "apt-get install postgresql failed: $(tail -n 5 "$apt_log")"
  rm -f "$apt_log"
  bindir="$(find_bindir)"
  [ -n "$bindir" ] || die "installed postgresql, but found no server under /usr/lib/postgresql/*/bin"
fi
for tool in initdb pg_ctl postgres pg_isready psql; do
  [ -x "$bindir/$tool" ] || die "$bindir/$tool is missing (PG_BINDIR or the installation is incomplete)"
done

# Who runs the server, and how to run a command as them.
run_as=()
owner="$(id -un)"
if is_root; then
  if id -u postgres >/dev/null 2>&1; then
    owner=postgres
  else
    owner=nobody
  fi
  id -u "$owner" >/dev/null 2>&1 || die "no unprivileged user (postgres or nobody) to run the server as"
  command -v runuser >/dev/null 2>&1 || die "runuser (util-linux) is needed to run the server as $owner"
  run_as=(runuser -u "$owner" --)
fi

parent="${TMPDIR:-/tmp}"
if is_root; then
  # The server's user must be able to reach the directory: root's own TMPDIR may be private.
  parent=/tmp
fi
dir="$(mktemp -d "$parent/rowbranch-pg.XXXXXXXX")" || die "could not make a temporary directory in $parent"
data="$dir/data"
log="$dir/postgres.log"
started=""

# On any failure: stop what was started, show the server's log, and leave nothing behind.
cleanup_on_failure() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    if [ -n "$started" ]; then
      "${run_as[@]}" "$bindir/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 </dev/null || true
    fi
    if [ -s "$log" ]; then
      echo "$me: the server's log ($log):" >&2
      tail -n 20 "$log" >&2 || true
    fi
    rm -rf "$dir"
  fi
}
trap cleanup_on_failure EXIT

if is_root; then
  chown "$owner" "$dir" || die "could not give $dir to $owner"
fi
chmod 700 "$dir"

"${run_as[@]}" "$bindir/initdb" --pgdata="$data" --username=postgres --auth=trust \
  --encoding=UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1 </dev/null ||
  die "initdb failed: $(tail -n 5 "$dir/initdb.log")"

# Settings written to the file rather than on the command line, so a path with spaces is fine.
{
  echo ""
  echo "# rowbranch tests: a throwaway server"
  echo "listen_addresses = '127.0.0.1'"
  echo "unix_socket_directories = '${dir//\'/\'\'}'"
  echo "fsync = off"
  echo "synchronous_commit = off"
  echo "full_page_writes = off"
} | "${run_as[@]}" tee -a "$data/postgresql.conf" >/dev/null ||
  die "could not write $data/postgresql.conf"

# True when something already listens on 127.0.0.1:$1.
port_taken() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A random port below Linux's ephemeral range (32768 and up), so that no outgoing connection
# holds it; if another process takes it first, the server fails to bind and the next one is tried.
port=""
for _ in $(seq 1 20); do
  candidate=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
  if port_taken "$candidate"; then
    continue
  fi
  : >"$log"
  chown "$owner" "$log" 2>/dev/null || true
  started=yes
  if "${run_as[@]}" "$bindir/pg_ctl" -D "$data" -l "$log" -o "-p $candidate" -w -t 30 start \
    >/dev/null 2>&1 </dev/null; then
    port="$candidate"
    break
  fi
  started=""
  if grep -q "could not bind\|could not create any TCP/IP sockets\|Address already in use" "$log"; then
    continue
  fi
  die "the server did not start"
done
[ -n "$port" ] || die "found no free port on 127.0.0.1 after 20 tries"

# Ready means it answers a connection, within 30 seconds.
ready=""
for _ in $(seq 1 60); do
  if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -t 1 </dev/null; then
    ready=yes
    break
  fi
  sleep 0.5
done
[ -n "$ready" ] || die "the server on 127.0.0.1:$port did not accept connections within 30 s"

"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres \
  -c "create database rowbranch_test" >/dev/null </dev/null ||
  die "could not create the database rowbranch_test"

# pgmq (see the top of this file). Each step that fails says why and leaves its template out.
psql_admin() {
  "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@" </dev/null
}
warn() {
  echo "$me: $*" >&2
}
pgmq_manifest="$(cd "$(dirname "$0")" && pwd)/pgmq-sql/Cargo.toml"
pgmq_begun=$SECONDS

# The directory of the pinned pgmq crate, fetched and checked; or nothing, after saying why.
pgmq_crate() {
  local host crate
  if ! command -v cargo >/dev/null 2>&1; then
    warn "no cargo on PATH: pgmq cannot be fetched, so the pgmq tests have no pgmq"
    return
  fi
  if ! command -v python3 >/dev/null 2>&1; then
    warn "no python3 on PATH to read cargo metadata's JSON: the pgmq tests have no pgmq"
    return
  fi
  host="$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')"
  # Only this machine's dependencies, and nothing built: the crate is wanted for its files.
  if ! cargo fetch --locked --manifest-path "$pgmq_manifest" ${host:+--target "$host"} \
    >"$dir/pgmq-fetch.log" 2>&1 </dev/null; then
    warn "cargo fetch of the pinned pgmq crate failed (offline?): $(tail -n 3 "$dir/pgmq-fetch.log")"
    return
  fi
  crate="$(cargo metadata --format-version 1 --locked --offline --manifest-path "$pgmq_manifest" \
    ${host:+--filter-platform "$host"} 2>>"$dir/pgmq-fetch.log" </dev/null |
    python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
paths = [p["manifest_path"] for p in meta["packages"] if p["name"] == "pgmq"]
print(os.path.dirname(paths[0]) if len(paths) == 1 else "")
')" || crate=""
  if [ -z "$crate" ] || [ ! -d "$crate" ]; then
    warn "cargo metadata did not locate the pgmq crate: $(tail -n 3 "$dir/pgmq-fetch.log")"
    return
  fi
  (cd "$crate" && sha256sum --check --strict --quiet "${pgmq_manifest%/*}/SHA256SUMS" >&2) ||
    die "the pgmq crate's files in $crate do not match scripts/pgmq-sql/SHA256SUMS: not running them"
  echo "$crate"
}

pgmq_sql_template=""
pgmq_extension_template=""
pgmq_version=""
crate="$(pgmq_crate)" || exit 1
if [ -n "$crate" ]; then
  pgmq_sql="$crate/src/install/embedded/sql/pgmq.sql"
  pgmq_control="$crate/src/install/embedded/pgmq.control"
  pgmq_version="$(sed -n "s/^default_version = '\([0-9.]*\)'\$/\1/p" "$pgmq_control")"
  [ -n "$pgmq_version" ] || die "no default_version in $pgmq_control"

  # SQL-only: the file run as it is, in a database of its own.
  if psql_admin -d postgres -c "create database rowbranch_pgmq_sql" >/dev/null &&
    psql_admin -d rowbranch_pgmq_sql -f "$pgmq_sql" >"$dir/pgmq-sql.log" 2>&1 &&
    psql_admin -d postgres \
      -c "alter database rowbranch_pgmq_sql with is_template true allow_connections false" \
      >/dev/null; then
    pgmq_sql_template=rowbranch_pgmq_sql
  else
    warn "pgmq $pgmq_version did not install as SQL: $(tail -n 5 "$dir/pgmq-sql.log" 2>/dev/null)"
  fi

  # As an extension: the control file and the version's script in the server's extension
  # directory, replacing only files this script wrote before.
  mark="# written by rowbranch's scripts/test-postgres.sh for its tests; replaced on its next run"
  sharedir="$(psql_admin -d postgres -At -c "select setting from pg_config where name = 'SHAREDIR'")"
  extdir="$sharedir/extension"
  control_target="$extdir/pgmq.control"
  sql_target="$extdir/pgmq--$pgmq_version.sql"
  wanted_control="$(cat "$pgmq_control"; echo "$mark")"
  if [ -z "$sharedir" ] || [ ! -d "$extdir" ]; then
    warn "found no extension directory (SHAREDIR/extension) for the server: no pgmq extension"
  elif ! is_root && [ ! -w "$extdir" ]; then
    warn "cannot write $extdir (run as root, or make it writable) to install pgmq as an extension: PGMQ_EXTENSION_TEMPLATE is not set"
  elif [ -e "$control_target" ] && ! grep -qxF "$mark" "$control_target"; then
    warn "$control_target is another pgmq, not this script's: left alone, PGMQ_EXTENSION_TEMPLATE is not set"
  else
    if [ "$(cat "$control_target" 2>/dev/null)" != "$wanted_control" ]; then
      printf '%s\n' "$wanted_control" >"$control_target.tmp.$$" &&
        chmod 0644 "$control_target.tmp.$$" && mv -f "$control_target.tmp.$$" "$control_target"
    fi
    if ! cmp -s "$pgmq_sql" "$sql_target"; then
      install -m 0644 "$pgmq_sql" "$sql_target.tmp.$$" && mv -f "$sql_target.tmp.$$" "$sql_target"
    fi
    if psql_admin -d postgres -c "create database rowbranch_pgmq_extension" >/dev/null &&
      psql_admin -d rowbranch_pgmq_extension -c "create extension pgmq version '$pgmq_version'" \
        >"$dir/pgmq-extension.log" 2>&1 &&
      psql_admin -d postgres \
        -c "alter database rowbranch_pgmq_extension with is_template true allow_connections false" \
        >/dev/null; then
      pgmq_extension_template=rowbranch_pgmq_extension
    else
      warn "create extension pgmq failed: $(tail -n 5 "$dir/pgmq-extension.log" 2>/dev/null)"
    fi
  fi
  warn "pgmq $pgmq_version in $((SECONDS - pgmq_begun)) s:" \
    "SQL-only ${pgmq_sql_template:-not installed}, extension ${pgmq_extension_template:-not installed}"
fi

trap - EXIT
stop=""
if [ ${#run_as[@]} -gt 0 ]; then
  stop="$(printf '%q ' "${run_as[@]}")"
fi
stop+="$(printf '%q -D %q -m fast stop' "$bindir/pg_ctl" "$data") && rm -rf $(printf '%q' "$dir")"
echo "$me: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $dir" >&2
echo "export DATABASE_URL=postgres://postgres@127.0.0.1:$port/rowbranch_test"
if [ -n "$pgmq_sql_template" ]; then
  echo "export PGMQ_SQL_TEMPLATE=$pgmq_sql_template"
fi
if [ -n "$pgmq_extension_template" ]; then
  echo "export PGMQ_EXTENSION_TEMPLATE=$pgmq_extension_template"
fi
echo "# stop: $stop"
