//! Virtual-hosted-style addressing (`laneway serve --domain NAME`).
//!
//! With a domain configured, a request whose `Host` is `BUCKET.NAME`
//! (any port) addresses BUCKET; `Host: NAME` and every other host (IP
//! addresses, `localhost`, other names) stay path-style. s3s's own
//! `SingleDomain` would instead take any unknown host name as a bucket
//! (CNAME style) and compares the port too, which breaks path-style
//! clients that use `localhost:PORT`.

use s3s::S3Result;
use s3s::host::{S3Host, VirtualHost};

/// The base domain under which bucket names are subdomains.
#[derive(Debug, Clone)]
pub struct BucketDomain {
    domain: String,
}

impl BucketDomain {
    /// A base domain such as `s3.example.com` (no port, no trailing dot).
    pub fn new(domain: &str) -> Result<BucketDomain, String> {
        let d = domain.trim().to_ascii_lowercase();
        let ok = !d.is_empty()
            && d.len() <= 253
            && d.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if ok {
            Ok(BucketDomain { domain: d })
        } else {
            Err(format!(
                "--domain must be a host name like s3.example.com, without port (got {domain:?})"
            ))
        }
    }

    /// The bucket a `Host` header value names, if it is `BUCKET.DOMAIN`.
    pub fn bucket_of<'a>(&self, host: &'a str) -> Option<&'a str> {
        let name = strip_port(host);
        let cut = name.len().checked_sub(self.domain.len() + 1)?;
        let (bucket, rest) = (name.get(..cut)?, name.get(cut..)?);
        let suffix = rest.strip_prefix('.')?;
        (suffix.eq_ignore_ascii_case(&self.domain) && !bucket.is_empty()).then_some(bucket)
    }
}

/// `host:port` -> `host` (IPv6 literals in brackets keep their colons).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host;
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

impl S3Host for BucketDomain {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        Ok(match self.bucket_of(host) {
            Some(bucket) => VirtualHost::new(self.domain.as_str()).with_bucket(bucket),
            None => VirtualHost::new(host),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_subdomains_only() {
        let d = BucketDomain::new("S3.Example.com").expect("valid");
        assert_eq!(d.bucket_of("b1.s3.example.com"), Some("b1"));
        assert_eq!(d.bucket_of("b1.s3.example.com:9000"), Some("b1"));
        assert_eq!(
            d.bucket_of("my.dotted.b.S3.EXAMPLE.COM"),
            Some("my.dotted.b")
        );
        assert_eq!(d.bucket_of("s3.example.com:9000"), None);
        assert_eq!(d.bucket_of("xs3.example.com"), None);
        assert_eq!(d.bucket_of(".s3.example.com"), None);
        assert_eq!(d.bucket_of("localhost:9000"), None);
        assert_eq!(d.bucket_of("[::1]:9000"), None);
        assert_eq!(d.bucket_of(""), None);
        let vh = d.parse_host_header("localhost:9000").expect("ok");
        assert_eq!(vh.bucket(), None);
        let vh = d.parse_host_header("b2.s3.example.com").expect("ok");
        assert_eq!(vh.bucket(), Some("b2"));
    }

    #[test]
    fn bad_domains_are_refused() {
        for bad in ["", "a..b", "s3.example.com:9000", "a b", "x.com."] {
            assert!(BucketDomain::new(bad).is_err(), "{bad:?}");
        }
    }
}
