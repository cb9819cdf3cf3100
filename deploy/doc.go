// Package deploy holds no code. Its tests check the deployment files shipped
// beside it against the binaries they describe:
//
//   - every metric name the Grafana dashboard (grafana/mightyetl.json) and
//     the Prometheus alert rules (prometheus/mightyetl.rules.yml) query is
//     exported by a running intake or worker;
//   - the dashboard's structure (a Prometheus datasource variable, no
//     external links);
//   - every alert's runbook_url names a file and a heading of
//     docs/operations that exist;
//   - every relative link of the repository's Markdown stays inside the
//     repository and names a file that exists;
//   - the Makefile's rule check fails without promtool, and staticcheck
//     comes from go.mod's tool line;
//   - the Kubernetes manifests (kubernetes/): every kustomization builds,
//     every object matches the vendored JSON schemas (kubeconform), and the
//     rendered pods' settings, probes, grace periods, secrets, disruption
//     budgets, autoscalers and connection budget agree with the binaries.
package deploy
