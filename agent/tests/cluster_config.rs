//! Configs that list a Redis Cluster master wrongly exit 64 naming the
//! field; a good mix of singles and clusters passes the file's checks.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");

/// `redlock-agent <args> --config FILE` on `yaml`: exit code and stderr.
fn run_agent(args: &[&str], yaml: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, yaml).unwrap();
    let out = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A master with both `url` and `cluster`, one with an empty `cluster`, a
/// seed that is not a redis URL, a cluster seed that is another master's
/// server and two clusters sharing a seed: `check` reports every one at
/// once with its field path and exits 64; so does a plain run, before
/// binding its socket.
#[test]
fn bad_cluster_masters_are_refused_with_their_field_paths() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let yaml = format!(
        "socket:\n  path: {:?}\nmasters:\n\
         \x20 - name: r1\n    url: redis://127.0.0.1:7001\n\
         \x20 - name: both\n    url: redis://127.0.0.1:7101\n    cluster: [redis://127.0.0.1:7102]\n\
         \x20 - name: empty\n    cluster: []\n\
         \x20 - name: http\n    cluster: [redis://127.0.0.1:7301, http://127.0.0.1:7302]\n\
         \x20 - name: shares-r1\n    cluster: [redis://127.0.0.1:7401, redis://localhost:7001]\n\
         \x20 - name: c6\n    cluster: [redis://127.0.0.1:7601, redis://127.0.0.1:7602]\n\
         \x20 - name: c7\n    cluster: [redis://127.0.0.1:7701, redis://127.0.0.1:7602]\n",
        socket.display().to_string()
    );
    let (code, stderr) = run_agent(&["check"], &yaml);
    assert_eq!(code, Some(64), "{stderr}");
    for expected in [
        "masters[1].cluster: give url (one server) or cluster (a Redis Cluster's seed nodes), not both",
        "masters[2].cluster: needs at least one seed node",
        "masters[3].cluster[1]: not a redis:// or rediss:// URL: \"http://127.0.0.1:7302/\"",
        "masters[4].cluster[1]: shares-r1 reaches the same server as masters[0].url (r1)",
        "masters[6].cluster[1]: c7 reaches the same server as masters[5].cluster[1] (c6)",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in:\n{stderr}");
    }
    // The master each error line is about: the first one it names.
    let subjects: std::collections::BTreeSet<usize> = stderr
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("masters[")? + "masters[".len()..];
            rest[..rest.find(']')?].parse().ok()
        })
        .collect();
    assert_eq!(
        subjects,
        [1, 2, 3, 4, 6].into(),
        "errors about exactly the bad masters (r1 and c6 are fine on their own):\n{stderr}"
    );

    let (code, stderr) = run_agent(&[], &yaml);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("masters[2].cluster"), "{stderr}");
    assert!(!socket.exists(), "refused before binding its socket");
}

/// Each problem alone is refused too (no error hides behind another), and
/// a good mix of singles and clusters passes the file's checks (`check
/// --offline`; `check` then names each master, none of which runs).
#[test]
fn each_cluster_config_problem_alone_exits_64_and_a_good_mix_passes() {
    let single =
        |name: &str, port: u16| format!("  - name: {name}\n    url: redis://127.0.0.1:{port}\n");
    let cluster = |name: &str, ports: &[u16]| {
        let mut s = format!("  - name: {name}\n    cluster:\n");
        for p in ports {
            s.push_str(&format!("      - redis://127.0.0.1:{p}\n"));
        }
        s
    };
    let config = |masters: &[String]| format!("masters:\n{}", masters.concat());
    let cases = [
        (
            "url and cluster",
            config(&[
                single("r1", 7001),
                "  - name: c2\n    url: redis://127.0.0.1:7002\n    cluster: [redis://127.0.0.1:7003]\n".to_string(),
                single("r3", 7004),
            ]),
            "masters[1].cluster: give url (one server) or cluster (a Redis Cluster's seed nodes), not both",
        ),
        (
            "an empty cluster",
            config(&[single("r1", 7001), "  - name: c2\n    cluster: []\n".to_string(), single("r3", 7004)]),
            "masters[1].cluster: needs at least one seed node",
        ),
        (
            "neither url nor cluster",
            config(&[single("r1", 7001), "  - name: c2\n".to_string(), single("r3", 7004)]),
            "masters[1].url: required (or cluster: a Redis Cluster's seed nodes)",
        ),
        (
            "a cluster seed that is a single master",
            config(&[single("r1", 7001), cluster("c2", &[7002, 7001]), single("r3", 7004)]),
            "masters[1].cluster[1]: c2 reaches the same server as masters[0].url (r1)",
        ),
        (
            "two clusters sharing a seed",
            config(&[cluster("c1", &[7001, 7002]), cluster("c2", &[7003, 7002]), single("r3", 7004)]),
            "masters[1].cluster[1]: c2 reaches the same server as masters[0].cluster[1] (c1)",
        ),
    ];
    for (what, yaml, field) in &cases {
        let (code, stderr) = run_agent(&["check"], yaml);
        assert_eq!(code, Some(64), "{what}: {stderr}\n{yaml}");
        assert!(
            stderr.contains(field),
            "{what}: {field:?} not in:\n{stderr}"
        );
    }

    let good = config(&[
        single("r1", 7001),
        cluster("c2", &[7101, 7102, 7103]),
        cluster("c3", &[7201]),
        single("r4", 7004),
        cluster("c5", &[7501, 7502]),
    ]);
    // Nothing listens on these ports: the file passes (no field is
    // refused), and then every master is named as one check cannot reach;
    // --offline passes it.
    let (code, stderr) = run_agent(&["check"], &good);
    assert_eq!(code, Some(64), "{stderr}\n{good}");
    assert!(!stderr.contains("not a usable config"), "{stderr}");
    assert!(stderr.contains("5 of 5 masters cannot be used"), "{stderr}");
    let (code, stderr) = run_agent(&["check", "--offline"], &good);
    assert_eq!(code, Some(0), "{stderr}\n{good}");
    assert!(stderr.contains("(5 masters, quorum 3)"), "{stderr}");
}
