package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// ClusterDomain is the cluster's DNS domain.
const ClusterDomain = "cluster.local."

// Resolver answers the A records of the cluster's Services (<svc>.<ns>.svc.cluster.local, their
// ClusterIP) over UDP, from a watch of the Services. It is the node's cluster DNS instead of
// CoreDNS: no image to build, and nothing is forwarded (names outside the cluster get REFUSED,
// so a pod's lookups never leave the node).
type Resolver struct {
	mu    sync.RWMutex
	names map[string]netip.Addr
	log   *slog.Logger
}

// ServeDNS watches Services with kubeconfig and answers on addr until ctx ends.
func ServeDNS(ctx context.Context, addr, kubeconfig string, log *slog.Logger) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	r := &Resolver{names: map[string]netip.Addr{}, log: log}
	factory := informers.NewSharedInformerFactory(c, 10*time.Minute)
	inf := factory.Core().V1().Services().Informer()
	update := func(any) { r.rebuild(inf.GetStore().List()) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: update, UpdateFunc: func(_, o any) { update(o) }, DeleteFunc: update,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	go func() { <-ctx.Done(); conn.Close() }()
	log.Info("dns serving", "addr", addr)
	buf := make([]byte, 1500)
	for ctx.Err() == nil {
		nr, from, err := conn.ReadFrom(buf)
		switch {
		case err == nil:
			if resp, ok := r.answer(buf[:nr]); ok {
				_, _ = conn.WriteTo(resp, from)
			}
		case errors.Is(err, net.ErrClosed) && ctx.Err() == nil:
			return fmt.Errorf("dns: %w", err)
		}
	}
	return nil
}

func (r *Resolver) rebuild(objs []any) {
	names := map[string]netip.Addr{}
	for _, o := range objs {
		s, ok := o.(*corev1.Service)
		if !ok {
			continue
		}
		ip, err := netip.ParseAddr(s.Spec.ClusterIP)
		if err != nil || !ip.Is4() {
			continue
		}
		names[strings.ToLower(s.Name+"."+s.Namespace+".svc."+ClusterDomain)] = ip
	}
	r.mu.Lock()
	r.names = names
	r.mu.Unlock()
}

// answer builds the response to one query; a message that is not a query gets none.
func (r *Resolver) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	name := strings.ToLower(q.Name.String())
	r.mu.RLock()
	ip, found := r.names[name]
	r.mu.RUnlock()
	switch {
	case found:
		rh.RCode = dnsmessage.RCodeSuccess
	case strings.HasSuffix(name, "."+ClusterDomain):
		rh.RCode = dnsmessage.RCodeNameError
	default:
		rh.RCode = dnsmessage.RCodeRefused
		rh.Authoritative = false
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	if found && q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET {
		if err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5},
			dnsmessage.AResource{A: ip.As4()}); err != nil {
			return nil, false
		}
	}
	resp, err := b.Finish()
	if err != nil {
		return nil, false
	}
	return resp, true
}
