//! Sizes and times as people type and read them.

/// Parse a size as coreutils (`truncate`, `dd`) do: `65536`, `64K`, `64KiB` (powers of 1024:
/// K, M, G, T and KiB, MiB, GiB, TiB), `64KB`, `1MB` (powers of 1000: KB, MB, GB, TB), `64B`
/// (bytes). Units are case-insensitive; a space between number and unit is allowed. `0x5060`
/// (hexadecimal, no unit) reads an offset as Kavach prints them.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        // An offset as Kavach prints them: hexadecimal, no unit.
        return u64::from_str_radix(hex, 16)
            .map_err(|e| format!("`{text}` is not a hexadecimal number of bytes ({e})"));
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "`{text}` is not a size (try 65536, 64KiB, 16MiB or 1GiB)"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is too large"))?;
    let (base, power): (u64, u32) = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => (1, 0),
        "k" | "kib" => (1024, 1),
        "m" | "mib" => (1024, 2),
        "g" | "gib" => (1024, 3),
        "t" | "tib" => (1024, 4),
        "kb" => (1000, 1),
        "mb" => (1000, 2),
        "gb" => (1000, 3),
        "tb" => (1000, 4),
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}` (K, M, G, T, KiB, MiB, GiB, TiB are powers of \
                 1024; KB, MB, GB, TB powers of 1000; B bytes)"
            ));
        }
    };
    n.checked_mul(base.pow(power))
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// `67108864` as `64.0 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Nanoseconds since the Unix epoch as an RFC 3339 UTC time (to the second).
pub fn format_time_ns(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_coreutils_does_and_refuse_nonsense() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("2tib"), Ok(2 << 40));
        assert_eq!(parse_size(" 2 "), Ok(2));
        assert_eq!(parse_size("7B"), Ok(7));
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        // The decimal units are powers of 1000, not of 1024.
        assert_eq!(parse_size("64KB"), Ok(64_000));
        assert_eq!(parse_size("64kB"), Ok(64_000));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size("3GB"), Ok(3_000_000_000));
        assert_eq!(parse_size("1TB"), Ok(1_000_000_000_000));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_size("18446744073709552KB").is_err());
        assert!(parse_size("mib").is_err());
        assert!(parse_size("64 M iB").is_err());
        assert!(parse_size("64Mi").is_err());
        assert_eq!(parse_size("0x5060"), Ok(0x5060));
        assert!(parse_size("0x").is_err());
        assert!(parse_size("0x5060K").is_err());
        for bad in [
            "",
            "MiB",
            "-1",
            "1.5G",
            "10 parsecs",
            "99999999999999999999",
            "20000000T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_and_times_format() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(64 << 20), "64.0 MiB");
        assert_eq!(format_time_ns(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_time_ns(1_795_305_600 * 1_000_000_000),
            "2026-11-22T00:00:00Z"
        );
        assert_eq!(
            format_time_ns(951_782_400 * 1_000_000_000 + 3_723 * 1_000_000_000),
            "2000-02-29T01:02:03Z"
        );
    }
}
