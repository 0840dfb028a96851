//! Crash recovery: SIGKILL the `laneway` server mid-write, restart it on the
//! same data directory, and check that nothing acknowledged was lost.
//!
//! Each of [`ROUNDS`] rounds starts `laneway serve` on a fresh port over
//! one data directory, lets [`WRITERS`] client tasks PUT objects of mixed
//! sizes (small ones stored inline, 100 KiB-1 MiB ones in volumes), then
//! kills the server with SIGKILL after a seeded random 50-500 ms. Every
//! writer owns its own keys and sends one PUT at a time, so for each key
//! the model knows the last acknowledged generation and at most one
//! generation whose PUT was in flight at the kill. After the restart every
//! key must read back byte-exact as one of those (the acknowledged one, or
//! the in-flight one if it happened to land), with the content type and
//! `x-amz-meta-*` of that generation and an MD5 ETag; a key that was ever
//! acknowledged must exist; and the full ListObjectsV2 listing must hold
//! exactly the keys that exist, each of which must GET. What a restart
//! shows becomes the new baseline, since after a process crash the data
//! directory is all there is. Every generation is stored with the tag
//! `g=<generation mod 3>`, and after each restart the listing by each of
//! the three tags must hold exactly the keys whose generation has it: the
//! tag index never disagrees with the records after a crash.
//!
//! Object bytes are recomputed from (key, generation) by
//! `laneway_bench::content`, so the test holds no copies of what it wrote.
//! Set `LANEWAY_TEST_ENGINE=sled|fjall` to pick the metadata engine.

mod crash_support;

use crash_support::{Run, Server, list_keys};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use laneway_bench::content::{fnv1a, md5_hex, object_bytes};
use laneway_bench::{ClientError, HeaderExt, PutOptions, S3Client};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Kill-and-restart rounds.
const ROUNDS: usize = 20;
/// Concurrent writer tasks, each with its own keys.
const WRITERS: usize = 6;
/// Keys per writer (overwritten across rounds).
const KEYS_PER_WRITER: usize = 10;
const BUCKET: &str = "crash";
const SEED: u64 = 0x1a7e_2026_1129;

/// What the test knows about one key.
#[derive(Debug, Clone, Default)]
struct KeyState {
    /// Generation the server acknowledged last, or saw stored at restart.
    acked: Option<u64>,
    /// Generations sent after `acked` without an acknowledgement.
    unacked: Vec<u64>,
    /// Next generation to write.
    next_gen: u64,
}

impl KeyState {
    /// Generations the key may legitimately hold after a crash.
    fn allowed(&self) -> Vec<u64> {
        self.acked.iter().chain(&self.unacked).copied().collect()
    }
}

type Model = BTreeMap<String, KeyState>;

/// Object size of a generation: ~55% small (inline), the rest 100 KiB-1 MiB.
fn size_of(key: &str, generation: u64) -> usize {
    let h = fnv1a(format!("{key}#{generation}").as_bytes());
    let pick = usize::try_from(h >> 40).unwrap_or(0);
    if h % 100 < 55 {
        200 + pick % 1849
    } else {
        100 * 1024 + pick % (924 * 1024)
    }
}

fn content_type_of(generation: u64) -> String {
    format!("application/x-laneway-g{generation}")
}

fn put_options(key: &str, generation: u64) -> PutOptions {
    PutOptions {
        content_type: Some(content_type_of(generation)),
        metadata: vec![
            ("gen".to_owned(), generation.to_string()),
            (
                "keyhash".to_owned(),
                format!("{:016x}", fnv1a(key.as_bytes())),
            ),
        ],
        tagging: Some(tag_of(generation)),
    }
}

/// The tag (`x-amz-tagging` form) of a generation.
fn tag_of(generation: u64) -> String {
    format!("g={}", generation % 3)
}

// ---------------------------------------------------------------- writers

/// What a writer hands back when it stops.
#[derive(Debug, Default)]
struct WriterOut {
    keys: Model,
    acked: u64,
    /// Problems seen before the kill: failed PUTs, wrong ETags.
    problems: Vec<String>,
}

/// PUTs random keys of its own, one at a time, until `stop` is set or the
/// server goes away.
async fn writer(client: S3Client, mut keys: Model, stop: Arc<AtomicBool>, seed: u64) -> WriterOut {
    let mut rng = StdRng::seed_from_u64(seed);
    let names: Vec<String> = keys.keys().cloned().collect();
    let mut out = WriterOut::default();
    while !stop.load(Ordering::SeqCst) {
        let key = &names[rng.random_range(0..names.len())];
        let Some(st) = keys.get_mut(key) else { break };
        let generation = st.next_gen;
        st.next_gen += 1;
        st.unacked.push(generation);
        let body = object_bytes(key, generation, size_of(key, generation));
        let expected_etag = md5_hex(&body);
        let res = client
            .put_object_with(BUCKET, key, body, &put_options(key, generation))
            .await;
        match res {
            Ok(etag) => {
                st.acked = Some(generation);
                st.unacked.clear();
                out.acked += 1;
                if etag.as_deref() != Some(expected_etag.as_str()) {
                    out.problems.push(format!(
                        "PUT {key} g{generation}: ETag {etag:?}, want {expected_etag}"
                    ));
                }
            }
            Err(e) => {
                if !stop.load(Ordering::SeqCst) {
                    out.problems
                        .push(format!("PUT {key} g{generation} before the kill: {e}"));
                }
                if is_server_gone(&e) {
                    break;
                }
            }
        }
    }
    out.keys = keys;
    out
}

fn is_server_gone(e: &ClientError) -> bool {
    matches!(e, ClientError::Transport(_) | ClientError::Timeout(_))
}

// ---------------------------------------------------------------- checks

/// Checks one key after a restart; returns the generation it holds.
async fn check_key(client: &S3Client, key: &str, st: &KeyState) -> Result<Option<u64>, String> {
    let out = match client.get_object(BUCKET, key).await {
        Ok(out) => out,
        Err(e) if e.status() == Some(404) && st.acked.is_none() => return Ok(None),
        Err(e) => return Err(format!("GET {key} (acked {:?}): {e}", st.acked)),
    };
    let allowed = st.allowed();
    let generation = allowed
        .iter()
        .copied()
        .find(|&g| out.body == object_bytes(key, g, size_of(key, g)))
        .ok_or_else(|| {
            format!(
                "GET {key}: {} bytes match none of generations {allowed:?} (meta gen {:?})",
                out.body.len(),
                out.meta("gen")
            )
        })?;
    let want_ct = content_type_of(generation);
    let want_gen = generation.to_string();
    let want_etag = md5_hex(&out.body);
    if out.content_type() != Some(want_ct.as_str())
        || out.meta("gen") != Some(want_gen.as_str())
        || out.etag() != Some(want_etag.as_str())
    {
        return Err(format!(
            "GET {key} g{generation}: content-type {:?}, meta gen {:?}, etag {:?}; want {want_ct}, {want_gen}, {want_etag}",
            out.content_type(),
            out.meta("gen"),
            out.etag()
        ));
    }
    Ok(Some(generation))
}

async fn check_listing(
    client: &S3Client,
    listed: &[String],
    present: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let set: BTreeSet<String> = listed.iter().cloned().collect();
    if set.len() != listed.len() || listed.windows(2).any(|w| w[0] >= w[1]) {
        problems.push("listing has duplicates or is out of order".to_owned());
    }
    for missing in present.difference(&set) {
        problems.push(format!("{missing} should exist but is not listed"));
    }
    for extra in set.difference(present) {
        problems.push(format!("{extra} is listed but was never stored"));
    }
    for key in listed {
        if let Err(e) = client.get_object_count(BUCKET, key).await {
            problems.push(format!("listed {key} does not GET: {e}"));
        }
    }
    problems
}

// ---------------------------------------------------------------- driver

fn initial_model() -> Vec<Model> {
    (0..WRITERS)
        .map(|w| {
            (0..KEYS_PER_WRITER)
                .map(|k| (format!("w{w}/key-{k:02}"), KeyState::default()))
                .collect()
        })
        .collect()
}

/// Runs the writers against `server`, kills it after `delay`, and returns
/// the writers' models and problems.
async fn write_then_kill(
    server: &mut Server,
    models: Vec<Model>,
    delay: Duration,
    seed: u64,
) -> Result<(Vec<WriterOut>, u64), String> {
    let client = server.client()?;
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = models
        .into_iter()
        .enumerate()
        .map(|(w, keys)| tokio::spawn(writer(client.clone(), keys, stop.clone(), seed ^ w as u64)))
        .collect();
    tokio::time::sleep(delay).await;
    // Set before the kill so every error a writer sees afterwards is known
    // to be caused by it.
    stop.store(true, Ordering::SeqCst);
    server.kill();
    let mut outs = Vec::new();
    let mut acked = 0;
    for task in tasks {
        let out = task.await.map_err(|e| format!("writer task: {e}"))?;
        acked += out.acked;
        outs.push(out);
    }
    Ok((outs, acked))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_puts_survive_sigkill() {
    let run = Run::new();
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut models = initial_model();
    let mut total_acked = 0;
    for round in 0..=ROUNDS {
        let mut server = match Server::start(&run.data, &run.log) {
            Ok(s) => s,
            Err(e) => run.fail(&format!("round {round}: start"), &[e]),
        };
        let client = match server.client() {
            Ok(c) => c,
            Err(e) => run.fail("client", &[e]),
        };
        if round == 0 {
            if let Err(e) = client.create_bucket(BUCKET).await {
                run.fail("create bucket", &[e.to_string()]);
            }
        } else {
            let mut problems = Vec::new();
            let mut seen = InFlight::default();
            for model in &mut models {
                problems.extend(verify_writer_keys(&client, model, &mut seen).await);
            }
            eprintln!(
                "restart {round}: all keys verified; cut-off PUTs found applied {}, not applied {}",
                seen.landed, seen.lost
            );
            problems.extend(verify_listing_total(&client, &models).await);
            if !problems.is_empty() {
                run.fail(&format!("after restart {round}"), &problems);
            }
        }
        if round == ROUNDS {
            break;
        }
        let delay = Duration::from_millis(rng.random_range(50..=500));
        let (outs, acked) = match write_then_kill(&mut server, models, delay, rng.random()).await {
            Ok(r) => r,
            Err(e) => run.fail(&format!("round {round}: writers"), &[e]),
        };
        total_acked += acked;
        let problems: Vec<String> = outs.iter().flat_map(|o| o.problems.clone()).collect();
        if !problems.is_empty() {
            run.fail(&format!("round {round}: writes before the kill"), &problems);
        }
        models = outs.into_iter().map(|o| o.keys).collect();
        eprintln!("round {round}: killed after {delay:?}, {acked} PUTs acknowledged");
    }
    assert!(total_acked > 0, "no PUT was ever acknowledged");
}

/// Outcome of the in-flight PUTs of one crash, for the round log.
#[derive(Debug, Default)]
struct InFlight {
    /// Keys found holding the generation whose PUT was cut off.
    landed: u64,
    /// Keys found holding their last acknowledged generation instead.
    lost: u64,
}

/// Per-key checks for one writer's keys (the listing is checked once for
/// the whole bucket in [`verify_listing_total`]).
async fn verify_writer_keys(
    client: &S3Client,
    model: &mut Model,
    seen: &mut InFlight,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, st) in model.iter_mut() {
        match check_key(client, key, st).await {
            Ok(held) => {
                match held {
                    Some(g) if st.unacked.contains(&g) => seen.landed += 1,
                    _ if !st.unacked.is_empty() => seen.lost += 1,
                    _ => {}
                }
                st.acked = held;
                st.unacked.clear();
            }
            Err(e) => problems.push(e),
        }
    }
    problems
}

async fn verify_listing_total(client: &S3Client, models: &[Model]) -> Vec<String> {
    let present: BTreeSet<String> = models
        .iter()
        .flat_map(|m| m.iter())
        .filter(|(_, st)| st.acked.is_some())
        .map(|(k, _)| k.clone())
        .collect();
    let mut problems = match list_keys(client, BUCKET, None, Some(7)).await {
        Ok(listed) => check_listing(client, &listed, &present).await,
        Err(e) => vec![format!("ListObjectsV2: {e}")],
    };
    for v in 0..3 {
        let tag = tag_of(v);
        let want: BTreeSet<String> = models
            .iter()
            .flat_map(|m| m.iter())
            .filter(|(_, st)| st.acked.is_some_and(|g| g % 3 == v))
            .map(|(k, _)| k.clone())
            .collect();
        match list_keys(client, BUCKET, Some(&tag), Some(7)).await {
            Ok(listed) if listed.iter().cloned().collect::<BTreeSet<_>>() == want => {}
            Ok(listed) => problems.push(format!(
                "listing by tag {tag} holds {listed:?}, the records say {want:?}"
            )),
            Err(e) => problems.push(format!("ListObjectsV2 by tag {tag}: {e}")),
        }
    }
    problems
}
