//! The `mongodb-cdc` bookmark: `{"resume_token": "<_data>", "cluster_time": {"t": …, "i": …}}`
//! — the resume token of the last event of a page (or the post-batch resume token of an idle
//! stream), resumed with `startAfter`, and the cluster time the stream has read up to: the
//! last event's, or for an idle stream's post-batch token the server's operation time when
//! it was handed over (null before either), which `faucet doctor` and the retention monitor
//! compare with the oplog window.

use faucet_core::{Bookmark, FaucetError};
use mongodb::bson::Timestamp;
use serde_json::json;

use super::CONNECTOR;

/// A position in the change stream; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdcBookmark {
    /// The resume token's `_data`.
    pub resume_token: String,
    /// The cluster time the stream has read up to (module docs), when known.
    pub cluster_time: Option<Timestamp>,
}

impl CdcBookmark {
    /// The bookmark as stored.
    pub fn to_json(&self) -> Bookmark {
        json!({
            "resume_token": self.resume_token,
            "cluster_time": self.cluster_time.map(|t| json!({"t": t.time, "i": t.increment})),
        })
    }

    /// A stored bookmark.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `b` is not a `mongodb-cdc` bookmark (another source's,
    /// or edited).
    pub fn from_json(b: &Bookmark) -> Result<Self, FaucetError> {
        let refuse = || {
            FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "the stored bookmark {b} is not a mongodb-cdc bookmark ({{\"resume_token\": \
                     \"<hex>\", \"cluster_time\": …}}); was the pipeline's source changed? \
                     Start from a fresh state (another state key) to read from `start`"
                ),
                None,
            )
        };
        let token = b
            .get("resume_token")
            .and_then(|t| t.as_str())
            .ok_or_else(refuse)?;
        if token.is_empty() || !token.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(refuse());
        }
        let cluster_time = match b.get("cluster_time") {
            None | Some(serde_json::Value::Null) => None,
            Some(t) => {
                let part = |k: &str| {
                    t.get(k)
                        .and_then(serde_json::Value::as_u64)
                        .and_then(|v| u32::try_from(v).ok())
                };
                Some(Timestamp {
                    time: part("t").ok_or_else(refuse)?,
                    increment: part("i").ok_or_else(refuse)?,
                })
            }
        };
        Ok(Self {
            resume_token: token.to_owned(),
            cluster_time,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookmarks_round_trip_and_strangers_are_refused() {
        let b = CdcBookmark {
            resume_token: "8263a0ff".into(),
            cluster_time: Some(Timestamp {
                time: 1_700_000_000,
                increment: 4,
            }),
        };
        assert_eq!(CdcBookmark::from_json(&b.to_json()).expect("round trip"), b);
        let idle = CdcBookmark {
            resume_token: "82".into(),
            cluster_time: None,
        };
        assert_eq!(
            CdcBookmark::from_json(&idle.to_json()).expect("round trip"),
            idle
        );
        for bad in [
            json!({"lsn": "0/16B3748"}),
            json!({"resume_token": ""}),
            json!({"resume_token": "not hex"}),
            json!({"resume_token": "82", "cluster_time": {"t": -1, "i": 0}}),
        ] {
            let e = CdcBookmark::from_json(&bad).expect_err("refused");
            assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
        }
    }
}
