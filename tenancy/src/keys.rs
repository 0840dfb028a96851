//! Access key operations of the [`Registry`]: create, list, revoke,
//! rotate. Each change goes through `Registry::mutate` (reload, change a
//! copy, write durably, publish); secrets are sealed as they are created
//! and handed out only in the returned [`NewKey`].

use crate::model::{self, KeyInfo, KeySpec, NewKey};
use crate::registry::{KeyRec, Registry, State};
use crate::{Secret, TenancyError, keygen, now_ms};

impl Registry {
    pub(crate) fn insert_key(
        &self,
        s: &mut State,
        info: KeyInfo,
        secret: Secret,
    ) -> Result<(), TenancyError> {
        if s.keys.contains_key(&info.access_key) {
            return Err(TenancyError::Conflict(format!(
                "access key {}",
                info.access_key
            )));
        }
        let sealed = self.master.seal(&info.access_key, &secret)?;
        let rec = KeyRec {
            info,
            secret,
            sealed,
        };
        s.keys.insert(rec.info.access_key.clone(), rec);
        Ok(())
    }

    pub(crate) fn new_key(
        &self,
        s: &mut State,
        tenant: &str,
        spec: KeySpec,
        given: Option<(String, Secret)>,
    ) -> Result<NewKey, TenancyError> {
        model::validate_scope(spec.buckets.as_deref())?;
        let (access_key, secret) = match given {
            Some(g) => g,
            None => (
                keygen::new_access_key(&self.rng)?,
                Secret::new(keygen::new_secret_key(&self.rng)?),
            ),
        };
        let info = KeyInfo {
            access_key,
            tenant: tenant.to_string(),
            access: spec.access,
            buckets: spec.buckets,
            created_ms: now_ms(),
        };
        self.insert_key(s, info.clone(), secret.clone())?;
        Ok(NewKey { info, secret })
    }

    /// Add a key to a tenant.
    pub fn create_key(&self, id_or_name: &str, spec: KeySpec) -> Result<NewKey, TenancyError> {
        self.mutate(|s| {
            let id = s.find(id_or_name)?.id.clone();
            self.new_key(s, &id, spec.clone(), None)
        })
    }

    /// A tenant's keys (never their secrets), oldest first.
    pub fn keys(&self, id_or_name: &str) -> Result<Vec<KeyInfo>, TenancyError> {
        self.refresh();
        let s = self.state.read();
        let id = &s.find(id_or_name)?.id;
        let mut out: Vec<KeyInfo> = s
            .keys
            .values()
            .filter(|k| &k.info.tenant == id)
            .map(|k| k.info.clone())
            .collect();
        out.sort_by(|a, b| (a.created_ms, &a.access_key).cmp(&(b.created_ms, &b.access_key)));
        Ok(out)
    }

    /// Revoke one of a tenant's keys.
    pub fn revoke_key(&self, id_or_name: &str, access_key: &str) -> Result<KeyInfo, TenancyError> {
        self.mutate(|s| {
            let id = s.find(id_or_name)?.id.clone();
            match s.keys.get(access_key) {
                Some(k) if k.info.tenant == id => {}
                _ => return Err(TenancyError::NoSuchKey(access_key.to_string())),
            }
            s.keys
                .remove(access_key)
                .map(|k| k.info)
                .ok_or_else(|| TenancyError::NoSuchKey(access_key.to_string()))
        })
    }

    /// A new key with the same access and scope as `access_key`; the old
    /// one keeps working until revoked.
    pub fn rotate_key(&self, id_or_name: &str, access_key: &str) -> Result<NewKey, TenancyError> {
        self.mutate(|s| {
            let id = s.find(id_or_name)?.id.clone();
            let spec = match s.keys.get(access_key) {
                Some(k) if k.info.tenant == id => KeySpec {
                    access: k.info.access,
                    buckets: k.info.buckets.clone(),
                },
                _ => return Err(TenancyError::NoSuchKey(access_key.to_string())),
            };
            self.new_key(s, &id, spec, None)
        })
    }
}
