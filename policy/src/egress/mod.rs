//! The egress rule language: layers, parser, normalisation, the decision function and the
//! squid.conf renderer.
//!
//! The model is a **blacklist with exceptions**: what no rule refuses is allowed. The order of
//! evaluation is fixed (and is exactly the order of squid's `http_access` lines that
//! [`Policy::render_squid`] emits):
//!
//! 1. `connect host:port` rules (CONNECT tunnels to non-web ports; beat everything else),
//! 2. ports other than 80 and 443 are denied,
//! 3. `allow` / `allow-regex`,
//! 4. `block` / `block-regex`,
//! 5. names without a dot are denied (`localhost`, `intranet`, IPv6 literals),
//! 6. private networks and the filter host's own addresses are denied ([`PrivateSet`]; IPv6 forms
//!    that embed an IPv4 address are judged by it; a name is denied if **any** of its addresses
//!    is private — the anti-rebinding check),
//! 7. everything else is allowed.
//!
//! Both backends (squid and the built-in proxy) take their semantics from here, and a
//! differential test checks that squid and [`Policy::decide`] agree on the same raw requests.

mod compile;
mod curl;
mod decide;
mod host;
mod layers;
pub mod log;
mod lookup;
mod parse;
mod private;
mod regex_subset;
mod squid;
pub mod suggest;
mod target;
mod text;

pub use compile::{Dropped, Policy};
pub use decide::{Decision, Pending, RuleKind, Step, Verdict};
pub use host::{HostPattern, IpNet};
pub use layers::{EgressLayer, LayerText, load_layers};
pub use log::{LogLine, SQUID_LOGFORMAT, parse_note};
pub use lookup::finish_lookup;
pub use parse::{Expect, ExpectKind};
pub use private::{PrivateSet, is_private, private_networks};
pub use regex_subset::{RegexError, validate as validate_regex};
pub use squid::{ImageFiles, SquidOptions, loopback_clients, squid_parse_problems};
pub use target::{BadTarget, Host, Method, Target, inet_aton};
