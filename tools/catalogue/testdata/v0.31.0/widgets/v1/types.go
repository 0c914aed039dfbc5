// +groupName=widgets.example.com
package v1

// +genclient
// +resourceName=gadgetries
type Gadget struct {
}

// +genclient
type Gizmo struct {
}

// +genclient
type Policy struct {
}
