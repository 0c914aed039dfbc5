// +groupName=widgets.example.com
package v1beta2

// +genclient
// +resourceName=gadgetries
type Gadget struct {
}
