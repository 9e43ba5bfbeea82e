//! Text forms of values shared by the views: durations, latencies, rates,
//! text sparklines and bars. Unknown values are [`DASH`].

use std::time::Duration;

/// What every unknown value shows as.
pub const DASH: &str = "-";

/// A time left or elapsed: `9.8s` and `42.0s` under a minute (so countdowns
/// visibly tick), then `2m05s`, `3h02m`, `4d03h`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 60_000 {
        // Truncate (not round) so a countdown never shows more than is left.
        format!("{}.{}s", ms / 1_000, (ms % 1_000) / 100)
    } else {
        coarse(d)
    }
}

/// A duration without tenths: `42s`, `2m05s`, `3h02m`, `4d03h`.
pub fn coarse(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

/// A short latency or wait: `0.42ms`, `4.2ms`, `42ms`, `1.2s`.
pub fn millis(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        DASH.to_string()
    } else if ms < 1.0 {
        format!("{ms:.2}ms")
    } else if ms < 10.0 {
        format!("{ms:.1}ms")
    } else if ms < 1_000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.1}s", ms / 1_000.0)
    }
}

/// Events per second: `0.00/s`, `2.3/s`, `120/s`.
pub fn rate(per_second: f64) -> String {
    if per_second < 1.0 {
        format!("{per_second:.2}/s")
    } else if per_second < 100.0 {
        format!("{per_second:.1}/s")
    } else {
        format!("{per_second:.0}/s")
    }
}

const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The newest `width` values as a one-line sparkline scaled to their
/// maximum; absent values are blank.
pub fn spark(values: &[Option<f64>], width: usize) -> String {
    let shown = &values[values.len().saturating_sub(width)..];
    let max = shown.iter().flatten().copied().fold(0.0_f64, f64::max);
    shown
        .iter()
        .map(|v| match v {
            None => ' ',
            Some(v) if max <= 0.0 || !v.is_finite() => LEVELS[0],
            Some(v) => {
                let level = ((v / max) * (LEVELS.len() - 1) as f64).round() as usize;
                LEVELS[level.min(LEVELS.len() - 1)]
            }
        })
        .collect()
}

/// A bar `width` cells wide, `fraction` of it filled.
pub fn bar(fraction: f64, width: usize) -> String {
    let filled = ((fraction.clamp(0.0, 1.0) * width as f64).ceil() as usize).min(width);
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}

/// The first 8 characters of a run id: enough to tell restarts apart.
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Hash slot ranges, compactly: `0-5460`, `42`, `0-99,5461-10922`. Past
/// `max` characters the rest is counted instead of listed:
/// `0-9,20-29 +12 more`; no ranges at all is [`DASH`].
pub fn slot_ranges(ranges: &[[u16; 2]], max: usize) -> String {
    if ranges.is_empty() {
        return DASH.to_string();
    }
    let one = |&[first, last]: &[u16; 2]| {
        if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        }
    };
    let parts: Vec<String> = ranges.iter().map(one).collect();
    let all = parts.join(",");
    if all.len() <= max {
        return all;
    }
    // As many as fit beside the count of the others.
    let mut text = String::new();
    let mut listed = 0;
    for part in &parts {
        let next = if text.is_empty() {
            part.clone()
        } else {
            format!("{text},{part}")
        };
        let rest = format!(" +{} more", parts.len() - listed - 1);
        if next.len() + rest.len() > max {
            break;
        }
        text = next;
        listed += 1;
    }
    let more = parts.len() - listed;
    if listed == 0 {
        format!("+{more} more")
    } else {
        format!("{text} +{more} more")
    }
}

/// `value` or `-`.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| DASH.to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_tick_in_tenths_under_a_minute_and_never_round_up() {
        assert_eq!(duration(Duration::from_millis(29_999)), "29.9s");
        assert_eq!(duration(Duration::from_millis(950)), "0.9s");
        assert_eq!(duration(Duration::ZERO), "0.0s");
        assert_eq!(duration(Duration::from_secs(125)), "2m05s");
        assert_eq!(duration(Duration::from_secs(3 * 3_600 + 120)), "3h02m");
        assert_eq!(
            duration(Duration::from_secs(4 * 86_400 + 3 * 3_600)),
            "4d03h"
        );
        assert_eq!(coarse(Duration::from_millis(42_900)), "42s");
    }

    #[test]
    fn latencies_rates_and_ids() {
        assert_eq!(millis(0.4234), "0.42ms");
        assert_eq!(millis(4.25), "4.2ms");
        assert_eq!(millis(42.4), "42ms");
        assert_eq!(millis(1_250.0), "1.2s");
        assert_eq!(millis(f64::NAN), "-");
        assert_eq!(rate(0.5), "0.50/s");
        assert_eq!(rate(12.34), "12.3/s");
        assert_eq!(short_id("0123456789abcdef"), "01234567");
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(or_dash(None::<u64>), "-");
    }

    #[test]
    fn sparks_scale_to_the_maximum_and_keep_the_newest() {
        assert_eq!(spark(&[Some(0.0), Some(1.0), None, Some(2.0)], 10), "▁▅ █");
        assert_eq!(spark(&[Some(1.0), Some(2.0), Some(4.0)], 2), "▅█");
        assert_eq!(spark(&[Some(0.0)], 3), "▁");
        assert_eq!(spark(&[], 3), "");
    }

    #[test]
    fn slot_ranges_are_compact_and_count_what_does_not_fit() {
        assert_eq!(slot_ranges(&[[0, 5460]], 30), "0-5460");
        assert_eq!(slot_ranges(&[[42, 42], [100, 200]], 30), "42,100-200");
        assert_eq!(slot_ranges(&[], 30), "-");
        let many = [[0, 9], [20, 29], [40, 49], [60, 69]];
        assert_eq!(slot_ranges(&many, 30), "0-9,20-29,40-49,60-69");
        assert_eq!(slot_ranges(&many, 18), "0-9,20-29 +2 more");
        assert_eq!(slot_ranges(&many, 3), "+4 more");
    }

    #[test]
    fn bars() {
        assert_eq!(bar(0.5, 4), "██░░");
        assert_eq!(bar(0.01, 4), "█░░░");
        assert_eq!(bar(0.0, 3), "░░░");
        assert_eq!(bar(2.0, 2), "██");
    }
}
