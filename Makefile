# vmeta — guest metadata for libvirt/KVM hosts.
# `make help` lists the targets.

GO        ?= go
BIN       := bin
RUN_DIR   := $(CURDIR)/.run
GOFLAGS_T ?= -count=1
# The version the binaries print (hostctl version, vmeta-agent version) and
# the packages carry, and the commit time every packaged file gets.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
LDFLAGS   := -X github.com/vmeta/vmeta/internal/version.Version=$(VERSION)
DIST      := $(BIN)/dist

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-8s %s\n", $$1, $$2}'

.PHONY: build
build: ## build the binaries into bin/
	$(GO) build -ldflags='$(LDFLAGS)' -o $(BIN)/ ./hostctl/cmd/hostctl ./server/cmd/vmeta-metadata

.PHONY: agent
agent: ## build the static guest agent bin/vmeta-agent (no cgo; a GPL-3.0 binary, see guest/README.md)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(LDFLAGS)' -o $(BIN)/vmeta-agent ./guest/cmd/vmeta-agent
	@ls -l $(BIN)/vmeta-agent

.PHONY: package
package: ## build the packages into bin/dist/: vmeta-agent .deb/.rpm, vmeta-host .deb (man pages, completions, /etc/vmeta/hostctl.yaml), and the agent's GPL source archive
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(LDFLAGS)' -o $(BIN)/pkg/ ./guest/cmd/vmeta-agent ./hostctl/cmd/hostctl ./server/cmd/vmeta-metadata
	rm -f $(DIST)/*.deb $(DIST)/*.rpm
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./internal/pkgbuild/cmd/pkgbuild -bin $(BIN)/pkg -out $(DIST) -describe $(VERSION)
	@# The complete corresponding source of the GPL-3.0 agent binary: the
	@# commit (with uncommitted changes when -dirty) and its modules, vendored.
	rm -rf $(BIN)/src && mkdir -p $(BIN)/src/vmeta-$(VERSION)
	git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C $(BIN)/src/vmeta-$(VERSION)
	cd $(BIN)/src/vmeta-$(VERSION) && $(GO) mod vendor
	tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner -cf - -C $(BIN)/src vmeta-$(VERSION) | gzip -n9 >$(DIST)/vmeta-$(VERSION)-source.tar.gz
	rm -rf $(BIN)/src
	@ls -l $(DIST)
	@if command -v lintian >/dev/null 2>&1; then lintian --fail-on error,warning --tag-display-limit 0 $(DIST)/*.deb; else echo "lintian not installed: packages not checked"; fi

.PHONY: run
run: build ## run hostctl serve on the embedded store with examples/web.yaml applied
	@mkdir -p $(RUN_DIR)
	VMETA_SOCKET=$(RUN_DIR)/hostctl.sock $(BIN)/hostctl serve --data-dir $(RUN_DIR)/data \
		--metadata-listen 127.0.0.1:8775 --virt none --apply examples/web.yaml

.PHONY: setup
setup: ## install and start what the tests need (Debian 12, as root; idempotent)
	bash test/setup

.PHONY: test
# setup installed every service, so a test that would skip for want of one
# fails instead (internal/testenv): a plain `make test` cannot pass by skipping.
# gotestsum (pinned, through the module proxy like the linters) prints one
# line per package with its time, and the output of each failed test; it
# runs $(GO) test -json itself (--raw-command) and exits with its status.
# The tests of test hooks (files with the vmetacrash build tag, as in
# internal/crashpoint) run in a second go test with the tag. At the end: the
# slowest packages and tests, from the JSON both runs leave in $(TEST_JSON).
GOTESTSUM := gotest.tools/gotestsum@v1.13.0
TEST_JSON := $(BIN)/test.json
TEST_TAGGED := ./hostctl/shares/
TEST_TAGGED_RUN := '^(TestAttachFaults|TestDetachFaults)$$'
test: setup package ## install what the tests need, build the packages, then run every test (race detector on; skips of missing services fail), each package's time and the slowest at the end
	$(GO) vet ./...
	$(GO) vet -tags vmetacrash $(TEST_TAGGED)
	@mkdir -p $(BIN)
	@rc=0; \
	VMETA_REQUIRE_INTEGRATION=1 $(GO) run $(GOTESTSUM) --format pkgname-and-test-fails --format-hide-empty-pkg \
		--jsonfile $(TEST_JSON).all --raw-command -- $(GO) test -json $(GOFLAGS_T) -race -timeout 45m ./... || rc=1; \
	VMETA_REQUIRE_INTEGRATION=1 $(GO) run $(GOTESTSUM) --format pkgname-and-test-fails \
		--jsonfile $(TEST_JSON).tagged --raw-command -- $(GO) test -json $(GOFLAGS_T) -race -tags vmetacrash -timeout 45m -run $(TEST_TAGGED_RUN) $(TEST_TAGGED) || rc=1; \
	cat $(TEST_JSON).all $(TEST_JSON).tagged >$(TEST_JSON) 2>/dev/null; \
	echo "slowest packages (s):"; \
	grep -E '^\{"Time":"[^"]*","Action":"(pass|fail)","Package":"[^"]*","Elapsed":' $(TEST_JSON) | \
		sed -E 's/.*"Action":"([a-z]+)","Package":"([^"]*)","Elapsed":([0-9.]+).*/\3 \2 \1/' | sort -rn | head -15; \
	echo "slowest tests (over 30s):"; \
	$(GO) run $(GOTESTSUM) tool slowest --jsonfile $(TEST_JSON) --threshold 30s | head -25; \
	exit $$rc

.PHONY: bench
bench: setup ## benchmarks, then whole-system comparisons side by side
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./test/bench/isocompare
	$(GO) run ./test/bench/metadata -rounds 3
	$(GO) run ./test/bench/apply
	$(GO) run ./test/bench/luks

.PHONY: lint
# Linters run at pinned versions through the module proxy (`go run`), so a
# fresh machine needs nothing installed beforehand.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
ERRORLINT   := github.com/polyfloyd/go-errorlint@v1.8.0
lint: ## gofmt, go vet, staticcheck and errorlint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(ERRORLINT) -errorf ./...

.PHONY: fuzz
fuzz: ## run each fuzz target for a short while
	$(GO) test -run '^$$' -fuzz FuzzParseSpec -fuzztime 30s ./internal/model/
	$(GO) test -run '^$$' -fuzz FuzzValidateTag -fuzztime 30s ./internal/model/
	$(GO) test -run '^$$' -fuzz FuzzDecodeTree -fuzztime 30s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzRead -fuzztime 30s -fuzzminimizetime 3s ./configdrive/
	$(GO) test -run '^$$' -fuzz FuzzNormalizePath -fuzztime 30s ./server/
	$(GO) test -run '^$$' -fuzz FuzzIdentify -fuzztime 30s ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 30s ./guest/source/
	$(GO) test -run '^$$' -fuzz FuzzParseFirmware -fuzztime 30s ./guest/source/
	$(GO) test -run '^$$' -fuzz FuzzParseFirmwareRevision -fuzztime 30s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzEncodeTag -fuzztime 30s ./guest/udev/
	$(GO) test -run '^$$' -fuzz FuzzProperties -fuzztime 30s ./hostctl/encryption/policy/
	$(GO) test -run '^$$' -fuzz FuzzParseEntry -fuzztime 30s ./guest/udev/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./guest/uevent/
	$(GO) test -run '^$$' -fuzz FuzzCheckAgreesWithSchema -fuzztime 30s ./schema/
	$(GO) test -run '^$$' -fuzz FuzzPatterns -fuzztime 30s ./schema/check/
	$(GO) test -run '^$$' -fuzz FuzzReadResponse -fuzztime 30s ./guest/source/
	$(GO) test -run '^$$' -fuzz FuzzUUID -fuzztime 30s ./internal/uuid/

.PHONY: clean
clean: ## remove build output and the `make run` data
	rm -rf $(BIN) $(RUN_DIR)
