#!/usr/bin/env python3
"""An independent consumer of what faucet's bus sinks wrote, for the tests: reads every
message and prints one JSON object per line, in each stream's order:

    {"stream": "<stream>", "id": "<entry id>", "fields": {"value": ..., "key": ..., ...}}

`value`, `key` and `faucet-position` are parsed as JSON; other fields are text.

    bus_consumer.py redis-streams URL PATTERN   # every stream whose key matches PATTERN (SCAN MATCH)
    bus_consumer.py nats URL STREAM FILTER      # every message of the JetStream STREAM on FILTER
    bus_consumer.py kafka BROKERS REGEX         # every message of the topics matching REGEX

For nats, "stream" is the message's subject, "id" its stream sequence, and "fields" its headers
(`faucet-key` as `key`) and payload (as `value`); messages on other subjects (the sink's commit
markers, `_faucet.commit.<stream>`) are not read. An ordered push consumer reads from the first
message, without acks, so reading changes nothing on the server.

For kafka, "stream" is the topic, "id" `<partition>:<offset>`, and "fields" the headers, the
message key (as `key`) and its value; lines come topic by topic (sorted), partition by
partition, in offset order. The consumer joins no group and commits nothing: it assigns every
partition from the beginning and reads until no message came for IDLE seconds (default 3,
env FAUCET_KAFKA_IDLE): the broker tansu reports wrong end offsets, so "read to the end" is
not asked of it.

Needs redis-py (`pip install redis`), nats-py (`pip install nats-py`) and confluent-kafka
(`pip install confluent-kafka`); scripts/services.sh installs them.
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


def nats_stream(url, stream, subject_filter):
    import asyncio

    import nats

    async def run():
        nc = await nats.connect(url)
        js = nc.jetstream()
        info = await js.stream_info(stream)
        last = info.state.last_seq
        out = []
        seq = info.state.first_seq
        while seq and seq <= last:
            try:
                msg = await js.get_msg(stream, seq=seq, next=True, subject=subject_filter)
            except nats.js.errors.NotFoundError:
                break
            fields = {}
            for k, v in (msg.headers or {}).items():
                name = "key" if k == "faucet-key" else k
                fields[name] = json.loads(v) if name in JSON_FIELDS else v
            fields["value"] = json.loads(msg.data) if msg.data else None
            out.append({"stream": msg.subject, "id": str(msg.seq), "fields": fields})
            seq = msg.seq + 1
        await nc.close()
        return out

    for line in asyncio.run(run()):
        print(json.dumps(line))


def kafka_topics(brokers, regex):
    import os
    import re
    import time
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    conf = {
        "bootstrap.servers": brokers,
        "group.id": "faucet-bus-consumer-" + uuid.uuid4().hex,
        "enable.auto.commit": False,
        "isolation.level": "read_uncommitted",
    }
    consumer = Consumer(conf)
    pattern = re.compile(regex)
    metadata = consumer.list_topics(timeout=10)
    parts = [
        TopicPartition(name, p, OFFSET_BEGINNING)
        for name, topic in sorted(metadata.topics.items())
        if pattern.fullmatch(name) and topic.error is None
        for p in sorted(topic.partitions)
    ]
    out = []
    if parts:
        consumer.assign(parts)
        idle = float(os.environ.get("FAUCET_KAFKA_IDLE", "3"))
        last = time.monotonic()
        while time.monotonic() - last < idle:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF: not an error
                    continue
                raise SystemExit(f"kafka: {msg.error()}")
            last = time.monotonic()
            fields = {}
            for k, v in msg.headers() or []:
                v = v.decode() if v is not None else None
                fields[k] = json.loads(v) if k in JSON_FIELDS and v is not None else v
            key = msg.key()
            if key is not None:
                fields["key"] = json.loads(key)
            fields["value"] = json.loads(msg.value()) if msg.value() else None
            out.append((msg.topic(), msg.partition(), msg.offset(), fields))
    consumer.close()
    for topic, partition, offset, fields in sorted(out, key=lambda m: m[:3]):
        print(json.dumps({"stream": topic, "id": f"{partition}:{offset}", "fields": fields}))


def main(argv):
    if len(argv) == 4 and argv[1] == "redis-streams":
        redis_streams(argv[2], argv[3])
        return 0
    if len(argv) == 5 and argv[1] == "nats":
        nats_stream(argv[2], argv[3], argv[4])
        return 0
    if len(argv) == 4 and argv[1] == "kafka":
        kafka_topics(argv[2], argv[3])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
