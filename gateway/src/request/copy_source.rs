//! The source of a copy (CopyObject, UploadPartCopy): which object it
//! names, its `x-amz-copy-source-if-*` conditions, and its stream, paced
//! through the caller's lane.

use crate::request::conditional::{Conditions, Verdict};
use crate::request::error::{GwError, GwResult};
use crate::request::names::{check_key, check_version_id};
use futures::StreamExt;
use laneway_store::{BodyStream, ObjectInfo};
use s3s::dto::CopySource;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) fn source_of(cs: &CopySource) -> GwResult<(&str, &str)> {
    match cs {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => {
            check_version_id(version_id.as_deref())?;
            check_key(key)?;
            Ok((bucket, key))
        }
        _ => Err(GwError::NotImplemented(
            "Copying from an access point or outpost",
        )),
    }
}

pub(crate) fn check_source(conds: &Conditions<'_>, info: &ObjectInfo) -> GwResult<()> {
    match conds.evaluate_copy_source(&info.etag, info.mtime_ms) {
        Verdict::Proceed => Ok(()),
        Verdict::NotModified | Verdict::PreconditionFailed => Err(GwError::PreconditionFailed),
    }
}

/// A copy's source stream, paced through the caller's lane (see
/// [`crate::lanes::meter`]; `ext` are the request's extensions), that
/// remembers whether reading it failed, so a failure on our side (corrupt
/// source) is not reported as the client's.
pub(crate) fn watched(stream: BodyStream, ext: &http::Extensions) -> (BodyStream, Arc<AtomicBool>) {
    let stream = crate::lanes::meter::pace_copy(ext, stream);
    let failed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&failed);
    let s = stream.map(move |chunk| {
        if chunk.is_err() {
            flag.store(true, Ordering::Relaxed);
        }
        chunk
    });
    (Box::pin(s), failed)
}

/// The error of a copy's write: ours (500) when reading the source failed
/// (`failed` from [`watched`]), else the write's own.
pub(crate) fn blame_copy(failed: &AtomicBool, e: laneway_store::StoreError) -> GwError {
    if failed.load(Ordering::Relaxed) {
        GwError::Internal(format!("reading the copy source failed: {e}"))
    } else {
        e.into()
    }
}
