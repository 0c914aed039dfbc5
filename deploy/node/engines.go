package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// The engines auditlens needs run on the host, reached from the pods through Services without
// selectors and EndpointSlices naming the node's address (deploy/nodetest's overlay): the shape
// of managed NATS and ClickHouse outside a cluster.
const (
	NATSPort       = 4222
	ClickHousePort = 9000
	DNSPort        = 53
)

func (n *Node) upEngines(ctx context.Context) error {
	if err := n.startDetached("nats", n.cfg.Self, "nats", "--addr", net.JoinHostPort(NodeIP, strconv.Itoa(NATSPort)),
		"--store", filepath.Join(n.cfg.Root, "nats")); err != nil {
		return err
	}
	if err := n.upClickHouse(); err != nil {
		return err
	}
	for _, port := range []int{NATSPort, ClickHousePort} {
		if err := waitTCP(ctx, net.JoinHostPort(NodeIP, strconv.Itoa(port)), 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) upClickHouse() error {
	bin, err := lookPath("clickhouse-server", "apt-get install clickhouse-server")
	if err != nil {
		return err
	}
	dir := filepath.Join(n.cfg.Root, "clickhouse")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	config := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>%[1]s/server.log</log><errorlog>%[1]s/server.err.log</errorlog></logger>
  <listen_host>%[2]s</listen_host>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>%[3]d</tcp_port>
  <path>%[1]s/data/</path>
  <tmp_path>%[1]s/tmp/</tmp_path>
  <user_files_path>%[1]s/user_files/</user_files_path>
  <format_schema_path>%[1]s/format_schemas/</format_schema_path>
  <users_config>%[1]s/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <max_concurrent_queries>64</max_concurrent_queries>
  <mlock_executable>false</mlock_executable>
</yandex>
`, dir, NodeIP, ClickHousePort)
	// The default user without a password, from loopback and the node's pods only.
	users := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage><allow_experimental_low_cardinality_type>1</allow_experimental_low_cardinality_type></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>%s</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
`, PodCIDR)
	if err := os.WriteFile(filepath.Join(dir, "config.xml"), []byte(config), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(users), 0o644); err != nil {
		return err
	}
	return n.startDetached("clickhouse", bin, "--config-file="+filepath.Join(dir, "config.xml"))
}

func lookPath(name, install string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return filepath.Join(dir, name), nil
			}
		}
		return "", fmt.Errorf("%s not found (%s)", name, install)
	}
	return p, nil
}

func waitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	return poll(ctx, timeout, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// poll calls f until it succeeds, ctx ends or timeout passes (then it returns f's last error).
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
