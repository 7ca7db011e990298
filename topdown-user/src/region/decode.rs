//! Decoding PERF_METRICS readings into TopDown fractions, as Linux's `Documentation/topdown.txt`
//! describes them: a reading is the `slots` counter (fixed counter 3) and the packed `metrics`
//! value RDPMC returns, eight 8-bit fractions of the slots counted since the last reset:
//!
//! | byte | metric | | byte | metric (Sapphire Rapids and later) |
//! |---|---|---|---|---|
//! | 0 | `tma_retiring` | | 4 | `tma_heavy_operations` |
//! | 1 | `tma_bad_speculation` | | 5 | `tma_branch_mispredicts` |
//! | 2 | `tma_frontend_bound` | | 6 | `tma_fetch_latency` |
//! | 3 | `tma_backend_bound` | | 7 | `tma_memory_bound` |
//!
//! One reading gives the fractions since the last reset (`byte / 0xff`). Two give the region
//! between them from slot-scaled deltas: a metric stood for `slots * byte / 0xff` slots at each
//! reading, and the region's fraction is the growth of that over the growth of `slots`
//! (topdown.txt's delta example leaves out the division by 0xff). The slot counter wraps at
//! `pmc_width` bits (the mmap page says how many). Level 2's other halves are differences
//! (Light Operations = Retiring - Heavy Operations, Machine Clears = Bad Speculation - Branch
//! Mispredicts, Fetch Bandwidth = Frontend Bound - Fetch Latency, Core Bound = Backend Bound -
//! Memory Bound).
//!
//! Precision. Each byte is rounded to 1/255 of the slots since the reset, so a metric's slots at
//! a reading are off by up to `slots / 510`, and a region's fraction by up to
//! `(slots_a + slots_b) / (510 * region_slots)`. A region whose bound passes
//! [`MAX_UNCERTAINTY`] is too short (or read too long after the reset) and is an error, not
//! numbers: reset nearer the region (`Region::reset`) or measure more of it.

use anyhow::{Result, bail};

/// The Level 1 metrics, by byte.
pub const LEVEL1: [&str; 4] = [
    "tma_retiring",
    "tma_bad_speculation",
    "tma_frontend_bound",
    "tma_backend_bound",
];

/// The Level 2 metrics bytes 4 to 7 hold, each with its Level 1 parent's byte and the sibling
/// the difference gives.
pub const LEVEL2: [(&str, usize, &str); 4] = [
    ("tma_heavy_operations", 0, "tma_light_operations"),
    ("tma_branch_mispredicts", 1, "tma_machine_clears"),
    ("tma_fetch_latency", 2, "tma_fetch_bandwidth"),
    ("tma_memory_bound", 3, "tma_core_bound"),
];

/// The largest uncertainty (in fractions of the region's slots) a region may have.
pub const MAX_UNCERTAINTY: f64 = 0.02;

/// How far from 0xff the four Level 1 bytes of one reading may sum (each is rounded on its
/// own: at most 2 off in all; 4 allows for the hardware's own rounding).
const SUM_SLACK: i32 = 4;

/// One reading: the slots counter and the packed metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsReading {
    /// `slots` (fixed counter 3), as read.
    pub slots: u64,
    /// The packed 8-bit fractions (RDPMC of the metrics counter).
    pub metrics: u64,
}

impl MetricsReading {
    /// Byte `i` of the metrics.
    pub const fn byte(self, i: usize) -> u8 {
        (self.metrics >> (8 * i)) as u8
    }

    /// Checks that the four Level 1 bytes sum to 0xff (within rounding).
    fn check(self, which: &str) -> Result<()> {
        let sum: i32 = (0..4).map(|i| i32::from(self.byte(i))).sum();
        if (sum - 0xff).abs() > SUM_SLACK {
            bail!(
                "inconsistent {which} reading: its four Level 1 fractions sum to {sum}/255, not \
                 255 (metrics {:#018x}: not a PERF_METRICS value, or read with read(2), which \
                 returns slots, not fractions)",
                self.metrics
            );
        }
        Ok(())
    }
}

/// TopDown fractions of a region (or since a reset), by perf's metric names, tree order.
#[derive(Clone, Debug, PartialEq)]
pub struct Fractions {
    /// `(metric, fraction of slots)`: Level 1, then Level 2 when asked.
    pub values: Vec<(&'static str, f64)>,
    /// The slots the fractions are of.
    pub slots: u64,
    /// The bound on each fraction's error from the 8-bit precision.
    pub uncertainty: f64,
}

impl Fractions {
    /// The fraction of `metric`.
    pub fn get(&self, metric: &str) -> Option<f64> {
        self.values
            .iter()
            .find(|(m, _)| *m == metric)
            .map(|&(_, v)| v)
    }

    /// Fractions from each metric's share of `slots` (`share(i)` for byte `i`), down to
    /// `level`.
    fn from_shares(share: impl Fn(usize) -> f64, level: u8, slots: u64, uncertainty: f64) -> Self {
        let mut values: Vec<(&'static str, f64)> = LEVEL1
            .iter()
            .enumerate()
            .map(|(i, m)| (*m, share(i)))
            .collect();
        if level >= 2 {
            for (i, &(measured, parent, sibling)) in LEVEL2.iter().enumerate() {
                let value = share(4 + i);
                values.push((measured, value));
                values.push((sibling, share(parent) - value));
            }
        }
        Self {
            values,
            slots,
            uncertainty,
        }
    }
}

/// The fractions since the last reset, from one reading.
pub fn since_reset(reading: MetricsReading, level: u8) -> Result<Fractions> {
    if reading.slots == 0 {
        bail!("no slots counted since the reset: nothing ran, or the counters are not enabled");
    }
    reading.check("the")?;
    Ok(Fractions::from_shares(
        |i| f64::from(reading.byte(i)) / 255.0,
        level,
        reading.slots,
        1.0 / 510.0,
    ))
}

/// The fractions from read(2) of the group: `slots`, and each metric's slots in byte order
/// (the kernel multiplies the 8-bit fractions by the slots since the reset, which the read
/// resets).
pub fn from_slot_counts(slots: u64, metrics: &[u64], level: u8) -> Result<Fractions> {
    if slots == 0 {
        bail!("no slots counted in the region: it did not run, or the counters are not enabled");
    }
    let wanted = if level >= 2 { 8 } else { 4 };
    if metrics.len() < wanted {
        bail!(
            "read(2) gave {} metrics, Level {level} needs {wanted}",
            metrics.len()
        );
    }
    let sum: u64 = metrics[..4].iter().sum();
    if sum.abs_diff(slots) > slots / 50 + 4 {
        bail!(
            "inconsistent read: the four Level 1 metrics add up to {sum} slots of {slots} (each              is a whole-slot share of the slots since the reset)"
        );
    }
    Ok(Fractions::from_shares(
        |i| metrics[i] as f64 / slots as f64,
        level,
        slots,
        1.0 / 510.0,
    ))
}

/// The fractions of the region between readings `a` and `b` (the slot counter `pmc_width` bits
/// wide, as the mmap page's `pmc_width` says).
pub fn region(
    a: MetricsReading,
    b: MetricsReading,
    pmc_width: u32,
    level: u8,
) -> Result<Fractions> {
    if !(1..=64).contains(&pmc_width) {
        bail!("a counter width of {pmc_width} bits: expected 1 to 64 (48 on these CPUs)");
    }
    a.check("first")?;
    b.check("second")?;
    let mask = if pmc_width == 64 {
        u64::MAX
    } else {
        (1u64 << pmc_width) - 1
    };
    let delta = b.slots.wrapping_sub(a.slots) & mask;
    if delta == 0 {
        bail!("no slots between the two readings: the region did not run");
    }
    // The second reading's slots since the reset, unwrapped.
    let (a_slots, b_slots) = (a.slots as f64, a.slots as f64 + delta as f64);
    let uncertainty = (a_slots + b_slots) / (510.0 * delta as f64);
    if uncertainty > MAX_UNCERTAINTY {
        bail!(
            "region too short: {delta} slots, read {} slots after the last reset, so the 8-bit \
             fractions are only good to ±{:.1} % here (at most {:.0} % allowed): reset the \
             counters nearer the region, or measure more of it",
            a.slots,
            uncertainty * 100.0,
            MAX_UNCERTAINTY * 100.0
        );
    }
    let share = |i: usize| {
        let grown = b_slots * f64::from(b.byte(i)) - a_slots * f64::from(a.byte(i));
        grown / 255.0 / delta as f64
    };
    let fractions = Fractions::from_shares(share, level, delta, uncertainty);
    if let Some((metric, value)) = fractions.values[..4]
        .iter()
        .find(|(_, v)| *v < -uncertainty || *v > 1.0 + uncertainty)
    {
        bail!(
            "inconsistent readings: {metric} comes out at {:.1} % of the region's slots (the \
             counters were reset between them, or the readings are from different threads)",
            value * 100.0
        );
    }
    Ok(fractions)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packs bytes 0..8 into a metrics value.
    fn metrics(bytes: [u8; 8]) -> u64 {
        u64::from_le_bytes(bytes)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn one_reading_is_its_bytes_over_255() {
        // 51 + 25 + 102 + 77 = 255; heavy 10, mispredicts 20, fetch latency 60, memory 40.
        let r = MetricsReading {
            slots: 1_000_000,
            metrics: metrics([51, 25, 102, 77, 10, 20, 60, 40]),
        };
        let f = since_reset(r, 2).unwrap();
        assert!(close(f.get("tma_retiring").unwrap(), 51.0 / 255.0));
        assert!(close(f.get("tma_backend_bound").unwrap(), 77.0 / 255.0));
        assert!(close(f.get("tma_light_operations").unwrap(), 41.0 / 255.0));
        assert!(close(f.get("tma_machine_clears").unwrap(), 5.0 / 255.0));
        assert!(close(f.get("tma_fetch_bandwidth").unwrap(), 42.0 / 255.0));
        assert!(close(f.get("tma_core_bound").unwrap(), 37.0 / 255.0));
        let sum: f64 = f.values[..4].iter().map(|(_, v)| v).sum();
        assert!(close(sum, 1.0));
        assert_eq!(since_reset(r, 1).unwrap().values.len(), 4);
        assert_eq!(f.values.len(), 12);
    }

    #[test]
    fn two_readings_give_the_region_from_slot_scaled_deltas() {
        // 1,000,000 slots after a reset, then a region of 3,000,000 slots.
        let a = MetricsReading {
            slots: 1_000_000,
            metrics: metrics([102, 25, 77, 51, 0, 0, 0, 0]),
        };
        let b = MetricsReading {
            slots: 4_000_000,
            metrics: metrics([140, 30, 35, 50, 0, 0, 0, 0]),
        };
        let f = region(a, b, 48, 1).unwrap();
        // By hand: (4e6*153 - 1e6*102) / 255 / 3e6.
        let by_hand = |x: f64, y: f64| (4e6 * y - 1e6 * x) / 255.0 / 3e6;
        assert!(close(f.get("tma_retiring").unwrap(), by_hand(102.0, 140.0)));
        assert!(close(
            f.get("tma_bad_speculation").unwrap(),
            by_hand(25.0, 30.0)
        ));
        assert!(close(
            f.get("tma_frontend_bound").unwrap(),
            by_hand(77.0, 35.0)
        ));
        assert!(close(
            f.get("tma_backend_bound").unwrap(),
            by_hand(51.0, 50.0)
        ));
        // The four add up to the region: (560 - 102 + 120 - 25 + 140 - 77 + 200 - 51) / 765.
        let sum: f64 = f.values.iter().map(|(_, v)| v).sum();
        assert!(close(sum, 1.0));
        assert_eq!(f.slots, 3_000_000);
        assert!(close(f.uncertainty, 5e6 / (510.0 * 3e6)));
        // Level 2 on Sapphire Rapids: heavy 20/255 -> 40/255, light by difference.
        let a2 = MetricsReading {
            metrics: a.metrics | metrics([0, 0, 0, 0, 20, 10, 30, 25]),
            ..a
        };
        let b2 = MetricsReading {
            metrics: b.metrics | metrics([0, 0, 0, 0, 40, 20, 20, 30]),
            ..b
        };
        let f2 = region(a2, b2, 48, 2).unwrap();
        let heavy = by_hand(20.0, 40.0);
        assert!(close(f2.get("tma_heavy_operations").unwrap(), heavy));
        assert!(close(
            f2.get("tma_light_operations").unwrap(),
            by_hand(102.0, 140.0) - heavy
        ));
        assert!(close(
            f2.get("tma_core_bound").unwrap(),
            by_hand(51.0, 50.0) - by_hand(25.0, 30.0)
        ));
    }

    #[test]
    fn slot_counters_wrap_at_the_counter_width() {
        let bytes = metrics([51, 51, 102, 51, 0, 0, 0, 0]);
        // A 16-bit counter read at 0xf000 and again after 0x8000 more slots: it reads 0x7000.
        let a = MetricsReading {
            slots: 0xf000,
            metrics: bytes,
        };
        let b = MetricsReading {
            slots: 0x7000,
            metrics: bytes,
        };
        let f = region(a, b, 16, 1).unwrap();
        assert_eq!(f.slots, 0x8000);
        // Same bytes at both readings: the region has the same fractions.
        assert!(close(f.get("tma_frontend_bound").unwrap(), 102.0 / 255.0));
        // By hand: (0xf000 + 0x18000) / (510 * 0x8000).
        assert!(close(
            f.uncertainty,
            (61_440.0 + 94_208.0) / (510.0 * 32_768.0)
        ));
        // Read at 48 bits, the same values are a region of 2^48 - 0x8000 slots.
        assert_eq!(region(a, b, 48, 1).unwrap().slots, (1 << 48) - 0x8000);
        // A region read long after the reset is too imprecise to give numbers.
        let late = region(
            MetricsReading {
                slots: 1 << 40,
                metrics: bytes,
            },
            MetricsReading {
                slots: (1 << 40) + 1_000_000,
                metrics: bytes,
            },
            48,
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(
            late.contains("region too short") && late.contains("reset"),
            "{late}"
        );
    }

    #[test]
    fn read_syscall_values_are_slots_per_metric() {
        // 10,000 slots: retiring 4,000, bad 1,000, fe 3,000, be 2,000; heavy 1,500 ...
        let m = [4_000, 1_000, 3_000, 2_000, 1_500, 600, 2_000, 800];
        let f = from_slot_counts(10_000, &m, 2).unwrap();
        assert!(close(f.get("tma_retiring").unwrap(), 0.4));
        assert!(close(f.get("tma_light_operations").unwrap(), 0.25));
        assert!(close(f.get("tma_machine_clears").unwrap(), 0.04));
        assert!(close(f.get("tma_fetch_bandwidth").unwrap(), 0.1));
        assert!(close(f.get("tma_core_bound").unwrap(), 0.12));
        assert!(from_slot_counts(0, &m, 1).is_err());
        assert!(from_slot_counts(10_000, &m[..4], 2).is_err());
        let error = from_slot_counts(10_000, &[1, 1, 1, 1], 1)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("inconsistent read"), "{error}");
    }

    #[test]
    fn bad_readings_are_one_line_errors() {
        let good = metrics([51, 51, 102, 51, 0, 0, 0, 0]);
        let at = |slots, metrics| MetricsReading { slots, metrics };
        let cases = [
            (
                region(at(1_000, good), at(1_000, good), 48, 1),
                "no slots between",
            ),
            (since_reset(at(0, good), 1), "no slots counted"),
            (
                since_reset(at(1_000, 123_456_789), 1),
                "inconsistent the reading",
            ),
            (
                region(at(1_000, good), at(5_000_000, 3), 48, 1),
                "inconsistent second reading",
            ),
            (
                region(at(1_000, good), at(5_000, good), 0, 1),
                "counter width",
            ),
            (
                // Backend bound falls from 102/255 of 1e6 slots to 0 of 1.5e6: -26.7 % of the
                // region, far past the ±0.5 % the bytes allow.
                region(
                    at(1_000_000, metrics([51, 51, 51, 102, 0, 0, 0, 0])),
                    at(1_500_000, metrics([102, 51, 102, 0, 0, 0, 0, 0])),
                    48,
                    1,
                ),
                "inconsistent readings: tma_backend_bound",
            ),
        ];
        for (result, wanted) in cases {
            let error = result.unwrap_err().to_string();
            assert!(error.contains(wanted), "{error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }
}
