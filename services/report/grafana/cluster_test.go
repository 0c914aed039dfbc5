package grafana

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/services/report/chtest"
)

// TestDashboardQueriesOnCluster runs every panel over the Distributed tables of 2 shards x
// 2 replicas, with the same findings as on one server: the same results as the golden
// file of one server.
func TestDashboardQueriesOnCluster(t *testing.T) {
	d := loadDashboard(t)
	c := chtest.StartCluster(t, 2, 2)
	st := c.Store(t, "auditlens")
	seed(t, st)
	c.WaitReplicated(t, "auditlens") // reads may go to either replica of a shard
	out, byPanel := results(t, d, st.DB())
	checkFacts(t, byPanel)
	want, err := os.ReadFile(filepath.Join("testdata", "panels.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("panel results on the cluster differ from one server's:\n%s", diff(string(want), out))
	}
}
