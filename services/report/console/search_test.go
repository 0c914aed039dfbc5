package console_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// A search groups its rows by hashes and orders them by the names the compaction kept;
// a page listing a row without a name kept is read over the day rows' strings. Every page of
// one and of three rows, and the whole list, is the expected list's slice: before any
// compaction (every page over the strings), after it (none), and with a caller written after
// the compaction, as busy as the busiest and first by name (the pages that list it over the
// strings of the builds and the hours after them).
func TestSearchPagesOrderTiesByName(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		want := seedSearch(t, st)
		r := console.Reader{DB: st.DB()}
		q := console.SearchQuery{Cluster: "prod", By: console.ByAgent, Text: "TOOL/", Window: week}
		// check reads every page and returns how many were read over the strings.
		check := func(t *testing.T) (overStrings int64) {
			before := console.SearchesOverStrings()
			for _, limit := range []int{1, 3, console.MaxLimit} {
				for offset := 0; offset <= len(want)+1; offset++ {
					if limit == console.MaxLimit && offset > 1 {
						break // the whole list, and from its second row
					}
					q.Page = console.Page{Limit: limit, Offset: offset}
					got, more, err := r.Search(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					end := min(offset+limit, len(want))
					page := want[min(offset, len(want)):end]
					for i := range got {
						if got[i].ID == "" {
							t.Fatalf("limit %d offset %d: row %d has no caller id", limit, offset, i)
						}
						got[i].ID = ""
					}
					if more != (end < len(want)) || !reflect.DeepEqual(got, page) && len(got)+len(page) > 0 {
						t.Fatalf("limit %d offset %d (more %v):\n got %s\nwant %s", limit, offset, more, brief(got), brief(page))
					}
				}
			}
			return console.SearchesOverStrings() - before
		}
		t.Run("nothing compacted", func(t *testing.T) {
			if n := check(t); n == 0 {
				t.Error("no page was read over the strings, though no name is kept")
			}
		})
		if _, err := rollup.Compact(ctx, st.DB(), rollup.TablesFor("findings")); err != nil {
			t.Fatal(err)
		}
		t.Run("names kept", func(t *testing.T) {
			if n := check(t); n != 0 {
				t.Errorf("%d pages read over the strings, though every name is kept", n)
			}
		})
		t.Run("a caller not named yet", func(t *testing.T) {
			top := want[0]
			fs, m := searchFindings("aaron", "tool/v2", "10.0.0.5", top.Key, top.RemovedIn, int(top.Findings), 99)
			if err := st.WriteFindings(ctx, fs); err != nil {
				t.Fatal(err)
			}
			want = append([]console.Match{m}, want...)
			if n := check(t); n == 0 {
				t.Error("no page was read over the strings, though aaron has no name kept")
			}
		})
	})
}

// seedSearch writes prod's findings of 16 callers whose user agents contain "tool/" (and one
// whose does not), over two rules, with 1 to 3 findings per caller and rule, so most rows tie;
// the users' names run against their order of writing. Returns the matches expected, in the
// order a search lists them.
func seedSearch(t *testing.T, st *store.Store) []console.Match {
	t.Helper()
	rnd := rand.New(rand.NewPCG(1, 2))
	type rule struct {
		key       console.BlockerKey
		removedIn string
	}
	rules := []rule{
		{console.BlockerKey{Rule: "removed-api", Group: "extensions", Version: "v1beta1", Resource: "ingresses"}, "1.22"},
		{console.BlockerKey{Rule: "psp", Group: "policy", Version: "v1beta1", Resource: "podsecuritypolicies"}, "1.25"},
	}
	var fs []*auditlensv1.Finding
	var want []console.Match
	for i := range 17 {
		user := fmt.Sprintf("user-%02d", 16-i)
		agent := fmt.Sprintf("Tool/v1.%d", i%3)
		if i == 16 {
			agent = "kubectl/v1.30.0"
		}
		for _, ru := range rules {
			f, m := searchFindings(user, agent, fmt.Sprintf("10.0.0.%d", i%2), ru.key, ru.removedIn, 1+rnd.IntN(3), i)
			fs = append(fs, f...)
			if i < 16 {
				want = append(want, m)
			}
		}
	}
	if err := st.WriteFindings(context.Background(), fs); err != nil {
		t.Fatal(err)
	}
	sort.Slice(want, func(a, c int) bool {
		x, y := want[a], want[c]
		if x.Findings != y.Findings {
			return x.Findings > y.Findings
		}
		if x.Key.Rule != y.Key.Rule { // the rules' APIs differ too
			return x.Key.Rule < y.Key.Rule
		}
		return x.Username+"\x00"+x.UserAgent+"\x00"+x.SourceIP < y.Username+"\x00"+y.UserAgent+"\x00"+y.SourceIP
	})
	return want
}

// searchFindings are n findings of one caller and blocker on the week's first n days (the
// i-th minute of each), and the match a search of them finds.
func searchFindings(user, agent, ip string, key console.BlockerKey, removedIn string, n, i int) ([]*auditlensv1.Finding, console.Match) {
	var fs []*auditlensv1.Finding
	m := console.Match{Key: key, RemovedIn: removedIn, Caller: console.Caller{Username: user, UserAgent: agent, SourceIP: ip, Findings: uint64(n)}}
	for j := range n {
		at := weekStart.AddDate(0, 0, j).Add(time.Duration(i) * time.Minute)
		ns := fmt.Sprintf("ns-%d", (i+j)%4)
		fs = append(fs, &auditlensv1.Finding{RuleId: key.Rule, Cluster: "prod", AuditId: fmt.Sprintf("%s-%s-%d", user, key.Rule, j),
			EventTime: timestamppb.New(at), Verb: "list", ApiGroup: key.Group, ApiVersion: key.Version, Resource: key.Resource,
			Namespace: ns, Username: user, UserAgent: agent, SourceIp: ip, RemovedIn: removedIn})
		if j == 0 {
			m.FirstSeen = at
		}
		m.LastSeen = at
		m.Namespaces = append(m.Namespaces, ns)
	}
	sort.Strings(m.Namespaces)
	m.Namespaces = m.Namespaces[:min(3, len(m.Namespaces))]
	return fs, m
}

func brief(ms []console.Match) string {
	s := ""
	for _, m := range ms {
		s += m.Key.Rule + ":" + m.Username + ":" + strconv.FormatUint(m.Findings, 10) + fmt.Sprintf("%v ", m.Namespaces)
	}
	return s
}
