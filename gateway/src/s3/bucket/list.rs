//! ListObjectsV2, ListObjects (v1) and ListObjectVersions (unversioned
//! buckets: every current object is version "null", latest).
//!
//! All three are one store listing ([`laneway_store::ListQuery`]) with a
//! different way to say where to resume (continuation token, marker, key
//! marker; see [`crate::request::token`]) and a different response shape. `max-keys`
//! defaults to 1000 and is clamped to 1000 as AWS does; 0 returns an empty,
//! untruncated page without asking the store. An empty continuation
//! token is no token, as on S3.
//!
//! All three take a tag filter (`x-laneway-tag-filter`, header or query
//! parameter; [`crate::request::tag_filter`]): the page then holds only the
//! objects with those tags, read from the store's tag index, in the same
//! XML, so every client parses it.
//!
//! `encoding-type=url` encodes, as S3 does, exactly these response fields
//! (everything else, such as the continuation tokens, stays as it is):
//!
//! - ListObjectsV2: `Key`, `CommonPrefixes/Prefix`, `Prefix`, `Delimiter`,
//!   `StartAfter` (the API reference's list);
//! - ListObjects (v1): `Key`, `CommonPrefixes/Prefix`, `Delimiter`,
//!   `Marker`, `NextMarker`, but not the top-level `Prefix`, which S3
//!   echoes as sent (and botocore, which asks for the encoding on its own,
//!   decodes exactly these five);
//! - ListObjectVersions: `Key`, `CommonPrefixes/Prefix`, `Prefix`,
//!   `Delimiter`, `KeyMarker`, `NextKeyMarker`.
//!
//! The encoding is S3's form encoding: a space becomes `+`, `/` and the
//! unreserved characters stay literal, anything else (a `+` too) is
//! `%XX`, so botocore's `unquote_plus` round-trips every key.

use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult};
use crate::request::meta::{etag, size_i64, timestamp};
use crate::request::names::URL_ENCODE;
use crate::request::{tag_filter, token};
use laneway_store::{BucketInfo, ListEntry, ListPage, ListQuery, ObjectInfo, Resume};
use percent_encoding::utf8_percent_encode;
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// Largest page, and the default.
pub const MAX_KEYS: usize = 1000;

/// What to list, resolved from any of the three request shapes.
struct Listing {
    prefix: String,
    delimiter: Option<String>,
    resume: Resume,
    max_keys: usize,
    url: bool,
    /// Only objects with these tags (`x-laneway-tag-filter`).
    tags: Vec<laneway_store::TagCond>,
}

impl Listing {
    fn enc(&self, s: &str) -> String {
        if self.url {
            // A space is the only source of `%20` (a `%` is `%25`).
            utf8_percent_encode(s, URL_ENCODE)
                .to_string()
                .replace("%20", "+")
        } else {
            s.to_string()
        }
    }

    /// [`Listing::enc`] of a string the caller gives up (no copy when
    /// nothing is encoded).
    fn enc_owned(&self, s: String) -> String {
        if self.url { self.enc(&s) } else { s }
    }

    fn enc_opt(&self, s: Option<&str>) -> Option<String> {
        s.map(|s| self.enc(s))
    }

    async fn fetch(&self, gw: &Gateway, bucket: &BucketInfo) -> GwResult<ListPage> {
        if self.max_keys == 0 {
            return Ok(ListPage::default());
        }
        let query = ListQuery {
            tags: self.tags.clone(),
            prefix: self.prefix.clone(),
            delimiter: self.delimiter.clone(),
            resume: self.resume.clone(),
            max_keys: self.max_keys,
        };
        Ok(gw.store().list_objects(bucket, query).await?)
    }

    fn common_prefixes(&self, page: &ListPage) -> Option<CommonPrefixList> {
        let list: CommonPrefixList = page
            .entries
            .iter()
            .filter_map(|e| match e {
                ListEntry::Prefix(p) => Some(CommonPrefix {
                    prefix: Some(self.enc(p)),
                }),
                ListEntry::Object(_) => None,
            })
            .collect();
        if list.is_empty() { None } else { Some(list) }
    }

    /// The page's objects as XML entries; their keys and ETags move out
    /// of the page (LIST spends its time per key: no copies).
    fn objects(&self, page: &mut ListPage, owner: Option<&Owner>) -> GwResult<ObjectList> {
        page.entries
            .iter_mut()
            .filter_map(|e| match e {
                ListEntry::Object(o) => Some(o),
                ListEntry::Prefix(_) => None,
            })
            .map(|o| self.object(o, owner))
            .collect()
    }

    fn object(&self, info: &mut ObjectInfo, owner: Option<&Owner>) -> GwResult<Object> {
        Ok(Object {
            key: Some(self.enc_owned(std::mem::take(&mut info.key))),
            last_modified: Some(timestamp(info.mtime_ms)),
            e_tag: Some(ETag::Strong(std::mem::take(&mut info.etag))),
            size: Some(size_i64(info.size)?),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            owner: owner.cloned(),
            ..Default::default()
        })
    }
}

fn objects_of(page: &ListPage) -> impl Iterator<Item = &ObjectInfo> {
    page.entries.iter().filter_map(|e| match e {
        ListEntry::Object(o) => Some(o),
        ListEntry::Prefix(_) => None,
    })
}

fn max_keys(requested: Option<i32>) -> GwResult<usize> {
    match requested {
        None => Ok(MAX_KEYS),
        Some(n) => usize::try_from(n).map(|n| n.min(MAX_KEYS)).map_err(|_| {
            GwError::InvalidArgument("max-keys must be a non-negative integer".into())
        }),
    }
}

fn url_encoding(e: Option<&EncodingType>) -> GwResult<bool> {
    match e.map(EncodingType::as_str) {
        None => Ok(false),
        Some(EncodingType::URL) => Ok(true),
        Some(_) => Err(GwError::InvalidArgument(
            "Invalid Encoding Method specified in Request".into(),
        )),
    }
}

fn owner_of(ctx: &ReqCtx) -> Owner {
    let id = ctx.tenant.as_str().to_string();
    Owner {
        display_name: Some(id.clone()),
        id: Some(id),
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// The continuation token of a ListObjectsV2 request: an empty one is
/// none, as on S3.
fn continuation_token(input: &ListObjectsV2Input) -> Option<String> {
    non_empty(input.continuation_token.clone())
}

fn count(n: usize) -> GwResult<i32> {
    i32::try_from(n).map_err(|_| GwError::Internal(format!("count {n} does not fit in i32")))
}

/// ListObjectsV2.
pub async fn list_objects_v2(
    gw: &Gateway,
    req: S3Request<ListObjectsV2Input>,
) -> GwResult<S3Response<ListObjectsV2Output>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = non_empty(input.delimiter.clone());
    let continuation = continuation_token(&input);
    let resume = match continuation.as_deref() {
        Some(t) => token::decode(t)?,
        None => token::from_marker(input.start_after.as_deref(), &prefix, delimiter.as_deref()),
    };
    let listing = Listing {
        prefix,
        delimiter,
        resume,
        max_keys: max_keys(input.max_keys)?,
        url: url_encoding(input.encoding_type.as_ref())?,
        tags: tag_filter::of_request(&req.headers, &req.uri)?,
    };
    let mut page = listing.fetch(gw, &bucket).await?;
    let owner = input.fetch_owner.unwrap_or(false).then(|| owner_of(&ctx));
    let contents = listing.objects(&mut page, owner.as_ref())?;
    let prefixes = listing.common_prefixes(&page);
    let key_count = count(contents.len() + prefixes.as_ref().map_or(0, Vec::len))?;
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: Some(listing.enc(&listing.prefix)),
        delimiter: listing.enc_opt(listing.delimiter.as_deref()),
        max_keys: Some(count(listing.max_keys)?),
        key_count: Some(key_count),
        continuation_token: continuation,
        next_continuation_token: page
            .next
            .as_ref()
            .filter(|_| page.truncated)
            .and_then(token::encode),
        start_after: listing.enc_opt(input.start_after.as_deref()),
        is_truncated: Some(page.truncated),
        contents: (!contents.is_empty()).then_some(contents),
        common_prefixes: prefixes,
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

/// ListObjects (v1).
pub async fn list_objects(
    gw: &Gateway,
    req: S3Request<ListObjectsInput>,
) -> GwResult<S3Response<ListObjectsOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = non_empty(input.delimiter.clone());
    let listing = Listing {
        resume: token::from_marker(input.marker.as_deref(), &prefix, delimiter.as_deref()),
        prefix,
        delimiter,
        max_keys: max_keys(input.max_keys)?,
        url: url_encoding(input.encoding_type.as_ref())?,
        tags: tag_filter::of_request(&req.headers, &req.uri)?,
    };
    let mut page = listing.fetch(gw, &bucket).await?;
    let owner = owner_of(&ctx);
    let contents = listing.objects(&mut page, Some(&owner))?;
    let next_marker = page
        .next
        .as_ref()
        .filter(|_| page.truncated)
        .and_then(token::to_marker);
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(input.bucket),
        // v1 echoes its Prefix as sent, also under encoding-type=url.
        prefix: Some(listing.prefix.clone()),
        delimiter: listing.enc_opt(listing.delimiter.as_deref()),
        marker: Some(listing.enc(input.marker.as_deref().unwrap_or_default())),
        next_marker: listing.enc_opt(next_marker.as_deref()),
        max_keys: Some(count(listing.max_keys)?),
        is_truncated: Some(page.truncated),
        contents: (!contents.is_empty()).then_some(contents),
        common_prefixes: listing.common_prefixes(&page),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

/// ListObjectVersions of an unversioned bucket.
pub async fn list_object_versions(
    gw: &Gateway,
    req: S3Request<ListObjectVersionsInput>,
) -> GwResult<S3Response<ListObjectVersionsOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = non_empty(input.delimiter.clone());
    let listing = Listing {
        resume: token::from_marker(input.key_marker.as_deref(), &prefix, delimiter.as_deref()),
        prefix,
        delimiter,
        max_keys: max_keys(input.max_keys)?,
        url: url_encoding(input.encoding_type.as_ref())?,
        tags: tag_filter::of_request(&req.headers, &req.uri)?,
    };
    let page = listing.fetch(gw, &bucket).await?;
    let owner = owner_of(&ctx);
    let versions = objects_of(&page)
        .map(|o| version_of(&listing, o, &owner))
        .collect::<GwResult<ObjectVersionList>>()?;
    let next_key_marker = page
        .next
        .as_ref()
        .filter(|_| page.truncated)
        .and_then(token::to_marker);
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: Some(listing.enc(&listing.prefix)),
        delimiter: listing.enc_opt(listing.delimiter.as_deref()),
        key_marker: Some(listing.enc(input.key_marker.as_deref().unwrap_or_default())),
        version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
        next_version_id_marker: next_key_marker.as_ref().map(|_| "null".to_string()),
        next_key_marker: listing.enc_opt(next_key_marker.as_deref()),
        max_keys: Some(count(listing.max_keys)?),
        is_truncated: Some(page.truncated),
        versions: (!versions.is_empty()).then_some(versions),
        common_prefixes: listing.common_prefixes(&page),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

fn version_of(listing: &Listing, info: &ObjectInfo, owner: &Owner) -> GwResult<ObjectVersion> {
    Ok(ObjectVersion {
        key: Some(listing.enc(&info.key)),
        version_id: Some("null".into()),
        is_latest: Some(true),
        last_modified: Some(timestamp(info.mtime_ms)),
        e_tag: Some(etag(info)),
        size: Some(size_i64(info.size)?),
        storage_class: Some(ObjectVersionStorageClass::from_static(
            ObjectVersionStorageClass::STANDARD,
        )),
        owner: Some(owner.clone()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_keys_defaults_clamps_and_refuses_negatives() {
        assert_eq!(max_keys(None).expect("default"), 1000);
        assert_eq!(max_keys(Some(0)).expect("zero"), 0);
        assert_eq!(max_keys(Some(5)).expect("five"), 5);
        assert_eq!(max_keys(Some(5000)).expect("clamped"), 1000);
        assert!(matches!(
            max_keys(Some(-1)),
            Err(GwError::InvalidArgument(_))
        ));
    }

    #[test]
    fn url_encoding_is_form_encoding_keeping_slashes() {
        let l = Listing {
            prefix: String::new(),
            delimiter: None,
            resume: Resume::Start,
            max_keys: 1,
            url: true,
            tags: Vec::new(),
        };
        assert_eq!(l.enc("a b+c/d~e_f-g.h"), "a+b%2Bc/d~e_f-g.h");
        assert_eq!(l.enc("100% done\n"), "100%25+done%0A");
        assert_eq!(l.enc("ü"), "%C3%BC");
        assert!(matches!(
            url_encoding(Some(&EncodingType::from_static("bogus"))),
            Err(GwError::InvalidArgument(_))
        ));
    }
}
