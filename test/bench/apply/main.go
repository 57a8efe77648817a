// Command apply times hostctl as a compute agent against the real libvirtd
// (qemu:///system, TCG), end to end through a `hostctl serve --virt
// libvirt` built from this checkout and its admin API:
//
//	go run ./test/bench/apply [-n 10] [-instances 200] [-uri qemu:///system] [-firmware auto|on|off] [-steps] [-forks]
//
// Rows:
//   - apply, 4 disks + 2 NICs: a new instance — validate, four qemu-img
//     images, define, read the addresses back, DHCP lease, render, config
//     drive, store write; through the admin API, and through the CLI
//     (`hostctl instance apply -f`, a process per apply); and without the
//     DHCP lease (libvirt's network update is most of an apply);
//   - re-apply unchanged: the same spec again (no define: read back,
//     render, drive, store write);
//   - attach-disk / detach-disk (SCSI, shut-off domain);
//   - delete: undefine, lease, store, files;
//   - list and republish one instance (a re-apply of an unchanged spec)
//     with 1 instance present and with -instances present: the store
//     keeps one document per instance and an address index, so
//     republishing one must cost the same either way.
//
// Beside each row's times, the CPU time per run of hostctl, of the
// processes it started and of libvirtd (/proc): figures the load of a
// shared machine moves far less than wall time. With -forks (on for
// root), a pass of its own after the timed runs counts the processes
// hostctl starts per apply, re-apply and delete (strace -f attached).
//
// With -steps, hostctl logs at debug level and the run ends with the
// median time of each step of an apply and of its publish (hostctl's
// "apply instance steps", "apply steps" and "publish steps" lines: the
// whole apply, its domain part and its publish), and its libvirt calls,
// for the new 4-disk instance and for its unchanged re-apply: where an
// apply's time goes.
//
// Every domain it defines is named vmeta-bench-<run>-…, deleted at the end
// (also on error or SIGINT) through hostctl, and then, should that fail,
// through virsh. It exits non-zero only on errors, never because of the
// timings.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

func main() {
	n := flag.Int("n", 20, "timed runs per row (the apply target is a median of 20)")
	instances := flag.Int("instances", 200, "instances present for the list and republish rows")
	uri := flag.String("uri", "qemu:///system", "libvirt URI")
	firmware := flag.String("firmware", "auto", "hostctl serve --firmware-metadata (on costs a redefine of the persistent domain per publish)")
	flag.BoolVar(&showSteps, "steps", false, "log hostctl at debug level and print the median time of each step of an apply, and its libvirt calls")
	flag.BoolVar(&countForks, "forks", os.Geteuid() == 0, "count the processes hostctl starts per operation (strace -f attached to hostctl serve in a pass of its own; root, strace on PATH)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *n, *instances, *uri, *firmware); err != nil {
		fmt.Fprintln(os.Stderr, "bench/apply:", err)
		os.Exit(1)
	}
}

type row struct {
	name  string
	times []time.Duration
	// CPU time over the runs: hostctl's own, its child processes'
	// (qemu-img), libvirtd's (shared with whatever else uses it).
	cpuSelf, cpuChildren, cpuLibvirtd time.Duration
}

// cpuPerRun is the mean CPU time per run of each kind: what an operation
// costs, which a loaded machine moves far less than its wall time
// (/proc counts in 10 ms ticks: a mean over the runs, not a median).
func (r *row) cpuPerRun() (self, children, libvirtd time.Duration) {
	n := time.Duration(max(len(r.times), 1))
	return r.cpuSelf / n, r.cpuChildren / n, r.cpuLibvirtd / n
}

func (r *row) add(d time.Duration) { r.times = append(r.times, d) }

func (r *row) stats() (median, lo, hi time.Duration) {
	t := slices.Clone(r.times)
	slices.Sort(t)
	return t[len(t)/2], t[0], t[len(t)-1]
}

type bench struct {
	c        *client.Client
	uri      string
	prefix   string
	names    []string // every instance applied, for cleanup
	pid      int      // hostctl serve's
	libvirtd int      // libvirtd's pid (0: not found)
}

func run(ctx context.Context, n, instances int, uri, firmware string) (err error) {
	if n < 1 || instances < 1 {
		return errors.New("-n and -instances must be at least 1")
	}
	tmp, err := os.MkdirTemp("", "vmeta-bench-apply-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "hostctl")
	build := exec.Command("go", "build", "-o", bin, "./hostctl/cmd/hostctl")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./hostctl/cmd/hostctl (run from the module root): %w", err)
	}
	sock := filepath.Join(tmp, "hostctl.sock")
	logPath := filepath.Join(tmp, "hostctl.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	daemon := exec.Command(bin, "serve", "--virt", "libvirt", "--libvirt-uri", uri, "--data-dir", filepath.Join(tmp, "data"),
		"--socket", sock, "--metadata-listen", "127.0.0.1:0", "--reconcile-interval", "0", "--domain-memory", "128", "--log-level", logLevel(),
		"--firmware-metadata", firmware)
	daemon.Stdout, daemon.Stderr = logf, logf
	if err := daemon.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	defer func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = daemon.Process.Kill()
		}
		if err != nil {
			if b, _ := os.ReadFile(logPath); len(b) > 0 {
				fmt.Fprintf(os.Stderr, "hostctl serve logged:\n%s", b)
			}
		}
	}()
	if err := waitSocket(sock, exited); err != nil {
		return err
	}

	b := &bench{c: client.NewUnix(sock), uri: uri, prefix: "vmeta-bench-" + randHex(4), pid: daemon.Process.Pid, libvirtd: pidOf("libvirtd")}
	defer b.cleanup()
	v, _ := exec.Command("virsh", "-c", uri, "version", "--daemon").CombinedOutput()
	fmt.Printf("hostctl serve --virt libvirt (%s, TCG), %d runs per row, --firmware-metadata %s\n%s\nload average at the start: %s\n", uri, n, firmware, firstLines(string(v), 3), loadavg())

	apply, reapply := &row{name: "apply, 4 disks + 2 NICs (new domain)"}, &row{name: "re-apply unchanged (4 disks + 2 NICs)"}
	applyCLI := &row{name: "hostctl instance apply (CLI), same"}
	noLease := &row{name: "apply, 4 disks + 2 NICs, no DHCP lease"}
	attach, detach := &row{name: "attach-disk (SCSI, shut off)"}, &row{name: "detach-disk (SCSI, shut off)"}
	del := &row{name: "delete (4 disks + 2 NICs)"}
	for i := range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		name := fmt.Sprintf("%s-full-%d", b.prefix, i)
		spec := fullSpec(name, i)
		if _, err := b.timed(ctx, apply, func() error { _, err := b.apply(ctx, name, spec); return err }); err != nil {
			return err
		}
		if _, err := b.timed(ctx, reapply, func() error { _, err := b.apply(ctx, name, spec); return err }); err != nil {
			return err
		}
		if _, err := b.timed(ctx, attach, func() error {
			_, err := b.c.AttachDisk(ctx, name, types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "16M"})
			return err
		}); err != nil {
			return err
		}
		if _, err := b.timed(ctx, detach, func() error {
			_, err := b.c.DetachDisk(ctx, name, types.DetachRequest{Tag: "hot"})
			return err
		}); err != nil {
			return err
		}
		if _, err := b.timed(ctx, del, func() error { return b.c.Delete(ctx, name) }); err != nil {
			return err
		}
		specFile := filepath.Join(tmp, "spec.yaml")
		if err := os.WriteFile(specFile, []byte(fullSpec(name, i)), 0o600); err != nil {
			return err
		}
		if _, err := b.timed(ctx, applyCLI, func() error {
			out, err := exec.Command(bin, "instance", "apply", "-f", specFile, "--socket", sock).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := b.c.Delete(ctx, name); err != nil {
			return err
		}
		plain := strings.Replace(fullSpec(name, i), ", ips: [{address: ", ", ips_: [{address: ", 1)
		plain = plain[:strings.Index(plain, ", ips_")] + "}\n"
		if _, err := b.timed(ctx, noLease, func() error { _, err := b.apply(ctx, name, plain); return err }); err != nil {
			return err
		}
		if err := b.c.Delete(ctx, name); err != nil {
			return err
		}
	}

	// One instance present, then many.
	list1, list200 := &row{name: "instance list, 1 instance"}, &row{name: fmt.Sprintf("instance list, %d instances", instances)}
	repub1, repub200 := &row{name: "republish one, 1 instance present"}, &row{name: fmt.Sprintf("republish one, %d instances present", instances)}
	one := b.prefix + "-one"
	oneSpec := smallSpec(one, 0)
	if _, err := b.apply(ctx, one, oneSpec); err != nil {
		return err
	}
	// Republishes first, then lists (a list of many instances leaves
	// garbage behind that would be collected during the next request).
	measure := func(list, repub *row) error {
		for range 2 * n {
			if _, err := b.timed(ctx, repub, func() error { _, err := b.apply(ctx, one, oneSpec); return err }); err != nil {
				return err
			}
		}
		for range 2 * n {
			if _, err := b.timed(ctx, list, func() error { _, err := b.c.List(ctx); return err }); err != nil {
				return err
			}
		}
		return nil
	}
	if err := measure(list1, repub1); err != nil {
		return err
	}
	fill := &row{name: fmt.Sprintf("apply, 1 disk + 1 NIC (%d more, each timed)", instances-1)}
	start := time.Now()
	for i := 1; i < instances; i++ {
		name := fmt.Sprintf("%s-many-%03d", b.prefix, i)
		if _, err := b.timed(ctx, fill, func() error { _, err := b.apply(ctx, name, smallSpec(name, i)); return err }); err != nil {
			return err
		}
	}
	fillTotal := time.Since(start)
	// Let the daemon's reconciler work through the events of those
	// defines before measuring.
	time.Sleep(3 * time.Second)
	if err := measure(list200, repub200); err != nil {
		return err
	}

	var forks map[string][]string
	if _, lerr := exec.LookPath("strace"); countForks && lerr != nil {
		fmt.Println("(-forks: no strace on PATH; the processes hostctl starts are not counted)")
	} else if countForks {
		if forks, err = b.forks(ctx, tmp); err != nil {
			return err
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\truns\tmedian\tmin\tmax\thostctl CPU/run\tits processes' CPU/run\tlibvirtd CPU/run\t")
	for _, r := range []*row{apply, applyCLI, noLease, reapply, attach, detach, del, fill, list1, list200, repub1, repub200} {
		med, lo, hi := r.stats()
		self, children, lv := r.cpuPerRun()
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, len(r.times), ms(med), ms(lo), ms(hi), ms(self), ms(children), ms(lv))
	}
	tw.Flush()
	fmt.Println("(CPU per run: means of /proc's 10 ms ticks; libvirtd serves every other client on the machine too)")
	if forks != nil {
		fmt.Println("processes hostctl started (strace -f on hostctl serve, a pass of its own after the timed runs):")
		for _, op := range forkOps {
			runs := forks[op]
			fmt.Printf("  %s: %s\n", op, strings.Join(runs, "; "))
		}
	}
	fmt.Printf("load average at the end: %s\n", loadavg())
	ma, _, _ := apply.stats()
	mr, _, _ := reapply.stats()
	m1, _, _ := repub1.stats()
	fmt.Printf("targets (issue 23): apply %s (<= 150 ms: %s), unchanged re-apply %s (<= 30 ms: %s), republish %s (<= 30 ms: %s)\n",
		ms(ma), met(ma <= 150*time.Millisecond), ms(mr), met(mr <= 30*time.Millisecond), ms(m1), met(m1 <= 30*time.Millisecond))
	m200, _, _ := repub200.stats()
	fmt.Printf("\npublishing %d instances took %s in all; republishing one costs %.2fx with %d instances present as with 1\n",
		instances-1, fillTotal.Round(time.Millisecond), float64(m200)/float64(m1), instances)
	if showSteps {
		return printSteps(logPath, b.prefix+"-full-")
	}
	return nil
}

// showSteps is -steps, countForks -forks.
var showSteps, countForks bool

func logLevel() string {
	if showSteps {
		return "debug"
	}
	return "warn"
}

// stepAttr is one key=value of a log line (slog's text format).
var stepAttr = regexp.MustCompile(`(\w+)=(\S+)`)

// printSteps prints, from hostctl's log, the median of each step of the
// "apply steps" and "publish steps" lines of the instances whose names
// begin with prefix: their first apply (new) and their second (the
// unchanged re-apply).
func printSteps(logPath, prefix string) error {
	raw, err := os.ReadFile(logPath)
	if err != nil {
		return err
	}
	type key struct{ msg, kind string }
	times := map[key]map[string][]time.Duration{}
	var order []key
	seen := map[string]int{} // "apply steps"/"publish steps" lines per name
	for _, line := range strings.Split(string(raw), "\n") {
		var msg string
		switch {
		case strings.Contains(line, `msg="apply steps"`):
			msg = "apply"
		case strings.Contains(line, `msg="publish steps"`):
			msg = "publish"
		case strings.Contains(line, `msg="apply instance steps"`):
			msg = "instance"
		default:
			continue
		}
		var name string
		var attrs [][]string
		for _, m := range stepAttr.FindAllStringSubmatch(line, -1) {
			switch m[1] {
			case "time", "level", "msg":
			case "name":
				name = m[2]
			default:
				attrs = append(attrs, m[1:])
			}
		}
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		seen[msg+name]++
		kind := map[int]string{1: "new instance", 2: "unchanged re-apply"}[seen[msg+name]]
		if kind == "" {
			continue
		}
		k := key{msg, kind}
		if times[k] == nil {
			times[k] = map[string][]time.Duration{}
			order = append(order, k)
		}
		for _, a := range attrs {
			d, err := time.ParseDuration(a[1])
			if a[0] == "libvirt_calls" { // a count, kept as a Duration
				var n int64
				n, err = strconv.ParseInt(a[1], 10, 64)
				d = time.Duration(n)
			}
			if err != nil {
				continue
			}
			times[k][a[0]] = append(times[k][a[0]], d)
		}
	}
	fmt.Println("\nsteps (hostctl's debug log; median of each step):")
	for _, k := range order {
		var parts []string
		for _, step := range stepOrder(k.msg) {
			t := times[k][step]
			if len(t) == 0 {
				continue
			}
			slices.Sort(t)
			if step == "libvirt_calls" {
				parts = append(parts, fmt.Sprintf("libvirt calls %d", int64(t[len(t)/2])))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %s", step, ms(t[len(t)/2])))
		}
		fmt.Printf("  %s, %s (%d): %s\n", k.msg, k.kind, len(times[k][stepOrder(k.msg)[0]]), strings.Join(parts, ", "))
	}
	return nil
}

// stepOrder is the order in which hostctl logs the steps.
func stepOrder(msg string) []string {
	switch msg {
	case "apply":
		return []string{"check", "disks", "define", "disks_wait", "read_back", "parts", "publish", "state", "libvirt_calls"}
	case "instance":
		return []string{"lock", "existing", "layout", "parts", "domain", "libvirt_calls"}
	}
	return []string{"render", "drive", "firmware", "store", "libvirt_calls"}
}

// apply sends a spec and remembers the name for cleanup.
func (b *bench) apply(ctx context.Context, name, spec string) (*types.Instance, error) {
	if !slices.Contains(b.names, name) {
		b.names = append(b.names, name)
	}
	inst, err := b.c.Apply(ctx, []byte(spec))
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	return inst, nil
}

func (b *bench) timed(ctx context.Context, r *row, f func() error) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	self0, children0 := cpuOf(b.pid)
	lv0, _ := cpuOf(b.libvirtd)
	start := time.Now()
	err := f()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s: %w", r.name, err)
	}
	self1, children1 := cpuOf(b.pid)
	lv1, _ := cpuOf(b.libvirtd)
	r.add(d)
	r.cpuSelf += self1 - self0
	r.cpuChildren += children1 - children0
	r.cpuLibvirtd += lv1 - lv0
	return d, nil
}

// cpuOf is the CPU time (user and system) process pid has used, and that
// of its children it has waited for; zero when it cannot be read.
func cpuOf(pid int) (self, children time.Duration) {
	if pid == 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The fields after the command's name, which ends with the last ')':
	// state is field 3, utime 14, stime 15, cutime 16, cstime 17.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if len(f) < 15 {
		return 0, 0
	}
	tick := func(s string) time.Duration {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Duration(n) * (time.Second / clockTicks)
	}
	return tick(f[11]) + tick(f[12]), tick(f[13]) + tick(f[14])
}

// clockTicks is USER_HZ, the unit of /proc's times (100 on Linux).
const clockTicks = 100

// pidOf is the pid of the process whose command is name (0: none).
func pidOf(name string) int {
	out, err := exec.Command("pgrep", "-x", "-o", name).Output()
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// forkOps are the operations of the strace pass, in order.
var forkOps = []string{"apply (new, 4 disks + 2 NICs)", "re-apply unchanged", "delete"}

// forks applies, re-applies and deletes three 4-disk instances with
// strace -f attached to hostctl serve and returns, per operation, the
// programs hostctl ran in each run ("none" for a run that ran none).
func (b *bench) forks(ctx context.Context, tmp string) (map[string][]string, error) {
	out := filepath.Join(tmp, "strace.out")
	cmd := exec.Command("strace", "-f", "-qq", "-ttt", "-e", "trace=execve", "-e", "signal=none", "-o", out, "-p", strconv.Itoa(b.pid))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("strace (-forks=false goes without): %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := waitTraced(b.pid, done); err != nil {
		return nil, err
	}
	type span struct {
		op         string
		start, end time.Time
	}
	var spans []span
	run := func(op string, f func() error) error {
		s := span{op: op, start: time.Now()}
		err := f()
		s.end = time.Now()
		spans = append(spans, s)
		return err
	}
	var err error
	for i := range 3 {
		name := fmt.Sprintf("%s-forks-%d", b.prefix, i)
		spec := fullSpec(name, 100+i)
		if err = run(forkOps[0], func() error { _, err := b.apply(ctx, name, spec); return err }); err != nil {
			break
		}
		if err = run(forkOps[1], func() error { _, err := b.apply(ctx, name, spec); return err }); err != nil {
			break
		}
		if err = run(forkOps[2], func() error { return b.c.Delete(ctx, name) }); err != nil {
			break
		}
	}
	_ = cmd.Process.Signal(os.Interrupt) // strace detaches
	<-done
	if err != nil {
		return nil, err
	}
	raw, rerr := os.ReadFile(out)
	if rerr != nil {
		return nil, rerr
	}
	// Lines: PID SECONDS.MICROS execve("/usr/bin/qemu-img", [...], ...) = 0,
	// or, when several run at once, "... <unfinished ...>" and a resumed
	// line later: each execve( counts, but for a failed one (= -1).
	progs := make([][]string, len(spans))
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[2], "execve(") || strings.Contains(line, "= -1 ") {
			continue
		}
		sec, perr := strconv.ParseFloat(f[1], 64)
		if perr != nil {
			continue
		}
		at := time.Unix(0, int64(sec*1e9))
		prog := filepath.Base(strings.Trim(strings.TrimSuffix(strings.TrimPrefix(f[2], "execve("), ","), `"`))
		for i, s := range spans {
			if !at.Before(s.start) && !at.After(s.end) {
				progs[i] = append(progs[i], prog)
			}
		}
	}
	res := map[string][]string{}
	for i, s := range spans {
		desc := "none"
		if len(progs[i]) > 0 {
			desc = fmt.Sprintf("%d (%s)", len(progs[i]), strings.Join(progs[i], " "))
		}
		res[s.op] = append(res[s.op], desc)
	}
	return res, nil
}

// waitTraced waits until every thread of process pid is traced.
func waitTraced(pid int, exited <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("strace ended before attaching: %w", err)
		default:
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		traced := len(tasks) > 0
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil || strings.Contains(string(b), "TracerPid:\t0\n") {
				traced = false
			}
		}
		if traced {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("strace did not attach to every thread of hostctl serve within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanup deletes every instance the run applied, through hostctl, and
// then removes any domain of the run's prefix libvirt still has.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, name := range b.names {
		// libvirtd may be restarting (another test's doing): retry a while.
		for attempt := 0; ; attempt++ {
			err := b.c.Delete(ctx, name)
			if err == nil || strings.Contains(err.Error(), "not found") {
				break
			}
			if !strings.Contains(err.Error(), "unreachable") || attempt == 60 {
				fmt.Fprintf(os.Stderr, "bench/apply: cleanup: delete %s: %v\n", name, err)
				break
			}
			time.Sleep(time.Second)
		}
	}
	out, err := exec.Command("virsh", "-q", "-c", b.uri, "list", "--all", "--name").Output()
	if err != nil {
		return
	}
	for _, name := range strings.Fields(string(out)) {
		if strings.HasPrefix(name, b.prefix) {
			_ = exec.Command("virsh", "-q", "-c", b.uri, "destroy", name).Run()
			if out, err := exec.Command("virsh", "-q", "-c", b.uri, "undefine", name).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "bench/apply: cleanup: virsh undefine %s: %v: %s\n", name, err, out)
			}
		}
	}
}

// fullSpec is the measured instance: two virtio and two SCSI disks, all
// tagged, and two tagged NICs, one with a fixed lease.
func fullSpec(name string, i int) string {
	return fmt.Sprintf(`name: %s
addresses: [127.88.%d.%d]
disks:
  - {name: vda, size: 64M, tag: root, serial: root-%d}
  - {name: vdb, size: 16M, tag: cache, serial: cache-%d}
  - {name: sda, bus: scsi, size: 16M, tag: oracledb, serial: ora-%d}
  - {name: sdb, bus: scsi, size: 16M, tag: archive, serial: arch-%d}
nics:
  - {mac: "%s", tag: front}
  - {mac: "%s", tag: back, ips: [{address: 192.168.122.%d/24}]}
`, name, i/250, 1+i%250, i, i, i, i, mac(), mac(), 250+i%5)
}

// smallSpec is one of the many: one tagged disk and a NIC, identified by a
// loopback address (no lease).
func smallSpec(name string, i int) string {
	return fmt.Sprintf("name: %s\naddresses: [127.89.%d.%d]\ndisks: [{name: vda, size: 1M, tag: root}]\nnics: [{mac: \"%s\", tag: front}]\n",
		name, i/250, 1+i%250, mac())
}

func mac() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[0], b[1], b[2])
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// loadavg is /proc/loadavg's three averages ("?" where there is none):
// the timings of a loaded machine are not those of a quiet one.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func waitSocket(sock string, exited <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("hostctl serve exited: %w", err)
		default:
		}
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("hostctl serve did not open its admin socket within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
