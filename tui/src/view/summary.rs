//! The summary strip: acquire rate, wait percentiles and failures by reason
//! over the last minute, each with a sparkline of its recent intervals.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};
use ratatui::Frame;

use crate::app::App;
use crate::state::summary::{Summary, Wait};

use super::{fmt, theme};

/// Lines the strip takes: figures, then sparklines.
pub const HEIGHT: u16 = 2;

/// Failure reasons given their own sparkline; more are counted in the text.
const MAX_REASONS: usize = 3;

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    if area.height < HEIGHT || area.width == 0 {
        return;
    }
    let summary = &app.summary;
    let [acquires, waits, failures] = Layout::horizontal([
        Constraint::Ratio(1, 3),
        Constraint::Ratio(1, 3),
        Constraint::Ratio(1, 3),
    ])
    .spacing(2)
    .areas(area);

    let rate = summary
        .acquire_rate()
        .map_or_else(|| fmt::DASH.to_string(), fmt::rate);
    let mut text = vec![label("acquires "), Span::styled(rate, theme::TEXT)];
    if let Some(share) = summary.acquired_share() {
        text.push(Span::styled(
            format!(" {:.0}% ok", share * 100.0),
            theme::MUTED,
        ));
    }
    // Rates in hundredths so slow trickles still show.
    let series: Vec<u64> = summary
        .rate_series()
        .iter()
        .map(|r| (r * 100.0).round() as u64)
        .collect();
    figure(
        frame,
        acquires,
        Line::from(text),
        spark_u64(&series, acquires.width),
    );

    let text = wait_line(summary, waits.width);
    // p99 per interval, in microseconds; gaps where nothing was acquired.
    let series: Vec<Option<u64>> = summary
        .wait_series(0.99)
        .iter()
        .map(|q| q.map(|s| (s * 1e6).round() as u64))
        .collect();
    figure(frame, waits, text, spark_opt(&series, waits.width));

    render_failures(frame, failures, summary);
}

fn label(text: &'static str) -> Span<'static> {
    Span::styled(text, theme::HEADING)
}

/// A wait as it can honestly be shown: `1.2ms`, or `>30s` when it lies
/// above the highest bucket bound.
fn shown(wait: Option<Wait>) -> String {
    match wait {
        None => fmt::DASH.to_string(),
        Some(Wait::Within(d)) => fmt::millis(d.as_secs_f64() * 1_000.0),
        Some(Wait::Above(d)) => format!(">{}", fmt::coarse(d)),
    }
}

/// `wait p50 X  p99 Y` of granted acquires (every outcome from an agent
/// that does not report them apart), then the p99 of `taken` and
/// `no_quorum` waits seen in the window (`taken p99 Z`, or `taken Z` when
/// short of room), each only if it fits whole.
fn wait_line(summary: &Summary, width: u16) -> Line<'static> {
    let by_outcome = summary.has_outcome_waits();
    let (p50, p99) = if by_outcome {
        (
            summary.wait_of("acquired", 0.5),
            summary.wait_of("acquired", 0.99),
        )
    } else {
        (summary.wait_all(0.5), summary.wait_all(0.99))
    };
    let mut spans = vec![
        label("wait p50 "),
        Span::styled(shown(p50), theme::TEXT),
        label("  p99 "),
        Span::styled(shown(p99), theme::TEXT),
    ];
    if by_outcome {
        let mut used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
        for outcome in ["taken", "no_quorum"] {
            if summary.answered(outcome) == 0 {
                continue;
            }
            // `taken p99 X`, or `taken X` (still its p99) when short of room.
            let value = shown(summary.wait_of(outcome, 0.99));
            let fits = [
                format!("  {outcome} p99 {value}"),
                format!(" {outcome} {value}"),
            ]
            .into_iter()
            .find(|text| used + text.chars().count() <= usize::from(width));
            if let Some(text) = fits {
                used += text.chars().count();
                spans.push(Span::styled(text, theme::MUTED));
            }
        }
    }
    Line::from(spans)
}

/// A figure on the first line and its sparkline on the second.
fn figure(frame: &mut Frame, area: Rect, text: Line<'static>, spark: Sparkline<'static>) {
    let [top, bottom] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).areas(area);
    frame.render_widget(Paragraph::new(text), top);
    frame.render_widget(spark, bottom);
}

fn spark_u64(values: &[u64], width: u16) -> Sparkline<'static> {
    let shown = &values[values.len().saturating_sub(usize::from(width))..];
    Sparkline::default()
        .data(shown.to_vec())
        .style(theme::SPARK)
}

fn spark_opt(values: &[Option<u64>], width: u16) -> Sparkline<'static> {
    let shown = &values[values.len().saturating_sub(usize::from(width))..];
    Sparkline::default()
        .data(shown.to_vec())
        .style(theme::SPARK)
        .absent_value_symbol(" ")
}

/// Failures over the last minute: one column per reason, its count above
/// its sparkline, most frequent first.
fn render_failures(frame: &mut Frame, area: Rect, summary: &Summary) {
    let failures = summary.failures();
    if summary.latest().is_none() || failures.is_empty() {
        let value = if summary.latest().is_none() {
            fmt::DASH
        } else {
            "none"
        };
        let text = Line::from(vec![
            label("failures/1m "),
            Span::styled(value, theme::TEXT),
        ]);
        frame.render_widget(Paragraph::new(text), area);
        return;
    }
    // Whole `reason count` items only, as many as fit with room for
    // `+N more`: a reason is never cut in half.
    let width = usize::from(area.width);
    let lead = "failures/1m ";
    let mut text = vec![label(lead)];
    let mut used = lead.len();
    let mut listed = 0;
    for (i, (reason, count)) in failures.iter().enumerate().take(MAX_REASONS) {
        let item = format!("{}{reason} {count}", if i == 0 { "" } else { "  " });
        let rest = failures.len() - i - 1;
        let more = if rest > 0 {
            format!(" +{rest} more").len()
        } else {
            0
        };
        if used + item.len() + more > width {
            break;
        }
        used += item.len();
        text.push(Span::styled(item, theme::CRIT));
        listed += 1;
    }
    if listed < failures.len() {
        text.push(Span::styled(
            format!(" +{} more", failures.len() - listed),
            theme::MUTED,
        ));
    }
    // The sparkline follows the most frequent reason.
    let series = summary.failure_series(&failures[0].0);
    let spark = spark_u64(&series, area.width).style(theme::SPARK_FAILURE);
    figure(frame, area, Line::from(text), spark);
}
