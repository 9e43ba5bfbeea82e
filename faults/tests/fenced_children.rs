//! The suite's command under `redlock-agent lock` (`faults cs-child`)
//! writes to the fenced store with the fence `redlock-agent lock --fence`
//! exports (`REDLOCK_FENCE`), and reports it as `process_client` reads it.

use std::process::Command;

use redlock_testkit::RedisServer;

fn cs_child(store: &str, fence: Option<&str>) -> Vec<String> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_faults"));
    command
        .args(["cs-child", "--ms", "1", "--store", store, "--resource", "r"])
        .env("REDLOCK_TOKEN", "0123456789abcdef")
        .env_remove("REDLOCK_FENCE");
    if let Some(fence) = fence {
        command.env("REDLOCK_FENCE", fence);
    }
    let out = command.output().expect("run faults cs-child");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            // Drop the clock reading (the second word).
            let mut words: Vec<&str> = l.split(' ').collect();
            words.remove(1);
            words.join(" ")
        })
        .collect()
}

/// With `REDLOCK_FENCE`: `enter <token> <fence>`, then the store's answer
/// (accepted once, refused for the same fence again), then `exit`. Without
/// it: no write at all.
#[test]
fn cs_child_writes_once_with_the_fence_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedisServer::start(dir.path(), "fenced-store").unwrap();
    let url = store.url();
    assert_eq!(
        cs_child(&url, Some("1795377477480132")),
        [
            "enter 0123456789abcdef 1795377477480132",
            "write accepted 1",
            "exit done"
        ]
    );
    assert_eq!(
        cs_child(&url, Some("1795377477480132")),
        [
            "enter 0123456789abcdef 1795377477480132",
            "write refused 1795377477480132",
            "exit done"
        ]
    );
    assert_eq!(
        cs_child(&url, None),
        ["enter 0123456789abcdef -", "exit done"]
    );
}
