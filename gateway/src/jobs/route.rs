//! The HTTP side of bulk tagging jobs, on the S3 endpoint and signed like
//! any S3 call (SigV4, verified by s3s before this route runs):
//!
//! - `POST /{bucket}?x-laneway-tagging-jobs` with a JSON [`JobSpec`] body:
//!   202 and `{"id": "..."}`;
//! - `GET /{bucket}?x-laneway-tagging-jobs&id=ID`: the job (state, objects
//!   scanned and changed, errors); without `id`, `{"jobs": [...]}`, every
//!   job the bucket keeps;
//! - `DELETE /{bucket}?x-laneway-tagging-jobs&id=ID`: cancels (204).
//!
//! Only path-style addressing. The key's rights are checked as for S3
//! operations ([`crate::request::auth::grant_request`]): GET is a read,
//! POST and DELETE are writes, and the bucket must be in the key's scope.
//! A bucket of another tenant answers NoSuchBucket, like every S3 call.

use super::book::ActiveRef;
use super::runner::{Jobs, random_id};
use super::spec::{Job, JobSpec, MAX_BODY_BYTES};
use crate::request::auth::{KeyCache, grant_request};
use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult};
use crate::request::opclass::OpClass;
use crate::request::vhost::BucketDomain;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use s3s::route::S3Route;
use s3s::{Body, S3Request, S3Response, S3Result};
use std::sync::Arc;

/// The query parameter that names this route.
pub const PARAM: &str = "x-laneway-tagging-jobs";

/// The route, for `S3ServiceBuilder::set_route`.
pub struct JobsRoute {
    gw: Gateway,
    jobs: Jobs,
    keys: Arc<KeyCache>,
    /// With `--domain`: a `Host` of `BUCKET.DOMAIN` names the bucket.
    domain: Option<BucketDomain>,
}

impl JobsRoute {
    /// The route over `gw`'s store, running `jobs`, letting in `keys`;
    /// requests addressed virtual-hosted style under `domain` too.
    pub fn new(
        gw: Gateway,
        jobs: Jobs,
        keys: Arc<KeyCache>,
        domain: Option<BucketDomain>,
    ) -> JobsRoute {
        JobsRoute {
            gw,
            jobs,
            keys,
            domain,
        }
    }

    /// The bucket a request addresses ([`addressed_bucket`]).
    fn bucket<'a>(&self, uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
        addressed_bucket(self.domain.as_ref(), uri, headers)
    }
}

/// The bucket a request addresses: under `domain`, `BUCKET.DOMAIN` in its
/// `Host` with the path `/`; otherwise the path `/{bucket}` (as the S3
/// service itself decides, [`crate::request::vhost`]).
fn addressed_bucket<'a>(
    domain: Option<&BucketDomain>,
    uri: &'a Uri,
    headers: &'a HeaderMap,
) -> Option<&'a str> {
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(http::uri::Authority::as_str));
    match domain.zip(host).and_then(|(d, h)| d.bucket_of(h)) {
        Some(b) => (uri.path() == "/").then_some(b),
        None => bucket_of(uri),
    }
}

/// The value of query parameter `name` (`Some("")` when it has none).
fn param<'a>(uri: &'a Uri, name: &str) -> Option<&'a str> {
    uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// The bucket of a path-style `/{bucket}` path.
fn bucket_of(uri: &Uri) -> Option<&str> {
    let name = uri.path().strip_prefix('/')?;
    let name = name.strip_suffix('/').unwrap_or(name);
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

fn json(status: StatusCode, value: &serde_json::Value) -> S3Response<Body> {
    let mut resp = S3Response::new(Body::from(value.to_string()));
    resp.status = Some(status);
    resp.headers
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

fn no_such_job() -> GwError {
    GwError::InvalidArgument("no tagging job with this id in this bucket".into())
}

#[async_trait::async_trait]
impl S3Route for JobsRoute {
    fn is_match(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        _e: &mut http::Extensions,
    ) -> bool {
        matches!(*method, Method::GET | Method::POST | Method::DELETE)
            && param(uri, PARAM).is_some()
            && self.bucket(uri, headers).is_some()
    }

    async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        let Some(cred) = req.credentials.as_ref() else {
            return Err(GwError::AccessDenied.into());
        };
        let access_key = cred.access_key.clone();
        let op = OpClass {
            write: req.method != Method::GET,
            buckets: self
                .bucket(&req.uri, &req.headers)
                .map(str::to_string)
                .into_iter()
                .collect(),
            unreadable_source: false,
        };
        grant_request(&self.keys, &access_key, &op, &mut req.extensions)?;
        Ok(())
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        Ok(self.answer(req).await?)
    }
}

impl JobsRoute {
    async fn answer(&self, mut req: S3Request<Body>) -> GwResult<S3Response<Body>> {
        let ctx = ReqCtx::of(&req)?;
        let name = self
            .bucket(&req.uri, &req.headers)
            .unwrap_or_default()
            .to_string();
        let bucket = self.gw.bucket(&ctx, &name).await?;
        let id = param(&req.uri, "id")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        match (req.method.clone(), id) {
            (Method::POST, _) => {
                let body = req
                    .input
                    .store_all_limited(MAX_BODY_BYTES)
                    .await
                    .map_err(|_| {
                        GwError::InvalidArgument(
                            "the tagging job body is too large or was cut off".into(),
                        )
                    })?;
                let spec = JobSpec::parse(&body)?;
                let job = Job::new(
                    random_id(),
                    name.clone(),
                    spec,
                    laneway_store::partition::now_ms(),
                );
                let r = ActiveRef {
                    tenant: ctx.tenant.as_str().to_string(),
                    bucket: name,
                    bucket_id: bucket.id.0,
                };
                let weight = req
                    .credentials
                    .as_ref()
                    .and_then(|c| self.keys.get(&c.access_key))
                    .map_or(1, |g| g.tenant.weight);
                let job = self.jobs.create(r, bucket, job, weight).await?;
                Ok(json(
                    StatusCode::ACCEPTED,
                    &serde_json::json!({ "id": job.id }),
                ))
            }
            (Method::GET, Some(id)) => {
                let jobs = self.jobs.book().jobs(bucket.id).await?;
                let job = jobs.iter().find(|j| j.id == id).ok_or_else(no_such_job)?;
                Ok(json(StatusCode::OK, &job.view()))
            }
            (Method::GET, None) => {
                let jobs = self.jobs.book().jobs(bucket.id).await?;
                let views: Vec<_> = jobs.iter().map(Job::view).collect();
                Ok(json(StatusCode::OK, &serde_json::json!({ "jobs": views })))
            }
            (Method::DELETE, Some(id)) => {
                self.jobs
                    .cancel(bucket.id, &id)
                    .await?
                    .ok_or_else(no_such_job)?;
                let mut resp = S3Response::new(Body::empty());
                resp.status = Some(StatusCode::NO_CONTENT);
                Ok(resp)
            }
            _ => Err(GwError::InvalidArgument(
                "DELETE of a tagging job needs its id".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_hosted_request_names_its_bucket_in_the_host() {
        let domain = BucketDomain::new("s3.example.test").expect("domain");
        let u = |s: &str| s.parse::<Uri>().expect("uri");
        let host = |h: &str| {
            let mut m = HeaderMap::new();
            m.insert(http::header::HOST, HeaderValue::from_str(h).expect("host"));
            m
        };
        let hosted = |h: &str, path: &str| {
            let (uri, headers) = (u(path), host(h));
            addressed_bucket(Some(&domain), &uri, &headers).map(str::to_string)
        };
        assert_eq!(
            hosted("b.s3.example.test:9000", "/?x-laneway-tagging-jobs"),
            Some("b".into())
        );
        assert_eq!(
            hosted("b.s3.example.test", "/key?x"),
            None,
            "an object path"
        );
        assert_eq!(
            hosted("localhost:9000", "/b?x-laneway-tagging-jobs"),
            Some("b".into()),
            "path style under another host"
        );
        assert_eq!(hosted("s3.example.test", "/?x"), None, "no bucket at all");
    }

    #[test]
    fn matches_bucket_paths_with_the_parameter_only() {
        let u = |s: &str| s.parse::<Uri>().expect("uri");
        assert_eq!(bucket_of(&u("/b?x-laneway-tagging-jobs")), Some("b"));
        assert_eq!(bucket_of(&u("/b/?x")), Some("b"));
        assert_eq!(bucket_of(&u("/b/key")), None);
        assert_eq!(bucket_of(&u("/")), None);
        assert_eq!(
            param(&u("/b?x-laneway-tagging-jobs&id=42"), "id"),
            Some("42")
        );
        assert_eq!(param(&u("/b?x-laneway-tagging-jobs"), PARAM), Some(""));
        assert_eq!(param(&u("/b?list-type=2"), PARAM), None);
    }
}
