package v1alpha1

func (in *Gizmo) APILifecycleIntroduced() (major, minor int) {
	return 1, 28
}

func (in *Gizmo) APILifecycleRemoved() (major, minor int) {
	return 1, 34
}
