//! DeleteObject and DeleteObjects.
//!
//! Deleting an absent key succeeds (S3 semantics). DeleteObjects takes 1 to
//! 1000 keys (outside that range the request is `MalformedXML`, as AWS
//! answers), deletes them with bounded concurrency (keys hash to different
//! partitions, so their commits proceed in parallel), and reports each
//! key's outcome in request order; quiet mode reports only failures.
//! Buckets are unversioned: a version id other than "null" fails that key
//! with `NoSuchVersion`.
//!
//! DeleteObject honours If-Match (delete only the version the caller saw):
//! the check reads the current ETag just before the delete and is not
//! atomic with it.

use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult};
use crate::request::names::check_key;
use crate::request::names::check_version_id;
use futures::StreamExt;
use laneway_store::BucketInfo;
use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response};

/// Most keys in one DeleteObjects request.
pub const MAX_DELETE_KEYS: usize = 1000;
/// Deletes in flight at once within one DeleteObjects request.
const DELETE_CONCURRENCY: usize = 16;

/// DeleteObject.
pub async fn delete_object(
    gw: &Gateway,
    req: S3Request<DeleteObjectInput>,
) -> GwResult<S3Response<DeleteObjectOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    check_key(&input.key)?;
    check_version_id(input.version_id.as_deref())?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    if let Some(cond) = input.if_match.as_ref().and_then(ETagCondition::as_etag) {
        let current = gw.store().head_object(&bucket, &input.key).await?;
        if cond.value() != current.etag {
            return Err(GwError::PreconditionFailed);
        }
    }
    gw.store().delete_object(&bucket, &input.key).await?;
    Ok(S3Response::new(DeleteObjectOutput::default()))
}

/// The outcome of deleting one key of a batch.
type KeyOutcome = Result<DeletedObject, Error>;

async fn delete_one(gw: &Gateway, bucket: &BucketInfo, id: ObjectIdentifier) -> KeyOutcome {
    let fail = |e: GwError, key: String, version_id: Option<String>| {
        let s3: S3Error = e.into();
        Error {
            code: Some(s3.code().as_str().to_string()),
            message: s3.message().map(str::to_string),
            key: Some(key),
            version_id,
        }
    };
    if let Err(e) = check_key(&id.key) {
        return Err(fail(e, id.key, id.version_id));
    }
    if id.version_id.as_deref().is_some_and(|v| v != "null") {
        let e = Error {
            code: Some("NoSuchVersion".into()),
            message: Some("The specified version does not exist.".into()),
            key: Some(id.key),
            version_id: id.version_id,
        };
        return Err(e);
    }
    match gw.store().delete_object(bucket, &id.key).await {
        Ok(_) => Ok(DeletedObject {
            key: Some(id.key),
            version_id: id.version_id,
            ..Default::default()
        }),
        Err(e) => Err(fail(e.into(), id.key, id.version_id)),
    }
}

/// DeleteObjects.
pub async fn delete_objects(
    gw: &Gateway,
    req: S3Request<DeleteObjectsInput>,
) -> GwResult<S3Response<DeleteObjectsOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let ids = input.delete.objects;
    if ids.is_empty() || ids.len() > MAX_DELETE_KEYS {
        return Err(GwError::MalformedXml(format!(
            "The XML you provided was not well-formed or did not validate against our published schema \
             (1 to {MAX_DELETE_KEYS} keys per request)"
        )));
    }
    let quiet = input.delete.quiet.unwrap_or(false);
    let outcomes: Vec<KeyOutcome> = futures::stream::iter(ids)
        .map(|id| delete_one(gw, &bucket, id))
        .buffered(DELETE_CONCURRENCY)
        .collect()
        .await;
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(d) if !quiet => deleted.push(d),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: (!deleted.is_empty()).then_some(deleted),
        errors: (!errors.is_empty()).then_some(errors),
        ..Default::default()
    }))
}
