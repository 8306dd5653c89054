//! Basic authentication against the web configuration's bcrypt hashes, as the exporter
//! toolkit does it: a bcrypt comparison costs tens of milliseconds by design, so one runs at
//! a time (off the serving thread), and a user's successful credentials are remembered
//! (as a SHA-256 of user, hash and password) so that a scraper's next scrapes cost nothing
//! and are never queued behind someone guessing passwords.
use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex},
};

use base64::Engine as _;

/// Credentials remembered: a few scrapers, never more than this.
const REMEMBERED: usize = 64;

pub struct BasicAuth {
    users: BTreeMap<String, String>,
    remembered: Mutex<VecDeque<[u8; 32]>>,
    one_at_a_time: tokio::sync::Semaphore,
}

impl BasicAuth {
    pub fn new(users: BTreeMap<String, String>) -> Arc<Self> {
        Arc::new(Self {
            users,
            remembered: Mutex::new(VecDeque::new()),
            one_at_a_time: tokio::sync::Semaphore::new(1),
        })
    }

    pub fn required(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether an Authorization header's value lets the request through.
    pub async fn allows(self: &Arc<Self>, authorization: Option<&[u8]>) -> bool {
        let Some((user, password)) = authorization.and_then(parse) else {
            return false;
        };
        // An unknown user is compared against a known user's hash, so that the time taken
        // does not tell which users exist; the answer is no either way.
        let (known, hash) = match self.users.get(&user) {
            Some(h) => (true, h.clone()),
            None => (false, self.users.values().next().cloned().unwrap_or_default()),
        };
        let key = key(&user, &hash, &password);
        if known && self.remembered.lock().unwrap().contains(&key) {
            return true;
        }
        let Ok(_permit) = self.one_at_a_time.acquire().await else {
            return false;
        };
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
            .await
            .unwrap_or(false);
        if ok && known {
            let mut r = self.remembered.lock().unwrap();
            if r.len() == REMEMBERED {
                r.pop_front();
            }
            r.push_back(key);
        }
        ok && known
    }
}

fn key(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, hash, password] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    ctx.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// `Basic base64(user:password)` → (user, password).
fn parse(value: &[u8]) -> Option<(String, String)> {
    let value = std::str::from_utf8(value).ok()?;
    let (scheme, b64) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok()?;
    let (u, p) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_basic_credentials() {
        assert_eq!(
            parse(b"Basic YWxpY2U6cGFzczp3b3Jk"),
            Some(("alice".into(), "pass:word".into()))
        );
        assert_eq!(parse(b"basic YWxpY2U6"), Some(("alice".into(), "".into())));
        assert_eq!(parse(b"Bearer YWxpY2U6cGFzcw=="), None);
        assert_eq!(parse(b"Basic !!!"), None);
        assert_eq!(parse(b"Basic"), None);
    }

    #[test]
    fn checks_and_remembers() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let auth = BasicAuth::new([("alice".to_string(), hash)].into());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let b64 = |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s));
        rt.block_on(async {
            assert!(auth.allows(Some(b64("alice:secret").as_bytes())).await);
            assert_eq!(auth.remembered.lock().unwrap().len(), 1);
            assert!(auth.allows(Some(b64("alice:secret").as_bytes())).await);
            assert!(!auth.allows(Some(b64("alice:wrong").as_bytes())).await);
            assert!(!auth.allows(Some(b64("bob:secret").as_bytes())).await);
            assert!(!auth.allows(None).await);
        });
        assert_eq!(auth.remembered.lock().unwrap().len(), 1);
    }
}
