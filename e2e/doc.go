// Package e2e holds tests that build the ackflow binary (and
// e2e/shapesworker, a worker binary of the kind a user builds with
// cli.Main) and run it as a real process. They are behind the e2e build tag because they take longer
// than unit tests: run them with `go test -tags e2e ./e2e/`, or with
// `make e2e` (.ci/run does), which runs the docker fault suite beside the
// others (e2e/run).
package e2e
