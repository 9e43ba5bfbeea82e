//! The OpenAPI document as the `openapi` tests read it: `agent/openapi.yaml`.

use faults::openapi::{self, Spec};

pub fn spec() -> Spec {
    Spec::load(&openapi::default_path()).unwrap_or_else(|e| panic!("{e}"))
}
