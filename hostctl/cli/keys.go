package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
)

const keysHelp = `Classes (short names in brackets):
  key-encryption-key (kek)   wraps every secret at rest; in place: a new generation, every secret rewrapped
  token-signing-key (token)  signs metadata session tokens; in place, the old key kept for the token lifetime
  proxy-secret (proxy)       signs X-Instance-ID for metadata proxies; overlapping: --keep-prior prior secrets stay valid
  disk-passphrases (disk)    each LUKS disk's passphrase, per instance; in place through LUKS key slots
  cephx                      this host's CephX client for CephFS shares; overlapping: each rotation is a new
                             client.vmeta-<host>.<generation>, mounts keep theirs until their instances stop
Policies: Disabled (default), WithVersionUpgrade (rotate when hostctl runs a newer version than the one that
minted the keys; not for the proxy secret nor cephx), KeyGeneration (rotate when --generation is above the status
generation; the other policies ignore --generation). A rotation is complete when the status generation is at
least the wanted generation.`

// keyCommands are `hostctl keys status|policy|rotate|prune|show`.
func keyCommands() []*Command {
	return []*Command{
		{Name: "keys status", Args: "[CLASS]", Summary: "show every key class's rotation policy and status (disk passphrases per instance)", Client: true, Help: keysHelp, Setup: keysStatus},
		{Name: "keys policy", Args: "CLASS --policy P [--generation N] [--keep-prior N] [--instance NAME]", Summary: "set a class's (or one instance's disk) key rotation policy", Client: true,
			Help: keysHelp + "\nThe wanted generation never decreases: a lower --generation is refused with KeyGeneration (409);\nDisabled and WithVersionUpgrade ignore it (the wanted generation is kept).", Setup: keysPolicy},
		{Name: "keys rotate", Args: "CLASS [--instance NAME] [--wait]", Summary: "rotate a class's keys once more (its policy becomes KeyGeneration, one above the highest generation of its keys)", Client: true,
			Help: keysHelp + "\nWithout --instance, disk-passphrases rotates every instance's disks (an instance's own policy becomes the new\ngeneration too); with no key to rotate the command says so and changes nothing." +
				"\nWith --wait the command follows the rotation (a progress bar on a terminal) until it is complete,\nfails, or is pending (a running instance's disks rotate when it next stops).", Setup: keysRotate},
		{Name: "keys prune", Args: "proxy|cephx [--keep N]", Summary: "drop prior keys beyond --keep: proxy secrets once every proxy has the current one; cephx generations no mount uses", Client: true, Setup: keysPrune},
		{Name: "keys show", Args: "CLASS [--reveal]", Summary: "show a class's status; --reveal prints the current proxy secret (administrators)", Client: true,
			Help: "--reveal is only for the proxy secret, which the metadata proxies must be configured with; no other key leaves the daemon.", Setup: keysShow},
	}
}

func keysStatus(fs *flag.FlagSet) func(context.Context, *Call) error {
	return func(ctx context.Context, c *Call) error {
		class, err := optionalClass(c)
		if err != nil {
			return err
		}
		rs, err := c.Client().Keys(ctx, class)
		if err != nil {
			return err
		}
		return printKeyReports(c, rs)
	}
}

func optionalClass(c *Call) (string, error) {
	switch len(c.Args) {
	case 0:
		return "", nil
	case 1:
		cl, err := keyrotation.ParseClassAlias(c.Args[0])
		if err != nil {
			return "", Usagef("%v", err)
		}
		return string(cl), nil
	}
	return "", Usagef("at most one CLASS")
}

func oneClass(c *Call) (keyrotation.Class, error) {
	name, err := c.OneName()
	if err != nil {
		return "", err
	}
	cl, err := keyrotation.ParseClassAlias(name)
	if err != nil {
		return "", Usagef("%v", err)
	}
	return cl, nil
}

func printKeyReports(c *Call, rs []types.KeyReport) error {
	if c.JSON() {
		return c.PrintJSON(orEmpty(rs))
	}
	tw := newTable(c.Stdout)
	fmt.Fprintln(tw, "CLASS\tINSTANCE\tPOLICY\tWANTED\tGENERATION\tMINTED BY\tPRIOR\tCOMPLETE\tSTATE")
	for _, r := range rs {
		wanted := "-"
		if r.Policy.KeyRotationPolicy == types.KeyPolicyKeyGeneration {
			// (The other policies ignore the wanted generation.)
			wanted = strconv.FormatInt(r.Policy.KeyGeneration, 10)
		}
		if r.NoKeys != "" {
			fmt.Fprintf(tw, "%s\t-\t%s\t%s\t-\t-\t-\t-\tno keys yet (%s)\n", r.Class, r.Policy.KeyRotationPolicy, wanted, r.NoKeys)
			continue
		}
		prior := "-"
		if r.Status.PriorKeyCount != nil {
			prior = strconv.Itoa(*r.Status.PriorKeyCount)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Class, orDash(r.InstanceName), r.Policy.KeyRotationPolicy, wanted,
			r.Status.KeyGeneration, orDash(r.Status.KeyVersion), prior, yesNo(r.Complete), keyState(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		if r.Status.KeyCephVersion != "" {
			fmt.Fprintf(c.Stdout, "%s: keys minted by Ceph %s\n", r.Class, r.Status.KeyCephVersion)
		}
		for _, h := range r.Holders {
			fmt.Fprintf(c.Stdout, "%s: instance %s still holds prior generation %d (%s) through share %s; it moves to the newest key when it stops\n",
				r.Class, orDash(h.InstanceUUID), h.Generation, h.Client, h.ShareID)
		}
	}
	fmt.Fprintln(c.Stdout, "A rotation is complete when GENERATION >= WANTED and nothing is pending; generation 0: the keys existed before rotation was tracked.")
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func keyState(r types.KeyReport) string {
	s := r.Status
	switch {
	case s.Error != "":
		return "failed: " + s.Error
	case s.Pending != "":
		return "pending: " + s.Pending
	case s.Progress != nil && s.Target > 0:
		return fmt.Sprintf("rotating to %d: %d/%d", s.Target, s.Progress.Done, s.Progress.Total)
	case s.Target > 0:
		return fmt.Sprintf("rotating to %d", s.Target)
	case !r.Complete:
		return "rotation due"
	}
	return "ok"
}

func keysPolicy(fs *flag.FlagSet) func(context.Context, *Call) error {
	policy := fs.String("policy", "", "Disabled, WithVersionUpgrade or KeyGeneration (required)")
	gen := fs.Int64("generation", 0, "the wanted key generation (KeyGeneration)")
	keep := fs.Int("keep-prior", -1, "prior keys kept valid (proxy-secret only; default 1)")
	instance := fs.String("instance", "", "one instance's disk passphrases (disk-passphrases only)")
	return func(ctx context.Context, c *Call) error {
		cl, err := oneClass(c)
		if err != nil {
			return err
		}
		if *policy == "" {
			return Usagef("--policy is required")
		}
		p := types.KeyPolicy{KeyRotationPolicy: *policy, KeyGeneration: *gen}
		if *keep >= 0 {
			p.KeepPriorKeyCount = keep
		}
		out, err := c.Client().SetKeyPolicy(ctx, string(cl), *instance, p)
		if err != nil {
			return err
		}
		if c.JSON() {
			return c.PrintJSON(out)
		}
		if out.KeyRotationPolicy == types.KeyPolicyKeyGeneration {
			fmt.Fprintf(c.Stdout, "%s: policy %s, generation %d\n", subjectName(cl, *instance), out.KeyRotationPolicy, out.KeyGeneration)
		} else {
			fmt.Fprintf(c.Stdout, "%s: policy %s\n", subjectName(cl, *instance), out.KeyRotationPolicy)
		}
		return nil
	}
}

func subjectName(cl keyrotation.Class, instance string) string {
	if instance != "" {
		return string(cl) + " of instance " + instance
	}
	return string(cl)
}

func keysRotate(fs *flag.FlagSet) func(context.Context, *Call) error {
	instance := fs.String("instance", "", "one instance's disk passphrases (disk-passphrases only)")
	wait := fs.Bool("wait", false, "follow the rotation until it is complete, failed or pending")
	return func(ctx context.Context, c *Call) error {
		cl, err := oneClass(c)
		if err != nil {
			return err
		}
		p, err := c.Client().RotateKeys(ctx, string(cl), *instance)
		if err != nil {
			return err
		}
		if p.Subjects == 0 {
			if c.JSON() {
				return c.PrintJSON(p)
			}
			fmt.Fprintf(c.Stdout, "%s: nothing to rotate: %s\n", subjectName(cl, *instance), nothingToRotate(cl, *instance))
			return nil
		}
		if !*wait {
			if c.JSON() {
				return c.PrintJSON(p)
			}
			fmt.Fprintf(c.Stdout, "%s: rotation to generation %d requested (%s); `hostctl keys status` shows when it is complete\n",
				subjectName(cl, *instance), p.KeyGeneration, plural(p.Subjects, "subject"))
			return nil
		}
		return followRotation(ctx, c, cl, *instance, p.KeyGeneration)
	}
}

// nothingToRotate says why a rotation request found no keys to rotate.
func nothingToRotate(cl keyrotation.Class, instance string) string {
	switch {
	case instance != "":
		return "the instance has no encrypted disk with a passphrase of its own"
	case cl.PerInstance():
		return "no instance on this host has an encrypted disk with a passphrase of its own"
	}
	return "this host has no keys of this class"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// followRotation polls the status of the rotated subjects until each has
// reached gen, failed or is pending, drawing a progress bar on a
// terminal and a line per change otherwise.
func followRotation(ctx context.Context, c *Call, cl keyrotation.Class, instance string, gen int64) error {
	var bar *progressBar
	if f, ok := c.Stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !c.JSON() {
		bar = &progressBar{w: c.Stdout, name: string(cl)}
	}
	var last string
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		rs, err := c.Client().Keys(ctx, string(cl))
		if err != nil {
			return err
		}
		done, failed, pending := true, "", ""
		var p keyrotation.Progress
		for _, r := range rs {
			if r.NoKeys != "" || instance != "" && r.InstanceName != instance {
				continue
			}
			switch {
			case r.Status.Error != "":
				failed = r.Status.Error
			case r.Status.KeyGeneration >= gen && r.Status.Target == 0:
			case r.Status.Pending != "" && r.Status.Target > 0:
				pending = r.Status.Pending
			default:
				done = false
			}
			if r.Status.Progress != nil {
				p.Done += r.Status.Progress.Done
				p.Total += r.Status.Progress.Total
			}
		}
		switch line := fmt.Sprintf("%d/%d", p.Done, p.Total); {
		case p.Total == 0:
		case bar != nil:
			bar.draw(p)
		case line != last && !c.JSON():
			fmt.Fprintf(c.Stdout, "%s: %s\n", cl, line)
			last = line
		}
		if failed != "" || done {
			bar.finish()
		}
		switch {
		case failed != "":
			return fmt.Errorf("%s: rotation to generation %d failed: %s", subjectName(cl, instance), gen, failed)
		case done && pending != "" && !c.JSON():
			fmt.Fprintf(c.Stdout, "%s: pending: %s\n", subjectName(cl, instance), pending)
			return printKeyReports(c, rs)
		case done:
			return printKeyReports(c, rs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// progressBar draws one line, redrawn in place ("\r"), on a terminal. It
// is written here rather than taken from a progress-bar library: the one
// considered pulls in a module without a licence file, which the host
// package (internal/pkgbuild) refuses to ship.
type progressBar struct {
	w     io.Writer
	name  string
	drawn bool
}

const progressWidth = 40

func (b *progressBar) draw(p keyrotation.Progress) {
	filled := 0
	if p.Total > 0 {
		filled = min(progressWidth, p.Done*progressWidth/p.Total)
	}
	fmt.Fprintf(b.w, "\r%s [%s%s] %d / %d %3d%%", b.name, strings.Repeat("=", filled), strings.Repeat(" ", progressWidth-filled),
		p.Done, p.Total, p.Done*100/max(p.Total, 1))
	b.drawn = true
}

// finish ends the bar's line (a nil bar does nothing).
func (b *progressBar) finish() {
	if b != nil && b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}

func keysPrune(fs *flag.FlagSet) func(context.Context, *Call) error {
	keep := fs.Int("keep", 0, "prior secrets that stay valid")
	return func(ctx context.Context, c *Call) error {
		cl, err := oneClass(c)
		if err != nil {
			return err
		}
		st, err := c.Client().PruneKeys(ctx, string(cl), *keep)
		if err != nil {
			return err
		}
		if c.JSON() {
			return c.PrintJSON(st)
		}
		n := 0
		if st.PriorKeyCount != nil {
			n = *st.PriorKeyCount
		}
		fmt.Fprintf(c.Stdout, "%s: %d prior key(s) still valid\n", cl, n)
		return nil
	}
}

func keysShow(fs *flag.FlagSet) func(context.Context, *Call) error {
	reveal := fs.Bool("reveal", false, "print the current proxy secret (administrators; proxy-secret only)")
	return func(ctx context.Context, c *Call) error {
		cl, err := oneClass(c)
		if err != nil {
			return err
		}
		if !*reveal {
			rs, err := c.Client().Keys(ctx, string(cl))
			if err != nil {
				return err
			}
			return printKeyReports(c, rs)
		}
		if cl != keyrotation.Proxy {
			return Usagef("--reveal: only the proxy secret is revealed (other keys never leave the daemon)")
		}
		out, err := c.Client().RevealProxySecret(ctx)
		if err != nil {
			return err
		}
		if c.JSON() {
			return c.PrintJSON(out)
		}
		_, err = io.WriteString(c.Stdout, out.Secret+"\n")
		return err
	}
}
