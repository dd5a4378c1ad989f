# The README's test command is `make test`; .ci/run runs it, then `make e2e`.
GO ?= go
SHELL := /bin/bash

.PHONY: test e2e bench fuzz build

test:
	$(GO) test -race -timeout 20m ./...

e2e:
	$(GO) test -count=1 -tags e2e -timeout 20m -v ./e2e/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)' ; exit $${PIPESTATUS[0]}

build:
	CGO_ENABLED=0 $(GO) build -o ackflow ./cmd/ackflow

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeFrame -fuzztime 60s ./wire/
