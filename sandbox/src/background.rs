//! Work of a start's end that nothing after it waits for, run beside what does: removing the
//! agent's git directories and stopping the isolated network's relays, while the launcher
//! looks at the checkouts. Each is waited for before the launcher returns: what a thread
//! still held (a session's lock, a published port) is let go before the user's prompt is back.

use std::thread::JoinHandle;

/// Work on a thread of its own, waited for when this is dropped (or by [`Background::wait`]).
pub struct Background(Option<JoinHandle<()>>);

impl Background {
    /// Runs `f` on a thread named `name`, or here, before this returns, when no thread can be
    /// started.
    pub fn start(name: &str, f: Box<dyn FnOnce() + Send>) -> Background {
        // `f` goes to the thread through a channel, so that it is still here to run when the
        // thread cannot be started.
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let started = std::thread::Builder::new().name(name.into()).spawn(move || {
            if let Ok(f) = rx.recv() {
                f();
            }
        });
        match started {
            Ok(t) => {
                let _ = tx.send(f);
                Background(Some(t))
            }
            Err(_) => {
                f();
                Background(None)
            }
        }
    }

    /// Waits until the work is done.
    pub fn wait(mut self) {
        self.join();
    }

    fn join(&mut self) {
        if let Some(t) = self.0.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn the_work_is_done_once_waited_for_or_dropped() {
        for wait in [true, false] {
            let done = Arc::new(AtomicBool::new(false));
            let d = done.clone();
            let b = Background::start(
                "test",
                Box::new(move || {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    d.store(true, Ordering::SeqCst);
                }),
            );
            if wait {
                b.wait();
            } else {
                drop(b);
            }
            assert!(done.load(Ordering::SeqCst));
        }
    }
}
