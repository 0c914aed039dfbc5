package engine

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" means valid
	}{
		{Config{DataDir: ".data/chdb", RetentionDays: 400}, ""},
		{Config{DSN: "clickhouse://u:secret@h:9000/auditlens"}, ""},
		{Config{DSN: "tcp://h:9000"}, ""},
		{Config{DSN: "http://u:secret@h:8123/auditlens"}, "native protocol"},
		{Config{}, "--data-dir is empty"},
		{Config{DataDir: "d", RetentionDays: -1}, "--retention-days -1"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("error shows the password: %v", err)
		}
	}
}

func TestDescribeHidesPassword(t *testing.T) {
	c := Config{DSN: "clickhouse://report:s3cret@ch:9000/auditlens"}
	if d := c.Describe(); strings.Contains(d, "s3cret") || !strings.Contains(d, "ch:9000") {
		t.Errorf("Describe() = %q", d)
	}
	c = Config{DataDir: "/var/lib/auditlens/chdb"}
	if d := c.Describe(); !strings.Contains(d, "/var/lib/auditlens/chdb") {
		t.Errorf("Describe() = %q", d)
	}
}
