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
		{Config{}, "--clickhouse-data-dir is empty"},
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
	for _, dsn := range []string{
		"clickhouse://report:s3cret@ch:9000/auditlens",
		// clickhouse-go also takes the credentials as query parameters.
		"clickhouse://ch:9000/auditlens?username=report&password=s3cret",
		// A password with '@' in it.
		"clickhouse://report:s3@cret@ch:9000/auditlens",
		"clickhouse://report:s3%40cret@ch:9000/auditlens",
	} {
		c := Config{DSN: dsn}
		if d := c.Describe(); strings.Contains(d, "s3") || strings.Contains(d, "cret") || !strings.Contains(d, "ch:9000") {
			t.Errorf("Describe() of %s = %q", dsn, d)
		}
	}
	c := Config{DSN: "http://report:s3cret@ch:8123/?password=s3cret"}
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Validate: %v", err)
	}
	c = Config{DataDir: "/var/lib/auditlens/chdb"}
	if d := c.Describe(); !strings.Contains(d, "/var/lib/auditlens/chdb") {
		t.Errorf("Describe() = %q", d)
	}
}

func TestValidateCluster(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" means valid
	}{
		{Config{DSN: "clickhouse://h1:9000,h2:9000/auditlens", Cluster: "prod_ch"}, ""},
		{Config{DataDir: "d", Cluster: "prod_ch"}, "needs --clickhouse-dsn"},
		{Config{DSN: "clickhouse://h:9000/auditlens", Cluster: "prod ch; DROP"}, "--clickhouse-cluster"},
		{Config{DSN: "clickhouse://h:9000/auditlens", Cluster: "a.b"}, "letters, digits"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		}
	}
	c := Config{DSN: "clickhouse://report:s3cret@ch:9000/auditlens", Cluster: "prod_ch"}
	if d := c.Describe(); strings.Contains(d, "s3cret") || !strings.Contains(d, "cluster prod_ch") {
		t.Errorf("Describe() = %q", d)
	}
}
