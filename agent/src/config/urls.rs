//! A master's `redis://` or `rediss://` URL: parsed, refused when it holds
//! what the redis client would silently ignore (a password or a user in
//! the query), and shown (`Display`, `Debug`, serialized) with its password
//! and anything that could be one hidden.

use std::fmt;

use serde::Serialize;

/// The port the redis client uses when a URL names none.
const DEFAULT_REDIS_PORT: u16 = 6379;

/// The one query parameter the redis client reads from a TCP URL.
const READ_QUERY_KEY: &str = "protocol";

/// Query parameter names shown in messages; any other name is shown as
/// `***`, since a misplaced password could sit there too.
const NAMED_QUERY_KEYS: &[&str] = &[
    READ_QUERY_KEY,
    "password",
    "pass",
    "passwd",
    "pwd",
    "auth",
    "user",
    "username",
    "db",
];

/// A query parameter's name as messages show it.
fn shown_query_key(key: &str) -> &str {
    if NAMED_QUERY_KEYS.contains(&key) {
        key
    } else {
        "***"
    }
}

/// A `redis://` or `rediss://` URL whose password never shows in `Debug`,
/// `Display` or serialized output, neither from the userinfo nor from the
/// query.
#[derive(Clone)]
pub struct MasterUrl {
    url: url::Url,
}

impl MasterUrl {
    /// Parses and checks the scheme, the host and the query; the error says
    /// what is wrong with the value and shows no more of it than
    /// [`MasterUrl`]'s `Display` does (nothing at all when it does not
    /// parse: a password with a reserved character in it breaks the URL
    /// anywhere, and its pieces land in the host, port, path or query).
    ///
    /// The redis client reads only `protocol` from the query of a TCP URL:
    /// a `?password=` would be silently ignored (the master answers NOAUTH
    /// at run time), so every other parameter is refused here.
    pub fn parse(raw: &str) -> Result<MasterUrl, String> {
        let url = url::Url::parse(raw).map_err(|e| {
            format!(
                "not a URL ({e}); the value is not shown, since it may hold a password: write \
                 redis://[USER:PASSWORD@]HOST[:PORT][/DB] (or rediss://), with any of \
                 : / ? # @ % in the user or password percent-encoded, or give the password \
                 in password_file or password_env"
            )
        })?;
        let url = MasterUrl { url };
        match url.url.scheme() {
            "redis" | "rediss" => {}
            _ => {
                return Err(format!(
                    "not a redis:// or rediss:// URL: {:?}",
                    url.to_string()
                ))
            }
        }
        if url.url.host_str().is_none_or(str::is_empty) {
            let hint = if raw.contains("://") {
                ""
            } else {
                " (the scheme takes two slashes: redis://HOST)"
            };
            return Err(format!("URL has no host{hint}: {:?}", url.to_string()));
        }
        for (part, raw) in [
            ("user", url.url.username()),
            ("password", url.url.password().unwrap_or("")),
        ] {
            if let Some(problem) = escape_problem(raw) {
                return Err(format!(
                    "the {part} {problem}; the value is not shown, since it may hold a password: \
                     write a % in the {part} as %25, or give the password in password_file or \
                     password_env: {:?}",
                    url.to_string()
                ));
            }
        }
        for (key, _) in url.url.query_pairs() {
            let hint = match key.as_ref() {
                READ_QUERY_KEY => continue,
                "password" | "pass" | "passwd" | "pwd" | "auth" => {
                    "the redis client ignores a password in the query; put it in the URL \
                     (redis://:PASSWORD@host or redis://USER:PASSWORD@host), or use \
                     password_file or password_env"
                }
                "user" | "username" => {
                    "the redis client ignores a user in the query; put it in the URL \
                     (redis://USER:PASSWORD@host)"
                }
                "db" => "the redis client ignores db in the query; put the number in the path (redis://host:6379/2)",
                _ => "the redis client reads only ?protocol= from the query",
            };
            return Err(format!(
                "query parameter {:?} is not used: {hint}: {:?}",
                shown_query_key(&key),
                url.to_string()
            ));
        }
        Ok(url)
    }

    /// The host and port the redis client connects to (6379 when the URL
    /// names none); an IPv6 host comes without brackets.
    pub fn endpoint(&self) -> (String, u16) {
        let host = match self.url.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Domain(name)) => name.to_string(),
            // `parse` accepted only URLs with a host.
            None => String::new(),
        };
        (host, self.url.port().unwrap_or(DEFAULT_REDIS_PORT))
    }

    /// A `rediss://` URL.
    pub fn is_tls(&self) -> bool {
        self.url.scheme() == "rediss"
    }

    pub fn has_password(&self) -> bool {
        self.url.password().is_some()
    }

    /// A user name without a password: the redis client then sends no
    /// AUTH at all, so the connection would silently be the default user.
    pub(super) fn has_user_without_password(&self) -> bool {
        !self.url.username().is_empty() && !self.has_password()
    }

    pub(super) fn set_password(&mut self, password: &str) {
        // Cannot fail: `parse` accepted only URLs with a host.
        self.url
            .set_password(Some(password))
            .expect("redis URLs have a host");
    }

    /// Connection parameters for the redis crate, password included.
    ///
    /// # Errors
    /// When the redis crate refuses the URL (for example a bad database number).
    pub fn connection_info(&self) -> redis::RedisResult<redis::ConnectionInfo> {
        use redis::IntoConnectionInfo;
        self.url.as_str().into_connection_info()
    }
}

/// What is wrong with the percent-escapes of a URL's user or password, as
/// written: a `%` not followed by two hex digits (the redis client would
/// take it literally, `%zz` as three characters, and AUTH would fail at run
/// time), or escapes that decode to bytes that are not UTF-8 (which the
/// redis client refuses).
fn escape_problem(raw: &str) -> Option<&'static str> {
    let bytes = raw.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return Some("has a % that is not a percent-escape (% and two hex digits)");
        }
    }
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .is_err()
        .then_some("has percent-escapes that do not decode to UTF-8")
}

/// The `protocol` values the redis client knows; any other is shown as
/// `***`, like every query value but these.
const PROTOCOLS: &[&str] = &["2", "3", "resp2", "resp3"];

/// Shows the scheme, the host and the port as parsed; the user name only
/// beside a password (alone, it may be a misplaced password: `***`); the
/// password as `***`; the path only when it is a database number; the
/// query's known names with only a known `protocol` value; and a fragment
/// only when it is `#insecure`. Whatever shape the value has, no other
/// text of it shows.
impl fmt::Display for MasterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = &self.url;
        write!(f, "{}:", url.scheme())?;
        if let Some(host) = url.host_str() {
            f.write_str("//")?;
            if url.password().is_some() {
                write!(f, "{}:***@", url.username())?;
            } else if !url.username().is_empty() {
                f.write_str("***@")?;
            }
            f.write_str(host)?;
            if let Some(port) = url.port() {
                write!(f, ":{port}")?;
            }
        }
        let path = url.path();
        let number = path.strip_prefix('/').unwrap_or(path);
        if number.bytes().all(|b| b.is_ascii_digit()) {
            f.write_str(path)?;
        } else if path.starts_with('/') {
            f.write_str("/***")?;
        } else {
            f.write_str("***")?;
        }
        if url.query().is_some() {
            let pairs: Vec<String> = url
                .query_pairs()
                .map(|(k, v)| {
                    let v = if k == READ_QUERY_KEY && PROTOCOLS.contains(&v.as_ref()) {
                        v.into_owned()
                    } else {
                        "***".into()
                    };
                    format!("{}={v}", shown_query_key(&k))
                })
                .collect();
            write!(f, "?{}", pairs.join("&"))?;
        }
        match url.fragment() {
            None => Ok(()),
            Some("insecure") => f.write_str("#insecure"),
            Some(_) => f.write_str("#***"),
        }
    }
}

impl fmt::Debug for MasterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MasterUrl({self})")
    }
}

impl Serialize for MasterUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A redis client error without its detail, which may quote the value it
/// refused (an unknown `?protocol=`, for one).
pub(super) fn without_detail(e: &redis::RedisError) -> String {
    let text = e.to_string();
    match e.detail() {
        Some(detail) => text
            .strip_suffix(detail)
            .and_then(|t| t.strip_suffix(": "))
            .map_or_else(|| e.category().to_string(), str::to_string),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::MasterUrl;
    use crate::config::tests::{errors_of, errors_offline};
    use crate::config::{AddressCheck, Config};

    #[test]
    fn passwords_never_show() {
        let yaml = "masters:\n  - {name: r1, url: \"redis://:hunter2@127.0.0.1:6379/0\"}\n";
        let config = Config::from_yaml(yaml).unwrap();
        let shown = format!(
            "{:?} {} {}",
            config,
            config.masters[0].url,
            serde_json::to_string(&config).unwrap()
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redis://:***@127.0.0.1:6379/0"), "{shown}");
        let info = config.masters[0].url.connection_info().unwrap();
        assert_eq!(info.redis_settings().password(), Some("hunter2"));

        let bad = "masters:\n  - {name: r1, url: \"http://u:hunter2@x\"}\n";
        let errors = errors_of(bad).join("\n");
        assert!(!errors.contains("hunter2"), "{errors}");
    }

    #[test]
    fn query_passwords_are_refused_and_never_show() {
        let yaml = "masters:\n  - {name: r1, url: \"redis://127.0.0.1:6379/0?password=hunter2\"}\n";
        let errors = errors_of(yaml);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("masters[0].url: query parameter \"password\" is not used"),
            "{errors:?}"
        );
        assert!(errors[0].contains("password_file"), "{errors:?}");
        assert!(errors[0].contains("?password=***"), "{errors:?}");
        assert!(!errors[0].contains("hunter2"), "{errors:?}");

        // The other spellings, in URLs that do or do not parse.
        for url in [
            "redis://127.0.0.1:6379?pass=hunter2",
            "redis://127.0.0.1:6379?protocol=resp3&auth=hunter2",
            "redis://u:hunter2@127.0.0.1:6379?user=u",
            "http://127.0.0.1?password=hunter2",
            "redis://127.0.0.1:port?password=hunter2",
        ] {
            let errors = errors_of(&format!("masters:\n  - {{name: r1, url: {url:?}}}\n"));
            assert_eq!(errors.len(), 1, "{url}: {errors:?}");
            assert!(!errors[0].contains("hunter2"), "{errors:?}");
        }
    }

    #[test]
    fn a_user_without_a_password_is_refused_and_not_shown() {
        let yaml = "masters:\n  - {name: r1, url: \"redis://hunter2@127.0.0.1:6379\"}\n";
        let errors = errors_of(yaml);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("masters[0].url: names a user but no password"),
            "{errors:?}"
        );
        assert!(
            errors[0].contains("\"redis://***@127.0.0.1:6379\""),
            "{errors:?}"
        );
        assert!(!errors[0].contains("hunter2"), "{errors:?}");

        // With the password from the environment, the user is used.
        let yaml =
            "masters:\n  - {name: r1, url: \"redis://agent@127.0.0.1:6379\", password_env: PATH}\n";
        let config = Config::from_yaml(yaml).unwrap();
        let info = config.masters[0].url.connection_info().unwrap();
        assert_eq!(info.redis_settings().username(), Some("agent"));
        assert_eq!(
            config.masters[0].url.to_string(),
            "redis://agent:***@127.0.0.1:6379"
        );
    }

    #[test]
    fn unknown_query_names_are_not_shown_either() {
        for url in [
            "redis://127.0.0.1:6379?hunter2",
            "redis://127.0.0.1:6379?hunter2=x",
            "redis://127.0.0.1:port?hunter2",
        ] {
            let errors = errors_of(&format!("masters:\n  - {{name: r1, url: {url:?}}}\n"));
            assert_eq!(errors.len(), 1, "{url}: {errors:?}");
            assert!(!errors[0].contains("hunter2"), "{errors:?}");
        }
    }

    #[test]
    fn the_protocol_query_is_used_and_shown() {
        let yaml =
            "masters:\n  - {name: r1, url: \"redis://:hunter2@127.0.0.1:6379?protocol=resp3\"}\n";
        let config = Config::from_yaml(yaml).unwrap();
        assert_eq!(
            config.masters[0].url.to_string(),
            "redis://:***@127.0.0.1:6379?protocol=resp3"
        );
        let info = config.masters[0].url.connection_info().unwrap();
        assert_eq!(
            info.redis_settings().protocol(),
            redis::ProtocolVersion::RESP3
        );
    }

    /// A `%` in the user or password that is not an escape is refused, with
    /// the field and never the password: the redis client would send it as
    /// written, and AUTH fail at run time.
    #[test]
    fn invalid_percent_escapes_in_the_userinfo_are_refused_without_the_password() {
        for (url, part) in [
            ("redis://:hid%zzden@127.0.0.1:6379", "password"),
            ("redis://:hidden%4@127.0.0.1:6379", "password"),
            ("redis://:hidden%@127.0.0.1:6379", "password"),
            ("redis://:hid%ffden@127.0.0.1:6379", "password"),
            ("redis://ag%zzent:hidden@127.0.0.1:6379", "user"),
        ] {
            let error = MasterUrl::parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url} accepted"));
            assert!(
                error.starts_with(&format!("the {part} has ")),
                "{url}: {error}"
            );
            assert!(
                error.contains(&format!("write a % in the {part} as %25")),
                "{url}: {error}"
            );
            assert!(!error.contains("hid"), "{url}: {error}");
        }
        let fine = MasterUrl::parse("redis://:hid%25zz%2Fden@127.0.0.1:6379").unwrap();
        let info = fine.connection_info().unwrap();
        assert_eq!(info.redis_settings().password(), Some("hid%zz/den"));
    }

    /// The password's two halves: a shape that splits it must show neither.
    const HALVES: [&str; 2] = ["s3cr", "3tPW"];

    #[test]
    fn malformed_urls_never_show_their_password() {
        let shapes = [
            // No authority: the password lands in the path.
            "redis:/:s3cr3tPW@host:6379",
            "redis:///:s3cr3tPW@host",
            "redis:s3cr3tPW@host",
            // Not a URL at all (no scheme).
            "redis//:s3cr3tPW@host",
            "s3cr3tPW",
            // A reserved character in the password breaks the authority.
            "redis://:s3cr/3tPW@host",
            "redis://user:s3cr#3tPW@host",
            "redis://user:s3cr?3tPW@host",
            "redis://:s3cr3tPW@host:port",
            "redis://:s3cr3tPW@host:99999",
            "redis://:s3cr3tPW@",
            "redis://:s3cr3tPW@:6379",
            "redis://:s3cr3tPW@ho st",
            // Parses, but the password sits where nothing should.
            "redis://host:6379/0:s3cr3tPW",
            "rediss://host:6379/#s3cr3tPW",
            "redis://host:6379/?protocol=s3cr3tPW",
            "redis://host:6379/?s3cr3tPW",
            "http://user:s3cr3tPW@host",
            "redis://s3cr3tPW@host",
        ];
        for url in shapes {
            let yaml = format!("masters:\n  - {{name: r1, url: {url:?}}}\n");
            let errors = errors_offline(&yaml);
            assert_eq!(errors.len(), 1, "{url}: {errors:?}");
            assert!(
                errors[0].starts_with("masters[0].url: "),
                "{url}: {errors:?}"
            );
            for half in HALVES {
                assert!(!errors[0].contains(half), "{url}: {errors:?}");
            }
            // And as a cluster's seed.
            let yaml = format!("masters:\n  - {{name: r1, cluster: [{url:?}]}}\n");
            let errors = errors_offline(&yaml).join("\n");
            assert!(
                errors.contains("masters[0].cluster[0]: "),
                "{url}: {errors}"
            );
            assert!(
                !HALVES.iter().any(|h| errors.contains(h)),
                "{url}: {errors}"
            );
        }
        // What shows: the scheme, the host, a hint.
        let errors = errors_offline("masters:\n  - {name: r1, url: \"redis:/:s3cr3tPW@host\"}\n");
        assert_eq!(
            errors,
            ["masters[0].url: URL has no host (the scheme takes two slashes: redis://HOST): \"redis:/***\""]
        );
        let errors = errors_offline("masters:\n  - {name: r1, url: \"redis://:s3cr/3tPW@host\"}\n");
        assert!(
            errors[0].starts_with("masters[0].url: not a URL (empty host); the value is not shown"),
            "{errors:?}"
        );
        // A fragment the redis client ignores is accepted, and hidden.
        let config = Config::from_yaml_with(
            "masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@host:6379/2#s3cr3tPW\"}\n",
            AddressCheck::Skip,
        )
        .unwrap();
        assert_eq!(
            config.masters[0].url.to_string(),
            "redis://:***@host:6379/2#***"
        );
    }
}
