package secret

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"clickhouse://ch.example:9000/auditlens", "clickhouse://ch.example:9000/auditlens"},
		{"clickhouse://alice:hunter2@ch.example:9000/auditlens", "clickhouse://alice:xxxxx@ch.example:9000/auditlens"},
		// A password with '@' in it: masked whole, not up to its first '@'.
		{"clickhouse://alice:p@ss@word@ch.example:9000/db", "clickhouse://alice:xxxxx@ch.example:9000/db"},
		// Credentials as query parameters, as clickhouse-go accepts them.
		{"clickhouse://ch.example:9000/db?username=alice&password=hunter2&dial_timeout=5s",
			"clickhouse://ch.example:9000/db?username=alice&password=xxxxx&dial_timeout=5s"},
		{"tcp://h:9000?Password=a%40b&access_token=t0k&apiKey=k&sig=s",
			"tcp://h:9000?Password=xxxxx&access_token=xxxxx&apiKey=xxxxx&sig=xxxxx"},
		{"nats://user:pw@nats-0:4222", "nats://user:xxxxx@nats-0:4222"},
		{"nats://tok3n@nats-0:4222", "nats://xxxxx@nats-0:4222"}, // NATS takes a lone user name for a token
		// Not a URL Go can parse (an unescaped '/' and '%' in the password).
		{"clickhouse://alice:a/b%zz@ch.example:9000/db?password=p", "clickhouse://xxxxx@ch.example:9000/db?password=xxxxx"},
		{"embedded", "embedded"},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestURLsMasksEveryElement(t *testing.T) {
	got := URLs("nats://a:one@n1:4222,nats://b:two@n2:4222")
	if strings.Contains(got, "one") || strings.Contains(got, "two") || !strings.Contains(got, "n2:4222") {
		t.Errorf("URLs: %q", got)
	}
}
