package console_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
)

// BenchmarkQueries10M times each console query over 10 million findings on a ClickHouse
// 18.16 server started for the benchmark, generated server-side over 8 weeks like weekly's
// BenchmarkBuild10M: 14 APIs, 7,400 users, 30 agents, 200 namespaces, 10% in a second
// cluster. Run with
//
//	go test -run '^$' -bench Queries10M -benchtime 5x ./console/
func BenchmarkQueries10M(b *testing.B) {
	const n = 10_000_000
	_, st := chtest.ServerStore(b)
	ctx := context.Background()
	weekStart := time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC)
	end := weekStart.AddDate(0, 0, 7)
	from := end.AddDate(0, 0, -56)
	t0 := time.Now()
	q := `INSERT INTO findings (rule_id, severity, cluster, audit_id, event_time, verb, request_uri, api_group, api_version,
  resource, namespace, name, username, user_agent, source_ip, response_code, removed_in, removed_in_key, ingested_at)
SELECT 'removed-api', 'warning', if(number % 10 = 0, 'staging', 'prod'), concat('a', toString(number)),
  toDateTime(? + (number * 48271) % ?), 'list', concat('/apis/', grp, '/', ver, '/', res), grp, ver, res,
  concat('ns', toString(number % 200)), concat('obj', toString(number % 1000)),
  concat('system:serviceaccount:ns', toString(number % 200), ':sa', toString(number % 37)),
  concat('client-go/v0.', toString(number % 30), ' (linux/amd64)'), concat('10.0.', toString(number % 7), '.1'), 200,
  removed, toUInt32OrZero(splitByChar('.', removed)[1]) * 1000 + toUInt32OrZero(splitByChar('.', removed)[2]), now()
FROM (
  SELECT number, number % 14 + 1 AS i,
    ['extensions','extensions','apps','policy','networking.k8s.io','batch','policy','flowcontrol.apiserver.k8s.io','autoscaling','storage.k8s.io','discovery.k8s.io','rbac.authorization.k8s.io','','extensions'][i] AS grp,
    ['v1beta1','v1beta1','v1beta2','v1beta1','v1beta1','v1beta1','v1beta1','v1beta3','v2beta2','v1beta1','v1beta1','v1beta1','v1','v1beta1'][i] AS ver,
    ['ingresses','daemonsets','deployments','podsecuritypolicies','ingresses','cronjobs','poddisruptionbudgets','flowschemas','horizontalpodautoscalers','csistoragecapacities','endpointslices','roles','componentstatuses','networkpolicies'][i] AS res,
    ['1.22','1.16','1.16','1.25','1.22','1.25','1.25','1.32','1.26','1.27','1.25','1.22','','1.16'][i] AS removed
  FROM (SELECT number + ? AS number FROM numbers(?))
)`
	// A million at a time: one insert of all ten can pass the driver's read timeout on a
	// loaded machine ("driver: bad connection").
	const chunk = 1_000_000
	for i := 0; i < n; i += chunk {
		if _, err := st.DB().ExecContext(ctx, q, from.Unix(), int64(end.Sub(from)/time.Second), i, chunk); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("generated %d findings in %v", n, time.Since(t0).Round(time.Millisecond))
	chtest.CompactDays(b, st.DB())
	r := console.Reader{DB: st.DB()}
	week := console.Window{From: weekStart, To: end}
	key := console.BlockerKey{Rule: "removed-api", Group: "extensions", Version: "v1beta1", Resource: "ingresses"}
	caller, _, err := r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: key, Window: week, Page: console.Page{Limit: 1}})
	if err != nil || len(caller) != 1 {
		b.Fatalf("callers: %v %v", caller, err)
	}
	for _, q := range []struct {
		name string
		run  func() (int, error)
	}{
		{"clusters", func() (int, error) {
			cs, err := r.Clusters(ctx, end, kubeversion.MustParse("1.29"))
			return len(cs), err
		}},
		// The one query Clusters made before (every column of all findings): the baseline.
		{"clusters-one-query-before", func() (int, error) {
			var n int
			rows, err := st.DB().QueryContext(ctx, `SELECT cluster,
  toUInt64(uniqExactIf(cluster, audit_id, rule_id, event_time >= toDateTime(?))) AS this_week,
  toUInt64(uniqExactIf(cluster, audit_id, rule_id, event_time >= toDateTime(?) AND event_time < toDateTime(?))) AS last_week,
  toUInt64(uniqExactIf(rule_id, api_group, api_version, resource, removed_in, event_time >= toDateTime(?) AND (removed_in_key >= 1000 AND removed_in_key <= ?))) AS blockers,
  toUInt32(max(event_time)) AS newest,
  toUInt32(maxIf(event_time, (removed_in_key >= 1000 AND removed_in_key <= ?))) AS newest_blocker
FROM findings GROUP BY cluster ORDER BY cluster LIMIT 500`, end.Unix(), weekStart.Unix(), end.Unix(), weekStart.Unix(), 1029, 1029)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			for rows.Next() {
				n++
			}
			return n, rows.Err()
		}},
		{"callers", func() (int, error) {
			rows, _, err := r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: key, Window: week})
			return len(rows), err
		}},
		{"callers-last-page", func() (int, error) {
			rows, _, err := r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: key, Window: week, Page: console.Page{Offset: console.MaxOffset}})
			return len(rows), err
		}},
		{"requests", func() (int, error) {
			id, _ := strconv.ParseUint(caller[0].ID, 10, 64)
			rows, _, err := r.Requests(ctx, console.RequestsQuery{Cluster: "prod", Key: key, Caller: id, Window: week})
			return len(rows), err
		}},
		{"request", func() (int, error) {
			rows, err := r.Request(ctx, "prod", "a1")
			return len(rows), err
		}},
		{"search-agent", func() (int, error) {
			rows, _, err := r.Search(ctx, console.SearchQuery{Cluster: "prod", By: console.ByAgent, Text: "V0.1", Window: week})
			return len(rows), err
		}},
	} {
		b.Run(q.name, func(b *testing.B) {
			var rows int
			for b.Loop() {
				var err error
				if rows, err = q.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rows), "rows")
		})
	}
}
