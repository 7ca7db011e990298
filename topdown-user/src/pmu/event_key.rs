//! What an event is, whatever its spelling: perf's metric files write
//! `cpu@UOPS_DECODED.DEC0\,cmask\=0x1@`, `perf stat` prints `cpu/UOPS_DECODED.DEC0,cmask=0x1/`,
//! perfmon writes `UOPS_DECODED.DEC0:c1`, a hybrid machine prefixes `cpu_core/`, and a raw
//! `cpu/event=0x56,umask=0x1,cmask=1/` is the same event again. An [`EventKey`] is the event's
//! encoding: its name's terms from the CPU's event table (when the name is in it), then the terms
//! written beside it, numbers as numbers (`0x1` = `1`), perfmon's short modifiers as perf's
//! terms (`c1` = `cmask=1`, `e1` = `edge=1`, `i1` = `inv=1`), flags as `=1`, without the PMU and
//! without the privilege modifiers (`:u`, `:k`) a count of the same event may carry.

use std::collections::BTreeMap;

use super::event_table::EventTable;

/// An event's meaning: its name when the table does not know it, and its terms.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKey {
    /// The event's name (upper case) when no table encodes it; empty when it is encoded.
    name: String,
    /// Terms and their values (`event`, `umask`, `cmask`, `edge`, `inv`, `any`, ...).
    terms: BTreeMap<String, u64>,
}

impl EventKey {
    /// The key of event `spelling` (any of perf's, perfmon's or a raw encoding), its name's
    /// terms looked up in `table`.
    pub fn of(spelling: &str, table: Option<&EventTable>) -> Self {
        let (name, written) = split(spelling);
        let mut terms = BTreeMap::new();
        let mut unencoded = String::new();
        if !name.is_empty() {
            match table.and_then(|t| t.terms(&name)) {
                Some(encoding) => add_terms(&mut terms, encoding.split(',')),
                None => unencoded = name.to_ascii_uppercase(),
            }
        }
        add_terms(&mut terms, written.iter().map(String::as_str));
        Self {
            name: unencoded,
            terms,
        }
    }
}

/// `spelling` as an event name (empty for a raw encoding) and the terms written beside it.
fn split(spelling: &str) -> (String, Vec<String>) {
    let text = spelling.trim().replace('\\', "");
    // `pmu@body@`, `pmu/body/modifiers`, or `body:modifiers`.
    let body = if let Some((_, rest)) = text.split_once('@') {
        rest.trim_end_matches('@').to_owned()
    } else if let Some((_, rest)) = text.split_once('/') {
        rest.rsplit_once('/')
            .map_or(rest, |(inner, _)| inner)
            .to_owned()
    } else {
        text
    };
    let mut parts = body.split(',').map(str::trim).filter(|p| !p.is_empty());
    let first = parts.next().unwrap_or_default();
    let mut written: Vec<String> = parts.map(str::to_owned).collect();
    let (name, modifiers) = match first.split_once(':') {
        Some((name, modifiers)) => (name, modifiers.split(':').collect::<Vec<_>>()),
        None => (first, Vec::new()),
    };
    for modifier in modifiers {
        if let Some(term) = short_modifier(modifier) {
            written.push(term);
        }
    }
    if name.contains('=') {
        // A raw encoding: its first part is a term too.
        written.insert(0, name.to_owned());
        return (String::new(), written);
    }
    (name.to_owned(), written)
}

/// perfmon's `c1`, `e1`, `i1` as perf's terms; privilege and other modifiers (`u`, `k`, `W`,
/// `pp`) say how, not what, and are dropped.
fn short_modifier(modifier: &str) -> Option<String> {
    let (kind, value) = modifier.split_at(modifier.len().min(1));
    let term = match kind {
        "c" => "cmask",
        "e" => "edge",
        "i" => "inv",
        _ => return None,
    };
    parse_number(value).map(|v| format!("{term}={v}"))
}

/// Terms into `terms`: `cmask=0x1` as 1, a flag (`edge`) as 1, aliases as perf's names.
fn add_terms<'a>(terms: &mut BTreeMap<String, u64>, written: impl Iterator<Item = &'a str>) {
    for term in written {
        let term = term.trim();
        if term.is_empty() {
            continue;
        }
        let (key, value) = term
            .split_once('=')
            .map_or((term, Some(1)), |(k, v)| (k.trim(), parse_number(v.trim())));
        let key = match key.to_ascii_lowercase().as_str() {
            "c" | "cmask" => "cmask".to_owned(),
            "e" | "edge" => "edge".to_owned(),
            "i" | "inv" => "inv".to_owned(),
            "any" | "anythread" => "any".to_owned(),
            other => other.to_owned(),
        };
        let Some(value) = value else { continue };
        // A zero flag or mask is the term's default: the same event as without it.
        if value == 0 && matches!(key.as_str(), "umask" | "cmask" | "edge" | "inv" | "any") {
            terms.remove(&key);
        } else {
            terms.insert(key, value);
        }
    }
}

/// A decimal or `0x` hex number.
fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_in_every_spelling_has_one_key() {
        let table = EventTable::named("icelakex");
        let key = |s: &str| EventKey::of(s, table.as_ref());
        let want = key("cpu@UOPS_DECODED.DEC0,cmask=1@");
        for spelling in [
            "cpu@UOPS_DECODED.DEC0\\,cmask\\=0x1@",
            "cpu/UOPS_DECODED.DEC0,cmask=0x1/",
            "cpu/UOPS_DECODED.DEC0,cmask=1/u",
            "UOPS_DECODED.DEC0:c1",
            "uops_decoded.dec0:c1",
            "cpu_core/UOPS_DECODED.DEC0,cmask=1/",
        ] {
            assert_eq!(key(spelling), want, "{spelling}");
        }
        assert_ne!(
            key("UOPS_DECODED.DEC0"),
            want,
            "without the cmask: another count"
        );
        assert_ne!(key("cpu/UOPS_DECODED.DEC0,cmask=2/"), want);
        let raw = table.and_then(|t| t.terms("UOPS_DECODED.DEC0")).unwrap();
        assert_eq!(key(&format!("cpu/{raw},cmask=1/")), want, "a raw encoding");
        assert_eq!(
            key("cpu@INT_MISC.RECOVERY_CYCLES,cmask=1,edge@"),
            key("INT_MISC.RECOVERY_CYCLES:c1:e1")
        );
        assert_eq!(key("cycles:u"), key("cycles"));
        // A deprecated name is the event it names (Tremont's table keeps MONUKE, now FASTNUKE).
        let tremont = EventTable::named("tremont");
        assert_eq!(
            EventKey::of("TOPDOWN_BAD_SPECULATION.MONUKE", tremont.as_ref()),
            EventKey::of("cpu/TOPDOWN_BAD_SPECULATION.FASTNUKE/", tremont.as_ref())
        );
        assert_eq!(
            key("cpu/INST_RETIRED.ANY,cmask=0/"),
            key("INST_RETIRED.ANY")
        );
    }
}
