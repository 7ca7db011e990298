//! Which events of the set do not count on this PMU, so far: the calibration at start names
//! them ([`crate::collect::calibration`]), and one that counts in any row counts from then on.

use super::usage::CounterValue;

/// Per slot of the set: whether its event is silent (read 0 while the PMU counted others).
#[derive(Clone, Debug, Default)]
pub struct Silence {
    silent: Vec<bool>,
}

impl Silence {
    /// No silent event among `nr` counters.
    pub fn new(nr: usize) -> Self {
        Self {
            silent: vec![false; nr],
        }
    }

    /// Marks the events in `slots` silent.
    pub fn set(&mut self, slots: &[usize]) {
        for &slot in slots {
            if let Some(silent) = self.silent.get_mut(slot) {
                *silent = true;
            }
        }
    }

    /// Clears the silence of each silent event that some of `rows` counted (its zeros are
    /// counts from then on), then marks every row's values with the verdict.
    pub fn judge(&mut self, rows: &mut [&mut [CounterValue]]) {
        for (slot, silent) in self.silent.iter_mut().enumerate() {
            if *silent
                && rows
                    .iter()
                    .any(|values| values.get(slot).is_some_and(|v| v.reading.count > 0))
            {
                log::info!("counter slot {slot} counted after all: its zeros are counts from now");
                *silent = false;
            }
        }
        self.mark(rows);
    }

    /// Marks every row's values silent or not, as the verdict stands.
    pub fn mark(&self, rows: &mut [&mut [CounterValue]]) {
        if !self.silent.contains(&true) {
            return;
        }
        for values in rows.iter_mut() {
            for (value, &silent) in values.iter_mut().zip(&self.silent) {
                value.silent = silent;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(raws: &[u64]) -> Vec<CounterValue> {
        raws.iter()
            .map(|&raw| CounterValue::new(raw, 10, 10))
            .collect()
    }

    /// Silent slots are marked in every row until some row counts one; that slot then counts
    /// for good, the other stays silent.
    #[test]
    fn a_silent_event_stays_not_counted_until_any_row_counts_it() {
        let mut silence = Silence::new(3);
        silence.set(&[1, 2, 7]);
        let (mut a, mut b) = (row(&[5, 0, 0]), row(&[6, 0, 0]));
        silence.judge(&mut [&mut a, &mut b]);
        for values in [&a, &b] {
            assert!(!values[0].silent && values[1].silent && values[2].silent);
            assert_eq!(values[1].scaled(), None, "a silent 0 is no count");
        }
        let (mut a, mut b) = (row(&[5, 0, 0]), row(&[6, 3, 0]));
        silence.judge(&mut [&mut a, &mut b]);
        assert!(
            !a[1].silent && !b[1].silent,
            "counted in one row: counts in all"
        );
        assert_eq!(a[1].scaled(), Some(0.0), "its zeros are counts now");
        assert!(a[2].silent && b[2].silent);
        let mut later = row(&[1, 0, 0]);
        silence.judge(&mut [&mut later]);
        assert!(!later[1].silent, "for good");
    }
}
