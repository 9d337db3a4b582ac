#!/usr/bin/env bash
# Starts a throwaway PostgreSQL for rowbranch's tests and prints where it is:
#
#   eval "$(scripts/test-postgres.sh)"      # sets DATABASE_URL in this shell
#   cargo test
#
# Each run makes a new cluster in a new temporary directory, listening on a free port on
# 127.0.0.1 only (its socket inside that directory), with trust authentication (anyone on this
# machine may connect as `postgres`: it holds nothing but test data) and fsync off (fast, and
# lost on a crash). It has a database `rowbranch_test`. Standard output is two lines:
#
#   export DATABASE_URL=postgres://postgres@127.0.0.1:PORT/rowbranch_test
#   # stop: COMMAND            (stops the server and removes its directory)
#
# Everything else goes to standard error. The server runs until that command, a reboot, or the
# end of the machine (a CI container); nothing about it outlives its temporary directory.
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

trap - EXIT
stop=""
if [ ${#run_as[@]} -gt 0 ]; then
  stop="$(printf '%q ' "${run_as[@]}")"
fi
stop+="$(printf '%q -D %q -m fast stop' "$bindir/pg_ctl" "$data") && rm -rf $(printf '%q' "$dir")"
echo "$me: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $dir" >&2
echo "export DATABASE_URL=postgres://postgres@127.0.0.1:$port/rowbranch_test"
echo "# stop: $stop"
