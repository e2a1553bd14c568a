//! `ocsb egress up` and `down` as the user types them, in a namespace of the test's own: the
//! detached filter keeps none of the caller's descriptors, so a captured or piped `up` returns
//! at once, and `down` says "stopped" only once the process is gone.

use crate::support::sandbox::{World, has, scenario};

#[test]
fn egress_up_returns_when_captured_or_piped_and_down_means_gone() {
    let w = World::new();
    let pid_file = w.state.join("egress/serve.pid");
    let (out, err) = scenario(
        &w,
        &format!(
            r#"# The filter runs as the user's own group (the shim gives only the sandbox the netlock group).
        V() {{ env -i PATH=/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$@" </dev/null; }}
        s=$(date +%s)
        said=$(timeout 20 env -i PATH=/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up 2>&1 </dev/null)
        echo "captured rc=$? quick=$(( $(date +%s) - s < 10 ))"
        echo "said: $(echo "$said" | head -1 | cut -d: -f1)"
        s=$(date +%s)
        timeout 20 env -i PATH=/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up </dev/null 2>&1 | cat >/dev/null
        echo "piped rc=${{PIPESTATUS[0]}} quick=$(( $(date +%s) - s < 10 ))"
        pid=$(cat {pid})
        echo "running $(kill -0 "$pid" 2>/dev/null && echo yes || echo no)"
        echo "down: $(V "$OCSB" egress down 2>&1)"
        # A zombie waiting for a reaper that is not ours (pid 1 here may be no init) is gone too.
        st=$(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null)
        echo "after $( [ -z "$st" ] || [ "$st" = Z ] && echo gone || echo "alive ($st)")"
        echo "again: $(V "$OCSB" egress down 2>&1)""#,
            pid = crate::support::sandbox::shell_quote(&pid_file.display().to_string())
        ),
    );
    has(&out, "captured rc=0 quick=1", &err);
    has(&out, "said: egress filter (builtin) started", &err);
    has(&out, "piped rc=0 quick=1", &err);
    has(&out, "running yes", &err);
    has(&out, "down: egress filter stopped", &err);
    has(&out, "after gone", &err);
    has(&out, "again: egress filter was not running", &err);
}
