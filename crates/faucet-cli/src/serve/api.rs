//! The HTTP API (axum), JSON in and out, in the shape Kafka Connect's operators know.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | the status page ([`super::page`]; `/status.js` its script) |
//! | `GET /pipelines` | `{"member", "pipelines": [status…]}` |
//! | `GET /pipelines/{key}` | one status ([`super::pipeline::PipelineView`]) |
//! | `PUT /pipelines/{key}/pause` · `/resume` · `/stop` | the status after the change (persisted first) |
//! | `POST /pipelines/{key}/run` | 202 and the status: a bounded run starts now |
//! | `GET /members` | `{"member", "members": [{"name", "pipelines", "draining", …}]}`: this process alone, or with `--cluster` every member of the members table (`alive`, `settled`, `leaving`, `heartbeat_age_seconds`, `settle_seconds`, `rows_loaded`) |
//! | `PUT /members/{name}/drain` · `/undrain` | `--cluster`: the member owns no pipeline (persisted in the members table) / owns again |
//! | `GET /healthz` | 200 `{"status": "ok"}` while the process serves |
//! | `GET /readyz` | 200 `{"ready": true}`, or 503 `{"ready": false, "not_ready": [{"key", "reason"}]}`; with `--cluster` readiness is the member's own (the cluster database answers, not drained, not draining), never one FAILED pipeline's |
//! | `GET /metrics` | Prometheus text ([`crate::telemetry::metrics`]) |
//!
//! Errors are `{"error": "..."}` with 400/401/403/404/405/409/503. Mutating routes need
//! `Authorization: Bearer <token>` ([`super::auth`]): 401 without it or with another token,
//! 403 when no token is configured (the message says how to set one).
//!
//! Off loopback ([`Reads::Guarded`]: `--listen` on an address others can reach) the reads
//! need the token too, since they show file paths, bookmarks, `user@host:port/db` and error
//! texts: `GET /pipelines…` and `/members` answer 401 without it, `/readyz` answers its
//! status code and `{"ready": bool}` to anyone (for probes) and its reasons only with the
//! token, and `/metrics` needs it unless `--public-metrics` opens it on purpose (Prometheus
//! sends a bearer token with `authorization: { credentials_file: … }`). `/healthz` is open.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

use super::auth::{self, Token};
use super::cluster::Coordinator;
use super::control::{self, Desired};
use super::pipeline::{Registry, Slot};
use super::report::Report;

/// Owners' reports by state key.
type Reports = std::collections::BTreeMap<String, Report>;

/// What every handler sees.
#[derive(Clone)]
pub(crate) struct Api {
    /// The rows.
    pub(crate) registry: Arc<Registry>,
    /// The token mutating routes need (`None`: they are refused).
    pub(crate) token: Arc<Option<Token>>,
    /// The metrics recorder's handle.
    pub(crate) metrics: PrometheusHandle,
    /// The cluster, with `--cluster`.
    pub(crate) cluster: Option<Arc<dyn Coordinator>>,
    /// Who may read.
    pub(crate) reads: Reads,
}

/// Who may read the API's status routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reads {
    /// On loopback: only this host can connect; every read is open.
    Open,
    /// Off loopback: reads need the token; `public_metrics` opens `/metrics`.
    Guarded {
        /// `--public-metrics`: `/metrics` without the token.
        public_metrics: bool,
    },
}

impl Api {
    /// The member `key` is placed on.
    fn owner(&self, key: &str) -> Option<String> {
        match &self.cluster {
            Some(c) => c.owner_of(key),
            None => Some(self.registry.member.clone()),
        }
    }

    /// With `--cluster`, the fresh reports of the rows' live owners, by state key (empty
    /// without, or when the cluster database does not answer).
    async fn reports(&self) -> Reports {
        match &self.cluster {
            Some(c) => c.reports().await,
            None => Reports::new(),
        }
    }

    fn view(&self, slot: &Slot, reports: &Reports) -> super::pipeline::PipelineView {
        slot.view(self.owner(slot.key()).as_deref(), reports.get(slot.key()))
    }
}

/// An error answer: `{"error": message}` with a status.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.0, Json(json!({ "error": self.1 }))).into_response();
        if self.0 == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// The router.
pub(crate) fn router(api: Api) -> Router {
    Router::new()
        .route("/", get(super::page::index))
        .route("/status.js", get(super::page::script))
        .route("/pipelines", get(list))
        .route("/pipelines/{key}", get(show))
        .route("/pipelines/{key}/pause", put(pause))
        .route("/pipelines/{key}/resume", put(resume))
        .route("/pipelines/{key}/stop", put(stop))
        .route("/pipelines/{key}/run", post(run_now))
        .route("/members", get(members))
        .route("/members/{name}/drain", put(drain))
        .route("/members/{name}/undrain", put(undrain))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError(
                StatusCode::NOT_FOUND,
                "no such route; see GET / (the status page), /pipelines, /members, /healthz, \
                 /readyz, /metrics"
                    .to_owned(),
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this route (reads are GET; pause, resume and stop are \
                 PUT; run is POST)"
                    .to_owned(),
            )
        })
        .with_state(api)
}

fn slot<'a>(api: &'a Api, key: &str) -> Result<&'a Arc<Slot>, ApiError> {
    api.registry.slots.get(key).ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            format!(
                "no pipeline {}; GET /pipelines lists them by state key",
                faucet_core::state::shown_key(key)
            ),
        )
    })
}

/// Whether `headers` may read: always on loopback, else with the API token.
fn authorize_read(api: &Api, headers: &HeaderMap) -> Result<(), ApiError> {
    match api.reads {
        Reads::Open => Ok(()),
        Reads::Guarded { .. } => authorize_for(api, headers, "this route shows pipeline details"),
    }
}

/// Whether `headers` carry the API token (mutating routes).
fn authorize(api: &Api, headers: &HeaderMap) -> Result<(), ApiError> {
    authorize_for(api, headers, "this route changes a pipeline")
}

/// Whether `headers` carry the API token; `what` says why it is asked for.
fn authorize_for(api: &Api, headers: &HeaderMap, what: &str) -> Result<(), ApiError> {
    let Some(token) = api.token.as_ref() else {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            format!(
                "changes through the API are disabled: no API token is configured; {}",
                auth::HOW
            ),
        ));
    };
    let given = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
    match given {
        Some(h) if token.admits(h) => Ok(()),
        Some(_) => Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "the bearer token is not the API token".to_owned(),
        )),
        None => Err(ApiError(
            StatusCode::UNAUTHORIZED,
            format!(
                "{what}: send `Authorization: Bearer <token>` with the API token \
                 (FAUCET_API_TOKEN or --token-file of the server)"
            ),
        )),
    }
}

async fn list(State(api): State<Api>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize_read(&api, &headers) {
        return e.into_response();
    }
    let member = &api.registry.member;
    let reports = api.reports().await;
    let pipelines: Vec<_> = api
        .registry
        .slots
        .values()
        .map(|s| api.view(s, &reports))
        .collect();
    Json(json!({ "member": member, "pipelines": pipelines })).into_response()
}

async fn show(State(api): State<Api>, Path(key): Path<String>, headers: HeaderMap) -> Response {
    match authorize_read(&api, &headers).and_then(|()| slot(&api, &key)) {
        Ok(s) => Json(api.view(s, &api.reports().await)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn pause(api: State<Api>, key: Path<String>, headers: HeaderMap) -> Response {
    change(api, key, headers, Desired::Paused).await
}

async fn resume(api: State<Api>, key: Path<String>, headers: HeaderMap) -> Response {
    change(api, key, headers, Desired::Running).await
}

async fn stop(api: State<Api>, key: Path<String>, headers: HeaderMap) -> Response {
    change(api, key, headers, Desired::Stopped).await
}

/// Persists the wish in the row's state store, then applies it.
async fn change(
    State(api): State<Api>,
    Path(key): Path<String>,
    headers: HeaderMap,
    desired: Desired,
) -> Response {
    let result = async {
        authorize(&api, &headers)?;
        let slot = slot(&api, &key)?;
        let Some(store) = slot.store.get() else {
            return Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the state store of {} is not connected yet (see its error); try again",
                    faucet_core::state::shown_key(&key)
                ),
            ));
        };
        control::store(store, &slot.control_key, desired, &api.registry.member)
            .await
            .map_err(|e| {
                ApiError(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "cannot persist the change: {}",
                        crate::output::error_chain(&e)
                    ),
                )
            })?;
        slot.set_desired(desired);
        tracing::warn!(key, wish = ?desired, "pipeline changed through the API");
        Ok(Json(api.view(slot, &api.reports().await)))
    }
    .await;
    result.into_response()
}

async fn run_now(State(api): State<Api>, Path(key): Path<String>, headers: HeaderMap) -> Response {
    let result = (|| {
        authorize(&api, &headers)?;
        let slot = slot(&api, &key)?;
        let conflict = |m: String| Err(ApiError(StatusCode::CONFLICT, m));
        if slot.plan.continuous {
            return conflict(
                "a continuous pipeline runs all the time; there is no bounded run to start"
                    .to_owned(),
            );
        }
        let desired = slot.desired();
        if desired != Desired::Running {
            return conflict(format!(
                "the pipeline is {}; PUT /pipelines/{key}/resume first",
                Slot::state_name(&slot.status())
            ));
        }
        if slot.is_running() {
            return conflict("a run of this pipeline is going; wait for it to end".to_owned());
        }
        slot.run_now.store(true, Ordering::SeqCst);
        slot.wake.notify_one();
        if !slot.placed() {
            return conflict(format!(
                "the pipeline is placed on member {}; ask it",
                api.owner(&key).as_deref().unwrap_or("(none)")
            ));
        }
        Ok((StatusCode::ACCEPTED, Json(api.view(slot, &Reports::new()))))
    })();
    result.into_response()
}

async fn members(State(api): State<Api>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize_read(&api, &headers) {
        return e.into_response();
    }
    let r = &api.registry;
    match &api.cluster {
        None => Json(json!({ "member": r.member, "members": [{
            "name": r.member,
            "pipelines": r.slots.len(),
            "draining": r.draining.load(Ordering::SeqCst),
        }] }))
        .into_response(),
        Some(c) => match c.members().await {
            Ok(doc) => Json(doc).into_response(),
            Err(e) => ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                crate::output::error_chain(&e),
            )
            .into_response(),
        },
    }
}

async fn drain(api: State<Api>, name: Path<String>, headers: HeaderMap) -> Response {
    set_drain(api, name, headers, true).await
}

async fn undrain(api: State<Api>, name: Path<String>, headers: HeaderMap) -> Response {
    set_drain(api, name, headers, false).await
}

/// Persists a member's drain in the members table; the members apply it at their next round.
async fn set_drain(
    State(api): State<Api>,
    Path(name): Path<String>,
    headers: HeaderMap,
    on: bool,
) -> Response {
    let result = async {
        authorize(&api, &headers)?;
        let Some(cluster) = &api.cluster else {
            return Err(ApiError(
                StatusCode::CONFLICT,
                "this server is not in a cluster (--cluster); stop it with SIGTERM instead"
                    .to_owned(),
            ));
        };
        let found = cluster.drain(&name, on).await.map_err(|e| {
            ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "cannot persist the drain: {}",
                    crate::output::error_chain(&e)
                ),
            )
        })?;
        if !found {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("no member {name:?}; GET /members lists them"),
            ));
        }
        tracing::warn!(
            member = name,
            drained = on,
            "member drain changed through the API"
        );
        Ok(Json(json!({ "name": name, "draining": on })))
    }
    .await;
    result.into_response()
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(api): State<Api>, headers: HeaderMap) -> Response {
    let not_ready = reasons(&api);
    // Off loopback, the reasons (error texts, hosts) are for the token's holders only.
    let bare = authorize_read(&api, &headers).is_err();
    if not_ready.is_empty() {
        Json(json!({ "ready": true })).into_response()
    } else if bare {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "ready": false })),
        )
            .into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "ready": false, "not_ready": not_ready })),
        )
            .into_response()
    }
}

/// Why this process is not ready (empty: ready), as `{"key", "reason"}` entries.
fn reasons(api: &Api) -> Vec<serde_json::Value> {
    let mut not_ready = Vec::new();
    if api.registry.draining.load(Ordering::SeqCst) {
        not_ready.push(
            json!({"key": null, "reason": "draining: finishing the pages in hand before exit"}),
        );
    }
    if let Some(cluster) = &api.cluster {
        // A member's readiness is its own: one FAILED pipeline (placed here or not) does not
        // make the member unable to serve, and another member would fail it alike.
        if let Some(reason) = cluster.not_ready() {
            not_ready.push(json!({"key": null, "reason": reason}));
        }
        return not_ready;
    }
    for (key, s) in &api.registry.slots {
        let view = api.view(s, &Reports::new());
        if view.state == "FAILED" {
            not_ready.push(json!({"key": key, "reason": format!("FAILED: {}", view.error.unwrap_or_default())}));
        } else if s.store.get().is_none() {
            not_ready.push(json!({"key": key, "reason": "starting: connecting its state store"}));
        }
    }
    not_ready
}

async fn metrics(State(api): State<Api>, headers: HeaderMap) -> Response {
    if api.reads
        != (Reads::Guarded {
            public_metrics: true,
        })
        && let Err(e) = authorize_read(&api, &headers)
    {
        return e.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            crate::telemetry::metrics::CONTENT_TYPE,
        )],
        api.metrics.render(),
    )
        .into_response()
}
