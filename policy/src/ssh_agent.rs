//! What the sandbox may ask of the user's ssh-agent: the agent protocol's framing and the
//! decision for each request, apart from the relay that enforces it.
//!
//! *Why a filter*: the user's agent is a shared, long-lived store. A client that reaches it can
//! add a key of its own (it stays after the session), remove the user's keys, or lock the agent
//! with a password of its own, after which the user's own `ssh-add -l` shows nothing. The
//! sandbox needs two things of it: the list of public keys and signatures. So the rule is an
//! allowlist of requests: [`REQUEST_IDENTITIES`] and [`SIGN_REQUEST`] pass, [`EXTENSION`] passes
//! only for `session-bind@openssh.com` (ssh binds the connection to the server's host key with
//! it; it adds nothing to the agent), and every other request, known or not, is answered
//! [`FAILURE`] without reaching the agent. `OCSB_SSH_KEYS` narrows further: only the named keys
//! are listed, and signing with any other is refused.
//!
//! Frames are a big-endian `u32` length and that many bytes, the first of which is the message
//! type. A frame longer than [`MAX_FRAME`] (OpenSSH's own limit) or empty is malformed, and the
//! relay ends the connection: the agent would too.

use std::collections::BTreeSet;
use std::fmt;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::{Error, Location, Result};

/// The largest frame OpenSSH's agent accepts (`AGENT_MAX_LEN`, 256 KiB).
pub const MAX_FRAME: usize = 256 * 1024;

/// `SSH_AGENT_FAILURE`.
pub const FAILURE: u8 = 5;
/// `SSH_AGENTC_REQUEST_IDENTITIES`.
pub const REQUEST_IDENTITIES: u8 = 11;
/// `SSH_AGENT_IDENTITIES_ANSWER`.
pub const IDENTITIES_ANSWER: u8 = 12;
/// `SSH_AGENTC_SIGN_REQUEST`.
pub const SIGN_REQUEST: u8 = 13;
/// `SSH_AGENTC_EXTENSION`.
pub const EXTENSION: u8 = 27;

/// The one extension that passes: it binds the agent connection to the host key of the server
/// ssh is talking to, which only narrows what the agent will sign.
pub const SESSION_BIND: &str = "session-bind@openssh.com";

/// The keys the sandbox may use: all of the agent's, or those whose fingerprints
/// (`SHA256:…`, as `ssh-add -l` prints them) `OCSB_SSH_KEYS` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    only: Option<BTreeSet<String>>,
}

impl Keys {
    /// Every key of the agent.
    pub fn all() -> Keys {
        Keys { only: None }
    }

    /// The keys of `OCSB_SSH_KEYS`; an empty list means every key.
    pub fn named<S: AsRef<str>>(fingerprints: &[S]) -> Keys {
        if fingerprints.is_empty() {
            return Keys::all();
        }
        Keys { only: Some(fingerprints.iter().map(|f| f.as_ref().to_string()).collect()) }
    }

    /// Whether the key whose public blob is `blob` may be listed and used.
    pub fn allows(&self, blob: &[u8]) -> bool {
        match &self.only {
            None => true,
            Some(set) => set.contains(&fingerprint(blob)),
        }
    }

    /// Whether the identities answer must be filtered.
    pub fn narrowed(&self) -> bool {
        self.only.is_some()
    }
}

/// A key's fingerprint as OpenSSH prints it: `SHA256:` and the unpadded base64 of the SHA-256
/// of its public blob.
pub fn fingerprint(blob: &[u8]) -> String {
    let digest = Sha256::digest(blob);
    format!("SHA256:{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest))
}

/// Whether `s` has the shape of a fingerprint `ssh-add -l` prints (`SHA256:` and 43 base64
/// characters), for the settings' check.
pub fn is_fingerprint(s: &str) -> bool {
    s.strip_prefix("SHA256:").is_some_and(|b| {
        b.len() == 43
            && base64::engine::general_purpose::STANDARD_NO_PAD.decode(b).is_ok_and(|d| d.len() == 32)
    })
}

/// The length of the frame whose header is `header`: refused when empty or above
/// [`MAX_FRAME`].
pub fn frame_len(header: [u8; 4]) -> Result<usize> {
    let len = u32::from_be_bytes(header) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(malformed(format!("a frame of {len} bytes (1 to {MAX_FRAME} allowed)")));
    }
    Ok(len)
}

/// `payload` with its length header.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The answer to a refused request, framed.
pub fn failure() -> Vec<u8> {
    frame(&[FAILURE])
}

/// What the relay does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it; the answer goes back as it is.
    Pass,
    /// Forward it (a request for the identities); the answer is filtered by
    /// [`filter_identities`] first.
    PassFiltered,
    /// Answer [`FAILURE`] without asking the agent, and tell the user.
    Refuse(Refusal),
}

/// What a refused request tried to do, for the user's log. Equal values are one kind: the
/// relay says each kind once.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    AddKey,
    RemoveKey,
    RemoveAll,
    AddSmartcard,
    RemoveSmartcard,
    Lock,
    Unlock,
    /// A signature with a key `OCSB_SSH_KEYS` does not name (its fingerprint).
    SignWithOtherKey(String),
    /// An extension other than [`SESSION_BIND`]: its name, made printable.
    Extension(String),
    /// A message type this rule does not know.
    Unknown(u8),
}

impl Refusal {
    /// The kind the relay says once: a key, an extension or a type the sandbox picks make no
    /// new kind, so it cannot fill the user's terminal with lines.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::AddKey => "add",
            Refusal::RemoveKey => "remove",
            Refusal::RemoveAll => "remove-all",
            Refusal::AddSmartcard => "add-smartcard",
            Refusal::RemoveSmartcard => "remove-smartcard",
            Refusal::Lock => "lock",
            Refusal::Unlock => "unlock",
            Refusal::SignWithOtherKey(_) => "sign-other",
            Refusal::Extension(_) => "extension",
            Refusal::Unknown(_) => "unknown",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::AddKey => write!(f, "add a key to your agent"),
            Refusal::RemoveKey => write!(f, "remove a key from your agent"),
            Refusal::RemoveAll => write!(f, "remove all keys from your agent"),
            Refusal::AddSmartcard => write!(f, "add a smartcard's keys to your agent"),
            Refusal::RemoveSmartcard => write!(f, "remove a smartcard's keys from your agent"),
            Refusal::Lock => write!(f, "lock your agent with a password"),
            Refusal::Unlock => write!(f, "unlock your agent"),
            Refusal::SignWithOtherKey(fp) => {
                write!(f, "sign with the key {fp}, which OCSB_SSH_KEYS does not name")
            }
            Refusal::Extension(name) => write!(f, "use the agent extension `{name}`"),
            Refusal::Unknown(t) => write!(f, "send an agent request of unknown type {t}"),
        }
    }
}

/// The decision for one request (a frame's payload, its type byte first).
///
/// Requests are named by number in the protocol: 17 and 25 add a key, 18 removes one, 19
/// removes all, 20/26 and 21 add and remove a smartcard's keys, 22 and 23 lock and unlock;
/// 7/24, 8 and 9 are the old protocol's add, remove and remove all (`ssh-add -D` still sends
/// 9).
/// They are listed here only to name them to the user; the rule itself is the allowlist of the
/// first arms.
pub fn judge(payload: &[u8], keys: &Keys) -> Result<Verdict> {
    let mut r = Reader::new(payload);
    let kind = r.byte()?;
    Ok(match kind {
        REQUEST_IDENTITIES if keys.narrowed() => Verdict::PassFiltered,
        REQUEST_IDENTITIES => Verdict::Pass,
        SIGN_REQUEST => {
            let blob = r.string()?;
            if keys.allows(blob) {
                Verdict::Pass
            } else {
                Verdict::Refuse(Refusal::SignWithOtherKey(fingerprint(blob)))
            }
        }
        EXTENSION => {
            let name = r.string()?;
            if name == SESSION_BIND.as_bytes() {
                Verdict::Pass
            } else {
                Verdict::Refuse(Refusal::Extension(printable(name)))
            }
        }
        7 | 17 | 24 | 25 => Verdict::Refuse(Refusal::AddKey),
        8 | 18 => Verdict::Refuse(Refusal::RemoveKey),
        9 | 19 => Verdict::Refuse(Refusal::RemoveAll),
        20 | 26 => Verdict::Refuse(Refusal::AddSmartcard),
        21 => Verdict::Refuse(Refusal::RemoveSmartcard),
        22 => Verdict::Refuse(Refusal::Lock),
        23 => Verdict::Refuse(Refusal::Unlock),
        other => Verdict::Refuse(Refusal::Unknown(other)),
    })
}

/// The agent's answer to a request for the identities, with only the keys `keys` allows. Any
/// other answer (a failure: a locked agent) is returned as it is.
pub fn filter_identities(answer: &[u8], keys: &Keys) -> Result<Vec<u8>> {
    let mut r = Reader::new(answer);
    if r.byte()? != IDENTITIES_ANSWER {
        return Ok(answer.to_vec());
    }
    let n = r.u32()?;
    let mut kept: Vec<(&[u8], &[u8])> = Vec::new();
    for _ in 0..n {
        let (blob, comment) = (r.string()?, r.string()?);
        if keys.allows(blob) {
            kept.push((blob, comment));
        }
    }
    if !r.rest().is_empty() {
        return Err(malformed("bytes after the last identity".into()));
    }
    let mut out = vec![IDENTITIES_ANSWER];
    out.extend_from_slice(&(kept.len() as u32).to_be_bytes());
    for (blob, comment) in kept {
        put_string(&mut out, blob);
        put_string(&mut out, comment);
    }
    Ok(out)
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// At most 64 characters of `name`, anything outside printable ASCII as `?`: the name comes
/// from the sandbox and goes to the user's terminal.
fn printable(name: &[u8]) -> String {
    name.iter().take(64).map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '?' }).collect()
}

fn malformed(what: String) -> Error {
    Error::input(Location::new("ssh-agent message", 0, 0), format!("malformed: {what}"))
}

/// Reads the protocol's types from a payload, never past its end.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Reader { rest: b }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(malformed(format!("{n} bytes wanted, {} left", self.rest.len())));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        put_string(&mut v, s);
        v
    }

    fn sign(blob: &[u8]) -> Vec<u8> {
        let mut p = vec![SIGN_REQUEST];
        p.extend(string(blob));
        p.extend(string(b"data"));
        p.extend(0u32.to_be_bytes());
        p
    }

    fn extension(name: &[u8]) -> Vec<u8> {
        let mut p = vec![EXTENSION];
        p.extend(string(name));
        p.extend(string(b"hostkey"));
        p
    }

    fn answer(keys: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut p = vec![IDENTITIES_ANSWER];
        p.extend((keys.len() as u32).to_be_bytes());
        for (b, c) in keys {
            p.extend(string(b));
            p.extend(string(c));
        }
        p
    }

    #[test]
    fn listing_signing_and_session_bind_pass() {
        let all = Keys::all();
        assert_eq!(judge(&[REQUEST_IDENTITIES], &all).unwrap(), Verdict::Pass);
        assert_eq!(judge(&sign(b"k1"), &all).unwrap(), Verdict::Pass);
        assert_eq!(judge(&extension(SESSION_BIND.as_bytes()), &all).unwrap(), Verdict::Pass);
    }

    #[test]
    fn every_change_to_the_agent_is_refused_by_name() {
        let all = Keys::all();
        let cases = [
            (17, Refusal::AddKey),
            (7, Refusal::AddKey),
            (9, Refusal::RemoveAll),
            (25, Refusal::AddKey),
            (18, Refusal::RemoveKey),
            (19, Refusal::RemoveAll),
            (20, Refusal::AddSmartcard),
            (26, Refusal::AddSmartcard),
            (21, Refusal::RemoveSmartcard),
            (22, Refusal::Lock),
            (23, Refusal::Unlock),
            (1, Refusal::Unknown(1)),
            (12, Refusal::Unknown(12)),
            (255, Refusal::Unknown(255)),
        ];
        for (t, r) in cases {
            assert_eq!(judge(&[t, 0, 0, 0, 0], &all).unwrap(), Verdict::Refuse(r), "type {t}");
        }
        assert!(Refusal::Lock.to_string().contains("lock your agent"));
    }

    #[test]
    fn unknown_extensions_are_refused_and_their_names_made_printable() {
        let v = judge(&extension(b"query"), &Keys::all()).unwrap();
        assert_eq!(v, Verdict::Refuse(Refusal::Extension("query".into())));
        let v = judge(&extension(b"evil\x1b[2J\nname"), &Keys::all()).unwrap();
        assert_eq!(v, Verdict::Refuse(Refusal::Extension("evil?[2J?name".into())));
        // A prefix of the allowed name is another name.
        let v = judge(&extension(b"session-bind@openssh.co"), &Keys::all()).unwrap();
        assert!(matches!(v, Verdict::Refuse(Refusal::Extension(_))));
    }

    #[test]
    fn named_keys_filter_the_list_and_refuse_other_signatures() {
        let (k1, k2) = (b"key-one".as_slice(), b"key-two".as_slice());
        let keys = Keys::named(&[fingerprint(k1)]);
        assert_eq!(judge(&[REQUEST_IDENTITIES], &keys).unwrap(), Verdict::PassFiltered);
        assert_eq!(judge(&sign(k1), &keys).unwrap(), Verdict::Pass);
        assert_eq!(
            judge(&sign(k2), &keys).unwrap(),
            Verdict::Refuse(Refusal::SignWithOtherKey(fingerprint(k2)))
        );
        let filtered = filter_identities(&answer(&[(k1, b"one"), (k2, b"two")]), &keys).unwrap();
        assert_eq!(filtered, answer(&[(k1, b"one")]));
        // A failure (a locked agent) goes back as it is.
        assert_eq!(filter_identities(&[FAILURE], &keys).unwrap(), vec![FAILURE]);
        // An empty list is every key.
        assert_eq!(Keys::named::<&str>(&[]), Keys::all());
    }

    #[test]
    fn malformed_frames_and_answers_are_errors_never_panics() {
        assert!(frame_len([0, 0, 0, 0]).is_err());
        assert!(frame_len((MAX_FRAME as u32 + 1).to_be_bytes()).is_err());
        assert_eq!(frame_len((MAX_FRAME as u32).to_be_bytes()).unwrap(), MAX_FRAME);
        assert!(judge(&[], &Keys::all()).is_err());
        assert!(judge(&[SIGN_REQUEST, 0, 0, 0, 9, 1], &Keys::all()).is_err(), "a string past the end");
        assert!(judge(&[EXTENSION, 0xff, 0xff, 0xff, 0xff], &Keys::all()).is_err());
        let keys = Keys::named(&[fingerprint(b"k")]);
        assert!(filter_identities(&[IDENTITIES_ANSWER, 0, 0, 0, 2], &keys).is_err(), "fewer keys than said");
        let mut trailing = answer(&[(b"k", b"c")]);
        trailing.push(0);
        assert!(filter_identities(&trailing, &keys).is_err());
        assert_eq!(failure(), vec![0, 0, 0, 1, FAILURE]);
    }

    #[test]
    fn fingerprints_are_openssh_s() {
        // `ssh-keygen -lf` of this ed25519 public key prints this fingerprint.
        let blob = base64::engine::general_purpose::STANDARD
            .decode("AAAAC3NzaC1lZDI1NTE5AAAAIGy0i8FkFMROoVzfC+pus7rWfKAtQPzp06dTYG4uD37N")
            .unwrap();
        assert_eq!(fingerprint(&blob), "SHA256:5ATuSyjM1wuxOvn9wncCkgKJGsTnhxLmSwQR5Kxv3iY");
        assert!(is_fingerprint(&fingerprint(&blob)));
        assert!(!is_fingerprint("SHA256:short"));
        assert!(!is_fingerprint("MD5:aa:bb"));
    }
}
