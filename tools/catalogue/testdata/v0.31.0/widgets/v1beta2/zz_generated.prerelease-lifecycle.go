package v1beta2

func (in *Gadget) APILifecycleDeprecated() (major, minor int) {
	return 1, 26
}

func (in *Gadget) APILifecycleRemoved() (major, minor int) {
	return 1, 29
}
