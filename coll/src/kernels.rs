//! Element types, reduction operators and the reduction kernels.
//!
//! A collective reduces byte ranges of registered memory. [`reduce`] looks at the type and the
//! operator once per call and then runs a loop specialised for that pair (a generic function
//! instantiated per type, with the operator a closure the compiler inlines): no per-element
//! dispatch. Elements are read and written in native byte order with `from_ne_bytes` /
//! `to_ne_bytes` over `chunks_exact`, which the compiler turns into plain loads and stores.

verbs_lab::name_table! {
    /// The element type of a collective's buffer (nccl-tests' `-d`), in the order the tools
    /// list them; its name is the one nccl-tests prints in its `type` column.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DataType {
        F32 => "float" | "f32" | "float32",
        F64 => "double" | "f64" | "float64",
        I32 => "int32" | "i32" | "int",
        I64 => "int64" | "i64",
        U8 => "uint8" | "u8",
        I8 => "int8" | "i8",
        U32 => "uint32" | "u32",
        U64 => "uint64" | "u64",
        F16 => "half" | "f16" | "float16",
        Bf16 => "bfloat16" | "bf16",
    }
    unknown: "unknown data type '{}'";
}

impl DataType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
            DataType::U8 | DataType::I8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
        }
    }

    /// The largest integer up to which every integer is exact in this type, for the narrow
    /// floats (`None`: the checked data never comes near the limit).
    pub fn exact_integers(self) -> Option<i64> {
        match self {
            DataType::F16 => Some(2048),
            DataType::Bf16 => Some(256),
            _ => None,
        }
    }
}

verbs_lab::name_table! {
    /// The reduction operator (nccl-tests' `-o`), by its name, the only spelling.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RedOp {
        Sum => "sum",
        Prod => "prod",
        Min => "min",
        Max => "max",
        Avg => "avg",
    }
    unknown: "unknown reduction '{}'";
}

/// A fixed-size element that can be read from and written to native-order bytes.
pub trait Element: Copy + PartialOrd {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `self / n` (integers: truncated towards zero, as C divides).
    fn div_count(self, n: usize) -> Self;
}

macro_rules! element {
    ($t:ty, $add:path, $mul:path, $div:expr) => {
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().expect("element-sized chunk"))
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes())
            }
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                $add(self, o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                $mul(self, o)
            }
            #[inline(always)]
            fn div_count(self, n: usize) -> Self {
                $div(self, n)
            }
        }
    };
}

/// Integer division by a count that may not fit the type itself.
macro_rules! int_div {
    ($t:ty) => {
        |a: $t, n: usize| (a as i128 / n as i128) as $t
    };
}

// Integers wrap on overflow, as NCCL's and MPI's integer sums do.
element!(
    f32,
    std::ops::Add::add,
    std::ops::Mul::mul,
    |a: f32, n: usize| a / n as f32
);
element!(
    f64,
    std::ops::Add::add,
    std::ops::Mul::mul,
    |a: f64, n: usize| a / n as f64
);
element!(i32, i32::wrapping_add, i32::wrapping_mul, int_div!(i32));
element!(i64, i64::wrapping_add, i64::wrapping_mul, int_div!(i64));
element!(u8, u8::wrapping_add, u8::wrapping_mul, int_div!(u8));
element!(i8, i8::wrapping_add, i8::wrapping_mul, int_div!(i8));
element!(u32, u32::wrapping_add, u32::wrapping_mul, int_div!(u32));
element!(u64, u64::wrapping_add, u64::wrapping_mul, int_div!(u64));
// The half-precision floats add and multiply through f32 and round once to their own type.
element!(
    half::f16,
    std::ops::Add::add,
    std::ops::Mul::mul,
    |a: half::f16, n: usize| half::f16::from_f64(a.to_f64() / n as f64)
);
element!(
    half::bf16,
    std::ops::Add::add,
    std::ops::Mul::mul,
    |a: half::bf16, n: usize| half::bf16::from_f64(a.to_f64() / n as f64)
);

/// `dst[i] = f(dst[i], src[i])` over whole elements: the one loop every kernel is made of.
#[inline(always)]
fn combine<T: Element>(dst: &mut [u8], src: &[u8], f: impl Fn(T, T) -> T) {
    for (d, s) in dst.chunks_exact_mut(T::SIZE).zip(src.chunks_exact(T::SIZE)) {
        f(T::load(d), T::load(s)).store(d);
    }
}

fn reduce_typed<T: Element>(op: RedOp, dst: &mut [u8], src: &[u8]) {
    match op {
        // The average is a sum on the ring, divided by the ranks at the end ([`divide`]).
        RedOp::Sum | RedOp::Avg => combine::<T>(dst, src, |a, b| a.add(b)),
        RedOp::Prod => combine::<T>(dst, src, |a, b| a.mul(b)),
        RedOp::Min => combine::<T>(dst, src, |a, b| if b < a { b } else { a }),
        RedOp::Max => combine::<T>(dst, src, |a, b| if b > a { b } else { a }),
    }
}

/// Elements of a half-precision float a block holds: 1 KiB of them, and 2 KiB of f32 per side.
const NARROW_BLOCK: usize = 512;

/// IEEE half-precision floats, a block at a time: widened to f32 with the `half` crate's slice
/// conversions (the CPU's F16C instructions where it has them, as GPU kernels convert on load),
/// combined in f32 and rounded back once. Element by element ([`combine`]), each conversion is a
/// software routine: 0.3 GB/s for a sum where the block gets 2.4 (`vl_reduce_kernels`, one
/// core of an EPYC whose memory pass runs at 13). The results are the same bits, as the element's own `+` and `*` also
/// go through f32 and round once, and a minimum or maximum comes back exactly.
fn reduce_narrow<H>(op: RedOp, dst: &mut [u8], src: &[u8])
where
    H: Element + Default,
    [H]: half::slice::HalfFloatSliceExt,
{
    use half::slice::HalfFloatSliceExt as _;
    let (mut dh, mut sh) = ([H::default(); NARROW_BLOCK], [H::default(); NARROW_BLOCK]);
    let (mut df, mut sf) = ([0f32; NARROW_BLOCK], [0f32; NARROW_BLOCK]);
    for (db, sb) in dst
        .chunks_mut(NARROW_BLOCK * H::SIZE)
        .zip(src.chunks(NARROW_BLOCK * H::SIZE))
    {
        let n = db.len() / H::SIZE;
        for (i, (d, s)) in db
            .chunks_exact(H::SIZE)
            .zip(sb.chunks_exact(H::SIZE))
            .enumerate()
        {
            (dh[i], sh[i]) = (H::load(d), H::load(s));
        }
        dh[..n].convert_to_f32_slice(&mut df[..n]);
        sh[..n].convert_to_f32_slice(&mut sf[..n]);
        let (d, s) = (&mut df[..n], &sf[..n]);
        match op {
            RedOp::Sum | RedOp::Avg => d.iter_mut().zip(s).for_each(|(a, b)| *a += b),
            RedOp::Prod => d.iter_mut().zip(s).for_each(|(a, b)| *a *= b),
            RedOp::Min => d.iter_mut().zip(s).for_each(|(a, &b)| {
                if b < *a {
                    *a = b
                }
            }),
            RedOp::Max => d.iter_mut().zip(s).for_each(|(a, &b)| {
                if b > *a {
                    *a = b
                }
            }),
        }
        dh[..n].convert_from_f32_slice(&df[..n]);
        for (i, d) in db.chunks_exact_mut(H::SIZE).enumerate() {
            dh[i].store(d);
        }
    }
}

/// `buf[i] = buf[i] / n` over whole elements: the end of an average over `n` ranks (NCCL's
/// `ncclAvg`: a sum, then divided; integers truncated towards zero).
pub fn divide(dtype: DataType, buf: &mut [u8], n: usize) {
    fn each<T: Element>(buf: &mut [u8], n: usize) {
        for b in buf.chunks_exact_mut(T::SIZE) {
            T::load(b).div_count(n).store(b);
        }
    }
    match dtype {
        DataType::F32 => each::<f32>(buf, n),
        DataType::F64 => each::<f64>(buf, n),
        DataType::I32 => each::<i32>(buf, n),
        DataType::I64 => each::<i64>(buf, n),
        DataType::U8 => each::<u8>(buf, n),
        DataType::I8 => each::<i8>(buf, n),
        DataType::U32 => each::<u32>(buf, n),
        DataType::U64 => each::<u64>(buf, n),
        DataType::F16 => each::<half::f16>(buf, n),
        DataType::Bf16 => each::<half::bf16>(buf, n),
    }
}

/// Reduces `src` into `dst` element by element: `dst = dst op src`.
///
/// Both must have the same length, a whole number of elements; otherwise an error says which.
pub fn reduce(dtype: DataType, op: RedOp, dst: &mut [u8], src: &[u8]) -> Result<(), String> {
    if dst.len() != src.len() || dst.len() % dtype.size() != 0 {
        return Err(format!(
            "reduce {dtype}/{op}: destination of {} bytes and source of {} bytes are not the same \
             whole number of {}-byte elements",
            dst.len(),
            src.len(),
            dtype.size()
        ));
    }
    match dtype {
        DataType::F32 => reduce_typed::<f32>(op, dst, src),
        DataType::F64 => reduce_typed::<f64>(op, dst, src),
        DataType::I32 => reduce_typed::<i32>(op, dst, src),
        DataType::I64 => reduce_typed::<i64>(op, dst, src),
        DataType::U8 => reduce_typed::<u8>(op, dst, src),
        DataType::I8 => reduce_typed::<i8>(op, dst, src),
        DataType::U32 => reduce_typed::<u32>(op, dst, src),
        DataType::U64 => reduce_typed::<u64>(op, dst, src),
        DataType::F16 => reduce_narrow::<half::f16>(op, dst, src),
        // bfloat16 widens by a shift: element by element is faster than the block's copies.
        DataType::Bf16 => reduce_typed::<half::bf16>(op, dst, src),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Exact test data (`-c 1`)

/// The value rank `rank` puts at element `i` for a checked run: small integers (at most 32), so
/// that sums, products, minima and maxima are exact in every type (floats included: every
/// partial result stays an integer below 2^24; for half and bfloat16, below
/// [`DataType::exact_integers`], which bounds the world a checked sum can have) and whatever
/// the order of the reduction.
///
/// Products use only 1 and 2 (at most one rank contributes a 2 per element), so they stay
/// exact and do not overflow for any world size. For the average every rank gives the same
/// value at an element, so that the sum divides by the ranks exactly, in every type: a lost or
/// doubled contribution, or an element of another place, still shows.
pub fn input_value(op: RedOp, rank: usize, i: usize) -> i64 {
    match op {
        RedOp::Avg => ((i * 7) % 31) as i64 + 1,
        RedOp::Prod => {
            if (i + rank) % 7 == 0 && rank == i % 5 {
                2
            } else {
                1
            }
        }
        _ => ((i * 7 + rank * 13) % 31) as i64 + rank as i64 % 3,
    }
}

/// The exact reduction over `world` ranks of [`input_value`] at element `i`, wrapped to `dtype`.
pub fn expected_value(dtype: DataType, op: RedOp, world: usize, i: usize) -> i64 {
    let vals = (0..world).map(|r| input_value(op, r, i));
    let v = match op {
        RedOp::Sum => vals.sum(),
        RedOp::Prod => vals.product(),
        RedOp::Min => vals.min().unwrap_or(0),
        RedOp::Max => vals.max().unwrap_or(0),
        // The sum as the type holds it, then divided (integers truncated towards zero).
        RedOp::Avg => return wrap(dtype, vals.sum()) / world.max(1) as i64,
    };
    wrap(dtype, v)
}

fn wrap(dtype: DataType, v: i64) -> i64 {
    match dtype {
        DataType::U8 => v.rem_euclid(256),
        DataType::I8 => v as i8 as i64,
        DataType::I32 => v as i32 as i64,
        DataType::U32 => v.rem_euclid(1 << 32),
        _ => v,
    }
}

/// Writes the integer `v` as one element of `dtype` into `b` (its first `dtype.size()` bytes).
pub fn store_value(dtype: DataType, v: i64, b: &mut [u8]) {
    match dtype {
        DataType::F32 => (v as f32).store(&mut b[..4]),
        DataType::F64 => (v as f64).store(&mut b[..8]),
        DataType::I32 => (v as i32).store(&mut b[..4]),
        DataType::I64 => v.store(&mut b[..8]),
        DataType::U8 => (v as u8).store(&mut b[..1]),
        DataType::I8 => (v as i8).store(&mut b[..1]),
        DataType::U32 => (v as u32).store(&mut b[..4]),
        DataType::U64 => (v as u64).store(&mut b[..8]),
        DataType::F16 => half::f16::from_f64(v as f64).store(&mut b[..2]),
        DataType::Bf16 => half::bf16::from_f64(v as f64).store(&mut b[..2]),
    }
}

/// Reads one element of `dtype` from `b` as an integer; `None` for a float that is not one.
pub fn load_value(dtype: DataType, b: &[u8]) -> Option<i64> {
    let f = |x: f64| (x.fract() == 0.0 && x.abs() < 9.0e15).then_some(x as i64);
    match dtype {
        DataType::F32 => f(f32::load(&b[..4]) as f64),
        DataType::F64 => f(f64::load(&b[..8])),
        DataType::I32 => Some(i32::load(&b[..4]) as i64),
        DataType::I64 => Some(i64::load(&b[..8])),
        DataType::U8 => Some(u8::load(&b[..1]) as i64),
        DataType::I8 => Some(i8::load(&b[..1]) as i64),
        DataType::U32 => Some(u32::load(&b[..4]) as i64),
        DataType::U64 => Some(u64::load(&b[..8]) as i64),
        DataType::F16 => f(half::f16::load(&b[..2]).to_f64()),
        DataType::Bf16 => f(half::bf16::load(&b[..2]).to_f64()),
    }
}

/// Fills `buf` (elements `first..`) with rank `rank`'s checked input.
pub fn fill_input(dtype: DataType, op: RedOp, rank: usize, first: usize, buf: &mut [u8]) {
    for (k, b) in buf.chunks_exact_mut(dtype.size()).enumerate() {
        store_value(dtype, input_value(op, rank, first + k), b);
    }
}

/// How many elements of `buf` (elements `first..`) differ from `want(i)`.
pub fn count_wrong(dtype: DataType, first: usize, buf: &[u8], want: impl Fn(usize) -> i64) -> u64 {
    buf.chunks_exact(dtype.size())
        .enumerate()
        .filter(|(k, b)| load_value(dtype, b) != Some(want(first + k)))
        .count() as u64
}

/// The integer `v` as an element of `dtype` holds it (wrapped for the narrow integer types).
pub fn expected_value_of(dtype: DataType, v: i64) -> i64 {
    wrap(dtype, v)
}
