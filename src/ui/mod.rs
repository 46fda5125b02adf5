//! The dashboard at `/foldgate/ui`: one HTML page, its script and its
//! style sheet, compiled into the binary (`include_str!`): no build step,
//! nothing fetched from anywhere else. The files hold no data; the page
//! reads it from the admin API (`/foldgate/conversations`,
//! `/foldgate/metrics`) with the credential the user gives it, so the
//! page is exactly as guarded as the API.

use crate::body::{self, Body};
use crate::error::ApiError;
use http::{HeaderValue, Response, header};

/// The embedded files: path, content type, content.
const FILES: &[(&str, &str, &str)] = &[
    (
        "/foldgate/ui",
        "text/html; charset=utf-8",
        include_str!("index.html"),
    ),
    (
        "/foldgate/ui/",
        "text/html; charset=utf-8",
        include_str!("index.html"),
    ),
    (
        "/foldgate/ui/app.js",
        "text/javascript; charset=utf-8",
        include_str!("app.js"),
    ),
    (
        "/foldgate/ui/style.css",
        "text/css; charset=utf-8",
        include_str!("style.css"),
    ),
];

/// Only this origin's script, style and fetches; no frames, no forms, no
/// inline code.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Whether `path` is the dashboard's.
pub fn is_ui(path: &str) -> bool {
    path == "/foldgate/ui" || path.starts_with("/foldgate/ui/")
}

/// One of the dashboard's files, or 404.
pub fn serve(path: &str) -> Response<Body> {
    let Some(&(_, content_type, content)) = FILES.iter().find(|(p, _, _)| *p == path) else {
        return ApiError::NotFound(path.to_string())
            .into_response_as(crate::api::own_error_shape());
    };
    let mut response = Response::new(body::full(content));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_reference_nothing_outside_this_origin() {
        for (path, _, content) in FILES {
            let content = content.replace("http://www.w3.org/2000/svg", "");
            assert!(!content.contains("http://"), "{path}");
            assert!(!content.contains("https://"), "{path}");
            assert!(!content.contains("//cdn"), "{path}");
        }
        assert_eq!(serve("/foldgate/ui/nope.js").status(), 404);
        assert_eq!(serve("/foldgate/ui/app.js").status(), 200);
    }
}
