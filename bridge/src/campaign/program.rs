//! What a campaign knows of the program it fuzzes, read once when a session starts:
//! its functions and the lines they span, what each function's code counts for when
//! picking, its branches (for roadblocks) and who calls whom. The build does not
//! change during a campaign, so none of this does.

use super::changed::{function_lines, FunctionLines};
use super::Settings;
use crate::roadblocks::BranchTable;
use std::collections::HashMap;
use trestle_exec::binary::Binary;

/// The program as the campaign reads it.
pub(super) struct Program {
    /// Its functions and build.
    pub(super) binary: Binary,
    /// The lines each of its functions spans.
    pub(super) lines: FunctionLines,
    /// How much each function's code counts when picking ([`super::pick::code_weights`]).
    pub(super) weights: HashMap<u64, f64>,
    /// Its branches, for roadblocks (empty for a build without the table, and in a
    /// `--system-only` campaign, which has no roadblocks).
    pub(super) branches: BranchTable,
    /// The source function of each branch (by function id; inlined code counts as the
    /// function whose lines hold it).
    pub(super) branch_functions: Vec<u64>,
    /// The direct callers of each function.
    pub(super) callers: HashMap<u64, Vec<u64>>,
}

impl Program {
    /// What the campaign of `settings` needs to know of `binary`.
    pub(super) fn new(binary: Binary, settings: &Settings) -> Program {
        let lines = function_lines(&binary);
        let branches = if settings.system_only {
            BranchTable::default()
        } else {
            BranchTable::load(&settings.program).unwrap_or_else(|e| {
                log::info!("trestle run: no roadblocks, units are picked by the code in their reach: {e:#}");
                BranchTable::default()
            })
        };
        let branch_functions = source_functions(&branches, &lines);
        let mut callers: HashMap<u64, Vec<u64>> = HashMap::new();
        for f in binary.functions.values() {
            for c in &f.callees {
                callers.entry(*c).or_default().push(f.id);
            }
        }
        Program {
            weights: super::pick::code_weights(&binary),
            binary,
            lines,
            branches,
            branch_functions,
            callers,
        }
    }
}

/// The source function of each branch: the function whose lines hold it (code inlined
/// elsewhere counts as its own function's), else the function its optimised code is in.
fn source_functions(table: &BranchTable, lines: &FunctionLines) -> Vec<u64> {
    let mut by_file: HashMap<&str, Vec<(u32, u32, u64)>> = HashMap::new();
    for (id, (file, start, end)) in lines {
        by_file
            .entry(file.as_str())
            .or_default()
            .push((*start, *end, *id));
    }
    table
        .branches
        .iter()
        .map(|b| {
            b.file
                .as_deref()
                .and_then(|f| by_file.get(f))
                .and_then(|spans| {
                    spans
                        .iter()
                        .find(|(s, e, _)| (*s..*e).contains(&b.line))
                        .map(|(_, _, id)| *id)
                })
                .unwrap_or(b.function)
        })
        .collect()
}
