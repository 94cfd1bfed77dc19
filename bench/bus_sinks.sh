#!/usr/bin/env bash
# CSV and postgres-cdc → the bus sinks (nats, redis-streams, kafka): faucet against a floor with the
# same client, the same messages and the same acknowledgement rule.
#
#   bench/bus_sinks.sh                      # 1,000,000 generated CSV rows, a 1,000,000-row UPDATE
#   ROWS=200000 BATCH=10000 bench/bus_sinks.sh
#   BUSES=nats CDC=0 bench/bus_sinks.sh     # one bus, CSV only
#
# Needs nats-server with JetStream (FAUCET_TEST_NATS_URL, default nats://127.0.0.1:4222),
# Redis (FAUCET_TEST_REDIS_URL, default redis://127.0.0.1:6379/), PostgreSQL with
# wal_level=logical and pg_recvlogical for the CDC part (FAUCET_TEST_PG_URL), nats-py and
# redis-py, and for kafka a broker (FAUCET_TEST_KAFKA_BROKERS, default tansu on 127.0.0.1:19092)
# and confluent-kafka (scripts/services.sh starts and installs them all). kafka is not in the
# default BUSES (BUSES="nats redis kafka" adds it): it is at-least-once only, and its stored
# count is read message by message (tansu's end offsets are wrong), which takes a while.
#
# CSV part, per bus, each into a fresh stream:
#   * floor: bench/bus_floor (Rust, the same async-nats / redis / rdkafka crates as faucet),
#     twice: with faucet's messages (the floor the ratios are taken against: the same JSON
#     values and byte for byte the same headers faucet sends — the csv bookmark as
#     `faucet-position`, `faucet-id`, and on nats the re-anchor headers, `Nats-Msg-Id` and each
#     publish chained to the one before; on redis the commit token in the page's
#     transaction) and with minimal ones (`faucet-position` `{"offset":N}` and `faucet-id`
#     only), to show what the headers themselves cost. nats: pipelined publishes (at most
#     8,192 unacknowledged), every ack of a page of BATCH rows awaited before the next;
#     redis: each page one MULTI/EXEC; kafka: librdkafka's idempotent producer (acks=all),
#     every delivery report of a page awaited before the next;
#   * faucet at_least_once and effectively_once: the release `faucet run`, csv → the sink,
#     file state store, batch BATCH (effectively_once adds the re-anchor headers and chains
#     each nats publish to the stream sequence before it; on redis the page's MULTI/EXEC
#     also writes the commit token, after a WATCH round trip that checks the fence and the
#     token). kafka: at_least_once only.
# CDC part, per bus: one UPDATE of ROWS rows (one transaction) read by postgres-cdc into the
# sink (effectively_once; kafka at_least_once). The floor the ratio is taken against does the
# same job with the least work: bench/bus_floor reading the change from a pgoutput slot of its
# own with the replication client faucet uses (pgwire-replication; each update message is a
# record, not decoded further) and publishing faucet's messages of it (`cdc:TABLE`: the change
# records' JSON, `faucet-op`, `faucet-table`, the LSN as `faucet-position`, the ids, the
# source key, and on nats the page headers with the bookmarks of a transaction read in part),
# on the same cores as the walsender. Printed beside it: the bound of doing either part alone
# — pg_recvlogical reading the change (test_decoding, to a file) and the floor publishing the
# messages from memory — and the floor with minimal messages.
# Checks every run stored ROWS messages; prints rows/s (wall clock), CPU seconds, peak RSS
# (`/usr/bin/time`) and the ratios. Target: faucet ≥ 0.8× the floor.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_start 1000000
pg_cdc_names bus
buses=${BUSES:-"nats redis"}
cdc=${CDC:-1}
nats_url=${FAUCET_TEST_NATS_URL:-nats://127.0.0.1:4222}
redis_url=${FAUCET_TEST_REDIS_URL:-redis://127.0.0.1:6379/}
kafka_brokers=${FAUCET_TEST_KAFKA_BROKERS:-127.0.0.1:19092}
url=${FAUCET_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
admin="python3 $repo/bench/bus_admin.py"


faucet_binary nats,redis-streams,kafka,postgres
floor_binary bus_floor faucet-bench-bus-floor

work_dir bus
sql() { pg_sql "$@"; }
cleanup() {
  pg_cdc_cleanup
  for s in FLOOR FAUCET CDC CDCFLOOR; do $admin nats-delete "$nats_url" "BENCH_BUS_${s}_$suffix" 2>/dev/null || true; done
  $admin redis-delete "$redis_url" "bench-bus-$suffix:*" 2>/dev/null || true
  for t in "bench-bus-$suffix.events" "bench-bus-$suffix.cdc.$schema.t" "bench-bus-$suffix.cdcfloor.$schema.t"; do
    $admin kafka-delete "$kafka_brokers" "$t" 2>/dev/null || true
  done
  [ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

row() { printf '%-42s %9s %12s %8s %7.1f MiB\n' "$1" "$2" "$3" "$cpu" "$(mib)"; }

# The sink of a pipeline into BUS for ROUTE (a subject, or a stream key) and, for nats, STREAM.
sink_of() {
  case $1 in
    nats) echo "{ type: nats, config: { url: \"$nats_url\", subject: \"$2\", stream: $3, create_stream: true } }" ;;
    redis) echo "{ type: redis-streams, config: { url: \"$redis_url\", stream: \"$2\", prefix: \"bench-bus-$suffix:\" } }" ;;
    kafka) echo "{ type: kafka, config: { brokers: \"$kafka_brokers\", topic: \"$2\" } }" ;;
  esac
}
# cdc_route BUS TABLE → sets route (the subject, stream key or topic of TABLE's changes on BUS,
# TABLE either `{schema}.{table}` as a template or a table's name) and stream (nats: the stream).
cdc_route() {
  case $1 in
    nats) route="bench-bus-$suffix.cdc.$2"; stream=BENCH_BUS_CDC_$suffix ;;
    redis) route="bench-bus-$suffix:cdc.$2"; stream="" ;;
    kafka) route="bench-bus-$suffix.cdc.$2"; stream="" ;;
  esac
}
# Fresh, empty destinations: the floor's stream made here, faucet's by its sink.
reset() {
  case $1 in
    nats) $admin nats-delete "$nats_url" "$2" ;;
    redis) $admin redis-delete "$redis_url" "bench-bus-$suffix:*" ;;
    kafka) $admin kafka-delete "$kafka_brokers" "$3" ;;
  esac
}
stored() {
  case $1 in
    nats) $admin nats-count "$nats_url" "$3" "$2" ;;
    redis) $admin redis-count "$redis_url" "$2" ;;
    kafka) $admin kafka-count "$kafka_brokers" "$2" ;;
  esac
}
check() {
  [ "$1" = "$rows" ] || { echo "error: $2 stored $1 messages, expected $rows" >&2; exit 1; }
}

echo "==> generating $rows rows" >&2
python3 bench/gen_csv.py "$work/in.csv" "$rows"

summary=()
declare -A floor_rps minimal_rps
printf '\n%-42s %9s %12s %8s %10s\n' program messages rows/s cpu_s peak_rss
for bus in $buses; do
  case $bus in
    nats) route="bench-bus-$suffix.events"; fstream=BENCH_BUS_FLOOR_$suffix; stream=BENCH_BUS_FAUCET_$suffix ;;
    redis) route="bench-bus-$suffix:events"; fstream=""; stream="" ;;
    kafka) route="bench-bus-$suffix.events"; fstream=""; stream="" ;;
    *) echo "unknown bus $bus (nats, redis, kafka)" >&2; exit 2 ;;
  esac
  case $bus in nats) dest=$nats_url ;; redis) dest=$redis_url ;; kafka) dest=$kafka_brokers ;; esac
  for shape in minimal faucet; do
    reset "$bus" "$fstream" "$route"
    [ "$bus" = nats ] && $admin nats-create "$nats_url" "$fstream" "$route"
    timed "$floor" "$bus" "$dest" "$route" "$work/in.csv" "$batch" "$shape" >/dev/null
    n=$(stored "$bus" "$route" "$fstream"); check "$n" "the $bus floor ($shape messages)"
    r=$(rps "$rows")
    row "floor → $bus ($shape messages)" "$n" "$r"
    [ "$shape" = minimal ] && minimal_rps[$bus]=$r
  done
  floor_rps[$bus]=$r
  summary+=("floor → $bus: faucet's messages / minimal ones = $(ratio "$r" "${minimal_rps[$bus]}")x rows/s (what faucet's headers cost the bus client and server)")
  reset "$bus" "$fstream" "$route"
  deliveries="at_least_once effectively_once"
  [ "$bus" = kafka ] && deliveries=at_least_once
  for delivery in $deliveries; do
    reset "$bus" "$stream" "$route"
    rm -rf "$work/state"
    cat > "$work/faucet.yaml" <<YAML
version: 1
name: bench
pipeline:
  source: { type: csv, config: { path: "$work/in.csv" } }
  sink: $(sink_of "$bus" "$route" "$stream")
  state: { type: file, config: { path: "$work/state" } }
  delivery: $delivery
  batch_size: $batch
YAML
    timed "$faucet" run --quiet --log-level error "$work/faucet.yaml" >/dev/null
    n=$(stored "$bus" "$route" "$stream"); check "$n" "faucet ($delivery) into $bus"
    r=$(rps "$rows")
    row "faucet csv → $bus ($delivery)" "$n" "$r"
    summary+=("csv → $bus ($delivery): faucet / floor = $(ratio "$r" "${floor_rps[$bus]}")x rows/s, peak RSS $((rss_kb / 1024)) MiB")
    reset "$bus" "$stream" "$route"
  done
done

if [ "$cdc" = 1 ]; then
  echo "==> $rows rows in $schema.t for the CDC part" >&2
  sql "create schema $schema;
       create table $schema.t (id int primary key, v int not null, note text not null);
       insert into $schema.t select g, g, 'note ' || g from generate_series(1, $rows) g;
       create publication $publication for table $schema.t;"
  sql "select pg_create_logical_replication_slot('$floor_slot', 'test_decoding')" >/dev/null
  # The bus floors that read the change themselves: a pgoutput slot each.
  for bus in $buses; do
    sql "select pg_create_logical_replication_slot('faucet_bus_pgfloor_${bus}_$suffix', 'pgoutput')" >/dev/null
  done
  # host:port:user:database of $url for the floor, its password in PGPASSWORD.
  pg_spec=$(python3 -c "import sys, urllib.parse as u; p = u.urlparse(sys.argv[1]); print(f'{p.hostname or \"127.0.0.1\"}:{p.port or 5432}:{u.unquote(p.username or \"postgres\")}:{p.path.lstrip(\"/\")}')" "$url")
  export PGPASSWORD=${PGPASSWORD:-$(python3 -c "import sys, urllib.parse as u; print(u.unquote(u.urlparse(sys.argv[1]).password or ''))" "$url")}
  # Every bus pipeline's slot, made before the change by a first run.
  for bus in $buses; do
    cdc_route "$bus" "{schema}.{table}"
    cdc_delivery=effectively_once
    [ "$bus" = kafka ] && cdc_delivery=at_least_once
    mkdir -p "$work/cdc-$bus"
    cat > "$work/cdc-$bus/faucet.yaml" <<YAML
version: 1
name: bench_cdc
pipeline:
  source: { type: postgres-cdc, config: { connection_url: "$url", slot_name: faucet_bus_${bus}_$suffix, publication: $publication, tables: [$schema.t] } }
  sink: $(sink_of "$bus" "$route" "$stream")
  state: { type: file, config: { path: ./state } }
  delivery: $cdc_delivery
  batch_size: $batch
YAML
    reset "$bus" "$stream" "bench-bus-$suffix.cdc.$schema.t"
    (cd "$work/cdc-$bus" && "$faucet" run --quiet --log-level error)
  done
  echo "==> UPDATE of $rows rows (one transaction)" >&2
  sql "update $schema.t set v = v + 1"
  endpos=$(sql "select pg_current_wal_lsn()")
  timed pg_recvlogical -d "$url" --slot "$floor_slot" --start --no-loop --endpos "$endpos" -f "$work/floor.txt" >/dev/null
  n=$(grep -c "^table $schema.t: UPDATE" "$work/floor.txt" || true); check "$n" pg_recvlogical
  recv_rps=$(rps "$rows")
  row "pg_recvlogical (to a file)" "$n" "$recv_rps"
  for bus in $buses; do
    # The bus floor with faucet's messages of this change (the change records' JSON, op,
    # table, LSN position, ids, and the bookmarks of a transaction read in part), into a
    # destination of its own.
    froute="bench-bus-$suffix.cdcfloor.$schema.t"; fstream=""
    case $bus in
      nats) dest=$nats_url; fstream=BENCH_BUS_CDCFLOOR_$suffix
            $admin nats-create "$nats_url" "$fstream" "$froute" ;;
      redis) dest=$redis_url; froute="bench-bus-$suffix:cdcfloor.$schema.t" ;;
      kafka) dest=$kafka_brokers ;;
    esac
    clear_floor() {
      case $bus in
        nats) $admin nats-create "$nats_url" "$fstream" "$froute" ;;
        redis) $admin redis-delete "$redis_url" "$froute" ;;
        kafka) $admin kafka-delete "$kafka_brokers" "$froute" ;;
      esac
    }
    timed "$floor" "$bus" "$dest" "$froute" "$work/in.csv" "$batch" "cdc:$schema.t" >/dev/null
    n=$(stored "$bus" "$froute" "$fstream"); check "$n" "the $bus floor (faucet's change records)"
    cdc_floor=$(rps "$rows")
    row "floor → $bus (faucet's change records)" "$n" "$cdc_floor"
    clear_floor
    timed "$floor" "$bus" "$dest" "$froute" \
      "pgoutput:$pg_spec:faucet_bus_pgfloor_${bus}_$suffix:$publication:$endpos" "$batch" "cdc:$schema.t" >/dev/null
    n=$(stored "$bus" "$froute" "$fstream"); check "$n" "the $bus floor reading the change"
    cdc_read_floor=$(rps "$rows")
    row "floor → $bus (reading the change too)" "$n" "$cdc_read_floor"
    case $bus in
      nats) $admin nats-delete "$nats_url" "$fstream" ;;
      *) clear_floor ;;
    esac
    cdc_route "$bus" "$schema.t"
    timed bash -c "cd '$work/cdc-$bus' && '$faucet' run --quiet --log-level error" >/dev/null
    n=$(stored "$bus" "$route" "$stream"); check "$n" "faucet postgres-cdc into $bus"
    r=$(rps "$rows")
    row "faucet postgres-cdc → $bus" "$n" "$r"
    # The floor: the same job done least — the change read with faucet's replication client
    # and its messages published, on the same cores. Beside it, the stricter bound of doing
    # either alone (pg_recvlogical; the floor publishing the messages from memory), and the
    # floor with minimal messages.
    f=$(python3 -c "print(min($recv_rps, $cdc_floor))")
    summary+=("postgres-cdc → $bus ($([ "$bus" = kafka ] && echo at_least_once || echo effectively_once)): faucet / floor reading the change and publishing faucet's messages = $(ratio "$r" "$cdc_read_floor")x; / min(pg_recvlogical, floor publishing them from memory) = $(ratio "$r" "$f")x; / floor with minimal messages = $(ratio "$r" "${minimal_rps[$bus]:-$f}")x; peak RSS $((rss_kb / 1024)) MiB")
    reset "$bus" "$stream" "$route"
  done
fi

echo
for line in "${summary[@]}"; do echo "$line"; done
echo "target: ratio >= 0.8 (batch size $batch; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
