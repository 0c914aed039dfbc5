package v1beta1

const GroupName = "widgets.example.com"

// +genclient
// +resourceName=gadgetries

// Gadget has an irregular resource name.
type Gadget struct {
}

// +genclient
// +genclient:noVerbs

// Eviction is the body of a subresource.
type Eviction struct {
}

// +genclient
type Policy struct {
}
