//! TLS for test masters: a CA, a second CA that signed nothing the masters
//! use, and server and client certificates, made with the `openssl` CLI;
//! masters with a TLS port beside their plain one (from the testkit).

use std::path::{Path, PathBuf};
use std::process::Command;

use redlock_testkit::{Options, RedisServer, Tls};

/// Runs `openssl args` in `dir`, failing the test with its stderr.
pub fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl is needed for this test (apt-get install -y openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA named `name`: `name.crt`, `name.key`.
pub fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

/// A certificate `name.crt` (key `name.key`) signed by CA `ca`, with the
/// extensions in `ext` (one `openssl x509 -extfile` line each).
pub fn leaf(dir: &Path, ca: &str, name: &str, ext: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

/// The certificates of a TLS test: `ca`, `other-ca` (signed nothing),
/// `server` (for 127.0.0.1 and localhost, signed by `ca`) and `client`
/// (client auth, signed by `ca`), each `name.crt` with `name.key` in `dir`.
pub fn certificates(dir: &Path) {
    ca(dir, "ca");
    ca(dir, "other-ca");
    leaf(
        dir,
        "ca",
        "server",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    );
    leaf(dir, "ca", "client", "extendedKeyUsage=clientAuth\n");
}

/// A master named `name` under `parent` with a TLS port that serves the
/// `server` certificate of `certs`, demanding a client certificate signed
/// by `ca` when `auth_clients`.
pub fn master(parent: &Path, name: &str, certs: &Path, auth_clients: bool) -> RedisServer {
    let tls = Tls {
        cert_file: certs.join("server.crt"),
        key_file: certs.join("server.key"),
        ca_file: certs.join("ca.crt"),
        auth_clients,
    };
    RedisServer::start_opts(parent, name, &Options::new().tls(tls))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Where the certificates of a test live, under `dir`.
pub fn certs_dir(dir: &Path) -> PathBuf {
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    certificates(&certs);
    certs
}
