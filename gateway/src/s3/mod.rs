//! The S3 handlers, one folder per family, and the `s3s::S3` trait
//! implementation: a table from S3 operations to the handler modules. Each entry only delegates and converts the handler's
//! [`crate::request::error::GwError`] into an `S3Error` (in `error.rs`); operations
//! not listed answer `NotImplemented` (s3s's default).

pub mod bucket;
pub mod multipart;
pub mod object;
pub mod post;

use crate::request::context::Gateway;
use bucket::{acl, list};
use multipart::{part_copy, uploads};
use object::{attributes, copy, delete, get, put, tagging};
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result};

/// Delegate one operation to its handler.
macro_rules! ops {
    ($($op:ident : $module:ident, $input:ty => $output:ty;)*) => {
        #[async_trait::async_trait]
        impl S3 for Gateway {
            $(
                async fn $op(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    $module::$op(self, req).await.map_err(Into::into)
                }
            )*
        }
    };
}

ops! {
    create_bucket: bucket, CreateBucketInput => CreateBucketOutput;
    delete_bucket: bucket, DeleteBucketInput => DeleteBucketOutput;
    head_bucket: bucket, HeadBucketInput => HeadBucketOutput;
    list_buckets: bucket, ListBucketsInput => ListBucketsOutput;
    get_bucket_location: bucket, GetBucketLocationInput => GetBucketLocationOutput;
    get_bucket_versioning: bucket, GetBucketVersioningInput => GetBucketVersioningOutput;

    put_object: put, PutObjectInput => PutObjectOutput;
    post_object: post, PostObjectInput => PostObjectOutput;
    get_object: get, GetObjectInput => GetObjectOutput;
    head_object: get, HeadObjectInput => HeadObjectOutput;
    get_object_attributes: attributes, GetObjectAttributesInput => GetObjectAttributesOutput;
    copy_object: copy, CopyObjectInput => CopyObjectOutput;
    delete_object: delete, DeleteObjectInput => DeleteObjectOutput;
    delete_objects: delete, DeleteObjectsInput => DeleteObjectsOutput;

    list_objects_v2: list, ListObjectsV2Input => ListObjectsV2Output;
    list_objects: list, ListObjectsInput => ListObjectsOutput;
    list_object_versions: list, ListObjectVersionsInput => ListObjectVersionsOutput;

    put_object_tagging: tagging, PutObjectTaggingInput => PutObjectTaggingOutput;
    get_object_tagging: tagging, GetObjectTaggingInput => GetObjectTaggingOutput;
    delete_object_tagging: tagging, DeleteObjectTaggingInput => DeleteObjectTaggingOutput;
    put_bucket_tagging: tagging, PutBucketTaggingInput => PutBucketTaggingOutput;
    get_bucket_tagging: tagging, GetBucketTaggingInput => GetBucketTaggingOutput;
    delete_bucket_tagging: tagging, DeleteBucketTaggingInput => DeleteBucketTaggingOutput;

    create_multipart_upload: multipart, CreateMultipartUploadInput => CreateMultipartUploadOutput;
    upload_part: multipart, UploadPartInput => UploadPartOutput;
    upload_part_copy: part_copy, UploadPartCopyInput => UploadPartCopyOutput;
    complete_multipart_upload: multipart, CompleteMultipartUploadInput => CompleteMultipartUploadOutput;
    abort_multipart_upload: multipart, AbortMultipartUploadInput => AbortMultipartUploadOutput;
    list_parts: uploads, ListPartsInput => ListPartsOutput;
    list_multipart_uploads: uploads, ListMultipartUploadsInput => ListMultipartUploadsOutput;

    get_bucket_acl: acl, GetBucketAclInput => GetBucketAclOutput;
    get_object_acl: acl, GetObjectAclInput => GetObjectAclOutput;
    put_bucket_acl: acl, PutBucketAclInput => PutBucketAclOutput;
    put_object_acl: acl, PutObjectAclInput => PutObjectAclOutput;
}
