package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ory/dockertest/v3/docker"
)

// DaemonRestarter is a Target whose daemons can be stopped and started
// again, as a deploy does: a daemon started again knows nothing of what it
// saw before (no clock readings, no run_ids), and serves at the same URL.
// Both back-ends implement it.
type DaemonRestarter interface {
	// StopDaemons stops every daemon; their URLs refuse connections until
	// StartDaemons.
	StopDaemons(ctx context.Context) error
	// StartDaemons starts every stopped daemon again, with a fresh client,
	// and returns once each answers GET /healthz.
	StartDaemons(ctx context.Context) error
}

// StopDaemons implements DaemonRestarter: each in-process daemon is shut
// down and its redlock.Client closed. Not safe while Counting or Ready run.
func (t *ProcessTarget) StopDaemons(context.Context) error {
	var errs []error
	for _, d := range t.daemons {
		errs = append(errs, d.close())
	}
	return errors.Join(errs...)
}

// StartDaemons implements DaemonRestarter: a new daemon, with a new
// redlock.Client (which probes every master once before it serves), on the
// address the stopped one listened on.
func (t *ProcessTarget) StartDaemons(ctx context.Context) error {
	for i, old := range t.daemons {
		if !old.stopped() {
			continue
		}
		addr := strings.TrimPrefix(old.info.URL, "http://")
		d, err := startGroupedDaemon(old.info.Name, old.info.View, t.groupAddrs(old.info.View), t.opts.Daemon, addr)
		if err != nil {
			return fmt.Errorf("chaos: start daemon %s again on %s: %w", old.info.Name, addr, err)
		}
		t.daemons[i] = d
	}
	return waitHealthz(ctx, t.Daemons())
}

// StopDaemons implements DaemonRestarter: docker kill of every daemon
// container at once (what a daemon knew lives in its memory only, so a
// graceful stop would show nothing more, and takes seconds).
func (t *DockerTarget) StopDaemons(ctx context.Context) error {
	return eachMaster(ctx, indices(len(t.daemonIDs)), func(ctx context.Context, i int) error {
		err := t.dc.KillContainer(docker.KillContainerOptions{ID: t.daemonIDs[i], Signal: docker.SIGKILL, Context: ctx})
		var not *docker.ContainerNotRunning
		if err != nil && !errors.As(err, &not) {
			return fmt.Errorf("chaos: docker kill %s: %w", t.opts.DaemonServices[i], err)
		}
		return nil
	})
}

// StartDaemons implements DaemonRestarter: docker start of every daemon
// container at once; the published ports stay the same.
func (t *DockerTarget) StartDaemons(ctx context.Context) error {
	err := eachMaster(ctx, indices(len(t.daemonIDs)), func(ctx context.Context, i int) error {
		err := t.dc.StartContainerWithContext(t.daemonIDs[i], nil, ctx)
		var already *docker.ContainerAlreadyRunning
		if err != nil && !errors.As(err, &already) {
			return fmt.Errorf("chaos: docker start %s: %w", t.opts.DaemonServices[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return waitHealthz(ctx, t.Daemons())
}

// indices returns 0..n-1.
func indices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// waitHealthz waits, at most 60s, until every daemon answers GET /healthz
// with 200.
func waitHealthz(ctx context.Context, daemons []Daemon) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(60 * time.Second)
	for _, dm := range daemons {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, dm.URL+"/healthz", nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("chaos: daemon %s does not answer %s/healthz: %w", dm.Name, dm.URL, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}
