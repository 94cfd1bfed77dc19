//! What a bus sink's writer measures of a page's publishes, the one way for every bus sink
//! ([`faucet_core::SinkWriter::published`], `faucet serve`'s `faucet_sink_*` metrics): the
//! messages sent, their bytes ([`message_bytes`]), the most acknowledgements awaited at once,
//! and the time from the page's first publish to its last acknowledgement.

use std::time::Instant;

use faucet_core::PublishStats;

use super::Message;

/// The bytes of `m` a bus sink counts: key, value, and every faucet header's name and
/// value ([`Message::headers`]); the bus's own framing is not counted.
pub fn message_bytes(m: &Message) -> u64 {
    let key = m.key.as_ref().map_or(0, Vec::len);
    let headers: usize = m.headers().map(|(n, v)| n.len() + v.len()).sum();
    (key + m.value.len() + headers) as u64
}

/// One page's publishes being measured: started before the first publish, told how many
/// acknowledgements are awaited as publishes go out, finished when the last is in.
#[derive(Debug)]
pub struct PageMeter {
    started: Instant,
    acks_pending: usize,
}

impl PageMeter {
    /// Starts measuring a page now (before its first publish).
    pub fn start() -> Self {
        Self {
            started: Instant::now(),
            acks_pending: 0,
        }
    }

    /// `n` publishes await their acknowledgement now; the page keeps the most.
    pub fn pending(&mut self, n: usize) {
        self.acks_pending = self.acks_pending.max(n);
    }

    /// The page's figures once every acknowledgement of `sent` (the messages it published)
    /// is in.
    pub fn finish(self, sent: &[Message]) -> PublishStats {
        self.finish_tallied(tally(sent))
    }

    /// [`PageMeter::finish`] for messages counted before they were handed to the client
    /// ([`tally`]: a writer that moves each message into its publish).
    pub fn finish_tallied(self, (messages, bytes): (u64, u64)) -> PublishStats {
        PublishStats {
            messages,
            bytes,
            acks_pending: self.acks_pending as u64,
            publish_seconds: self.started.elapsed().as_secs_f64(),
        }
    }
}

/// How many messages `sent` holds and their bytes ([`message_bytes`]).
pub fn tally(sent: &[Message]) -> (u64, u64) {
    (sent.len() as u64, sent.iter().map(message_bytes).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(key: Option<&[u8]>, value: &[u8]) -> Message {
        Message {
            route: "s".into(),
            key: key.map(<[u8]>::to_vec),
            value: value.to_vec(),
            op: Some("c"),
            table: Some("public.t".into()),
            position: b"{}".to_vec(),
            id: "k/0/0".into(),
        }
    }

    #[test]
    fn bytes_are_key_value_and_headers() {
        let headers = "faucet-op".len()
            + 1
            + "faucet-table".len()
            + "public.t".len()
            + "faucet-position".len()
            + 2
            + "faucet-id".len()
            + "k/0/0".len();
        assert_eq!(
            message_bytes(&message(Some(b"{\"id\":1}"), b"{\"v\":2}")),
            (8 + 7 + headers) as u64
        );
        assert_eq!(message_bytes(&message(None, b"")), headers as u64);
    }

    #[test]
    fn a_page_keeps_the_most_pending_and_counts_what_it_sent() {
        let mut m = PageMeter::start();
        m.pending(3);
        m.pending(1);
        let sent = [message(None, b"ab"), message(None, b"c")];
        let stats = m.finish(&sent);
        assert_eq!(stats.messages, 2);
        assert_eq!(stats.acks_pending, 3);
        assert_eq!(
            stats.bytes,
            message_bytes(&sent[0]) + message_bytes(&sent[1])
        );
        assert!(stats.publish_seconds >= 0.0);
    }
}
