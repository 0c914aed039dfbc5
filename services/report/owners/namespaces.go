package owners

import (
	"context"
	"fmt"
	"maps"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Namespaces holds the labels of a cluster's namespaces, listed again by Refresh.
type Namespaces struct {
	client kubernetes.Interface

	mu     sync.RWMutex
	labels map[string]map[string]string
}

// NewNamespaces returns the namespace labels of the apiserver of rc (list on namespaces).
func NewNamespaces(rc *rest.Config) (*Namespaces, error) {
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("namespace labels: %w", err)
	}
	return &Namespaces{client: c, labels: map[string]map[string]string{}}, nil
}

// Refresh lists every namespace (in pages of 500) and replaces the labels held; on an error
// the labels held stay.
func (n *Namespaces) Refresh(ctx context.Context) error {
	next := map[string]map[string]string{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := n.client.CoreV1().Namespaces().List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list namespaces: %w", err)
		}
		for _, ns := range l.Items {
			next[ns.Name] = maps.Clone(ns.Labels)
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	n.mu.Lock()
	n.labels = next
	n.mu.Unlock()
	return nil
}

// Labels returns the labels of namespace (nil when unknown); the map must not be changed.
func (n *Namespaces) Labels(namespace string) map[string]string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.labels[namespace]
}
