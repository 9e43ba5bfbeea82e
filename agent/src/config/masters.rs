//! The `masters` list: each a single server's URL or a Redis Cluster's
//! seeds, its password from the URL, a file or the environment (one place
//! only), and its TLS files, each read and checked now so that a bad one
//! is refused at start rather than at the first connection. The hosts are
//! then compared ([`super::addresses`]).

use std::collections::HashSet;
use std::path::PathBuf;

use serde_json::Value;

use super::addresses::{check_same_server, local_addresses, resolve_all, AddressCheck, Endpoint};
use super::urls::{without_detail, MasterUrl};
use super::yaml::{echo, kind, Section};
use super::{FieldError, MasterConfig, TlsClient};

pub(super) fn read_masters(
    tree: Option<Value>,
    check: AddressCheck,
    errors: &mut Vec<FieldError>,
) -> Vec<MasterConfig> {
    let items = match tree {
        None => {
            errors.push(FieldError {
                path: "masters".into(),
                message: "required: list at least one master as {name, url} or {name, cluster}"
                    .into(),
            });
            return Vec::new();
        }
        Some(Value::Array(items)) => items,
        Some(other) => {
            errors.push(FieldError {
                path: "masters".into(),
                message: format!(
                    "expected a list of {{name, url}}, found {} (not shown: it may hold a password)",
                    kind(&other)
                ),
            });
            return Vec::new();
        }
    };
    if items.is_empty() {
        errors.push(FieldError {
            path: "masters".into(),
            message: "needs at least one master".into(),
        });
    }
    let mut seen = HashSet::new();
    let mut masters = Vec::new();
    // Every URL that parsed, named or not, for the same-server check.
    let mut endpoints: Vec<Endpoint> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("masters[{i}]");
        let mut s = Section::new(&path, item, errors);
        let name: Option<String> = s.take("name", "a string");
        let url: Option<String> = s.take_secret("url", "a redis:// or rediss:// URL");
        let seeds: Option<Vec<String>> = s.take_secret(
            "cluster",
            "a list of a Redis Cluster's seed nodes as redis:// or rediss:// URLs",
        );
        let password_file: Option<String> = s.take("password_file", "a file path");
        let password_env: Option<String> = s.take("password_env", "an environment variable name");
        let tls_ca_file: Option<String> = s.take("tls_ca_file", "a file path");
        let tls_cert_file: Option<String> = s.take("tls_cert_file", "a file path");
        let tls_key_file: Option<String> = s.take("tls_key_file", "a file path");
        let name = match name {
            None => {
                s.error("name", "required");
                None
            }
            Some(name) if !valid_name(&name) => {
                s.error(
                    "name",
                    format!(
                        "use 1 to 64 letters, digits, '-', '_' or '.': {}",
                        echo(&name)
                    ),
                );
                None
            }
            Some(name) if !seen.insert(name.clone()) => {
                s.error("name", format!("duplicate master name {name:?}"));
                None
            }
            Some(name) => Some(name),
        };
        let parse = |s: &mut Section<'_>, field: &str, raw: &str| match MasterUrl::parse(raw) {
            Ok(url) => match url.connection_info() {
                Ok(_) => Some(url),
                Err(e) => {
                    s.error(
                        field,
                        format!(
                            "refused by the redis client ({}): {:?}",
                            without_detail(&e),
                            url.to_string()
                        ),
                    );
                    None
                }
            },
            Err(message) => {
                s.error(field, message);
                None
            }
        };
        // A single server's URL, or every seed of a cluster (all must parse).
        let urls: Option<Vec<(String, MasterUrl)>> = match (url, seeds) {
            (Some(_), Some(_)) => {
                s.error(
                    "cluster",
                    "give url (one server) or cluster (a Redis Cluster's seed nodes), not both",
                );
                None
            }
            (None, None) => {
                s.error("url", "required (or cluster: a Redis Cluster's seed nodes)");
                None
            }
            (Some(raw), None) => parse(&mut s, "url", &raw).map(|u| vec![("url".to_string(), u)]),
            (None, Some(seeds)) if seeds.is_empty() => {
                s.error("cluster", "needs at least one seed node");
                None
            }
            (None, Some(seeds)) => {
                let parsed: Vec<Option<(String, MasterUrl)>> = seeds
                    .iter()
                    .enumerate()
                    .map(|(j, raw)| {
                        let field = format!("cluster[{j}]");
                        parse(&mut s, &field, raw).map(|u| (field, u))
                    })
                    .collect();
                let tls: HashSet<bool> = parsed.iter().flatten().map(|(_, u)| u.is_tls()).collect();
                if tls.len() > 1 {
                    s.error(
                        "cluster",
                        "mixes redis:// and rediss:// seeds; use one scheme",
                    );
                    None
                } else {
                    parsed.into_iter().collect()
                }
            }
        };
        let url = urls.as_ref().map(|urls| urls[0].1.clone());
        let password = match (password_file, password_env) {
            (Some(_), Some(_)) => {
                s.error(
                    "password_env",
                    "set password_file or password_env, not both",
                );
                None
            }
            (Some(file), None) => match std::fs::read_to_string(&file) {
                Ok(text) => Some((
                    "password_file",
                    text.trim_end_matches(['\r', '\n']).to_string(),
                )),
                Err(e) => {
                    s.error("password_file", format!("cannot read {file:?}: {e}"));
                    None
                }
            },
            (None, Some(var)) => match std::env::var(&var) {
                Ok(value) => Some(("password_env", value)),
                Err(_) => {
                    s.error(
                        "password_env",
                        format!("environment variable {var:?} is not set"),
                    );
                    None
                }
            },
            (None, None) => None,
        };
        let tls_ca = match (&tls_ca_file, &url) {
            (None, _) => None,
            (Some(_), Some(url)) if !url.is_tls() => {
                s.error("tls_ca_file", "only for rediss:// URLs");
                None
            }
            (Some(file), _) => match std::fs::read(file) {
                Ok(pem) => match check_ca(&pem) {
                    Ok(()) => Some(pem),
                    Err(why) => {
                        s.error("tls_ca_file", format!("{file:?} {why}"));
                        None
                    }
                },
                Err(e) => {
                    s.error("tls_ca_file", format!("cannot read {file:?}: {e}"));
                    None
                }
            },
        };
        let tls_client = read_tls_client(&mut s, url.as_ref(), &tls_cert_file, &tls_key_file);
        s.finish();
        for (field, url) in urls.iter().flatten() {
            let (host, port) = url.endpoint();
            endpoints.push(Endpoint {
                path: format!("{path}.{field}"),
                name: name.clone(),
                master: i,
                host,
                port,
            });
        }
        let (Some(name), Some(_), Some(urls)) = (name, url, urls) else {
            continue;
        };
        let wanted = urls.len();
        let mut urls_ok = Vec::with_capacity(wanted);
        for (field, mut url) in urls {
            if let Some((key, password)) = &password {
                if url.has_password() {
                    errors.push(FieldError {
                        path: format!("{path}.{key}"),
                        message: format!(
                            "the {field} already carries a password; give it in one place"
                        ),
                    });
                    continue;
                }
                url.set_password(password);
            }
            if url.has_user_without_password() {
                errors.push(FieldError {
                    path: format!("{path}.{field}"),
                    message: format!(
                        "names a user but no password, so the redis client would not log in as it; \
                         give the password in the URL (redis://USER:PASSWORD@host), password_file or \
                         password_env, or write redis://:PASSWORD@host if this was the password: {:?}",
                        url.to_string()
                    ),
                });
                continue;
            }
            urls_ok.push((field, url));
        }
        if urls_ok.len() != wanted {
            continue;
        }
        let is_cluster = urls_ok[0].0 != "url";
        let urls: Vec<MasterUrl> = urls_ok.into_iter().map(|(_, u)| u).collect();
        masters.push(MasterConfig {
            name,
            url: urls[0].clone(),
            cluster: if is_cluster { urls } else { Vec::new() },
            tls_ca_file: tls_ca_file.map(PathBuf::from),
            tls_ca,
            tls_cert_file: tls_cert_file.map(PathBuf::from),
            tls_key_file: tls_key_file.map(PathBuf::from),
            tls_client,
        });
    }
    if check == AddressCheck::Resolve {
        check_same_server(&endpoints, &resolve_all, &local_addresses(), errors);
    }
    masters
}

/// The client certificate of one master: both files or neither, only for
/// `rediss://`.
fn read_tls_client(
    s: &mut Section<'_>,
    url: Option<&MasterUrl>,
    cert_file: &Option<String>,
    key_file: &Option<String>,
) -> Option<TlsClient> {
    let (cert_file, key_file) = match (cert_file, key_file) {
        (None, None) => return None,
        (Some(_), None) => {
            s.error("tls_key_file", "required with tls_cert_file");
            return None;
        }
        (None, Some(_)) => {
            s.error("tls_cert_file", "required with tls_key_file");
            return None;
        }
        (Some(cert), Some(key)) => (cert, key),
    };
    if url.is_some_and(|url| !url.is_tls()) {
        s.error("tls_cert_file", "only for rediss:// URLs");
        return None;
    }
    let mut read = |key: &str, file: &str| match std::fs::read(file) {
        Ok(pem) => Some(pem),
        Err(e) => {
            s.error(key, format!("cannot read {file:?}: {e}"));
            None
        }
    };
    let cert = read("tls_cert_file", cert_file);
    let key = read("tls_key_file", key_file);
    let cert = cert.filter(|pem| match check_cert(pem) {
        Ok(()) => true,
        Err(why) => {
            s.error("tls_cert_file", format!("{cert_file:?} {why}"));
            false
        }
    });
    let key = key.filter(|pem| match check_key(pem) {
        Ok(()) => true,
        Err(why) => {
            s.error("tls_key_file", format!("{key_file:?} {why}"));
            false
        }
    });
    Some(TlsClient {
        cert: cert?,
        key: key?,
    })
}

/// Checks that `pem` holds certificates, each one rustls takes as a trust
/// anchor: a file that is not a CA (a key, a text file, a truncated
/// copy) would otherwise fail only at the first connection, as an unknown
/// issuer. The messages never quote the file.
fn check_ca(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|_| "holds a PEM block that does not decode".to_string())?;
        store.add(cert).map_err(|_| {
            "holds a CERTIFICATE block that is not an X.509 certificate a client can trust"
                .to_string()
        })?;
    }
    if store.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_string());
    }
    Ok(())
}

/// Checks that `pem` holds a client certificate chain the TLS client reads.
fn check_cert(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "holds a PEM block that does not decode".to_string())?;
    if certs.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_string());
    }
    Ok(())
}

/// Checks that `pem` holds a private key the TLS client reads. The key is
/// never shown, nor anything of the file.
fn check_key(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
    if PrivateKeyDer::from_pem_slice(pem).is_ok() {
        return Ok(());
    }
    let encrypted = pem.windows(b"ENCRYPTED".len()).any(|w| w == b"ENCRYPTED");
    Err(if encrypted {
        "holds an encrypted private key: the TLS client needs it unencrypted (PKCS#8, PKCS#1 or SEC1 PEM)"
    } else {
        "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)"
    }
    .to_string())
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::tests::{errors_of, errors_offline};
    use crate::config::Config;

    #[test]
    fn missing_or_empty_masters_are_errors() {
        assert_eq!(
            errors_of(""),
            ["masters: required: list at least one master as {name, url} or {name, cluster}"]
        );
        assert_eq!(
            errors_of("masters: []"),
            ["masters: needs at least one master"]
        );
    }

    #[test]
    fn password_from_file_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let yaml = format!(
            "masters:\n  - {{name: r1, url: \"redis://127.0.0.1:1\", password_file: {:?}}}\n",
            file.display().to_string()
        );
        let config = Config::from_yaml(&yaml).unwrap();
        let info = config.masters[0].url.connection_info().unwrap();
        assert_eq!(info.redis_settings().password(), Some("s3cret"));

        let yaml = "masters:\n  - {name: r1, url: \"redis://127.0.0.1:1\", password_env: REDLOCK_TEST_UNSET_VAR}\n";
        assert_eq!(
            errors_of(yaml),
            ["masters[0].password_env: environment variable \"REDLOCK_TEST_UNSET_VAR\" is not set"]
        );
    }

    #[test]
    fn urls_the_redis_client_refuses_are_config_errors() {
        let yaml = "masters:\n  - {name: r1, url: \"redis://:hunter2@127.0.0.1:6379/zero\"}\n";
        let errors = errors_of(yaml);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("masters[0].url: refused by the redis client"),
            "{errors:?}"
        );
        assert!(!errors[0].contains("hunter2"), "{errors:?}");
    }

    #[test]
    fn tls_files_that_are_not_what_they_say_are_refused_without_their_text() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "s3cr3tPW\n").unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nczNjcjN0UFc=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let key = dir.path().join("key.pem");
        std::fs::write(
            &key,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nczNjcjN0UFc=\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        let path = |p: &Path| p.display().to_string();
        let yaml = format!(
            "masters:
  - {{name: a, url: \"rediss://h:1\", tls_ca_file: {:?}}}
  - {{name: b, url: \"rediss://h:2\", tls_ca_file: {:?}}}
  - {{name: c, url: \"rediss://h:3\", tls_ca_file: {:?}}}
  - {{name: d, url: \"rediss://h:4\", tls_cert_file: {:?}, tls_key_file: {:?}}}
",
            path(&text),
            path(&empty),
            path(&garbage),
            path(&key),
            path(&key),
        );
        let errors = errors_offline(&yaml);
        let expected = [
            format!("masters[0].tls_ca_file: {:?} holds no PEM certificate", path(&text)),
            format!("masters[1].tls_ca_file: {:?} holds no PEM certificate", path(&empty)),
            format!(
                "masters[2].tls_ca_file: {:?} holds a CERTIFICATE block that is not an X.509 certificate",
                path(&garbage)
            ),
            format!("masters[3].tls_cert_file: {:?} holds no PEM certificate", path(&key)),
            format!(
                "masters[3].tls_key_file: {:?} holds an encrypted private key",
                path(&key)
            ),
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, start) in errors.iter().zip(&expected) {
            assert!(
                error.starts_with(start.as_str()),
                "{error:?} is not {start:?}"
            );
            assert!(
                !error.contains("s3cr3tPW") && !error.contains("czNjcjN0UFc"),
                "{error}"
            );
        }
    }
}
