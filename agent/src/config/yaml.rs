//! Reading the YAML: the file, only when it is a regular file of a
//! config's size; a syntax error told by its line and column and never
//! by the text there (a config's lines hold passwords); and `Section`,
//! the walker that reads one mapping of the parsed tree field by field,
//! recording every problem under its path.

use std::fs::{File, FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{ConfigError, FieldError};

/// The largest config file read: far more than any config (a few KiB with
/// dozens of masters), and small enough that reading it costs nothing.
pub const MAX_FILE: u64 = 1024 * 1024;

/// The text of the config file at `path`, read only when it is a regular
/// file of at most [`MAX_FILE`] bytes: a device (`/dev/zero`), a FIFO or a
/// directory is refused without being read, since reading it may never
/// end. The type is checked before the file is opened and again on the
/// file opened (without blocking, which opening a FIFO would), so that a
/// path swapped in between is refused too.
///
/// # Errors
/// [`ConfigError::NotAFile`], [`ConfigError::TooLarge`], or
/// [`ConfigError::Read`] when it cannot be opened or read, or is not UTF-8.
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    let read_error = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let not_a_file = |kind: FileType| ConfigError::NotAFile {
        path: path.to_path_buf(),
        what: file_kind(kind),
    };
    let kind = std::fs::metadata(path).map_err(read_error)?.file_type();
    if !kind.is_file() {
        return Err(not_a_file(kind));
    }
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(read_error)?;
    let opened = file.metadata().map_err(read_error)?;
    if !opened.file_type().is_file() {
        return Err(not_a_file(opened.file_type()));
    }
    let mut text = String::new();
    file.take(MAX_FILE + 1)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    if text.len() as u64 > MAX_FILE {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(text)
}

/// What a path that is not a regular file names, for its error.
fn file_kind(kind: FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something else"
    }
}

/// A YAML syntax error as users see it: where, and what went wrong, never
/// the text there. The parser's own rendering quotes the lines around the
/// error, and a config's neighbouring lines hold passwords; some of its
/// messages name a key or a value. So only the location and messages that
/// quote nothing of the file are shown; any other error is described by
/// its location alone.
pub(super) fn yaml_error(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::{Error as E, ExternalMessageSource};
    let e = e.without_snippet();
    let what = match e {
        // The scanner's and the parser's own messages are fixed texts (at
        // most they name one character); quoted words are hidden anyway.
        E::ExternalMessage { source, msg, .. }
            if matches!(**source, ExternalMessageSource::Parser(_)) =>
        {
            hide_quoted_words(msg)
        }
        E::DuplicateMappingKey { key, .. } => match key.as_deref() {
            Some(key) if is_key(key) => format!("the key {key:?} is given twice in one mapping"),
            _ => "a key is given twice in one mapping".to_string(),
        },
        E::Eof { .. } => "the file ends in the middle of a value".to_string(),
        E::MultipleDocuments { .. } => "more than one YAML document (---)".to_string(),
        E::UnknownAnchor { .. } => "an alias (*name) names no anchor (&name)".to_string(),
        E::Budget { .. } => "too large or too deeply nested".to_string(),
        _ => "it cannot be read as YAML".to_string(),
    };
    match e.location() {
        Some(at) => format!(
            "not valid YAML at line {}, column {}: {what} (the text there is not shown: it may hold a password)",
            at.line(),
            at.column()
        ),
        None => format!("not valid YAML: {what}"),
    }
}

/// `text` with every quoted part that holds a letter or a digit replaced
/// by `***` (`','` and `` `@' `` stay, `'hunter2'` does not). Any of
/// `'`, `"` and `` ` `` opens or closes a quote.
fn hide_quoted_words(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quoted = String::new();
    let mut inside = false;
    for c in text.chars() {
        if matches!(c, '\'' | '"' | '`') {
            if inside {
                if quoted.chars().any(char::is_alphanumeric) {
                    out.push_str("***");
                } else {
                    out.push_str(&quoted);
                }
                quoted.clear();
            }
            inside = !inside;
            out.push(c);
        } else if inside {
            quoted.push(c);
        } else {
            out.push(c);
        }
    }
    if quoted.chars().any(char::is_alphanumeric) {
        out.push_str("***");
    } else {
        out.push_str(&quoted);
    }
    out
}

/// A value of a field that holds no secret, quoted, unless it looks like a
/// URL with credentials pasted into the wrong field (then described only).
pub(super) fn echo(text: &str) -> String {
    if text.contains('@') || text.contains("://") {
        "(not shown: it looks like a URL and may hold a password)".to_string()
    } else {
        format!("{text:?}")
    }
}

/// A key that can be shown: a config key's shape (lowercase letters and
/// underscores), which neither a URL with credentials nor a password of
/// any strength has.
fn is_key(text: &str) -> bool {
    (1..=32).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// The longest any duration in the config may be: a day. None makes
/// sense past it (a lock that must outlive a day is a hold, renewed; a
/// quarantine of `lock.max_ttl + delayed_restart.extra` past it would keep
/// a master out for days), and a value far past it (`999999999999999s`)
/// would overflow the sums and products the agent makes of them.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// Reads the fields of one YAML mapping, recording every problem under the
/// mapping's path, and reports the keys nobody asked for as unknown.
pub(super) struct Section<'e> {
    path: String,
    map: Map<String, Value>,
    errors: &'e mut Vec<FieldError>,
}

impl<'e> Section<'e> {
    pub(super) fn new(path: &str, value: Value, errors: &'e mut Vec<FieldError>) -> Section<'e> {
        let map = match value {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                errors.push(FieldError {
                    path: path.to_string(),
                    message: format!("expected a mapping, found {}", kind(&other)),
                });
                Map::new()
            }
        };
        Section {
            path: path.to_string(),
            map,
            errors,
        }
    }

    fn child(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    pub(super) fn error(&mut self, key: &str, message: impl Into<String>) {
        let path = self.child(key);
        self.errors.push(FieldError {
            path,
            message: message.into(),
        });
    }

    /// Takes a field; `None` when absent, null, or of the wrong type (the
    /// last is recorded).
    pub(super) fn take<T: DeserializeOwned>(&mut self, key: &str, expected: &str) -> Option<T> {
        self.take_shown(key, expected, show)
    }

    /// As [`Section::take`] for a field that may hold a password: a value
    /// of the wrong type is described by its kind only.
    pub(super) fn take_secret<T: DeserializeOwned>(
        &mut self,
        key: &str,
        expected: &str,
    ) -> Option<T> {
        self.take_shown(key, expected, |value| {
            format!("{} (not shown: it may hold a password)", kind(value))
        })
    }

    /// Takes a field; a value of the wrong type is recorded as `describe`
    /// shows it.
    fn take_shown<T: DeserializeOwned>(
        &mut self,
        key: &str,
        expected: &str,
        describe: impl Fn(&Value) -> String,
    ) -> Option<T> {
        let value = self.map.remove(key)?;
        if value.is_null() {
            return None;
        }
        match serde_json::from_value(value.clone()) {
            Ok(v) => Some(v),
            Err(_) => {
                self.error(
                    key,
                    format!("expected {expected}, found {}", describe(&value)),
                );
                None
            }
        }
    }

    pub(super) fn raw(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// A duration field, at most [`MAX_DURATION`]; a longer one is
    /// recorded and read as [`MAX_DURATION`], which the checks that
    /// compare it with other fields can add to and multiply without
    /// overflow.
    pub(super) fn duration(&mut self, key: &str, default: Duration) -> Duration {
        let Some(text) = self.take::<String>(key, "a duration string like \"250ms\"") else {
            return default;
        };
        match humantime::parse_duration(text.trim()) {
            Ok(d) if d > MAX_DURATION => {
                self.error(
                    key,
                    format!(
                        "{text:?} is longer than a day; no duration in the config may be over \"24h\""
                    ),
                );
                MAX_DURATION
            }
            Ok(d) => d,
            Err(e) => {
                self.error(
                    key,
                    format!("not a duration ({e}): {text:?}; write e.g. \"250ms\" or \"10s\""),
                );
                default
            }
        }
    }

    /// Reports every key nobody took. A key not shaped like a config key
    /// (a URL with its password written where a key goes, say) is not
    /// shown.
    pub(super) fn finish(self) {
        for key in self.map.keys() {
            let (path, message) = if !is_key(key) {
                (
                    self.path.clone(),
                    "an unknown key not shaped like one (not shown: it may hold a password)",
                )
            } else if self.path.is_empty() {
                (key.clone(), "unknown key")
            } else {
                (format!("{}.{key}", self.path), "unknown key")
            };
            self.errors.push(FieldError {
                path,
                message: message.to_string(),
            });
        }
    }
}

pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

pub(super) fn show(value: &Value) -> String {
    match value {
        Value::Array(_) | Value::Object(_) => kind(value).to_string(),
        other => format!("{} {other}", kind(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{errors_of, errors_offline};

    #[test]
    fn only_a_regular_file_of_a_configs_size_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        for (path, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a character device"),
            (dir.path(), "a directory"),
        ] {
            match read_file(path) {
                Err(ConfigError::NotAFile { what: found, .. }) => assert_eq!(found, what),
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        let file = dir.path().join("config.yaml");
        std::fs::write(&file, "masters: []\n").unwrap();
        assert_eq!(read_file(&file).unwrap(), "masters: []\n");
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_file(&link).unwrap(), "masters: []\n");
        std::fs::write(&file, "#".repeat(MAX_FILE as usize)).unwrap();
        assert_eq!(read_file(&file).unwrap().len() as u64, MAX_FILE);
        std::fs::write(&file, "#".repeat(MAX_FILE as usize + 1)).unwrap();
        let error = read_file(&file).unwrap_err();
        assert!(matches!(error, ConfigError::TooLarge { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!(
                "{} is larger than 1024 KiB, more than any config; give the path of a YAML file",
                file.display()
            )
        );
        let missing = dir.path().join("missing.yaml");
        assert!(matches!(read_file(&missing), Err(ConfigError::Read { .. })));
    }

    #[test]
    fn syntax_errors_say_where() {
        let errors = errors_of("masters: [\n  - {name: r1");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("not valid YAML"), "{errors:?}");
        assert!(errors[0].contains("line"), "{errors:?}");
    }

    #[test]
    fn url_fields_of_the_wrong_type_are_described_not_shown() {
        for yaml in [
            "masters:\n  - {name: r1, cluster: \"redis://:s3cr3tPW@host\"}\n",
            "masters:\n  - {name: r1, url: [\"redis://:s3cr3tPW@host\"]}\n",
            "masters: \"redis://:s3cr3tPW@host\"\n",
            // A URL written where a key goes, and where the name goes.
            "masters:\n  - {name: r1, url: \"redis://h:1\", redis://:s3cr3tPW@host}\n",
            "masters:\n  - {name: r1, url: \"redis://h:1\", s3cr3tPW: 1}\n",
            "masters:\n  - {name: \"redis://:s3cr3tPW@host\", url: \"redis://h:1\"}\n",
            "agent: {name: \"redis://:s3cr3tPW@host\"}\nmasters:\n  - {name: r1, url: \"redis://h:1\"}\n",
        ] {
            let errors = errors_offline(yaml).join("\n");
            assert!(errors.contains("masters") || errors.contains("agent.name"), "{yaml}: {errors}");
            assert!(!errors.contains("s3cr3tPW"), "{yaml}: {errors}");
        }
        assert_eq!(
            errors_offline("masters:\n  - {name: r1, url: \"redis://h:1\", redis://:s3cr3tPW@host}\n"),
            ["masters[0]: an unknown key not shaped like one (not shown: it may hold a password)"]
        );
    }

    #[test]
    fn yaml_syntax_errors_say_where_and_quote_nothing() {
        let cases = [
            // An unclosed flow mapping, the passwords on the lines around it.
            (
                "masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@a:1\"\n  - {name: r2, url: \"redis://:s3cr3tPW@b:1\"}\n",
                3,
            ),
            // Bad indentation under a password line.
            (
                "masters:\n  - name: r1\n    url: redis://:s3cr3tPW@a:1\n   password_env: X\n",
                4,
            ),
            // A tab, a comment where it cannot be, an unclosed quote.
            ("masters:\n\ts3cr3tPW: x\n", 2),
            ("a: s3cr3tPW #c\n  b: s3cr3tPW\n", 1),
            ("masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@a:1}\n", 2),
            // A key given twice, an alias without anchor, a stray character.
            ("s3cr3tPW: 1\ns3cr3tPW: 2\n", 2),
            ("a: *s3cr3tPW\n", 1),
            ("a: `s3cr3tPW\n", 1),
        ];
        for (yaml, line) in cases {
            let errors = errors_offline(yaml);
            assert_eq!(errors.len(), 1, "{yaml}: {errors:?}");
            assert!(
                errors[0].starts_with(&format!("not valid YAML at line {line}, column ")),
                "{yaml}: {errors:?}"
            );
            assert!(!errors[0].contains("s3cr3tPW"), "{yaml}: {errors:?}");
        }
        assert_eq!(
            errors_offline("url: 1\nurl: 2\n"),
            ["not valid YAML at line 2, column 1: the key \"url\" is given twice in one mapping (the text there is not shown: it may hold a password)"]
        );
        assert_eq!(
            hide_quoted_words("did not find expected ',' or ']'"),
            "did not find expected ',' or ']'"
        );
        assert_eq!(
            hide_quoted_words("unexpected character: `@'"),
            "unexpected character: `@'"
        );
        assert_eq!(
            hide_quoted_words("found 'abc' and \"d"),
            "found '***' and \"***"
        );
    }
}
