//! The run's figures, printed whether it passed or not (a failing run's figures are
//! what its report quotes), and the verdict.

use std::collections::BTreeMap;

use super::attribution::{Refusals, Takeover, percentiles};
use super::checker::Figures;
use super::config::Config;
use super::driver::Seen;
use super::faults::{Fault, FaultKind};

/// Everything the figures are made of.
pub(crate) struct Report<'a> {
    pub(crate) config: &'a Config,
    pub(crate) faults: &'a [Fault],
    pub(crate) incarnations: u32,
    pub(crate) seen: &'a Seen,
    pub(crate) opened: usize,
    pub(crate) ended: usize,
    pub(crate) traffic_secs: f64,
    pub(crate) figures: &'a Figures,
    pub(crate) refusals: &'a Refusals,
    pub(crate) takeovers: &'a [Takeover],
    pub(crate) deliveries: usize,
}

impl Report<'_> {
    /// How many faults of `kind` were injected.
    pub(crate) fn count(&self, kind: FaultKind) -> usize {
        self.faults.iter().filter(|f| f.kind == kind).count()
    }

    pub(crate) fn print(&self) {
        let c = self.config;
        let s = self.seen;
        let answered = s.answered.len();
        let (a50, a99, amax) = percentiles(&s.latencies);
        let taken: Vec<u64> = self.takeovers.iter().filter_map(|t| t.ms).collect();
        let never = self.takeovers.len() - taken.len();
        let (t50, t99, tmax) = percentiles(&taken);
        let r = self.refusals;
        let f = self.figures;
        let answers: BTreeMap<&str, usize> =
            s.answers.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        println!(
            "host chaos: lease {:?}, poll {:?}, {:?} fault-free, then {} SIGKILLs, {} SIGSTOPs \
             past the lease, {} graceful shutdowns over 3 hosts; {} host processes\n\
             traffic: {} appenders over {} hot sessions ({} opened, {} ended during the run); \
             {} notifications sent, {answered} answered in {:.0} s = {:.0}/s; {} requests, \
             answers {answers:?}; {} deliveries; {} retries of answered ones ({} Duplicate, \
             {} Accepted again)\n\
             answer latency (first send to Accepted/Duplicate): p50 {a50} ms, p99 {a99} ms, \
             max {amax} ms\n\
             takeover after a fault, {} sessions hit: p50 {t50} ms, p99 {t99} ms, max {tmax} \
             ms, {never} never (bound lease + poll + slack = {} ms)\n\
             leases lost: {} in fault windows, {} outside ({} named the owner); NotOwner \
             answers: {} in fault windows, {} outside ({} named the owner); acks refused: {} \
             in fault windows, {} outside; {} of those outside in the fault-free phase\n\
             checker: {} takeovers, {} notifications redelivered by new owners, {} of {} \
             frames judged, {} consumptions checked against application rows",
            c.lease,
            c.poll(),
            c.quiet,
            self.count(FaultKind::Kill),
            self.count(FaultKind::Stop),
            self.count(FaultKind::Shutdown),
            self.incarnations,
            c.appenders,
            c.sessions,
            self.opened,
            self.ended,
            s.sent,
            self.traffic_secs,
            answered as f64 / self.traffic_secs.max(1e-9),
            s.attempts,
            self.deliveries,
            s.retries,
            s.retried_duplicate,
            s.reaccepted.len(),
            self.takeovers.len(),
            c.takeover_bound().as_millis(),
            r.lost_in_faults,
            r.lost_outside,
            r.lost_named,
            r.not_owner_in_faults,
            r.not_owner_outside,
            r.not_owner_named,
            r.acks_refused_in_faults,
            r.acks_refused_outside,
            r.quiet,
            f.takeovers,
            f.redelivered,
            f.frames_with_epoch,
            f.frames,
            f.rows_checked,
        );
    }

    /// What a run with faults must have shown to prove anything: each kind of fault
    /// landed, sessions moved, and new owners redelivered what was pending; and a
    /// host resumed past its lease named the new owner in some `NotOwner`.
    pub(crate) fn proofs(&self) -> Vec<String> {
        let mut bad = Vec::new();
        if self.config.rounds == 0 {
            return bad;
        }
        for kind in [FaultKind::Kill, FaultKind::Stop, FaultKind::Shutdown] {
            if self.config.rounds >= 3 && self.count(kind) == 0 {
                bad.push(format!("no {kind:?} fault was injected"));
            }
        }
        if self.figures.takeovers == 0 {
            bad.push("no session ever moved".to_owned());
        }
        if self.figures.redelivered == 0 {
            bad.push(
                "no new owner redelivered anything: the faults found nothing pending".to_owned(),
            );
        }
        let r = self.refusals;
        if r.not_owner_in_faults >= 10 && r.not_owner_named == 0 {
            bad.push(format!(
                "none of {} NotOwner answers named the session's owner",
                r.not_owner_in_faults
            ));
        }
        bad
    }
}
