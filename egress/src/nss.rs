//! How the system looks up a host name, as policy: the hosts file's entries and the order of
//! `/etc/nsswitch.conf`'s `hosts:` line. The resolver ([`crate::builtin::dial::Resolver`], which
//! the filter and the isolated network's DNS stub share) enforces it.
//!
//! *Why*: a name the hosts file knows (an internal host, a VPN's name, `myapp.test`) is what every
//! other program on the machine reaches at that address, and it is never sent to a name server.
//! A resolver that asks the name server as well waits for its answer (a silent server: every
//! request fails after the timeout), sends the internal name to the public resolver, and may
//! dial the public answer instead of the hosts file's address.
//!
//! The sources of the `hosts:` line:
//! - `files`: the hosts file. A name it lists (in either family) is answered from it alone; the
//!   other family is simply absent, as glibc answers.
//! - `dns`: the name servers of `/etc/resolv.conf`.
//! - `resolve` (systemd-resolved): taken as `files` then `dns` at its place. resolved answers
//!   the hosts file's names itself, and its stub (127.0.0.53) is resolv.conf's name server.
//! - anything else (`myhostname`, `mymachines`, `mdns4_minimal`, `wins`, `ldap`, …) is skipped
//!   with its actions: the filter cannot load NSS modules (it is linked statically). The names
//!   only those answer (the machine's own, `.local` by multicast) are asked of the next source,
//!   as squid does, which knows only a hosts file and DNS too.
//!
//! Without the file, without a `hosts:` line, or with one that cannot be read or names neither
//! `files`, `dns` nor `resolve`, the order is `files dns`, what distributions ship and musl
//! always does (a fallback that asked DNS first would send hosts-file names out). The file is
//! read when the resolver starts; the hosts file is read again whenever it changes.

use std::collections::HashMap;
use std::net::IpAddr;

/// Where an answer comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Files,
    Dns,
}

/// What a source said, as NSS names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Addresses found.
    Success,
    /// The source works and does not know the name.
    NotFound,
    /// The source cannot be used (no hosts file).
    Unavail,
    /// A temporary failure (the name server did not answer in time, or failed).
    TryAgain,
}

/// What to do after a source answered with a status (`[STATUS=ACTION]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Return,
    Continue,
}

/// One source of the `hosts:` line and its actions for the statuses other than success (a
/// source that found addresses always ends the lookup).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub source: Source,
    not_found: Action,
    unavail: Action,
    try_again: Action,
}

impl Step {
    const fn new(source: Source) -> Self {
        Self { source, not_found: Action::Continue, unavail: Action::Continue, try_again: Action::Continue }
    }

    /// Whether the lookup ends after this step answered `status`.
    pub fn stops_at(&self, status: Status) -> bool {
        let a = match status {
            Status::Success => Action::Return,
            Status::NotFound => self.not_found,
            Status::Unavail => self.unavail,
            Status::TryAgain => self.try_again,
        };
        a == Action::Return
    }
}

/// The order in which sources are asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    steps: Vec<Step>,
}

impl Default for Order {
    /// `files dns`.
    fn default() -> Self {
        Self { steps: vec![Step::new(Source::Files), Step::new(Source::Dns)] }
    }
}

impl Order {
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The order `nsswitch.conf` gives (its text; `None`: no file), and why the default was
    /// taken instead when the file has a `hosts:` line that could not be used.
    pub fn from_nsswitch(text: Option<&str>) -> (Self, Option<String>) {
        let Some(line) = text.and_then(hosts_line) else { return (Self::default(), None) };
        match parse_services(&line) {
            Ok(o) if !o.steps.is_empty() => (o, None),
            Ok(_) => (
                Self::default(),
                Some(format!("`hosts: {line}` names neither files, dns nor resolve; using `files dns`")),
            ),
            Err(e) => (Self::default(), Some(format!("`hosts: {line}`: {e}; using `files dns`"))),
        }
    }
}

/// The services of the first `hosts:` line, comments removed.
fn hosts_line(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let l = l.split('#').next().unwrap_or_default().trim();
        let (db, rest) = l.split_once(':')?;
        (db.trim() == "hosts").then(|| rest.trim().to_string())
    })
}

fn parse_services(line: &str) -> Result<Order, String> {
    let mut steps: Vec<Step> = Vec::new();
    // The steps of the service just read, which a following `[...]` applies to.
    let mut last: Vec<usize> = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(group) = rest.strip_prefix('[') {
            let (inside, after) = group.split_once(']').ok_or("a `[` without its `]`")?;
            for (negate, status, action) in criteria(inside)? {
                for &i in &last {
                    let s = &mut steps[i];
                    for (st, slot) in [
                        (Status::Success, None),
                        (Status::NotFound, Some(&mut s.not_found)),
                        (Status::Unavail, Some(&mut s.unavail)),
                        (Status::TryAgain, Some(&mut s.try_again)),
                    ] {
                        if let Some(slot) = slot
                            && (st == status) != negate
                        {
                            *slot = action;
                        }
                    }
                }
            }
            rest = after.trim_start();
            continue;
        }
        let end = rest.find(|c: char| c.is_whitespace() || c == '[').unwrap_or(rest.len());
        let (word, after) = rest.split_at(end);
        rest = after.trim_start();
        let sources: &[Source] = match word.to_ascii_lowercase().as_str() {
            "files" => &[Source::Files],
            "dns" => &[Source::Dns],
            "resolve" => &[Source::Files, Source::Dns],
            _ => &[],
        };
        last.clear();
        for &source in sources {
            // A source asked once already gives the same answer again: it is not asked twice.
            if steps.iter().all(|s| s.source != source) {
                steps.push(Step::new(source));
                last.push(steps.len() - 1);
            }
        }
        // `resolve`'s actions are those of its name-server step: its hosts-file step finds
        // what the hosts file lists, and goes on otherwise.
        if sources.len() > 1 {
            last.retain(|&i| steps[i].source == Source::Dns);
        }
    }
    Ok(Order { steps })
}

/// `[!STATUS=action ...]`'s items: (negated, status, action). Spaces around `=` are allowed.
fn criteria(inside: &str) -> Result<Vec<(bool, Status, Action)>, String> {
    let joined = inside.split('=').map(str::trim).collect::<Vec<_>>().join("=");
    joined
        .split_whitespace()
        .map(|item| {
            let (status, action) =
                item.split_once('=').ok_or_else(|| format!("`{item}` is not STATUS=ACTION"))?;
            let (negate, status) = match status.strip_prefix('!') {
                Some(s) => (true, s),
                None => (false, status),
            };
            let status = match status.to_ascii_uppercase().as_str() {
                "SUCCESS" => Status::Success,
                "NOTFOUND" => Status::NotFound,
                "UNAVAIL" => Status::Unavail,
                "TRYAGAIN" => Status::TryAgain,
                other => return Err(format!("unknown status `{other}`")),
            };
            let action = match action.to_ascii_lowercase().as_str() {
                "return" => Action::Return,
                // `merge` joins group entries; for hosts it goes on like `continue`.
                "continue" | "merge" => Action::Continue,
                other => return Err(format!("unknown action `{other}`")),
            };
            Ok((negate, status, action))
        })
        .collect()
}

/// The key a name is found under: ASCII lower case, without the final dot (`Host.Test.` and
/// `host.test` are one name, as in DNS).
pub fn key(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// The hosts file: each name (and alias) with its addresses in the file's order, both
/// families, duplicates dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hosts {
    names: HashMap<String, Vec<IpAddr>>,
}

impl Hosts {
    /// Parses `/etc/hosts`: `ADDRESS NAME [ALIAS...]`, `#` to the end of the line a comment.
    /// A line whose address is not an IPv4 or IPv6 address (a zone index `%eth0`, garbage) is
    /// skipped, as glibc skips it. `::ffff:a.b.c.d` is the IPv4 address it carries, as the
    /// filter judges every address.
    pub fn parse(text: &str) -> Self {
        let mut names: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for line in text.lines() {
            let mut words = line.split('#').next().unwrap_or_default().split_whitespace();
            let Some(Ok(ip)) = words.next().map(str::parse::<IpAddr>) else { continue };
            let ip = crate::builtin::dial::canonical(ip);
            for name in words {
                let k = key(name);
                if k.is_empty() {
                    continue;
                }
                let addrs = names.entry(k).or_default();
                if !addrs.contains(&ip) {
                    addrs.push(ip);
                }
            }
        }
        Self { names }
    }

    /// The addresses of `name`, or `None` if the file does not list it.
    pub fn lookup(&self, name: &str) -> Option<&[IpAddr]> {
        self.names.get(&key(name)).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn order(text: &str) -> Vec<Source> {
        let (o, note) = Order::from_nsswitch(Some(text));
        assert_eq!(note, None, "{text}");
        o.steps().iter().map(|s| s.source).collect()
    }

    #[test]
    fn the_hosts_file_is_parsed_as_glibc_reads_it() {
        let h = Hosts::parse(
            "# a comment\n\
             127.0.0.1\tlocalhost\n\
             \n\
             192.0.2.7   App.Corp.TEST  app   # the app, with its alias\n\
             2001:db8::7 app.corp.test\n\
             192.0.2.7   app.corp.test\n\
             ::ffff:198.51.100.9 mapped.test\n\
             fe80::1%eth0 zoned.test\n\
             not-an-address broken.test\n\
             203.0.113.5 dotted.test.\n\
             #198.51.100.1 commented.test\n",
        );
        assert_eq!(h.lookup("app.corp.test"), Some(&[ip("192.0.2.7"), ip("2001:db8::7")][..]));
        assert_eq!(h.lookup("APP.corp.test."), h.lookup("app.corp.test"));
        assert_eq!(h.lookup("app"), Some(&[ip("192.0.2.7")][..]));
        assert_eq!(h.lookup("mapped.test"), Some(&[ip("198.51.100.9")][..]));
        assert_eq!(h.lookup("dotted.test"), Some(&[ip("203.0.113.5")][..]));
        assert_eq!(h.lookup("localhost"), Some(&[ip("127.0.0.1")][..]));
        for absent in ["zoned.test", "broken.test", "commented.test", "the", "corp.test", ""] {
            assert_eq!(h.lookup(absent), None, "{absent}");
        }
    }

    #[test]
    fn files_come_first_without_a_usable_hosts_line() {
        let default = vec![Source::Files, Source::Dns];
        for text in [None, Some(""), Some("passwd: files\n# hosts: dns files\n")] {
            let (o, note) = Order::from_nsswitch(text);
            assert_eq!(o.steps().iter().map(|s| s.source).collect::<Vec<_>>(), default);
            assert_eq!(note, None);
        }
        for bad in ["hosts: files [NOTFOUND=return dns", "hosts: files [BOGUS=return] dns", "hosts: ldap"] {
            let (o, note) = Order::from_nsswitch(Some(bad));
            assert_eq!(o, Order::default(), "{bad}");
            assert!(note.is_some_and(|n| n.contains("files dns")), "{bad}");
        }
    }

    #[test]
    fn the_hosts_line_gives_the_order() {
        assert_eq!(order("hosts: files dns\n"), [Source::Files, Source::Dns]);
        assert_eq!(order("passwd: files\nhosts:   dns files  # dns first\n"), [Source::Dns, Source::Files]);
        assert_eq!(order("hosts: dns\n"), [Source::Dns]);
        assert_eq!(order("hosts: files\n"), [Source::Files]);
        // Debian/Ubuntu, Fedora, Arch.
        assert_eq!(
            order("hosts: files mdns4_minimal [NOTFOUND=return] dns myhostname"),
            [Source::Files, Source::Dns]
        );
        assert_eq!(
            order("hosts: files myhostname mdns4_minimal [NOTFOUND=return] resolve [!UNAVAIL=return] dns"),
            [Source::Files, Source::Dns]
        );
        assert_eq!(
            order("hosts: mymachines resolve [!UNAVAIL=return] files myhostname dns"),
            [Source::Files, Source::Dns]
        );
    }

    #[test]
    fn actions_decide_whether_the_next_source_is_asked() {
        // The skipped source's `[NOTFOUND=return]` is not the hosts file's.
        let (o, _) = Order::from_nsswitch(Some("hosts: files mdns4_minimal [NOTFOUND=return] dns"));
        assert!(!o.steps()[0].stops_at(Status::NotFound));
        // `files [NOTFOUND=return] dns`: a name not in the hosts file is never asked of DNS.
        let (o, _) = Order::from_nsswitch(Some("hosts: files [ NOTFOUND = return ] dns"));
        assert!(o.steps()[0].stops_at(Status::NotFound));
        assert!(!o.steps()[0].stops_at(Status::Unavail));
        // `dns [!UNAVAIL=return] files`: a silent name server ends the lookup.
        let (o, _) = Order::from_nsswitch(Some("hosts: dns [!UNAVAIL=return] files"));
        assert_eq!(o.steps()[0].source, Source::Dns);
        assert!(o.steps()[0].stops_at(Status::TryAgain));
        assert!(o.steps()[0].stops_at(Status::NotFound));
        assert!(!o.steps()[0].stops_at(Status::Unavail));
        // `resolve`'s actions are its DNS step's; its hosts-file step goes on as usual.
        let (o, _) = Order::from_nsswitch(Some("hosts: resolve [!UNAVAIL=return] dns files"));
        assert_eq!(o.steps().len(), 2);
        assert!(!o.steps()[0].stops_at(Status::NotFound));
        assert!(o.steps()[1].stops_at(Status::NotFound));
        // Found addresses always end the lookup.
        assert!(Step::new(Source::Dns).stops_at(Status::Success));
    }
}
