//! Canned ACLs on writes: `x-amz-acl` on CreateBucket, PutObject,
//! CopyObject and CreateMultipartUpload (and the ACL writes of
//! [`crate::s3::bucket::acl`]) accept only `private`, the one ACL that is
//! true of a bucket whose object ownership is "bucket owner enforced";
//! anything else is `AccessControlListNotSupported`, as AWS answers.

use crate::request::error::{GwError, GwResult};
use s3s::dto::{BucketCannedACL, ObjectCannedACL};

const PRIVATE: &str = "private";

/// Refuse a canned object ACL other than `private`.
pub fn check_object_acl(acl: Option<&ObjectCannedACL>) -> GwResult<()> {
    check_canned(acl.map(ObjectCannedACL::as_str))
}

/// Refuse a canned bucket ACL other than `private`.
pub fn check_bucket_acl(acl: Option<&BucketCannedACL>) -> GwResult<()> {
    check_canned(acl.map(BucketCannedACL::as_str))
}

fn check_canned(acl: Option<&str>) -> GwResult<()> {
    match acl {
        None | Some(PRIVATE) => Ok(()),
        Some(_) => Err(GwError::AccessControlListNotSupported),
    }
}

/// Refuse explicit grants (x-amz-grant-* headers or an ACL document).
pub fn check_no_grants(grants: &[bool]) -> GwResult<()> {
    if grants.iter().any(|g| *g) {
        return Err(GwError::AccessControlListNotSupported);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_is_accepted() {
        assert!(check_object_acl(None).is_ok());
        let private = ObjectCannedACL::from_static(ObjectCannedACL::PRIVATE);
        assert!(check_object_acl(Some(&private)).is_ok());
        let public = ObjectCannedACL::from_static(ObjectCannedACL::PUBLIC_READ);
        assert!(matches!(
            check_object_acl(Some(&public)),
            Err(GwError::AccessControlListNotSupported)
        ));
        let public = BucketCannedACL::from_static(BucketCannedACL::PUBLIC_READ_WRITE);
        assert!(check_bucket_acl(Some(&public)).is_err());
        assert!(check_no_grants(&[false, true]).is_err());
    }
}
