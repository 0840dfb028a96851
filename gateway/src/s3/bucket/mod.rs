//! The bucket family: this module holds the bucket operations themselves;
//! [`list`] the object listings, [`acl`] the ACL reads and writes.
//!
//! Bucket operations: CreateBucket, DeleteBucket, HeadBucket, ListBuckets,
//! GetBucketLocation, GetBucketVersioning.
//!
//! Buckets belong to the requesting tenant: every lookup goes through the
//! tenant's namespace in the store catalog, so a tenant can neither see nor
//! learn of another tenant's buckets (a name another tenant uses is simply
//! free for this one). Buckets are created in the gateway's region; a
//! LocationConstraint naming another region is refused.
//!
//! ListBuckets supports `prefix`, `max-buckets` and an opaque continuation
//! token (base64url of the last name returned).

pub mod acl;
pub mod list;

use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult};
use crate::request::meta::timestamp;
use crate::request::names::check_bucket_name;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use laneway_store::BucketInfo;
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// Most buckets in one ListBuckets page.
const MAX_BUCKETS_PAGE: usize = 10_000;

/// CreateBucket.
pub async fn create_bucket(
    gw: &Gateway,
    req: S3Request<CreateBucketInput>,
) -> GwResult<S3Response<CreateBucketOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    check_bucket_name(&input.bucket)?;
    crate::request::canned_acl::check_bucket_acl(input.acl.as_ref())?;
    let constraint = input
        .create_bucket_configuration
        .and_then(|c| c.location_constraint)
        .map(|c| c.as_str().to_string())
        .filter(|c| !c.is_empty());
    if let Some(c) = constraint
        && c != gw.region()
    {
        return Err(GwError::IllegalLocationConstraint(format!(
            "The {c} location constraint is incompatible for the region specific endpoint this request was sent to."
        )));
    }
    gw.store()
        .create_bucket(&ctx.tenant, &input.bucket, gw.region())
        .await?;
    tracing::info!(bucket = %input.bucket, "bucket created");
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{}", input.bucket)),
    }))
}

/// DeleteBucket (BucketNotEmpty while it holds objects).
pub async fn delete_bucket(
    gw: &Gateway,
    req: S3Request<DeleteBucketInput>,
) -> GwResult<S3Response<DeleteBucketOutput>> {
    let ctx = ReqCtx::of(&req)?;
    gw.store()
        .delete_bucket(&ctx.tenant, &req.input.bucket)
        .await?;
    tracing::info!(bucket = %req.input.bucket, "bucket deleted");
    Ok(S3Response::new(DeleteBucketOutput::default()))
}

/// HeadBucket.
pub async fn head_bucket(
    gw: &Gateway,
    req: S3Request<HeadBucketInput>,
) -> GwResult<S3Response<HeadBucketOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let bucket = gw.bucket(&ctx, &req.input.bucket).await?;
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(bucket.region),
        ..Default::default()
    }))
}

/// GetBucketLocation (empty for us-east-1, as AWS answers).
pub async fn get_bucket_location(
    gw: &Gateway,
    req: S3Request<GetBucketLocationInput>,
) -> GwResult<S3Response<GetBucketLocationOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let bucket = gw.bucket(&ctx, &req.input.bucket).await?;
    let location_constraint =
        (bucket.region != "us-east-1").then(|| BucketLocationConstraint::from(bucket.region));
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint,
    }))
}

/// GetBucketVersioning: buckets are never versioned, and S3 answers a
/// bucket that never was with an empty `VersioningConfiguration` (no
/// `Status`). Turning versioning on (PutBucketVersioning) stays s3s's
/// `501 NotImplemented`.
pub async fn get_bucket_versioning(
    gw: &Gateway,
    req: S3Request<GetBucketVersioningInput>,
) -> GwResult<S3Response<GetBucketVersioningOutput>> {
    let ctx = ReqCtx::of(&req)?;
    gw.bucket(&ctx, &req.input.bucket).await?;
    Ok(S3Response::new(GetBucketVersioningOutput::default()))
}

/// ListBuckets.
pub async fn list_buckets(
    gw: &Gateway,
    req: S3Request<ListBucketsInput>,
) -> GwResult<S3Response<ListBucketsOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    let after = input
        .continuation_token
        .as_deref()
        .map(decode_token)
        .transpose()?;
    let limit = match input.max_buckets {
        None => MAX_BUCKETS_PAGE,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_BUCKETS_PAGE).contains(n))
            .ok_or_else(|| GwError::InvalidArgument("max-buckets must be 1 to 10000".into()))?,
    };
    let prefix = input.prefix.clone().unwrap_or_default();
    let mut all: Vec<BucketInfo> = gw
        .store()
        .list_buckets(&ctx.tenant)
        .await?
        .into_iter()
        .filter(|b| ctx.scope.allows(&b.name))
        .filter(|b| b.name.starts_with(&prefix))
        .filter(|b| after.as_ref().is_none_or(|a| b.name > *a))
        .collect();
    let truncated = all.len() > limit;
    all.truncate(limit);
    let next = truncated
        .then(|| all.last().map(|b| URL_SAFE_NO_PAD.encode(&b.name)))
        .flatten();
    let id = ctx.tenant.as_str().to_string();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(all.into_iter().map(bucket_dto).collect()),
        owner: Some(Owner {
            display_name: Some(id.clone()),
            id: Some(id),
        }),
        continuation_token: next,
        prefix: input.prefix,
    }))
}

fn bucket_dto(b: BucketInfo) -> Bucket {
    Bucket {
        name: Some(b.name),
        creation_date: Some(timestamp(b.created_ms)),
        bucket_region: Some(b.region),
    }
}

fn decode_token(t: &str) -> GwResult<String> {
    URL_SAFE_NO_PAD
        .decode(t)
        .ok()
        .and_then(|raw| String::from_utf8(raw).ok())
        .ok_or_else(|| {
            GwError::InvalidArgument("The continuation token provided is incorrect".into())
        })
}
