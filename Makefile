# The few commands people need. `make help` lists them.
GO            ?= go
STATICCHECK   ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
PROMTOOL      ?= promtool
BIN           := bin

.PHONY: help run test vet fmtcheck staticcheck unit rules openapi-lint build fmt soak console-screenshots

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

run: ## run the whole system in one process (etlctl dev)
	$(GO) run ./cmd/etlctl dev

test: fmtcheck vet staticcheck rules openapi-lint unit ## the README's test command: gofmt, vet, staticcheck, rule checks, OpenAPI lint, go test -race

fmtcheck: ## fail when a Go file is not gofmt-clean
	@files=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi

vet: ## go vet, in the service module and in the client module (client/)
	$(GO) vet ./...
	cd client && $(GO) vet ./...

staticcheck: ## staticcheck, in both modules
	$(STATICCHECK) ./...
	cd client && $(STATICCHECK) ./...

rules: ## promtool check and unit-test the Prometheus alert rules (required under CI=true)
	@if ! command -v $(PROMTOOL) >/dev/null 2>&1; then \
	  if [ "$$CI" = "true" ]; then echo "promtool is required in CI (apt-get install prometheus)"; exit 1; fi; \
	  echo "promtool not installed: skipping the alert-rule checks (apt-get install prometheus)"; \
	else \
	  $(PROMTOOL) check rules deploy/prometheus/*.rules.yml && \
	  $(PROMTOOL) test rules deploy/prometheus/tests/*.yml; \
	fi

openapi-lint: ## lint docs/openapi.yaml with Redocly CLI's recommended rules (pinned in tools/openapi-lint; needs node/npm)
	tools/openapi-lint/lint.sh docs/openapi.yaml

unit: ## go test -race over every package of both modules
	$(GO) test -race -count=1 -timeout 30m ./...
	cd client && $(GO) test -race -count=1 -timeout 10m ./...

console-screenshots: ## refresh docs/console/*.png from the console browser test (needs chromium and PostgreSQL)
	MIGHTYETL_CONSOLE_SCREENSHOTS=1 $(GO) test -count=1 -run TestConsoleInBrowser ./internal/console/

soak: ## the fault-injection test for 30 minutes, with RSS and goroutine samples (docs/reliability.md)
	MIGHTYETL_FAULT_DURATION=30m $(GO) test -count=1 -run TestFaultInjection -timeout 40m -v ./internal/faultinject

build: ## build the binaries into ./bin
	$(GO) build -o $(BIN)/ ./cmd/...

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')
