//! The codec's own tests: round trips, and every way a record can be refused.

use super::*;

#[test]
fn round_trip_and_strictness() {
    let mut w = Writer::new();
    w.raw(b"VL");
    w.u8(1);
    w.u16(513);
    w.u32(7);
    w.u64(u64::MAX);
    w.f64(f64::NAN);
    w.bool(true);
    w.str("é").unwrap();
    w.strs(&["a".into(), String::new()]).unwrap();
    let b = w.into_bytes();
    let mut r = Reader::new(&b);
    assert_eq!(r.take(2, "magic").unwrap(), b"VL");
    assert_eq!(r.u8("v").unwrap(), 1);
    assert_eq!(r.u16("x").unwrap(), 513);
    assert_eq!(r.u32("y").unwrap(), 7);
    assert_eq!(r.u64("z").unwrap(), u64::MAX);
    assert!(r.f64("f").unwrap().is_nan());
    assert!(r.bool("b").unwrap());
    assert_eq!(r.str("s").unwrap(), "é");
    assert_eq!(r.strs("l").unwrap(), ["a", ""]);
    r.finish().unwrap();
    // Every truncation is refused, never a panic.
    for n in 0..b.len() {
        let mut r = Reader::new(&b[..n]);
        let all = (|| -> Result<(), WireError> {
            r.take(2, "magic")?;
            r.u8("v")?;
            r.u16("x")?;
            r.u32("y")?;
            r.u64("z")?;
            r.f64("f")?;
            r.bool("b")?;
            r.str("s")?;
            r.strs("l")?;
            r.finish()
        })();
        assert!(all.is_err(), "{n} bytes");
    }
}

#[test]
fn bad_values_are_named() {
    assert_eq!(
        Reader::new(&[2]).bool("flag").unwrap_err().to_string(),
        "flag: 2 is not a boolean (0 or 1)"
    );
    assert!(Reader::new(&[0, 1, 0xff])
        .str("name")
        .unwrap_err()
        .to_string()
        .contains("not UTF-8"));
    let e = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0, 0])
        .strs("list")
        .unwrap_err();
    assert!(
        e.to_string().contains("exceeds what the 2 bytes left"),
        "{e}"
    );
    assert_eq!(
        Reader::new(&[1, 2]).finish().unwrap_err().to_string(),
        "2 bytes after the end of the record"
    );
    let long = "x".repeat(70_000);
    assert!(Writer::new().str(&long).is_err());
}

#[test]
fn widths_carry_their_lengths_and_limits() {
    let mut w = Writer::new();
    w.text(Width::U8, "rxe0").unwrap();
    w.blob(Width::U32, &[9, 8]).unwrap();
    w.length(Width::U16, 300, "n").unwrap();
    let b = w.into_bytes();
    assert_eq!(b, [4, b'r', b'x', b'e', b'0', 0, 0, 0, 2, 9, 8, 1, 44]);
    let mut r = Reader::new(&b);
    assert_eq!(r.text(Width::U8, "name", 64).unwrap(), "rxe0");
    assert_eq!(r.blob(Width::U32, "blob", 2).unwrap(), [9, 8]);
    assert_eq!(r.length(Width::U16, "n", 300).unwrap(), 300);
    r.finish().unwrap();
    // A length above the field's limit is refused before its bytes are read.
    let e = Reader::new(&b).text(Width::U8, "name", 3).unwrap_err();
    assert_eq!(
        e,
        WireError::TooLong {
            what: "name".into(),
            len: 4,
            max: 3
        }
    );
    // A length the record cannot hold is a truncation.
    let e = Reader::new(&[0, 0, 0, 9, 1])
        .blob(Width::U32, "blob", usize::MAX)
        .unwrap_err();
    assert!(
        matches!(
            e,
            WireError::Truncated {
                need: 9,
                left: 1,
                ..
            }
        ),
        "{e}"
    );
    // The writer refuses what its width cannot say.
    assert!(Writer::new().text(Width::U8, &"x".repeat(256)).is_err());
    assert!(Writer::new().length(Width::U16, 65_536, "n").is_err());
    assert!(Writer::new().text(Width::U8, &"x".repeat(255)).is_ok());
}

/// One field of a random record, with its value.
#[derive(Debug, Clone, PartialEq)]
enum Field {
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    F64(u64), // the bits: NaN payloads must survive too
    Bool(bool),
    Tag(bool),
    Str(String),
    Strs(Vec<String>),
}

fn random_text(rng: &mut XorShift) -> String {
    // Mostly ASCII, some multi-byte characters, sometimes empty.
    let n = rng.below(12) as usize;
    (0..n)
        .map(|_| match rng.below(6) {
            0 => 'é',
            1 => '€',
            2 => '\u{1f980}',
            _ => (b'a' + rng.below(26) as u8) as char,
        })
        .collect()
}

fn random_field(rng: &mut XorShift) -> Field {
    let edge = |rng: &mut XorShift, max: u64| match rng.below(4) {
        0 => 0,
        1 => max,
        _ => rng.next_u64() & max,
    };
    match rng.below(9) {
        0 => Field::U8(edge(rng, 0xff) as u8),
        1 => Field::U16(edge(rng, 0xffff) as u16),
        2 => Field::U32(edge(rng, u64::from(u32::MAX)) as u32),
        3 => Field::U64(edge(rng, u64::MAX)),
        4 => Field::F64(rng.next_u64()),
        5 => Field::Bool(rng.below(2) == 1),
        6 => Field::Tag(rng.below(2) == 1),
        7 => Field::Str(random_text(rng)),
        _ => Field::Strs((0..rng.below(5)).map(|_| random_text(rng)).collect()),
    }
}

fn write(w: &mut Writer, f: &Field) {
    match f {
        Field::U8(v) => w.u8(*v),
        Field::U16(v) => w.u16(*v),
        Field::U32(v) => w.u32(*v),
        Field::U64(v) => w.u64(*v),
        Field::F64(bits) => w.f64(f64::from_bits(*bits)),
        Field::Bool(v) => w.bool(*v),
        Field::Tag(v) => w.u8(u8::from(*v)),
        Field::Str(s) => w.str(s).unwrap(),
        Field::Strs(v) => w.strs(v).unwrap(),
    }
}

/// Reads a field of `like`'s type.
fn read(r: &mut Reader<'_>, like: &Field) -> Result<Field, WireError> {
    Ok(match like {
        Field::U8(_) => Field::U8(r.u8("u8")?),
        Field::U16(_) => Field::U16(r.u16("u16")?),
        Field::U32(_) => Field::U32(r.u32("u32")?),
        Field::U64(_) => Field::U64(r.u64("u64")?),
        Field::F64(_) => Field::F64(r.f64("f64")?.to_bits()),
        Field::Bool(_) => Field::Bool(r.bool("bool")?),
        Field::Tag(_) => Field::Tag(r.tag("tag")?),
        Field::Str(_) => Field::Str(r.str("str")?),
        Field::Strs(_) => Field::Strs(r.strs("strs")?),
    })
}

fn read_all(bytes: &[u8], schema: &[Field]) -> Result<Vec<Field>, WireError> {
    let mut r = Reader::new(bytes);
    let got = schema
        .iter()
        .map(|f| read(&mut r, f))
        .collect::<Result<Vec<_>, _>>()?;
    r.finish()?;
    Ok(got)
}

#[test]
fn random_records_round_trip_and_every_cut_is_refused() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for round in 0..5_000 {
        let fields: Vec<Field> = (0..rng.below(10)).map(|_| random_field(&mut rng)).collect();
        let mut w = Writer::new();
        fields.iter().for_each(|f| write(&mut w, f));
        let bytes = w.into_bytes();
        assert_eq!(
            read_all(&bytes, &fields).as_ref(),
            Ok(&fields),
            "round {round}"
        );
        // Cut anywhere, or one byte too many: refused, named, never a panic.
        let cut = rng.below(bytes.len() as u64) as usize;
        if cut < bytes.len() {
            let e = read_all(&bytes[..cut], &fields).unwrap_err();
            assert!(!e.to_string().is_empty());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            read_all(&longer, &fields),
            Err(WireError::Trailing { extra: 1 }),
            "round {round}"
        );
    }
}

#[test]
fn random_bytes_and_mutated_records_read_or_fail_never_panic() {
    let mut rng = XorShift(0x0bad_cafe_f00d_d00d);
    let (mut ok, mut refused) = (0u32, 0u32);
    for round in 0..50_000 {
        let fields: Vec<Field> = (0..1 + rng.below(8))
            .map(|_| random_field(&mut rng))
            .collect();
        let bytes = if round % 2 == 0 {
            (0..rng.below(64)).map(|_| rng.next_u64() as u8).collect()
        } else {
            let mut w = Writer::new();
            fields.iter().for_each(|f| write(&mut w, f));
            let mut b = w.into_bytes();
            // A few bytes set to edge values: counts and lengths of all ones among them.
            for _ in 0..1 + rng.below(3) {
                if !b.is_empty() {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] = [0, 0xff, 1, rng.next_u64() as u8][rng.below(4) as usize];
                }
            }
            b
        };
        match read_all(&bytes, &fields) {
            // What is read writes back to the same bytes: one spelling per record.
            Ok(got) => {
                ok += 1;
                let mut w = Writer::new();
                got.iter().for_each(|f| write(&mut w, f));
                assert_eq!(w.into_bytes(), bytes, "round {round}: {got:?}");
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    assert!(ok > 100 && refused > 100, "{ok} read, {refused} refused");
}
