//! Parsing sizes like `4KiB`, `64MiB`, `1GiB`, `4k` or `4096`.
//!
//! `KiB`/`MiB`/`GiB`/`TiB` and bare `K`/`M`/`G`/`T` are powers of 1024;
//! `KB`/`MB`/`GB`/`TB` are powers of 1000, as in the SI. Overflow is an
//! error, never a wrapped value.

/// Parses a byte size.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("size {s:?}: no leading number"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => return Err(format!("size {s:?}: unknown unit {other:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1 GB"), Ok(1_000_000_000));
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("99999999999TiB").is_err());
    }
}
