package readiness_test

import (
	"context"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// BenchmarkEvaluate2M times one judgement (the blocker queries over 7 days and the stream's
// minutes) over 2 million findings on a ClickHouse 18.16 server: 8 weeks, 4 APIs, 7,400
// callers, inserted server-side (the stream_minutes view fills as the writer's inserts do).
// Run with
//
//	go test -run '^$' -bench Evaluate2M -benchtime 5x ./readiness/
func BenchmarkEvaluate2M(b *testing.B) {
	const n = 2_000_000
	_, st := chtest.ServerStore(b)
	ctx := context.Background()
	end := time.Now().UTC().Truncate(time.Hour)
	from := end.AddDate(0, 0, -56)
	span := int64(end.Sub(from) / time.Second)
	t0 := time.Now()
	q := `INSERT INTO findings (rule_id, severity, cluster, audit_id, event_time, verb, api_group, api_version,
  resource, namespace, username, user_agent, removed_in, removed_in_key, replacement, message, ingested_at)
SELECT 'removed-api', 'warning', 'prod', concat('a', toString(number)), toDateTime(? + (number * 48271) % ?), 'list',
  ['extensions','policy','flowcontrol.apiserver.k8s.io','batch'][number % 4 + 1],
  ['v1beta1','v1beta1','v1beta3','v1beta1'][number % 4 + 1],
  ['ingresses','podsecuritypolicies','flowschemas','cronjobs'][number % 4 + 1],
  concat('ns', toString(number % 200)), concat('system:serviceaccount:ns', toString(number % 200), ':sa', toString(number % 37)),
  'client-go/v0.30', ['1.22','1.25','1.32','1.25'][number % 4 + 1], [1022,1025,1032,1025][number % 4 + 1], 'x', 'x', now()
FROM numbers(?)`
	if _, err := st.DB().ExecContext(ctx, q, from.Unix(), span, n); err != nil {
		b.Fatal(err)
	}
	b.Logf("generated %d findings in %v", n, time.Since(t0).Round(time.Millisecond))
	chtest.CompactDays(b, st.DB())
	o := readiness.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 34}, Now: func() time.Time { return end }}
	var r *readiness.Result
	b.ResetTimer()
	for b.Loop() {
		var err error
		if r, err = readiness.Evaluate(ctx, st.DB(), o); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.Logf("%s: %d blockers, alive %t, %d active minutes", r.State, len(r.Blockers), r.Stream.Alive, r.Stream.ActiveMinutes)
}
