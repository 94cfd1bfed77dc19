#!/usr/bin/env python3
"""Writes the benchmark's generated CSV: ROWS rows (default 1,000,000) of
id, first_name, last_name, amount (float), created_at (RFC 3339), active (bool),
attrs (a small JSON object as text, so quoted with doubled quotes). Deterministic (seed 42).
Usage: gen_csv.py OUT.csv [ROWS]"""
import csv
import random
import sys
from datetime import datetime, timedelta, timezone

FIRST = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Margaret",
         "Dennis", "Radia", "Niklaus", "Jean \"JJ\"", "Zoë", "Søren", "Chloé"]
LAST = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson",
        "Hamilton", "Ritchie", "Perlman", "Wirth", "O'Neil", "Smith, Jr.", "Müller", "Nguyễn"]


def main() -> None:
    out = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    rnd = random.Random(42)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "first_name", "last_name", "amount", "created_at", "active", "attrs"])
        for i in range(1, rows + 1):
            at = start + timedelta(seconds=rnd.randrange(0, 365 * 86400),
                                   microseconds=rnd.randrange(0, 1_000_000))
            attrs = '{"tier":"%s","score":%d,"tags":["a","b"]}' % (
                rnd.choice(["free", "pro", "team"]), rnd.randrange(0, 1000))
            w.writerow([i, rnd.choice(FIRST), rnd.choice(LAST),
                        repr(round(rnd.uniform(-10_000, 10_000), rnd.randrange(0, 7))),
                        at.isoformat().replace("+00:00", "Z"),
                        rnd.choice(["true", "false"]), attrs])


if __name__ == "__main__":
    main()
