package rules

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
)

func TestSuccessors(t *testing.T) {
	e := mustEngine(t)
	for _, c := range []struct {
		to   API
		want []API
	}{
		// The same resource under the group's stable version, and the ResourceClass it took over.
		{API{"resource.k8s.io", "v1", "deviceclasses"}, []API{
			{"resource.k8s.io", "v1alpha1", "resourceclasses"}, {"resource.k8s.io", "v1alpha2", "resourceclasses"},
			{"resource.k8s.io", "v1alpha3", "deviceclasses"}, {"resource.k8s.io", "v1beta1", "deviceclasses"}, {"resource.k8s.io", "v1beta2", "deviceclasses"}}},
		// Another group.
		{API{"networking.k8s.io", "v1", "ingresses"}, []API{{"extensions", "v1beta1", "ingresses"}, {"networking.k8s.io", "v1beta1", "ingresses"}}},
		// Another resource, named by its kind.
		{API{"discovery.k8s.io", "v1", "endpointslices"}, []API{
			{"", "v1", "endpoints"}, {"discovery.k8s.io", "v1alpha1", "endpointslices"}, {"discovery.k8s.io", "v1beta1", "endpointslices"}}},
	} {
		got := slices.Clone(e.successors[c.to])
		slices.SortFunc(got, func(a, b API) int { return strings.Compare(a.Group+" "+a.Version, b.Group+" "+b.Version) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%s replaces %v, want %v", c.to, got, c.want)
		}
	}
	// Prose is no successor a request can call.
	if olds := e.successors[API{"", "v1", "componentstatuses"}]; len(olds) > 0 {
		t.Errorf("v1 componentstatuses replaces %v", olds)
	}
}

func TestMoveOf(t *testing.T) {
	e := mustEngine(t)
	d := auditevent.NewDecoder(1 << 20)
	move := func(line string) Move {
		ev, err := d.DecodeEvent([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		return e.MoveOf(ev)
	}
	const head = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","verb":"list","user":{"username":"u"},`
	old := move(head + `"requestURI":"/apis/resource.k8s.io/v1beta1/deviceclasses","objectRef":{"resource":"deviceclasses","apiGroup":"resource.k8s.io","apiVersion":"v1beta1"},"responseStatus":{"code":404}}`)
	if !old.IsOld || old.Old != (API{"resource.k8s.io", "v1beta1", "deviceclasses"}) || len(old.Replaces) > 0 {
		t.Errorf("a v1beta1 call: %+v", old)
	}
	repl := move(head + `"requestURI":"/apis/resource.k8s.io/v1/deviceclasses","objectRef":{"resource":"deviceclasses","apiGroup":"resource.k8s.io","apiVersion":"v1"},"responseStatus":{"code":200}}`)
	if repl.IsOld || !slices.Contains(repl.Replaces, API{"resource.k8s.io", "v1beta1", "deviceclasses"}) {
		t.Errorf("a v1 call: %+v", repl)
	}
	// A refused call of the successor moved nothing; nor did a call without a catalogued API.
	if mv := move(head + `"requestURI":"/apis/resource.k8s.io/v1/deviceclasses","objectRef":{"resource":"deviceclasses","apiGroup":"resource.k8s.io","apiVersion":"v1"},"responseStatus":{"code":403}}`); len(mv.Replaces) > 0 {
		t.Errorf("a refused v1 call: %+v", mv)
	}
	if mv := move(head + `"requestURI":"/api/v1/pods","objectRef":{"resource":"pods","apiVersion":"v1"}}`); mv.IsOld || len(mv.Replaces) > 0 {
		t.Errorf("a pods call: %+v", mv)
	}
}

// TestMovesOnGenuineEvents: the real 1.37 apiserver's events carry calls of both kinds (the
// deprecated Endpoints and EndpointSlices, at least).
func TestMovesOnGenuineEvents(t *testing.T) {
	e := mustEngine(t)
	f, err := os.Open("testdata/families-1.37.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := auditevent.NewDecoder(4 << 20)
	olds, repls := map[API]int{}, map[API]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		ev, err := d.DecodeEvent(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		mv := e.MoveOf(ev)
		if mv.IsOld {
			olds[mv.Old]++
		}
		for _, o := range mv.Replaces {
			repls[o]++
		}
	}
	ep := API{"", "v1", "endpoints"}
	if olds[ep] == 0 || repls[ep] == 0 {
		t.Errorf("v1 endpoints: %d calls, %d of its successor; old %v, successors of %v", olds[ep], repls[ep], olds, repls)
	}
}
