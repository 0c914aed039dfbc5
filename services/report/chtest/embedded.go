package chtest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/services/report/chdb"
	"github.com/auditlens/auditlens/services/report/store"
)

// The test binary's one chDB session (chDB allows one per process), held open until exit.
var (
	embOnce     sync.Once
	embDir      string
	embHold     *store.Store // keeps the session open until CleanupEmbedded
	errEmbedded error
	embSeq      atomic.Int64
)

// EmbeddedDir is the data directory of the test binary's chDB session, opening it if needed.
func EmbeddedDir(t testing.TB) string {
	t.Helper()
	openEmbedded(t)
	return embDir
}

func openEmbedded(t testing.TB) {
	t.Helper()
	embOnce.Do(func() {
		if err := chdb.Available(); err != nil {
			errEmbedded = err
			return
		}
		embDir, errEmbedded = os.MkdirTemp("", "auditlens-chdb-test-")
		if errEmbedded != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		embHold, errEmbedded = chdb.Open(ctx, embDir, "default")
	})
	if errEmbedded != nil {
		enginetest.Unavailable(t, "chdb", errEmbedded)
	}
}

// CleanupEmbedded ends the test binary's chDB session, then removes its data directory; call
// it from TestMain after m.Run in packages that use EmbeddedStore. The session is closed
// before its files go: removing the directory under a live session left chDB's background
// merges working on deleted parts, and the process then hung at exit.
func CleanupEmbedded() {
	if embHold != nil {
		_ = embHold.Close()
	}
	if embDir != "" {
		_ = os.RemoveAll(embDir)
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// EmbeddedStore returns a migrated store on the process's chDB session in a database of its
// own, dropped when t ends.
func EmbeddedStore(t testing.TB) *store.Store {
	t.Helper()
	openEmbedded(t)
	name := unsafeName.ReplaceAllString(t.Name(), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	db := fmt.Sprintf("t%d_%s", embSeq.Add(1), strings.ToLower(name))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := chdb.Open(ctx, embDir, db)
	if err != nil {
		t.Fatalf("open chdb database %s: %v", db, err)
	}
	t.Cleanup(func() {
		_, _ = st.DB().Exec("DROP DATABASE IF EXISTS " + db)
		_ = st.Close()
	})
	if _, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: Retention}); err != nil {
		t.Fatalf("migrate chdb database %s: %v", db, err)
	}
	return st
}

// Engine names one engine for EachEngine.
type Engine string

const (
	EngineServer   Engine = "clickhouse-server"
	EngineEmbedded Engine = "chdb"
)

// Retention is the retention the test stores are migrated with: none. A retention is a TTL
// judged by the server's clock, so a test's findings at dates of its own (fixed, or from
// testkit.Now) would be dropped as soon as the wall clock passes them by its days, and the test
// would fail on a later day. Tests of the retention itself migrate again with theirs.
const Retention = 0

// EachEngine runs f as a subtest on a fresh migrated store of each engine: a
// clickhouse-server started for the subtest, and embedded chDB.
func EachEngine(t *testing.T, f func(t *testing.T, e Engine, st *store.Store)) {
	t.Helper()
	t.Run(string(EngineServer), func(t *testing.T) {
		_, st := ServerStore(t)
		f(t, EngineServer, st)
	})
	t.Run(string(EngineEmbedded), func(t *testing.T) {
		f(t, EngineEmbedded, EmbeddedStore(t))
	})
}
