package charttest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/redlockd/redlockd/config"
)

// chartCase is one values file and what its render must hold.
type chartCase struct {
	values string
	// groups: master group name → number of masters.
	groups []groupWant
	tls    bool
	// clientCA: the daemons require client certificates (tls.clientCA).
	clientCA bool
	// persistence: masters with appendonly yes, appendfsync always and a
	// volume claim.
	persistence bool
	monitoring  bool
	// external: Secrets the installer creates (name → keys), referenced but
	// not rendered.
	external map[string][]string
	// previous: previous_master_groups' names (a change of groups).
	previous []string
}

type groupWant struct {
	name    string
	masters int
}

var cases = []chartCase{
	{values: "default.yaml", groups: []groupWant{{"g0", 5}}},
	{values: "groups2.yaml", groups: []groupWant{{"g0", 5}, {"g1", 3}}},
	{values: "tls.yaml", groups: []groupWant{{"g0", 5}}, tls: true, clientCA: true, monitoring: true,
		external: map[string][]string{"redlockd-tls": {"tls.crt", "tls.key", "ca.crt"}, "redlockd-metrics-client": {"tls.crt", "tls.key"}}},
	{values: "tls-server.yaml", groups: []groupWant{{"g0", 5}}, tls: true,
		external: map[string][]string{"redlockd-tls": {"tls.crt", "tls.key"}}},
	{values: "monitoring.yaml", groups: []groupWant{{"g0", 5}}, monitoring: true,
		external: map[string][]string{"redlockd-auth": {"api-keys", "admin-token"}}},
	{values: "persistence.yaml", groups: []groupWant{{"g0", 5}}, persistence: true},
	{values: "moving.yaml", groups: []groupWant{{"g0", 5}, {"g1", 5}}, previous: []string{"g0"}},
}

const daemonName = releaseName + "-redlockd"

func TestChartRenders(t *testing.T) {
	for _, c := range cases {
		t.Run(strings.TrimSuffix(c.values, ".yaml"), func(t *testing.T) {
			manifest, err := renderChart(t, filepath.Join("testdata", c.values))
			require.NoError(t, err)
			r := parseManifest(t, manifest)
			checkDaemon(t, r, c)
			checkMasters(t, r, c)
			checkSelectors(t, r, c)
			checkReferences(t, r, c)
			checkDaemonConfig(t, r, c)
			checkMonitoring(t, r, c)
		})
	}
}

// podTemplates are the pod templates of the Deployment and StatefulSets,
// by workload name.
func podTemplates(r *rendered) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for n, d := range r.deployments {
		out["Deployment/"+n] = &d.Spec.Template
	}
	for n, s := range r.statefulSets {
		out["StatefulSet/"+n] = &s.Spec.Template
	}
	return out
}

// matching lists the pod templates whose labels sel selects.
func matching(t *testing.T, r *rendered, sel labels.Selector) []string {
	t.Helper()
	var out []string
	for n, pt := range podTemplates(r) {
		if sel.Matches(labels.Set(pt.Labels)) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func selector(t *testing.T, ls *metav1.LabelSelector) labels.Selector {
	t.Helper()
	require.NotNil(t, ls)
	s, err := metav1.LabelSelectorAsSelector(ls)
	require.NoError(t, err)
	require.False(t, s.Empty(), "an empty selector selects every pod")
	return s
}

// containerPort finds the container port a probe or Service names.
func containerPort(c *corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func checkProbe(t *testing.T, where string, c *corev1.Container, p *corev1.Probe) {
	t.Helper()
	require.NotNil(t, p, "%s: probe missing", where)
	var port intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port
	case p.Exec != nil:
		return
	default:
		t.Fatalf("%s: probe without a handler", where)
	}
	_, ok := containerPort(c, port)
	require.True(t, ok, "%s: probe port %s is no port of container %s", where, port.String(), c.Name)
}

func checkDaemon(t *testing.T, r *rendered, c chartCase) {
	require.Len(t, r.deployments, 1)
	d := r.deployments[daemonName]
	require.NotNil(t, d, "deployment %s", daemonName)
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	ctr := &d.Spec.Template.Spec.Containers[0]
	checkProbe(t, "daemon readiness", ctr, ctr.ReadinessProbe)
	checkProbe(t, "daemon liveness", ctr, ctr.LivenessProbe)
	if c.clientCA {
		// The kubelet has no client certificate: an HTTPS probe of a
		// listener that requires one never passes (a black-box pass:
		// pods never ready, restarted by the liveness probe).
		require.Nil(t, ctr.ReadinessProbe.HTTPGet, "no HTTPS probe with client certificates required")
		require.Nil(t, ctr.LivenessProbe.HTTPGet, "no HTTPS probe with client certificates required")
		require.NotNil(t, ctr.ReadinessProbe.TCPSocket)
		require.NotNil(t, ctr.LivenessProbe.TCPSocket)
	} else {
		require.NotNil(t, ctr.ReadinessProbe.HTTPGet)
		require.Equal(t, "/readyz", ctr.ReadinessProbe.HTTPGet.Path)
		require.NotNil(t, ctr.LivenessProbe.HTTPGet)
		require.Equal(t, "/healthz", ctr.LivenessProbe.HTTPGet.Path)
		wantScheme := corev1.URISchemeHTTP
		if c.tls {
			wantScheme = corev1.URISchemeHTTPS
		}
		require.Equal(t, wantScheme, ctr.ReadinessProbe.HTTPGet.Scheme)
		require.Equal(t, wantScheme, ctr.LivenessProbe.HTTPGet.Scheme)
	}
	require.False(t, ctr.Resources.Requests.Cpu().IsZero(), "daemon cpu request (the HPA needs it)")
	require.False(t, ctr.Resources.Limits.Memory().IsZero(), "daemon memory limit")

	// Two replicas at least: fixed, or the autoscaler's minimum.
	if hpa, ok := r.hpas[daemonName]; ok {
		require.Nil(t, d.Spec.Replicas, "replicas is the HPA's when it is on")
		require.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
		require.Equal(t, d.Name, hpa.Spec.ScaleTargetRef.Name)
		require.NotNil(t, hpa.Spec.MinReplicas)
		require.GreaterOrEqual(t, *hpa.Spec.MinReplicas, int32(2))
		require.GreaterOrEqual(t, hpa.Spec.MaxReplicas, *hpa.Spec.MinReplicas)
	} else {
		require.NotNil(t, d.Spec.Replicas)
		require.GreaterOrEqual(t, *d.Spec.Replicas, int32(2))
	}
	pdb := r.pdbs[daemonName]
	require.NotNil(t, pdb, "daemon PodDisruptionBudget")
	require.Equal(t, []string{"Deployment/" + daemonName}, matching(t, r, selector(t, pdb.Spec.Selector)))
}

// masterWorkloads lists the master StatefulSets of one group.
func masterWorkloads(r *rendered, group string) []*appsv1.StatefulSet {
	var out []*appsv1.StatefulSet
	for _, s := range r.statefulSets {
		if s.Labels["redlockd.io/group"] == group {
			out = append(out, s)
		}
	}
	return out
}

func checkMasters(t *testing.T, r *rendered, c chartCase) {
	total := 0
	for _, g := range c.groups {
		sts := masterWorkloads(r, g.name)
		require.Len(t, sts, g.masters, "group %s", g.name)
		total += g.masters
		for _, s := range sts {
			require.NotNil(t, s.Spec.Replicas)
			require.Equal(t, int32(1), *s.Spec.Replicas, "%s: one pod per master, no replicas", s.Name)
			// Not rolled by an upgrade: each master is a StatefulSet of its
			// own, and a rollout would restart them all at once.
			require.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, s.Spec.UpdateStrategy.Type, "%s: masters are rolled by hand, one at a time", s.Name)
			tmpl := &s.Spec.Template
			require.True(t, selector(t, s.Spec.Selector).Matches(labels.Set(tmpl.Labels)), "%s: selector must select its template", s.Name)
			require.Equal(t, []string{"StatefulSet/" + s.Name}, matching(t, r, selector(t, s.Spec.Selector)), "%s: its selector must select only its own pod", s.Name)
			ctr := &tmpl.Spec.Containers[0]
			checkProbe(t, s.Name+" readiness", ctr, ctr.ReadinessProbe)
			checkProbe(t, s.Name+" liveness", ctr, ctr.LivenessProbe)
			args := strings.Join(ctr.Args, " ")
			require.Contains(t, args, "--maxmemory-policy noeviction", s.Name)
			require.NotContains(t, args, "replicaof", s.Name)
			if c.persistence {
				require.Contains(t, args, "--appendonly yes --appendfsync always", s.Name)
				require.Len(t, s.Spec.VolumeClaimTemplates, 1, s.Name)
				require.Equal(t, "data", s.Spec.VolumeClaimTemplates[0].Name)
			} else {
				require.Contains(t, args, "--appendonly no", s.Name)
				require.Empty(t, s.Spec.VolumeClaimTemplates, s.Name)
			}
			// The governing Service exists, is headless and selects this pod alone.
			svc := r.services[s.Spec.ServiceName]
			require.NotNil(t, svc, "%s: serviceName %s", s.Name, s.Spec.ServiceName)
			require.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
			// Anti-affinity between the masters of this group, and only them.
			aff := tmpl.Spec.Affinity
			require.NotNil(t, aff)
			require.NotNil(t, aff.PodAntiAffinity)
			var terms []corev1.PodAffinityTerm
			terms = append(terms, aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
			for _, w := range aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				terms = append(terms, w.PodAffinityTerm)
			}
			require.Len(t, terms, 1, s.Name)
			var want []string
			for _, o := range masterWorkloads(r, g.name) {
				want = append(want, "StatefulSet/"+o.Name)
			}
			slices.Sort(want)
			require.Equal(t, want, matching(t, r, selector(t, terms[0].LabelSelector)), "%s: anti-affinity selects the group's masters", s.Name)
		}
		// One voluntary disruption at a time in the group.
		pdb := r.pdbs[daemonName+"-"+g.name]
		require.NotNil(t, pdb, "PDB of group %s", g.name)
		require.Len(t, matching(t, r, selector(t, pdb.Spec.Selector)), g.masters)
	}
	require.Len(t, r.statefulSets, total)
}

func checkSelectors(t *testing.T, r *rendered, c chartCase) {
	daemon := "Deployment/" + daemonName
	d := r.deployments[daemonName]
	require.True(t, selector(t, d.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)))
	for n, svc := range r.services {
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		require.False(t, sel.Empty(), "service %s selects nothing in particular", n)
		got := matching(t, r, sel)
		require.Len(t, got, 1, "service %s must select exactly one workload, got %v", n, got)
		pt := podTemplates(r)[got[0]]
		for _, p := range svc.Spec.Ports {
			_, ok := containerPort(&pt.Spec.Containers[0], p.TargetPort)
			require.True(t, ok, "service %s port %s: targetPort %s is no container port of %s", n, p.Name, p.TargetPort.String(), got[0])
		}
		if strings.HasPrefix(n, daemonName+"-g") || strings.Contains(n, "-m") && got[0] != daemon {
			require.True(t, strings.HasPrefix(got[0], "StatefulSet/"), n)
		}
	}
	require.Len(t, r.netpols, 2)
	masters := r.netpols[daemonName+"-masters"]
	require.NotNil(t, masters)
	var all []string
	for n := range r.statefulSets {
		all = append(all, "StatefulSet/"+n)
	}
	slices.Sort(all)
	require.Equal(t, all, matching(t, r, selector(t, &masters.Spec.PodSelector)), "the masters' policy covers every master")
	require.Equal(t, []networkingPolicyType{"Ingress"}, policyTypes(masters.Spec.PolicyTypes))
	require.Len(t, masters.Spec.Ingress, 1, "one rule: the daemons")
	rule := masters.Spec.Ingress[0]
	require.Len(t, rule.From, 1)
	require.Nil(t, rule.From[0].NamespaceSelector, "same namespace only")
	require.Nil(t, rule.From[0].IPBlock)
	require.Equal(t, []string{daemon}, matching(t, r, selector(t, rule.From[0].PodSelector)), "only the daemons reach the masters")
	require.Len(t, rule.Ports, 1)
	for n, s := range r.statefulSets {
		_, ok := containerPort(&s.Spec.Template.Spec.Containers[0], *rule.Ports[0].Port)
		require.True(t, ok, "%s: the policy's port is its redis port", n)
	}
	dp := r.netpols[daemonName+"-daemon"]
	require.NotNil(t, dp)
	require.Equal(t, []string{daemon}, matching(t, r, selector(t, &dp.Spec.PodSelector)))
	for _, rule := range dp.Spec.Ingress {
		for _, p := range rule.Ports {
			_, ok := containerPort(&d.Spec.Template.Spec.Containers[0], *p.Port)
			require.True(t, ok, "daemon policy port %s", p.Port.String())
		}
	}
}

type networkingPolicyType string

func policyTypes[T ~string](in []T) []networkingPolicyType {
	out := make([]networkingPolicyType, len(in))
	for i, v := range in {
		out[i] = networkingPolicyType(v)
	}
	return out
}

// secretKeys are the keys of a Secret, rendered or external.
func secretKeys(r *rendered, c chartCase, name string) ([]string, bool) {
	if s, ok := r.secrets[name]; ok {
		var keys []string
		for k := range s.Data {
			keys = append(keys, k)
		}
		for k := range s.StringData {
			keys = append(keys, k)
		}
		return keys, true
	}
	keys, ok := c.external[name]
	return keys, ok
}

func checkReferences(t *testing.T, r *rendered, c chartCase) {
	for n, pt := range podTemplates(r) {
		vols := map[string]bool{}
		for _, v := range pt.Spec.Volumes {
			vols[v.Name] = true
			if v.Secret != nil {
				keys, ok := secretKeys(r, c, v.Secret.SecretName)
				require.True(t, ok, "%s: volume %s: no Secret %s", n, v.Name, v.Secret.SecretName)
				if c.tls && v.Name == "tls" {
					require.Subset(t, keys, []string{"tls.crt", "tls.key"})
				}
			}
			if v.ConfigMap != nil {
				require.Contains(t, r.configMaps, v.ConfigMap.Name, "%s: volume %s", n, v.Name)
			}
		}
		if strings.HasPrefix(n, "StatefulSet/") {
			for _, pvc := range r.statefulSets[strings.TrimPrefix(n, "StatefulSet/")].Spec.VolumeClaimTemplates {
				vols[pvc.Name] = true
			}
		}
		for _, ctr := range pt.Spec.Containers {
			for _, m := range ctr.VolumeMounts {
				require.True(t, vols[m.Name], "%s: mount of unknown volume %s", n, m.Name)
			}
			for _, e := range ctr.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref := e.ValueFrom.SecretKeyRef
					keys, ok := secretKeys(r, c, ref.Name)
					require.True(t, ok, "%s: env %s: no Secret %s", n, e.Name, ref.Name)
					require.Contains(t, keys, ref.Key, "%s: env %s", n, e.Name)
				}
			}
		}
	}
}

// envOf resolves the daemon container's environment: literal values, and
// secretKeyRef from the rendered Secret (or a stand-in for an external one).
func envOf(t *testing.T, r *rendered, ctr *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if s, ok := r.secrets[ref.Name]; ok {
				env[e.Name] = string(s.Data[ref.Key])
			} else {
				// An installer's Secret: stand-in values of the documented form.
				switch ref.Key {
				case "api-keys":
					env[e.Name] = "shop:0123456789abcdef0123456789abcdef"
				case "admin-token":
					env[e.Name] = "external-admin-token-0123"
				default:
					t.Fatalf("env %s: no stand-in for key %s of the external Secret %s", e.Name, ref.Key, ref.Name)
				}
			}
		default:
			t.Fatalf("env %s: unexpected source", e.Name)
		}
	}
	return env
}

// checkDaemonConfig loads the ConfigMap's redlockd.yaml, with the
// Deployment's environment, through the daemon's own loader (config.Load,
// what `redlockd serve` runs), and checks that every master address names
// a rendered master Service.
func checkDaemonConfig(t *testing.T, r *rendered, c chartCase) {
	d := r.deployments[daemonName]
	ctr := &d.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"serve", "--config", "/etc/redlockd/redlockd.yaml"}, ctr.Args)
	cm := r.configMaps[daemonName]
	require.NotNil(t, cm)
	text, ok := cm.Data["redlockd.yaml"]
	require.True(t, ok)
	path := filepath.Join(t.TempDir(), "redlockd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	env := envOf(t, r, ctr)
	cfg, err := config.Load(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, nil)
	require.NoError(t, err, "the daemon refuses the rendered config:\n%s", text)
	require.NotEmpty(t, cfg.APIKeys)
	require.GreaterOrEqual(t, len(cfg.AdminToken), 16)

	// The listeners are the container's ports.
	_, apiPort, err := net.SplitHostPort(cfg.Listen)
	require.NoError(t, err)
	_, adminPort, err := net.SplitHostPort(cfg.AdminListen)
	require.NoError(t, err)
	require.Equal(t, apiPort, fmt.Sprint(mustPort(t, ctr, "api")))
	require.Equal(t, adminPort, fmt.Sprint(mustPort(t, ctr, "admin")))
	if c.tls {
		require.Equal(t, "/etc/redlockd/tls/tls.crt", cfg.TLSCertFile)
		require.Equal(t, "/etc/redlockd/tls/tls.key", cfg.TLSKeyFile)
		require.True(t, mountedAt(ctr, "/etc/redlockd/tls"))
	} else {
		require.Empty(t, cfg.TLSCertFile)
	}

	// Every group by its values name, also a lone one: a change of groups
	// names the groups before it (placement.previousGroups: [g0]), and a
	// masters: list is the group "default" to the daemons (a black-box
	// pass: groups-change refused the chart's own recipe for growing).
	require.Empty(t, cfg.Masters, "master_groups, not masters")
	for i, g := range cfg.MasterGroups {
		require.Equal(t, c.groups[i].name, g.Name)
	}
	var prev []string
	for _, g := range cfg.PreviousMasterGroups {
		prev = append(prev, g.Name)
		require.Equal(t, groupsByName(cfg)[g.Name], g.Masters, "previous group %s keeps its masters", g.Name)
	}
	require.Equal(t, c.previous, prev, "previous_master_groups")

	groups := configGroups(cfg)
	require.Len(t, groups, len(c.groups))
	for i, g := range c.groups {
		require.Len(t, groups[i], g.masters, "group %s", g.name)
		for _, addr := range groups[i] {
			host, port, err := net.SplitHostPort(addr)
			require.NoError(t, err)
			svcName, ok := strings.CutSuffix(host, "."+namespace+".svc")
			require.True(t, ok, "%s: a Service of the release's namespace", addr)
			svc := r.services[svcName]
			require.NotNil(t, svc, "%s: no such Service", addr)
			require.Equal(t, g.name, svc.Labels["redlockd.io/group"], "%s: a master of group %s", addr, g.name)
			require.Equal(t, port, fmt.Sprint(svc.Spec.Ports[0].Port))
		}
	}
}

func mustPort(t *testing.T, ctr *corev1.Container, name string) int32 {
	p, ok := containerPort(ctr, intstr.FromString(name))
	require.True(t, ok, "container port %s", name)
	return p.ContainerPort
}

func mountedAt(ctr *corev1.Container, dir string) bool {
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == dir {
			return true
		}
	}
	return false
}

func checkMonitoring(t *testing.T, r *rendered, c chartCase) {
	if !c.monitoring {
		require.Empty(t, r.serviceMonitors)
		require.Empty(t, r.prometheusRules)
		return
	}
	sm := r.serviceMonitors[daemonName]
	require.NotNil(t, sm)
	var svcs []string
	for n, svc := range r.services {
		if selector(t, &sm.Spec.Selector).Matches(labels.Set(svc.Labels)) {
			svcs = append(svcs, n)
		}
	}
	require.Equal(t, []string{daemonName + "-admin"}, svcs, "the ServiceMonitor scrapes the admin Service")
	svc := r.services[svcs[0]]
	require.Equal(t, "redlockd", svc.Labels[sm.Spec.JobLabel], "job label (RedlockdDown expects job=redlockd)")
	require.Len(t, sm.Spec.Endpoints, 1)
	ep := sm.Spec.Endpoints[0]
	require.Equal(t, svc.Spec.Ports[0].Name, ep.Port)
	require.Equal(t, "/metrics", ep.Path)
	if c.tls {
		require.NotNil(t, ep.TLSConfig)
		require.Equal(t, daemonName+"-admin."+namespace+".svc", *ep.TLSConfig.ServerName)
	}
	if c.clientCA {
		// Scrapes need a client certificate the daemons accept
		// (metrics.serviceMonitor.tlsConfig).
		require.NotNil(t, ep.TLSConfig.Cert.Secret, "a client certificate for the scrapes")
		require.NotNil(t, ep.TLSConfig.KeySecret)
		require.NotNil(t, ep.TLSConfig.CA.Secret)
	}
	require.NotNil(t, ep.Authorization)
	require.NotNil(t, ep.Authorization.Credentials)
	keys, ok := secretKeys(r, c, ep.Authorization.Credentials.Name)
	require.True(t, ok)
	require.Contains(t, keys, ep.Authorization.Credentials.Key)

	pr := r.prometheusRules[daemonName]
	require.NotNil(t, pr)
	// The rules are deploy/prometheus/redlockd.rules.yml: the chart's copy
	// is byte for byte the same, and the rendered groups equal its groups.
	src := readFile(t, "../../prometheus/redlockd.rules.yml")
	require.Equal(t, string(src), string(readFile(t, chartDir+"/files/redlockd.rules.yml")),
		"deploy/kubernetes/redlockd/files/redlockd.rules.yml differs from deploy/prometheus/redlockd.rules.yml: copy it again")
	var want struct {
		Groups []struct {
			Name     string           `json:"name"`
			Interval string           `json:"interval"`
			Rules    []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.UnmarshalStrict(src, &want))
	require.Len(t, pr.Spec.Groups, len(want.Groups))
	nRules := 0
	for i, g := range pr.Spec.Groups {
		require.Equal(t, want.Groups[i].Name, g.Name)
		if want.Groups[i].Interval != "" {
			require.NotNil(t, g.Interval)
			require.Equal(t, want.Groups[i].Interval, string(*g.Interval))
		}
		require.Len(t, g.Rules, len(want.Groups[i].Rules))
		for j, rule := range g.Rules {
			w := want.Groups[i].Rules[j]
			require.Equal(t, fmt.Sprint(w["alert"], w["record"]), fmt.Sprint(nonEmpty(rule.Alert), nonEmpty(rule.Record)))
			require.Equal(t, strings.TrimSpace(fmt.Sprint(w["expr"])), strings.TrimSpace(rule.Expr.String()))
			nRules++
		}
	}
	require.Greater(t, nRules, 10)
}

func nonEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// groupsByName is the current groups' masters by name.
func groupsByName(cfg config.Config) map[string][]string {
	out := map[string][]string{}
	for _, g := range cfg.Groups() {
		out[g.Name] = g.Masters
	}
	return out
}

// configGroups is the master addresses per group of a loaded config.
func configGroups(cfg config.Config) [][]string {
	if len(cfg.MasterGroups) == 0 {
		return [][]string{cfg.Masters}
	}
	out := make([][]string, len(cfg.MasterGroups))
	for i, g := range cfg.MasterGroups {
		out[i] = g.Masters
	}
	return out
}

// TestChartRefusesBadValues: values the chart cannot serve fail the
// render with a message naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	for name, tc := range map[string]struct{ values, want string }{
		"even":     {"masterGroups: [{name: g0, masters: 4}]", "masterGroups[0].masters: 4 must be an odd number, 3 to 99"},
		"one":      {"masterGroups: [{name: g0, masters: 1}]", "masterGroups[0].masters: 1 must be an odd number, 3 to 99"},
		"fraction": {"masterGroups: [{name: g0, masters: 5.5}]", "masterGroups[0].masters: 5.5 must be a whole number"},
		"thousand": {"masterGroups: [{name: g0, masters: 1001}]", "masterGroups[0].masters: 1001 must be an odd number, 3 to 99"},
		// The keys reach the daemon as "name:key,name:key": a comma in a
		// key made a second account of its tail (a black-box pass).
		"comma key":    {"auth: {apiKeys: [{name: shop, key: '0123456789abcdef0123,evil:abcdefabcdefabcdef99'}], adminToken: admin-token-0123456789}", "auth.apiKeys[0].key: at least 16 bytes of printable ASCII without spaces or commas"},
		"short key":    {"auth: {apiKeys: [{name: shop, key: abc}], adminToken: admin-token-0123456789}", "auth.apiKeys[0].key: at least 16 bytes"},
		"bad account":  {"auth: {apiKeys: [{name: 'sh op', key: 0123456789abcdef}], adminToken: admin-token-0123456789}", "auth.apiKeys[0].name: 1 to 64 characters"},
		"same account": {"auth: {apiKeys: [{name: shop, key: 0123456789abcdef}, {name: shop, key: fedcba9876543210}], adminToken: admin-token-0123456789}", `auth.apiKeys[1].name: "shop" is given twice`},
		"duplicate":    {"masterGroups: [{name: g0, masters: 3}, {name: g0, masters: 3}]", `masterGroups[1].name: "g0" is used twice`},
		"bad name":     {"masterGroups: [{name: G_0, masters: 3}]", `masterGroups[0].name: "G_0" must be 1-32 characters`},
		"no groups":    {"masterGroups: []", "masterGroups: at least one group is needed"},
		"no keys":      {"auth: {apiKeys: [], adminToken: admin-token-0123456789}", "auth.apiKeys: at least one"},
		"short token":  {"auth: {apiKeys: [{name: a, key: 0123456789abcdef}], adminToken: short}", "auth.adminToken: at least 16 bytes"},
		// The daemon refuses these (config: admin_token), so the pods
		// crash-looped where the install should have failed (a black-box pass).
		"non-ASCII token": {"auth: {apiKeys: [{name: a, key: 0123456789abcdef}], adminToken: ééééééééé}", "auth.adminToken: only printable ASCII"},
		"spaced token":    {"auth: {apiKeys: [{name: a, key: 0123456789abcdef}], adminToken: ' admin-token-0123456789'}", "auth.adminToken: only printable ASCII"},
		"tls secret":      {"tls: {enabled: true}", "tls.secretName"},
		"one daemon":      {"autoscaling: {minReplicas: 1}", "autoscaling.minReplicas: at least 2"},
		"affinity":        {"redis: {antiAffinity: maybe}", `redis.antiAffinity: "maybe" must be hard or soft`},
		"rollout":         {"redis: {updateStrategy: Parallel}", `redis.updateStrategy: "Parallel" must be OnDelete or RollingUpdate`},
		"previous":        {"placement: {previousGroups: [g9]}", `placement.previousGroups[0]: "g9" is not a group of masterGroups`},
	} {
		t.Run(name, func(t *testing.T) {
			base := "auth: {apiKeys: [{name: shop, key: 0123456789abcdef0123456789abcdef}], adminToken: admin-token-0123456789}\n"
			if strings.HasPrefix(tc.values, "auth:") {
				base = ""
			}
			path := filepath.Join(t.TempDir(), "values.yaml")
			require.NoError(t, os.WriteFile(path, []byte(base+tc.values+"\n"), 0o600))
			_, err := renderChart(t, path)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestChartLint runs Helm's own linter (helm lint --strict) on the chart.
func TestChartLint(t *testing.T) {
	l := action.NewLint()
	l.Strict = true
	l.Namespace = namespace
	vals := map[string]any{"auth": map[string]any{
		"apiKeys":    []any{map[string]any{"name": "shop", "key": "0123456789abcdef0123456789abcdef"}},
		"adminToken": "admin-token-0123456789",
	}}
	res := l.Run([]string{chartDir}, vals)
	for _, m := range res.Messages {
		t.Log(m.Error())
	}
	require.Empty(t, res.Errors)
	require.False(t, action.HasWarningsOrErrors(res), "helm lint --strict reports warnings")
}
