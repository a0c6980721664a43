//! The closed enums and their numeric wire codes.

use std::fmt;

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[repr(u8)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $code, )+
        }

        impl $name {
            /// Every variant, in wire-code order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The numeric wire code.
            #[must_use]
            pub const fn code(self) -> u8 {
                self as u8
            }

            /// The variant for a wire code, or `None` for an unknown one.
            #[must_use]
            pub const fn from_code(code: u64) -> Option<Self> {
                match code {
                    $( $code => Some(Self::$variant), )+
                    _ => None,
                }
            }

            /// The variant's name, as written in the specification.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => stringify!($variant), )+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

wire_enum! {
    /// Where a supervised process is in its life.
    ProcessLifecycleState {
        /// Being spawned.
        Starting = 1,
        /// Running.
        Running = 2,
        /// Exited on its own (with an exit code).
        Exited = 3,
        /// Could not be run, or failed in the runner.
        Failed = 4,
        /// Ended because it ran past its deadline.
        TimedOut = 5,
        /// Ended by an interrupt (SIGINT) on request.
        Interrupted = 6,
        /// Ended by a termination request (SIGTERM).
        Terminated = 7,
        /// Killed (SIGKILL).
        Killed = 8,
        /// Its runner was lost in a crash; restore declared it lost.
        LostOnRestore = 9,
    }
}

wire_enum! {
    /// Why a supervised process ended.
    ProcessTerminalReason {
        /// It exited on its own.
        Exited = 1,
        /// Its deadline passed.
        TimedOut = 2,
        /// It was interrupted on request.
        Interrupted = 3,
        /// It was terminated on request.
        Terminated = 4,
        /// It was killed on request.
        Killed = 5,
        /// The runner itself shut down.
        RunnerShutdown = 6,
        /// It failed to spawn or the runner failed it.
        Failed = 7,
        /// It exceeded its output limit.
        OutputLimit = 8,
        /// Restore declared it lost.
        LostOnRestore = 9,
    }
}

wire_enum! {
    /// The kind of a process lifecycle event.
    ProcessLifecycleKind {
        /// The process started.
        Started = 1,
        /// The process was moved to the background.
        Backgrounded = 2,
        /// The process completed.
        Completed = 3,
        /// Someone asked the process to stop.
        StopRequested = 4,
        /// Restore declared the process lost.
        Lost = 5,
    }
}

wire_enum! {
    /// The outcome of delivering a completion notification.
    Disposition {
        /// A new durable frame was appended (or the session is headless) and the loop took ownership.
        Accepted = 1,
        /// The same command ID with an identical payload was already appended or accepted.
        Duplicate = 2,
        /// The command ID names a different persisted payload: fail closed.
        Collision = 3,
        /// The loop did not take the notification: it is full or exited (retry with the same
        /// ID and identical notification), unknown (do not retry blindly) or a foreign
        /// engine's (never retry). See [`NotifyError`](crate::NotifyError) for which is which.
        Stopped = 4,
    }
}

/// The success of [`notify_process_completion`](crate::ProcessCompletionNotifier::notify_process_completion):
/// the two [`Disposition`]s that are not errors.
///
/// `Collision` and `Stopped` only ever come as a [`NotifyError`](crate::NotifyError)
/// (see [`NotifyError::disposition`](crate::NotifyError::disposition)), so this type
/// cannot hold them. Both variants mean the same thing to a supervisor: the notification
/// is durably owned by its loop, stop retrying.
///
/// ```
/// use notify_types::{Disposition, Notified};
///
/// assert_eq!(Disposition::from(Notified::Duplicate), Disposition::Duplicate);
/// assert_eq!(Notified::Accepted.to_string(), "Accepted");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Notified {
    /// A new durable frame was appended (or the session is headless) and the loop took
    /// ownership.
    Accepted,
    /// The same command ID with an identical payload was already appended or accepted:
    /// treat it as success and keep the ID.
    Duplicate,
}

impl Notified {
    /// The disposition this success stands for.
    #[must_use]
    pub const fn disposition(self) -> Disposition {
        match self {
            Self::Accepted => Disposition::Accepted,
            Self::Duplicate => Disposition::Duplicate,
        }
    }
}

impl From<Notified> for Disposition {
    fn from(n: Notified) -> Self {
        n.disposition()
    }
}

impl fmt::Display for Notified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.disposition().fmt(f)
    }
}

impl ProcessLifecycleKind {
    /// The wire `type` of the session event carrying this kind.
    #[must_use]
    pub const fn event_type(self) -> &'static str {
        match self {
            Self::Started => "ProcessStarted",
            Self::Backgrounded => "ProcessBackgrounded",
            Self::Completed => "ProcessCompleted",
            Self::StopRequested => "ProcessStopRequested",
            Self::Lost => "ProcessLost",
        }
    }

    /// Whether an event of this kind ends the process's life.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Lost)
    }
}

/// Whether `(state, reason)` is one of the eleven completion pairs.
///
/// `Starting` and `Running` are never terminal.
#[must_use]
pub const fn is_completion_pair(
    state: ProcessLifecycleState,
    reason: ProcessTerminalReason,
) -> bool {
    use ProcessLifecycleState as S;
    use ProcessTerminalReason as R;
    matches!(
        (state, reason),
        (S::Exited, R::Exited)
            | (S::Failed, R::Failed)
            | (S::TimedOut, R::TimedOut)
            | (S::Interrupted, R::Interrupted)
            | (
                S::Terminated,
                R::Terminated | R::RunnerShutdown | R::OutputLimit
            )
            | (S::Killed, R::Killed | R::RunnerShutdown | R::OutputLimit)
            | (S::LostOnRestore, R::LostOnRestore)
    )
}
