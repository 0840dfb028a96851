//! Bulk tagging jobs (`?x-laneway-tagging-jobs`) through the signed S3
//! client: start one, read its state, cancel it. The answers are the
//! server's JSON, returned as it is.

use bytes::Bytes;
use http::Method;
use http::header::CONTENT_TYPE;
use serde_json::Value;

use crate::body::ReqBody;
use crate::client::{S3Client, drain, encode_path, encode_query};
use crate::error::ClientError;

/// The query parameter of the jobs route.
pub const PARAM: &str = "x-laneway-tagging-jobs";

impl S3Client {
    async fn job_call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let (headers, body) = match body {
            Some(v) => (
                vec![(CONTENT_TYPE, "application/json".to_owned())],
                ReqBody::full(Bytes::from(v.to_string())),
            ),
            None => (Vec::new(), ReqBody::empty()),
        };
        let req = self.request(method.clone(), path, &headers, body)?;
        self.timed(async {
            let resp = self.send(req).await?;
            if method == Method::DELETE {
                drain(resp.into_body()).await?;
                return Ok(Value::Null);
            }
            let bytes = self.read_body(resp).await?;
            serde_json::from_slice(&bytes)
                .map_err(|e| ClientError::BadResponse(format!("tagging job answer: {e}")))
        })
        .await
    }

    /// Start a job on `bucket` (`spec` as the server takes it); its id.
    pub async fn start_tagging_job(
        &self,
        bucket: &str,
        spec: &Value,
    ) -> Result<String, ClientError> {
        let path = format!("/{}?{PARAM}", encode_path(bucket));
        let answer = self.job_call(Method::POST, &path, Some(spec)).await?;
        answer["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ClientError::BadResponse("no job id in the answer".to_owned()))
    }

    /// The state of job `id` of `bucket`, or every job it keeps (`None`).
    pub async fn tagging_job(&self, bucket: &str, id: Option<&str>) -> Result<Value, ClientError> {
        let mut path = format!("/{}?{PARAM}", encode_path(bucket));
        if let Some(id) = id {
            path.push_str(&format!("&id={}", encode_query(id)));
        }
        self.job_call(Method::GET, &path, None).await
    }

    /// Cancel job `id` of `bucket`.
    pub async fn cancel_tagging_job(&self, bucket: &str, id: &str) -> Result<(), ClientError> {
        let path = format!("/{}?{PARAM}&id={}", encode_path(bucket), encode_query(id));
        self.job_call(Method::DELETE, &path, None).await.map(drop)
    }
}
