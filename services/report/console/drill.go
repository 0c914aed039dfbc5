package console

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/auditlens/auditlens/services/report/rollup"
)

// Caller is who made the requests behind a finding: user, user agent and source IP.
type Caller struct {
	Username  string
	UserAgent string
	SourceIP  string
	// Findings counts the caller's findings in the window, each once.
	Findings            uint64
	FirstSeen, LastSeen time.Time
	// ID names the caller in links: cityHash64(username, user_agent, source_ip) as the
	// database computes it (a user agent may be longer than a URL carries).
	ID string
}

// callerID is the SQL of Caller.ID over the findings' columns; the day rows give it as
// their caller column (package rollup).
const callerID = `toString(` + rollup.CallerHash + `)`

// CallersQuery asks for the callers of one blocker of Cluster in a window, busiest first.
type CallersQuery struct {
	Cluster string
	Key     BlockerKey
	Window  Window
	Page    Page
}

// Callers lists one page of the callers of q.Key; more reports whether rows follow it.
func (r Reader) Callers(ctx context.Context, q CallersQuery) (rows []Caller, more bool, err error) {
	t, p, err := r.check(q.Cluster, q.Window, q.Page)
	if err != nil {
		return nil, false, err
	}
	if err := q.Key.check(); err != nil {
		return nil, false, err
	}
	src, args, err := r.days(ctx, t, q.Cluster, q.Window, []string{"caller", "username", "user_agent", "source_ip", "first_seen", "last_seen"},
		`rule_id = ? AND api_group = ? AND api_version = ? AND resource = ?`,
		q.Key.Rule, q.Key.Group, q.Key.Version, q.Key.Resource)
	if err != nil {
		return nil, false, err
	}
	stmt := `SELECT c_user, c_agent, c_ip, n, c_first, c_last, c_id FROM (
  SELECT any(username) AS c_user, any(user_agent) AS c_agent, any(source_ip) AS c_ip, toUInt64(sum(findings)) AS n,
    toUInt32(min(first_seen)) AS c_first, toUInt32(max(last_seen)) AS c_last, toString(caller) AS c_id
  FROM (` + src + `)
  GROUP BY caller
)
ORDER BY n DESC, c_user, c_agent, c_ip
LIMIT ?, ?`
	err = each(ctx, r.DB, "callers", stmt, append(args, p.Offset, p.Limit+1), func(res rollup.Row) error {
		var c Caller
		var first, last uint32
		if err := res.Scan(&c.Username, &c.UserAgent, &c.SourceIP, &c.Findings, &first, &last, &c.ID); err != nil {
			return err
		}
		c.FirstSeen, c.LastSeen = unix(first), unix(last)
		rows = append(rows, c)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	rows, more = trim(rows, p.Limit)
	return rows, more, nil
}

// Request is one audit event behind a finding.
type Request struct {
	Time time.Time
	// Username and UserAgent are the caller's (Requests fills them).
	Username, UserAgent string
	// AuditHash is cityHash64(audit_id), to link to a request whose audit id is too long
	// for a URL (Requests fills it).
	AuditHash    string
	AuditID      string
	Verb         string
	RequestURI   string
	SourceIP     string
	ResponseCode int32
	Namespace    string
	Name         string
}

// RequestsQuery asks for the requests of one caller (Caller.ID) behind one blocker, newest
// first.
type RequestsQuery struct {
	Cluster string
	Key     BlockerKey
	Caller  uint64
	Window  Window
	Page    Page
}

// Requests lists one page of the requests of q; more reports whether rows follow it.
func (r Reader) Requests(ctx context.Context, q RequestsQuery) (rows []Request, more bool, err error) {
	t, p, err := r.check(q.Cluster, q.Window, q.Page)
	if err != nil {
		return nil, false, err
	}
	if err := q.Key.check(); err != nil {
		return nil, false, err
	}
	// The page's audit ids from finding_requests, ordered by blocker, caller and time (store
	// migration 6); a finding stored twice (before the table merges) is one request.
	ids := `SELECT toUInt32(event_time), audit_id
FROM ` + rollup.TablesFor(t).Requests + `
WHERE cluster = ? AND rule_id = ? AND api_group = ? AND api_version = ? AND resource = ?
  AND caller = ?
  AND event_time >= toDateTime(?) AND event_time < toDateTime(?)
GROUP BY event_time, audit_id
ORDER BY event_time DESC, audit_id DESC
LIMIT ?, ?`
	// A request is its audit id and time: a client may send its own Audit-ID, so two
	// requests may share one.
	type request struct {
		id string
		at uint32
	}
	var page []request
	var pageIDs []string
	err = each(ctx, r.DB, "requests", ids, []any{q.Cluster, q.Key.Rule, q.Key.Group, q.Key.Version, q.Key.Resource,
		q.Caller, q.Window.From.Unix(), q.Window.To.Unix(), p.Offset, p.Limit + 1}, func(res rollup.Row) error {
		var rq request
		if err := res.Scan(&rq.at, &rq.id); err != nil {
			return err
		}
		page = append(page, rq)
		pageIDs = append(pageIDs, rq.id)
		return nil
	})
	if err != nil || len(page) == 0 {
		return nil, false, err
	}
	// Then those findings by their key (cluster, rule, audit id, time): the ids are the
	// literals of one array parameter.
	details := `SELECT audit_id, toUInt32(event_time), any(verb), any(request_uri), any(source_ip), any(response_code),
  any(namespace), any(name), any(username), any(user_agent), toString(cityHash64(audit_id))
FROM ` + t + `
WHERE cluster = ? AND rule_id = ? AND audit_id IN (SELECT arrayJoin(?))
  AND api_group = ? AND api_version = ? AND resource = ?
GROUP BY audit_id, event_time`
	found := make(map[request]Request, len(page))
	err = each(ctx, r.DB, "requests", details, []any{q.Cluster, q.Key.Rule, pageIDs, q.Key.Group, q.Key.Version, q.Key.Resource},
		func(res rollup.Row) error {
			var rq Request
			var at uint32
			if err := res.Scan(&rq.AuditID, &at, &rq.Verb, &rq.RequestURI, &rq.SourceIP, &rq.ResponseCode, &rq.Namespace, &rq.Name,
				&rq.Username, &rq.UserAgent, &rq.AuditHash); err != nil {
				return err
			}
			rq.Time = unix(at)
			found[request{rq.AuditID, at}] = rq
			return nil
		})
	if err != nil {
		return nil, false, err
	}
	for _, k := range page {
		// A finding the retention dropped between the two reads is left out.
		if rq, ok := found[k]; ok {
			rows = append(rows, rq)
		}
	}
	rows, more = trim(rows, p.Limit)
	return rows, more, nil
}

// Finding is one rule's finding on a request, with everything stored about the request.
type Finding struct {
	Request
	Key          BlockerKey
	Username     string
	UserAgent    string
	Subresource  string
	RemovedIn    string
	DeprecatedIn string
	Replacement  string
	Message      string
	Evidence     []Evidence
	// CallerID is Caller.ID of the request's caller.
	CallerID string
}

// Evidence is one path the rule matched and the value found there.
type Evidence struct{ Path, Value string }

// maxRequestFindings caps the findings of one request (one per rule).
const maxRequestFindings = 100

// Request reads the findings of the request auditID of cluster, one per rule and request
// time (a client may send the same Audit-ID with several requests), newest first; none when
// the request is unknown.
func (r Reader) Request(ctx context.Context, cluster, auditID string) ([]Finding, error) {
	if auditID == "" {
		return nil, invalid("cluster and audit id are required")
	}
	return r.request(ctx, cluster, "audit_id = ?", auditID)
}

// RequestByHash reads the findings of the request of cluster at time at whose audit id
// hashes to hash (Request.AuditHash: an audit id may be longer than a URL carries).
func (r Reader) RequestByHash(ctx context.Context, cluster string, hash uint64, at time.Time) ([]Finding, error) {
	if at.Unix() <= 0 {
		return nil, invalid("the request's time is required")
	}
	return r.request(ctx, cluster, "event_time = toDateTime(?) AND toString(cityHash64(audit_id)) = ?", at.Unix(), strconv.FormatUint(hash, 10))
}

func (r Reader) request(ctx context.Context, cluster, where string, args ...any) ([]Finding, error) {
	t, err := r.table()
	if err != nil {
		return nil, err
	}
	if cluster == "" {
		return nil, invalid("cluster and audit id are required")
	}
	stmt := `SELECT rule_id, toUInt32(event_time), any(verb), any(request_uri), any(source_ip), any(response_code),
  any(namespace), any(name), any(api_group), any(api_version), any(resource), any(subresource),
  any(username), any(user_agent), any(removed_in), any(deprecated_in), any(replacement), any(message),
  any(evidence_path), any(evidence_value), any(` + callerID + `), any(audit_id)
FROM ` + t + `
WHERE cluster = ? AND ` + where + `
GROUP BY rule_id, event_time
ORDER BY event_time DESC, rule_id
LIMIT ?`
	var out []Finding
	err = each(ctx, r.DB, "request", stmt, append(append([]any{cluster}, args...), maxRequestFindings), func(res rollup.Row) error {
		var f Finding
		var at uint32
		var paths, values []string
		if err := res.Scan(&f.Key.Rule, &at, &f.Verb, &f.RequestURI, &f.SourceIP, &f.ResponseCode, &f.Namespace, &f.Name,
			&f.Key.Group, &f.Key.Version, &f.Key.Resource, &f.Subresource, &f.Username, &f.UserAgent,
			&f.RemovedIn, &f.DeprecatedIn, &f.Replacement, &f.Message, &paths, &values, &f.CallerID, &f.AuditID); err != nil {
			return err
		}
		f.Time = unix(at)
		for i, p := range paths {
			e := Evidence{Path: p}
			if i < len(values) {
				e.Value = values[i]
			}
			f.Evidence = append(f.Evidence, e)
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// check validates what every list query needs and returns the table and the page with its
// defaults.
func (r Reader) check(cluster string, w Window, p Page) (string, Page, error) {
	t, err := r.table()
	if err != nil {
		return "", p, err
	}
	if cluster == "" {
		return "", p, invalid("cluster is empty")
	}
	if err := w.check(); err != nil {
		return "", p, err
	}
	p, err = p.check()
	return t, p, err
}

func unix(s uint32) time.Time { return time.Unix(int64(s), 0).UTC() }

// trim cuts the one row read beyond the page, which says that more follow.
func trim[T any](rows []T, limit int) ([]T, bool) {
	if len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}

// SearchBy names the column a search matches.
type SearchBy string

// The columns a search can match.
const (
	ByUser      SearchBy = "user"
	ByAgent     SearchBy = "agent"
	ByNamespace SearchBy = "namespace"
)

// searchColumns maps each SearchBy to its column: the only column names a search puts in
// its SQL.
var searchColumns = map[SearchBy]string{ByUser: "username", ByAgent: "user_agent", ByNamespace: "namespace"}

// MaxSearchText caps the text searched for.
const MaxSearchText = 256

// SearchQuery asks for the findings of Cluster in a window whose user, user agent or
// namespace (By) contains Text, ignoring case.
type SearchQuery struct {
	Cluster string
	By      SearchBy
	Text    string
	Window  Window
	Page    Page
}

// Match is one caller of one rule and API found by a search.
type Match struct {
	Key       BlockerKey
	RemovedIn string
	Caller
	// Namespaces are the first three (by name) of the namespaces of its findings.
	Namespaces []string
}

// Search lists one page of what q finds, busiest first (ties by rule, API, user, agent and
// IP); more reports whether rows follow it. A match is a (blocker, caller) pair of the day
// rows' hashes: the query groups by two numbers and reads, besides them, only the column
// matched and the namespaces, then orders the pairs by the names the compaction kept for
// their hashes (package rollup's WithNames). Grouping a month of day rows by their strings
// instead, eight string columns read, measured about twice as slow. A page listing a pair
// without a name yet (its caller first seen since the last compaction) is read again over the
// strings (searchByName); such a pair elsewhere may be ordered as if its names were empty,
// among the rows as busy as it, until the compaction names it (about a minute).
func (r Reader) Search(ctx context.Context, q SearchQuery) (rows []Match, more bool, err error) {
	t, p, err := r.check(q.Cluster, q.Window, q.Page)
	if err != nil {
		return nil, false, err
	}
	col, ok := searchColumns[q.By]
	if !ok {
		return nil, false, invalid("search by %q: want user, agent or namespace", q.By)
	}
	if q.Text == "" || len(q.Text) > MaxSearchText {
		return nil, false, invalid("search text of %d bytes: want 1 to %d", len(q.Text), MaxSearchText)
	}
	// position() over lowerUTF8 on both sides: a plain substring, where LIKE would read % and
	// _ in the text as wildcards.
	where := `position(lowerUTF8(` + col + `), lowerUTF8(?)) > 0`
	src, args, err := r.days(ctx, t, q.Cluster, q.Window, []string{"blocker", "caller", "namespace", "first_seen", "last_seen"}, where, q.Text)
	if err != nil {
		return nil, false, err
	}
	pairs := `SELECT blocker, caller, toUInt64(sum(findings)) AS n, toUInt32(min(first_seen)) AS f, toUInt32(max(last_seen)) AS l,
  arraySlice(arraySort(groupUniqArray(toString(namespace))), 1, 3) AS ns
FROM (` + src + `)
GROUP BY blocker, caller`
	stmt := `SELECT b_rule, b_group, b_version, b_resource, b_removed, c_user, c_agent, c_ip, n, f, l, ns, toString(caller),
  toUInt8(c_named AND b_named)
FROM (` + rollup.WithNames(rollup.TablesFor(t), pairs) + `)
ORDER BY n DESC, b_rule, b_group, b_version, b_resource, c_user, c_agent, c_ip
LIMIT ?, ?`
	from, _ := rollup.Span(q.Window.From, q.Window.To)
	named := true
	rows, err = searchRows(ctx, r.DB, "search", stmt, append(args, rollup.Day(from), p.Offset, p.Limit+1), &named)
	if err != nil {
		return nil, false, err
	}
	if named {
		rows, more = trim(rows, p.Limit)
		return rows, more, nil
	}
	return r.searchByName(ctx, t, q, where, p)
}

// searchesOverStrings counts the searches read over the strings (tests see which way a page
// took).
var searchesOverStrings atomic.Int64

// searchRows reads the matches stmt selects; when named is given, the query's last column
// says whether the row is named, and *named becomes false at the first that is not.
func searchRows(ctx context.Context, db *sql.DB, what, stmt string, args []any, named *bool) ([]Match, error) {
	var rows []Match
	err := each(ctx, db, what, stmt, args, func(res rollup.Row) error {
		var m Match
		var first, last uint32
		var ok uint8
		dest := []any{&m.Key.Rule, &m.Key.Group, &m.Key.Version, &m.Key.Resource, &m.RemovedIn,
			&m.Username, &m.UserAgent, &m.SourceIP, &m.Findings, &first, &last, &m.Namespaces, &m.ID}
		if named != nil {
			dest = append(dest, &ok)
		}
		if err := res.Scan(dest...); err != nil {
			return err
		}
		if named != nil && ok == 0 {
			*named = false
		}
		m.FirstSeen, m.LastSeen = unix(first), unix(last)
		rows = append(rows, m)
		return nil
	})
	return rows, err
}

// searchByName is Search's page ordered over the strings of the day rows found (where),
// grouped by the same pairs, for a page that lists a pair without a name kept.
func (r Reader) searchByName(ctx context.Context, t string, q SearchQuery, where string, p Page) (rows []Match, more bool, err error) {
	searchesOverStrings.Add(1)
	src, args, err := r.days(ctx, t, q.Cluster, q.Window, []string{"api_group", "api_version", "resource", "removed_in",
		"blocker", "caller", "username", "user_agent", "source_ip", "namespace", "first_seen", "last_seen"}, where, q.Text)
	if err != nil {
		return nil, false, err
	}
	stmt := `SELECT m_rule, m_group, m_version, m_resource, m_removed, m_user, m_agent, m_ip, n, m_first, m_last, m_ns, m_id FROM (
  SELECT any(rule_id) AS m_rule, any(api_group) AS m_group, any(api_version) AS m_version, any(resource) AS m_resource,
    argMax(removed_in, last_seen) AS m_removed, any(username) AS m_user, any(user_agent) AS m_agent, any(source_ip) AS m_ip,
    toUInt64(sum(findings)) AS n, toUInt32(min(first_seen)) AS m_first, toUInt32(max(last_seen)) AS m_last,
    arraySlice(arraySort(groupUniqArray(toString(namespace))), 1, 3) AS m_ns, toString(caller) AS m_id
  FROM (` + src + `)
  GROUP BY blocker, caller
)
ORDER BY n DESC, m_rule, m_group, m_version, m_resource, m_user, m_agent, m_ip
LIMIT ?, ?`
	rows, err = searchRows(ctx, r.DB, "search by name", stmt, append(args, p.Offset, p.Limit+1), nil)
	if err != nil {
		return nil, false, err
	}
	rows, more = trim(rows, p.Limit)
	return rows, more, nil
}
