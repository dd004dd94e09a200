//! Bearer tokens, stored only as SHA-256 hashes.
//!
//! A request's token is hashed and compared, in constant time, with every
//! stored hash (all of them, with no early exit), so neither the comparison
//! nor the number of comparisons tells an attacker how close a guess was or
//! which kind of token matched.

use std::collections::BTreeMap;
use std::sync::RwLock;

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

use crate::error::ApiError;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// The admin token: everything.
    Admin,
    /// A per-VR token: only this VR.
    Vr(String),
}

impl Principal {
    /// Ok for the admin; [`ApiError::Forbidden`] for a VR token.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self {
            Principal::Admin => Ok(()),
            Principal::Vr(_) => Err(ApiError::Forbidden),
        }
    }

    /// Ok if this principal may see `vr`. Another tenant's VR answers
    /// [`ApiError::NoSuchVr`], exactly like a VR that does not exist.
    pub fn require_vr(&self, vr: &str) -> Result<(), ApiError> {
        match self {
            Principal::Admin => Ok(()),
            Principal::Vr(own) if own == vr => Ok(()),
            Principal::Vr(_) => Err(ApiError::NoSuchVr),
        }
    }

    /// True if this principal may see `vr`.
    pub fn sees(&self, vr: &str) -> bool {
        self.require_vr(vr).is_ok()
    }
}

/// A token hash the server refuses.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BadTokenHash {
    /// Not 64 hex digits.
    #[error("{what}: a token hash must be 64 hex digits (SHA-256), as printed by `vrhost token`")]
    Malformed {
        /// Which token: `admin` or `vr <name>`.
        what: String,
    },
    /// The same hash as another token: one token would open both.
    #[error("{what}: the same token hash as {other}; every token must be different")]
    Duplicate {
        /// Which token: `admin` or `vr <name>`.
        what: String,
        /// The token it repeats.
        other: String,
    },
}

/// The credentials a server accepts. The per-VR tokens change while the
/// server runs: the backend installs a VR's token when it creates the VR,
/// revokes it when it deletes the VR, and replaces them on reload, each
/// taking effect for the next request.
pub struct Auth {
    admin: [u8; 32],
    vrs: RwLock<BTreeMap<String, [u8; 32]>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Hashes are not secrets, but there is no reason to print them.
        f.debug_struct("Auth")
            .field("vr_tokens", &self.read().len())
            .finish_non_exhaustive()
    }
}

fn parse_hash(hex: &str, what: impl FnOnce() -> String) -> Result<[u8; 32], BadTokenHash> {
    let hex = hex.trim();
    let mut out = [0u8; 32];
    let ok = hex.len() == 64
        && hex.is_ascii()
        && out.iter_mut().enumerate().all(|(i, byte)| {
            u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map(|b| *byte = b)
                .is_ok()
        });
    if ok {
        Ok(out)
    } else {
        Err(BadTokenHash::Malformed { what: what() })
    }
}

/// One VR's token as a change: `Some(hash)` installs or replaces it, `None`
/// revokes it.
pub type TokenChange = (String, Option<String>);

impl Auth {
    /// Credentials from hex SHA-256 hashes: the admin token's, and
    /// `(vr name, hash)` for each per-VR token. Two equal hashes are refused.
    pub fn new(admin_sha256: &str, vr_tokens: &[(String, String)]) -> Result<Auth, BadTokenHash> {
        let admin = parse_hash(admin_sha256, || "admin".to_string())?;
        let auth = Auth {
            admin,
            vrs: RwLock::new(BTreeMap::new()),
        };
        let changes: Vec<TokenChange> = vr_tokens
            .iter()
            .map(|(vr, h)| (vr.clone(), Some(h.clone())))
            .collect();
        auth.update(&changes)?;
        Ok(auth)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, [u8; 32]>> {
        // The map is replaced whole under the lock, so a panic elsewhere
        // cannot have left it half-written.
        self.vrs.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `changes` would be accepted, without making them.
    pub fn check(&self, changes: &[TokenChange]) -> Result<(), BadTokenHash> {
        after(&self.admin, &self.read(), changes).map(drop)
    }

    /// Installs, replaces or revokes per-VR tokens, all or none. A replaced
    /// or revoked hash stops working for the next request.
    pub fn update(&self, changes: &[TokenChange]) -> Result<(), BadTokenHash> {
        // Checked and installed under one write lock: no update in between.
        let mut vrs = self.vrs.write().unwrap_or_else(|e| e.into_inner());
        *vrs = after(&self.admin, &vrs, changes)?;
        Ok(())
    }

    /// Whether `vr` has a token.
    pub fn has_vr_token(&self, vr: &str) -> bool {
        self.read().contains_key(vr)
    }

    /// Who holds `token`, if anyone.
    pub fn authenticate(&self, token: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = bool::from(digest.ct_eq(&self.admin)).then_some(Principal::Admin);
        for (vr, hash) in self.read().iter() {
            if bool::from(digest.ct_eq(hash)) && found.is_none() {
                found = Some(Principal::Vr(vr.clone()));
            }
        }
        found
    }
}

/// The per-VR tokens `current` becomes with `changes`, or why that would be
/// refused: a malformed hash, or one equal to another token's.
fn after(
    admin: &[u8; 32],
    current: &BTreeMap<String, [u8; 32]>,
    changes: &[TokenChange],
) -> Result<BTreeMap<String, [u8; 32]>, BadTokenHash> {
    let mut next = current.clone();
    for (vr, hash) in changes {
        match hash {
            Some(h) => {
                next.insert(vr.clone(), parse_hash(h, || format!("vr {vr}"))?);
            }
            None => {
                next.remove(vr);
            }
        }
    }
    let changed = |vr: &str| changes.iter().any(|(c, _)| c == vr);
    let mut seen: BTreeMap<[u8; 32], String> = BTreeMap::new();
    seen.insert(*admin, "admin".to_string());
    for (vr, hash) in &next {
        if let Some(first) = seen.get(hash) {
            // Blame the token being changed, not the one already there.
            let first_vr = first.strip_prefix("vr ");
            let (what, other) = match first_vr {
                Some(f) if changed(f) && !changed(vr) => (first.clone(), format!("vr {vr}")),
                _ => (format!("vr {vr}"), first.clone()),
            };
            return Err(BadTokenHash::Duplicate { what, other });
        }
        seen.insert(*hash, format!("vr {vr}"));
    }
    Ok(next)
}

/// The hex SHA-256 of a token: what the config stores.
pub fn hash_token(token: &str) -> String {
    to_hex(&Sha256::digest(token.as_bytes()))
}

/// A new random token: 32 bytes from the operating system's generator, hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    to_hex(&bytes)
}

fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Who may call an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Any valid token; the answer is filtered to what the token may see.
    Any,
    /// The admin, or the token of the VR named in the path.
    Vr,
    /// The admin only; others get 403.
    Admin,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_authenticate_by_hash() {
        let admin = generate_token();
        let red = generate_token();
        assert_ne!(admin, red);
        let auth = Auth::new(&hash_token(&admin), &[("red".into(), hash_token(&red))]).unwrap();
        assert_eq!(auth.authenticate(&admin), Some(Principal::Admin));
        assert_eq!(auth.authenticate(&red), Some(Principal::Vr("red".into())));
        assert_eq!(auth.authenticate("guess"), None);
        assert_eq!(auth.authenticate(""), None);
    }

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn bad_hashes_are_rejected() {
        assert!(Auth::new("abc", &[]).is_err());
        let err = Auth::new(&hash_token("a"), &[("red".into(), "zz".repeat(32))]).unwrap_err();
        assert!(err.to_string().contains("vr red"));
    }

    #[test]
    fn duplicate_hashes_are_refused() {
        let h = hash_token("same");
        let err = Auth::new(&h, &[("red".into(), h.clone())]).unwrap_err();
        assert_eq!(
            err,
            BadTokenHash::Duplicate {
                what: "vr red".into(),
                other: "admin".into()
            }
        );
        let err = Auth::new(
            &hash_token("a"),
            &[("blue".into(), h.clone()), ("red".into(), h.clone())],
        )
        .unwrap_err();
        assert!(err.to_string().contains("the same token hash"), "{err}");

        // At run time the new token is the one blamed, and nothing changes.
        let auth = Auth::new(&hash_token("a"), &[("blue".into(), h.clone())]).unwrap();
        let err = auth.update(&[("red".into(), Some(h.clone()))]).unwrap_err();
        assert_eq!(
            err,
            BadTokenHash::Duplicate {
                what: "vr red".into(),
                other: "vr blue".into()
            }
        );
        assert!(!auth.has_vr_token("red"));
        assert_eq!(
            auth.authenticate("same"),
            Some(Principal::Vr("blue".into()))
        );
    }

    #[test]
    fn tokens_are_replaced_and_revoked_at_once() {
        let auth = Auth::new(&hash_token("admin"), &[("red".into(), hash_token("old"))]).unwrap();
        assert_eq!(auth.authenticate("old"), Some(Principal::Vr("red".into())));
        auth.update(&[("red".into(), Some(hash_token("new")))])
            .unwrap();
        assert_eq!(auth.authenticate("old"), None);
        assert_eq!(auth.authenticate("new"), Some(Principal::Vr("red".into())));
        // A swap of two tokens in one update is not a duplicate.
        auth.update(&[("blue".into(), Some(hash_token("b")))])
            .unwrap();
        auth.update(&[
            ("red".into(), Some(hash_token("b"))),
            ("blue".into(), Some(hash_token("new"))),
        ])
        .unwrap();
        assert_eq!(auth.authenticate("b"), Some(Principal::Vr("red".into())));
        auth.update(&[("red".into(), None)]).unwrap();
        assert_eq!(auth.authenticate("b"), None);
        assert!(auth.check(&[("x".into(), Some("nope".into()))]).is_err());
    }

    #[test]
    fn scope() {
        let p = Principal::Vr("red".into());
        assert!(p.require_vr("red").is_ok());
        assert_eq!(p.require_vr("blue"), Err(ApiError::NoSuchVr));
        assert_eq!(p.require_admin(), Err(ApiError::Forbidden));
        assert!(Principal::Admin.require_vr("blue").is_ok());
    }
}
