//! The body's round trip, canonical form and refusals.

use notify_testkit::{sample, strategy};
use notify_types::{
    JournalRecord, LoopId, ProcessLifecycleKind, ProcessTerminalReason, SessionEvent, SessionId,
    Timestamp, ValidationField, is_valid_handle,
};
use proptest::prelude::*;

use super::decode::Reader;
use super::encode::put_time;
use super::error::BodyError;
use super::layout::HAS_REASON;
use super::{decode_body, encode_body};

fn body(record: &JournalRecord) -> Vec<u8> {
    let mut out = Vec::new();
    encode_body(record, &mut out);
    out
}

/// Decodes `bytes`; a record that decodes must be the one whose body they are.
fn decode_canonical(bytes: &[u8]) -> Result<JournalRecord, BodyError> {
    let record = decode_body(bytes)?;
    assert_eq!(
        body(&record),
        bytes,
        "a decoded body re-encodes to its bytes"
    );
    Ok(record)
}

fn samples() -> Vec<JournalRecord> {
    sample::one_of_each(SessionId::new(), LoopId::new())
}

fn sample_command() -> JournalRecord {
    sample::command(SessionId::new(), LoopId::new())
}

fn sample_lost() -> JournalRecord {
    sample::event(SessionId::new(), LoopId::new(), ProcessLifecycleKind::Lost)
}

#[test]
fn samples_round_trip_and_are_compact() {
    println!(
        "{:<22} {:>5} {:>5} {:>6}",
        "record", "body", "json", "ratio"
    );
    let (mut body_total, mut json_total) = (0, 0);
    for record in samples() {
        let bytes = body(&record);
        assert_eq!(decode_canonical(&bytes).unwrap(), record);
        assert_eq!(body(&record), bytes, "deterministic");
        let json = record.encode().len();
        println!(
            "{:<22} {:>5} {json:>5} {:>6.2}",
            record.type_name(),
            bytes.len(),
            bytes.len() as f64 / json as f64
        );
        assert!(
            bytes.len() * 2 < json,
            "{}: {} vs {json}",
            record.type_name(),
            bytes.len()
        );
        body_total += bytes.len();
        json_total += json;
    }
    println!("{:<22} {body_total:>5} {json_total:>5}", "total");
}

#[test]
fn appends_to_what_the_buffer_holds() {
    let record = sample_command();
    let mut out = vec![0xaa, 0xbb];
    encode_body(&record, &mut out);
    assert_eq!(out.get(..2), Some(&[0xaa, 0xbb][..]));
    assert_eq!(out.get(2..), Some(&body(&record)[..]));
}

#[test]
fn every_cut_short_body_is_truncated() {
    for record in samples() {
        let bytes = body(&record);
        for len in 0..bytes.len() {
            let err = decode_body(&bytes[..len]).unwrap_err();
            assert!(matches!(err, BodyError::Truncated { .. }), "{len}: {err}");
        }
    }
    assert_eq!(
        decode_body(&[]).unwrap_err(),
        BodyError::Truncated { field: "tag" }
    );
}

#[test]
fn trailing_bytes_and_unknown_tags_are_refused() {
    let mut bytes = body(&sample_command());
    bytes.push(0);
    assert_eq!(
        decode_body(&bytes).unwrap_err(),
        BodyError::TrailingBytes { count: 1 }
    );
    for tag in [0, 6, 0x7f, 0xff] {
        bytes[0] = tag;
        assert_eq!(
            decode_body(&bytes).unwrap_err(),
            BodyError::UnknownTag { tag }
        );
    }
}

// Command layout: tag 0, command_id 1..17, session_id 17..33, loop_id 33..49,
// state 49, reason 50, handle length 51, handle 52..
// Lifecycle layout: tag 0, flags 1, event_id 2..18, session_id 18..34, loop_id
// 34..50, origin_execution_id 50..66, kind 66, state 67, created 68..80.

#[test]
fn unknown_codes_and_flags_are_named() {
    let good = body(&sample_command());
    for (at, field) in [(49, "state"), (50, "reason")] {
        for code in [0, 10, 0xff] {
            let mut bytes = good.clone();
            bytes[at] = code;
            assert_eq!(
                decode_body(&bytes).unwrap_err(),
                BodyError::UnknownCode { field, code }
            );
        }
    }
    let good = body(&sample_lost());
    for (at, field, code) in [(66, "kind", 6), (67, "state", 0)] {
        let mut bytes = good.clone();
        bytes[at] = code;
        assert_eq!(
            decode_body(&bytes).unwrap_err(),
            BodyError::UnknownCode { field, code }
        );
    }
    for extra in [1 << 5, 1 << 6, 1 << 7] {
        let mut bytes = good.clone();
        bytes[1] |= extra;
        let flags = bytes[1];
        assert_eq!(
            decode_body(&bytes).unwrap_err(),
            BodyError::UnknownFlags { flags }
        );
    }
}

#[test]
fn lengths_are_minimal_and_checked_before_allocating() {
    let good = body(&sample_command());
    let handle = &good[52..];
    let with_len = |len: &[u8]| {
        let mut bytes = good[..51].to_vec();
        bytes.extend_from_slice(len);
        bytes.extend_from_slice(handle);
        bytes
    };
    // The handle's length spelled in two bytes instead of one.
    let len = u8::try_from(handle.len()).unwrap();
    let err = decode_body(&with_len(&[len | 0x80, 0])).unwrap_err();
    assert_eq!(
        err,
        BodyError::BadLength {
            field: "process_handle"
        }
    );
    // Over 64 bits, and eleven bytes long.
    for len in [
        &[0xff; 9].iter().chain(&[0x02]).copied().collect::<Vec<_>>()[..],
        &[0x80; 11],
    ] {
        let err = decode_body(&with_len(len)).unwrap_err();
        assert_eq!(
            err,
            BodyError::BadLength {
                field: "process_handle"
            },
            "{len:?}"
        );
    }
    // A length far beyond the body is refused without allocating it.
    for len in [
        &[0xff, 0xff, 0xff, 0xff, 0x0f][..],
        &[0xff; 9].iter().chain(&[0x01]).copied().collect::<Vec<_>>()[..],
    ] {
        let err = decode_body(&with_len(len)).unwrap_err();
        assert_eq!(
            err,
            BodyError::Truncated {
                field: "process_handle"
            },
            "{len:?}"
        );
    }
    // One more than there is.
    let err = decode_body(&with_len(&[len + 1])).unwrap_err();
    assert_eq!(
        err,
        BodyError::Truncated {
            field: "process_handle"
        }
    );
}

#[test]
fn strings_must_be_utf8() {
    let mut bytes = body(&sample_command());
    bytes[52] = 0xff;
    assert_eq!(
        decode_body(&bytes).unwrap_err(),
        BodyError::InvalidUtf8 {
            field: "process_handle"
        }
    );
}

#[test]
fn timestamps_are_exact_and_checked() {
    let good = body(&sample_lost());
    let mut bytes = good.clone();
    bytes[76..80].copy_from_slice(&1_000_000_000u32.to_be_bytes());
    assert_eq!(
        decode_body(&bytes).unwrap_err(),
        BodyError::BadTimestamp {
            field: "process_created_at"
        }
    );
    for secs in [i64::MAX, i64::MIN, Timestamp::MAX.as_second() + 1] {
        let mut bytes = good.clone();
        bytes[68..76].copy_from_slice(&secs.to_be_bytes());
        assert_eq!(
            decode_body(&bytes).unwrap_err(),
            BodyError::BadTimestamp {
                field: "process_created_at"
            },
            "{secs}"
        );
    }
    // Every instant jiff holds survives exactly, before the epoch included.
    for t in [
        Timestamp::MAX,
        Timestamp::MIN,
        Timestamp::new(-1, -1).unwrap(),
        Timestamp::new(-1_000, 999_999_999).unwrap(),
        Timestamp::new(0, 1).unwrap(),
    ] {
        let mut out = Vec::new();
        put_time(&mut out, t);
        assert_eq!(out.len(), 12);
        let mut r = Reader { rest: &out };
        assert_eq!(r.time("t").unwrap(), t);
        assert!(r.rest.is_empty());
    }
    // And in a record: created just after the zero time, finished at the last
    // instant.
    let JournalRecord::Event(SessionEvent::Lifecycle(mut m)) = sample_lost() else {
        panic!("a lifecycle sample");
    };
    m.process_created_at = Timestamp::new(notify_types::ZERO_TIME.as_second(), 1).unwrap();
    m.process_started_at = Some(m.process_created_at);
    m.process_finished_at = Some(Timestamp::MAX);
    let record = JournalRecord::Event(SessionEvent::Lifecycle(m));
    assert_eq!(decode_canonical(&body(&record)).unwrap(), record);
}

#[test]
fn invalid_records_are_refused_with_the_validation_error() {
    // A nil session: any 16 bytes are a UUID, and validation refuses this one.
    let mut bytes = body(&sample_command());
    bytes[17..33].fill(0);
    let err = decode_body(&bytes).unwrap_err();
    let BodyError::Invalid(e) = &err else {
        panic!("{err}")
    };
    assert_eq!(e.field(), Some(ValidationField::SessionId.as_str()));
    assert!(std::error::Error::source(&err).is_some());
    // A handle outside the allowed alphabet.
    let mut bytes = body(&sample_command());
    bytes[52] = b'/';
    assert!(!is_valid_handle("/ample-proc"));
    let err = decode_body(&bytes).unwrap_err();
    assert!(
        matches!(&err, BodyError::Invalid(e) if e.field() == Some("process_handle")),
        "{err}"
    );
    // A lost event without its reason.
    let mut bytes = body(&sample_lost());
    bytes[1] &= !HAS_REASON;
    let at = bytes.len() - 1 - "sample-proc".len() - 1 - "runner lost in a crash".len() - 1;
    assert_eq!(
        bytes.remove(at),
        ProcessTerminalReason::LostOnRestore.code()
    );
    let err = decode_body(&bytes).unwrap_err();
    assert!(
        matches!(&err, BodyError::Invalid(e) if e.field() == Some("state_reason")),
        "{err}"
    );
}

/// Up to `max` valid records one character away from `record` in its wire form
/// (a digit of an ID or a time, a letter of a handle...), each different from it;
/// the search starts at a position chosen by `start`.
fn neighbours(
    record: &JournalRecord,
    start: prop::sample::Index,
    max: usize,
) -> Vec<JournalRecord> {
    let wire = record.encode();
    let first = start.index(wire.len());
    let mut out = Vec::new();
    for k in 0..wire.len() {
        let i = (first + k) % wire.len();
        for c in [b'1', b'8', b'b', b'e', b'x'] {
            let mut changed = wire.clone();
            changed[i] = c;
            match JournalRecord::decode(&changed) {
                Ok(r) if r != *record => out.push(r),
                _ => continue,
            }
            if out.len() == max {
                return out;
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn valid_records_round_trip(record in strategy::journal_record()) {
        let bytes = body(&record);
        prop_assert_eq!(decode_canonical(&bytes).unwrap(), record.clone());
        prop_assert_eq!(body(&record), bytes);
    }

    #[test]
    fn bodies_are_equal_exactly_when_records_are(
        a in strategy::journal_record(),
        b in strategy::journal_record(),
        start in any::<prop::sample::Index>(),
    ) {
        // An equal record built anew (decoded from the record's wire form, not
        // cloned) has the same body.
        let same = JournalRecord::decode(&a.encode()).unwrap();
        prop_assert_eq!(&same, &a);
        prop_assert_eq!(body(&same), body(&a));
        // Records that differ in one character of one field have different bodies.
        // (Events whose ID is derived from their other fields have no such
        // neighbour; commands and lifecycle events always do.)
        let free = matches!(
            a,
            JournalRecord::Command(_) | JournalRecord::Event(SessionEvent::Lifecycle(_))
        );
        let near = if free { neighbours(&a, start, 8) } else { Vec::new() };
        prop_assert!(!free || !near.is_empty(), "no neighbour of {:?}", a);
        for n in &near {
            prop_assert_ne!(body(n), body(&a), "{:?} and {:?}", n, a);
        }
        // And two generated records.
        prop_assert_eq!(a == b, body(&a) == body(&b));
    }

    #[test]
    fn damaged_bodies_fail_or_decode_canonically(
        record in strategy::journal_record(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        extra in prop::collection::vec(any::<u8>(), 0..3),
    ) {
        let original = body(&record);
        let mut bytes = original.clone();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        // A changed body that still decodes is another record (injectivity).
        if let Ok(other) = decode_canonical(&bytes) {
            prop_assert_eq!(other == record, bytes == original);
        }
        let short = &bytes[..cut.index(bytes.len() + 1)];
        let _ = decode_canonical(short);
        bytes.extend_from_slice(&extra);
        let _ = decode_canonical(&bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_canonical(&bytes);
    }
}
