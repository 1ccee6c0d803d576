// Package charttest renders the Helm chart in deploy/kubernetes/redlockd
// offline (Helm's own Go packages, as `helm template` does) for several
// values files, strictly decodes every manifest into the Kubernetes API
// types (an unknown or duplicate field fails), checks that the manifests
// agree with one another (probe ports, Secret and ConfigMap names, label
// selectors, the master addresses) and loads the rendered daemon
// configuration with the daemon's own config loader.
//
// It is a module of its own so that Helm and the Kubernetes libraries
// never enter the product's go.mod. No cluster is involved: what an API
// server, an admission controller or the Prometheus Operator would still
// reject or change is not seen here (see the chart's README).
package charttest
