//! `laneway serve`: open the store and the tenant registry (and its admin
//! API, [`crate::admin`]), bind, print
//! the banner, serve S3 over HTTP/1.1 and HTTP/2 until Ctrl-C or SIGTERM.
//!
//! Startup output goes to stdout and is meant for people and scripts: on
//! the first start of a data directory, ready-to-paste `export` lines with
//! the new credentials; on later starts, the access key id and where its
//! secret is kept (never the secret). Always, last, one machine-readable
//! line `laneway listening on http://ADDR` (`https://` with `--tls-cert`,
//! see [`crate::server::tls`]) with the bound address (tests
//! start with `--listen 127.0.0.1:0` and read the port from it). Logs go to
//! stderr.
//!
//! Every accepted connection takes a place in the bounded connection
//! table and runs under its watchdog (header, idle and stall deadlines,
//! eviction when the table is full: [`crate::server::conn`]); a failed accept
//! backs off. Every request gets an id (returned as `x-amz-request-id`,
//! next to the process's host id as `x-amz-id-2`; error documents name
//! both, [`crate::request::reply`]) and a tracing span carrying it, the method,
//! the path (never the query string, which can hold presigned
//! signatures) and, once authenticated, the tenant. A presigned URL's
//! `X-Amz-Expires` is checked first
//! ([`crate::request::presign::check_expires_param`]). A browser-form upload then
//! passes the form gate ([`crate::s3::post::form`]: signature checked before
//! the file is read).
//! Then it goes through the lanes ([`crate::lanes::LaneGate`]: fair-share
//! admission, paced bodies, metrics) into s3s. The errors s3s raises itself
//! for a browser-form upload's POST policy are given AWS's codes on the way
//! out ([`crate::s3::post::recode_policy_error`]). An HTTP/1 answer given
//! before the request's body was read closes the connection
//! ([`crate::server::unread`]).
//!
//! Shutdown: stop accepting, let in-flight requests finish for the grace
//! period (a second signal cuts it short), then `Store::shutdown`, which
//! drains the commit threads and syncs everything.

use crate::admin::boot::{self, Tenancy};
use crate::config::ServeConfig;
use crate::lanes::{LaneGate, LaneState};
use crate::request::auth::{KeyAuth, KeyCache, TenantAccess};
use crate::request::context::{Gateway, RequestInfo};
use crate::request::names::BucketNames;
use crate::s3::post::form::FormGate;
use crate::server::conn::body::ConnBody;
use crate::server::conn::{self, ConnTable, InFlight};
use base64::Engine as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use laneway_store::{Store, StoreConfig, StoreError};
use laneway_tenancy::{Bootstrap, TenancyError};
use s3s::config::{S3Config, StaticConfigProvider};
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{HttpError, HttpResponse};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

/// Why `serve` could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The store would not open.
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    /// The credential store would not open.
    #[error("cannot open the credentials: {0}")]
    Tenancy(#[from] TenancyError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS certificate or key would not load.
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] crate::server::tls::TlsError),
    /// A blocking task panicked.
    #[error("background task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// How often the background task sweeps stale uploads and compacts.
const COMPACT_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// Share of dead bytes at which a sealed segment is rewritten.
const COMPACT_MIN_GARBAGE: f64 = 0.5;

/// Request ids: a per-process prefix and a counter, as 16 hex digits;
/// and the process's host id (`x-amz-id-2`, `<HostId>`): base64 of its
/// boot prefix and process id, the same for every response it sends.
struct RequestIds {
    boot: u64,
    next: AtomicU64,
    host: String,
}

impl RequestIds {
    fn new() -> RequestIds {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mut raw = nanos.to_be_bytes().to_vec();
        raw.extend_from_slice(&std::process::id().to_be_bytes());
        RequestIds {
            boot: u64::from(nanos),
            next: AtomicU64::new(1),
            host: base64::engine::general_purpose::STANDARD.encode(raw),
        }
    }

    fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{:08X}{:08X}", self.boot & 0xFFFF_FFFF, n & 0xFFFF_FFFF)
    }
}

/// Run `laneway serve` until a shutdown signal. The port is bound before
/// the store opens (a busy port fails fast), and once the store is open it
/// is always shut down (synced), whatever happens after.
pub async fn run(cfg: ServeConfig) -> Result<(), ServeError> {
    // Before anything opens files: the store and the connections share it.
    conn::fds::raise_nofile_limit();
    if let Some(cluster) = cfg.cluster.clone() {
        return run_gateway(&cfg, &cluster).await;
    }
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| ServeError::DataDir {
        path: cfg.data_dir.display().to_string(),
        source,
    })?;
    let bind_err = |source| ServeError::Bind {
        addr: cfg.listen.clone(),
        source,
    };
    let listener = TcpListener::bind(&cfg.listen).await.map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    let tls = match &cfg.tls {
        Some((cert, key)) => Some(crate::server::tls::acceptor(cert, key)?),
        None => None,
    };
    let store = open_store(&cfg).await?;
    // Abort stale uploads and reclaim volume space in the background.
    store.start_compactor(COMPACT_EVERY, COMPACT_MIN_GARBAGE, cfg.upload_max_age);

    let served = serve_store(&cfg, (listener, tls), addr, Arc::clone(&store)).await;

    tracing::info!("syncing and closing the store");
    tokio::task::spawn_blocking(move || store.shutdown()).await?;
    served?;
    tracing::info!("laneway stopped");
    Ok(())
}

/// `laneway gateway`: S3 and the admin API over the store nodes of the
/// cluster file at `cluster`; nothing of its own on disk.
async fn run_gateway(cfg: &ServeConfig, cluster: &std::path::Path) -> Result<(), ServeError> {
    let bind_err = |source| ServeError::Bind {
        addr: cfg.listen.clone(),
        source,
    };
    let listener = TcpListener::bind(&cfg.listen).await.map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    let tls = match &cfg.tls {
        Some((cert, key)) => Some(crate::server::tls::acceptor(cert, key)?),
        None => None,
    };
    let opts = laneway_store::rpc::CallOptions::default();
    let remote = laneway_store::remote::RemoteStore::open(cluster, opts)?;
    // Keeps routing to new leaders warm (replicated clusters only).
    let _watch = remote.watch_leaders(std::time::Duration::from_secs(1));
    let secret = laneway_store::cluster::ClusterFile::load(cluster)
        .and_then(|f| f.read_secret())
        .map_err(|e| StoreError::Layout(e.to_string()))?;
    let client: Arc<dyn laneway_store::StoreClient> = Arc::new(remote);
    let registry = boot::RegistryAt::Catalog { secret };
    tracing::info!(cluster = %cluster.display(), "gateway of a cluster");
    serve_client(cfg, (listener, tls), addr, client, registry).await?;
    tracing::info!("laneway gateway stopped");
    Ok(())
}

/// Credentials, banner, then requests until a shutdown signal.
async fn serve_store(
    cfg: &ServeConfig,
    listener: (TcpListener, Option<TlsAcceptor>),
    addr: SocketAddr,
    store: Arc<Store>,
) -> Result<(), ServeError> {
    let local: Arc<dyn laneway_store::StoreClient> =
        Arc::new(laneway_store::LocalStore::new(store));
    serve_client(cfg, listener, addr, local, boot::RegistryAt::DataDir).await
}

/// Tenancy, banner, then requests through `local` until a shutdown
/// signal: the same for `serve` and for a cluster's gateway.
async fn serve_client(
    cfg: &ServeConfig,
    listener: (TcpListener, Option<TlsAcceptor>),
    addr: SocketAddr,
    local: Arc<dyn laneway_store::StoreClient>,
    registry: boot::RegistryAt,
) -> Result<(), ServeError> {
    let lanes = Arc::new(LaneState::new(cfg.lanes.clone()));
    let runner = match registry {
        boot::RegistryAt::DataDir => "serve".to_string(),
        _ => crate::jobs::runner::random_id(),
    };
    let tenancy = boot::start(cfg, Arc::clone(&local), Arc::clone(&lanes), registry).await?;
    print_banner(cfg, &tenancy, addr);
    tracing::info!(%addr, data_dir = %cfg.data_dir.display(), region = %cfg.region, "laneway serving");
    let jobs = crate::jobs::Jobs::new(Arc::clone(&local), Arc::clone(&lanes), runner);
    jobs.start();
    let shared = Shared {
        service: build_service(local, cfg, &tenancy.keys, jobs.clone()),
        gate: Arc::new(LaneGate::new(lanes, Arc::clone(&tenancy.keys))),
        ids: Arc::new(RequestIds::new()),
        forms: Arc::new(FormGate::new(
            Arc::clone(&tenancy.keys),
            cfg.conn.header_timeout,
        )),
        stall: cfg.conn.stall_timeout,
    };
    accept_until_signal(listener, shared, connection_table(cfg), cfg).await;
    // Runners stop after their page; their jobs resume on the next start.
    jobs.stop(JOBS_STOP_WAIT).await;
    Ok(())
}

/// Longest a shutdown waits for tagging jobs to finish their page.
const JOBS_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The connection table: `--max-connections`, or what the open-files
/// limit leaves once the store is open ([`conn::fds`]).
fn connection_table(cfg: &ServeConfig) -> Arc<ConnTable> {
    let limit = conn::fds::nofile_limit();
    let open = conn::fds::open_descriptors();
    let cap = cfg.conn.max_connections.unwrap_or_else(|| {
        conn::fds::derived_cap(
            limit.unwrap_or(UNLIMITED_FDS),
            open.unwrap_or(DEFAULT_OPEN_FDS),
        )
    });
    tracing::info!(
        max_connections = cap,
        open_files_limit = limit,
        open_files = open,
        "connection table"
    );
    ConnTable::new(cfg.conn.clone(), cap)
}

/// The descriptor limit assumed when there is none.
const UNLIMITED_FDS: u64 = 1 << 20;

/// Descriptors assumed open when `/proc` cannot tell.
const DEFAULT_OPEN_FDS: u64 = 256;

async fn open_store(cfg: &ServeConfig) -> Result<Arc<Store>, ServeError> {
    let dir = cfg.data_dir.clone();
    let scfg = StoreConfig {
        partitions: cfg.partitions,
        engine: cfg.engine,
        disk_reserve: cfg.disk_reserve,
        index_memory: cfg.index_memory,
        ..StoreConfig::default()
    };
    Ok(tokio::task::spawn_blocking(move || Store::open(&dir, scfg)).await??)
}

fn build_service(
    store: Arc<dyn laneway_store::StoreClient>,
    cfg: &ServeConfig,
    keys: &Arc<KeyCache>,
    jobs: crate::jobs::Jobs,
) -> S3Service {
    let gw = Gateway::new(store, cfg.region.clone());
    let mut builder = S3ServiceBuilder::new(gw.clone());
    builder.set_route(crate::jobs::JobsRoute::new(
        gw,
        jobs,
        Arc::clone(keys),
        cfg.domain.clone(),
    ));
    if let Some(domain) = &cfg.domain {
        builder.set_host(domain.clone());
    }
    builder.set_auth(KeyAuth::new(Arc::clone(keys)));
    builder.set_access(TenantAccess::new(Arc::clone(keys)));
    builder.set_validation(BucketNames);
    let mut s3s_config = S3Config::default();
    s3s_config.post_object_max_file_size = crate::s3::post::MAX_POST_FILE_BYTES;
    // s3s reads a form's fields again after the form gate; the same limit.
    s3s_config.form_max_field_size = crate::s3::post::form::MAX_FORM_FIELDS_BYTES;
    s3s_config.form_max_fields_size = crate::s3::post::form::MAX_FORM_FIELDS_BYTES;
    builder.set_config(Arc::new(StaticConfigProvider::new(Arc::new(s3s_config))));
    builder.build()
}

/// The first-start paste block, or the later-start reminder, then the
/// machine-readable listening line; flushed so a parent process sees it.
fn print_banner(cfg: &ServeConfig, tenancy: &Tenancy, addr: SocketAddr) {
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    let endpoint = format!("{scheme}://{}", paste_addr(addr));
    let admin = format!("http://{}", paste_addr(tenancy.admin_addr));
    let registry = match cfg.cluster {
        Some(_) => tenancy.keys.registry().location(),
        None => format!("{} (mode 0600)", tenancy.keys.registry().location()),
    };
    let mut text = String::new();
    match &tenancy.boot {
        Bootstrap::Created { tenant, key } => {
            let (access_key, secret) = (&key.info.access_key, &key.secret);
            text.push_str(&format!(
                "laneway: new tenant {} ({}) with credentials saved (encrypted) to {}. \
                 Paste into your shell:\n\n\
                 export AWS_ACCESS_KEY_ID={access_key}\n\
                 export AWS_SECRET_ACCESS_KEY={}\n\
                 export AWS_DEFAULT_REGION={}\n\
                 export AWS_ENDPOINT_URL={endpoint}\n\n\
                 then try:\n\n\
                 aws --endpoint-url {endpoint} s3 ls\n\n",
                tenant.name,
                tenant.id,
                registry,
                secret.expose(),
                cfg.region,
            ));
        }
        Bootstrap::Existing { access_key } => {
            let key = access_key.as_deref().unwrap_or("(none)");
            text.push_str(&format!(
                "laneway: default tenant's access key id {key} (secret shown at first start; \
                 `laneway admin key create default` makes another)\n"
            ));
        }
    }
    if let Some((token, path)) = &tenancy.new_token {
        text.push_str(&format!(
            "laneway: new admin token saved to {} (mode 0600):\n\n\
             export LANEWAY_ADMIN_ENDPOINT={admin}\n\
             export LANEWAY_ADMIN_TOKEN={}\n\n",
            path.display(),
            token.expose()
        ));
    }
    text.push_str(&format!("laneway admin listening on {admin}\n"));
    text.push_str(&format!("laneway listening on {scheme}://{addr}\n"));
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        tracing::warn!("could not write the startup banner to stdout");
    }
}

/// The address clients should use: loopback when bound to "any".
fn paste_addr(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], a.port()))
        }
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port()))
        }
        other => other,
    }
}

/// What every request of every connection shares.
#[derive(Clone)]
struct Shared {
    service: S3Service,
    gate: Arc<LaneGate>,
    ids: Arc<RequestIds>,
    forms: Arc<FormGate>,
    stall: Duration,
}

async fn accept_until_signal(
    (listener, tls): (TcpListener, Option<TlsAcceptor>),
    shared: Shared,
    table: Arc<ConnTable>,
    cfg: &ServeConfig,
) {
    let graceful = GracefulShutdown::new();
    let builder = conn::accept::builder(table.config());
    let mut backoff = conn::accept::Backoff::default();
    let mut signal = std::pin::pin!(shutdown_signal());
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff.reset();
                    serve_one((stream, peer), (&builder, tls.as_ref()), &graceful, &shared, &table);
                }
                Err(e) => tokio::time::sleep(backoff.failed(&table, &e)).await,
            },
            () = &mut signal => break,
        }
    }
    drop(listener);
    tracing::info!(
        grace_secs = cfg.shutdown_grace.as_secs(),
        "stopped accepting; draining in-flight requests"
    );
    tokio::select! {
        drained = tokio::time::timeout(cfg.shutdown_grace, graceful.shutdown()) => {
            if drained.is_err() {
                tracing::warn!("grace period over; closing remaining connections");
            }
        }
        () = shutdown_signal() => tracing::warn!("second signal; not waiting for in-flight requests"),
    }
}

/// Give an accepted connection its place in the table and its task: TLS
/// handshake (if any) and hyper, under the connection's watchdog.
fn serve_one(
    (stream, peer): (TcpStream, SocketAddr),
    (builder, tls): (&auto::Builder<TokioExecutor>, Option<&TlsAcceptor>),
    graceful: &GracefulShutdown,
    shared: &Shared,
    table: &Arc<ConnTable>,
) {
    let Some(entry) = table.admit() else {
        tracing::debug!(%peer, "every connection is busy; closing the new one");
        return;
    };
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
    let state = Arc::clone(entry.state());
    let shared = shared.clone();
    // What this connection has proved (see crate::lanes::trust).
    let trust = crate::lanes::trust::ConnTrust::new(Some(peer));
    let svc = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
        req.extensions_mut().insert(Arc::clone(&trust));
        let flight = state.begin_request(req.version());
        handle(shared.clone(), req, flight)
    });
    let io = conn::io::Tracked::new(stream, Arc::clone(entry.state()));
    let (builder, watcher) = (builder.clone(), graceful.watcher());
    let handshake = tls.cloned().map(|a| (a, table.config().header_timeout));
    // The handshake runs in the connection's task: a bad client never
    // stalls or stops the accept loop.
    tokio::spawn(conn::supervise(entry, async move {
        match handshake {
            Some((acceptor, deadline)) => {
                let Some(stream) = crate::server::tls::handshake(&acceptor, io, deadline).await
                else {
                    return Ok(());
                };
                let conn = builder.serve_connection(TokioIo::new(stream), svc);
                watcher.watch(conn.into_owned()).await
            }
            None => {
                let conn = builder.serve_connection(TokioIo::new(io), svc);
                watcher.watch(conn.into_owned()).await
            }
        }
    }));
}

/// One request: id, span, the presigned-URL expiry parameter
/// ([`crate::request::presign::check_expires_param`]), the form gate for a
/// browser-form upload, the lanes and the s3s service behind them, the
/// request and host id headers; the
/// response body holds the request's place on its connection.
async fn handle(
    shared: Shared,
    mut req: http::Request<Incoming>,
    flight: InFlight,
) -> Result<http::Response<ConnBody>, HttpError> {
    let id = shared.ids.next();
    let span = tracing::info_span!(
        "request",
        id = %id,
        method = %req.method(),
        path = %req.uri().path(),
        tenant = tracing::field::Empty,
    );
    req.extensions_mut().insert(RequestInfo {
        id: id.clone(),
        span: span.clone(),
    });
    let is_head = req.method() == http::Method::HEAD;
    let form_post = crate::s3::post::is_form_post(req.method(), req.headers());
    let started = Instant::now();
    let (req, body) = crate::server::unread::watch(req, shared.stall);
    let ids = crate::request::reply::Ids {
        request: &id,
        host: &shared.ids.host,
    };
    let mut result = dispatch(&shared, req, ids, form_post)
        .instrument(span.clone())
        .await;
    let _enter = span.enter();
    match &mut result {
        Ok(resp) => {
            body.close_if_unread(resp.headers_mut());
            finish(resp, ids, is_head, started);
        }
        Err(e) => tracing::warn!(error = ?e, "request error"),
    }
    result.map(|resp| resp.map(|b| ConnBody::new(b, flight)))
}

/// The answer to one request: refused at once for a bad
/// `X-Amz-Expires`, a browser-form upload through the form gate, then the
/// lanes and s3s (which finish their answers' documents,
/// [`crate::request::reply`]; the ones given here are finished here).
async fn dispatch(
    shared: &Shared,
    mut req: http::Request<crate::server::unread::Watched>,
    ids: crate::request::reply::Ids<'_>,
    form_post: bool,
) -> Result<HttpResponse, HttpError> {
    if let Err(e) = crate::request::presign::check_expires_param(req.uri().query()) {
        return refusal(e, ids);
    }
    if !form_post {
        return shared.gate.call(&shared.service, req, ids).await;
    }
    // The permit (the file's memory) is held until s3s has read the file
    // and the handler has stored it.
    let _permit = match shared.forms.admit(&mut req).await {
        Ok(permit) => permit,
        Err(e) => return refusal(e, ids),
    };
    let resp = shared.gate.call(&shared.service, req, ids).await?;
    // s3s checks POST policies before any handler runs; give its
    // refusals AWS's codes.
    let resp = crate::s3::post::recode_policy_error(resp).await;
    Ok(crate::request::reply::finish(resp, ids))
}

/// The error response for a request refused in front of s3s.
fn refusal(
    e: crate::request::error::GwError,
    ids: crate::request::reply::Ids<'_>,
) -> Result<HttpResponse, HttpError> {
    tracing::debug!(error = ?e, "request refused in front of s3s");
    s3s::S3Error::from(e)
        .to_http_response()
        .map(|resp| crate::request::reply::finish(resp, ids))
        .map_err(|e| HttpError::new(Box::new(e)))
}

/// Add the request and host ids, fix up a ranged HEAD, log the outcome.
fn finish(
    resp: &mut HttpResponse,
    ids: crate::request::reply::Ids<'_>,
    is_head: bool,
    started: Instant,
) {
    for (name, value) in [("x-amz-request-id", ids.request), ("x-amz-id-2", ids.host)] {
        if let Ok(v) = http::HeaderValue::from_str(value) {
            resp.headers_mut().insert(name, v);
        }
    }
    // s3s always answers HEAD with 200; a ranged HEAD is 206 on S3.
    if is_head
        && resp.status() == http::StatusCode::OK
        && resp.headers().contains_key(http::header::CONTENT_RANGE)
    {
        *resp.status_mut() = http::StatusCode::PARTIAL_CONTENT;
    }
    let status = resp.status().as_u16();
    let elapsed_us = started.elapsed().as_micros();
    if resp.status().is_server_error() {
        tracing::warn!(status, elapsed_us, "request failed");
    } else {
        tracing::debug!(status, elapsed_us, "request done");
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
