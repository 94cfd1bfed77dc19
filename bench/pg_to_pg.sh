#!/usr/bin/env bash
# PostgreSQL → PostgreSQL with the `postgres` sink, against a binary COPY pipe between two
# psql processes, on a generated table.
#
#   bench/pg_to_pg.sh                     # 1,000,000 rows
#   ROWS=200000 REPEAT=1 bench/pg_to_pg.sh
#
# Needs PostgreSQL (FAUCET_TEST_PG_URL, default postgres://postgres@127.0.0.1:5432/test;
# scripts/services.sh starts it) and psql. Source and targets live in one database (and so
# share the server's two cores with the client, as the floor does).
#
# The table: id bigint primary key, two text columns, numeric(12,2), timestamptz, boolean,
# jsonb; every target has the same shape (with its primary key). Measured:
#   * floor: `psql \copy (select * from src) to stdout (format binary) | psql \copy dst from
#     stdin (format binary)`;
#   * append: crates/faucet-connectors/examples/pg_to_pg.rs — postgres query source (full read)
#     → postgres sink `append` (COPY FROM STDIN, text format, one transaction per page),
#     memory state: plain at-least-once writes;
#   * upsert: the same into a target already holding all rows, after every source row changed:
#     1M updates through the staging table and INSERT ... ON CONFLICT;
#   * csv append and csv atomic: a CSV of the table (psql \copy ... csv header) → append, once
#     with memory state (plain writes) and once with a file state store: a CSV replays
#     deterministically, so every page commits with its atomic commit token.
# Each run's target is compared with the source (md5 of every row's text, in id order), and
# rows/s (best of REPEAT, wall clock), CPU seconds of the client, peak RSS (`/usr/bin/time`)
# and the ratio to the floor are printed. Target: append ≥ 0.6× the floor's rows/s.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 1000000
url=${FAUCET_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
schema=bench_pg_pg_$$

sql() { pg_sql "$@"; }
need_pg "$url"
example_binary postgres pg_to_pg

work_dir pgpg
cleanup() { [ -n "${KEEP:-}" ] && { echo "kept $work $schema" >&2; return; }; sql "drop schema if exists $schema cascade" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

ddl=$pg_bench_ddl
echo "==> $rows rows in $schema.src" >&2
sql "create schema $schema"
pg_bench_table "$schema.src" "1 second"
digest() { sql "select count(*) || ' ' || md5(string_agg(t::text, ',' order by id)) from $1 t"; }

# run PREPARE_SQL CMD... → secs, cpu, rss_kb of the fastest of $repeat runs.
run() { local prep=$1; shift; best_of "sql $(printf '%q' "$prep"); rm -rf \"\$work/state\"" bash -c "$*"; }

want=$(digest "$schema.src")
printf '\n%-14s %9s %12s %8s %10s %7s\n' program rows rows/s cpu_s peak_rss ratio
report() { # LABEL TABLE
  local got rps
  got=$(digest "$2")
  [ "$got" = "$want" ] || { echo "error: $1: $2 differs from the source ($got vs $want)" >&2; exit 1; }
  rps=$(rps "$rows")
  printf '%-14s %9d %12s %8s %7.1f MiB %6sx\n' "$1" "$rows" "$rps" "$cpu" "$(mib)" "$(ratio "$rps" "$floor_rps")"
}

sql "create table $schema.floor $ddl"
run "truncate $schema.floor" \
  "psql -X -q '$url' -c '\\copy (select * from $schema.src) to stdout with (format binary)' | psql -X -q '$url' -c '\\copy $schema.floor from stdin with (format binary)'"
floor_rps=$(rps "$rows")
report "floor (psql)" "$schema.floor"

sql "create table $schema.appended $ddl"
run "truncate $schema.appended" \
  "'$faucet' '$url' table=$schema.src $schema.appended append memory $batch"
report "append" "$schema.appended"

# Upsert: the target holds the old rows; every source row changes.
sql "create table $schema.upserted $ddl; insert into $schema.upserted select * from $schema.src;
     update $schema.src set amount = amount + 1, flag = not flag;"
sql "vacuum analyze $schema.src"
want=$(digest "$schema.src")
run "update $schema.upserted u set amount = s.amount - 1, flag = not s.flag from $schema.src s where u.id = s.id" \
  "'$faucet' '$url' table=$schema.src $schema.upserted upsert=id memory $batch"
report "upsert" "$schema.upserted"

psql -X -q "$url" -c "\\copy $schema.src to '$work/src.csv' with (format csv, header)"
sql "create table $schema.csv_plain $ddl; create table $schema.csv_atomic $ddl"
run "truncate $schema.csv_plain" \
  "'$faucet' '$url' csv=$work/src.csv $schema.csv_plain append memory $batch"
report "csv append" "$schema.csv_plain"
run "truncate $schema.csv_atomic; drop table if exists $schema.faucet_commit_tokens" \
  "'$faucet' '$url' csv=$work/src.csv $schema.csv_atomic append '$work/state' $batch"
report "csv atomic" "$schema.csv_atomic"
echo
echo "targets: append >= 0.6x the floor; the atomic watermark close to plain append"
