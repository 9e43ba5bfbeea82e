//! The workspace's binaries (`redlock-agent`, `redlock-tui`, `faults`) as
//! a test or a harness finds them: already built, never built here.
//!
//! A test that ran `cargo build` itself would wait, with its timeout
//! running, on cargo's package-cache and build-directory locks for as long
//! as any other build on the machine holds them (180 s hangs on a busy
//! machine). So the binaries are built once before the tests
//! (`tools/test.sh` and CI run `cargo build --workspace --bins` first, and
//! `cargo test`/`cargo nextest run` build a package's binaries for its own
//! tests), and a test that finds one missing or older than its sources
//! fails at once, naming the command that builds it.
//!
//! ## Behavior
//! - The binaries are looked for in the target directory of the running
//!   executable: `target/<profile>/`, also when it runs from `deps/`.
//! - A binary is stale when a source file its build read (cargo's dep-info
//!   file beside it, `<name>.d`) is newer than it or gone: the same test
//!   cargo makes. Without a dep-info file it is taken as it is.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Why a workspace binary cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    #[error("cannot find the running executable's target directory: {0}")]
    NoTargetDir(io::Error),
    #[error("{} is missing; build it first with `{build}` (tools/test.sh does, before the tests)", .path.display())]
    Missing { path: PathBuf, build: String },
    #[error(
        "{} is older than {}, a source it was built from; rebuild it with `{build}` \
         (tools/test.sh does, before the tests)",
        .path.display(),
        .source_file.display()
    )]
    Stale {
        path: PathBuf,
        source_file: PathBuf,
        build: String,
    },
}

/// The directory cargo put the running executable's workspace binaries
/// in: the executable's own directory, or its parent for a test or an
/// example (`target/<profile>/deps/`, `target/<profile>/examples/`).
///
/// # Errors
/// When the running executable's path cannot be read.
pub fn target_dir() -> Result<PathBuf, BinaryError> {
    let exe = std::env::current_exe().map_err(BinaryError::NoTargetDir)?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    Ok(dir)
}

/// The workspace binary `name` (say `redlock-agent`), built and current:
/// it exists beside the running executable's profile and no source it was
/// built from changed since.
///
/// # Errors
/// [`BinaryError::Missing`] or [`BinaryError::Stale`], each naming the
/// `cargo build` command that fixes it; never builds anything itself.
pub fn workspace_binary(name: &str) -> Result<PathBuf, BinaryError> {
    let dir = target_dir()?;
    let release = dir.file_name().is_some_and(|d| d == "release");
    let build = format!(
        "cargo build{} --workspace --bins",
        if release { " --release" } else { "" }
    );
    let path = dir.join(name);
    let built = match std::fs::metadata(&path).and_then(|m| m.modified()) {
        Ok(built) if path.is_file() => built,
        _ => return Err(BinaryError::Missing { path, build }),
    };
    if let Some(source_file) = newer_source(&dir.join(format!("{name}.d")), built) {
        return Err(BinaryError::Stale {
            path,
            source_file,
            build,
        });
    }
    Ok(path)
}

/// The first source listed in the dep-info file `dep_info` that is newer
/// than `built` or gone; `None` when all are older, or the file cannot be
/// read.
fn newer_source(dep_info: &Path, built: SystemTime) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dep_info).ok()?;
    sources(&text).into_iter().find(|source| {
        match std::fs::metadata(source).and_then(|m| m.modified()) {
            Ok(modified) => modified > built,
            // A relative path is relative to a base this cannot know: skip it.
            Err(_) => source.is_absolute(),
        }
    })
}

/// The prerequisites of a Makefile-style dep-info file
/// (`target: a.rs b\ c.rs`, spaces escaped with a backslash), of every
/// rule in it.
fn sources(text: &str) -> Vec<PathBuf> {
    let mut sources = Vec::new();
    for line in text.lines() {
        let Some(rule) = unescaped_colon(line) else {
            continue;
        };
        let mut word = String::new();
        let mut chars = line[rule + 1..].chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(next) = chars.next() {
                        word.push(next);
                    }
                }
                c if c.is_whitespace() => {
                    if !word.is_empty() {
                        sources.push(PathBuf::from(std::mem::take(&mut word)));
                    }
                }
                c => word.push(c),
            }
        }
        if !word.is_empty() {
            sources.push(PathBuf::from(word));
        }
    }
    sources
}

/// Where the rule's `: ` separator is in a dep-info line.
fn unescaped_colon(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    (0..bytes.len()).find(|&i| {
        bytes[i] == b':'
            && (i == 0 || bytes[i - 1] != b'\\')
            && bytes.get(i + 1).is_none_or(|b| b.is_ascii_whitespace())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dep_info_sources_unescape_spaces_and_skip_the_target() {
        let text = "/t/debug/a: /w/src/main.rs /w/my\\ dir/lib.rs\n\n/w/src/main.rs:\n";
        assert_eq!(
            sources(text),
            vec![
                PathBuf::from("/w/src/main.rs"),
                PathBuf::from("/w/my dir/lib.rs")
            ]
        );
    }

    #[test]
    fn a_binary_older_than_a_source_is_stale_and_a_newer_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("main.rs");
        std::fs::write(&source, "fn main() {}").unwrap();
        let dep_info = dir.path().join("bin.d");
        std::fs::write(
            &dep_info,
            format!("{}/bin: {}\n", dir.path().display(), source.display()),
        )
        .unwrap();
        let modified = std::fs::metadata(&source).unwrap().modified().unwrap();
        assert_eq!(
            newer_source(&dep_info, modified - Duration::from_secs(1)),
            Some(source.clone())
        );
        assert_eq!(
            newer_source(&dep_info, modified + Duration::from_secs(1)),
            None
        );
        std::fs::remove_file(&source).unwrap();
        assert_eq!(
            newer_source(&dep_info, modified + Duration::from_secs(1)),
            Some(source),
            "a source gone since the build"
        );
    }
}
