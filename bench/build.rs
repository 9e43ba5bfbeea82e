//! Embeds the locked versions of the peer crates (and their redis clients)
//! so the drivers can name exactly what they ran.

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    for wanted in ["rslock", "redlock", "redis", "hyper"] {
        let mut versions = Vec::new();
        let mut name = None;
        for line in lock.lines() {
            if let Some(n) = line.strip_prefix("name = ") {
                name = Some(n.trim_matches('"').to_string());
            } else if let Some(v) = line.strip_prefix("version = ") {
                if name.as_deref() == Some(wanted) {
                    versions.push(v.trim_matches('"').to_string());
                }
            }
        }
        let key = wanted.to_uppercase();
        println!("cargo:rustc-env=BENCH_VERSION_{key}={}", versions.join(","));
    }
}
