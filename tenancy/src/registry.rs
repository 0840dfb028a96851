//! The [`Registry`]: every tenant and access key, in memory and on disk.
//!
//! Reads (`resolve`, listings) take a read lock on the in-memory state.
//! Every change runs under one write mutex: reload the file if another
//! process changed it, apply the change to a copy, write the copy durably
//! ([`crate::persist`]), then publish it. So a change is acknowledged only
//! once it is on disk, and a failed write leaves memory and disk unchanged.
//!
//! Several gateways over one data directory: each reloads the file when
//! its stamp (inode, size, mtime) changes, checked on every `resolve`
//! miss of the caller's cache, so a key revoked through any gateway stops
//! working everywhere within the callers' cache TTL. Changes themselves
//! should go through one admin endpoint at a time (no cross-process lock).

use crate::crypt::MasterKey;
use crate::model::{self, Grant, KeyInfo, NewKey, Tenant, TenantPatch, TenantSpec, TenantStatus};
use crate::persist::{self, RegistryFile, Stamp, StoredKey};
use crate::{DEFAULT_TENANT, Secret, TenancyError, keygen, now_ms};
use parking_lot::{Mutex, RwLock};
use ring::rand::{SecureRandom, SystemRandom};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    pub(crate) stamp: Option<Stamp>,
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

/// Tenants and keys of one data directory.
pub struct Registry {
    path: PathBuf,
    pub(crate) master: MasterKey,
    pub(crate) rng: SystemRandom,
    pub(crate) state: RwLock<State>,
    write_lock: Mutex<()>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("path", &self.path)
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
        let reg = Registry {
            path: dir.join("tenants.json"),
            master,
            rng: SystemRandom::new(),
            state: RwLock::new(State::default()),
            write_lock: Mutex::new(()),
        };
        if reg.path.exists() {
            *reg.state.write() = reg.load()?;
            let access_key = reg.default_key();
            return Ok((reg, Bootstrap::Existing { access_key }));
        }
        let legacy = dir.join("keys.json");
        if legacy.exists() {
            reg.migrate(&legacy)?;
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
            for k in keys {
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
                    access_key: k.access_key,
                    tenant: k.tenant,
                    access: model::KeyAccess::ReadWrite,
                    buckets: None,
                    created_ms: k.created_ms,
                };
                self.insert_key(s, info, Secret::new(k.secret_key))?;
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

    /// Path of the registry file (operator-facing; holds no clear secret).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load(&self) -> Result<State, TenancyError> {
        let stamp = persist::stamp(&self.path);
        let file = persist::read(&self.path)?;
        let mut s = State {
            stamp,
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
        Ok(s)
    }

    /// Reload when another process rewrote the file. A file that cannot
    /// be read keeps the last good state (logged; retried next time).
    pub(crate) fn refresh(&self) {
        let now = persist::stamp(&self.path);
        if now.is_none() || now == self.state.read().stamp {
            return;
        }
        match self.load() {
            Ok(s) => *self.state.write() = s,
            Err(e) => {
                tracing::warn!(error = %e, "tenancy registry reload failed; keeping the last state")
            }
        }
    }

    /// Apply `f` to a copy of the state, persist it, publish it.
    pub(crate) fn mutate<T>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, TenancyError>,
    ) -> Result<T, TenancyError> {
        let _guard = self.write_lock.lock();
        self.refresh();
        let mut next = self.state.read().clone();
        let out = f(&mut next)?;
        persist::write(&self.path, &to_file(&next))?;
        next.stamp = persist::stamp(&self.path);
        *self.state.write() = next;
        Ok(out)
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
            let mut t = new_tenant(id.clone(), spec.name, weight);
            t.limits = spec.limits;
            s.tenants.insert(id.clone(), t.clone());
            let k = self.new_key(s, &id, spec.key, key)?;
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
