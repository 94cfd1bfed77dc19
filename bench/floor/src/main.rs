//! The floor of `bench/csv_to_jsonl.sh`: the least work that turns a CSV file into the same
//! JSON lines faucet writes (every value a string, keys from the header, fields in header
//! order), with the `csv` crate reading `ByteRecord`s through a 1 MiB buffer and a 1 MiB
//! `BufWriter` — no pages, no values, no bookmarks, no state. One fsync at the end, as a
//! durable write needs at least that.
//!
//! Usage: `faucet-bench-floor IN.csv OUT.jsonl`; prints `{"records": N, "seconds": S}`.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: faucet-bench-floor IN.csv OUT.jsonl");
        std::process::exit(2);
    };
    let started = Instant::now();
    let mut reader = csv::ReaderBuilder::new()
        .buffer_capacity(1 << 20)
        .from_path(input)?;
    // `{"name":` for the first key, `,"name":` for the others.
    let keys: Vec<Vec<u8>> = reader
        .byte_headers()?
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut key = if i == 0 { b"{".to_vec() } else { b",".to_vec() };
            serde_json::to_writer(&mut key, std::str::from_utf8(name)?)?;
            key.push(b':');
            Ok(key)
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let file = File::create(output)?;
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    let mut record = csv::ByteRecord::new();
    let mut records = 0u64;
    while reader.read_byte_record(&mut record)? {
        if record.len() != keys.len() {
            return Err(format!("record {} has {} fields", records + 1, record.len()).into());
        }
        for (key, field) in keys.iter().zip(record.iter()) {
            out.write_all(key)?;
            serde_json::to_writer(&mut out, std::str::from_utf8(field)?)?;
        }
        out.write_all(b"}\n")?;
        records += 1;
    }
    out.flush()?;
    drop(out);
    file.sync_all()?;
    println!(
        "{{\"records\": {records}, \"seconds\": {}}}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
