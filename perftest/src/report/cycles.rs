//! perftest's sample reports and cycle units for the latency tools: `-U` (every sample as
//! taken), `-H` (every sample sorted) and `-C` (times in CPU cycles).
//!
//! perftest times with the CPU's cycle counter and divides by the CPU frequency to print
//! microseconds; `-C` skips the division. Our clock is `CLOCK_MONOTONIC` in nanoseconds, so `-C`
//! multiplies instead: nanoseconds × the frequency `/proc/cpuinfo` gives (`cpu MHz`, the value
//! perftest calibrates its counter against) — the same unit, from another source.

use crate::measure::result::LatRow;

/// The CPU frequency in MHz: the first `cpu MHz` line of `/proc/cpuinfo`.
pub fn cpu_mhz() -> Result<f64, String> {
    let text = std::fs::read_to_string("/proc/cpuinfo")
        .map_err(|e| format!("cannot read /proc/cpuinfo: {e}"))?;
    parse_cpu_mhz(&text).ok_or_else(|| {
        "/proc/cpuinfo gives no 'cpu MHz' line (this CPU or kernel does not report its \
         frequency)"
            .to_string()
    })
}

fn parse_cpu_mhz(cpuinfo: &str) -> Option<f64> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        let mhz: f64 = (key.trim() == "cpu MHz").then(|| value.trim().parse().ok())??;
        (mhz.is_finite() && mhz > 0.0).then_some(mhz)
    })
}

/// perftest's sample list: `#, UNIT`, then `N, VALUE` per sample (1-based, C's `%g`), each
/// sample (ns) times `per_ns`.
pub fn sample_lines(unit: &str, samples_ns: &[u64], per_ns: f64) -> String {
    let mut s = format!("#, {unit}\n");
    for (i, ns) in samples_ns.iter().enumerate() {
        s.push_str(&format!("{}, {}\n", i + 1, fmt_g(*ns as f64 * per_ns)));
    }
    s
}

/// A latency row's times in CPU cycles (`mhz` cycles per microsecond).
pub fn scale_row(row: &LatRow, mhz: f64) -> LatRow {
    let mut r = *row;
    let st = &mut r.stats;
    for v in [
        &mut st.min_us,
        &mut st.max_us,
        &mut st.median_us,
        &mut st.avg_us,
        &mut st.stdev_us,
        &mut st.p99_us,
        &mut st.p999_us,
        &mut st.p9999_us,
    ] {
        *v *= mhz;
    }
    r
}

/// C's `%g`: six significant digits, trailing zeros dropped, the exponent form below 1e-4 and
/// from 1e6 on (`1.5e+06`).
pub fn fmt_g(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if x == 0.0 {
        return "0".into();
    }
    // The exponent after rounding to six digits decides the form, as in C.
    let e = format!("{x:.5e}");
    let (mantissa, exp) = e.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e}'s exponent is a number");
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", trim_zeros(mantissa), exp.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    trim_zeros(&format!("{x:.decimals$}")).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_g_as_c_prints_it() {
        for (x, want) in [
            (0.0, "0"),
            (12.5, "12.5"),
            (3.0, "3"),
            (1234.5678, "1234.57"),
            (123456.4, "123456"),
            (999999.5, "1e+06"),
            (1500000.0, "1.5e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (26.041, "26.041"),
        ] {
            assert_eq!(fmt_g(x), want, "{x}");
        }
    }

    #[test]
    fn the_frequency_and_the_lines() {
        let info = "processor\t: 0\nmodel name\t: X\ncpu MHz\t\t: 2596.128\ncache size\t: 1 KB\n";
        assert_eq!(parse_cpu_mhz(info), Some(2596.128));
        assert_eq!(parse_cpu_mhz("processor : 0\n"), None);
        assert_eq!(parse_cpu_mhz("cpu MHz : 0\n"), None);
        // 2 samples of 12.5 and 3 µs, in cycles at 2000 MHz.
        assert_eq!(
            sample_lines("cycles", &[12_500, 3_000], 2.0),
            "#, cycles\n1, 25000\n2, 6000\n"
        );
        assert_eq!(
            sample_lines("usec", &[12_345], 1e-3),
            "#, usec\n1, 12.345\n"
        );
    }
}
