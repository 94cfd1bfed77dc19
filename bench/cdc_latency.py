#!/usr/bin/env python3
"""Latency observer for bench/cdc_latency.sh: tails faucet's JSON Lines output and the
floor's output, and polls faucet's state store, recording when each change became visible in
the file and when it became durable (its bookmark persisted after the sink's flush). Latency
= that time minus the change's commit time (by the server's clock, on this same host).
Changes committed before it started are ignored. Stops when the file STOP exists, then writes
a JSON report:

  {"faucet": {rate: {"visible": [...ms], "durable": [...ms]}}, "floor": {rate: [...ms]}}

SOURCE (environment) says whose output it reads:

* `postgres` (default): postgres-cdc records (`lsn`, `commit_ts`, `after.rate`) and
  pg_recvlogical's test_decoding text (`rate[integer]:N`, `COMMIT n (at TIME)`); a record is
  durable once the stored bookmark's `lsn` passed it.
* `mysql`: mysql-cdc records (`binlog_file`, `binlog_pos`, `after.rate`, `after.at`) and
  `mariadb-binlog --base64-output=decode-rows --verbose` text (`###   @2=N` the rate,
  `###   @3='TIME'` the time, `COMMIT/*!*/;`). The binlog's own times have whole seconds
  only, so the commit time is the row's `at` column, `NOW(6)` in UTC when the writer
  inserted it (the statement's start: a few hundred microseconds before its commit, the same
  for faucet and the floor); a record is durable once the stored bookmark's
  (`binlog_file`, `binlog_pos`) — the end of the last transaction delivered — passed the
  record's (the start of its transaction).

Usage: cdc_latency.py OUT.jsonl FLOOR.txt STOP REPORT.json file STATE.json
       cdc_latency.py OUT.jsonl FLOOR.txt STOP REPORT.json postgres URL TABLE KEY
"""
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime


def lsn_value(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def find_lsn(value):
    """The `lsn` of a stored bookmark, wherever the store nests it."""
    if isinstance(value, dict):
        if isinstance(value.get("lsn"), str):
            return lsn_value(value["lsn"])
        for v in value.values():
            found = find_lsn(v)
            if found is not None:
                return found
    return None


def find_binlog(value):
    """The (`binlog_file`, `binlog_pos`) of a stored mysql-cdc bookmark, wherever the store
    nests it (not the `in_txn` part, which has no file)."""
    if isinstance(value, dict):
        if isinstance(value.get("binlog_file"), str) and isinstance(value.get("binlog_pos"), int):
            return (value["binlog_file"], value["binlog_pos"])
        for v in value.values():
            found = find_binlog(v)
            if found is not None:
                return found
    return None


def epoch(ts):
    """RFC 3339 / PostgreSQL timestamptz text → seconds since the epoch; a time without a
    zone (a MariaDB DATETIME) is UTC."""
    ts = ts.strip().replace(" ", "T", 1)
    if not re.search(r"(Z|[+-]\d\d(:?\d\d)?)$", ts):
        ts += "+00:00"
    if ts.endswith("Z"):
        ts = ts[:-1] + "+00:00"
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?([+-]\d\d(?::?\d\d)?)$", ts)
    if not m:
        raise ValueError(ts)
    base, frac, tz = m.group(1), m.group(2) or "", m.group(3)
    if len(tz) == 3:
        tz += ":00"
    frac = (frac + "000000")[:7] if frac else ""
    return datetime.fromisoformat(base + frac + tz).timestamp()


class Tail:
    def __init__(self, path):
        self.path, self.fd, self.rest = path, None, b""

    def lines(self):
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return []
        chunks = []
        while True:
            b = os.read(self.fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        if not chunks:
            return []
        data = self.rest + b"".join(chunks)
        *done, self.rest = data.split(b"\n")
        return done


class Source:
    """What both sources share: `position` finds a record's (or a bookmark's) position, and a
    floor line matching `rate_pattern` (its first group the rate) is remembered until a later
    line completes the change (`other_line`)."""

    def __init__(self, position, rate_pattern):
        self.position = position
        self.rate_re = re.compile(rate_pattern)
        self.rate = None

    def floor_line(self, line):
        """The (commit epoch, rate) a floor line completes, if it does."""
        m = self.rate_re.search(line)
        if m:
            self.rate = m.group(1).decode()
            return None
        return self.other_line(line)


class Postgres(Source):
    """postgres-cdc records and pg_recvlogical's output."""

    commit_re = re.compile(rb"^COMMIT \d+ \(at (.+)\)$")

    def __init__(self):
        super().__init__(find_lsn, rb"rate\[integer\]:(\d+)")

    @staticmethod
    def record(r):
        """(position, commit epoch, rate) of a faucet record."""
        return lsn_value(r["lsn"]), epoch(r["commit_ts"]), str(r["after"]["rate"])

    def other_line(self, line):
        m = self.commit_re.match(line)
        if m:
            rate, self.rate = self.rate, None
            if rate is not None:
                return epoch(m.group(1).decode()), rate
        return None


class Mysql(Source):
    """mysql-cdc records and mariadb-binlog's decoded rows (see the module docs)."""

    at_re = re.compile(rb"^###   @3='([^']+)'")

    def __init__(self):
        super().__init__(find_binlog, rb"^###   @2=(\d+)")
        self.rows = []

    @staticmethod
    def record(r):
        return (r["binlog_file"], r["binlog_pos"]), epoch(r["after"]["at"]), str(r["after"]["rate"])

    def other_line(self, line):
        m = self.at_re.match(line)
        if m and self.rate is not None:
            self.rows.append((epoch(m.group(1).decode()), self.rate))
            self.rate = None
            return None
        if line.startswith(b"COMMIT/*!*/;") and self.rows:
            # One row per transaction: the writer's single-row INSERTs.
            done, self.rows = self.rows[-1], []
            return done
        return None


class FileState:
    def __init__(self, path, find):
        self.path, self.find = path, find

    def position(self):
        try:
            with open(self.path, "rb") as f:
                return self.find(json.loads(f.read()))
        except (FileNotFoundError, ValueError):
            return None


class PgState:
    def __init__(self, find, url, table, key):
        self.find = find
        self.p = subprocess.Popen(
            ["psql", "-X", "-q", "-A", "-t", url],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.query = f"select value from {table} where key = '{key}';\n\\echo __end__\n"

    def position(self):
        self.p.stdin.write(self.query)
        self.p.stdin.flush()
        value = None
        while True:
            line = self.p.stdout.readline()
            if not line or line.strip() == "__end__":
                return value
            if line.strip():
                try:
                    value = self.find(json.loads(line))
                except ValueError:
                    pass


def main():
    out, floor, stop, report = sys.argv[1:5]
    source = Mysql() if os.environ.get("SOURCE", "postgres") == "mysql" else Postgres()
    if sys.argv[5] == "file":
        state = FileState(sys.argv[6], source.position)
    else:
        state = PgState(source.position, *sys.argv[6:9])
    faucet, floor_lat = {}, {}
    pending = []  # (record position, commit epoch, rate), in file order
    tail, ftail = Tail(out), Tail(floor)
    stopping_since = None
    started = time.time()
    while True:
        now = time.time()
        for line in tail.lines():
            position, commit, rate = source.record(json.loads(line))
            if commit < started:
                continue
            faucet.setdefault(rate, {"visible": [], "durable": []})["visible"].append(
                (now - commit) * 1000)
            pending.append((position, commit, rate))
        for line in ftail.lines():
            done = source.floor_line(line)
            if done is not None and done[0] >= started:
                floor_lat.setdefault(done[1], []).append((now - done[0]) * 1000)
        if pending:
            durable = state.position()
            now = time.time()
            if durable is not None:
                n = 0
                while n < len(pending) and pending[n][0] < durable:
                    _, commit, rate = pending[n]
                    faucet[rate]["durable"].append((now - commit) * 1000)
                    n += 1
                del pending[:n]
        if os.path.exists(stop):
            stopping_since = stopping_since or time.time()
            if not pending or time.time() - stopping_since > 10:
                break
        time.sleep(0.001)
    with open(report, "w") as f:
        json.dump({"faucet": faucet, "floor": floor_lat, "never_durable": len(pending)}, f)


if __name__ == "__main__":
    main()
