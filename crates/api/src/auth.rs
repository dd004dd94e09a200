//! Bearer tokens, stored only as SHA-256 hashes.
//!
//! A request's token is hashed and compared, in constant time, with every
//! stored hash (all of them, with no early exit), so neither the comparison
//! nor the number of comparisons tells an attacker how close a guess was or
//! which kind of token matched.

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

/// A stored token hash that is not 64 hex digits.
#[derive(Debug, Error)]
#[error("{what}: a token hash must be 64 hex digits (SHA-256), as printed by `vrhost token`")]
pub struct BadTokenHash {
    /// Which token: `admin` or `vr <name>`.
    pub what: String,
}

/// The credentials a server accepts.
#[derive(Clone)]
pub struct Auth {
    admin: [u8; 32],
    vrs: Vec<(String, [u8; 32])>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Hashes are not secrets, but there is no reason to print them.
        f.debug_struct("Auth")
            .field("vr_tokens", &self.vrs.len())
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
        Err(BadTokenHash { what: what() })
    }
}

impl Auth {
    /// Credentials from hex SHA-256 hashes: the admin token's, and
    /// `(vr name, hash)` for each per-VR token.
    pub fn new(admin_sha256: &str, vr_tokens: &[(String, String)]) -> Result<Auth, BadTokenHash> {
        let admin = parse_hash(admin_sha256, || "admin".to_string())?;
        let vrs = vr_tokens
            .iter()
            .map(|(vr, hash)| Ok((vr.clone(), parse_hash(hash, || format!("vr {vr}"))?)))
            .collect::<Result<_, BadTokenHash>>()?;
        Ok(Auth { admin, vrs })
    }

    /// Who holds `token`, if anyone.
    pub fn authenticate(&self, token: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = bool::from(digest.ct_eq(&self.admin)).then_some(Principal::Admin);
        for (vr, hash) in &self.vrs {
            if bool::from(digest.ct_eq(hash)) && found.is_none() {
                found = Some(Principal::Vr(vr.clone()));
            }
        }
        found
    }
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
    fn scope() {
        let p = Principal::Vr("red".into());
        assert!(p.require_vr("red").is_ok());
        assert_eq!(p.require_vr("blue"), Err(ApiError::NoSuchVr));
        assert_eq!(p.require_admin(), Err(ApiError::Forbidden));
        assert!(Principal::Admin.require_vr("blue").is_ok());
    }
}
