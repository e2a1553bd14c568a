//! Connection accounting: a hard cap, a cap per client address, and eviction of idle
//! connections and quiet tunnels when a cap is reached.
//!
//! *Why*: a client (the agent, or one container) that opens thousands of idle connections or
//! CONNECT tunnels it never uses must not lock everyone else out. At a cap, the oldest idle
//! connection is closed to make room, else the tunnel (or request waiting for its server) that
//! has been quiet longest, if quiet for at least [`Table::quiet_tunnel`]; only when every
//! connection is in use is the new one refused. Each event is logged by the caller.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// One accepted client connection.
pub struct Slot {
    client: IpAddr,
    /// Requests in progress (including open tunnels); 0 = idle.
    busy: AtomicUsize,
    /// A CONNECT tunnel, or a request waiting for its server's answer: may be closed when
    /// quiet (a client holding slots with requests to a server that never answers must not
    /// lock everyone out).
    quiet_evictable: AtomicBool,
    /// When bytes last moved (milliseconds since the table's epoch).
    active_ms: AtomicU64,
    /// Signalled to make the connection (or its tunnel) task drop the connection.
    pub kill: Notify,
    table: Weak<Table>,
}

impl Slot {
    pub fn enter(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Ordering::SeqCst);
        BusyGuard(self.clone())
    }
    fn idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
    }
    /// The connection became a tunnel.
    pub fn set_tunnel(&self) {
        self.quiet_evictable.store(true, Ordering::SeqCst);
        self.touch();
    }
    /// A request is waiting for its server's answer (`true`), or has it (`false`).
    pub fn set_waiting(&self, waiting: bool) {
        self.quiet_evictable.store(waiting, Ordering::SeqCst);
        self.touch();
    }
    /// Bytes moved (called by the tunnel relay).
    pub fn touch(&self) {
        if let Some(t) = self.table.upgrade() {
            self.active_ms.store(t.now_ms(), Ordering::Relaxed);
        }
    }
    /// How long no bytes have moved.
    pub fn quiet_for(&self) -> Duration {
        let now = self.table.upgrade().map(|t| t.now_ms()).unwrap_or(0);
        Duration::from_millis(now.saturating_sub(self.active_ms.load(Ordering::Relaxed)))
    }
    fn quiet_tunnel(&self, min: Duration) -> Option<Duration> {
        let q = self.quiet_for();
        (self.quiet_evictable.load(Ordering::SeqCst) && q >= min).then_some(q)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(t) = self.table.upgrade() {
            t.open.fetch_sub(1, Ordering::SeqCst);
            let mut per = t.per_client.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = per.get_mut(&self.client) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    per.remove(&self.client);
                }
            }
        }
    }
}

/// Marks a slot busy while alive (a request being answered or a tunnel open).
pub struct BusyGuard(Arc<Slot>);

impl BusyGuard {
    /// The connection this guard keeps busy.
    pub fn slot(&self) -> Arc<Slot> {
        self.0.clone()
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct Table {
    cap: usize,
    per_client_cap: usize,
    /// A tunnel quiet this long may be closed to admit a new connection.
    pub quiet_tunnel: Duration,
    epoch: Instant,
    open: AtomicUsize,
    per_client: Mutex<HashMap<IpAddr, usize>>,
    slots: Mutex<VecDeque<Weak<Slot>>>,
}

/// What happened when a connection asked for a slot.
pub enum Admit {
    Admitted(Arc<Slot>),
    /// Admitted after closing an idle connection.
    AdmittedEvicting(Arc<Slot>),
    /// Every connection is busy: the new one is closed.
    Refused,
}

impl Table {
    pub fn new(cap: usize, per_client_cap: usize, quiet_tunnel: Duration) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            per_client_cap: per_client_cap.clamp(1, cap.max(1)),
            quiet_tunnel,
            epoch: Instant::now(),
            open: AtomicUsize::new(0),
            per_client: Mutex::new(HashMap::new()),
            slots: Mutex::new(VecDeque::new()),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// A slot for a new connection from `client`, making room if a cap is reached.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Admit {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|w| w.strong_count() > 0);
        let mine =
            self.per_client.lock().unwrap_or_else(|p| p.into_inner()).get(&client).copied().unwrap_or(0);
        let mut evicted = false;
        // The per-client cap makes room among the client's own connections only, so one client
        // never closes another's.
        let over = if mine >= self.per_client_cap {
            Some(Some(client))
        } else if self.open.load(Ordering::SeqCst) >= self.cap {
            Some(None)
        } else {
            None
        };
        if let Some(only) = over {
            let live: Vec<Arc<Slot>> = slots
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|s| only.is_none_or(|c| s.client == c))
                .collect();
            let victim = live.iter().find(|s| s.idle()).cloned().or_else(|| {
                live.iter()
                    .filter_map(|s| s.quiet_tunnel(self.quiet_tunnel).map(|q| (q, s)))
                    .max_by_key(|(q, _)| *q)
                    .map(|(_, s)| s.clone())
            });
            match victim {
                Some(v) => {
                    v.kill.notify_one();
                    slots.retain(|w| !std::ptr::eq(w.as_ptr(), Arc::as_ptr(&v)));
                    evicted = true;
                }
                None => return Admit::Refused,
            }
        }
        self.open.fetch_add(1, Ordering::SeqCst);
        *self.per_client.lock().unwrap_or_else(|p| p.into_inner()).entry(client).or_default() += 1;
        let slot = Arc::new(Slot {
            client,
            busy: AtomicUsize::new(0),
            quiet_evictable: AtomicBool::new(false),
            active_ms: AtomicU64::new(self.now_ms()),
            kill: Notify::new(),
            table: Arc::downgrade(self),
        });
        slots.push_back(Arc::downgrade(&slot));
        if evicted { Admit::AdmittedEvicting(slot) } else { Admit::Admitted(slot) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(a: Admit) -> Arc<Slot> {
        match a {
            Admit::Admitted(s) => s,
            _ => panic!("expected a plain admission"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn at_the_cap_an_idle_connection_is_evicted_and_busy_ones_are_not() {
        let t = Table::new(2, 2, Duration::from_secs(60));
        let a = admitted(t.admit(ip("127.0.0.1")));
        let b = admitted(t.admit(ip("127.0.0.1")));
        let _busy_a = a.enter();
        // b is idle: it is evicted to make room.
        let c = match t.admit(ip("127.0.0.1")) {
            Admit::AdmittedEvicting(s) => s,
            _ => panic!("third should evict"),
        };
        drop(b);
        let _busy_c = c.enter();
        // a and c are busy: a new connection is refused.
        assert!(matches!(t.admit(ip("127.0.0.1")), Admit::Refused));
        assert_eq!(t.open(), 2);
    }

    #[test]
    fn a_quiet_tunnel_makes_room_and_an_active_one_does_not() {
        let t = Table::new(2, 2, Duration::ZERO);
        let a = admitted(t.admit(ip("127.0.0.1")));
        let b = admitted(t.admit(ip("127.0.0.1")));
        let (_ga, _gb) = (a.enter(), b.enter());
        a.set_tunnel();
        b.set_tunnel();
        std::thread::sleep(Duration::from_millis(5));
        b.touch();
        // Both are tunnels; a has been quiet longer, so a goes.
        assert!(matches!(t.admit(ip("127.0.0.1")), Admit::AdmittedEvicting(_)));
        assert!(!t.slots.lock().unwrap().iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&a))));
        // With a real quiet period, fresh tunnels are kept.
        let t = Table::new(1, 1, Duration::from_secs(60));
        let x = admitted(t.admit(ip("127.0.0.1")));
        let _gx = x.enter();
        x.set_tunnel();
        assert!(matches!(t.admit(ip("127.0.0.1")), Admit::Refused));
    }

    #[test]
    fn a_request_waiting_quietly_for_its_server_makes_room() {
        let t = Table::new(1, 1, Duration::ZERO);
        let a = admitted(t.admit(ip("127.0.0.1")));
        let _g = a.enter();
        assert!(matches!(t.admit(ip("127.0.0.1")), Admit::Refused), "a request being answered stays");
        a.set_waiting(true);
        assert!(matches!(t.admit(ip("127.0.0.1")), Admit::AdmittedEvicting(_)));
    }

    #[test]
    fn one_client_at_its_cap_does_not_push_out_another() {
        let t = Table::new(4, 2, Duration::from_secs(60));
        let other = admitted(t.admit(ip("172.17.0.2")));
        let a = admitted(t.admit(ip("172.17.0.3")));
        let b = admitted(t.admit(ip("172.17.0.3")));
        let (_ga, _gb) = (a.enter(), b.enter());
        // 172.17.0.3 is at its cap with busy connections: refused, although the table has room
        // and the other client's connection is idle.
        assert!(matches!(t.admit(ip("172.17.0.3")), Admit::Refused));
        assert!(t.slots.lock().unwrap().iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&other))));
        // Other clients are still served.
        let _c = admitted(t.admit(ip("127.0.0.1")));
        assert_eq!(t.open(), 4);
    }
}
