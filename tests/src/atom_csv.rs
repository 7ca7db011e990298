//! Intel's `Atom_TMA.csv` and `E-core_TMA_Metrics.csv` read for the tests, independently of the
//! generator: a model column's formulas (an empty cell inherits from the nearest filled cell to
//! its right, as the file's README says), the `#` names of its rows (`#Pipeline_Width`, and the
//! E-core file's `#SLOTS` and `#CLKS`) substituted, `>0.20` thresholds as `NAME > 0.20`, and
//! `>0.15 & P` as that and the parent's own threshold.

use std::collections::HashMap;

/// `name -> (formula, threshold)` for the CSV files in `files` (paths relative to
/// `data/linux-pmu-events`), in model column `column`; empty when there are none.
pub fn metrics(files: &[&str], column: Option<&str>) -> HashMap<String, (String, Option<String>)> {
    let mut out = HashMap::new();
    for file in files.iter().filter(|f| f.ends_with(".csv")) {
        let path = crate::pmu_events::data_dir()
            .join("linux-pmu-events")
            .join(file);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_path(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let rows: Vec<Vec<String>> = reader
            .records()
            .map(|r| {
                r.unwrap()
                    .iter()
                    .map(|f| f.trim_start_matches('\u{feff}').to_owned())
                    .collect()
            })
            .collect();
        let header = &rows[2];
        let at = |name: &str| header.iter().position(|h| h == name).unwrap();
        let levels = header.iter().filter(|h| h.starts_with("Level")).count();
        let (first_model, last_model) = (at("Level1") + levels, at("Locate-with"));
        let wanted = at(column.expect("a model column"));
        let formula = |row: &[String]| {
            (wanted..last_model)
                .filter_map(|i| row.get(i).map(|c| c.trim()).filter(|c| !c.is_empty()))
                .next()
                .map(str::to_owned)
        };
        assert!(first_model <= wanted);
        // The `#NAME` rows, substituted until none is left.
        let hashed: Vec<(String, String)> = rows[3..]
            .iter()
            .filter(|r| r[1].starts_with('#'))
            .filter_map(|r| Some((r[1].clone(), formula(r)?)))
            .collect();
        let substitute = |expr: &str| {
            let mut expr = expr.to_owned();
            for _ in 0..8 {
                // Longest names first: `#CLKS_P` before `#CLKS`.
                let mut names: Vec<&(String, String)> = hashed.iter().collect();
                names.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
                for (name, value) in names {
                    expr = expr.replace(name.as_str(), &format!("( {value} )"));
                }
            }
            expr
        };
        let mut parent: HashMap<usize, String> = HashMap::new();
        let mut parents: HashMap<String, String> = HashMap::new();
        let mut thresholds: Vec<(String, String)> = Vec::new();
        for row in &rows[3..] {
            let Some(level) = (1..=levels).find(|l| !row[*l].is_empty()) else {
                continue;
            };
            let name = row[level].clone();
            parent.insert(level, name.clone());
            if let Some(up) = level.checked_sub(1).and_then(|l| parent.get(&l)) {
                parents.insert(name.clone(), up.clone());
            }
            if name.starts_with('#') {
                continue;
            }
            let Some(expr) = formula(row).filter(|e| e != "#NA") else {
                continue;
            };
            if let Some(threshold) = row.get(at("Threshold")) {
                thresholds.push((name.clone(), threshold.trim().to_owned()));
            }
            out.insert(name.clone(), (substitute(&expr), None));
        }
        let own = |name: &str, threshold: &str| -> Option<String> {
            let rest = threshold.strip_prefix('>')?;
            let number = rest.split('&').next()?.trim();
            Some(format!("{name} > {number}"))
        };
        let by_name: HashMap<String, String> = thresholds.iter().cloned().collect();
        for (name, threshold) in &thresholds {
            let Some(mut rule) = own(name, threshold) else {
                continue;
            };
            if threshold.trim_end().ends_with("& P") {
                let up = parents.get(name).and_then(|p| Some((p, by_name.get(p)?)));
                if let Some(up) = up.and_then(|(p, t)| own(p, t)) {
                    rule = format!("({rule}) & ({up})");
                }
            }
            if let Some(entry) = out.get_mut(name) {
                entry.1 = Some(rule);
            }
        }
    }
    out
}
