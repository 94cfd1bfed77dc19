//! The floor of `bench/bus_sinks.sh`: the least work that puts a CSV file's rows on a bus as
//! the same messages faucet's bus sinks send, with the same client crate and the same
//! acknowledgement rule — no pages of values, no state store, no source beyond the CSV parser.
//!
//! * Each row is one message: its value the row as a JSON object (every value a string, keys
//!   from the header, as faucet's csv source without `columns` makes it), its headers those
//!   of the shape below.
//! * `nats`: JetStream publishes pipelined (at most 8,192 unacknowledged, as the sink), every
//!   acknowledgement of a page of `BATCH` rows awaited before the next page.
//! * `redis`: each page of `BATCH` rows is one `MULTI`/`EXEC` of `XADD`s (the sink's too, after
//!   one `WATCH` round trip that checks its fence and token).
//! * `kafka`: librdkafka's idempotent producer (`rdkafka`'s `FutureProducer`, `acks=all`,
//!   `partitioner=murmur2_random`, as the sink), every produce of a page of `BATCH` rows handed
//!   to it, then every delivery report awaited before the next page.
//!
//! Two shapes of message (the last argument):
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
//!
//! Usage:
//! `faucet-bench-bus-floor nats URL SUBJECT IN.csv BATCH SHAPE` (the stream must capture
//! SUBJECT and be empty) or `faucet-bench-bus-floor redis URL STREAM IN.csv BATCH SHAPE` or
//! `faucet-bench-bus-floor kafka BROKERS TOPIC IN.csv BATCH SHAPE`, SHAPE `faucet` or
//! `minimal`; prints `{"records": N, "seconds": S}`.

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

/// One row as a message: value, `faucet-position`, `faucet-id`.
struct Message {
    value: Vec<u8>,
    position: String,
    id: String,
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

/// Reads `input` and hands every page of `batch` messages of `shape` to `page`.
async fn pages<F, Fut>(input: &str, batch: usize, faucet: bool, mut page: F) -> Result<u64, Error>
where
    F: FnMut(Page) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let (mut reader, keys) = csv_json::open(input)?;
    let mut record = csv::ByteRecord::new();
    let mut records = 0u64;
    let mut messages = Vec::with_capacity(batch);
    let mut number = 0u64;
    let mut start = "null".to_owned();
    let ended = |messages: &mut Vec<Message>, at: Option<&csv::Position>, records| {
        let end = at.map_or_else(String::new, |p| bookmark(input, p.byte(), p.line(), records));
        if faucet {
            for m in messages.iter_mut() {
                m.position.clone_from(&end);
            }
        }
        end
    };
    while reader.read_byte_record(&mut record)? {
        let mut value = Vec::with_capacity(record.as_slice().len() + 96);
        csv_json::write_object(&mut value, &keys, &record)?;
        let offset = record.position().map_or(0, |p| p.byte());
        messages.push(Message {
            value,
            position: if faucet { String::new() } else { format!("{{\"offset\":{offset}}}") },
            id: format!("{SCOPE}/{number:016x}/{}", messages.len()),
        });
        records += 1;
        if messages.len() == batch {
            let end = ended(&mut messages, Some(reader.position()), records);
            let messages = std::mem::replace(&mut messages, Vec::with_capacity(batch));
            let start = std::mem::replace(&mut start, end.clone());
            page(Page { number, start, end, messages }).await?;
            number += 1;
        }
    }
    if !messages.is_empty() {
        let end = ended(&mut messages, Some(reader.position()), records);
        page(Page { number, start, end, messages }).await?;
    }
    Ok(records)
}

async fn nats(url: &str, subject: &str, input: &str, batch: usize, faucet: bool) -> Result<u64, Error> {
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
    pages(input, batch, faucet, |page| {
        let js = js.clone();
        let subject = subject.clone();
        let chain = chain.clone();
        async move {
            let mut pending = VecDeque::new();
            let header = format!(
                "{{\"scope\":\"{SCOPE}\",\"sequence\":{},\"start\":{},\"fence\":1}}",
                page.number + 1,
                page.start
            );
            let n = page.messages.len();
            for (i, m) in page.messages.into_iter().enumerate() {
                let mut headers = async_nats::HeaderMap::new();
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
                let msg = async_nats::jetstream::message::PublishMessage::build()
                    .payload(Bytes::from(m.value))
                    .headers(headers);
                pending.push_back(js.send_publish(subject.clone(), msg).await?);
                if pending.len() >= WINDOW {
                    pending.pop_front().expect("a pending ack").await?;
                }
            }
            for ack in futures_util::future::join_all(pending.into_iter().map(std::future::IntoFuture::into_future)).await {
                ack?;
            }
            Ok(())
        }
    })
    .await
}

async fn redis(url: &str, stream: &str, input: &str, batch: usize, faucet: bool) -> Result<u64, Error> {
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    pages(input, batch, faucet, |page| {
        let mut conn = conn.clone();
        async move {
            let mut pipe = redis::pipe();
            pipe.atomic();
            let messages = page.messages;
            if faucet {
                let token = format!("{{\"sequence\":{},\"bookmark\":{}}}", page.number + 1, page.end);
                pipe.cmd("HSET").arg(format!("{stream}:tokens")).arg(SCOPE).arg(token).ignore();
            }
            for m in &messages {
                pipe.cmd("XADD")
                    .arg(stream)
                    .arg("*")
                    .arg("value")
                    .arg(&m.value)
                    .arg("faucet-position")
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

async fn kafka(brokers: &str, topic: &str, input: &str, batch: usize, faucet: bool) -> Result<u64, Error> {
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
    pages(input, batch, faucet, |page| {
        let producer = producer.clone();
        async move {
            let messages = page.messages;
            let mut pending = VecDeque::with_capacity(messages.len());
            for m in &messages {
                let headers = OwnedHeaders::new_with_capacity(2)
                    .insert(Header { key: "faucet-position", value: Some(m.position.as_bytes()) })
                    .insert(Header { key: "faucet-id", value: Some(m.id.as_bytes()) });
                let mut record: FutureRecord<'_, [u8], [u8]> =
                    FutureRecord::to(topic).payload(m.value.as_slice()).headers(headers);
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

/// Whether `shape` (`faucet` or `minimal`) asks for faucet's messages.
fn faucet(shape: &str) -> Result<bool, Error> {
    match shape {
        "faucet" => Ok(true),
        "minimal" => Ok(false),
        other => Err(format!("message shape {other:?}: `faucet` or `minimal`").into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let started = Instant::now();
    let records = match args.as_slice() {
        [bus, url, route, input, batch, shape] if bus == "nats" => {
            nats(url, route, input, batch.parse()?, faucet(shape)?).await?
        }
        [bus, url, route, input, batch, shape] if bus == "redis" => {
            redis(url, route, input, batch.parse()?, faucet(shape)?).await?
        }
        [bus, brokers, topic, input, batch, shape] if bus == "kafka" => {
            kafka(brokers, topic, input, batch.parse()?, faucet(shape)?).await?
        }
        _ => {
            eprintln!(
                "usage: faucet-bench-bus-floor (nats URL SUBJECT | redis URL STREAM | kafka BROKERS TOPIC) IN.csv BATCH (faucet | minimal)"
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
