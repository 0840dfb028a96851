//! Fuzz target: admin API JSON bodies (tenancy provisioning requests) and
//! the registry file they end up in.
//!
//! Input: one JSON document, decoded as every body the admin API takes
//! ([`api::body`]: `CreateTenantBody`, [`TenantPatch`], [`KeySpec`]) and as
//! the on-disk [`RegistryFile`]. Checks: no panic; a create request that
//! passes the registry's checks gives a [`Tenant`] whose JSON (as stored in
//! `tenants.json`) reads back equal; so does a tenant after a valid patch;
//! a registry file that decodes re-encodes to JSON that decodes to the
//! same value.
#![no_main]

use laneway_gateway::admin::api::{CreateTenantBody, body};
use laneway_tenancy::model::{
    Tenant, TenantStatus, validate_limits, validate_name, validate_scope, validate_weight,
};
use laneway_tenancy::persist::RegistryFile;
use laneway_tenancy::{KeySpec, TenantPatch, TenantSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = body::<CreateTenantBody>(data) {
        check_create(b.into());
    }
    if let Ok(patch) = body::<TenantPatch>(data) {
        check_patch(&patch);
    }
    if let Ok(spec) = body::<KeySpec>(data) {
        let _ = validate_scope(spec.buckets.as_deref());
    }
    check_registry_file(data);
});

/// The checks `Registry::create_tenant` makes, then the stored form.
fn check_create(spec: TenantSpec) {
    let weight = spec.weight.unwrap_or(1);
    if validate_name(&spec.name).is_err()
        || validate_weight(weight).is_err()
        || validate_limits(&spec.limits).is_err()
        || validate_scope(spec.key.buckets.as_deref()).is_err()
    {
        return;
    }
    let t = Tenant {
        id: "t-0123456789abcdef".into(),
        name: spec.name,
        weight,
        limits: spec.limits,
        status: TenantStatus::Active,
        created_ms: 1_700_000_000_000,
    };
    round_trip(&t);
}

/// A patch applied as `Registry::update_tenant` does, then re-checked.
fn check_patch(patch: &TenantPatch) {
    let mut t = Tenant {
        id: "t-0123456789abcdef".into(),
        name: "acme".into(),
        weight: 1,
        limits: Default::default(),
        status: TenantStatus::Active,
        created_ms: 1_700_000_000_000,
    };
    patch.apply(&mut t);
    if validate_name(&t.name).is_ok()
        && validate_weight(t.weight).is_ok()
        && validate_limits(&t.limits).is_ok()
    {
        round_trip(&t);
    }
}

fn round_trip(t: &Tenant) {
    let json = serde_json::to_vec(t).expect("a tenant encodes");
    let back: Tenant = serde_json::from_slice(&json).expect("a stored tenant decodes");
    assert_eq!(&back, t);
}

fn check_registry_file(data: &[u8]) {
    let Ok(file) = serde_json::from_slice::<RegistryFile>(data) else {
        return;
    };
    let json = serde_json::to_value(&file).expect("a registry file encodes");
    let back: RegistryFile = serde_json::from_value(json.clone()).expect("re-encoded file decodes");
    assert_eq!(serde_json::to_value(&back).expect("encodes"), json);
}
