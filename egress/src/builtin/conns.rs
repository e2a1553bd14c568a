//! Connection accounting: a hard cap, and eviction of idle connections when the cap is reached.
//!
//! *Why*: a client (the agent) that opens thousands of idle connections must not lock everyone
//! else out. At the cap, the oldest idle connection is closed to make room; only when every
//! connection is busy is the new one refused. Both events are logged.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// One accepted client connection.
pub struct Slot {
    /// Requests in progress (including open tunnels); 0 = idle.
    busy: AtomicUsize,
    /// Signalled to make the connection task drop the connection.
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
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(t) = self.table.upgrade() {
            t.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Marks a slot busy while alive (a request being answered or a tunnel open).
pub struct BusyGuard(Arc<Slot>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct Table {
    cap: usize,
    open: AtomicUsize,
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
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self { cap: cap.max(1), open: AtomicUsize::new(0), slots: Mutex::new(VecDeque::new()) })
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    pub fn admit(self: &Arc<Self>) -> Admit {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut evicted = false;
        if self.open.load(Ordering::SeqCst) >= self.cap {
            slots.retain(|w| w.strong_count() > 0);
            let victim = slots.iter().position(|w| w.upgrade().is_some_and(|s| s.idle()));
            match victim.and_then(|i| slots.remove(i)).and_then(|w| w.upgrade()) {
                Some(v) => {
                    v.kill.notify_one();
                    // The victim's count is released when its task drops it; count it as gone
                    // now so the cap is not exceeded by more than the in-flight teardown.
                    evicted = true;
                }
                None => return Admit::Refused,
            }
        }
        self.open.fetch_add(1, Ordering::SeqCst);
        let slot =
            Arc::new(Slot { busy: AtomicUsize::new(0), kill: Notify::new(), table: Arc::downgrade(self) });
        slots.push_back(Arc::downgrade(&slot));
        if slots.len() > 2 * self.cap {
            slots.retain(|w| w.strong_count() > 0);
        }
        if evicted { Admit::AdmittedEvicting(slot) } else { Admit::Admitted(slot) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_an_idle_connection_is_evicted_and_busy_ones_are_not() {
        let t = Table::new(2);
        let a = match t.admit() {
            Admit::Admitted(s) => s,
            _ => panic!("first"),
        };
        let b = match t.admit() {
            Admit::Admitted(s) => s,
            _ => panic!("second"),
        };
        let _busy_a = a.enter();
        // b is idle: it is evicted to make room.
        let c = match t.admit() {
            Admit::AdmittedEvicting(s) => s,
            _ => panic!("third should evict"),
        };
        drop(b);
        let _busy_c = c.enter();
        // a and c are busy: a new connection is refused.
        assert!(matches!(t.admit(), Admit::Refused));
        assert_eq!(t.open(), 2);
    }
}
