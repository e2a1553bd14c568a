//! The squid backend's lifecycle: the container `opencode-sandbox-egress-<name>` with the
//! rendered squid.conf in a bind-mounted directory, reloaded by `squid -k reconfigure` only after
//! `squid -k parse` accepted the exact file.
//!
//! The lifecycle API is synchronous; each operation runs its Docker calls on a private
//! current-thread runtime.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bollard::Docker;
use ocsb_policy::egress::Policy;
use sha2::{Digest, Sha256};

use super::{Progress, container, image};
use crate::backend::{Lifecycle, Observed, Up};
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::listen::ListenPlan;
use crate::logline::{LogsOptions, emit};
use crate::paths::{EgressPaths, write_atomic};
use crate::report::UpAction;

pub(crate) struct Squid<'a> {
    inst: &'a Instance,
    paths: EgressPaths,
    /// The container's name.
    name: String,
}

impl<'a> Squid<'a> {
    pub(crate) fn new(inst: &'a Instance) -> Self {
        Self { inst, paths: inst.paths(), name: container::container_name(&inst.name) }
    }

    fn conf(&self, policy: &Policy, plan: &ListenPlan) -> Result<String> {
        crate::render::squid_conf(policy, plan, &self.inst.squid_overrides)
    }

    /// Where `up` records the hash of the config squid took (read back by `status`).
    fn applied_hash_file(&self) -> std::path::PathBuf {
        self.paths.squid_dir().join("applied.hash")
    }

    /// Names the project in the container's labels without writing its path there.
    fn project_hash(&self) -> String {
        hex(&Sha256::digest(self.inst.project_dir.to_string_lossy().as_bytes())[..8])
    }

    async fn up_async(&self, policy: &Policy, plan: &ListenPlan, progress: &Progress) -> Result<Up> {
        let docker = container::connect().await?;
        let name = &self.name;
        let dir = self.paths.squid_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("cannot create", &dir, e))?;
        {
            use std::os::unix::fs::PermissionsExt;
            // squid in the container runs as uid 13 and must read this directory.
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
        }
        let conf = self.conf(policy, plan)?;
        let hash = sha256(&conf);
        let new = dir.join("squid.conf.new");
        write_atomic(&new, conf.as_bytes()).map_err(|e| Error::io("cannot write", &new, e))?;
        set_readable(&new);
        let action = match container::inspect(&docker, name).await {
            Some(st) if st.running => {
                self.reconfigure(&docker, &new, &hash).await?;
                UpAction::Reloaded
            }
            existing => {
                if existing.is_some() {
                    container::remove(&docker, name).await?;
                }
                self.create(&docker, &new, &hash, progress).await?;
                // "healthy" means squid wrote its pid file; the listening socket comes a moment
                // later. `up` promises a filter that accepts connections, so wait for that too.
                wait_listening(&plan.addrs).await?;
                UpAction::Started
            }
        };
        Ok(Up { action, listen: plan.addrs.clone(), config_hash: hash, process: None })
    }

    /// A running squid: validate the exact new file first; only then make it live and
    /// reconfigure.
    async fn reconfigure(&self, docker: &Docker, new: &Path, hash: &str) -> Result<()> {
        let (code, out) = container::exec(
            docker,
            &self.name,
            &["-k", "parse", "-f", &format!("{}/squid.conf.new", image::CONF_DIR)],
        )
        .await?;
        if let Err(e) = container::parse_ok(code, &out) {
            let _ = std::fs::remove_file(new);
            return Err(e);
        }
        self.install(new)?;
        let (code, out) =
            container::exec(docker, &self.name, &["-k", "reconfigure", "-f", image::CONF]).await?;
        if code != 0 {
            return Err(Error::SquidConfig { output: format!("squid -k reconfigure (exit {code}): {out}") });
        }
        self.record(hash);
        Ok(())
    }

    /// No running squid: make sure of the image, validate the new file in a throwaway
    /// container, then create and start the real one.
    async fn create(&self, docker: &Docker, new: &Path, hash: &str, progress: &Progress) -> Result<()> {
        image::ensure(docker, self.inst.image_source, progress).await?;
        progress("checking the rendered squid.conf with `squid -k parse`");
        if let Err(e) = container::parse_in_throwaway(docker, &self.paths.squid_dir(), "squid.conf.new").await
        {
            let _ = std::fs::remove_file(new);
            return Err(e);
        }
        self.install(new)?;
        self.record(hash);
        progress(&format!("starting {}", self.name));
        let labels = image::labels(&self.inst.name, &self.project_hash(), hash);
        container::create_and_start(docker, &self.name, &self.paths.squid_dir(), labels).await
    }

    /// Make the validated file the live squid.conf.
    fn install(&self, new: &Path) -> Result<()> {
        std::fs::rename(new, self.paths.squid_conf())
            .map_err(|e| Error::io("cannot install", self.paths.squid_conf(), e))
    }

    /// Remember the hash of the config squid runs with, once it does. Best effort: without the
    /// file, `status` falls back to the container's label.
    fn record(&self, hash: &str) {
        let _ = std::fs::write(self.applied_hash_file(), hash);
    }

    async fn logs_async(&self, opts: &LogsOptions, out: &mut dyn Write) -> Result<()> {
        use bollard::query_parameters::LogsOptionsBuilder;
        use futures_util::StreamExt;
        let werr = |e: std::io::Error| Error::net("cannot write the log", e);
        let docker = container::connect().await?;
        let name = &self.name;
        let tail = opts.tail.map(|n| n.to_string()).unwrap_or_else(|| "all".into());
        let o = LogsOptionsBuilder::default()
            .follow(opts.follow)
            .stdout(true)
            .stderr(!opts.json)
            .tail(&tail)
            .build();
        let mut s = docker.logs(name, Some(o));
        let mut pending = String::new();
        while let Some(item) = s.next().await {
            let chunk = item.map_err(|e| {
                Error::docker(
                    format!("cannot read the logs of {name}: {e}"),
                    "is the filter up? `ocsb egress status`",
                )
            })?;
            pending.push_str(&chunk.to_string());
            while let Some(i) = pending.find('\n') {
                let line: String = pending.drain(..=i).collect();
                emit(&line, opts, out).map_err(werr)?;
            }
            out.flush().map_err(werr)?;
        }
        Ok(())
    }
}

impl Lifecycle for Squid<'_> {
    fn up(&self, policy: &Policy, plan: &ListenPlan, progress: &Progress) -> Result<Up> {
        runtime()?.block_on(self.up_async(policy, plan, progress))
    }

    fn down(&self) -> Result<bool> {
        runtime()?.block_on(async {
            let docker = container::connect().await?;
            container::remove(&docker, &self.name).await
        })
    }

    fn observe(&self) -> Result<Option<Observed>> {
        let found = runtime()?.block_on(async {
            let docker = container::connect().await?;
            Ok::<_, Error>(container::inspect(&docker, &self.name).await)
        })?;
        Ok(found.map(|c| Observed {
            running: c.running,
            listen: None,
            running_hash: std::fs::read_to_string(self.applied_hash_file())
                .ok()
                .or_else(|| c.labels.get(image::CONFIG_HASH_LABEL).cloned()),
            process: Some(c.id.chars().take(12).collect()),
            health: c.health,
        }))
    }

    fn render(&self, policy: &Policy, plan: &ListenPlan) -> Result<String> {
        self.conf(policy, plan)
    }

    fn config_hash(&self, policy: &Policy, plan: &ListenPlan) -> Option<String> {
        self.conf(policy, plan).ok().map(|c| sha256(&c))
    }

    fn logs(&self, opts: &LogsOptions, out: &mut dyn Write) -> Result<()> {
        runtime()?.block_on(self.logs_async(opts, out))
    }
}

/// A runtime for one operation: the lifecycle API is synchronous, bollard is not.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::net("cannot start the async runtime", e))
}

/// Wait (up to 10 s) until the filter accepts on its loopback listen addresses. Only loopback
/// is probed: it says squid is up, and it keeps this check from sending anything anywhere else.
async fn wait_listening(addrs: &[SocketAddr]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for a in addrs.iter().filter(|a| a.ip().is_loopback()) {
        loop {
            if tokio::net::TcpStream::connect(a).await.is_ok() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::docker(
                    format!("the squid container is healthy but nothing accepts on {a}"),
                    "see `ocsb egress logs`; a busy port needs another OCSB_EGRESS_PORT",
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

fn set_readable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The fingerprint of a squid.conf, as `up` records it and `status` compares it.
fn sha256(text: &str) -> String {
    format!("sha256:{}", hex(&Sha256::digest(text.as_bytes())))
}
