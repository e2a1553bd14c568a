//! The `opencode-sandbox-egress` image: found, built from a Dockerfile, or assembled from the
//! host's squid package and imported — in that order of preference, never silently replaced by
//! something weaker.
//!
//! *Why recipe A exists*: no Docker registry may be reachable (offline hosts, CI). The host's
//! own squid binary, its `ldd` libraries and data files make a 24 MB image that imports in well
//! under a second (research §2.5). It works on Debian/Ubuntu layouts only; elsewhere the error
//! says to install squid, make a registry reachable, or use the builtin backend.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use bollard::Docker;
use bytes::Bytes;
use futures_util::StreamExt;

use crate::error::{Error, Result};

pub const IMAGE: &str = "opencode-sandbox-egress";
pub const TAG: &str = "latest";
/// Where the rendered configuration directory is mounted inside the container.
pub const CONF_DIR: &str = "/etc/opencode-sandbox-egress";
pub const CONF: &str = "/etc/opencode-sandbox-egress/squid.conf";
pub const SQUID_BIN: &str = "/usr/sbin/squid";
/// The proxy user of Debian's squid package; the container runs as this uid/gid.
pub const PROXY_UID: u64 = 13;

pub fn image_ref() -> String {
    format!("{IMAGE}:{TAG}")
}

/// Where the image comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// An existing image; else the Dockerfile when its base image is present locally; else the
    /// host's squid; else the Dockerfile with a pull (needs a registry).
    Auto,
    /// Only recipe A (the host's squid package, no registry).
    HostSquid,
    /// Only the Dockerfile (`debian:bookworm-slim` + `apt-get install squid`; needs a registry
    /// or the base image, and a Debian mirror).
    Dockerfile,
}

/// Progress messages while an image is built or imported.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

const DOCKERFILE: &str = "FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends squid squid-langpack && rm -rf /var/lib/apt/lists/*
USER 13:13
LABEL dev.opencode-sandbox.component=egress dev.opencode-sandbox.image-recipe=dockerfile
ENTRYPOINT [\"/usr/sbin/squid\", \"-N\", \"-f\", \"/etc/opencode-sandbox-egress/squid.conf\"]
";

/// Make sure the image exists; returns the recipe label of the image in use.
pub async fn ensure(docker: &Docker, source: ImageSource, progress: &Progress) -> Result<String> {
    if let Ok(img) = docker.inspect_image(&image_ref()).await {
        let recipe = img
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get("dev.opencode-sandbox.image-recipe").cloned())
            .unwrap_or_else(|| "unknown".into());
        return Ok(recipe);
    }
    match source {
        ImageSource::HostSquid => import_host_squid(docker, progress).await,
        ImageSource::Dockerfile => build_dockerfile(docker, progress).await,
        ImageSource::Auto => {
            if docker.inspect_image("debian:bookworm-slim").await.is_ok() {
                return build_dockerfile(docker, progress).await;
            }
            if Path::new(SQUID_BIN).exists() {
                return import_host_squid(docker, progress).await;
            }
            build_dockerfile(docker, progress).await.map_err(|e| {
                Error::docker(
                    format!("cannot get the image {}: no squid on this host to assemble it from, and the Dockerfile build failed: {e}", image_ref()),
                    "install squid on the host (apt-get install squid), make a Docker registry reachable, or use OCSB_EGRESS_BACKEND=builtin",
                )
            })
        }
    }
}

async fn build_dockerfile(docker: &Docker, progress: &Progress) -> Result<String> {
    progress(&format!("building image {} from a Dockerfile (debian:bookworm-slim + squid)", image_ref()));
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(DOCKERFILE.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    tar.append_data(&mut h, "Dockerfile", DOCKERFILE.as_bytes())
        .map_err(|e| Error::net("cannot pack the build context", e))?;
    let ctx = tar.into_inner().map_err(|e| Error::net("cannot pack the build context", e))?;
    let opts = bollard::query_parameters::BuildImageOptionsBuilder::default()
        .t(&image_ref())
        .rm(true)
        .forcerm(true)
        .build();
    let mut stream = docker.build_image(opts, None, Some(bollard::body_full(Bytes::from(ctx))));
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(s) = info.stream {
                    let s = s.trim();
                    if !s.is_empty() {
                        progress(s);
                    }
                }
                if let Some(e) = info.error_detail.and_then(|d| d.message) {
                    return Err(Error::docker(
                        format!("image build failed: {e}"),
                        "check that a registry and a Debian mirror are reachable, or install squid on the host",
                    ));
                }
            }
            Err(e) => {
                return Err(Error::docker(
                    format!("image build failed: {e}"),
                    "check that a registry and a Debian mirror are reachable, or install squid on the host",
                ));
            }
        }
    }
    Ok("dockerfile".into())
}

fn squid_version() -> Option<String> {
    let out = Command::new(SQUID_BIN).arg("-v").output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines().next()?.rsplit(' ').next().map(|v| v.trim().to_string())
}

/// Shared libraries a binary needs, as `ldd` resolves them (real paths, symlinks followed later).
fn ldd(bin: &str) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .map_err(|e| Error::io("cannot run ldd (install libc-bin) on", bin, e))?;
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

fn dir_header(mode: u32, uid: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_size(0);
    h.set_mode(mode);
    h.set_uid(uid);
    h.set_gid(uid);
    h.set_cksum();
    h
}

fn file_header(len: usize) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_size(len as u64);
    h.set_mode(0o644);
    h.set_cksum();
    h
}

/// Recipe A: a root filesystem (as a tar) made from the host's squid package.
pub fn host_squid_rootfs() -> Result<(Vec<u8>, usize)> {
    let missing = |p: &str| {
        Error::docker(
            format!("cannot assemble the squid image from this host: {p} is missing"),
            "apt-get install squid squid-langpack (Debian/Ubuntu), make a Docker registry reachable, or use OCSB_EGRESS_BACKEND=builtin",
        )
    };
    for p in [
        SQUID_BIN,
        "/usr/lib/squid/unlinkd",
        "/usr/share/squid/mime.conf",
        "/usr/share/squid-langpack/templates",
    ] {
        if !Path::new(p).exists() {
            return Err(missing(p));
        }
    }
    let io = |e: std::io::Error| Error::net("cannot assemble the image root filesystem", e);
    let mut t = tar::Builder::new(Vec::new());
    t.follow_symlinks(true);
    for (d, mode, uid) in [
        ("etc", 0o755, 0),
        ("etc/squid", 0o755, 0),
        ("etc/opencode-sandbox-egress", 0o755, 0),
        ("run", 0o755, 0),
        ("run/squid", 0o755, PROXY_UID),
        ("var", 0o755, 0),
        ("var/spool", 0o755, 0),
        ("var/spool/squid", 0o755, PROXY_UID),
        ("var/log", 0o755, 0),
        ("var/log/squid", 0o755, PROXY_UID),
        ("tmp", 0o1777, 0),
        ("usr", 0o755, 0),
        ("usr/share", 0o755, 0),
        ("usr/share/squid", 0o755, 0),
        ("usr/share/squid-langpack", 0o755, 0),
    ] {
        t.append_data(&mut dir_header(mode, uid), d, std::io::empty()).map_err(io)?;
    }
    let mut files = 0usize;
    let bins = [SQUID_BIN, "/usr/lib/squid/unlinkd"];
    let mut libs: Vec<PathBuf> = Vec::new();
    for bin in bins {
        for l in ldd(bin)? {
            if !libs.contains(&l) {
                libs.push(l);
            }
        }
    }
    // Every directory above a file, 0755 and root's: a daemon that makes a missing parent
    // itself may make it 0700 (the vfs driver does), and squid, running as `proxy`, could
    // then not reach its own binary.
    let mut parents: Vec<PathBuf> = Vec::new();
    for f in bins.iter().map(Path::new).chain(libs.iter().map(PathBuf::as_path)) {
        for a in f.ancestors().skip(1).filter(|a| a.parent().is_some()) {
            let rel = a.strip_prefix("/").unwrap_or(a).to_path_buf();
            if !parents.contains(&rel) {
                parents.push(rel);
            }
        }
    }
    parents.sort_by_key(|p| p.components().count());
    for d in parents.iter().filter(|d| !matches!(d.to_str(), Some("etc" | "usr" | "usr/share" | "var"))) {
        t.append_data(&mut dir_header(0o755, 0), d, std::io::empty()).map_err(io)?;
    }
    for bin in bins {
        t.append_path_with_name(bin, bin.trim_start_matches('/')).map_err(io)?;
        files += 1;
    }
    for l in &libs {
        let name = l.to_string_lossy().trim_start_matches('/').to_string();
        t.append_path_with_name(l, &name).map_err(io)?;
        files += 1;
    }
    t.append_path_with_name("/usr/share/squid/mime.conf", "usr/share/squid/mime.conf").map_err(io)?;
    t.append_dir_all("usr/share/squid/icons", "/usr/share/squid/icons").map_err(io)?;
    t.append_dir_all("usr/share/squid-langpack/templates", "/usr/share/squid-langpack/templates")
        .map_err(io)?;
    if Path::new("/etc/squid/errorpage.css").exists() {
        t.append_path_with_name("/etc/squid/errorpage.css", "etc/squid/errorpage.css").map_err(io)?;
    }
    for (name, text) in [
        ("etc/passwd", "root:x:0:0:root:/root:/nonexistent\nproxy:x:13:13:proxy:/bin:/nonexistent\n"),
        ("etc/group", "root:x:0:\nproxy:x:13:\n"),
        ("etc/hosts", ""),
        ("etc/resolv.conf", ""),
    ] {
        t.append_data(&mut file_header(text.len()), name, text.as_bytes()).map_err(io)?;
    }
    files += 4;
    let tar = t.into_inner().map_err(io)?;
    Ok((tar, files))
}

/// Import recipe A's root filesystem (`docker import` = `create_image(from_src "-")`), showing
/// how much has been sent.
async fn import_host_squid(docker: &Docker, progress: &Progress) -> Result<String> {
    let version = squid_version().unwrap_or_else(|| "unknown".into());
    progress(&format!(
        "assembling image {} from the host's squid {version} (no registry needed)",
        image_ref()
    ));
    let (tar, files) = tokio::task::spawn_blocking(host_squid_rootfs)
        .await
        .map_err(|e| Error::docker(format!("image assembly panicked: {e}"), "report a bug"))??;
    let total = tar.len();
    progress(&format!("importing {files} files ({:.1} MB)", total as f64 / 1e6));
    let recipe = format!("host-squid-{version}");
    let chunks: Vec<Bytes> = Bytes::from(tar).chunks(1 << 20).map(Bytes::copy_from_slice).collect();
    let p = progress.clone();
    let mut sent = 0usize;
    let body = futures_util::stream::iter(chunks).map(move |c| {
        sent += c.len();
        if sent == total || sent % (8 << 20) < c.len() {
            p(&format!("  sent {:.1}/{:.1} MB", sent as f64 / 1e6, total as f64 / 1e6));
        }
        Ok::<Bytes, std::io::Error>(c)
    });
    let changes = [
        "USER 13:13".to_string(),
        format!("ENTRYPOINT [\"{SQUID_BIN}\", \"-N\", \"-f\", \"{CONF}\"]"),
        "LABEL dev.opencode-sandbox.component=egress".to_string(),
        format!("LABEL dev.opencode-sandbox.image-recipe={recipe}"),
    ];
    let opts = bollard::query_parameters::CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(IMAGE)
        .tag(TAG)
        .changes(changes.to_vec())
        .build();
    let mut s = docker.create_image(Some(opts), Some(bollard::body_try_stream(body)), None);
    while let Some(item) = s.next().await {
        match item {
            Ok(info) => {
                if let Some(e) = info.error_detail.and_then(|d| d.message) {
                    return Err(Error::docker(
                        format!("image import failed: {e}"),
                        "check `docker info` and the disk space of /var/lib/docker",
                    ));
                }
            }
            Err(e) => {
                return Err(Error::docker(
                    format!("image import failed: {e}"),
                    "check `docker info` and the disk space of /var/lib/docker",
                ));
            }
        }
    }
    progress(&format!("image {} ready ({recipe})", image_ref()));
    Ok(recipe)
}

/// The label with the hash of the squid.conf a container was created with (`status` reads it
/// when the state directory's record is missing).
pub const CONFIG_HASH_LABEL: &str = "dev.opencode-sandbox.config-hash";

/// Labels of every object this crate creates, so `down` and cleanup touch nothing else.
pub fn labels(instance: &str, project_hash: &str, config_hash: &str) -> HashMap<String, String> {
    HashMap::from([
        ("dev.opencode-sandbox.component".to_string(), "egress".to_string()),
        ("dev.opencode-sandbox.instance".to_string(), instance.to_string()),
        ("dev.opencode-sandbox.project".to_string(), project_hash.to_string()),
        (CONFIG_HASH_LABEL.to_string(), config_hash.to_string()),
    ])
}
