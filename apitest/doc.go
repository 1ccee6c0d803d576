// Package apitest holds tests that need tools the product must not depend
// on: the OpenAPI contract (api/openapi.yaml) checked against the real
// daemon's answers with kin-openapi, and the runnable examples/ (Go,
// Python, shell, PHP) run against a real daemon on real masters. It is a
// module of its own so that its test dependencies never enter the
// product's go.mod. Run it with `make test` or `cd apitest && go test ./...`.
package apitest
