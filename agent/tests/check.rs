//! `redlock-agent check`, the binary, against real masters: it connects to
//! every master at once and exits 64 naming each one it cannot use and why
//! (a closed port, a host that does not resolve, TLS to a plain port, plain
//! to a TLS port, an unknown CA, a wrong password, a cluster listed as a
//! single server and the reverse, a replica, an eviction policy that can
//! evict lock keys, set at start or at run time); it exits 0 on masters it can use
//! (plain, TLS with a client certificate, an ACL user without INFO, a
//! cluster); `--offline` passes what only a connection can refuse. A CA
//! file that is not a certificate is refused offline too.
//!
//! And no secret shows, whatever is malformed: URLs with a password in
//! every broken shape and YAML broken around passwords exit 64 from
//! `check`, `check --offline` and a start alike, with the field path or
//! the line, never the password.
//!
//! Every deadline is generous (the tests pass on a machine loaded at twice
//! its cores); nothing asserts on how long anything took.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use redlock_testkit::{free_port, Options, RedisCluster, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");

/// How long `check` gives the masters in these tests: far beyond what a
/// busy machine needs to connect, since a TLS handshake to a plain port
/// waits for all of it.
const TIMEOUT: &str = "8s";

/// What one run of the binary printed, and how it ended.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// Writes `yaml` to a new file under `dir`.
fn config_file(dir: &Path, yaml: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let file = dir.join(format!("config-{}.yaml", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&file, yaml).unwrap();
    file
}

/// `redlock-agent <args> --config <yaml in a file>`.
fn run(dir: &Path, args: &[&str], yaml: &str) -> Run {
    let file = config_file(dir, yaml);
    let out = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn check(dir: &Path, yaml: &str) -> Run {
    run(dir, &["check", "--timeout", TIMEOUT], yaml)
}

fn check_offline(dir: &Path, yaml: &str) -> Run {
    run(dir, &["check", "--offline"], yaml)
}

fn assert_lines(run: &Run, expected: &[String]) {
    for line in expected {
        assert!(
            run.stderr.contains(line.as_str()),
            "missing {line:?} in:\n{}",
            run.stderr
        );
    }
}

/// The masters the first test cannot use, each with the reason `check`
/// gives, beside one it can (with a memory limit and `noeviction`, the
/// one safe policy): every problem in one run, the master named by its
/// path and name. The wrong password never shows. `--offline` passes it.
#[test]
fn check_names_every_master_it_cannot_use_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let certs = common::tls::certs_dir(dir.path());
    let start = |name: &str, options: Options| {
        RedisServer::start_opts(dir.path(), name, &options).unwrap_or_else(|e| panic!("{e}"))
    };
    let good = start("good", Options::new().maxmemory("64mb", "noeviction"));
    let volatile = start("volatile", Options::new().maxmemory("64mb", "volatile-lru"));
    let allkeys = start("allkeys", Options::new().maxmemory("0", "allkeys-lru"));
    let acl = start("acl", Options::new().user("agent on >right-pw ~* +@all"));
    let single = start("single", Options::new());
    let replica = start("replica", Options::new().replica_of(good.port()));
    let tls_a = common::tls::master(dir.path(), "tls-a", &certs, false);
    let tls_b = common::tls::master(dir.path(), "tls-b", &certs, false);
    let cluster = RedisCluster::start(dir.path(), "cl", 1, 0).unwrap_or_else(|e| panic!("{e}"));
    let closed = free_port().unwrap();
    let ca = |name: &str| certs.join(name).display().to_string();

    let yaml = format!(
        "masters:
  - {{name: good, url: \"redis://127.0.0.1:{good}\"}}
  - {{name: closed, url: \"redis://127.0.0.1:{closed}\"}}
  - {{name: volatile, url: \"redis://127.0.0.1:{volatile}\"}}
  - {{name: allkeys, url: \"redis://127.0.0.1:{allkeys}\"}}
  - {{name: wrong-pw, url: \"redis://agent:wrong-pw-s3cr3t@127.0.0.1:{acl}\"}}
  - {{name: tls-to-plain, url: \"rediss://127.0.0.1:{tls_plain}\", tls_ca_file: {ca:?}}}
  - {{name: plain-to-tls, url: \"redis://127.0.0.1:{tls_tls}\"}}
  - {{name: unknown-ca, url: \"rediss://127.0.0.1:{other_tls}\", tls_ca_file: {other_ca:?}}}
  - {{name: cluster-as-single, url: \"redis://127.0.0.1:{cluster_port}\"}}
  - {{name: single-as-cluster, cluster: [\"redis://127.0.0.1:{single}\"]}}
  - {{name: replica, url: \"redis://127.0.0.1:{replica}\"}}
",
        good = good.port(),
        volatile = volatile.port(),
        allkeys = allkeys.port(),
        acl = acl.port(),
        tls_plain = tls_a.port(),
        tls_tls = tls_a.tls_port().unwrap(),
        ca = ca("ca.crt"),
        other_tls = tls_b.tls_port().unwrap(),
        other_ca = ca("other-ca.crt"),
        cluster_port = cluster.primary_port(0),
        single = single.port(),
        replica = replica.port(),
    );
    let out = check(dir.path(), &yaml);
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    let cannot =
        |i: usize, name: &str, why: &str| format!("masters[{i}] ({name}): cannot be used: {why}");
    assert_lines(
        &out,
        &[
            "masters[0] (good): ok: single server, redis ".to_string(),
            cannot(1, "closed", "cannot connect: connection: "),
            cannot(
                2,
                "volatile",
                "maxmemory-policy volatile-lru may evict lock keys",
            ),
            cannot(
                3,
                "allkeys",
                "maxmemory-policy allkeys-lru may evict lock keys",
            ),
            cannot(4, "wrong-pw", "cannot connect: auth: "),
            cannot(5, "tls-to-plain", "cannot connect: "),
            cannot(6, "plain-to-tls", "cannot connect: connection: "),
            cannot(7, "unknown-ca", "cannot connect: "),
            cannot(
                8,
                "cluster-as-single",
                "it is a Redis Cluster node (cluster_enabled:1), listed as a single server",
            ),
            cannot(
                9,
                "single-as-cluster",
                "it is not a Redis Cluster node (cluster_enabled:0), listed as a cluster",
            ),
            cannot(10, "replica", "replica (role:slave)"),
            "10 of 11 masters cannot be used".to_string(),
        ],
    );
    // The hint for each scheme mix-up: TLS to a plain port either waits
    // out the handshake or reads a plain answer, depending on its bytes.
    let line = |name: &str| {
        out.stderr
            .lines()
            .find(|l| l.contains(&format!("({name}): cannot be used")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("tls-to-plain").ends_with("use redis://)"),
        "{}",
        out.stderr
    );
    assert!(
        line("plain-to-tls").ends_with("use rediss://)"),
        "{}",
        out.stderr
    );
    assert!(
        line("unknown-ca").contains("UnknownIssuer"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("masters[0] (good): cannot"),
        "{}",
        out.stderr
    );
    assert!(!out.all().contains("wrong-pw-s3cr3t"), "{}", out.all());
    // The resolved config still prints, its password redacted.
    assert!(out.stdout.contains("agent:***@127.0.0.1"), "{}", out.stdout);

    let out = check_offline(dir.path(), &yaml);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("ok (11 masters, quorum 6)"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("cannot be used"), "{}", out.stderr);
}

/// Masters it can use pass: plain, TLS with a CA and a client certificate
/// that the master demands, an ACL user without INFO (noted: what INFO
/// would tell is not checked), a cluster of two shards. Then one shard of
/// the cluster is set to evict at run time, and the next check names it.
#[test]
fn check_passes_masters_it_can_use_and_sees_a_policy_changed_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let certs = common::tls::certs_dir(dir.path());
    let plain = RedisServer::start(dir.path(), "plain").unwrap_or_else(|e| panic!("{e}"));
    let tls = common::tls::master(dir.path(), "tls", &certs, true);
    let acl = RedisServer::start_opts(
        dir.path(),
        "acl",
        &Options::new().user(
            "redlock on >acl-pw-s3cr3t resetkeys ~redlock:* resetchannels &redlock:released:* -@all \
             +ping +get +mget +set +exists +del +pexpire +pttl +scan +evalsha +script|load +publish \
             +subscribe +unsubscribe",
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let cluster = RedisCluster::start(dir.path(), "cl", 2, 0).unwrap_or_else(|e| panic!("{e}"));
    let file = |name: &str| certs.join(name).display().to_string();
    let yaml = format!(
        "masters:
  - {{name: plain, url: \"redis://127.0.0.1:{plain}\"}}
  - {{name: tls, url: \"rediss://127.0.0.1:{tls}\", tls_ca_file: {ca:?}, tls_cert_file: {cert:?}, tls_key_file: {key:?}}}
  - {{name: acl, url: \"redis://redlock:acl-pw-s3cr3t@127.0.0.1:{acl}\"}}
  - {{name: cl, cluster: [\"redis://127.0.0.1:{seed}\"]}}
",
        plain = plain.port(),
        tls = tls.tls_port().unwrap(),
        ca = file("ca.crt"),
        cert = file("client.crt"),
        key = file("client.key"),
        acl = acl.port(),
        seed = cluster.primary_port(0),
    );
    let out = check(dir.path(), &yaml);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines(
        &out,
        &[
            "masters[0] (plain): ok: single server, redis ".to_string(),
            "masters[1] (tls): ok: single server, redis ".to_string(),
            "masters[2] (acl): ok: single server".to_string(),
            "masters[2] (acl): note: its ACL refuses INFO".to_string(),
            "masters[3] (cl): ok: Redis Cluster, 2 shards".to_string(),
            "ok (4 masters, quorum 3)".to_string(),
        ],
    );
    assert!(!out.all().contains("acl-pw-s3cr3t"), "{}", out.all());

    // A policy set at run time, on the shard the config does not name.
    let shard = cluster.primary_port(1);
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{shard}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query(&mut conn)
        .unwrap();
    let out = check(dir.path(), &yaml);
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert_lines(
        &out,
        &[
            format!("masters[3] (cl): cannot be used: shard 127.0.0.1:{shard}: maxmemory-policy allkeys-lru may evict lock keys"),
            "masters[0] (plain): ok".to_string(),
            "1 of 4 masters cannot be used".to_string(),
        ],
    );
}

/// A host name that does not resolve is refused before any connection,
/// naming the field and the host; `--offline` does not resolve it.
#[test]
fn check_refuses_a_host_that_does_not_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let good = RedisServer::start(dir.path(), "good").unwrap_or_else(|e| panic!("{e}"));
    let yaml = format!(
        "masters:\n  - {{name: r1, url: \"redis://:s3cr3tPW@redis-1.invalid:6379\"}}\n  - {{name: r2, url: \"redis://127.0.0.1:{}\"}}\n",
        good.port()
    );
    let out = check(dir.path(), &yaml);
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("masters[0].url: cannot resolve \"redis-1.invalid\""),
        "{}",
        out.stderr
    );
    assert!(!out.all().contains("s3cr3tPW"), "{}", out.all());
    let out = check_offline(dir.path(), &yaml);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// A CA file that is not a certificate (a text file, a private key) and a
/// key file that holds no key are refused offline as well, without a word
/// of the files.
#[test]
fn tls_files_that_are_not_what_they_say_are_refused_offline_too() {
    let dir = tempfile::tempdir().unwrap();
    let certs = common::tls::certs_dir(dir.path());
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "password: s3cr3tPW\n").unwrap();
    let key_text = std::fs::read_to_string(certs.join("client.key")).unwrap();
    let key_body = key_text.lines().nth(1).unwrap().to_string();
    let path = |p: PathBuf| p.display().to_string();
    let yaml = format!(
        "masters:
  - {{name: a, url: \"rediss://127.0.0.1:7001\", tls_ca_file: {notes:?}}}
  - {{name: b, url: \"rediss://127.0.0.1:7002\", tls_ca_file: {key:?}}}
  - {{name: c, url: \"rediss://127.0.0.1:7003\", tls_ca_file: {ca:?}, tls_cert_file: {cert:?}, tls_key_file: {cert:?}}}
",
        notes = path(notes.clone()),
        key = path(certs.join("client.key")),
        ca = path(certs.join("ca.crt")),
        cert = path(certs.join("client.crt")),
    );
    for out in [check(dir.path(), &yaml), check_offline(dir.path(), &yaml)] {
        assert_eq!(out.code, Some(64), "{}", out.stderr);
        assert_lines(
            &out,
            &[
                format!(
                    "masters[0].tls_ca_file: {:?} holds no PEM certificate",
                    path(notes.clone())
                ),
                format!(
                    "masters[1].tls_ca_file: {:?} holds no PEM certificate",
                    path(certs.join("client.key"))
                ),
                format!(
                    "masters[2].tls_key_file: {:?} holds no PEM private key",
                    path(certs.join("client.crt"))
                ),
            ],
        );
        assert!(!out.all().contains("s3cr3tPW"), "{}", out.all());
        assert!(!out.all().contains(&key_body), "{}", out.all());
    }
}

/// The password's halves: shapes that split it must show neither.
const HALVES: [&str; 2] = ["s3cr", "3tPW"];

fn shows_no_secret(what: &str, run: &Run) {
    let all = run.all();
    for half in HALVES {
        assert!(!all.contains(half), "{what}: {half:?} shows in:\n{all}");
    }
}

/// `check`, `check --offline` and a start on `yaml`: each exits 64, shows
/// `control` (the field path or the line) and no part of the password.
fn refused_everywhere_without_the_password(dir: &Path, yaml: &str, control: &str) {
    for (how, out) in [
        ("check", check(dir, yaml)),
        ("check --offline", check_offline(dir, yaml)),
        ("a start", run(dir, &[], yaml)),
    ] {
        assert_eq!(out.code, Some(64), "{how} on {yaml}: {}", out.stderr);
        assert!(
            out.stderr.contains(control),
            "{how} on {yaml}: missing {control:?} in:\n{}",
            out.stderr
        );
        shows_no_secret(&format!("{how} on {yaml}"), &out);
    }
}

/// Every broken shape of a URL with a password: no authority, one slash,
/// no scheme, a reserved character in the password, a bad port, no host,
/// the password in the path, query or fragment, a password where the user
/// goes, the URL where a key or a list goes. Each is refused with its
/// field path and never shows the password.
#[test]
fn malformed_urls_never_show_their_password() {
    let dir = tempfile::tempdir().unwrap();
    let urls = [
        "redis:/:s3cr3tPW@127.0.0.1:6379",
        "redis//:s3cr3tPW@127.0.0.1:6379",
        "redis:///:s3cr3tPW@127.0.0.1",
        "redis:s3cr3tPW@127.0.0.1",
        "s3cr3tPW",
        "redis://:s3cr/3tPW@127.0.0.1",
        "redis://agent:s3cr#3tPW@127.0.0.1",
        "redis://agent:s3cr?3tPW@127.0.0.1",
        "redis://agent:s3cr%3tPW@127.0.0.1:port",
        "redis://:s3cr3tPW@127.0.0.1:99999",
        "redis://:s3cr3tPW@",
        "redis://:s3cr3tPW@:6379",
        "redis://:s3cr3tPW@127 .0.0.1",
        "redis://127.0.0.1:6379/0:s3cr3tPW",
        "rediss://127.0.0.1:6379/#s3cr3tPW",
        "redis://127.0.0.1:6379/?protocol=s3cr3tPW",
        "redis://127.0.0.1:6379/?password=s3cr3tPW",
        "redis://127.0.0.1:6379/?s3cr3tPW",
        "http://agent:s3cr3tPW@127.0.0.1",
        "redis://s3cr3tPW@127.0.0.1",
    ];
    for url in urls {
        let yaml = format!("masters:\n  - {{name: r1, url: {url:?}}}\n");
        refused_everywhere_without_the_password(dir.path(), &yaml, "masters[0].url: ");
        let yaml =
            format!("masters:\n  - {{name: r1, cluster: [\"redis://127.0.0.1:1\", {url:?}]}}\n");
        refused_everywhere_without_the_password(dir.path(), &yaml, "masters[0].cluster[1]: ");
    }
    for (yaml, control) in [
        (
            "masters:\n  - {name: r1, cluster: \"redis://:s3cr3tPW@127.0.0.1:1\"}\n",
            "masters[0].cluster: expected a list",
        ),
        (
            "masters:\n  - {name: r1, url: [\"redis://:s3cr3tPW@127.0.0.1:1\"]}\n",
            "masters[0].url: expected a redis:// or rediss:// URL, found a list",
        ),
        (
            "masters: \"redis://:s3cr3tPW@127.0.0.1:1\"\n",
            "masters: expected a list",
        ),
        (
            "masters:\n  - {name: r1, url: \"redis://127.0.0.1:1\", redis://:s3cr3tPW@127.0.0.1:1}\n",
            "masters[0]: an unknown key not shaped like one",
        ),
        (
            "masters:\n  - {name: \"redis://:s3cr3tPW@127.0.0.1:1\", url: \"redis://127.0.0.1:1\"}\n",
            "masters[0].name: use 1 to 64 letters",
        ),
    ] {
        refused_everywhere_without_the_password(dir.path(), yaml, control);
    }
    // A fragment the redis client ignores is accepted; it never shows.
    let yaml = "masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@127.0.0.1:1/0#s3cr3tPW\"}\n";
    let out = check_offline(dir.path(), yaml);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("redis://:***@127.0.0.1:1/0#***"),
        "{}",
        out.stdout
    );
    shows_no_secret("check --offline", &out);
    let out = check(dir.path(), yaml);
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("masters[0] (r1): cannot be used: cannot connect"),
        "{}",
        out.stderr
    );
    shows_no_secret("check", &out);
}

/// YAML broken around passwords (an unclosed mapping, a bad indent, a tab,
/// an unclosed quote, a duplicate key, an alias without anchor) is refused
/// with its line and column, and the lines around it, which hold the
/// passwords, never show.
#[test]
fn broken_yaml_never_shows_the_passwords_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@127.0.0.1:1\"\n  - {name: r2, url: \"redis://:s3cr3tPW@127.0.0.1:2\"}\n",
            3,
        ),
        (
            "masters:\n  - name: r1\n    url: redis://:s3cr3tPW@127.0.0.1:1\n   password_env: X\n  - name: r2\n    url: redis://:s3cr3tPW@127.0.0.1:2\n",
            4,
        ),
        (
            "masters:\n  - name: r1\n    url: redis://:s3cr3tPW@127.0.0.1:1\n\turl: redis://:s3cr3tPW@127.0.0.1:2\n",
            3,
        ),
        (
            "masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@127.0.0.1:1}\n  - {name: r2, url: redis://:s3cr3tPW@127.0.0.1:2}\n",
            2,
        ),
        (
            "masters:\n  - name: r1\n    url: redis://:s3cr3tPW@127.0.0.1:1\n    url: redis://:s3cr3tPW@127.0.0.1:2\n",
            4,
        ),
        (
            "masters:\n  - {name: r1, url: *s3cr3tPW}\n",
            2,
        ),
    ];
    for (yaml, line) in cases {
        refused_everywhere_without_the_password(
            dir.path(),
            yaml,
            &format!("not valid YAML at line {line}, column "),
        );
    }
}
