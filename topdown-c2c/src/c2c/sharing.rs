//! What perf c2c leaves to the reader, per cache line: whether its contended loads are false
//! sharing (the threads share only the line) or true sharing (the data itself moves between
//! them), as LASER (HPCA 2016) labels lines from HITM records; and what fixing it is worth, from
//! the sampled latencies, as Cheetah (CGO 2016) predicts it. docs/c2c.md: "True or false sharing".
//!
//! Labels. A contended load (a HITM, or a load served by a peer cache) of thread T at a word of
//! the line is *true* sharing when another thread stored to that word, *false* when no other
//! thread did (the line moved because of stores elsewhere in it). Sample addresses are compared
//! by 8-byte word: memory-sampling PMUs record the exact data address of the sampled
//! instruction, but not its access size, so a 4-byte field at offset 4 written by an 8-byte store
//! at offset 0 must still match; a word is the widest ordinary access. Data wider than a word (a
//! 16-byte atomic, AVX stores) can then look falsely shared when it is not: said in docs/c2c.md.
//! A line is `false` when all its contended loads are false, `true` when all are true, `mixed`
//! otherwise, and `none` without contended loads (a line shown with `--show-all`).
//!
//! Gain. Were the line not shared, each of its contended loads would cost what an uncontended
//! load costs on average in this recording (the mean latency of its other loads). The saved
//! latency's share of all sampled load latency bounds the run time saved, when run time goes as
//! load latency (a memory-bound program; less otherwise): Cheetah's model without its per-thread
//! critical-path refinement.

use super::lines::{Access, C2cData, CacheLine, Cycles};
use crate::symbols::data_names::{DataName, DataNames};

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
pub fn gain(data: &C2cData, line: &CacheLine) -> Gain {
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

/// One word of a line: who stored and who made contended loads there, and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WordView {
    /// Offset in the line.
    pub offset: u64,
    /// The variable and field there (`None`: not in a mapped ELF file's data).
    pub name: Option<DataName>,
    /// Threads that stored to it.
    pub stored_by: Vec<u32>,
    /// Threads whose loads of it were contended.
    pub loaded_by: Vec<u32>,
}

/// A shown line's words, label and the fix suggested for it.
#[derive(Clone, Debug, PartialEq)]
pub struct LineFix {
    /// The label.
    pub sharing: LineSharing,
    /// What fixing it is worth.
    pub gain: Gain,
    /// Its words with stores or contended loads, by offset.
    pub words: Vec<WordView>,
    /// What to do about it, in words (`None`: no contended load).
    pub fix: Option<String>,
}

/// The words, label and fix of `line` of `data` (`names` names its data; `line_size` is 64, or
/// 128 with `--double-cl`).
pub fn fix(data: &C2cData, line: &CacheLine, names: &mut DataNames<'_>, line_size: u64) -> LineFix {
    let accesses = data.accesses_of(line);
    let sharing = label(accesses);
    let pid = data.entries_of(line).next().map(|(_, e)| e.first.pid);
    let mut words: Vec<WordView> = Vec::new();
    for access in accesses {
        let offset = u64::from(access.word) * WORD;
        if words.last().is_none_or(|w| w.offset != offset) {
            let name = pid.and_then(|pid| {
                names.name(pid, line.address + offset).or_else(|| {
                    // Heap or stack: the type of the pointer an access to the word went through.
                    data.entries_of(line)
                        .filter(|(key, e)| {
                            !e.first.kernel && (offset..offset + WORD).contains(&key.offset)
                        })
                        .find_map(|(_, e)| names.by_operand(e.first.pid, e.first.ip))
                })
            });
            words.push(WordView {
                offset,
                name,
                stored_by: Vec::new(),
                loaded_by: Vec::new(),
            });
        }
        let Some(word) = words.last_mut() else {
            continue;
        };
        if access.stores > 0 {
            word.stored_by.push(access.tid);
        }
        if access.contended > 0 {
            word.loaded_by.push(access.tid);
        }
    }
    let what = |w: &WordView| {
        w.name
            .as_ref()
            .map_or_else(|| format!("offset {:#x}", w.offset), |n| n.name.clone())
    };
    let threads = |tids: &[u32]| {
        let list: Vec<String> = tids.iter().map(u32::to_string).collect();
        format!(
            "thread{} {}",
            if tids.len() > 1 { "s" } else { "" },
            list.join(", ")
        )
    };
    let mut advice = Vec::new();
    // False: a contended load at a word no other thread stores to, and a word another does.
    let falsely = words.iter().find_map(|loaded| {
        loaded.loaded_by.iter().find_map(|&tid| {
            let own = !words
                .iter()
                .any(|w| w.offset == loaded.offset && w.stored_by.iter().any(|&s| s != tid));
            let other = words
                .iter()
                .find(|w| w.offset != loaded.offset && w.stored_by.iter().any(|&s| s != tid))?;
            own.then_some((loaded, other))
        })
    });
    if let Some((a, b)) = falsely {
        let (first, second) = if a.offset < b.offset { (a, b) } else { (b, a) };
        advice.push(format!(
            "false sharing: {} ({}) and {} ({}) share the line; start {} on its own \
             {line_size}-byte line: `alignas({line_size})` on it, or {} bytes of padding before \
             it",
            what(first),
            accessed_by(first, &threads),
            what(second),
            accessed_by(second, &threads),
            what(second),
            line_size - second.offset % line_size,
        ));
    }
    if let Some(moved) = words.iter().find(|w| {
        w.loaded_by
            .iter()
            .any(|&t| w.stored_by.iter().any(|&s| s != t))
    }) {
        advice.push(format!(
            "true sharing: {} is stored by {} and loaded by {}: the data itself moves, padding \
             will not help; give each thread its own copy (summed when read), or update it less \
             often",
            what(moved),
            threads(&moved.stored_by),
            threads(&moved.loaded_by),
        ));
    }
    LineFix {
        sharing,
        gain: gain(data, line),
        words,
        fix: (!advice.is_empty()).then(|| advice.join("; ")),
    }
}

/// `stored by thread 1, loaded by thread 2`.
fn accessed_by(word: &WordView, threads: &dyn Fn(&[u32]) -> String) -> String {
    match (word.stored_by.is_empty(), word.loaded_by.is_empty()) {
        (false, false) => format!(
            "stored by {}, loaded by {}",
            threads(&word.stored_by),
            threads(&word.loaded_by)
        ),
        (false, true) => format!("stored by {}", threads(&word.stored_by)),
        _ => format!("loaded by {}", threads(&word.loaded_by)),
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
