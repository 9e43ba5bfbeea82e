//! The embedded local cluster behind `redlock-agent dev`: `redis-server`
//! children from `redlock-testkit` (the one master starter, which the
//! tests, the fault suite and the benchmark use too) and the agent config
//! over them.

use std::path::Path;

pub use redlock_testkit::{free_port, redis_server_binary, RedisServer, SpawnError};

/// The config YAML for an agent over `masters`, as `redlock-agent dev`
/// writes it.
pub fn config_yaml(socket: &Path, metrics: &str, masters: &[RedisServer]) -> String {
    let mut yaml = format!(
        "socket:\n  path: {:?}\nmetrics:\n  listen: {metrics:?}\nmasters:\n",
        socket.display().to_string()
    );
    for master in masters {
        yaml.push_str(&format!(
            "  - name: {}\n    url: {}\n",
            master.name(),
            master.url()
        ));
    }
    yaml
}
