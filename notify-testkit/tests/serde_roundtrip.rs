//! notify-types' `serde` feature, property-tested: for any valid DTO, the serde form
//! round-trips, and the value read back encodes to exactly the codec bytes of the
//! original (the journal's canonical form is unaffected by serde).

use notify_testkit::strategy::{completion_notification, lifecycle_metadata};
use notify_types::*;
use proptest::prelude::*;

proptest! {
    #[test]
    fn completion_notifications(n in completion_notification()) {
        let json = serde_json::to_string(&n).unwrap();
        let back: ProcessCompletionNotification = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&back, &n);
        let original = JournalRecord::from(ProcessNotification::new(n));
        let copy = JournalRecord::from(serde_json::from_str::<ProcessNotification>(&json).unwrap());
        prop_assert_eq!(copy.encode(), original.encode());
        prop_assert_eq!(JournalRecord::decode(&copy.encode()).unwrap(), original);
    }

    #[test]
    fn lifecycle_metadata_of_every_kind(m in lifecycle_metadata()) {
        let json = serde_json::to_string(&m).unwrap();
        let back: ProcessLifecycleMetadata = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&back, &m);
        let original = JournalRecord::from(SessionEvent::Lifecycle(m));
        let copy = JournalRecord::from(SessionEvent::Lifecycle(back));
        prop_assert_eq!(copy.encode(), original.encode());
        prop_assert_eq!(JournalRecord::decode(&copy.encode()).unwrap(), original);
    }
}
