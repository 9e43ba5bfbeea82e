//! The harness's own scheduling lag: a task that asks to wake every few
//! milliseconds and records how late it woke. A client in this process
//! that stops late while the harness itself was late by as much was paused
//! (Kleppmann's GC pause, here a busy machine), not misled by the agent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Mono;

const TICK: Duration = Duration::from_millis(5);
/// Lags below this are not kept.
const KEEP_MS: f64 = 5.0;

/// Lags seen, over time.
#[derive(Debug, Default)]
pub struct Lag {
    // A std Mutex: one push per late tick.
    samples: Mutex<Vec<(Mono, f64)>>,
}

impl Lag {
    /// The worst lag that ended within `[from, to]`, in ms.
    pub fn worst_between(&self, from: Mono, to: Mono) -> f64 {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples
            .iter()
            .filter(|(at, ms)| *at >= from && at.plus_ms(0) <= to.plus_ms(*ms as u64))
            .map(|(_, ms)| *ms)
            .fold(0.0, f64::max)
    }

    /// The worst lag of the whole run, in ms.
    pub fn worst(&self) -> f64 {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.iter().map(|(_, ms)| *ms).fold(0.0, f64::max)
    }
}

/// Measures until `stop` turns true.
pub async fn watch(lag: Arc<Lag>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        let asked = Mono::now();
        tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            _ = stop.changed() => return,
        }
        let woke = Mono::now();
        let late = woke.ms_after(asked.plus(TICK));
        if late >= KEEP_MS {
            lag.samples
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((woke, late));
        }
    }
}
