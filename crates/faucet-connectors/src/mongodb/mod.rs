//! MongoDB: the connection (module `connection`), the BSON → faucet value mapping
//! ([`value`]) and its inverse ([`to_bson`]), the `mongodb-cdc` source ([`cdc`], change
//! streams), `faucet replicate`'s copy-then-changes source ([`replicate`]) and the
//! `mongodb` sink ([`sink`]). Built on the official `mongodb` driver. Tested against SecantusDB, a MongoDB-wire-compatible server, not `mongod`.

pub mod cdc;
mod connection;
pub mod replicate;
pub mod sink;
pub mod to_bson;
pub mod value;

pub use connection::{CHANGE_STREAM_HISTORY_LOST, MongoConnection};
