//! Bounded series of recent samples, oldest first, for sparklines.

use std::collections::VecDeque;

/// The last `capacity` samples; pushing beyond drops the oldest.
#[derive(Debug, Clone, PartialEq)]
pub struct History<T> {
    capacity: usize,
    samples: VecDeque<T>,
}

impl<T: Clone> History<T> {
    pub fn new(capacity: usize) -> History<T> {
        History {
            capacity: capacity.max(1),
            samples: VecDeque::with_capacity(capacity.max(1)),
        }
    }

    pub fn push(&mut self, sample: T) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.samples.iter()
    }

    /// The newest `n` samples, oldest first.
    pub fn last_n(&self, n: usize) -> Vec<T> {
        let skip = self.samples.len().saturating_sub(n);
        self.samples.iter().skip(skip).cloned().collect()
    }

    pub fn last(&self) -> Option<&T> {
        self.samples.back()
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_samples_in_order() {
        let mut h = History::new(3);
        for i in 1..=5 {
            h.push(i);
        }
        assert_eq!(h.iter().copied().collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(h.last_n(2), [4, 5]);
        assert_eq!(h.last_n(10), [3, 4, 5]);
        assert_eq!(h.last(), Some(&5));
        assert_eq!(h.len(), 3);
    }
}
