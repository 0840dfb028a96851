//! [`ConnTrust`]: which access key a connection has proved it holds, so
//! that a claimed key picks its tenant's lane only once it is proved.
//!
//! The lanes layer admits a request before s3s checks its signature (the
//! check is work, and work is what the lanes schedule). If the key a
//! request merely *claims* chose the lane, a forger who knows a victim's
//! key id could fill the victim's queue with requests that are refused
//! later, and the victim's own requests would find its lane full.
//!
//! So trust is per connection. Every connection starts unproved; once s3s
//! has verified a request's signature and [`crate::request::auth::TenantAccess`]
//! has let it through, the connection remembers that access key
//! ([`ConnTrust::prove`]). A later request on the same connection that
//! claims the same key goes to the key's tenant lane; any other request
//! (no key, an unknown key, a key this connection has not proved, or the
//! first request of a connection) goes to one of [`UNPROVED_LANES`]
//! shared lanes of weight 1, picked by the client's address. A forger
//! fills only the unproved lane of its own address, and a tenant's
//! proved connections never queue behind it. SDKs keep connections
//! alive, so only the first request of each connection pays the
//! unproved lane's weight.
//!
//! Metrics still name the tenant a request claims (`anonymous` for no
//! key or an unknown one): a forgery shows as that tenant's signature
//! error, and a tenant's first requests count as its own.

use parking_lot::Mutex;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Shared lanes that requests on unproved connections are spread over.
pub const UNPROVED_LANES: u64 = 16;

/// What one connection has proved. Put into every request's extensions
/// (as `Arc<ConnTrust>`) by the connection that carries it.
#[derive(Debug)]
pub struct ConnTrust {
    shard: u64,
    proved: Mutex<Option<Arc<str>>>,
}

impl ConnTrust {
    /// An unproved connection from `peer`.
    pub fn new(peer: Option<SocketAddr>) -> Arc<ConnTrust> {
        Arc::new(ConnTrust {
            shard: peer.map_or(0, |p| shard_of(p.ip())),
            proved: Mutex::new(None),
        })
    }

    /// Records that a request on this connection was verified as signed
    /// with `access_key`.
    pub fn prove(&self, access_key: &str) {
        let mut proved = self.proved.lock();
        if proved.as_deref() != Some(access_key) {
            *proved = Some(Arc::from(access_key));
        }
    }

    /// Whether this connection has proved `access_key` (the last key it
    /// proved).
    pub fn has_proved(&self, access_key: &str) -> bool {
        self.proved.lock().as_deref() == Some(access_key)
    }

    /// The name of this connection's unproved lane.
    pub fn unproved_lane(&self) -> String {
        unproved_lane(self.shard)
    }
}

/// The name of unproved lane `shard`.
pub fn unproved_lane(shard: u64) -> String {
    format!("{}/{shard}", super::ANONYMOUS)
}

/// The unproved lane of a client address: a /24 (IPv4) or /48 (IPv6)
/// network shares one, so a forger cannot spread itself over all lanes
/// from one network by changing its port or host part.
fn shard_of(ip: IpAddr) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match ip {
        IpAddr::V4(v4) => v4.octets()[..3].hash(&mut h),
        IpAddr::V6(v6) => v6.octets()[..6].hash(&mut h),
    }
    h.finish() % UNPROVED_LANES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_trusts_only_the_key_it_proved() {
        let t = ConnTrust::new(Some("10.1.2.3:5000".parse().expect("addr")));
        assert!(!t.has_proved("AK1"));
        t.prove("AK1");
        assert!(t.has_proved("AK1"));
        assert!(!t.has_proved("AK2"));
        t.prove("AK2");
        assert!(t.has_proved("AK2") && !t.has_proved("AK1"));
    }

    #[test]
    fn one_network_shares_one_unproved_lane() {
        let a = ConnTrust::new(Some("10.1.2.3:5000".parse().expect("addr")));
        let b = ConnTrust::new(Some("10.1.2.200:6000".parse().expect("addr")));
        assert_eq!(a.unproved_lane(), b.unproved_lane());
        assert!(a.unproved_lane().starts_with("anonymous/"));
        assert_eq!(ConnTrust::new(None).unproved_lane(), "anonymous/0");
    }
}
