//! Human-readable output of `laneway admin`: aligned tables for listings,
//! `export` lines for fresh credentials (shown once: the server keeps only
//! an encrypted copy).

use super::cli::{AdminCmd, KeyCmd, TenantCmd};
use serde_json::Value;

fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(x)) => x.clone(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().unwrap_or("?").to_string())
            .collect::<Vec<_>>()
            .join(","),
        Some(other) => other.to_string(),
    }
}

/// Render rows as a left-aligned table.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

const TENANT_COLS: [&str; 9] = [
    "ID",
    "NAME",
    "STATUS",
    "WEIGHT",
    "QUOTA_BYTES",
    "QUOTA_OBJECTS",
    "MAX_REQ/S",
    "MAX_BYTES/S",
    "CREATED_MS",
];

fn tenant_row(t: &Value) -> Vec<String> {
    [
        "id",
        "name",
        "status",
        "weight",
        "quota_bytes",
        "quota_objects",
        "max_requests_per_sec",
        "max_bytes_per_sec",
        "created_ms",
    ]
    .iter()
    .map(|k| s(t, k))
    .collect()
}

fn key_rows(keys: &Value) -> String {
    let rows: Vec<Vec<String>> = keys
        .as_array()
        .map(|a| {
            a.iter()
                .map(|k| {
                    vec![
                        s(k, "access_key"),
                        s(k, "access"),
                        s(k, "buckets"),
                        s(k, "created_ms"),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    table(&["ACCESS_KEY", "ACCESS", "BUCKETS", "CREATED_MS"], &rows)
}

fn credentials(key: &Value) -> String {
    format!(
        "# secret shown once; store it now\nexport AWS_ACCESS_KEY_ID={}\nexport AWS_SECRET_ACCESS_KEY={}\n",
        s(key, "access_key"),
        s(key, "secret_key")
    )
}

/// The human output of `cmd`'s answer `v`.
pub fn human(cmd: &AdminCmd, v: &Value) -> String {
    match cmd {
        AdminCmd::Tenant(TenantCmd::Create { .. }) => {
            let t = &v["tenant"];
            format!(
                "tenant {} ({}) created\n{}",
                s(t, "name"),
                s(t, "id"),
                credentials(&v["key"])
            )
        }
        AdminCmd::Tenant(TenantCmd::List) => {
            let rows: Vec<Vec<String>> = v["tenants"]
                .as_array()
                .map(|a| a.iter().map(tenant_row).collect())
                .unwrap_or_default();
            table(&TENANT_COLS, &rows)
        }
        AdminCmd::Tenant(TenantCmd::Delete { .. }) => format!(
            "tenant {} deleted ({} bucket(s) purged)\n",
            s(v, "deleted"),
            s(v, "buckets_deleted")
        ),
        AdminCmd::Tenant(_) => table(&TENANT_COLS, &[tenant_row(v)]),
        AdminCmd::Key(KeyCmd::Create { .. } | KeyCmd::Rotate { .. }) => credentials(v),
        AdminCmd::Key(KeyCmd::List { .. }) => key_rows(&v["keys"]),
        AdminCmd::Key(KeyCmd::Revoke { .. }) => format!("key {} revoked\n", s(v, "access_key")),
        AdminCmd::Usage { .. } => {
            let mut out = format!(
                "tenant {} ({}): {} bytes (quota {}), {} objects (quota {})\n",
                s(v, "name"),
                s(v, "tenant"),
                s(v, "bytes"),
                s(v, "quota_bytes"),
                s(v, "objects"),
                s(v, "quota_objects")
            );
            let rows: Vec<Vec<String>> = v["buckets"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|b| vec![s(b, "name"), s(b, "bytes"), s(b, "objects")])
                        .collect()
                })
                .unwrap_or_default();
            out.push_str(&table(&["BUCKET", "BYTES", "OBJECTS"], &rows));
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(&["A", "BB"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "A    BB\nxxx  y\n");
    }
}
