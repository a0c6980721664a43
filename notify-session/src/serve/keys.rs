//! Key material for Standard Webhooks signatures: HMAC-SHA256 secrets (`whsec_…`),
//! ed25519 public keys (`whpk_…`) and, for clients, ed25519 signing keys (`whsk_…`).
//!
//! A [`KeySet`] holds every key the server accepts at once, so a key can be rotated
//! without downtime: add the new key, move the clients over, remove the old one.

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
/// The shortest HMAC secret accepted (bytes after base64 decoding): 128 bits.
pub const MIN_SECRET_BYTES: usize = 16;

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key has none of the known prefixes.
    #[error(
        "a key must start with whsec_ (HMAC secret), whpk_ (ed25519 public key) or whsk_ (ed25519 signing key)"
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
/// verifies under any key. Several keys are active at once for rotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<VerifyKey>,
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

    /// The keys in `text`: whitespace- or comma-separated `whsec_…`/`whpk_…` keys
    /// (the format of a key file, one or more a line, and of `NOTIFY_SERVE_KEYS`).
    /// Lines starting with `#` are comments.
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
            set.push(word.parse().map_err(|e| (i + 1, e))?);
        }
        Ok(set)
    }

    /// Adds every key of `other`.
    pub fn extend(&mut self, other: KeySet) {
        for k in other.keys {
            self.push(k);
        }
    }

    /// How many keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys.
    #[must_use]
    pub fn keys(&self) -> &[VerifyKey] {
        &self.keys
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
