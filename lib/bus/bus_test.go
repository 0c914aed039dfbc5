package bus

import "testing"

func TestValidateCluster(t *testing.T) {
	for name, ok := range map[string]bool{
		"default": true, "prod-eu_1": true, "A9": true, "": false, "a.b": false, "a b": false,
		"a>": false, "é": false, string(make([]byte, 65)): false,
	} {
		if err := ValidateCluster(name); (err == nil) != ok {
			t.Errorf("%q: %v", name, err)
		}
	}
	long := ""
	for range 64 {
		long += "x"
	}
	if ValidateCluster(long) != nil || ValidateCluster(long+"x") == nil {
		t.Error("64 is the limit")
	}
}
