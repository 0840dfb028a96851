//! Access control lists, the way AWS answers for buckets whose object
//! ownership is "bucket owner enforced" (ACLs disabled, the default for new
//! buckets since 2023): access is decided by the tenant binding
//! ([`crate::request::auth`]), never by ACLs.
//!
//! - GetBucketAcl / GetObjectAcl return the one grant that is true: the
//!   owning tenant has FULL_CONTROL.
//! - PutBucketAcl / PutObjectAcl accept the canned `private` ACL (or no
//!   ACL at all), which changes nothing; explicit grants and other canned
//!   ACLs are refused with `AccessControlListNotSupported`, as AWS does.
//! - `x-amz-acl` on CreateBucket, PutObject, CopyObject and
//!   CreateMultipartUpload follows the same rule
//!   ([`crate::request::canned_acl`]).
//!
//! The object and bucket must exist (NoSuchKey / NoSuchBucket), so the
//! ACL calls double as existence checks, like on AWS.

use crate::request::canned_acl::{check_bucket_acl, check_no_grants, check_object_acl};
use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::GwResult;
use crate::request::names::check_key;
use laneway_store::TenantId;
use s3s::dto::*;
use s3s::{S3Request, S3Response};

fn owner(tenant: &TenantId) -> Owner {
    Owner {
        display_name: Some(tenant.to_string()),
        id: Some(tenant.to_string()),
    }
}

/// The owner's FULL_CONTROL grant: the whole ACL of everything.
fn full_control(tenant: &TenantId) -> (Option<Owner>, Option<Grants>) {
    let grant = Grant {
        grantee: Some(Grantee {
            display_name: Some(tenant.to_string()),
            email_address: None,
            id: Some(tenant.to_string()),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    };
    (Some(owner(tenant)), Some(vec![grant]))
}

/// GetBucketAcl.
pub async fn get_bucket_acl(
    gw: &Gateway,
    req: S3Request<GetBucketAclInput>,
) -> GwResult<S3Response<GetBucketAclOutput>> {
    let ctx = ReqCtx::of(&req)?;
    gw.bucket(&ctx, &req.input.bucket).await?;
    let (owner, grants) = full_control(&ctx.tenant);
    Ok(S3Response::new(GetBucketAclOutput { owner, grants }))
}

/// The object an object-ACL call names must exist (NoSuchKey otherwise),
/// as the only version there is ("null").
async fn existing_object(
    gw: &Gateway,
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> GwResult<()> {
    check_key(key)?;
    crate::request::names::check_version_id(version)?;
    let bucket = gw.bucket(ctx, bucket).await?;
    gw.store().head_object(&bucket, key).await?;
    Ok(())
}

/// GetObjectAcl.
pub async fn get_object_acl(
    gw: &Gateway,
    req: S3Request<GetObjectAclInput>,
) -> GwResult<S3Response<GetObjectAclOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = &req.input;
    existing_object(
        gw,
        &ctx,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
    )
    .await?;
    let (owner, grants) = full_control(&ctx.tenant);
    Ok(S3Response::new(GetObjectAclOutput {
        owner,
        grants,
        ..Default::default()
    }))
}

/// PutBucketAcl: only `private` (a no-op).
pub async fn put_bucket_acl(
    gw: &Gateway,
    req: S3Request<PutBucketAclInput>,
) -> GwResult<S3Response<PutBucketAclOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = &req.input;
    gw.bucket(&ctx, &input.bucket).await?;
    check_bucket_acl(input.acl.as_ref())?;
    check_no_grants(&[
        input.access_control_policy.is_some(),
        input.grant_full_control.is_some(),
        input.grant_read.is_some(),
        input.grant_read_acp.is_some(),
        input.grant_write.is_some(),
        input.grant_write_acp.is_some(),
    ])?;
    Ok(S3Response::new(PutBucketAclOutput::default()))
}

/// PutObjectAcl: only `private` (a no-op).
pub async fn put_object_acl(
    gw: &Gateway,
    req: S3Request<PutObjectAclInput>,
) -> GwResult<S3Response<PutObjectAclOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = &req.input;
    existing_object(
        gw,
        &ctx,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
    )
    .await?;
    check_object_acl(input.acl.as_ref())?;
    check_no_grants(&[
        input.access_control_policy.is_some(),
        input.grant_full_control.is_some(),
        input.grant_read.is_some(),
        input.grant_read_acp.is_some(),
        input.grant_write.is_some(),
        input.grant_write_acp.is_some(),
    ])?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_has_full_control() {
        let (owner, grants) = full_control(&TenantId("t1".into()));
        assert_eq!(owner.and_then(|o| o.id).as_deref(), Some("t1"));
        let grants = grants.unwrap_or_default();
        assert_eq!(grants.len(), 1);
        assert_eq!(
            grants[0].permission.as_ref().map(Permission::as_str),
            Some("FULL_CONTROL")
        );
    }
}
