//! perf c2c's statistics tables, line for line as `perf c2c report --stdio --stats` prints them.

use std::fmt::Write as _;

use topdown_common::c2c::C2cStats;

use crate::c2c::{lines::C2cData, options::ReportOptions};

const RULE: &str = "=================================================";

/// "Trace Event Information", "Global Shared Cache Line Event Information" and "c2c details".
pub fn render(data: &C2cData, events: &[String], options: ReportOptions) -> String {
    let mut out = String::new();
    trace_events(&mut out, &data.total);
    let (lines, shared) = data.shared();
    shared_lines(&mut out, lines, &shared);
    details(&mut out, events, options);
    out
}

fn row(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "  {label:<34}: {value:>10}");
}

/// perf prints `value / llc_misses * 100` with `%10.1f`: glibc writes 0/0 as `-nan`.
fn percent(out: &mut String, label: &str, part: u64, whole: u64) {
    let value = if whole == 0 {
        format!("{:>10}", "-nan")
    } else {
        format!("{:>10.1}", part as f64 / whole as f64 * 100.0)
    };
    let _ = writeln!(out, "  {label:<34}: {value}%");
}

fn title(out: &mut String, text: &str) {
    let _ = writeln!(out, "{RULE}\n{text}\n{RULE}");
}

fn trace_events(out: &mut String, s: &C2cStats) {
    let llc_misses = s.lcl_dram + s.rmt_dram + s.rmt_hit + s.rmt_hitm;
    title(out, "            Trace Event Information              ");
    row(out, "Total records", s.nr_entries);
    row(out, "Locked Load/Store Operations", s.locks);
    row(out, "Load Operations", s.load);
    row(out, "Loads - uncacheable", s.ld_uncache);
    row(out, "Loads - IO", s.ld_io);
    row(out, "Loads - Miss", s.ld_miss);
    row(out, "Loads - no mapping", s.ld_noadrs);
    row(out, "Load Fill Buffer Hit", s.ld_fbhit);
    row(out, "Load L1D hit", s.ld_l1hit);
    row(out, "Load L2D hit", s.ld_l2hit);
    row(out, "Load LLC hit", s.ld_llchit + s.lcl_hitm);
    row(out, "Load Local HITM", s.lcl_hitm);
    row(out, "Load Remote HITM", s.rmt_hitm);
    row(out, "Load Remote HIT", s.rmt_hit);
    row(out, "Load Local DRAM", s.lcl_dram);
    row(out, "Load Remote DRAM", s.rmt_dram);
    row(out, "Load MESI State Exclusive", s.ld_excl);
    row(out, "Load MESI State Shared", s.ld_shared);
    row(out, "Load LLC Misses", llc_misses);
    row(out, "Load access blocked by data", s.blk_data);
    row(out, "Load access blocked by address", s.blk_addr);
    row(out, "Load HIT Local Peer", s.lcl_peer);
    row(out, "Load HIT Remote Peer", s.rmt_peer);
    percent(out, "LLC Misses to Local DRAM", s.lcl_dram, llc_misses);
    percent(out, "LLC Misses to Remote DRAM", s.rmt_dram, llc_misses);
    percent(
        out,
        "LLC Misses to Remote cache (HIT)",
        s.rmt_hit,
        llc_misses,
    );
    percent(
        out,
        "LLC Misses to Remote cache (HITM)",
        s.rmt_hitm,
        llc_misses,
    );
    row(out, "Store Operations", s.store);
    row(out, "Store - uncacheable", s.st_uncache);
    row(out, "Store - no mapping", s.st_noadrs);
    row(out, "Store L1D Hit", s.st_l1hit);
    row(out, "Store L1D Miss", s.st_l1miss);
    row(out, "Store No available memory level", s.st_na);
    row(out, "No Page Map Rejects", s.nomap);
    row(out, "Unable to parse data source", s.noparse);
}

fn shared_lines(out: &mut String, lines: usize, s: &C2cStats) {
    let _ = writeln!(out);
    title(out, "    Global Shared Cache Line Event Information   ");
    row(out, "Total Shared Cache Lines", lines);
    row(out, "Load HITs on shared lines", s.load);
    row(out, "Fill Buffer Hits on shared lines", s.ld_fbhit);
    row(out, "L1D hits on shared lines", s.ld_l1hit);
    row(out, "L2D hits on shared lines", s.ld_l2hit);
    row(out, "LLC hits on shared lines", s.ld_llchit + s.lcl_hitm);
    row(
        out,
        "Load hits on peer cache or nodes",
        s.lcl_peer + s.rmt_peer,
    );
    row(out, "Locked Access on shared lines", s.locks);
    row(
        out,
        "Blocked Access on shared lines",
        s.blk_data + s.blk_addr,
    );
    row(out, "Store HITs on shared lines", s.store);
    row(out, "Store L1D hits on shared lines", s.st_l1hit);
    row(out, "Store No available memory level", s.st_na);
    row(
        out,
        "Total Merged records",
        s.lcl_hitm + s.rmt_hitm + s.store,
    );
}

fn details(out: &mut String, events: &[String], options: ReportOptions) {
    let _ = writeln!(out);
    title(out, "                 c2c details                     ");
    for (i, event) in events.iter().enumerate() {
        let _ = writeln!(out, "  {:<34}: {event}", if i == 0 { "Events" } else { "" });
    }
    let _ = writeln!(
        out,
        "  {:<34}: {}",
        "Cachelines sort on",
        options.display.title()
    );
    let _ = writeln!(
        out,
        "  {:<34}: {}",
        "Cacheline data grouping",
        options.coalesce.grouping()
    );
}
