package rules

import (
	"bytes"
	"strings"

	"github.com/valyala/fastjson"
)

// componentEvents are the Warning events a node component writes about itself when it runs
// something a coming release drops: by their reason, the rule and who may write them (an
// event anyone could write names no node).
var componentEvents = []struct {
	reason string
	rule   string
	// subject is what the finding is about, in place of the API called (the Events API):
	// the blocker's name, whose callers are the nodes that run it (as "kubelet 1.33" for skew).
	subject string
	writer  func(user, agent string) bool
}{
	// kubelet, at start on a cgroup v1 host (pkg/kubelet/kubelet_linux.go, core v1 events).
	{"CgroupV1", NodeCgroupV1, "cgroup v1 nodes", func(user, _ string) bool { return strings.HasPrefix(user, "system:node:") }},
	// kube-proxy, at start in ipvs mode (cmd/kube-proxy/app/server_linux.go, events.k8s.io/v1).
	{"IPVSDeprecation", KubeProxyIPVS, "kube-proxy in ipvs mode", func(user, agent string) bool {
		return user == "system:kube-proxy" || user == "system:serviceaccount:kube-system:kube-proxy" || strings.HasPrefix(agent, "kube-proxy/")
	}},
}

// componentEvent reads the create of an Event (core v1 or events.k8s.io/v1) written by a node
// component: deploy/audit-policy.yaml logs those at Request level. One finding per node, rule
// and day (a sighting): the component writes it again at each start.
func (m *matcher) componentEvent() {
	r := m.ev.ObjectRef
	if r == nil || r.Resource != "events" || r.Subresource != "" || m.ev.Verb != "create" || len(m.ev.RequestObjectRaw) == 0 {
		return
	}
	raw := m.ev.RequestObjectRaw
	for _, c := range componentEvents {
		if !bytes.Contains(raw, []byte(c.reason)) || m.e.rules[c.rule] == nil || !c.writer(m.ev.User.Username, m.ev.UserAgent) {
			continue
		}
		obj := m.ev.RequestObject()
		if obj == nil || obj.Type() != fastjson.TypeObject || string(obj.GetStringBytes("reason")) != c.reason {
			return
		}
		node, path := eventNode(obj)
		if node == "" {
			node, path = strings.TrimPrefix(m.ev.User.Username, "system:node:"), "user.username"
		}
		note := string(obj.GetStringBytes("message"))
		if note == "" {
			note = string(obj.GetStringBytes("note"))
		}
		m.add(c.rule, Match{ID: m.sightingID(c.rule, node), APIGroup: "", APIVersion: "", Resource: c.subject, Detail: node, Value: note,
			Evidence: []Evidence{{"requestObject.reason", c.reason}, {"requestObject." + path, node}}})
		return
	}
}

// eventNode is the Node an event is about (core v1 involvedObject, events.k8s.io/v1
// regarding) and where it was read.
func eventNode(obj *fastjson.Value) (string, string) {
	for _, ref := range [...]string{"involvedObject", "regarding"} {
		if string(obj.GetStringBytes(ref, "kind")) == "Node" {
			if n := string(obj.GetStringBytes(ref, "name")); n != "" {
				return n, ref + ".name"
			}
		}
	}
	return "", ""
}

// windowsHostNetwork flags a Windows pod (spec.os.name, or a nodeSelector on kubernetes.io/os)
// that asks for the host's network without being a HostProcess pod: that relied on the alpha
// WindowsHostNetwork feature (KEP-3503), deprecated in 1.33 and read by no code since.
func (m *matcher) windowsHostNetwork(spec *fastjson.Value, path string) {
	if !spec.GetBool("hostNetwork") {
		return
	}
	os := string(spec.GetStringBytes("os", "name"))
	where := path + ".os.name"
	if os == "" {
		os, where = string(spec.GetStringBytes("nodeSelector", "kubernetes.io/os")), path+`.nodeSelector["kubernetes.io/os"]`
	}
	if os != "windows" || spec.GetBool("securityContext", "windowsOptions", "hostProcess") {
		return
	}
	for _, list := range [...]string{"containers", "initContainers"} {
		for _, c := range spec.GetArray(list) {
			if c.GetBool("securityContext", "windowsOptions", "hostProcess") {
				return // HostProcess containers take the host's network by design (GA 1.26)
			}
		}
	}
	m.add(WindowsHostNetwork, Match{Detail: "spec.hostNetwork on a Windows pod", Value: "true",
		Evidence: []Evidence{{path + ".hostNetwork", "true"}, {where, "windows"}}})
}

// ingressNginxAnnotation starts the annotations only the ingress-nginx controller reads.
const ingressNginxAnnotation = "nginx.ingress.kubernetes.io/"

// ingress flags an Ingress written for the retired ingress-nginx: its annotations, or the
// class annotation naming nginx.
func (m *matcher) ingress(obj *fastjson.Value) {
	ann := obj.GetObject("metadata", "annotations")
	if ann == nil {
		return
	}
	var keys []string
	var ev []Evidence
	ann.Visit(func(k []byte, v *fastjson.Value) {
		key := string(k)
		if strings.HasPrefix(key, ingressNginxAnnotation) || key == "kubernetes.io/ingress.class" && string(v.GetStringBytes()) == "nginx" {
			keys = append(keys, key)
			ev = append(ev, Evidence{m.root + `.metadata.annotations["` + key + `"]`, string(v.GetStringBytes())})
		}
	})
	if len(keys) == 0 {
		return
	}
	m.add(IngressNginx, Match{Detail: "Ingress annotations", Value: strings.Join(keys, ", "), Evidence: ev})
}
