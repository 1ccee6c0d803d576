module github.com/redlockd/redlockd

// go 1.26.0 is the first Go 1.26 release, not a patch: go-redis v9.23,
// client_golang v1.25 and x/sys v0.48 declare it, and "go mod tidy" raises
// a plain "go 1.26" (an earlier version, by Go's ordering) to it. Any 1.26.x
// toolchain builds this module.
go 1.26.0

require (
	github.com/agnivade/levenshtein v1.2.2
	github.com/go-json-experiment/json v1.27.2
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.28.0
	go.uber.org/zap/exp v0.3.0
	golang.org/x/sync v0.22.0
	golang.org/x/sys v0.48.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
