#!/usr/bin/env bash
# A whole schema PostgreSQL → PostgreSQL: one `faucet replicate` (one slot, every table into
# its own target) against a floor, and against one pipeline per table.
#
#   bench/replicate_db.sh                       # 20 tables × 100,000 rows
#   TABLES=3 ROWS=1000 bench/replicate_db.sh    # a quick proof that it works
#   FAUCET_BIN=target/debug/faucet TABLES=3 ROWS=1000 bench/replicate_db.sh   # no release build
#   TABLES=200 ROWS=500 SEPARATE=0 bench/replicate_db.sh   # memory with 200 tables (one slot)
#
# Needs PostgreSQL with wal_level=logical (FAUCET_TEST_PG_URL, default
# postgres://postgres@127.0.0.1:5432/test; scripts/services.sh starts it), psql and pg_dump.
# Source and targets live in one database (and share the server's cores with the clients),
# unless TARGET_URL names a database on a second server (the targets and the floor's copy then
# live there) — what users replicating between two servers have: the slot then does not decode
# the WAL of the copy's own writes. On Debian, as root:
#   pg_createcluster 15 faucet_bench --port 5433
#   sed -i '1i host all all 127.0.0.1/32 trust' /etc/postgresql/15/faucet_bench/pg_hba.conf
#   pg_ctlcluster 15 faucet_bench start
#   psql -h 127.0.0.1 -p 5433 -U postgres -c 'create database test'
# then
# TARGET_URL=postgres://postgres@127.0.0.1:5433/test. Both servers share this machine's cores.
#
# Setup: schema <s>_src with TABLES tables t1..tN of ROWS rows each (id bigint primary key,
# name text, amount numeric(12,2), at timestamptz, doc jsonb); each target schema gets the
# same empty tables before its run (not timed). Measured, each on the same tables:
#   * floor: `pg_dump --data-only --schema=<s>_src | psql` into <s>_floor (COPY … FROM stdin,
#     the COPY lines renamed to the target schema);
#   * one pipeline: `faucet replicate` of `tables: ["<s>_src.*"]` (postgres-cdc, one slot,
#     file state store, batch BATCH) into the `postgres` sink with `table: "<s>_one.{table}"`,
#     `write_mode: upsert`: the consistent snapshot of every table, then the stream up to the
#     end, in one process;
#   * separate pipelines (unless SEPARATE=0): TABLES `faucet replicate` runs at once, one
#     table and one slot each (PostgreSQL's default max_replication_slots is 10: raise it
#     for 20).
# Every target is compared with its source (count and md5 of every row's text in id order).
# Prints rows/s (all tables' rows over the wall clock), CPU seconds, peak RSS (GNU time; for
# the separate pipelines the largest process's) and the ratio to the floor. Targets: one
# pipeline ≥ 0.8× the floor, peak RSS ≤ 64 MiB.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 100000
tables=${TABLES:-20}
url=${FAUCET_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
# Where the targets live: TARGET_URL (a second server, as users replicate between two), or the
# source's server.
target_url=${TARGET_URL:-$url}
s=bench_repl_$$

command -v pg_dump >/dev/null || { echo "pg_dump not found (package postgresql-client)" >&2; exit 1; }
need_pg "$url"
[ "$target_url" = "$url" ] || need_pg "$target_url" "bench/replicate_db.sh's header says how to make a second server"
faucet_binary postgres

work_dir repl
cleanup() {
  [ -n "${KEEP:-}" ] && { echo "kept $work and schemas ${s}_* (the targets' on TARGET_URL when set)" >&2; return; }
  pg_sql "select pg_drop_replication_slot(slot_name) from pg_replication_slots
          where slot_name like 'faucet_${s}%' and not active" >/dev/null 2>&1 || true
  for p in $(pg_sql "select pubname from pg_publication where pubname like 'pub_${s}%'" 2>/dev/null); do
    pg_sql "drop publication $p" >/dev/null 2>&1 || true
  done
  pg_sql "drop schema if exists ${s}_src cascade" >/dev/null 2>&1 || true
  for schema in floor one sep; do target_sql "drop schema if exists ${s}_$schema cascade" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# target_sql SQL: pg_sql on the targets' server.
target_sql() { local url=$target_url; pg_sql "$1"; }

ddl="(id bigint primary key, name text not null, amount numeric(12,2) not null,
      at timestamptz not null, doc jsonb)"
# make_tables SCHEMA [SQL] → the schema with the TABLES empty tables (SQL: pg_sql or target_sql).
make_tables() {
  local sql="create schema $1;" i
  for ((i = 1; i <= tables; i++)); do sql+=" create table $1.t$i $ddl;"; done
  "${2:-target_sql}" "$sql"
}
echo "==> $tables tables × $rows rows in ${s}_src" >&2
make_tables "${s}_src" pg_sql
for ((i = 1; i <= tables; i++)); do
  pg_sql "insert into ${s}_src.t$i
            select g, 'name ' || g, (g % 100000) / 100.0,
                   timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second',
                   jsonb_build_object('k', g, 't', $i)
            from generate_series(1, $rows) g"
done
pg_sql "vacuum analyze" >/dev/null
digest() { "${2:-target_sql}" "select count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' order by id)), '') from $1 t"; }
declare -a want
for ((i = 1; i <= tables; i++)); do want[i]=$(digest "${s}_src.t$i" pg_sql); done
total=$((tables * rows))

printf '\n%-22s %9s %12s %8s %10s %7s\n' program rows rows/s cpu_s peak_rss ratio
report() { # LABEL SCHEMA
  local i got rps ratio
  for ((i = 1; i <= tables; i++)); do
    got=$(digest "$2.t$i")
    [ "$got" = "${want[i]}" ] || { echo "error: $1: $2.t$i differs from the source ($got vs ${want[i]})" >&2; exit 1; }
  done
  rps=$(rps "$total")
  ratio=$(ratio "$rps" "${floor_rps:-$rps}")
  printf '%-22s %9d %12s %8s %7.1f MiB %6sx\n' "$1" "$total" "$rps" "$cpu" "$(mib)" "$ratio"
}

# The floor: the tables' data as pg_dump writes it, loaded by psql.
make_tables "${s}_floor"
timed bash -c "pg_dump --data-only --schema='${s}_src' '$url' \
  | sed '/^COPY /s/${s}_src\./${s}_floor./' | psql -X -q -v ON_ERROR_STOP=1 '$target_url' >/dev/null"
floor_rps=$(rps "$total")
report "floor (pg_dump|psql)" "${s}_floor"

# config DIR NAME TABLES TARGET_SCHEMA → DIR/faucet.yaml: replicate TABLES into TARGET_SCHEMA.
config() {
  mkdir -p "$1"
  cat > "$1/faucet.yaml" <<YAML
version: 1
name: $2
pipeline:
  source: { type: postgres-cdc, config: { connection_url: "\${env:BENCH_PG_URL}", slot_name: faucet_$2, publication: pub_$2, tables: [$3], create_publication: true } }
  sink: { type: postgres, config: { connection_url: "\${env:BENCH_PG_TARGET_URL}", table: "$4.{table}", write_mode: upsert } }
  state: { type: file, config: { path: ./state } }
  batch_size: $batch
YAML
}
export BENCH_PG_URL=$url BENCH_PG_TARGET_URL=$target_url

make_tables "${s}_one"
config "$work/one" "${s}_one" "\"${s}_src.*\"" "${s}_one"
timed bash -c "cd '$work/one' && '$faucet' replicate --quiet"
report "faucet, one pipeline" "${s}_one"

if [ "${SEPARATE:-1}" != 0 ]; then
  make_tables "${s}_sep"
  for ((i = 1; i <= tables; i++)); do
    config "$work/sep$i" "${s}_sep$i" "${s}_src.t$i" "${s}_sep"
  done
  timed bash -c "pids=(); for ((i = 1; i <= $tables; i++)); do (cd '$work'/sep\$i && exec '$faucet' replicate --quiet) & pids+=(\$!); done
    rc=0; for p in \"\${pids[@]}\"; do wait \$p || rc=1; done; exit \$rc"
  report "faucet, $tables pipelines" "${s}_sep"
fi
echo
echo "targets: one pipeline >= 0.8x the floor; peak RSS <= 64 MiB (separate pipelines: the largest process)"
