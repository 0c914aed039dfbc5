// +groupName=widgets.example.com
package v1alpha1

// +genclient
// +genclient:nonNamespaced

// Gizmo is an alpha resource whose types leave the module in the next version.
type Gizmo struct {
}

// GizmoList is a list, not a resource.
type GizmoList struct {
}
