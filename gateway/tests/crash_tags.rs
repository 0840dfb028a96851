//! Crash recovery of tags: SIGKILL `laneway serve` while tagging calls
//! and a bulk tagging job run, restart it on the same data directory, and
//! check that the tag index matches the records exactly, that no
//! acknowledged PutObjectTagging was lost, and that the job resumes and
//! finishes its work.
//!
//! A bucket of [`OBJECTS`] small objects, each PUT with the tag `g=0`.
//! Each of [`ROUNDS`] rounds starts a bulk job over the bucket (`set
//! r=<round>`), and [`TAGGERS`] tasks replace the tag sets of keys of
//! their own (the first [`TAGGED`] keys) with `t=<n>`, one call at a time,
//! so for each key the model knows the last acknowledged `n` and at most
//! one `n` whose call was in flight at the kill. The server is killed
//! after a seeded random 30-300 ms, while the job is usually still
//! running. After the restart:
//!
//! - each tagger key holds `t` of its last acknowledged call or of the
//!   call in flight (a later acknowledged one is never lost);
//! - the job resumes from its durable cursor and ends `done` with no
//!   errors, and every key no tagger touches carries `r=<round>`;
//! - the tag index equals the records: for every tag the records hold
//!   (read with GetObjectTagging, key by key), and for `r` alone (the key
//!   exists), the listing by that filter holds exactly the keys whose
//!   record has it.
//!
//! At least one round must find its job unfinished at the kill (else the
//! resume was never tested and the test fails, saying so).

mod crash_support;

use crash_support::{Run, Server, list_keys};
use futures::StreamExt;
use laneway_bench::S3Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Kill-and-restart rounds.
const ROUNDS: u64 = 6;
/// Objects in the bucket (enough that a job is still running at the kill).
const OBJECTS: usize = 4_000;
/// Keys the taggers own (the rest are touched by the jobs only).
const TAGGED: usize = 120;
/// Tagger tasks, each owning `TAGGED / TAGGERS` keys.
const TAGGERS: usize = 4;
const BUCKET: &str = "crash-tags";
const SEED: u64 = 0x7a95_2026_1202;
/// Longest a resumed job may take to finish.
const JOB_DEADLINE: Duration = Duration::from_secs(120);

fn key(i: usize) -> String {
    format!("k/{i:05}")
}

/// What the model knows of one tagger key's `t`.
#[derive(Clone, Debug, Default)]
struct TagState {
    /// `n` of the last acknowledged PutObjectTagging (None: only `g=0`).
    acked: Option<u64>,
    /// `n` of the call in flight at the kill, if any.
    in_flight: Option<u64>,
    /// Next `n` to send.
    next: u64,
}

/// One tagger's keys and what it saw.
#[derive(Default)]
struct Tagger {
    keys: BTreeMap<String, TagState>,
    problems: Vec<String>,
}

async fn tag_until_stopped(
    client: S3Client,
    mut me: Tagger,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> Tagger {
    let mut rng = StdRng::seed_from_u64(seed);
    let names: Vec<String> = me.keys.keys().cloned().collect();
    while !stop.load(Ordering::SeqCst) {
        let k = &names[rng.random_range(0..names.len())];
        let st = me.keys.get_mut(k).expect("own key");
        let n = st.next;
        st.next += 1;
        st.in_flight = Some(n);
        match client
            .put_object_tagging(BUCKET, k, &[("t".to_owned(), n.to_string())])
            .await
        {
            Ok(()) => {
                st.acked = Some(n);
                st.in_flight = None;
            }
            Err(e) if stop.load(Ordering::SeqCst) => {
                let _ = e;
                break;
            }
            Err(e) => {
                me.problems.push(format!("PutObjectTagging {k} t={n}: {e}"));
                break;
            }
        }
    }
    me
}

/// The tags of every key, read from the records (GetObjectTagging).
async fn records(client: &S3Client) -> Result<BTreeMap<String, BTreeMap<String, String>>, String> {
    let mut out = BTreeMap::new();
    for i in 0..OBJECTS {
        let k = key(i);
        let tags = client
            .get_object_tagging(BUCKET, &k)
            .await
            .map_err(|e| format!("GetObjectTagging {k}: {e}"))?;
        out.insert(k, tags.into_iter().collect());
    }
    Ok(out)
}

/// Where the listings by tag disagree with `recs`.
async fn index_problems(
    client: &S3Client,
    recs: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<String> {
    let mut want: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (k, tags) in recs {
        for (name, value) in tags {
            want.entry(format!("{name}={value}"))
                .or_default()
                .insert(k.clone());
            want.entry(name.clone()).or_default().insert(k.clone());
        }
    }
    // A tag no record holds any longer must list nothing either.
    want.entry("g=1".into()).or_default();
    let mut problems = Vec::new();
    for (filter, keys) in &want {
        let got = list_keys(client, BUCKET, Some(filter), None).await;
        match got.map(|k| k.into_iter().collect::<BTreeSet<String>>()) {
            Ok(got) if got == *keys => {}
            Ok(got) => {
                let extra: Vec<_> = got.difference(keys).take(5).collect();
                let missing: Vec<_> = keys.difference(&got).take(5).collect();
                problems.push(format!(
                    "listing by {filter}: {} keys, the records {}; extra {extra:?}, missing {missing:?}",
                    got.len(),
                    keys.len()
                ));
            }
            Err(e) => problems.push(format!("ListObjectsV2 by {filter}: {e}")),
        }
    }
    problems
}

/// Each tagger key's `t` against the model; the model then takes what
/// was found as its new baseline.
fn tagger_problems(
    taggers: &mut [Tagger],
    recs: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for tagger in taggers {
        for (k, st) in &mut tagger.keys {
            let found = recs
                .get(k)
                .and_then(|t| t.get("t"))
                .and_then(|v| v.parse::<u64>().ok());
            let allowed = [st.acked, st.in_flight];
            if !allowed.contains(&found) {
                problems.push(format!(
                    "{k}: t={found:?} after the restart; acknowledged {:?}, in flight {:?}",
                    st.acked, st.in_flight
                ));
            }
            st.acked = found;
            st.in_flight = None;
        }
    }
    problems
}

/// Poll job `id` until it is no longer running; its last state.
async fn job_end(client: &S3Client, id: &str) -> Result<Value, String> {
    let deadline = Instant::now() + JOB_DEADLINE;
    loop {
        let state = client
            .tagging_job(BUCKET, Some(id))
            .await
            .map_err(|e| format!("job {id}: {e}"))?;
        if state["state"] != "running" {
            return Ok(state);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "job {id} still running after {JOB_DEADLINE:?}: {state}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn fill(client: &S3Client) -> Result<(), String> {
    client
        .create_bucket(BUCKET)
        .await
        .map_err(|e| e.to_string())?;
    let opts = laneway_bench::PutOptions {
        tagging: Some("g=0".into()),
        ..Default::default()
    };
    let puts = futures::stream::iter(0..OBJECTS).map(|i| {
        let (client, opts) = (client.clone(), opts.clone());
        async move {
            client
                .put_object_with(BUCKET, &key(i), bytes::Bytes::from_static(b"x"), &opts)
                .await
                .map_err(|e| format!("PUT {}: {e}", key(i)))
        }
    });
    let done: Vec<Result<_, String>> = puts.buffer_unordered(16).collect().await;
    done.into_iter().collect::<Result<Vec<_>, _>>().map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_index_and_bulk_jobs_survive_sigkill() {
    let run = Run::new();
    let mut rng = StdRng::seed_from_u64(SEED);
    let per = TAGGED / TAGGERS;
    let mut taggers: Vec<Tagger> = (0..TAGGERS)
        .map(|t| Tagger {
            keys: (t * per..(t + 1) * per)
                .map(|i| (key(i), TagState::default()))
                .collect(),
            problems: Vec::new(),
        })
        .collect();
    let mut resumed = 0;
    let mut server = Server::start(&run.data, &run.log).unwrap_or_else(|e| run.fail("start", &[e]));
    let client = server.client().unwrap_or_else(|e| run.fail("client", &[e]));
    if let Err(e) = fill(&client).await {
        run.fail("fill", &[e]);
    }
    for round in 1..=ROUNDS {
        let client = server.client().unwrap_or_else(|e| run.fail("client", &[e]));
        let spec = json!({"prefix": "k/", "set": {"r": round.to_string()}});
        let id = client
            .start_tagging_job(BUCKET, &spec)
            .await
            .unwrap_or_else(|e| {
                run.fail(&format!("round {round}: start the job"), &[e.to_string()])
            });
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = std::mem::take(&mut taggers)
            .into_iter()
            .enumerate()
            .map(|(t, me)| {
                let seed = SEED ^ (round << 8) ^ t as u64;
                tokio::spawn(tag_until_stopped(client.clone(), me, stop.clone(), seed))
            })
            .collect();
        let delay = Duration::from_millis(rng.random_range(30..=300));
        tokio::time::sleep(delay).await;
        stop.store(true, Ordering::SeqCst);
        server.kill();
        for task in tasks {
            taggers.push(task.await.expect("tagger task"));
        }
        let before: Vec<String> = taggers
            .iter_mut()
            .flat_map(|t| t.problems.drain(..))
            .collect();
        if !before.is_empty() {
            run.fail(&format!("round {round}: tagging before the kill"), &before);
        }

        server = Server::start(&run.data, &run.log)
            .unwrap_or_else(|e| run.fail(&format!("round {round}: restart"), &[e]));
        let client = server.client().unwrap_or_else(|e| run.fail("client", &[e]));
        let first = client
            .tagging_job(BUCKET, Some(&id))
            .await
            .unwrap_or_else(|e| {
                run.fail(
                    &format!("round {round}: job after restart"),
                    &[e.to_string()],
                )
            });
        let was_running = first["state"] == "running";
        let end = job_end(&client, &id)
            .await
            .unwrap_or_else(|e| run.fail(&format!("round {round}: job"), &[e]));
        let mut problems = Vec::new();
        if end["state"] != "done" || end["errors"] != 0 {
            problems.push(format!("the job ended {end}"));
        }
        let recs = records(&client)
            .await
            .unwrap_or_else(|e| run.fail(&format!("round {round}: records"), &[e]));
        problems.extend(tagger_problems(&mut taggers, &recs));
        let want_r = round.to_string();
        let untouched_without_r: Vec<&String> = recs
            .iter()
            .skip(TAGGED)
            .filter(|(_, tags)| tags.get("r") != Some(&want_r))
            .map(|(k, _)| k)
            .take(5)
            .collect();
        if !untouched_without_r.is_empty() {
            problems.push(format!(
                "keys only the job touches lack r={round} after it finished: {untouched_without_r:?}"
            ));
        }
        problems.extend(index_problems(&client, &recs).await);
        if !problems.is_empty() {
            run.fail(&format!("after restart {round}"), &problems);
        }
        if was_running {
            resumed += 1;
        }
        eprintln!(
            "round {round}: killed after {delay:?}; the job {} ({} scanned)",
            if was_running {
                "resumed"
            } else {
                "had finished"
            },
            end["scanned"]
        );
    }
    assert!(
        resumed > 0,
        "no round killed the server while its job ran: the resume was never exercised"
    );
}
