#!/usr/bin/env bash
# PostgreSQL table → JSON Lines: `faucet run` (postgres query source → jsonl sink) against
# `psql \copy (select row_to_json(t) from t)`, on a generated table.
#
#   bench/pg_to_jsonl.sh                  # 1,000,000 rows
#   ROWS=200000 REPEAT=1 bench/pg_to_jsonl.sh
#
# Needs PostgreSQL (FAUCET_TEST_PG_URL, default postgres://postgres@127.0.0.1:5432/test;
# scripts/services.sh starts it) and psql.
#
# The table: id bigint primary key, two text columns, numeric(12,2), timestamptz, boolean,
# jsonb. Compared:
#   * floor: `psql -c "\copy (select row_to_json(t) from t) to FILE"` — the server renders the
#     JSON, psql only copies bytes to the file;
#   * faucet, table: crates/faucet-connectors/examples/pg_to_jsonl.rs — the postgres query
#     source with `table:` (a full read in primary-key order, so a crash resumes mid-table)
#     → jsonl sink through faucet_core::Pipeline, file state store, batch 10,000 (every page
#     written, fsynced, bookmark persisted);
#   * faucet, query: the same with `query: select * from t` (unordered, like the floor).
# Prints rows/s (best of REPEAT, wall clock incl. connecting), CPU seconds, peak RSS
# (`/usr/bin/time` "Maximum resident set size") and the ratio to the floor; checks the row
# counts. Targets: faucet ≥ 0.8× the floor's rows/s, peak RSS < 64 MiB.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 1000000
url=${FAUCET_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
schema=bench_pg_jsonl_$$

need_pg "$url"
example_binary postgres pg_to_jsonl

work_dir pg
cleanup() { [ -n "${KEEP:-}" ] && { echo "kept $work $schema" >&2; return; }; pg_sql "drop schema if exists $schema cascade" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

echo "==> $rows rows in $schema.t" >&2
pg_sql "create schema $schema"
pg_bench_table "$schema.t" "1 second"

# run CMD... → secs, cpu, rss_kb of the fastest of $repeat runs (in $work).
run_in=$work
run() { best_of 'rm -rf "$work/out.jsonl" "$work/state" "$work/floor.jsonl"' "$@"; }

printf '\n%-16s %9s %12s %8s %10s\n' program rows rows/s cpu_s peak_rss
run psql -X -q "$url" -c "\\copy (select row_to_json(t) from $schema.t t) to '$work/floor.jsonl'"
floor_rows=$(wc -l < "$work/floor.jsonl")
floor_rps=$(rps "$rows")
printf '%-16s %9d %12s %8s %7.1f MiB  (psql; the server renders JSON)\n' floor "$floor_rows" "$floor_rps" "$cpu" "$(mib)"

table_and_query "$schema.t" "$url" "floor=$floor_rps"
