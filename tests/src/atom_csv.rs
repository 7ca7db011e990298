//! Intel's `Atom_TMA.csv` read for the tests, independently of the generator: a model column's
//! formulas (an empty cell inherits from the nearest filled cell to its right, as the file's
//! README says), `#Pipeline_Width` substituted, `>0.20` thresholds as `NAME > 0.20`.

use std::{collections::HashMap, path::PathBuf};

/// `name -> (formula, threshold)` for the CSV files in `files` (paths relative to
/// `shared/data/linux-pmu-events`), in model column `column`; empty when there are none.
pub fn metrics(files: &[&str], column: Option<&str>) -> HashMap<String, (String, Option<String>)> {
    let mut out = HashMap::new();
    for file in files.iter().filter(|f| f.ends_with(".csv")) {
        let path = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/linux-pmu-events"
        ))
        .join(file);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_path(&path)
            .expect("../shared/data beside the repository");
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
        let (first_model, last_model) = (at("TNT"), at("Locate-with"));
        let wanted = at(column.expect("a model column"));
        let formula = |row: &[String]| {
            (wanted..last_model)
                .filter_map(|i| row.get(i).map(|c| c.trim()).filter(|c| !c.is_empty()))
                .next()
                .map(str::to_owned)
        };
        assert!(first_model <= wanted);
        let width = rows[3..]
            .iter()
            .find(|r| r[1] == "#Pipeline_Width")
            .and_then(|r| formula(r))
            .expect("#Pipeline_Width");
        for row in &rows[3..] {
            let Some(name) = row[1..5].iter().find(|c| !c.is_empty()) else {
                continue;
            };
            if name.starts_with('#') {
                continue;
            }
            let Some(expr) = formula(row) else { continue };
            let threshold = row
                .get(at("Threshold"))
                .and_then(|t| t.trim().strip_prefix('>'))
                .map(|t| format!("{name} > {t}"));
            out.insert(
                name.clone(),
                (expr.replace("#Pipeline_Width", &width), threshold),
            );
        }
    }
    out
}
