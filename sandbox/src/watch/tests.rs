use super::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::mpsc::{Receiver, channel};

fn sink() -> (Box<dyn FnMut(Found) + Send>, Receiver<Found>) {
    let (tx, rx) = channel();
    (Box::new(move |f| drop(tx.send(f))), rx)
}

/// A tree with the user's ordinary files, a repository of the starting point, a bare fixture
/// repository, a link out of the tree and a directory three levels down.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    for d in [
        "src",
        ".github/workflows",
        "a/b/c",
        "sub/.git/objects",
        "fixture.git/objects",
        "fixture.git/refs",
        "keep",
    ] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in ["src/main.rs", ".gitignore", ".gitattributes", ".git-blame-ignore-revs", "fixture.git/HEAD"] {
        fs::write(root.join(f), "x\n").unwrap();
    }
    (t, root)
}

fn plant_at(f: &Found) -> Option<(&Path, &Outcome, Instant)> {
    match f {
        Found::Plant { path, outcome, at, .. } => Some((path, outcome, *at)),
        Found::Blind { .. } => None,
    }
}

/// Waits for the report of the plant at `path`; returns where it went and how long after
/// `made` it was moved.
fn moved(rx: &Receiver<Found>, path: &Path, made: Instant) -> (PathBuf, Duration) {
    let f = rx
        .recv_timeout(Duration::from_secs(3))
        .unwrap_or_else(|_| panic!("{} was not reported", path.display()));
    let Some((p, outcome, at)) = plant_at(&f) else { panic!("{f:?}") };
    assert_eq!(p, path, "{f:?}");
    let Outcome::Moved(to) = outcome else { panic!("{f:?}") };
    (to.clone(), at.saturating_duration_since(made))
}

/// Nothing (more) is reported within a moment.
fn quiet(rx: &Receiver<Found>) {
    if let Ok(f) = rx.recv_timeout(Duration::from_millis(500)) {
        panic!("reported: {f:?}");
    }
}

#[test]
fn every_kind_of_git_plant_is_moved_aside_within_a_second_and_the_rest_stays() {
    let (_t, root) = tree();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
    let skip = root.join("keep/.git");
    let (tx, rx) = sink();
    let w = Watch::start(vec![root.clone()], vec![skip.clone()], Box::new(Git), tx).unwrap();
    quiet(&rx); // what was there is the starting point

    let mut figures = Vec::new();
    let mut check = |what: &str, path: PathBuf, moved_to: (PathBuf, Duration)| {
        let (to, took) = moved_to;
        assert!(
            path.symlink_metadata().is_err() || what == "layout",
            "{what}: {} still there",
            path.display()
        );
        assert!(to.symlink_metadata().is_ok(), "{what}: {} missing", to.display());
        assert!(to.file_name().unwrap().to_string_lossy().contains(aside::MARK), "{}", to.display());
        assert!(took < Duration::from_secs(1), "{what}: {took:?}");
        figures.push(format!("{what} {took:?}"));
    };

    let p = root.join(".git");
    let made = Instant::now();
    fs::create_dir(&p).unwrap();
    check("dir at the top", p.clone(), moved(&rx, &p, made));

    let p = root.join("a/b/c/.git");
    let made = Instant::now();
    fs::write(&p, "gitdir: /elsewhere\n").unwrap();
    check("file three down", p.clone(), moved(&rx, &p, made));

    let p = root.join("a/.git");
    let made = Instant::now();
    std::os::unix::fs::symlink(outside.path(), &p).unwrap();
    let (to, took) = moved(&rx, &p, made);
    assert!(to.symlink_metadata().unwrap().file_type().is_symlink());
    check("link", p, (to, took));

    let p = root.join("x/y/.git");
    let made = Instant::now();
    fs::create_dir_all(&p).unwrap();
    check("mkdir -p x/y/.git", p.clone(), moved(&rx, &p, made));

    fs::create_dir_all(root.join("a/b/z/objects")).unwrap();
    let p = root.join("a/b/.git");
    let made = Instant::now();
    fs::rename(root.join("a/b/z"), &p).unwrap();
    check("mv z .git", p.clone(), moved(&rx, &p, made));

    let d = root.join("src/d");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::create_dir(d.join("objects")).unwrap();
    let made = Instant::now();
    fs::create_dir(d.join("refs")).unwrap();
    let (to, took) = moved(&rx, &d, made);
    assert_eq!(to.parent(), Some(d.as_path()));
    assert!(to.file_name().unwrap().to_string_lossy().starts_with("HEAD.ocsb-planted-"), "{}", to.display());
    assert!(d.join("objects").is_dir() && !d.join("HEAD").exists());
    check("layout", d.clone(), (to, took));

    // Left: a skip path, the starting point's repositories, what a link leads to, and the
    // user's ordinary files, new or old.
    fs::create_dir(&skip).unwrap();
    fs::write(root.join("sub/.git/HEAD"), "ref: refs/heads/x\n").unwrap();
    fs::write(root.join("fixture.git/HEAD.lock"), "ref: refs/heads/y\n").unwrap();
    fs::rename(root.join("fixture.git/HEAD.lock"), root.join("fixture.git/HEAD")).unwrap();
    fs::create_dir(outside.path().join(".git")).unwrap();
    fs::create_dir_all(root.join("src/bin/.github")).unwrap();
    for f in [
        "src/lib.rs",
        "src/bin/.gitignore",
        "src/bin/.gitattributes",
        "src/bin/.git-blame-ignore-revs",
        ".gitmodules",
    ] {
        fs::write(root.join(f), "y\n").unwrap();
    }
    quiet(&rx);
    drop(w);
    for stays in [
        "keep/.git",
        "sub/.git/HEAD",
        "fixture.git/HEAD",
        "out/.git",
        "src/main.rs",
        "src/lib.rs",
        ".github/workflows",
        "src/bin/.github",
        ".gitignore",
        ".gitattributes",
        ".git-blame-ignore-revs",
        "src/bin/.gitignore",
    ] {
        assert!(root.join(stays).symlink_metadata().is_ok(), "{stays} was moved");
    }
    eprintln!("plant to moved: {}", figures.join(", "));
}

/// After a lost queue, a rescan finds what appeared meanwhile, deep in new directories too;
/// the starting point and the skip paths stay.
#[test]
fn a_lost_queue_makes_a_rescan_that_acts_on_what_appeared() {
    let (_t, root) = tree();
    let (tx, rx) = sink();
    let mut t = Tree::new(vec![root.clone()], vec![root.join("keep/.git")], Box::new(Git), tx).unwrap();
    fs::create_dir_all(root.join("n/m/.git")).unwrap();
    fs::write(root.join("a/b/.git"), "gitdir: /x\n").unwrap();
    fs::create_dir(root.join("keep/.git")).unwrap();
    t.handle(vec![Event { wd: -1, mask: AddWatchFlags::IN_Q_OVERFLOW, name: None }]);
    let mut got: Vec<PathBuf> =
        rx.try_iter().filter_map(|f| plant_at(&f).map(|(p, _, _)| p.to_path_buf())).collect();
    got.sort();
    assert_eq!(got, vec![root.join("a/b/.git"), root.join("n/m/.git")]);
    assert!(
        !root.join("n/m/.git").exists() && root.join("keep/.git").is_dir() && root.join("sub/.git").is_dir()
    );
    // And the new directories are watched from now on.
    fs::create_dir(root.join("n/m/.GIT")).unwrap();
    t.pump().unwrap();
    let f: Vec<Found> = rx.try_iter().collect();
    assert!(f.iter().any(|f| plant_at(f).is_some_and(|(p, _, _)| p == root.join("n/m/.GIT"))), "{f:?}");
}

/// A directory the agent made read-only or closed (its own) still gives its plant up.
#[test]
fn read_only_and_closed_directories_give_their_plants_up() {
    let (_t, root) = tree();
    let (tx, rx) = sink();
    let mut t = Tree::new(vec![root.clone()], vec![], Box::new(Git), tx).unwrap();
    for (d, mode) in [("ro", 0o555), ("shut", 0o000), ("a/b", 0o500)] {
        fs::create_dir_all(root.join(d).join(".git")).unwrap();
        fs::set_permissions(root.join(d), fs::Permissions::from_mode(mode)).unwrap();
    }
    t.pump().unwrap();
    let got: Vec<Found> = rx.try_iter().collect();
    for d in ["ro", "shut", "a/b"] {
        let p = root.join(d).join(".git");
        assert!(
            got.iter()
                .any(|f| matches!(f, Found::Plant { path, outcome: Outcome::Moved(_), .. } if *path == p)),
            "{d}: {got:?}"
        );
        assert!(!p.exists(), "{d}");
    }
}

/// The figures: the start on a tree of 10,000 directories, and plant-to-moved over 50 plants.
#[test]
fn start_time_and_latency_figures() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    for i in 0..100 {
        for j in 0..99 {
            fs::create_dir_all(root.join(format!("d{i}/e{j}"))).unwrap();
        }
    }
    let (tx, rx) = sink();
    let began = Instant::now();
    let w = Watch::start(vec![root.clone()], vec![], Box::new(Git), tx).unwrap();
    let start = began.elapsed();
    let mut took = Vec::new();
    for n in 0..50 {
        let p = root.join(format!("d{}/e{}/.git", n * 7 % 100, n * 13 % 99));
        let made = Instant::now();
        fs::create_dir(&p).unwrap();
        took.push(moved(&rx, &p, made).1);
    }
    drop(w);
    took.sort();
    let (median, max) = (took[took.len() / 2], took[took.len() - 1]);
    eprintln!(
        "watch start on 10,000 directories: {start:?}; plant to moved over 50: median {median:?}, max {max:?}"
    );
    assert!(max < Duration::from_secs(1), "{max:?}");
    assert!(start < WALK_TIME);
}

/// A directory renamed while watched is found at its new place: its plant there is moved and
/// reported where it is now, once.
#[test]
fn a_renamed_directory_is_followed_to_its_new_place() {
    let (_t, root) = tree();
    let (tx, rx) = sink();
    let mut t = Tree::new(vec![root.clone()], vec![], Box::new(Git), tx).unwrap();
    fs::rename(root.join("a"), root.join("moved")).unwrap();
    fs::create_dir(root.join("moved/b/.git")).unwrap();
    fs::write(root.join("moved/.git"), "gitdir: /x\n").unwrap();
    t.pump().unwrap();
    let mut got: Vec<PathBuf> =
        rx.try_iter().filter_map(|f| plant_at(&f).map(|(p, _, _)| p.to_path_buf())).collect();
    got.sort();
    assert_eq!(got, vec![root.join("moved/.git"), root.join("moved/b/.git")]);
    // The watches below it know their new paths.
    fs::create_dir(root.join("moved/b/c/.git")).unwrap();
    t.pump().unwrap();
    let got: Vec<Found> = rx.try_iter().collect();
    assert!(
        matches!(&got[..], [Found::Plant { path, outcome: Outcome::Moved(_), .. }] if *path == root.join("moved/b/c/.git")),
        "{got:?}"
    );
}

/// A registry's matcher plugs in beside git's: what it reports stays, and is reported.
#[test]
fn a_matcher_that_only_reports_leaves_the_entry_and_says_so() {
    struct Direnv;
    impl Matcher for Direnv {
        fn judge(&self, e: &Entry<'_>) -> Option<Match> {
            (e.name == ".envrc").then(|| Match {
                plant: Plant::Tool { what: "direnv".into() },
                subject: e.name.into(),
                why: "direnv runs it on entering the directory".into(),
                action: Action::Report,
            })
        }
    }
    let (_t, root) = tree();
    let (tx, rx) = sink();
    let both: Vec<Box<dyn Matcher>> = vec![Box::new(Git), Box::new(Direnv)];
    let mut t = Tree::new(vec![root.clone()], vec![], Box::new(both), tx).unwrap();
    fs::write(root.join("src/.envrc"), "echo hi\n").unwrap();
    fs::create_dir(root.join("src/.git")).unwrap();
    t.pump().unwrap();
    let got: Vec<Found> = rx.try_iter().collect();
    assert!(root.join("src/.envrc").exists() && !root.join("src/.git").exists());
    assert!(
        got.iter().any(
            |f| matches!(f, Found::Plant { path, outcome: Outcome::Reported, plant: Plant::Tool { .. }, .. }
            if *path == root.join("src/.envrc"))
        ),
        "{got:?}"
    );
    assert_eq!(got.len(), 2, "{got:?}");
}

/// Past its limit the watch says which directory it no longer sees (once, not for every
/// directory after it), and still moves what it finds there when it looks.
#[test]
fn past_the_limit_the_watch_says_so_and_still_looks_once() {
    let (_t, root) = tree();
    let (tx, rx) = sink();
    let mut t = Tree::new(vec![root.clone()], vec![], Box::new(Git), tx).unwrap();
    t.max_dirs = t.dirs.len();
    fs::create_dir_all(root.join("new/deeper/.git")).unwrap();
    t.pump().unwrap();
    let got: Vec<Found> = rx.try_iter().collect();
    let blind: Vec<&Found> = got.iter().filter(|f| matches!(f, Found::Blind { .. })).collect();
    assert!(
        matches!(&blind[..], [Found::Blind { dir, why }] if *dir == root.join("new") && why.contains("its most")),
        "{got:?}"
    );
    assert!(!root.join("new/deeper/.git").exists(), "{got:?}");
}

/// The tool files' matcher at work: a new `.envrc` three directories down is moved aside; a
/// new `.vscode` is reported and stays. The agent renames a directory above a tool file the
/// session started with and makes a new one at the old path: that one is new (its directory
/// is another), so it is caught too, while the old one, moved with its directory, stays known.
#[test]
fn tool_files_are_caught_at_any_depth_and_after_a_rename_above_them() {
    let (_t, root) = tree();
    fs::write(root.join("a/b/c/.envrc"), "echo user\n").unwrap();
    let (tx, rx) = sink();
    let both: Vec<Box<dyn Matcher>> = vec![Box::new(Git), Box::new(Tools::new(vec![], false))];
    let mut t = Tree::new(vec![root.clone()], vec![], Box::new(both), tx).unwrap();
    assert!(rx.try_iter().next().is_none(), "the starting point's .envrc was reported");
    fs::create_dir_all(root.join("src/x/y")).unwrap();
    fs::write(root.join("src/x/y/.envrc"), "touch /tmp/PWNED\n").unwrap();
    fs::create_dir(root.join("src/.vscode")).unwrap();
    t.pump().unwrap();
    let got: Vec<Found> = rx.try_iter().collect();
    assert!(
        got.iter().any(|f| matches!(f, Found::Plant { path, outcome: Outcome::Moved(_), plant: Plant::Tool { what }, why, .. }
            if *path == root.join("src/x/y/.envrc") && what == "direnv" && why.contains("direnv"))),
        "{got:?}"
    );
    assert!(
        got.iter().any(
            |f| matches!(f, Found::Plant { path, outcome: Outcome::Reported, plant: Plant::Tool { what }, .. }
            if *path == root.join("src/.vscode") && what == "VS Code")
        ),
        "{got:?}"
    );
    assert!(!root.join("src/x/y/.envrc").exists() && root.join("src/.vscode").is_dir());
    // The rename above the user's `.envrc`, and a new one at its old path.
    fs::rename(root.join("a"), root.join("a2")).unwrap();
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::write(root.join("a/b/c/.envrc"), "touch /tmp/PWNED\n").unwrap();
    t.pump().unwrap();
    let got: Vec<Found> = rx.try_iter().collect();
    let planted: Vec<&Path> = got.iter().filter_map(|f| plant_at(f).map(|(p, _, _)| p)).collect();
    assert_eq!(planted, vec![root.join("a/b/c/.envrc").as_path()], "{got:?}");
    assert!(!root.join("a/b/c/.envrc").exists(), "the new one stayed");
    assert_eq!(fs::read_to_string(root.join("a2/b/c/.envrc")).unwrap(), "echo user\n", "the user's moved");
}

/// A path an `.envrc` loads, watched by its exact path: made anywhere on the way (`mkdir -p`,
/// a directory renamed into place), it is moved aside; the same name elsewhere is left.
#[test]
fn a_path_an_envrc_loads_is_moved_aside_however_it_is_made() {
    let (_t, root) = tree();
    let mut tools = Tools::new(vec![], false);
    tools.load(root.join("sub2/bin"), &root, "direnv loads it for .envrc (PATH_add)".into());
    tools.load(root.join("x/y/.env.local"), &root, "direnv loads it for .envrc (source_env)".into());
    let (tx, rx) = sink();
    let mut t = Tree::new(vec![root.clone()], vec![], Box::new(tools), tx).unwrap();
    fs::create_dir_all(root.join("sub2/bin")).unwrap();
    fs::create_dir_all(root.join("elsewhere/x/y")).unwrap();
    fs::write(root.join("elsewhere/x/y/.env.local"), "A=1\n").unwrap();
    t.pump().unwrap();
    fs::rename(root.join("elsewhere/x"), root.join("x")).unwrap();
    t.pump().unwrap();
    let got: Vec<Found> = rx.try_iter().collect();
    let mut moved: Vec<&Path> = got
        .iter()
        .filter_map(|f| match f {
            Found::Plant { path, outcome: Outcome::Moved(_), .. } => Some(path.as_path()),
            _ => None,
        })
        .collect();
    moved.sort();
    assert_eq!(
        moved,
        vec![root.join("sub2/bin").as_path(), root.join("x/y/.env.local").as_path()],
        "{got:?}"
    );
    assert_eq!(got.len(), 2, "{got:?}");
}
