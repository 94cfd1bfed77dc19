//! The floor of `bench/mongodb_cdc_to_jsonl.sh`: the least work that reads a MongoDB change
//! stream and writes its events, with the same driver as faucet's `mongodb-cdc` — no pages of
//! values, no bookmarks, no state, no fsync.
//!
//! * `watch URL DB.COLL T I N OUT`: a collection change stream from the cluster time `(T, I)`
//!   (`startAtOperationTime`) with `fullDocument: updateLookup` (faucet's default), each event
//!   written to `OUT` as one line of relaxed Extended JSON (the whole change event as the
//!   driver decodes it), through a `BufWriter`; stops after `N` events. Prints
//!   `{"events": N, "seconds": S}`.
//! * `load URL DB.COLL N`: drops the collection and inserts `N` documents
//!   `{_id: i, name: "name i", amount: i / 100, n: 0}` (i = 1..=N) in batches of 10,000.
//! * `optime URL`: the cluster time right after the last write (`hello`'s
//!   `lastWrite.opTime.ts`, increment + 1) as `T I`: a stream started there reads only the
//!   changes made after it.
//! * `update URL DB.COLL`: one `updateMany({}, {$inc: {n: 1}})`, a change event per document;
//!   prints how many documents it modified.
//! * `drop URL DB`: drops the database.

use std::io::Write as _;
use std::time::Instant;

use futures_util::StreamExt as _;
use mongodb::Client;
use mongodb::bson::{Bson, Document, Timestamp, doc};
use mongodb::change_stream::event::ChangeStreamEvent;
use mongodb::options::FullDocumentType;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn collection(client: &Client, name: &str) -> Result<mongodb::Collection<Document>, Error> {
    let (db, coll) = name.split_once('.').ok_or("DB.COLL expected")?;
    Ok(client.database(db).collection(coll))
}

async fn watch(client: &Client, name: &str, at: Timestamp, n: u64, out: &str) -> Result<(), Error> {
    let mut file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    let started = Instant::now();
    let mut stream = collection(client, name)?
        .watch()
        .start_at_operation_time(at)
        .full_document(FullDocumentType::UpdateLookup)
        .await?;
    let mut events = 0;
    while events < n {
        let Some(event) = stream.next().await else {
            return Err(format!("the stream ended after {events} events").into());
        };
        let event: ChangeStreamEvent<Document> = event?;
        let doc = mongodb::bson::to_document(&event)?;
        serde_json::to_writer(&mut file, &Bson::Document(doc).into_relaxed_extjson())?;
        file.write_all(b"\n")?;
        events += 1;
    }
    file.flush()?;
    println!(
        "{{\"events\": {events}, \"seconds\": {}}}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn load(client: &Client, name: &str, n: u64) -> Result<(), Error> {
    let coll = collection(client, name)?;
    coll.drop().await?;
    let mut i = 1;
    while i <= n {
        let end = (i + 10_000).min(n + 1);
        let docs: Vec<Document> = (i..end)
            .map(|i| doc! {"_id": i as i64, "name": format!("name {i}"), "amount": i as f64 / 100.0, "n": 0})
            .collect();
        coll.insert_many(docs).await?;
        i = end;
    }
    Ok(())
}

async fn optime(client: &Client) -> Result<(), Error> {
    let hello = client
        .database("admin")
        .run_command(doc! {"hello": 1})
        .await?;
    let ts = hello
        .get_document("lastWrite")?
        .get_document("opTime")?
        .get_timestamp("ts")?;
    println!("{} {}", ts.time, ts.increment + 1);
    Ok(())
}

async fn update(client: &Client, name: &str) -> Result<(), Error> {
    let r = collection(client, name)?
        .update_many(doc! {}, doc! {"$inc": {"n": 1}})
        .await?;
    println!("{}", r.modified_count);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| {
        args.get(i)
            .map(String::as_str)
            .ok_or("missing arguments; see the source's doc comment")
    };
    let client = Client::with_uri_str(arg(2)?).await?;
    match arg(1)? {
        "watch" => {
            let at = Timestamp {
                time: arg(4)?.parse()?,
                increment: arg(5)?.parse()?,
            };
            watch(&client, arg(3)?, at, arg(6)?.parse()?, arg(7)?).await
        }
        "load" => load(&client, arg(3)?, arg(4)?.parse()?).await,
        "optime" => optime(&client).await,
        "update" => update(&client, arg(3)?).await,
        "drop" => Ok(client.database(arg(3)?).drop().await?),
        other => Err(format!("unknown command `{other}`").into()),
    }
}
