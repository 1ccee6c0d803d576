package chaos

import (
	"context"
	"fmt"
	"os"
	"time"
)

// TargetFunc provides the target for one scenario and a function that
// releases it: a fresh ProcessTarget per scenario, or the same compose
// deployment for all.
type TargetFunc func(ctx context.Context) (Target, func() error, error)

// RunMatrix runs scenarios in order and returns the report. outDir, if not
// empty, receives the timelines (Report.Write adds the rest). It stops
// early only when ctx ends.
func RunMatrix(ctx context.Context, cfg Config, scenarios []*Scenario, target TargetFunc, outDir string) (*Report, error) {
	cfg = cfg.withDefaults()
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return nil, err
		}
	}
	rep := &Report{
		Started: time.Now(), Duration: cfg.Duration.String(), TTL: cfg.TTL.String(),
		Clients: cfg.Clients, Keys: cfg.Keys, Via: cfg.Via, Seed: cfg.Seed,
	}
	for _, sc := range scenarios {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		t, release, err := target(ctx)
		if err != nil {
			rep.Results = append(rep.Results, &Result{Scenario: sc.Name, Summary: sc.Summary, Control: sc.Control(), Error: "target: " + err.Error(), Counts: map[string]int{}})
			continue
		}
		rep.Target = t.Name()
		res := Run(ctx, t, cfg, sc, outDir)
		if err := release(); err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("releasing the target: %v", err))
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}
