//! The run's size, from environment variables: the CI defaults (about two minutes on
//! two cores) unless set; `cargo xtask soak --hosts` sets them for the full soak
//! (the default lease and poll, minutes of traffic).

use std::time::Duration;

/// `NS_HOST_CHAOS_LEASE_MS`: the lease duration (default 3000).
pub(crate) const LEASE_VAR: &str = "NS_HOST_CHAOS_LEASE_MS";
/// `NS_HOST_CHAOS_POLL_MS`: the hosts' adoption poll (default: unset, the host's
/// default, the lease duration).
pub(crate) const POLL_VAR: &str = "NS_HOST_CHAOS_POLL_MS";
/// `NS_HOST_CHAOS_QUIET_SECS`: traffic without faults first (default 20).
const QUIET_VAR: &str = "NS_HOST_CHAOS_QUIET_SECS";
/// `NS_HOST_CHAOS_ROUNDS`: fault rounds at least (default 6; 0: no faults).
const ROUNDS_VAR: &str = "NS_HOST_CHAOS_ROUNDS";
/// `NS_HOST_CHAOS_FAULT_SECS`: keep injecting faults at least this long (default 0).
const FAULT_SECS_VAR: &str = "NS_HOST_CHAOS_FAULT_SECS";
/// `NS_HOST_CHAOS_APPENDERS`: concurrent appenders over all hosts (default 64).
const APPENDERS_VAR: &str = "NS_HOST_CHAOS_APPENDERS";
/// `NS_HOST_CHAOS_SESSIONS`: hot sessions live at once (default 24).
const SESSIONS_VAR: &str = "NS_HOST_CHAOS_SESSIONS";
/// `NS_HOST_CHAOS_CHURN_MS`: how often a session ends and a new one opens (default
/// 1000).
const CHURN_VAR: &str = "NS_HOST_CHAOS_CHURN_MS";
/// `NS_HOST_CHAOS_SLACK_MS`: the slack over lease + poll a takeover may take, and
/// over a fault's end the host it hit may still lose leases and refuse (default
/// 2000).
const SLACK_VAR: &str = "NS_HOST_CHAOS_SLACK_MS";

/// The run's size.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) lease: Duration,
    /// The hosts' `adopt_every`, when set (else the host's default).
    pub(crate) poll: Option<Duration>,
    pub(crate) quiet: Duration,
    pub(crate) rounds: usize,
    pub(crate) fault_time: Duration,
    pub(crate) appenders: usize,
    pub(crate) sessions: usize,
    pub(crate) churn: Duration,
    pub(crate) slack: Duration,
}

fn var(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
    )
}

impl Config {
    pub(crate) fn from_env() -> Self {
        let ms = |name, default| Duration::from_millis(var(name).unwrap_or(default));
        let config = Self {
            lease: ms(LEASE_VAR, 3000),
            poll: var(POLL_VAR).map(Duration::from_millis),
            quiet: Duration::from_secs(var(QUIET_VAR).unwrap_or(20)),
            rounds: var(ROUNDS_VAR).map_or(6, |n| n as usize),
            fault_time: Duration::from_secs(var(FAULT_SECS_VAR).unwrap_or(0)),
            appenders: var(APPENDERS_VAR).map_or(64, |n| n as usize),
            sessions: var(SESSIONS_VAR).map_or(24, |n| n as usize),
            churn: ms(CHURN_VAR, 1000),
            slack: ms(SLACK_VAR, 2000),
        };
        assert!(config.sessions >= 2 && config.appenders >= 1);
        config
    }

    /// The hosts' poll: the configured one, or the host's default (the lease).
    pub(crate) fn poll(&self) -> Duration {
        self.poll.unwrap_or(self.lease)
    }

    /// The hosts' renewal interval (the host's default, a third of the lease).
    pub(crate) fn renew_every(&self) -> Duration {
        self.lease / 3
    }

    /// How long after a fault's start every session it hit must be owned again:
    /// the lease, one poll, and the slack.
    pub(crate) fn takeover_bound(&self) -> Duration {
        self.lease + self.poll() + self.slack
    }

    /// How long after a fault's end the host it hit may still lose leases and
    /// refuse (a renewal round to find out, and the slack).
    pub(crate) fn grace(&self) -> Duration {
        self.renew_every() + self.slack
    }

    /// The environment a host process needs for this configuration.
    pub(crate) fn host_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![(LEASE_VAR, self.lease.as_millis().to_string())];
        if let Some(poll) = self.poll {
            env.push((POLL_VAR, poll.as_millis().to_string()));
        }
        env
    }
}
