//! What `faucet doctor` asks of a `mongodb-cdc` source, queries only (a change stream opened
//! and closed consumes nothing): the server is a replica set member, the user may open the
//! change stream and `find` in each listed collection, the pre- and post-images that
//! `before` / `full_document` need are enabled per collection, and the oplog window (the
//! time between the oldest and newest oplog entries: how long a stopped pipeline may stay
//! stopped before its resume token falls out).

use mongodb::bson::{Document, Timestamp, doc};
use mongodb::options::FindOneOptions;

use faucet_core::{FaucetError, ReadOptions};

use super::CONNECTOR;
use super::bookmark::CdcBookmark;
use super::config::{Before, FullDocument, ValidatedMongodbCdcConfig};
use super::record;
use super::stream::{self, Carry, Start};

/// The oplog's oldest and newest entries' times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OplogWindow {
    /// The oldest entry's `ts`.
    pub(crate) first: Timestamp,
    /// The newest entry's `ts`.
    pub(crate) last: Timestamp,
}

impl OplogWindow {
    /// The window in seconds.
    pub(crate) fn seconds(&self) -> u64 {
        u64::from(self.last.time.saturating_sub(self.first.time))
    }
}

/// Probes `config`'s server; returns the oplog window where the user may read `local.oplog.rs`.
///
/// # Errors
/// [`FaucetError::Connect`] when unreachable; [`FaucetError::Read`] naming the missing
/// prerequisite (a replica set, a privilege, the pre- and post-images a `required` setting
/// needs) and its fix.
pub(crate) async fn check(
    config: &ValidatedMongodbCdcConfig,
) -> Result<Option<OplogWindow>, FaucetError> {
    let client = config.connection.client().await?;
    let server = config.connection.describe();
    let hello = client
        .database("admin")
        .run_command(doc! {"hello": 1})
        .await
        .map_err(|e| config.connection.error("hello", &e))?;
    if hello.get_str("setName").is_err() {
        return Err(FaucetError::read(
            CONNECTOR,
            format!(
                "{server} is not a replica set member: change streams need one (start mongod \
                 with --replSet and run rs.initiate(); one node is enough)"
            ),
            None,
        ));
    }
    let options = ReadOptions::default();
    drop(
        stream::watch(&client, config, Start::End, &options, Carry::Documents)
            .await
            .map_err(|e| {
                e.with_context("the user needs the changeStream action on the listed collections")
            })?,
    );
    for w in &config.watched {
        let db = client.database(&w.db);
        let names = match &w.coll {
            Some(c) => vec![c.clone()],
            None => db
                .list_collection_names()
                .await
                .map_err(|e| {
                    config
                        .connection
                        .error(&format!("list the collections of `{}`", w.db), &e)
                })?
                .into_iter()
                .filter(|c| !c.starts_with("system."))
                .collect(),
        };
        for name in &names {
            db.collection::<Document>(name)
                .find_one(doc! {})
                .with_options(
                    FindOneOptions::builder()
                        .projection(doc! {"_id": 1})
                        .build(),
                )
                .await
                .map_err(|e| {
                    config.connection.error(
                        &format!("find in `{}.{name}` (the user needs the find action)", w.db),
                        &e,
                    )
                })?;
        }
        check_images(config, &db, &names).await?;
    }
    let window = oplog_window(&client).await;
    match &window {
        Some(w) => tracing::info!(
            source = CONNECTOR,
            oplog_window_seconds = w.seconds(),
            "the oplog holds {} s of changes: a pipeline stopped longer loses its position",
            w.seconds()
        ),
        None => tracing::warn!(
            source = CONNECTOR,
            "cannot read local.oplog.rs (the user needs find on it): the oplog window is unknown"
        ),
    }
    Ok(window)
}

/// Whether each of `names` has `changeStreamPreAndPostImages` enabled where `before` or
/// `full_document` need it: missing with `required` is an error, with `when_available` a
/// warning.
async fn check_images(
    config: &ValidatedMongodbCdcConfig,
    db: &mongodb::Database,
    names: &[String],
) -> Result<(), FaucetError> {
    let c = &config.config;
    let required = c.before == Before::Required || c.full_document == FullDocument::Required;
    let wanted = required
        || c.before == Before::WhenAvailable
        || c.full_document == FullDocument::WhenAvailable;
    if !wanted {
        return Ok(());
    }
    let specs = db
        .list_collections()
        .filter(doc! {"name": {"$in": names}})
        .await
        .map_err(|e| config.connection.error("list the collections' options", &e))?;
    use futures_util::TryStreamExt as _;
    let specs: Vec<_> = specs
        .try_collect()
        .await
        .map_err(|e| config.connection.error("list the collections' options", &e))?;
    for name in names {
        let enabled = specs.iter().any(|s| {
            &s.name == name
                && s.options
                    .change_stream_pre_and_post_images
                    .as_ref()
                    .is_some_and(|p| p.enabled)
        });
        if enabled {
            continue;
        }
        let message = format!(
            "collection `{}.{name}` has no changeStreamPreAndPostImages: `before` / \
             `full_document` get no pre- or post-images from it; enable them with \
             db.runCommand({{collMod: \"{name}\", changeStreamPreAndPostImages: {{enabled: true}}}})",
            db.name()
        );
        if required {
            return Err(FaucetError::read(CONNECTOR, message, None));
        }
        tracing::warn!(source = CONNECTOR, "{message}");
    }
    Ok(())
}

/// The oplog's window, `None` when `local.oplog.rs` cannot be read.
pub(crate) async fn oplog_window(client: &mongodb::Client) -> Option<OplogWindow> {
    let oplog = client.database("local").collection::<Document>("oplog.rs");
    let at = |sort: i32| {
        let oplog = oplog.clone();
        async move {
            oplog
                .find_one(doc! {})
                .with_options(
                    FindOneOptions::builder()
                        .sort(doc! {"$natural": sort})
                        .projection(doc! {"ts": 1})
                        .build(),
                )
                .await
                .ok()
                .flatten()
                .and_then(|d| d.get_timestamp("ts").ok())
        }
    };
    Some(OplogWindow {
        first: at(1).await?,
        last: at(-1).await?,
    })
}

/// What a run from `bookmark` would do: resume after its token (opened and read once here,
/// so a token out of the oplog is found), with its age against the oplog window.
///
/// # Errors
/// [`FaucetError::Bookmark`] when the token is no longer in the oplog (286), and what
/// [`check`] fails with.
pub(crate) async fn check_resume(
    config: &ValidatedMongodbCdcConfig,
    bookmark: &CdcBookmark,
) -> Result<String, FaucetError> {
    let window = check(config).await?;
    let client = config.connection.client().await?;
    let token = record::token_from_text(&bookmark.resume_token).map_err(|e| {
        FaucetError::bookmark(
            CONNECTOR,
            format!("the stored resume token cannot be used: {e}"),
            None,
        )
    })?;
    let mut events = stream::watch(
        &client,
        config,
        Start::After(token),
        &ReadOptions::default(),
        Carry::Documents,
    )
    .await?;
    events
        .next_if_any()
        .await
        .map_err(|e| config.connection.error("resume the change stream", &e))?;
    let short = &bookmark.resume_token[..bookmark.resume_token.len().min(16)];
    let mut note = format!("resumes after resume token {short}…");
    if let (Some(at), Some(w)) = (bookmark.cluster_time, window) {
        let r = super::retention::retention(w, Some(at));
        note.push_str(&format!(
            " (its last change {} s before the newest oplog entry; the oplog holds {} s)",
            r.bookmark_age_seconds.unwrap_or(0.0),
            w.seconds()
        ));
        if r.near_window_end() {
            note.push_str(
                "; WARNING: the bookmark is near the oplog's end — run the pipeline now, or \
                 enlarge the oplog, before its position is lost",
            );
        }
    }
    Ok(note)
}
