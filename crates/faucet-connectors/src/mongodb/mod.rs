//! MongoDB: the connection (module `connection`), the BSON → faucet value mapping
//! ([`value`]) and the `mongodb-cdc` source ([`cdc`], change streams). Built on the official
//! `mongodb` driver. Tested against SecantusDB, a MongoDB-wire-compatible server, not
//! `mongod`.

pub mod cdc;
mod connection;
pub mod value;

pub use connection::{CHANGE_STREAM_HISTORY_LOST, MongoConnection};
