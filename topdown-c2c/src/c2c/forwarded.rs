//! The samples the c2c filter forwards, classified as the fleet's metrics count them: local or
//! remote HITM, peer snoop, store (`serve --c2c`), each with its cgroup named.

use topdown_common::c2c::{C2cRecord, C2cStats};

/// What a forwarded sample was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleClass {
    /// A load that hit a modified line in this node's cache.
    LclHitm,
    /// A load that hit a modified line in another node's cache.
    RmtHitm,
    /// A load served by a peer cache (snoop hit), not modified.
    Peer,
    /// A store.
    Store,
}

impl SampleClass {
    /// Its `class` label.
    pub const fn name(self) -> &'static str {
        match self {
            Self::LclHitm => "lcl_hitm",
            Self::RmtHitm => "rmt_hitm",
            Self::Peer => "peer",
            Self::Store => "store",
        }
    }

    /// The class of `record` as perf c2c classifies it; `None` for a sample in none of them.
    pub fn of(record: &C2cRecord) -> Option<Self> {
        let mut one = C2cStats::default();
        one.add_sample(record.data_src, record.addr, true);
        if one.lcl_hitm > 0 {
            Some(Self::LclHitm)
        } else if one.rmt_hitm > 0 {
            Some(Self::RmtHitm)
        } else if one.tot_peer > 0 {
            Some(Self::Peer)
        } else if one.store > 0 {
            Some(Self::Store)
        } else {
            None
        }
    }
}

/// A forwarded sample, classified, with its cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedSample {
    /// The sampled task's cgroup2 id.
    pub cgroup_id: u64,
    /// That cgroup's path.
    pub path: String,
    /// What it was.
    pub class: SampleClass,
}

/// `records` classified, those in no class left out, each cgroup named by `name`.
pub fn classify(
    records: &[C2cRecord],
    mut name: impl FnMut(u64) -> String,
) -> Vec<ForwardedSample> {
    records
        .iter()
        .filter_map(|record| {
            Some(ForwardedSample {
                cgroup_id: record.cgroup_id,
                class: SampleClass::of(record)?,
                path: name(record.cgroup_id),
            })
        })
        .collect()
}
