//! The [`Registry`]: every tenant and access key, in memory and in its
//! [`RegistryBackend`] (the data directory's file, or the cluster's
//! catalog).
//!
//! Reads (`resolve`, listings) take a read lock on the in-memory state.
//! Every change runs under one write mutex: reload if the stored version
//! moved, apply the change to a copy, write the copy durably by
//! compare-and-swap on the version read, then publish it. A swap that
//! loses to another writer (another gateway) reloads and re-applies the
//! change (up to 32 times: each loss is another writer's success). So a change is acknowledged only once it
//! is stored, no writer loses another's change, and a failed write leaves
//! memory and storage unchanged.
//!
//! Several gateways: each reloads when the stored version changes,
//! checked on every `resolve` miss of the caller's cache, so a key revoked
//! through any gateway stops working everywhere within the callers' cache
//! TTL.

use crate::backend::{FileBackend, RegistryBackend, Version};
use crate::crypt::MasterKey;
use crate::model::{self, Grant, KeyInfo, NewKey, Tenant, TenantPatch, TenantSpec, TenantStatus};
use crate::persist::{self, RegistryFile, StoredKey};
use crate::{DEFAULT_TENANT, Secret, TenancyError, keygen, now_ms};
use parking_lot::{Mutex, RwLock};
use ring::rand::{SecureRandom, SystemRandom};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Compare-and-swap attempts of one change before it answers Stale.
const SWAP_ATTEMPTS: usize = 32;

/// An operator-chosen first key (used only when the registry is created).
#[derive(Debug, Clone)]
pub struct InitialKey {
    /// Access key id.
    pub access_key: String,
    /// Secret.
    pub secret: Secret,
}

/// What opening the registry found.
#[derive(Debug)]
pub enum Bootstrap {
    /// New registry: the default tenant and its first key (show once).
    Created {
        /// The default tenant.
        tenant: Box<Tenant>,
        /// Its first key, with the secret.
        key: Box<NewKey>,
    },
    /// An existing registry; the default tenant's oldest key, if any.
    Existing {
        /// Access key id of the default tenant's oldest key.
        access_key: Option<String>,
    },
}

#[derive(Clone)]
pub(crate) struct KeyRec {
    pub(crate) info: KeyInfo,
    pub(crate) secret: Secret,
    pub(crate) sealed: String,
}

#[derive(Clone, Default)]
pub(crate) struct State {
    pub(crate) tenants: BTreeMap<String, Tenant>,
    pub(crate) keys: BTreeMap<String, KeyRec>,
    pub(crate) version: Option<Version>,
}

impl State {
    pub(crate) fn find(&self, id_or_name: &str) -> Result<&Tenant, TenancyError> {
        self.tenants
            .get(id_or_name)
            .or_else(|| self.tenants.values().find(|t| t.name == id_or_name))
            .ok_or_else(|| TenancyError::NoSuchTenant(id_or_name.to_string()))
    }

    fn find_mut(&mut self, id_or_name: &str) -> Result<&mut Tenant, TenancyError> {
        let id = self.find(id_or_name)?.id.clone();
        self.tenants
            .get_mut(&id)
            .ok_or(TenancyError::NoSuchTenant(id))
    }

    fn name_taken(&self, name: &str, except: &str) -> bool {
        self.tenants
            .values()
            .any(|t| t.name == name && t.id != except)
    }
}

/// Tenants and keys of one data directory or cluster.
pub struct Registry {
    backend: Arc<dyn RegistryBackend>,
    pub(crate) master: MasterKey,
    pub(crate) rng: SystemRandom,
    pub(crate) state: RwLock<State>,
    write_lock: Mutex<()>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("location", &self.backend.location())
            .finish()
    }
}

impl Registry {
    /// Open the registry of `data_dir` (master key from `master_env` or the
    /// key file). A new registry gets the default tenant, whose first key
    /// is `initial` or generated; a pre-release `keys.json` is migrated
    /// (its tenant keeps id `default`) and deleted.
    pub fn open(
        data_dir: &Path,
        master_env: Option<&str>,
        initial: Option<InitialKey>,
    ) -> Result<(Registry, Bootstrap), TenancyError> {
        let dir = data_dir.join("tenancy");
        persist::create_private_dir(&dir)?;
        let master = MasterKey::load(&dir, master_env)?;
        let backend = Arc::new(FileBackend::new(&dir.join("tenants.json")));
        let legacy = dir.join("keys.json");
        Self::open_with(backend, master, initial, Some(&legacy))
    }

    /// Open the registry stored in `backend`, secrets sealed by `master`;
    /// bootstrap it as [`Registry::open`] does when nothing is stored.
    pub fn open_with(
        backend: Arc<dyn RegistryBackend>,
        master: MasterKey,
        initial: Option<InitialKey>,
        legacy: Option<&Path>,
    ) -> Result<(Registry, Bootstrap), TenancyError> {
        let reg = Registry {
            backend,
            master,
            rng: SystemRandom::new(),
            state: RwLock::new(State::default()),
            write_lock: Mutex::new(()),
        };
        if let Some(state) = reg.load()? {
            *reg.state.write() = state;
            let access_key = reg.default_key();
            return Ok((reg, Bootstrap::Existing { access_key }));
        }
        if let Some(legacy) = legacy.filter(|l| l.exists()) {
            reg.migrate(legacy)?;
            let access_key = reg.default_key();
            return Ok((reg, Bootstrap::Existing { access_key }));
        }
        let boot = reg.bootstrap(initial)?;
        Ok((reg, boot))
    }

    fn bootstrap(&self, initial: Option<InitialKey>) -> Result<Bootstrap, TenancyError> {
        let spec = TenantSpec {
            name: DEFAULT_TENANT.into(),
            ..TenantSpec::default()
        };
        let (tenant, key) = match initial {
            None => self.create_tenant(spec)?,
            Some(k) => {
                keygen::validate_access_key(&k.access_key)?;
                keygen::validate_secret_key(k.secret.expose())?;
                self.create_tenant_with(spec, Some((k.access_key, k.secret)))?
            }
        };
        Ok(Bootstrap::Created {
            tenant: Box::new(tenant),
            key: Box::new(key),
        })
    }

    fn migrate(&self, legacy: &Path) -> Result<(), TenancyError> {
        let keys = persist::read_legacy(legacy)?;
        self.mutate(|s| {
            for k in &keys {
                if !s.tenants.contains_key(&k.tenant) {
                    let name = if k.tenant == DEFAULT_TENANT {
                        DEFAULT_TENANT.to_string()
                    } else {
                        format!("legacy-{}", k.tenant)
                    };
                    s.tenants
                        .insert(k.tenant.clone(), new_tenant(k.tenant.clone(), name, 1));
                }
                let info = KeyInfo {
                    access_key: k.access_key.clone(),
                    tenant: k.tenant.clone(),
                    access: model::KeyAccess::ReadWrite,
                    buckets: None,
                    created_ms: k.created_ms,
                };
                self.insert_key(s, info, Secret::new(k.secret_key.clone()))?;
            }
            Ok(())
        })?;
        std::fs::remove_file(legacy).map_err(persist::io_err("removing", legacy))?;
        persist::sync_dir(legacy)
    }

    fn default_key(&self) -> Option<String> {
        let s = self.state.read();
        let t = s.find(DEFAULT_TENANT).ok()?;
        s.keys
            .values()
            .filter(|k| k.info.tenant == t.id)
            .min_by_key(|k| (k.info.created_ms, k.info.access_key.clone()))
            .map(|k| k.info.access_key.clone())
    }

    /// Where the registry is stored (operator-facing; holds no clear secret).
    pub fn location(&self) -> String {
        self.backend.location()
    }

    /// The stored registry as state (`None`: nothing stored yet).
    fn load(&self) -> Result<Option<State>, TenancyError> {
        let Some((version, file)) = self.backend.read()? else {
            return Ok(None);
        };
        let mut s = State {
            version: Some(version),
            ..State::default()
        };
        for t in file.tenants {
            s.tenants.insert(t.id.clone(), t);
        }
        for k in file.keys {
            let secret = self.master.open(&k.access_key, &k.sealed_secret)?;
            let info = KeyInfo {
                access_key: k.access_key,
                tenant: k.tenant,
                access: k.access,
                buckets: k.buckets,
                created_ms: k.created_ms,
            };
            let rec = KeyRec {
                info,
                secret,
                sealed: k.sealed_secret,
            };
            s.keys.insert(rec.info.access_key.clone(), rec);
        }
        Ok(Some(s))
    }

    /// Reload when another process changed the stored registry. A store
    /// that cannot be read keeps the last good state (logged; retried
    /// next time).
    pub(crate) fn refresh(&self) {
        let now = match self.backend.version() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "tenancy registry version check failed");
                return;
            }
        };
        if now.is_none() || now == self.state.read().version {
            return;
        }
        match self.load() {
            Ok(Some(s)) => *self.state.write() = s,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "tenancy registry reload failed; keeping the last state")
            }
        }
    }

    /// Apply `f` to a copy of the state, store it by compare-and-swap,
    /// publish it; on a lost swap, reload and apply `f` again.
    pub(crate) fn mutate<T>(
        &self,
        mut f: impl FnMut(&mut State) -> Result<T, TenancyError>,
    ) -> Result<T, TenancyError> {
        let _guard = self.write_lock.lock();
        for _ in 0..SWAP_ATTEMPTS {
            self.refresh();
            let mut next = self.state.read().clone();
            let out = f(&mut next)?;
            match self.backend.write(next.version.as_ref(), &to_file(&next)) {
                Ok(version) => {
                    next.version = Some(version);
                    *self.state.write() = next;
                    return Ok(out);
                }
                Err(TenancyError::Stale) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(TenancyError::Stale)
    }

    /// Create a tenant and its first key.
    pub fn create_tenant(&self, spec: TenantSpec) -> Result<(Tenant, NewKey), TenancyError> {
        self.create_tenant_with(spec, None)
    }

    fn create_tenant_with(
        &self,
        spec: TenantSpec,
        key: Option<(String, Secret)>,
    ) -> Result<(Tenant, NewKey), TenancyError> {
        model::validate_name(&spec.name)?;
        let weight = spec.weight.unwrap_or(1);
        model::validate_weight(weight)?;
        model::validate_limits(&spec.limits)?;
        let id = self.new_tenant_id()?;
        self.mutate(|s| {
            if s.name_taken(&spec.name, "") {
                return Err(TenancyError::Conflict(format!("tenant {}", spec.name)));
            }
            let mut t = new_tenant(id.clone(), spec.name.clone(), weight);
            t.limits = spec.limits.clone();
            s.tenants.insert(id.clone(), t.clone());
            let k = self.new_key(s, &id, spec.key.clone(), key.clone())?;
            Ok((t, k))
        })
    }

    fn new_tenant_id(&self) -> Result<String, TenancyError> {
        let mut raw = [0u8; 8];
        self.rng.fill(&mut raw).map_err(|_| TenancyError::Random)?;
        Ok(format!("t-{}", hex::encode(raw)))
    }

    /// Every tenant, by id.
    pub fn tenants(&self) -> Vec<Tenant> {
        self.refresh();
        self.state.read().tenants.values().cloned().collect()
    }

    /// The tenant with this id or name.
    pub fn tenant(&self, id_or_name: &str) -> Result<Tenant, TenancyError> {
        self.refresh();
        self.state.read().find(id_or_name).cloned()
    }

    /// Change a tenant's name, weight or limits.
    pub fn update_tenant(
        &self,
        id_or_name: &str,
        patch: &TenantPatch,
    ) -> Result<Tenant, TenancyError> {
        self.mutate(|s| {
            let mut t = s.find(id_or_name)?.clone();
            patch.apply(&mut t);
            model::validate_name(&t.name)?;
            model::validate_weight(t.weight)?;
            model::validate_limits(&t.limits)?;
            if s.name_taken(&t.name, &t.id) {
                return Err(TenancyError::Conflict(format!("tenant {}", t.name)));
            }
            s.tenants.insert(t.id.clone(), t.clone());
            Ok(t)
        })
    }

    /// Suspend or resume a tenant.
    pub fn set_status(
        &self,
        id_or_name: &str,
        status: TenantStatus,
    ) -> Result<Tenant, TenancyError> {
        self.mutate(|s| {
            let t = s.find_mut(id_or_name)?;
            t.status = status;
            Ok(t.clone())
        })
    }

    /// Remove a tenant and all its keys (the caller has dealt with its
    /// buckets).
    pub fn delete_tenant(&self, id_or_name: &str) -> Result<Tenant, TenancyError> {
        self.mutate(|s| {
            let t = s.find(id_or_name)?.clone();
            s.keys.retain(|_, k| k.info.tenant != t.id);
            s.tenants.remove(&t.id);
            Ok(t)
        })
    }

    /// Everything needed to authenticate `access_key`, reloading the file
    /// first if another process changed it.
    pub fn resolve(&self, access_key: &str) -> Option<Grant> {
        self.refresh();
        let s = self.state.read();
        let k = s.keys.get(access_key)?;
        let tenant = s.tenants.get(&k.info.tenant)?.clone();
        Some(Grant {
            tenant,
            key: k.info.clone(),
            secret: k.secret.clone(),
        })
    }
}

fn new_tenant(id: String, name: String, weight: u32) -> Tenant {
    Tenant {
        id,
        name,
        weight,
        limits: model::Limits::default(),
        status: TenantStatus::Active,
        created_ms: now_ms(),
    }
}

fn to_file(s: &State) -> RegistryFile {
    RegistryFile {
        format: persist::FORMAT,
        tenants: s.tenants.values().cloned().collect(),
        keys: s
            .keys
            .values()
            .map(|k| StoredKey {
                access_key: k.info.access_key.clone(),
                tenant: k.info.tenant.clone(),
                access: k.info.access,
                buckets: k.info.buckets.clone(),
                created_ms: k.info.created_ms,
                sealed_secret: k.sealed.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
