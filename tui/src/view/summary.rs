//! The summary strip: acquire rate, wait percentiles and failures by reason
//! over the last minute, each with a sparkline of its recent intervals.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};
use ratatui::Frame;

use crate::app::App;
use crate::state::summary::Summary;

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

    let p50 = wait(summary, 0.5);
    let p99 = wait(summary, 0.99);
    let text = Line::from(vec![
        label("wait p50 "),
        Span::styled(p50, theme::TEXT),
        label("  p99 "),
        Span::styled(p99, theme::TEXT),
    ]);
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

fn wait(summary: &Summary, q: f64) -> String {
    summary.wait_quantile(q).map_or_else(
        || fmt::DASH.to_string(),
        |d| fmt::millis(d.as_secs_f64() * 1_000.0),
    )
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
    let shown = failures.len().min(MAX_REASONS);
    let columns = Layout::horizontal(vec![Constraint::Ratio(1, shown as u32); shown])
        .spacing(1)
        .split(area);
    for (i, ((reason, count), column)) in failures.iter().zip(columns.iter()).enumerate() {
        let mut text = Vec::new();
        if i == 0 {
            text.push(label("failures/1m "));
        }
        text.push(Span::styled(format!("{reason} {count}"), theme::CRIT));
        if i == shown - 1 && failures.len() > shown {
            text.push(Span::styled(
                format!(" +{} more", failures.len() - shown),
                theme::MUTED,
            ));
        }
        let series = summary.failure_series(reason);
        let spark = spark_u64(&series, column.width).style(theme::SPARK_FAILURE);
        figure(frame, *column, Line::from(text), spark);
    }
}
