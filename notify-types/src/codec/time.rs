//! RFC 3339 timestamps: the accepted spellings and the representable range.
//!
//! The wire carries RFC 3339 `date-time`s (years 0000-9999). In memory a time is a
//! [`jiff::Timestamp`], whose last instant is `9999-12-30T22:00:00.999999999Z`
//! ([`MAX_TIMESTAMP`]): jiff keeps 25:59:59 of headroom so that any civil time in its
//! range can carry any offset. Every RFC 3339 instant up to that one decodes and
//! round-trips; a well-formed later one is [`DecodeError::TimestampOutOfRange`], never a
//! generic syntax error. At the other end nothing is lost: the earliest RFC 3339
//! instant (`0000-01-01T00:00:00+23:59`) is well inside jiff's range, and validation
//! refuses creation times at or before [`ZERO_TIME`](crate::ZERO_TIME) anyway.

use jiff::civil::DateTime;
use jiff::{SignedDuration, Timestamp};

use super::DecodeError;

/// The last instant a timestamp field can hold: `9999-12-30T22:00:00.999999999Z`.
pub const MAX_TIMESTAMP: Timestamp = Timestamp::MAX;

/// [`MAX_TIMESTAMP`] as a civil time in UTC (checked by a unit test).
const MAX_UTC: DateTime = jiff::civil::datetime(9999, 12, 30, 22, 0, 0, 999_999_999);

const EXPECTED: &str = "an RFC 3339 timestamp";

/// Parses an RFC 3339 `date-time` held by `field`.
pub(super) fn parse(field: &'static str, s: &str) -> Result<Timestamp, DecodeError> {
    let invalid = DecodeError::InvalidValue {
        field,
        expected: EXPECTED,
    };
    let Some(offset_at) = rfc3339_offset_at(s) else {
        return Err(invalid);
    };
    match s.parse::<Timestamp>() {
        Ok(t) => Ok(t),
        Err(_) if is_after_max(s, offset_at) => Err(DecodeError::TimestampOutOfRange { field }),
        Err(_) => Err(invalid),
    }
}

/// Whether `s` (already of RFC 3339 shape, its offset starting at `offset_at`) is a
/// valid civil time and offset whose instant lies after [`MAX_TIMESTAMP`].
fn is_after_max(s: &str, offset_at: usize) -> bool {
    let (Some(local), Some(offset)) = (s.get(..offset_at), s.get(offset_at..)) else {
        return false;
    };
    let Ok(local) = local.replace('t', "T").parse::<DateTime>() else {
        return false;
    };
    let offset_secs = match offset.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            // The shape check made these ASCII digits; saturating keeps that local.
            let num = |a: u8, b: u8| {
                i64::from(a.saturating_sub(b'0')) * 10 + i64::from(b.saturating_sub(b'0'))
            };
            let (hours, minutes) = (num(*h1, *h2), num(*m1, *m2));
            if hours > 23 || minutes > 59 {
                return false;
            }
            let secs = hours * 3600 + minutes * 60;
            if *sign == b'-' { -secs } else { secs }
        }
        _ => return false,
    };
    // local - offset > MAX  <=>  local > MAX (as UTC civil time) + offset. The right side
    // stays inside the civil range for every offset RFC 3339 allows.
    MAX_UTC
        .checked_add(SignedDuration::from_secs(offset_secs))
        .is_ok_and(|limit| local > limit)
}

/// Where the offset (`Z` or `±HH:MM`) of `s` starts, if `s` has the RFC 3339
/// `date-time` shape: `YYYY-MM-DDTHH:MM:SS[.fraction]` then `Z` or `±HH:MM`, with `T`/`Z`
/// in either case and at most nine fraction digits. jiff alone would also accept other
/// ISO 8601 and Temporal spellings (basic format, a space separator, bracketed zones);
/// the wire format is RFC 3339 only. Ranges (month 13, second 61) are left to jiff.
fn rfc3339_offset_at(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(digits(0..4) && at(4, b"-") && digits(5..7) && at(7, b"-") && digits(8..10)) {
        return None;
    }
    if !(at(10, b"Tt")
        && digits(11..13)
        && at(13, b":")
        && digits(14..16)
        && at(16, b":")
        && digits(17..19))
    {
        return None;
    }
    let mut i = 19;
    if at(i, b".") {
        let frac = b
            .get(i + 1..)
            .unwrap_or_default()
            .iter()
            .take_while(|d| d.is_ascii_digit())
            .count();
        if frac == 0 || frac > 9 {
            return None;
        }
        i += 1 + frac;
    }
    let ok = match b.get(i..) {
        Some([b'Z' | b'z']) => true,
        Some([b'+' | b'-', ..]) => {
            b.len() == i + 6 && digits(i + 1..i + 3) && at(i + 3, b":") && digits(i + 4..i + 6)
        }
        _ => false,
    };
    ok.then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_utc_is_the_max_timestamp() {
        let max = MAX_UTC.to_string() + "Z";
        assert_eq!(max.parse::<Timestamp>().ok(), Some(MAX_TIMESTAMP));
    }
}
