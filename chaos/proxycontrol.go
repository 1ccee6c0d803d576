package chaos

// The control API of a proxy process (`redlock-chaos proxy`): the HTTP
// handler that switches faults on the proxies it serves.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// AllListeners, given to a ProxyClient method, applies the change to every
// listener of the proxy process.
const AllListeners = -1

// ProxyControlState is the answer of every call to the control API.
type ProxyControlState struct {
	// Upstream is the address dialed (and resolved) for every connection.
	Upstream string `json:"upstream"`
	// Listeners, in the order of the --listen flags.
	Listeners []ProxyState `json:"listeners"`
}

// ProxyControlHandler serves the control API of `redlock-chaos proxy`:
// one process in front of one upstream (a Redis master), with a Proxy per
// listener (one per daemon, so that a daemon can be cut off alone).
//
//	GET  /state                      the state of every listener
//	POST /latency?d=150ms            delay every chunk by d (0: none)
//	POST /blackhole?on=true|false    deliver nothing, connections hang
//	POST /reject?on=true|false       reset open and new connections
//	POST /reset                      reset open connections once
//	POST /heal                       latency 0, no blackhole, no reject
//
// Each POST takes an optional listener=i (0-based, in --listen order;
// default every listener), is in force when it answers, and answers with
// the state, as GET /state does. Errors are 4xx with a plain-text reason.
// There is no authentication: the API must only be reachable on the
// drill's own network. logf, if not nil, receives a line per change.
func ProxyControlHandler(upstream string, proxies []*Proxy, logf func(format string, args ...any)) http.Handler {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	state := func(w http.ResponseWriter) {
		st := ProxyControlState{Upstream: upstream}
		for _, p := range proxies {
			st.Listeners = append(st.Listeners, p.State())
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}
	// change parses the listener parameter and the change's own, applies
	// it to the listeners chosen and answers with the state.
	change := func(name string, apply func(q url.Values) (func(*Proxy), string, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				http.Error(w, fmt.Sprintf("%s %s: use POST", r.Method, r.URL.Path), http.StatusMethodNotAllowed)
				return
			}
			q := r.URL.Query()
			targets := proxies
			if v := q.Get("listener"); v != "" {
				i, err := strconv.Atoi(v)
				if err != nil || i < 0 || i >= len(proxies) {
					http.Error(w, fmt.Sprintf("listener=%q: want 0..%d (the --listen flags, in order)", v, len(proxies)-1), http.StatusBadRequest)
					return
				}
				targets = proxies[i : i+1]
			}
			fn, what, err := apply(q)
			if err != nil {
				http.Error(w, name+": "+err.Error(), http.StatusBadRequest)
				return
			}
			for _, p := range targets {
				fn(p)
			}
			logf("proxy: %s on %s", what, listenerNames(proxies, targets))
			state(w)
		}
	}
	onOff := func(q url.Values) (bool, error) {
		v := q.Get("on")
		if v == "" {
			return false, errors.New("on=true or on=false is required")
		}
		on, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("on=%q: want true or false", v)
		}
		return on, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) { state(w) })
	mux.Handle("/latency", change("latency", func(q url.Values) (func(*Proxy), string, error) {
		v := q.Get("d")
		if v == "" {
			return nil, "", errors.New("d is required, a duration such as 150ms (0 removes the latency)")
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, "", fmt.Errorf("d=%q: want a duration of 0 or more, such as 150ms", v)
		}
		return func(p *Proxy) { p.SetLatency(d) }, "latency " + d.String(), nil
	}))
	mux.Handle("/blackhole", change("blackhole", func(q url.Values) (func(*Proxy), string, error) {
		on, err := onOff(q)
		return func(p *Proxy) { p.SetBlackhole(on) }, fmt.Sprintf("blackhole %v", on), err
	}))
	mux.Handle("/reject", change("reject", func(q url.Values) (func(*Proxy), string, error) {
		on, err := onOff(q)
		return func(p *Proxy) { p.SetReject(on) }, fmt.Sprintf("reject %v", on), err
	}))
	mux.Handle("/reset", change("reset", func(url.Values) (func(*Proxy), string, error) {
		return (*Proxy).Reset, "reset", nil
	}))
	mux.Handle("/heal", change("heal", func(url.Values) (func(*Proxy), string, error) {
		return func(p *Proxy) {
			p.SetLatency(0)
			p.SetBlackhole(false)
			p.SetReject(false)
		}, "heal", nil
	}))
	return mux
}

func listenerNames(all, chosen []*Proxy) string {
	if len(chosen) == len(all) {
		return "every listener"
	}
	var names []string
	for _, c := range chosen {
		for i, p := range all {
			if p == c {
				names = append(names, fmt.Sprintf("listener %d (%s)", i, p.Addr()))
			}
		}
	}
	return strings.Join(names, ", ")
}
