//! The `redlock-tui` binary: parses the command line, puts the terminal in
//! raw mode on the alternate screen, runs the app, and restores the
//! terminal on every way out: quitting, an error, SIGTERM/SIGHUP, and a
//! panic (through the panic hook, before the message is printed so it
//! lands on the normal screen).
//!
//! Exit codes: 0 on quit, 1 when the terminal failed or the app broke,
//! 2 for bad usage (from clap).

use std::io::{stdout, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use crossterm::cursor::{Hide, Show};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::backend::CrosstermBackend;
use ratatui::{DefaultTerminal, Terminal};
use redlock_tui::app::Settings;
use redlock_tui::event_loop;

/// Shortest and longest `--refresh` accepted.
const REFRESH_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(3_600));

#[derive(Debug, Parser)]
#[command(
    name = "redlock-tui",
    version,
    about = "Admin console for redlock-agent: nodes, locks, leaks and a summary, live"
)]
struct Cli {
    /// The agent's admin socket (admin.socket.path): the only one that
    /// serves force release. The application socket works for viewing.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/run/redlock/admin.sock",
        env = "REDLOCK_ADMIN_SOCKET"
    )]
    socket: PathBuf,
    /// How often to poll the agent, e.g. 500ms, 1s, 5s.
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_refresh)]
    refresh: Duration,
    /// Change nothing: the force-release key is not bound at all.
    #[arg(long)]
    readonly: bool,
}

fn parse_refresh(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{e} (try 500ms, 1s, 2s)"))?;
    let (min, max) = REFRESH_RANGE;
    if d < min || d > max {
        return Err(format!(
            "must be between {} and {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !stdout().is_terminal() {
        eprintln!("redlock-tui: stdout is not a terminal; run it in one");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redlock-tui: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    install_panic_hook();
    let mut terminal = match setup() {
        Ok(terminal) => terminal,
        Err(e) => {
            restore();
            eprintln!("redlock-tui: cannot set up the terminal: {e}");
            return ExitCode::FAILURE;
        }
    };
    let settings = Settings {
        socket: cli.socket,
        refresh: cli.refresh,
        readonly: cli.readonly,
    };
    let result = runtime.block_on(event_loop::run(&mut terminal, settings));
    restore();
    // The terminal reader thread may be blocked on stdin; do not wait on it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redlock-tui: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Raw mode, the alternate screen, no cursor.
fn setup() -> std::io::Result<DefaultTerminal> {
    enable_raw_mode()?;
    execute!(stdout(), EnterAlternateScreen, Hide)?;
    Terminal::new(CrosstermBackend::new(stdout()))
}

/// Undoes [`setup`]. Safe to call twice and on a half-set-up terminal;
/// errors are ignored because there is nothing better to do with them on
/// the way out.
fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(stdout(), LeaveAlternateScreen, Show);
}

/// Restores the terminal before the default hook prints the panic, so the
/// message is readable and the shell is usable afterwards.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
}
