package chdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Platform is the only one libchdb is published for (npm package @chdb/lib-linux-x64-gnu):
// elsewhere embedded ClickHouse is unavailable and report needs --clickhouse-dsn.
const Platform = "linux/amd64"

// ErrNoLibrary is returned when libchdb.so cannot be found or loaded.
var ErrNoLibrary = errors.New("libchdb.so not available (set CHDB_LIB_PATH or run `make chdb`)")

// The C API of libchdb (chdb.h), bound lazily on first use so that a missing library is an
// error from Open, not a panic at program start.
var (
	libOnce sync.Once
	errLib  error

	cConnect       func(argc int, argv []*byte) *cConnection
	cCloseConn     func(conn *cConnection)
	cQuery         func(conn unsafe.Pointer, query string, format string) *cResult
	cDestroyResult func(res *cResult)
	cResultBuffer  func(res *cResult) *byte
	cResultLength  func(res *cResult) uintptr
	cResultRows    func(res *cResult) uint64
	cResultError   func(res *cResult) string
)

// cConnection is chdb_connection's target: a struct holding one pointer.
type cConnection struct {
	internal unsafe.Pointer //nolint:unused // C memory layout; only libchdb reads it
}

// cResult is chdb_result: a struct holding one pointer.
type cResult struct {
	internal unsafe.Pointer //nolint:unused // C memory layout; only libchdb reads it
}

// LibraryPath returns where libchdb.so is looked for: $CHDB_LIB_PATH, else lib/libchdb.so
// beside the executable (the release archive's layout), else <repo>/.cache/chdb/libchdb.so
// found by walking up from the working directory, else /usr/local/lib/libchdb.so (the
// all-in-one image's). The path may not exist.
func LibraryPath() string {
	if p := os.Getenv("CHDB_LIB_PATH"); p != "" {
		return p
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), "lib", "libchdb.so")
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			p := filepath.Join(dir, ".cache", "chdb", "libchdb.so")
			if _, err := os.Stat(p); err == nil {
				return p
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "/usr/local/lib/libchdb.so"
}

func loadLibrary() error {
	libOnce.Do(func() {
		path := LibraryPath()
		if _, err := os.Stat(path); err != nil {
			errLib = fmt.Errorf("%w: %w", ErrNoLibrary, err)
			if runtime.GOOS+"/"+runtime.GOARCH != Platform {
				errLib = fmt.Errorf("%w: libchdb is published for %s only, this is %s/%s: give --clickhouse-dsn of a ClickHouse server", ErrNoLibrary, Platform, runtime.GOOS, runtime.GOARCH)
			}
			return
		}
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			errLib = fmt.Errorf("%w: load %s: %w", ErrNoLibrary, path, err)
			return
		}
		defer func() {
			// RegisterLibFunc panics on a missing symbol (an incompatible library).
			if r := recover(); r != nil {
				errLib = fmt.Errorf("%w: %s: %v", ErrNoLibrary, path, r)
			}
		}()
		purego.RegisterLibFunc(&cConnect, h, "chdb_connect")
		purego.RegisterLibFunc(&cCloseConn, h, "chdb_close_conn")
		purego.RegisterLibFunc(&cQuery, h, "chdb_query")
		purego.RegisterLibFunc(&cDestroyResult, h, "chdb_destroy_query_result")
		purego.RegisterLibFunc(&cResultBuffer, h, "chdb_result_buffer")
		purego.RegisterLibFunc(&cResultLength, h, "chdb_result_length")
		purego.RegisterLibFunc(&cResultRows, h, "chdb_result_rows_read")
		purego.RegisterLibFunc(&cResultError, h, "chdb_result_error")
	})
	return errLib
}

// Available reports whether libchdb.so can be loaded, and why not.
func Available() error { return loadLibrary() }

// connect opens the process's one chDB connection on dir.
func connect(dir string) (*cConnection, error) {
	if err := loadLibrary(); err != nil {
		return nil, err
	}
	args := []string{"clickhouse", "--path=" + dir}
	argv := make([]*byte, len(args))
	keep := make([][]byte, len(args))
	for i, a := range args {
		keep[i] = append([]byte(a), 0)
		argv[i] = &keep[i][0]
	}
	c := cConnect(len(argv), argv)
	if c == nil || c.internal == nil {
		return nil, fmt.Errorf("open chdb in %s: connection refused (is the directory used by another process? chDB logs the reason to stderr)", dir)
	}
	return c, nil
}

// query runs q on c and returns the output in format, or the engine's error.
func query(c *cConnection, q, format string) ([]byte, uint64, error) {
	if c == nil || c.internal == nil {
		return nil, 0, errors.New("chdb: connection closed")
	}
	res := cQuery(c.internal, q, format)
	if res == nil {
		return nil, 0, nil
	}
	defer cDestroyResult(res)
	if msg := cResultError(res); msg != "" {
		return nil, 0, errors.New(msg)
	}
	n := cResultLength(res)
	rows := cResultRows(res)
	if n == 0 {
		return nil, rows, nil
	}
	buf := cResultBuffer(res)
	if buf == nil {
		return nil, rows, nil
	}
	out := make([]byte, n)
	copy(out, unsafe.Slice(buf, n))
	return out, rows, nil
}
