//! The import gate's rule: what of the agent's git directory may reach the user's repository.
//!
//! Inside the sandbox the agent commits into a git directory of its own; the launcher reads that
//! directory's refs itself, lists what the new commits change, and asks this module whether each
//! ref update may reach the user's repository, be held aside for the user to look at, or be left
//! alone. Everything here is pure: bytes and facts in, decisions out.
//!
//! * [`refs`]: object ids, ref names and the ref files as git writes them, read strictly: a ref
//!   file git would not write is an error naming its line, never a guess.
//! * [`paths`]: the tree paths git itself treats specially (`.git` in its case-folded, HFS+ and
//!   NTFS forms, `.`/`..`), and the ones always held (`.gitmodules`, ocsb's own settings).
//! * [`mod@judge`]: the verdict on one ref update: import, hold with reasons, or skip.
//! * [`held`]: where held updates wait (`refs/ocsb/held/<session>/...`) and how the user takes
//!   one without ever having a ref of theirs forced.

pub mod held;
pub mod judge;
pub mod paths;
pub mod refs;

pub use held::{Accept, Session, accept, held_of, held_ref};
pub use judge::{Change, CommitChanges, HeldPaths, Reason, RefUpdate, SkipWhy, Verdict, judge};
pub use paths::{Special, always_held, is_dotgitmodules, special_entry, special_path};
pub use refs::{ObjectFormat, Oid, RefKind, RefName, RefValue, parse_packed_refs, parse_ref_file};
