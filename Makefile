# ocsb — build, install, test.
#
#   make                  build release binaries, man pages and completions (as yourself)
#   sudo make install     install under PREFIX (default /usr/local); builds first if cargo is on PATH
#   sudo make uninstall   remove everything `install` put there
#   make deb | make rpm   build the packages (cargo-deb / cargo-generate-rpm)
#   make test             as root on Debian 12: install test dependencies, then lint and run every test
#
# What gets installed where is packaging/files.list, the one list the packages use too.

PREFIX  ?= /usr/local
DESTDIR ?=
CARGO   ?= cargo
TARGET  := $(or $(CARGO_TARGET_DIR),target)
RELEASE ?= $(TARGET)/release

# The egress filter (`ocsb-egress`) runs for a whole session: linked statically, it maps only the
# code it runs (the memory figures of docs/benchmarks.md). This re-links that one binary statically and keeps
# it as $(RELEASE)/static/ocsb-egress, where the next cargo command (which links it dynamically
# in $(RELEASE)) does not overwrite it; that copy is what gets installed.
FILTER_STATIC = $(CARGO) rustc --release --locked -p ocsb-egress --bin ocsb-egress -- -C target-feature=+crt-static && \
	install -D -m 0755 $(RELEASE)/ocsb-egress $(RELEASE)/static/ocsb-egress

.PHONY: all build install uninstall deb rpm test test-deps lint check

all: build

build:
	$(CARGO) build --release --locked --workspace
	$(FILTER_STATIC)
	$(RELEASE)/ocsb-xtask gen --out $(RELEASE)

# Under sudo, root's PATH often has no cargo: then install what `make` built as the user.
install:
	@if command -v $(CARGO) >/dev/null 2>&1; then $(MAKE) build; \
	elif [ ! -x $(RELEASE)/ocsb ] || [ ! -x $(RELEASE)/static/ocsb-egress ]; then \
	  echo "no cargo on root's PATH and nothing built: run 'make' as yourself first, then 'sudo make install'" >&2; exit 1; fi
	PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) BUILD=$(RELEASE) sh packaging/install.sh install
	@echo "installed under $(DESTDIR)$(PREFIX); next: cd your-project && ocsb init && ocsb run"

uninstall:
	PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) sh packaging/uninstall.sh

deb: build
	$(CARGO) deb -p ocsb-xtask --no-build --locked

rpm: build
	$(CARGO) generate-rpm -p packaging/xtask --target-dir $(TARGET)

test-deps:
	@sh tests/install-deps.sh

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --all-features --locked -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --all-features --locked

# One release build serves the tests and the packaging checks (a second, debug build would
# double CI's compile time on two cores). --all-features turns on each crate's `host-tests`: the
# suites that need root, the test user, network namespaces and the tools of install-deps.sh
# (without it, `cargo test` runs what an ordinary user can). The feature recompiles the
# workspace's own crates once more, not their dependencies.
test: test-deps lint
	$(CARGO) build --release --locked --workspace
	$(FILTER_STATIC)
	$(RELEASE)/ocsb-xtask gen --out $(RELEASE)
	$(CARGO) test --release --workspace --all-features --locked --no-fail-fast
	sh packaging/tests/run.sh

check: lint
