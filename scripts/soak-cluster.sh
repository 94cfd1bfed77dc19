#!/usr/bin/env bash
# Soak of `faucet serve --cluster` (not in CI): three members on loopback share nine pipelines
# (CSV -> PostgreSQL append, i.e. atomic watermark; CSV -> JSON Lines; PostgreSQL query ->
# upsert) on the local PostgreSQL; for MINUTES (default 10) a random member is SIGKILLed (or,
# one time in three, SIGTERMed) and restarted every few seconds while the sources grow. Then
# the killing stops, and every target must equal its source: the append and upsert targets
# exactly (0 lost, 0 duplicated), JSON Lines with every id (0 lost).
#
# Usage: scripts/soak-cluster.sh [MINUTES]   (FAUCET_BIN, FAUCET_TEST_PG_URL to override;
# build first: cargo build -p faucet-cli --all-features)
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=${1:-10}
bin=${FAUCET_BIN:-$PWD/target/debug/faucet}
url=${FAUCET_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
tag="soak_$$_$(date +%s)"
schema="cl_$tag"
state="cl_state_$tag"
work=$(mktemp -d)
psql_() { PGOPTIONS="-c client_min_messages=warning" psql "$url" -qAtX -v ON_ERROR_STOP=1 -c "$1"; }

declare -A pids
cleanup() {
  for m in "${!pids[@]}"; do kill -9 "${pids[$m]}" 2>/dev/null || true; done
  psql_ "DROP SCHEMA IF EXISTS $schema CASCADE; DROP TABLE IF EXISTS $state, ${state}_lease" || true
  rm -rf "$work"
}
trap cleanup EXIT

psql_ "CREATE SCHEMA $schema; CREATE TABLE $schema.src (id int PRIMARY KEY, v text NOT NULL)"
mkdir -p "$work/pipelines" "$work/out"
csv_rows=0
src_rows=0
grow() { # grow N: N more CSV lines in every file, N more rows in src
  local n=$1 i f
  for f in a0 a1 a2 j0 j1 j2; do
    [ -f "$work/$f.csv" ] || echo "id,name" > "$work/$f.csv"
    for ((i = csv_rows + 1; i <= csv_rows + n; i++)); do echo "$i,name-$i"; done >> "$work/$f.csv"
  done
  psql_ "INSERT INTO $schema.src SELECT g, 'v' || g FROM generate_series($((src_rows + 1)), $((src_rows + n))) g"
  csv_rows=$((csv_rows + n)); src_rows=$((src_rows + n))
}
grow 100

st="{ type: postgres, config: { url: \"$url\", table: $state, ensure_table: true } }"
cat > "$work/pipelines/csvpg.yaml" <<EOF
version: 1
name: csvpg
pipeline:
  source: { type: csv, config: { path: ../a0.csv, columns: { id: int } } }
  sink: { type: postgres, config: { connection_url: "$url", table: $schema.a0, create_table: true } }
  state: $st
  delivery: effectively_once
  batch_size: 13
  schedule: "*/1 * * * * *"
matrix:
  - { id: a0 }
  - { id: a1, source: { config: { path: ../a1.csv } }, sink: { config: { table: $schema.a1 } } }
  - { id: a2, source: { config: { path: ../a2.csv } }, sink: { config: { table: $schema.a2 } } }
EOF
cat > "$work/pipelines/csvjl.yaml" <<EOF
version: 1
name: csvjl
pipeline:
  source: { type: csv, config: { path: ../j0.csv } }
  sink: { type: jsonl, config: { path: ../out/j0.jsonl } }
  state: $st
  batch_size: 13
  schedule: "*/1 * * * * *"
matrix:
  - { id: j0 }
  - { id: j1, source: { config: { path: ../j1.csv } }, sink: { config: { path: ../out/j1.jsonl } } }
  - { id: j2, source: { config: { path: ../j2.csv } }, sink: { config: { path: ../out/j2.jsonl } } }
EOF
cat > "$work/pipelines/query.yaml" <<EOF
version: 1
name: query
pipeline:
  source: { type: postgres, config: { connection_url: "$url", table: $schema.src, replication_method: incremental, replication_key: [id] } }
  sink: { type: postgres, config: { connection_url: "$url", table: $schema.q0, create_table: true, write_mode: upsert, key: [id] } }
  state: $st
  delivery: effectively_once
  batch_size: 13
  schedule: "*/1 * * * * *"
matrix:
  - { id: q0 }
  - { id: q1, sink: { config: { table: $schema.q1 } } }
  - { id: q2, sink: { config: { table: $schema.q2 } } }
EOF

start() { # start MEMBER
  (cd "$work/pipelines" && FAUCET_CLUSTER_URL=$url FAUCET_LOG=warn exec "$bin" serve . \
    --listen 127.0.0.1:0 --member "$1" --cluster-table "$schema.members" --lease-ttl 3s \
    --settle 1s 2>> "$work/$1.log") &
  pids[$1]=$!
}
for m in m1 m2 m3; do start $m; done

kills=0; terms=0
end=$(( $(date +%s) + minutes * 60 ))
while [ "$(date +%s)" -lt "$end" ]; do
  sleep $((2 + RANDOM % 4))
  grow $((1 + RANDOM % 20))
  m=m$((1 + RANDOM % 3))
  if [ $((RANDOM % 3)) = 0 ]; then
    kill -TERM "${pids[$m]}" 2>/dev/null || true; terms=$((terms + 1))
    wait "${pids[$m]}" 2>/dev/null || true
  else
    kill -9 "${pids[$m]}" 2>/dev/null || true; kills=$((kills + 1))
    wait "${pids[$m]}" 2>/dev/null || true
  fi
  start $m
done

check() {
  local t want got
  for t in a0 a1 a2; do
    got=$(psql_ "SELECT count(*) || '/' || count(DISTINCT id) FROM $schema.$t" 2>/dev/null || echo none)
    [ "$got" = "$csv_rows/$csv_rows" ] || { echo "$t: $got of $csv_rows"; return 1; }
  done
  for t in j0 j1 j2; do
    got=$(grep -o '"id":"[0-9]*"' "$work/out/$t.jsonl" 2>/dev/null | sort -u | wc -l)
    [ "$got" = "$csv_rows" ] || { echo "$t: $got distinct of $csv_rows"; return 1; }
  done
  want=$(psql_ "SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) FROM $schema.src")
  for t in q0 q1 q2; do
    got=$(psql_ "SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) FROM $schema.$t" 2>/dev/null || echo none)
    [ "$got" = "$want" ] || { echo "$t differs from src"; return 1; }
  done
}
settled_at=$(date +%s)
until problem=$(check); do
  if [ $(( $(date +%s) - settled_at )) -gt 120 ]; then
    echo "FAILED: after 120 s: $problem" >&2
    tail -n 20 "$work"/m*.log >&2
    exit 1
  fi
  sleep 1
done
moves=$(psql_ "SELECT coalesce(sum(moves), 0) FROM $schema.members_owners")
dups=0
for t in j0 j1 j2; do
  dups=$((dups + $(grep -c . "$work/out/$t.jsonl") - csv_rows))
done
echo "soak-cluster: ${minutes} min, $kills SIGKILLs and $terms SIGTERMs of 3 members, 9 pipelines;" \
  "$csv_rows rows per CSV, $src_rows in src; every target equals its source" \
  "$(( $(date +%s) - settled_at )) s after the last restart; $moves moves; JSON Lines duplicates $dups"
