//! The API's OpenAPI document, loaded, and used to judge the agent's
//! answers: is the status listed for the operation, is the content type
//! the one documented, and does the body validate against the JSON Schema
//! of that response (OpenAPI 3.1 schemas are JSON Schema 2020-12).
//!
//! Two copies of the document exist: the file, `agent/openapi.yaml`, whose
//! config-dependent bounds are the widest any config allows, and the one a
//! running agent serves at [`SERVED_PATH`], with that agent's bounds as
//! `minimum` / `maximum` ([`Spec::fetch`]). The live tests judge an agent
//! by the document it serves.
//!
//! Validation is stricter than the document: every object schema that
//! lists its `properties` is checked as if it had `additionalProperties:
//! false`, so a field the agent sends but the document does not list is a
//! finding (the document stays open so generated clients tolerate new
//! fields).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use crate::http::{request, Conn, Response};

/// Where an agent serves its document (on both sockets).
pub const SERVED_PATH: &str = "/v1/openapi.json";

/// The document's location in this repository.
pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/openapi.yaml")
}

/// A percent-encoded path segment or query value, decoded as RFC 3986
/// reads it: every `%` starts an escape of two hex digits, and the bytes
/// are UTF-8. What a parameter's schema is then checked against.
///
/// # Errors
/// A stray `%` (it encodes nothing, so the value is none the document
/// describes) or bytes that are not UTF-8.
pub fn decode_component(raw: &str) -> Result<String, String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        let Some(byte) = hex else {
            return Err(format!(
                "{raw:?}: a '%' at {i} is not followed by two hex digits"
            ));
        };
        out.push(byte);
        i += 3;
    }
    String::from_utf8(out).map_err(|_| format!("{raw:?}: decodes to bytes that are not UTF-8"))
}

/// Which documented operation a request reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `path` is the template as written in the document.
    Operation { path: String, method: String },
    /// A documented path with a method it does not have; `templated`
    /// when the path has a `{resource}`.
    WrongMethod {
        allowed: Vec<String>,
        templated: bool,
    },
    /// No documented path.
    Unknown,
}

/// The loaded document with compiled validators.
pub struct Spec {
    doc: Value,
    /// The document's `components`, made strict, for `$ref`s.
    components: Value,
    // A std Mutex: compiled once per schema, then only cloned Arcs.
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Spec")
    }
}

/// Escapes one JSON pointer token.
fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Adds `additionalProperties: false` to every `type: object` schema with
/// `properties` and no `additionalProperties` (partial schemas inside
/// `allOf` have no `type` and are left alone).
fn make_strict(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let object_with_properties = map.get("type") == Some(&json!("object"))
                && map.contains_key("properties")
                && !map.contains_key("additionalProperties");
            if object_with_properties {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            for v in map.values_mut() {
                make_strict(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(make_strict),
        _ => {}
    }
}

/// A path template's text before and after its one parameter
/// (`/v1/locks/` and `/acquire` of `/v1/locks/{resource}/acquire`).
fn around_parameter(template: &str) -> Option<(&str, &str)> {
    let (before, rest) = template.split_once('{')?;
    let (_, after) = rest.split_once('}')?;
    Some((before, after))
}

/// The path part of a request target: no query, no scheme and authority.
pub fn target_path(target: &str) -> &str {
    let without_scheme = ["http://", "https://"]
        .iter()
        .find_map(|s| {
            target
                .get(..s.len())
                .filter(|p| p.eq_ignore_ascii_case(s))
                .map(|_| &target[s.len()..])
        })
        .map(|rest| rest.find('/').map_or("/", |i| &rest[i..]));
    let path = without_scheme.unwrap_or(target);
    path.split('?').next().unwrap_or(path)
}

impl Spec {
    /// Reads and checks the document: YAML, OpenAPI 3.1, every component
    /// a valid JSON Schema 2020-12, every `$ref` resolvable.
    ///
    /// # Errors
    /// What is wrong, with where.
    pub fn load(path: &Path) -> Result<Spec, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Spec::parse(&text)
    }

    /// As [`Spec::load`], from text.
    ///
    /// # Errors
    /// What is wrong, with where.
    pub fn parse(text: &str) -> Result<Spec, String> {
        let doc: Value =
            serde_saphyr::from_str(text).map_err(|e| format!("openapi.yaml is not YAML: {e}"))?;
        Spec::from_doc(doc)
    }

    /// The document the agent on `socket` serves ([`SERVED_PATH`]), checked
    /// as [`Spec::load`] checks the file.
    ///
    /// # Errors
    /// When the agent does not answer 200 with JSON, or as [`Spec::load`].
    pub async fn fetch(socket: &Path) -> Result<Spec, String> {
        let fetched = async {
            let mut conn = Conn::connect(socket).await?;
            conn.write(&request("GET", SERVED_PATH, b"")).await?;
            conn.read_response("GET", std::time::Duration::from_secs(10))
                .await
        };
        let response = fetched
            .await
            .map_err(|e| format!("GET {SERVED_PATH} on {}: {e}", socket.display()))?;
        if response.status() != 200 {
            return Err(format!(
                "GET {SERVED_PATH} on {}: {} {}",
                socket.display(),
                response.status(),
                cut(&response.body_text(), 300)
            ));
        }
        let doc = response
            .json()
            .map_err(|e| format!("GET {SERVED_PATH}: not JSON: {e}"))?;
        Spec::from_doc(doc)
    }

    /// The document the live tests judge the agent on `socket` by: the one
    /// it serves ([`Spec::fetch`]); or, to measure an agent that serves
    /// none, with `FUZZ_DOCUMENT=file` the file as written
    /// ([`default_path`]), with `FUZZ_DOCUMENT=<path>` the file there (an
    /// older version of it, say). Says which on stderr.
    ///
    /// # Errors
    /// As [`Spec::fetch`] or [`Spec::load`].
    pub async fn judging(socket: &Path) -> Result<Spec, String> {
        let path = match std::env::var("FUZZ_DOCUMENT").ok().as_deref() {
            None | Some("") => {
                eprintln!("judged by the document the agent serves ({SERVED_PATH})");
                return Spec::fetch(socket).await;
            }
            Some("file") => default_path(),
            Some(path) => PathBuf::from(path),
        };
        eprintln!("judged by the file {} (FUZZ_DOCUMENT)", path.display());
        Spec::load(&path)
    }

    /// As [`Spec::parse`], from the document already read.
    ///
    /// # Errors
    /// What is wrong, with where.
    pub fn from_doc(doc: Value) -> Result<Spec, String> {
        let version = doc["openapi"].as_str().unwrap_or_default();
        if !version.starts_with("3.1") {
            return Err(format!("openapi: {version:?}, expected 3.1.x"));
        }
        let mut components = doc["components"].clone();
        make_strict(&mut components);
        let spec = Spec {
            doc,
            components,
            validators: Mutex::new(HashMap::new()),
        };
        spec.lint()?;
        Ok(spec)
    }

    pub fn doc(&self) -> &Value {
        &self.doc
    }

    /// Structural checks the validators alone would not make.
    fn lint(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        let schemas = self.doc["components"]["schemas"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (name, schema) in &schemas {
            if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
                problems.push(format!(
                    "components.schemas.{name}: not JSON Schema 2020-12: {e}"
                ));
            }
        }
        let mut refs = Vec::new();
        collect_refs(&self.doc, &mut refs);
        for r in refs {
            let resolved = r
                .strip_prefix('#')
                .and_then(|p| self.doc.pointer(p))
                .is_some();
            if !resolved {
                problems.push(format!("$ref {r:?} does not resolve"));
            }
        }
        let paths = self.doc["paths"].as_object().cloned().unwrap_or_default();
        for (path, item) in &paths {
            for (method, op) in item.as_object().into_iter().flatten() {
                if op["operationId"].as_str().is_none() {
                    problems.push(format!("{method} {path}: no operationId"));
                }
                let responses = op["responses"].as_object();
                if responses.is_none_or(Map::is_empty) {
                    problems.push(format!("{method} {path}: no responses"));
                }
                for (status, response) in responses.into_iter().flatten() {
                    let response = self.resolve(response);
                    if response["content"].as_object().is_none_or(Map::is_empty) {
                        problems.push(format!("{method} {path} {status}: no content"));
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// Follows a `$ref` (one level) within the document.
    fn resolve<'a>(&'a self, value: &'a Value) -> &'a Value {
        match value["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
            Some(pointer) => self.doc.pointer(pointer).unwrap_or(value),
            None => value,
        }
    }

    /// The operation `method target` reaches, routed as the agent routes:
    /// on the raw path, the template's parameter (`{resource}`, `{name}`)
    /// standing for everything between the prefix (`/v1/locks/`) and the
    /// last `/` (a raw `/` inside is `invalid_resource`), or for the last
    /// segment when the template ends with it. The longest matching
    /// template wins (`/v1/locks/{resource}/acquire` over
    /// `/v1/locks/{resource}`).
    pub fn route(&self, method: &str, target: &str) -> Route {
        let path = target_path(target);
        let paths = self.doc["paths"].as_object();
        let template = paths
            .into_iter()
            .flatten()
            .filter(|(template, _)| match around_parameter(template) {
                Some((before, "")) => {
                    path.starts_with(before) && !path[before.len()..].contains('/')
                }
                Some((before, after)) => {
                    path.len() >= before.len() + after.len()
                        && path.starts_with(before)
                        && path.ends_with(after)
                }
                None => path == template.as_str(),
            })
            .map(|(template, _)| template.clone())
            .max_by_key(String::len);
        let Some(template) = template else {
            return Route::Unknown;
        };
        let item = &self.doc["paths"][&template];
        let methods: Vec<String> = item
            .as_object()
            .into_iter()
            .flatten()
            .map(|(m, _)| m.to_ascii_uppercase())
            .collect();
        // Methods are case-sensitive: `get` is not `GET`.
        if methods.iter().any(|m| m == method) {
            Route::Operation {
                path: template,
                method: method.to_ascii_lowercase(),
            }
        } else {
            Route::WrongMethod {
                allowed: methods,
                templated: template.contains('{'),
            }
        }
    }

    fn validator(&self, key: &str, schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
        let mut cache = self.validators.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = cache.get(key) {
            return Ok(Arc::clone(v));
        }
        let mut root = schema.clone();
        make_strict(&mut root);
        if let Value::Object(map) = &mut root {
            map.insert("components".into(), self.components.clone());
        }
        let validator = jsonschema::draft202012::new(&root)
            .map_err(|e| format!("schema at {key} does not compile: {e}"))?;
        let validator = Arc::new(validator);
        cache.insert(key.to_string(), Arc::clone(&validator));
        Ok(validator)
    }

    /// Validates `instance` against the component schema `name`.
    ///
    /// # Errors
    /// Every violation, with its location in the instance.
    pub fn validate_component(&self, name: &str, instance: &Value) -> Result<(), String> {
        let schema = json!({ "$ref": format!("#/components/schemas/{name}") });
        self.validate(&format!("components/schemas/{name}"), &schema, instance)
    }

    /// Whether the document accepts `body` as the JSON request body of
    /// `method` on the path template `path` (as written in the document).
    ///
    /// # Errors
    /// Every violation; or the operation has no JSON request body.
    pub fn validate_request(&self, method: &str, path: &str, body: &Value) -> Result<(), String> {
        let m = method.to_ascii_lowercase();
        let content = &self.resolve(&self.doc["paths"][path][&m]["requestBody"])["content"];
        let schema = &content["application/json"]["schema"];
        if schema.is_null() {
            return Err(format!("{method} {path}: no JSON request body documented"));
        }
        let key = format!(
            "paths/{}/{m}/requestBody/content/application~1json/schema",
            pointer_token(path)
        );
        self.validate(&key, schema, body)
    }

    /// Whether the document accepts `value` for the parameter `name` of
    /// `method` on the path template `path`.
    ///
    /// # Errors
    /// Every violation; or the operation has no such parameter.
    pub fn validate_parameter(
        &self,
        method: &str,
        path: &str,
        name: &str,
        value: &Value,
    ) -> Result<(), String> {
        let m = method.to_ascii_lowercase();
        let parameters = self.doc["paths"][path][&m]["parameters"].as_array();
        let found = parameters
            .into_iter()
            .flatten()
            .enumerate()
            .find(|(_, p)| self.resolve(p)["name"] == name);
        let Some((i, parameter)) = found else {
            return Err(format!("{method} {path}: no parameter {name:?}"));
        };
        let key = format!("paths/{}/{m}/parameters/{i}/schema", pointer_token(path));
        self.validate(&key, &self.resolve(parameter)["schema"], value)
    }

    fn validate(&self, key: &str, schema: &Value, instance: &Value) -> Result<(), String> {
        let validator = self.validator(key, schema)?;
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "does not match {key}: {}; body {}",
                errors.join("; "),
                cut(&instance.to_string(), 300)
            ))
        }
    }

    /// Judges an answer to `method target` against the document.
    ///
    /// # Errors
    /// Why the answer is not what the document promises.
    pub fn check(&self, method: &str, target: &str, response: &Response) -> Result<(), String> {
        let status = response.status();
        let content_type = response.header("content-type").unwrap_or_default();
        let head_only = method == "HEAD";
        let (key, schema, media) = match self.route(method, target) {
            Route::Unknown => {
                if status != 404 && status != 503 {
                    return Err(format!(
                        "{method} {target}: undocumented path answered {status}, not 404"
                    ));
                }
                let name = if status == 404 {
                    "NotFoundError"
                } else {
                    "OverloadedError"
                };
                (
                    format!("components/schemas/{name}"),
                    json!({ "$ref": format!("#/components/schemas/{name}") }),
                    "application/json".to_string(),
                )
            }
            Route::WrongMethod { allowed, templated } => {
                if templated && status == 400 {
                    // The resource is checked before the method.
                    (
                        "components/schemas/InvalidResourceError".into(),
                        json!({ "$ref": "#/components/schemas/InvalidResourceError" }),
                        "application/json".into(),
                    )
                } else if status == 503 {
                    (
                        "components/schemas/OverloadedError".into(),
                        json!({ "$ref": "#/components/schemas/OverloadedError" }),
                        "application/json".into(),
                    )
                } else {
                    if status != 405 {
                        return Err(format!(
                            "{method} {target}: method not documented (only {allowed:?}) answered {status}, not 405"
                        ));
                    }
                    let allow = response.header("allow").unwrap_or_default();
                    if !allowed.iter().any(|m| m == allow) {
                        return Err(format!(
                            "{method} {target}: 405 with Allow {allow:?}, expected one of {allowed:?}"
                        ));
                    }
                    (
                        "components/schemas/MethodNotAllowedError".into(),
                        json!({ "$ref": "#/components/schemas/MethodNotAllowedError" }),
                        "application/json".into(),
                    )
                }
            }
            Route::Operation { path, method: m } => {
                let responses = &self.doc["paths"][&path][&m]["responses"];
                let Some(documented) = responses.get(status.to_string()) else {
                    let listed: Vec<&String> = responses
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, _)| k)
                        .collect();
                    return Err(format!(
                        "{method} {target}: status {status} is not documented for {m} {path} (listed: {listed:?}); body {}",
                        cut(&response.body_text(), 300)
                    ));
                };
                let documented = self.resolve(documented);
                let contents = documented["content"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                let Some((media, content)) = contents.iter().next() else {
                    return Err(format!("{m} {path} {status}: no content documented"));
                };
                let pointer = match documented_pointer(responses, status, self) {
                    Some(p) => p,
                    None => format!("paths/{}/{m}/responses/{status}", pointer_token(&path)),
                };
                (
                    format!("{pointer}/content/{}/schema", pointer_token(media)),
                    content["schema"].clone(),
                    media.clone(),
                )
            }
        };
        let ct = content_type.split(';').next().unwrap_or_default().trim();
        if ct != media {
            return Err(format!(
                "{method} {target}: {status} with content-type {content_type:?}, documented {media:?}; body {}",
                cut(&response.body_text(), 200)
            ));
        }
        if head_only {
            return Ok(());
        }
        match media.as_str() {
            "application/json" => {
                let body: Value = serde_json::from_slice(&response.body).map_err(|e| {
                    format!(
                        "{method} {target}: {status} body is not JSON ({e}): {}",
                        cut(&response.body_text(), 200)
                    )
                })?;
                self.validate(&key, &schema, &body)
                    .map_err(|e| format!("{method} {target}: {status} {e}"))
            }
            "application/x-ndjson" => {
                for line in response
                    .body
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                {
                    let event: Value = serde_json::from_slice(line).map_err(|e| {
                        format!("{method} {target}: an NDJSON line is not JSON ({e})")
                    })?;
                    self.validate(&key, &schema, &event)
                        .map_err(|e| format!("{method} {target}: {status} {e}"))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Where a response's schema lives, following a `$ref` to
/// `components/responses` so the validator cache is shared.
fn documented_pointer(responses: &Value, status: u16, _spec: &Spec) -> Option<String> {
    responses[status.to_string()]["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/"))
        .map(str::to_string)
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    // Discriminator mappings are references too.
                    ("mapping", Value::Object(m)) => {
                        out.extend(m.values().filter_map(|v| v.as_str().map(str::to_string)));
                    }
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

fn cut(text: &str, n: usize) -> String {
    if text.len() <= n {
        return text.to_string();
    }
    let mut end = n;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec::load(&default_path()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn routes_like_the_agent() {
        let s = spec();
        let op = |p: &str| Route::Operation {
            path: p.into(),
            method: "post".into(),
        };
        assert_eq!(
            s.route("POST", "/v1/locks/a/acquire"),
            op("/v1/locks/{resource}/acquire")
        );
        assert_eq!(
            s.route("POST", "/v1/locks/a%2Fb/hold?x=1"),
            op("/v1/locks/{resource}/hold")
        );
        assert_eq!(
            s.route("POST", "http://localhost/v1/locks/x/release"),
            op("/v1/locks/{resource}/release")
        );
        assert_eq!(
            s.route("GET", "/v1/locks/a/acquire"),
            Route::WrongMethod {
                allowed: vec!["POST".into()],
                templated: true,
            }
        );
        assert_eq!(
            s.route("get", "/v1/nodes"),
            Route::WrongMethod {
                allowed: vec!["GET".into()],
                templated: false,
            }
        );
        assert_eq!(s.route("GET", "/v1/nope"), Route::Unknown);
        assert_eq!(s.route("GET", "*"), Route::Unknown);
    }

    fn answer(status: u16, content_type: &str, body: &str) -> Response {
        Response {
            head: crate::http::Head {
                status,
                headers: vec![("content-type".into(), content_type.into())],
            },
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn judges_status_content_type_and_body() {
        let s = spec();
        let ok = r#"{"resource":"a","token":"rl2-0123456789abcdef0123456789abcdef01234567-0123456789abcdef","validity_ms":5,"ttl_ms":10}"#;
        s.check(
            "POST",
            "/v1/locks/a/acquire",
            &answer(200, "application/json", ok),
        )
        .unwrap();
        let extra = ok.replace("\"ttl_ms\":10", "\"ttl_ms\":10,\"surprise\":1");
        assert!(s
            .check(
                "POST",
                "/v1/locks/a/acquire",
                &answer(200, "application/json", &extra)
            )
            .unwrap_err()
            .contains("surprise"));
        let taken = r#"{"error":{"code":"taken","message":"held"}}"#;
        s.check(
            "POST",
            "/v1/locks/a/acquire",
            &answer(409, "application/json", taken),
        )
        .unwrap();
        // `lost` is an acquire's 409 too (a re-entry of a lock the masters
        // no longer hold); `busy` never is.
        let busy = r#"{"error":{"code":"busy","message":"x"}}"#;
        assert!(s
            .check(
                "POST",
                "/v1/locks/a/acquire",
                &answer(409, "application/json", busy)
            )
            .is_err());
        assert!(s
            .check(
                "POST",
                "/v1/locks/a/acquire",
                &answer(418, "application/json", taken)
            )
            .unwrap_err()
            .contains("not documented"));
        assert!(s
            .check(
                "POST",
                "/v1/locks/a/acquire",
                &answer(409, "text/plain", taken)
            )
            .is_err());
        let not_found = r#"{"error":{"code":"not_found","message":"x"}}"#;
        s.check("GET", "/nope", &answer(404, "application/json", not_found))
            .unwrap();
        let event = "{\"event\":\"acquired\",\"token\":\"t\",\"validity_ms\":1,\"ttl_ms\":2}\n";
        s.check(
            "POST",
            "/v1/locks/a/hold",
            &answer(200, "application/x-ndjson", event),
        )
        .unwrap();
        assert!(s
            .check(
                "POST",
                "/v1/locks/a/hold",
                &answer(200, "application/x-ndjson", "{\"event\":\"boom\"}\n")
            )
            .is_err());
    }

    #[test]
    fn components_decode_as_rfc_3986_reads_them() {
        assert_eq!(decode_component("a%2Fb%25").as_deref(), Ok("a/b%"));
        assert_eq!(decode_component("%C3%A9").as_deref(), Ok("é"));
        for stray in ["a%ZZ", "%", "a%4", "%g1"] {
            assert!(decode_component(stray).is_err(), "{stray}");
        }
        assert!(decode_component("%FF").is_err());
    }

    #[test]
    fn wrong_methods_need_405_with_allow() {
        let s = spec();
        let body = r#"{"error":{"code":"method_not_allowed","message":"x"}}"#;
        let mut r = answer(405, "application/json", body);
        assert!(s
            .check("DELETE", "/v1/nodes", &r)
            .unwrap_err()
            .contains("Allow"));
        r.head.headers.push(("allow".into(), "GET".into()));
        s.check("DELETE", "/v1/nodes", &r).unwrap();
    }
}
