// Command keyrotate runs one metadata key procedure of package
// metadatakeys for its crash test (built with -tags vmetacrash, so that
// VMETA_CRASH_AT kills it at a step).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/metadatakeys"
	"github.com/vmeta/vmeta/internal/store/storeurl"
)

func main() {
	var (
		proc     = flag.String("proc", "", "token-rotate, proxy-rotate, proxy-prune or token-expire")
		file     = flag.String("file", "", "key file")
		storeURL = flag.String("store", "", "store to announce on")
		gen      = flag.Int64("gen", 0, "generation to rotate to")
		keep     = flag.Int("keep", 1, "prior keys to keep")
		later    = flag.Duration("later", 0, "run as if this much later (token-expire)")
	)
	flag.Parse()
	if err := run(*proc, *file, *storeURL, *gen, *keep, *later); err != nil {
		fmt.Fprintln(os.Stderr, "keyrotate:", err)
		os.Exit(1)
	}
}

func run(proc, file, storeURL string, gen int64, keep int, later time.Duration) error {
	ctx := context.Background()
	st, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	o := metadatakeys.Options{Path: file, Notifier: st, Readers: st, Delay: time.Millisecond,
		Now: func() time.Time { return time.Now().Add(later) },
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	switch proc {
	case metadatakeys.ProcTokenRotate:
		_, err = metadatakeys.NewToken(o).Rotate(ctx, keyrotation.Subject{Class: keyrotation.Token}, gen, 0, nil)
	case metadatakeys.ProcProxyRotate:
		_, err = metadatakeys.NewProxy(o).Rotate(ctx, keyrotation.Subject{Class: keyrotation.Proxy}, gen, keep, nil)
	case metadatakeys.ProcProxyPrune:
		_, err = metadatakeys.NewProxy(o).Prune(ctx, keep)
	case metadatakeys.ProcTokenExpire:
		_, err = metadatakeys.NewToken(o).Expire(ctx)
	default:
		err = fmt.Errorf("-proc %q: unknown", proc)
	}
	return err
}
