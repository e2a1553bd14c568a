//! A TCP server of the launcher's on a thread of its own (the web front, the model-key broker):
//! a small tokio runtime around an already bound listener, stopped by [`Served::stop`] (or by
//! dropping it), which closes the open connections and waits for the thread.

use std::future::Future;
use std::net::TcpListener;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::error::{Error, Result};

/// A running server.
pub struct Served {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Served {
    /// Serve `listener` with `serve` on the thread `name`; `what` names the server in errors.
    /// `serve` returns when the receiver it is given fires.
    pub fn spawn<F, Fut>(what: &'static str, name: &str, listener: TcpListener, serve: F) -> Result<Served>
    where
        F: FnOnce(tokio::net::TcpListener, oneshot::Receiver<()>) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        listener.set_nonblocking(true).map_err(|e| Error::io("configure the socket of", what, e))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|e| Error::io("start the runtime of", what, e))?;
        let (tx, rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                rt.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => serve(l, rx).await,
                        Err(e) => eprintln!("ocsb: {what}: {e}"),
                    }
                });
                rt.shutdown_timeout(std::time::Duration::from_millis(500));
            })
            .map_err(|e| Error::io("start a thread for", what, e))?;
        Ok(Served { stop: Some(tx), thread: Some(thread) })
    }

    /// Stop accepting, close open connections and wait for the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown();
    }
}
