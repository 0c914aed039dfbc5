package v1beta1

import schema "k8s.io/apimachinery/pkg/runtime/schema"

func (in *Gadget) APILifecycleIntroduced() (major, minor int) {
	return 1, 20
}

func (in *Gadget) APILifecycleDeprecated() (major, minor int) {
	return 1, 23
}

func (in *Gadget) APILifecycleReplacement() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "widgets.example.com", Version: "v1beta2", Kind: "Gadget"}
}

func (in *Gadget) APILifecycleRemoved() (major, minor int) {
	return 1, 27
}

func (in *Policy) APILifecycleDeprecated() (major, minor int) {
	return 1, 23
}

func (in *Policy) APILifecycleRemoved() (major, minor int) {
	return 1, 27
}
