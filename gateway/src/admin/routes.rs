//! The admin API's route table and path matching.
//!
//! [`ROUTES`] is the single list of endpoints: the server dispatches from
//! it, and a test checks that it and the OpenAPI description
//! (`docs/admin-api.yaml`) name the same method + path pairs.

use http::Method;

/// What an endpoint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// POST /v1/tenants
    CreateTenant,
    /// GET /v1/tenants
    ListTenants,
    /// GET /v1/tenants/{tenant}
    GetTenant,
    /// PATCH /v1/tenants/{tenant}
    UpdateTenant,
    /// DELETE /v1/tenants/{tenant}
    DeleteTenant,
    /// POST /v1/tenants/{tenant}/suspend
    Suspend,
    /// POST /v1/tenants/{tenant}/resume
    Resume,
    /// POST /v1/tenants/{tenant}/keys
    CreateKey,
    /// GET /v1/tenants/{tenant}/keys
    ListKeys,
    /// DELETE /v1/tenants/{tenant}/keys/{access_key}
    RevokeKey,
    /// POST /v1/tenants/{tenant}/keys/{access_key}/rotate
    RotateKey,
    /// GET /v1/tenants/{tenant}/usage
    Usage,
}

/// Every endpoint: method, path pattern (`{name}` is a parameter), route.
pub const ROUTES: &[(&str, &str, Route)] = &[
    ("POST", "/v1/tenants", Route::CreateTenant),
    ("GET", "/v1/tenants", Route::ListTenants),
    ("GET", "/v1/tenants/{tenant}", Route::GetTenant),
    ("PATCH", "/v1/tenants/{tenant}", Route::UpdateTenant),
    ("DELETE", "/v1/tenants/{tenant}", Route::DeleteTenant),
    ("POST", "/v1/tenants/{tenant}/suspend", Route::Suspend),
    ("POST", "/v1/tenants/{tenant}/resume", Route::Resume),
    ("POST", "/v1/tenants/{tenant}/keys", Route::CreateKey),
    ("GET", "/v1/tenants/{tenant}/keys", Route::ListKeys),
    (
        "DELETE",
        "/v1/tenants/{tenant}/keys/{access_key}",
        Route::RevokeKey,
    ),
    (
        "POST",
        "/v1/tenants/{tenant}/keys/{access_key}/rotate",
        Route::RotateKey,
    ),
    ("GET", "/v1/tenants/{tenant}/usage", Route::Usage),
];

/// Result of matching a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Matched {
    /// A route, with its path parameters in order.
    Route(Route, Vec<String>),
    /// The path exists, with other methods.
    MethodNotAllowed,
    /// No such path.
    NotFound,
}

/// Match `method` and `path` against [`ROUTES`].
pub fn matching(method: &Method, path: &str) -> Matched {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let mut path_known = false;
    for (m, pattern, route) in ROUTES {
        let Some(params) = match_pattern(pattern, &segs) else {
            continue;
        };
        path_known = true;
        if method.as_str() == *m {
            return Matched::Route(*route, params);
        }
    }
    if path_known {
        Matched::MethodNotAllowed
    } else {
        Matched::NotFound
    }
}

fn match_pattern(pattern: &str, segs: &[&str]) -> Option<Vec<String>> {
    let pat: Vec<&str> = pattern.split('/').collect();
    if pat.len() != segs.len() {
        return None;
    }
    let mut params = Vec::new();
    for (p, s) in pat.iter().zip(segs) {
        if p.starts_with('{') {
            let v = percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()?
                .into_owned();
            if v.is_empty() {
                return None;
            }
            params.push(v);
        } else if p != s {
            return None;
        }
    }
    Some(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_routes_and_parameters() {
        assert_eq!(
            matching(&Method::GET, "/v1/tenants"),
            Matched::Route(Route::ListTenants, vec![])
        );
        assert_eq!(
            matching(&Method::POST, "/v1/tenants/acme/keys/LW1/rotate"),
            Matched::Route(Route::RotateKey, vec!["acme".into(), "LW1".into()])
        );
        assert_eq!(
            matching(&Method::PUT, "/v1/tenants/acme"),
            Matched::MethodNotAllowed
        );
        assert_eq!(matching(&Method::GET, "/v2/x"), Matched::NotFound);
        assert_eq!(
            matching(&Method::GET, "/v1/tenants//keys"),
            Matched::NotFound
        );
    }

    /// The OpenAPI description and the route table name the same endpoints.
    #[test]
    fn openapi_file_matches_the_route_table() {
        let doc = include_str!("../../../docs/admin-api.yaml");
        let mut documented = Vec::new();
        let mut path = None;
        for line in doc.lines() {
            if let Some(p) = line.strip_prefix("  /").and_then(|l| l.strip_suffix(':')) {
                path = Some(format!("/{p}"));
            } else if let (Some(p), Some(m)) = (&path, line.strip_prefix("    ")) {
                let m = m.trim_end_matches(':');
                if ["get", "post", "patch", "delete", "put"].contains(&m) {
                    documented.push((m.to_uppercase(), p.clone()));
                }
            } else if !line.starts_with(' ') {
                path = None;
            }
        }
        let mut table: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p, _)| (m.to_string(), p.to_string()))
            .collect();
        documented.sort();
        table.sort();
        assert_eq!(documented, table);
    }
}
