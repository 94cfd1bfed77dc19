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

mod csv_json;

fn main() -> Result<(), csv_json::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: faucet-bench-floor IN.csv OUT.jsonl");
        std::process::exit(2);
    };
    let started = Instant::now();
    let (mut reader, keys) = csv_json::open(input)?;
    let file = File::create(output)?;
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    let mut record = csv::ByteRecord::new();
    let mut records = 0u64;
    while reader.read_byte_record(&mut record)? {
        if record.len() != keys.len() {
            return Err(format!("record {} has {} fields", records + 1, record.len()).into());
        }
        csv_json::write_object(&mut out, &keys, &record)?;
        out.write_all(b"\n")?;
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
