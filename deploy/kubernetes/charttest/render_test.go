package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "../redlockd"
	releaseName = "rl"
	namespace   = "locks"
)

// object is one rendered manifest, decoded into its API type.
type object struct {
	source string // the template it came from
	kind   string
	name   string
	obj    any
}

// rendered is every manifest of one render, by kind.
type rendered struct {
	all             []object
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	services        map[string]*corev1.Service
	deployments     map[string]*appsv1.Deployment
	statefulSets    map[string]*appsv1.StatefulSet
	pdbs            map[string]*policyv1.PodDisruptionBudget
	hpas            map[string]*autoscalingv2.HorizontalPodAutoscaler
	netpols         map[string]*networkingv1.NetworkPolicy
	serviceMonitors map[string]*monitoringv1.ServiceMonitor
	prometheusRules map[string]*monitoringv1.PrometheusRule
}

// newObject maps apiVersion and kind to the Go type a manifest must decode
// into; a pair the chart is not expected to render is an error.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	}
	return nil, fmt.Errorf("unexpected apiVersion %q kind %q", apiVersion, kind)
}

// renderChart renders the chart with the values file as `helm template`
// does (client-only dry run), or returns the render's error.
func renderChart(t *testing.T, valuesFile string) (string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	vals, err := common.ReadValuesFile(valuesFile)
	require.NoError(t, err)
	inst := action.NewInstall(action.NewConfiguration())
	inst.DryRunStrategy = action.DryRunClient
	inst.Replace = true
	inst.ReleaseName = releaseName
	inst.Namespace = namespace
	rel, err := inst.Run(ch, vals.AsMap())
	if err != nil {
		return "", err
	}
	r, ok := rel.(*releasev1.Release)
	require.True(t, ok, "release type %T", rel)
	return r.Manifest, nil
}

// decodeStrict turns one YAML manifest into its API type: duplicate keys
// (YAMLToJSONStrict) and fields the type does not have fail.
func decodeStrict(doc []byte) (object, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return object{}, err
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(js, &meta); err != nil {
		return object{}, err
	}
	obj, err := newObject(meta.APIVersion, meta.Kind)
	if err != nil {
		return object{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return object{}, fmt.Errorf("%s %s: %w", meta.Kind, meta.Metadata.Name, err)
	}
	if meta.Metadata.Name == "" {
		return object{}, fmt.Errorf("%s without metadata.name", meta.Kind)
	}
	return object{kind: meta.Kind, name: meta.Metadata.Name, obj: obj}, nil
}

// parseManifest splits Helm's manifest into documents and decodes each.
func parseManifest(t *testing.T, manifest string) *rendered {
	t.Helper()
	r := &rendered{
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		services: map[string]*corev1.Service{}, deployments: map[string]*appsv1.Deployment{},
		statefulSets: map[string]*appsv1.StatefulSet{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{}, netpols: map[string]*networkingv1.NetworkPolicy{},
		serviceMonitors: map[string]*monitoringv1.ServiceMonitor{}, prometheusRules: map[string]*monitoringv1.PrometheusRule{},
	}
	for _, doc := range strings.Split(manifest, "\n---") {
		source := ""
		var body []string
		for _, line := range strings.Split(doc, "\n") {
			if s, ok := strings.CutPrefix(line, "# Source: "); ok && source == "" {
				source = s
			}
			body = append(body, line)
		}
		text := strings.TrimSpace(strings.Join(body, "\n"))
		if onlyComments(text) {
			continue
		}
		o, err := decodeStrict([]byte(text))
		require.NoError(t, err, "manifest from %s:\n%s", source, text)
		o.source = source
		key := o.kind + "/" + o.name
		for _, prev := range r.all {
			require.NotEqual(t, key, prev.kind+"/"+prev.name, "rendered twice (%s and %s)", prev.source, source)
		}
		r.all = append(r.all, o)
		switch v := o.obj.(type) {
		case *corev1.ConfigMap:
			r.configMaps[o.name] = v
		case *corev1.Secret:
			r.secrets[o.name] = v
		case *corev1.Service:
			r.services[o.name] = v
		case *appsv1.Deployment:
			r.deployments[o.name] = v
		case *appsv1.StatefulSet:
			r.statefulSets[o.name] = v
		case *policyv1.PodDisruptionBudget:
			r.pdbs[o.name] = v
		case *autoscalingv2.HorizontalPodAutoscaler:
			r.hpas[o.name] = v
		case *networkingv1.NetworkPolicy:
			r.netpols[o.name] = v
		case *monitoringv1.ServiceMonitor:
			r.serviceMonitors[o.name] = v
		case *monitoringv1.PrometheusRule:
			r.prometheusRules[o.name] = v
		}
	}
	return r
}

func onlyComments(text string) bool {
	for _, line := range strings.Split(text, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// readFile reads a file the test needs.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Clean(path))
	require.NoError(t, err)
	return b
}
