//! Each CPU's core events by name, generated from the repository's data/ by
//! `xtask/gen/event_tables.py` into `events/<table>.tsv` (`NAME<TAB>perf terms<TAB>counters`).

/// The tables, by name.
const TABLES: &[(&str, &str)] = &[
    ("alderlake_atom", include_str!("events/alderlake_atom.tsv")),
    ("alderlake_core", include_str!("events/alderlake_core.tsv")),
    ("arrowlake_atom", include_str!("events/arrowlake_atom.tsv")),
    ("arrowlake_core", include_str!("events/arrowlake_core.tsv")),
    ("broadwell", include_str!("events/broadwell.tsv")),
    ("broadwellx", include_str!("events/broadwellx.tsv")),
    ("cascadelakex", include_str!("events/cascadelakex.tsv")),
    ("crestmont", include_str!("events/crestmont.tsv")),
    ("emeraldrapids", include_str!("events/emeraldrapids.tsv")),
    ("goldmont", include_str!("events/goldmont.tsv")),
    ("grandridge", include_str!("events/grandridge.tsv")),
    ("graniterapids", include_str!("events/graniterapids.tsv")),
    ("haswell", include_str!("events/haswell.tsv")),
    ("haswellx", include_str!("events/haswellx.tsv")),
    ("icelake", include_str!("events/icelake.tsv")),
    ("icelakex", include_str!("events/icelakex.tsv")),
    ("lunarlake_atom", include_str!("events/lunarlake_atom.tsv")),
    ("lunarlake_core", include_str!("events/lunarlake_core.tsv")),
    (
        "meteorlake_core",
        include_str!("events/meteorlake_core.tsv"),
    ),
    ("neoverse_n2", include_str!("events/neoverse_n2.tsv")),
    ("neoverse_n3", include_str!("events/neoverse_n3.tsv")),
    ("neoverse_v1", include_str!("events/neoverse_v1.tsv")),
    ("neoverse_v3", include_str!("events/neoverse_v3.tsv")),
    ("rocketlake", include_str!("events/rocketlake.tsv")),
    ("sapphirerapids", include_str!("events/sapphirerapids.tsv")),
    ("sierraforest", include_str!("events/sierraforest.tsv")),
    ("skylake", include_str!("events/skylake.tsv")),
    ("skylakex", include_str!("events/skylakex.tsv")),
    ("tigerlake", include_str!("events/tigerlake.tsv")),
    ("tremont", include_str!("events/tremont.tsv")),
    ("zen4", include_str!("events/zen4.tsv")),
    ("zen5", include_str!("events/zen5.tsv")),
];

/// One CPU's event table.
#[derive(Clone, Copy, Debug)]
pub struct EventTable {
    /// Table name, e.g. `sapphirerapids`.
    pub name: &'static str,
    text: &'static str,
}

impl EventTable {
    /// The table called `name`.
    pub fn named(name: &str) -> Option<Self> {
        TABLES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(name, text)| Self { name, text })
    }

    /// The table a TopDown model's events are encoded from (none for models whose event data
    /// is not in data/). Arm's tables hold perf's common and recommended events (and
    /// the core's own where the data has them): a kernel's sysfs names only some of them.
    pub fn for_model(model: &str) -> Option<Self> {
        Self::named(match model {
            "skylake_smt" => "skylake",
            other => other,
        })
    }

    /// Whether any CPU's table has an event called `name`.
    pub fn any_knows(name: &str) -> bool {
        TABLES.iter().any(|&(name_of, text)| {
            Self {
                name: name_of,
                text,
            }
            .terms(name)
            .is_some()
        })
    }

    /// The perf terms of event `name` (case-insensitive, as perf matches them).
    pub fn terms(&self, name: &str) -> Option<&'static str> {
        self.row(name).map(|(_, terms, _)| terms)
    }

    /// The counters event `name` may use, as the data lists them (`0-3`, `fixed1`).
    pub fn counters(&self, name: &str) -> Option<&'static str> {
        self.row(name).map(|(_, _, counters)| counters)
    }

    /// Every event name.
    pub fn names(&self) -> impl Iterator<Item = &'static str> {
        self.rows().map(|(name, _, _)| name)
    }

    fn row(&self, name: &str) -> Option<(&'static str, &'static str, &'static str)> {
        self.rows().find(|(n, _, _)| n.eq_ignore_ascii_case(name))
    }

    fn rows(&self) -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
        self.text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let mut fields = line.split('\t');
                Some((fields.next()?, fields.next()?, fields.next().unwrap_or("")))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_hold_the_data_encodings() {
        let spr = EventTable::named("sapphirerapids").unwrap();
        assert_eq!(
            spr.terms("INT_MISC.UOP_DROPPING"),
            Some("event=0xad,umask=0x10")
        );
        assert_eq!(
            spr.terms("int_misc.uop_dropping"),
            Some("event=0xad,umask=0x10")
        );
        assert!(spr.names().count() > 200);
        assert_eq!(spr.counters("INT_MISC.UOP_DROPPING"), Some("0-7"));
        assert_eq!(spr.counters("CPU_CLK_UNHALTED.THREAD"), Some("fixed1"));
        let zen4 = EventTable::for_model("zen4").unwrap();
        assert_eq!(
            zen4.terms("de_src_op_disp.all"),
            Some("event=0xaa,umask=0x07")
        );
        assert_eq!(
            EventTable::for_model("skylake_smt").unwrap().name,
            "skylake"
        );
        // Arm: the common events, and the core's own (Neoverse V3's STALL_FRONTEND_FLUSH,
        // 0x8162 in common-and-microarch.json), with no counter list (no groups planned).
        let v3 = EventTable::for_model("neoverse_v3").unwrap();
        assert_eq!(v3.terms("stall_frontend_flush"), Some("event=0x8162"));
        assert_eq!(v3.terms("STALL_SLOT"), Some("event=0x3f"));
        assert_eq!(v3.counters("cpu_cycles"), Some(""));
    }
}
