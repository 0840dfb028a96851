//! The admin-API calls the multi-tenant bench and the soak need: create a
//! tenant (weight, first key) and read the gateway's `/metrics` (served
//! cost per tenant, and the lanes' gauges the soak's leak check reads).
//!
//! The admin listener is plain HTTP on loopback with a bearer token (see
//! `docs/admin-api.yaml`). The bench provisions its own tenants so every
//! figure comes from one self-contained command, and reads each tenant's
//! served cost (`laneway_cost_units_total`, summed over operations) from
//! the server, so cost shares are the scheduler's own accounting rather
//! than a client-side estimate.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A tenant the bench created, with its first key.
#[derive(Debug, Clone)]
pub struct CreatedTenant {
    /// Tenant id (`t-…`), the label metrics use.
    pub id: String,
    /// Access key id.
    pub access_key: String,
    /// Secret access key (returned once by the API; never printed).
    pub secret_key: String,
}

/// A client of one gateway's admin listener.
#[derive(Clone)]
pub struct AdminClient {
    http: Client<HttpConnector, Full<Bytes>>,
    base: String,
    token: String,
}

const TIMEOUT: Duration = Duration::from_secs(10);

impl AdminClient {
    /// A client for `endpoint` (`http://127.0.0.1:9001`) using `token`.
    pub fn new(endpoint: &str, token: &str) -> Result<AdminClient, String> {
        let uri: Uri = endpoint
            .trim_end_matches('/')
            .parse()
            .map_err(|e| format!("--admin-endpoint: {e}"))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err("--admin-endpoint must be http://host:port".to_owned());
        }
        Ok(AdminClient {
            http: Client::builder(TokioExecutor::new()).build_http(),
            base: endpoint.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        })
    }

    /// Creates tenant `name` with `weight` and returns its id and key.
    pub async fn create_tenant(&self, name: &str, weight: u32) -> Result<CreatedTenant, String> {
        let body = format!(r#"{{"name":"{name}","weight":{weight}}}"#);
        let text = self.call(Method::POST, "/v1/tenants", body).await?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("create tenant: {e}"))?;
        let field = |path: &[&str]| -> Result<String, String> {
            let mut cur = &v;
            for p in path {
                cur = &cur[p];
            }
            cur.as_str()
                .map(str::to_owned)
                .ok_or(format!("create tenant: no {}", path.join(".")))
        };
        Ok(CreatedTenant {
            id: field(&["tenant", "id"])?,
            access_key: field(&["key", "access_key"])?,
            secret_key: field(&["key", "secret_key"])?,
        })
    }

    /// Cost units served so far per tenant id, from `/metrics`.
    pub async fn cost_units(&self) -> Result<HashMap<String, u64>, String> {
        let text = self.call(Method::GET, "/metrics", String::new()).await?;
        Ok(sum_by_tenant(&text, "laneway_cost_units_total"))
    }

    /// The lanes' gauges now, from `/metrics`.
    pub async fn lane_gauges(&self) -> Result<LaneGauges, String> {
        let text = self.call(Method::GET, "/metrics", String::new()).await?;
        Ok(LaneGauges::parse(&text))
    }

    async fn call(&self, method: Method, path: &str, body: String) -> Result<String, String> {
        let req = Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.base))
            .header(AUTHORIZATION, format!("Bearer {}", self.token))
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let call = async {
            let resp = self.http.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if !status.is_success() {
                return Err(format!("{status}: {}", text.trim()));
            }
            Ok(text)
        };
        tokio::time::timeout(TIMEOUT, call)
            .await
            .map_err(|_| format!("admin {method} {path}: timed out"))?
            .map_err(|e| format!("admin {method} {path}: {e}"))
    }
}

/// What the lanes hold and queue, from `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneGauges {
    /// `laneway_lanes_in_flight_units`: cost units granted, not released.
    pub in_flight_units: u64,
    /// Sum of `laneway_lane_queue_depth`: requests and chunks waiting.
    pub lane_queued: u64,
    /// Sum of `laneway_queue_depth`: requests waiting for admission.
    pub admission_queued: u64,
}

impl LaneGauges {
    /// Reads the three gauges from a metrics text.
    pub fn parse(text: &str) -> LaneGauges {
        let value = |line: &str| {
            line.rsplit_once(' ')
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let mut g = LaneGauges::default();
        for line in text.lines() {
            if line.starts_with("laneway_lanes_in_flight_units ") {
                g.in_flight_units = value(line);
            } else if line.starts_with("laneway_lane_queue_depth{") {
                g.lane_queued += value(line);
            } else if line.starts_with("laneway_queue_depth{") {
                g.admission_queued += value(line);
            }
        }
        g
    }

    /// True when nothing is held or queued.
    pub fn idle(&self) -> bool {
        self.in_flight_units == 0 && self.lane_queued == 0 && self.admission_queued == 0
    }
}

/// Sums the samples of counter `name` by their `tenant` label.
pub fn sum_by_tenant(text: &str, name: &str) -> HashMap<String, u64> {
    let mut out: HashMap<String, u64> = HashMap::new();
    let prefix = format!("{name}{{");
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let (Some(tenant), Ok(v)) = (label(labels, "tenant"), value.trim().parse::<u64>()) else {
            continue;
        };
        *out.entry(tenant.to_owned()).or_default() += v;
    }
    out
}

/// The value of label `name` in `a="x",b="y"` (values hold no quotes here).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_a_counter_by_tenant() {
        let text = "# HELP x\n\
            laneway_cost_units_total{tenant=\"t-a\",op=\"GetObject\"} 10\n\
            laneway_cost_units_total{tenant=\"t-a\",op=\"PutObject\"} 5\n\
            laneway_cost_units_total{tenant=\"t-b\",op=\"GetObject\"} 7\n\
            laneway_cost_units_totalx{tenant=\"t-c\"} 1\n\
            laneway_bytes_in_total{tenant=\"t-a\",op=\"PutObject\"} 99\n";
        let m = sum_by_tenant(text, "laneway_cost_units_total");
        assert_eq!(m.get("t-a"), Some(&15));
        assert_eq!(m.get("t-b"), Some(&7));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn reads_lane_gauges() {
        let text = "# TYPE laneway_lanes_in_flight_units gauge\n\
            laneway_lanes_in_flight_units 98304\n\
            laneway_lane_queue_depth{tenant=\"t-a\"} 2\n\
            laneway_lane_queue_depth{tenant=\"t-b\"} 1\n\
            laneway_queue_depth{tenant=\"t-a\",op=\"GetObject\"} 4\n\
            laneway_lane_weight{tenant=\"t-a\"} 9\n";
        let g = LaneGauges::parse(text);
        assert_eq!(
            (g.in_flight_units, g.lane_queued, g.admission_queued),
            (98304, 3, 4)
        );
        assert!(!g.idle());
        assert!(LaneGauges::parse("laneway_lanes_in_flight_units 0\n").idle());
    }

    #[test]
    fn refuses_bad_endpoints() {
        assert!(AdminClient::new("https://127.0.0.1:1", "t").is_err());
        assert!(AdminClient::new("http://127.0.0.1:9001/", "t").is_ok());
    }
}
