//! What a bulk tagging job is: the request body that starts it, checked
//! once ([`JobSpec::parse`]), and the state kept for it ([`Job`]).
//!
//! The body is JSON: `{"prefix": "images/", "filter": {"split": "train",
//! "reviewed": null}, "set": {"stage": "ready"}, "remove": ["draft"]}`. A
//! filter value of `null` means "the tag exists, any value". The tag rules
//! of object tagging apply to `set` (keys 1..=128 characters, values at most
//! 256, no `aws:` prefix, at most 10); a key may not be both set and
//! removed, and a job must change something.

use crate::request::error::{GwError, GwResult};
use laneway_store::{EditCounts, Tag, TagCond, TagEdit};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The body of `POST /{bucket}?x-laneway-tagging-jobs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Only objects whose keys start with this.
    #[serde(default)]
    pub prefix: String,
    /// Only objects with these tags (`null`: any value).
    #[serde(default)]
    pub filter: BTreeMap<String, Option<String>>,
    /// Tags to set.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Tag keys to remove.
    #[serde(default)]
    pub remove: Vec<String>,
}

fn invalid(msg: impl Into<String>) -> GwError {
    GwError::InvalidArgument(msg.into())
}

impl JobSpec {
    /// Parse and check a request body.
    pub fn parse(body: &[u8]) -> GwResult<JobSpec> {
        let spec: JobSpec = serde_json::from_slice(body)
            .map_err(|e| invalid(format!("the tagging job is not valid JSON: {e}")))?;
        spec.check()?;
        Ok(spec)
    }

    fn check(&self) -> GwResult<()> {
        if self.set.is_empty() && self.remove.is_empty() {
            return Err(invalid("a tagging job must set or remove at least one tag"));
        }
        if self.filter.len() > crate::request::tag_filter::MAX_CONDITIONS {
            return Err(invalid("at most 10 filter conditions"));
        }
        for c in self.filter_conds() {
            crate::request::tag_filter::check(&c)?;
        }
        crate::request::tags::validate(&self.set_tags(), crate::request::tags::MAX_OBJECT_TAGS)?;
        if !self
            .remove
            .iter()
            .all(|k| crate::request::tags::key_fits(k))
        {
            return Err(invalid(
                "a tag key to remove is empty or longer than 128 characters",
            ));
        }
        if self.remove.iter().any(|k| self.set.contains_key(k)) {
            return Err(invalid("a tag key cannot be both set and removed"));
        }
        if self.remove.len() > 50 {
            return Err(invalid("at most 50 tag keys to remove"));
        }
        Ok(())
    }

    fn filter_conds(&self) -> Vec<TagCond> {
        self.filter
            .iter()
            .map(|(k, v)| TagCond {
                key: k.clone(),
                value: v.clone(),
            })
            .collect()
    }

    fn set_tags(&self) -> Vec<Tag> {
        self.set
            .iter()
            .map(|(k, v)| Tag {
                key: k.clone(),
                value: v.clone(),
            })
            .collect()
    }

    /// The store's edit for this job.
    pub fn edit(&self) -> TagEdit {
        TagEdit {
            filter: self.filter_conds(),
            set: self.set_tags(),
            remove: self.remove.clone(),
        }
    }

    /// The listing filter (the edit checks it again, atomically).
    pub fn list_filter(&self) -> Vec<TagCond> {
        self.filter_conds()
    }
}

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for or under a runner.
    Running,
    /// Every object was visited.
    Done,
    /// Stopped by DELETE.
    Cancelled,
    /// Stopped by an error it cannot get past (the bucket is gone).
    Failed,
}

/// Most error messages a job keeps.
pub const MAX_MESSAGES: usize = 10;

/// One job, as stored and as `GET` answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Its id.
    pub id: String,
    /// The bucket's name.
    pub bucket: String,
    /// What it does.
    pub spec: JobSpec,
    /// Where it is.
    pub state: JobState,
    /// The last key done (the durable cursor); `None` before the first page.
    pub cursor: Option<String>,
    /// Objects listed (with the filter).
    pub scanned: u64,
    /// Objects whose tags changed.
    pub changed: u64,
    /// Objects that could not be changed.
    pub errors: u64,
    /// The first errors' messages.
    pub messages: Vec<String>,
    /// When it was created, ms since the epoch.
    pub created_ms: i64,
    /// When it ended, ms since the epoch.
    pub finished_ms: Option<i64>,
    /// The runner holding it and until when (ms); a runner takes a job
    /// whose lease ran out.
    #[serde(default)]
    pub lease: Option<(String, i64)>,
}

impl Job {
    /// A new, running job.
    pub fn new(id: String, bucket: String, spec: JobSpec, now_ms: i64) -> Job {
        Job {
            id,
            bucket,
            spec,
            state: JobState::Running,
            cursor: None,
            scanned: 0,
            changed: 0,
            errors: 0,
            messages: Vec::new(),
            created_ms: now_ms,
            finished_ms: None,
            lease: None,
        }
    }

    /// Count one page: `listed` objects up to key `last`, and what the edit did.
    pub fn advance(&mut self, last: Option<String>, listed: u64, counts: EditCounts) {
        self.scanned += listed;
        self.changed += counts.changed;
        if counts.too_many_tags > 0 {
            self.errors += counts.too_many_tags;
            self.note(format!(
                "{} objects would have had more than 10 tags and were left as they were",
                counts.too_many_tags
            ));
        }
        if last.is_some() {
            self.cursor = last;
        }
    }

    /// Keep an error message (the first [`MAX_MESSAGES`]).
    pub fn note(&mut self, msg: String) {
        if self.messages.len() < MAX_MESSAGES {
            self.messages.push(msg);
        }
    }

    /// End the job in `state` at `now_ms`.
    pub fn finish(&mut self, state: JobState, now_ms: i64) {
        self.state = state;
        self.finished_ms = Some(now_ms);
        self.lease = None;
    }

    /// The JSON `GET` answers (no lease: it is the runners' business).
    pub fn view(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "bucket": self.bucket,
            "state": self.state,
            "prefix": self.spec.prefix,
            "filter": self.spec.filter,
            "set": self.spec.set,
            "remove": self.spec.remove,
            "scanned": self.scanned,
            "changed": self.changed,
            "errors": self.errors,
            "messages": self.messages,
            "cursor": self.cursor,
            "created_ms": self.created_ms,
            "finished_ms": self.finished_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_checked() {
        let ok = JobSpec::parse(
            br#"{"prefix":"a/","filter":{"split":"train","r":null},"set":{"s":"1"},"remove":["d"]}"#,
        )
        .expect("valid");
        assert_eq!(ok.edit().filter.len(), 2);
        for bad in [
            &br#"{"prefix":"a/"}"#[..],
            br#"{"set":{"aws:x":"1"}}"#,
            br#"{"set":{"a":"1"},"remove":["a"]}"#,
            br#"{"set":{"a":"1"},"extra":1}"#,
            br#"not json"#,
            br#"{"set":{"":"1"}}"#,
        ] {
            assert!(
                JobSpec::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn advancing_counts_and_keeps_the_cursor() {
        let mut j = Job::new("i".into(), "b".into(), JobSpec::default(), 0);
        let counts = EditCounts {
            matched: 3,
            changed: 2,
            too_many_tags: 1,
        };
        j.advance(Some("k9".into()), 3, counts);
        j.advance(None, 0, EditCounts::default());
        assert_eq!((j.scanned, j.changed, j.errors), (3, 2, 1));
        assert_eq!(j.cursor.as_deref(), Some("k9"));
        assert_eq!(j.messages.len(), 1);
    }
}
