//! The dictionary the mutators insert from: what the program itself looks for (its
//! short string literals, the constants it compares against).

use std::collections::BTreeSet;
use trestle_exec::binary::Binary;

/// A dictionary for system-level fuzzing of `binary`: its short string literals, and
/// the constants it compares against in decimal (and, for printable ASCII codes, as
/// the character).
pub fn dictionary(binary: &Binary) -> Vec<Vec<u8>> {
    let mut words: BTreeSet<Vec<u8>> = binary
        .strings
        .values()
        .filter(|s| !s.is_empty() && s.len() <= 64)
        .cloned()
        .collect();
    let mut ints = BTreeSet::new();
    for f in binary.functions.values() {
        ints.extend(f.cmp_constants.iter().copied());
    }
    for i in ints {
        words.insert(i.to_string().into_bytes());
        if (0x21..0x7f).contains(&i) {
            words.insert(vec![i as u8]);
        }
    }
    words.into_iter().take(4000).collect()
}
