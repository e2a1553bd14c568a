//! What a container leaves on a host path, and what it may take of the host, through the
//! Docker gateway of a daemon as users run it (the test's own, Docker's defaults: docker0 and
//! its iptables rules, in the scenario's network namespace).
//!
//! As the ordinary user, `ocsb exec -- docker …`: a container (root in its image) with the
//! project bound tries to make a program set-user-id root, device nodes and root-owned files
//! there (and through `docker exec -u 0` or `docker cp`, both refused); the host side finds
//! none, and the file it writes is the user's. The control: the
//! same commands through the raw daemon (as root, outside the gateway) do plant them. A
//! container without a host directory stays root in its image and works. Resource settings
//! beyond the sandbox's are refused by their rule, and the daemon shows the memory and process
//! caps set on a container whose client set none.

use crate::suite::docker_gateway::{APPLETS, DOCKERD_STOP, OWN_DOCKERD, docker_scenario};
use crate::support::sandbox::{World, has};

const IMAGE: &str = "ocsb-test-busybox:files";

/// What the test's container tries in the project (`/w`): root's powers over files.
const PLANT: &str = "id -u; chown 0:0 /w/prog; echo chown=\\$?; chmod 4755 /w/prog; echo chmod=\\$?; \
    mknod /w/kvm c 10 232; echo mknod-c=\\$?; mknod /w/disk b 8 0; echo mknod-b=\\$?; \
    echo from-container > /w/written; echo write=\\$?; mkdir /w/made; echo mkdir=\\$?; \
    chmod u+s /w/written; chown 0 /w/written; echo chown-own=\\$?";

/// Half the host's memory in whole MiB: the cap the gateway sets.
fn half_the_memory() -> i64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: i64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    (kib * 1024 / 2) >> 20 << 20
}

#[test]
fn a_container_leaves_nothing_on_the_project_that_the_sandbox_could_not() {
    let w = World::new();
    let body = format!(
        r#"G=$(getent group opencode-sandbox | cut -d: -f3); APPLETS="{APPLETS} chown chmod mknod stat"; IMAGE={IMAGE}; DOCKERD_FLAGS="--ip-forward=true"
        {OWN_DOCKERD}
        # Made as the user: the session's end moves aside what another uid owns.
        cp /bin/busybox prog; touch mark; chown 1990:1990 prog mark; CTL=$(mktemp -d); sleep 1
        D 'docker run --rm --network none -v "$PWD":/w {IMAGE} sh -c "{PLANT}" 2>&1 | sed "s/^/in: /"
           docker run --rm --network none {IMAGE} sh -c "id -u; chown 1:1 /tmp && echo chown-in-image-ok; mknod /tmp/n c 1 3; echo mknod-in-image=\$?" | sed "s/^/image: /"
           docker run --rm --network none --user 0 -v cache-$$:/c {IMAGE} sh -c "echo v > /c/v && id -u" | sed "s/^/volume-root: /"
           docker run --rm --network none --user 0 -v "$PWD":/w {IMAGE} true; echo user-root=$?
           docker run --rm --network none --cap-add MKNOD {IMAGE} true; echo cap-mknod=$?
           docker run --rm --network none -v "$PWD":/w --cap-add CHOWN {IMAGE} true; echo cap-chown=$?
           docker run -d --name b-$$ --network none -v "$PWD":/w {IMAGE} sleep 60 >/dev/null
           docker exec b-$$ id -u | sed "s/^/exec: /"; docker exec -u 0 b-$$ id -u; echo exec-root=$?
           docker rm -f b-$$ >/dev/null
           echo x > cpf; docker create --name c-$$ --network none -v "$PWD":/w {IMAGE} true >/dev/null
           docker cp cpf c-$$:/w/cpf2; echo cp-bound=$?; docker rm c-$$ >/dev/null
           docker create --name f-$$ --network none {IMAGE} true >/dev/null
           docker cp cpf f-$$:/tmp/cpf; echo cp-free=$?; docker rm f-$$ >/dev/null'
        # The host side: nothing set-user-id or set-group-id of another, no device node, no
        # file of another owner, among what the container touched.
        # (Where they are: the session's end moves aside a set-user-id file, even the user's.)
        for f in prog written; do p=$(find . -name $f -type f | head -1); echo "$f: $(stat -c '%u %a' "$p") $(head -c 14 "$p" | tr -cd a-z-)"; done
        echo "foreign: $(find . -newer mark ! -user 1990 -print | wc -l)"
        echo "devices: $(find . \( -type b -o -type c \) -print | wc -l)"
        echo "setid: $(find . -perm /6000 ! -user 1990 -print | wc -l)"
        # The control: the raw daemon, as root outside the gateway, plants them.
        cp /bin/busybox "$CTL/prog"
        DOCKER_HOST="$DH" docker run --rm --network none -v "$CTL":/w {IMAGE} sh -c "{PLANT}" >/dev/null 2>&1
        echo "control: $(stat -c '%u %a' "$CTL/prog") $(stat -c '%F' "$CTL/kvm" "$CTL/disk" | tr '\n' ' ')"; rm -rf "$CTL"
        {DOCKERD_STOP}"#
    );
    let (out, err) = docker_scenario(&w, &body);
    // Root in the image runs as the user with the project bound: its powers are gone.
    has(&out, "in: 1990", &err);
    for failed in ["chown=", "mknod-c=", "mknod-b=", "chown-own="] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("in: {failed}")) && !l.ends_with("=0")),
            "{failed} succeeded: {out}\n{err}"
        );
    }
    has(&out, "in: write=0", &err);
    has(&out, "in: mkdir=0", &err);
    // The user's own program may be set-user-id (to the user), as in the sandbox: never root's.
    assert!(out.lines().any(|l| l.starts_with("prog: 1990 4755")), "{out}\n{err}");
    has(&out, "written: 1990 4644 from-container", &err);
    has(&out, "foreign: 0", &err);
    has(&out, "devices: 0", &err);
    has(&out, "setid: 0", &err);
    // A container without a host directory is root in its image and changes owners there; no
    // device node even there.
    has(&out, "image: 0", &err);
    has(&out, "image: chown-in-image-ok", &err);
    assert!(
        out.lines().any(|l| l.starts_with("image: mknod-in-image=") && !l.ends_with("=0")),
        "{out}\n{err}"
    );
    has(&out, "volume-root: 0", &err);
    // Root with the project, and the capabilities taken, are refused by their rules.
    for (rule, line) in [("user", "user-root=125"), ("capabilities", "cap-mknod=125")] {
        assert!(out.contains(&format!("(rule {rule})")), "{rule}: {out}\n{err}");
        has(&out, line, &err);
    }
    has(&out, "cap-chown=125", &err);
    has(&out, "exec: 1990", &err);
    assert!(out.contains("exec --user 0: the container has a host directory"), "{out}\n{err}");
    assert!(!out.contains("exec-root=0"), "{out}");
    // `docker cp` into a container with the project: the daemon would unpack as root.
    assert!(out.contains("(rule user): docker cp into a container with a host directory"), "{out}\n{err}");
    assert!(!out.contains("cp-bound=0"), "{out}");
    has(&out, "cp-free=0", &err);
    // Without the gateway the daemon does all of it: the test can fail.
    has(&out, "control: 0 4755 character special file block special file", &err);
}

#[test]
fn resources_beyond_the_sandboxs_are_refused_and_caps_are_set() {
    let w = World::new();
    let body = format!(
        r#"G=$(getent group opencode-sandbox | cut -d: -f3); APPLETS="{APPLETS}"; IMAGE={IMAGE}; DOCKERD_FLAGS="--ip-forward=true"
        {OWN_DOCKERD}
        # The sandbox's user's limits as Debian gives them (the launcher reads its own).
        prlimit --pid $$ --memlock=8388608 --rtprio=0
        D 'for flag in "--ulimit memlock=-1" "--oom-kill-disable" "--cpu-rt-runtime 950000" "--shm-size 64g" "--ulimit rtprio=99" "--memory 100t"; do
             docker run --rm --network none $flag {IMAGE} true 2>&1 | sed "s/^/$flag: /"
           done
           docker create --name caps --network none {IMAGE} true >/dev/null && echo created
           docker create --name bound --network none -v "$PWD":/w --memory 64m --pids-limit 50 {IMAGE} true >/dev/null && echo created'
        DOCKER_HOST="$DH" docker inspect -f 'caps: {{{{.HostConfig.Memory}}}} {{{{.HostConfig.PidsLimit}}}} {{{{.HostConfig.CapDrop}}}} user={{{{.Config.User}}}}' caps
        DOCKER_HOST="$DH" docker inspect -f 'bound: {{{{.HostConfig.Memory}}}} {{{{.HostConfig.PidsLimit}}}} {{{{.HostConfig.SecurityOpt}}}} user={{{{.Config.User}}}}' bound
        echo "containers: $(DOCKER_HOST="$DH" docker ps -aq | wc -l)"
        {DOCKERD_STOP}"#
    );
    let (out, err) = docker_scenario(&w, &body);
    let memory = half_the_memory();
    for (flag, what) in [
        ("--ulimit memlock=-1", "--ulimit memlock=unlimited: above the sandbox's own"),
        ("--oom-kill-disable", "--oom-kill-disable: at its memory limit"),
        ("--cpu-rt-runtime 950000", "--cpu-rt-runtime: realtime CPU time"),
        ("--shm-size 64g", "--shm-size 64g: more than the sandbox's own /dev/shm (1g)"),
        ("--ulimit rtprio=99", "--ulimit rtprio=99: above the sandbox's own"),
        ("--memory 100t", "more than a container may have"),
    ] {
        let line = out.lines().find(|l| l.starts_with(&format!("{flag}: ")));
        assert!(
            line.is_some_and(
                |l| l.contains("refused by the Docker gateway (rule resources)") && l.contains(what)
            ),
            "{flag}: {line:?}\n{out}\n{err}"
        );
    }
    assert_eq!(out.matches("created").count(), 2, "{out}\n{err}");
    has(&out, &format!("caps: {memory} 4096 [MKNOD SETFCAP FSETID] user="), &err);
    // The sandbox's user and group (the launcher's: the netlock group in these tests).
    let g = crate::support::sandbox::netlock_gid();
    has(&out, &format!("bound: 67108864 50 [no-new-privileges] user=1990:{g}"), &err);
    has(&out, "containers: 2", &err);
}
