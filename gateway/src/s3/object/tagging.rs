//! Object and bucket tagging: Put/Get/DeleteObjectTagging,
//! Put/Get/DeleteBucketTagging, and the `x-amz-tagging` header of PUT and
//! CopyObject.
//!
//! The limits and the header form are [`crate::request::tags`]'s. Tag
//! updates are metadata-only in the store.

use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult};
use crate::request::names::check_key;
use crate::request::tags::{MAX_BUCKET_TAGS, MAX_OBJECT_TAGS, validate};
use laneway_store::Tag;
use s3s::dto::{self, *};
use s3s::{S3Request, S3Response};

/// Tags from an XML tag set (a tag without a key is malformed).
fn from_dto(set: TagSet) -> GwResult<Vec<Tag>> {
    set.into_iter()
        .map(|t| match t.key {
            Some(key) => Ok(Tag {
                key,
                value: t.value.unwrap_or_default(),
            }),
            None => Err(GwError::MalformedXml("a Tag has no Key".into())),
        })
        .collect()
}

/// The XML tag set of stored tags.
pub fn to_dto(tags: &[Tag]) -> TagSet {
    tags.iter()
        .map(|t| dto::Tag {
            key: Some(t.key.clone()),
            value: Some(t.value.clone()),
        })
        .collect()
}

/// PutObjectTagging.
pub async fn put_object_tagging(
    gw: &Gateway,
    req: S3Request<PutObjectTaggingInput>,
) -> GwResult<S3Response<PutObjectTaggingOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    check_key(&input.key)?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let tags = from_dto(input.tagging.tag_set)?;
    validate(&tags, MAX_OBJECT_TAGS)?;
    gw.store()
        .put_object_tags(&bucket, &input.key, tags)
        .await?;
    Ok(S3Response::new(PutObjectTaggingOutput::default()))
}

/// GetObjectTagging.
pub async fn get_object_tagging(
    gw: &Gateway,
    req: S3Request<GetObjectTaggingInput>,
) -> GwResult<S3Response<GetObjectTaggingOutput>> {
    let ctx = ReqCtx::of(&req)?;
    check_key(&req.input.key)?;
    let bucket = gw.bucket(&ctx, &req.input.bucket).await?;
    let info = gw.store().head_object(&bucket, &req.input.key).await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: to_dto(&info.tags),
        version_id: None,
    }))
}

/// DeleteObjectTagging.
pub async fn delete_object_tagging(
    gw: &Gateway,
    req: S3Request<DeleteObjectTaggingInput>,
) -> GwResult<S3Response<DeleteObjectTaggingOutput>> {
    let ctx = ReqCtx::of(&req)?;
    check_key(&req.input.key)?;
    let bucket = gw.bucket(&ctx, &req.input.bucket).await?;
    gw.store()
        .put_object_tags(&bucket, &req.input.key, Vec::new())
        .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
}

/// PutBucketTagging.
pub async fn put_bucket_tagging(
    gw: &Gateway,
    req: S3Request<PutBucketTaggingInput>,
) -> GwResult<S3Response<PutBucketTaggingOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    let tags = from_dto(input.tagging.tag_set)?;
    validate(&tags, MAX_BUCKET_TAGS)?;
    gw.store()
        .set_bucket_tags(&ctx.tenant, &input.bucket, tags)
        .await?;
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

/// GetBucketTagging (NoSuchTagSet when the bucket has none).
pub async fn get_bucket_tagging(
    gw: &Gateway,
    req: S3Request<GetBucketTaggingInput>,
) -> GwResult<S3Response<GetBucketTaggingOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let bucket = gw.bucket(&ctx, &req.input.bucket).await?;
    if bucket.tags.is_empty() {
        return Err(GwError::NoSuchTagSet);
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: to_dto(&bucket.tags),
    }))
}

/// DeleteBucketTagging.
pub async fn delete_bucket_tagging(
    gw: &Gateway,
    req: S3Request<DeleteBucketTaggingInput>,
) -> GwResult<S3Response<DeleteBucketTaggingOutput>> {
    let ctx = ReqCtx::of(&req)?;
    gw.store()
        .set_bucket_tags(&ctx.tenant, &req.input.bucket, Vec::new())
        .await?;
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_tags_need_keys() {
        let set = vec![dto::Tag {
            key: None,
            value: Some("v".into()),
        }];
        assert!(matches!(from_dto(set), Err(GwError::MalformedXml(_))));
        assert_eq!(
            to_dto(&[Tag {
                key: "a".into(),
                value: "1".into(),
            }])[0]
                .key
                .as_deref(),
            Some("a")
        );
    }
}
