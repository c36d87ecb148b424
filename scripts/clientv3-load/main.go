// Command clientv3-load is a neutral load generator for etcd-compatible
// servers, built on etcd's own Go client (clientv3, from Debian's
// golang-etcd-server-dev). The same code drives Debian's etcd and oxetcd, so
// what it measures is the server, seen as Go clients (Kubernetes among them)
// see it.
//
//	clientv3-load -endpoints 127.0.0.1:2379 -mode put -clients 256 -conns 16 -total 20000
//	clientv3-load -mode get -consistency s ...   (serializable gets of one key)
//	clientv3-load -mode watch -watchers 256 -total 2000 ...
//
// Modes:
//   - put: -total puts of -val-size bytes over -clients goroutines sharing
//     -conns connections; keys drawn from -key-space (or 0..total-1 in order
//     with -sequential).
//   - get: -total gets of keys drawn from -key-space, linearizable (l) or
//     serializable (s); key 0 is put first. A serializable get of one key
//     (-key-space 1) from one client is the loopback RPC floor under a put.
//   - watch: -watchers watches on one prefix over -conns connections, then
//     -total puts under that prefix from -clients writers in a child
//     process (so the CPU reported is the watchers' alone); ends when every
//     watcher has seen every event. Events/s counts deliveries (watchers x
//     puts) from the first put to the last delivery; put_secs is the
//     writer's own time, so a run whose secs are close to it was bound by
//     the puts (slowed by the deliveries sharing the machine), not by the
//     deliveries' own pace; put_p50_ms and put_p99_ms are the writer's
//     latencies, which then set the pace.
//
// Prints one line of key=value pairs: the mode, the counts, seconds,
// requests (or events) per second, latency percentiles in ms (put and get),
// errors, and this process's CPU time (user+system) per request or event in
// microseconds: the client's cost of the server's way of answering.
// -cpuprofile writes this process's Go CPU profile, for `go tool pprof`.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/clientv3"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated client endpoints")
	mode := flag.String("mode", "put", "put, get or watch")
	clients := flag.Int("clients", 1, "concurrent requests (writers in watch mode)")
	conns := flag.Int("conns", 1, "gRPC connections")
	total := flag.Int("total", 10000, "requests (puts in watch mode)")
	keySize := flag.Int("key-size", 8, "key size in bytes")
	valSize := flag.Int("val-size", 256, "value size in bytes")
	keySpace := flag.Int("key-space", 100000, "distinct keys drawn from")
	sequential := flag.Bool("sequential", false, "put keys 0..total-1 in order, each once")
	consistency := flag.String("consistency", "l", "get consistency: l or s")
	watchers := flag.Int("watchers", 256, "watchers (watch mode)")
	prefix := flag.String("prefix", "", "put keys under this prefix")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile here")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fail("cpu profile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail("cpu profile: %v", err)
		}
		defer pprof.StopCPUProfile()
	}

	eps := strings.Split(*endpoints, ",")
	cs := make([]*clientv3.Client, *conns)
	for i := range cs {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
		if err != nil {
			fail("connect: %v", err)
		}
		defer c.Close()
		cs[i] = c
	}
	value := strings.Repeat("v", *valSize)
	key := func(n int) string {
		k := fmt.Sprintf("%0*d", *keySize, n)
		if len(k) > *keySize && *keySize > 0 {
			k = k[len(k)-*keySize:]
		}
		return *prefix + k
	}

	switch *mode {
	case "put":
		var next int64 = -1
		run("put", *total, *clients, func(worker int, rng *rand.Rand) error {
			c := cs[worker%len(cs)]
			n := rng.Intn(*keySpace)
			if *sequential {
				n = int(atomic.AddInt64(&next, 1))
			}
			_, err := c.Put(context.Background(), key(n), value)
			return err
		})
	case "get":
		if _, err := cs[0].Put(context.Background(), key(0), value); err != nil {
			fail("put the key to get: %v", err)
		}
		var opts []clientv3.OpOption
		if *consistency == "s" {
			opts = append(opts, clientv3.WithSerializable())
		}
		run("get", *total, *clients, func(worker int, rng *rand.Rand) error {
			_, err := cs[worker%len(cs)].Get(context.Background(), key(rng.Intn(*keySpace)), opts...)
			return err
		})
	case "watch":
		writer := []string{"-endpoints", *endpoints, "-mode", "put", "-sequential",
			"-clients", fmt.Sprint(*clients), "-conns", fmt.Sprint(*conns), "-total", fmt.Sprint(*total),
			"-key-size", fmt.Sprint(*keySize), "-val-size", fmt.Sprint(*valSize)}
		watch(cs, *watchers, *total, writer)
	default:
		fail("unknown mode %q", *mode)
	}
}

// run sends total requests from clients goroutines, timing each, and
// prints the summary line.
func run(mode string, total, clients int, op func(worker int, rng *rand.Rand) error) {
	var issued, errors int64
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w) + 1))
			for atomic.AddInt64(&issued, 1) <= int64(total) {
				t := time.Now()
				if err := op(w, rng); err != nil {
					atomic.AddInt64(&errors, 1)
					continue
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		}(w)
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu := cpuTime() - cpu0
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	fmt.Printf("mode=%s clients=%d total=%d secs=%.3f per_s=%.0f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f errors=%d client_cpu_us=%.2f\n",
		mode, clients, total, secs, float64(len(all))/secs, pct(all, 50), pct(all, 90), pct(all, 99), pct(all, 100),
		errors, cpu.Seconds()*1e6/float64(total))
}

// watch opens the watchers, waits until each is registered, then has a
// child process put total keys under the prefix (so this process's CPU is
// the watchers' alone) and waits for every delivery.
func watch(cs []*clientv3.Client, watchers, total int, writer []string) {
	prefix := fmt.Sprintf("fanout-%d/", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The current revision, so each watch starts at the first put and a
	// watcher registered late still sees every event.
	resp, err := cs[0].Get(ctx, "fanout-probe")
	if err != nil {
		fail("get: %v", err)
	}
	from := resp.Header.Revision + 1
	var done sync.WaitGroup
	var delivered, responses int64
	var last atomic.Value
	for w := 0; w < watchers; w++ {
		ch := cs[w%len(cs)].Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
		done.Add(1)
		go func() {
			defer done.Done()
			seen := 0
			for r := range ch {
				if err := r.Err(); err != nil {
					fail("watch: %v", err)
				}
				atomic.AddInt64(&responses, 1)
				seen += len(r.Events)
				atomic.AddInt64(&delivered, int64(len(r.Events)))
				if seen >= total {
					last.Store(time.Now())
					return
				}
			}
			fail("watch ended after %d of %d events", seen, total)
		}()
	}
	cpu0 := cpuTime()
	start := time.Now()
	puts := exec.Command(os.Args[0], append(writer, "-prefix", prefix)...)
	puts.Stderr = os.Stderr
	out, err := puts.Output()
	if err != nil {
		fail("the writer: %v: %s", err, out)
	}
	// The writer's own seconds and latencies: when its seconds are near
	// secs, the puts bound the run rather than the deliveries.
	writerSays := map[string]string{"secs": "0", "p50_ms": "0", "p99_ms": "0"}
	for _, field := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(field, "="); ok {
			if _, wanted := writerSays[k]; wanted {
				writerSays[k] = v
			}
		}
	}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(120 * time.Second):
		fail("watchers saw %d of %d events in 120 s", atomic.LoadInt64(&delivered), int64(watchers*total))
	}
	end, _ := last.Load().(time.Time)
	secs := end.Sub(start).Seconds()
	cpu := cpuTime() - cpu0
	events := float64(watchers * total)
	fmt.Printf("mode=watch watchers=%d total=%d secs=%.3f per_s=%.0f responses=%d events_per_response=%.1f client_cpu_us=%.3f put_secs=%s put_p50_ms=%s put_p99_ms=%s\n",
		watchers, total, secs, events/secs, responses, events/float64(responses), cpu.Seconds()*1e6/events,
		writerSays["secs"], writerSays["p50_ms"], writerSays["p99_ms"])
}

func pct(sorted []time.Duration, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := len(sorted) * p / 100
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i].Microseconds()) / 1000
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "clientv3-load: "+format+"\n", args...)
	os.Exit(1)
}
