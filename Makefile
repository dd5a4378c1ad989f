# The README's test command is `make test`; .ci/run runs it, then `make e2e`.
GO ?= go
SHELL := /bin/bash

.PHONY: test e2e bench fuzz build images soak

# ./workers/ first: its tests take six of the suite's minutes and, listed
# first, start at once beside the other packages instead of alone after
# them (go test runs packages in the order given, -p at a time, and prints
# their results in that order).
test:
	$(GO) test -race -timeout 20m ./workers/ ./...
	$(GO) -C tools/tailtrace test -race ./...

# e2e/run says how: the docker fault suite runs beside the other tests.
e2e:
	GO=$(GO) ./e2e/run

build:
	CGO_ENABLED=0 $(GO) build -o ackflow ./cmd/ackflow

# Every decoder of what arrives from outside (frames, the cluster's KV
# entries, checkpoint manifests and task objects, keyed state, positions,
# the JetStream sink's outputs, dead letters), FUZZTIME each. Their seed
# corpora run in every go test.
FUZZTIME ?= 30s
FUZZ_TARGETS := wire:FuzzDecodeFrame cluster:FuzzDecodeSpec cluster:FuzzDecodeGeneration cluster:FuzzDecodeMember cluster:FuzzDecodeSpoutPosition \
	checkpoint:FuzzReadManifest workers:FuzzDecodeSnapshot topology:FuzzStateRestore sources:FuzzDecodePosition \
	sinks:FuzzJetStreamRestore sinks:FuzzFileRestore deadletter:FuzzLetterJSON
fuzz:
	@set -eo pipefail; for t in $(FUZZ_TARGETS); do \
		echo "== $${t#*:} (./$${t%%:*}/, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) ./$${t%%:*}/ 2>&1 | grep -v '^fuzz: elapsed'; \
	done

# Static binaries and the images of deploy/ (FROM scratch: nothing is
# pulled). IMAGE_TAG picks the tag; docker-compose reads it as ACKFLOW_TAG.
IMAGE_TAG ?= dev
NATSCLI ?= github.com/nats-io/natscli/nats@v0.5.0
images:
	mkdir -p deploy/build
	CGO_ENABLED=0 $(GO) build -trimpath -o deploy/build/ackflow ./cmd/ackflow
	CGO_ENABLED=0 $(GO) build -trimpath -o deploy/build/nats-server github.com/nats-io/nats-server/v2
	CGO_ENABLED=0 GOBIN=$(CURDIR)/deploy/build $(GO) install $(NATSCLI)
	docker build -q -t ackflow:$(IMAGE_TAG) -f deploy/Dockerfile.ackflow deploy/build
	docker build -q -t ackflow-nats:$(IMAGE_TAG) -f deploy/Dockerfile.nats deploy/build

# Ten minutes of word count at a steady 1,500 lines/s with a worker crash
# every 30 s; samples and a plot go to soak-out/ (package soak says more). Not in
# CI. ACKFLOW_SOAK_DURATION, _CRASH_EVERY, _RATE and _OUT tune it.
soak:
	$(GO) test -count=1 -tags soak -run TestSoak -timeout 40m -v ./soak/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|    [a-z_]+_test.go:)' ; exit $${PIPESTATUS[0]}
