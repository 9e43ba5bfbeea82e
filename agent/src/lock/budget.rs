//! Rate budgets shared by every resource of one agent: timer-driven work
//! (a waiter's retry, an observer's look at a leader that no announcement
//! asked for) takes a token first, so its load on the masters is bounded
//! per agent, however many resources it is spread over. Work woken by a
//! release or an announcement never waits for a token.

use std::sync::Mutex;
use std::time::Instant;

/// A token bucket: `rate` tokens a second, with a burst of as many.
#[derive(Debug)]
pub struct Budget {
    rate: f64,
    // A std Mutex: a few arithmetic operations, never across an await.
    state: Mutex<(f64, Instant)>,
}

impl Budget {
    pub fn new(rate: f64) -> Budget {
        Budget {
            rate,
            state: Mutex::new((rate, Instant::now())),
        }
    }

    /// Takes one token if the budget has one.
    pub fn try_take(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let (tokens, last) = *state;
        let tokens = (tokens + now.duration_since(last).as_secs_f64() * self.rate).min(self.rate);
        let taken = tokens >= 1.0;
        *state = (if taken { tokens - 1.0 } else { tokens }, now);
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_gives_its_burst_then_refuses() {
        let budget = Budget::new(3.0);
        assert!((0..3).all(|_| budget.try_take()));
        // Far less than a third of a second passes before the next take.
        assert!(!budget.try_take());
    }
}
