//! Every type × op reduction kernel against a plain per-element computation, and the exact
//! test data of `-c 1`.

use vl_coll::kernels::{
    count_wrong, divide, expected_value, expected_value_of, fill_input, input_value, load_value,
    reduce, store_value, DataType, RedOp,
};

fn bytes(t: DataType, vals: &[i64]) -> Vec<u8> {
    let mut b = vec![0u8; vals.len() * t.size()];
    for (v, c) in vals.iter().zip(b.chunks_exact_mut(t.size())) {
        store_value(t, *v, c);
    }
    b
}

fn vals(t: DataType, b: &[u8]) -> Vec<Option<i64>> {
    b.chunks_exact(t.size()).map(|c| load_value(t, c)).collect()
}

#[test]
fn every_type_and_op() {
    let a: Vec<i64> = vec![3, -2, 7, 0, 100, -50, 1, 9, 12];
    let b: Vec<i64> = vec![5, 4, -1, 0, 27, -60, 1, 9, -3];
    for t in DataType::ALL {
        for op in RedOp::ALL {
            // What the type holds of an exact result: wrapped integers, rounded narrow floats
            // (one rounding of the exact sum or product, as IEEE arithmetic gives); the
            // unsigned 64-bit type gets the magnitudes, so that its order is the integers'.
            let wrapped = |v: i64| match t {
                DataType::U64 => v.abs(),
                DataType::F16 | DataType::Bf16 => {
                    let mut b = [0u8; 2];
                    store_value(t, v, &mut b);
                    load_value(t, &b).expect("an integer stays an integer")
                }
                _ => expected_value_of(t, v),
            };
            let (a, b): (Vec<i64>, Vec<i64>) = (
                a.iter().map(|&v| wrapped(v)).collect(),
                b.iter().map(|&v| wrapped(v)).collect(),
            );
            let mut d = bytes(t, &a);
            reduce(t, op, &mut d, &bytes(t, &b)).unwrap();
            let want: Vec<Option<i64>> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| {
                    Some(wrapped(match op {
                        RedOp::Sum | RedOp::Avg => x.wrapping_add(y),
                        RedOp::Prod => x.wrapping_mul(y),
                        RedOp::Min => x.min(y),
                        RedOp::Max => x.max(y),
                    }))
                })
                .collect();
            assert_eq!(vals(t, &d), want, "{t}/{op}");
        }
    }
}

#[test]
fn floats_keep_fractions_and_specials() {
    let mut d: Vec<u8> = [1.5f32, -0.25]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    let s: Vec<u8> = [2.25f32, 0.5]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    reduce(DataType::F32, RedOp::Sum, &mut d, &s).unwrap();
    assert_eq!(f32::from_ne_bytes(d[..4].try_into().unwrap()), 3.75);
    assert_eq!(f32::from_ne_bytes(d[4..].try_into().unwrap()), 0.25);
    // A float that is not an integer never counts as a right answer.
    assert_eq!(load_value(DataType::F32, &0.5f32.to_ne_bytes()), None);
}

#[test]
fn integers_wrap_like_nccl() {
    let mut d = bytes(DataType::U8, &[250]);
    reduce(
        DataType::U8,
        RedOp::Sum,
        &mut d,
        &bytes(DataType::U8, &[10]),
    )
    .unwrap();
    assert_eq!(vals(DataType::U8, &d), [Some(4)]);
    let mut d = i32::MAX.to_ne_bytes().to_vec();
    reduce(DataType::I32, RedOp::Sum, &mut d, &1i32.to_ne_bytes()).unwrap();
    assert_eq!(i32::from_ne_bytes(d[..].try_into().unwrap()), i32::MIN);
}

#[test]
fn mismatched_lengths_are_refused() {
    let e = reduce(DataType::F64, RedOp::Sum, &mut [0u8; 16], &[0u8; 8]).unwrap_err();
    assert!(e.contains("16 bytes") && e.contains("8 bytes"), "{e}");
    let e = reduce(DataType::I32, RedOp::Max, &mut [0u8; 6], &[0u8; 6]).unwrap_err();
    assert!(e.contains("4-byte elements"), "{e}");
}

#[test]
fn checked_inputs_reduce_exactly_for_every_world_size() {
    for t in DataType::ALL {
        for op in RedOp::ALL {
            for n in 1..=9 {
                // Beyond the integers a narrow float holds, a checked sum is refused (the
                // tools' -c 1 says so): nothing to test there.
                let sums = matches!(op, RedOp::Sum | RedOp::Avg);
                if sums && t.exact_integers().is_some_and(|l| 32 * n as i64 > l) {
                    continue;
                }
                let count = 300;
                let mut acc = vec![0u8; count * t.size()];
                fill_input(t, op, 0, 0, &mut acc);
                for r in 1..n {
                    let mut b = vec![0u8; count * t.size()];
                    fill_input(t, op, r, 0, &mut b);
                    reduce(t, op, &mut acc, &b).unwrap();
                }
                if op == RedOp::Avg {
                    divide(t, &mut acc, n);
                }
                let wrong = count_wrong(t, 0, &acc, |i| expected_value(t, op, n, i));
                assert_eq!(wrong, 0, "{t}/{op} n={n}");
                // And the check can fail: one changed element is one wrong value.
                store_value(t, expected_value(t, op, n, 7) + 1, &mut acc[7 * t.size()..]);
                assert_eq!(count_wrong(t, 0, &acc, |i| expected_value(t, op, n, i)), 1);
            }
        }
    }
    // Products stay small: at most one rank contributes a 2 per element.
    assert!((0..1000).all(|i| (0..64)
        .filter(|&r| input_value(RedOp::Prod, r, i) == 2)
        .count()
        <= 1));
}

#[test]
fn names_parse_back() {
    for t in DataType::ALL {
        assert_eq!(t.name().parse::<DataType>().unwrap(), t);
    }
    for op in RedOp::ALL {
        assert_eq!(op.name().parse::<RedOp>().unwrap(), op);
    }
    assert!("quarter"
        .parse::<DataType>()
        .unwrap_err()
        .contains("unknown data type 'quarter'"));
    assert!("xor"
        .parse::<RedOp>()
        .unwrap_err()
        .contains("sum, prod, min, max or avg"));
}

#[test]
fn the_narrow_floats_round_once_and_hold_the_checked_sums() {
    // 255 + 2 = 257 is not a bfloat16 (8 bits of mantissa): it rounds to 256 (ties to even),
    // where half (11 bits) keeps it.
    for (t, want) in [(DataType::Bf16, 256), (DataType::F16, 257)] {
        let mut d = bytes(t, &[255]);
        reduce(t, RedOp::Sum, &mut d, &bytes(t, &[2])).unwrap();
        assert_eq!(vals(t, &d), [Some(want)], "{t}");
    }
    assert_eq!(DataType::Bf16.exact_integers(), Some(256));
    // The checked data stays within 32 per rank: 8 ranks' sums are exact in bfloat16.
    for i in 0..1000 {
        for r in 0..64 {
            assert!((0..=32).contains(&input_value(RedOp::Sum, r, i)));
        }
    }
}

#[test]
fn the_average_is_the_wrapped_sum_divided_and_truncated() {
    // 4 ranks' int8 sum of 100 wraps to -112 (as NCCL's integer sum does), then / 4 = -28.
    let mut d = bytes(DataType::I8, &[-112, 7, -7]);
    divide(DataType::I8, &mut d, 4);
    assert_eq!(vals(DataType::I8, &d), [Some(-28), Some(1), Some(-1)]);
    let mut d = bytes(DataType::U64, &[9]);
    divide(DataType::U64, &mut d, 300);
    assert_eq!(vals(DataType::U64, &d), [Some(0)]);
    let mut f: Vec<u8> = 3.0f32.to_ne_bytes().to_vec();
    divide(DataType::F32, &mut f, 4);
    assert_eq!(f32::from_ne_bytes(f[..].try_into().unwrap()), 0.75);
    // The checked data's average is exact: every rank gives the element's one value.
    for t in DataType::ALL {
        for n in [1, 3, 8] {
            for i in 0..50 {
                let sum: Vec<u8> = (0..n)
                    .map(|r| bytes(t, &[input_value(RedOp::Avg, r, i)]))
                    .reduce(|mut a, b| {
                        reduce(t, RedOp::Avg, &mut a, &b).unwrap();
                        a
                    })
                    .unwrap();
                let mut avg = sum;
                divide(t, &mut avg, n);
                assert_eq!(
                    vals(t, &avg),
                    [Some(expected_value(t, RedOp::Avg, n, i))],
                    "{t} n={n} element {i}"
                );
            }
        }
    }
}

/// Half precision goes a block at a time through f32 (the CPU's conversions): over several
/// blocks and a partial one, with values that round, the same bits as element by element
/// through the type's own arithmetic, for every operator.
#[test]
fn half_in_blocks_is_bit_for_bit_the_element_arithmetic() {
    use half::f16;
    let n = 1500; // two whole blocks of 512 and a partial one
    let x: Vec<f16> = (0..n)
        .map(|i| f16::from_f32((i as f32 * 0.37).sin() * 300.0))
        .collect();
    let y: Vec<f16> = (0..n)
        .map(|i| f16::from_f32((i as f32 * 1.13).cos() * 7.5))
        .collect();
    let as_bytes = |v: &[f16]| -> Vec<u8> { v.iter().flat_map(|h| h.to_ne_bytes()).collect() };
    for op in RedOp::ALL {
        let mut d = as_bytes(&x);
        reduce(DataType::F16, op, &mut d, &as_bytes(&y)).unwrap();
        let want: Vec<f16> = x
            .iter()
            .zip(&y)
            .map(|(&a, &b)| match op {
                RedOp::Sum | RedOp::Avg => a + b,
                RedOp::Prod => a * b,
                RedOp::Min => {
                    if b < a {
                        b
                    } else {
                        a
                    }
                }
                RedOp::Max => {
                    if b > a {
                        b
                    } else {
                        a
                    }
                }
            })
            .collect();
        assert_eq!(d, as_bytes(&want), "half/{op}");
    }
}
