//! What perf c2c leaves to the reader, per cache line: whether its contended loads are false
//! sharing (the threads share only the line) or true sharing (the data itself moves between
//! them), as LASER (HPCA 2016) labels lines from HITM records; and what fixing it is worth, from
//! the sampled latencies, as Cheetah (CGO 2016) predicts it. README: "True or false sharing".
//!
//! Labels. A contended load (a HITM, or a load served by a peer cache) of thread T at a word of
//! the line is *true* sharing when another thread stored to that word, *false* when no other
//! thread did (the line moved because of stores elsewhere in it). Sample addresses are compared
//! by 8-byte word: memory-sampling PMUs record the exact data address of the sampled
//! instruction, but not its access size, so a 4-byte field at offset 4 written by an 8-byte store
//! at offset 0 must still match; a word is the widest ordinary access. Data wider than a word (a
//! 16-byte atomic, AVX stores) can then look falsely shared when it is not: said in the README.
//! A line is `false` when all its contended loads are false, `true` when all are true, `mixed`
//! otherwise, and `none` without contended loads (a line shown with `--show-all`).
//!
//! Gain. Were the line not shared, each of its contended loads would cost what an uncontended
//! load costs on average in this recording (the mean latency of its other loads). The saved
//! latency's share of all sampled load latency bounds the run time saved, when run time goes as
//! load latency (a memory-bound program; less otherwise): Cheetah's model without its per-thread
//! critical-path refinement.

use super::lines::{Access, C2cData, Cycles, Line};

/// Bytes compared as one location.
pub const WORD: u64 = 8;

/// What a line's contended loads share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// No contended load was sampled.
    None,
    /// Every contended load is at a word no other thread stored to.
    False,
    /// Every contended load is at a word another thread stored to.
    True,
    /// Some of each.
    Mixed,
}

impl Sharing {
    /// Its name in reports and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::False => "false",
            Self::True => "true",
            Self::Mixed => "mixed",
        }
    }
}

/// A line's label and the counts behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineSharing {
    /// The label.
    pub sharing: Sharing,
    /// Contended loads at words another thread stored to.
    pub true_loads: u64,
    /// Contended loads at words no other thread stored to.
    pub false_loads: u64,
}

/// The label of a line from its `accesses` (every thread's stores and contended loads per word).
pub fn label(accesses: &[Access]) -> LineSharing {
    let (mut true_loads, mut false_loads) = (0, 0);
    for load in accesses.iter().filter(|a| a.contended > 0) {
        let stored_by_other = accesses
            .iter()
            .any(|a| a.word == load.word && a.tid != load.tid && a.stores > 0);
        if stored_by_other {
            true_loads += u64::from(load.contended);
        } else {
            false_loads += u64::from(load.contended);
        }
    }
    let sharing = match (true_loads > 0, false_loads > 0) {
        (false, false) => Sharing::None,
        (false, true) => Sharing::False,
        (true, false) => Sharing::True,
        (true, true) => Sharing::Mixed,
    };
    LineSharing {
        sharing,
        true_loads,
        false_loads,
    }
}

/// What fixing a line is worth (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gain {
    /// Latency of the line's contended loads, summed (cycles).
    pub contended_cycles: u64,
    /// Its share of all sampled load latency, 0..1.
    pub latency_share: f64,
    /// The estimated bound on the share of run time saved if the line were not shared, 0..1.
    pub estimate: f64,
}

/// The gain of fixing `line` of `data`.
pub fn gain(data: &C2cData, line: &Line) -> Gain {
    let (mut cycles, mut loads) = (0u64, 0u64);
    for (_, entry) in data.entries_of(line) {
        for count in &entry.counts {
            let class = data
                .class_cycles
                .get(count.class as usize)
                .copied()
                .flatten();
            if matches!(
                class,
                Some(Cycles::RmtHitm | Cycles::LclHitm | Cycles::RmtPeer | Cycles::LclPeer)
            ) {
                cycles += count.weight;
                loads += count.samples;
            }
        }
    }
    let latency = data.latency;
    let all = latency.all_cycles as f64;
    let uncontended = if latency.uncontended_loads == 0 {
        0.0
    } else {
        latency.uncontended_cycles as f64 / latency.uncontended_loads as f64
    };
    let saved = (cycles as f64 - loads as f64 * uncontended).max(0.0);
    Gain {
        contended_cycles: cycles,
        latency_share: if all > 0.0 { cycles as f64 / all } else { 0.0 },
        estimate: if all > 0.0 { saved / all } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(word: u8, tid: u32, stores: u32, contended: u32) -> Access {
        Access {
            line: 0,
            word,
            tid,
            stores,
            contended,
        }
    }

    #[test]
    fn loads_at_words_others_store_are_true_sharing() {
        // Two threads each write their own word and read it: the line moves, the data not.
        let falsely = [access(0, 1, 5, 3), access(1, 2, 5, 4)];
        assert_eq!(
            label(&falsely),
            LineSharing {
                sharing: Sharing::False,
                true_loads: 0,
                false_loads: 7
            }
        );
        // One writes, the other reads the same word.
        let truly = [access(0, 1, 5, 0), access(0, 2, 0, 6)];
        assert_eq!(label(&truly).sharing, Sharing::True);
        assert_eq!(label(&truly).true_loads, 6);
        let mixed = [access(0, 1, 5, 0), access(0, 2, 0, 6), access(3, 1, 0, 2)];
        assert_eq!(
            (label(&mixed).sharing, label(&mixed).false_loads),
            (Sharing::Mixed, 2)
        );
        assert_eq!(label(&[access(0, 1, 9, 0)]).sharing, Sharing::None);
        // A thread's own stores do not make its loads true sharing.
        assert_eq!(label(&[access(2, 1, 4, 4)]).sharing, Sharing::False);
    }
}
