package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redlockd/redlockd/config"
)

const groupsChangeUsage = `Usage: redlockd groups-change --daemons URL,URL,… [--to G,G,…] [--wait] [--interval 2s]

Shows the progress of a change of master groups (docs/operations.md,
"Changing the master groups") from every daemon's GET /readyz:

  step 1: every daemon runs with previous_master_groups (phase "moving");
  step 2: max TTL after the last one started so, every lock taken by a
          daemon without it has ended;
  step 3: every daemon runs without previous_master_groups (phase
          "stable" over the new groups).

List every daemon serving the masters (e.g. each pod's address): a daemon
left out, still on the old groups, is the one that could grant a moved key
twice. Without --wait it reports once; with --wait it reports every
--interval until step 2 is done (or every daemon is on the new groups), and
exits 0 then. Exit status 1: a daemon did not answer (with --wait too, at
any report: list the daemons that serve, not one already stopped), or the daemons
disagree on the groups: moving daemons with different groups, or daemons
locking in different groups with none moving between them (old and new
at once), which can grant a moved key twice. Flags:
`

// daemonPlacement is what groups-change reads from one daemon's /readyz.
type daemonPlacement struct {
	Placement      *placementBody `json:"placement"`
	LongestMaxTTLS int64          `json:"longest_max_ttl_s"`
	// Quorum is in every /readyz answer: without it the answer is not a
	// daemon's (a 404 page, another service's JSON).
	Quorum *json.RawMessage `json:"quorum"`
}

// placementBody is /readyz's placement (daemon.readyPlacement).
type placementBody struct {
	Phase   string   `json:"phase"`
	From    []string `json:"from"`
	To      []string `json:"to"`
	SinceMS int64    `json:"since_ms"`
	// OldUntilMS, of a moving daemon: until when daemons on its previous
	// groups may still be locking, by the placement registry
	// (daemon/placements.go); 0 none registered, -1 not read from a quorum
	// yet; absent (nil) from a daemon without the registry.
	OldUntilMS *int64 `json:"old_until_ms"`
	// RegistryReadMS: when the daemon last read the registry from a
	// quorum (its clock, unix ms); an old_until_ms not before it was a
	// registration live when read, which may have been renewed since.
	// Absent (nil) from a daemon without it.
	RegistryReadMS *int64 `json:"registry_read_ms"`
	// OthersUntilMS, of a stable daemon on groups: until when daemons on
	// other groups may still be locking, by the placement registry; 0
	// none, -1 not read yet, nil from a daemon without it.
	OthersUntilMS *int64 `json:"others_until_ms"`
}

// changeProgress is one report over every daemon.
type changeProgress struct {
	moving, onNew, onOld int
	// stepTwoDone: when step 2 ends (zero before every daemon moves).
	stepTwoDone time.Time
	// unread: a moving daemon has not read the placement registry from a
	// quorum yet, or read it while the old daemons were still registered
	// (a later renewal may end later): either way step 2's end is not
	// known.
	unread bool
	// othersEnd: the latest end of a lock that daemons on other groups may
	// have taken, by the registry as the daemons on the new groups read it
	// (their others_until_ms + max TTL); othersUnread: one of them has not
	// read it yet.
	othersEnd    time.Time
	othersUnread bool
	lines        []string
}

func groupsChange(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("groups-change", flag.ContinueOnError)
	fs.SetOutput(stderr)
	daemons := fs.String("daemons", "", "comma-separated base URLs of every daemon, e.g. http://10.0.0.7:7070")
	toFlag := fs.String("to", "", "comma-separated names of the new master groups, in configuration order (default: what the moving daemons say; needed to recognise step 3 once no daemon is moving)")
	var tf lockFlags
	fs.StringVar(&tf.tlsCA, "tls-ca", "", "PEM `file` of the CA of the daemons' HTTPS certificate (default $REDLOCKD_TLS_CA, else the system's CAs)")
	fs.StringVar(&tf.tlsCert, "tls-cert", "", "PEM `file` of a client certificate, for daemons that require one (default $REDLOCKD_TLS_CERT)")
	fs.StringVar(&tf.tlsKey, "tls-key", "", "PEM `file` of --tls-cert's key (default $REDLOCKD_TLS_KEY)")
	wait := fs.Bool("wait", false, "report until step 2 is done")
	interval := fs.Duration("interval", 2*time.Second, "time between reports with --wait")
	fs.Usage = func() {
		fmt.Fprint(stderr, groupsChangeUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("groups-change: unexpected argument %q (give the daemons with --daemons, comma-separated)", fs.Arg(0))
	}
	var urls []string
	for _, u := range strings.Split(*daemons, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			if l := strings.ToLower(u); !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") {
				return fmt.Errorf("groups-change: --daemons: %q is not a base URL: give http://host:port (or https://)", u)
			}
			if slices.Contains(urls, u) {
				return fmt.Errorf("groups-change: --daemons: %q is listed twice: each daemon once", u)
			}
			urls = append(urls, u)
		}
	}
	switch {
	case len(urls) == 0:
		return errors.New("groups-change: --daemons: at least one daemon URL is needed")
	case *interval < 100*time.Millisecond:
		return fmt.Errorf("groups-change: --interval: %v is below 100ms", *interval)
	}
	var to []string
	if *toFlag != "" {
		to = strings.Split(*toFlag, ",")
		for i, name := range to {
			switch {
			case !config.ValidGroupName(name):
				return fmt.Errorf("groups-change: --to: %q is not a group name: need 1-32 characters from a-z 0-9 - (not starting or ending with -), names separated by single commas", name)
			case slices.Index(to, name) != i:
				return fmt.Errorf("groups-change: --to: %q is listed twice", name)
			}
		}
	}
	for _, v := range []struct {
		dst *string
		env string
	}{{&tf.tlsCA, "REDLOCKD_TLS_CA"}, {&tf.tlsCert, "REDLOCKD_TLS_CERT"}, {&tf.tlsKey, "REDLOCKD_TLS_KEY"}} {
		if *v.dst == "" {
			*v.dst = os.Getenv(v.env)
		}
	}
	if (tf.tlsCert == "") != (tf.tlsKey == "") {
		return errors.New("groups-change: --tls-cert and --tls-key (REDLOCKD_TLS_CERT, REDLOCKD_TLS_KEY): give both or neither")
	}
	client, err := tf.httpsClient()
	if err != nil {
		return fmt.Errorf("groups-change: %w", err)
	}
	client.Timeout = 5 * time.Second
	for {
		p, err := readProgress(ctx, client, urls, to)
		for _, l := range p.lines {
			fmt.Fprintln(stdout, l)
		}
		if err != nil {
			return err
		}
		now := time.Now()
		switch {
		case p.onNew == len(urls) && now.Before(p.othersEnd):
			// Only daemons on the new groups were listed, and the
			// placement registry says daemons on other groups may have
			// locked recently: step 3 came before step 2's wait ended.
			return fmt.Errorf("groups-change: every daemon listed is on the new groups, but daemons on other groups may have taken locks that stand until %s (%v more, by the placement registry): the daemons on the new groups grant and extend nothing until then (503, the layout gate); step 3 started before step 2's wait ended",
				p.othersEnd.UTC().Format(time.RFC3339), p.othersEnd.Sub(now).Round(time.Second))
		case p.onNew == len(urls) && p.othersUnread:
			fmt.Fprintln(stdout, "step 3: every daemon listed is on the new groups; waiting until they have read the placement registry from a quorum")
		case p.onNew == len(urls):
			fmt.Fprintf(stdout, "step 3 done: all %d daemons lock on the new groups only; the change is complete\n", len(urls))
			return nil
		case p.moving == 0 && p.onNew == 0 && to == nil:
			fmt.Fprintln(stdout, "no daemon is moving: step 1 has not started, or (give --to) the change is complete")
			return nil
		case p.moving+p.onNew < len(urls):
			fmt.Fprintf(stdout, "step 1: %d of %d daemons lock moved keys in both groups; restart the other %d with previous_master_groups (a reload does not apply it)\n", p.moving+p.onNew, len(urls), p.onOld)
		case p.onNew > 0 && now.Before(p.stepTwoDone):
			// Step 3 started before step 2's wait ended: a lock an old
			// daemon took may still be valid in the key's old group, which
			// a daemon on the new groups does not ask.
			return fmt.Errorf("groups-change: %d of %d daemons lock on the new groups only while step 2's wait is not over (until %s, %v more): a lock taken before the change may still be valid in a moved key's old group, and the key can be granted twice; restart them with previous_master_groups until then",
				p.onNew, len(urls), p.stepTwoDone.UTC().Format(time.RFC3339), p.stepTwoDone.Sub(now).Round(time.Second))
		case p.onNew > 0:
			fmt.Fprintf(stdout, "step 3: %d of %d daemons on the new groups only\n", p.onNew, len(urls))
		case now.Before(p.stepTwoDone):
			fmt.Fprintf(stdout, "step 2: every daemon is moving; waiting %v more (max TTL after the last one moved and the last daemon on the old groups stopped, until %s)\n",
				p.stepTwoDone.Sub(now).Round(time.Second), p.stepTwoDone.UTC().Format(time.RFC3339))
		case p.unread:
			fmt.Fprintln(stdout, "step 2: every daemon is moving; waiting until they can tell when the last daemon on the old groups stopped")
		default:
			fmt.Fprintln(stdout, "step 2 done: every lock taken without previous_master_groups has ended; remove previous_master_groups from every daemon (step 3)")
			return nil
		}
		if !*wait {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(*interval):
		}
	}
}

// readProgress reads every daemon's placement and tells where the change
// is: a stable daemon is on the new groups when they are those every
// moving daemon moves to, else on the old ones.
func readProgress(ctx context.Context, client *http.Client, urls, to []string) (changeProgress, error) {
	var p changeProgress
	toFlag := to != nil // --to, else the first moving daemon's
	var from []string   // the moving daemons' previous groups
	placements := make([]daemonPlacement, len(urls))
	for i, u := range urls {
		d, err := readPlacement(ctx, client, u)
		if err != nil {
			return p, fmt.Errorf("groups-change: %s: %w", u, err)
		}
		if d.Placement == nil { // one masters list: the one group "default"
			d.Placement = &placementBody{Phase: "stable", To: []string{"default"}}
		}
		placements[i] = d
		if pl := d.Placement; pl.Phase == "moving" {
			if from != nil && !slices.Equal(from, pl.From) {
				return p, fmt.Errorf("groups-change: %s moves from groups %v, another daemon from %v: give every daemon the same previous_master_groups", u, pl.From, from)
			}
			from = pl.From
			if to != nil && !slices.Equal(to, pl.To) {
				if toFlag {
					return p, fmt.Errorf("groups-change: %s moves to groups %v, --to says %v", u, pl.To, to)
				}
				return p, fmt.Errorf("groups-change: %s moves to groups %v, another daemon to %v: give every daemon the same master_groups", u, pl.To, to)
			}
			to = pl.To
		}
	}
	var early []int // daemons on the new groups, by index, to check against step 2's wait
	for i, d := range placements {
		pl := d.Placement
		switch {
		case pl.Phase == "moving":
			p.moving++
			if end := time.UnixMilli(pl.SinceMS).Add(time.Duration(d.LongestMaxTTLS) * time.Second); end.After(p.stepTwoDone) {
				p.stepTwoDone = end
			}
			p.lines = append(p.lines, fmt.Sprintf("%s: moving from %v to %v since %s (max TTL %d s)", urls[i], pl.From, pl.To, time.UnixMilli(pl.SinceMS).UTC().Format(time.RFC3339), d.LongestMaxTTLS))
			// Daemons on the old groups may have served on after the
			// moving ones started (a rolling update starts the new
			// daemons first): step 2 lasts until their last possible
			// grant, by the placement registry, plus the max TTL.
			switch old := pl.OldUntilMS; {
			case old == nil:
			case *old < 0:
				p.unread = true
				p.lines = append(p.lines, fmt.Sprintf("%s: has not yet read from a quorum of its first group's masters until when daemons on %v may still be locking", urls[i], pl.From))
			case *old > 0:
				until := time.UnixMilli(*old)
				if end := until.Add(time.Duration(d.LongestMaxTTLS) * time.Second); end.After(p.stepTwoDone) {
					p.stepTwoDone = end
				}
				p.lines = append(p.lines, fmt.Sprintf("%s: daemons on %v may have been locking until %s (the placement registry)", urls[i], pl.From, until.UTC().Format(time.RFC3339)))
				if read := pl.RegistryReadMS; read != nil && *read <= *old {
					// Read while that registration was live: its daemon
					// may have renewed it since, so that end is not yet
					// the last (a test under load had step 2 called
					// done one renewal early, and the daemons on the new
					// groups then answered 503 until its end).
					p.unread = true
					p.lines = append(p.lines, fmt.Sprintf("%s: read the registry at %s, while daemons on %v were still registered: waiting for a reading after their registration ends", urls[i], time.UnixMilli(*read).UTC().Format(time.RFC3339Nano), pl.From))
				}
			}
		case to != nil && slices.Equal(pl.To, to):
			p.onNew++
			p.lines = append(p.lines, fmt.Sprintf("%s: on the new groups %v", urls[i], pl.To))
			early = append(early, i)
			switch o := pl.OthersUntilMS; {
			case o == nil:
			case *o < 0:
				p.othersUnread = true
			case *o > 0:
				if end := time.UnixMilli(*o).Add(time.Duration(d.LongestMaxTTLS) * time.Second); end.After(p.othersEnd) {
					p.othersEnd = end
				}
			}
		default:
			p.onOld++
			p.lines = append(p.lines, fmt.Sprintf("%s: on the groups %v, not moving", urls[i], pl.To))
			if from != nil && !slices.Equal(pl.To, from) {
				// The moving daemons lock a moved key in its group of
				// their from list, and this daemon in its group of its
				// own: unless they are one list, the two can differ, and
				// the key is granted twice.
				return p, fmt.Errorf("groups-change: %s locks in groups %v, but the moving daemons move from %v: a moved key can be granted twice; give the moving daemons previous_master_groups equal to the other daemons' master_groups (the same names, in the same order)", urls[i], pl.To, from)
			}
		}
	}
	// A daemon that came onto the new groups before step 2's wait ended
	// (its since_ms) may have come straight from the old groups, skipping
	// step 1: its last grants there may stand until its start plus max
	// TTL, so step 2 lasts at least that long. (Only step 2's end from the
	// moving daemons, and a daemon that skipped step 1 was reported while
	// that end lay ahead, then not: a moved key granted twice, with the
	// tool saying step 3 — a black-box pass.) One that came onto them
	// after step 2's end cannot be told from one that was moving before
	// (docs/operations.md).
	if !p.stepTwoDone.IsZero() {
		base := p.stepTwoDone
		for _, i := range early {
			since := time.UnixMilli(placements[i].Placement.SinceMS)
			if placements[i].Placement.SinceMS == 0 || !since.Before(base) {
				continue
			}
			if end := since.Add(time.Duration(placements[i].LongestMaxTTLS) * time.Second); end.After(p.stepTwoDone) {
				p.stepTwoDone = end
			}
			p.lines = append(p.lines, fmt.Sprintf("%s: on the new groups since %s, before step 2's wait ended (%s): it may have skipped step 1, so step 2 lasts until its grants there have ended", urls[i], since.UTC().Format(time.RFC3339), base.UTC().Format(time.RFC3339)))
		}
	}
	// Daemons that lock in different groups without a moving daemon
	// between them (or with one, old and new at once) can grant a moved key
	// twice: the state the change's steps exist to avoid.
	var stable [][]string
	for i, d := range placements {
		if pl := d.Placement; pl.Phase != "moving" && !slices.ContainsFunc(stable, func(g []string) bool { return slices.Equal(g, pl.To) }) {
			stable = append(stable, pl.To)
			if len(stable) > 1 && (p.moving == 0 || p.onOld > 0 && p.onNew > 0) {
				return p, fmt.Errorf("groups-change: %s locks in groups %v while another daemon locks in %v and no daemon is moving between them: a moved key can be granted twice; restart every daemon with previous_master_groups (step 1)", urls[i], pl.To, stable[0])
			}
		}
	}
	return p, nil
}

func readPlacement(ctx context.Context, client *http.Client, base string) (daemonPlacement, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return daemonPlacement{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return daemonPlacement{}, err
	}
	defer resp.Body.Close()
	// /readyz answers 200, or 503 when no quorum of masters counts; any
	// other answer is not a daemon's placement (a 401 from an admin
	// listener, a 404 for a URL that already ends in /readyz).
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return daemonPlacement{}, fmt.Errorf("GET %s/readyz: %s: not a redlockd /readyz answer; give each daemon's base URL on its public listener (e.g. http://10.0.0.7:7070)", base, resp.Status)
	}
	var d daemonPlacement
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&d); err != nil {
		return daemonPlacement{}, fmt.Errorf("GET %s/readyz: %s: %w", base, resp.Status, err)
	}
	if d.Quorum == nil {
		return daemonPlacement{}, fmt.Errorf("GET %s/readyz: %s: not a redlockd /readyz answer (no quorum field)", base, resp.Status)
	}
	return d, nil
}
