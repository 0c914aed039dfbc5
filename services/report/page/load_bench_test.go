package page

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

var (
	loadFindings = flag.Int("console.findings", 2_000_000, "BenchmarkConsoleUnderLoad: findings generated over 90 days")
	loadQueries  = flag.Int("console.max-queries", DefaultLimits().MaxQueries, "BenchmarkConsoleUnderLoad: Limits.MaxQueries")
	loadTimeout  = flag.Duration("console.timeout", DefaultLimits().QueryTimeout, "BenchmarkConsoleUnderLoad: Limits.QueryTimeout")
	loadQueryLog = flag.Bool("console.query-log", false, "BenchmarkConsoleUnderLoad: log the queries of one request per page alone (ClickHouse's query_log)")
	loadEndOfDay = flag.Bool("console.end-of-day", false, "BenchmarkConsoleUnderLoad: then fill today up to a whole day's findings (the end of a day) and ask every page again")
	loadHold     = flag.Duration("console.hold", 0, "BenchmarkConsoleUnderLoad: keep the generated store's server this long before measuring, to query it by hand or measure it from another build (its address is logged)")
	loadStore    = flag.String("console.store", "", "BenchmarkConsoleUnderLoad: measure the store a run with -console.hold generated, at this host:port, instead of generating one (two builds measured alternately on one store)")
)

// BenchmarkConsoleUnderLoad serves every console page to 16 clients at once over
// -console.findings findings spanning 90 days on a ClickHouse 18.16 server, with the default
// limits (2 requests reading at once, 5 s each): each request is either served or refused
// with a fast 503. Reported per page: the slowest of b.N requests alone, then with 16 at once
// the slowest served request, the slowest refusal and how many of the 16 were refused. Run with
//
//	go test -run '^$' -bench ConsoleUnderLoad -benchtime 3x -console.findings 10000000 ./page/
func BenchmarkConsoleUnderLoad(b *testing.B) {
	// Now, not a fixed day: compaction goes by the server's clock.
	now := time.Now().UTC().Truncate(time.Second)
	var st *store.Store
	var dsn string
	today := 0
	if *loadStore != "" {
		if *loadEndOfDay {
			b.Fatal("-console.end-of-day fills a store this run generates: not with -console.store")
		}
		dsn = "clickhouse://" + *loadStore + "/" + store.DefaultDatabase + "?dial_timeout=2s"
	} else {
		var srv0 *chtest.Server
		srv0, st = chtest.ServerStore(b)
		dsn = srv0.DSN(store.DefaultDatabase)
		t0 := time.Now()
		today = generate(b, st, now, *loadFindings)
		b.Logf("generated %d findings over 90 days in %v", *loadFindings, time.Since(t0).Round(time.Millisecond))
		settle(b, st.DB())
		if *loadHold > 0 {
			b.Logf("the server listens on %s (database %s) for %v", srv0.Addr(), store.DefaultDatabase, *loadHold)
			time.Sleep(*loadHold)
		}
	}
	server, err := sql.Open("clickhouse", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()
	db := server
	if *loadQueryLog {
		if db, err = sql.Open("clickhouse", dsn+"&log_queries=1"); err != nil {
			b.Fatal(err)
		}
		defer db.Close()
	}
	h := &Handler{DB: db, Cluster: "prod", Releases: []weekly.Version{{Major: 1, Minor: 16}, {Major: 1, Minor: 32}},
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Limits: Limits{Lookback: DefaultLimits().Lookback, MaxQueries: *loadQueries, QueryTimeout: *loadTimeout}, Deadline: store.WithDeadline}
	mux := http.NewServeMux()
	h.Register(mux)
	// A request naming a user (testUser) is that user's, allowed every cluster but those of
	// the "prod-only" users: 16 users allowed the same share a read (share), users of two
	// kinds read two pages, sharing their store reads of prod.
	srv := httptest.NewServer(namedUsers(mux, func(user, cluster string) bool {
		return cluster == "prod" || !strings.HasPrefix(user, "prod-only")
	}, access.Loopback(mux)))
	defer srv.Close()
	scope := "cluster=prod&target-version=1.32&week-ending=" + weekly.LastWeekEnding(now).String()
	key := "&rule=removed-api&group=extensions&version=v1beta1&resource=ingresses"
	_, callers := fetch(b, http.MethodGet, srv.URL+"/callers?"+scope+key)
	requests := hrefOf(b, callers, "requests-link")
	_, list := fetch(b, http.MethodGet, srv.URL+requests)
	request := hrefOf(b, list, "request-link")
	// The first screen's links read the lookback window, which ends today.
	_, index := fetch(b, http.MethodGet, srv.URL+"/")
	lookback := hrefOf(b, index, "callers-link")
	u, err := url.Parse(lookback)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	for _, k := range []string{"rule", "group", "version", "resource"} {
		q.Del(k)
	}
	q.Set("by", "agent")
	q.Set("q", "client-go")
	pages := []struct{ name, path string }{
		{"index", "/"},
		{"report", "/report?" + scope},
		{"callers", "/callers?" + scope + key},
		{"requests", requests},
		{"request", request},
		{"search", "/search?" + scope + "&by=agent&q=client-go"},
		{"callers-lookback", lookback},
		{"search-lookback", "/search?" + q.Encode()},
	}
	warm(b, srv.URL, pages, server)
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) { measure(b, h, srv.URL+p.path, server) })
	}
	if *loadEndOfDay {
		// Today is read from the build of its hours that are over and the states of the
		// hour under way; the compaction runs as the service's does, every minute.
		fillToday(b, st, now, *loadFindings, today)
		chtest.CompactDays(b, st.DB())
		settle(b, st.DB())
		warm(b, srv.URL, pages, server)
		for _, p := range pages {
			b.Run(p.name+"-end-of-day", func(b *testing.B) { measure(b, h, srv.URL+p.path, server) })
		}
	}
}

// settle waits until the server's background merges are over (at most 15 minutes): the
// pages are measured at rest, as a store filled over 90 days is, not one loaded in minutes.
func settle(b *testing.B, db *sql.DB) {
	t0 := time.Now()
	for merging := uint64(1); merging > 0 && time.Since(t0) < 15*time.Minute; {
		if err := db.QueryRow(`SELECT count() FROM system.merges`).Scan(&merging); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	b.Logf("background merges over after %v", time.Since(t0).Round(time.Second))
}

// warmUp is how long warm asks the pages before they are measured.
const warmUp = time.Minute

// warm asks every page in turn, alone, for warmUp: right after a bulk write (the generation
// writes 100 M findings in about 20 minutes at full speed; the end of the day 1.1 M) the server
// answers slower for a minute or two, a query that reads no table too (the reference below:
// 43 ms against 30 at rest, 10 M findings, 2026-12-07), while a store filled over 90 days is
// at rest. It logs the reference before and after.
func warm(b *testing.B, base string, pages []struct{ name, path string }, server *sql.DB) {
	before := reference(b, server)
	t0 := time.Now()
	n := 0
	for time.Since(t0) < warmUp {
		for _, p := range pages {
			fetch(b, http.MethodGet, base+p.path)
			n++
		}
	}
	b.Logf("warmed up: %d requests in %v; reference query %v before, %v after", n, time.Since(t0).Round(time.Second),
		before.Round(time.Millisecond), reference(b, server).Round(time.Millisecond))
}

// reference is the median of five runs of a query that reads no table (10 M hashes): the
// server's speed at the moment, against which a page's time in the same run can be judged
// (ref-ms).
func reference(b *testing.B, server *sql.DB) time.Duration {
	ds := make([]time.Duration, 5)
	for i := range ds {
		t0 := time.Now()
		var sum uint64
		if err := server.QueryRow(`SELECT sum(cityHash64(number)) FROM numbers(10000000)`).Scan(&sum); err != nil {
			b.Fatal(err)
		}
		ds[i] = time.Since(t0)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// measure asks url b.N times alone, then b.N times 16 at once as one user, as 16 users allowed
// the same clusters, and as 16 users of two kinds (half of them refused the second cluster),
// and reports the slowest request alone, the slowest served and refused of each 16, and how
// many were refused. Requests of users decided the same share a read (share): one user's, 16
// users allowed the same; 16 users of two kinds are two page reads, which share their store
// reads of the cluster both may see (reads-shared/2kinds counts them). server reads the
// query log and the reference query, whose time just before the page's requests alone it
// reports too (ref-ms).
func measure(b *testing.B, h *Handler, url string, server *sql.DB) {
	const clients = 16
	// Alone first: the page's own latency, then 16 at once.
	if *loadQueryLog {
		time.Sleep(1100 * time.Millisecond) // the query log below is by the second
	}
	ref := reference(b, server)
	aloneFrom := time.Now()
	var alone time.Duration
	for range b.N {
		start := time.Now()
		if resp, _ := fetch(b, http.MethodGet, url); resp.StatusCode != http.StatusOK {
			b.Fatalf("%s alone: %d", url, resp.StatusCode)
		}
		alone = max(alone, time.Since(start))
	}
	if *loadQueryLog {
		logQueries(b, server, url, aloneFrom)
	}
	const oneUser, users, twoKinds = 0, 1, 2
	once := func(who int) (served, refused time.Duration, nRefused int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				start := time.Now()
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
				switch {
				case who == users || (who == twoKinds && i%2 == 0):
					req.Header.Set(testUser, fmt.Sprintf("user-%d", i))
				case who == twoKinds:
					req.Header.Set(testUser, fmt.Sprintf("prod-only-%d", i))
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				d := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				switch resp.StatusCode {
				case http.StatusOK:
					served = max(served, d)
				case http.StatusServiceUnavailable:
					refused, nRefused = max(refused, d), nRefused+1
				default:
					b.Errorf("%s: %d", url, resp.StatusCode)
				}
			})
		}
		wg.Wait()
		return served, refused, nRefused
	}
	var served, refused, usersServed, usersRefused, kindsServed, kindsRefused time.Duration
	var nRefused, nUsersRefused, nKindsRefused int
	var kindsShared uint64
	for range b.N {
		s, r, n := once(oneUser)
		served, refused, nRefused = max(served, s), max(refused, r), nRefused+n
		s, r, n = once(users)
		usersServed, usersRefused, nUsersRefused = max(usersServed, s), max(usersRefused, r), nUsersRefused+n
		before := h.SharedReads()
		s, r, n = once(twoKinds)
		kindsServed, kindsRefused, nKindsRefused = max(kindsServed, s), max(kindsRefused, r), nKindsRefused+n
		kindsShared += h.SharedReads() - before
	}
	b.ReportMetric(float64(alone.Milliseconds()), "max-alone-ms")
	b.ReportMetric(float64(ref.Microseconds())/1000, "ref-ms")
	b.ReportMetric(float64(served.Milliseconds()), "max-served-ms")
	b.ReportMetric(float64(refused.Milliseconds()), "max-503-ms")
	b.ReportMetric(float64(nRefused)/float64(b.N), "503/16")
	b.ReportMetric(float64(usersServed.Milliseconds()), "max-served-16users-ms")
	b.ReportMetric(float64(usersRefused.Milliseconds()), "max-503-16users-ms")
	b.ReportMetric(float64(nUsersRefused)/float64(b.N), "503/16users")
	b.ReportMetric(float64(kindsServed.Milliseconds()), "max-served-2kinds-ms")
	b.ReportMetric(float64(kindsRefused.Milliseconds()), "max-503-2kinds-ms")
	b.ReportMetric(float64(nKindsRefused)/float64(b.N), "503/2kinds")
	b.ReportMetric(float64(kindsShared)/float64(b.N), "reads-shared/2kinds")
}

// generated inserts findings: the parameters are the first audit id's number, the first
// second, the seconds spanned, the rows, the day (days before today: the callers' IPs) and
// the rows again.
const generated = `INSERT INTO findings (rule_id, severity, cluster, audit_id, event_time, verb, request_uri, api_group, api_version,
  resource, namespace, name, username, user_agent, source_ip, response_code, removed_in, removed_in_key, ingested_at)
SELECT 'removed-api', 'warning', if(c % 10 = 0, 'staging', 'prod'), concat('a', toString(? + number)),
  toDateTime(? + intDiv(number * ?, ?)), 'list', concat('/apis/', grp, '/', ver, '/', res), grp, ver, res,
  concat('ns', toString(c % 200)), concat('obj', toString(number % 1000)),
  concat('system:serviceaccount:ns', toString(c % 200), ':sa', toString(c)),
  if(c % 30 < 2, 'kubelet/v1.31.4 (linux/amd64) kubernetes/abc', concat('client-go/v0.', toString(c % 30), ' (linux/amd64)')),
  concat('10.0.', toString((c + ?) % 7), '.1'), 200,
  removed, toUInt32OrZero(splitByChar('.', removed)[1]) * 1000 + toUInt32OrZero(splitByChar('.', removed)[2]), now()
FROM (
  SELECT number, (number * 2654435761) % 7400 AS c, (c * 7 + number % 2) % 14 + 1 AS i,
    ['extensions','extensions','apps','policy','networking.k8s.io','batch','policy','flowcontrol.apiserver.k8s.io','autoscaling','storage.k8s.io','discovery.k8s.io','rbac.authorization.k8s.io','','extensions'][i] AS grp,
    ['v1beta1','v1beta1','v1beta2','v1beta1','v1beta1','v1beta1','v1beta1','v1beta3','v2beta2','v1beta1','v1beta1','v1beta1','v1','v1beta1'][i] AS ver,
    ['ingresses','daemonsets','deployments','podsecuritypolicies','ingresses','cronjobs','poddisruptionbudgets','flowschemas','horizontalpodautoscalers','csistoragecapacities','endpointslices','roles','componentstatuses','networkpolicies'][i] AS res,
    ['1.22','1.16','1.16','1.25','1.22','1.25','1.25','1.32','1.26','1.27','1.25','1.22','','1.16'][i] AS removed
  FROM numbers(?)
)`

// moved is what classify's heartbeats say of the callers that moved: a twentieth of the
// callers of generated called the successor of each of their two APIs, on a day of the last
// 60 (its parameter: now's Unix seconds), after which their calls of the old version block
// again (generated keeps calling it).
const moved = `INSERT INTO migration_sightings (cluster, api_group, api_version, resource, username, user_agent, seen)
SELECT if(c % 10 = 0, 'staging', 'prod'), grp, ver, res,
  concat('system:serviceaccount:ns', toString(c % 200), ':sa', toString(c)),
  if(c % 30 < 2, 'kubelet/v1.31.4 (linux/amd64) kubernetes/abc', concat('client-go/v0.', toString(c % 30), ' (linux/amd64)')),
  toDateTime(? - (c % 60) * 86400)
FROM (
  SELECT intDiv(number, 2) * 20 + intDiv(number, 2) % 10 AS c, (c * 7 + number % 2) % 14 + 1 AS i,
    ['extensions','extensions','apps','policy','networking.k8s.io','batch','policy','flowcontrol.apiserver.k8s.io','autoscaling','storage.k8s.io','discovery.k8s.io','rbac.authorization.k8s.io','','extensions'][i] AS grp,
    ['v1beta1','v1beta1','v1beta2','v1beta1','v1beta1','v1beta1','v1beta1','v1beta3','v2beta2','v1beta1','v1beta1','v1beta1','v1','v1beta1'][i] AS ver,
    ['ingresses','daemonsets','deployments','podsecuritypolicies','ingresses','cronjobs','poddisruptionbudgets','flowschemas','horizontalpodautoscalers','csistoragecapacities','endpointslices','roles','componentstatuses','networkpolicies'][i] AS res
  FROM numbers(740)
)`

// controlPlane is what classify's heartbeats say of the control plane's own requests: in each
// cluster, the API server, the controller manager and the scheduler of 1.31 (as the kubelet
// agents of generated) seen every day of the 90 before now (its parameter: now's Unix seconds).
// A cluster's release is read from them; without them the console falls back to the newest
// kubelet among a month of findings' user agents (ClusterVersion: 30-45 ms at 10 M).
const controlPlane = `INSERT INTO control_plane_sightings (cluster, component, version, seen)
SELECT arrayJoin(['prod', 'staging']), arrayJoin(['kube-apiserver', 'kube-controller-manager', 'kube-scheduler']), '1.31',
  toDateTime(? - number * 86400)
FROM numbers(91)`

// generate writes n findings over the 90 days before now, day by day in time order as the
// service receives them (the day of now up to now), server-side: 7,400 callers (a service
// account, its namespace among 200 and its user agent among 30, two of them kubelets of
// 1.31), each calling two of 14 APIs from one of 7 IPs a day; a tenth of the callers in a
// second cluster; a twentieth moved to their APIs' successors (moved); the control plane
// seen every day (controlPlane). Then it compacts the days as the service does
// (chtest.CompactDays), and returns how many findings today holds.
func generate(b testing.TB, st *store.Store, now time.Time, n int) (todays int) {
	ctx := context.Background()
	const days = 90
	today := now.UTC().Truncate(24 * time.Hour)
	span := now.Sub(today.AddDate(0, 0, -days))
	written := 0
	for d := days; d >= 0; d-- {
		start := today.AddDate(0, 0, -d)
		secs := int64(24 * 60 * 60)
		if d == 0 {
			secs = int64(now.Sub(today) / time.Second)
		}
		// The day's share of n, in proportion to its seconds.
		rows := int(int64(n) * secs / int64(span/time.Second))
		if d == 0 {
			rows = n - written
		}
		if rows <= 0 {
			continue
		}
		if _, err := st.DB().ExecContext(ctx, generated, written, start.Unix(), secs, rows, d, rows); err != nil {
			b.Fatal(err)
		}
		written += rows
		if d == 0 {
			todays = rows
		}
	}
	for _, q := range []string{moved, controlPlane} {
		if _, err := st.DB().ExecContext(ctx, q, now.Unix()); err != nil {
			b.Fatal(err)
		}
	}
	chtest.CompactDays(b, st.DB())
	return todays
}

// fillToday adds to today's findings (today of them already stored, n over 90 days) up to a
// whole day's share of n: today as it is at the end of the day, its states the largest.
func fillToday(b testing.TB, st *store.Store, now time.Time, n, today int) {
	day := now.UTC().Truncate(24 * time.Hour)
	rows := int(int64(n)*24*60*60/int64(now.Sub(day.AddDate(0, 0, -90))/time.Second)) - today
	if rows <= 0 {
		return
	}
	if _, err := st.DB().ExecContext(context.Background(), generated, n, day.Unix(), int64(now.Sub(day)/time.Second), rows, 0, rows); err != nil {
		b.Fatal(err)
	}
	b.Logf("today filled with %d more findings, %d in all", rows, today+rows)
}

// logQueries logs how many queries path's requests alone (those begun since from) ran, their
// summed time and rows, and the slowest of them, from the server's query_log.
func logQueries(b *testing.B, db *sql.DB, path string, from time.Time) {
	if _, err := db.Exec(`SYSTEM FLUSH LOGS`); err != nil {
		b.Fatal(err)
	}
	var n, ms, rowsRead uint64
	if err := db.QueryRow(`SELECT count(), sum(query_duration_ms), sum(read_rows) FROM system.query_log
WHERE type = 2 AND query_start_time >= toDateTime(?) AND query NOT LIKE '%system.%'`, from.Unix()).Scan(&n, &ms, &rowsRead); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s, %d requests: %d queries, %d ms and %d rows read in all; the slowest:", path, b.N, n, ms, rowsRead)
	rows, err := db.Query(`SELECT query_duration_ms, read_rows, substring(replaceRegexpAll(query, '\\s+', ' '), 1, 160)
FROM system.query_log
WHERE type = 2 AND query_start_time >= toDateTime(?) AND query NOT LIKE '%system.%'
ORDER BY query_duration_ms DESC LIMIT 12`, from.Unix())
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var ms, n uint64
		var q string
		if err := rows.Scan(&ms, &n, &q); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %5d ms %9d rows %s", path, ms, n, q)
	}
}
