//! Dispatch by `type`, determinism, and `JournalRecord::validate` agreeing with decode.

use super::*;

#[test]
fn journal_record_dispatches_by_type() {
    let cmd = command();
    let record = JournalRecord::decode(&cmd.encode()).unwrap();
    assert_eq!(record, JournalRecord::Command(cmd.clone()));
    assert_eq!(record.key(), *cmd.command_id().as_uuid());
    assert_eq!(record.type_name(), "ProcessNotification");
    assert_eq!(record.session_id(), cmd.session_id());
    for &kind in K::ALL {
        let e = event(valid_metadata(kind));
        let record = JournalRecord::decode(&e.encode()).unwrap();
        assert_eq!(record, JournalRecord::Event(e.clone()));
        assert_eq!(record.type_name(), kind.event_type());
        assert_eq!(record.key(), *e.event_id().as_uuid());
    }
    let c = SessionEvent::NotificationConsumed(NotificationConsumed::new(
        SessionId::from_uuid(uuid(2)),
        LoopId::from_uuid(uuid(3)),
        CommandId::from_uuid(uuid(1)),
    ));
    let record = JournalRecord::decode(&c.encode()).unwrap();
    assert_eq!(record, JournalRecord::Event(c));
    assert_eq!(record.type_name(), "NotificationConsumed");
    // A bare notification has no envelope: no `type`.
    assert_eq!(
        JournalRecord::decode(&notification().encode()).unwrap_err(),
        DecodeError::MissingType
    );
}

#[test]
fn encoding_is_deterministic() {
    let records: Vec<JournalRecord> = std::iter::once(JournalRecord::from(command()))
        .chain(
            K::ALL
                .iter()
                .map(|&k| JournalRecord::from(event(valid_metadata(k)))),
        )
        .collect();
    for r in records {
        let a = r.encode();
        let b = r.encode();
        let c = r.clone().encode();
        let d = JournalRecord::decode(&a).unwrap().encode();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a, d);
    }
    // The command's keys are sorted, as the journal form requires.
    let v = command_json();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["command_id", "notification", "type", "v"]);
    let text = String::from_utf8(command().encode()).unwrap();
    assert!(text.starts_with(r#"{"command_id":"#));
    assert!(text.ends_with(r#"},"type":"ProcessNotification","v":1}"#));
    // Fresh IDs change the bytes; equal values never do.
    let n1 = ProcessCompletionNotification {
        command_id: CommandId::new(),
        ..notification()
    };
    let n2 = n1.clone();
    assert_eq!(n1.encode(), n2.encode());
    assert_ne!(n1.encode(), notification().encode());
}

#[test]
fn journal_record_validate_agrees_with_decode() {
    use notify_types::*;
    let nil_consumed = JournalRecord::Event(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(SessionId::new(), LoopId::NIL, CommandId::new()),
    ));
    let err = nil_consumed.validate().unwrap_err();
    assert_eq!(err.field(), Some("loop_id"));
    assert!(JournalRecord::decode(&nil_consumed.encode()).is_err());

    let bad_command =
        JournalRecord::Command(ProcessNotification::new(ProcessCompletionNotification {
            command_id: CommandId::new(),
            session_id: SessionId::new(),
            loop_id: LoopId::new(),
            process_handle: String::new(),
            state: ProcessLifecycleState::Exited,
            reason: ProcessTerminalReason::Exited,
        }));
    assert_eq!(
        bad_command.validate().unwrap_err().field(),
        Some("process_handle")
    );
    assert!(JournalRecord::decode(&bad_command.encode()).is_err());

    let good = JournalRecord::Event(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(SessionId::new(), LoopId::new(), CommandId::new()),
    ));
    assert!(good.validate().is_ok());
    assert!(JournalRecord::decode(&good.encode()).is_ok());
}
