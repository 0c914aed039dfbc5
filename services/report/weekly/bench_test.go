package weekly_test

import (
	"context"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// BenchmarkBuild10M times weekly.Build over 10 million findings on a ClickHouse 18.16 server
// started for the benchmark. The findings are generated server-side (INSERT ... SELECT FROM
// numbers) over the 8 trend weeks: 4 rules, 12 APIs removed between 1.16 and 1.32 plus
// deprecations, 7,400 callers, 10% in a second cluster. Run with
//
//	go test -run '^$' -bench Build10M -benchtime 5x ./weekly/
func BenchmarkBuild10M(b *testing.B) {
	const n = 10_000_000
	_, st := chtest.ServerStore(b)
	ctx := context.Background()
	week := weekly.Date{Time: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}
	end := week.AddDate(0, 0, 1)
	from := end.AddDate(0, 0, -56)
	span := int64(end.Sub(from) / time.Second)
	t0 := time.Now()
	// api index i picks group/version/resource/removed_in from parallel arrays.
	q := `INSERT INTO findings (rule_id, severity, cluster, audit_id, event_time, verb, api_group, api_version,
  resource, namespace, username, user_agent, removed_in, removed_in_key, replacement, message, ingested_at)
SELECT
  if(removed = '', 'deprecated-api', if(res = 'podsecuritypolicies', 'psp', 'removed-api')) AS rule_id,
  'warning', if(number % 10 = 0, 'staging', 'prod'), concat('a', toString(number)),
  toDateTime(? + (number * 48271) % ?), 'list', grp, ver, res,
  concat('ns', toString(number % 200)),
  concat('system:serviceaccount:ns', toString(number % 200), ':sa', toString(number % 37)),
  concat('client-go/v0.', toString(number % 30), ' (linux/amd64)'),
  removed,
  toUInt32OrZero(splitByChar('.', removed)[1]) * 1000 + toUInt32OrZero(splitByChar('.', removed)[2]),
  'apps/v1', 'migrate', now()
FROM (
  SELECT number, number % 14 + 1 AS i,
    ['extensions','extensions','apps','policy','networking.k8s.io','batch','policy','flowcontrol.apiserver.k8s.io','autoscaling','storage.k8s.io','discovery.k8s.io','rbac.authorization.k8s.io','','extensions'][i] AS grp,
    ['v1beta1','v1beta1','v1beta2','v1beta1','v1beta1','v1beta1','v1beta1','v1beta3','v2beta2','v1beta1','v1beta1','v1beta1','v1','v1beta1'][i] AS ver,
    ['ingresses','daemonsets','deployments','podsecuritypolicies','ingresses','cronjobs','poddisruptionbudgets','flowschemas','horizontalpodautoscalers','csistoragecapacities','endpointslices','roles','componentstatuses','networkpolicies'][i] AS res,
    ['1.22','1.16','1.16','1.25','1.22','1.25','1.25','1.32','1.26','1.27','1.25','1.22','','1.16'][i] AS removed
  FROM numbers(?)
)`
	if _, err := st.DB().ExecContext(ctx, q, from.Unix(), span, n); err != nil {
		b.Fatal(err)
	}
	var rows uint64
	if err := st.DB().QueryRowContext(ctx, "SELECT count() FROM findings").Scan(&rows); err != nil {
		b.Fatal(err)
	}
	if rows != n {
		b.Fatalf("%d rows generated, want %d", rows, n)
	}
	b.Logf("generated %d findings in %v", rows, time.Since(t0).Round(time.Millisecond))
	chtest.CompactDays(b, st.DB())
	o := weekly.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 29}, WeekEnding: week}
	var r *weekly.Report
	b.ResetTimer()
	for b.Loop() {
		var err error
		if r, err = weekly.Build(ctx, st.DB(), o); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "findings")
	tt, bt, err := weekly.Phases(ctx, st.DB(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("one more build: trend query (8 weeks) %v, blocker queries (2 weeks) %v", tt.Round(time.Millisecond), bt.Round(time.Millisecond))
	b.Logf("week: %d findings, %d blocking, %d blockers, %d blocker callers, %d new, %d resolved",
		r.Totals.Findings, r.Totals.Blocking, len(r.Blockers), r.Totals.BlockerCallers, r.NewCount, r.ResolvedCount)
}
