//! Tests of the registry: bootstrap, persistence, encryption at rest,
//! key lifecycle, migration, reload by a second process.

use super::*;
use crate::model::{KeyAccess, KeySpec, Limits};

fn open(dir: &Path) -> (Registry, Bootstrap) {
    Registry::open(dir, None, None).expect("open")
}

fn spec(name: &str) -> TenantSpec {
    TenantSpec {
        name: name.into(),
        ..TenantSpec::default()
    }
}

#[test]
fn first_open_creates_the_default_tenant_and_reopen_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (reg, boot) = open(dir.path());
    let Bootstrap::Created { tenant, key } = boot else {
        panic!("expected a new registry");
    };
    assert_eq!(tenant.name, DEFAULT_TENANT);
    assert!(tenant.id.starts_with("t-") && tenant.id.len() == 18);
    let g = reg.resolve(&key.info.access_key).expect("resolve");
    assert_eq!(g.secret, key.secret);
    drop(reg);
    let (reg2, boot2) = open(dir.path());
    assert!(
        matches!(boot2, Bootstrap::Existing { access_key: Some(ref k) } if *k == key.info.access_key)
    );
    assert_eq!(
        reg2.resolve(&key.info.access_key).expect("again").secret,
        key.secret
    );
}

#[test]
fn operator_first_key_is_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let init = InitialKey {
        access_key: "AKIAIOSFODNN7EXAMPLE".into(),
        secret: Secret::new("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into()),
    };
    let (reg, _) = Registry::open(dir.path(), None, Some(init)).expect("open");
    let g = reg.resolve("AKIAIOSFODNN7EXAMPLE").expect("resolve");
    assert_eq!(
        g.secret.expose(),
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    );
}

#[test]
fn no_secret_is_stored_in_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (reg, _) = open(dir.path());
    let (_, k) = reg.create_tenant(spec("acme")).expect("create");
    let k2 = reg.create_key("acme", KeySpec::default()).expect("key");
    for entry in std::fs::read_dir(dir.path().join("tenancy")).expect("ls") {
        let bytes = std::fs::read(entry.expect("entry").path()).expect("read");
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(k.secret.expose()));
        assert!(!text.contains(k2.secret.expose()));
    }
}

#[test]
fn wrong_master_key_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(open(dir.path()));
    let other = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [9u8; 32]);
    let err = Registry::open(dir.path(), Some(&other), None).expect_err("wrong key");
    assert!(matches!(err, TenancyError::Corrupt(_)));
}

#[test]
fn tenant_lifecycle_and_validation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (reg, _) = open(dir.path());
    let mut s = spec("acme");
    s.weight = Some(2);
    s.limits = Limits {
        quota_bytes: Some(100),
        ..Limits::default()
    };
    let (t, _) = reg.create_tenant(s).expect("create");
    assert!(matches!(
        reg.create_tenant(spec("acme")),
        Err(TenancyError::Conflict(_))
    ));
    assert!(matches!(
        reg.create_tenant(spec("Bad")),
        Err(TenancyError::Invalid(_))
    ));
    assert_eq!(
        reg.tenant(&t.id).expect("by id"),
        reg.tenant("acme").expect("by name")
    );
    let patch: TenantPatch = serde_json::from_str(r#"{"weight":5}"#).expect("json");
    assert_eq!(reg.update_tenant("acme", &patch).expect("patch").weight, 5);
    let bad: TenantPatch = serde_json::from_str(r#"{"weight":0}"#).expect("json");
    assert!(reg.update_tenant("acme", &bad).is_err());
    assert_eq!(reg.tenant("acme").expect("unchanged").weight, 5);
    let st = reg
        .set_status("acme", TenantStatus::Suspended)
        .expect("suspend");
    assert_eq!(st.status, TenantStatus::Suspended);
    assert_eq!(reg.tenants().len(), 2);
    reg.delete_tenant("acme").expect("delete");
    assert!(matches!(
        reg.tenant("acme"),
        Err(TenancyError::NoSuchTenant(_))
    ));
    assert!(reg.keys(&t.id).is_err());
}

#[test]
fn keys_are_created_listed_rotated_and_revoked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (reg, _) = open(dir.path());
    let (t, first) = reg.create_tenant(spec("acme")).expect("create");
    let ro = reg
        .create_key(
            "acme",
            KeySpec {
                access: KeyAccess::ReadOnly,
                buckets: Some(vec!["logs".into()]),
            },
        )
        .expect("ro");
    let listed = reg.keys("acme").expect("list");
    assert_eq!(listed.len(), 2);
    let rotated = reg.rotate_key("acme", &ro.info.access_key).expect("rotate");
    assert_eq!(rotated.info.access, KeyAccess::ReadOnly);
    assert_eq!(rotated.info.buckets, Some(vec!["logs".to_string()]));
    assert!(reg.resolve(&ro.info.access_key).is_some(), "old key stays");
    reg.revoke_key(&t.id, &ro.info.access_key).expect("revoke");
    assert!(reg.resolve(&ro.info.access_key).is_none());
    assert!(
        matches!(
            reg.revoke_key("default", &first.info.access_key),
            Err(TenancyError::NoSuchKey(_))
        ),
        "another tenant's key is not found"
    );
    let (reg2, _) = open(dir.path());
    assert_eq!(reg2.keys("acme").expect("list").len(), 2);
}

#[test]
fn a_second_process_sees_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, _) = open(dir.path());
    let (b, _) = open(dir.path());
    let (_, k) = a.create_tenant(spec("acme")).expect("create");
    assert!(b.resolve(&k.info.access_key).is_some());
    b.revoke_key("acme", &k.info.access_key)
        .expect("revoke via b");
    assert!(a.resolve(&k.info.access_key).is_none());
}

#[test]
fn legacy_keys_file_is_migrated_and_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = dir.path().join("tenancy");
    std::fs::create_dir_all(&t).expect("mkdir");
    std::fs::write(
        t.join("keys.json"),
        r#"{"format":1,"keys":[{"access_key":"LWOLDKEY","secret_key":"old-secret-1","tenant":"default","created_ms":1}]}"#,
    )
    .expect("write");
    let (reg, boot) = open(dir.path());
    assert!(matches!(boot, Bootstrap::Existing { access_key: Some(ref k) } if k == "LWOLDKEY"));
    let g = reg.resolve("LWOLDKEY").expect("migrated");
    assert_eq!(g.tenant.id, "default");
    assert_eq!(g.secret.expose(), "old-secret-1");
    assert!(!t.join("keys.json").exists());
}

/// A compare-and-swap document in memory, as the cluster catalog keeps it.
#[derive(Default)]
struct SharedDoc(parking_lot::Mutex<Option<(u64, RegistryFile)>>);

impl RegistryBackend for SharedDoc {
    fn location(&self) -> String {
        "memory".into()
    }

    fn version(&self) -> Result<Option<Version>, TenancyError> {
        Ok(self.0.lock().as_ref().map(|(v, _)| Version(v.to_string())))
    }

    fn read(&self) -> Result<Option<(Version, RegistryFile)>, TenancyError> {
        let doc = self.0.lock();
        Ok(doc.as_ref().map(|(v, f)| {
            let copy: RegistryFile =
                serde_json::from_value(serde_json::to_value(f).expect("encode")).expect("decode");
            (Version(v.to_string()), copy)
        }))
    }

    fn write(
        &self,
        expected: Option<&Version>,
        file: &RegistryFile,
    ) -> Result<Version, TenancyError> {
        let mut doc = self.0.lock();
        let now = doc.as_ref().map(|(v, _)| Version(v.to_string()));
        if now.as_ref() != expected {
            return Err(TenancyError::Stale);
        }
        let next = doc.as_ref().map_or(1, |(v, _)| v + 1);
        let copy =
            serde_json::from_value(serde_json::to_value(file).expect("encode")).expect("decode");
        *doc = Some((next, copy));
        Ok(Version(next.to_string()))
    }
}

#[test]
fn two_gateways_on_one_shared_registry_lose_no_change() {
    let doc: Arc<SharedDoc> = Arc::new(SharedDoc::default());
    let master = || MasterKey::from_bytes(&[7u8; 32]).expect("master");
    let (a, boot) = Registry::open_with(doc.clone(), master(), None, None).expect("a");
    assert!(matches!(boot, Bootstrap::Created { .. }));
    let (b, boot) = Registry::open_with(doc.clone(), master(), None, None).expect("b");
    assert!(matches!(boot, Bootstrap::Existing { .. }));

    // Alternating writers: each sees the other's change at once.
    let mut made = Vec::new();
    for i in 0..10 {
        let (reg, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let (t, k) = reg.create_tenant(spec(&format!("t{i}"))).expect("create");
        assert!(
            other.resolve(&k.info.access_key).is_some(),
            "seen by the other at once"
        );
        made.push((t, k));
    }
    // Racing writers: swaps lost to the other are retried, none is lost.
    std::thread::scope(|scope| {
        for (n, reg) in [(0, &a), (1, &b)] {
            scope.spawn(move || {
                for i in 0..25 {
                    reg.create_tenant(spec(&format!("race-{n}-{i}")))
                        .expect("create");
                }
            });
        }
    });
    assert_eq!(a.tenants().len(), 61);
    assert_eq!(b.tenants().len(), 61);

    // A revocation through one is refused by the other.
    let (t, k) = &made[3];
    b.revoke_key(&t.id, &k.info.access_key).expect("revoke");
    assert!(a.resolve(&k.info.access_key).is_none());
    a.set_status(&made[4].0.id, TenantStatus::Suspended)
        .expect("suspend");
    let g = b.resolve(&made[4].1.info.access_key).expect("grant");
    assert_eq!(g.tenant.status, TenantStatus::Suspended);
}
