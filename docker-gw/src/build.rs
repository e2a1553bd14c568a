//! A classic build's context on its way to the daemon: the tar is read entry by entry, written
//! out again in a plain form, and the Dockerfile it holds judged
//! ([`ocsb_policy::docker::dockerfile`]) before the daemon gets the end of the archive.
//!
//! *Why written out again*: the daemon reads the tar with Go's reader, which differs from any
//! other in corner cases (STAR prefixes, PAX sizes, data after header-only entries, sparse
//! files); a Dockerfile the gateway read one way could be another to the daemon. Writing each
//! entry the gateway read as a plain GNU header with its data makes the daemon read exactly
//! what was judged. Only the Dockerfile is held in memory (up to
//! [`dockerfile::MAX_DOCKERFILE`]); every other entry streams through.
//!
//! *Why chunked to the daemon*: the context is sent as chunks and the last chunk only after the
//! verdict. A refused build ends the connection inside the body, which the daemon's HTTP reader
//! takes as a truncated body (Go's tar reader would take a clean end at an entry boundary as
//! the archive's end and build what it got).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::net::UnixStream;

use ocsb_policy::docker::{Refusal, dockerfile};
use tar::{EntryType, Header};

use super::Shared;
use super::http::{self, Framing};

/// The magic numbers the daemon's decompression looks for at the start of a context.
const COMPRESSED: &[&[u8]] = &[b"\x1f\x8b\x08", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"];

/// Reads the client's body (`framing`), writes the context to `up` as chunks, and ends it only
/// if the Dockerfile and the images it starts from pass. The rest of a refused body is read
/// and dropped, so that the client gets the refusal.
pub(super) fn forward(
    r: &mut (impl BufRead + Send),
    framing: Framing,
    up: &mut UnixStream,
    gw: &Shared,
    query: &[(String, String)],
) -> Result<(), Refusal> {
    let paths = dockerfile::paths(query)?;
    let args = dockerfile::build_args(query);
    let (mut inner, mut feed) = UnixStream::pair().map_err(io_refusal)?;
    std::thread::scope(|s| {
        let feeder = s.spawn(move || http::copy_body(r, &mut feed, framing, Some(usize::MAX)));
        let verdict = pass(&mut inner, up, &paths, |text| judge(gw, text, &args));
        let _ = io::copy(&mut inner, &mut io::sink());
        let fed = feeder.join().unwrap_or_else(|_| Err(io::Error::other("the body reader failed")));
        // A body the client could not frame is the client's error, whatever was read of it.
        fed.map_err(|e| Refusal::new("request", e.to_string()))?;
        verdict
    })
}

/// The Dockerfile's verdict, and then each image it starts from: on the daemon already (so
/// it pulls nothing) and without `ONBUILD` triggers (which the build would run unseen).
fn judge(gw: &Shared, text: &[u8], args: &BTreeMap<String, Option<String>>) -> Result<(), Refusal> {
    let plan = dockerfile::judge(text, args)?;
    for image in plan.images {
        let (code, v) = gw.daemon.call("GET", &format!("/images/{image}/json"), None).map_err(|e| {
            Refusal::new("daemon", format!("the gateway could not ask the daemon about image {image}: {e}"))
        })?;
        match code {
            200 => {}
            404 => {
                return Err(Refusal::new(
                    "build",
                    format!("the base image {image} is not on this host: the daemon would pull it outside the filter"),
                )
                .allow(format!("pull it first (docker pull {image}), then build")));
            }
            _ => return Err(Refusal::new("daemon", format!("inspecting image {image}: {code}"))),
        }
        if v["Config"]["OnBuild"].as_array().is_some_and(|t| !t.is_empty()) {
            return Err(Refusal::new(
                "build",
                format!("the base image {image} carries ONBUILD triggers, which the build would run unseen"),
            )
            .allow("start from an image without ONBUILD triggers"));
        }
    }
    Ok(())
}

/// A reader that, at its end, gives the zeros of a last entry's padding and the archive's end.
/// *Why*: the Docker CLI sends a context whose last entry (the `.dockerignore` it rewrites for
/// `-f -`) is neither padded nor followed by the end blocks; Go's reader takes the end of the
/// body there as the archive's end, and so does the gateway.
struct ZeroTail<R> {
    inner: R,
    tail: usize,
}

impl<R: Read> Read for ZeroTail<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 || buf.is_empty() {
            return Ok(n);
        }
        let n = buf.len().min(self.tail);
        buf[..n].fill(0);
        self.tail -= n;
        Ok(n)
    }
}

/// What the context holds at a path, as far as a Dockerfile there is concerned.
enum Held {
    File(Vec<u8>),
    /// A directory or a FIFO: not a Dockerfile the daemon could read.
    Other,
}

/// Reads the tar from `input`, writes it to `up`; `judge` sees each Dockerfile candidate's text
/// once the archive has ended, before the archive's end is written.
fn pass(
    input: impl Read,
    up: &mut UnixStream,
    paths: &[String],
    judge: impl Fn(&[u8]) -> Result<(), Refusal>,
) -> Result<(), Refusal> {
    let mut input = BufReader::with_capacity(64 * 1024, ZeroTail { inner: input, tail: 1536 });
    let start = input.fill_buf().map_err(io_refusal)?;
    if COMPRESSED.iter().any(|m| start.starts_with(m)) || zstd_skippable(start) {
        return Err(Refusal::new("build", "a compressed build context is not served (the gateway reads the Dockerfile in it)")
            .allow("send the context uncompressed: docker build without --compress, or decompress the file you pipe in"));
    }
    let mut out = BufWriter::with_capacity(64 * 1024, http::Chunks(up));
    let candidates: BTreeSet<Vec<u8>> = paths.iter().map(|p| p.as_bytes().to_vec()).collect();
    let mut held: BTreeMap<Vec<u8>, Held> = BTreeMap::new();
    // Paths whose last entry is a link: the daemon follows a symbolic link in the Dockerfile's
    // path, and writes an entry beneath one through it.
    let mut links: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut archive = tar::Archive::new(input);
    let bad = |what: String| Refusal::new("build", format!("the build context: {what}"));
    let mut first = true;
    for entry in archive.entries().map_err(|e| bad(e.to_string()))? {
        let mut e = entry.map_err(|e| bad(format!("not a tar archive the gateway reads: {e}")))?;
        let kind = e.header().entry_type();
        if kind.is_pax_global_extensions() {
            continue;
        }
        let raw = e.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let path = dockerfile::clean_path(&raw).ok_or_else(|| bad(format!("{shown}: a path with `..`")))?;
        let kind = match kind {
            EntryType::Regular | EntryType::Continuous => EntryType::Regular,
            k @ (EntryType::Directory | EntryType::Symlink | EntryType::Link | EntryType::Fifo) => k,
            other => return Err(bad(format!("{shown}: entries of type {other:?} are not served"))),
        };
        if path.is_empty() && kind != EntryType::Directory {
            return Err(bad(format!("{shown}: the context's root is not a directory")));
        }
        let mut above = path.as_slice();
        while let Some(i) = above.iter().rposition(|b| *b == b'/') {
            above = &above[..i];
            if links.contains(above) {
                return Err(bad(format!("{shown}: an entry beneath a link")));
            }
        }
        // The header written starts with this name: it must not read as compressed data.
        if first && (COMPRESSED.iter().any(|m| path.starts_with(m)) || zstd_skippable(&path)) {
            return Err(bad(format!("{shown}: a first name the daemon would read as compressed data")));
        }
        first = false;
        if matches!(kind, EntryType::Symlink | EntryType::Link) {
            links.insert(path.clone());
        } else {
            links.remove(&path);
        }
        let h = e.header();
        let mut header = Header::new_gnu();
        header.set_entry_type(kind);
        // Empty numeric fields are 0 to Go's reader; the header written is plain either way.
        header.set_mode(h.mode().unwrap_or(0o644));
        header.set_uid(h.uid().unwrap_or(0));
        header.set_gid(h.gid().unwrap_or(0));
        header.set_mtime(h.mtime().unwrap_or(0));
        let size = if kind == EntryType::Regular { e.size() } else { 0 };
        header.set_size(size);
        let link = match kind {
            EntryType::Symlink => e.link_name_bytes().map(|l| l.into_owned()),
            EntryType::Link => {
                let target = e.link_name_bytes().map(|l| l.into_owned()).unwrap_or_default();
                Some(dockerfile::clean_path(&target).ok_or_else(|| bad(format!("{shown}: a link to `..`")))?)
            }
            _ => None,
        };
        let mut name = if path.is_empty() { b".".to_vec() } else { path.clone() };
        if kind == EntryType::Directory {
            name.push(b'/');
        }
        long(&mut out, &mut header, &name, link.as_deref()).map_err(io_refusal)?;
        let candidate = candidates.contains(&path);
        if candidate && kind == EntryType::Regular {
            if size > dockerfile::MAX_DOCKERFILE as u64 {
                return Err(bad(format!(
                    "{shown}: a Dockerfile over {} MiB",
                    dockerfile::MAX_DOCKERFILE >> 20
                )));
            }
            let mut text = Vec::new();
            (&mut e).take(size).read_to_end(&mut text).map_err(io_refusal)?;
            write_data(&mut out, &mut text.as_slice(), size)?;
            held.insert(path, Held::File(text));
        } else {
            if candidate {
                held.insert(path, Held::Other);
            }
            write_data(&mut out, &mut e, size)?;
        }
    }
    for p in &candidates {
        let mut prefix = p.as_slice();
        loop {
            if links.contains(prefix) {
                let shown = String::from_utf8_lossy(p);
                return Err(bad(format!("the Dockerfile {shown} is, or lies beneath, a link")));
            }
            match prefix.iter().rposition(|b| *b == b'/') {
                Some(i) => prefix = &prefix[..i],
                None => break,
            }
        }
        if let Some(Held::File(text)) = held.get(p) {
            judge(text)?;
        }
    }
    out.write_all(&[0u8; 1024]).map_err(io_refusal)?;
    out.flush().map_err(io_refusal)?;
    drop(out);
    up.write_all(b"0\r\n\r\n").map_err(io_refusal)?;
    Ok(())
}

/// The header with `name` and `link`, each in the header when it fits, else in a GNU long
/// name (`L`) or long link (`K`) entry before it; the checksum set; written out.
fn long(out: &mut impl Write, header: &mut Header, name: &[u8], link: Option<&[u8]>) -> io::Result<()> {
    let gnu = header.as_gnu_mut().ok_or_else(|| io::Error::other("not a GNU header"))?;
    for (value, field, kind) in
        [(Some(name), 0usize, EntryType::GNULongName), (link, 1, EntryType::GNULongLink)]
    {
        let Some(value) = value else { continue };
        let slot: &mut [u8; 100] = if field == 0 { &mut gnu.name } else { &mut gnu.linkname };
        if value.len() <= slot.len() {
            slot[..value.len()].copy_from_slice(value);
            continue;
        }
        slot[..15].copy_from_slice(b"././@LongLink\0\0");
        let mut ext = Header::new_gnu();
        ext.as_gnu_mut().ok_or_else(|| io::Error::other("not a GNU header"))?.name[..13]
            .copy_from_slice(b"././@LongLink");
        ext.set_entry_type(kind);
        ext.set_mode(0o644);
        ext.set_size(value.len() as u64 + 1);
        ext.set_cksum();
        out.write_all(ext.as_bytes())?;
        let mut data = value.to_vec();
        data.push(0);
        out.write_all(&data)?;
        out.write_all(&vec![0u8; pad(data.len() as u64)])?;
    }
    header.set_cksum();
    out.write_all(header.as_bytes())
}

/// Exactly `size` bytes of data and the padding to the next block.
fn write_data(out: &mut impl Write, data: &mut impl Read, size: u64) -> Result<(), Refusal> {
    let copied = io::copy(&mut data.take(size), out).map_err(io_refusal)?;
    if copied != size {
        return Err(Refusal::new("build", "the build context: a truncated entry"));
    }
    out.write_all(&vec![0u8; pad(size)]).map_err(io_refusal)
}

fn pad(size: u64) -> usize {
    ((512 - size % 512) % 512) as usize
}

/// A zstd skippable frame (`0x184D2A50`–`0x184D2A5F`, little-endian).
fn zstd_skippable(b: &[u8]) -> bool {
    b.len() >= 4 && b[0] & 0xf0 == 0x50 && b[1..4] == [0x2a, 0x4d, 0x18]
}

fn io_refusal(e: io::Error) -> Refusal {
    Refusal::new("request", format!("the build context could not be passed on: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data, link) in entries {
            let mut h = Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            if let Some(l) = link {
                b.append_link(&mut h, path, l).unwrap();
            } else {
                b.append_data(&mut h, path, *data).unwrap();
            }
        }
        b.into_inner().unwrap()
    }

    /// What the daemon would get (the chunks decoded), or the refusal; and the texts judged.
    fn run(tar: &[u8], paths: &[&str], refuse: Option<&str>) -> (Result<Vec<u8>, Refusal>, Vec<String>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        let reader = std::thread::spawn(move || {
            let mut raw = Vec::new();
            b.read_to_end(&mut raw).unwrap();
            raw
        });
        let verdict = pass(tar, &mut a, &paths, |t| {
            let t = String::from_utf8_lossy(t).into_owned();
            seen.borrow_mut().push(t.clone());
            match refuse {
                Some(word) if t.contains(word) => Err(Refusal::new("build", "refused")),
                _ => Ok(()),
            }
        });
        drop(a);
        let raw = reader.join().unwrap();
        let mut decoded = Vec::new();
        let ended = http::copy_body(
            &mut io::BufReader::new(raw.as_slice()),
            &mut decoded,
            Framing::Chunked,
            Some(1 << 30),
        );
        if verdict.is_err() {
            assert!(ended.is_err(), "a refused context was ended");
        }
        let out = verdict.map(|()| {
            ended.unwrap();
            decoded
        });
        (out, seen.into_inner())
    }

    fn names(tar: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut a = tar::Archive::new(tar);
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let p = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                let mut d = Vec::new();
                e.read_to_end(&mut d).unwrap();
                (p, d)
            })
            .collect()
    }

    #[test]
    fn a_context_passes_whole_and_its_dockerfile_is_judged() {
        let long = format!("{}/file.txt", "d".repeat(150));
        let tar = tar_of(&[
            ("./src/", EntryType::Directory, b"", None),
            ("./src/main.rs", EntryType::Regular, b"fn main() {}", None),
            (&long, EntryType::Regular, b"long", None),
            ("Dockerfile", EntryType::Regular, b"FROM b\nCOPY src /src\n", None),
            ("ln", EntryType::Symlink, b"", Some("src/main.rs")),
        ]);
        let (out, seen) = run(&tar, &["Dockerfile", "dockerfile"], None);
        let out = out.unwrap();
        assert_eq!(seen, ["FROM b\nCOPY src /src\n"]);
        let got = names(&out);
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["src/", "src/main.rs", long.as_str(), "Dockerfile", "ln"]);
        assert_eq!(got[2].1, b"long");
        assert!(out.ends_with(&[0u8; 1024]));
    }

    #[test]
    fn a_context_without_its_end_blocks_passes_as_the_cli_sends_it() {
        // `docker build -f - DIR`: the last entry unpadded, no end blocks.
        let full = tar_of(&[
            (".dockerfile.a1", EntryType::Regular, b"FROM b\n", None),
            (".dockerignore", EntryType::Regular, b".dockerfile.a1\n", None),
        ]);
        let cut = &full[..512 * 3 + 15];
        let (out, seen) = run(cut, &[".dockerfile.a1"], None);
        assert_eq!(seen, ["FROM b\n"]);
        assert_eq!(names(&out.unwrap())[1], (".dockerignore".to_string(), b".dockerfile.a1\n".to_vec()));
    }

    #[test]
    fn a_refused_dockerfile_leaves_the_archive_unended() {
        let tar = tar_of(&[
            ("sub/Dockerfile.dev", EntryType::Regular, b"FROM b\nADD http://x /y\n", None),
            ("other", EntryType::Regular, b"x", None),
        ]);
        let (out, seen) = run(&tar, &["sub/Dockerfile.dev"], Some("ADD"));
        assert!(out.is_err());
        assert_eq!(seen.len(), 1);
        // The last entry of a path is the one the daemon keeps, and the one judged.
        let tar = tar_of(&[
            ("Dockerfile", EntryType::Regular, b"FROM ok\n", None),
            ("./Dockerfile", EntryType::Regular, b"FROM b\nADD http://x /y\n", None),
        ]);
        assert!(run(&tar, &["Dockerfile"], Some("ADD")).0.is_err());
    }

    #[test]
    fn links_compression_and_odd_entries_are_refused() {
        for tar in [
            tar_of(&[("Dockerfile", EntryType::Symlink, b"", Some("evil"))]),
            tar_of(&[("Dockerfile", EntryType::Link, b"", Some("evil"))]),
            tar_of(&[("sub", EntryType::Symlink, b"", Some("other")), ("x", EntryType::Regular, b"", None)]),
            tar_of(&[
                ("s", EntryType::Symlink, b"", Some(".")),
                ("s/Dockerfile", EntryType::Regular, b"FROM b", None),
            ]),
            tar_of(&[("dev", EntryType::Char, b"", None)]),
            b"\x1f\x8b\x08\x00rest".to_vec(),
            b"BZh91AY".to_vec(),
            tar_of(&[("BZh91", EntryType::Regular, b"x", None)]),
            tar_of(&[("\u{50}\u{2a}\u{4d}\u{18}x", EntryType::Regular, b"x", None)]),
        ] {
            let (out, seen) = run(&tar, &["Dockerfile", "sub/Dockerfile"], None);
            assert!(out.is_err(), "{:?}", &tar[..16]);
            assert!(seen.is_empty());
        }
        // A path with `..` is not one the gateway places.
        let mut h = Header::new_gnu();
        h.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"../escape");
        h.set_size(0);
        h.set_cksum();
        let mut tar = h.as_bytes().to_vec();
        tar.extend([0u8; 1024]);
        assert!(run(&tar, &["Dockerfile"], None).0.is_err());
    }
}
