//! The floor of `bench/bus_sinks.sh`: the least work that puts a CSV file's rows on a bus the
//! way faucet's bus sinks do, with the same client crate and the same acknowledgement rule —
//! no pages of values, no bookmarks, no state, no re-anchor headers.
//!
//! * Each row is one message: its value the row as a JSON object (every value a string, keys
//!   from the header, as faucet's csv source without `columns` makes it), with a
//!   `faucet-position` header (`{"offset":N}`) and a `faucet-id` header
//!   (`bench::/<16 hex digits>/<index>`) of the same shape as faucet's.
//! * `nats`: JetStream publishes pipelined (at most 8,192 unacknowledged, as the sink), every
//!   acknowledgement of a page of `BATCH` rows awaited before the next page.
//! * `redis`: each page of `BATCH` rows is one `MULTI`/`EXEC` of `XADD`s (the sink's too, after
//!   one `WATCH` round trip that checks its fence and token).
//! * `kafka`: librdkafka's idempotent producer (`rdkafka`'s `FutureProducer`, `acks=all`,
//!   `partitioner=murmur2_random`, as the sink), every produce of a page of `BATCH` rows handed
//!   to it, then every delivery report awaited before the next page.
//!
//! Usage:
//! `faucet-bench-bus-floor nats URL SUBJECT IN.csv BATCH` (the stream must capture SUBJECT) or
//! `faucet-bench-bus-floor redis URL STREAM IN.csv BATCH` or
//! `faucet-bench-bus-floor kafka BROKERS TOPIC IN.csv BATCH`; prints
//! `{"records": N, "seconds": S}`.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

#[path = "../../floor/src/csv_json.rs"]
mod csv_json;
use csv_json::Error;

/// Unacknowledged publishes at most, as the nats sink's window.
const WINDOW: usize = 8192;

/// One row as a message: value, `faucet-position`, `faucet-id`.
struct Message {
    value: Vec<u8>,
    position: String,
    id: String,
}

/// Reads `input` and hands every page of `batch` messages to `page`.
async fn pages<F, Fut>(input: &str, batch: usize, mut page: F) -> Result<u64, Error>
where
    F: FnMut(Vec<Message>) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let (mut reader, keys) = csv_json::open(input)?;
    let mut record = csv::ByteRecord::new();
    let mut records = 0u64;
    let mut messages = Vec::with_capacity(batch);
    let mut page_no = 0u64;
    while reader.read_byte_record(&mut record)? {
        let mut value = Vec::with_capacity(record.as_slice().len() + 96);
        csv_json::write_object(&mut value, &keys, &record)?;
        let offset = record.position().map_or(0, |p| p.byte());
        messages.push(Message {
            value,
            position: format!("{{\"offset\":{offset}}}"),
            id: format!("bench::/{page_no:016x}/{}", messages.len()),
        });
        records += 1;
        if messages.len() == batch {
            page(std::mem::replace(&mut messages, Vec::with_capacity(batch))).await?;
            page_no += 1;
        }
    }
    if !messages.is_empty() {
        page(messages).await?;
    }
    Ok(records)
}

async fn nats(url: &str, subject: &str, input: &str, batch: usize) -> Result<u64, Error> {
    let client = async_nats::connect(url).await?;
    // As the sink: room for the whole window of unacknowledged publishes (the context's
    // default, 5,000 in flight, made `send_publish` wait for a permit the window held, and
    // the floor hung at its second page).
    let js = async_nats::jetstream::ContextBuilder::new()
        .max_ack_inflight(WINDOW + 16)
        .build(client);
    let subject = subject.to_owned();
    pages(input, batch, |messages| {
        let js = js.clone();
        let subject = subject.clone();
        async move {
            let mut pending = VecDeque::new();
            for m in messages {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("faucet-position", m.position.as_str());
                headers.insert("faucet-id", m.id.as_str());
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

async fn redis(url: &str, stream: &str, input: &str, batch: usize) -> Result<u64, Error> {
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    pages(input, batch, |messages| {
        let mut conn = conn.clone();
        async move {
            let mut pipe = redis::pipe();
            pipe.atomic();
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

async fn kafka(brokers: &str, topic: &str, input: &str, batch: usize) -> Result<u64, Error> {
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
    pages(input, batch, |messages| {
        let producer = producer.clone();
        async move {
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

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let started = Instant::now();
    let records = match args.as_slice() {
        [bus, url, route, input, batch] if bus == "nats" => {
            nats(url, route, input, batch.parse()?).await?
        }
        [bus, url, route, input, batch] if bus == "redis" => {
            redis(url, route, input, batch.parse()?).await?
        }
        [bus, brokers, topic, input, batch] if bus == "kafka" => {
            kafka(brokers, topic, input, batch.parse()?).await?
        }
        _ => {
            eprintln!(
                "usage: faucet-bench-bus-floor (nats URL SUBJECT | redis URL STREAM | kafka BROKERS TOPIC) IN.csv BATCH"
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
