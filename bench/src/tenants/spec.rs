//! One `--tenant` of the multi-tenant bench, and the run's phases.
//!
//! A spec is a name followed by `key=value` settings, comma-separated:
//! `a,weight=3,conc=32,size=4KiB,mix=get:1+put:1,objects=100,start=10,stop=20`.
//! Without `rate` a tenant is a closed loop of `conc` workers; `rate=R`
//! makes it an open loop that offers R requests/s (with at most `conc` in
//! flight), the shape of a tenant whose load does not grow with the
//! server's speed.
//! Operations in `mix` are joined by `+` (the comma separates settings),
//! and so are the S3 endpoints in `endpoints=URL+URL`: the tenant's workers
//! are dealt over them in turn (worker i uses endpoint i mod n), so one
//! tenant can spread its load over several gateways of a cluster.
//! `start` and `stop` are seconds from the start of measurement; a tenant
//! runs over `[start, stop)` and the run is cut into *phases* at every
//! start and stop, so each phase has a fixed set of active tenants and
//! its shares can be compared with the weights.

use crate::size::parse_size;
use crate::workload::{Op, parse_mix};

/// What one tenant does during the run.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantSpec {
    /// Short name (lowercase letters and digits); the bench prefixes it
    /// with a run id to name the tenant it creates.
    pub name: String,
    /// Weight given to the tenant (1..=1000).
    pub weight: u32,
    /// Requests in flight (closed loop), or at most in flight (open loop).
    pub concurrency: usize,
    /// Requests/s offered (open loop); `None`: a closed loop.
    pub rate: Option<u64>,
    /// Object size for PUT and GET.
    pub size: u64,
    /// Weighted operations.
    pub mix: Vec<(Op, u32)>,
    /// Keys drawn from this many objects (PUT first when the mix reads).
    pub objects: u64,
    /// Second of the measured run at which the tenant starts.
    pub start: u64,
    /// Second at which it stops (`None`: the end of the run).
    pub stop: Option<u64>,
    /// S3 endpoints its workers are dealt over (empty: `--endpoint`).
    pub endpoints: Vec<String>,
}

impl TenantSpec {
    /// Parses `name,key=value,...`.
    pub fn parse(s: &str) -> Result<TenantSpec, String> {
        let mut parts = s.split(',');
        let name = parts.next().unwrap_or_default().trim().to_owned();
        let valid = !name.is_empty()
            && name.len() <= 16
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !valid {
            return Err(format!("--tenant {s:?}: name must be 1-16 of [a-z0-9]"));
        }
        let mut spec = TenantSpec {
            name,
            weight: 1,
            concurrency: 32,
            rate: None,
            size: 4096,
            mix: vec![(Op::Get, 1)],
            objects: 100,
            start: 0,
            stop: None,
            endpoints: Vec::new(),
        };
        for part in parts {
            let (k, v) = part
                .trim()
                .split_once('=')
                .ok_or(format!("--tenant {s:?}: {part:?} is not key=value"))?;
            spec.set(k, v).map_err(|e| format!("--tenant {s:?}: {e}"))?;
        }
        spec.validate()
            .map_err(|e| format!("--tenant {s:?}: {e}"))?;
        Ok(spec)
    }

    fn set(&mut self, k: &str, v: &str) -> Result<(), String> {
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{k}={v}: not a number"))
        };
        match k {
            "weight" => self.weight = u32::try_from(num(v)?).map_err(|_| "weight too big")?,
            "conc" | "concurrency" => self.concurrency = usize::try_from(num(v)?).unwrap_or(0),
            "rate" => self.rate = Some(num(v)?),
            "size" => self.size = parse_size(v)?,
            "mix" => self.mix = parse_mix(&v.replace('+', ","))?,
            "objects" => self.objects = num(v)?,
            "start" => self.start = num(v)?,
            "stop" => self.stop = Some(num(v)?),
            "endpoints" => {
                self.endpoints = v.split('+').map(str::to_owned).collect();
                for e in &self.endpoints {
                    crate::cli::check_loopback("endpoints", e)?;
                }
            }
            _ => return Err(format!("unknown setting {k:?}")),
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), String> {
        if !(1..=1000).contains(&self.weight) {
            return Err("weight must be 1..=1000".to_owned());
        }
        if !(1..=crate::cli::MAX_CONCURRENCY).contains(&self.concurrency) {
            return Err("conc must be 1..=4096".to_owned());
        }
        if self.rate == Some(0) {
            return Err("rate must be at least 1 request/s".to_owned());
        }
        if self.size > crate::cli::MAX_SIZE || self.objects == 0 {
            return Err("size too big or objects = 0".to_owned());
        }
        if self.stop.is_some_and(|stop| stop <= self.start) {
            return Err("stop must be after start".to_owned());
        }
        Ok(())
    }

    /// `[start, stop)` in seconds within a run of `duration` seconds.
    pub fn window(&self, duration: u64) -> (u64, u64) {
        let stop = self.stop.unwrap_or(duration).min(duration);
        (self.start.min(stop), stop)
    }

    /// Whether the tenant runs during the whole of `[from, to)`.
    pub fn active_in(&self, duration: u64, from: u64, to: u64) -> bool {
        let (start, stop) = self.window(duration);
        start <= from && to <= stop
    }

    /// Whether the mix reads keys that must exist first.
    pub fn reads(&self) -> bool {
        self.mix.iter().any(|(op, w)| *op != Op::Put && *w > 0)
    }

    /// The mix as `get:1+put:1`.
    pub fn mix_text(&self) -> String {
        let ops: Vec<String> = self
            .mix
            .iter()
            .map(|(op, w)| format!("{}:{w}", op.name()))
            .collect();
        ops.join("+")
    }
}

/// Phase boundaries in seconds: 0, every start and stop inside the run,
/// the `extra` cuts, and `duration`, sorted and without repeats.
pub fn phases(specs: &[TenantSpec], extra: &[u64], duration: u64) -> Vec<(u64, u64)> {
    let mut cuts: Vec<u64> = vec![0, duration];
    cuts.extend(extra.iter().map(|&c| c.min(duration)));
    for s in specs {
        let (start, stop) = s.window(duration);
        cuts.extend([start, stop]);
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2).map(|w| (w[0], w[1])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_spec() {
        let s = TenantSpec::parse(
            "b,weight=3,conc=8,size=64MiB,mix=get:3+put:1,objects=4,start=5,stop=15",
        )
        .expect("valid");
        assert_eq!(s.name, "b");
        assert_eq!((s.weight, s.concurrency, s.size), (3, 8, 64 << 20));
        assert_eq!(s.mix, vec![(Op::Get, 3), (Op::Put, 1)]);
        assert_eq!((s.objects, s.start, s.stop), (4, 5, Some(15)));
        assert!(s.reads());
        assert_eq!(s.mix_text(), "get:3+put:1");
        assert_eq!(s.rate, None);
        assert!(s.endpoints.is_empty());
        let two =
            TenantSpec::parse("a,endpoints=http://127.0.0.1:1+http://127.0.0.1:2").expect("valid");
        assert_eq!(two.endpoints, ["http://127.0.0.1:1", "http://127.0.0.1:2"]);
        assert!(TenantSpec::parse("a,endpoints=http://10.0.0.1:1").is_err());
        let open = TenantSpec::parse("a,rate=2000,conc=4").expect("valid");
        assert_eq!((open.rate, open.concurrency), (Some(2000), 4));
    }

    #[test]
    fn defaults_and_refusals() {
        let s = TenantSpec::parse("a").expect("valid");
        assert_eq!((s.weight, s.concurrency, s.size), (1, 32, 4096));
        for bad in [
            "",
            "A",
            "a,weight=0",
            "a,weight=1001",
            "a,conc=0",
            "a,rate=0",
            "a,rate=fast",
            "a,start=5,stop=5",
            "a,colour=red",
            "a,weight",
            "a,mix=fly:1",
        ] {
            assert!(TenantSpec::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn phases_cut_at_every_start_and_stop() {
        let specs = [
            TenantSpec::parse("a").expect("a"),
            TenantSpec::parse("b,start=10,stop=20").expect("b"),
            TenantSpec::parse("c,stop=99").expect("c"),
        ];
        assert_eq!(phases(&specs, &[], 30), vec![(0, 10), (10, 20), (20, 30)]);
        assert_eq!(phases(&specs[..1], &[5, 99], 30), vec![(0, 5), (5, 30)]);
        assert!(specs[1].active_in(30, 10, 20));
        assert!(!specs[1].active_in(30, 20, 30));
        assert!(specs[2].active_in(30, 20, 30));
    }
}
