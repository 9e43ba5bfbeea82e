//! The watch on a master's clock. Redis expires keys by its wall clock: a
//! master whose clock jumps forward drops every lock it holds early, and
//! one whose clock jumps back, freezes or runs slow keeps them too long.
//! Redlock is safe only while every master's clock runs at about the right
//! rate (the drift allowance covers the rest), so the agent checks it.
//!
//! Every vote batch reads the master's time (`TIME`, in the same script as
//! the votes) and every probe reads it too (`server_time_usec` in `INFO
//! server`). Each reading is a [`Sample`]: the master's time, and the
//! agent's clock ([`since_boot`]: monotonic, and counting a suspended
//! host's time as a master's clock does) just before the request left and
//! just after its answer was read. Between two samples the master's clock must have
//! advanced by at least the agent's time from the first answer to the
//! second request, and at most the agent's time from the first request to
//! the second answer, each widened by the drift factor and
//! [`SLACK`]. Time the agent was too busy to read an answer only widens
//! that window, so a busy agent never accuses a healthy master.
//!
//! A reading outside the window is a [`ClockFault`]; the node quarantines
//! the master (detector `clock`) and the vote that read it does not count.
//! The check compares each master with its own last reading, never masters
//! with each other: an offset between two masters' clocks does not change
//! when their keys expire, a change of one master's offset does.

use std::time::Duration;

/// The agent's clock for the watch: `CLOCK_BOOTTIME`, which never jumps
/// and, unlike `CLOCK_MONOTONIC`, goes on while the host is suspended, so
/// a suspended agent does not take every master's clock for one that
/// jumped.
pub fn since_boot() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &raw mut ts) } == 0;
    if !ok {
        // Linux has had CLOCK_BOOTTIME since 2.6.39; kept for other kernels.
        static START: std::sync::LazyLock<std::time::Instant> =
            std::sync::LazyLock::new(std::time::Instant::now);
        return START.elapsed();
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Added to both sides of the window: the drift allowance's fixed part
/// (see [`crate::redlock::grant::Drift`]), for rounding and the master's
/// own clock resolution.
pub const SLACK: Duration = Duration::from_millis(2);

/// One reading of a master's wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// The agent's clock ([`since_boot`]) right before the request was sent.
    pub sent: Duration,
    /// The agent's clock right after the answer was read.
    pub received: Duration,
    /// The master's wall clock, microseconds since the Unix epoch.
    pub master_us: u64,
}

impl Sample {
    /// The master's wall clock now, as the sample predicts it: microseconds
    /// since the Unix epoch, counted from the middle of the request.
    pub fn master_now_us(&self, now: Duration) -> u64 {
        let middle = self.sent + self.received.saturating_sub(self.sent) / 2;
        let since = now.saturating_sub(middle).as_micros();
        self.master_us
            .saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    }
}

/// How a master's clock moved unlike the agent's between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockFault {
    /// It advanced by more than the agent's clock allows: a jump forward,
    /// or a clock running fast. Keys may have expired early.
    Ahead { by: Duration },
    /// It advanced by less: a jump back, a frozen clock, or one running
    /// slow. Keys live longer than their TTL.
    Behind { by: Duration },
}

impl ClockFault {
    /// For logs and `/v1/nodes` warnings.
    pub fn describe(&self) -> String {
        match self {
            ClockFault::Ahead { by } => {
                format!("the master's clock jumped or ran ahead by {by:?} (keys may have expired early)")
            }
            ClockFault::Behind { by } => format!(
                "the master's clock jumped back, froze or ran slow by {by:?} (keys outlive their TTL)"
            ),
        }
    }
}

/// The last reading of one master's clock, and the check of the next.
#[derive(Debug, Clone, Default)]
pub struct ClockWatch {
    last: Option<Sample>,
}

impl ClockWatch {
    /// The last reading, if any.
    pub fn last(&self) -> Option<Sample> {
        self.last
    }

    /// Checks `sample` against the last reading (with `drift_factor`, the
    /// config's `lock.drift_factor`) and keeps the later of the two. The
    /// first reading has nothing to be checked against.
    pub fn observe(&mut self, sample: Sample, drift_factor: f64) -> Option<ClockFault> {
        let Some(last) = self.last else {
            self.last = Some(sample);
            return None;
        };
        // Two readings whose requests overlapped (a probe beside a vote)
        // may have been answered in either order: keep the later request.
        let (first, second) = if sample.sent >= last.sent {
            (last, sample)
        } else {
            (sample, last)
        };
        self.last = Some(second);
        check(first, second, drift_factor)
    }
}

impl super::Node {
    /// Takes a reading of the master's clock (see the module's doc). On a
    /// fault the master is quarantined (detector `clock`) at once, every
    /// hold that counted it checks whether it still has a quorum, and its
    /// incarnation marker is deleted, so every other agent's next vote or
    /// probe on it sees the loss too. The faulty reading is the next one's
    /// baseline: a clock that stays frozen faults again at every reading,
    /// and its quarantine starts over each time.
    ///
    /// Single servers only: a cluster's shards each have a clock, and its
    /// batches go to whichever serves the slot.
    pub(crate) fn clock_reading(&self, sample: Sample) -> Option<ClockFault> {
        if !self.clock_check || self.is_cluster() {
            return None;
        }
        let fault = self.lock().clock.observe(sample, self.drift_factor)?;
        let description = fault.describe();
        tracing::warn!(
            node = %self.name,
            fault = %description,
            quarantine = ?self.quarantine,
            "the master's clock moved unlike the agent's, so its keys' TTLs cannot be trusted: quarantined"
        );
        self.lock().clock_fault = Some(description);
        self.quarantine(
            std::time::Instant::now() + self.quarantine,
            super::Detector::Clock,
        );
        self.restart_detected(super::Detector::Clock);
        self.forget_marker();
        self.wake.notify_one();
        Some(fault)
    }

    /// The master refused `TIME` to the vote script (an ACL without
    /// `+time`): its clock cannot be watched. Said once per node.
    pub(crate) fn clock_refused(&self) {
        if !self.clock_check || self.is_cluster() {
            return;
        }
        let first = !std::mem::replace(&mut self.lock().clock_refused, true);
        if first {
            tracing::warn!(
                node = %self.name,
                "the master refuses TIME in scripts (an ACL without +time): its clock is not watched, and a jump of it can drop locks unseen; allow TIME"
            );
        }
    }

    /// The master's wall clock now as this agent last read it, in
    /// microseconds since the Unix epoch; `None` before the first reading.
    pub fn master_time_us(&self) -> Option<u64> {
        let last = self.lock().clock.last()?;
        Some(last.master_now_us(since_boot()))
    }

    /// Deletes the incarnation marker in the background: the master's keys
    /// may be wrong, and every agent must see it in its next vote.
    fn forget_marker(&self) {
        let Some(mut conn) = self.connection() else {
            return;
        };
        let marker = self.marker_key.clone();
        let name = self.name.clone();
        tokio::spawn(async move {
            let deleted = redis::cmd("DEL")
                .arg(&marker)
                .query_async::<i64>(&mut conn)
                .await;
            if let Err(e) = deleted {
                tracing::debug!(node = %name, error = %e, "the marker of a master whose clock moved was not deleted; its own probes see the fault");
            }
        });
    }
}

/// The verdict on `second` given `first` (sent no later than `second`).
pub fn check(first: Sample, second: Sample, drift_factor: f64) -> Option<ClockFault> {
    let micros = |d: Duration| i128::try_from(d.as_micros()).unwrap_or(i128::MAX);
    let signed = |a: Duration, b: Duration| -> i128 {
        if a >= b {
            micros(a - b)
        } else {
            -micros(b - a)
        }
    };
    let advanced = i128::from(second.master_us) - i128::from(first.master_us);
    // The real time between the two readings lies in [least, most].
    let least = signed(second.sent, first.received);
    let most = signed(second.received, first.sent);
    let slack = micros(SLACK);
    let widen = |t: i128, factor: f64| {
        // Drift is a fraction of elapsed time; rounding up keeps it lenient.
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        let scaled = (t.max(0) as f64 * factor).ceil() as i128;
        scaled
    };
    let lowest = least - widen(least, drift_factor) - slack;
    let highest = most + widen(most, drift_factor) + slack;
    let duration = |us: i128| Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX));
    if advanced > highest {
        Some(ClockFault::Ahead {
            by: duration(advanced - highest),
        })
    } else if advanced < lowest {
        Some(ClockFault::Behind {
            by: duration(lowest - advanced),
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH_US: u64 = 1_764_000_000_000_000;

    fn sample(base: Duration, sent_ms: u64, received_ms: u64, master_ms: i64) -> Sample {
        Sample {
            sent: base + Duration::from_millis(sent_ms),
            received: base + Duration::from_millis(received_ms),
            master_us: EPOCH_US.saturating_add_signed(master_ms * 1000),
        }
    }

    #[test]
    fn a_clock_that_keeps_time_is_steady_whatever_the_round_trips() {
        let base = Duration::from_secs(1000);
        let mut watch = ClockWatch::default();
        assert_eq!(watch.observe(sample(base, 0, 1, 0), 0.01), None);
        // Read 1 s later, the answer 300 ms late (a busy agent).
        assert_eq!(watch.observe(sample(base, 1000, 1300, 1001), 0.01), None);
        // A master read at the very start of a long round trip.
        assert_eq!(watch.observe(sample(base, 2000, 2900, 2000), 0.01), None);
    }

    #[test]
    fn a_jump_forward_past_the_drift_is_ahead() {
        let base = Duration::from_secs(1000);
        let mut watch = ClockWatch::default();
        watch.observe(sample(base, 0, 1, 0), 0.01);
        let fault = watch.observe(sample(base, 1000, 1001, 16_000), 0.01);
        assert!(
            matches!(fault, Some(ClockFault::Ahead { by }) if by > Duration::from_secs(14)),
            "{fault:?}"
        );
        // 1% of a second is 10 ms: 15 ms ahead is past it and the slack.
        let mut watch = ClockWatch::default();
        watch.observe(sample(base, 0, 0, 0), 0.01);
        assert!(watch
            .observe(sample(base, 1000, 1000, 1015), 0.01)
            .is_some());
        let mut watch = ClockWatch::default();
        watch.observe(sample(base, 0, 0, 0), 0.01);
        assert_eq!(watch.observe(sample(base, 1000, 1000, 1011), 0.01), None);
    }

    #[test]
    fn a_frozen_or_backward_clock_is_behind() {
        let base = Duration::from_secs(1000);
        let mut watch = ClockWatch::default();
        watch.observe(sample(base, 0, 1, 0), 0.01);
        let frozen = watch.observe(sample(base, 1000, 1001, 0), 0.01);
        assert!(
            matches!(frozen, Some(ClockFault::Behind { .. })),
            "{frozen:?}"
        );
        let mut watch = ClockWatch::default();
        watch.observe(sample(base, 0, 1, 0), 0.01);
        let back = watch.observe(sample(base, 500, 501, -60_000), 0.01);
        assert!(
            matches!(back, Some(ClockFault::Behind { by }) if by > Duration::from_secs(60)),
            "{back:?}"
        );
    }

    #[test]
    fn overlapping_readings_are_ordered_by_when_they_were_sent() {
        let base = Duration::from_secs(1000);
        let mut watch = ClockWatch::default();
        // A probe sent at 0 answered at 50; a vote sent at 10 answered at
        // 20 read the master's clock before the probe did.
        watch.observe(sample(base, 10, 20, 15), 0.01);
        assert_eq!(watch.observe(sample(base, 0, 50, 40), 0.01), None);
        assert_eq!(
            watch.last().map(|s| s.sent),
            Some(base + Duration::from_millis(10))
        );
    }

    #[test]
    fn a_sample_predicts_the_master_clock_from_the_middle_of_its_request() {
        let base = Duration::from_secs(1000);
        let s = sample(base, 0, 10, 0);
        assert_eq!(
            s.master_now_us(base + Duration::from_millis(1005)),
            EPOCH_US + 1_000_000
        );
    }
}
