//! The demo's story, told by the parent process: start the hosts, spread sessions
//! across them, kill one, watch its sessions move, shut the rest down gracefully.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use notify_journal::{PgJournal, PgOptions};
use notify_types::{CommandId, SessionId};
use tokio::runtime::Runtime;

use crate::{ADOPT_EVERY, HOST_VAR, LEASE, URL_VAR, url};

/// The longest the demo waits for any one thing a host should do.
const WAIT: Duration = Duration::from_secs(60);
const PER_HOST: usize = 3;

struct Hosts {
    children: Vec<Option<(Child, ChildStdin)>>,
    lines: mpsc::Receiver<(usize, String)>,
    /// Lines read while waiting for something else: (host, line, when).
    seen: Vec<(usize, String, Instant)>,
}

fn name(h: usize) -> String {
    format!("host-{}", h + 1)
}

/// The last 8 hex digits of an ID (UUIDv7: the leading ones are its time).
fn short(id: impl std::fmt::Display) -> String {
    let id = id.to_string();
    id[id.len().saturating_sub(8)..].to_owned()
}

impl Hosts {
    fn start(n: usize, schema: &str) -> anyhow::Result<Self> {
        let (tx, lines) = mpsc::channel();
        let mut children = Vec::new();
        for h in 0..n {
            let mut child = Command::new(std::env::current_exe()?)
                .env(HOST_VAR, schema)
                .env(URL_VAR, url())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| format!("starting {}", name(h)))?;
            let stdout = child.stdout.take().context("a host's stdout")?;
            let stdin = child.stdin.take().context("a host's stdin")?;
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if tx.send((h, line)).is_err() {
                        return;
                    }
                }
            });
            children.push(Some((child, stdin)));
        }
        Ok(Self {
            children,
            lines,
            seen: Vec::new(),
        })
    }

    /// Waits for a line of host `h` starting with `prefix`; returns the rest.
    fn until(&mut self, h: usize, prefix: &str) -> anyhow::Result<String> {
        // Said already, while the demo waited for another host.
        if let Some(at) = self
            .seen
            .iter()
            .position(|(from, line, _)| *from == h && line.starts_with(prefix))
        {
            let (_, line, _) = self.seen.remove(at);
            return Ok(line[prefix.len()..].trim().to_owned());
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (from, line) = self
                .lines
                .recv_timeout(left)
                .with_context(|| format!("{} never said {prefix:?}", name(h)))?;
            if from == h
                && let Some(rest) = line.strip_prefix(prefix)
            {
                return Ok(rest.trim().to_owned());
            }
            self.seen.push((from, line, Instant::now()));
        }
    }

    fn ask(&mut self, h: usize, request: &str, prefix: &str) -> anyhow::Result<String> {
        let (_, stdin) = self.children[h].as_mut().context("that host is gone")?;
        writeln!(stdin, "{request}")?;
        stdin.flush()?;
        self.until(h, prefix)
    }

    /// Everything the hosts said so far, without waiting.
    fn drain(&mut self) {
        while let Ok((h, line)) = self.lines.try_recv() {
            self.seen.push((h, line, Instant::now()));
        }
    }

    fn kill(&mut self, h: usize) -> anyhow::Result<()> {
        let (mut child, _) = self.children[h].take().context("that host is gone")?;
        kill(Pid::from_raw(i32::try_from(child.id())?), Signal::SIGKILL)?;
        child.wait()?;
        Ok(())
    }

    fn quit(&mut self, h: usize) -> anyhow::Result<()> {
        self.ask(h, "QUIT", "BYE")?;
        let (mut child, stdin) = self.children[h].take().context("that host is gone")?;
        drop(stdin);
        ensure!(child.wait()?.success(), "{} failed", name(h));
        Ok(())
    }
}

/// The story with `n` hosts.
pub(crate) fn run(rt: &Runtime, n: usize) -> anyhow::Result<()> {
    let schema = format!("notify_demo_hosts_{}", std::process::id());
    println!("notify host runtime demo: {n} host processes, one PostgreSQL, sessions that move");
    println!(
        "(lease {LEASE:?}, orphans looked for every {ADOPT_EVERY:?}; schema {schema}, dropped at the end)"
    );
    // The schema exists before the hosts start.
    let options = PgOptions::default().schema(&schema);
    rt.block_on(async {
        PgJournal::connect(&url(), options).await?.close().await;
        anyhow::Ok(())
    })
    .context("connecting to PostgreSQL (NOTIFY_TEST_DATABASE_URL)")?;
    let result = story(n, &schema);
    rt.block_on(drop_schema(&schema))?;
    result
}

fn story(n: usize, schema: &str) -> anyhow::Result<()> {
    println!("\n== 1. {n} hosts start, each a SessionHost in its own process");
    let mut hosts = Hosts::start(n, schema)?;
    for h in 0..n {
        let holder = hosts.until(h, "READY")?;
        println!("  [{}] up, lease holder …{}", name(h), short(&holder));
    }

    println!(
        "\n== 2. {} sessions spread across them, two notifications each",
        n * PER_HOST
    );
    println!("  (each consumer acks `build-` jobs and keeps `hold-` jobs unacknowledged: pending)");
    let mut owner: BTreeMap<SessionId, usize> = BTreeMap::new();
    let mut job_of: BTreeMap<SessionId, usize> = BTreeMap::new();
    for k in 0..n * PER_HOST {
        let (s, h) = (SessionId::new(), k % n);
        let epoch = hosts.ask(h, &format!("OPEN {s}"), &format!("OPENED {s}"))?;
        for job in [format!("build-{k}"), format!("hold-{k}")] {
            let c = CommandId::new();
            let answer = hosts.ask(h, &format!("NOTIFY {s} {c} {job}"), &format!("ANSWER {c}"))?;
            ensure!(answer == "Accepted", "{job} answered {answer}");
        }
        println!(
            "  [{}] opened session …{} (epoch {epoch}): build-{k} acked, hold-{k} pending",
            name(h),
            short(s)
        );
        owner.insert(s, h);
        job_of.insert(s, k);
    }
    // Let the acks of the build- jobs commit.
    std::thread::sleep(Duration::from_millis(500));

    let victim = 0;
    let moved: Vec<SessionId> = owner
        .iter()
        .filter(|(_, h)| **h == victim)
        .map(|(s, _)| *s)
        .collect();
    println!(
        "\n== 3. {} is killed (SIGKILL) holding {} sessions, each with a job pending",
        name(victim),
        moved.len()
    );
    hosts.kill(victim)?;
    let killed = Instant::now();
    println!(
        "  [demo] {} is gone: no renewal, no release; its leases run out within {LEASE:?}",
        name(victim)
    );

    println!("\n== 4. its sessions move: the others adopt them once the leases expire");
    println!(
        "  (a supervisor keeps sending a new notification, same ID, to whichever host answers)"
    );
    let survivors: Vec<usize> = (0..n).filter(|h| *h != victim).collect();
    let mut firsts: BTreeMap<SessionId, (usize, Duration)> = BTreeMap::new();
    let ids: BTreeMap<SessionId, CommandId> =
        moved.iter().map(|s| (*s, CommandId::new())).collect();
    let mut refusals = 0;
    while firsts.len() < moved.len() {
        ensure!(
            killed.elapsed() < WAIT,
            "the sessions were not taken over within {WAIT:?}"
        );
        for s in &moved {
            if firsts.contains_key(s) {
                continue;
            }
            for &h in &survivors {
                let c = ids[s];
                let job = format!("after-{}", job_of[s]);
                let answer =
                    hosts.ask(h, &format!("NOTIFY {s} {c} {job}"), &format!("ANSWER {c}"))?;
                if answer == "Accepted" {
                    firsts.insert(*s, (h, killed.elapsed()));
                    break;
                }
                ensure!(answer == "not-the-owner", "{job} answered {answer}");
                refusals += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("  [demo] {refusals} attempts answered NotOwner (retryable) before the takeovers");
    // The redeliveries (bounded wait for the new owners' loops to deliver them).
    let deadline = Instant::now() + WAIT;
    let redelivered = |hosts: &Hosts, s: SessionId, h: usize| -> Vec<String> {
        hosts
            .seen
            .iter()
            .filter(|(from, line, _)| *from == h && line.starts_with(&format!("DELIVERED {s} ")))
            .filter_map(|(_, line, _)| line.split(' ').nth(2).map(str::to_owned))
            .filter(|job| !job.starts_with("after-"))
            .collect()
    };
    loop {
        hosts.drain();
        if moved
            .iter()
            .all(|s| !redelivered(&hosts, *s, firsts[s].0).is_empty())
        {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "a new owner never redelivered the pending job"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut times = Vec::new();
    for s in &moved {
        let (h, first) = firsts[s];
        let started = hosts
            .seen
            .iter()
            .find(|(from, line, _)| *from == h && line.starts_with(&format!("STARTED {s} ")))
            .map(|(_, line, _)| line.clone())
            .context("the new owner never said it started the session")?;
        let mut words = started.split(' ').skip(2);
        let epoch = words.next().unwrap_or("?");
        let pending = words.next().unwrap_or("-");
        let again = redelivered(&hosts, *s, h);
        let hold = format!("hold-{}", job_of[s]);
        ensure!(
            again.contains(&hold),
            "{hold} was not redelivered (got {again:?})"
        );
        println!(
            "  session …{}: {} → {} (epoch {epoch}); restore found pending [{pending}]; \
             redelivered [{}]; first notification accepted {:.2} s after the kill",
            short(*s),
            name(victim),
            name(h),
            again.join(", "),
            first.as_secs_f64()
        );
        times.push(first);
    }
    times.sort();
    println!(
        "  takeover time (kill → first accepted notification on the new owner): fastest {:.2} s, \
         median {:.2} s, slowest {:.2} s; the lease is {LEASE:?}",
        times[0].as_secs_f64(),
        times[times.len() / 2].as_secs_f64(),
        times[times.len() - 1].as_secs_f64()
    );

    println!("\n== 5. the others shut down gracefully: leases released, nothing left to expire");
    for h in survivors {
        hosts.quit(h)?;
        println!("  [{}] shut down", name(h));
    }
    println!(
        "\nevery session of the killed host moved; each new owner redelivered what it left pending"
    );
    Ok(())
}

async fn drop_schema(schema: &str) -> anyhow::Result<()> {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await?;
    Ok(())
}
