#!/usr/bin/env bash
# mongodb-cdc → JSON Lines: faucet against a floor with the same driver, on UPDATES updates of
# a collection (one updateMany: a change event per document).
#
#   bench/mongodb_cdc_to_jsonl.sh                   # 50,000 updates (see "Time" below)
#   UPDATES=20000 BATCH=5000 bench/mongodb_cdc_to_jsonl.sh
#   MONGODB_URL=mongodb://127.0.0.1:27117/?directConnection=true bench/mongodb_cdc_to_jsonl.sh
#   FAUCET_BIN=target/debug/faucet …                # an already built binary instead of a release build
#
# The server: a private SecantusDB (MongoDB's wire protocol; `secantusd-py` from PyPI, which
# scripts/services.sh installs) on a free port with its data in a temporary directory and
# `--sync-on-commit`, as the tests' private servers (faucet_test_support::private_mongo), so
# the benchmark's million documents and oplog entries never touch the shared server; or the
# server at MONGODB_URL when set (its collection bench_<pid>.c is dropped at the end).
#
# Setup: UPDATES documents {_id, name, amount, n} loaded by the floor program; the cluster
# time after the load (`hello`'s lastWrite, + 1); one updateMany `$inc: {n: 1}` of every
# document. Then both read exactly those UPDATES change events, from that cluster time:
#   * faucet: the release `faucet run` (mongodb-cdc → jsonl sink, file state store, batch
#     BATCH, `start: {at_operation_time: …}`, `full_document: update_lookup` the default):
#     change records in faucet's contract, JSON lines, an fdatasync per page and the bookmark
#     (the resume token) persisted per page; bounded, so it ends where the stream stood when
#     it started;
#   * the floor: bench/mongo_floor (Rust, the same `mongodb` driver, version and features):
#     a collection change stream from the same cluster time with `fullDocument:
#     updateLookup`, each event written as a line of relaxed Extended JSON through a
#     BufWriter, no state, no fsync; it stops after UPDATES events.
# Prints changes/s (wall clock, including connecting), CPU seconds, peak RSS
# (`/usr/bin/time`) and the ratio; checks both saw UPDATES changes. Target: faucet ≥ 0.8×
# the floor.
#
# Time: SecantusDB is a Python server, and the work is mostly its own (the change stream's
# events and the updateLookup of each). On a loaded 2-core machine 50,000 updates took about
# 25 s in all (6 s of setup, two reads of 6–8 s); on a quiet one both read at ~5,600
# changes/s. Larger runs stalled on SecantusDB (200,000 updates: no progress after 8 minutes,
# the server's own change stream), so the default is 50,000; UPDATES sets the size, for mongod.
set -euo pipefail

. "$(dirname "$0")/lib.sh" # bench_start; timed CMD... → secs, cpu, rss_kb; faucet_binary
bench_start
updates=${UPDATES:-50000}
suffix=$$
db=bench_$suffix
coll=$db.c


faucet_binary mongodb
floor_binary mongo_floor faucet-bench-mongo-floor

work_dir mongo
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  elif [ -n "${url:-}" ]; then
    "$floor" drop "$url" "$db" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${MONGODB_URL:-}" ]; then
  url=$MONGODB_URL
else
  command -v secantusd-py >/dev/null || { echo "secantusd-py not found; scripts/services.sh installs SecantusDB" >&2; exit 1; }
  port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  secantusd-py --host 127.0.0.1 --port "$port" --storage-path "$work/data" --sync-on-commit \
    --cache-size 256M --log-level WARNING > "$work/server.log" 2>&1 < /dev/null &
  server_pid=$!
  url="mongodb://127.0.0.1:$port/?directConnection=true"
  for _ in $(seq 600); do
    python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1).close()" "$port" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "==> private SecantusDB on 127.0.0.1:$port" >&2
fi

echo "==> loading $updates documents into $coll" >&2
t0=$(date +%s)
"$floor" load "$url" "$coll" "$updates"
read -r at_t at_i <<<"$("$floor" optime "$url")"
echo "==> updating every document (updateMany) after cluster time ($at_t, $at_i)" >&2
modified=$("$floor" update "$url" "$coll")
[ "$modified" -eq "$updates" ] || { echo "error: updateMany modified $modified documents, expected $updates" >&2; exit 1; }
echo "    setup took $(( $(date +%s) - t0 )) s (not measured)" >&2

cat > "$work/faucet.yaml" <<YAML
version: 1
name: mongocdcbench
pipeline:
  source: { type: mongodb-cdc, config: { connection_url: "\${env:BENCH_MONGODB_URL}", collections: [$coll], start: { at_operation_time: { t: $at_t, i: $at_i } } } }
  sink: { type: jsonl, config: { path: ./out.jsonl } }
  state: { type: file, config: { path: ./state } }
  batch_size: $batch
YAML
export BENCH_MONGODB_URL=$url
mib() { python3 -c "print($1 / 1024)"; }

printf '\n%-8s %9s %12s %8s %10s\n' program changes changes/s cpu_s peak_rss
timed "$floor" watch "$url" "$coll" "$at_t" "$at_i" "$updates" "$work/floor.jsonl" > "$work/floor.out"
floor_rps=$(rps "$updates")
floor_rows=$(wc -l < "$work/floor.jsonl")
printf '%-8s %9d %12s %8s %7.1f MiB  (change stream → Extended JSON lines; no state, no fsync)\n' floor "$floor_rows" "$floor_rps" "$cpu" "$(mib "$rss_kb")"
head -c 300 "$work/floor.jsonl"; echo
rm -f "$work/floor.jsonl"
timed bash -c "cd '$work' && '$faucet' run >/dev/null 2>'$work/faucet.err'"
got=$(grep -c '"op":"u"' "$work/out.jsonl" || true)
rps=$(rps "$updates")
printf '%-8s %9d %12s %8s %7.1f MiB  (fdatasync per page, bookmark fsynced)\n' faucet "$got" "$rps" "$cpu" "$(mib "$rss_kb")"
head -c 300 "$work/out.jsonl"; echo
[ "$got" -eq "$updates" ] || { echo "error: faucet wrote $got update records, expected $updates" >&2; cat "$work/faucet.err" >&2; exit 1; }
[ "$floor_rows" -eq "$updates" ] || { echo "error: the floor wrote $floor_rows events, expected $updates" >&2; exit 1; }
echo
echo "faucet / floor = $(ratio "$rps" "$floor_rps")x changes/s, peak RSS $(( rss_kb / 1024 )) MiB"
echo "target: ratio >= 0.8"
