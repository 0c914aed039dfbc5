//go:build unix

package ingest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
	"github.com/auditlens/auditlens/services/ingest"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/internal/testpki"
)

// BenchmarkHTTPInputs measures the throughput of the two HTTP inputs, in process, up to
// events acknowledged by an embedded JetStream server: the audit webhook (an EventList of
// 100 events per request, 4 clients at once) and the Firehose endpoint (a request of 4
// gzipped CloudWatch Logs subscription records of 25 events each, 4 clients at once). Each
// b.N is one request; every event has its own audit id, so the bus stores each one. Besides
// events/s it reports the process's CPU time per event (clients, input and JetStream server
// together), which other work on a shared machine changes less than the wall time.
//
//	go test -run '^$' -bench HTTPInputs -benchtime 200x .
func BenchmarkHTTPInputs(b *testing.B) {
	ev := testlog.Load(b)
	const perRequest, clients = 100, 4
	dir := b.TempDir()
	pki := testpki.Write(b, dir)
	tok, key := filepath.Join(dir, "token"), filepath.Join(dir, "key")
	for _, f := range []string{tok, key} {
		if err := os.WriteFile(f, []byte("s3cret\n"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	next := 0
	events := func() [][]byte {
		out := make([][]byte, perRequest)
		for i := range out {
			out[i], _ = ev.Event(next)
			next++
		}
		return out
	}
	for _, in := range []struct {
		name  string
		set   func(*ingest.Config, string)
		url   func(addr string) string
		body  func(n int) []byte
		heads map[string]string
	}{
		{
			name: "webhook",
			set: func(c *ingest.Config, addr string) {
				c.Webhook.Addr, c.Webhook.TLSCert, c.Webhook.TLSKey, c.Webhook.TokenFile = addr, pki.ServerCert, pki.ServerKey, tok
			},
			url: func(addr string) string { return "https://" + addr + "/audit" },
			body: func(int) []byte {
				var buf bytes.Buffer
				buf.WriteString(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`)
				for i, e := range events() {
					if i > 0 {
						buf.WriteByte(',')
					}
					buf.Write(e)
				}
				buf.WriteString("]}")
				return buf.Bytes()
			},
			heads: map[string]string{"Authorization": "Bearer s3cret"},
		},
		{
			name: "firehose",
			set: func(c *ingest.Config, addr string) {
				c.Firehose.Addr, c.Firehose.AccessKeyFile = addr, key
			},
			url: func(addr string) string { return "http://" + addr + "/" },
			body: func(n int) []byte {
				all := events()
				var recs [][]byte
				for i := 0; i < len(all); i += perRequest / 4 {
					recs = append(recs, envelopetest.Gzip(envelopetest.Subscription(all[i:i+perRequest/4])))
				}
				return envelopetest.FirehoseBody(fmt.Sprintf("req-%d", n), recs...)
			},
			heads: map[string]string{"X-Amz-Firehose-Access-Key": "s3cret"},
		},
	} {
		b.Run(in.name, func(b *testing.B) {
			n := testnats.Start(b)
			bs := n.Open(b)
			addr := testnats.FreeAddr(b)
			cfg := ingest.DefaultConfig(b.TempDir())
			in.set(&cfg, addr)
			comps, err := ingest.New(cfg, daemon.Deps{Bus: bs, Cluster: "bench", Logger: testlog.Logger(b)})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- daemon.RunStages(ctx, comps, testlog.Logger(b)) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					b.Error(err)
				}
			}()
			bodies := make([][]byte, b.N)
			size := 0
			for i := range bodies {
				bodies[i] = in.body(i)
				size += len(bodies[i])
			}
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool}, MaxIdleConnsPerHost: clients}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: time.Minute}
			post := func(body []byte) (int, error) {
				req, _ := http.NewRequest(http.MethodPost, in.url(addr), bytes.NewReader(body))
				for k, v := range in.heads {
					req.Header.Set(k, v)
				}
				resp, err := client.Do(req)
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
			deadline := time.Now().Add(90 * time.Second)
			for {
				if _, err := post([]byte("{}")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("the input does not listen")
				}
				time.Sleep(50 * time.Millisecond)
			}
			b.SetBytes(int64(size / b.N))
			b.ReportAllocs()
			b.ResetTimer()
			start, startCPU := time.Now(), cpuTime()
			work := make(chan []byte)
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for body := range work {
						for {
							code, err := post(body)
							if err != nil {
								b.Error(err)
								return
							}
							if code == http.StatusOK {
								break
							}
							if code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
								b.Errorf("status %d", code)
								return
							}
							time.Sleep(10 * time.Millisecond)
						}
					}
				})
			}
			for _, body := range bodies {
				work <- body
			}
			close(work)
			wg.Wait()
			b.ReportMetric(float64(b.N*perRequest)/time.Since(start).Seconds(), "events/s")
			b.ReportMetric(float64((cpuTime()-startCPU).Nanoseconds())/float64(b.N*perRequest), "cpu-ns/event")
			b.StopTimer()
			if got, want := n.Count(b, bus.Events), uint64(b.N*perRequest); got != want {
				b.Errorf("%d events stored, want %d", got, want)
			}
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
