//! Writing a unit's parameter values back into its system test, at the places the
//! mapping found them: the lifted system tests (variants) for one unit finding.

use super::Substitution;
use std::collections::BTreeMap;
use trestle_abi::fuzz::{original_value, ParamValue};
use trestle_abi::unit::{InputRef, Origin, ParamKind, SystemTest, Unit};

/// The text a value takes in the system input: bytes as they are, integers in
/// decimal, cut to the width the function sees.
fn value_text(kind: ParamKind, v: &ParamValue) -> Vec<u8> {
    match (v, kind) {
        (ParamValue::Bytes(b), _) => b.clone(),
        (ParamValue::Int(i), ParamKind::Int { bits }) if bits < 64 => {
            let shift = 64 - bits as u32;
            ((i << shift) >> shift).to_string().into_bytes()
        }
        (ParamValue::Int(i), _) => i.to_string().into_bytes(),
    }
}

/// The lifted system tests for `values`: every changed parameter at all its places,
/// then each changed parameter alone, then, for a parameter found at several places,
/// each place alone. At most 16.
pub fn lift_variants(unit: &Unit, values: &[ParamValue]) -> Vec<(SystemTest, Vec<Substitution>)> {
    let changed: Vec<(usize, Vec<u8>)> = unit
        .params
        .iter()
        .zip(values)
        .enumerate()
        .filter(|(_, (p, v))| **v != original_value(p))
        .map(|(i, (p, v))| (i, value_text(p.kind, v)))
        .filter(|(i, text)| *text != unit.params[*i].original)
        .collect();
    if changed.is_empty() {
        return Vec::new();
    }
    let all: Vec<(usize, Origin, Vec<u8>)> = changed
        .iter()
        .flat_map(|(i, text)| {
            unit.params[*i]
                .origins
                .iter()
                .map(move |o| (*i, o.clone(), text.clone()))
        })
        .collect();
    let mut plans = vec![all.clone()];
    // A unit crash often needs one of its changed values, not all: a flag the fuzzer
    // changed too may be mapped to a place it never came from (sed's case-conversion
    // type to the "1" of the script's address `1,2s`), and writing it there turns the
    // test into another one.
    if changed.len() > 1 {
        for (i, _) in &changed {
            plans.push(all.iter().filter(|(j, _, _)| j == i).cloned().collect());
        }
    }
    for (i, _) in &changed {
        let origins = &unit.params[*i].origins;
        if origins.len() > 1 {
            for keep in origins {
                plans.push(
                    all.iter()
                        .filter(|(j, o, _)| j != i || o == keep)
                        .cloned()
                        .collect(),
                );
            }
        }
    }
    // A value of bytes the recorded text never had (a key of 0xff bytes, say) often
    // crashed the unit for another property (its length) that text keeps: try it
    // with those bytes made letters too.
    let printable = |b: &u8| b.is_ascii_graphic() || *b == b' ' || *b == b'\n' || *b == b'\t';
    let texty: Vec<(usize, Origin, Vec<u8>)> = all
        .iter()
        .map(|(i, o, text)| {
            let recorded_text = unit.params[*i].original.iter().all(printable);
            let t = if recorded_text {
                text.iter()
                    .map(|b| if printable(b) { *b } else { b'a' })
                    .collect()
            } else {
                text.clone()
            };
            (*i, o.clone(), t)
        })
        .collect();
    if texty != all {
        plans.insert(1, texty);
    }
    let mut out: Vec<(SystemTest, Vec<Substitution>)> = Vec::new();
    for plan in plans {
        let (t, subs) = apply(&unit.system_test, &plan);
        if !out.iter().any(|(u, _)| *u == t) {
            out.push((t, subs));
        }
        if out.len() >= 16 {
            break;
        }
    }
    out
}

/// One planned write: the parameter's index, where its value came from in the
/// system input, and the new bytes.
type PlannedWrite = (usize, Origin, Vec<u8>);

/// Write each value over its origin; later (higher) offsets first so earlier ones stay
/// valid; an origin overlapping one already written is skipped.
fn apply(test: &SystemTest, plan: &[PlannedWrite]) -> (SystemTest, Vec<Substitution>) {
    let mut by_input: BTreeMap<InputRef, Vec<&PlannedWrite>> = BTreeMap::new();
    for s in plan {
        by_input.entry(s.1.input.clone()).or_default().push(s);
    }
    let mut t = test.clone();
    let mut subs = Vec::new();
    for (input, mut list) in by_input {
        list.sort_by(|a, b| b.1.offset.cmp(&a.1.offset).then(b.1.len.cmp(&a.1.len)));
        let mut bytes: Vec<u8> = match &input {
            InputRef::Arg(i) => t
                .args
                .get(*i as usize)
                .map(|a| a.as_bytes().to_vec())
                .unwrap_or_default(),
            InputRef::Stdin => t.stdin.clone().unwrap_or_default(),
            InputRef::File(n) => t.files.get(n).cloned().unwrap_or_default(),
        };
        let mut floor = u64::MAX;
        for (param, o, text) in list {
            let end = o.offset + o.len;
            if end > bytes.len() as u64 || end > floor {
                continue;
            }
            let old = bytes[o.offset as usize..end as usize].to_vec();
            bytes.splice(o.offset as usize..end as usize, text.iter().copied());
            floor = o.offset;
            subs.push(Substitution {
                param: *param,
                input: input.to_string(),
                offset: o.offset,
                old: String::from_utf8_lossy(&old).into_owned(),
                new: String::from_utf8_lossy(text).into_owned(),
            });
        }
        match &input {
            InputRef::Arg(i) => {
                // An argument is a C string: it ends at the first NUL.
                let cut = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                if let Some(a) = t.args.get_mut(*i as usize) {
                    *a = String::from_utf8_lossy(&bytes[..cut]).into_owned();
                }
            }
            InputRef::Stdin => t.stdin = Some(bytes),
            InputRef::File(n) => {
                t.files.insert(n.clone(), bytes);
            }
        }
    }
    (t, subs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trestle_abi::unit::{Param, ParamSite};

    fn unit_with(params: Vec<Param>, test: SystemTest) -> Unit {
        Unit {
            magic: trestle_abi::unit::UNIT_MAGIC,
            version: trestle_abi::unit::UNIT_VERSION,
            binary_id: 1,
            function: "f".into(),
            context: trestle_abi::Context {
                fn_id: 1,
                args: vec![],
                graph: Default::default(),
                locale: vec![],
                stdio_modes: vec![],
                fds: vec![],
                streams: vec![],
            },
            expected: None,
            provenance: trestle_abi::unit::Provenance {
                program: "/p".into(),
                test: "seed".into(),
                trace: "t".into(),
                pid: 1,
                seq: 0,
                call_index: 0,
            },
            system_test: test,
            params,
        }
    }

    fn origin(input: InputRef, offset: u64, len: u64) -> Origin {
        Origin { input, offset, len }
    }

    #[test]
    fn a_stream_value_replaces_the_unread_rest_and_keeps_the_consumed_prefix() {
        let input = b"set ab 5\nget ab\nlist\n".to_vec();
        let test = SystemTest {
            stdin: Some(input.clone()),
            ..Default::default()
        };
        let number = Param {
            site: ParamSite::Memory {
                extent: 0,
                offset: 7,
                len: 1,
            },
            kind: ParamKind::Decimal {
                nul: true,
                resize: trestle_abi::unit::Resize::Token,
            },
            original: b"5".to_vec(),
            origins: vec![origin(InputRef::Stdin, 7, 1)],
            companions: vec![],
        };
        let stream = Param {
            site: ParamSite::Stream {
                fd: 0,
                file: None,
                buffered: true,
            },
            kind: ParamKind::Stream { cut: 0 },
            original: input[9..].to_vec(),
            origins: vec![origin(InputRef::Stdin, 9, 12)],
            companions: vec![],
        };
        let unit = unit_with(vec![number, stream], test);
        let v = lift_variants(
            &unit,
            &[
                ParamValue::Int(90210),
                ParamValue::Bytes(b"swap ab zz\n".to_vec()),
            ],
        );
        // The number is written in decimal, the consumed prefix is kept byte for
        // byte, and the new rest follows it.
        assert_eq!(
            v[0].0.stdin.as_deref().unwrap(),
            b"set ab 90210\nswap ab zz\n"
        );
        let only_stream = lift_variants(
            &unit,
            &[ParamValue::Int(5), ParamValue::Bytes(b"".to_vec())],
        );
        assert_eq!(only_stream[0].0.stdin.as_deref().unwrap(), &input[..9]);
    }

    #[test]
    fn values_go_back_where_they_came_from() {
        let test = SystemTest {
            args: vec!["set".into(), "7".into(), "12".into()],
            stdin: Some(b"login guest pw\nlogin guest x\n".to_vec()),
            ..Default::default()
        };
        let int = Param {
            site: ParamSite::Arg(1),
            kind: ParamKind::Int { bits: 64 },
            original: b"12".to_vec(),
            origins: vec![origin(InputRef::Arg(2), 0, 2)],
            companions: vec![],
        };
        let user = Param {
            site: ParamSite::Arg(0),
            kind: ParamKind::Bytes {
                nul: true,
                resize: trestle_abi::unit::Resize::Extent,
            },
            original: b"guest".to_vec(),
            origins: vec![
                origin(InputRef::Stdin, 6, 5),
                origin(InputRef::Stdin, 21, 5),
            ],
            companions: vec![],
        };
        let unit = unit_with(vec![int, user], test);
        let v = lift_variants(
            &unit,
            &[
                ParamValue::Int(42342531),
                ParamValue::Bytes(b"admin".to_vec()),
            ],
        );
        // All places; each changed value alone; each place of the ambiguous user
        // name alone.
        assert_eq!(v.len(), 5);
        assert_eq!(v[0].0.args, vec!["set", "7", "42342531"]);
        assert_eq!(
            v[0].0.stdin.as_deref().unwrap(),
            b"login admin pw\nlogin admin x\n"
        );
        assert_eq!(
            (v[1].0.args[2].as_str(), v[1].0.stdin.as_deref().unwrap()),
            ("42342531", &b"login guest pw\nlogin guest x\n"[..])
        );
        assert_eq!(
            (v[2].0.args[2].as_str(), v[2].0.stdin.as_deref().unwrap()),
            ("12", &b"login admin pw\nlogin admin x\n"[..])
        );
        assert_eq!(
            v[3].0.stdin.as_deref().unwrap(),
            b"login admin pw\nlogin guest x\n"
        );
        assert_eq!(
            v[4].0.stdin.as_deref().unwrap(),
            b"login guest pw\nlogin admin x\n"
        );
        assert!(v[3..].iter().all(|(t, _)| t.args[2] == "42342531"));
        // Unchanged values lift to nothing.
        assert!(lift_variants(
            &unit,
            &[ParamValue::Int(12), ParamValue::Bytes(b"guest".to_vec())]
        )
        .is_empty());
    }

    #[test]
    fn integers_are_written_as_the_function_sees_them() {
        let p = Param {
            site: ParamSite::Arg(0),
            kind: ParamKind::Int { bits: 32 },
            original: b"5".to_vec(),
            origins: vec![origin(InputRef::Arg(0), 0, 1)],
            companions: vec![],
        };
        let unit = unit_with(
            vec![p],
            SystemTest {
                args: vec!["5".into()],
                ..Default::default()
            },
        );
        let v = lift_variants(&unit, &[ParamValue::Int(0xffff_ffff)]);
        assert_eq!(v[0].0.args, vec!["-1"]);
    }
}
