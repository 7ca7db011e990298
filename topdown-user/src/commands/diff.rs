//! `topdown-bpf diff BEFORE AFTER`: two runs (recordings, or time ranges of a store) read
//! back, each turned into per-window samples by row and field ([`diff_rows`]), compared
//! ([`model::diff`]) and printed ([`report::diff`]).

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::{
    attrib::groups::GroupBy,
    cli::{DiffArgs, StoreRangeArgs},
    commands::report::read_input,
    model::{
        self,
        diff::Test,
        diff_rows::{self, DiffBy},
    },
    recording::reader::{Recording, default_memory_budget},
    report::{
        self,
        diff::{DiffMeta, json, table},
    },
};

/// Compares the two runs `args` names.
pub fn run(args: &DiffArgs) -> Result<()> {
    let budget = args
        .max_memory
        .map_or_else(default_memory_budget, |mib| mib << 20);
    let by = if args.per_container {
        DiffBy::Group(GroupBy::Container)
    } else if args.per_cgroup {
        DiffBy::Group(GroupBy::Cgroup)
    } else if args.per_process {
        DiffBy::Process
    } else {
        DiffBy::Thread
    };
    let mut before = read_side(&args.before, budget)?;
    let mut after = read_side(&args.after, budget)?;
    let sample = |run: &mut Recording| {
        diff_rows::samples(
            &run.windows,
            &mut run.names,
            &run.set,
            run.topdown.as_ref(),
            by,
        )
    };
    let (a, b) = (sample(&mut before), sample(&mut after));
    let test = Test {
        alpha: args.alpha,
        min_change: args.min_change / 100.0,
    };
    let diff = model::diff::diff(&a, &b, test);
    let meta = DiffMeta {
        rows: match by {
            DiffBy::Thread => "thread",
            DiffBy::Process => "process",
            DiffBy::Group(GroupBy::Cgroup) => "cgroup",
            DiffBy::Group(GroupBy::Container) => "container",
        },
        before: (args.before.clone(), before.windows.len()),
        after: (args.after.clone(), after.windows.len()),
    };
    let mut out = report::stdout();
    if args.json {
        json(&mut out, &diff, &meta)
    } else {
        table(&mut out, &diff, &meta, args.top)
    }
}

/// One side: a recording, or `DIR@FROM..TO` (a store's range; an end may be left out).
fn read_side(text: &str, budget: u64) -> Result<Recording> {
    let (input, range) = side(text)?;
    let recording = read_input(&input, &range, budget)?;
    if recording.windows.len() < 2 {
        bail!(
            "{text} holds {} window(s): a diff compares the windows of each side, and needs \
             at least two (record with a shorter -I, or give a longer range)",
            recording.windows.len()
        );
    }
    Ok(recording)
}

/// What `text` names: a recording's path, or a store's folder and range.
fn side(text: &str) -> Result<(PathBuf, StoreRangeArgs)> {
    let plain = StoreRangeArgs {
        store: None,
        from: None,
        to: None,
    };
    if Path::new(text).exists() && !Path::new(text).is_dir() {
        return Ok((PathBuf::from(text), plain));
    }
    let Some((dir, range)) = text.rsplit_once('@') else {
        if Path::new(text).is_dir() {
            return Ok((
                PathBuf::new(),
                StoreRangeArgs {
                    store: Some(text.into()),
                    ..plain
                },
            ));
        }
        return Ok((PathBuf::from(text), plain));
    };
    let Some((from, to)) = range.split_once("..") else {
        bail!("{text}: a store's range is DIR@FROM..TO (e.g. {dir}@-2h..-1h, {dir}@03:05..)");
    };
    let end = |t: &str| (!t.trim().is_empty()).then(|| t.trim().to_owned());
    Ok((
        PathBuf::new(),
        StoreRangeArgs {
            store: Some(dir.into()),
            from: end(from),
            to: end(to),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_is_a_recording_or_a_store_range() {
        let (path, range) = side("run.rec").unwrap();
        assert_eq!((path, range.store), (PathBuf::from("run.rec"), None));
        let (_, range) = side("/var/store@-2h..-1h").unwrap();
        assert_eq!(range.store, Some(PathBuf::from("/var/store")));
        assert_eq!(
            (range.from.as_deref(), range.to.as_deref()),
            (Some("-2h"), Some("-1h"))
        );
        let (_, range) = side("/var/store@03:05..").unwrap();
        assert_eq!((range.from.as_deref(), range.to), (Some("03:05"), None));
        assert!(side("/var/store@03:05").is_err());
    }
}
