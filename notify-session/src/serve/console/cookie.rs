//! The console's session token: a browser cannot sign each request, so a login with a
//! key (`login.rs`) sets a cookie carrying `v1.<expiry>.<tag>`, where the tag is an
//! HMAC-SHA256 under a key this server drew at start (so a restart logs everyone
//! out). The cookie is `HttpOnly` and `SameSite=Strict`, scoped to `/console`.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit as _, Mac as _};
use notify_types::Uuid;
use sha2::Sha256;

/// The cookie's name.
pub(crate) const COOKIE: &str = "notify_console";

/// How long a login lasts.
pub(crate) const LOGIN_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a token of this form.
    Malformed,
    /// The tag does not verify under this server's key.
    BadTag,
    /// Past its expiry.
    Expired,
}

/// The key tokens are tagged with.
pub(crate) struct CookieKey([u8; 32]);

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

impl CookieKey {
    /// A fresh key (two random UUIDs: 244 random bits from the OS's generator).
    pub(crate) fn random() -> Self {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(Uuid::new_v4().as_bytes());
        Self(key)
    }

    /// The key's bytes, as a salt for comparing presented keys in constant time.
    pub(crate) fn salt(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self, expiry: u64) -> Option<Hmac<Sha256>> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).ok()?;
        mac.update(b"notify-console.v1.");
        mac.update(expiry.to_string().as_bytes());
        Some(mac)
    }

    /// A token valid until `now + LOGIN_TTL` (Unix seconds).
    pub(crate) fn mint(&self, now: u64) -> String {
        let expiry = now.saturating_add(LOGIN_TTL.as_secs());
        let tag = self
            .mac(expiry)
            .map(|m| URL_SAFE_NO_PAD.encode(m.finalize().into_bytes()))
            .unwrap_or_default();
        format!("v1.{expiry}.{tag}")
    }

    /// Checks `token` at time `now` (Unix seconds).
    pub(crate) fn check(&self, token: &str, now: u64) -> Result<(), Refused> {
        let mut parts = token.split('.');
        let (Some("v1"), Some(expiry), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Malformed);
        };
        let expiry: u64 = expiry.parse().map_err(|_| Refused::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| Refused::Malformed)?;
        let mac = self.mac(expiry).ok_or(Refused::Malformed)?;
        mac.verify_slice(&tag).map_err(|_| Refused::BadTag)?;
        if now >= expiry {
            return Err(Refused::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_verifies_until_it_expires_and_only_under_its_key() {
        let key = CookieKey::random();
        let token = key.mint(1_000);
        assert_eq!(key.check(&token, 1_000), Ok(()));
        let end = 1_000 + LOGIN_TTL.as_secs();
        assert_eq!(key.check(&token, end - 1), Ok(()));
        assert_eq!(key.check(&token, end), Err(Refused::Expired));
        assert_eq!(
            CookieKey::random().check(&token, 1_000),
            Err(Refused::BadTag)
        );
        // A later expiry with the old tag does not verify.
        let forged = token.replacen(&end.to_string(), &(end + 999).to_string(), 1);
        assert_eq!(key.check(&forged, 1_000), Err(Refused::BadTag));
        assert_eq!(key.check("v1.x.y", 1_000), Err(Refused::Malformed));
        assert_eq!(key.check("", 1_000), Err(Refused::Malformed));
    }
}
