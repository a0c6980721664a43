//! The usual start of a consumer test: a signed `notify serve` on a fresh redb
//! journal, a client, one session open with one loop registered; and notifications
//! delivered to it.

use notify_types::{LoopId, SessionId};
use reqwest::StatusCode;

use super::{Client, Server, Start, completion, journal_dir, new_secret};

/// A running server with one session `s` open and one loop `l` registered
/// (capacity 64), and a client `c` signing with its key. Keep it alive for the test:
/// dropping it kills the server and removes the journal.
pub(crate) struct OneLoop {
    pub(crate) c: Client,
    pub(crate) s: SessionId,
    pub(crate) l: LoopId,
    pub(crate) server: Server,
    _dir: tempfile::TempDir,
}

impl OneLoop {
    /// Starts the server, opens the session and registers the loop.
    pub(crate) async fn start() -> Self {
        let (dir, journal) = journal_dir();
        let secret = new_secret();
        let server = Server::start(&Start::redb(&journal, &[&secret]));
        let c = Client::new(&server.url, Some(&secret));
        let (s, l) = (SessionId::new(), LoopId::new());
        c.open(s).await;
        c.register(s, l, 64).await;
        Self {
            c,
            s,
            l,
            server,
            _dir: dir,
        }
    }

    /// Delivers `n` new completions to the loop, each answered `201 Created`; their
    /// command IDs, in order.
    pub(crate) async fn deliver(&self, n: usize) -> Vec<String> {
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let completion = completion(self.s, self.l);
            assert_eq!(
                self.c.deliver(&completion).await.status,
                StatusCode::CREATED
            );
            ids.push(completion.command_id.to_string());
        }
        ids
    }
}
