# ocsb — build, install, test.
#
#   make                  build release binaries (as yourself)
#   sudo make install     install under PREFIX (default /usr/local); builds first if cargo is on PATH
#   sudo make uninstall   remove everything `install` put there
#   make test             as root on Debian 12: install test dependencies, then lint and run every test

PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  := $(DESTDIR)$(PREFIX)/bin
CARGO   ?= cargo
RELEASE := target/release

BINARIES := ocsb

.PHONY: all build install uninstall test test-deps lint check

all: build

build:
	$(CARGO) build --release --locked --workspace

# Under sudo, root's PATH often has no cargo: then install what `make` built as the user.
install:
	@if command -v $(CARGO) >/dev/null 2>&1; then $(MAKE) build; \
	elif [ ! -x $(RELEASE)/ocsb ]; then \
	  echo "no cargo on root's PATH and nothing built: run 'make' as yourself first, then 'sudo make install'" >&2; exit 1; fi
	install -d -m 0755 $(BINDIR)
	install -m 0755 $(RELEASE)/ocsb $(BINDIR)/ocsb
	@echo "installed under $(DESTDIR)$(PREFIX); next: cd your-project && ocsb init && ocsb run"

uninstall:
	rm -f $(BINDIR)/ocsb

test-deps:
	@sh tests/install-deps.sh

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

test: test-deps lint
	$(CARGO) test --workspace --locked --no-fail-fast

check: lint
