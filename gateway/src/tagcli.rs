//! `laneway tags ...`: list by tag and run bulk tagging jobs from the
//! command line, as a tenant (signed S3 requests, the tenant's own keys).
//!
//! - `laneway tags list BUCKET --filter 'split=train&quality' [--prefix P]`
//!   prints the matching keys, one per line (every page);
//! - `laneway tags job start BUCKET --set k=v --remove k [--filter k=v]
//!   [--prefix P] [--wait]` starts a job and prints its id (with `--wait`,
//!   its final state);
//! - `laneway tags job status BUCKET [ID]` and `laneway tags job cancel
//!   BUCKET ID`.
//!
//! Credentials and endpoint come from the usual AWS variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, as
//! `laneway serve` prints them) or the flags.

use clap::{Args, Subcommand};
use laneway_bench::client::S3Client;
use laneway_bench::ops::ListRequest;
use serde_json::{Map, Value, json};
use std::process::ExitCode;
use std::time::Duration;

/// Flags shared by every `laneway tags` command.
#[derive(Args)]
pub struct TagsArgs {
    /// S3 endpoint.
    #[arg(
        long,
        env = "AWS_ENDPOINT_URL",
        default_value = "http://127.0.0.1:9000",
        global = true
    )]
    pub endpoint: String,
    /// Access key id.
    #[arg(long, env = "AWS_ACCESS_KEY_ID", hide_env_values = true, global = true)]
    pub access_key: Option<String>,
    /// Secret access key.
    #[arg(
        long,
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true,
        global = true
    )]
    pub secret_key: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub cmd: TagsCmd,
}

/// `laneway tags` subcommands.
#[derive(Subcommand)]
pub enum TagsCmd {
    /// Keys whose objects have the filter's tags, one per line.
    List {
        /// Bucket.
        bucket: String,
        /// The filter: `k=v&k2` (k2 alone: the tag exists).
        #[arg(long)]
        filter: String,
        /// Only keys under this prefix.
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Bulk tagging jobs.
    #[command(subcommand)]
    Job(JobCmd),
}

/// `laneway tags job` subcommands.
#[derive(Subcommand)]
pub enum JobCmd {
    /// Start a job; prints its id.
    Start {
        /// Bucket.
        bucket: String,
        /// Only objects under this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Only objects with this tag (`k=v`, or `k`: any value); repeatable.
        #[arg(long)]
        filter: Vec<String>,
        /// Tag to set (`k=v`); repeatable.
        #[arg(long)]
        set: Vec<String>,
        /// Tag key to remove; repeatable.
        #[arg(long)]
        remove: Vec<String>,
        /// Wait until the job ends and print its final state.
        #[arg(long)]
        wait: bool,
    },
    /// A job's state (JSON), or every job of the bucket.
    Status {
        /// Bucket.
        bucket: String,
        /// Job id.
        id: Option<String>,
    },
    /// Cancel a job.
    Cancel {
        /// Bucket.
        bucket: String,
        /// Job id.
        id: String,
    },
}

/// Run a `laneway tags` command.
pub fn run(args: TagsArgs) -> ExitCode {
    let (Some(access), Some(secret)) = (args.access_key.clone(), args.secret_key.clone()) else {
        eprintln!("laneway tags: no credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("laneway tags: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let client = S3Client::new(&args.endpoint, &access, &secret).map_err(|e| e.to_string())?;
        execute(&client, args.cmd).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("laneway tags: {msg}");
            ExitCode::FAILURE
        }
    }
}

async fn execute(client: &S3Client, cmd: TagsCmd) -> Result<(), String> {
    match cmd {
        TagsCmd::List {
            bucket,
            filter,
            prefix,
        } => list(client, &bucket, &filter, prefix.as_deref()).await,
        TagsCmd::Job(JobCmd::Start {
            bucket,
            prefix,
            filter,
            set,
            remove,
            wait,
        }) => {
            let spec = job_spec(&prefix, &filter, &set, &remove)?;
            let id = client
                .start_tagging_job(&bucket, &spec)
                .await
                .map_err(|e| e.to_string())?;
            if !wait {
                println!("{id}");
                return Ok(());
            }
            let state = wait_for(client, &bucket, &id).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&state).unwrap_or_default()
            );
            Ok(())
        }
        TagsCmd::Job(JobCmd::Status { bucket, id }) => {
            let state = client
                .tagging_job(&bucket, id.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string_pretty(&state).unwrap_or_default()
            );
            Ok(())
        }
        TagsCmd::Job(JobCmd::Cancel { bucket, id }) => client
            .cancel_tagging_job(&bucket, &id)
            .await
            .map_err(|e| e.to_string()),
    }
}

async fn list(
    client: &S3Client,
    bucket: &str,
    filter: &str,
    prefix: Option<&str>,
) -> Result<(), String> {
    let mut token: Option<String> = None;
    loop {
        let req = ListRequest {
            prefix,
            delimiter: None,
            continuation_token: token.as_deref(),
            max_keys: Some(1000),
            tag_filter: Some(filter),
        };
        let page = client
            .list_objects_v2(bucket, &req)
            .await
            .map_err(|e| e.to_string())?;
        for key in &page.keys {
            println!("{key}");
        }
        match page.next_token {
            Some(t) if page.is_truncated => token = Some(t),
            _ => return Ok(()),
        }
    }
}

async fn wait_for(client: &S3Client, bucket: &str, id: &str) -> Result<Value, String> {
    loop {
        let state = client
            .tagging_job(bucket, Some(id))
            .await
            .map_err(|e| e.to_string())?;
        if state["state"] != "running" {
            return Ok(state);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The JSON body of a job from the command line's flags.
fn job_spec(
    prefix: &str,
    filter: &[String],
    set: &[String],
    remove: &[String],
) -> Result<Value, String> {
    let mut f = Map::new();
    for c in filter {
        match c.split_once('=') {
            Some((k, v)) => f.insert(k.to_string(), json!(v)),
            None => f.insert(c.clone(), Value::Null),
        };
    }
    let mut s = Map::new();
    for t in set {
        let (k, v) = t
            .split_once('=')
            .ok_or_else(|| format!("--set {t:?}: expected key=value"))?;
        s.insert(k.to_string(), json!(v));
    }
    Ok(json!({ "prefix": prefix, "filter": f, "set": s, "remove": remove }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_the_job_body() {
        let spec = job_spec(
            "a/",
            &["split=train".into(), "reviewed".into()],
            &["stage=ready".into()],
            &["old".into()],
        )
        .expect("spec");
        assert_eq!(
            spec,
            json!({"prefix": "a/", "filter": {"split": "train", "reviewed": null},
                   "set": {"stage": "ready"}, "remove": ["old"]})
        );
        assert!(job_spec("", &[], &["novalue".into()], &[]).is_err());
    }
}
