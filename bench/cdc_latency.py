#!/usr/bin/env python3
"""Latency observer for bench/cdc_latency.sh: tails faucet's JSON Lines output and
pg_recvlogical's test_decoding output, and polls faucet's state store, recording when each
change became visible in the file and when it became durable (its bookmark persisted after
the sink's flush). Latency = that time minus the change's commit time (by the server's clock,
on this same host). Changes committed before it started are ignored. Stops when the file STOP exists, then writes a JSON report:

  {"faucet": {rate: {"visible": [...ms], "durable": [...ms]}}, "floor": {rate: [...ms]}}

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


def epoch(ts):
    """RFC 3339 / PostgreSQL timestamptz text → seconds since the epoch."""
    ts = ts.strip().replace(" ", "T", 1)
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


class FileState:
    def __init__(self, path):
        self.path = path

    def lsn(self):
        try:
            with open(self.path, "rb") as f:
                return find_lsn(json.loads(f.read()))
        except (FileNotFoundError, ValueError):
            return None


class PgState:
    def __init__(self, url, table, key):
        self.p = subprocess.Popen(
            ["psql", "-X", "-q", "-A", "-t", url],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.query = f"select value from {table} where key = '{key}';\n\\echo __end__\n"

    def lsn(self):
        self.p.stdin.write(self.query)
        self.p.stdin.flush()
        value = None
        while True:
            line = self.p.stdout.readline()
            if not line or line.strip() == "__end__":
                return value
            if line.strip():
                try:
                    value = find_lsn(json.loads(line))
                except ValueError:
                    pass


def main():
    out, floor, stop, report = sys.argv[1:5]
    state = FileState(sys.argv[6]) if sys.argv[5] == "file" else PgState(*sys.argv[6:9])
    faucet, floor_lat = {}, {}
    pending = []  # (record lsn, commit epoch, rate), in file order
    tail, ftail = Tail(out), Tail(floor)
    floor_rate = None
    rate_re = re.compile(rb"rate\[integer\]:(\d+)")
    commit_re = re.compile(rb"^COMMIT \d+ \(at (.+)\)$")
    stopping_since = None
    started = time.time()
    while True:
        now = time.time()
        for line in tail.lines():
            r = json.loads(line)
            rate = str(r["after"]["rate"])
            commit = epoch(r["commit_ts"])
            if commit < started:
                continue
            faucet.setdefault(rate, {"visible": [], "durable": []})["visible"].append(
                (now - commit) * 1000)
            pending.append((lsn_value(r["lsn"]), commit, rate))
        for line in ftail.lines():
            m = rate_re.search(line)
            if m:
                floor_rate = m.group(1).decode()
                continue
            m = commit_re.match(line)
            if m:
                commit = epoch(m.group(1).decode())
                if floor_rate is not None and commit >= started:
                    floor_lat.setdefault(floor_rate, []).append((now - commit) * 1000)
                floor_rate = None
        if pending:
            durable = state.lsn()
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
