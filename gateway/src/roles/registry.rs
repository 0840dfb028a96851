//! The tenant registry of a cluster, kept as the catalog document
//! [`REGISTRY_DOC`] (JSON, secrets sealed) and read by every gateway
//! through the store client: a [`laneway_tenancy::RegistryBackend`] over
//! [`StoreClient::catalog_doc`] and [`StoreClient::put_catalog_doc`].
//!
//! The registry asks its backend synchronously (its version on every
//! credential cache miss), so the backend answers reads from a copy that
//! a background task refreshes every [`REFRESH_EVERY`]: a change made
//! through any gateway reaches every other within that plus the key
//! cache's TTL (well within 5 s). Writes go to the catalog node at once,
//! by compare-and-swap on the document's version.
//!
//! Secrets are sealed under a master key every gateway must share:
//! `LANEWAY_MASTER_KEY` when set, else one derived (HKDF-SHA256) from the
//! cluster secret, which every gateway and node already holds.

use laneway_store::StoreClient;
use laneway_tenancy::TenancyError;
use laneway_tenancy::backend::{RegistryBackend, Version};
use laneway_tenancy::crypt::MasterKey;
use laneway_tenancy::persist::RegistryFile;
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Duration;

/// The catalog document holding the registry.
pub const REGISTRY_DOC: &str = "tenancy/registry";

/// How often every gateway re-reads the registry document.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// The last copy read: (version, bytes); version 0 is "nothing stored".
type Copy = Option<(u64, Vec<u8>)>;

/// The registry document in the catalog.
pub struct CatalogBackend {
    store: Arc<dyn StoreClient>,
    copy: RwLock<Copy>,
    runtime: tokio::runtime::Handle,
}

impl CatalogBackend {
    /// Read the document once (so a gateway starts with the registry) and
    /// keep it fresh in the background.
    pub async fn open(store: Arc<dyn StoreClient>) -> Result<Arc<CatalogBackend>, TenancyError> {
        let copy = store.catalog_doc(REGISTRY_DOC).await.map_err(store_err)?;
        let backend = Arc::new(CatalogBackend {
            store,
            copy: RwLock::new(copy),
            runtime: tokio::runtime::Handle::current(),
        });
        spawn_refresh(Arc::downgrade(&backend));
        Ok(backend)
    }

    /// Run `fut` to completion from the registry's synchronous call.
    fn block<T>(&self, fut: impl std::future::Future<Output = T>) -> T {
        tokio::task::block_in_place(|| self.runtime.block_on(fut))
    }
}

fn spawn_refresh(weak: std::sync::Weak<CatalogBackend>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REFRESH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(b) = weak.upgrade() else { return };
            match b.store.catalog_doc(REGISTRY_DOC).await {
                Ok(copy) => *b.copy.write() = copy,
                Err(e) => {
                    tracing::warn!(error = %e, "registry refresh failed; keeping the last copy")
                }
            }
        }
    });
}

fn store_err(e: laneway_store::StoreError) -> TenancyError {
    TenancyError::Backend(format!("catalog: {e}"))
}

fn version_of(v: u64) -> Version {
    Version(v.to_string())
}

impl RegistryBackend for CatalogBackend {
    fn location(&self) -> String {
        format!("the cluster catalog (document {REGISTRY_DOC})")
    }

    fn version(&self) -> Result<Option<Version>, TenancyError> {
        Ok(self.copy.read().as_ref().map(|(v, _)| version_of(*v)))
    }

    fn read(&self) -> Result<Option<(Version, RegistryFile)>, TenancyError> {
        let copy = self.copy.read().clone();
        let Some((v, bytes)) = copy else {
            return Ok(None);
        };
        let file: RegistryFile = serde_json::from_slice(&bytes)
            .map_err(|e| TenancyError::Corrupt(format!("{REGISTRY_DOC}: {e}")))?;
        Ok(Some((version_of(v), file)))
    }

    fn write(
        &self,
        expected: Option<&Version>,
        file: &RegistryFile,
    ) -> Result<Version, TenancyError> {
        let expected = match expected {
            None => 0,
            Some(v) => {
                v.0.parse::<u64>()
                    .map_err(|_| TenancyError::Corrupt(format!("registry version {:?}", v.0)))?
            }
        };
        let bytes = serde_json::to_vec(file)
            .map_err(|e| TenancyError::Corrupt(format!("encoding the registry: {e}")))?;
        let put = self.block(
            self.store
                .put_catalog_doc(REGISTRY_DOC, expected, bytes.clone()),
        );
        match put {
            Ok(v) => {
                *self.copy.write() = Some((v, bytes));
                Ok(version_of(v))
            }
            Err(laneway_store::StoreError::PreconditionFailed) => {
                // Another gateway wrote first: take its copy now.
                if let Ok(copy) = self.block(self.store.catalog_doc(REGISTRY_DOC)) {
                    *self.copy.write() = copy;
                }
                Err(TenancyError::Stale)
            }
            Err(e) => Err(store_err(e)),
        }
    }
}

/// The master key of a cluster's registry: `LANEWAY_MASTER_KEY`, or
/// derived from the cluster secret.
pub fn master_key(cluster_secret: &[u8]) -> Result<MasterKey, TenancyError> {
    if let Ok(text) = std::env::var(laneway_tenancy::crypt::MASTER_KEY_ENV)
        && !text.trim().is_empty()
    {
        return MasterKey::from_base64(&text);
    }
    let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"laneway cluster registry");
    let prk = salt.extract(cluster_secret);
    let mut raw = [0u8; 32];
    prk.expand(&[b"master key v1"], Len32)
        .and_then(|okm| okm.fill(&mut raw))
        .map_err(|_| TenancyError::Random)?;
    MasterKey::from_bytes(&raw)
}

/// HKDF output length of 32 bytes.
struct Len32;

impl ring::hkdf::KeyType for Len32 {
    fn len(&self) -> usize {
        32
    }
}
