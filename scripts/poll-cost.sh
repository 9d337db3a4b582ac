#!/usr/bin/env bash
# What one poll of the queue costs the database: the server time of the consumer's read
# (`pgmq.read(queue, vt, 50)`) on an empty queue and behind 10,000 messages not yet visible
# (held, or waiting out a backoff), and of the metrics sample (`pgmq.metrics`), each the
# mean of 1,000 calls made inside the server, so without the round trip.
#
#   eval "$(scripts/test-postgres.sh)"; scripts/poll-cost.sh
#
# Needs DATABASE_URL and PGMQ_EXTENSION_TEMPLATE as scripts/test-postgres.sh exports them;
# makes a database of its own from the template and drops it.
set -euo pipefail
: "${DATABASE_URL:?run eval \"\$(scripts/test-postgres.sh)\" first}"
: "${PGMQ_EXTENSION_TEMPLATE:?run eval \"\$(scripts/test-postgres.sh)\" first}"

db="rowbranch_poll_cost_$$"
psql "$DATABASE_URL" -qAtc "create database $db template $PGMQ_EXTENSION_TEMPLATE"
trap 'psql "$DATABASE_URL" -qAtc "drop database if exists $db with (force)"' EXIT
url="${DATABASE_URL%/*}/$db"

# The mean milliseconds of one call of $1 (a statement), over 1,000 calls.
mean_ms() {
  psql "$url" -qAt <<SQL
do \$\$
declare started timestamptz := clock_timestamp();
begin
  for i in 1..1000 loop
    $1;
  end loop;
  raise notice '%', round(extract(epoch from clock_timestamp() - started)::numeric, 4);
end
\$\$;
SQL
}

run() {
  local what="$1" statement="$2" seconds
  seconds="$(mean_ms "$statement" 2>&1 | sed -n 's/^NOTICE: *//p')"
  printf '%-58s %8.3f ms\n' "$what" "$seconds"
}

psql "$url" -qAtc "select pgmq.create('cost')" >/dev/null
run "read, empty queue" "perform * from pgmq.read('cost', 60, 50)"
run "metrics, empty queue" "perform * from pgmq.metrics('cost')"
psql "$url" -qAt >/dev/null <<'SQL'
insert into pgmq.q_cost (vt, message)
  select now() + interval '1 hour', jsonb_build_object('record', jsonb_build_object('id', g))
  from generate_series(1, 10000) as g;
analyze pgmq.q_cost;
SQL
run "read, 10,000 messages none of them visible" "perform * from pgmq.read('cost', 60, 50)"
run "metrics, 10,000 messages" "perform * from pgmq.metrics('cost')"
