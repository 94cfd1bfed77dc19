#!/usr/bin/env bash
# postgres-cdc → JSON Lines: faucet against pg_recvlogical, on a 1M-row UPDATE.
#
#   bench/cdc_to_jsonl.sh                 # 1,000,000 rows, one UPDATE transaction
#   ROWS=200000 BATCH=10000 bench/cdc_to_jsonl.sh
#   MAX_PAGE_DELAY=1h bench/cdc_to_jsonl.sh   # the pipeline's max_page_delay (default 50ms)
#
# Needs PostgreSQL with wal_level=logical (FAUCET_TEST_PG_URL, default
# postgres://postgres@127.0.0.1:5432/test; scripts/services.sh starts it) and pg_recvlogical.
#
# Setup: a table of ROWS rows (id, v, note); two slots made before the change — faucet's
# (pgoutput, created by a first `faucet run`) and the floor's (test_decoding); then one
# `UPDATE ... SET v = v + 1` of every row (a single transaction of ROWS changes).
#   * faucet: the release `faucet run` binary (postgres-cdc → jsonl sink, file state store,
#     batch BATCH): decodes pgoutput, builds typed change records, writes JSON lines, fsyncs
#     and persists the bookmark per page, acknowledges the slot; bounded, so it stops by itself.
#   * the floor: `pg_recvlogical --start --endpos <lsn after the UPDATE> -f file` with
#     test_decoding: the server renders text, the client only copies it to a file.
# Prints changes/s (wall clock, including connection and slot start), CPU seconds, peak RSS
# (`/usr/bin/time -v`), and the ratio; checks both saw ROWS changes.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 1000000
url=${FAUCET_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
pg_cdc_names cdc

command -v pg_recvlogical >/dev/null || { echo "pg_recvlogical not found (package postgresql-client)" >&2; exit 1; }
need_pg "$url"

faucet_binary postgres

work_dir cdc
sql() { pg_sql "$@"; }
cleanup() {
  pg_cdc_cleanup
  rm -rf "$work"
}
trap cleanup EXIT

echo "==> $rows rows in $schema.t" >&2
sql "create schema $schema;
     create table $schema.t (id int primary key, v int not null, note text not null);
     insert into $schema.t select g, g, 'note ' || g from generate_series(1, $rows) g;"

cat > "$work/faucet.yaml" <<EOF
version: 1
name: cdc_bench
pipeline:
  source: { type: postgres-cdc, config: { connection_url: "\${env:BENCH_PG_URL}", slot_name: $slot, publication: $publication, tables: [$schema.t], create_publication: true } }
  sink: { type: jsonl, config: { path: ./out.jsonl } }
  state: { type: file, config: { path: ./state } }
  batch_size: $batch
  max_page_delay: ${MAX_PAGE_DELAY:-50ms}
EOF
export BENCH_PG_URL=$url
(cd "$work" && "$faucet" run --quiet)      # creates the publication and faucet's slot
sql "select pg_create_logical_replication_slot('$floor_slot', 'test_decoding')" >/dev/null
rm -f "$work/out.jsonl"

echo "==> UPDATE of $rows rows (one transaction)" >&2
sql "update $schema.t set v = v + 1"
endpos=$(sql "select pg_current_wal_lsn()")


printf '\n%-16s %10s %12s %8s %10s\n' program changes changes/s cpu_s peak_rss
timed bash -c "cd '$work' && '$faucet' run --quiet --output json > summary.json"
faucet_n=$(wc -l < "$work/out.jsonl")
pages=$(python3 -c "import json; print(json.load(open('$work/summary.json'))['runs'][0]['pages'])")
faucet_rps=$(rps "$faucet_n")
faucet_rss=$rss_kb
printf '%-16s %10d %12s %8s %7.1f MiB\n' faucet "$faucet_n" "$faucet_rps" "$cpu" "$(mib)"

timed pg_recvlogical -d "$url" --slot "$floor_slot" --start --no-loop --endpos "$endpos" -f "$work/floor.txt"
floor_n=$(grep -c "^table $schema.t: UPDATE" "$work/floor.txt" || true)
floor_rps=$(rps "$floor_n")
printf '%-16s %10d %12s %8s %7.1f MiB\n' pg_recvlogical "$floor_n" "$floor_rps" "$cpu" "$(mib)"

echo
echo "faucet/pg_recvlogical = $(ratio "$faucet_rps" "$floor_rps")x changes/s; faucet peak RSS $((faucet_rss / 1024)) MiB (batch $batch, max_page_delay ${MAX_PAGE_DELAY:-50ms}, $pages pages)"
echo "sample record: $(head -c 300 "$work/out.jsonl")"
if [ "$faucet_n" -ne "$rows" ] || [ "$floor_n" -ne "$rows" ]; then
  echo "error: expected $rows changes, faucet wrote $faucet_n, pg_recvlogical $floor_n" >&2
  exit 1
fi
