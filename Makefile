# vmeta — guest metadata for libvirt/KVM hosts.
# `make help` lists the targets.

GO        ?= go
BIN       := bin
RUN_DIR   := $(CURDIR)/.run
GOFLAGS_T ?= -count=1

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-8s %s\n", $$1, $$2}'

.PHONY: build
build: ## build the binaries into bin/
	$(GO) build -o $(BIN)/ ./hostctl/cmd/hostctl ./server/cmd/vmeta-metadata

.PHONY: agent
agent: ## build the static guest agent bin/vmeta-agent (no cgo; a GPL-3.0 binary, see guest/README.md)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/vmeta-agent ./guest/cmd/vmeta-agent
	@ls -l $(BIN)/vmeta-agent

.PHONY: run
run: build ## run hostctl serve on the embedded store with examples/web.yaml applied
	@mkdir -p $(RUN_DIR)
	VMETA_SOCKET=$(RUN_DIR)/hostctl.sock $(BIN)/hostctl serve --data-dir $(RUN_DIR)/data \
		--metadata-listen 127.0.0.1:8775 --virt none --apply examples/web.yaml

.PHONY: setup
setup: ## install and start what the tests need (Debian 12, as root; idempotent)
	bash test/setup

.PHONY: test
test: setup ## install what the tests need, then run every test (race detector on)
	$(GO) vet ./...
	$(GO) test $(GOFLAGS_T) -race -timeout 30m ./...

.PHONY: bench
bench: setup ## benchmarks, then whole-system comparisons side by side
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./test/bench/isocompare
	$(GO) run ./test/bench/metadata -rounds 3
	$(GO) run ./test/bench/apply

.PHONY: lint
# Linters run at pinned versions through the module proxy (`go run`), so a
# fresh machine needs nothing installed beforehand.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
ERRORLINT   := github.com/polyfloyd/go-errorlint@v1.8.0
lint: ## gofmt, go vet, staticcheck and errorlint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(ERRORLINT) ./...

.PHONY: fuzz
fuzz: ## run each fuzz target for a short while
	$(GO) test -run '^$$' -fuzz FuzzParseSpec -fuzztime 30s ./internal/model/
	$(GO) test -run '^$$' -fuzz FuzzValidateTag -fuzztime 30s ./internal/model/
	$(GO) test -run '^$$' -fuzz FuzzDecodeTree -fuzztime 30s ./internal/metadata/
	$(GO) test -run '^$$' -fuzz FuzzRead -fuzztime 30s -fuzzminimizetime 3s ./configdrive/
	$(GO) test -run '^$$' -fuzz FuzzNormalizePath -fuzztime 30s ./server/
	$(GO) test -run '^$$' -fuzz FuzzIdentify -fuzztime 30s ./server/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./guest/source/
	$(GO) test -run '^$$' -fuzz FuzzEncodeTag -fuzztime 30s ./guest/udev/
	$(GO) test -run '^$$' -fuzz FuzzParseEntry -fuzztime 30s ./guest/udev/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./guest/uevent/

.PHONY: clean
clean: ## remove build output and the `make run` data
	rm -rf $(BIN) $(RUN_DIR)
