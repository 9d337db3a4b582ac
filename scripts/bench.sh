#!/usr/bin/env bash
# rowbranch's benchmark: `rowbranch serve` (release build) on the fake GitHub with pacing off,
# driven by wrk, measured from /proc. Prints per workload — new rows, a row redelivered before
# its branch exists, a handled row redelivered — requests per second, p50/p99 latency, GitHub
# requests per delivery, CPU time per delivery (rowbranch's process alone) and peak RSS, the
# median of several runs.
#
#   scripts/bench.sh                          # this checkout, 3 runs of 5 s per workload
#   scripts/bench.sh --baseline OTHER_BINARY  # the same runs for a second binary, with ratios
#   scripts/bench.sh --json                   # one JSON record instead of the table
#   scripts/bench.sh --runs 5 --seconds 10 --workload new,handled
#
# To judge a change against main in one run on one machine:
#
#   git worktree add /tmp/rowbranch-main main
#   (cd /tmp/rowbranch-main && cargo build --release --locked --bin rowbranch)
#   scripts/bench.sh --baseline /tmp/rowbranch-main/target/release/rowbranch
#
# The machine is shared and noisy: compare medians and ratios, never an absolute figure.
# wrk comes from Debian's package, installed here when missing (as root, as .ci/run installs
# its tools). Not run by CI.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wrk >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
  else
    echo "bench.sh: wrk is missing: install Debian's package (sudo apt-get install wrk)" >&2
    exit 1
  fi
fi

cargo build --release --locked --bin rowbranch --bin rowbranch-bench >&2
exec target/release/rowbranch-bench --binary "$PWD/target/release/rowbranch" "$@"
