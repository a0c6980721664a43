use std::time::Duration;
pub(crate) const LEASE: Duration = Duration::from_millis(1500);
pub(crate) async fn host() {}
