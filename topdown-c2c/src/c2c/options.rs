//! How a c2c report ranks and filters cache lines (`-d tot|lcl|rmt|peer`, `--show-all`), as
//! perf c2c does.

use anyhow::{Result, bail};
use clap::ValueEnum;
use topdown_common::c2c::C2cStats;

use super::lines::Contended;

/// What lines are ranked by (`perf c2c report -d`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum C2cDisplay {
    /// Total HITMs (perf's default on x86).
    #[default]
    Tot,
    /// Local HITMs.
    Lcl,
    /// Remote HITMs.
    Rmt,
    /// Loads served by a peer cache (perf's default on arm64).
    Peer,
}

impl C2cDisplay {
    /// The count lines are ranked by.
    pub const fn metric(self, s: &C2cStats) -> u64 {
        match self {
            Self::Tot => s.tot_hitm,
            Self::Lcl => s.lcl_hitm,
            Self::Rmt => s.rmt_hitm,
            Self::Peer => s.tot_peer,
        }
    }

    /// The count a line is ranked by, from its contended loads.
    pub const fn line_metric(self, c: &Contended) -> u64 {
        match self {
            Self::Tot => c.tot_hitm,
            Self::Lcl => c.lcl_hitm,
            Self::Rmt => c.rmt_hitm,
            Self::Peer => c.tot_peer,
        }
    }

    /// perf's `display_str`, for "Cachelines sort on".
    pub const fn title(self) -> &'static str {
        match self {
            Self::Tot => "Total HITMs",
            Self::Lcl => "Local HITMs",
            Self::Rmt => "Remote HITMs",
            Self::Peer => "Peer Snoop",
        }
    }

    /// Orders two entries of a line after their offset (perf's `cl_resort` keys after
    /// `offset`): most of the ranked count first, then the other kind of HITM.
    pub fn rank(self, a: &C2cStats, b: &C2cStats) -> std::cmp::Ordering {
        let key = |s: &C2cStats| match self {
            Self::Tot => (s.tot_hitm, 0),
            Self::Lcl => (s.lcl_hitm, s.rmt_hitm),
            Self::Rmt => (s.rmt_hitm, s.lcl_hitm),
            Self::Peer => (s.tot_peer, 0),
        };
        key(b).cmp(&key(a))
    }
}

/// A field entries of a line can be told apart by (`perf c2c report -c`), besides the offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The process.
    Pid,
    /// The thread.
    Tid,
    /// The code address (and with it symbol, object and source line columns).
    Iaddr,
    /// The code's object.
    Dso,
}

/// The fields entries are coalesced by, in the order given (perf's default: `iaddr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coalesce([Option<Field>; 4]);

impl Default for Coalesce {
    fn default() -> Self {
        Self([Some(Field::Iaddr), None, None, None])
    }
}

impl Coalesce {
    /// Parses `pid,tid,iaddr,dso` (any subset, any order).
    pub fn parse(text: &str) -> Result<Self> {
        let mut fields = [None; 4];
        let mut n = 0;
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let field = match token {
                "pid" => Field::Pid,
                "tid" => Field::Tid,
                "iaddr" => Field::Iaddr,
                "dso" => Field::Dso,
                other => bail!("unknown coalesce field `{other}`: use pid, tid, iaddr or dso"),
            };
            if !fields.contains(&Some(field)) && n < 4 {
                fields[n] = Some(field);
                n += 1;
            }
        }
        if n == 0 {
            bail!("-c needs at least one of pid, tid, iaddr, dso");
        }
        Ok(Self(fields))
    }

    /// The fields, in the order given.
    pub fn fields(&self) -> impl Iterator<Item = Field> + '_ {
        self.0.iter().flatten().copied()
    }

    /// Whether entries are told apart by `field`.
    pub fn has(&self, field: Field) -> bool {
        self.0.contains(&Some(field))
    }

    /// perf's "Cacheline data grouping": `offset,iaddr`.
    pub fn grouping(&self) -> String {
        let names: Vec<&str> = self
            .fields()
            .map(|f| match f {
                Field::Pid => "pid",
                Field::Tid => "tid",
                Field::Iaddr => "iaddr",
                Field::Dso => "dso",
            })
            .collect();
        format!("offset,{}", names.join(","))
    }
}

/// How a report chooses and shows its lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportOptions {
    /// What lines are ranked by.
    pub display: C2cDisplay,
    /// Every line, not only those with at least 0.1 % of the ranked count.
    pub show_all: bool,
    /// The Pareto table's last column (`-N`): 0 the nodes of the CPUs, 1 with their CPU counts
    /// and shares of the ranked count and of the stores, 2 with the CPU lists.
    pub node_info: u8,
    /// Symbols are not cut at 30 characters (`--full-symbols`).
    pub full_symbols: bool,
    /// No Source:Line column (`--no-source`).
    pub no_source: bool,
    /// What entries of a line are told apart by (`-c`).
    pub coalesce: Coalesce,
    /// Lines of 128 bytes, two adjacent cache lines together (`--double-cl`: adjacent-line
    /// prefetchers make neighbours falsely share).
    pub double_cl: bool,
    /// Each line labelled true, false or mixed sharing, with its estimated gain (`--sharing`;
    /// always in JSON).
    pub sharing: bool,
    /// Lines shown in the order of their estimated gain (`--by-gain`).
    pub by_gain: bool,
}

impl ReportOptions {
    /// Bytes per line: 64, or 128 with `--double-cl`.
    pub const fn line_size(&self) -> u64 {
        if self.double_cl { 128 } else { 64 }
    }
}
