//! The `/` filter: a regular expression matched against each row's text.
//!
//! A leading `!` inverts it (`/!^batch-` hides the batch locks). Matching is
//! smart-case: case-insensitive unless the pattern has an upper-case letter.

use regex::{Regex, RegexBuilder};

/// A compiled filter. Rows whose text matches are kept (or, inverted, hidden).
#[derive(Debug, Clone)]
pub struct Filter {
    text: String,
    regex: Regex,
    invert: bool,
}

/// Why a filter could not be compiled; the text is shown in the flash line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad filter {pattern:?}: {reason}")]
pub struct FilterError {
    pub pattern: String,
    pub reason: String,
}

/// Upper bound on the compiled size, so a pasted monster cannot stall the UI.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl Filter {
    /// Compiles the text typed after `/`; `None` for an empty filter (or a
    /// lone `!`), which keeps every row.
    ///
    /// # Errors
    /// When the pattern is not a valid regular expression.
    pub fn parse(text: &str) -> Result<Option<Filter>, FilterError> {
        let (invert, pattern) = match text.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if pattern.is_empty() {
            return Ok(None);
        }
        let smart_case = !pattern.chars().any(char::is_uppercase);
        let regex = RegexBuilder::new(pattern)
            .case_insensitive(smart_case)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| FilterError {
                pattern: text.to_string(),
                // The regex crate's message spans several lines; keep the last.
                reason: e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or("invalid")
                    .trim()
                    .trim_start_matches("error: ")
                    .to_string(),
            })?;
        Ok(Some(Filter {
            text: text.to_string(),
            regex,
            invert,
        }))
    }

    pub fn matches(&self, haystack: &str) -> bool {
        self.regex.is_match(haystack) != self.invert
    }

    /// Does a row with these fields pass? Kept when any field matches (or,
    /// inverted, when none does). Fields are matched one by one so `^` and
    /// `$` anchor to a field, not to the row.
    pub fn keeps<'a>(&self, fields: impl IntoIterator<Item = &'a str>) -> bool {
        fields.into_iter().any(|f| self.regex.is_match(f)) != self.invert
    }

    /// The text as typed, `!` included.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn inverted(&self) -> bool {
        self.invert
    }

    /// The literal start every match must begin with, for the agent's
    /// `prefix` filter in the locks view: the characters after an optional
    /// `^` up to the first regex construct (a quantifier also drops the
    /// character it applies to). `None` for an inverted filter or one with
    /// an alternation, which a prefix cannot express.
    ///
    /// The agent compares case-sensitively; the regex then narrows the page
    /// it sends (smart-case as usual).
    pub fn server_prefix(&self) -> Option<String> {
        let pattern = self.text.strip_prefix('!').unwrap_or(&self.text);
        if self.invert || pattern.contains('|') {
            return None;
        }
        let mut prefix = String::new();
        let mut chars = pattern.strip_prefix('^').unwrap_or(pattern).chars();
        while let Some(c) = chars.next() {
            match c {
                '?' | '*' | '{' => {
                    prefix.pop();
                    break;
                }
                '\\' => match chars.next() {
                    Some(e) if e.is_ascii_punctuation() => prefix.push(e),
                    _ => break,
                },
                c if c.is_ascii_alphanumeric() || "-_:/@=,%~#&'<>;\"`!".contains(c) => {
                    prefix.push(c)
                }
                _ => break,
            }
        }
        // A quantifier right after the literal part makes its last
        // character optional too.
        if matches!(chars.next(), Some('?' | '*' | '{')) {
            prefix.pop();
        }
        Some(prefix).filter(|p| !p.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(filter: &str, rows: &[&'static str]) -> Vec<&'static str> {
        let filter = Filter::parse(filter).unwrap();
        rows.iter()
            .copied()
            .filter(|r| filter.as_ref().is_none_or(|f| f.matches(r)))
            .collect()
    }

    const ROWS: &[&str] = &["orders:42", "orders:7", "batch-nightly", "Billing"];

    #[test]
    fn empty_filters_keep_everything() {
        assert_eq!(keep("", ROWS), ROWS);
        assert_eq!(keep("!", ROWS), ROWS);
    }

    #[test]
    fn a_regex_keeps_matching_rows() {
        assert_eq!(keep("^orders:\\d+$", ROWS), ["orders:42", "orders:7"]);
        assert_eq!(keep("4|7", ROWS), ["orders:42", "orders:7"]);
    }

    #[test]
    fn bang_inverts() {
        assert_eq!(keep("!orders", ROWS), ["batch-nightly", "Billing"]);
        assert!(Filter::parse("!x").unwrap().unwrap().inverted());
    }

    #[test]
    fn anchors_apply_to_each_field() {
        let filter = Filter::parse("^orders:1$").unwrap().unwrap();
        assert!(filter.keeps(["orders:1", "billing"]));
        assert!(!filter.keeps(["orders:12", "billing"]));
        let inverted = Filter::parse("!billing").unwrap().unwrap();
        assert!(!inverted.keeps(["orders:1", "billing"]));
        assert!(inverted.keeps(["orders:1", "web"]));
    }

    #[test]
    fn server_prefixes_are_the_literal_start() {
        let prefix = |text: &str| Filter::parse(text).unwrap().unwrap().server_prefix();
        assert_eq!(prefix("job-012345").as_deref(), Some("job-012345"));
        assert_eq!(prefix("^orders:4").as_deref(), Some("orders:4"));
        assert_eq!(prefix("orders\\.eu.x").as_deref(), Some("orders.eu"));
        assert_eq!(prefix("ab?c").as_deref(), Some("a"));
        assert_eq!(prefix("ab*").as_deref(), Some("a"));
        assert_eq!(prefix("ab+").as_deref(), Some("ab"));
        assert_eq!(prefix("^nomatch$").as_deref(), Some("nomatch"));
        assert_eq!(prefix(".x"), None);
        assert_eq!(prefix("a|b"), None);
        assert_eq!(prefix("!^e2e-"), None);
    }

    #[test]
    fn smart_case() {
        assert_eq!(keep("billing", ROWS), ["Billing"]);
        assert_eq!(keep("B", ROWS), ["Billing"]);
    }

    #[test]
    fn a_bad_regex_is_an_error_naming_the_pattern() {
        let err = Filter::parse("orders[").unwrap_err();
        assert_eq!(err.pattern, "orders[");
        assert!(
            err.to_string().starts_with("bad filter \"orders[\": "),
            "{err}"
        );
        assert!(!err.reason.contains('\n'));
    }
}
