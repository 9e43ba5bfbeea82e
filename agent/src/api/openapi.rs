//! `GET /v1/openapi.json`: the API's OpenAPI document (`agent/openapi.yaml`,
//! built into the binary) with this agent's bounds filled in.
//!
//! The file cannot know a deployment's `lock.*` settings, so it names each
//! bound that comes from them in `x-config-minimum` / `x-config-maximum`
//! (the setting, its `factor`, its default and the error past it) beside
//! the widest `minimum` / `maximum` any config accepts. The served copy
//! replaces that `minimum` / `maximum` with the bound this agent enforces,
//! so validators and generated clients refuse what the agent refuses, and
//! adds the bound as `value` in the `x-config-*` object.

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::config::Config;

/// The document as written, read into the binary when it is built.
const DOCUMENT: &str = include_str!("../../openapi.yaml");

/// The document parsed once, before any bound is filled in; the error
/// when it does not parse (the unit tests below make sure it does).
fn parsed() -> &'static Result<Value, String> {
    static PARSED: OnceLock<Result<Value, String>> = OnceLock::new();
    PARSED.get_or_init(|| {
        serde_saphyr::from_str(DOCUMENT).map_err(|e| format!("openapi.yaml does not parse: {e}"))
    })
}

/// The document `config`'s agent serves: the file with each config bound
/// set as its field's `minimum` or `maximum`.
///
/// # Errors
/// When the built-in file is not YAML (a build the unit tests refuse).
pub fn served(config: &Config) -> Result<Value, String> {
    let mut doc = parsed().clone()?;
    fill_bounds(&mut doc, config);
    Ok(doc)
}

/// Sets every `x-config-minimum` / `x-config-maximum` in `value` as the
/// `minimum` / `maximum` beside it.
fn fill_bounds(value: &mut Value, config: &Config) {
    match value {
        Value::Object(map) => {
            for (extension, keyword) in [
                ("x-config-minimum", "minimum"),
                ("x-config-maximum", "maximum"),
            ] {
                let Some(Value::Object(named)) = map.get_mut(extension) else {
                    continue;
                };
                let setting = named.get("setting").and_then(Value::as_str);
                let factor = named.get("factor").and_then(Value::as_u64).unwrap_or(1);
                let Some(bound) = setting.and_then(|s| bound_ms(config, s, factor, keyword)) else {
                    continue;
                };
                named.insert("value".into(), bound.into());
                map.insert(keyword.into(), bound.into());
            }
            map.values_mut().for_each(|v| fill_bounds(v, config));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| fill_bounds(v, config)),
        _ => {}
    }
}

/// The bound in whole milliseconds that `factor` times `setting` puts on a
/// field, as the lock service enforces it (`lock::Rules`): a minimum
/// rounded up, a maximum down, so every integer inside is accepted. The
/// TTL's minimum is never above `lock.max_ttl`. `None` for a setting this
/// agent does not know.
fn bound_ms(config: &Config, setting: &str, factor: u64, keyword: &str) -> Option<u64> {
    let lock = &config.lock;
    let times = |d: Duration| d.saturating_mul(u32::try_from(factor).unwrap_or(u32::MAX));
    let limit = match setting {
        "lock.node_timeout" => times(lock.node_timeout).min(lock.max_ttl),
        "lock.max_ttl" => times(lock.max_ttl),
        "lock.max_hold" => times(lock.max_hold),
        _ => return None,
    };
    let nanos = limit.as_nanos();
    let ms = if keyword == "minimum" {
        nanos.div_ceil(1_000_000)
    } else {
        nanos / 1_000_000
    };
    Some(u64::try_from(ms).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::Rules;

    fn config(lock: &str) -> Config {
        let yaml =
            format!("masters:\n  - {{name: r1, url: \"redis://127.0.0.1:6379\"}}\nlock: {lock}\n");
        Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn ttl_ms(doc: &Value, schema: &str) -> Value {
        doc["components"]["schemas"][schema]["properties"]["ttl_ms"].clone()
    }

    #[test]
    fn the_built_in_document_parses_as_openapi_3_1() {
        let doc = parsed().as_ref().unwrap_or_else(|e| panic!("{e}"));
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        assert!(doc["paths"]["/v1/openapi.json"]["get"].is_object());
    }

    /// Every config bound the file names is one this agent fills in.
    #[test]
    fn every_named_bound_is_filled_in() {
        fn walk(value: &Value, found: &mut usize) {
            match value {
                Value::Object(map) => {
                    for (extension, keyword) in [
                        ("x-config-minimum", "minimum"),
                        ("x-config-maximum", "maximum"),
                    ] {
                        if let Some(named) = map.get(extension) {
                            assert_eq!(named["value"], map[keyword], "{extension}: {named}");
                            *found += 1;
                        }
                    }
                    map.values().for_each(|v| walk(v, found));
                }
                Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
                _ => {}
            }
        }
        let doc = served(&config("{}")).unwrap();
        let mut found = 0;
        walk(&doc, &mut found);
        assert!(found >= 6, "{found}");
    }

    #[test]
    fn the_bounds_are_those_of_the_config() {
        let doc = served(&config("{}")).unwrap();
        let ttl = ttl_ms(&doc, "AcquireRequest");
        assert_eq!(
            (ttl["minimum"].as_u64(), ttl["maximum"].as_u64()),
            (Some(100), Some(60_000))
        );
        let doc = served(&config(
            "{default_ttl: 2s, max_ttl: 7s, node_timeout: 150ms, max_hold: 90s}",
        ))
        .unwrap();
        for schema in ["AcquireRequest", "ExtendRequest", "HoldRequest"] {
            let ttl = ttl_ms(&doc, schema);
            assert_eq!(ttl["minimum"], 300, "{schema}");
            assert_eq!(ttl["maximum"], 7000, "{schema}");
            assert_eq!(ttl["x-config-maximum"]["value"], 7000, "{schema}");
        }
        let max_hold = &doc["components"]["schemas"]["HoldRequest"]["properties"]["max_hold_ms"];
        assert_eq!(max_hold["maximum"], 90_000);
        assert_eq!(max_hold["minimum"], 1);
    }

    /// The served bounds are the ones the lock service enforces, to the
    /// millisecond, with durations that are not whole milliseconds too.
    #[test]
    fn the_bounds_are_the_ones_the_lock_service_enforces() {
        for lock in [
            "{}",
            "{default_ttl: 3s, max_ttl: 4100500us, node_timeout: 120300us, max_hold: 3000500us}",
        ] {
            let config = config(lock);
            let rules = Rules::new(&config.lock, config.socket.isolate);
            let doc = served(&config).unwrap();
            let ttl = ttl_ms(&doc, "AcquireRequest");
            let (min, max) = (
                ttl["minimum"].as_u64().unwrap(),
                ttl["maximum"].as_u64().unwrap(),
            );
            assert!(
                rules.ttl(Some(min)).is_ok() && rules.ttl(Some(max)).is_ok(),
                "{lock}"
            );
            assert!(
                rules.ttl(Some(min - 1)).is_err() && rules.ttl(Some(max + 1)).is_err(),
                "{lock}"
            );
            let hold = &doc["components"]["schemas"]["HoldRequest"]["properties"]["max_hold_ms"];
            let most = hold["maximum"].as_u64().unwrap();
            assert!(rules.max_hold(Some(most)).is_ok() && rules.max_hold(Some(most + 1)).is_err());
        }
    }
}
