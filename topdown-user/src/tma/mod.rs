//! TopDown on this machine: the models themselves (formulas, node tree, thresholds, the
//! bottleneck) are the `topdown-tma` crate, pure and re-exported here; this room binds them to
//! what the machine counts. [`plan`] says which counters a model needs, [`choice`] which set a
//! run counts on this machine; [`view`] computes TopDown over a set's values.

pub mod choice;
pub mod plan;
pub mod view;

pub use topdown_tma::*;

#[cfg(test)]
mod tests {
    use super::Model;

    /// What `pmu` names, `tma` has: every model its CPU tables select is built, and every
    /// model has its CPU's event table.
    #[test]
    fn every_model_the_cpu_tables_select_is_built_with_its_event_table() {
        let mut named = 0;
        for name in crate::pmu::topdown_model::model_names() {
            assert!(Model::named(name).is_ok(), "{name}");
            named += 1;
        }
        assert!(named > 20, "the tables name {named} models");
        for model in Model::all() {
            assert!(
                crate::pmu::event_table::EventTable::for_model(model.name).is_some(),
                "{}",
                model.name
            );
        }
    }
}
