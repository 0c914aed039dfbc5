package deploy

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// replicas is a Deployment's or StatefulSet's replica count, 1 when unset (the apiserver's default).
func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

// envTwins are the AUDITLENS_* variables the binaries read: docs/configuration.md is generated
// from their --help (services/auditlens/e2e checks it), which names each flag's env twin.
func envTwins(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	twins := map[string]bool{}
	for _, m := range regexp.MustCompile(`\(env (AUDITLENS_[A-Z0-9_]+)`).FindAllStringSubmatch(string(b), -1) {
		twins[m[1]] = true
	}
	if len(twins) < 20 {
		t.Fatalf("only %d env twins found in docs/configuration.md", len(twins))
	}
	return twins
}

// hosts lists the servers of a comma-separated URL list or of a multi-host DSN
// (clickhouse://h1:9000,h2:9000/db).
func hosts(urls string) []string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		_, rest, ok := strings.Cut(u, "://")
		if !ok {
			rest = u
		}
		host, _, _ := strings.Cut(rest, "/")
		if host = strings.TrimSpace(host); host != "" {
			out = append(out, host)
		}
	}
	return out
}

// checkScaleOut checks the settings that spread auditlens over clusters of its engines, in every
// kustomization: each key is a flag's env twin (a misspelt one would be ignored silently),
// stream replicas need that many NATS servers in the URL list, a ClickHouse cluster needs more
// than one server in the DSN. The cluster overlay must set both, and run 3 classify and 2
// report replicas (the layout services/auditlens/e2e tests).
func checkScaleOut(t *testing.T, r *rendered) {
	twins := envTwins(t)
	for _, ns := range []string{"auditlens", "auditlens-ingest"} {
		cm := r.configs[ns+"/auditlens"]
		if cm == nil {
			continue // checkConfig says so
		}
		for k := range cm.Data {
			if !twins[k] {
				t.Errorf("ConfigMap %s/auditlens: %s is the env twin of no flag in docs/configuration.md", ns, k)
			}
		}
		natsServers := len(hosts(cm.Data["AUDITLENS_NATS_URL"]))
		streamReplicas := 1
		if v, ok := cm.Data["AUDITLENS_NATS_REPLICAS"]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 5 {
				t.Errorf("ConfigMap %s/auditlens: AUDITLENS_NATS_REPLICAS %q, want 1 to 5", ns, v)
			}
			streamReplicas = n
		}
		if streamReplicas > 1 && natsServers < streamReplicas {
			t.Errorf("ConfigMap %s/auditlens: %d stream replicas but %d NATS servers in the URL list", ns, streamReplicas, natsServers)
		}
		chCluster := cm.Data["AUDITLENS_CLICKHOUSE_CLUSTER"]
		chServers := len(hosts(r.clickhouseDSN(t)))
		if chCluster != "" && chServers < 2 {
			t.Errorf("ConfigMap %s/auditlens: ClickHouse cluster %q with %d server in the DSN", ns, chCluster, chServers)
		}
		if r.dir != "overlays/cluster" {
			continue
		}
		if streamReplicas != 3 || natsServers != 3 {
			t.Errorf("cluster overlay, %s: %d stream replicas over %d NATS servers, want 3 over 3", ns, streamReplicas, natsServers)
		}
		if chCluster == "" || chServers != 4 {
			t.Errorf("cluster overlay, %s: ClickHouse cluster %q over %d servers, want a name over 4 (2 shards x 2 replicas)", ns, chCluster, chServers)
		}
	}
	if r.dir != "overlays/cluster" {
		return
	}
	want := map[string]int32{"classify": 3, "report": 2}
	for _, w := range r.workloads {
		if n, ok := want[w.name]; ok && w.kind == "Deployment" && w.namespace == "auditlens" {
			if w.replicas != n {
				t.Errorf("cluster overlay: %d %s replicas, want %d", w.replicas, w.name, n)
			}
			delete(want, w.name)
		}
	}
	for name := range want {
		t.Errorf("cluster overlay: no %s Deployment", name)
	}
}
