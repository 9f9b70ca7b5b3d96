//! Percent-decoding of the parts of a url (RFC 3986), strict: what the `file://` and
//! `postgresql://` urls share. A few lines rather than a crate: the crates at hand decode
//! a malformed '%' as itself, where a url that names a directory or a password must be
//! refused, and `%00` would cut a path or a password the kernel or libpq reads as C.

/// Percent-decodes `s`: `Err(())` for a '%' not followed by two hex digits or for `%00`.
pub(crate) fn decode(s: &str) -> Result<Vec<u8>, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(())?;
            let hex = std::str::from_utf8(hex).map_err(|_| ())?;
            let b = u8::from_str_radix(hex, 16).map_err(|_| ())?;
            if b == 0 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(());
            }
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn decodes_escapes_and_refuses_malformed_ones_and_nul() {
        assert_eq!(decode("a%20b%2Fc").unwrap(), b"a b/c");
        assert_eq!(decode("%e2%82%AC").unwrap(), "\u{20ac}".as_bytes());
        assert_eq!(decode("plain").unwrap(), b"plain");
        for bad in ["%", "%2", "%zz", "a%2x", "%00", "%+1"] {
            assert!(decode(bad).is_err(), "{bad}");
        }
    }
}
