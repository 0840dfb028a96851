//! The LIST benchmark: full ListObjectsV2 walks and time to first page.
//!
//! A round walks the whole listing page by page (continuation tokens) with
//! one request in flight, as a client paging through a bucket would, and
//! reports entries (keys + common prefixes) per second over the walk. Time
//! to first page is sampled separately with many first-page requests so its
//! percentiles mean something; comparing it between a 10,000- and a
//! 1,000,000-object bucket shows whether a listing's start cost grows with
//! bucket size. The walk also checks the listing is strictly ascending and
//! stops at a page cap so a server that loops cannot hang the bench.

use std::time::{Duration, Instant};

use crate::client::S3Client;
use crate::error::ClientError;
use crate::histogram::Histogram;
use crate::ops::ListRequest;
use crate::report::micros;

/// Pages one walk may take before it is declared runaway.
pub const MAX_PAGES: u64 = 1_000_000;

/// Parameters of a LIST benchmark.
#[derive(Debug, Clone)]
pub struct ListBench {
    /// Bucket to list.
    pub bucket: String,
    /// Prefix filter.
    pub prefix: Option<String>,
    /// Delimiter for roll-up.
    pub delimiter: Option<String>,
    /// `max-keys` per page.
    pub page_size: u32,
    /// Full walks to make.
    pub rounds: u32,
    /// First-page requests to time.
    pub first_page_samples: u32,
    /// Only objects with these tags (`x-laneway-tag-filter`).
    pub tag_filter: Option<String>,
}

/// One full walk.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    /// Keys seen.
    pub keys: u64,
    /// Common prefixes seen.
    pub prefixes: u64,
    /// Pages fetched.
    pub pages: u64,
    /// Latency of the walk's first page.
    pub first_page: Duration,
    /// Whole walk.
    pub elapsed: Duration,
    /// Entries not strictly greater than the one before.
    pub order_violations: u64,
    /// Per-page latency, microseconds.
    pub page_latency: Histogram,
}

impl ListBench {
    fn request<'a>(&'a self, token: Option<&'a str>) -> ListRequest<'a> {
        ListRequest {
            prefix: self.prefix.as_deref(),
            delimiter: self.delimiter.as_deref(),
            continuation_token: token,
            max_keys: Some(self.page_size),
            tag_filter: self.tag_filter.as_deref(),
        }
    }
}

/// Walks the whole listing once.
pub async fn walk(client: &S3Client, lb: &ListBench) -> Result<Walk, ClientError> {
    let mut w = Walk::default();
    let mut token: Option<String> = None;
    let mut last = String::new();
    let start = Instant::now();
    while w.pages < MAX_PAGES {
        let t0 = Instant::now();
        let page = client
            .list_objects_v2(&lb.bucket, &lb.request(token.as_deref()))
            .await?;
        let lat = t0.elapsed();
        if w.pages == 0 {
            w.first_page = lat;
        }
        w.page_latency.record(micros(lat));
        w.pages += 1;
        w.keys += page.keys.len() as u64;
        w.prefixes += page.prefixes.len() as u64;
        w.order_violations += count_disorder(&mut last, &page.keys, &page.prefixes);
        token = page.next_token;
        if !page.is_truncated || token.is_none() {
            break;
        }
    }
    w.elapsed = start.elapsed();
    Ok(w)
}

/// Counts entries of one page (keys and prefixes merged in order) that do
/// not sort after the previous entry, carrying the last one in `last`.
fn count_disorder(last: &mut String, keys: &[String], prefixes: &[String]) -> u64 {
    let mut all: Vec<&String> = keys.iter().chain(prefixes).collect();
    all.sort_unstable();
    let mut bad = 0;
    for entry in all {
        if !last.is_empty() && entry.as_str() <= last.as_str() {
            bad += 1;
        }
        last.clone_from(entry);
    }
    bad
}

/// Times `lb.first_page_samples` first-page requests.
pub async fn first_pages(client: &S3Client, lb: &ListBench) -> Result<Histogram, ClientError> {
    let mut h = Histogram::new();
    for _ in 0..lb.first_page_samples {
        let t0 = Instant::now();
        client
            .list_objects_v2(&lb.bucket, &lb.request(None))
            .await?;
        h.record(micros(t0.elapsed()));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disorder_is_counted_across_pages() {
        let mut last = String::new();
        let page1 = ["a".to_owned(), "c".to_owned()];
        assert_eq!(count_disorder(&mut last, &page1, &["b/".to_owned()]), 0);
        assert_eq!(last, "c");
        assert_eq!(
            count_disorder(&mut last, &["c".to_owned(), "d".to_owned()], &[]),
            1
        );
    }
}
