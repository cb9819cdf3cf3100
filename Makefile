# The few commands people need. `make help` lists them.
GO            ?= go
# staticcheck is pinned as a tool in go.mod (`go get -tool`), so it comes with
# the modules; it is built once into bin/ and run over both modules.
STATICCHECK   ?= $(BIN)/staticcheck
PROMTOOL      ?= promtool
BIN           := bin
# The build's identity for `make build` and `make image` (internal/buildinfo):
# `etlctl version` and mightyetl_build_info report them.
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
COMMIT        ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
MODIFIED      ?= $(shell if [ -n "$$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then echo true; else echo false; fi)
BUILDINFO     := github.com/mightyetl/mightyetl/internal/buildinfo
LDFLAGS       := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).modified=$(MODIFIED)

.PHONY: help run test hygiene vet fmtcheck staticcheck unit rules openapi-lint migration-lint build image fmt soak console-screenshots

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

run: ## run the whole system in one process (etlctl dev)
	$(GO) run ./cmd/etlctl dev

test: hygiene fmtcheck vet staticcheck rules openapi-lint migration-lint unit ## the README's test command: hygiene, gofmt, vet, staticcheck, rule checks, OpenAPI lint, migration lint, go test -race

# A tracked executable over 1 MB is almost always a build output committed by
# mistake (it bloats every clone for good); the size is the blob's in the index.
hygiene: ## fail naming every tracked executable file (mode 100755) over 1 MB
	@bad=$$(git ls-files -s | awk -F '\t' '{ split($$1, f, " "); if (f[1] == "100755") print f[2] "\t" $$2 }' | \
	  while IFS='	' read -r blob path; do \
	    if [ "$$(git cat-file -s "$$blob")" -gt 1048576 ]; then echo "  $$path"; fi; \
	  done); \
	if [ -n "$$bad" ]; then \
	  echo "tracked executables over 1 MB (git rm --cached them and add them to .gitignore):"; echo "$$bad"; exit 1; \
	fi

fmtcheck: ## fail when a Go file is not gofmt-clean
	@files=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi

vet: ## go vet, in the service module and in the client module (client/)
	$(GO) vet ./...
	cd client && $(GO) vet ./...

staticcheck: ## staticcheck (the version go.mod's tool line pins), in both modules
	$(GO) build -o $(BIN)/staticcheck honnef.co/go/tools/cmd/staticcheck
	$(STATICCHECK) ./...
	cd client && $(abspath $(STATICCHECK)) ./...

rules: ## promtool check and unit-test the Prometheus alert rules (fails without promtool: apt-get install prometheus)
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { echo "promtool not found: install it (apt-get install prometheus, or set PROMTOOL=/path/to/promtool); the alert rules are never skipped"; exit 1; }
	$(PROMTOOL) check rules deploy/prometheus/*.rules.yml
	$(PROMTOOL) test rules deploy/prometheus/tests/*.yml

openapi-lint: ## lint docs/openapi.yaml with Redocly CLI's recommended rules (pinned in tools/openapi-lint; needs node/npm)
	tools/openapi-lint/lint.sh docs/openapi.yaml

migration-lint: ## lint migrations/ with squawk (pinned in tools/migration-lint; past findings in its baseline.txt; needs node/npm)
	tools/migration-lint/lint.sh migrations

unit: ## go test -race over every package of both modules
	$(GO) test -race -count=1 -timeout 30m ./...
	cd client && $(GO) test -race -count=1 -timeout 10m ./...

console-screenshots: ## refresh docs/console/*.png from the console browser test (needs chromium and PostgreSQL)
	MIGHTYETL_CONSOLE_SCREENSHOTS=1 $(GO) test -count=1 -run '^(TestConsoleInBrowser|TestConsoleOwnersInBrowser)$$' ./internal/console/

soak: ## the fault-injection test for 30 minutes, with RSS and goroutine samples (docs/reliability.md)
	MIGHTYETL_FAULT_DURATION=30m $(GO) test -count=1 -run TestFaultInjection -timeout 40m -v ./internal/faultinject

build: ## build the binaries into ./bin, stamped with git describe and the commit
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

image: ## build the Docker image mightyetl:$(VERSION) with the same stamp
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg MODIFIED=$(MODIFIED) -t mightyetl:$(VERSION) .

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')
