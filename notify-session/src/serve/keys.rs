//! Key material for Standard Webhooks signatures: HMAC-SHA256 secrets (`whsec_…`),
//! ed25519 public keys (`whpk_…`) and, for clients, ed25519 signing keys (`whsk_…`).
//!
//! A [`KeySet`] holds every key the server accepts at once, so a key can be rotated
//! without downtime: add the new key, move the clients over, remove the old one.
//!
//! A read-only key (`whro_…`, a secret like `whsec_`'s) opens the operator console and
//! nothing else: it never verifies a request to the API, so it cannot deliver, publish,
//! consume or end.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

/// The prefix of an HMAC secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// The prefix of an ed25519 public key.
pub const PUBLIC_KEY_PREFIX: &str = "whpk_";
/// The prefix of an ed25519 signing (secret) key.
pub const SIGNING_KEY_PREFIX: &str = "whsk_";
/// The prefix of a read-only key: a secret that opens the operator console and
/// signs nothing the API accepts.
pub const READ_ONLY_PREFIX: &str = "whro_";
/// The shortest HMAC secret accepted (bytes after base64 decoding): 128 bits.
pub const MIN_SECRET_BYTES: usize = 16;

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key has none of the known prefixes.
    #[error(
        "a key must start with whsec_ (HMAC secret), whpk_ (ed25519 public key), whsk_ (ed25519 signing key) or whro_ (read-only console key)"
    )]
    UnknownPrefix,
    /// The part after the prefix is not standard base64.
    #[error("the key after its prefix is not base64")]
    NotBase64,
    /// An HMAC secret shorter than [`MIN_SECRET_BYTES`].
    #[error("an HMAC secret needs at least {MIN_SECRET_BYTES} bytes, this one has {0}")]
    ShortSecret(usize),
    /// An ed25519 key of the wrong length or not a valid curve point.
    #[error("not a valid ed25519 key")]
    BadEd25519,
    /// A signing key where a verifying key belongs, or the other way round.
    #[error("{0}")]
    WrongKind(&'static str),
}

fn decode(body: &str) -> Result<Vec<u8>, KeyError> {
    STANDARD
        .decode(body.trim())
        .map_err(|_| KeyError::NotBase64)
}

/// One key the server verifies signatures with.
#[derive(Clone, PartialEq, Eq)]
pub enum VerifyKey {
    /// An HMAC-SHA256 secret (`whsec_…`): verifies `v1,` signatures.
    Hmac(Vec<u8>),
    /// An ed25519 public key (`whpk_…`): verifies `v1a,` signatures.
    Ed25519(VerifyingKey),
}

impl fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a secret.
        match self {
            Self::Hmac(_) => f.write_str("VerifyKey::Hmac(..)"),
            Self::Ed25519(k) => write!(f, "VerifyKey::Ed25519({})", STANDARD.encode(k.as_bytes())),
        }
    }
}

impl FromStr for VerifyKey {
    type Err = KeyError;

    /// Reads `whsec_<base64>` or `whpk_<base64>`. A `whsk_` signing key is refused:
    /// give the server the public key (`whpk_`) instead.
    fn from_str(s: &str) -> Result<Self, KeyError> {
        let s = s.trim();
        if let Some(body) = s.strip_prefix(SECRET_PREFIX) {
            let bytes = decode(body)?;
            if bytes.len() < MIN_SECRET_BYTES {
                return Err(KeyError::ShortSecret(bytes.len()));
            }
            Ok(Self::Hmac(bytes))
        } else if let Some(body) = s.strip_prefix(PUBLIC_KEY_PREFIX) {
            let bytes: [u8; 32] = decode(body)?.try_into().map_err(|_| KeyError::BadEd25519)?;
            VerifyingKey::from_bytes(&bytes)
                .map(Self::Ed25519)
                .map_err(|_| KeyError::BadEd25519)
        } else if s.starts_with(SIGNING_KEY_PREFIX) {
            Err(KeyError::WrongKind(
                "a whsk_ signing key is secret: give the server its whpk_ public key",
            ))
        } else if s.starts_with(READ_ONLY_PREFIX) {
            Err(KeyError::WrongKind(
                "a whro_ key is read-only: it opens the console and verifies no request",
            ))
        } else {
            Err(KeyError::UnknownPrefix)
        }
    }
}

impl VerifyKey {
    /// Whether `signature` (the raw bytes of one `v1,`/`v1a,` entry) signs `content`
    /// under this key. `ed25519` says which scheme the entry named (`v1a`). HMAC tags
    /// are compared in constant time (the MAC's own `verify_slice`).
    pub(crate) fn verifies(&self, ed25519: bool, content: &[&[u8]], signature: &[u8]) -> bool {
        match (self, ed25519) {
            (Self::Hmac(secret), false) => {
                let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
                    return false;
                };
                for part in content {
                    mac.update(part);
                }
                mac.verify_slice(signature).is_ok()
            }
            (Self::Ed25519(key), true) => {
                let Ok(sig) = Signature::from_slice(signature) else {
                    return false;
                };
                key.verify_strict(&content.concat(), &sig).is_ok()
            }
            _ => false,
        }
    }
}

/// Every key the server accepts: a signature verifies if any entry of its header
/// verifies under any key. Several keys are active at once for rotation. Read-only
/// keys (`whro_…`) are held apart: they open the console and verify no request.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<VerifyKey>,
    read_only: Vec<Vec<u8>>,
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a secret.
        f.debug_struct("KeySet")
            .field("keys", &self.keys)
            .field("read_only", &self.read_only.len())
            .finish()
    }
}

/// Reads a read-only key's secret (`whro_<base64>`, at least [`MIN_SECRET_BYTES`]).
fn read_only_secret(s: &str) -> Option<Result<Vec<u8>, KeyError>> {
    let body = s.trim().strip_prefix(READ_ONLY_PREFIX)?;
    Some(decode(body).and_then(|bytes| {
        if bytes.len() < MIN_SECRET_BYTES {
            Err(KeyError::ShortSecret(bytes.len()))
        } else {
            Ok(bytes)
        }
    }))
}

impl KeySet {
    /// An empty set (every signed request is refused).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key`.
    pub fn push(&mut self, key: VerifyKey) {
        if !self.keys.contains(&key) {
            self.keys.push(key);
        }
    }

    /// Adds a read-only key's secret (the bytes after `whro_`'s base64): it opens the
    /// console and verifies no request.
    pub fn push_read_only(&mut self, secret: Vec<u8>) {
        if !self.read_only.contains(&secret) {
            self.read_only.push(secret);
        }
    }

    /// The keys in `text`: whitespace- or comma-separated `whsec_…`/`whpk_…` keys and
    /// `whro_…` read-only keys (the format of a key file, one or more a line, and of
    /// `NOTIFY_SERVE_KEYS`). Lines starting with `#` are comments.
    ///
    /// # Errors
    ///
    /// The first key that does not parse, with its position (1-based).
    pub fn parse(text: &str) -> Result<Self, (usize, KeyError)> {
        let mut set = Self::new();
        let words = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(|l| l.split(|c: char| c.is_whitespace() || c == ','))
            .filter(|w| !w.is_empty());
        for (i, word) in words.enumerate() {
            match read_only_secret(word) {
                Some(secret) => set.push_read_only(secret.map_err(|e| (i + 1, e))?),
                None => set.push(word.parse().map_err(|e| (i + 1, e))?),
            }
        }
        Ok(set)
    }

    /// Adds every key of `other`.
    pub fn extend(&mut self, other: KeySet) {
        for k in other.keys {
            self.push(k);
        }
        for secret in other.read_only {
            self.push_read_only(secret);
        }
    }

    /// How many keys (read-only keys included).
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len() + self.read_only.len()
    }

    /// Whether there are none (read-only keys included).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.read_only.is_empty()
    }

    /// The keys that verify requests (never the read-only ones).
    #[must_use]
    pub fn keys(&self) -> &[VerifyKey] {
        &self.keys
    }

    /// Whether `presented` (a key as typed into the console's login form) is one of
    /// the secrets that open the console: a `whsec_` HMAC secret or a `whro_`
    /// read-only key. Compared in constant time (as MAC tags under `salt`).
    /// ed25519 public keys are not secrets and open nothing.
    #[must_use]
    pub fn opens_console(&self, presented: &str, salt: &[u8]) -> bool {
        let presented = presented.trim();
        let tag = |bytes: &[u8]| {
            Hmac::<Sha256>::new_from_slice(salt).map(|mut mac| {
                mac.update(bytes);
                mac
            })
        };
        let hmac_keys = self.keys.iter().filter_map(|k| match k {
            VerifyKey::Hmac(s) => Some(s),
            VerifyKey::Ed25519(_) => None,
        });
        // A key is compared with the stored keys of its own kind.
        let (secret, stored): (Vec<u8>, Vec<&Vec<u8>>) =
            if let Some(Ok(s)) = read_only_secret(presented) {
                (s, self.read_only.iter().collect())
            } else if let Ok(VerifyKey::Hmac(s)) = presented.parse::<VerifyKey>() {
                (s, hmac_keys.collect())
            } else {
                return false;
            };
        let Ok(mine) = tag(&secret) else {
            return false;
        };
        let mine = mine.finalize().into_bytes();
        stored
            .into_iter()
            .any(|stored| tag(stored).is_ok_and(|mac| mac.verify_slice(&mine).is_ok()))
    }
}

/// A client's key: signs requests the way the server verifies them (Standard
/// Webhooks). For Rust clients and tests; other languages need ten lines (see
/// `examples/clients/`).
#[derive(Clone)]
pub enum SignKey {
    /// An HMAC-SHA256 secret: `v1,` signatures.
    Hmac(Vec<u8>),
    /// An ed25519 signing key: `v1a,` signatures.
    Ed25519(SigningKey),
}

impl fmt::Debug for SignKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Hmac(_) => "SignKey::Hmac(..)",
            Self::Ed25519(_) => "SignKey::Ed25519(..)",
        })
    }
}

impl FromStr for SignKey {
    type Err = KeyError;

    /// Reads `whsec_<base64>` or `whsk_<base64>` (an ed25519 seed of 32 bytes, or
    /// the 64-byte seed-and-public-key form).
    fn from_str(s: &str) -> Result<Self, KeyError> {
        let s = s.trim();
        if s.starts_with(SECRET_PREFIX) {
            match s.parse::<VerifyKey>()? {
                VerifyKey::Hmac(secret) => Ok(Self::Hmac(secret)),
                VerifyKey::Ed25519(_) => Err(KeyError::UnknownPrefix),
            }
        } else if let Some(body) = s.strip_prefix(SIGNING_KEY_PREFIX) {
            let bytes = decode(body)?;
            let seed: [u8; 32] = bytes
                .get(..32)
                .and_then(|b| b.try_into().ok())
                .filter(|_| bytes.len() == 32 || bytes.len() == 64)
                .ok_or(KeyError::BadEd25519)?;
            Ok(Self::Ed25519(SigningKey::from_bytes(&seed)))
        } else if s.starts_with(PUBLIC_KEY_PREFIX) {
            Err(KeyError::WrongKind("a whpk_ public key cannot sign"))
        } else {
            Err(KeyError::UnknownPrefix)
        }
    }
}

impl SignKey {
    /// The key the server needs to verify this one's signatures.
    #[must_use]
    pub fn verify_key(&self) -> VerifyKey {
        match self {
            Self::Hmac(s) => VerifyKey::Hmac(s.clone()),
            Self::Ed25519(k) => VerifyKey::Ed25519(k.verifying_key()),
        }
    }

    /// The server's form of [`verify_key`](Self::verify_key): `whsec_…` or `whpk_…`.
    #[must_use]
    pub fn verify_key_string(&self) -> String {
        match self {
            Self::Hmac(s) => format!("{SECRET_PREFIX}{}", STANDARD.encode(s)),
            Self::Ed25519(k) => format!(
                "{PUBLIC_KEY_PREFIX}{}",
                STANDARD.encode(k.verifying_key().as_bytes())
            ),
        }
    }

    /// The `webhook-signature` entry for a request: `v1,<base64>` or `v1a,<base64>`
    /// over `id.timestamp.body`.
    #[must_use]
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let content = [
            id.as_bytes(),
            b".",
            timestamp.to_string().as_bytes(),
            b".",
            body,
        ]
        .concat();
        match self {
            Self::Hmac(secret) => {
                let tag = match Hmac::<Sha256>::new_from_slice(secret) {
                    Ok(mut mac) => {
                        mac.update(&content);
                        mac.finalize().into_bytes().to_vec()
                    }
                    Err(_) => Vec::new(),
                };
                format!("v1,{}", STANDARD.encode(tag))
            }
            Self::Ed25519(key) => {
                format!("v1a,{}", STANDARD.encode(key.sign(&content).to_bytes()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MDEyMzQ1Njc4OWFiY2RlZg==";
    const READ_ONLY: &str = "whro_MDEyMzQ1Njc4OWFiY2RlZg==";

    #[test]
    fn a_read_only_key_opens_the_console_and_verifies_nothing() {
        let set = KeySet::parse(&format!("# keys\n{READ_ONLY}")).unwrap_or_default();
        assert_eq!((set.len(), set.keys().len()), (1, 0));
        assert!(set.opens_console(READ_ONLY, b"salt"));
        // The same bytes as an HMAC secret are not an API key of this set, and
        // open nothing either: the set holds them as read-only only.
        assert!(!set.opens_console(SECRET, b"salt"));
        assert!(!set.opens_console("whro_AAAA", b"salt"));
        assert_eq!(
            KeySet::parse("whro_AAAA"),
            Err((1, KeyError::ShortSecret(3)))
        );
        assert!(matches!(
            READ_ONLY.parse::<VerifyKey>(),
            Err(KeyError::WrongKind(_))
        ));
    }

    #[test]
    fn an_hmac_secret_opens_the_console_a_public_key_does_not() {
        let sk = SignKey::Ed25519(SigningKey::from_bytes(&[7; 32]));
        let set =
            KeySet::parse(&format!("{SECRET} {}", sk.verify_key_string())).unwrap_or_default();
        assert!(set.opens_console(SECRET, b"salt"));
        assert!(!set.opens_console(&sk.verify_key_string(), b"salt"));
        assert!(!set.opens_console("", b"salt"));
    }
}
