//! Roadblocks: where the system fuzzer is stuck. A branch of the program's own code it
//! reached with one direction taken and another never, read from its edge map and the
//! branch table `trestle-cc` writes into the binary (`trestle_abi::branches`), ranked by
//! the code that stands behind the missing direction.

use anyhow::{bail, Context as _, Result};
use object::{Object as _, ObjectSection as _};
use std::path::Path;
use trestle_abi::branches::{decode_branches_section, SECTION_BRANCHES};

/// One branch, with its guards as edge numbers of the program's map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch {
    /// Symbol id of the function whose optimised code holds it.
    pub function: u64,
    /// Source file, when known.
    pub file: Option<String>,
    /// Source line (0 when unknown).
    pub line: u32,
    /// The CmpLog id its comparison logs under.
    pub cmp: Option<u32>,
    /// Its directions.
    pub directions: Vec<Direction>,
}

/// One direction of a [`Branch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Direction {
    /// Edges any of which hit means the direction was taken.
    pub edges: Vec<u32>,
    /// Guarded blocks only reachable through it.
    pub behind: u32,
    /// The case value of a switch's case.
    pub case: Option<i64>,
    /// It only leads to the program ending itself (an error exit).
    pub ends: bool,
}

impl Direction {
    /// Whether `covered` (by edge number) shows the direction taken.
    pub fn taken(&self, covered: &[bool]) -> bool {
        self.edges
            .iter()
            .any(|&e| covered.get(e as usize).copied().unwrap_or(false))
    }
}

/// Every branch of a program.
#[derive(Debug, Clone, Default)]
pub struct BranchTable {
    /// The branches, in the binary's order.
    pub branches: Vec<Branch>,
}

impl BranchTable {
    /// The branches at `loc` (`FILE:LINE`, FILE a file name or a suffix of the
    /// recorded path).
    pub fn branches_at(&self, loc: &str) -> Result<Vec<&Branch>> {
        let Some((file, line)) = loc.rsplit_once(':') else {
            bail!("{loc:?} is not FILE:LINE")
        };
        let line: u32 = line
            .parse()
            .with_context(|| format!("{loc:?}: {line:?} is not a line number"))?;
        let file = file.trim_start_matches("./");
        Ok(self
            .branches
            .iter()
            .filter(|b| {
                b.line == line
                    && b.file
                        .as_deref()
                        .is_some_and(|f| f == file || f.ends_with(&format!("/{file}")))
            })
            .collect())
    }

    /// For an error about `loc` (`FILE:LINE`) that holds no branch: the lines of FILE
    /// that do, or that the table knows no such file.
    pub fn lines_of(&self, loc: &str) -> String {
        let file = loc
            .rsplit_once(':')
            .map_or(loc, |(f, _)| f)
            .trim_start_matches("./");
        let mut lines: Vec<u32> = self
            .branches
            .iter()
            .filter(|b| {
                b.file
                    .as_deref()
                    .is_some_and(|f| f == file || f.ends_with(&format!("/{file}")))
            })
            .map(|b| b.line)
            .collect();
        lines.sort_unstable();
        lines.dedup();
        match lines.len() {
            0 => format!("no branch of the program is in a file {file}"),
            n if n > 40 => format!(
                "{file} has branches on {n} lines, from {} to {}",
                lines[0],
                lines[n - 1]
            ),
            _ => format!(
                "{file} has branches on lines {}",
                lines
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The edges of every direction of the branches at `loc` (`FILE:LINE`, FILE a
    /// file name or a suffix of the recorded path).
    pub fn edges_at(&self, loc: &str) -> Result<Vec<u32>> {
        let mut edges: Vec<u32> = self
            .branches_at(loc)?
            .into_iter()
            .flat_map(|b| b.directions.iter().flat_map(|d| d.edges.iter().copied()))
            .collect();
        edges.sort_unstable();
        edges.dedup();
        Ok(edges)
    }

    /// Read the table of `program`: the branches from its section, their edge numbers
    /// from one run of it that stops before `main` ([`ENV_BRANCH_DUMP`]). A program
    /// built without the table (by an older trestle-cc) has none: an empty table.
    pub fn load(program: &Path) -> Result<BranchTable> {
        let data = std::fs::read(program)
            .with_context(|| format!("cannot read program {}", program.display()))?;
        let file = object::File::parse(&*data).with_context(|| {
            format!(
                "{} is not an executable trestle can read",
                program.display()
            )
        })?;
        let Some(section) = file.section_by_name(SECTION_BRANCHES) else {
            return Ok(BranchTable::default());
        };
        let bytes = section.data().with_context(|| {
            format!(
                "cannot read the {SECTION_BRANCHES} section of {}",
                program.display()
            )
        })?;
        let modules =
            decode_branches_section(bytes).with_context(|| format!("in {}", program.display()))?;
        if modules.is_empty() {
            return Ok(BranchTable::default());
        }
        // It runs in a directory of its own: a relative path would not find it there.
        let program = &std::fs::canonicalize(program)
            .with_context(|| format!("cannot resolve {}", program.display()))?;
        let numbers = trestle_exec::binary::guard_numbers(program)?;
        let mut branches = Vec::new();
        for m in modules {
            let edge = |slot: &u32| numbers.get(&(m.key, u64::from(*slot))).copied();
            for b in m.branches {
                let directions = b
                    .directions
                    .iter()
                    .map(|d| Direction {
                        edges: d.guards.iter().filter_map(edge).collect(),
                        behind: d.behind,
                        case: d.case,
                        ends: d.ends,
                    })
                    .collect();
                let file = b.file.and_then(|i| m.files.get(i as usize).cloned());
                branches.push(Branch {
                    function: b.function,
                    file,
                    line: b.line,
                    cmp: b.cmp,
                    directions,
                });
            }
        }
        Ok(BranchTable { branches })
    }
}

/// A branch the system fuzzer reached with a direction it never took.
#[derive(Debug, Clone, PartialEq)]
pub struct Roadblock {
    /// Index of the branch in its [`BranchTable`].
    pub branch: usize,
    /// Index of the direction never taken (the one with the most code behind it).
    pub missing: usize,
    /// How much it promises: the guarded code behind the missing direction, weighted
    /// by whose code it is.
    pub score: f64,
}

impl Roadblock {
    /// A stable key for the roadblock: where it is and which direction.
    pub fn key(&self, table: &BranchTable) -> String {
        let b = &table.branches[self.branch];
        format!(
            "{}:{}#{}.{}",
            b.file.as_deref().unwrap_or("?"),
            b.line,
            self.branch,
            self.missing
        )
    }
}

/// The roadblocks of `table` under the coverage `covered` (by edge number), best
/// first. `weight` says how much a branch's code counts (0 leaves it out: code that
/// is not the program's own, say).
pub fn roadblocks(
    table: &BranchTable,
    covered: &[bool],
    weight: impl Fn(&Branch) -> f64,
) -> Vec<Roadblock> {
    let mut out = Vec::new();
    for (i, b) in table.branches.iter().enumerate() {
        if !b.directions.iter().any(|d| d.taken(covered)) {
            continue; // not reached (or not seen reached): no roadblock yet
        }
        let missing = b
            .directions
            .iter()
            .enumerate()
            // A direction that only ends the program (an error message and exit) is
            // nothing to fuzz towards: on sed, two of the eight roadblocks a 2-hour
            // campaign attempted were `bad_prog` and `panic`.
            .filter(|(_, d)| !d.edges.is_empty() && !d.taken(covered) && !d.ends)
            .max_by_key(|(_, d)| d.behind);
        let Some((k, d)) = missing else { continue };
        let w = weight(b);
        if w <= 0.0 {
            continue;
        }
        out.push(Roadblock {
            branch: i,
            missing: k,
            score: w * (1.0 + f64::from(d.behind)),
        });
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.branch.cmp(&b.branch)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn branch(line: u32, dirs: &[(&[u32], u32)]) -> Branch {
        Branch {
            function: 1,
            file: Some("/p/src/a.c".into()),
            line,
            cmp: None,
            directions: dirs
                .iter()
                .map(|(e, behind)| Direction {
                    edges: e.to_vec(),
                    behind: *behind,
                    case: None,
                    ends: false,
                })
                .collect(),
        }
    }

    #[test]
    fn a_roadblock_is_a_reached_branch_with_a_direction_never_taken() {
        let table = BranchTable {
            branches: vec![
                branch(10, &[(&[1], 1), (&[2], 5)]), // true taken, false (5 behind) not: a roadblock
                branch(20, &[(&[3], 1), (&[4], 1)]), // both taken
                branch(30, &[(&[5], 9), (&[6], 9)]), // never reached
                branch(40, &[(&[7], 1), (&[8], 40)]), // the biggest one
                branch(50, &[(&[9], 1), (&[], 0)]),  // the missing side has no guard of its own
            ],
        };
        let mut covered = vec![false; 16];
        for e in [1, 3, 4, 7, 9] {
            covered[e] = true;
        }
        let r = roadblocks(&table, &covered, |_| 1.0);
        assert_eq!(
            r.iter().map(|r| (r.branch, r.missing)).collect::<Vec<_>>(),
            vec![(3, 1), (0, 1)]
        );
        assert_eq!(r[0].score, 41.0);
        assert!(
            roadblocks(&table, &covered, |b| if b.line == 40 { 0.0 } else { 1.0 })
                .iter()
                .all(|r| r.branch != 3)
        );
        covered[8] = true;
        assert_eq!(
            roadblocks(&table, &covered, |_| 1.0).len(),
            1,
            "a direction once taken is no roadblock"
        );
        // One that only ends the program is none either.
        let mut exits = table.clone();
        exits.branches[0].directions[1].ends = true;
        assert!(roadblocks(&exits, &covered, |_| 1.0).is_empty());
    }
}
