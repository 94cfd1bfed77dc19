//! The floor of `bench/bus_sinks.sh`: the least work that puts a CSV file's rows on a bus as
//! the same messages faucet's bus sinks send, with the same client crate and the same
//! acknowledgement rule — no pages of values, no state store, no source beyond the CSV parser.
//!
//! * Each row is one message: its value the row as a JSON object (every value a string, keys
//!   from the header, as faucet's csv source without `columns` makes it), its headers those
//!   of the shape below.
//! * `nats`: JetStream publishes pipelined (at most 8,192 unacknowledged, as the sink), every
//!   acknowledgement of a page of `BATCH` rows awaited (in order, one at a time, as the sink)
//!   before the next page.
//! * The runtime: tokio's current-thread one, as `faucet run` uses for these sources
//!   (`FLOOR_RUNTIME=multi` for the multi-thread one: slower here, every publish handed to
//!   the client's connection task can wake a thread).
//! * `redis`: each page of `BATCH` rows is one `MULTI`/`EXEC` of `XADD`s (the sink's too, after
//!   one `WATCH` round trip that checks its fence and token).
//! * `kafka`: librdkafka's idempotent producer (`rdkafka`'s `FutureProducer`, `acks=all`,
//!   `partitioner=murmur2_random`, as the sink), every produce of a page of `BATCH` rows handed
//!   to it, then every delivery report awaited before the next page.
//!
//! Three shapes of message (the last argument):
//! * `faucet` (the floor `bench/bus_sinks.sh` compares against): byte for byte the messages
//!   faucet's sinks send for a CSV source — `faucet-position` the bookmark after the page
//!   (the csv source's: file, byte offset, line, records and a fingerprint of two SHA-256
//!   digests, here fixed hex of the same length: the floor reads no window to hash),
//!   `faucet-id` `bench/<16 hex digits>/<index>`; on `nats` also `Nats-Msg-Id` (the id),
//!   `faucet-page` (`{"scope","sequence","start","fence"}`), `faucet-page-index`,
//!   `Nats-Expected-Last-Sequence` (each publish chained to the one before, from an empty
//!   stream) and `faucet-commit` on a page's last message; on `redis` the page's transaction
//!   also sets the commit token (`HSET`), as the sink's does.
//! * `minimal`: the least a consumer needs — `faucet-position` `{"offset":N}` (the row's byte
//!   offset) and `faucet-id`, nothing else.
//! * `cdc:TABLE` (the floor of the CDC part): byte for byte the messages faucet's sinks send
//!   for `postgres-cdc`'s change records of one `UPDATE … SET v = v + 1` transaction on
//!   `TABLE (id int primary key, v int, note text)` — the CSV's n-th record stands for the
//!   row `id = n` (its fields are not used): the change record as its JSON value
//!   (`{"op":"u","table",…,"before":{"id":n},"after":{"id":n,"v":n+1,"note":"note n"},…}`),
//!   `faucet-op`, `faucet-table`, `faucet-position` the change's LSN, `faucet-id`, the key
//!   `{"id":n}` (nats: `faucet-key`; redis: the entry's `key`; kafka: the message key),
//!   `bench_cdc/<16 hex>/<index>`, and the page bookmarks of a transaction read in part
//!   (`{"lsn","in_txn":{"final_lsn","xid","skip"},"shapes":{TABLE:[…]}}`) where the `faucet`
//!   shape has the csv bookmark — with the same extras per bus as `faucet`.
//!
//! Usage:
//! `faucet-bench-bus-floor nats URL SUBJECT IN.csv BATCH SHAPE` (the stream must capture
//! SUBJECT and be empty) or `faucet-bench-bus-floor redis URL STREAM IN.csv BATCH SHAPE` or
//! `faucet-bench-bus-floor kafka BROKERS TOPIC IN.csv BATCH SHAPE`, SHAPE `faucet`, `minimal`
//! or `cdc:TABLE`; IN.csv `pgoutput:…` (with `cdc:TABLE`) reads the change from a slot
//! instead ([`Input`]); prints `{"records": N, "seconds": S}`.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

#[path = "../../floor/src/csv_json.rs"]
mod csv_json;
use csv_json::Error;

/// Unacknowledged publishes at most, as the nats sink's window.
const WINDOW: usize = 8192;
/// The state key of faucet's bench pipeline (`name: bench`), in ids and page headers.
const SCOPE: &str = "bench";

/// One row as a message: value, `faucet-position`, `faucet-id`, and for a change record
/// `faucet-op`, `faucet-table` and its key (the source table's primary key).
struct Message {
    value: Vec<u8>,
    position: String,
    id: String,
    change: Option<(&'static str, String)>,
    key: Option<String>,
}

/// Which messages the floor sends (see the module's documentation).
#[derive(Debug, Clone)]
enum Shape {
    Minimal,
    Faucet,
    Cdc { table: String },
}

impl Shape {
    /// Whether the messages carry faucet's whole header set (the page headers and chain on
    /// nats, the commit token on redis).
    fn full(&self) -> bool {
        !matches!(self, Shape::Minimal)
    }

    /// The state key of faucet's bench pipeline of this shape.
    fn scope(&self) -> &'static str {
        match self {
            Shape::Cdc { .. } => CDC_SCOPE,
            _ => SCOPE,
        }
    }
}

/// The state key of bench/bus_sinks.sh's CDC pipelines (`name: bench_cdc`).
const CDC_SCOPE: &str = "bench_cdc";
/// The LSN of the floor's change records (faucet's differ only in their digits).
const LSN: &str = "0/ACFF5B8";

/// A postgres-cdc bookmark inside the `UPDATE` transaction on `table` after `skip` of its
/// changes, as faucet writes it (with the table's shape).
fn cdc_bookmark(table: &str, skip: u64) -> String {
    format!(
        "{{\"lsn\":\"0/ACFF400\",\"in_txn\":{{\"final_lsn\":\"{LSN}\",\"xid\":731,\"skip\":{skip}}},\
         \"shapes\":{{{}:[[\"id\",\"integer\",\"int\",true,1],[\"v\",\"integer\",\"int\",false,2],\
         [\"note\",\"text\",\"text\",false,3]]}}}}",
        serde_json::to_string(table).unwrap_or_default()
    )
}

/// postgres-cdc's change record of the `UPDATE` of row `id` of `table`, as faucet encodes it.
fn cdc_value(table: &str, id: u64) -> Vec<u8> {
    format!(
        "{{\"op\":\"u\",\"table\":{},\"lsn\":\"{LSN}\",\"commit_ts\":\"2026-12-07T04:13:16.718305Z\",\
         \"before\":{{\"id\":{id}}},\"after\":{{\"id\":{id},\"v\":{},\"note\":\"note {id}\"}},\
         \"unchanged_toast\":[]}}",
        serde_json::to_string(table).unwrap_or_default(),
        id + 1
    )
    .into_bytes()
}

/// One page of messages, with the bookmarks around it (JSON; `null` before the first page).
struct Page {
    /// The page's number, from 0.
    number: u64,
    /// The bookmark the page started from.
    start: String,
    /// The bookmark after the page.
    end: String,
    messages: Vec<Message>,
}

/// The csv source's bookmark after `records` rows ending at byte `offset`, line `line`, as
/// faucet writes it (a fixed fingerprint of the same length).
fn bookmark(input: &str, offset: u64, line: u64, records: u64) -> String {
    let hex = "0".repeat(64);
    format!(
        "{{\"file\":{},\"byte_offset\":{offset},\"line\":{line},\"records\":{records},\
         \"fingerprint\":{{\"window_bytes\":65536,\"head_sha256\":\"{hex}\",\"tail_sha256\":\"{hex}\"}}}}",
        serde_json::to_string(input).unwrap_or_default()
    )
}

/// Where the records come from: a CSV file, or (`pgoutput:HOST:PORT:USER:DATABASE:SLOT:PUBLICATION:STOP`,
/// `cdc:TABLE` only) the change itself, read from a pgoutput slot with the replication client
/// faucet's postgres-cdc uses (`pgwire-replication`, the same walsender options), up to the
/// commit at or after the LSN `STOP` (the password from `PGPASSWORD`) — so the floor publishes each change as it arrives, on the
/// same cores as the walsender decoding it. Each update (`U`) is one record; nothing of it is
/// decoded beyond its first byte.
enum Input {
    Csv(csv::Reader<std::fs::File>, Vec<Vec<u8>>, csv::ByteRecord),
    Changes { client: pgwire_replication::ReplicationClient, stop: pgwire_replication::Lsn },
}

impl Input {
    async fn open(input: &str, shape: &Shape) -> Result<Self, Error> {
        match (input.strip_prefix("pgoutput:"), shape) {
            (Some(spec), Shape::Cdc { .. }) => {
                let [host, port, user, database, slot, publication, stop] =
                    <[&str; 7]>::try_from(spec.split(':').collect::<Vec<_>>())
                        .map_err(|_| "pgoutput:HOST:PORT:USER:DATABASE:SLOT:PUBLICATION:STOP")?;
                let stop = parse_lsn(stop).ok_or("STOP: an LSN, X/X")?;
                let password = std::env::var("PGPASSWORD").unwrap_or_default();
                let config = pgwire_replication::ReplicationConfig::new(
                    host, user, password, database, slot, publication,
                )
                .with_port(port.parse()?)
                .with_stop_lsn(stop)
                .with_options(
                    "-c client_encoding=UTF8 -c TimeZone=UTC -c DateStyle=ISO \
                     -c IntervalStyle=iso_8601 -c extra_float_digits=1 -c bytea_output=hex",
                );
                let mut client = pgwire_replication::ReplicationClient::connect(config).await?;
                client.wait_started().await?;
                Ok(Input::Changes { client, stop })
            }
            (Some(_), _) => Err("reading a change stream needs the `cdc:TABLE` shape".into()),
            (None, _) => {
                let (reader, keys) = csv_json::open(input)?;
                Ok(Input::Csv(reader, keys, csv::ByteRecord::new()))
            }
        }
    }

    /// Moves to the next record; `false` at the end.
    async fn next(&mut self) -> Result<bool, Error> {
        use pgwire_replication::ReplicationEvent as E;
        match self {
            Input::Csv(reader, _, record) => Ok(reader.read_byte_record(record)?),
            Input::Changes { client, stop } => loop {
                let end = match client.recv().await? {
                    Some(E::XLogData { data, .. }) if data.first() == Some(&b'U') => return Ok(true),
                    Some(E::Commit { end_lsn, .. }) => end_lsn >= *stop,
                    Some(E::StoppedAt { .. }) | None => true,
                    Some(_) => false,
                };
                if end {
                    // Acknowledged, as a consumer would: the slot moves past the change.
                    client.update_applied_lsn(*stop);
                    client.shutdown().await?;
                    return Ok(false);
                }
            },
        }
    }

    /// The csv reader's position (none for changes).
    fn position(&self) -> Option<&csv::Position> {
        match self {
            Input::Csv(reader, _, _) => Some(reader.position()),
            Input::Changes { .. } => None,
        }
    }
}

/// PostgreSQL's `X/X` LSN text.
fn parse_lsn(text: &str) -> Option<pgwire_replication::Lsn> {
    let (hi, lo) = text.split_once('/')?;
    let (hi, lo) = (u64::from_str_radix(hi, 16).ok()?, u64::from_str_radix(lo, 16).ok()?);
    Some(pgwire_replication::Lsn((hi << 32) | lo))
}

/// Reads `input` and hands every page of `batch` messages of `shape` to `page`.
async fn pages<F, Fut>(input: &str, batch: usize, shape: &Shape, mut page: F) -> Result<u64, Error>
where
    F: FnMut(Page) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let mut source = Input::open(input, shape).await?;
    let mut records = 0u64;
    let mut messages = Vec::with_capacity(batch);
    let mut number = 0u64;
    let mut start = "null".to_owned();
    let scope = shape.scope();
    let ended = |messages: &mut Vec<Message>, at: Option<&csv::Position>, records| {
        let end = match shape {
            Shape::Cdc { table } => cdc_bookmark(table, records),
            _ => at.map_or_else(String::new, |p| bookmark(input, p.byte(), p.line(), records)),
        };
        if matches!(shape, Shape::Faucet) {
            for m in messages.iter_mut() {
                m.position.clone_from(&end);
            }
        }
        end
    };
    while source.next().await? {
        let id = format!("{scope}/{number:016x}/{}", messages.len());
        let message = match (shape, &source) {
            (Shape::Cdc { table }, _) => Message {
                value: cdc_value(table, records + 1),
                position: format!("{{\"lsn\":\"{LSN}\"}}"),
                id,
                change: Some(("u", table.clone())),
                key: Some(format!("{{\"id\":{}}}", records + 1)),
            },
            (_, Input::Csv(_, keys, record)) => {
                let offset = record.position().map_or(0, |p| p.byte());
                let mut value = Vec::with_capacity(record.as_slice().len() + 96);
                csv_json::write_object(&mut value, keys, record)?;
                Message {
                    value,
                    position: match shape {
                        Shape::Minimal => format!("{{\"offset\":{offset}}}"),
                        _ => String::new(),
                    },
                    id,
                    change: None,
                    key: None,
                }
            }
            (_, Input::Changes { .. }) => unreachable!("Input::open refuses changes without `cdc`"),
        };
        messages.push(message);
        records += 1;
        if messages.len() == batch {
            let end = ended(&mut messages, source.position(), records);
            let messages = std::mem::replace(&mut messages, Vec::with_capacity(batch));
            let start = std::mem::replace(&mut start, end.clone());
            page(Page { number, start, end, messages }).await?;
            number += 1;
        }
    }
    if !messages.is_empty() {
        let end = ended(&mut messages, source.position(), records);
        page(Page { number, start, end, messages }).await?;
    }
    Ok(records)
}

async fn nats(url: &str, subject: &str, input: &str, batch: usize, shape: &Shape) -> Result<u64, Error> {
    use async_nats::HeaderValue;
    use async_nats::header::{NATS_EXPECTED_LAST_SEQUENCE, NATS_MESSAGE_ID};
    let client = async_nats::connect(url).await?;
    // As the sink: room for the whole window of unacknowledged publishes (the context's
    // default, 5,000 in flight, made `send_publish` wait for a permit the window held, and
    // the floor hung at its second page).
    let js = async_nats::jetstream::ContextBuilder::new()
        .max_ack_inflight(WINDOW + 16)
        .build(client);
    let subject = subject.to_owned();
    let chain = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (faucet, scope) = (shape.full(), shape.scope());
    pages(input, batch, shape, |page| {
        let js = js.clone();
        let subject = subject.clone();
        let chain = chain.clone();
        async move {
            let mut pending = VecDeque::new();
            let header = format!(
                "{{\"scope\":\"{scope}\",\"sequence\":{},\"start\":{},\"fence\":1}}",
                page.number + 1,
                page.start
            );
            let n = page.messages.len();
            for (i, m) in page.messages.into_iter().enumerate() {
                let mut headers = async_nats::HeaderMap::new();
                if let Some((op, table)) = &m.change {
                    headers.insert("faucet-op", *op);
                    headers.insert("faucet-table", table.as_str());
                }
                headers.insert("faucet-position", m.position.as_str());
                if faucet {
                    headers.insert(NATS_MESSAGE_ID, m.id.as_str());
                    headers.insert("faucet-page", header.as_str());
                    headers.insert("faucet-page-index", HeaderValue::from(i));
                    let seq = chain.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    headers.insert(NATS_EXPECTED_LAST_SEQUENCE, HeaderValue::from(seq));
                    if i + 1 == n {
                        headers.insert("faucet-commit", page.end.as_str());
                    }
                }
                headers.insert("faucet-id", m.id);
                if let Some(key) = &m.key {
                    headers.insert("faucet-key", key.as_str());
                }
                let msg = async_nats::jetstream::message::PublishMessage::build()
                    .payload(Bytes::from(m.value))
                    .headers(headers);
                pending.push_back(js.send_publish(subject.clone(), msg).await?);
                if pending.len() >= WINDOW {
                    pending.pop_front().expect("a pending ack").await?;
                }
            }
            // In order, one at a time, as the sink settles them.
            for ack in pending {
                ack.await?;
            }
            Ok(())
        }
    })
    .await
}

async fn redis(url: &str, stream: &str, input: &str, batch: usize, shape: &Shape) -> Result<u64, Error> {
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    let (faucet, scope) = (shape.full(), shape.scope());
    pages(input, batch, shape, |page| {
        let mut conn = conn.clone();
        async move {
            let mut pipe = redis::pipe();
            pipe.atomic();
            let messages = page.messages;
            if faucet {
                let token = format!("{{\"sequence\":{},\"bookmark\":{}}}", page.number + 1, page.end);
                pipe.cmd("HSET").arg(format!("{stream}:tokens")).arg(scope).arg(token).ignore();
            }
            for m in &messages {
                let xadd = pipe.cmd("XADD").arg(stream).arg("*");
                if let Some(key) = &m.key {
                    xadd.arg("key").arg(key);
                }
                xadd.arg("value").arg(&m.value);
                if let Some((op, table)) = &m.change {
                    xadd.arg("faucet-op").arg(*op).arg("faucet-table").arg(table);
                }
                xadd.arg("faucet-position")
                    .arg(&m.position)
                    .arg("faucet-id")
                    .arg(&m.id)
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
            Ok(())
        }
    })
    .await
}

async fn kafka(brokers: &str, topic: &str, input: &str, batch: usize, shape: &Shape) -> Result<u64, Error> {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", "60000")
        .create()?;
    pages(input, batch, shape, |page| {
        let producer = producer.clone();
        async move {
            let messages = page.messages;
            let mut pending = VecDeque::with_capacity(messages.len());
            for m in &messages {
                let mut headers = OwnedHeaders::new_with_capacity(4);
                if let Some((op, table)) = &m.change {
                    headers = headers
                        .insert(Header { key: "faucet-op", value: Some(op.as_bytes()) })
                        .insert(Header { key: "faucet-table", value: Some(table.as_bytes()) });
                }
                let headers = headers
                    .insert(Header { key: "faucet-position", value: Some(m.position.as_bytes()) })
                    .insert(Header { key: "faucet-id", value: Some(m.id.as_bytes()) });
                let mut record: FutureRecord<'_, [u8], [u8]> =
                    FutureRecord::to(topic).payload(m.value.as_slice()).headers(headers);
                if let Some(key) = &m.key {
                    record = record.key(key.as_bytes());
                }
                loop {
                    match producer.send_result(record) {
                        Ok(delivery) => {
                            pending.push_back(delivery);
                            break;
                        }
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                            record = back;
                            if let Some(oldest) = pending.pop_front() {
                                oldest.await?.map_err(|(e, _)| e)?;
                            }
                        }
                        Err((e, _)) => return Err(e.into()),
                    }
                }
            }
            for delivery in pending {
                delivery.await?.map_err(|(e, _)| e)?;
            }
            Ok(())
        }
    })
    .await
}

/// The shape named `shape`: `faucet`, `minimal` or `cdc:TABLE`.
fn parse_shape(shape: &str) -> Result<Shape, Error> {
    match shape {
        "faucet" => Ok(Shape::Faucet),
        "minimal" => Ok(Shape::Minimal),
        other => match other.strip_prefix("cdc:") {
            Some(table) if !table.is_empty() => Ok(Shape::Cdc { table: table.to_owned() }),
            _ => Err(format!("message shape {other:?}: `faucet`, `minimal` or `cdc:TABLE`").into()),
        },
    }
}

fn main() -> Result<(), Error> {
    let mut builder = if std::env::var("FLOOR_RUNTIME").as_deref() == Ok("multi") {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build()?.block_on(run())
}

async fn run() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let started = Instant::now();
    let records = match args.as_slice() {
        [bus, url, route, input, batch, shape] if bus == "nats" => {
            nats(url, route, input, batch.parse()?, &parse_shape(shape)?).await?
        }
        [bus, url, route, input, batch, shape] if bus == "redis" => {
            redis(url, route, input, batch.parse()?, &parse_shape(shape)?).await?
        }
        [bus, brokers, topic, input, batch, shape] if bus == "kafka" => {
            kafka(brokers, topic, input, batch.parse()?, &parse_shape(shape)?).await?
        }
        _ => {
            eprintln!(
                "usage: faucet-bench-bus-floor (nats URL SUBJECT | redis URL STREAM | kafka BROKERS TOPIC) IN.csv BATCH (faucet | minimal | cdc:TABLE)"
            );
            std::process::exit(2);
        }
    };
    println!(
        "{{\"records\": {records}, \"seconds\": {}}}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
