#!/usr/bin/env bash
# MySQL/MariaDB table → JSON Lines: the `mysql` query source → jsonl sink against the
# `mariadb` client writing the same rows, on a generated table.
#
#   bench/mysql_to_jsonl.sh                  # 1,000,000 rows
#   ROWS=200000 REPEAT=1 bench/mysql_to_jsonl.sh
#
# Needs a MariaDB (FAUCET_TEST_MYSQL_URL, default mysql://root@127.0.0.1:3307/test, the private
# one scripts/services.sh starts; the table is loaded with sql_log_bin=0, so the binlog does
# not grow) and the `mariadb` client.
#
# The table: id BIGINT primary key, name VARCHAR(40), note VARCHAR(32) NULL, amount
# DECIMAL(12,2), at DATETIME(6), flag BOOLEAN, doc JSON. Compared:
#   * floor, text: `mariadb --batch --quick -e 'SELECT * FROM t' > FILE` — the client streams
#     the server's tab-separated text to the file;
#   * floor, json: `mariadb --batch --quick --skip-column-names -e 'SELECT JSON_OBJECT(...)'`
#     — the server renders one JSON object per row;
#   * faucet, table: crates/faucet-connectors/examples/mysql_to_jsonl.rs — the mysql query
#     source with `table:` (a full read in primary-key order, so a crash resumes mid-table) →
#     jsonl sink through faucet_core::Pipeline, file state store, batch 10,000 (every page
#     written, fsynced, bookmark persisted);
#   * faucet, query: the same with `query: select * from t` (unordered, like the floors).
# Prints rows/s (best of REPEAT, wall clock incl. connecting), CPU seconds, peak RSS
# (`/usr/bin/time` "Maximum resident set size") and the ratio to the text floor; checks the
# row counts. Targets: faucet ≥ 0.8× the floor's rows/s, peak RSS < 64 MiB.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 1000000
url=${FAUCET_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3307/test}
db=bench_mysql_jsonl_$$

bench_url="mysql://${url#mysql://}"; bench_url="${bench_url%/*}/$db"
need_mariadb "$url"
sql() { my_sql "$@"; }
example_binary mysql,files mysql_to_jsonl

work_dir mysql
cleanup() { [ -n "${KEEP:-}" ] && { echo "kept $work $db" >&2; return; }; sql "SET SESSION sql_log_bin = 0; DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

echo "==> $rows rows in $db.t" >&2
sql "SET SESSION sql_log_bin = 0;
     CREATE DATABASE $db CHARACTER SET utf8mb4;
     USE $db;
     CREATE TABLE $db.t (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, note VARCHAR(32),
       amount DECIMAL(12,2) NOT NULL, at DATETIME(6) NOT NULL, flag BOOLEAN NOT NULL, doc JSON);
     INSERT INTO $db.t
       SELECT seq, CONCAT('name ', seq), IF(seq % 10 = 0, NULL, MD5(seq)),
              (seq % 100000) / 100.0, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq SECOND,
              seq % 2 = 0, JSON_OBJECT('k', seq, 'tags', JSON_ARRAY('a', seq % 7))
       FROM seq_1_to_$rows;
     ANALYZE TABLE $db.t;" >/dev/null

# run CMD... → secs, cpu, rss_kb of the fastest of $repeat runs (in $work).
run_in=$work
run_stdout=$work/stdout
run() { best_of 'rm -rf "$work/out.jsonl" "$work/state" "$work/floor.txt"' "$@"; }

printf '\n%-16s %9s %12s %8s %10s\n' program rows rows/s cpu_s peak_rss
run "${client[@]}" --batch --quick --skip-column-names -e "SELECT * FROM $db.t"
floor_rows=$(wc -l < "$work/stdout")
floor_rps=$(rps "$rows")
printf '%-16s %9d %12s %8s %7.1f MiB  (mariadb --batch --quick, tab-separated text)\n' "floor text" "$floor_rows" "$floor_rps" "$cpu" "$(mib)"
run "${client[@]}" --batch --quick --skip-column-names --raw -e "SELECT JSON_OBJECT('id', id, 'name', name, 'note', note, 'amount', amount, 'at', at, 'flag', flag, 'doc', JSON_EXTRACT(doc, '$')) FROM $db.t"
json_rows=$(wc -l < "$work/stdout")
json_rps=$(rps "$rows")
printf '%-16s %9d %12s %8s %7.1f MiB  (the server renders JSON_OBJECT)\n' "floor json" "$json_rows" "$json_rps" "$cpu" "$(mib)"

table_and_query "$db.t" "$bench_url" "floor text=$floor_rps" "floor json=$json_rps"
