#!/usr/bin/env python3
"""An independent consumer of what faucet's bus sinks wrote, for the tests: reads every
message and prints one JSON object per line, in each stream's order:

    {"stream": "<stream>", "id": "<entry id>", "fields": {"value": ..., "key": ..., ...}}

`value`, `key` and `faucet-position` are parsed as JSON; other fields are text.

    bus_consumer.py redis-streams URL PATTERN   # every stream whose key matches PATTERN (SCAN MATCH)

Needs redis-py (`pip install redis`; scripts/services.sh installs it).
"""

import json
import sys

JSON_FIELDS = {"value", "key", "faucet-position"}


def redis_streams(url, pattern):
    import redis

    r = redis.Redis.from_url(url)
    for key in sorted(r.scan_iter(match=pattern, count=1000, _type="stream")):
        stream = key.decode()
        start = "-"
        while True:
            entries = r.xrange(stream, min=start, max="+", count=1000)
            for entry_id, fields in entries:
                out = {}
                for k, v in fields.items():
                    k, v = k.decode(), v.decode()
                    out[k] = json.loads(v) if k in JSON_FIELDS else v
                print(json.dumps({"stream": stream, "id": entry_id.decode(), "fields": out}))
            if len(entries) < 1000:
                break
            start = "(" + entries[-1][0].decode()


def main(argv):
    if len(argv) == 4 and argv[1] == "redis-streams":
        redis_streams(argv[2], argv[3])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
