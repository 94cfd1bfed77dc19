#!/usr/bin/env bash
# PostgreSQL → MariaDB with the `mysql` sink (and MariaDB → PostgreSQL with the `postgres`
# sink), each beside a floor measured in the same run on the same table.
#
#   bench/pg_to_mysql.sh                     # 1,000,000 rows
#   ROWS=200000 REPEAT=1 bench/pg_to_mysql.sh
#
# Needs PostgreSQL (FAUCET_TEST_PG_URL, default postgres://postgres@127.0.0.1:5432/test), the
# system MariaDB (FAUCET_TEST_MYSQL_SINK_URL, default mysql://root@127.0.0.1:3306/test, with
# local_infile on), psql and the mariadb client; scripts/services.sh starts both servers.
#
# The table: id bigint primary key, two text columns (one null every 10th row),
# numeric(12,2), timestamptz, boolean, jsonb; the MariaDB tables have the same shape
# (BIGINT, LONGTEXT, DECIMAL(12,2), DATETIME(6) in UTC, BOOLEAN, JSON). Measured:
#   * floor → MariaDB: `psql \copy (select …) to FILE` then the `mariadb` client's
#     `LOAD DATA LOCAL INFILE` of that file (timed together);
#   * append: crates/faucet-connectors/examples/cross_db.rs — postgres query source (full
#     read) → mysql sink `append` (multi-row prepared INSERTs, one transaction per page),
#     memory state;
#   * upsert: the same into a target already holding all rows, after every source row changed
#     (INSERT … ON DUPLICATE KEY UPDATE);
#   * floor → PostgreSQL: `mariadb --batch --quick -e 'select …' > FILE` then `psql \copy … from
#     FILE`; and mysql → postgres append (the mysql query source → the postgres sink).
# Each target is compared with its source (row count, sum(amount), count(note), sum(id where
# flag)); rows/s (best of REPEAT, wall clock), client CPU seconds, peak RSS (`/usr/bin/time`)
# and the ratio to the floor are printed. Targets: append ≥ 0.6×, upsert ≥ 0.4× the floor.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 1000000
url=${FAUCET_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
pg=$url
my=${FAUCET_TEST_MYSQL_SINK_URL:-mysql://root@127.0.0.1:3306/test}
schema=bench_pg_my_$$
db=bench_pg_my_$$
my_db_url="${my%/*}/$db"

sql() { pg_sql "$@"; }
need_pg "$pg"
need_mariadb "$my"
mdb() { "${client[@]}" --batch --skip-column-names "$@"; }

example_binary postgres,mysql cross_db

work_dir pgmy
cleanup() {
  [ -n "${KEEP:-}" ] && { echo "kept $work $schema $db" >&2; return; }
  sql "drop schema if exists $schema cascade" >/dev/null 2>&1 || true
  mdb -e "drop database if exists $db" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

pg_ddl=$pg_bench_ddl
my_ddl="(id BIGINT PRIMARY KEY, name LONGTEXT NOT NULL, note LONGTEXT, amount DECIMAL(12,2) NOT NULL,
         at DATETIME(6) NOT NULL, flag BOOLEAN NOT NULL, doc JSON) ENGINE=InnoDB"
echo "==> $rows rows in $schema.src (PostgreSQL) and $db.src (MariaDB)" >&2
sql "create schema $schema"
pg_bench_table "$schema.src" "1.5 second"
mdb -e "create database $db character set utf8mb4"
# What MariaDB reads: the PostgreSQL rows in LOAD DATA's default text form (tab-separated, \N).
export_sql="select id, name, note, amount, to_char(at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), flag::int, doc from $schema.src"
pg_digest() { sql "select count(*) || ' ' || sum(amount) || ' ' || count(note) || ' ' || coalesce(sum(id) filter (where flag), 0) from $1"; }
my_digest() { mdb -e "select concat(count(*), ' ', sum(amount), ' ', count(note), ' ', coalesce(sum(if(flag, id, 0)), 0)) from $1"; }

# run PREPARE CMD... → secs, cpu, rss_kb of the fastest of $repeat runs.
run() { local prep=$1; shift; best_of "bash -c $(printf '%q' "$prep")" bash -c "$*"; }

printf '\n%-22s %9s %12s %8s %10s %7s\n' program rows rows/s cpu_s peak_rss ratio
report() { # LABEL GOT WANT
  local rps
  [ "$2" = "$3" ] || { echo "error: $1: the target differs from the source ($2 vs $3)" >&2; exit 1; }
  rps=$(rps "$rows")
  printf '%-22s %9d %12s %8s %7.1f MiB %6sx\n' "$1" "$rows" "$rps" "$cpu" "$(mib)" "$(ratio "$rps" "$floor_rps")"
}
mq() { printf '%q' "$1"; }
M=$(printf '%q ' "${client[@]}")

# PostgreSQL → MariaDB.
want=$(pg_digest "$schema.src")
mdb -e "create table $db.floor $my_ddl; create table $db.appended $my_ddl; create table $db.upserted $my_ddl"
run "$M -e 'truncate $db.floor'; rm -f $work/floor.tsv" \
  "psql -X -q '$pg' -c $(mq "\\copy ($export_sql) to '$work/floor.tsv'") && $M --local-infile=1 -e $(mq "load data local infile '$work/floor.tsv' into table $db.floor")"
floor_rps=$(rps "$rows")
report "floor (psql + LOAD)" "$(my_digest "$db.floor")" "$want"
run "$M -e 'truncate $db.appended'" \
  "'$faucet' '$pg' $schema.src '$my_db_url' $db.appended append $batch"
report "append → mysql" "$(my_digest "$db.appended")" "$want"
# Upsert: the target holds the old rows; every source row changes.
mdb -e "insert into $db.upserted select * from $db.appended"
sql "update $schema.src set amount = amount + 1, flag = not flag"
sql "vacuum analyze $schema.src"
want=$(pg_digest "$schema.src")
run "$M -e 'update $db.upserted set amount = amount - 1, flag = not flag'" \
  "'$faucet' '$pg' $schema.src '$my_db_url' $db.upserted upsert=id $batch"
report "upsert → mysql" "$(my_digest "$db.upserted")" "$want"

# MariaDB → PostgreSQL.
mdb -e "create table $db.src $my_ddl; insert into $db.src select * from $db.upserted"
want=$(my_digest "$db.src")
sql "create table $schema.floor $pg_ddl; create table $schema.appended $pg_ddl"
run "psql -X -q '$pg' -c 'truncate $schema.floor'; rm -f $work/back.tsv" \
  "$M --batch --quick --skip-column-names -e $(mq "select id, name, note, amount, date_format(at, '%Y-%m-%d %H:%i:%s.%f+00'), flag = 1, doc from $db.src") > '$work/back.tsv' && psql -X -q '$pg' -c $(mq "\\copy $schema.floor from '$work/back.tsv' with (null 'NULL')")"
floor_rps=$(rps "$rows")
report "floor (mariadb + copy)" "$(pg_digest "$schema.floor")" "$want"
run "psql -X -q '$pg' -c 'truncate $schema.appended'" \
  "'$faucet' '$my_db_url' $db.src '$pg' $schema.appended append $batch"
report "append → postgres" "$(pg_digest "$schema.appended")" "$want"
echo
echo "targets: append >= 0.6x the floor, upsert >= 0.4x"
