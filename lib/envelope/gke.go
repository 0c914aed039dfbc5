package envelope

import (
	"strings"

	"github.com/valyala/fastjson"
)

// GKE writes no audit.k8s.io Event: a Cloud Logging LogEntry whose protoPayload is a Cloud
// Audit AuditLog stands for each completed request. logEntry rebuilds the Event fields the
// rules read:
//
//	methodName io.k8s.<group>.<version>.<resource>[.<subresource>].<verb>  -> verb
//	resourceName <group>/<version>[/namespaces/<ns>]/<resource>[/<name>[/<subresource>]]
//	                                           -> objectRef (group "core" is ""), requestURI "/"+resourceName
//	authenticationInfo.principalEmail          -> user.username
//	requestMetadata.callerIp                   -> sourceIPs[0]
//	requestMetadata.callerSuppliedUserAgent    -> userAgent
//	status.code (google.rpc)                   -> responseStatus.code (HTTP; see httpCode)
//	request / response (without "@type")       -> requestObject / responseObject
//	labels                                     -> annotations (same keys: authorization.k8s.io/decision,
//	                                              k8s.io/deprecated, k8s.io/removed-release, ...)
//	operation.id, else insertId                -> auditID
//	timestamp                                  -> requestReceivedTimestamp and stageTimestamp
//
// What cannot be mapped: user groups, uid and extra, impersonation, the query string of
// requestURI (so list options such as ?watch=true or label selectors), the exact HTTP status
// (status.code is a google.rpc code, often absent, and a 201 looks like a 200), the stage
// (entries are completed requests: stage is ResponseComplete) and the level (inferred: Request-
// Response when a response body is logged, Request with only a request body, else Metadata),
// and requestReceivedTimestamp (the entry has one time).
func (d *Decoder) logEntry(e *fastjson.Value, depth int, via string, st *Stats, fn func([]byte, Origin) error) error {
	p := e.Get("protoPayload")
	if svc := string(p.GetStringBytes("serviceName")); svc != "k8s.io" && !strings.HasPrefix(string(p.GetStringBytes("methodName")), "io.k8s.") {
		st.skip("gke log entry of service " + svc)
		return nil
	}
	o := Origin{Cloud: GKE, Envelope: join(via, "logentry"), Cluster: string(e.GetStringBytes("resource", "labels", "cluster_name"))}
	st.Events++
	a := &d.arena
	a.Reset()
	str := func(b []byte) *fastjson.Value { return a.NewStringBytes(b) }
	ev := a.NewObject()
	ev.Set("kind", a.NewString("Event"))
	ev.Set("apiVersion", a.NewString("audit.k8s.io/v1"))
	level := "Metadata"
	req, resp := p.Get("request"), p.Get("response")
	switch {
	case resp != nil && resp.Type() == fastjson.TypeObject:
		level = "RequestResponse"
	case req != nil && req.Type() == fastjson.TypeObject:
		level = "Request"
	}
	ev.Set("level", a.NewString(level))
	id := e.GetStringBytes("operation", "id")
	if len(id) == 0 {
		id = e.GetStringBytes("insertId")
	}
	ev.Set("auditID", str(id))
	ev.Set("stage", a.NewString("ResponseComplete"))
	method := string(p.GetStringBytes("methodName"))
	resName := string(p.GetStringBytes("resourceName"))
	ev.Set("requestURI", a.NewString("/"+resName))
	verb := method[strings.LastIndexByte(method, '.')+1:]
	ev.Set("verb", a.NewString(verb))
	user := a.NewObject()
	user.Set("username", str(p.GetStringBytes("authenticationInfo", "principalEmail")))
	ev.Set("user", user)
	if ip := p.GetStringBytes("requestMetadata", "callerIp"); len(ip) > 0 {
		ips := a.NewArray()
		ips.SetArrayItem(0, str(ip))
		ev.Set("sourceIPs", ips)
	}
	if ua := p.GetStringBytes("requestMetadata", "callerSuppliedUserAgent"); len(ua) > 0 {
		ev.Set("userAgent", str(ua))
	}
	if ref := objectRef(method, resName); ref != nil {
		r := a.NewObject()
		for _, kv := range [...][2]string{{"resource", ref.resource}, {"namespace", ref.namespace}, {"name", ref.name}, {"apiGroup", ref.group}, {"apiVersion", ref.version}, {"subresource", ref.subresource}} {
			if kv[1] != "" || kv[0] == "apiGroup" {
				r.Set(kv[0], a.NewString(kv[1]))
			}
		}
		ev.Set("objectRef", r)
	}
	status := a.NewObject()
	code := p.GetInt("status", "code")
	status.Set("code", a.NewNumberInt(httpCode(code)))
	if msg := p.GetStringBytes("status", "message"); len(msg) > 0 {
		status.Set("message", str(msg))
	}
	ev.Set("responseStatus", status)
	for _, b := range [...]struct {
		name string
		v    *fastjson.Value
	}{{"requestObject", req}, {"responseObject", resp}} {
		if b.v != nil && b.v.Type() == fastjson.TypeObject {
			b.v.Del("@type")
			ev.Set(b.name, b.v)
		}
	}
	if ts := e.GetStringBytes("timestamp"); len(ts) > 0 {
		ev.Set("requestReceivedTimestamp", str(ts))
		ev.Set("stageTimestamp", str(ts))
	}
	ann := a.NewObject()
	if labels := e.GetObject("labels"); labels != nil {
		labels.Visit(func(k []byte, v *fastjson.Value) {
			if v.Type() == fastjson.TypeString {
				ann.Set(string(k), v)
			}
		})
	}
	ann.Set(Annotation, a.NewString(o.Value()))
	ev.Set("annotations", ann)
	d.out = ev.MarshalTo(d.out[:0])
	return fn(d.out, o)
}

type ref struct{ group, version, resource, namespace, name, subresource string }

// objectRef reads the object of a resource request from resourceName, using methodName to
// tell a namespace's own subresources (core/v1/namespaces/x/status) from namespaced
// resources. Non-resource requests (methodName io.k8s.<verb>: readyz, api/v1, ...) have none.
func objectRef(method, resName string) *ref {
	if strings.Count(method, ".") < 5 || resName == "" {
		return nil
	}
	parts := strings.Split(resName, "/")
	if len(parts) < 3 {
		return nil
	}
	r := &ref{group: parts[0], version: parts[1]}
	if r.group == "core" {
		r.group = ""
	}
	rest := parts[2:]
	if rest[0] == "namespaces" && len(rest) >= 3 && !strings.Contains(method, "."+r.version+".namespaces.") {
		r.namespace, rest = rest[1], rest[2:]
	}
	r.resource = rest[0]
	if len(rest) > 1 {
		r.name = rest[1]
	}
	if len(rest) > 2 {
		r.subresource = strings.Join(rest[2:], "/")
	}
	return r
}

// httpCode maps a google.rpc code to the HTTP status the apiserver answered (the canonical
// mapping of google.rpc.Code; 0 and absent are 200).
func httpCode(c int) int {
	switch c {
	case 0:
		return 200
	case 1:
		return 499
	case 3, 11:
		return 400
	case 4:
		return 504
	case 5:
		return 404
	case 6, 10:
		return 409
	case 7:
		return 403
	case 8:
		return 429
	case 9:
		return 400
	case 12:
		return 501
	case 14:
		return 503
	case 16:
		return 401
	}
	return 500
}
