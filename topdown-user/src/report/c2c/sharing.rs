//! The "Shared Cache Line Fixes" section (`c2c report --sharing`): the sharing model's labels,
//! words and fixes (`crate::c2c::sharing`) as text.

use crate::{c2c::sharing::LineFix, symbols::data_names::NameSource};

/// The "Shared Cache Line Fixes" section (`--sharing`, after perf's tables): per shown line,
/// its label, each word with stores or contended loads (what it is, who stored and loaded it),
/// and the fix suggested. `addresses` are the shown lines' addresses, in the table's order.
pub fn render(addresses: &[u64], fixes: &[LineFix]) -> String {
    let mut out = String::from(
        "\n=================================================\n            Shared Cache Line \
         Fixes\n=================================================\n#\n",
    );
    for (index, (address, fix)) in addresses.iter().zip(fixes).enumerate() {
        out.push_str(&format!(
            "  {index:>5}  {:>18}  {}\n",
            format!("{address:#x}"),
            fix.sharing.sharing.name()
        ));
        for word in &fix.words {
            let name = word.name.as_ref().map_or_else(
                || {
                    "(heap, stack or anonymous memory, and no DWARF variable of the code holds \
                     the pointer)"
                        .into()
                },
                |n| match &n.source {
                    NameSource::Dwarf => n.name.clone(),
                    NameSource::Symbols => format!("{} (no DWARF: symbol only)", n.name),
                    NameSource::OperandType { pointer, function } => {
                        format!("{} (through {pointer} in {function})", n.name)
                    }
                },
            );
            let tids = |t: &[u32]| t.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            out.push_str(&format!(
                "         {:>6}  {name}  stored by [{}]  contended loads by [{}]\n",
                format!("{:#x}", word.offset),
                tids(&word.stored_by),
                tids(&word.loaded_by)
            ));
        }
        if let Some(advice) = &fix.fix {
            out.push_str(&format!("         fix: {advice}\n"));
        }
    }
    out
}
