package cloudwatch_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// logEvent is one event of the fake log group.
type logEvent struct {
	stream  string
	ts      int64
	id      string
	message string
}

// fakeLogs implements the CloudWatch Logs call the reader makes, FilterLogEvents, in the
// JSON 1.1 protocol: POST /, X-Amz-Target: Logs_20140328.FilterLogEvents, a JSON body, a
// JSON answer; requests must be signed (SigV4) with the access key the test gives.
type fakeLogs struct {
	group, accessKey string
	pageSize         int

	mu     sync.Mutex
	events []logEvent
	seq    int
	calls  int
	// unsigned counts requests without the expected credentials.
	unsigned int
	// throttle is how many of the next requests are answered ThrottlingException.
	throttle int
}

// throttleNext makes the next n requests fail as CloudWatch does past its rate limit.
func (f *fakeLogs) throttleNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle = n
}

func newFakeLogs(t *testing.T, group string, pageSize int) (*fakeLogs, *httptest.Server) {
	f := &fakeLogs{group: group, accessKey: "AKIDTESTCLOUDWATCH", pageSize: pageSize}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// add appends an event to stream with timestamp ts (epoch ms) and returns its id.
func (f *fakeLogs) add(stream string, ts int64, message string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("%056d", f.seq)
	f.events = append(f.events, logEvent{stream: stream, ts: ts, id: id, message: message})
	return id
}

func (f *fakeLogs) fail(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}

func (f *fakeLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if r.Method != http.MethodPost || r.Header.Get("X-Amz-Target") != "Logs_20140328.FilterLogEvents" {
		f.fail(w, http.StatusBadRequest, "UnknownOperationException", "only FilterLogEvents here")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="+f.accessKey+"/") {
		f.unsigned++
		f.fail(w, http.StatusBadRequest, "UnrecognizedClientException", "The security token included in the request is invalid.")
		return
	}
	if f.throttle > 0 {
		f.throttle--
		f.fail(w, http.StatusBadRequest, "ThrottlingException", "Rate exceeded")
		return
	}
	var in struct {
		LogGroupName        string `json:"logGroupName"`
		LogStreamNamePrefix string `json:"logStreamNamePrefix"`
		StartTime           *int64 `json:"startTime"`
		NextToken           string `json:"nextToken"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		f.fail(w, http.StatusBadRequest, "SerializationException", err.Error())
		return
	}
	if in.LogGroupName != f.group {
		f.fail(w, http.StatusBadRequest, "ResourceNotFoundException", "The specified log group does not exist.")
		return
	}
	var match []logEvent
	for _, e := range f.events {
		if strings.HasPrefix(e.stream, in.LogStreamNamePrefix) && (in.StartTime == nil || e.ts >= *in.StartTime) {
			match = append(match, e)
		}
	}
	slices.SortStableFunc(match, func(a, b logEvent) int {
		if a.ts != b.ts {
			return int(a.ts - b.ts)
		}
		return strings.Compare(a.id, b.id)
	})
	from := 0
	if in.NextToken != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(in.NextToken, "page-"))
		if err != nil {
			f.fail(w, http.StatusBadRequest, "InvalidParameterException", "bad nextToken")
			return
		}
		from = min(n, len(match))
	}
	to := min(from+f.pageSize, len(match))
	type out struct {
		LogStreamName string `json:"logStreamName"`
		Timestamp     int64  `json:"timestamp"`
		Message       string `json:"message"`
		IngestionTime int64  `json:"ingestionTime"`
		EventID       string `json:"eventId"`
	}
	body := map[string]any{"searchedLogStreams": []any{}}
	evs := []out{}
	for _, e := range match[from:to] {
		evs = append(evs, out{LogStreamName: e.stream, Timestamp: e.ts, Message: e.message, IngestionTime: e.ts + 500, EventID: e.id})
	}
	body["events"] = evs
	if to < len(match) {
		body["nextToken"] = fmt.Sprintf("page-%d", to)
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", strconv.Itoa(f.calls))
	_ = json.NewEncoder(w).Encode(body)
}
