//! Timestamps: nanosecond round trips, RFC 3339 spellings only, and both edges of the
//! representable range.

use super::*;

/// A `ProcessStarted` document whose `process_started_at` is `ts`.
fn started_at_doc(ts: &str) -> String {
    format!(
        r#"{{"metadata":{{"event_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e04","kind":1,"session_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e02","loop_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e03","process_handle":"h","origin_execution_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e05","state":2,"process_created_at":"2000-01-01T00:00:00Z","process_started_at":"{ts}"}},"type":"ProcessStarted","v":1}}"#
    )
}

#[test]
fn timestamps_round_trip_to_the_nanosecond() {
    let cases = [
        (
            ts(1_700_000_000, 123_456_789),
            "2023-11-14T22:13:20.123456789Z",
        ),
        (ts(1_700_000_000, 1), "2023-11-14T22:13:20.000000001Z"),
        (ts(1_700_000_000, 100_000_000), "2023-11-14T22:13:20.1Z"),
        (ts(1_700_000_000, 0), "2023-11-14T22:13:20Z"),
        (ts(0, 0), "1970-01-01T00:00:00Z"),
        (ts(-1, 999_999_999), "1969-12-31T23:59:59.999999999Z"),
        (ts(-62_135_596_800, 1), "0001-01-01T00:00:00.000000001Z"),
        (
            ts(253_402_207_199, 999_999_999),
            "9999-12-30T21:59:59.999999999Z",
        ),
    ];
    for (t, text) in cases {
        let mut m = valid_metadata(K::Lost);
        m.process_created_at = t;
        m.process_started_at = Some(t);
        m.process_finished_at = Some(t);
        let bytes = round_trip_event(&event(m));
        let doc = String::from_utf8(bytes).unwrap();
        for key in [
            "process_created_at",
            "process_started_at",
            "process_finished_at",
        ] {
            assert!(doc.contains(&format!(r#""{key}":"{text}""#)), "{doc}");
        }
        // The text parses back to the same instant, nanosecond for nanosecond.
        assert_eq!(text.parse::<Timestamp>().unwrap(), t);
    }
}

#[test]
fn timestamps_must_be_rfc3339_not_other_iso8601_spellings() {
    let good = [
        "2023-11-14T22:13:20Z",
        "2023-11-14t22:13:20z",
        "2023-11-14T22:13:20.5Z",
        "2023-11-14T22:13:20.123456789Z",
        "2023-11-14T23:13:20+01:00",
    ];
    let bad = [
        "2023-11-14 22:13:20Z",
        "20231114T221320Z",
        "2023-11-14T22:13:20,5Z",
        "2023-11-14T22:13:20Z[UTC]",
        "2023-11-14T22:13:20",
        "2023-11-14T22:13:20.Z",
        "2023-11-14T22:13:20.1234567891Z",
        "2023-11-14T22:13Z",
        "2023-11-14T22:13:20+0100",
        "2023-11-14T22:13:20+01",
        "2023-13-14T22:13:20Z",
        "",
    ];
    for ts in good {
        let decoded = SessionEvent::decode(started_at_doc(ts).as_bytes());
        assert!(decoded.is_ok(), "{ts}: {decoded:?}");
    }
    for ts in bad {
        let err = SessionEvent::decode(started_at_doc(ts).as_bytes()).unwrap_err();
        assert_eq!(err.field(), Some("process_started_at"), "{ts}: {err:?}");
    }
}

#[test]
fn timestamps_round_trip_through_the_last_representable_instant() {
    // The upper edge: jiff's last instant, 26 hours before RFC 3339's.
    assert_eq!(MAX_TIMESTAMP, Timestamp::MAX);
    assert_eq!(MAX_TIMESTAMP.to_string(), "9999-12-30T22:00:00.999999999Z");
    let mut m = valid_metadata(K::Lost);
    m.process_created_at = MAX_TIMESTAMP;
    m.process_started_at = Some(MAX_TIMESTAMP);
    m.process_finished_at = Some(MAX_TIMESTAMP);
    let bytes = round_trip_event(&event(m));
    assert!(
        String::from_utf8(bytes)
            .unwrap()
            .contains(r#""process_finished_at":"9999-12-30T22:00:00.999999999Z""#)
    );
    // The same instant in other spellings, and the instants just before it.
    for ts in [
        "9999-12-30T22:00:00.999999999Z",
        "9999-12-30t22:00:00.999999999z",
        "9999-12-31T00:00:00.999999999+02:00",
        "9999-12-30T20:30:00.999999999-01:30",
        "9999-12-30T22:00:00.99999999Z",
        "9999-12-30T22:00:00Z",
    ] {
        let got = SessionEvent::decode(started_at_doc(ts).as_bytes()).unwrap();
        let SessionEvent::Lifecycle(m) = got else {
            panic!("{ts}: not a lifecycle event")
        };
        assert!(m.process_started_at.unwrap() <= MAX_TIMESTAMP, "{ts}");
        assert_eq!(
            ts.parse::<Timestamp>().unwrap(),
            m.process_started_at.unwrap()
        );
    }
    // Later RFC 3339 instants, through the last one, are refused by name.
    for ts in [
        "9999-12-30T22:00:01Z",
        "9999-12-30T22:00:01.000000000Z",
        "9999-12-30T21:00:01-01:00",
        "9999-12-31T00:00:00Z",
        "9999-12-31t23:59:59z",
        "9999-12-31T23:59:59.999999999Z",
        "9999-12-31T23:59:59.999999999+23:59",
        "9999-12-31T23:59:59.999999999-23:59",
    ] {
        let err = SessionEvent::decode(started_at_doc(ts).as_bytes()).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TimestampOutOfRange {
                field: "process_started_at"
            },
            "{ts}"
        );
        assert_eq!(err.field(), Some("process_started_at"));
        assert!(
            err.to_string().contains("9999-12-30T22:00:00.999999999Z"),
            "{err}"
        );
    }
    // What is not a calendar instant at all stays an invalid value.
    for ts in [
        "9999-12-32T00:00:00Z",
        "9999-13-31T00:00:00Z",
        "9999-12-31T24:00:00Z",
        "9999-12-31T23:60:00Z",
        "9999-12-31T23:59:59+24:00",
        "9999-12-31T23:59:59+23:60",
    ] {
        let err = SessionEvent::decode(started_at_doc(ts).as_bytes()).unwrap_err();
        assert_eq!(
            err,
            DecodeError::InvalidValue {
                field: "process_started_at",
                expected: "an RFC 3339 timestamp"
            },
            "{ts}"
        );
    }
}

#[test]
fn timestamps_decode_from_the_first_rfc3339_instant() {
    // The lower edge: every RFC 3339 instant is representable, the earliest (year 0
    // at the largest offset) included; validation then wants a creation time after
    // the zero time.
    for ts in ["0000-01-01T00:00:00Z", "0000-01-01T00:00:00+23:59"] {
        let t: Timestamp = ts.parse().unwrap();
        assert!(t < ZERO_TIME);
        let doc = started_at_doc("2000-01-01T00:00:00Z").replace(
            r#""process_created_at":"2000-01-01T00:00:00Z""#,
            &format!(r#""process_created_at":"{ts}""#),
        );
        let err = SessionEvent::decode(doc.as_bytes()).unwrap_err();
        assert_eq!(
            err,
            DecodeError::Invalid(ValidationError::new(ValidationField::ProcessCreatedAt)),
            "{ts}"
        );
    }
    let first = "0001-01-01T00:00:00.000000001Z";
    let mut m = valid_metadata(K::Lost);
    m.process_created_at = first.parse().unwrap();
    m.process_started_at = Some(m.process_created_at);
    m.process_finished_at = Some(m.process_created_at);
    let text = String::from_utf8(round_trip_event(&event(m))).unwrap();
    assert!(text.contains(first), "{text}");
}
