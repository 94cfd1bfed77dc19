#!/usr/bin/env python3
"""Stream housekeeping for bench/bus_sinks.sh, with the buses' own Python clients
(nats-py, redis-py, confluent-kafka; scripts/services.sh installs them):

    bus_admin.py nats-create URL STREAM SUBJECT...   # (re)create STREAM capturing SUBJECTs (file storage)
    bus_admin.py nats-delete URL STREAM              # delete STREAM if it exists
    bus_admin.py nats-count URL STREAM SUBJECT       # messages of STREAM on SUBJECT
    bus_admin.py redis-delete URL PATTERN            # delete every key matching PATTERN
    bus_admin.py redis-count URL STREAM              # XLEN STREAM
    bus_admin.py kafka-delete BROKERS TOPIC          # delete TOPIC if it exists
    bus_admin.py kafka-count BROKERS TOPIC           # messages of TOPIC, read from the beginning

kafka-count reads every message (no group, from the beginning, until none came for 3 s): the
broker tansu reports wrong end offsets, so they are not used.
"""

import asyncio
import sys


async def nats_call(url, fn):
    import nats

    nc = await nats.connect(url)
    try:
        return await fn(nc.jetstream())
    finally:
        await nc.close()


async def nats_delete(js, stream):
    try:
        await js.delete_stream(stream)
    except Exception:  # not found
        pass


def main():
    cmd, url, *args = sys.argv[1:]
    if cmd == "nats-create":
        stream, *subjects = args

        async def create(js):
            from nats.js.api import StreamConfig, StorageType

            await nats_delete(js, stream)
            await js.add_stream(StreamConfig(name=stream, subjects=subjects, storage=StorageType.FILE))

        asyncio.run(nats_call(url, create))
    elif cmd == "nats-delete":
        asyncio.run(nats_call(url, lambda js: nats_delete(js, args[0])))
    elif cmd == "nats-count":
        stream, subject = args

        async def count(js):
            info = await js.stream_info(stream, subjects_filter=subject)
            return sum((info.state.subjects or {}).values())

        print(asyncio.run(nats_call(url, count)))
    elif cmd in ("redis-delete", "redis-count"):
        import redis

        r = redis.Redis.from_url(url)
        if cmd == "redis-count":
            print(r.xlen(args[0]))
        else:
            for key in r.scan_iter(match=args[0], count=1000):
                r.delete(key)
    elif cmd == "kafka-delete":
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": url})
        if args[0] in admin.list_topics(timeout=10).topics:
            for f in admin.delete_topics([args[0]], operation_timeout=30).values():
                f.result()
    elif cmd == "kafka-count":
        import time
        import uuid

        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({
            "bootstrap.servers": url,
            "group.id": "faucet-bench-" + uuid.uuid4().hex,
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        })
        topic = c.list_topics(timeout=10).topics.get(args[0])
        n = 0
        if topic is not None:
            c.assign([TopicPartition(args[0], p, OFFSET_BEGINNING) for p in topic.partitions])
            last = time.monotonic()
            while time.monotonic() - last < 3:
                batch = c.consume(10000, 0.5)
                good = [m for m in batch if not m.error()]
                if good:
                    n += len(good)
                    last = time.monotonic()
        c.close()
        print(n)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
