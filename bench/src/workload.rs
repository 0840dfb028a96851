//! Timed closed-loop workloads: `put`, `get`, `head`, `tag`, `mixed`, `null`.
//!
//! `concurrency` workers each loop "pick an operation and a key, send, wait
//! for the full answer" until the deadline or the op budget runs out, so the
//! number of requests in flight is exactly `concurrency`. Keys are drawn
//! uniformly from the key space with a per-worker rng seeded from `seed`, so
//! runs are repeatable. Requests that start during the warm-up are sent but
//! not counted. Objects above 1 MiB are PUT by streaming a 1 MiB pattern and
//! GET bodies are counted and dropped, so the loader's memory stays flat
//! even for 1 GiB objects. Every run ends at the deadline (and at the op
//! budget if one is given).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::body::repeat_pattern;
use crate::client::S3Client;
use crate::content;
use crate::cpu::CpuMeter;
use crate::error::ClientError;
use crate::fill::KeySpace;
use crate::ops::{ListRequest, PutOptions};
use crate::report::OpStats;

/// Payload pattern length; larger objects are streamed by repeating it.
const PATTERN_LEN: usize = 1024 * 1024;

/// One kind of request a worker can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// PutObject of `size` bytes.
    Put,
    /// GetObject, body counted and discarded.
    Get,
    /// HeadObject.
    Head,
    /// PutObjectTagging with two tags.
    Tag,
    /// First page (100 keys) of ListObjectsV2 under the key prefix.
    List,
}

impl Op {
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Head => "head",
            Op::Tag => "tag",
            Op::List => "list",
        }
    }

    /// Parses a lowercase name.
    pub fn parse(s: &str) -> Option<Op> {
        [Op::Put, Op::Get, Op::Head, Op::Tag, Op::List]
            .into_iter()
            .find(|op| op.name() == s)
    }
}

/// Parses a mix like `get:70,put:20,head:10` into weighted operations.
pub fn parse_mix(s: &str) -> Result<Vec<(Op, u32)>, String> {
    let mix = s
        .split(',')
        .map(|part| {
            let (name, weight) = part
                .trim()
                .split_once(':')
                .ok_or(format!("{part:?}: want op:weight"))?;
            let op = Op::parse(name).ok_or(format!("unknown op {name:?}"))?;
            let weight = weight
                .parse()
                .map_err(|_| format!("bad weight {weight:?}"))?;
            Ok((op, weight))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if mix.iter().map(|(_, w)| u64::from(*w)).sum::<u64>() == 0 {
        return Err("mix weights sum to zero".to_owned());
    }
    Ok(mix)
}

/// Parameters of a timed run.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Bucket to use.
    pub bucket: String,
    /// Keys to draw from.
    pub keys: KeySpace,
    /// Object size in bytes (PUT payload; expected GET length).
    pub size: u64,
    /// Requests in flight.
    pub concurrency: usize,
    /// Measured time after warm-up.
    pub duration: Duration,
    /// Time before measuring starts.
    pub warmup: Duration,
    /// Stop after this many requests in total, if set (no warm-up then).
    pub max_ops: Option<u64>,
    /// Weighted operations.
    pub mix: Vec<(Op, u32)>,
    /// Seed for key and operation choice.
    pub seed: u64,
    /// Server process whose CPU time to report, if known.
    pub server_pid: Option<u32>,
}

/// What a timed run measured.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// Counters per operation.
    pub ops: BTreeMap<Op, OpStats>,
    /// Length of the measured window.
    pub elapsed: Duration,
    /// CPU used by the loader (and server) over the measured window.
    pub cpu: String,
}

/// State shared by the workers of one run.
struct Shared {
    client: S3Client,
    work: Workload,
    payload: Bytes,
    issued: AtomicU64,
    measure_from: Instant,
    deadline: Instant,
}

/// Runs `work` against `client` and returns the counters.
pub async fn run(client: &S3Client, work: &Workload) -> RunResult {
    let warmup = if work.max_ops.is_some() {
        Duration::ZERO
    } else {
        work.warmup
    };
    let measure_from = Instant::now() + warmup;
    let shared = Arc::new(Shared {
        client: client.clone(),
        work: work.clone(),
        payload: payload_for(work),
        issued: AtomicU64::new(0),
        measure_from,
        deadline: measure_from + work.duration,
    });
    let tasks: Vec<_> = (0..work.concurrency.max(1))
        .map(|w| tokio::spawn(worker(shared.clone(), w as u64)))
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let meter = CpuMeter::start(work.server_pid);
    let mut result = RunResult::default();
    for task in tasks {
        let Ok(ops) = task.await else { continue };
        for (op, s) in ops {
            result.ops.entry(op).or_default().merge(&s);
        }
    }
    result.elapsed = measure_from.elapsed();
    result.cpu = meter.line(result.ops.values().map(OpStats::ok_count).sum());
    result
}

/// The PUT pattern of `work`: its object size, capped at 1 MiB (larger
/// objects repeat it).
pub fn payload_for(work: &Workload) -> Bytes {
    let len = usize::try_from(work.size.min(PATTERN_LEN as u64)).unwrap_or(PATTERN_LEN);
    content::pattern(work.seed, len)
}

/// One operation drawn from `mix` by weight.
pub fn pick(mix: &[(Op, u32)], rng: &mut StdRng) -> Op {
    let total: u64 = mix.iter().map(|(_, w)| u64::from(*w)).sum();
    let mut roll = rng.random_range(0..total.max(1));
    for &(op, w) in mix {
        if roll < u64::from(w) {
            return op;
        }
        roll -= u64::from(w);
    }
    Op::Get
}

async fn worker(sh: Arc<Shared>, id: u64) -> BTreeMap<Op, OpStats> {
    let mut rng = StdRng::seed_from_u64(sh.work.seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut stats: BTreeMap<Op, OpStats> = BTreeMap::new();
    loop {
        let start = Instant::now();
        if start >= sh.deadline {
            return stats;
        }
        if let Some(max) = sh.work.max_ops
            && sh.issued.fetch_add(1, Ordering::Relaxed) >= max
        {
            return stats;
        }
        let op = pick(&sh.work.mix, &mut rng);
        let key = sh
            .work
            .keys
            .key(rng.random_range(0..sh.work.keys.count.max(1)));
        let res = one_op(&sh.client, &sh.work, &sh.payload, op, &key, id, &mut rng).await;
        if start < sh.measure_from {
            continue;
        }
        let s = stats.entry(op).or_default();
        match res {
            Ok(bytes) => s.ok(start.elapsed(), bytes),
            Err(e) => s.err(&e),
        }
    }
}

/// Sends one request of `work` (`payload` is its PUT pattern); returns
/// the payload bytes moved.
pub async fn one_op(
    c: &S3Client,
    work: &Workload,
    payload: &Bytes,
    op: Op,
    key: &str,
    worker: u64,
    rng: &mut StdRng,
) -> Result<u64, ClientError> {
    let (bucket, size) = (work.bucket.as_str(), work.size);
    match op {
        Op::Put => put_sized(c, bucket, key, size, payload).await.map(|_| size),
        Op::Get => {
            let (_, n) = c.get_object_count(bucket, key).await?;
            if n != size {
                return Err(ClientError::BadResponse(format!(
                    "GET {key}: {n} bytes, want {size}"
                )));
            }
            Ok(n)
        }
        Op::Head => c.head_object(bucket, key).await.map(|_| 0),
        Op::Tag => {
            let tags = [
                ("worker".to_owned(), worker.to_string()),
                ("round".to_owned(), rng.random::<u32>().to_string()),
            ];
            c.put_object_tagging(bucket, key, &tags).await.map(|_| 0)
        }
        Op::List => {
            let prefix = work.keys.prefix.as_str();
            let list = ListRequest {
                prefix: Some(prefix),
                max_keys: Some(100),
                ..ListRequest::default()
            };
            c.list_objects_v2(bucket, &list).await.map(|_| 0)
        }
    }
}

/// PUTs `size` bytes: one buffer (a slice of `payload`) when small,
/// streamed by repeating `payload` when large.
pub async fn put_sized(
    client: &S3Client,
    bucket: &str,
    key: &str,
    size: u64,
    payload: &Bytes,
) -> Result<Option<String>, ClientError> {
    if size <= payload.len() as u64 {
        let len = usize::try_from(size).unwrap_or(payload.len());
        return client.put_object(bucket, key, payload.slice(..len)).await;
    }
    let next = repeat_pattern(payload.clone());
    client
        .put_object_stream(bucket, key, size, next, &PutOptions::default())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mixes() {
        let mix = parse_mix("get:70, put:30").expect("valid");
        assert_eq!(mix, vec![(Op::Get, 70), (Op::Put, 30)]);
        assert!(parse_mix("get:0").is_err());
        assert!(parse_mix("fly:1").is_err());
        assert!(parse_mix("get").is_err());
    }

    #[test]
    fn pick_follows_weights() {
        let mut rng = StdRng::seed_from_u64(1);
        let mix = [(Op::Get, 1), (Op::Put, 0), (Op::Head, 3)];
        let picks: Vec<Op> = (0..1000).map(|_| pick(&mix, &mut rng)).collect();
        assert!(!picks.contains(&Op::Put));
        let heads = picks.iter().filter(|&&op| op == Op::Head).count();
        assert!((650..850).contains(&heads), "heads={heads}");
    }
}
